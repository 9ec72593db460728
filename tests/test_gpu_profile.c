/* test_gpu_profile.c — the profiler on CUDA, through CUPTI (label gpu; exits 77 without a GPU):
 * 1. smoke: CUPTI starts, hands over activity buffers, and a kernel record of a dispatched op comes
 *    back attributed to that op, with a name, a stream and a duration (`test_gpu_profile smoke` runs
 *    only this: the device script's first check);
 * 2. with CUDA graphs on and off, the small model (fp32, context 256, naive and flash attention):
 *    - each phase's profiled time (first kernel start to last kernel end, every memcpy/memset
 *      included) is within 3% of the phase's time between CUDA events recorded around it;
 *    - every kernel is attributed to an op (none unattributed in a profiled step; replays through
 *      the graph node ids recorded at capture);
 *    - the forward dispatches 1 + 9 L + 4 ops per step, each of which launched kernels; every
 *      non-GEMM op of the forward is exactly one kernel (FlashAttention's: one, or two where it
 *      splits the key ranges); a GEMM is one or more cuBLASLt kernels
 *      (printed: the honest count), the naive attention 2 B batched GEMMs and a softmax or more;
 *    - the kernel count per forward pass is the same eager and replayed from the graph. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TLM_TEST_DEVICE "cuda" /* test_backend(): the GPU, or exit 77 */
#include "test_check.h"
#include "tlm/model.h"
#include "tlm/profile.h"
#include "tlm/rng.h"

static tlm_backend *be;

static void smoke(void) {
    float *x = tlm_alloc(be, 1 << 24, TLM_MEM_WORKSPACE, "smoke.x"), *y = tlm_alloc(be, 1 << 24, TLM_MEM_WORKSPACE, "smoke.y");
    die_on(x && y ? TLM_OK : TLM_ERR_OUT_OF_MEMORY, "buffers");
    tlm_memset_zero(be, x, 1 << 24);
    tlm_profiler *pr;
    check_status(tlm_profiler_start(&pr, be, "smoke"), TLM_OK, NULL, "CUPTI starts (activity buffers, callbacks)");
    tlm_step_begin(be, 0, false);
    tlm_phase_begin(be, TLM_PHASE_FORWARD);
    tlm_cast(be, y, x, (1 << 24) / 4, TLM_DTYPE_BF16); /* float32 -> bf16: one kernel (a float32 "cast" is a copy) */
    tlm_phase_end(be);
    tlm_step_end(be);
    tlm_profile *p = NULL;
    check_status(tlm_profiler_stop(pr, &p), TLM_OK, NULL, "CUPTI stops, buffers flushed");
    int kernels = 0, attributed = 0;
    for (size_t i = 0; p && i < p->n_acts; i++) {
        const tlm_prof_activity *a = &p->acts[i];
        if (a->kind != TLM_PROF_KERNEL) continue;
        kernels++;
        printf("#   kernel %s: %.2f us on stream %u, op %s, phase %s\n", tlm_profile_str(p, a->name),
               (a->end_ns - a->start_ns) * 1e-3, a->stream, a->op >= 0 ? tlm_op_name(p->ops[a->op].op) : "-",
               tlm_phase_name(a->phase));
        attributed += a->op >= 0 && p->ops[a->op].op == TLM_OP_CAST && a->phase == TLM_PHASE_FORWARD &&
                      a->end_ns > a->start_ns && strlen(tlm_profile_str(p, a->name)) > 3 && a->step == 0;
    }
    check(kernels == 1 && attributed == 1, "one kernel record, attributed to the cast op in forward, step 0 (%d, %d)",
          kernels, attributed);
    check(p && p->dropped == 0, "no record dropped");
    tlm_profile_free(p);
    tlm_free(be, y);
    tlm_free(be, x);
}

enum { B = 4, T = 256, WARMUP = 3, STEPS = 5 };

typedef struct {
    double event_ms[TLM_PHASE_COUNT];
    tlm_prof_summary s;
    tlm_profile *p;
} profiled;

/* the training step of bench.c, timed by events around each phase, without the loss's copy to the
 * host (so nothing but the phase's own work sits between its events) */
static void run(const tlm_config *cfg, tlm_attention att, bool graphs, profiled *out) {
    const tlm_run_config rc = {.precision = TLM_PRECISION_FP32, .attention = att, .cuda_graphs = graphs};
    tlm_model *m;
    die_on(tlm_model_create(&m, cfg, &rc, be), "model");
    die_on(tlm_model_init_random(m, 1), "init");
    int32_t *tokens = malloc((B * T + 1) * sizeof *tokens);
    test_random_ids(tokens, B * T + 1, (uint64_t)cfg->vocab_size, tlm_rng_stream(3, 1));
    tlm_event *ev[4];
    for (int e = 0; e < 4; e++) die_on(tlm_event_create(be, &ev[e]), "event");
    const tlm_adamw_config opt = tlm_adamw_defaults();
    tlm_profiler *pr;
    die_on(tlm_profiler_start(&pr, be, "gpu test"), "profiler");
    memset(out->event_ms, 0, sizeof out->event_ms);
    for (int i = 0; i < WARMUP + STEPS; i++) {
        const bool warm = i < WARMUP;
        tlm_step_begin(be, warm ? i : i - WARMUP, warm);
        tlm_event_record(be, ev[0], NULL);
        die_on(tlm_model_forward(m, tokens, tokens + 1, B, T, NULL), "forward");
        tlm_event_record(be, ev[1], NULL);
        die_on(tlm_model_backward(m), "backward");
        tlm_event_record(be, ev[2], NULL);
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
        tlm_event_record(be, ev[3], NULL);
        tlm_step_end(be);
        tlm_synchronize(be);
        if (warm) continue;
        for (int ph = 0; ph < 3; ph++) out->event_ms[TLM_PHASE_FORWARD + ph] += tlm_event_elapsed_ms(be, ev[ph], ev[ph + 1]) / STEPS;
    }
    die_on(tlm_profiler_stop(pr, &out->p), "profiler stop");
    tlm_prof_context ctx = {.precision = TLM_PRECISION_FP32, .d_head = tlm_config_d_head(cfg)};
    for (int ph = 0; ph < TLM_PHASE_COUNT; ph++) ctx.wall_ms[ph] = out->event_ms[ph];
    die_on(tlm_profile_summarize(out->p, &ctx, &out->s), "summarize");
    for (int e = 0; e < 4; e++) tlm_event_destroy(be, ev[e]);
    free(tokens);
    tlm_model_free(m);
}

static bool single_kernel_op(tlm_op_id op) {
    switch (op) {
    case TLM_OP_EMBEDDING_FORWARD: case TLM_OP_RMSNORM_FORWARD: case TLM_OP_ROPE_FORWARD: case TLM_OP_SWIGLU_FORWARD:
    case TLM_OP_CROSS_ENTROPY_FORWARD: case TLM_OP_REDUCE_MEAN: return true;
    default: return false;
    }
}

static double check_run(const tlm_config *cfg, tlm_attention att, bool graphs) {
    const char *what = graphs ? "graphs on " : "graphs off";
    const char *an = tlm_attention_name(att);
    profiled r;
    run(cfg, att, graphs, &r);
    const tlm_prof_summary *s = &r.s;
    for (int ph = TLM_PHASE_FORWARD; ph <= TLM_PHASE_OPTIMIZER; ph++) {
        const double span = s->phase[ph].span_us * 1e-3, busy = s->phase[ph].busy_us * 1e-3, ev = r.event_ms[ph];
        const double rel = fabs(span - ev) / ev;
        check(rel <= 0.03, "%s %s %-9s profiled %.3f ms (kernels busy %.3f ms, %.0f%%) vs events %.3f ms: %.2f%% (<= 3%%)",
              an, what, tlm_phase_name((tlm_phase)ph), span, busy, 100 * busy / ev, ev, 100 * rel);
    }
    long long no_op = 0, kernels_seen = 0; /* kernels of profiled steps without their op */
    for (size_t i = 0; i < r.p->n_acts; i++) {
        const tlm_prof_activity *a = &r.p->acts[i];
        if (a->kind != TLM_PROF_KERNEL || a->step < 0 || a->warmup) continue;
        kernels_seen++;
        no_op += a->op < 0;
    }
    check(kernels_seen > 0 && no_op == 0 && s->unattributed == 0 && r.p->dropped == 0,
          "%s %s: every kernel of the profiled steps has its op (%lld kernels, %lld without, %lld activities with no "
          "launch, %llu dropped)", an, what, kernels_seen, no_op, (long long)s->unattributed,
          (unsigned long long)r.p->dropped);
    const int L = cfg->num_layers;
    double calls = 0, kernels = 0;
    bool singles = true, every_op_launched = true;
    for (size_t i = 0; i < s->n_ops; i++) {
        const tlm_prof_op_row *o = &s->ops[i];
        if (o->phase != TLM_PHASE_FORWARD) continue;
        calls += o->calls_per_step;
        kernels += o->calls_per_step * o->kernels_per_call;
        every_op_launched &= o->kernels_per_call >= 1;
        if (single_kernel_op(o->op)) singles &= o->kernels_per_call == 1.0;
        /* FlashAttention's forward: one kernel, or two where it splits the key ranges (the pieces,
         * then their merge: src/cuda/attention/split.cu's split-KV) */
        if (o->op == TLM_OP_FLASH_ATTENTION_FORWARD) singles &= o->kernels_per_call == 1.0 || o->kernels_per_call == 2.0;
        if (o->op == TLM_OP_MATMUL_FORWARD || o->op == TLM_OP_ATTENTION_FORWARD || !single_kernel_op(o->op))
            printf("#   %s %s forward %-22s %5.1f calls, %.2f kernels per call\n", an, what, tlm_op_name(o->op),
                   o->calls_per_step, o->kernels_per_call);
        if (o->op == TLM_OP_ATTENTION_FORWARD)
            check(o->kernels_per_call >= 2 * B + 1, "%s %s: naive attention launches %.1f kernels per call (>= 2 B "
                  "batched GEMMs + softmax = %d)", an, what, o->kernels_per_call, 2 * B + 1);
    }
    check(fabs(calls - (1 + 9 * L + 4)) < 1e-9 && every_op_launched,
          "%s %s: the forward dispatches %.0f ops per step (1 + 9 L + 4 = %d), each launched kernels", an, what, calls,
          1 + 9 * L + 4);
    check(singles, "%s %s: every non-GEMM forward op is exactly one kernel (flash: one, or two split)", an, what);
    double fwd_kernels = 0; /* kernels (not copies) in the forward per step, from the kernel table */
    for (size_t i = 0; i < s->n_kernels; i++)
        if (s->kernels[i].phase == TLM_PHASE_FORWARD && s->kernels[i].cls != TLM_KCLASS_MEMORY)
            fwd_kernels += s->kernels[i].calls_per_step;
    /* the op table counts every activity of an op (kernels, and the memsets and copies some issue, e.g.
     * cuBLASLt's); the kernel table's kernels and the op table's activities each against the records */
    double rec_kernels = 0, rec_acts = 0;
    for (size_t i = 0; i < r.p->n_acts; i++) {
        const tlm_prof_activity *a = &r.p->acts[i];
        if (a->phase != TLM_PHASE_FORWARD || a->step < 0 || a->warmup || a->op < 0) continue;
        rec_acts += 1.0 / s->steps;
        rec_kernels += (a->kind == TLM_PROF_KERNEL) / (double)s->steps;
    }
    check(fabs(fwd_kernels - rec_kernels) < 1e-6 && fabs(kernels - rec_acts) < 1e-6,
          "%s %s: %.0f kernels per forward in the kernel table = the kernels the ops launched (%.0f); %.0f activities "
          "per forward in the op table = the ops' records (%.0f, the rest memsets and copies inside ops)", an, what,
          fwd_kernels, rec_kernels, kernels, rec_acts);
    for (int i = 0; i < s->findings.n_text; i++) printf("#   finding: %s\n", s->findings.text[i]);
    tlm_prof_summary_free(&r.s);
    tlm_profile_free(r.p);
    return fwd_kernels;
}

int main(int argc, char **argv) {
    be = test_backend();
    if (!tlm_profiler_available(be)) {
        printf("built without CUPTI: skipped\n");
        tlm_backend_destroy(be);
        return 77;
    }
    smoke();
    if (argc > 1 && strcmp(argv[1], "smoke") == 0) {
        tlm_backend_destroy(be);
        return test_finish();
    }
    tlm_config cfg;
    die_on(tlm_config_preset("small", &cfg), "small");
    for (int a = 0; a < 2; a++) {
        const tlm_attention att = a ? TLM_ATTENTION_FLASH : TLM_ATTENTION_NAIVE;
        const double eager = check_run(&cfg, att, false), replayed = check_run(&cfg, att, true);
        check(eager == replayed, "%s: the same kernels per forward pass eager and replayed from the graph (%.0f, %.0f)",
              tlm_attention_name(att), eager, replayed);
    }
    tlm_backend_destroy(be);
    return test_finish();
}
