/* test_engine.c — the engine's seams on the CPU backend: what profilers, the memory
 * timeline and data parallelism plug into.
 * 1. The dispatch: a hook sees every op of a training step of the tiny model, in order
 *    (op_seq), with its phase and layer; the op counts per pass follow the model (one embedding,
 *    nine ops per block, ...); the FLOPs the list declares add up to the model's GEMM and
 *    attention FLOPs exactly; ranges nest (step > phase > layer); a removed hook sees nothing.
 * 2. The tracked allocator and its listener: every allocation of a step and of the model's life
 *    is reported with its phase, the stream of events balances (bytes in use = running sum,
 *    everything freed at the end, the peak = the allocator's), activations are allocated in the
 *    forward phase, gradients in the backward, AdamW moments in the optimizer; a random stress
 *    of allocations and frees keeps the counters exact (O(1) free by pointer).
 * 3. Gradients ready: the backward announces the head, each layer from the last, then the
 *    embedding; the groups tile the flat buffer; each group's gradients, copied when announced,
 *    equal the final ones bit for bit (the group was complete).
 * 4. The mean loss is reduced on the backend: it equals the mean of the per-position losses in
 *    float64; with a communicator the loss and the fp16 overflow count are summed across ranks
 *    (a fake communicator of two identical ranks: the same loss; a failing one: its error).
 * 5. Events, streams and the graph service on a backend without graphs; device support. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/activations.h"
#include "test_check.h"
#include "tlm/model.h"
#include "tlm/rng.h"

static tlm_backend *be;
static tlm_config cfg;

enum { B = 2, T = 12 };
static int32_t inputs[B * T], targets[B * T];

static tlm_model *tiny(tlm_precision p, tlm_attention a) {
    const tlm_run_config run = {.precision = p, .attention = a, .cuda_graphs = true};
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    die_on(tlm_model_init_random(m, 5), "init");
    return m;
}

/* ---- 1. the dispatch ------------------------------------------------------------------------------ */

#define MAX_EVENTS 4096
typedef struct {
    int n_ops, n_ranges, depth, bad_nesting, bad_seq;
    tlm_op_event ops[MAX_EVENTS];
    tlm_range_kind stack[16];
    int range_begins[4];
    uint64_t next_seq;
} recorder;

static void rec_op_begin(void *user, const tlm_op_event *e) {
    recorder *r = user;
    if (r->n_ops && e->scope.op_seq != r->next_seq) r->bad_seq++;
    r->next_seq = e->scope.op_seq + 1;
    if (r->n_ops < MAX_EVENTS) r->ops[r->n_ops] = *e;
    r->n_ops++;
}

static void rec_range_begin(void *user, const tlm_range_event *e) {
    recorder *r = user;
    /* a range opens inside one of a coarser kind (a stage may sit in a layer or a phase) */
    if (r->depth > 0 && r->stack[r->depth - 1] >= e->kind) r->bad_nesting++;
    r->stack[r->depth++] = e->kind;
    r->range_begins[e->kind]++;
    r->n_ranges++;
}

static void rec_range_end(void *user, const tlm_range_event *e) {
    recorder *r = user;
    if (r->depth == 0 || r->stack[r->depth - 1] != e->kind) r->bad_nesting++;
    else r->depth--;
}

/* ops of one class (or any, cls < 0) in phase p (or any, p < 0) */
static int count_ops(const recorder *r, int cls, int p, double *flops) {
    int n = 0;
    if (flops) *flops = 0;
    for (int i = 0; i < r->n_ops && i < MAX_EVENTS; i++) {
        const tlm_op_event *e = &r->ops[i];
        if ((cls >= 0 && tlm_op_class_of(e->op) != (tlm_op_class)cls) || (p >= 0 && e->scope.phase != (tlm_phase)p))
            continue;
        n++;
        if (flops) *flops += e->flops;
    }
    return n;
}

static void test_dispatch(tlm_attention att) {
    const char *an = tlm_attention_name(att);
    recorder *r = calloc(1, sizeof *r);
    const tlm_hook hook = {r, rec_op_begin, NULL, rec_range_begin, rec_range_end};
    die_on(tlm_hook_add(be, &hook), "hook");
    tlm_model *m = tiny(TLM_PRECISION_FP32, att);
    const int L = cfg.num_layers, C = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size, H = cfg.num_heads;
    const double N = B * T, D = C / H;
    const tlm_adamw_config opt = tlm_adamw_defaults();
    tlm_step_begin(be, 0, false);
    die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
    die_on(tlm_model_backward(m), "backward");
    die_on(tlm_model_adamw_step(m, &opt), "adamw");
    tlm_step_end(be);
    tlm_hook_remove(be, &hook);

    const int fwd = count_ops(r, -1, TLM_PHASE_FORWARD, NULL), bwd = count_ops(r, -1, TLM_PHASE_BACKWARD, NULL);
    const int upd = count_ops(r, -1, TLM_PHASE_OPTIMIZER, NULL);
    check(fwd == 1 + 9 * L + 4, "%s: forward dispatches %d ops (embedding, 9 per block, final norm, lm_head, "
          "cross-entropy, mean: %d)", an, fwd, 1 + 9 * L + 4);
    check(bwd == 3 + 9 * L + 1, "%s: backward dispatches %d ops (%d: 9 per block in fp32)", an, bwd, 3 + 9 * L + 1);
    check(upd == 1 && r->n_ops == fwd + bwd + upd, "%s: one adamw_step in the optimizer phase; no op outside a phase",
          an);
    check(r->bad_seq == 0 && r->ops[0].scope.op_seq + 1 == r->ops[1].scope.op_seq,
          "%s: op events numbered in order by op_seq", an);
    int layer_ok = 1, step_ok = 1;
    for (int i = 0; i < r->n_ops && i < MAX_EVENTS; i++) {
        const tlm_op_event *e = &r->ops[i];
        step_ok &= e->scope.step == 0 && !e->scope.warmup;
        const bool in_block = e->op == TLM_OP_ROPE_FORWARD || e->op == TLM_OP_ROPE_BACKWARD ||
                              e->op == TLM_OP_SWIGLU_FORWARD || e->op == TLM_OP_MATMUL_SWIGLU_BACKWARD;
        if (in_block) layer_ok &= e->scope.layer >= 0 && e->scope.layer < L;
        if (e->op == TLM_OP_EMBEDDING_FORWARD || e->op == TLM_OP_CROSS_ENTROPY_FORWARD ||
            e->op == TLM_OP_ADAMW_STEP)
            layer_ok &= e->scope.layer == -1;
    }
    check(layer_ok && step_ok, "%s: block ops carry their layer, the others layer -1; every op carries step 0", an);
    /* FLOPs: the GEMMs of the forward are the model's (2 per multiply-add of every projection and
     * lm_head) plus the two residual adds folded into output_proj and w2 */
    double gemm, attn;
    count_ops(r, TLM_OP_CLASS_GEMM, TLM_PHASE_FORWARD, &gemm);
    count_ops(r, TLM_OP_CLASS_ATTENTION, TLM_PHASE_FORWARD, &attn);
    const double want_gemm = 2 * N * (L * (4.0 * C * C + 3.0 * C * F) + (double)V * C) + L * 2 * N * C;
    const double want_attn = att == TLM_ATTENTION_FLASH ? L * 2.0 * B * H * T * T * D
                                                        : L * (4.0 * B * H * T * T * D + 5.0 * B * H * T * T);
    check(gemm == want_gemm && attn == want_attn,
          "%s: forward FLOPs from the op list: GEMM %.0f (want %.0f), attention %.0f (want %.0f)", an, gemm, want_gemm,
          attn, want_attn);
    check(r->bad_nesting == 0 && r->depth == 0 && r->range_begins[TLM_RANGE_STEP] == 1 &&
              r->range_begins[TLM_RANGE_PHASE] == 3 && r->range_begins[TLM_RANGE_LAYER] == 2 * L,
          "%s: ranges nest (1 step > 3 phases > %d layers), all closed (%d nesting errors)", an, 2 * L,
          r->bad_nesting);
    const int before = r->n_ops;
    die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
    check(r->n_ops == before, "%s: a removed hook sees nothing", an);
    tlm_model_free(m);
    free(r);
}

/* ---- 2. the allocator and its listener -------------------------------------------------------------- */

typedef struct {
    int n, negative, bad_in_use, unmatched;
    size_t in_use, max_in_use;
    int allocs_in_phase[TLM_PHASE_COUNT][TLM_MEM_NUM_TAGS];
    const void *live[256];
    size_t live_bytes[256];
    int n_live;
} mem_log;

static void mem_event(void *user, const tlm_mem_event *e) {
    mem_log *l = user;
    l->n++;
    if (e->action == TLM_MEM_ALLOC) {
        l->in_use += e->bytes;
        l->allocs_in_phase[e->scope.phase][e->tag]++;
        if (l->n_live < 256) {
            l->live[l->n_live] = e->ptr;
            l->live_bytes[l->n_live++] = e->bytes;
        }
    } else {
        if (e->bytes > l->in_use) l->negative++;
        else l->in_use -= e->bytes;
        int found = -1;
        for (int i = 0; i < l->n_live; i++)
            if (l->live[i] == e->ptr && l->live_bytes[i] == e->bytes) found = i;
        if (found < 0) l->unmatched++;
        else l->live[found] = l->live[--l->n_live], l->live_bytes[found] = l->live_bytes[l->n_live];
    }
    if (l->in_use > l->max_in_use) l->max_in_use = l->in_use;
    if (e->in_use != l->in_use) l->bad_in_use++;
}

static void test_memory_events(void) {
    mem_log *l = calloc(1, sizeof *l);
    const size_t base = tlm_mem_stats_now(be).current_total; /* the CPU ops' scratch, if it exists */
    l->in_use = l->max_in_use = base;
    const tlm_mem_listener listener = {l, mem_event};
    die_on(tlm_mem_listener_add(be, &listener), "listener");
    tlm_mem_reset_peak(be);
    tlm_model *m = tiny(TLM_PRECISION_BF16, TLM_ATTENTION_NAIVE);
    const tlm_adamw_config opt = tlm_adamw_defaults();
    for (int i = 0; i < 2; i++) {
        die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
        die_on(tlm_model_backward(m), "backward");
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    const size_t peak = tlm_mem_stats_now(be).peak_total;
    tlm_model_free(m);
    tlm_mem_listener_remove(be, &listener);
    const int (*ph)[TLM_MEM_NUM_TAGS] = l->allocs_in_phase;
    check(l->n > 0 && l->bad_in_use == 0 && l->negative == 0,
          "memory events: %d events, each one's bytes in use = the running sum, never below 0", l->n);
    check(l->unmatched == 0 && l->n_live <= 1 && l->in_use == base + (l->n_live ? l->live_bytes[0] : 0),
          "memory events: every free matches an allocation; all freed at the end (but the scratch the CPU ops grew)");
    check(l->max_in_use == peak, "memory events: their highest bytes in use %zu = the allocator's peak %zu",
          l->max_in_use, peak);
    check(ph[TLM_PHASE_SETUP][TLM_MEM_PARAMETERS] == 1 && ph[TLM_PHASE_FORWARD][TLM_MEM_ACTIVATIONS] > 10 &&
              ph[TLM_PHASE_FORWARD][TLM_MEM_PARAMETERS] == cfg.num_layers + 1 &&
              ph[TLM_PHASE_OPTIMIZER][TLM_MEM_PARAMETERS] == 2 * (cfg.num_layers + 1) &&
              ph[TLM_PHASE_BACKWARD][TLM_MEM_GRADIENTS] == 2 * (cfg.num_layers + 2) &&
              ph[TLM_PHASE_OPTIMIZER][TLM_MEM_OPTIMIZER] == 2 && ph[TLM_PHASE_SETUP][TLM_MEM_ACTIVATIONS] == 0,
          "memory events: parameters at setup; activations and the bf16 weight copy (a buffer per group but the "
          "embedding's, in the arena) in the first forward, again in each update; each step's "
          "gradient groups (%d) in backward; the two AdamW moments in the optimizer phase", cfg.num_layers + 2);
    free(l);

    /* random allocations and frees: the counters stay exact, frees by pointer in any order */
    enum { SLOTS = 300 };
    void *p[SLOTS] = {0};
    size_t bytes[SLOTS] = {0}, expect = tlm_mem_stats_now(be).current_total;
    const size_t live0 = tlm_mem_stats_now(be).live_allocations;
    size_t live = live0;
    uint64_t rng = 11;
    int ok = 1;
    for (int it = 0; it < 20000; it++) {
        const int i = (int)tlm_rng_below(&rng, SLOTS);
        if (p[i]) {
            tlm_free(be, p[i]);
            p[i] = NULL;
            expect -= bytes[i];
            live--;
        } else {
            bytes[i] = (size_t)tlm_rng_below(&rng, 5000);
            p[i] = tlm_alloc(be, bytes[i], TLM_MEM_WORKSPACE, "stress");
            ok &= p[i] != NULL;
            expect += bytes[i];
            live++;
        }
        const tlm_mem_stats st = tlm_mem_stats_now(be);
        ok &= st.current_total == expect && st.live_allocations == live;
    }
    for (int i = 0; i < SLOTS; i++) tlm_free(be, p[i]);
    ok &= tlm_mem_stats_now(be).live_allocations == live0;
    check(ok, "allocator: 20000 random allocations and frees, counters exact after each");
    tlm_mem_listener l4[TLM_MAX_MEM_LISTENERS + 1];
    int added = 0;
    for (int i = 0; i <= TLM_MAX_MEM_LISTENERS; i++) {
        l4[i] = (tlm_mem_listener){&l4[i], mem_event};
        added += tlm_mem_listener_add(be, &l4[i]) == TLM_OK;
    }
    check(added == TLM_MAX_MEM_LISTENERS, "listeners: %d accepted, one more refused: %s", added, tlm_last_error());
    for (int i = 0; i < TLM_MAX_MEM_LISTENERS; i++) tlm_mem_listener_remove(be, &l4[i]);
}

/* ---- 3. gradients ready --------------------------------------------------------------------------------- */

typedef struct {
    int n;
    tlm_param_group groups[64];
    float *copies[64];
} ready_log;

static void on_ready(void *user, tlm_model *m, const tlm_param_group *g) {
    ready_log *r = user;
    if (r->n == 64) return;
    r->groups[r->n] = *g;
    r->copies[r->n] = malloc(g->numel * sizeof(float));
    tlm_copy_to_host(m->backend, r->copies[r->n], m->grads + g->offset, g->numel * sizeof(float));
    r->n++;
}

static void test_grads_ready(void) {
    tlm_model *m = tiny(TLM_PRECISION_FP32, TLM_ATTENTION_NAIVE);
    ready_log *r = calloc(1, sizeof *r);
    tlm_model_on_grads_ready(m, on_ready, r);
    die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
    die_on(tlm_model_backward(m), "backward");
    const int L = cfg.num_layers;
    int order = r->n == L + 2 && r->groups[0].layer == TLM_GROUP_HEAD && r->groups[L + 1].layer == TLM_GROUP_EMBEDDING;
    for (int i = 1; order && i <= L; i++) order &= r->groups[i].layer == L - i;
    check(order, "grads ready: %d groups announced: the head, layers %d..0, the embedding", r->n, L - 1);
    /* the groups tile [0, flat_numel): sorted by offset, each ends where the next begins */
    size_t covered = 0;
    int tiles = 1;
    for (int i = r->n - 1; i >= 0; i--) {
        tiles &= r->groups[i].offset == covered;
        covered += r->groups[i].numel;
    }
    check(tiles && covered == m->layout.flat_numel, "grads ready: the groups tile the flat buffer (%zu floats)",
          covered);
    float *final = malloc(m->layout.flat_numel * sizeof(float));
    tlm_copy_to_host(be, final, m->grads, m->layout.flat_numel * sizeof(float));
    int same = 1, tensors = 0;
    for (int i = 0; i < r->n; i++) {
        same &= memcmp(r->copies[i], final + r->groups[i].offset, r->groups[i].numel * sizeof(float)) == 0;
        tensors += r->groups[i].num_tensors;
    }
    check(same && tensors == m->layout.num_tensors,
          "grads ready: every group, copied when announced, equals the final gradients bit for bit (%d tensors)",
          tensors);
    for (int i = 0; i < r->n; i++) free(r->copies[i]);
    free(r);
    free(final);
    tlm_model_free(m);
}

/* ---- 4. the mean loss on the backend, and across ranks ------------------------------------------------ */

typedef struct {
    int calls;
    tlm_status fail;
} fake_comm;

/* two identical ranks: the sum over ranks is twice this one's value */
static tlm_status twin_all_reduce(tlm_comm *c, tlm_backend *b, float *buf, size_t count) {
    fake_comm *f = c->impl;
    f->calls++;
    if (f->fail != TLM_OK) return tlm_fail(f->fail, "rank 1 did not answer (fake)");
    float *h = malloc(count * sizeof(float));
    tlm_copy_to_host(b, h, buf, count * sizeof(float));
    for (size_t i = 0; i < count; i++) h[i] *= 2.0f;
    tlm_copy_to_backend(b, buf, h, count * sizeof(float));
    free(h);
    return TLM_OK;
}

static void test_loss_and_comm(void) {
    tlm_model *m = tiny(TLM_PRECISION_FP32, TLM_ATTENTION_NAIVE);
    float loss;
    die_on(tlm_model_forward(m, inputs, targets, B, T, &loss), "forward");
    float losses[B * T];
    tlm_copy_to_host(be, losses, m->acts->losses, sizeof losses);
    double sum = 0;
    for (int i = 0; i < B * T; i++) sum += losses[i];
    check(loss == (float)(sum / (B * T)), "the mean loss reduced on the backend %.7f = the float64 mean of the "
          "per-position losses", loss);
    fake_comm f = {0, TLM_OK};
    tlm_comm comm = {.rank = 0, .world_size = 2, .impl = &f, .all_reduce_sum_f32 = twin_all_reduce};
    tlm_model_set_comm(m, &comm);
    float loss2;
    die_on(tlm_model_forward(m, inputs, targets, B, T, &loss2), "forward with a communicator");
    check(loss2 == loss && f.calls == 1, "two identical ranks: the combined loss %.7f equals one rank's (%d all-reduce)",
          loss2, f.calls);
    f.fail = TLM_ERR_BACKEND;
    tlm_status s = tlm_model_forward(m, inputs, targets, B, T, &loss2);
    check(s == TLM_ERR_BACKEND && strstr(tlm_last_error(), "rank 1"), "a failing all-reduce ends the forward with its "
          "error: %s", tlm_last_error());
    tlm_model_free(m);

    /* fp16: the overflow count is combined too: both ranks skip the step together */
    tlm_model *h = tiny(TLM_PRECISION_FP16, TLM_ATTENTION_NAIVE);
    fake_comm g = {0, TLM_OK};
    tlm_comm comm2 = {.rank = 0, .world_size = 2, .impl = &g, .all_reduce_sum_f32 = twin_all_reduce};
    tlm_model_set_comm(h, &comm2);
    h->scaler.scale = 1e30f; /* overflows fp16 in dlogits */
    const tlm_adamw_config opt = tlm_adamw_defaults();
    die_on(tlm_model_forward(h, inputs, targets, B, T, NULL), "forward");
    die_on(tlm_model_backward(h), "backward");
    die_on(tlm_model_adamw_step(h, &opt), "adamw");
    float found = 0;
    tlm_copy_to_host(be, &found, &h->step_scalars[1], sizeof found);
    check(g.calls == 2 && h->scaler.last_step_skipped && h->optimizer.t == 0 && found > 0 && fmodf(found, 2.0f) == 0,
          "fp16 with two ranks: the overflow count (%g) is summed across ranks and the step skipped", found);
    tlm_model_free(h);
}

/* ---- 5. events, streams, graphs, device support ----------------------------------------------------------- */

static int graph_runs;
static void count_run(void *ctx, uint32_t key) { graph_runs++; }

static void test_backend_services(void) {
    tlm_event *e0, *e1;
    tlm_stream *s;
    die_on(tlm_event_create(be, &e0), "event");
    die_on(tlm_event_create(be, &e1), "event");
    die_on(tlm_stream_create(be, &s), "stream");
    tlm_event_record(be, e0, NULL);
    usleep(20000);
    tlm_event_record(be, e1, s);
    tlm_stream_wait_event(be, NULL, e1);
    tlm_stream_synchronize(be, s);
    const double ms = tlm_event_elapsed_ms(be, e0, e1);
    check(ms >= 19.0 && ms < 2000.0, "events on the CPU: 20 ms of sleep between two events measure %.2f ms", ms);
    tlm_event_destroy(be, e0);
    tlm_event_destroy(be, e1);
    tlm_stream_destroy(be, s);

    tlm_graph g = {0};
    for (int i = 0; i < 3; i++) tlm_graph_run(be, &g, true, count_run, NULL, 7);
    check(!tlm_backend_has_graphs(be) && graph_runs == 3 && g.exec == NULL,
          "graph service without graphs: the pass runs eagerly each time (%d of 3)", graph_runs);

    check(tlm_backend_supports(be, TLM_OP_MATMUL_FORWARD, TLM_DTYPE_BF16, 0) == TLM_SUPPORT_FAST &&
              tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_BACKWARD, TLM_DTYPE_F32, 16) == TLM_SUPPORT_REFERENCE,
          "cpu supports: matmul bf16 fast, flash attention as the reference");
    const tlm_support none = tlm_backend_supports(be, TLM_OP_CAST, TLM_DTYPE_I32, 0);
    check(none == TLM_SUPPORT_NONE && strstr(tlm_last_error(), "I32"), "cpu supports no I32 op: %s", tlm_last_error());
    tlm_backend_release_cached(be); /* a no-op here */
    check(tlm_device_memory_used(be) == 0, "the CPU has no device count of its own");

    tlm_model *m;
    const tlm_run_config bad = {.precision = (tlm_precision)9, .attention = TLM_ATTENTION_NAIVE};
    check(tlm_model_create(&m, &cfg, &bad, be) == TLM_ERR_INVALID_ARGUMENT && m == NULL,
          "a run configuration with an unknown precision mode is refused: %s", tlm_last_error());
}

int main(void) {
    die_on(tlm_backend_cpu_create(&be, 2), "cpu backend");
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    uint64_t rng = 3;
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);
        targets[i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);
    }
    test_dispatch(TLM_ATTENTION_NAIVE);
    test_dispatch(TLM_ATTENTION_FLASH);
    test_memory_events();
    test_grads_ready();
    test_loss_and_comm();
    test_backend_services();
    return test_finish_backend(be);
}
