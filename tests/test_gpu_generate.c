/* test_gpu_generate.c — generation on CUDA against the CPU (decode.h, generate.h): the
 * attention_kv_cache op on both backends (prefill and one position at a time, fp32/bf16/fp16, a cache
 * longer than 48 KiB of scores per block), the decoder's logits at every position (fp32 within 1e-4
 * of the CPU's, bf16 within 5e-2 of the range), greedy ids equal in fp32, and a seeded sample the same
 * on both. Needs a GPU (exit 77 without). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "tlm/decode.h"
#include "tlm/generate.h"
#include "tlm/memory.h"
#include "tlm/model.h"
#include "tlm/ops.h"
#include "test_check.h"

static tlm_backend *gpu, *cpu;

/* n values of dt from float32 host values (bytes: n * size of dt) */
static void *to_dt(const float *x, size_t n, tlm_dtype dt) {
    void *p = malloc(n * 4);
    if (dt == TLM_DTYPE_F32) memcpy(p, x, n * 4);
    else if (dt == TLM_DTYPE_BF16) tlm_f32_to_bf16_array(x, p, (int64_t)n);
    else tlm_f32_to_f16_array(x, p, (int64_t)n);
    return p;
}

static void from_dt(const void *p, float *x, size_t n, tlm_dtype dt) {
    if (dt == TLM_DTYPE_F32) memcpy(x, p, n * 4);
    else if (dt == TLM_DTYPE_BF16) tlm_bf16_to_f32_array(p, x, (int64_t)n);
    else tlm_f16_to_f32_array(p, x, (int64_t)n);
}

/* the op on both backends: T positions at once, then one at a time, against a cache of S rows */
static void op_case(int T, int H, int D, int B, tlm_dtype dt, double tol) {
    const int C = H * D, S = T + 5;
    const size_t es = tlm_dtype_size(dt), nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nc = (size_t)B * S * C;
    float *x = malloc(nq * 4);
    uint64_t rng = 21;
    for (size_t i = 0; i < nq; i++) x[i] = (float)tlm_rng_normal(&rng);
    void *host = to_dt(x, nq, dt);
    float *got[2] = {malloc(no * 4), malloc(no * 4)};
    for (int k = 0; k < 2; k++) {
        tlm_backend *be = k ? gpu : cpu;
        void *qkv = tlm_alloc(be, nq * es, TLM_MEM_WORKSPACE, "test");
        void *out = tlm_alloc(be, no * es, TLM_MEM_WORKSPACE, "test");
        void *kc = tlm_alloc(be, nc * es, TLM_MEM_WORKSPACE, "test");
        void *vc = tlm_alloc(be, nc * es, TLM_MEM_WORKSPACE, "test");
        if (!qkv || !out || !kc || !vc) die_on(TLM_ERR_OUT_OF_MEMORY, "op buffers");
        tlm_copy_to_backend(be, qkv, host, nq * es);
        tlm_attention_kv_cache(be, out, qkv, kc, vc, B, T, 0, S, H, D, dt);
        void *raw = malloc(no * es);
        tlm_copy_to_host(be, raw, out, no * es);
        from_dt(raw, got[k], no, dt);
        if (k && B == 1) { /* one position at a time into a fresh cache gives the same */
            for (int i = 0; i < T; i++)
                tlm_attention_kv_cache(be, (char *)out + (size_t)i * C * es, (char *)qkv + (size_t)i * 3 * C * es, kc,
                                       vc, 1, 1, i, S, H, D, dt);
            void *raw2 = malloc(no * es);
            tlm_copy_to_host(be, raw2, out, no * es);
            check(memcmp(raw, raw2, no * es) == 0,
                  "cuda attention_kv_cache T=%d %s: one position at a time = all at once", T, tlm_dtype_name(dt));
            free(raw2);
        }
        free(raw);
        tlm_free(be, qkv);
        tlm_free(be, out);
        tlm_free(be, kc);
        tlm_free(be, vc);
    }
    double d = 0;
    for (size_t i = 0; i < no; i++) d = fmax(d, fabs((double)got[0][i] - got[1][i]));
    char what[120];
    snprintf(what, sizeof what, "attention_kv_cache B=%d T=%d H=%d D=%d %s: cuda vs cpu", B, T, H, D,
             tlm_dtype_name(dt));
    check_limit(d <= tol, what, d, tol);
    free(x);
    free(host);
    free(got[0]);
    free(got[1]);
}

/* the tiny model with context `context` in mode p, its weights from the seeded init (the same on both
 * backends: drawn on the host) */
static tlm_model *tiny(tlm_backend *be, tlm_precision p, int context) {
    tlm_config c;
    die_on(tlm_config_preset("tiny", &c), "tiny");
    c.context_length = context;
    tlm_run_config run = tlm_run_defaults();
    run.precision = p, run.forward_only = true;
    tlm_model *m = NULL;
    if (tlm_model_create(&m, &c, &run, be) != TLM_OK || tlm_model_init_random(m, 17) != TLM_OK)
        die_on(TLM_ERR_INVALID_ARGUMENT, "the tiny model");
    return m;
}

/* the decoder on both backends, position by position, and generation */
static void decode_case(tlm_precision p, double tol) {
    const int P = 7, K = 40;
    tlm_model *mc = tiny(cpu, TLM_PRECISION_FP32, P + K), *mg = tiny(gpu, p, P + K);
    const int V = mc->config.vocab_size;
    int32_t seq[64];
    test_random_ids(seq, 64, (uint64_t)V, 8);
    tlm_decoder *dc = NULL, *dg = NULL;
    die_on(tlm_decoder_create(&dc, mc, P + K), "cpu decoder");
    die_on(tlm_decoder_create(&dg, mg, P + K), "gpu decoder");
    float *lc = malloc((size_t)V * 4), *lg = malloc((size_t)V * 4);
    double worst = 0, range = 0;
    for (int pos = 0; pos < P + K; pos += pos ? 1 : P) {
        const int n = pos ? 1 : P;
        die_on(tlm_decoder_forward(dc, seq + pos, n, lc), "cpu forward");
        die_on(tlm_decoder_forward(dg, seq + pos, n, lg), "gpu forward");
        for (int i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)lc[i] - lg[i]));
            range = fmax(range, fabs((double)lc[i]));
        }
    }
    char what[120];
    snprintf(what, sizeof what, "decoder logits, %d positions, cuda %s vs cpu fp32 (max abs diff / range %.1f)", P + K,
             tlm_precision_name(p), range);
    check_limit(worst <= tol * fmax(range, 1), what, worst, tol * fmax(range, 1));
    tlm_decoder_free(dc);
    tlm_decoder_free(dg);
    if (p == TLM_PRECISION_FP32) { /* greedy and seeded sampling: the same ids */
        int32_t a[40], b[40];
        tlm_generate_config gc = tlm_generate_defaults();
        gc.max_new_tokens = K;
        gc.temperature = 0;
        die_on(tlm_generate(mc, &gc, seq, P, a, NULL, NULL, NULL), "cpu greedy");
        die_on(tlm_generate(mg, &gc, seq, P, b, NULL, NULL, NULL), "gpu greedy");
        check(memcmp(a, b, sizeof a) == 0, "greedy: the same %d ids on cuda and cpu (fp32)", K);
        gc.temperature = 0.9;
        gc.top_p = 0.9;
        gc.seed = 4;
        die_on(tlm_generate(mc, &gc, seq, P, a, NULL, NULL, NULL), "cpu sample");
        die_on(tlm_generate(mg, &gc, seq, P, b, NULL, NULL, NULL), "gpu sample");
        int same = 0;
        while (same < K && a[same] == b[same]) same++;
        check(same >= K / 2, "seeded top-p sampling: cuda follows the cpu for %d of %d tokens (a draw at a near "
                             "tie may part them)", same, K);
    }
    free(lc);
    free(lg);
    tlm_model_free(mc);
    tlm_model_free(mg);
}

int main(void) {
    tlm_backends_register_builtin();
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped\n");
        return 77;
    }
    die_on(tlm_backend_create(&cpu, "cpu", 0, 0), "cpu backend");
    printf("# %s\n", gpu->description);
    op_case(13, 4, 16, 2, TLM_DTYPE_F32, 1e-5);
    op_case(40, 3, 64, 1, TLM_DTYPE_F32, 1e-5);
    op_case(40, 3, 64, 1, TLM_DTYPE_BF16, 2e-2);
    op_case(40, 3, 64, 1, TLM_DTYPE_F16, 4e-3);
    op_case(9, 2, 128, 1, TLM_DTYPE_F32, 1e-5);
    op_case(13000, 1, 32, 1, TLM_DTYPE_F32, 1e-5); /* 52 KB of scores: above the 48 KiB default */
    decode_case(TLM_PRECISION_FP32, 1e-4);
    decode_case(TLM_PRECISION_BF16, 5e-2);
    check(test_bytes_held(gpu) == 0 && test_bytes_held(cpu) == 0, "every buffer freed");
    tlm_backend_destroy(cpu);
    tlm_backend_destroy(gpu);
    return test_finish();
}
