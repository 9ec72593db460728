/* adamw.cu — one AdamW step on the GPU, the CS336 version of Loshchilov & Hutter 2019, "Decoupled
 * Weight Decay Regularization", Algorithm 2: the bias corrections folded into the step size a_t
 * (computed on the host in double, as the CPU backend does), the decay applied after the update,
 * to the updated parameters. One launch over the flat buffers, 16-byte accesses when all four
 * buffers are 16-byte aligned (a scalar tail for n % 4): per parameter 16 bytes read, 12 written,
 * the bandwidth floor. One thread per 4 parameters, no grid cap: the blocks are short, so where the
 * update runs beside the backward on a background stream (model.h's overlapped optimizer) the
 * backward's kernels get the SMs as each block ends (a grid sized to fill the SMs once, each thread
 * striding over the buffer, would hold them for the whole update); alone it is also 9-10% faster
 * (H200, bench/results/h200-2026-11-25-overlap). sqrt and the division are IEEE-rounded
 * (__fsqrt_rn, __fdiv_rn) despite --use_fast_math, to match the CPU; they cost nothing in a
 * memory-bound loop. */
#include <math.h>

#include <type_traits>

#include "cuda/cuda_common.cuh"

struct adamw_args {
    float grad_scale, beta1, beta2, one_minus_beta1, one_minus_beta2, a_t, eps, decay;
};

__device__ __forceinline__ void adamw_update(float &p, float g_raw, float &m, float &v, const adamw_args &a) {
    const float g = __fmul_rn(g_raw, a.grad_scale); /* rounded on its own, as the CPU (no fused multiply-add) */
    m = a.beta1 * m + a.one_minus_beta1 * g;
    v = a.beta2 * v + a.one_minus_beta2 * g * g;
    const float pi = p - __fdiv_rn(a.a_t * m, __fsqrt_rn(v) + a.eps); /* (a_t m) / (...), as the CPU */
    p = pi - a.decay * pi;
}

/* LP: the element type of the GEMM copy written in the same pass (float: none) */
template <bool VEC4, typename LP>
__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n, adamw_args a,
                             LP *params_lp) {
    /* params, grads, m, v (n); params_lp (n) or NULL */
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if constexpr (VEC4) {
        const size_t n4 = n / 4;
        float4 *p4 = reinterpret_cast<float4 *>(params), *m4 = reinterpret_cast<float4 *>(m);
        float4 *v4 = reinterpret_cast<float4 *>(v);
        const float4 *g4 = reinterpret_cast<const float4 *>(grads);
        for (size_t i = first; i < n4; i += stride) {
            float4 p = p4[i], g = __ldcs(g4 + i), mm = m4[i], vv = v4[i]; /* g: read once, streamed */
            adamw_update(p.x, g.x, mm.x, vv.x, a);
            adamw_update(p.y, g.y, mm.y, vv.y, a);
            adamw_update(p.z, g.z, mm.z, vv.z, a);
            adamw_update(p.w, g.w, mm.w, vv.w, a);
            p4[i] = p;
            __stcs(m4 + i, mm); /* m, v: not read again this step */
            __stcs(v4 + i, vv);
            if constexpr (!std::is_same<LP, float>::value) {
                const size_t j = 4 * i;
                params_lp[j] = tlm_round<LP>(p.x);
                params_lp[j + 1] = tlm_round<LP>(p.y);
                params_lp[j + 2] = tlm_round<LP>(p.z);
                params_lp[j + 3] = tlm_round<LP>(p.w);
            }
        }
        done = n4 * 4;
    }
    for (size_t i = done + first; i < n; i += stride) {
        float p = params[i], mm = m[i], vv = v[i];
        adamw_update(p, grads[i], mm, vv, a);
        params[i] = p;
        m[i] = mm;
        v[i] = vv;
        if constexpr (!std::is_same<LP, float>::value) params_lp[i] = tlm_round<LP>(p);
    }
}

template <typename LP>
static void launch_adamw(tlm_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         const adamw_args &a, LP *params_lp) {
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    if (tlm_aligned16(params) && tlm_aligned16(grads) && tlm_aligned16(m) && tlm_aligned16(v)) {
        adamw_kernel<true, LP><<<tlm_cuda_grid_all((n + 3) / 4, threads), threads, 0, st>>>(params, grads, m, v, n, a,
                                                                                             params_lp);
    } else {
        adamw_kernel<false, LP><<<tlm_cuda_grid_all(n, threads), threads, 0, st>>>(params, grads, m, v, n, a,
                                                                                   params_lp);
    }
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_adamw_step(tlm_backend *be, float *params, const float *grads, float grad_scale, float *m, float *v,
                         size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                         void *params_lp, tlm_dtype dt) {
    if (n == 0) return;
    adamw_args a;
    a.grad_scale = grad_scale;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.one_minus_beta1 = 1.0f - beta1;
    a.one_minus_beta2 = 1.0f - beta2;
    /* a_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), computed in double as on the CPU */
    a.a_t = (float)((double)lr * sqrt(1.0 - pow((double)beta2, t)) / (1.0 - pow((double)beta1, t)));
    a.eps = eps;
    a.decay = lr * weight_decay;
    if (!params_lp || dt == TLM_DTYPE_F32) launch_adamw<float>(be, params, grads, m, v, n, a, nullptr);
    else if (dt == TLM_DTYPE_BF16) launch_adamw(be, params, grads, m, v, n, a, static_cast<__nv_bfloat16 *>(params_lp));
    else launch_adamw(be, params, grads, m, v, n, a, static_cast<__half *>(params_lp));
}
