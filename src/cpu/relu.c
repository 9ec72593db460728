/* relu.c — ReLU on the CPU, out = max(x, 0), and its backward, dx = 0 where x <= 0, else dout.
 * Not part of the CS336 model: the ToyModel of `tlm precision autocast` uses it. Tensors of the
 * mode's dtype (fp32, bf16, fp16), kept in it (autocast leaves ReLU alone); the result is exact
 * in every dtype (a value or 0), so the widen-compute-round path of the other ops changes
 * nothing. NaN stays NaN (x < 0 is false for NaN), as in PyTorch. Elementwise, in parallel over
 * blocks of the tensor. */
#include "cpu/cpu_ops.h"

/* Elements per work item (and per thread's scratch slice on the 16-bit paths). */
#define RELU_BLOCK 4096

/* forward (dout == NULL): y = max(x, 0); backward: y = x <= 0 ? 0 : dout (PyTorch's
 * threshold_backward: a NaN x passes dout). y, dout, x (n) dt; y may equal x (forward) or dout */
static void relu(tlm_backend *be, const char *op, void *y, const void *dout, const void *x, size_t n, tlm_dtype dt) {
    const int ins = dout ? 2 : 1; /* scratch slices: the inputs, then the output */
    tlm_cpu_thread_scratch s = tlm_cpu_scratch_per_thread(be, dt == TLM_DTYPE_F32 ? 0 : (ins + 1) * RELU_BLOCK, op);
    const size_t nblocks = (n + RELU_BLOCK - 1) / RELU_BLOCK;
#pragma omp parallel for schedule(static) if (n >= TLM_CPU_GRAIN)
    for (size_t blk = 0; blk < nblocks; blk++) {
        const size_t i0 = blk * RELU_BLOCK, count = n - i0 < RELU_BLOCK ? n - i0 : RELU_BLOCK;
        const float *xb = tlm_cpu_row_in(x, i0, count, dt, tlm_cpu_thread_buf(s, 0));
        float *yb = tlm_cpu_row_out(y, i0, dt, tlm_cpu_thread_buf(s, ins * RELU_BLOCK));
        if (dout) {
            const float *db = tlm_cpu_row_in(dout, i0, count, dt, tlm_cpu_thread_buf(s, RELU_BLOCK));
            for (size_t i = 0; i < count; i++) yb[i] = xb[i] <= 0.0f ? 0.0f : db[i];
        } else {
            for (size_t i = 0; i < count; i++) yb[i] = xb[i] < 0.0f ? 0.0f : xb[i];
        }
        tlm_cpu_row_done(y, i0, yb, count, dt);
    }
}

void tlm_cpu_relu_forward(tlm_backend *be, void *out, const void *x, size_t n, tlm_dtype dt) {
    relu(be, "relu_forward", out, NULL, x, n, dt);
}

void tlm_cpu_relu_backward(tlm_backend *be, void *dx, const void *dout, const void *x, size_t n, tlm_dtype dt) {
    relu(be, "relu_backward", dx, dout, x, n, dt);
}
