/* matmul.c — the linear layer without bias on the CPU, y = x W^T with W (out,in) as
 * nn.Linear stores it, and its backward; each is one or two row-major SGEMMs of OpenBLAS.
 *
 * fp32 (dt == F32): the SGEMMs run on the tensors themselves.
 * bf16/fp16: the operands are widened to float32 in the scratch arena (exact), the SGEMM
 * accumulates in fp32, and a dt output is rounded once (nearest even) — the same numbers as a
 * tensor-core GEMM with fp32 accumulation, up to the order of the sums. Float32 outputs (the
 * residual stream, the weight gradient) take the fp32 result as it is; a bf16 weight gradient
 * (ops.def: dw_dt) is the fp32 result rounded once, in the scratch arena first. */
#include "cpu/cpu_ops.h"

#include <cblas.h>

void tlm_cpu_matmul_forward(tlm_backend *be, void *y, const float *residual, const void *x,
                            const void *w, int N, int in, int out, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p); /* TF32 is computed as fp32 on the CPU */
    /* y (N,out) = [residual (N,out) +] x (N,in) . W^T, W (out,in) */
    const size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    const float *xf = x, *wf = w;
    float *yf = y; /* where the SGEMM writes: y itself when float32 */
    if (dt != TLM_DTYPE_F32) {
        float *s = tlm_cpu_scratch(be, (nx + nw + (residual ? 0 : ny)) * sizeof(float),
                                   "matmul_forward");
        tlm_cpu_to_f32(s, x, nx, dt);
        tlm_cpu_to_f32(s + nx, w, nw, dt);
        xf = s;
        wf = s + nx;
        if (!residual) yf = s + nx + nw;
    }
    if (residual) {
        /* y (float32) = residual + x W^T: the SGEMM accumulates onto y (beta = 1) */
        tlm_cpu_to_f32(y, residual, ny, TLM_DTYPE_F32); /* a parallel copy; none if y == residual */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in,
                    1.0f, xf, in, wf, in, 1.0f, y, out);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in,
                1.0f, xf, in, wf, in, 0.0f, yf, out);
    if (dt != TLM_DTYPE_F32) tlm_cpu_from_f32(y, yf, ny, dt);
}

void tlm_cpu_matmul_backward(tlm_backend *be, void *dx, void *dw, tlm_dtype dw_dt, const void *dy,
                             const void *x, const void *w, int N, int in, int out, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p); /* TF32 is computed as fp32 on the CPU */
    const size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    const bool dw_lp = dw && dw_dt != TLM_DTYPE_F32; /* dW rounded from an fp32 copy (ops.def: bf16) */
    const float *dyf = dy, *xf = x, *wf = w;
    float *dxf = dx, *dwf = dw; /* where the SGEMMs write: dx, dw themselves when float32 */
    if (dt != TLM_DTYPE_F32 || dw_lp) {
        /* dy, x and (for dx) W widened; dx computed into x's copy, after dW has used it; a bf16 dW's
         * fp32 result after them */
        const size_t widened = dt != TLM_DTYPE_F32 ? ny + nx + (dx ? nw : 0) : 0;
        float *s = tlm_cpu_scratch(be, (widened + (dw_lp ? nw : 0)) * sizeof(float), "matmul_backward");
        if (dt != TLM_DTYPE_F32) {
            tlm_cpu_to_f32(s, dy, ny, dt);
            if (dw) tlm_cpu_to_f32(s + ny, x, nx, dt);
            if (dx) tlm_cpu_to_f32(s + ny + nx, w, nw, dt);
            dyf = s;
            xf = s + ny;
            wf = s + ny + nx;
            dxf = s + ny;
        }
        if (dw_lp) dwf = s + widened;
    }
    /* dW (out,in) float32 = (or += with be->accumulate_grads) dy^T (out,N) . x (N,in), then rounded
     * once when dw_dt is 16-bit (accumulation is float32 only: ops.def) */
    if (dw) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N,
                    1.0f, dyf, out, xf, in, be->accumulate_grads && !dw_lp ? 1.0f : 0.0f, dwf, in);
        if (dw_lp) tlm_cpu_from_f32(dw, dwf, nw, dw_dt);
    }
    /* dx (N,in) = dy (N,out) . W (out,in) */
    if (dx) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out,
                    1.0f, dyf, out, wf, in, 0.0f, dxf, in);
        if (dt != TLM_DTYPE_F32) tlm_cpu_from_f32(dx, dxf, nx, dt);
    }
}
