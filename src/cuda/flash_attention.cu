/* flash_attention.cu — FlashAttention-2 on the GPU (Dao 2023, "FlashAttention-2: Faster Attention
 * with Better Parallelism and Work Partitioning", Algorithm 1 forward, Algorithm 2 backward): the
 * ops of tlm/backend.h (flash_attention_forward, _backward, _check) and their bf16/fp16
 * tensor-core kernels. The tf32 mode goes to the TF32 tensor-core kernels of
 * flash_attention_tf32.cu where they apply, the fp32 mode (and tf32 where they do not) to the
 * exact-fp32 kernels of flash_attention_f32.cu; on a Hopper
 * GPU the bf16/fp16 forward and backward of d_head 32, 64, 80 and 128 go to the wgmma kernels of
 * flash_attention_sm90.cu where their grid nearly fills the GPU (tlm_cuda_flash_*_sm90 say when).
 * The spec, layout and masking rules are those of tlm/flash_attention.h (the CPU reference).
 *
 * Tensor cores: Ampere-style warp-level mma.sync.m16n8k16 (bf16 or fp16 operands, fp32
 * accumulators), operands fed from shared memory by ldmatrix (.trans where the product needs the
 * transposed tile), tiles brought in by cp.async (16-byte pieces, zero-filled past the sequence).
 * Shared-memory rows are padded by 8 elements (16 bytes) so the 8 rows an ldmatrix reads fall in
 * distinct banks for every D.
 *
 * Forward (one block per (query tile, head, batch); WARPS warps; causal blocks launched heaviest
 * first): each warp owns R groups of 16 query rows (R = 2 for D = 32, 64, 128 at long sequences:
 * every K/V fragment read from shared memory feeds two products, which is what shared-memory
 * bandwidth asks for; R = 1 where the registers do not allow it, or where more, smaller blocks
 * pay). Q stays in registers as mma A-fragments; key/value tiles of BC rows are double-buffered
 * (the next tile's cp.async overlaps this tile's math).
 * Per tile: S = Q K^T (fp32), mask (only in tiles that cross the diagonal or the sequence end),
 * online softmax in the log2 domain (scores prescaled by log2(e)/sqrt(D), exp2), P rounded to
 * bf16/fp16 straight from the accumulator registers (the m16n8 C-fragment of two adjacent
 * n-tiles is the A-fragment of a k16 step), O += P V. Tiles (BR x BC) at long sequences: 128 x 64
 * (D 32, 64), 128 x 32 (D 128), 64 x 128 (D 16), 64 x 64 (D 80); the others: below.
 *
 * Backward (one block per key tile, head, batch): each warp owns RK groups of 16 keys (at long
 * sequences, D <= 64: 4 warps of 32 keys, a 128-key tile, 32-query tiles; D 80 and 128: 8 warps of
 * 16 keys, 64- and 32-query tiles: dK and dV in registers leave no room for more). K and V stay
 * in shared memory, dK and dV accumulate in registers; query tiles are double-buffered, starting at
 * the first tile that sees any of the block's keys (causal). Per query tile, transposed so each warp owns its
 * keys' rows: S^T = K Q^T, P^T = exp2(S^T - L), dV += P^T dO, dP^T = V dO^T,
 * dS^T = P^T * (dP^T - delta), dK += dS^T Q; dS goes through shared memory and the block
 * computes dQ_i = dS K for its keys, added to an fp32 accumulator in the workspace with float4
 * atomics (the paper's atomic add; the order of the adds varies, so dQ is not bitwise
 * reproducible); each query tile's logsumexp and delta come into shared memory with its Q and dO.
 * Before: flash_bwd_delta_kernel, delta = rowsum(dO * O) and the dQ accumulator zeroed, with the
 * split path's dK, dV accumulators when it splits (one kernel: no memset); after: dQ (and, split,
 * dK, dV) rounded from the accumulators into their thirds of the gradient buffer.
 *
 * Tile configurations: src/cuda/flash_tiles.def lists them (d_head, tile sizes, warps, launch
 * bounds, role), and fa_rule picks one per pass: the LONG line (the shapes above, chosen by timing
 * the leaderboard shape on an H100: bench/results/h100-2026-11-21-flash/tuning.md), or, for a short
 * context (at most 1024) whose LONG grid is under two waves of the GPU and is not split, the SHORT
 * line: more, smaller blocks (the LM at context 256: small's LONG backward is 96 blocks of 4 warps
 * on 132 SMs, each walking up to 8 query tiles in sequence). d_head 64 has SHORT lines for both
 * passes, 80 for the backward (its LONG forward, 512 blocks of 4 warps at 2.7B's shape, is one
 * wave already); both have CAND (timing candidate) lines; the other d_heads LONG only.
 * TLM_FLASH_TILES=name[@d_head],... forces named lines (fa_tile_named: every candidate timed in one
 * run, bench/run-flash-short-device.sh; the GPU test runs every line), TLM_FLASH_LOG=1 prints each
 * pass's choice on stderr. ptxas (nvcc 13.0, sm_90a, bf16 = fp16), registers / shared memory per
 * block / resident blocks per SM (computed for an H100: 64K registers and 228 KiB of shared memory
 * an SM, 1 KiB of it reserved per block), no spills:
 *   forward  D 64: q128k64w4 230 / 54 KiB / 2 (LONG), q64k64w4 128 / 45 KiB / 4 (SHORT),
 *                  q64k64w2 230 / 45 KiB / 4, q32k64w2 131 / 40.5 KiB / 5, q64k128w4 166 / 81 KiB / 2,
 *                  q64k32w4 96 / 27 KiB / 5;
 *            D 80: q64k64w4 128 / 55 KiB / 4 (LONG), q64k32w4 125 / 33 KiB / 4,
 *                  q32k64w2 135 / 49.5 KiB / 4, q32k32w2 125 / 27.5 KiB / 8;
 *   backward D 64: k128q32w4 255 / 64.5 KiB / 2 (LONG), k64q64w4 241 / 64 KiB / 2 (SHORT),
 *                  k64q32w4 168 / 41.5 KiB / 3, k32q32w2 166 / 30 KiB / 6;
 *            D 80: k128q64w8 244 / 107 KiB / 1 (LONG), k64q64w4 242 / 76 KiB / 2 (SHORT),
 *                  k64q32w4 168 / 49.5 KiB / 3, k32q32w2 168 / 36 KiB / 6.
 *
 * Split-KV (FlashAttention-2's and Flash-Decoding's split of the key range; Dao, Haziza, Massa,
 * Sizov 2023, "Flash-Decoding for long-context inference"), for grids of too few blocks to fill
 * the GPU (batch 1, 1 head, seq 4096: 32 forward blocks, 32 backward blocks on 132 SMs, each
 * pass as long as its longest block). fa_split_chunk picks, from (B, H, Tq, Tk, the SM count and
 * the kernel's resident blocks per SM), the most blocks that still fit one wave (or, for the
 * 32-bit kernels, an estimated best split: fa_split_chunk), each piece at least 64 keys (queries)
 * long, here as for the 32-bit kernels (it was 256 here; H100, flash-benchmarking bf16, alternating
 * processes: 64 took d_head 128 seq 512 and 1024 from 0.074-0.079 ms forward+backward to
 * 0.045-0.055, d_head 64 seq 512 from 0.053-0.058 to 0.038-0.039, and left seq 2048 and longer
 * unchanged; 32 was no better: bench/results/h100-2026-11-24-tma, call 7). Forward: each query
 * tile's key range [0, n_end) is cut into pieces of split_keys (a multiple of BC), one block each
 * (blockIdx.x = split * q_tiles + tile), writing its O normalized by its own sum, and its lse, as
 * fp32 partials; then
 * flash_split_combine_kernel merges them: lse = log sum_s exp(lse_s), O = sum_s exp(lse_s - lse)
 * O_s (a piece that saw no key of a row has lse_s = -inf and is skipped; a row no piece saw gets
 * out 0, lse -inf, as unsplit). Backward: each key tile's query range is cut likewise; every
 * piece adds its dK, dV to fp32 accumulators with float4 atomics (as dQ already is: the buffer is
 * one (B,H,Tk,D) pair whatever the split count, and dK, dV then vary in their last bits from run
 * to run, as dQ does), rounded to E with dQ at the end. The partials and accumulators live in the
 * backend's split buffer (tlm_cuda_flash_split_buffer, cuda_common.cuh), not in the op's
 * workspace, so tlm_flash_workspace_floats is unchanged. TLM_FLASH_SPLIT=0 turns splitting off.
 * The split kernels are the same bodies, instantiated with SPLIT = true (registers below), for
 * the LONG lines only. The tf32 and exact-fp32 kernels (flash_attention_tf32.cu, _f32.cu) split
 * the same way with the same machinery, exported through cuda_common.cuh: the plans
 * (tlm_cuda_flash_fwd_split, _bwd_split), the split buffer, the combine (which writes float out
 * as it is for them) and the dK, dV copy out of the accumulators (tlm_cuda_flash_split_dkv: this
 * file's flash_bwd_round_kernel, a copy for float).
 *
 * Environment: TLM_FLASH_SPLIT=0 (no split-KV, in any precision), TLM_FLASH_TILES=name[@d_head],...
 * (the named lines of flash_tiles.def, "auto" or unset: the rule), TLM_FLASH_LOG=1 (each pass's
 * choice on stderr); TLM_FLASH_SM90 (flash_attention_sm90.cu).
 *
 * Supported: D in {16, 32, 64, 80, 128}; any Tq, Tk >= 1; causal (bottom-right) or not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include "cuda/cuda_common.cuh"
#include "tlm/memory.h"

#define FA_PAD 8 /* elements of padding per shared-memory row */

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

#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* ---- forward --------------------------------------------------------------------------------- */

/* One block per (query tile, split, head, batch): blockIdx.x = split * q_tiles + tile (causal:
 * tiles heaviest first), blockIdx.y = head, blockIdx.z = batch. The block's keys are
 * [kv_begin, kv_end): all it needs, [0, n_end), unsplit; split (SPLIT and split_keys > 0), the
 * piece [split * split_keys, +split_keys) of it (split_keys a multiple of BC: the pieces are whole
 * tiles, masked per tile as unsplit). Output: unsplit, out (E) and lse, the op's; split, fp32
 * partials into part, the layout of tlm_cuda_flash_split_combine (cuda_common.cuh) with
 * S = gridDim.x / q_tiles: the piece's O normalized by its own sum, and its lse (-inf for a row
 * that saw no key of it; a block whose piece is empty writes only that). SPLIT = false compiles
 * the split away (split_keys_arg and part_arg unread). */
/* Launch bounds: the split instantiation asks for 1 block per SM (ptxas then may use up to 255
 * registers: without it, it held d_head 32 at 168 and spilled); the unsplit ones MINB, their line
 * of flash_tiles.def: 0 (ptxas's own choice) but for d_head 80, held to 4 blocks per SM: 128
 * registers, as before splitting existed (left alone, ptxas now takes 135, 3 blocks). */
template <typename E, int D, int BC, int WARPS, int R, int MINB, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, SPLIT ? 1 : MINB)
    flash_fwd_kernel(E *__restrict__ out, float *__restrict__ lse, const E *__restrict__ q, const E *__restrict__ k,
                     const E *__restrict__ v, int ld_qkv, int ld_out, int Tq, int Tk, int H, float scale_log2,
                     int causal, int split_keys_arg, float *__restrict__ part_arg) {
    /* each warp owns R groups of 16 query rows: rows warp*16*R + 16*r .. ; every K/V fragment loaded
     * from shared memory feeds R products */
    constexpr int BR = 16 * R * WARPS, LDS = D + FA_PAD, NT = WARPS * 32;
    /* SPLIT, a template argument: the unsplit instantiation compiles the split away and keeps the
     * registers it had before splitting existed */
    const int split_keys = SPLIT ? split_keys_arg : 0;
    float *const part = SPLIT ? part_arg : nullptr;
    extern __shared__ __align__(16) unsigned char fa_smem_raw[];
    E *sQ = reinterpret_cast<E *>(fa_smem_raw);
    E *sK = sQ + BR * LDS; /* [2][BC][LDS] */
    E *sV = sK + 2 * BC * LDS;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int q_tiles = SPLIT ? (Tq + BR - 1) / BR : (int)gridDim.x, split = SPLIT ? (int)blockIdx.x / q_tiles : 0;
    const int x = SPLIT ? (int)blockIdx.x % q_tiles : (int)blockIdx.x;
    const int m_block = causal ? q_tiles - 1 - x : x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int i0 = m_block * BR, offset = Tk - Tq, w0 = i0 + warp * 16 * R; /* the warp's first row */
    const E *qb = q + (int64_t)b * Tq * ld_qkv + h * D;
    /* keys this tile needs: j < n_end (causal: the last row i0 + BR - 1 sees j <= i0 + BR - 1 + offset);
     * this block's share of them: [kv_begin, kv_end) */
    const int n_end = causal ? min(Tk, i0 + BR + offset) : Tk;
    const int kv_begin = split_keys > 0 ? split * split_keys : 0;
    const int kv_end = split_keys > 0 ? min(n_end, kv_begin + split_keys) : n_end;
    const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + BC - 1) / BC : 0;
    const E *kb = k + (int64_t)b * Tk * ld_qkv + h * D;
    const E *vb = v + (int64_t)b * Tk * ld_qkv + h * D;
    /* partials: row (split*B*H + b*H + h)*Tq + i of o_part [S][B*H*Tq][D], and of lse_part after it
     * (computed where used: nothing of it lives through the loop) */
    auto part_row = [&](int i) { return ((int64_t)((int)blockIdx.x / q_tiles) * gridDim.z * H + b * H + h) * Tq + i; };
    auto lse_part = [&]() { return part + (int64_t)(gridDim.x / q_tiles) * gridDim.z * H * Tq * D; };
    if (part && n_tiles == 0) { /* an empty piece: no key for any row */
        for (int r = tid; r < BR && i0 + r < Tq; r += NT) lse_part()[part_row(i0 + r)] = -INFINITY;
        return;
    }

    fa_load_tile<BR, D, NT>(sQ, qb, ld_qkv, i0, Tq, tid);
    if (n_tiles > 0) {
        fa_load_tile<BC, D, NT>(sK, kb, ld_qkv, kv_begin, Tk, tid);
        fa_load_tile<BC, D, NT>(sV, vb, ld_qkv, kv_begin, Tk, tid);
    }
    fa_commit();

    float o[R][D / 8][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int d = 0; d < D / 8; d++) o[r][d][0] = o[r][d][1] = o[r][d][2] = o[r][d][3] = 0.0f;
    float m[R][2], l[R][2];
#pragma unroll
    for (int r = 0; r < R; r++) m[r][0] = m[r][1] = -INFINITY, l[r][0] = l[r][1] = 0.0f;
    uint32_t qf[R][D / 16][4];

    for (int t = 0; t < n_tiles; t++) {
        const int buf = t & 1;
        if (t + 1 < n_tiles) { /* prefetch the next key/value tile into the other buffer */
            fa_load_tile<BC, D, NT>(sK + (buf ^ 1) * BC * LDS, kb, ld_qkv, kv_begin + (t + 1) * BC, Tk, tid);
            fa_load_tile<BC, D, NT>(sV + (buf ^ 1) * BC * LDS, vb, ld_qkv, kv_begin + (t + 1) * BC, Tk, tid);
            fa_commit();
            fa_wait<1>();
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
                    fa_ldsm_x4(qf[r][kk], sQ + fa_lane_a(lane, warp * 16 * R + 16 * r, kk * 16, LDS));
        }
        const E *sKb = sK + buf * BC * LDS, *sVb = sV + buf * BC * LDS;

        float s[R][BC / 8][4];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < BC / 8; n++) s[r][n][0] = s[r][n][1] = s[r][n][2] = s[r][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int np = 0; np < BC / 16; np++) {
                uint32_t bf[4];
                fa_ldsm_x4(bf, sKb + fa_lane_b(lane, np * 16, kk * 16, LDS));
#pragma unroll
                for (int r = 0; r < R; r++) {
                    fa_mma<E>(s[r][2 * np], qf[r][kk], bf[0], bf[1]);
                    fa_mma<E>(s[r][2 * np + 1], qf[r][kk], bf[2], bf[3]);
                }
            }
        }
        const int j0 = kv_begin + t * BC;
        if (j0 + BC > Tk || (causal && j0 + BC - 1 > w0 + offset)) { /* a tile on the diagonal or the end */
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int n = 0; n < BC / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = w0 + 16 * r + g + (e >> 1) * 8, col = j0 + n * 8 + 2 * t4 + (e & 1);
                        if (col >= Tk || (causal && col > row + offset)) s[r][n][e] = -INFINITY;
                    }
        }
        /* online softmax, rows g (h2 = 0) and g + 8 (h2 = 1) of each 16, in the log2 domain */
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < BC / 8; n++) mx = fmaxf(mx, fmaxf(s[r][n][2 * h2], s[r][n][2 * h2 + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[r][h2], mx * scale_log2);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* a row with no key yet: no NaN */
                const float alpha = exp2f(m[r][h2] - m_use);
                m[r][h2] = m_new;
                l[r][h2] *= alpha;
#pragma unroll
                for (int d = 0; d < D / 8; d++) {
                    o[r][d][2 * h2] *= alpha;
                    o[r][d][2 * h2 + 1] *= alpha;
                }
#pragma unroll
                for (int n = 0; n < BC / 8; n++)
#pragma unroll
                    for (int e = 2 * h2; e < 2 * h2 + 2; e++) {
                        const float p = exp2f(fmaf(s[r][n][e], scale_log2, -m_use));
                        s[r][n][e] = p;
                        l[r][h2] += p;
                    }
            }
        /* O += P V: P's accumulators become the A-fragments, rounded to E */
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t a[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) fa_c_to_a<E>(a[r], s[r], kk);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bf[4];
                fa_ldsm_x4_t(bf, sVb + fa_lane_a(lane, kk * 16, dp * 16, LDS));
                fa_mma_16<E>(o, a, bf, dp);
            }
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
            auto L = [&]() { return sum > 0.0f ? (m[r][h2] + log2f(sum)) * FA_LN2 : -INFINITY; }; /* lanes t4 = 0 */
            if (part) {
                float *prow = part + part_row(row) * D + 2 * t4;
#pragma unroll
                for (int d = 0; d < D / 8; d++)
                    *reinterpret_cast<float2 *>(prow + d * 8) =
                        make_float2(o[r][d][2 * h2] * inv, o[r][d][2 * h2 + 1] * inv);
                if (t4 == 0) lse_part()[part_row(row)] = L();
                continue;
            }
            E *orow = out + ((int64_t)b * Tq + row) * ld_out + h * D + 2 * t4;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<uint32_t *>(orow + d * 8) =
                    fa_pack<E>::two(o[r][d][2 * h2] * inv, o[r][d][2 * h2 + 1] * inv);
            if (t4 == 0) lse[((int64_t)b * H + h) * Tq + row] = L();
        }
}

/* The split-KV merge (Flash-Decoding; FlashAttention-2's split of the key range, Dao et al.
 * 2023): per row r and split s, lse_s and o_s (normalized by split s's own sum) as laid out in
 * cuda_common.cuh (tlm_cuda_flash_split_combine). With M = max_s lse_s,
 * lse = M + log sum_s exp(lse_s - M) and out = sum_s exp(lse_s - lse) o_s; a split with
 * lse_s = -inf is skipped (its o_s is never read: it may be garbage), and a row where every split
 * is -inf gets out 0 and lse -inf, as the unsplit kernel. One thread per 4 columns of a row. */
template <typename E>
__global__ void flash_split_combine_kernel(E *__restrict__ out, float *__restrict__ lse, const float *__restrict__ part,
                                           int S, int H, int Tq, int D, int ld_out, int64_t P) {
    const int per_row = D / 4;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= P * per_row) return;
    const int64_t r = t / per_row; /* (b*H + h)*Tq + i */
    const int c = (int)(t % per_row) * 4;
    const float *lse_part = part + (int64_t)S * P * D;
    float M = -INFINITY;
    for (int s = 0; s < S; s++) M = fmaxf(M, lse_part[s * P + r]);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float L = -INFINITY;
    if (M != -INFINITY) {
        float sum = 0.0f;
        for (int s = 0; s < S; s++) {
            const float ls = lse_part[s * P + r];
            if (ls == -INFINITY) continue;
            const float w = expf(ls - M);
            const float4 o = *reinterpret_cast<const float4 *>(part + (s * P + r) * D + c);
            sum += w;
            acc.x = fmaf(w, o.x, acc.x), acc.y = fmaf(w, o.y, acc.y);
            acc.z = fmaf(w, o.z, acc.z), acc.w = fmaf(w, o.w, acc.w);
        }
        L = M + logf(sum);
        const float inv = 1.0f / sum;
        acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
    }
    const int64_t i = r % Tq, bh = r / Tq, h = bh % H, b = bh / H;
    E *orow = out + (b * Tq + i) * ld_out + h * D + c;
    if constexpr (std::is_same<E, float>::value)
        *reinterpret_cast<float4 *>(orow) = acc; /* fp32 and tf32: no rounding */
    else
        *reinterpret_cast<uint2 *>(orow) = make_uint2(fa_pack<E>::two(acc.x, acc.y), fa_pack<E>::two(acc.z, acc.w));
    if (c == 0) lse[r] = L;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* The backward's first kernel, for every (row n = b*Tq + i, head h): delta[(b*H + h)*Tq + i] =
 * sum_d dout * out over head h (FlashAttention-2's D_i = rowsum(dO_i o O_i)), and row
 * (b*H + h)*Tq + i of the dQ accumulator dq_acc (B,H,Tq,D) fp32 set to 0 (the main kernels add to
 * it with atomics; zeroing it here saves a memset launch); with dkv (the split backward's dK and dV
 * accumulators, (B,H,Tk,D) each, one after the other), rows (b*H + h)*Tk + i of both zeroed too,
 * for i < Tk (a second memset saved). A (b, i, h) position, i < T = max(Tq, Tk) (Tq without dkv),
 * takes L lanes (L = D/8 rounded up to a power of two: 2, 4, 8, 16, 16 for D = 16, 32, 64, 80,
 * 128), lane c < D/8 its 8 columns c*8.. (one 16-byte load of dout and of out: D and ld_out
 * multiples of 8, the tensors 16-byte aligned, checked by the launcher; two float4 stores of zeros
 * a row it zeroes), summed over the L lanes by shuffles; 32/L positions a warp, in (b, i, h) order,
 * so a warp reads adjacent heads of one row. */
template <typename E, int D>
__global__ void __launch_bounds__(256)
    flash_bwd_delta_kernel(float *__restrict__ delta, float *__restrict__ dq_acc, float *__restrict__ dkv,
                           const E *__restrict__ dout, const E *__restrict__ out, int ld_out, int B, int Tq, int Tk,
                           int H) {
    constexpr int CH = D / 8, L = CH <= 2 ? 2 : CH <= 4 ? 4 : CH <= 8 ? 8 : CH <= 16 ? 16 : 32;
    static_assert(D % 8 == 0 && CH <= 32, "delta: 8 columns a lane");
    const int T = dkv ? max(Tq, Tk) : Tq;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, w = t / L; /* w = (b*T + i)*H + h */
    const int c = (int)(t % L);
    const bool lane = w < (int64_t)B * T * H && c < CH;
    const int h = (int)(w % H);
    const int64_t bi = w / H, b = bi / T, i = bi % T;
    const bool live = lane && i < Tq; /* a dQ row: delta and the zeros */
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float s = 0.0f;
    const int64_t row = (b * H + h) * Tq + i;
    if (live) {
        const int64_t n = b * Tq + i;
        const uint4 a4 = *reinterpret_cast<const uint4 *>(dout + n * ld_out + h * D + c * 8);
        const uint4 o4 = *reinterpret_cast<const uint4 *>(out + n * ld_out + h * D + c * 8);
        const E *a = reinterpret_cast<const E *>(&a4), *o = reinterpret_cast<const E *>(&o4);
#pragma unroll
        for (int e = 0; e < 8; e++) s = fmaf(tlm_f32(a[e]), tlm_f32(o[e]), s);
        float4 *z = reinterpret_cast<float4 *>(dq_acc + row * D + c * 8);
        z[0] = z[1] = zero;
    }
    if (dkv && lane && i < Tk) { /* this row of the dK and of the dV accumulator */
        float4 *zk = reinterpret_cast<float4 *>(dkv + ((b * H + h) * Tk + i) * D + c * 8);
        float4 *zv = reinterpret_cast<float4 *>(reinterpret_cast<float *>(zk) + (int64_t)B * H * Tk * D);
        zk[0] = zk[1] = zv[0] = zv[1] = zero;
    }
#pragma unroll
    for (int m = L / 2; m >= 1; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m); /* within the L lanes */
    if (live && c == 0) delta[row] = s;
}

/* Up to three gradients from their fp32 accumulators, job blockIdx.y of jobs: dst (B,T,H*D) E with
 * row stride ld (head h at column h*D) = round(acc (B,H,T,D)) (E = float: a copy). Here dQ (T = Tq)
 * always, and dK and dV (T = Tk) when the backward was split; tlm_cuda_flash_split_dkv (the fp32
 * and tf32 backwards, whose dQ has its own kernel) runs dK and dV only, as jobs 0 and 1. */
struct fa_round_jobs {
    void *dst[3];
    const float *acc[3];
    int T[3];
    int dq_tiled; /* acc[0] in the Hopper backward's tiled layout, in blocks of so many columns (0: rows) */
};
template <typename E>
__global__ void flash_bwd_round_kernel(fa_round_jobs jobs, int ld, int B, int H, int D) {
    const int y = blockIdx.y; /* selected, not indexed: the parameter struct stays out of local memory */
    E *dst = static_cast<E *>(y == 0 ? jobs.dst[0] : y == 1 ? jobs.dst[1] : jobs.dst[2]);
    const float *acc = y == 0 ? jobs.acc[0] : y == 1 ? jobs.acc[1] : jobs.acc[2];
    const int T = y == 0 ? jobs.T[0] : y == 1 ? jobs.T[1] : jobs.T[2];
    const int tiled = y == 0 ? jobs.dq_tiled : 0;
    const int64_t total = (int64_t)B * H * T * (D / 2);
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        const int d = (int)(x % (D / 2)) * 2;
        const int64_t row = x / (D / 2); /* (b*H + h)*T + i */
        const int64_t i = row % T, bh = row / T, h = bh % H, b = bh / H;
        const int64_t at = tiled ? bh * T * D + tlm_cuda_flash_dq_tiled_index(i, d, D, tiled) : row * D + d;
        const float2 a = *reinterpret_cast<const float2 *>(acc + at);
        if constexpr (std::is_same<E, float>::value)
            *reinterpret_cast<float2 *>(dst + (b * T + i) * ld + h * D + d) = a; /* fp32: a copy */
        else
            *reinterpret_cast<uint32_t *>(dst + (b * T + i) * ld + h * D + d) = fa_pack<E>::two(a.x, a.y);
    }
}

/* rows [i0, i0 + BR) of a query tile's logsumexp and delta (fp32, (B,H,Tq) rows of one head) into
 * s[0..BR) and s[BR..2BR): 4-byte cp.async (a row of lse is 16-byte aligned only when Tq is a multiple
 * of 4), zero past Tq, in the caller's commit group with the tile's Q and dO */
template <int BR, int NT>
__device__ __forceinline__ void fa_load_rows(float *s, const float *lse_b, const float *delta_b, int i0, int Tq,
                                             int tid) {
#pragma unroll
    for (int c = tid; c < 2 * BR; c += NT) {
        const int r = c % BR;
        const bool valid = i0 + r < Tq;
        const float *src = (c < BR ? lse_b : delta_b) + (valid ? i0 + r : 0);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(fa_smem(s + c)), "l"(src),
                     "r"(valid ? 4 : 0));
    }
}

/* One block per (key tile, split, head, batch): blockIdx.x = split * k_tiles + key tile. The block
 * runs the query tiles [m_begin, m_end) that see its keys when split_q = 0, else the piece
 * [split * split_q, +split_q) of them (a block whose piece is empty returns at once). dK, dV:
 * dkv == NULL: written (E) to dk, dv; else added with fp32 atomics to the accumulators
 * dkv (B,H,Tk,D) (dK, scaled) and dkv + B*H*Tk*D (dV), which the pre-pass zeroed. dq_acc: zeroed by
 * flash_bwd_delta_kernel. Each query tile's logsumexp and delta come into shared memory with its
 * Q and dO (cp.async, double-buffered): read from global memory inside the loop, their latency
 * was paid once a tile. */
template <typename E, int D, int BR, int WARPS, int RK, int MINB, bool SPLIT> /* launch bounds: as the forward's */
__global__ void __launch_bounds__(WARPS * 32, SPLIT ? 1 : MINB)
    flash_bwd_kernel(float *__restrict__ dq_acc, E *__restrict__ dk, E *__restrict__ dv, const E *__restrict__ dout,
                     const E *__restrict__ q, const E *__restrict__ k, const E *__restrict__ v,
                     const float *__restrict__ lse, const float *__restrict__ delta, int ld_qkv, int ld_out, int Tq,
                     int Tk, int H, float scale, float scale_log2, int causal, int split_q_arg,
                     float *__restrict__ dkv_arg) {
    /* each warp owns RK groups of 16 keys (rows warp*16*RK + 16*rk ..): every Q / dO fragment loaded
     * from shared memory feeds RK products */
    constexpr int BC = 16 * RK * WARPS, LDS = D + FA_PAD, LDP = BR + FA_PAD, NT = WARPS * 32;
    constexpr int RG = BR / 16, CG = WARPS / RG, DW = D / CG; /* dQ: warps as RG row groups x CG column groups */
    const int split_q = SPLIT ? split_q_arg : 0; /* a template argument, as in the forward */
    float *const dkv = SPLIT ? dkv_arg : nullptr;
    static_assert(WARPS % RG == 0 && DW % 8 == 0, "dQ partition");
    extern __shared__ __align__(16) unsigned char fa_smem_raw[];
    E *sK = reinterpret_cast<E *>(fa_smem_raw); /* [BC][LDS] */
    E *sV = sK + BC * LDS;                      /* [BC][LDS] */
    E *sQ = sV + BC * LDS;                      /* [2][BR][LDS] */
    E *sdO = sQ + 2 * BR * LDS;                 /* [2][BR][LDS] */
    E *sdS = sdO + 2 * BR * LDS;                /* [BC][LDP]: dS^T, keys by queries */
    float *sLD = reinterpret_cast<float *>(sdS + BC * LDP); /* [2][2][BR]: per buffer, L then delta */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z;
    const int k_tiles = (Tk + BC - 1) / BC, split = SPLIT ? (int)blockIdx.x / k_tiles : 0;
    const int j0 = (SPLIT ? (int)blockIdx.x % k_tiles : (int)blockIdx.x) * BC, offset = Tk - Tq;
    const int kw = warp * 16 * RK; /* the warp's first key in the tile */
    const E *qb = q + (int64_t)b * Tq * ld_qkv + h * D;
    const E *kb = k + (int64_t)b * Tk * ld_qkv + h * D;
    const E *vb = v + (int64_t)b * Tk * ld_qkv + h * D;
    const E *dob = dout + (int64_t)b * Tq * ld_out + h * D;
    const float *lse_b = lse + ((int64_t)b * H + h) * Tq;
    const float *delta_b = delta + ((int64_t)b * H + h) * Tq;
    float *dqa = dq_acc + ((int64_t)b * H + h) * Tq * D;
    /* query tiles that see any key of this block: i >= j0 - offset (causal); this block's share */
    const int m_first = causal ? max(0, j0 - offset) / BR : 0, m_last = (Tq + BR - 1) / BR;
    const int m_begin = split_q > 0 ? m_first + split * split_q : m_first;
    const int m_end = split_q > 0 ? min(m_last, m_begin + split_q) : m_last;
    if (dkv && m_begin >= m_end) return; /* an empty piece: nothing to add */

    fa_load_tile<BC, D, NT>(sK, kb, ld_qkv, j0, Tk, tid);
    fa_load_tile<BC, D, NT>(sV, vb, ld_qkv, j0, Tk, tid);
    if (m_begin < m_end) { /* query tile mb goes to buffer mb & 1: m_begin need not stay in a register */
        fa_load_tile<BR, D, NT>(sQ + (m_begin & 1) * BR * LDS, qb, ld_qkv, m_begin * BR, Tq, tid);
        fa_load_tile<BR, D, NT>(sdO + (m_begin & 1) * BR * LDS, dob, ld_out, m_begin * BR, Tq, tid);
        fa_load_rows<BR, NT>(sLD + (m_begin & 1) * 2 * BR, lse_b, delta_b, m_begin * BR, Tq, tid);
    }
    fa_commit();

    float dk_acc[RK][D / 8][4], dv_acc[RK][D / 8][4];
#pragma unroll
    for (int rk = 0; rk < RK; rk++)
#pragma unroll
        for (int d = 0; d < D / 8; d++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[rk][d][e] = dv_acc[rk][d][e] = 0.0f;
    const int rg = warp % RG, cg = warp / RG;

    for (int mb = m_begin; mb < m_end; mb++) {
        const int buf = mb & 1, i0 = mb * BR;
        if (mb + 1 < m_end) {
            fa_load_tile<BR, D, NT>(sQ + (buf ^ 1) * BR * LDS, qb, ld_qkv, i0 + BR, Tq, tid);
            fa_load_tile<BR, D, NT>(sdO + (buf ^ 1) * BR * LDS, dob, ld_out, i0 + BR, Tq, tid);
            fa_load_rows<BR, NT>(sLD + (buf ^ 1) * 2 * BR, lse_b, delta_b, i0 + BR, Tq, tid);
            fa_commit();
            fa_wait<1>();
        } else {
            fa_wait<0>();
        }
        __syncthreads();
        const E *sQb = sQ + buf * BR * LDS, *sdOb = sdO + buf * BR * LDS;
        const float *sL = sLD + buf * 2 * BR, *sDelta = sL + BR; /* 0 past Tq */

        /* S^T (the warp's keys x BR queries) = K_w Q^T and dP^T = V_w dO^T */
        float s[RK][BR / 8][4], dp[RK][BR / 8][4];
#pragma unroll
        for (int rk = 0; rk < RK; rk++)
#pragma unroll
            for (int n = 0; n < BR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[rk][n][e] = dp[rk][n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[RK][4], a2[RK][4];
#pragma unroll
            for (int rk = 0; rk < RK; rk++) {
                fa_ldsm_x4(a[rk], sK + fa_lane_a(lane, kw + 16 * rk, kk * 16, LDS));
                fa_ldsm_x4(a2[rk], sV + fa_lane_a(lane, kw + 16 * rk, kk * 16, LDS));
            }
#pragma unroll
            for (int np = 0; np < BR / 16; np++) {
                uint32_t bf[4];
                fa_ldsm_x4(bf, sQb + fa_lane_b(lane, np * 16, kk * 16, LDS));
                fa_mma_16<E>(s, a, bf, np);
                fa_ldsm_x4(bf, sdOb + fa_lane_b(lane, np * 16, kk * 16, LDS));
                fa_mma_16<E>(dp, a2, bf, np);
            }
        }
        /* P^T = exp2(S^T scale log2(e) - L log2(e)), 0 where masked; dS^T = P^T (dP^T - delta); L and
         * delta of the query columns this thread holds, 2*t4 + {0, 1} of each n-tile, from shared memory */
        const bool need_mask = i0 + BR > Tq || j0 + BC > Tk || (causal && j0 + BC - 1 > i0 + offset);
#pragma unroll
        for (int n = 0; n < BR / 8; n++) {
            const float2 l2 = *reinterpret_cast<const float2 *>(sL + n * 8 + 2 * t4);
            const float2 d2 = *reinterpret_cast<const float2 *>(sDelta + n * 8 + 2 * t4);
            const float lc[2] = {l2.x * FA_LOG2E, l2.y * FA_LOG2E}, dc[2] = {d2.x, d2.y};
#pragma unroll
            for (int rk = 0; rk < RK; rk++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = j0 + kw + 16 * rk + g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * t4 + (e & 1);
                    const bool ok = !need_mask || (qi < Tq && key < Tk && (!causal || key <= qi + offset));
                    const float p = ok ? exp2f(fmaf(s[rk][n][e], scale_log2, -lc[e & 1])) : 0.0f;
                    s[rk][n][e] = p;
                    dp[rk][n][e] = p * (dp[rk][n][e] - dc[e & 1]);
                }
        }
        /* dV += P^T dO and dK += dS^T Q (k = the BR queries); dS^T to shared memory for dQ */
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) {
            uint32_t a[RK][4], ds[RK][4];
#pragma unroll
            for (int rk = 0; rk < RK; rk++) {
                fa_c_to_a<E>(a[rk], s[rk], kk);
                fa_c_to_a<E>(ds[rk], dp[rk], kk);
                E *srow = sdS + (kw + 16 * rk + g) * LDP + kk * 16 + 2 * t4;
                *reinterpret_cast<uint32_t *>(srow) = ds[rk][0];
                *reinterpret_cast<uint32_t *>(srow + 8 * LDP) = ds[rk][1];
                *reinterpret_cast<uint32_t *>(srow + 8) = ds[rk][2];
                *reinterpret_cast<uint32_t *>(srow + 8 * LDP + 8) = ds[rk][3];
            }
#pragma unroll
            for (int dd = 0; dd < D / 16; dd++) {
                uint32_t bf[4];
                fa_ldsm_x4_t(bf, sdOb + fa_lane_a(lane, kk * 16, dd * 16, LDS));
                fa_mma_16<E>(dv_acc, a, bf, dd);
                fa_ldsm_x4_t(bf, sQb + fa_lane_a(lane, kk * 16, dd * 16, LDS));
                fa_mma_16<E>(dk_acc, ds, bf, dd);
            }
        }
        __syncthreads(); /* dS^T complete */
        /* dQ_i (rows rg*16.., columns cg*DW..) += scale dS K over the block's BC keys */
        float acc[DW / 8][4];
#pragma unroll
        for (int n = 0; n < DW / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t a[4];
            fa_ldsm_x4_t(a, sdS + fa_lane_b(lane, kk * 16, rg * 16, LDP));
#pragma unroll
            for (int n = 0; n < DW / 8; n++) {
                uint32_t b0, b1;
                fa_ldsm_x2_t(b0, b1, sK + (kk * 16 + (lane & 15)) * LDS + cg * DW + n * 8);
                fa_mma<E>(acc[n], a, b0, b1);
            }
        }
        /* 16-byte aligned: D and DW are multiples of 8 */
        tlm_cuda_atomic_add_c_block(dqa, D, i0 + rg * 16, cg * DW, Tq, acc, scale);
        __syncthreads(); /* sdS and this buffer are free for the next tile */
    }
    fa_wait<0>(); /* nothing outstanding after the loop; the K, V loads when it ran no tile */

    /* dK = scale dS^T Q and dV, rows of the warp's keys: added to the accumulators (split), or written */
    if (dkv) {
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
            for (int d = 0; d < D / 8; d++) {
                *reinterpret_cast<uint32_t *>(dk + off + d * 8) =
                    fa_pack<E>::two(dk_acc[rk][d][2 * h2] * scale, dk_acc[rk][d][2 * h2 + 1] * scale);
                *reinterpret_cast<uint32_t *>(dv + off + d * 8) =
                    fa_pack<E>::two(dv_acc[rk][d][2 * h2], dv_acc[rk][d][2 * h2 + 1]);
            }
        }
}

/* ---- launchers ------------------------------------------------------------------------------- */

tlm_status tlm_cuda_flash_attention_check(int D, tlm_dtype dt) {
    if (dt != TLM_DTYPE_F32 && dt != TLM_DTYPE_BF16 && dt != TLM_DTYPE_F16)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "flash attention on cuda: dtype %s is not supported (F32, BF16, F16)",
                        tlm_dtype_name(dt));
    if (!tlm_cuda_flash_supports_d(D))
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention on cuda: d_head %d is not supported (kernels for d_head 16, 32, 64, 80, 128; "
                        "use --attention naive)",
                        D);
    return TLM_OK;
}

static void fa_check_args(tlm_backend *be, const char *op, int D, tlm_dtype dt, int ld_qkv, int ld_out, int H,
                          const void *const *ptrs, int nptrs) {
    if (tlm_cuda_flash_attention_check(D, dt) != TLM_OK) tlm_fatal("%s: %s", op, tlm_last_error());
    if (ld_qkv < H * D || ld_out < H * D) tlm_fatal("%s: ld_qkv %d, ld_out %d < H*D = %d", op, ld_qkv, ld_out, H * D);
    if (dt == TLM_DTYPE_F32) return;
    if (ld_qkv % 8 || ld_out % 8)
        tlm_fatal("%s: ld_qkv %d and ld_out %d must be multiples of 8 elements (16-byte rows)", op, ld_qkv, ld_out);
    for (int i = 0; i < nptrs; i++)
        if (!tlm_aligned16(ptrs[i])) tlm_fatal("%s: tensor %d is not 16-byte aligned", op, i);
}

/* ---- split-KV: plan, workspace, combine ------------------------------------------------------- */

/* TLM_FLASH_SPLIT=0 turns splitting off (side-by-side timing); read once */
static bool fa_split_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TLM_FLASH_SPLIT");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on != 0;
}

/* a split piece's least length in keys (forward) or queries (backward), 64 for every kernel family
 * (the header says why), or TLM_FLASH_SPLIT_MIN (timing; read once) */
static int fa_split_min(void) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("TLM_FLASH_SPLIT_MIN");
        forced = e && atoi(e) > 0 ? atoi(e) : 0;
    }
    return forced ? forced : 64;
}

float *tlm_cuda_flash_split_buffer(tlm_backend *be, size_t *floats) {
    tlm_cuda *cu = tlm_cuda_of(be);
    *floats = 0;
    if (!fa_split_enabled() || cu->flash_split_failed) return NULL;
    if (!cu->flash_split) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        TLM_CUDA_CHECK_OP("flash_attention", cudaStreamIsCapturing(cu->stream, &capture));
        if (capture != cudaStreamCaptureStatusNone) return NULL; /* no allocation inside a graph */
        const size_t n = TLM_FLASH_SPLIT_FLOATS_PER_SM * (size_t)cu->num_sms;
        cu->flash_split = (float *)tlm_alloc(be, n * sizeof(float), TLM_MEM_WORKSPACE, "cuda.flash_split");
        if (!cu->flash_split) { /* out of memory (the message is set): unsplit from now on */
            cu->flash_split_failed = true;
            return NULL;
        }
        cu->flash_split_floats = n;
    }
    *floats = cu->flash_split_floats;
    return cu->flash_split;
}

/* The split of a FlashAttention grid (Flash-Decoding's split-KV; Dao et al. 2023), for both passes:
 * n_outer tiles per (batch, head), BH of those, tile o looping over inner(o) tiles (forward: query
 * tiles over key tiles; backward: key tiles over query tiles). Unsplit, the grid has n_outer * BH
 * blocks and a pass lasts as long as its longest block; a grid smaller than the GPU leaves SMs idle
 * (batch 1, 1 head, seq 4096: 32 forward blocks on 132 SMs), and a causal grid of about one wave
 * waits for its longest tile, twice the mean. Split, tile o's inner range is cut into
 * ceil(inner(o) / chunk) pieces of at most chunk tiles, one block each (the other of its
 * S = ceil(max_o inner(o) / chunk) slots are empty blocks that return at once): every block does
 * at most chunk tiles, causal or not. chunk >= min_chunk tiles, S <= max_splits (what the
 * workspace holds), and chunk is
 *   1. the smallest whose blocks with work fit one wave, SMs x occ (resident blocks per SM): all
 *      run at once, and the pass takes about one piece's time;
 *   2. for the tf32 and exact-fp32 kernels (rebalance), where no chunk fits one wave (a causal grid of
 *      nearly a wave), the one that minimizes the pass's estimated length in tiles, max(chunk, W /
 *      slots) + F x ceil(blocks / slots) (W the grid's tiles, slots = SMs x occ, F =
 *      FA_SPLIT_PIECE_COST: what a piece costs besides its tiles, its Q tile (forward) or K, V tile
 *      (backward) loaded with nothing to overlap, BR x (D + 1) fp32 partials written or BC x 2D fp32
 *      atomics added), the longest among equals; the unsplit grid is one of the candidates. On the
 *      H100 (exact fp32, d_head 128, batch 1, 1 head, seq 8192: 128 backward blocks of 1 to 128 query
 *      tiles) fwd+bwd took 2.07 ms against 3.26-3.27 unsplit; tf32 d_head 128 at 16384 2.89 against
 *      4.69. In place of 1 it was 1.2-2.5x slower at seq 4096-32768, d_head 16-64 (bf16, tf32), and
 *      for the bf16 kernels at 32768, d_head 16 and 32, 1.4-1.5x slower than unsplit: pieces cost more
 *      than F there, and so do the partials' merge and the empty blocks
 *      (bench/results/h100-2026-11-24-pingpong).
 * Returns chunk and *S; 0 and *S = 1: no split (a grid that fills a wave already, a range too short
 * to cut, no room). O(longest x n_outer) steps, n_outer x BH under one wave. */
#define FA_SPLIT_PIECE_COST 1
template <typename F>
static int fa_split_chunk(int n_outer, int64_t BH, int sms, int occ, int min_chunk, int max_splits, bool rebalance,
                          F inner, int *S) {
    *S = 1;
    const int64_t wave = (int64_t)sms * occ;
    if ((int64_t)n_outer * BH >= wave || max_splits < 2) return 0;
    int longest = 0;
    int64_t work = 0;
    for (int o = 0; o < n_outer; o++) {
        longest = max(longest, inner(o));
        work += inner(o);
    }
    work *= BH;
    auto blocks_of = [&](int chunk) {
        int64_t blocks = 0;
        for (int o = 0; o < n_outer; o++) blocks += (inner(o) + chunk - 1) / chunk;
        return blocks * BH;
    };
    int best = 0;
    for (int s = 2; s <= longest; s++) { /* 1: s = longest gives chunks of one tile */
        const int chunk = (longest + s - 1) / s, splits = (longest + chunk - 1) / chunk;
        if (chunk < min_chunk || splits > max_splits || blocks_of(chunk) > wave) break;
        best = chunk;
        *S = splits;
    }
    if (best || !rebalance) return best;
    /* 2: chunk = longest is the unsplit grid; shorter chunks replace it only when strictly better */
    const int64_t balanced = (work + wave - 1) / wave;
    int64_t best_cost = -1;
    for (int chunk = longest; chunk >= max(1, min_chunk); chunk--) {
        const int splits = (longest + chunk - 1) / chunk;
        if (splits > max_splits) break;
        const int64_t waves = (blocks_of(chunk) + wave - 1) / wave;
        const int64_t cost = max((int64_t)chunk, balanced) + FA_SPLIT_PIECE_COST * waves;
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            best = splits > 1 ? chunk : 0;
            *S = splits > 1 ? splits : 1;
        }
    }
    return best;
}

/* the split buffer: planned against its size (known before it exists), allocated only for a
 * launch that splits; NULL (and *S = 1: run unsplit) when it cannot be had now */
static float *fa_split_take(tlm_backend *be, int *S) {
    size_t floats = 0;
    float *ws = tlm_cuda_flash_split_buffer(be, &floats);
    if (!ws) *S = 1;
    return ws;
}

/* Forward plan: keys per split (a multiple of BC; 0: unsplit), *S splits, *part the partials'
 * workspace (S * B*H*Tq * (D + 1) floats, the layout of tlm_cuda_flash_split_combine). A piece has
 * at least the family's least keys (and one key tile). part NULL: the plan only (nothing allocated). */
int tlm_cuda_flash_fwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S, float **part) {
    *S = 1;
    if (part) *part = NULL;
    const int sms = tlm_cuda_of(be)->num_sms, q_tiles = (Tq + BR - 1) / BR, offset = Tk - Tq;
    const int64_t BH = (int64_t)B * H;
    if (!fa_split_enabled() || (int64_t)q_tiles * BH >= (int64_t)sms * occ) return 0;
    const int64_t max_splits = (int64_t)(TLM_FLASH_SPLIT_FLOATS_PER_SM * sms) / (BH * Tq * (D + 1));
    auto key_tiles = [&](int m) { /* key tiles query tile m needs */
        const int n_end = causal ? min(Tk, (m + 1) * BR + offset) : Tk;
        return n_end > 0 ? (n_end + BC - 1) / BC : 0;
    };
    const int chunk = fa_split_chunk(q_tiles, BH, sms, occ, max(1, fa_split_min() / BC),
                                     (int)min(max_splits, (int64_t)1024), family == TLM_FLASH_SPLIT_32BIT, key_tiles,
                                     S);
    if (!chunk || (part && !(*part = fa_split_take(be, S)))) return 0;
    return chunk * BC;
}

/* Backward plan: query tiles per split (0: unsplit), *S splits, *dkv the fp32 dK, dV accumulators
 * (2 * B*H*Tk*D floats, when they fit the split buffer). A piece has at least the family's least
 * queries. dkv NULL: the plan only. */
int tlm_cuda_flash_bwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S, float **dkv) {
    *S = 1;
    if (dkv) *dkv = NULL;
    const int sms = tlm_cuda_of(be)->num_sms, k_tiles = (Tk + BC - 1) / BC, m_last = (Tq + BR - 1) / BR;
    const int offset = Tk - Tq;
    const int64_t BH = (int64_t)B * H;
    if (!fa_split_enabled() || (int64_t)k_tiles * BH >= (int64_t)sms * occ ||
        (size_t)(2 * BH * Tk * D) > TLM_FLASH_SPLIT_FLOATS_PER_SM * sms)
        return 0;
    auto query_tiles = [&](int j) { /* query tiles that see key tile j */
        return m_last - (causal ? max(0, j * BC - offset) / BR : 0);
    };
    const int chunk = fa_split_chunk(k_tiles, BH, sms, occ, max(1, fa_split_min() / BR), 1024,
                                     family == TLM_FLASH_SPLIT_32BIT, query_tiles, S);
    if (!chunk || (dkv && !(*dkv = fa_split_take(be, S)))) return 0;
    return chunk;
}

void tlm_cuda_flash_split_combine(tlm_backend *be, void *out, float *lse, const float *part, int S, int B, int Tq,
                                  int H, int D, int ld_out, tlm_dtype dt) {
    const char *op = "flash_attention_forward (split-KV combine)";
    const int64_t P = (int64_t)B * H * Tq, threads = P * (D / 4);
    const int vec = dt == TLM_DTYPE_F32 ? 4 : 8; /* out's row alignment: one 16-byte (F32) or 8-byte store */
    if (D % 8 || ld_out % vec || !tlm_aligned16(part) || !tlm_aligned16(out))
        tlm_fatal("%s: d_head %d must be a multiple of 8 and ld_out %d of %d, out and the partials 16-byte aligned", op,
                  D, ld_out, vec);
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        flash_split_combine_kernel<E><<<(unsigned)((threads + 255) / 256), 256, 0, tlm_cuda_stream(be)>>>(
            (E *)out, lse, part, S, H, Tq, D, ld_out, P);
        TLM_CUDA_CHECK_LAUNCH();
    });
}

void tlm_cuda_flash_split_dkv(tlm_backend *be, void *dk, void *dv, const float *dkv, int ld_qkv, int B, int H, int Tk,
                              int D, tlm_dtype dt) {
    const char *op = "flash_attention_backward (split-KV dK, dV)";
    if (ld_qkv % 2 || ((uintptr_t)dk & 7) || ((uintptr_t)dv & 7) || ((uintptr_t)dkv & 7))
        tlm_fatal("%s: ld_qkv %d must be even, dk, dv and the accumulators 8-byte aligned", op, ld_qkv);
    const size_t n = (size_t)B * H * Tk * D;
    const fa_round_jobs jobs = {{dk, dv, NULL}, {dkv, dkv + n, NULL}, {Tk, Tk, 0}, 0};
    const dim3 grid(tlm_cuda_grid(be, n / 2, 256), 2);
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        flash_bwd_round_kernel<E><<<grid, 256, 0, tlm_cuda_stream(be)>>>(jobs, ld_qkv, B, H, D);
        TLM_CUDA_CHECK_LAUNCH();
    });
}

/* ---- tile configurations: the table, TLM_FLASH_TILES, the rule ---------------------------------- */

enum { FA_LONG, FA_SHORT, FA_CAND };
enum { FA_FWD, FA_BWD };

/* a context at most this long may take a SHORT configuration (the rule below) */
#define FA_SHORT_MAX_CONTEXT 1024

/* One line of flash_tiles.def. outer: the block's tile (forward: BR query rows; backward: BC keys);
 * inner: the tiles it walks (forward: BC keys; backward: BR query rows). */
struct fa_tile {
    int pass, d, outer, inner, warps, role;
};
static constexpr fa_tile fa_tiles[] = {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE) {FA_FWD, D, BR, BC, W, FA_##ROLE},
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE) {FA_BWD, D, BC, BR, W, FA_##ROLE},
#include "cuda/flash_tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
};
static constexpr int FA_NTILES = (int)(sizeof fa_tiles / sizeof fa_tiles[0]);

/* the table's invariants: every d_head with kernels has one LONG line per pass and at most one SHORT */
static constexpr int fa_tiles_count(int pass, int d, int role) {
    int n = 0;
    for (int i = 0; i < FA_NTILES; i++) n += fa_tiles[i].pass == pass && fa_tiles[i].d == d && fa_tiles[i].role == role;
    return n;
}
static constexpr bool fa_tiles_valid() {
    const int ds[] = {16, 32, 64, 80, 128};
    for (int d : ds)
        for (int pass = FA_FWD; pass <= FA_BWD; pass++)
            if (fa_tiles_count(pass, d, FA_LONG) != 1 || fa_tiles_count(pass, d, FA_SHORT) > 1) return false;
    return true;
}
static_assert(fa_tiles_valid(), "flash_tiles.def: one LONG line per (pass, d_head), at most one SHORT");

/* "q<BR>k<BC>w<WARPS>" (forward), "k<BC>q<BR>w<WARPS>" (backward) */
static void fa_tile_name(const fa_tile *t, char *buf, size_t cap) {
    snprintf(buf, cap, t->pass == FA_FWD ? "q%dk%dw%d" : "k%dq%dw%d", t->outer, t->inner, t->warps);
}

static const fa_tile *fa_tile_find(int pass, int D, int role) {
    for (int i = 0; i < FA_NTILES; i++)
        if (fa_tiles[i].pass == pass && fa_tiles[i].d == D && fa_tiles[i].role == role) return &fa_tiles[i];
    return NULL;
}

/* TLM_FLASH_TILES: a comma list of configuration names (flash_tiles.def, e.g. "q64k64w4,k64q64w4"),
 * each optionally qualified by a d_head ("q64k32w4@80": that d_head's line only; a name may have
 * lines for several d_heads): a pass whose d_head has a line of a listed name runs the first such
 * line in list order — not the Hopper kernels, and split-KV only when it is that d_head's LONG line;
 * other passes and d_heads take the rule. Unset, empty or "auto": the rule everywhere. A name with
 * no line (for its d_head) is fatal, the message listing the names. Read at every launch (one
 * getenv: the GPU test sets it between cases), parsed when it changes. Returns the line for
 * (pass, D), or NULL. */
static const fa_tile *fa_tile_named(int pass, int D) {
    static char parsed[256];
    static bool have = false;
    static int listed[4 * FA_NTILES], n_listed; /* line indices, in list order */
    const char *env = getenv("TLM_FLASH_TILES");
    if (!env) env = "";
    if (!have || strcmp(env, parsed) != 0) {
        if (strlen(env) >= sizeof parsed) tlm_fatal("TLM_FLASH_TILES: longer than %zu characters", sizeof parsed - 1);
        n_listed = 0;
        char list[sizeof parsed];
        snprintf(list, sizeof list, "%s", env);
        for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            if (strcmp(tok, "auto") == 0) continue;
            char *at = strchr(tok, '@');
            const int only_d = at ? atoi(at + 1) : 0;
            if (at) *at = 0;
            bool found = false;
            for (int i = 0; i < FA_NTILES; i++) {
                char name[32];
                fa_tile_name(&fa_tiles[i], name, sizeof name);
                if (strcmp(tok, name) == 0 && (!only_d || fa_tiles[i].d == only_d) && n_listed < 4 * FA_NTILES) {
                    listed[n_listed++] = i;
                    found = true;
                }
            }
            if (!found) {
                char known[1024] = "";
                for (int i = 0; i < FA_NTILES; i++) {
                    char name[32];
                    fa_tile_name(&fa_tiles[i], name, sizeof name);
                    const size_t len = strlen(known);
                    snprintf(known + len, sizeof known - len, "%s%s@%d", i ? ", " : "", name, fa_tiles[i].d);
                }
                tlm_fatal("TLM_FLASH_TILES: no configuration '%s'%s%s (auto, or NAME[@D_HEAD] of "
                          "src/cuda/flash_tiles.def: %s)", tok, at ? " for d_head " : "", at ? at + 1 : "", known);
            }
        }
        snprintf(parsed, sizeof parsed, "%s", env);
        have = true;
    }
    for (int k = 0; k < n_listed; k++)
        if (fa_tiles[listed[k]].pass == pass && fa_tiles[listed[k]].d == D) return &fa_tiles[listed[k]];
    return NULL;
}

/* TLM_FLASH_LOG=1: a line on stderr whenever a pass runs other kernels or another shape than the
 * pass before it did (which configuration the rule took, for timing runs); read once */
static void fa_log(int pass, int B, int H, int Tq, int Tk, int D, bool causal, const char *what, const char *why,
                   int S) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TLM_FLASH_LOG");
        on = e && strcmp(e, "0") != 0 && e[0];
    }
    if (!on) return;
    static char last[2][192];
    char line[192];
    snprintf(line, sizeof line, "B=%d H=%d Tq=%d Tk=%d D=%d %s: %s (%s)%s", B, H, Tq, Tk, D,
             causal ? "causal" : "full", what, why, S > 1 ? ", split-KV" : "");
    if (strcmp(line, last[pass]) == 0) return;
    snprintf(last[pass], sizeof last[pass], "%s", line);
    fprintf(stderr, "tlm flash %s: %s\n", pass == FA_FWD ? "forward" : "backward", line);
}

/* a kernel's shared-memory limit raised to smem (once), and its resident blocks per SM at that size */
template <auto kernel> static int fa_prepare(int threads, size_t smem) {
    tlm_cuda_set_smem<kernel>("flash_attention", smem);
    return tlm_cuda_occupancy<kernel>("flash_attention", threads, smem);
}

/* forward configuration: WARPS warps of R x 16 query rows, BC keys per tile; MINB, LONG: its line */
template <int W, int BC, int R, int MINB, bool LONG> struct fa_fwd_cfg {
    static constexpr int warps = W, bc = BC, r = R, br = 16 * R * W, minb = MINB;
    static constexpr bool is_long = LONG; /* only LONG lines have a split-KV instantiation */
    template <typename E, int D> static constexpr size_t smem() {
        return (size_t)(br + 4 * BC) * (D + FA_PAD) * sizeof(E); /* Q; K, V double-buffered */
    }
};

/* backward configuration: WARPS warps of RK x 16 keys, BR queries per tile */
template <int W, int BR, int RK, int MINB, bool LONG> struct fa_bwd_cfg {
    static constexpr int warps = W, br = BR, rk = RK, bc = 16 * RK * W, minb = MINB;
    static constexpr bool is_long = LONG;
    /* K, V; Q, dO double-buffered; dS^T; L and delta double-buffered */
    template <typename E, int D> static constexpr size_t smem() {
        return ((size_t)(2 * bc + 4 * BR) * (D + FA_PAD) + (size_t)bc * (BR + FA_PAD)) * sizeof(E) +
               (size_t)4 * BR * sizeof(float);
    }
};

/* f(cfg) with the configuration type of line t (pass FA_FWD or FA_BWD, d_head DD); false when t is
 * not a line of DD (not reached: t comes from the table) */
template <int DD, typename F> static bool fa_fwd_with(const fa_tile *t, F &&f) {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE)                                                                       \
    if constexpr (DD == D) {                                                                                          \
        static_assert(BR % (16 * W) == 0, "flash_tiles.def: BR a multiple of 16 x WARPS");                            \
        if (t->outer == BR && t->inner == BC && t->warps == W) {                                                      \
            f(fa_fwd_cfg<W, BC, BR / (16 * W), MINB, FA_##ROLE == FA_LONG>{});                                        \
            return true;                                                                                              \
        }                                                                                                             \
    }
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE)
#include "cuda/flash_tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
    return false;
}
template <int DD, typename F> static bool fa_bwd_with(const fa_tile *t, F &&f) {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE)
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE)                                                                       \
    if constexpr (DD == D) {                                                                                          \
        static_assert(BC % (16 * W) == 0 && BR % 16 == 0 && BR <= 16 * W, "flash_tiles.def: backward tiles");        \
        if (t->outer == BC && t->inner == BR && t->warps == W) {                                                      \
            f(fa_bwd_cfg<W, BR, BC / (16 * W), MINB, FA_##ROLE == FA_LONG>{});                                        \
            return true;                                                                                              \
        }                                                                                                             \
    }
#include "cuda/flash_tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
    return false;
}

/* The rule, for a pass no TLM_FLASH_TILES name covers, after the Hopper kernels declined it (on a
 * Hopper GPU, d_head 32, 64, 80 and 128 forward and backward with grids of at least two thirds of
 * a wave run there: tlm_cuda_flash_*_sm90). The LONG line, but the SHORT one (where the pass and
 * d_head have one) when all three hold:
 *   (1) a short context: max(Tq, Tk) <= FA_SHORT_MAX_CONTEXT (1024): a block walks few tiles, and
 *       its fixed costs (its own tile loaded, the pipeline's first wait, the epilogue) weigh;
 *   (2) the LONG grid is under two waves: B*H*ceil(T / outer) blocks < 2 x SMs x the LONG kernel's
 *       resident blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor): SMs idle, or a
 *       second wave that leaves most of them idle (the LM at context 256: small's backward has 96
 *       blocks of 4 warps for 132 SMs, each walking up to 8 query tiles in sequence);
 *   (3) split-KV does not split the LONG grid (tlm_cuda_flash_fwd_split / _bwd_split: batch x heads x tiles
 *       under one wave with ranges of 512 and more, the flash-benchmarking rows).
 * A function of (B, H, Tq, Tk, D, causal, the SM count) and of the kernels' occupancy on the device;
 * a long sequence (the leaderboard: 16384) always takes LONG. Returns the line. */
template <typename E, int DD>
static const fa_tile *fa_rule(tlm_backend *be, int pass, int B, int H, int Tq, int Tk, bool causal, const char **why) {
    const fa_tile *lng = fa_tile_find(pass, DD, FA_LONG), *sh = fa_tile_find(pass, DD, FA_SHORT);
    *why = "rule: long";
    if (!sh || max(Tq, Tk) > FA_SHORT_MAX_CONTEXT) return lng;
    const int sms = tlm_cuda_of(be)->num_sms;
    int occ = 1, occ_split = 1; /* resident LONG blocks per SM, unsplit and split */
    int64_t blocks;
    int S = 1, split;
    if (pass == FA_FWD) {
        fa_fwd_with<DD>(lng, [&](auto cfg) {
            using C = decltype(cfg);
            if constexpr (C::is_long) {
                constexpr size_t smem = C::template smem<E, DD>();
                occ = fa_prepare<flash_fwd_kernel<E, DD, C::bc, C::warps, C::r, C::minb, false>>(C::warps * 32, smem);
                occ_split =
                    fa_prepare<flash_fwd_kernel<E, DD, C::bc, C::warps, C::r, C::minb, true>>(C::warps * 32, smem);
            }
        });
        blocks = (int64_t)B * H * ((Tq + lng->outer - 1) / lng->outer);
        split = tlm_cuda_flash_fwd_split(be, B, H, Tq, Tk, DD, lng->outer, lng->inner, causal,
                                         TLM_FLASH_SPLIT_16BIT, occ_split, &S, NULL);
    } else {
        fa_bwd_with<DD>(lng, [&](auto cfg) {
            using C = decltype(cfg);
            if constexpr (C::is_long) {
                constexpr size_t smem = C::template smem<E, DD>();
                occ = fa_prepare<flash_bwd_kernel<E, DD, C::br, C::warps, C::rk, C::minb, false>>(C::warps * 32, smem);
                occ_split =
                    fa_prepare<flash_bwd_kernel<E, DD, C::br, C::warps, C::rk, C::minb, true>>(C::warps * 32, smem);
            }
        });
        blocks = (int64_t)B * H * ((Tk + lng->outer - 1) / lng->outer);
        split = tlm_cuda_flash_bwd_split(be, B, H, Tq, Tk, DD, lng->inner, lng->outer, causal,
                                         TLM_FLASH_SPLIT_16BIT, occ_split, &S, NULL);
    }
    if (blocks >= (int64_t)2 * sms * occ || split > 0) return lng;
    *why = "rule: short";
    return sh;
}

void tlm_cuda_flash_attention_forward(tlm_backend *be, void *out, float *lse, const void *q, const void *k,
                                      const void *v, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D,
                                      bool causal, tlm_precision p) {
    const char *op = "flash_attention_forward";
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    if (B <= 0 || Tq <= 0 || Tk <= 0 || H <= 0) return;
    const void *ptrs[] = {out, q, k, v};
    fa_check_args(be, op, D, dt, ld_qkv, ld_out, H, ptrs, 4);
    if (H > 65535 || B > 65535) tlm_fatal("%s: batch %d or heads %d above 65535", op, B, H);
    cudaStream_t st = tlm_cuda_stream(be);
    if (dt == TLM_DTYPE_F32) { /* tf32: TF32 tensor cores where those kernels apply; fp32: exact */
        if (p == TLM_PRECISION_TF32 &&
            tlm_cuda_flash_forward_tf32(be, (float *)out, lse, (const float *)q, (const float *)k, (const float *)v,
                                        ld_qkv, ld_out, B, Tq, Tk, H, D, causal))
            return;
        tlm_cuda_flash_forward_f32(be, (float *)out, lse, (const float *)q, (const float *)k, (const float *)v, ld_qkv,
                                   ld_out, B, Tq, Tk, H, D, causal);
        return;
    }
    /* Hopper: the wgmma kernel (flash_attention_sm90.cu) where it has one and the grid of 128-row
     * query tiles fills the GPU (one block an SM), unless TLM_FLASH_TILES names a configuration;
     * smaller grids go to the tile rule below (split-KV, SHORT) */
    const fa_tile *named = fa_tile_named(FA_FWD, D);
    if (!named && tlm_cuda_flash_forward_sm90(be, dt, out, lse, q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, causal)) {
        fa_log(FA_FWD, B, H, Tq, Tk, D, causal, "sm90 wgmma", "grid of at least one block an SM", 1);
        return;
    }
    const float scale_log2 = FA_LOG2E / sqrtf((float)D);
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        if constexpr (!std::is_same<E, float>::value) {
            tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
                constexpr int DD = decltype(dc)::value;
                const char *why = "TLM_FLASH_TILES";
                const fa_tile *t = named ? named : fa_rule<E, DD>(be, FA_FWD, B, H, Tq, Tk, causal, &why);
                auto launch = [&](auto cfg) {
                    using C = decltype(cfg);
                    constexpr int WARPS = C::warps, BC = C::bc, R = C::r, BR = C::br;
                    constexpr auto kernel = flash_fwd_kernel<E, DD, BC, WARPS, R, C::minb, false>;
                    constexpr size_t smem = C::template smem<E, DD>();
                    tlm_cuda_set_smem<kernel>(op, smem);
                    /* split-KV (LONG lines) when the grid is small: tlm_cuda_flash_fwd_split */
                    int S = 1, split_keys = 0;
                    float *part = NULL;
                    auto chosen = kernel;
                    if constexpr (C::is_long) {
                        constexpr auto split_kernel = flash_fwd_kernel<E, DD, BC, WARPS, R, C::minb, true>;
                        tlm_cuda_set_smem<split_kernel>(op, smem);
                        split_keys = tlm_cuda_flash_fwd_split(be, B, H, Tq, Tk, DD, BR, BC, causal,
                                                  TLM_FLASH_SPLIT_16BIT,
                                                  tlm_cuda_occupancy<split_kernel>(op, WARPS * 32, smem), &S, &part);
                        if (part) chosen = split_kernel;
                    }
                    char name[32];
                    fa_tile_name(t, name, sizeof name);
                    fa_log(FA_FWD, B, H, Tq, Tk, DD, causal, name, why, S);
                    const dim3 grid((unsigned)((Tq + BR - 1) / BR * S), (unsigned)H, (unsigned)B);
                    chosen<<<grid, WARPS * 32, smem, st>>>((E *)out, lse, (const E *)q, (const E *)k, (const E *)v,
                                                           ld_qkv, ld_out, Tq, Tk, H, scale_log2, causal ? 1 : 0,
                                                           split_keys, part);
                    TLM_CUDA_CHECK_LAUNCH();
                    if (part) tlm_cuda_flash_split_combine(be, out, lse, part, S, B, Tq, H, DD, ld_out, dt);
                };
                if (!fa_fwd_with<DD>(t, launch)) tlm_fatal("%s: no forward tiles for d_head %d", op, DD);
            });
        }
    });
}

void tlm_cuda_flash_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, float *workspace,
                                       const void *dout, const void *q, const void *k, const void *v,
                                       const void *out, const float *lse, int ld_qkv, int ld_out, int B, int Tq,
                                       int Tk, int H, int D, bool causal, tlm_precision p) {
    const char *op = "flash_attention_backward";
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    if (B <= 0 || Tq <= 0 || Tk <= 0 || H <= 0) return;
    const void *ptrs[] = {dq, dk, dv, dout, q, k, v, out};
    fa_check_args(be, op, D, dt, ld_qkv, ld_out, H, ptrs, 8);
    if (H > 65535 || B > 65535) tlm_fatal("%s: batch %d or heads %d above 65535", op, B, H);
    if (!workspace) tlm_fatal("%s: no workspace (tlm_flash_workspace_floats floats)", op);
    cudaStream_t st = tlm_cuda_stream(be);
    if (dt == TLM_DTYPE_F32) { /* as the forward */
        if (p == TLM_PRECISION_TF32 &&
            tlm_cuda_flash_backward_tf32(be, (float *)dq, (float *)dk, (float *)dv, workspace, (const float *)dout,
                                         (const float *)q, (const float *)k, (const float *)v, (const float *)out, lse,
                                         ld_qkv, ld_out, B, Tq, Tk, H, D, causal))
            return;
        tlm_cuda_flash_backward_f32(be, (float *)dq, (float *)dk, (float *)dv, workspace, (const float *)dout,
                                    (const float *)q, (const float *)k, (const float *)v, (const float *)out, lse,
                                    ld_qkv, ld_out, B, Tq, Tk, H, D, causal);
        return;
    }
    /* workspace: the dQ accumulator (B,H,Tq,D) first (16-byte aligned for float4 atomics), then delta */
    float *dq_acc = workspace, *delta = workspace + (size_t)B * H * Tq * D;
    if (!tlm_aligned16(dq_acc)) tlm_fatal("%s: the workspace is not 16-byte aligned", op);
    float *dkv = NULL; /* split: dK, dV fp32 accumulators (B,H,Tk,D) each, in the backend's split buffer */
    const float scale = 1.0f / sqrtf((float)D), scale_log2 = FA_LOG2E * scale;
    const fa_tile *named = fa_tile_named(FA_BWD, D);
    int dq_tiled = 0; /* the Hopper kernel's tiled dQ accumulator: its column blocks (tlm_cuda_flash_dq_tiled_index) */
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        if constexpr (!std::is_same<E, float>::value) {
            tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
                constexpr int DD = decltype(dc)::value;
                /* the pre-pass: delta, and the dQ accumulator (with dkv: the split's dK, dV accumulators
                 * too) zeroed, no memset; L lanes a (b, i, h) position */
                auto prepass = [&](float *dkv_zero) {
                    constexpr int CH = DD / 8, L = CH <= 2 ? 2 : CH <= 4 ? 4 : CH <= 8 ? 8 : CH <= 16 ? 16 : 32;
                    const int64_t positions = (int64_t)B * (dkv_zero ? max(Tq, Tk) : Tq) * H;
                    flash_bwd_delta_kernel<E, DD><<<(unsigned)((positions * L + 255) / 256), 256, 0, st>>>(
                        delta, dq_acc, dkv_zero, (const E *)dout, (const E *)out, ld_out, B, Tq, Tk, H);
                    TLM_CUDA_CHECK_LAUNCH();
                };
                /* Hopper: the wgmma kernel (flash_attention_sm90.cu) where it has one and its grid of
                 * 128-key tiles fills the GPU, unless TLM_FLASH_TILES names a configuration; smaller
                 * grids go to the tile rule below (split-KV, SHORT) */
                if (!named && tlm_cuda_flash_backward_sm90_applies(be, dt, B, Tk, H, DD)) {
                    prepass(NULL);
                    tlm_cuda_flash_backward_sm90(be, dt, dq_acc, dk, dv, dout, q, k, v, lse, delta, ld_qkv, ld_out, B,
                                                 Tq, Tk, H, D, causal, &dq_tiled);
                    fa_log(FA_BWD, B, H, Tq, Tk, DD, causal, "sm90 wgmma", "grid of at least one block an SM", 1);
                    return; /* only the dQ rounding below is left */
                }
                const char *why = "TLM_FLASH_TILES";
                const fa_tile *t = named ? named : fa_rule<E, DD>(be, FA_BWD, B, H, Tq, Tk, causal, &why);
                auto launch = [&](auto cfg) {
                    using C = decltype(cfg);
                    constexpr int WARPS = C::warps, BR = C::br, RK = C::rk, BC = C::bc;
                    constexpr auto kernel = flash_bwd_kernel<E, DD, BR, WARPS, RK, C::minb, false>;
                    constexpr size_t smem = C::template smem<E, DD>();
                    tlm_cuda_set_smem<kernel>(op, smem);
                    /* split query ranges (LONG lines) when the grid is small: tlm_cuda_flash_bwd_split */
                    int S = 1, split_q = 0;
                    auto chosen = kernel;
                    if constexpr (C::is_long) {
                        constexpr auto split_kernel = flash_bwd_kernel<E, DD, BR, WARPS, RK, C::minb, true>;
                        tlm_cuda_set_smem<split_kernel>(op, smem);
                        split_q = tlm_cuda_flash_bwd_split(be, B, H, Tq, Tk, DD, BR, BC, causal,
                                               TLM_FLASH_SPLIT_16BIT,
                                               tlm_cuda_occupancy<split_kernel>(op, WARPS * 32, smem), &S, &dkv);
                        if (dkv) chosen = split_kernel;
                    }
                    /* split: the dK, dV accumulators zeroed too (the split buffer: tlm_alloc, 256-byte aligned) */
                    prepass(dkv);
                    char name[32];
                    fa_tile_name(t, name, sizeof name);
                    fa_log(FA_BWD, B, H, Tq, Tk, DD, causal, name, why, S);
                    const dim3 grid((unsigned)((Tk + BC - 1) / BC * S), (unsigned)H, (unsigned)B);
                    chosen<<<grid, WARPS * 32, smem, st>>>(dq_acc, (E *)dk, (E *)dv, (const E *)dout, (const E *)q,
                                                           (const E *)k, (const E *)v, lse, delta, ld_qkv, ld_out, Tq,
                                                           Tk, H, scale, scale_log2, causal ? 1 : 0, split_q, dkv);
                    TLM_CUDA_CHECK_LAUNCH();
                };
                if (!fa_bwd_with<DD>(t, launch)) tlm_fatal("%s: no backward tiles for d_head %d", op, DD);
            });
            /* dQ, and dK, dV when split, rounded from their accumulators */
            const size_t dkv_n = (size_t)B * H * Tk * D;
            const fa_round_jobs jobs = {{dq, dk, dv}, {dq_acc, dkv, dkv ? dkv + dkv_n : NULL}, {Tq, Tk, Tk}, dq_tiled};
            const dim3 grid(tlm_cuda_grid(be, (size_t)B * H * (dkv ? max(Tq, Tk) : Tq) * (D / 2), 256), dkv ? 3 : 1);
            flash_bwd_round_kernel<E><<<grid, 256, 0, st>>>(jobs, ld_qkv, B, H, D);
            TLM_CUDA_CHECK_LAUNCH();
        }
    });
}
