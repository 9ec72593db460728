/* tf32.cu — FlashAttention-2 on TF32 tensor cores, the tf32 precision mode's
 * (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
 * Algorithm 1 forward, Algorithm 2 backward; the products are PTX's warp-level
 * mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, PTX ISA "Matrix fragments for mma.m16n8k8"
 * with .tf32). Called by the ops of ops.cu in the tf32 mode; the fp32 mode keeps the
 * exact kernels of f32.cu, and so does the tf32 mode where these do not apply
 * (rows not 16-byte aligned, or a GPU whose shared memory per block is too small for the tiles).
 *
 * What it computes: the semantics of the CPU reference (tlm/flash_attention.h) and of
 * f32.cu: q (B,Tq,H,D), k, v (B,Tk,H,D) fp32 with row stride ld_qkv; out
 * (B,Tq,H*D) row stride ld_out; lse (B,H,Tq) natural log; causal mask bottom-right aligned (key j
 * visible to query i iff j <= i + Tk - Tq), tiles above the diagonal skipped; fully masked rows
 * (causal, Tk < Tq) give out = 0, lse = -inf and no gradient; any Tq, Tk >= 1. Every product
 * (S = Q K^T, O = P V; backward S^T = K Q^T, dP^T = V dO^T, dV = P^T dO, dK = dS^T Q,
 * dQ = dS K) takes operands rounded to TF32 (10 mantissa bits) with cvt.rna.tf32.f32 as each
 * fragment is loaded (the tiles sit in shared memory as fp32, as cp.async brought them; P and dS
 * are rounded from the fp32 accumulators), and accumulates in fp32; scores, the online softmax
 * (log2 domain: scores prescaled by log2(e)/sqrt(D), exp2, as the other kernels), delta, the
 * logsumexp and every sum across tiles are fp32. Error: each rounding is a relative 2^-11 at most,
 * so the outputs are about 1e-3 (normwise, a few 1e-4) from exact, as cuBLAS's TF32 GEMMs are.
 *
 * Fragments (m16n8k8, tf32; lane = 4 g + t): A (16x8) a0 (g, t), a1 (g+8, t), a2 (g, t+4),
 * a3 (g+8, t+4); B (8x8) b0 (k t, n g), b1 (k t+4, n g); C (16x8) c0 (g, 2t), c1 (g, 2t+1),
 * c2 (g+8, 2t), c3 (g+8, 2t+1).
 *  - Operands stored with k along the row (Q, K, V and dO for the score products, dS for dQ):
 *    ldmatrix .b16 .x4 on fp32 data gives exactly these fragments: it sees an 8 x 4-float block
 *    as an 8 x 8 b16 matrix and hands lane i the 32-bit word i % 4 of row i / 4, i.e. element
 *    (g, t) of each of four 8 x 4 blocks (ft_lane_a, ft_lane_b pick the blocks).
 *  - P V (and dV += P^T dO, dK += dS^T Q): P (P^T, dS^T) is in registers as C-fragments, whose
 *    thread holds columns 2t and 2t+1 where the A-fragment wants t and t+4. Rather than go
 *    through shared memory, the k index of each 8-wide k-step is permuted, the same way on both
 *    sides (a sum over k does not care about its order): logical k = t is key (query) 2t of the
 *    step and k = t+4 is 2t+1, so the A-fragment is {c0, c2, c1, c3} of the accumulator, and the
 *    B-fragment (V, dO or Q, stored with n along the row, which ldmatrix cannot transpose for
 *    32-bit data) is read with two scalar loads per lane: b0 = row 2t, b1 = row 2t+1, column g.
 *    With rows D + 4 floats apart the 32 lanes' loads hit 32 distinct banks (2t (D+4) is 8t
 *    mod 32), as do ldmatrix's 8-row reads (D + 4 is an odd multiple of 4).
 *  - dQ = dS K (backward): dS^T is in registers with keys on the rows; it goes through shared
 *    memory as dS (queries by keys), each 8-key block stored in the permuted order (key 2p at
 *    position p, key 2p+1 at position p+4), so ldmatrix reads it as an A-fragment whose k = t is
 *    key 2t and k = t+4 key 2t+1, matching K's B-fragment read as above (rows 2t, 2t+1).
 *
 * Forward (Algorithm 1): one block per (query tile, head, batch) (split: per piece too, below),
 * causal tiles heaviest first;
 * WARPS warps of R x 16 query rows (R = 2: every K and V fragment read from shared memory feeds
 * two products, which is what shared-memory bandwidth asks for: a ldmatrix.x4 of 512 bytes per
 * two m16n8k8 at R = 1 would leave the tensor cores half idle); Q in shared memory, its fragments
 * kept in registers where D allows (D <= 64); K and V tiles of BC rows double-buffered (the next
 * tile's cp.async overlaps this tile's products). Tiles BR x BC: 128 x 64 (D 16, 32, 64),
 * 128 x 32 (D 80, 128: the O accumulators take D registers and the scores BC); shared memory
 * (BR + 4 BC) (D + 4) floats: 102 KiB at D 64 (two blocks per SM), 132 KiB at D 128 (one).
 *
 * Backward (Algorithm 2): a first kernel writes delta = rowsum(dO * O) and zeroes the fp32 dQ
 * accumulator, the last one writes dq = dQacc / sqrt(D): both are f32.cu's, with
 * its workspace layout (tlm_cuda_flash_backward_f32_prep, _dq). Between them, one block per (key
 * tile, head, batch) (split: per piece too, below): WARPS warps of RK x 16 keys; K and V in shared memory, dK and dV in
 * registers; query tiles of BR double-buffered, from the first that sees the block's keys. Per
 * query tile, transposed so each warp owns its keys' rows: S^T = K Q^T and dP^T = V dO^T,
 * P^T = exp2(S^T scale log2(e) - L log2(e)) (0 where masked), dS^T = P^T (dP^T - delta),
 * dV += P^T dO, dK += dS^T Q, dS to shared memory; then the block's dQ_i += dS K (warps as
 * BR/16 row groups x column groups) added to the accumulator with float4 atomics
 * (tlm_cuda_atomic_add_c_block; the order of the adds varies, so dq is not bitwise
 * reproducible, dk and dv are). Tiles as mma_backward.cu's mma.sync backward: D <= 64: 4 warps
 * of 32 keys (BC 128), 32-query tiles; D 80: 8 warps of 16 keys, 64-query tiles; D 128: 8 warps
 * of 16 keys, 32-query tiles (dK and dV take 2 D registers per 16 keys). Shared memory
 * (2 BC + 4 BR) (D + 4) + BR (BC + 4) floats: 118.5 KiB at D 64, 201 KiB at D 80, 214.5 KiB at
 * D 128 (an H100 allows 227; a GPU that allows less runs the exact kernels instead).
 * The tiles follow the bf16 kernels' LONG lines (tiles.def) and have not been timed on
 * a GPU for tf32 yet.
 *
 * Split-KV (split.cu's header: the same plans, buffer and combine, through
 * attention.cuh), for grids under one wave of the GPU (the CS336 flash-benchmarking rows: batch
 * 1, 1 head; at seq 1024, d_head 64, 8 forward and 8 backward blocks on 132 SMs): the kernels are
 * instantiated a second time with SPLIT = true. Forward: blockIdx.x = split * q_tiles + tile, each
 * block a piece of split_keys keys (a multiple of BC, at least 64) of its tile's key range,
 * writing fp32 partials (O normalized by the piece's own sum, and its lse) that
 * tlm_cuda_flash_split_combine merges into out, lse. Backward: blockIdx.x = split * k_tiles + key
 * tile, each block a piece of split_q query tiles (at least 64 queries) of its key tile's range,
 * dK (scaled) and dV added by float4 atomics (tlm_cuda_atomic_add_c_block) to fp32 accumulators
 * in the split buffer, zeroed before, copied into dk, dv after (tlm_cuda_flash_split_dkv): dk, dv
 * then vary in their last bits from run to run, as dq does. TLM_FLASH_SPLIT=0 turns it off;
 * unsplit grids (those that fill a wave) run the unsplit instantiations, as before. ptxas (nvcc
 * 13.0, sm_90a) registers, unsplit / split, no spills: forward D 16 162 / 165, 32 185 / 189,
 * 64 243 / 255, 80 178 / 182, 128 226 / 232; backward D 16 164 / 168, 32 202 / 218, 64 250 / 246,
 * 80 218 / 226, 128 236 / 243.
 *
 * Supported: D in {16, 32, 64, 80, 128} (tlm_cuda_flash_supports_d); q, k, v, out, dout (and
 * dq, dk, dv) and the workspace 16-byte aligned, ld_qkv and ld_out multiples of 4 floats (the
 * model's layouts); anything else runs the exact fp32 kernels. */
#include <math.h>

#include "cuda/attention/attention.cuh"
#include "cuda/attention/common.cuh"

#define FT_PAD 4 /* floats of padding per shared-memory row: rows D + 4 floats apart */
#define FT_LOG2E 1.4426950408889634f
#define FT_LN2 0.6931471805599453f

/* ---- TF32 tensor-core and copy primitives ------------------------------------------------------- */

/* x rounded to TF32 (nearest, ties away from zero), as the 32-bit operand of an mma */
__device__ __forceinline__ uint32_t ft_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* d (16x8 fp32) += a (16x8 tf32, row) b (8x8 tf32, col) */
__device__ __forceinline__ void ft_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* r[j] = element (lane / 4, lane % 4) of the 8 x 4-float block whose rows lanes 8j..8j+7 address
 * (ldmatrix .b16 on 32-bit data); ROUND: each rounded to TF32 (the tile holds fp32) */
template <bool ROUND> __device__ __forceinline__ void ft_ldsm_x4(uint32_t (&r)[4], const float *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p)));
    if constexpr (ROUND)
#pragma unroll
        for (int j = 0; j < 4; j++) r[j] = ft_tf32(__uint_as_float(r[j]));
}

/* Lane addresses (in floats) for ft_ldsm_x4 over the 16 x 8 block at (r0, c0) of a row-major
 * fp32 tile with row stride ld:
 *  ft_lane_a: blocks (rows 0-7, cols 0-3), (8-15, 0-3), (0-7, 4-7), (8-15, 4-7): the A-fragment of
 *             rows r0.. (m) by cols c0.. (k);
 *  ft_lane_b: blocks (0-7, 0-3), (0-7, 4-7), (8-15, 0-3), (8-15, 4-7): {b0, b1} of the n-tile of
 *             rows r0.. and of the one of rows r0 + 8.., from a tile stored [n][k]. */
__device__ __forceinline__ int ft_lane_a(int lane, int r0, int c0, int ld) {
    return (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 4;
}
__device__ __forceinline__ int ft_lane_b(int lane, int r0, int c0, int ld) {
    return (r0 + (lane & 7) + (lane >> 4) * 8) * ld + c0 + ((lane >> 3) & 1) * 4;
}

/* The A-fragment, rounded to TF32, of k-step kk from the accumulators c[kk] of a 16 x 8 block in the
 * permuted k order (logical k = t is column 2t, k = t + 4 column 2t + 1: the header comment) */
template <int N> __device__ __forceinline__ void ft_c_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
    a[0] = ft_tf32(c[kk][0]);
    a[1] = ft_tf32(c[kk][2]);
    a[2] = ft_tf32(c[kk][1]);
    a[3] = ft_tf32(c[kk][3]);
}

/* acc[n] += a (16 x 8, permuted k) x rows 2t, 2t + 1 of the [k][n] tile at `rows` (row stride ld),
 * columns 8n + g, for n < N: the B-fragments of a tile stored with n along the row, read in the
 * permuted k order (two scalar loads a lane, rounded to TF32) */
template <int N, int R>
__device__ __forceinline__ void ft_mma_kn(float (&acc)[R][N][4], const uint32_t (&a)[R][4], const float *rows,
                                          int ld) {
    const int lane = threadIdx.x & 31;
    const float *p = rows + 2 * (lane & 3) * ld + (lane >> 2);
#pragma unroll
    for (int n = 0; n < N; n++) {
        const uint32_t b0 = ft_tf32(p[n * 8]), b1 = ft_tf32(p[ld + n * 8]);
#pragma unroll
        for (int r = 0; r < R; r++) ft_mma(acc[r][n], a[r], b0, b1);
    }
}

/* rows [row0, row0 + ROWS) of a (rows, D) fp32 slice with row stride ld into s[ROWS][D + FT_PAD]
 * by 16-byte cp.async (rows 16-byte aligned); rows >= nrows zero-filled, not read */
template <int ROWS, int D, int NT>
__device__ __forceinline__ void ft_load_tile(float *s, const float *g, int64_t ld, int row0, int nrows, int tid) {
    constexpr int CPR = D / 4; /* 16-byte pieces per row */
#pragma unroll
    for (int c = tid; c < ROWS * CPR; c += NT) {
        const int r = c / CPR, col = c % CPR * 4;
        const bool ok = row0 + r < nrows;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                         (uint32_t)__cvta_generic_to_shared(s + r * (D + FT_PAD) + col)),
                     "l"(g + (int64_t)(ok ? row0 + r : 0) * ld + col), "r"(ok ? 16 : 0));
    }
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* One block per (query tile, split, head, batch): blockIdx.x = split * q_tiles + tile (causal:
 * tiles heaviest first), blockIdx.y the head, blockIdx.z the batch element. The block's keys are
 * [kv_begin, kv_end): all the tile needs, [0, n_end), unsplit; split (SPLIT), the piece
 * [split * split_keys, +split_keys) of it (split_keys a multiple of BC: whole tiles, masked as
 * unsplit). Output: unsplit, out and lse; split, the fp32 partials part in the layout of
 * tlm_cuda_flash_split_combine (attention.cuh; S = gridDim.x / q_tiles): the piece's O
 * normalized by its own sum and its lse (-inf for a row that saw no key of it; an empty piece
 * writes only that), as mma_forward.cu's flash_fwd_kernel. SPLIT = false compiles the split
 * away (split_keys_arg, part_arg unread). Shared memory: Q [BR][D+4], K and V [2][BC][D+4]. */
/* Launch bounds: 1 block per SM as the floor (ptxas may use up to 255 registers): left to its own
 * choice, ptxas held the unsplit d_head 32 instantiation at 168 registers and spilled once the
 * split parameters were added (it had taken 186 before), as mma_forward.cu's split kernels. */
template <int D, int BC, int WARPS, int R, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, 1)
    ft_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
                  const float *__restrict__ k, const float *__restrict__ v, int ld_qkv, int ld_out, int Tq, int Tk,
                  int H, float scale_log2, int causal, int split_keys_arg, float *__restrict__ part_arg) {
    constexpr int BR = 16 * R * WARPS, LDS = D + FT_PAD, NT = WARPS * 32, KD = D / 8, NB = BC / 8;
    constexpr bool QREG = D <= 64; /* Q's fragments held in registers (R D / 2 of them) */
    const int split_keys = SPLIT ? split_keys_arg : 0;
    float *const part = SPLIT ? part_arg : nullptr;
    extern __shared__ __align__(16) float ft_smem[];
    float *sQ = ft_smem, *sK = sQ + BR * LDS, *sV = sK + 2 * BC * LDS;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int q_tiles = SPLIT ? (Tq + BR - 1) / BR : (int)gridDim.x, split = SPLIT ? (int)blockIdx.x / q_tiles : 0;
    const int x = SPLIT ? (int)blockIdx.x % q_tiles : (int)blockIdx.x;
    const int m_block = causal ? q_tiles - 1 - x : x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int i0 = m_block * BR, offset = Tk - Tq, w0 = i0 + warp * 16 * R; /* the warp's first row */
    /* keys this tile needs: j < n_end (causal: its last row sees j <= i0 + BR - 1 + offset); this
     * block's share: [kv_begin, kv_end) */
    const int n_end = causal ? min(Tk, i0 + BR + offset) : Tk;
    const int kv_begin = SPLIT ? split * split_keys : 0;
    const int kv_end = SPLIT ? min(n_end, kv_begin + split_keys) : n_end;
    const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + BC - 1) / BC : 0;
    const float *kb = k + (int64_t)b * Tk * ld_qkv + h * D, *vb = v + (int64_t)b * Tk * ld_qkv + h * D;
    /* partials: row (split*B*H + b*H + h)*Tq + i of o_part [S][B*H*Tq][D], and of lse_part after it */
    auto part_row = [&](int i) { return ((int64_t)split * gridDim.z * H + b * H + h) * Tq + i; };
    auto lse_part = [&]() { return part + (int64_t)(gridDim.x / q_tiles) * gridDim.z * H * Tq * D; };
    if (SPLIT && n_tiles == 0) { /* an empty piece: no key for any row */
        for (int r = tid; r < BR && i0 + r < Tq; r += NT) lse_part()[part_row(i0 + r)] = -INFINITY;
        return;
    }

    ft_load_tile<BR, D, NT>(sQ, q + (int64_t)b * Tq * ld_qkv + h * D, ld_qkv, i0, Tq, tid);
    if (n_tiles > 0) {
        ft_load_tile<BC, D, NT>(sK, kb, ld_qkv, kv_begin, Tk, tid);
        ft_load_tile<BC, D, NT>(sV, vb, ld_qkv, kv_begin, Tk, tid);
    }
    fa_commit();

    float o[R][KD][4], m[R][2], l[R][2]; /* O (unnormalized), running max (log2 units), partial sums */
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r][0] = m[r][1] = -INFINITY, l[r][0] = l[r][1] = 0.0f;
#pragma unroll
        for (int d = 0; d < KD; d++) o[r][d][0] = o[r][d][1] = o[r][d][2] = o[r][d][3] = 0.0f;
    }
    uint32_t qf[QREG ? R : 1][QREG ? KD : 1][4];

    for (int t = 0; t < n_tiles; t++) {
        const int buf = t & 1, j0 = kv_begin + t * BC;
        if (t + 1 < n_tiles) { /* the next key/value tile into the other buffer */
            ft_load_tile<BC, D, NT>(sK + (buf ^ 1) * BC * LDS, kb, ld_qkv, j0 + BC, Tk, tid);
            ft_load_tile<BC, D, NT>(sV + (buf ^ 1) * BC * LDS, vb, ld_qkv, j0 + BC, Tk, tid);
            fa_commit();
            fa_wait<1>();
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        if constexpr (QREG) {
            if (t == 0)
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int kk = 0; kk < KD; kk++)
                        ft_ldsm_x4<true>(qf[r][kk], sQ + ft_lane_a(lane, warp * 16 * R + 16 * r, kk * 8, LDS));
        }
        const float *sKb = sK + buf * BC * LDS, *sVb = sV + buf * BC * LDS;

        /* S = Q K^T */
        float s[R][NB][4];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NB; n++) s[r][n][0] = s[r][n][1] = s[r][n][2] = s[r][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t a[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                if constexpr (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; e++) a[r][e] = qf[r][kk][e];
                } else {
                    ft_ldsm_x4<true>(a[r], sQ + ft_lane_a(lane, warp * 16 * R + 16 * r, kk * 8, LDS));
                }
            }
#pragma unroll
            for (int np = 0; np < NB / 2; np++) {
                uint32_t bf[4];
                ft_ldsm_x4<true>(bf, sKb + ft_lane_b(lane, np * 16, kk * 8, LDS));
#pragma unroll
                for (int r = 0; r < R; r++) {
                    ft_mma(s[r][2 * np], a[r], bf[0], bf[1]);
                    ft_mma(s[r][2 * np + 1], a[r], bf[2], bf[3]);
                }
            }
        }
        if (j0 + BC > Tk || (causal && j0 + BC - 1 > w0 + offset)) { /* a tile on the diagonal or the end */
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = w0 + 16 * r + g + (e >> 1) * 8, col = j0 + n * 8 + 2 * t4 + (e & 1);
                        if (col >= Tk || (causal && col > row + offset)) s[r][n][e] = -INFINITY;
                    }
        }
        /* online softmax of rows g (h2 = 0) and g + 8 (h2 = 1) of each 16, log2 domain; the 4 lanes
         * t4 of a row hold its columns */
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < NB; n++) mx = fmaxf(mx, fmaxf(s[r][n][2 * h2], s[r][n][2 * h2 + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[r][h2], mx * scale_log2);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* no key yet: P = 0, not NaN */
                const float alpha = exp2f(m[r][h2] - m_use);
                m[r][h2] = m_new;
                float rs = 0.0f;
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 2 * h2; e < 2 * h2 + 2; e++) {
                        s[r][n][e] = exp2f(fmaf(s[r][n][e], scale_log2, -m_use));
                        rs += s[r][n][e];
                    }
                l[r][h2] = fmaf(l[r][h2], alpha, rs);
#pragma unroll
                for (int d = 0; d < KD; d++) o[r][d][2 * h2] *= alpha, o[r][d][2 * h2 + 1] *= alpha;
            }
        /* O += P V: P's accumulators are the A-fragments in the permuted k order, V read to match */
#pragma unroll
        for (int kk = 0; kk < NB; kk++) {
            uint32_t a[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) ft_c_to_a(a[r], s[r], kk);
            ft_mma_kn<KD, R>(o, a, sVb + kk * 8 * LDS, LDS);
        }
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    if (n_tiles == 0) fa_wait<0>();

#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            float sum = l[r][h2];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = w0 + 16 * r + g + 8 * h2;
            if (row >= Tq) continue;
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* a fully masked row: out = 0 */
            if (SPLIT) { /* the partials */
                float *prow = part + part_row(row) * D + 2 * t4;
#pragma unroll
                for (int d = 0; d < KD; d++)
                    *reinterpret_cast<float2 *>(prow + d * 8) =
                        make_float2(o[r][d][2 * h2] * inv, o[r][d][2 * h2 + 1] * inv);
                if (t4 == 0) lse_part()[part_row(row)] = sum > 0.0f ? (m[r][h2] + log2f(sum)) * FT_LN2 : -INFINITY;
                continue;
            }
            float *orow = out + ((int64_t)b * Tq + row) * ld_out + h * D + 2 * t4;
#pragma unroll
            for (int d = 0; d < KD; d++)
                *reinterpret_cast<float2 *>(orow + d * 8) = make_float2(o[r][d][2 * h2] * inv, o[r][d][2 * h2 + 1] * inv);
            if (t4 == 0)
                lse[((int64_t)b * H + h) * Tq + row] = sum > 0.0f ? (m[r][h2] + log2f(sum)) * FT_LN2 : -INFINITY;
        }
}

/* ---- backward: dK, dV and the dQ accumulator ------------------------------------------------------ */

/* One block per (key tile, split, head, batch): blockIdx.x = split * k_tiles + key tile. The block
 * runs the query tiles that see its keys, unsplit; split (SPLIT), the piece [split * split_q,
 * +split_q) of them (an empty piece returns at once). Shared memory: K, V [BC][D+4]; Q, dO
 * [2][BR][D+4]; dS [BR][BC+4] (queries by keys, each 8-key block in the permuted order).
 * dq_acc += dS K unscaled (the dq kernel scales it); dK = scale dS^T Q, dV = P^T dO: unsplit,
 * written to dk, dv; split, added with float4 atomics to the zeroed accumulators dkv (B,H,Tk,D)
 * and dkv + B*H*Tk*D (tlm_cuda_flash_bwd_split), copied out after. */
template <int D, int BR, int WARPS, int RK, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32)
    ft_bwd_kernel(float *__restrict__ dq_acc, float *__restrict__ dk, float *__restrict__ dv,
                  const float *__restrict__ dout, const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, const float *__restrict__ lse, const float *__restrict__ delta,
                  int ld_qkv, int ld_out, int Tq, int Tk, int H, float scale, float scale_log2, int causal,
                  int split_q_arg, float *__restrict__ dkv_arg) {
    constexpr int BC = 16 * RK * WARPS, LDS = D + FT_PAD, LDP = BC + FT_PAD, NT = WARPS * 32, KD = D / 8;
    constexpr int RG = BR / 16, CG = WARPS / RG, DW = D / CG; /* dQ: warps as RG row groups x CG column groups */
    static_assert(WARPS % RG == 0 && DW % 8 == 0, "dQ partition");
    extern __shared__ __align__(16) float ft_smem[];
    float *sK = ft_smem, *sV = sK + BC * LDS, *sQ = sV + BC * LDS, *sdO = sQ + 2 * BR * LDS;
    float *sdS = sdO + 2 * BR * LDS;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int split_q = SPLIT ? split_q_arg : 0;
    const int k_tiles = (Tk + BC - 1) / BC, split = SPLIT ? (int)blockIdx.x / k_tiles : 0;
    const int h = blockIdx.y, b = blockIdx.z, offset = Tk - Tq;
    const int j0 = (SPLIT ? (int)blockIdx.x % k_tiles : (int)blockIdx.x) * BC;
    const int kw = warp * 16 * RK; /* the warp's first key in the tile */
    const float *qb = q + (int64_t)b * Tq * ld_qkv + h * D, *dob = dout + (int64_t)b * Tq * ld_out + h * D;
    const float *lse_b = lse + ((int64_t)b * H + h) * Tq, *delta_b = delta + ((int64_t)b * H + h) * Tq;
    float *dqa = dq_acc + ((int64_t)b * H + h) * Tq * D;
    /* query tiles that see any key of this block: i >= j0 - offset (causal); split, a piece of them */
    const int m_first = causal ? max(0, j0 - offset) / BR : 0, m_last = (Tq + BR - 1) / BR;
    const int m_begin = SPLIT ? m_first + split * split_q : m_first;
    const int m_end = SPLIT ? min(m_last, m_begin + split_q) : m_last;
    if (SPLIT && m_begin >= m_end) return; /* an empty piece: its accumulators stay as they are */

    ft_load_tile<BC, D, NT>(sK, k + (int64_t)b * Tk * ld_qkv + h * D, ld_qkv, j0, Tk, tid);
    ft_load_tile<BC, D, NT>(sV, v + (int64_t)b * Tk * ld_qkv + h * D, ld_qkv, j0, Tk, tid);
    if (m_begin < m_end) { /* query tile mb goes to buffer mb & 1 */
        ft_load_tile<BR, D, NT>(sQ + (m_begin & 1) * BR * LDS, qb, ld_qkv, m_begin * BR, Tq, tid);
        ft_load_tile<BR, D, NT>(sdO + (m_begin & 1) * BR * LDS, dob, ld_out, m_begin * BR, Tq, tid);
    }
    fa_commit();

    float dk_acc[RK][KD][4], dv_acc[RK][KD][4];
#pragma unroll
    for (int rk = 0; rk < RK; rk++)
#pragma unroll
        for (int d = 0; d < KD; d++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[rk][d][e] = dv_acc[rk][d][e] = 0.0f;
    const int rg = warp % RG, cg = warp / RG;

    for (int mb = m_begin; mb < m_end; mb++) {
        const int buf = mb & 1, i0 = mb * BR;
        if (mb + 1 < m_end) {
            ft_load_tile<BR, D, NT>(sQ + (buf ^ 1) * BR * LDS, qb, ld_qkv, i0 + BR, Tq, tid);
            ft_load_tile<BR, D, NT>(sdO + (buf ^ 1) * BR * LDS, dob, ld_out, i0 + BR, Tq, tid);
            fa_commit();
            fa_wait<1>();
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        const float *sQb = sQ + buf * BR * LDS, *sdOb = sdO + buf * BR * LDS;

        /* S^T (the warp's keys x BR queries) = K_w Q^T and dP^T = V_w dO^T */
        float s[RK][BR / 8][4], dp[RK][BR / 8][4];
#pragma unroll
        for (int rk = 0; rk < RK; rk++)
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[rk][n][e] = dp[rk][n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t a[RK][4], a2[RK][4];
#pragma unroll
            for (int rk = 0; rk < RK; rk++) {
                ft_ldsm_x4<true>(a[rk], sK + ft_lane_a(lane, kw + 16 * rk, kk * 8, LDS));
                ft_ldsm_x4<true>(a2[rk], sV + ft_lane_a(lane, kw + 16 * rk, kk * 8, LDS));
            }
#pragma unroll
            for (int np = 0; np < BR / 16; np++) {
                uint32_t bf[4];
                ft_ldsm_x4<true>(bf, sQb + ft_lane_b(lane, np * 16, kk * 8, LDS));
#pragma unroll
                for (int rk = 0; rk < RK; rk++) {
                    ft_mma(s[rk][2 * np], a[rk], bf[0], bf[1]);
                    ft_mma(s[rk][2 * np + 1], a[rk], bf[2], bf[3]);
                }
                ft_ldsm_x4<true>(bf, sdOb + ft_lane_b(lane, np * 16, kk * 8, LDS));
#pragma unroll
                for (int rk = 0; rk < RK; rk++) {
                    ft_mma(dp[rk][2 * np], a2[rk], bf[0], bf[1]);
                    ft_mma(dp[rk][2 * np + 1], a2[rk], bf[2], bf[3]);
                }
            }
        }
        /* P^T = exp2(S^T scale log2(e) - L log2(e)), 0 where masked; dS^T = P^T (dP^T - delta). The
         * thread's query columns are 2 t4 + (e & 1) of each 8: L and delta read where used. */
        const bool need_mask = i0 + BR > Tq || j0 + BC > Tk || (causal && j0 + BC - 1 > i0 + offset);
#pragma unroll
        for (int n = 0; n < BR / 8; n++)
#pragma unroll
            for (int e1 = 0; e1 < 2; e1++) {
                const int qi = i0 + n * 8 + 2 * t4 + e1;
                const float lq = qi < Tq ? lse_b[qi] * FT_LOG2E : 0.0f, dl = qi < Tq ? delta_b[qi] : 0.0f;
#pragma unroll
                for (int rk = 0; rk < RK; rk++)
#pragma unroll
                    for (int h2 = 0; h2 < 2; h2++) {
                        const int e = 2 * h2 + e1, key = j0 + kw + 16 * rk + g + 8 * h2;
                        const bool ok = !need_mask || (qi < Tq && key < Tk && (!causal || key <= qi + offset));
                        const float p = ok ? exp2f(fmaf(s[rk][n][e], scale_log2, -lq)) : 0.0f;
                        s[rk][n][e] = p;
                        dp[rk][n][e] = p * (dp[rk][n][e] - dl);
                    }
            }
        /* dV += P^T dO and dK += dS^T Q (k = the BR queries, permuted); dS into sdS for dQ (key
         * g + 8 h2 of a 16-key group at position (g >> 1) + 4 (g & 1) of its 8-key block) */
        const int pos = (g >> 1) + 4 * (g & 1);
#pragma unroll
        for (int kk = 0; kk < BR / 8; kk++) {
            uint32_t a[RK][4], ds[RK][4];
#pragma unroll
            for (int rk = 0; rk < RK; rk++) {
                ft_c_to_a(a[rk], s[rk], kk);
                ft_c_to_a(ds[rk], dp[rk], kk);
                /* ds = {(g, 2t), (g + 8, 2t), (g, 2t + 1), (g + 8, 2t + 1)} of dS^T, rounded */
                float *col = sdS + (kk * 8 + 2 * t4) * LDP + kw + 16 * rk + pos;
                col[0] = __uint_as_float(ds[rk][0]);
                col[8] = __uint_as_float(ds[rk][1]);
                col[LDP] = __uint_as_float(ds[rk][2]);
                col[LDP + 8] = __uint_as_float(ds[rk][3]);
            }
            ft_mma_kn<KD, RK>(dv_acc, a, sdOb + kk * 8 * LDS, LDS);
            ft_mma_kn<KD, RK>(dk_acc, ds, sQb + kk * 8 * LDS, LDS);
        }
        __syncthreads(); /* dS complete */
        /* dQ_i (rows rg*16.., columns cg*DW..) += dS K over the block's BC keys (ldmatrix reads dS
         * in the permuted order, K rows 2t, 2t + 1 match it) */
        float acc[1][DW / 8][4];
#pragma unroll
        for (int n = 0; n < DW / 8; n++) acc[0][n][0] = acc[0][n][1] = acc[0][n][2] = acc[0][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BC / 8; kk++) {
            uint32_t a[1][4];
            ft_ldsm_x4<false>(a[0], sdS + ft_lane_a(lane, rg * 16, kk * 8, LDP)); /* rounded when stored */
            ft_mma_kn<DW / 8, 1>(acc, a, sK + kk * 8 * LDS + cg * DW, LDS);
        }
        /* 16-byte aligned: D and DW are multiples of 8; the dq kernel applies the scale */
        tlm_cuda_atomic_add_c_block(dqa, D, i0 + rg * 16, cg * DW, Tq, acc[0], 1.0f);
        __syncthreads(); /* sdS and this buffer are free for the next tile */
    }
    fa_wait<0>(); /* the K, V loads when it ran no tile */

    /* split: dK (scaled), dV added to the accumulators (a runtime test, as mma_backward.cu's: an
     * `if constexpr` would leave the unsplit stores below unreachable in the split instantiation) */
    if (float *const dkv = SPLIT ? dkv_arg : nullptr) {
        float *dka = dkv + ((int64_t)b * H + h) * Tk * D, *dva = dka + (int64_t)gridDim.z * H * Tk * D;
#pragma unroll
        for (int rk = 0; rk < RK; rk++) {
            tlm_cuda_atomic_add_c_block(dka, D, j0 + kw + 16 * rk, 0, Tk, dk_acc[rk], scale);
            tlm_cuda_atomic_add_c_block(dva, D, j0 + kw + 16 * rk, 0, Tk, dv_acc[rk], 1.0f);
        }
        return;
    }
#pragma unroll
    for (int rk = 0; rk < RK; rk++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int key = j0 + kw + 16 * rk + g + 8 * h2;
            if (key >= Tk) continue;
            const int64_t off = ((int64_t)b * Tk + key) * ld_qkv + h * D + 2 * t4;
#pragma unroll
            for (int d = 0; d < KD; d++) {
                *reinterpret_cast<float2 *>(dk + off + d * 8) =
                    make_float2(dk_acc[rk][d][2 * h2] * scale, dk_acc[rk][d][2 * h2 + 1] * scale);
                *reinterpret_cast<float2 *>(dv + off + d * 8) = make_float2(dv_acc[rk][d][2 * h2], dv_acc[rk][d][2 * h2 + 1]);
            }
        }
}

/* ---- launchers ----------------------------------------------------------------------------------- */

/* forward: WARPS warps of R x 16 query rows, BC keys a tile; backward: WARPS warps of RK x 16 keys,
 * BR queries a tile (the header comment says why these) */
template <int W, int BC, int R> struct ft_fwd_cfg {
    static constexpr int warps = W, bc = BC, r = R, br = 16 * R * W;
};
template <int W, int BR, int RK> struct ft_bwd_cfg {
    static constexpr int warps = W, br = BR, rk = RK, bc = 16 * RK * W;
};
template <int D> using ft_fwd_cfg_of = ft_fwd_cfg<4, D <= 64 ? 64 : 32, 2>;
template <int D> using ft_bwd_cfg_of = ft_bwd_cfg<D <= 64 ? 4 : 8, D == 80 ? 64 : 32, D <= 64 ? 2 : 1>;

template <int D> constexpr size_t ft_fwd_smem() {
    using c = ft_fwd_cfg_of<D>;
    return (size_t)(c::br + 4 * c::bc) * (D + FT_PAD) * sizeof(float);
}
template <int D> constexpr size_t ft_bwd_smem() {
    using c = ft_bwd_cfg_of<D>;
    return ((size_t)(2 * c::bc + 4 * c::br) * (D + FT_PAD) + (size_t)c::br * (c::bc + FT_PAD)) * sizeof(float);
}

/* the device's shared memory per block (opt-in), asked once */
static size_t ft_smem_limit(tlm_backend *be) {
    static int limit = -1;
    if (limit < 0)
        TLM_CUDA_CHECK_OP("flash_attention (tf32)", cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                                          tlm_cuda_of(be)->device));
    return (size_t)limit;
}

int tlm_attn_tf32_occupancy(tlm_backend *be, tlm_attn_pass pass, int D, int *br, int *bc) {
    const char *op = pass == TLM_ATTN_FORWARD ? "flash_attention_forward (tf32)" : "flash_attention_backward (tf32)";
    int occ = 0;
    tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
        constexpr int DD = decltype(dc)::value;
        if (pass == TLM_ATTN_FORWARD) {
            using c = ft_fwd_cfg_of<DD>;
            constexpr auto split_kernel = ft_fwd_kernel<DD, c::bc, c::warps, c::r, true>;
            constexpr size_t smem = ft_fwd_smem<DD>();
            if (smem > ft_smem_limit(be)) return;
            tlm_cuda_set_smem<split_kernel>(op, smem);
            *br = c::br, *bc = c::bc;
            occ = tlm_cuda_occupancy<split_kernel>(op, c::warps * 32, smem);
        } else {
            using c = ft_bwd_cfg_of<DD>;
            constexpr auto split_kernel = ft_bwd_kernel<DD, c::br, c::warps, c::rk, true>;
            constexpr size_t smem = ft_bwd_smem<DD>();
            if (smem > ft_smem_limit(be)) return;
            tlm_cuda_set_smem<split_kernel>(op, smem);
            *br = c::br, *bc = c::bc;
            occ = tlm_cuda_occupancy<split_kernel>(op, c::warps * 32, smem);
        }
    });
    return occ;
}

void tlm_attn_tf32_forward(tlm_backend *be, const tlm_attn_choice *ch, const tlm_attn_fwd_args *a, float *part) {
    const char *op = "flash_attention_forward (tf32)";
    float *out = (float *)a->out, *lse = a->lse;
    const float *q = (const float *)a->q, *k = (const float *)a->k, *v = (const float *)a->v;
    const int ld_qkv = a->ld_qkv, ld_out = a->ld_out, B = a->B, Tq = a->Tq, Tk = a->Tk, H = a->H;
    const bool causal = a->causal;
    tlm_cuda_flash_dispatch_d(a->D, op, [&](auto dc) {
        constexpr int DD = decltype(dc)::value;
        using c = ft_fwd_cfg_of<DD>;
        constexpr auto kernel = ft_fwd_kernel<DD, c::bc, c::warps, c::r, false>;
        constexpr auto split_kernel = ft_fwd_kernel<DD, c::bc, c::warps, c::r, true>;
        constexpr size_t smem = ft_fwd_smem<DD>();
        tlm_cuda_set_smem<kernel>(op, smem);
        tlm_cuda_set_smem<split_kernel>(op, smem);
        /* split-KV as the selector planned it (a grid under one wave: tlm_cuda_flash_fwd_split) */
        const int S = part ? ch->split : 1, split_keys = part ? ch->split_len : 0;
        const dim3 grid((unsigned)((Tq + c::br - 1) / c::br * S), (unsigned)H, (unsigned)B);
        (part ? split_kernel : kernel)<<<grid, c::warps * 32, smem, tlm_cuda_stream(be)>>>(
            out, lse, q, k, v, ld_qkv, ld_out, Tq, Tk, H, FT_LOG2E / sqrtf((float)DD), causal ? 1 : 0, split_keys,
            part);
        TLM_CUDA_CHECK_OP(op, cudaGetLastError());
        if (part) tlm_cuda_flash_split_combine(be, out, lse, part, S, B, Tq, H, DD, ld_out, TLM_DTYPE_F32);
    });
}

void tlm_attn_tf32_backward(tlm_backend *be, const tlm_attn_choice *ch, const tlm_attn_bwd_args *a, float *dkv) {
    const char *op = "flash_attention_backward (tf32)";
    float *dq = (float *)a->dq, *dk = (float *)a->dk, *dv = (float *)a->dv, *workspace = a->workspace;
    const float *dout = (const float *)a->dout, *q = (const float *)a->q, *k = (const float *)a->k;
    const float *v = (const float *)a->v, *out = (const float *)a->out, *lse = a->lse;
    const int ld_qkv = a->ld_qkv, ld_out = a->ld_out, B = a->B, Tq = a->Tq, Tk = a->Tk, H = a->H, D = a->D;
    const bool causal = a->causal;
    cudaStream_t st = tlm_cuda_stream(be);
    /* workspace: the dQ accumulator (B,H,Tq,D), then delta (B,H,Tq): f32.cu's layout */
    const float *delta = workspace + (size_t)B * H * Tq * D;
    tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
        constexpr int DD = decltype(dc)::value;
        using c = ft_bwd_cfg_of<DD>;
        constexpr auto kernel = ft_bwd_kernel<DD, c::br, c::warps, c::rk, false>;
        constexpr auto split_kernel = ft_bwd_kernel<DD, c::br, c::warps, c::rk, true>;
        constexpr size_t smem = ft_bwd_smem<DD>();
        tlm_cuda_set_smem<kernel>(op, smem);
        tlm_cuda_set_smem<split_kernel>(op, smem);
        /* split query ranges as the selector planned them (tlm_cuda_flash_bwd_split) */
        const int S = dkv ? ch->split : 1, split_q = dkv ? ch->split_len : 0;
        /* delta, the dQ accumulator zeroed, and (split) the dK, dV accumulators: no memset */
        tlm_cuda_flash_backward_f32_prep(st, workspace, dout, out, ld_out, B, Tq, H, DD, dkv, Tk);
        const float scale = 1.0f / sqrtf((float)DD);
        const dim3 grid((unsigned)((Tk + c::bc - 1) / c::bc * S), (unsigned)H, (unsigned)B);
        (dkv ? split_kernel : kernel)<<<grid, c::warps * 32, smem, st>>>(
            workspace, dk, dv, dout, q, k, v, lse, delta, ld_qkv, ld_out, Tq, Tk, H, scale, FT_LOG2E * scale,
            causal ? 1 : 0, split_q, dkv);
        TLM_CUDA_CHECK_OP(op, cudaGetLastError());
        if (dkv) tlm_cuda_flash_split_dkv(be, dk, dv, dkv, ld_qkv, B, H, Tk, DD, TLM_DTYPE_F32);
    });
    tlm_cuda_flash_backward_f32_dq(st, dq, workspace, ld_qkv, B, Tq, H, D);
}
