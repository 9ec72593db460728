/* rope.c — rotary position embedding on the CPU (Su et al. 2021, RoFormer, eq. 34), pairs
 * interleaved, in place: (x[2k], x[2k+1]) is rotated by the angle theta_{t,k} whose cos and
 * sin are tabled (T_max, D/2); the backward rotates the gradient by -theta_{t,k}.
 * x is dt: each row's heads are read as fp32, rotated in fp32 and rounded back to dt. */
#include "cpu/cpu_ops.h"

/* Rotates every pair of the nheads heads of each row by +theta (sign = 1) or -theta (sign = -1). */
static void rope_rotate(tlm_backend *be, void *x, const float *cos, const float *sin, int B,
                        int T, int nheads, int D, int ld, float sign, tlm_dtype dt) {
    /* x (B*T rows, row stride ld) dt, heads at columns h*D..h*D+D-1; cos, sin (T_max, D/2) */
    int half = D / 2;
    size_t width = (size_t)nheads * D; /* the columns rotated, from 0 */
    tlm_cpu_thread_scratch rows =
        tlm_cpu_scratch_per_thread(be, dt == TLM_DTYPE_F32 ? 0 : width, "rope");
#pragma omp parallel for schedule(static) if ((size_t)B * T * nheads * D >= TLM_CPU_GRAIN)
    for (int n = 0; n < B * T; n++) {
        int t = n % T;
        const float *restrict c = cos + (size_t)t * half; /* (D/2) */
        const float *restrict s = sin + (size_t)t * half; /* (D/2) */
        float *row = tlm_cpu_row_inout(x, (size_t)n * ld, width, dt, tlm_cpu_thread_buf(rows, 0));
        for (int h = 0; h < nheads; h++) {
            float *restrict xh = row + (size_t)h * D; /* (D) */
            for (int k = 0; k < half; k++) {
                float x1 = xh[2 * k], x2 = xh[2 * k + 1];
                float sk = sign * s[k];
                xh[2 * k] = c[k] * x1 - sk * x2;
                xh[2 * k + 1] = sk * x1 + c[k] * x2;
            }
        }
        tlm_cpu_row_done(x, (size_t)n * ld, row, width, dt);
    }
}

void tlm_cpu_rope_forward(tlm_backend *be, void *x, const float *cos, const float *sin,
                          int B, int T, int nheads, int D, int ld, tlm_dtype dt) {
    rope_rotate(be, x, cos, sin, B, T, nheads, D, ld, 1.0f, dt);
}

/* The rotation is orthogonal: its transpose, the rotation by -theta, maps dout to dx. */
void tlm_cpu_rope_backward(tlm_backend *be, void *dx, const float *cos, const float *sin,
                           int B, int T, int nheads, int D, int ld, tlm_dtype dt) {
    rope_rotate(be, dx, cos, sin, B, T, nheads, D, ld, -1.0f, dt);
}
