/* cross_entropy.c — softmax cross-entropy over V classes on the CPU, via the max-subtracted
 * log-sum-exp (the log-softmax of Goodfellow, Bengio & Courville 2016, "Deep Learning",
 * eq. 6.33): loss = logsumexp(logits) - logits[target]; its gradient softmax - onehot. */
#include "cpu/cpu_ops.h"

#include <math.h>

void tlm_cpu_cross_entropy_forward(tlm_backend *be, float *losses, float *lse, const float *logits,
                                   const int32_t *targets, int N, int V) {
    /* losses (N); lse (N); logits (N,V); targets (N) */
#pragma omp parallel for schedule(static) if ((size_t)N * V >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *restrict l = logits + (size_t)n * V; /* (V) */

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

/* dlogits may be logits (in place): each element is read before it is written. */
void tlm_cpu_cross_entropy_backward(tlm_backend *be, float *dlogits, const float *logits,
                                    const float *lse, const int32_t *targets, int N, int V,
                                    float dloss) {
    /* dlogits (N,V); logits (N,V); lse (N); targets (N) */
#pragma omp parallel for schedule(static) if ((size_t)N * V >= TLM_CPU_GRAIN)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V; /* (V) */
        float *dl = dlogits + (size_t)n * V;     /* (V) */
        float logsumexp = lse[n];
        int target = targets[n];
        float p_target = tlm_cpu_expf(l[target] - logsumexp);

        /* dl = dloss * softmax(l), then the one-hot term at the target */
#pragma omp simd
        for (int j = 0; j < V; j++) dl[j] = dloss * tlm_cpu_expf(l[j] - logsumexp);
        dl[target] = dloss * (p_target - 1.0f);
    }
}
