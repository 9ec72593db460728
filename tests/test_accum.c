/* test_accum.c — gradient accumulation (model.h's run.grad_accum_steps, train.h's grad_accum_steps) on the
 * test's backend (CPU; built again as test_gpu_accum for CUDA, where the backward runs as two CUDA graphs:
 * the first micro-batch's, writing the gradients, and the others', adding into them).
 *
 * Checks:
 * - tlm_train with N micro-batches of B rows (N = 1, 2, 4) against N x B rows in one batch, 4 steps of
 *   the tiny model with clipping on (every step clips): the losses, gradient norms and weights, within 1e-6
 *   relative (normwise per tensor) in fp32; in bf16 within 1e-3 (below), and the tokens counted N x B x T
 *   a step. The micro-batches are the same rows (one draw of N x B rows a step), so the two differ only
 *   in the order the weight gradients' sums are taken (fp32) — N = 1 is the same bits;
 * - the gradients after N micro-batches: the one-batch gradients within 1e-6 (the mean over all their
 *   tokens: each micro-batch's scaled by 1/N), the activations of each forward not written over them
 *   (the gradient buffer lives the whole step when accumulating);
 * - fp16 loss scaling: an overflow in one micro-batch (the second's loss scale raised by hand until its
 *   fp16 gradients overflow) skips the whole step: the weights unchanged, the step marked skipped, the
 *   scale halved; the same step without the overflow is taken;
 * - refusals: accumulation with optimizer-in-backward or the overlapped optimizer (UNSUPPORTED, named), a
 *   micro-batch outside [0, N), a recipe whose N is not the model's, N = 0 in the recipe.
 *
 * The bf16 bound: the CPU widens bf16 operands to fp32 exactly and sums in fp32, and the loss gradient's
 * factor (1/N)/(B T) is the same number as 1/(N B T), so the rounded bf16 activation gradients are those
 * of the one batch unless a GEMM sums a row in another order for another row count (then one bf16
 * rounding, 2^-9 relative, differs); AdamW turns such differences into updates of at most lr per element.
 * 1e-3 of the weights' norm leaves room for a few of those over 4 steps; on CUDA cuBLASLt may pick another
 * kernel (split-K) for another row count, so fp32 gets 1e-5 there and bf16 keeps 1e-3. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_check.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/train.h"
#include "tlm/util.h"

static tlm_backend *be;
static const bool on_cpu = TLM_TEST_DEVICE[1] == 'p'; /* "cpu" */
static tlm_tokens data;

enum { STEPS = 4, ROWS = 2, CTX = 16 };

static tlm_model *new_model(tlm_precision p, int accum, bool in_backward) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_run_config run = {.precision = p, .attention = TLM_ATTENTION_NAIVE, .cuda_graphs = !on_cpu,
                                .grad_accum_steps = accum, .optimizer_in_backward = in_backward};
    tlm_model *m = NULL;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    die_on(tlm_model_init_random(m, 7), "init");
    return m;
}

static float *host_copy(const float *dev, size_t n) {
    float *h = malloc(n * sizeof(float));
    TLM_ASSERT(h);
    tlm_copy_to_host(be, h, dev, n * sizeof(float));
    return h;
}

typedef struct {
    float loss[STEPS];
    double norm[STEPS];
    int64_t tokens;
    float *params;
} run_result;

/* STEPS steps of tlm_train: `accum` micro-batches of `rows` rows each */
static run_result train(tlm_precision p, int accum, int rows) {
    run_result r = {0};
    tlm_model *m = new_model(p, accum, false);
    tlm_train_config rc = tlm_train_defaults(STEPS);
    rc.batch_size = rows;
    rc.grad_accum_steps = accum;
    rc.context_length = CTX;
    rc.lr_max = 3e-3;
    rc.max_grad_norm = 0.5; /* the tiny model's norm is above it: every step clips */
    rc.seed = 5;
    tlm_train t;
    die_on(tlm_train_init(&t, m, &rc, &data, NULL, 0, 1), "train init");
    for (int i = 0; i < STEPS; i++) {
        tlm_train_record rec;
        die_on(tlm_train_step(&t, &rec), "train step");
        r.loss[i] = rec.loss;
        r.norm[i] = rec.grad_norm;
    }
    r.tokens = t.tokens;
    r.params = host_copy(m->params, m->layout.flat_numel);
    tlm_train_free(&t);
    tlm_model_free(m);
    return r;
}

static void test_training(tlm_precision p) {
    const bool fp32 = p == TLM_PRECISION_FP32;
    const double limit = fp32 ? (on_cpu ? 1e-6 : 1e-5) : 1e-3;
    const int ns[] = {1, 2, 4};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int n = ns[k];
        run_result a = train(p, n, ROWS), one = train(p, 1, n * ROWS);
        tlm_model *m = new_model(p, 1, false); /* for its layout */
        const char *where;
        const double e = test_worst_tensor_error(&m->layout, a.params, one.params, &where);
        double es = 0;
        for (int i = 0; i < STEPS; i++) {
            es = fmax(es, fabs((double)a.loss[i] - one.loss[i]) / fabs((double)one.loss[i]));
            es = fmax(es, fabs(a.norm[i] - one.norm[i]) / fabs(one.norm[i]));
        }
        const bool same_bits = memcmp(a.params, one.params, m->layout.flat_numel * sizeof(float)) == 0;
        check(e <= limit && es <= limit && (n > 1 || !on_cpu || same_bits) &&
                  a.tokens == (int64_t)STEPS * n * ROWS * CTX && one.tokens == a.tokens,
              "%s: %d micro-batch%s of %d rows vs one batch of %d: weights %.1e (%s), losses and norms %.1e (limit "
              "%.0e%s); %lld tokens", tlm_precision_name(p), n, n == 1 ? "" : "es", ROWS, n * ROWS, e, where, es,
              limit, n == 1 && on_cpu ? ", and the same bits" : "", (long long)a.tokens);
        tlm_model_free(m);
        free(a.params);
        free(one.params);
    }
}

/* the gradients of N micro-batches (tokens rows k*B.. of one batch) against those of the one batch */
static void test_gradients(void) {
    enum { N = 3, B = 2 };
    int32_t *x = malloc(sizeof(int32_t) * N * B * CTX), *y = malloc(sizeof(int32_t) * N * B * CTX);
    TLM_ASSERT(x && y);
    for (int i = 0; i < N * B * CTX; i++) x[i] = data.ids[3 * i + 1], y[i] = data.ids[3 * i + 2];
    tlm_model *one = new_model(TLM_PRECISION_FP32, 1, false), *acc = new_model(TLM_PRECISION_FP32, N, false);
    float l1 = 0, lk = 0, sum = 0;
    die_on(tlm_model_forward(one, x, y, N * B, CTX, &l1), "forward");
    die_on(tlm_model_backward(one), "backward");
    for (int k = 0; k < N; k++) {
        die_on(tlm_model_set_micro_batch(acc, k), "micro-batch");
        die_on(tlm_model_forward(acc, x + k * B * CTX, y + k * B * CTX, B, CTX, &lk), "forward");
        die_on(tlm_model_backward(acc), "backward");
        sum += lk;
    }
    const size_t n = one->layout.flat_numel;
    float *g1 = host_copy(one->grads, n), *gk = host_copy(acc->grads, n);
    const char *where;
    const double e = test_worst_tensor_error(&one->layout, gk, g1, &where);
    const double el = fabs((double)sum / N - l1) / fabs((double)l1);
    check(e <= 1e-6 && el <= 1e-6 && tlm_model_last_micro_batch(acc),
          "gradients of %d micro-batches of %d rows = the one batch's (worst %.1e, %s); mean loss %.1e", N, B, e,
          where, el);
    tlm_memory_estimate e1, en;
    const tlm_run_config r1 = one->run, rn = acc->run;
    die_on(tlm_model_memory_estimate(be, &one->config, &r1, B, CTX, &e1), "estimate");
    die_on(tlm_model_memory_estimate(be, &acc->config, &rn, B, CTX, &en), "estimate");
    check(en.arena > e1.arena && en.arena_live > e1.arena_live,
          "accumulating, the gradients keep their own bytes: arena %zu B (live %zu) vs %zu (live %zu)", en.arena,
          en.arena_live, e1.arena, e1.arena_live);
    free(g1);
    free(gk);
    free(x);
    free(y);
    tlm_model_free(one);
    tlm_model_free(acc);
}

/* fp16: micro-batch 1 of 2 overflows (its loss scale raised by hand); the step is skipped as a whole */
static void test_fp16_overflow(void) {
    enum { B = 2 };
    int32_t x[2 * B * CTX], y[2 * B * CTX];
    for (int i = 0; i < 2 * B * CTX; i++) x[i] = data.ids[i + 7], y[i] = data.ids[i + 8];
    for (int overflow = 0; overflow < 2; overflow++) {
        tlm_model *m = new_model(TLM_PRECISION_FP16, 2, false);
        const size_t n = m->layout.flat_numel;
        float *before = host_copy(m->params, n);
        const float scale = m->scaler.scale;
        float loss;
        for (int k = 0; k < 2; k++) {
            die_on(tlm_model_set_micro_batch(m, k), "micro-batch");
            die_on(tlm_model_forward(m, x + k * B * CTX, y + k * B * CTX, B, CTX, &loss), "forward");
            if (overflow && k == 1) m->scaler.scale = 0x1p100f; /* fp16's gradients cannot hold it */
            die_on(tlm_model_backward(m), "backward");
        }
        m->scaler.scale = scale;
        tlm_adamw_config opt = tlm_adamw_defaults();
        die_on(tlm_model_adamw_step(m, &opt), "step");
        float *after = host_copy(m->params, n);
        const bool same = memcmp(before, after, n * sizeof(float)) == 0;
        if (overflow)
            check(same && m->scaler.last_step_skipped && m->scaler.scale < scale,
                  "fp16, 2 micro-batches, the second overflowing: the step skipped (weights unchanged %d, skipped %d, "
                  "scale %g -> %g)", same, m->scaler.last_step_skipped, (double)scale, (double)m->scaler.scale);
        else
            check(!same && !m->scaler.last_step_skipped, "fp16, 2 micro-batches without overflow: the step is taken");
        free(before);
        free(after);
        tlm_model_free(m);
    }
}

static void test_refusals(void) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_run_config oib = {.precision = TLM_PRECISION_FP32, .grad_accum_steps = 2, .optimizer_in_backward = true};
    const tlm_run_config ovl = {.precision = TLM_PRECISION_FP32, .grad_accum_steps = 2, .optimizer_overlap = true};
    tlm_model *m = NULL;
    check_status(tlm_model_create(&m, &cfg, &oib, be), TLM_ERR_UNSUPPORTED, "optimizer-in-backward",
                 "accumulation with optimizer-in-backward");
    check_status(tlm_model_create(&m, &cfg, &ovl, be), TLM_ERR_UNSUPPORTED, "overlapped optimizer",
                 "accumulation with the overlapped optimizer");
    m = new_model(TLM_PRECISION_FP32, 2, false);
    check_status(tlm_model_set_micro_batch(m, 2), TLM_ERR_INVALID_ARGUMENT, "micro-batch 2", "micro-batch 2 of 2");
    tlm_train_config rc = tlm_train_defaults(3);
    rc.context_length = CTX;
    rc.grad_accum_steps = 3;
    tlm_train t;
    check_status(tlm_train_init(&t, m, &rc, &data, NULL, 0, 1), TLM_ERR_INVALID_ARGUMENT, "micro-batches",
                 "a recipe of 3 micro-batches for a model of 2");
    rc.grad_accum_steps = 0;
    check_status(tlm_train_config_check(&rc), TLM_ERR_INVALID_ARGUMENT, "grad_accum_steps", "grad_accum_steps 0");
    rc.grad_accum_steps = 1 << 19;
    check_status(tlm_train_config_check(&rc), TLM_ERR_INVALID_ARGUMENT, "rows a step", "2^19 micro-batches of 4 rows");
    tlm_model_free(m);
}

int main(void) {
    be = test_backend(); /* the test's device (test_check.h); exit 77 without a GPU */
    printf("# %s\n", be->description);
    data = (tlm_tokens){malloc(8192 * sizeof(int32_t)), 8192};
    TLM_ASSERT(data.ids);
    uint64_t r = 3;
    data.ids[0] = 1;
    for (int i = 1; i < 8192; i++) /* a learnable sequence: mostly i+1 mod 97, sometimes random */
        data.ids[i] = tlm_rng_below(&r, 8) ? (data.ids[i - 1] + 1) % 97 : (int32_t)tlm_rng_below(&r, 512);
    test_training(TLM_PRECISION_FP32);
    test_training(TLM_PRECISION_BF16);
    test_gradients();
    test_fp16_overflow();
    test_refusals();
    free(data.ids);
    const int rc = test_finish();
    tlm_backend_destroy(be);
    return rc;
}
