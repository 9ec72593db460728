/* adamw.c — the optimizer step on the CPU: one AdamW step, the CS336 version of Loshchilov &
 * Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2 (the bias corrections
 * folded into the step size a_t, and the decay applied after the update, to the updated
 * parameters); and, before it in fp16, the loss scaling's unscale of the gradients. */
#include "cpu/cpu_ops.h"

#include <math.h>

/* Elements per work item: the update of a block, then (bf16/fp16) its rounding into the GEMM
 * copy while the block is in cache. */
#define ADAMW_BLOCK 8192

void tlm_cpu_adamw_step(tlm_backend *be, float *params, const float *grads, float grad_scale, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int t, void *params_lp, tlm_dtype dt) {
    /* params, grads, m, v (n); step t >= 1; params_lp (n) dt or NULL */
    /* a_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), computed in double */
    float a_t = (float)((double)lr * sqrt(1.0 - pow((double)beta2, t)) /
                        (1.0 - pow((double)beta1, t)));
    float decay = lr * weight_decay;
    float *restrict p = params, *restrict mm = m, *restrict vv = v;
    const float *restrict g = grads;

    size_t nblocks = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
#pragma omp parallel for schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * ADAMW_BLOCK, i1 = n - i0 < ADAMW_BLOCK ? n : i0 + ADAMW_BLOCK;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
            const float gi = g[i] * grad_scale; /* exact when grad_scale is 1 */
            mm[i] = beta1 * mm[i] + (1.0f - beta1) * gi;
            vv[i] = beta2 * vv[i] + (1.0f - beta2) * gi * gi;
            float pi = p[i] - a_t * mm[i] / (sqrtf(vv[i]) + eps);
            p[i] = pi - decay * pi;
        }
        if (params_lp) tlm_cpu_narrow(params_lp, i0, p + i0, i1 - i0, dt); /* round(p) */
    }
}

/* GradScaler's unscale (PyTorch torch.cuda.amp): grads *= inv_scale, and found_inf += the number
 * of elements that are inf or NaN afterwards (the step is skipped when there is any). */
void tlm_cpu_grad_unscale(tlm_backend *be, float *grads, size_t n, float inv_scale, float *found_inf) {
    /* grads (n) float32; found_inf (1) float32 */
    size_t nonfinite = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : nonfinite) if (n >= TLM_CPU_GRAIN)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * inv_scale;
        grads[i] = g;
        nonfinite += (tlm_f32_bits(g) & 0x7f800000u) == 0x7f800000u; /* exponent all ones */
    }
    *found_inf += (float)nonfinite;
}
