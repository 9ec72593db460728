/* rope.cu — rotary position embedding on the GPU (Su et al. 2021, RoFormer, eq. 34), pairs
 * interleaved, in place on x of the mode's dtype (fp32, bf16, fp16; the rotation computed in fp32
 * from the widened pair and rounded back to nearest even): (x[2k], x[2k+1]) is rotated by the
 * angle theta_{t,k} whose cos and sin are tabled in float32 (T_max, D/2); the backward rotates the
 * gradient by -theta_{t,k} (the transpose of an orthogonal rotation). One thread per PAIRS
 * adjacent pairs (one 16-byte access: 2 fp32 pairs, 4 bf16/fp16 pairs), grid-stride over all B*T
 * rows x nheads heads. */
#include "cuda/cuda_common.cuh"

template <int PAIRS, typename T>
__global__ void rope_kernel(T *x, const float *cos, const float *sin, int T_, int nheads, int half, int ld,
                            size_t total, float sign) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
    /* x (B*T rows, row stride ld), head h at columns h*2*half..; cos, sin (T_max, half) */
    const int groups = half / PAIRS; /* thread work items per head */
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int g = (int)(idx % groups);
        const size_t rest = idx / groups;
        const int h = (int)(rest % nheads);
        const size_t n = rest / nheads;
        const int t = (int)(n % T_);
        const int k0 = g * PAIRS;
        T *p = x + n * ld + (size_t)h * 2 * half + 2 * k0;
        float v[2 * PAIRS], c[PAIRS], s[PAIRS];
        if constexpr (PAIRS > 1) {
            tlm_load<2 * PAIRS>(v, p);
        } else { /* any alignment */
            v[0] = tlm_f32(p[0]);
            v[1] = tlm_f32(p[1]);
        }
        tlm_load<PAIRS>(c, cos + (size_t)t * half + k0);
        tlm_load<PAIRS>(s, sin + (size_t)t * half + k0);
#pragma unroll
        for (int i = 0; i < PAIRS; i++) {
            const float x1 = v[2 * i], x2 = v[2 * i + 1], sk = sign * s[i];
            v[2 * i] = c[i] * x1 - sk * x2;
            v[2 * i + 1] = sk * x1 + c[i] * x2;
        }
        if constexpr (PAIRS > 1) {
            tlm_store<2 * PAIRS>(p, v);
        } else {
            p[0] = tlm_round<T>(v[0]);
            p[1] = tlm_round<T>(v[1]);
        }
    }
}

static void rope(tlm_backend *be, void *x, const float *cos, const float *sin, int B, int T, int nheads, int D,
                 int ld, float sign, tlm_dtype dt, const char *op) {
    const int half = D / 2;
    const size_t rows = (size_t)B * T;
    if (rows == 0 || nheads <= 0 || half <= 0) return;
    cudaStream_t st = tlm_cuda_stream(be);
    const int threads = 256;
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        constexpr int PAIRS = tlm_vec16<E>() / 2; /* 16 bytes of x per thread */
        E *xe = static_cast<E *>(x);
        /* the wide path needs every head's start 16-byte aligned, and cos/sin rows aligned to PAIRS
         * floats (8 or 16 bytes: tlm_load's access size) */
        const uintptr_t cs_align = (uintptr_t)PAIRS * sizeof(float) - 1;
        if (half % PAIRS == 0 && ld % (2 * PAIRS) == 0 && tlm_aligned16(x) && ((uintptr_t)cos & cs_align) == 0 &&
            ((uintptr_t)sin & cs_align) == 0) {
            const size_t total = rows * nheads * (half / PAIRS);
            tlm_cuda_launch("rope", be, rope_kernel<PAIRS, E>, dim3(tlm_cuda_grid(be, total, threads)), dim3(threads),
                            0, st, xe, cos, sin, T, nheads, half, ld, total, sign);
        } else {
            const size_t total = rows * nheads * half;
            tlm_cuda_launch("rope", be, rope_kernel<1, E>, dim3(tlm_cuda_grid(be, total, threads)), dim3(threads), 0,
                            st, xe, cos, sin, T, nheads, half, ld, total, sign);
        }
    });
}

void tlm_cuda_rope_forward(tlm_backend *be, void *x, const float *cos, const float *sin, int B, int T, int nheads,
                           int D, int ld, tlm_dtype dt) {
    rope(be, x, cos, sin, B, T, nheads, D, ld, 1.0f, dt, __func__);
    TLM_CUDA_CHECK_LAUNCH();
}

void tlm_cuda_rope_backward(tlm_backend *be, void *dx, const float *cos, const float *sin, int B, int T,
                            int nheads, int D, int ld, tlm_dtype dt) {
    rope(be, dx, cos, sin, B, T, nheads, D, ld, -1.0f, dt, __func__);
    TLM_CUDA_CHECK_LAUNCH();
}
