/* cross_entropy.c — softmax cross-entropy over V classes on the CPU, via the max-subtracted
 * log-sum-exp (the log-softmax of Goodfellow, Bengio & Courville 2016, "Deep Learning",
 * eq. 6.33): loss = logsumexp(logits) - logits[target]; its gradient softmax - onehot.
 * logits and dlogits are dt: read as fp32, computed in fp32, dlogits rounded to dt; losses
 * and lse are float32. */
#include "cpu/cpu_ops.h"

#include <math.h>

void tlm_cpu_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const void *logits,
                                   const int32_t *targets, int N, int V, tlm_dtype dt) {
    /* losses (N); lse (N); logits (N,V) dt; targets (N) */
    tlm_cpu_thread_scratch rows = tlm_cpu_scratch_per_thread(
        be, dt == TLM_DTYPE_F32 ? 0 : (size_t)V, "cross_entropy_forward");
#pragma omp parallel for schedule(static) if ((size_t)N * V >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict l = /* (V) */
            tlm_cpu_row_in(logits, (size_t)n * V, V, dt, tlm_cpu_thread_buf(rows, 0));

        float max = l[0];
#pragma omp simd reduction(max : max)
        for (int j = 1; j < V; j++) max = l[j] > max ? l[j] : max;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) sum += (double)tlm_cpu_expf(l[j] - max);
        float logsumexp = max + (float)log(sum);

        lse[n] = logsumexp;
        losses[n] = logsumexp - l[targets[n]];
    }
}

/* dlogits may be logits (in place): each element is read before it is written (with dt
 * bf16/fp16, the row is widened into one buffer, updated there, and rounded back). */
void tlm_cpu_cross_entropy_backward(tlm_backend *be, void *dlogits, const void *logits,
                                    const float *lse, const int32_t *targets, int N, int V,
                                    float dloss, tlm_dtype dt) {
    /* dlogits (N,V) dt; logits (N,V) dt; lse (N); targets (N) */
    tlm_cpu_thread_scratch rows = tlm_cpu_scratch_per_thread(
        be, dt == TLM_DTYPE_F32 ? 0 : (size_t)V, "cross_entropy_backward");
#pragma omp parallel for schedule(static) if ((size_t)N * V >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        float *buf = tlm_cpu_thread_buf(rows, 0);
        const float *l = tlm_cpu_row_in(logits, (size_t)n * V, V, dt, buf); /* (V) */
        float *dl = tlm_cpu_row_out(dlogits, (size_t)n * V, dt, buf);       /* (V), may be l */
        float logsumexp = lse[n];
        int target = targets[n];
        float p_target = tlm_cpu_expf(l[target] - logsumexp);

        /* dl = dloss * softmax(l), then the one-hot term at the target */
#pragma omp simd
        for (int j = 0; j < V; j++) dl[j] = dloss * tlm_cpu_expf(l[j] - logsumexp);
        dl[target] = dloss * (p_target - 1.0f);
        tlm_cpu_row_done(dlogits, (size_t)n * V, dl, V, dt);
    }
}
