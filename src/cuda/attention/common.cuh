/* common.cuh — the device helpers every FlashAttention kernel family shares (mma.sync, sm90, tf32,
 * and the split-KV merge): rounding two floats into a bf16/fp16 pair (fa_pack), the m16n8k16
 * mma.sync product and its C-to-A fragment reuse, ldmatrix and its lane addresses, the 16-byte
 * cp.async copy with its commit and wait, and the (rows, D) tile load into padded shared memory;
 * log2(e) and ln(2) for the log2-domain softmax. Device code only. */
#ifndef TLM_CUDA_ATTENTION_COMMON_CUH
#define TLM_CUDA_ATTENTION_COMMON_CUH

#include <type_traits>

#include "cuda/cuda_common.cuh"

#define FA_PAD 8 /* elements of padding per shared-memory row (mma.sync kernels) */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* ---- tensor-core and copy primitives ------------------------------------------------------------- */

template <typename E> struct fa_pack;
template <> struct fa_pack<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t two(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};
template <> struct fa_pack<__half> {
    static __device__ __forceinline__ uint32_t two(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

/* The A-fragment (16x16, rounded to E) of k-step kk made of accumulators c[2kk], c[2kk+1] (16x8
 * each): an m16n8 C-fragment pair is, element for element, the A-fragment of an m16k16 step. */
template <typename E, int N>
__device__ __forceinline__ void fa_c_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
    a[0] = fa_pack<E>::two(c[2 * kk][0], c[2 * kk][1]);
    a[1] = fa_pack<E>::two(c[2 * kk][2], c[2 * kk][3]);
    a[2] = fa_pack<E>::two(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = fa_pack<E>::two(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* d (16x8 fp32) += a (16x16, row) b (16x8, col) */
template <typename E>
__device__ __forceinline__ void fa_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<E, __nv_bfloat16>::value) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* The inner step of every tile product: for each r < R, acc[r][2c] += a[r] * (columns 0..7 of the
 * 16-column B fragment bf) and acc[r][2c + 1] += a[r] * (columns 8..15). */
template <typename E, int R, int N>
__device__ __forceinline__ void fa_mma_16(float (&acc)[R][N][4], const uint32_t (&a)[R][4], const uint32_t (&bf)[4],
                                          int c) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        fa_mma<E>(acc[r][2 * c], a[r], bf[0], bf[1]);
        fa_mma<E>(acc[r][2 * c + 1], a[r], bf[2], bf[3]);
    }
}

__device__ __forceinline__ uint32_t fa_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void fa_ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
}
__device__ __forceinline__ void fa_ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
}
__device__ __forceinline__ void fa_ldsm_x2_t(uint32_t &r0, uint32_t &r1, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(fa_smem(p)));
}

/* Lane addresses for ldmatrix.x4 over a 16x16 block at (r0, c0) of a row-major tile with row
 * stride ld:
 *  fa_lane_a: A-fragment of rows r0.. (m) by cols c0.. (k); also, with .trans, the B-fragments of
 *             two adjacent n-tiles from a tile stored [k][n] (r = k, c = n).
 *  fa_lane_b: B-fragments of two adjacent n-tiles from a tile stored [n][k] (r = n, c = k); also,
 *             with .trans, the A-fragment of a tile stored [k][m] (r = k, c = m). */
__device__ __forceinline__ int fa_lane_a(int lane, int r0, int c0, int ld) {
    return (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8;
}
__device__ __forceinline__ int fa_lane_b(int lane, int r0, int c0, int ld) {
    return (r0 + (lane & 7) + ((lane >> 4) << 3)) * ld + c0 + ((lane >> 3) & 1) * 8;
}

__device__ __forceinline__ void fa_cp16(void *smem, const void *gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_smem(smem)), "l"(gmem),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* rows [row0, row0 + ROWS) of a (rows, D) slice with row stride ld into s[ROWS][D + FA_PAD];
 * rows >= nrows are zero-filled */
template <int ROWS, int D, int NT, typename E>
__device__ __forceinline__ void fa_load_tile(E *s, const E *g, int64_t ld, int row0, int nrows, int tid) {
    constexpr int CHUNKS = D / 8; /* 16-byte pieces per row */
#pragma unroll
    for (int c = tid; c < ROWS * CHUNKS; c += NT) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        const bool valid = row0 + r < nrows;
        fa_cp16(s + r * (D + FA_PAD) + col, g + (int64_t)(valid ? row0 + r : 0) * ld + col, valid);
    }
}

/* the same 16-byte copy to a shared-memory address already converted (the Hopper kernels) */
__device__ __forceinline__ void fa_cp16_s(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

#endif
