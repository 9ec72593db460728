/* precision_lab.cu — the accumulation experiment of `tlm precision accumulate` (docs/experiments.md) on
 * the GPU: 0.01 added a thousand times in the six ways of precision_lab.h, by one thread (the adds
 * are sequential by nature), with the GPU's own arithmetic: __fadd_rn for fp32, __hadd on __half
 * and __nv_bfloat16 (one rounding to nearest even per add), __float2half_rn / __float2bfloat16_rn
 * for the addend, __half2float / __bfloat162float for type promotion. The value comes in as a
 * kernel argument, so nvcc cannot fold the loops at compile time. Every partial sum is written
 * out (widened to float, exact), for the same analysis as the CPU's. */
#include "cuda/cuda_common.cuh"
#include "tlm/precision_lab.h"

/* s = 0, then s = s + x (x = value rounded to L) `steps` times, in L arithmetic (__hadd: one rounding
 * to nearest even per add); p[0..steps] the partial sums widened (exact) */
template <typename L>
__device__ void accumulate_lowp(float *p, float *addend, float value, int steps) {
    const L x = tlm_round<L>(value);
    L s = tlm_round<L>(0.0f);
    p[0] = tlm_f32(s);
    for (int i = 1; i <= steps; i++) {
        s = __hadd(s, x);
        p[i] = tlm_f32(s);
    }
    *addend = tlm_f32(x);
}

/* s = 0.0f, then s = s + fp32(x) (x = value rounded to L: an fp32 value when L is float) in fp32
 * arithmetic (__fadd_rn) `steps` times; `cast_first` widens x to a float variable inside the loop
 * (PyTorch's x.float() before the add) instead of in the add's expression (type promotion): the
 * same bits, two ways the seeds wrote it */
template <typename L>
__device__ void accumulate_fp32(float *p, float *addend, float value, int steps, bool cast_first) {
    const L x = tlm_round<L>(value);
    float s = 0.0f;
    p[0] = s;
    for (int i = 1; i <= steps; i++) {
        if (cast_first) {
            const float x32 = tlm_f32(x);
            p[i] = s = __fadd_rn(s, x32);
        } else {
            p[i] = s = __fadd_rn(s, tlm_f32(x));
        }
    }
    *addend = tlm_f32(x);
}

__global__ void accumulate_kernel(float *addend, float *partial, float value, int steps) {
    /* addend (TLM_ACC_NUM_WAYS); partial (TLM_ACC_NUM_WAYS, steps + 1); one thread */
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const size_t ld = (size_t)steps + 1;
#define WAY(w) partial + (w) * ld, addend + (w), value, steps
    accumulate_fp32<float>(WAY(TLM_ACC_FP32_INTO_FP32), false);          /* fp32 += fp32 */
    accumulate_lowp<__half>(WAY(TLM_ACC_FP16_INTO_FP16));                 /* fp16 += fp16 */
    accumulate_fp32<__half>(WAY(TLM_ACC_FP16_INTO_FP32), false);         /* fp32 += fp16: promotion */
    accumulate_fp32<__half>(WAY(TLM_ACC_FP16_CAST_INTO_FP32), true);     /* fp32 += fp32(fp16) */
    accumulate_lowp<__nv_bfloat16>(WAY(TLM_ACC_BF16_INTO_BF16));          /* bf16 += bf16 */
    accumulate_fp32<__nv_bfloat16>(WAY(TLM_ACC_BF16_INTO_FP32), false);  /* fp32 += bf16: promotion */
#undef WAY
}

extern "C" tlm_status tlm_accumulate_run_cuda(tlm_backend *be, double value, tlm_accumulation *out) {
    if (be->kind != TLM_DEVICE_CUDA)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "tlm_accumulate_run_cuda: backend '%s' is not CUDA", be->name);
    const size_t n_addend = TLM_ACC_NUM_WAYS, n_partial = (size_t)TLM_ACC_NUM_WAYS * (TLM_ACCUMULATE_STEPS + 1);
    float *d = (float *)tlm_alloc(be, (n_addend + n_partial) * sizeof(float), TLM_MEM_WORKSPACE,
                                  "precision.accumulate");
    if (!d) return TLM_ERR_OUT_OF_MEMORY; /* tlm_alloc set the message */
    accumulate_kernel<<<1, 1, 0, tlm_cuda_stream(be)>>>(d, d + n_addend, (float)value, TLM_ACCUMULATE_STEPS);
    TLM_CUDA_CHECK_LAUNCH();
    tlm_copy_to_host(be, out->addend, d, n_addend * sizeof(float));
    tlm_copy_to_host(be, out->partial, d + n_addend, n_partial * sizeof(float));
    tlm_free(be, d);
    return TLM_OK;
}
