/* matmul.c — the linear layer without bias on the CPU, y = x W^T with W (out,in) as
 * nn.Linear stores it, and its backward; each is one or two row-major SGEMMs of OpenBLAS. */
#include "cpu/cpu_ops.h"

#include <cblas.h>

void tlm_cpu_matmul_forward(tlm_backend *be, float *y, const float *x, const float *w,
                            int N, int in, int out) {
    /* y (N,out) = x (N,in) . W^T, W (out,in) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in,
                1.0f, x, in, w, in, 0.0f, y, out);
}

void tlm_cpu_matmul_backward(tlm_backend *be, float *dx, float *dw, const float *dy,
                             const float *x, const float *w, int N, int in, int out) {
    /* dx (N,in) = dy (N,out) . W (out,in) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out,
                    1.0f, dy, out, w, in, 0.0f, dx, in);
    /* dW (out,in) = dy^T (out,N) . x (N,in) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N,
                1.0f, dy, out, x, in, 0.0f, dw, in);
}
