/* precision_lab.cu — the accumulation experiment of `tlm precision accumulate` (SPEC.md §2.3) on
 * the GPU: 0.01 added a thousand times in the six ways of precision_lab.h, by one thread (the adds
 * are sequential by nature), with the GPU's own arithmetic: __fadd_rn for fp32, __hadd on __half
 * and __nv_bfloat16 (one rounding to nearest even per add), __float2half_rn / __float2bfloat16_rn
 * for the addend, __half2float / __bfloat162float for type promotion. The value comes in as a
 * kernel argument, so nvcc cannot fold the loops at compile time. Every partial sum is written
 * out (widened to float, exact), for the same analysis as the CPU's. */
#include "cuda/cuda_common.cuh"
#include "tlm/precision_lab.h"

__global__ void accumulate_kernel(float *addend, float *partial, float value, int steps) {
    /* addend (TLM_ACC_NUM_WAYS); partial (TLM_ACC_NUM_WAYS, steps + 1); one thread */
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const size_t ld = (size_t)steps + 1;
    { /* fp32 += fp32 */
        float *p = partial + TLM_ACC_FP32_INTO_FP32 * ld, s = 0.0f;
        const float x = value;
        p[0] = s;
        for (int i = 1; i <= steps; i++) p[i] = s = __fadd_rn(s, x);
        addend[TLM_ACC_FP32_INTO_FP32] = x;
    }
    { /* fp16 += fp16 */
        float *p = partial + TLM_ACC_FP16_INTO_FP16 * ld;
        const __half x = __float2half_rn(value);
        __half s = __float2half_rn(0.0f);
        p[0] = __half2float(s);
        for (int i = 1; i <= steps; i++) {
            s = __hadd(s, x);
            p[i] = __half2float(s);
        }
        addend[TLM_ACC_FP16_INTO_FP16] = __half2float(x);
    }
    { /* fp32 += fp16: promotion */
        float *p = partial + TLM_ACC_FP16_INTO_FP32 * ld, s = 0.0f;
        const __half x = __float2half_rn(value);
        p[0] = s;
        for (int i = 1; i <= steps; i++) p[i] = s = __fadd_rn(s, __half2float(x));
        addend[TLM_ACC_FP16_INTO_FP32] = __half2float(x);
    }
    { /* fp32 += fp32(fp16): converted first */
        float *p = partial + TLM_ACC_FP16_CAST_INTO_FP32 * ld, s = 0.0f;
        const __half x = __float2half_rn(value);
        p[0] = s;
        for (int i = 1; i <= steps; i++) {
            const float x32 = __half2float(x);
            p[i] = s = __fadd_rn(s, x32);
        }
        addend[TLM_ACC_FP16_CAST_INTO_FP32] = __half2float(x);
    }
    { /* bf16 += bf16 */
        float *p = partial + TLM_ACC_BF16_INTO_BF16 * ld;
        const __nv_bfloat16 x = __float2bfloat16_rn(value);
        __nv_bfloat16 s = __float2bfloat16_rn(0.0f);
        p[0] = __bfloat162float(s);
        for (int i = 1; i <= steps; i++) {
            s = __hadd(s, x);
            p[i] = __bfloat162float(s);
        }
        addend[TLM_ACC_BF16_INTO_BF16] = __bfloat162float(x);
    }
    { /* fp32 += bf16: promotion */
        float *p = partial + TLM_ACC_BF16_INTO_FP32 * ld, s = 0.0f;
        const __nv_bfloat16 x = __float2bfloat16_rn(value);
        p[0] = s;
        for (int i = 1; i <= steps; i++) p[i] = s = __fadd_rn(s, __bfloat162float(x));
        addend[TLM_ACC_BF16_INTO_FP32] = __bfloat162float(x);
    }
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
