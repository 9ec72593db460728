/* gemm_swiglu.h — the SwiGLU GEMMs' fused path on CUDA (gemm_swiglu.cu, CUTLASS; the ops
 * matmul_swiglu_backward in swiglu.cu chooses it): C linkage, so that the
 * GPU test (tests/test_gpu_swiglu_gemm.c) can ask which path a call takes. */
#ifndef TLM_CUDA_GEMM_SWIGLU_H
#define TLM_CUDA_GEMM_SWIGLU_H

#include <stdbool.h>

#include "tlm/backend.h"
#include "tlm/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when the matmul_swiglu_backward op on the current device take the fused CUTLASS kernels for inner
 * size C, d_ff F and activations dt (tensors 16-byte aligned, as every tlm_alloc is); else why not:
 * built without CUTLASS, a device other than compute capability 9.0 (the kernels are sm_90a code),
 * a dtype other than bf16, C or F not a multiple of 8 (TMA's 16-byte rows). */
const char *tlm_cuda_matmul_swiglu_refusal(int C, int F, tlm_dtype dt);

/* How many matmul_swiglu_backward calls the fused kernel have run in this process:
 * the test's evidence that CUTLASS did not decline a call it was given (not synchronized: one thread). */
unsigned long long tlm_cuda_matmul_swiglu_fused_calls(void);

/* The fused GEMM (gemm_swiglu.cu), bf16, on the backend's stream; semantics in gemm_swiglu.cu's
 * header. false, having launched nothing, when CUTLASS declines the arguments (or the build has
 * no CUTLASS): the caller then runs the unfused ops. w2 = W2 (C,F). */
bool tlm_cuda_cutlass_swiglu_backward(tlm_backend *be, void *dab, const void *dy, const void *w2, const void *ab, int N,
                                      int C, int F);

#ifdef __cplusplus
}
#endif

#endif
