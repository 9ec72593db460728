/* test_weight_copy.c — the bf16/fp16 GEMM copy of the weights in the step's arena (step_plan.h's
 * weight_copy_in_arena; src/model/activations.h, WEIGHT_COPY): one buffer per parameter group but the
 * embedding's, alive from the step's start to the end of its group's backward, its bytes then taken
 * by the gradients of the groups completed after it; the update writes it again group by group in
 * reverse completion order. On the test's backend (CPU; built again as test_gpu_weight_copy for CUDA,
 * where the passes run as CUDA graphs and naive attention keeps them deterministic: the same bits).
 *
 * Checks:
 * - the same step: 6 steps of two small models (every copy at a fixed offset; and a small vocabulary,
 *   whose embedding's gradients cannot hold layer 0's copy, placed as any buffer), bf16 and fp16, recompute none and block, naive attention, clipping on (every step clips),
 *   with an evaluation forward of the same shape (the copy must survive it) and one of another batch
 *   size (a new arena: the copy is cast again), in fp16 a step skipped for an overflow (the loss scale
 *   raised by hand: the update does not run, so the copy, whose bytes the gradients took, is cast again
 *   by the next forward), then a KV-cache decoder on the trained model: the losses, gradient norms,
 *   weights and the decoder's logits are the bits of the same run with the copy in its own allocation
 *   (the plan before this one, forced through the model's internal state), and the copy after the last
 *   update is the weights rounded (the spans it has);
 * - a decoder between a backward and its update (whose cast would overwrite the gradients) is refused;
 * - the plan: the copy in the arena for the plain update after the backward (alone and with a
 *   replicated data-parallel reducer), apart with optimizer-in-backward, the overlapped optimizer,
 *   accumulation, forward-only, ZeRO-1's sharded update, and none in fp32;
 * - memory: for a shape whose peak is the gradients at the update (batch 1, short context), the planned
 *   total (tlm_model_memory_estimate) falls from the copy apart's by at least the whole copy less one
 *   group's, and the allocator's peak footprint of a real step (allocations plus arenas) likewise;
 *   ZeRO-1's plan (tlm_ddp_memory_estimate) has the copy apart and the arena without it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "model/model_internal.h"
#include "test_check.h"
#include "tlm/ddp.h"
#include "tlm/decode.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/util.h"

static tlm_backend *be;
enum { B = 2, T = 12, STEPS = 6, SKIP = 1, EVAL_SAME = 2, EVAL_OTHER = 4, DEC = 7 };
static int32_t inputs[STEPS][(B + 1) * T], targets[STEPS][(B + 1) * T];

typedef struct {
    float loss[STEPS], eval[2];
    double norm[STEPS];
    bool skipped[STEPS];
    float *params, *logits; /* after the last step; the decoder's logits of its last position */
    long copy_off;          /* elements of the GEMM copy that are not the weights rounded; -1: none current */
    bool in_arena;          /* the copy was in the arena (and params_lp NULL) */
    size_t peak_footprint;
} run_out;

/* the copy's elements that differ from the weights p (host) rounded; the span of a group without a copy
 * in the arena (the embedding's) not compared */
static long copy_off(const tlm_model *m, const float *p) {
    const size_t n = m->layout.flat_numel;
    uint16_t *lp = malloc(n * sizeof *lp), *want = malloc(n * sizeof *want);
    TLM_ASSERT(lp && want);
    tlm_f32_to_16_n(p, want, n, m->run.precision == TLM_PRECISION_BF16);
    memcpy(lp, want, n * sizeof *lp); /* the spans the copy does not have compare equal */
    long off = -1;
    if (tlm_model_weight_copy_to_host(m, lp) == TLM_OK) {
        off = 0;
        for (size_t i = 0; i < n; i++) off += lp[i] != want[i];
    }
    free(lp);
    free(want);
    return off;
}

static run_out run(const tlm_config *c, tlm_precision p, tlm_recompute rc, bool apart) {
    run_out r = {0};
    /* CUDA graphs (on CUDA): the passes captured read the copy where it is when captured */
    const tlm_run_config run = {.precision = p, .attention = TLM_ATTENTION_NAIVE, .recompute = rc,
                                .cuda_graphs = true};
    tlm_model *m;
    tlm_mem_reset_peak(be);
    die_on(tlm_model_create(&m, c, &run, be), "model");
    die_on(tlm_model_init_random(m, 3), "init");
    m->step->weight_copy_apart = apart; /* the plan before weight_copy_in_arena */
    void *scratch = tlm_alloc(be, TLM_CLIP_SCRATCH_BYTES, TLM_MEM_WORKSPACE, "test.scratch");
    tlm_adamw_config opt = tlm_adamw_defaults();
    opt.lr = 3e-3f;
    for (int s = 0; s < STEPS; s++) {
        if (s == EVAL_SAME || s == EVAL_OTHER) { /* between steps, as tlm train's evaluation */
            const int b = s == EVAL_SAME ? B : B + 1;
            die_on(tlm_model_forward(m, inputs[s], targets[s], b, T, &r.eval[s == EVAL_OTHER]), "eval forward");
        }
        die_on(tlm_model_forward(m, inputs[s], targets[s], B, T, &r.loss[s]), "forward");
        if (s == 0) r.in_arena = tlm_model_arena_copy(m) != NULL && m->params_lp == NULL;
        const float scale = m->scaler.scale;
        if (p == TLM_PRECISION_FP16 && s == SKIP) m->scaler.scale = 0x1p100f; /* fp16's gradients overflow */
        die_on(tlm_model_backward(m), "backward");
        m->scaler.scale = scale;
        bool clipped = false;
        die_on(tlm_clip_grad_norm(m, 0.05, scratch, &r.norm[s], &clipped), "clip");
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
        r.skipped[s] = m->scaler.last_step_skipped;
    }
    r.params = malloc(m->layout.flat_numel * sizeof(float));
    tlm_copy_to_host(be, r.params, m->params, m->layout.flat_numel * sizeof(float));
    r.copy_off = copy_off(m, r.params);
    r.peak_footprint = tlm_mem_stats_now(be).peak_footprint;
    tlm_decoder *d;
    die_on(tlm_decoder_create(&d, m, DEC), "decoder");
    r.logits = malloc((size_t)c->vocab_size * sizeof(float));
    die_on(tlm_decoder_forward(d, inputs[0], DEC, r.logits), "decode");
    tlm_decoder_free(d);
    tlm_free(be, scratch);
    tlm_model_free(m);
    return r;
}

static void test_same_step(void) {
    tlm_config deep, vocab;
    die_on(tlm_config_preset("tiny", &deep), "tiny");
    deep.num_layers = 4;
    vocab = deep;
    vocab.vocab_size = 128; /* the embedding's gradients (128 x 64 floats) cannot hold layer 0's copy: placed
                               as any buffer */
    const tlm_config *cfgs[2] = {&deep, &vocab};
    const char *names[2] = {"4 layers", "4 layers, vocab 128"};
    const tlm_precision modes[2] = {TLM_PRECISION_BF16, TLM_PRECISION_FP16};
    const tlm_recompute rcs[2] = {TLM_RECOMPUTE_NONE, TLM_RECOMPUTE_BLOCK};
    for (int ci = 0; ci < 2; ci++)
        for (int pi = 0; pi < 2; pi++)
            for (int ri = 0; ri < 2; ri++) {
                run_out a = run(cfgs[ci], modes[pi], rcs[ri], false), o = run(cfgs[ci], modes[pi], rcs[ri], true);
                tlm_param_layout l;
                die_on(tlm_layout_build(&l, cfgs[ci]), "layout");
                const size_t np = l.flat_numel;
                tlm_layout_free(&l);
                const bool same = memcmp(a.loss, o.loss, sizeof a.loss) == 0 &&
                                  memcmp(a.eval, o.eval, sizeof a.eval) == 0 &&
                                  memcmp(a.norm, o.norm, sizeof a.norm) == 0 &&
                                  memcmp(a.params, o.params, np * sizeof(float)) == 0 &&
                                  memcmp(a.logits, o.logits, (size_t)cfgs[ci]->vocab_size * sizeof(float)) == 0;
                const bool skip_ok = modes[pi] != TLM_PRECISION_FP16 || (a.skipped[SKIP] && o.skipped[SKIP]);
                int clipped = 0;
                for (int s = 0; s < STEPS; s++) clipped += isfinite(a.norm[s]) && a.norm[s] > 0.05;
                check(same && skip_ok && a.in_arena && !o.in_arena && clipped >= STEPS - 1,
                      "%s, %s, recompute %s: %d steps (clipped %d; evaluations of the same and another batch; "
                      "fp16: step %d skipped %d) and a decoder: losses, norms, weights, logits = the copy apart's, "
                      "bit for bit (%d; copy in the arena %d, apart %d)", names[ci], tlm_precision_name(modes[pi]),
                      tlm_recompute_name(rcs[ri]), STEPS, clipped, SKIP + 1, a.skipped[SKIP], same, a.in_arena,
                      !o.in_arena);
                check(a.copy_off == 0 && o.copy_off == 0,
                      "%s, %s, recompute %s: after the last update the copy is the weights rounded (%ld, apart %ld "
                      "elements differ; -1: not current)", names[ci], tlm_precision_name(modes[pi]),
                      tlm_recompute_name(rcs[ri]), a.copy_off, o.copy_off);
                free(a.params), free(a.logits), free(o.params), free(o.logits);
            }
}

static bool in_arena(tlm_run_config r, int attach) {
    tlm_config c;
    die_on(tlm_config_preset("tiny", &c), "tiny");
    tlm_model *m;
    die_on(tlm_model_create(&m, &c, &r, be), "model");
    if (attach) die_on(tlm_model_plan_data_parallel(m, attach == 2), "data parallel");
    const bool on = m->plan.weight_copy_in_arena;
    tlm_model_free(m);
    return on;
}

static void test_plan(void) {
    tlm_run_config r = tlm_run_defaults();
    r.precision = TLM_PRECISION_BF16;
    const bool plain = in_arena(r, 0), replicated = in_arena(r, 1), zero = in_arena(r, 2);
    r.precision = TLM_PRECISION_FP16;
    const bool fp16 = in_arena(r, 0);
    r.precision = TLM_PRECISION_FP32;
    const bool fp32 = in_arena(r, 0);
    r.precision = TLM_PRECISION_BF16;
    r.optimizer_in_backward = true;
    const bool oib = in_arena(r, 0);
    r.optimizer_in_backward = false;
    r.optimizer_overlap = true;
    const bool overlap = in_arena(r, 0);
    r.optimizer_overlap = false;
    r.grad_accum_steps = 2;
    const bool accum = in_arena(r, 0);
    r.grad_accum_steps = 1;
    r.forward_only = true;
    const bool fwd = in_arena(r, 0);
    check(plain && replicated && fp16 && !fp32 && !oib && !overlap && !accum && !fwd && !zero,
          "plan: the copy in the arena for bf16 %d, fp16 %d, with a replicated reducer %d; not for fp32 %d, "
          "optimizer-in-backward %d, overlapped %d, accumulation %d, forward-only %d, ZeRO-1 %d", plain, fp16,
          replicated, fp32, oib, overlap, accum, fwd, zero);
}

/* a decoder between a backward and its update would cast the copy over this step's gradients: refused */
static void test_decode_before_update(void) {
    tlm_config c;
    die_on(tlm_config_preset("tiny", &c), "tiny");
    const tlm_run_config r = {.precision = TLM_PRECISION_BF16, .attention = TLM_ATTENTION_NAIVE};
    tlm_model *m;
    die_on(tlm_model_create(&m, &c, &r, be), "model");
    die_on(tlm_model_init_random(m, 1), "init");
    die_on(tlm_model_forward(m, inputs[0], targets[0], B, T, NULL), "forward");
    die_on(tlm_model_backward(m), "backward");
    tlm_decoder *d = NULL;
    check_status(tlm_decoder_create(&d, m, DEC), TLM_ERR_INVALID_ARGUMENT, "until the AdamW step",
                 "a decoder between the backward and the AdamW step (the copy's bytes hold gradients)");
    const tlm_adamw_config opt = tlm_adamw_defaults();
    die_on(tlm_model_adamw_step(m, &opt), "adamw");
    check_status(tlm_decoder_create(&d, m, DEC), TLM_OK, NULL, "a decoder after the AdamW step");
    tlm_decoder_free(d);
    tlm_model_free(m);
}

/* the largest group's copy (bf16) of config c */
static size_t largest_copy(const tlm_config *c) {
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, c), "layout");
    size_t most = 0;
    for (int g = 0; g < l.num_groups; g++)
        if (l.groups[g].numel * 2 > most) most = l.groups[g].numel * 2;
    tlm_layout_free(&l);
    return most;
}

static void test_memory(void) {
    /* the plan: small at batch 1 x context 8, where the gradients at the update are the peak */
    tlm_config small;
    die_on(tlm_config_preset("small", &small), "small");
    tlm_run_config r = tlm_run_defaults();
    r.precision = TLM_PRECISION_BF16;
    r.attention = TLM_ATTENTION_NAIVE;
    tlm_memory_estimate e;
    die_on(tlm_model_memory_estimate(be, &small, &r, 1, 8, &e), "estimate");
    const size_t copy = e.parameters / 2, one = largest_copy(&small);
    const size_t apart = e.total + copy + e.arena_copy_apart - e.arena; /* the same plan, the copy apart */
    check(e.weight_copy == 0 && e.weight_copy_in_arena > 0 && e.total == e.parameters + e.optimizer + e.arena +
              e.workspace && apart - e.total >= copy - one,
          "memory plan, small bf16, batch 1 x context 8: %.1f MiB planned, %.1f MiB less than with the copy apart "
          "(the copy %.1f MiB, one group's %.1f MiB); the copy's %.1f MiB inside the arena", e.total / 1048576.0,
          (apart - e.total) / 1048576.0, copy / 1048576.0, one / 1048576.0, e.weight_copy_in_arena / 1048576.0);

    /* ZeRO-1 keeps the copy apart: its memory plan has the copy's own allocation and the arena without it */
    tlm_memory_estimate z = e;
    tlm_ddp_config dz = tlm_ddp_defaults();
    dz.zero = 1;
    die_on(tlm_ddp_memory_estimate(&small, &r, &dz, 2, &z), "ddp estimate");
    check(z.weight_copy == copy && z.weight_copy_in_arena == 0 && z.arena == e.arena_copy_apart &&
              z.arena_live == e.arena_live_copy_apart && z.arena >= z.arena_live &&
              z.total == z.parameters + z.weight_copy + z.optimizer + z.arena + z.workspace,
          "memory plan, ZeRO-1 over 2 ranks: the copy apart (%.1f MiB) and the arena without it (%.1f MiB)",
          z.weight_copy / 1048576.0, z.arena / 1048576.0);

    /* a real step: the allocator's peak footprint (allocations and arenas), the same shape on tiny */
    tlm_config deep;
    die_on(tlm_config_preset("tiny", &deep), "tiny");
    deep.num_layers = 6;
    const tlm_run_config run_cfg = {.precision = TLM_PRECISION_BF16, .attention = TLM_ATTENTION_NAIVE};
    size_t peak[2];
    for (int apart_i = 0; apart_i < 2; apart_i++) {
        tlm_model *m;
        tlm_mem_reset_peak(be);
        const size_t base = tlm_mem_stats_now(be).footprint;
        die_on(tlm_model_create(&m, &deep, &run_cfg, be), "model");
        die_on(tlm_model_init_random(m, 1), "init");
        m->step->weight_copy_apart = apart_i;
        const tlm_adamw_config opt = tlm_adamw_defaults();
        for (int s = 0; s < 2; s++) {
            die_on(tlm_model_forward(m, inputs[s], targets[s], 1, 8, NULL), "forward");
            die_on(tlm_model_backward(m), "backward");
            die_on(tlm_model_adamw_step(m, &opt), "adamw");
        }
        peak[apart_i] = tlm_mem_stats_now(be).peak_footprint - base;
        tlm_model_free(m);
    }
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, &deep), "layout");
    const size_t copy_t = l.flat_numel * 2, one_t = largest_copy(&deep);
    tlm_layout_free(&l);
    check(peak[1] > peak[0] && peak[1] - peak[0] >= copy_t - one_t,
          "a step of tiny (6 layers) bf16, batch 1 x context 8: peak footprint %zu bytes, %zu less than with the "
          "copy apart (the copy %zu, one group's %zu)", peak[0], peak[1] - peak[0], copy_t, one_t);
}

int main(void) {
    be = test_backend();
    uint64_t rng = 9;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < (B + 1) * T; i++) {
            inputs[s][i] = (int32_t)tlm_rng_below(&rng, 128);
            targets[s][i] = (int32_t)tlm_rng_below(&rng, 128);
        }
    test_plan();
    test_same_step();
    test_decode_before_update();
    test_memory();
    const int rc = test_finish();
    tlm_backend_destroy(be);
    return rc;
}
