/* rope.cu — rotary position embedding on the GPU (Su et al. 2021, RoFormer, eq. 34), pairs
 * interleaved, in place: (x[2k], x[2k+1]) is rotated by the angle theta_{t,k} whose cos and sin
 * are tabled (T_max, D/2); the backward rotates the gradient by -theta_{t,k} (the transpose of
 * an orthogonal rotation). One thread per PAIRS adjacent pairs (2 pairs = one 16-byte access),
 * grid-stride over all B*T rows x nheads heads. */
#include "cuda/cuda_common.cuh"

template <int PAIRS>
__global__ void rope_kernel(float *x, const float *cos, const float *sin, int T, int nheads, int half, int ld,
                            size_t total, float sign) {
    /* x (B*T rows, row stride ld), head h at columns h*2*half..; cos, sin (T_max, half) */
    const int groups = half / PAIRS; /* thread work items per head */
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int g = (int)(idx % groups);
        const size_t rest = idx / groups;
        const int h = (int)(rest % nheads);
        const size_t n = rest / nheads;
        const int t = (int)(n % T);
        const int k0 = g * PAIRS;
        float *p = x + n * ld + (size_t)h * 2 * half + 2 * k0;
        float v[2 * PAIRS], c[PAIRS], s[PAIRS];
        if constexpr (PAIRS == 2) {
            tlm_load<4>(v, p);
        } else {
            v[0] = p[0];
            v[1] = p[1];
        }
        tlm_load<PAIRS>(c, cos + (size_t)t * half + k0);
        tlm_load<PAIRS>(s, sin + (size_t)t * half + k0);
#pragma unroll
        for (int i = 0; i < PAIRS; i++) {
            const float x1 = v[2 * i], x2 = v[2 * i + 1], sk = sign * s[i];
            v[2 * i] = c[i] * x1 - sk * x2;
            v[2 * i + 1] = sk * x1 + c[i] * x2;
        }
        if constexpr (PAIRS == 2) {
            tlm_store<4>(p, v);
        } else {
            p[0] = v[0];
            p[1] = v[1];
        }
    }
}

static void rope(tlm_backend *be, float *x, const float *cos, const float *sin, int B, int T, int nheads, int D,
                 int ld, float sign) {
    const int half = D / 2;
    const size_t rows = (size_t)B * T;
    if (rows == 0 || nheads <= 0 || half <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    /* two pairs (16 bytes) per thread when every head's start is 16-byte aligned */
    if (half % 2 == 0 && ld % 4 == 0 && tlm_aligned16(x) && ((uintptr_t)cos & 7) == 0 &&
        ((uintptr_t)sin & 7) == 0) {
        const size_t total = rows * nheads * (half / 2);
        rope_kernel<2><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(x, cos, sin, T, nheads, half, ld,
                                                                             total, sign);
    } else {
        const size_t total = rows * nheads * half;
        rope_kernel<1><<<tlm_cuda_grid(be, total, threads), threads, 0, st>>>(x, cos, sin, T, nheads, half, ld,
                                                                             total, sign);
    }
}

void tlm_cuda_rope_forward(tlm_backend *be, float *x, const float *cos, const float *sin, int B, int T, int nheads,
                           int D, int ld) {
    rope(be, x, cos, sin, B, T, nheads, D, ld, 1.0f);
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_rope_backward(tlm_backend *be, float *dx, const float *cos, const float *sin, int B, int T,
                            int nheads, int D, int ld) {
    rope(be, dx, cos, sin, B, T, nheads, D, ld, -1.0f);
    TLM_CUDA_CHECK_LAUNCH();
}
