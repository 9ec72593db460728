/* swiglu.cu — the elementwise part of the SwiGLU feed-forward on the GPU (Shazeer 2020, "GLU
 * Variants Improve Transformer", eq. 6): out = silu(a) * b with a = w1 x, b = w3 x side by side in
 * one (N, 2F) buffer, silu(a) = a sigmoid(a); and its backward,
 * [da | db] = [dout * b * silu'(a), dout * silu(a)], silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
 * Tensors of the mode's dtype (fp32, bf16, fp16), computed in fp32 from the widened inputs and
 * rounded back to nearest even. Grid-stride over the N*F outputs, 16-byte accesses where F is a
 * multiple of the vector (4 fp32, 8 bf16/fp16).
 * Also the op matmul_swiglu_backward (d_g's GEMM with SwiGLU's backward): the fused CUTLASS kernel
 * of gemm_swiglu.cu where it runs (bf16, compute capability 9.0, C and F multiples of 8), else
 * cuBLASLt (matmul.cu's tlm_cuda_gemm) and the kernel above. (The forward's fusion, b's GEMM with
 * the product in its epilogue, lost on one H100: it needs W1's and W3's GEMMs apart, and small's
 * forward took 1.095x as long, 2.7B's 1.002x; bench/results/2026-11-28-speed.)
 * The arithmetic itself is in swiglu.cuh, shared with the fused epilogues. */
#include "cuda/cuda_common.cuh"
#include "cuda/gemm_swiglu.h"
#include "cuda/swiglu.cuh"

/* forward (dout == NULL): y (N,F) = silu(a) * b; backward: y (N,2F) = [da | db] from dout (N,F).
 * ab (N,2F) = [a | b]; total = N*F/VEC work items */
template <int VEC, typename T, bool BACKWARD>
__global__ void swiglu_kernel(T *y, const T *dout, const T *ab, int F, size_t total) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    const int fv = F / VEC;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t n = idx / fv;
        const int j = (int)(idx % fv) * VEC;
        const T *an = ab + n * 2 * F + j;
        float a[VEC], b[VEC];
        tlm_load<VEC>(a, an);
        tlm_load<VEC>(b, an + F);
        if constexpr (!BACKWARD) {
            float o[VEC];
#pragma unroll
            for (int i = 0; i < VEC; i++) o[i] = tlm_swiglu_forward_elem(a[i], b[i]);
            tlm_store<VEC>(y + n * F + j, o);
        } else {
            float d[VEC], da[VEC], db[VEC];
            tlm_load<VEC>(d, dout + n * F + j);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                da[i] = tlm_swiglu_da(d[i], a[i], b[i]);
                db[i] = tlm_swiglu_db(d[i], a[i]);
            }
            T *dan = y + n * 2 * F + j;
            tlm_store<VEC>(dan, da);
            tlm_store<VEC>(dan + F, db);
        }
    }
}

template <bool BACKWARD>
static void swiglu_launch(tlm_backend *be, const char *op, void *y, const void *dout, const void *ab, int N, int F,
                          tlm_dtype dt) {
    if (N <= 0 || F <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_launch_vec(dt, op, F, [&](auto tag, auto vec) {
        using T = typename decltype(tag)::type;
        constexpr int V = decltype(vec)::value;
        const size_t total = (size_t)N * F / V;
        tlm_cuda_launch("swiglu", be, swiglu_kernel<V, T, BACKWARD>, dim3(tlm_cuda_grid(be, total, threads)),
                        dim3(threads), 0, st, static_cast<T *>(y), static_cast<const T *>(dout),
                        static_cast<const T *>(ab), F, total);
    }, y, BACKWARD ? dout : ab, ab);
}

void tlm_cuda_swiglu_forward(tlm_backend *be, void *out, const void *ab, int N, int F, tlm_dtype dt) {
    swiglu_launch<false>(be, __func__, out, NULL, ab, N, F, dt);
}

void tlm_cuda_swiglu_backward(tlm_backend *be, void *dab, const void *dout, const void *ab, int N, int F,
                              tlm_dtype dt) {
    swiglu_launch<true>(be, __func__, dab, dout, ab, N, F, dt);
}

/* ---- the SwiGLU feed-forward's backward GEMM with SwiGLU's backward (ops.def) ------------------- */

#ifndef TLM_HAVE_CUTLASS
bool tlm_cuda_cutlass_swiglu_backward(tlm_backend *, void *, const void *, const void *, const void *, int, int,
                                      int) {
    return false; /* built without CUTLASS (CMake says so at configure) */
}
#endif

const char *tlm_cuda_matmul_swiglu_refusal(int C, int F, tlm_dtype dt) {
#ifndef TLM_HAVE_CUTLASS
    (void)C, (void)F, (void)dt;
    return "built without CUTLASS (CMake did not find its headers)";
#else
    if (dt != TLM_DTYPE_BF16) return "the dtype is not bf16";
    if (C % 8 != 0 || F % 8 != 0) return "C or F is not a multiple of 8 (TMA's 16-byte rows)";
    static int cc[64]; /* major * 10 + minor per device, 0 until asked */
    int dev = 0;
    TLM_CUDA_CHECK_OP("matmul_swiglu", cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return "device ordinal beyond 63";
    if (!cc[dev]) {
        int major = 0, minor = 0;
        TLM_CUDA_CHECK_OP("matmul_swiglu", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        TLM_CUDA_CHECK_OP("matmul_swiglu", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        cc[dev] = major * 10 + minor;
    }
    return cc[dev] == 90 ? NULL : "the device is not compute capability 9.0 (the kernels are sm_90a code)";
#endif
}

static unsigned long long fused_calls;
unsigned long long tlm_cuda_matmul_swiglu_fused_calls(void) { return fused_calls; }

/* the fused kernels take the call: tlm_cuda_matmul_swiglu_refusal says none, every tensor 16-byte aligned */
static bool fused_ok(const void *p0, const void *p1, const void *p2, const void *p3, int C, int F, tlm_precision p) {
    if (((uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3) % 16 != 0) return false;
    return tlm_cuda_matmul_swiglu_refusal(C, F, tlm_precision_act_dtype(p)) == NULL;
}

void tlm_cuda_matmul_swiglu_backward(tlm_backend *be, void *dab, void *dg, const void *dy, const void *w2,
                                     const void *ab, int N, int C, int F, tlm_precision p) {
    if (N <= 0 || F <= 0) return;
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    if (fused_ok(dab, dy, w2, ab, C, F, p) && tlm_cuda_cutlass_swiglu_backward(be, dab, dy, w2, ab, N, C, F)) {
        fused_calls++;
        return;
    }
    /* d_g (N,F) = dy (N,C) W2 (C,F) (as matmul_backward's dx), then the elementwise backward */
    tlm_cuda_gemm(be, "matmul_swiglu_backward", false, false, N, F, C, 1.0f, dy, C, 0, w2, F, 0, dt, 0.0f, NULL, dg, F,
                  0, dt, 1, p == TLM_PRECISION_TF32);
    tlm_cuda_swiglu_backward(be, dab, dg, ab, N, F, dt);
}
