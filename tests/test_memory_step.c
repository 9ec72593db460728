/* test_memory_step.c — a step that needs fewer bytes computes the same step .
 * 1. The planner (src/model/memory_plan.h): on random buffers, no two that live at the same stage
 *    share a byte, fixed buffers stay where asked, the arena is at least the bytes alive at once.
 * 2. Recompute (attention, block) and optimizer-in-backward, each and together, in fp32, bf16 and
 *    fp16 (optimizer-in-backward: not fp16, which it refuses), with naive and flash attention: three
 *    training steps give the plain step's losses, gradients and weights bit for bit on the CPU
 *    (on CUDA within TOL_GRADS and TOL_WEIGHTS, where flash's dQ atomics may change last bits).
 * 3. Lifetimes, from the tracked allocator's events: no gradient is in use during a forward pass;
 *    the padding of the flat gradient buffer is zero after backward although the arena's bytes held
 *    activations; with optimizer-in-backward the whole gradient buffer never exists (its peak is one
 *    group); recompute lowers the activations' peak (attention: by the probabilities of all blocks
 *    but one; block: to the inputs of the blocks plus one shared set); a forward-only pass allocates
 *    no gradient and no backward buffer, keeps at most two blocks' inputs at once, gives the training
 *    forward's loss and logits bit for bit, and refuses backward; the peak of a step is below what
 *    keeping every buffer for the whole step would take.
 * 4. On a device with its own count (CUDA): what the device says is in use after a step is within
 *    0.5 GiB of tlm's footprint (allocations plus arenas). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/activations.h"
#include "model/memory_plan.h"
#include "test_check.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/util.h"

/* normwise relative error allowed between variants: 0 = bit for bit (the CPU). On CUDA flash
 * attention's dQ atomics may change the last bits of a gradient from run to run (model_flash_checks.h:
 * 1e-5), and three AdamW steps can turn such a difference in a gradient near 0 into up to lr in a
 * weight: 1e-3 for the weights. */
#define ON_CUDA (strcmp(TLM_TEST_DEVICE, "cuda") == 0)
#define TOL_GRADS (ON_CUDA ? 1e-5 : 0.0)
#define TOL_WEIGHTS (ON_CUDA ? 1e-3 : 0.0)

static tlm_backend *be;
static tlm_config cfg;
enum { B = 2, T = 12, STEPS = 3 };
static int32_t inputs[STEPS][B * T], targets[STEPS][B * T];

/* ---- 1. the planner --------------------------------------------------------------------------------- */

static void test_planner(void) {
    enum { N = 300 };
    uint64_t rng = 17;
    int bad = 0, misplaced = 0, unaligned = 0, trials = 20;
    size_t worst_ratio_num = 0, worst_ratio_den = 1;
    for (int trial = 0; trial < trials; trial++) {
        tlm_plan_buffer b[N];
        size_t fixed_end = 0;
        for (int i = 0; i < N; i++) {
            b[i].bytes = 1 + (size_t)tlm_rng_below(&rng, 1 << (4 + tlm_rng_below(&rng, 16)));
            b[i].first = (int)tlm_rng_below(&rng, 60);
            b[i].last = b[i].first + (int)tlm_rng_below(&rng, 20);
            b[i].fixed = -1;
            if (i < 10) { /* a flat span of fixed buffers, as the gradient groups */
                b[i].fixed = (int64_t)fixed_end;
                fixed_end += (b[i].bytes + TLM_PLAN_ALIGN - 1) / TLM_PLAN_ALIGN * TLM_PLAN_ALIGN;
            }
        }
        size_t arena = 0;
        die_on(tlm_memory_plan(b, N, &arena), "plan");
        const size_t bound = tlm_memory_plan_lower_bound(b, N);
        for (int i = 0; i < N; i++) {
            misplaced += b[i].fixed >= 0 && b[i].offset != (size_t)b[i].fixed;
            unaligned += b[i].offset % TLM_PLAN_ALIGN != 0 || b[i].offset + b[i].bytes > arena;
            for (int j = 0; j < i; j++) {
                const bool together = b[i].first <= b[j].last && b[j].first <= b[i].last;
                const bool overlap = b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes;
                bad += together && overlap;
            }
        }
        if (arena < bound) bad++;
        if (arena * worst_ratio_den > worst_ratio_num * bound) worst_ratio_num = arena, worst_ratio_den = bound;
    }
    check(bad == 0 && misplaced == 0 && unaligned == 0,
          "planner: %d random plans of %d buffers: no two living at once share a byte (%d), fixed ones where asked "
          "(%d), aligned and inside the arena (%d), arena >= the bytes alive at once", trials, N, bad, misplaced,
          unaligned);
    printf("       worst arena / bytes alive at once: %.3f\n", (double)worst_ratio_num / (double)worst_ratio_den);
    tlm_plan_buffer clash[2] = {{1024, 0, 5, 0, 0}, {1024, 3, 8, 512, 0}};
    size_t arena;
    check_status(tlm_memory_plan(clash, 2, &arena), TLM_ERR_INVALID_ARGUMENT, "overlap",
                 "planner: two fixed buffers that live together and overlap");
}

/* ---- 2. and 3. the step ------------------------------------------------------------------------------ */

/* what a listener saw over a run */
typedef struct {
    size_t cur[TLM_MEM_NUM_TAGS];
    int grads_in_forward;      /* events in the forward phase with gradient bytes in use */
    int grad_allocs, backward_allocs;
    int max_x_live, x_live;    /* "layers.N.x" buffers alive at once */
} mem_watch;

static void watch(void *user, const tlm_mem_event *e) {
    mem_watch *w = user;
    const bool alloc = e->action == TLM_MEM_ALLOC;
    if (alloc) w->cur[e->tag] += e->bytes;
    else w->cur[e->tag] -= e->bytes;
    if (e->scope.phase == TLM_PHASE_FORWARD && w->cur[TLM_MEM_GRADIENTS]) w->grads_in_forward++;
    if (alloc && e->tag == TLM_MEM_GRADIENTS) w->grad_allocs++;
    if (alloc && strncmp(e->name, "backward.", 9) == 0) w->backward_allocs++;
    int layer;
    char rest[8];
    if (sscanf(e->name, "layers.%d.%7s", &layer, rest) == 2 && strcmp(rest, "x") == 0) {
        w->x_live += alloc ? 1 : -1;
        if (w->x_live > w->max_x_live) w->max_x_live = w->x_live;
    }
}

typedef struct {
    float loss[STEPS];
    float *grads;      /* flat gradients of step 0 (NULL with optimizer-in-backward) */
    float *params;     /* after the last step */
    float *logits;     /* of step 0 */
    tlm_mem_stats stats; /* over the run (peaks from a reset before the model) */
    mem_watch w;
    size_t keep_all;   /* the step's buffers' bytes, each counted once */
    bool padding_zero; /* the flat gradients' padding was zero after each backward */
    size_t flat_bytes, largest_group;
} run_out;

static void run_free(run_out *r) {
    free(r->grads);
    free(r->params);
    free(r->logits);
}

/* whether the padding of the flat gradient buffer (between the tensors) is zero */
static bool padding_zero(const tlm_model *m) {
    float *g = malloc(m->layout.flat_numel * sizeof(float));
    tlm_copy_to_host(be, g, m->grads, m->layout.flat_numel * sizeof(float));
    char *covered = calloc(m->layout.flat_numel, 1);
    for (int t = 0; t < m->layout.num_tensors; t++)
        memset(covered + m->layout.tensors[t].offset, 1, m->layout.tensors[t].numel);
    bool zero = true;
    for (size_t i = 0; i < m->layout.flat_numel; i++) zero &= covered[i] || g[i] == 0.0f;
    free(g);
    free(covered);
    return zero;
}

/* upd: how the AdamW step runs: 0 after the backward, 1 (true) in it (optimizer_in_backward), 2 beside it
 * (optimizer_overlap) */
static run_out run(const tlm_config *c, tlm_precision p, tlm_attention a, tlm_recompute rc, int upd, bool fwd_only,
                   int steps) {
    run_out r = {.padding_zero = true};
    const tlm_run_config run = {.precision = p, .attention = a, .recompute = rc, .optimizer_in_backward = upd == 1,
                                .optimizer_overlap = upd == 2, .forward_only = fwd_only, .cuda_graphs = false};
    const tlm_mem_listener l = {&r.w, watch};
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) r.w.cur[t] = tlm_mem_stats_now(be).current[t];
    die_on(tlm_mem_listener_add(be, &l), "listener");
    tlm_mem_reset_peak(be);
    tlm_model *m;
    die_on(tlm_model_create(&m, c, &run, be), "model");
    die_on(tlm_model_init_random(m, 21), "init");
    const tlm_adamw_config opt = tlm_adamw_defaults();
    const size_t nl = (size_t)B * T * c->vocab_size;
    r.logits = malloc(nl * sizeof(float));
    r.flat_bytes = m->layout.flat_numel * sizeof(float);
    for (int i = 0; i < m->layout.num_groups; i++)
        if (m->layout.groups[i].numel * sizeof(float) > r.largest_group)
            r.largest_group = m->layout.groups[i].numel * sizeof(float);
    for (int s = 0; s < steps; s++) {
        tlm_step_begin(be, s, false);
        die_on(tlm_model_forward(m, inputs[s], targets[s], B, T, &r.loss[s]), "forward");
        if (s == 0) die_on(tlm_model_copy_logits(m, r.logits), "logits");
        if (!fwd_only) {
            die_on(tlm_model_backward(m), "backward");
            if (m->grads) r.padding_zero &= padding_zero(m);
            if (s == 0 && m->grads) {
                r.grads = malloc(r.flat_bytes);
                tlm_copy_to_host(be, r.grads, m->grads, r.flat_bytes);
            }
            die_on(tlm_model_adamw_step(m, &opt), "adamw");
        }
        tlm_step_end(be);
    }
    r.params = malloc(r.flat_bytes);
    tlm_copy_to_host(be, r.params, m->params, r.flat_bytes);
    r.keep_all = tlm_activations_bytes(m->acts, TLM_MEM_ACTIVATIONS) + tlm_activations_bytes(m->acts, TLM_MEM_GRADIENTS) +
                 tlm_activations_bytes(m->acts, TLM_MEM_WORKSPACE);
    r.stats = tlm_mem_stats_now(be);
    tlm_model_free(m);
    tlm_mem_listener_remove(be, &l);
    return r;
}

/* normwise relative distance of two float arrays (0 when bit for bit) */
static double dist(const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return 0;
    return tlm_rel_error_f32(a, b, n);
}

static void test_same_step(void) {
    const tlm_precision modes[3] = {TLM_PRECISION_FP32, TLM_PRECISION_BF16, TLM_PRECISION_FP16};
    const tlm_attention atts[2] = {TLM_ATTENTION_NAIVE, TLM_ATTENTION_FLASH};
    const struct {
        tlm_recompute rc;
        int upd; /* run()'s */
        const char *name;
    } variants[] = {{TLM_RECOMPUTE_ATTENTION, 0, "recompute attention"},
                    {TLM_RECOMPUTE_BLOCK, 0, "recompute block"},
                    {TLM_RECOMPUTE_NONE, 1, "optimizer-in-backward"},
                    {TLM_RECOMPUTE_BLOCK, 1, "recompute block + optimizer-in-backward"},
                    {TLM_RECOMPUTE_NONE, 2, "overlapped optimizer"},
                    {TLM_RECOMPUTE_BLOCK, 2, "recompute block + overlapped optimizer"}};
    for (int pi = 0; pi < 3; pi++)
        for (int ai = 0; ai < 2; ai++) {
            const char *mode = tlm_precision_name(modes[pi]), *att = tlm_attention_name(atts[ai]);
            run_out plain = run(&cfg, modes[pi], atts[ai], TLM_RECOMPUTE_NONE, false, false, STEPS);
            check(plain.padding_zero, "%s %s: the flat gradients' padding is zero after every backward", mode, att);
            for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
                if (variants[v].upd && modes[pi] == TLM_PRECISION_FP16) continue; /* refused: below */
                run_out r = run(&cfg, modes[pi], atts[ai], variants[v].rc, variants[v].upd, false, STEPS);
                const size_t n = plain.flat_bytes / sizeof(float);
                const double dl = dist(r.loss, plain.loss, STEPS), dp = dist(r.params, plain.params, n);
                const double dg = r.grads ? dist(r.grads, plain.grads, n) : 0;
                char what[200];
                snprintf(what, sizeof what, "%s %s, %s: %d steps' losses and gradients = the plain step's", mode, att,
                         variants[v].name, STEPS);
                check_limit(fmax(dl, dg) <= TOL_GRADS, what, fmax(dl, dg), TOL_GRADS);
                snprintf(what, sizeof what, "%s %s, %s: the weights after %d steps = the plain step's", mode, att,
                         variants[v].name, STEPS);
                check_limit(dp <= TOL_WEIGHTS, what, dp, TOL_WEIGHTS);
                run_free(&r);
            }
            run_free(&plain);
        }
    tlm_run_config bad = tlm_run_defaults();
    bad.precision = TLM_PRECISION_FP16;
    bad.optimizer_in_backward = true;
    tlm_model *m = NULL;
    check_status(tlm_model_create(&m, &cfg, &bad, be), TLM_ERR_UNSUPPORTED, "fp16",
                 "optimizer-in-backward in fp16 (the overflow check needs every gradient first)");
    bad.optimizer_in_backward = false;
    bad.optimizer_overlap = true;
    check_status(tlm_model_create(&m, &cfg, &bad, be), TLM_ERR_UNSUPPORTED, "fp16",
                 "the overlapped optimizer in fp16 (the overflow check needs every gradient first)");
    bad.precision = TLM_PRECISION_BF16;
    bad.optimizer_in_backward = true;
    check_status(tlm_model_create(&m, &cfg, &bad, be), TLM_ERR_INVALID_ARGUMENT, "choose one",
                 "optimizer-in-backward and the overlapped optimizer together");
    bad = tlm_run_defaults();
    bad.recompute = (tlm_recompute)7;
    check_status(tlm_model_create(&m, &cfg, &bad, be), TLM_ERR_INVALID_ARGUMENT, "recompute", "an unknown recompute mode");
    tlm_recompute rc;
    check(tlm_recompute_parse("block", &rc) && rc == TLM_RECOMPUTE_BLOCK && !tlm_recompute_parse("blocks", &rc) &&
              strcmp(tlm_recompute_name(TLM_RECOMPUTE_ATTENTION), "attention") == 0,
          "recompute names: none, attention, block parse; others do not");
}

/* a model with more blocks and with padding in its flat layout (d_model 48: each norm weight is
 * padded to 64 floats) */
static tlm_config deep_config(void) {
    tlm_config c = cfg;
    c.d_model = 48;
    c.num_heads = 4;
    c.num_layers = 6;
    return c;
}

static void test_lifetimes(void) {
    const tlm_config deep = deep_config();
    const tlm_precision p = TLM_PRECISION_FP32;
    const tlm_attention na = TLM_ATTENTION_NAIVE;
    run_out plain = run(&deep, p, na, TLM_RECOMPUTE_NONE, false, false, 2);
    const size_t G = TLM_MEM_GRADIENTS, A = TLM_MEM_ACTIVATIONS;
    check(plain.padding_zero, "d_model 48: the flat gradients' padding is zero after every backward (the arena held "
          "activations there)");
    check(plain.w.grads_in_forward == 0 && plain.w.grad_allocs == 2 * (deep.num_layers + 2),
          "no gradient in use during a forward pass (%d events); each group allocated when the backward writes it "
          "(%d)", plain.w.grads_in_forward, plain.w.grad_allocs);
    check(plain.stats.peak[G] == plain.flat_bytes, "the flat gradient buffer exists at the optimizer step: peak %zu "
          "bytes = %zu", plain.stats.peak[G], plain.flat_bytes);
    const size_t params = plain.flat_bytes; /* fp32 master weights; the moments: 2x */
    const size_t wksp = plain.stats.peak[TLM_MEM_WORKSPACE]; /* the backend's own (cuBLASLt's 32 MiB on CUDA) */
    check(plain.stats.peak_total < params * 3 + plain.keep_all + wksp,
          "the step's peak %zu bytes < keeping every buffer for the whole step %zu (parameters, moments, "
          "activations, gradients, the workspace)", plain.stats.peak_total, params * 3 + plain.keep_all + wksp);
    check(plain.stats.peak_footprint >= plain.stats.peak_total &&
              plain.stats.peak_footprint - plain.stats.peak_total < plain.stats.peak_total / 50,
          "footprint (allocations + arena) %zu within 2%% above the allocations' peak %zu: the plan packs tightly",
          plain.stats.peak_footprint, plain.stats.peak_total);

    run_out oib = run(&deep, p, na, TLM_RECOMPUTE_NONE, true, false, 2);
    check(oib.stats.peak[G] == oib.largest_group && oib.stats.peak[G] < plain.flat_bytes / 2,
          "optimizer-in-backward: gradients peak at one group, %zu bytes (the largest group %zu; the flat buffer %zu)",
          oib.stats.peak[G], oib.largest_group, plain.flat_bytes);
    check(oib.stats.peak_total < plain.stats.peak_total,
          "optimizer-in-backward: the step's peak %zu < the plain step's %zu", oib.stats.peak_total,
          plain.stats.peak_total);

    run_out rca = run(&deep, p, na, TLM_RECOMPUTE_ATTENTION, false, false, 2);
    const size_t probs = (size_t)B * deep.num_heads * T * T * sizeof(float);
    check(plain.stats.peak[A] - rca.stats.peak[A] == (size_t)(deep.num_layers - 1) * probs,
          "recompute attention: the activations' peak falls by the probabilities of %d blocks (%zu bytes)",
          deep.num_layers - 1, (size_t)(deep.num_layers - 1) * probs);
    run_out rcb = run(&deep, p, na, TLM_RECOMPUTE_BLOCK, false, false, 2);
    check(rcb.stats.peak[A] < rca.stats.peak[A] / 2,
          "recompute block: the activations' peak %zu < half of recompute attention's %zu", rcb.stats.peak[A],
          rca.stats.peak[A]);

    run_out fwd = run(&deep, p, na, TLM_RECOMPUTE_NONE, false, true, 2);
    check(fwd.w.grad_allocs == 0 && fwd.w.backward_allocs == 0 && fwd.stats.peak[G] == 0,
          "forward-only: no gradient and no backward buffer allocated");
    check(fwd.w.max_x_live <= 2 && plain.w.max_x_live == deep.num_layers,
          "forward-only: at most %d blocks' inputs alive at once (training keeps all %d)", fwd.w.max_x_live,
          plain.w.max_x_live);
    check(fwd.loss[0] == plain.loss[0] && memcmp(fwd.logits, plain.logits, (size_t)B * T * deep.vocab_size * 4) == 0,
          "forward-only: the training forward's loss %.7f and logits, bit for bit", fwd.loss[0]);
    check(fwd.stats.peak[A] * 3 < plain.stats.peak[A], "forward-only: activations peak %zu < a third of training's %zu",
          fwd.stats.peak[A], plain.stats.peak[A]);

    tlm_run_config ro = tlm_run_defaults();
    ro.forward_only = true;
    tlm_model *m;
    die_on(tlm_model_create(&m, &deep, &ro, be), "model");
    die_on(tlm_model_init_random(m, 1), "init");
    die_on(tlm_model_forward(m, inputs[0], targets[0], B, T, NULL), "forward");
    check_status(tlm_model_backward(m), TLM_ERR_INVALID_ARGUMENT, "forward-only", "backward on a forward-only model");
    m->run.forward_only = false; /* the next forward plans a training step */
    die_on(tlm_model_forward(m, inputs[0], targets[0], B, T, NULL), "forward");
    check_status(tlm_model_backward(m), TLM_OK, NULL, "the same model, forward_only turned off: backward runs");
    die_on(tlm_model_forward(m, inputs[1], targets[1], B, T, NULL), "forward");
    const tlm_adamw_config opt = tlm_adamw_defaults();
    check_status(tlm_model_adamw_step(m, &opt), TLM_ERR_INVALID_ARGUMENT, "backward",
                 "a forward ends the last gradients: AdamW without a backward since");
    check(tlm_model_group_grads(m, 0) != NULL && m->grads == NULL, "after a forward: m->grads NULL, group views set");
    tlm_model_free(m);

    tlm_memory_estimate e;
    tlm_run_config rt = tlm_run_defaults();
    rt.attention = TLM_ATTENTION_NAIVE;
    die_on(tlm_model_memory_estimate(be, &deep, &rt, B, T, &e), "estimate");
    check(e.total == e.parameters + e.optimizer + e.arena + e.workspace && e.arena >= e.arena_live &&
              e.parameters == plain.flat_bytes && e.optimizer == 2 * plain.flat_bytes &&
              e.arena + e.parameters + e.optimizer <= plain.stats.peak_footprint &&
              plain.stats.peak_footprint - (e.arena + e.parameters + e.optimizer) <=
                  (e.workspace > plain.stats.peak[TLM_MEM_WORKSPACE] ? e.workspace : plain.stats.peak[TLM_MEM_WORKSPACE]) +
                      (1 << 20),
          "memory estimate: %zu bytes (arena %zu) = the run's footprint peak %zu less the workspace", e.total, e.arena,
          plain.stats.peak_footprint);
    run_free(&plain);
    run_free(&oib);
    run_free(&rca);
    run_free(&rcb);
    run_free(&fwd);
}

/* ---- 4. the device's own count ---------------------------------------------------------------------------- */

static void test_device_count(void) {
    tlm_backend_release_cached(be);
    const size_t used0 = tlm_device_memory_used(be), fp0 = tlm_mem_stats_now(be).footprint;
    if (!used0) {
        printf("skip the device's own count: the %s backend has none\n", be->name);
        return;
    }
    tlm_config big = cfg;
    big.d_model = 512;
    big.num_heads = 8;
    big.d_ff = 2048;
    big.num_layers = 8;
    big.vocab_size = 8192;
    big.context_length = 512;
    tlm_run_config r = tlm_run_defaults();
    tlm_model *m;
    die_on(tlm_model_create(&m, &big, &r, be), "model");
    die_on(tlm_model_init_random(m, 1), "init");
    int32_t *x = calloc(8 * 512, sizeof *x);
    const tlm_adamw_config opt = tlm_adamw_defaults();
    die_on(tlm_model_forward(m, x, x, 8, 512, NULL), "forward");
    die_on(tlm_model_backward(m), "backward");
    die_on(tlm_model_adamw_step(m, &opt), "adamw");
    tlm_synchronize(be);
    const double dev = (double)tlm_device_memory_used(be) - (double)used0;
    const double tracked = (double)tlm_mem_stats_now(be).footprint - (double)fp0;
    const double gib = 1073741824.0;
    check(fabs(dev - tracked) < 0.5 * gib, "the device's count %.3f GiB within 0.5 GiB of tlm's footprint %.3f GiB",
          dev / gib, tracked / gib);
    free(x);
    tlm_model_free(m);
}

int main(void) {
    be = test_backend();
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    uint64_t rng = 5;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < B * T; i++) {
            inputs[s][i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);
            targets[s][i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);
        }
    test_planner();
    test_same_step();
    test_lifetimes();
    test_device_count();
    return test_finish_backend(be);
}
