/* adamw.c — one AdamW step on the CPU, the CS336 version of Loshchilov & Hutter 2019,
 * "Decoupled Weight Decay Regularization", Algorithm 2: the bias corrections folded into the
 * step size a_t, and the decay applied after the update, to the updated parameters. */
#include "cpu/cpu_ops.h"

#include <math.h>

void tlm_cpu_adamw_step(tlm_backend *be, float *params, const float *grads, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int t) {
    /* params, grads, m, v (n); step t >= 1 */
    /* a_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), computed in double */
    float a_t = (float)((double)lr * sqrt(1.0 - pow((double)beta2, t)) /
                        (1.0 - pow((double)beta1, t)));
    float decay = lr * weight_decay;
    float *restrict p = params, *restrict mm = m, *restrict vv = v;
    const float *restrict g = grads;

#pragma omp parallel for simd schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t i = 0; i < n; i++) {
        mm[i] = beta1 * mm[i] + (1.0f - beta1) * g[i];
        vv[i] = beta2 * vv[i] + (1.0f - beta2) * g[i] * g[i];
        float pi = p[i] - a_t * mm[i] / (sqrtf(vv[i]) + eps);
        p[i] = pi - decay * pi;
    }
}
