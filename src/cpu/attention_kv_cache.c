/* attention_kv_cache.c — attention of a few new positions against a KV cache on the CPU (ops.def,
 * attention_kv_cache): the new keys and values are appended to the cache, then each (sequence,
 * query, head) computes its scores against every visible cached key, the max-subtracted softmax and
 * the weighted sum of the values, in fp32 (Vaswani et al. 2017, eq. 1). Parallel over the
 * (sequence, head, query) triples; each reads its keys and values once. */
#include "cpu/cpu_ops.h"

void tlm_cpu_attention_kv_cache(tlm_backend *be, void *out, const void *qkv, void *k_cache, void *v_cache, int B,
                                int Tq, int pos0, int S, int H, int D, tlm_dtype dt) {
    /* out (B*Tq, C); qkv (B*Tq, 3C); k_cache, v_cache (B, S, C); all dt, C = H*D */
    const size_t C = (size_t)H * D, es = tlm_dtype_size(dt);
    if (B <= 0 || Tq <= 0 || H <= 0) return;
    for (int b = 0; b < B; b++) /* the new positions' k and v into the cache (same dtype: a byte copy) */
        for (int i = 0; i < Tq; i++) {
            const char *row = (const char *)qkv + ((size_t)b * Tq + i) * 3 * C * es;
            const size_t at = ((size_t)b * S + pos0 + i) * C * es;
            memcpy((char *)k_cache + at, row + C * es, C * es);
            memcpy((char *)v_cache + at, row + 2 * C * es, C * es);
        }
    const float scale = 1.0f / sqrtf((float)D);
    const int len_max = pos0 + Tq; /* the most keys a query sees */
    /* per thread: the scores (len_max), q, a key or value row (widened), the output row (D each) */
    tlm_cpu_thread_scratch scratch =
        tlm_cpu_scratch_per_thread(be, (size_t)len_max + 3 * (size_t)D, "attention_kv_cache");
    const long long work = (long long)B * H * Tq;
#pragma omp parallel for schedule(dynamic, 1) if (work * len_max * D >= TLM_CPU_GRAIN)
    for (long long w = 0; w < work; w++) {
        const int i = (int)(w % Tq), h = (int)((w / Tq) % H), b = (int)(w / ((long long)Tq * H));
        float *p = tlm_cpu_thread_buf(scratch, 0), *qbuf = p + len_max, *kbuf = qbuf + D, *acc = kbuf + D;
        const size_t n = (size_t)b * Tq + i;
        const float *q = tlm_cpu_row_in(qkv, n * 3 * C + (size_t)h * D, (size_t)D, dt, qbuf);
        const int len = pos0 + i + 1; /* keys 0..pos0+i */
        float mx = -INFINITY;
        for (int j = 0; j < len; j++) {
            const float *k = tlm_cpu_row_in(k_cache, ((size_t)b * S + j) * C + (size_t)h * D, (size_t)D, dt, kbuf);
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += q[d] * k[d];
            p[j] = s * scale;
            if (p[j] > mx) mx = p[j];
        }
        float sum = 0.0f;
        for (int j = 0; j < len; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        for (int d = 0; d < D; d++) acc[d] = 0.0f;
        for (int j = 0; j < len; j++) {
            const float *v = tlm_cpu_row_in(v_cache, ((size_t)b * S + j) * C + (size_t)h * D, (size_t)D, dt, kbuf);
            const float pj = p[j] / sum;
            for (int d = 0; d < D; d++) acc[d] += pj * v[d];
        }
        tlm_cpu_narrow(out, n * C + (size_t)h * D, acc, (size_t)D, dt);
    }
}
