/* f32.cu — FlashAttention-2 in exact fp32 on the GPU (Dao 2023, "FlashAttention-2:
 * Faster Attention with Better Parallelism and Work Partitioning", Algorithm 1 forward,
 * Algorithm 2 backward): CUDA-core (SIMT) kernels, every product and sum an fp32 FMA, no tensor
 * cores and no TF32, called by the ops of ops.cu in the fp32 mode (and in the tf32
 * mode where the TF32 kernels of tf32.cu do not apply). Semantics, layout and
 * masking are those of the CPU reference (tlm/flash_attention.h, src/cpu/flash_attention.c):
 * q (B,Tq,H,D), k, v (B,Tk,H,D) row stride ld_qkv; out (B,Tq,H*D) row stride ld_out; lse (B,H,Tq)
 * natural log; causal mask bottom-right aligned (key j visible to query i iff j <= i + Tk - Tq),
 * key/query tile pairs entirely above the diagonal skipped; fully masked rows (causal, Tk < Tq)
 * give out = 0, lse = -inf and no gradient. D in {16, 32, 64, 80, 128}, a template argument: the
 * shared-memory layout is fixed at compile time and the register blocks (below) unroll; the loop
 * over D steps 4 at a time, not unrolled, to keep the registers free of prefetched operands (no
 * spills; ptxas: 128 registers at D <= 64, up to 234 at D = 128 with one block per SM).
 * Only the D columns of head h are read or written in each row.
 *
 * Work split. Each block has 256 threads seen as a 16 x 16 grid (ty, tx). In a tile of rows x
 * columns, thread (ty, tx) owns rows ty + 16 i and columns tx + 16 j: the 16 threads that share
 * a row are one half-warp, so row max and row sum are 4 xor-shuffles. In an output tile of rows
 * x D it owns the same rows and D/16 columns (tx-interleaved groups of 4, 2 or 1 adjacent
 * columns, so shared-memory reads are 16-byte where D allows). Operands sit in shared memory
 * row-major with rows D + 4 floats apart (16-byte aligned, and the 16 rows a half-warp reads
 * fall into distinct banks); each thread reads a float4 of each of its rows and FMAs it into its
 * RM x RN register block. Tiles come from global memory by cp.async (zero-filled past the
 * sequence ends; 16-byte copies when the rows are 16-byte aligned, else 4-byte), and the next
 * tile's copy is issued as soon as its buffer is free, so it overlaps the current tile's work.
 *
 * Forward (Algorithm 1): one block per (query tile of 128 rows, head, batch element); key tiles
 * of 64. Register blocks per thread: S 8 x 4 (32 registers), O 8 x D/16 (up to 64). Shared
 * memory: Q (128, D+4), K and V (64, D+4), P (128, 68): 166 KiB at D = 128, 102 KiB at D = 64
 * (two blocks per SM). 128-row query tiles halve the K, V traffic per flop against 64-row ones;
 * the 8-row register block reads 12 floats from shared memory per 32 FMAs (the 8 of Q are
 * broadcast to the half-warp), which leaves the FMA pipe, not shared memory, the bound. Online
 * softmax in base 2: scores are
 * scaled by log2(e)/sqrt(D) once, so P = exp2(S - m) (ex2.approx, ~2 ulp; --use_fast_math
 * would turn expf into the same instruction after a rounded multiply). Each thread keeps its
 * own partial row sum l (rescaled with the row's max, reduced once at the end, as
 * FlashAttention-2 does). Causal: blocks are launched heaviest first (last query tile first).
 *
 * Backward (Algorithm 2 by recomputation of P from L), three kernels:
 *   1. prep, one warp per query row: delta_i = rowsum(dO_i * O_i) (the paper's D_i) and the
 *      row of the fp32 dQ accumulator set to 0. Workspace layout: dQacc (B,H,Tq,D) first, so
 *      its rows are 16-byte aligned for float4 atomics when the workspace is, then delta
 *      (B,H,Tq): B*H*Tq*(D+1) floats, all of tlm_flash_workspace_floats.
 *   2. main, one block per (64 key rows, head, batch element), query tiles of 64 from the first
 *      one that sees the block's first key: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T, dV += P^T dO,
 *      dK += dS^T Q, and dQ_i += dS K added to dQacc by atomics (sm_90 float4 / float2 atomic
 *      adds where the thread's columns allow, scalar ones at D = 16 and 80 or on an unaligned
 *      workspace); dk = dK / sqrt(D), dv = dV.
 *   3. dq, one warp per query row: dq = dQacc / sqrt(D).
 *   Kernels 1 and 3 are also the TF32 backward's (tlm_cuda_flash_backward_f32_prep, _dq:
 *   tf32.cu uses this workspace layout).
 *   5 tile products per tile pair, the paper's schedule. (An earlier version had a dq kernel
 *   per query tile that recomputed S and dP: 7 products, deterministic, but 40% more FMAs; at
 *   D = 128 on an H100 it was slower than naive attention on cuBLAS fp32 GEMMs.) The atomics
 *   cost little here: 64 x D floats per tile pair against 5 x 64 x 64 x D FMAs on CUDA cores;
 *   they make dq's rounding order (not its precision) depend on scheduling, so dq is not
 *   bitwise reproducible; dk, dv are. Per tile pair, after one barrier for Q_i and dO_i: S^T into
 *   P^T, then dP^T and dS^T (each thread reads back only its own P^T elements, so S and dP are
 *   not live together and need no barrier between); barrier; dV; barrier, then dO_{i+1} is
 *   fetched during dK; barrier, then Q_{i+1} is fetched during dQ (4 barriers, each prefetch
 *   overlapped by at least one product). Register blocks 4 x 4 for S and dP, 4 x D/16 per
 *   accumulator; for dQ the thread's 4 query rows are adjacent (4 ty .. 4 ty + 3) so dS comes
 *   from the stored dS^T as one float4 (broadcast) per key, with no third (64, 68) tile.
 *   Shared memory: four (64, D+4) operand tiles and P^T, dS^T (64, 68): 166 KiB at D = 128
 *   (one block per SM, 234 registers), 102 KiB at D = 64 (two blocks per SM, 128 registers).
 * The forward, main backward and dq kernels write (=) every row of their tile in the H*D
 * columns, fully masked query rows included (out = 0, lse = -inf, dq = 0).
 *
 * Split-KV (split.cu's header: the same plans, buffer and combine, through
 * attention.cuh), for grids under one wave of the GPU (split.cu's fa_split_chunk;
 * the CS336 flash-benchmarking rows: batch 1, 1 head; at seq 4096, 32 forward and 64 backward
 * blocks on 132 SMs, each walking up to 32 and 64 tiles in sequence): the forward and main
 * backward kernels are instantiated a second time with SPLIT = true, blockIdx.y the piece.
 * Forward: a piece of a.split keys (a multiple of 64, at least 64) of the tile's key range, O
 * normalized by the piece's own sum and its lse written as fp32 partials, merged into out, lse by
 * tlm_cuda_flash_split_combine (float out, as it is).
 * Backward: a piece of a.split query tiles (at least 64 queries) of the key tile's range, dK /
 * sqrt(D) and dV added by atomics to fp32 accumulators in the split buffer, zeroed before, copied
 * into dk, dv after (tlm_cuda_flash_split_dkv): split, dk and dv are no longer bitwise
 * reproducible (as dq). Only on 16-byte rows (out, ld_out for the forward's combine; dk, dv,
 * ld_qkv for the backward's copy), and never with TLM_FLASH_SPLIT=0; unsplit grids (those that
 * fill a wave) run the unsplit instantiations, as before. ptxas (nvcc 13.0, sm_90a): the split
 * ones at or under the unsplit ones' registers, no spills (the forward's split bookkeeping is
 * recomputed in the epilogue rather than kept through the loop, which spilled at D 32 and 64). */
#include <math.h>

#include "cuda/attention/attention.cuh"

#define FA32_THREADS 256 /* 16 x 16 */
#define FA32_TX 16       /* threads along a tile's columns: a half-warp shares a row */
#define FA32_TY 16       /* threads along a tile's rows */

/* tile sizes: rows of Q (BR) and of K, V (BC) per step */
#define FA32_FWD_BR 128
#define FA32_FWD_BC 64
#define FA32_BWD_BR 64
#define FA32_BWD_BC 64

#define FA32_LOG2E 1.4426950408889634f
#define FA32_LN2 0.69314718055994530942

/* The arguments of all three kernels, by value. Row r of a (B,T,H,D) tensor: head h at
 * x[r*ld + h*D]; lse and delta (B,H,Tq) contiguous. */
typedef struct {
    float *out, *lse;             /* forward outputs */
    float *dq, *dk, *dv;          /* backward outputs */
    float *dq_acc, *delta;        /* workspace: fp32 dQ accumulator (B,H,Tq,D), then delta (B,H,Tq) */
    const float *q, *k, *v;       /* ld_qkv */
    const float *dout, *o;        /* ld_out: dO and the forward's O */
    const float *lse_in;          /* the forward's lse, read by the backward */
    int64_t ld_qkv, ld_out;
    int Tq, Tk, H, BH, off;       /* off = Tk - Tq: query i sees key j iff j <= i + off (causal) */
    float scale, scale_log2;      /* 1/sqrt(D), log2(e)/sqrt(D) */
    bool causal, vec_qkv, vec_out; /* vec_*: rows 16-byte aligned (16-byte copies) */
    bool vec_acc;                  /* dq_acc 16-byte aligned: vector atomics */
    int split;   /* split-KV (the kernels' SPLIT instantiations; blockIdx.y the piece): forward, keys
                    per piece (a multiple of FA32_FWD_BC); backward, query tiles per piece */
    float *part; /* split: forward, the partials (tlm_cuda_flash_split_combine's layout); backward,
                    the dK, dV accumulators (B,H,Tk,D) each (tlm_cuda_flash_bwd_split), zeroed */
} fa32_args;

/* a thread's D/16 output columns: groups of VW adjacent columns, group g at (g*16 + tx)*VW */
template <int D> struct fa32_cols {
    static constexpr int PER = D / FA32_TX;
    static constexpr int VW = PER % 4 == 0 ? 4 : PER % 2 == 0 ? 2 : 1;
    static_assert(D % FA32_TX == 0, "D must be a multiple of 16");
};

/* column of the thread's c-th output value */
template <int D> __device__ __forceinline__ int fa32_col(int c, int tx) {
    constexpr int VW = fa32_cols<D>::VW;
    return (c / VW * FA32_TX + tx) * VW + c % VW;
}

__device__ __forceinline__ float fa32_get(const float4 &v, int u) {
    return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w; /* u is a constant after unrolling */
}

/* max and sum over the 16 threads (one half-warp) that share a row */
__device__ __forceinline__ float fa32_row_max(float v) {
#pragma unroll
    for (int o = FA32_TX / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float fa32_row_sum(float v) {
#pragma unroll
    for (int o = FA32_TX / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* row[col(c)] += scale * v[c] for the thread's PER columns of a row of D floats, by atomics: 16- or
 * 8-byte ones where the column groups allow and vec (the row 16-byte aligned), else scalar */
template <int D>
__device__ __forceinline__ void fa32_atomic_add_row(float *row, const float (&v)[fa32_cols<D>::PER], float scale,
                                                    int tx, bool vec) {
    constexpr int PER = fa32_cols<D>::PER, VW = fa32_cols<D>::VW;
#pragma unroll
    for (int g = 0; g < PER / VW; g++) {
        float *dst = row + (g * FA32_TX + tx) * VW;
        if constexpr (VW == 4) {
            if (vec) {
                atomicAdd(reinterpret_cast<float4 *>(dst), make_float4(v[4 * g] * scale, v[4 * g + 1] * scale,
                                                                       v[4 * g + 2] * scale, v[4 * g + 3] * scale));
                continue;
            }
        } else if constexpr (VW == 2) {
            if (vec) {
                atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(v[2 * g] * scale, v[2 * g + 1] * scale));
                continue;
            }
        }
#pragma unroll
        for (int u = 0; u < VW; u++) atomicAdd(dst + u, v[VW * g + u] * scale);
    }
}

/* ---- global -> shared copies (cp.async, sm_80+) ------------------------------------------------ */

/* 16 or 4 bytes from src to dst; valid == false: dst zero-filled, src not read */
__device__ __forceinline__ void fa32_cp16(float *dst, const float *src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void fa32_cp4(float *dst, const float *src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void fa32_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* wait until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void fa32_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* dst (ROWS, D+4) in shared memory = rows [0, ROWS) of src (row stride ld, D columns);
 * rows >= valid (1 <= valid <= ROWS) zero. Issued by the whole block; not committed. */
template <int D, int ROWS>
__device__ __forceinline__ void fa32_load_tile(float *dst, const float *src, int64_t ld, int valid, bool vec) {
    constexpr int LD = D + 4;
    if (vec) {
        constexpr int CPR = D / 4, N = ROWS * CPR; /* 16-byte chunks */
        static_assert(N % FA32_THREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
        for (int it = 0; it < N / FA32_THREADS; it++) {
            const int idx = it * FA32_THREADS + (int)threadIdx.x, r = idx / CPR, c = idx % CPR * 4;
            const bool ok = r < valid;
            fa32_cp16(dst + r * LD + c, src + (ok ? r : 0) * ld + c, ok);
        }
    } else {
        constexpr int N = ROWS * D;
        static_assert(N % FA32_THREADS == 0, "tile elements must divide among the threads");
#pragma unroll 4
        for (int it = 0; it < N / FA32_THREADS; it++) {
            const int idx = it * FA32_THREADS + (int)threadIdx.x, r = idx / D, c = idx % D;
            const bool ok = r < valid;
            fa32_cp4(dst + r * LD + c, src + (ok ? r : 0) * ld + c, ok);
        }
    }
}

/* ---- tile products from shared memory into registers ------------------------------------------ */

/* acc[i][j] += sum_d A[ty + 16i][d] * B[tx + 16j][d]: A (RM*16, D+4), B (RN*16, D+4), both
 * row-major (S = Q K^T, dP = dO V^T, and their transposes) */
template <int D, int RM, int RN>
__device__ __forceinline__ void fa32_mma_abt(float (&acc)[RM][RN], const float *A, const float *Bm, int ty,
                                             int tx) {
    constexpr int LD = D + 4;
    const float *a0 = A + ty * LD, *b0 = Bm + tx * LD;
#pragma unroll 1
    for (int d = 0; d < D; d += 4) {
        float4 b[RN];
#pragma unroll
        for (int j = 0; j < RN; j++) b[j] = *reinterpret_cast<const float4 *>(b0 + j * FA32_TX * LD + d);
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const float4 a = *reinterpret_cast<const float4 *>(a0 + i * FA32_TY * LD + d);
#pragma unroll
            for (int j = 0; j < RN; j++) {
                acc[i][j] = fmaf(a.x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a.y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a.z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a.w, b[j].w, acc[i][j]);
            }
        }
    }
}

/* vv[c] = row[col(c)]: the thread's PER columns of a shared-memory row (groups of VW adjacent
 * columns, FA32_TX threads apart), in float4/float2/scalar reads */
template <int D>
__device__ __forceinline__ void fa32_load_cols(float (&vv)[fa32_cols<D>::PER], const float *row, int tx) {
    constexpr int PER = fa32_cols<D>::PER, VW = fa32_cols<D>::VW;
#pragma unroll
    for (int g = 0; g < PER / VW; g++) {
        const float *vp = row + (g * FA32_TX + tx) * VW;
        if constexpr (VW == 4) {
            const float4 t = *reinterpret_cast<const float4 *>(vp);
            vv[4 * g] = t.x, vv[4 * g + 1] = t.y, vv[4 * g + 2] = t.z, vv[4 * g + 3] = t.w;
        } else if constexpr (VW == 2) {
            const float2 t = *reinterpret_cast<const float2 *>(vp);
            vv[2 * g] = t.x, vv[2 * g + 1] = t.y;
        } else {
            vv[g] = vp[0];
        }
    }
}

/* acc[i][c] += sum_k P[ty + 16i][k] * V[k][col(c)], k < K: P (RM*16, K+4), V (K, D+4), both
 * row-major (O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q with the transposes stored) */
template <int D, int RM, int K>
__device__ __forceinline__ void fa32_mma_pv(float (&acc)[RM][D / FA32_TX], const float *P, const float *V,
                                            int ty, int tx) {
    constexpr int LD = D + 4, LDP = K + 4, PER = fa32_cols<D>::PER;
    const float *p0 = P + ty * LDP;
#pragma unroll 1
    for (int k = 0; k < K; k += 4) {
        float4 p[RM];
#pragma unroll
        for (int i = 0; i < RM; i++) p[i] = *reinterpret_cast<const float4 *>(p0 + i * FA32_TY * LDP + k);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float *vrow = V + (k + u) * LD;
            float vv[PER];
            fa32_load_cols<D>(vv, vrow, tx);
#pragma unroll
            for (int i = 0; i < RM; i++) {
                const float pu = fa32_get(p[i], u);
#pragma unroll
                for (int c = 0; c < PER; c++) acc[i][c] = fmaf(pu, vv[c], acc[i][c]);
            }
        }
    }
}

/* acc[i][c] += sum_k At[k][4 ty + i] * V[k][col(c)], k < K: At (K, LDA) holds the transpose of
 * the left operand (dQ += dS K_j from the stored dS^T); the thread's 4 rows are adjacent, so
 * each k is one float4 read (broadcast to the half-warp) */
template <int D, int K, int LDA>
__device__ __forceinline__ void fa32_mma_tpv(float (&acc)[4][D / FA32_TX], const float *At, const float *V, int ty,
                                             int tx) {
    constexpr int LD = D + 4, PER = fa32_cols<D>::PER;
    const float *a0 = At + 4 * ty;
#pragma unroll 1
    for (int k = 0; k < K; k += 4) {
        float4 p[4];
#pragma unroll
        for (int u = 0; u < 4; u++) p[u] = *reinterpret_cast<const float4 *>(a0 + (k + u) * LDA);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float *vrow = V + (k + u) * LD;
            float vv[PER];
            fa32_load_cols<D>(vv, vrow, tx);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float pi = fa32_get(p[u], i);
#pragma unroll
                for (int c = 0; c < PER; c++) acc[i][c] = fmaf(pi, vv[c], acc[i][c]);
            }
        }
    }
}

/* ---- forward: Algorithm 1 ----------------------------------------------------------------------- */

template <int D> constexpr size_t fa32_forward_smem() {
    return ((size_t)(FA32_FWD_BR + 2 * FA32_FWD_BC) * (D + 4) + (size_t)FA32_FWD_BR * (FA32_FWD_BC + 4)) *
           sizeof(float);
}

/* SPLIT: blockIdx.y is the piece; the block's keys are [kv_begin, kv_end), the piece
 * [split * a.split, +a.split) of the tile's [0, j_end) (whole key tiles, masked as unsplit), and it
 * writes its O normalized by its own sum and its lse into the partials a.part (the layout of
 * tlm_cuda_flash_split_combine: row (split*B*H + bh)*Tq + i; lse -inf for a row that saw no key of
 * it; an empty piece writes only that); SPLIT = false compiles this away. */
template <int D, bool SPLIT>
__global__ void __launch_bounds__(FA32_THREADS, D <= 64 ? 2 : 1) fa32_forward_kernel(const fa32_args a) {
    /* block: query tile qt (the last ones first), head h of batch element b */
    constexpr int BR = FA32_FWD_BR, BC = FA32_FWD_BC, RM = BR / FA32_TY, RN = BC / FA32_TX;
    constexpr int LD = D + 4, LDP = BC + 4, PER = fa32_cols<D>::PER;
    extern __shared__ float4 fa32_smem[];
    float *Qs = reinterpret_cast<float *>(fa32_smem); /* (BR, D+4) */
    float *Ks = Qs + BR * LD;                         /* (BC, D+4) */
    float *Vs = Ks + BC * LD;                         /* (BC, D+4) */
    float *Ps = Vs + BC * LD;                         /* (BR, BC+4) */

    const int tx = (int)threadIdx.x % FA32_TX, ty = (int)threadIdx.x / FA32_TX;
    const int Tr = (a.Tq + BR - 1) / BR;
    const int qt = Tr - 1 - (int)(blockIdx.x / (unsigned)a.BH), bh = (int)(blockIdx.x % (unsigned)a.BH);
    const int b = bh / a.H, h = bh % a.H;
    const int i0 = qt * BR, br = min(BR, a.Tq - i0);
    /* key tiles j0 < j_end: the last visible one is the one holding key i0 + br - 1 + off */
    const int j_end = a.causal ? min(a.Tk, i0 + br + a.off) : a.Tk;
    const int split = SPLIT ? (int)blockIdx.y : 0;
    const int kv_begin = SPLIT ? split * a.split : 0, kv_end = SPLIT ? min(j_end, kv_begin + a.split) : j_end;
    const int nkt = kv_end > kv_begin ? (kv_end - kv_begin + BC - 1) / BC : 0;
    const float *qg = a.q + ((int64_t)b * a.Tq + i0) * a.ld_qkv + h * D;
    const float *kg = a.k + (int64_t)b * a.Tk * a.ld_qkv + h * D;
    const float *vg = a.v + (int64_t)b * a.Tk * a.ld_qkv + h * D;
    /* split: the partials' rows (split*B*H + bh)*Tq + i, o_part then lse_part (computed where used:
     * nothing of it lives through the loop, whose registers are at the 128 of two blocks per SM) */
    auto prow0 = [&]() { return ((int64_t)blockIdx.y * a.BH + bh) * a.Tq + i0; };
    auto lse_part = [&]() { return a.part + (int64_t)gridDim.y * a.BH * a.Tq * D; };
    if (SPLIT && nkt == 0) { /* an empty piece: no key for any row */
        for (int r = (int)threadIdx.x; r < br; r += FA32_THREADS) lse_part()[prow0() + r] = -INFINITY;
        return;
    }

    float o[RM][PER], m[RM], l[RM]; /* O_i (unnormalised), running max (log2 units), partial sum */
#pragma unroll
    for (int i = 0; i < RM; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < PER; c++) o[i][c] = 0.0f;
    }

    if (nkt > 0) { /* group: Q_i and K_0 */
        fa32_load_tile<D, BR>(Qs, qg, a.ld_qkv, br, a.vec_qkv);
        fa32_load_tile<D, BC>(Ks, kg + (int64_t)kv_begin * a.ld_qkv, a.ld_qkv, min(BC, a.Tk - kv_begin), a.vec_qkv);
        fa32_commit();
    }
    for (int t = 0; t < nkt; t++) {
        const int j0 = kv_begin + t * BC;
        fa32_load_tile<D, BC>(Vs, vg + j0 * a.ld_qkv, a.ld_qkv, min(BC, a.Tk - j0), a.vec_qkv);
        fa32_commit();
        fa32_wait<1>(); /* K_j (and Q_i) landed; V_j may be in flight */
        __syncthreads();

        /* S = Q_i K_j^T */
        float s[RM][RN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) s[i][j] = 0.0f;
        fa32_mma_abt<D, RM, RN>(s, Qs, Ks, ty, tx);
        __syncthreads(); /* every thread is done with K_j: fetch K_{j+1} during softmax and P V */
        if (t + 1 < nkt)
            fa32_load_tile<D, BC>(Ks, kg + (j0 + BC) * a.ld_qkv, a.ld_qkv, min(BC, a.Tk - j0 - BC), a.vec_qkv);
        fa32_commit(); /* (empty after the last tile: keeps the group count uniform) */

        /* mask (only tiles past the end of k or crossing the diagonal), online softmax */
        const bool mask = j0 + BC > a.Tk || (a.causal && j0 + BC - 1 > i0 + a.off);
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int qi = i0 + ty + FA32_TY * i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < RN; j++) {
                float x = s[i][j] * a.scale_log2;
                const int kj = j0 + tx + FA32_TX * j;
                if (mask && (kj >= a.Tk || (a.causal && kj > qi + a.off))) x = -INFINITY;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
            const float m_new = fmaxf(m[i], fa32_row_max(mx));
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* row masked so far: P = 0 */
            const float alpha = exp2f(m[i] - m_use);               /* 0 while m[i] = -inf */
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < RN; j++) {
                const float p = exp2f(s[i][j] - m_use);
                rs += p;
                Ps[(ty + FA32_TY * i) * LDP + tx + FA32_TX * j] = p;
            }
            l[i] = fmaf(l[i], alpha, rs);
            m[i] = m_new;
#pragma unroll
            for (int c = 0; c < PER; c++) o[i][c] *= alpha;
        }
        fa32_wait<1>(); /* V_j landed; K_{j+1} may be in flight */
        __syncthreads();

        /* O_i += P V_j */
        fa32_mma_pv<D, RM, BC>(o, Ps, Vs, ty, tx);
        __syncthreads(); /* P and V_j free for the next tile */
    }
    fa32_wait<0>();

    /* O_i = diag(l)^-1 O_i, L_i = m + log(l) (natural log); fully masked rows: 0 and -inf */
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const float lsum = fa32_row_sum(l[i]);
        const int r = ty + FA32_TY * i;
        if (r < br) {
            const int64_t n = (int64_t)b * a.Tq + i0 + r;
            const float inv = lsum > 0.0f ? __frcp_rn(lsum) : 0.0f;
            float *orow = SPLIT ? a.part + (prow0() + r) * D : a.out + n * a.ld_out + h * D;
#pragma unroll
            for (int c = 0; c < PER; c++) orow[fa32_col<D>(c, tx)] = o[i][c] * inv;
            if (tx == 0)
                *(SPLIT ? lse_part() + prow0() + r : a.lse + (int64_t)bh * a.Tq + i0 + r) =
                    lsum > 0.0f ? (float)((double)m[i] * FA32_LN2 + log((double)lsum)) : -INFINITY;
        }
    }
}

/* ---- backward 1 and 3: delta and the dQ accumulator, then dq ------------------------------------ */

/* one warp per row n = bh*Tq + i of (B,H,Tq): delta_n = rowsum(dO * O), dQacc row n = 0; with
 * a.part (the split backward's dK, dV accumulators, (B,H,Tk,D) each) rows bh*Tk + i of both zeroed
 * too (no memset): then the warps walk i < max(Tq, Tk) */
template <int D> __global__ void __launch_bounds__(FA32_THREADS) fa32_backward_prep_kernel(const fa32_args a) {
    const int T = a.part ? max(a.Tq, a.Tk) : a.Tq;
    const int64_t w = (int64_t)blockIdx.x * (FA32_THREADS / 32) + (int)threadIdx.x / 32;
    const int lane = (int)threadIdx.x % 32;
    if (w >= (int64_t)a.BH * T) return; /* the whole warp */
    const int bh = (int)(w / T), i = (int)(w % T), b = bh / a.H, h = bh % a.H;
    if (a.part && i < a.Tk) {
        float *zk = a.part + ((int64_t)bh * a.Tk + i) * D, *zv = zk + (int64_t)a.BH * a.Tk * D;
#pragma unroll
        for (int c = lane; c < D; c += 32) zk[c] = zv[c] = 0.0f;
    }
    if (i >= a.Tq) return;
    const int64_t n = (int64_t)bh * a.Tq + i;
    const int64_t row = ((int64_t)b * a.Tq + i) * a.ld_out + h * D;
    float part = 0.0f;
#pragma unroll
    for (int c = lane; c < D; c += 32) {
        part = fmaf(a.dout[row + c], a.o[row + c], part);
        a.dq_acc[n * D + c] = 0.0f;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if (lane == 0) a.delta[n] = part;
}

/* one warp per row n = bh*Tq + i: dq row = dQacc row n / sqrt(D) (every row, 0 where masked) */
template <int D> __global__ void __launch_bounds__(FA32_THREADS) fa32_backward_dq_kernel(const fa32_args a) {
    const int64_t n = (int64_t)blockIdx.x * (FA32_THREADS / 32) + (int)threadIdx.x / 32;
    const int lane = (int)threadIdx.x % 32;
    if (n >= (int64_t)a.BH * a.Tq) return;
    const int bh = (int)(n / a.Tq), i = (int)(n % a.Tq), b = bh / a.H, h = bh % a.H;
    float *row = a.dq + ((int64_t)b * a.Tq + i) * a.ld_qkv + h * D;
#pragma unroll
    for (int c = lane; c < D; c += 32) row[c] = a.dq_acc[n * D + c] * a.scale;
}

/* ---- backward 2: dK, dV and the dQ accumulator --------------------------------------------------- */

template <int D> constexpr size_t fa32_backward_smem() {
    return ((size_t)(2 * FA32_BWD_BR + 2 * FA32_BWD_BC) * (D + 4) +
            2 * (size_t)FA32_BWD_BC * (FA32_BWD_BR + 4)) *
           sizeof(float);
}

/* SPLIT: blockIdx.y is the piece; the block runs the query tiles [it0, it_end), the piece
 * [split * a.split, +a.split) of those that see its keys (an empty piece returns at once), and adds
 * dK / sqrt(D) and dV by atomics to the accumulators a.part (B,H,Tk,D) and a.part + B*H*Tk*D;
 * SPLIT = false compiles this away and writes dk, dv. */
template <int D, bool SPLIT>
__global__ void __launch_bounds__(FA32_THREADS, D <= 64 ? 2 : 1) fa32_backward_kernel(const fa32_args a) {
    /* block: key tile kt (the first ones, which most queries see, first), head h of batch b.
     * Here the thread's "rows" are keys and its "columns" queries (the transposed products). */
    constexpr int BR = FA32_BWD_BR, BC = FA32_BWD_BC, RM = BC / FA32_TY, RN = BR / FA32_TX;
    constexpr int LD = D + 4, LDP = BR + 4, PER = fa32_cols<D>::PER;
    static_assert(BR == 4 * FA32_TY, "dQ rows: 4 adjacent query rows a thread");
    extern __shared__ float4 fa32_smem[];
    float *Ks = reinterpret_cast<float *>(fa32_smem); /* (BC, D+4) */
    float *Vs = Ks + BC * LD;                         /* (BC, D+4) */
    float *Qs = Vs + BC * LD;                         /* (BR, D+4) */
    float *dOs = Qs + BR * LD;                        /* (BR, D+4) */
    float *Pt = dOs + BR * LD;                        /* (BC, BR+4): P^T */
    float *dSt = Pt + BC * LDP;                       /* (BC, BR+4): dS^T */

    const int tx = (int)threadIdx.x % FA32_TX, ty = (int)threadIdx.x / FA32_TX;
    const int kt = (int)(blockIdx.x / (unsigned)a.BH), bh = (int)(blockIdx.x % (unsigned)a.BH);
    const int b = bh / a.H, h = bh % a.H;
    const int j0 = kt * BC, bc = min(BC, a.Tk - j0);
    const int Tr = (a.Tq + BR - 1) / BR;
    /* query tiles from the one holding the first query that sees key j0 (j0 - off <= Tq - 1) */
    const int it_first = a.causal ? max(0, j0 - a.off) / BR : 0;
    const int it0 = SPLIT ? it_first + (int)blockIdx.y * a.split : it_first;
    const int it_end = SPLIT ? min(Tr, it0 + a.split) : Tr;
    if (SPLIT && it0 >= it_end) return;
    const int64_t krow0 = (int64_t)b * a.Tk + j0, qrow0 = (int64_t)b * a.Tq;
    const float *qg = a.q + qrow0 * a.ld_qkv + h * D;
    const float *dog = a.dout + qrow0 * a.ld_out + h * D;
    const float *Lg = a.lse_in + (int64_t)bh * a.Tq, *deltag = a.delta + (int64_t)bh * a.Tq;
    float *dqa = a.dq_acc + (int64_t)bh * a.Tq * D;

    /* one group: K_j, V_j, Q_first, dO_first */
    fa32_load_tile<D, BC>(Ks, a.k + krow0 * a.ld_qkv + h * D, a.ld_qkv, bc, a.vec_qkv);
    fa32_load_tile<D, BC>(Vs, a.v + krow0 * a.ld_qkv + h * D, a.ld_qkv, bc, a.vec_qkv);
    fa32_load_tile<D, BR>(Qs, qg + (int64_t)it0 * BR * a.ld_qkv, a.ld_qkv, min(BR, a.Tq - it0 * BR), a.vec_qkv);
    fa32_load_tile<D, BR>(dOs, dog + (int64_t)it0 * BR * a.ld_out, a.ld_out, min(BR, a.Tq - it0 * BR), a.vec_out);
    fa32_commit();

    float dk[RM][PER], dv[RM][PER];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int c = 0; c < PER; c++) dk[i][c] = 0.0f, dv[i][c] = 0.0f;

    for (int it = it0; it < it_end; it++) {
        const int i0 = it * BR;
        /* L' and delta of the thread's query columns (0 past Tq: those columns are masked) */
        float Lq[RN], dl[RN];
#pragma unroll
        for (int j = 0; j < RN; j++) {
            const int qi = i0 + tx + FA32_TX * j;
            Lq[j] = qi < a.Tq ? Lg[qi] * FA32_LOG2E : 0.0f;
            dl[j] = qi < a.Tq ? deltag[qi] : 0.0f;
        }
        fa32_wait<0>(); /* Q_i, dO_i (and K_j, V_j) */
        __syncthreads(); /* ... visible to all; the previous tile's reads of dS^T are done */

        /* P^T = exp(K_j Q_i^T / sqrt(D) - L_i), 0 where masked, into Pt; then dP^T = V_j dO_i^T
         * and dS^T = P^T (dP^T - delta_i) into dSt (each thread its own elements: no barrier
         * between, and S and dP are not live together) */
        {
            float s[RM][RN];
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < RN; j++) s[i][j] = 0.0f;
            fa32_mma_abt<D, RM, RN>(s, Ks, Qs, ty, tx);
            const bool mask = i0 + BR > a.Tq || j0 + BC > a.Tk || (a.causal && j0 + BC - 1 > i0 + a.off);
#pragma unroll
            for (int i = 0; i < RM; i++) {
                const int kj = j0 + ty + FA32_TY * i;
#pragma unroll
                for (int j = 0; j < RN; j++) {
                    const int qi = i0 + tx + FA32_TX * j;
                    const float e = exp2f(fmaf(s[i][j], a.scale_log2, -Lq[j]));
                    Pt[(ty + FA32_TY * i) * LDP + tx + FA32_TX * j] =
                        mask && (qi >= a.Tq || kj >= a.Tk || (a.causal && kj > qi + a.off)) ? 0.0f : e;
                }
            }
        }
        {
            float dp[RM][RN];
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < RN; j++) dp[i][j] = 0.0f;
            fa32_mma_abt<D, RM, RN>(dp, Vs, dOs, ty, tx);
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < RN; j++) {
                    const int idx = (ty + FA32_TY * i) * LDP + tx + FA32_TX * j;
                    dSt[idx] = Pt[idx] * (dp[i][j] - dl[j]);
                }
        }
        __syncthreads(); /* P^T, dS^T complete */

        /* dV_j += P^T dO_i, then dO_{i+1} is fetched while dK_j += dS^T Q_i */
        fa32_mma_pv<D, RM, BR>(dv, Pt, dOs, ty, tx);
        __syncthreads(); /* dO_i free */
        if (it + 1 < it_end) {
            fa32_load_tile<D, BR>(dOs, dog + (int64_t)(i0 + BR) * a.ld_out, a.ld_out, min(BR, a.Tq - i0 - BR),
                                  a.vec_out);
            fa32_commit();
        }
        fa32_mma_pv<D, RM, BR>(dk, dSt, Qs, ty, tx);
        __syncthreads(); /* Q_i free */
        if (it + 1 < it_end) {
            fa32_load_tile<D, BR>(Qs, qg + (int64_t)(i0 + BR) * a.ld_qkv, a.ld_qkv, min(BR, a.Tq - i0 - BR),
                                  a.vec_qkv);
            fa32_commit();
        }

        /* dQ_i += dS K_j while Q_{i+1} lands: rows i0 + 4 ty + r, added to the accumulator (16-,
         * 8- or 4-byte atomics as the thread's column groups allow) */
        {
            float dq[4][PER];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < PER; c++) dq[r][c] = 0.0f;
            fa32_mma_tpv<D, BC, LDP>(dq, dSt, Ks, ty, tx);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int qi = i0 + 4 * ty + r;
                if (qi >= a.Tq) continue;
                fa32_atomic_add_row<D>(dqa + (int64_t)qi * D, dq[r], 1.0f, tx, a.vec_acc);
            }
        }
    }
    fa32_wait<0>();

    /* dk = dK_j / sqrt(D), dv = dV_j: split, added to the accumulators (16-byte aligned rows) */
    if (float *const acc = SPLIT ? a.part : nullptr) { /* runtime test: see tf32.cu */
        float *dka = acc + ((int64_t)bh * a.Tk + j0) * D, *dva = dka + (int64_t)a.BH * a.Tk * D;
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int r = ty + FA32_TY * i;
            if (r < bc) {
                fa32_atomic_add_row<D>(dka + (int64_t)r * D, dk[i], a.scale, tx, true);
                fa32_atomic_add_row<D>(dva + (int64_t)r * D, dv[i], 1.0f, tx, true);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = ty + FA32_TY * i;
        if (r < bc) {
            float *dkrow = a.dk + (krow0 + r) * a.ld_qkv + h * D;
            float *dvrow = a.dv + (krow0 + r) * a.ld_qkv + h * D;
#pragma unroll
            for (int c = 0; c < PER; c++) {
                dkrow[fa32_col<D>(c, tx)] = dk[i][c] * a.scale;
                dvrow[fa32_col<D>(c, tx)] = dv[i][c];
            }
        }
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

static fa32_args fa32_make_args(int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D, bool causal,
                                const char *op) {
    if (!tlm_cuda_flash_supports_d(D))
        tlm_fatal("%s: d_head %d has no fp32 FlashAttention kernel (16, 32, 64, 80 or 128)", op, D);
    TLM_ASSERT(ld_qkv >= H * D && ld_out >= H * D);
    fa32_args a;
    memset(&a, 0, sizeof a);
    a.ld_qkv = ld_qkv, a.ld_out = ld_out;
    a.Tq = Tq, a.Tk = Tk, a.H = H, a.BH = B * H, a.off = Tk - Tq;
    a.scale = 1.0f / sqrtf((float)D);
    a.scale_log2 = a.scale * FA32_LOG2E;
    a.causal = causal;
    return a;
}

/* blocks = tiles * B*H, one dimension (gridDim.x allows 2^31 - 1) */
static unsigned fa32_grid(int T, int tile, int BH, const char *op) {
    const size_t blocks = (size_t)((T + tile - 1) / tile) * (size_t)BH;
    if (blocks > 0x7fffffffu) tlm_fatal("%s: %zu blocks exceed the grid limit", op, blocks);
    return (unsigned)blocks;
}

/* The launchers split as the selector planned it (tlm_cuda_flash_fwd_split / _bwd_split: a grid
 * under one wave) where it may: the forward's out rows 16-byte aligned (the combine's float4
 * stores), the backward's dk, dv rows too (the accumulators' copy); part: the partials or the dK, dV
 * accumulators, NULL unsplit. */
template <int D>
static void fa32_forward_launch(tlm_backend *be, fa32_args a, int B, int S, const char *op) {
    constexpr size_t smem = fa32_forward_smem<D>();
    constexpr auto split_kernel = fa32_forward_kernel<D, true>;
    tlm_cuda_set_smem<fa32_forward_kernel<D, false>>(op, smem);
    if (a.part) tlm_cuda_set_smem<split_kernel>(op, smem);
    const dim3 grid(fa32_grid(a.Tq, FA32_FWD_BR, a.BH, op), (unsigned)S);
    (a.part ? split_kernel : fa32_forward_kernel<D, false>)<<<grid, FA32_THREADS, smem, tlm_cuda_stream(be)>>>(a);
    TLM_CUDA_CHECK_LAUNCH();
    if (a.part)
        tlm_cuda_flash_split_combine(be, a.out, a.lse, a.part, S, B, a.Tq, a.H, D, (int)a.ld_out, TLM_DTYPE_F32);
}

template <int D>
static void fa32_backward_launch(tlm_backend *be, fa32_args a, int B, int S, const char *op) {
    constexpr size_t smem = fa32_backward_smem<D>();
    constexpr auto split_kernel = fa32_backward_kernel<D, true>;
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda_set_smem<fa32_backward_kernel<D, false>>(op, smem);
    if (a.part) tlm_cuda_set_smem<split_kernel>(op, smem);
    /* delta, the dQ accumulator zeroed, and (split) the dK, dV accumulators */
    tlm_cuda_flash_backward_f32_prep(st, a.dq_acc, a.dout, a.o, (int)a.ld_out, B, a.Tq, a.H, D, a.part, a.Tk);
    const dim3 grid(fa32_grid(a.Tk, FA32_BWD_BC, a.BH, op), (unsigned)S);
    (a.part ? split_kernel : fa32_backward_kernel<D, false>)<<<grid, FA32_THREADS, smem, st>>>(a);
    TLM_CUDA_CHECK_LAUNCH();
    if (a.part) tlm_cuda_flash_split_dkv(be, a.dk, a.dv, a.part, (int)a.ld_qkv, B, a.H, a.Tk, D, TLM_DTYPE_F32);
}

int tlm_attn_f32_occupancy(tlm_attn_pass pass, int D, int *br, int *bc) {
    const char *op = pass == TLM_ATTN_FORWARD ? "flash_attention_forward (fp32)" : "flash_attention_backward (fp32)";
    int occ = 0;
    tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
        constexpr int DD = decltype(dc)::value;
        if (pass == TLM_ATTN_FORWARD) {
            constexpr size_t smem = fa32_forward_smem<DD>();
            tlm_cuda_set_smem<fa32_forward_kernel<DD, true>>(op, smem);
            *br = FA32_FWD_BR, *bc = FA32_FWD_BC;
            occ = tlm_cuda_occupancy<fa32_forward_kernel<DD, true>>(op, FA32_THREADS, smem);
        } else {
            constexpr size_t smem = fa32_backward_smem<DD>();
            tlm_cuda_set_smem<fa32_backward_kernel<DD, true>>(op, smem);
            *br = FA32_BWD_BR, *bc = FA32_BWD_BC;
            occ = tlm_cuda_occupancy<fa32_backward_kernel<DD, true>>(op, FA32_THREADS, smem);
        }
    });
    return occ;
}

/* backward kernels 1 and 3 for any caller of this workspace layout (the TF32 backward too):
 * a warp per (b, h, query row), 8 warps a block */
static unsigned fa32_row_blocks(int B, int Tq, int H, const char *op) {
    return fa32_grid(Tq, FA32_THREADS / 32, B * H, op);
}

void tlm_cuda_flash_backward_f32_prep(cudaStream_t st, float *workspace, const float *dout, const float *out,
                                      int ld_out, int B, int Tq, int H, int D, float *dkv, int Tk) {
    const char *op = "flash_attention_backward (delta)";
    fa32_args a = fa32_make_args(H * D, ld_out, B, Tq, dkv ? Tk : Tq, H, D, false, op);
    a.dq_acc = workspace, a.delta = workspace + (size_t)B * H * Tq * D;
    a.dout = dout, a.o = out, a.part = dkv;
    tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
        fa32_backward_prep_kernel<decltype(dc)::value>
            <<<fa32_row_blocks(B, dkv ? max(Tq, Tk) : Tq, H, op), FA32_THREADS, 0, st>>>(a);
    });
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

void tlm_cuda_flash_backward_f32_dq(cudaStream_t st, float *dq, const float *workspace, int ld_qkv, int B, int Tq,
                                    int H, int D) {
    const char *op = "flash_attention_backward (dq)";
    fa32_args a = fa32_make_args(ld_qkv, H * D, B, Tq, Tq, H, D, false, op);
    a.dq = dq, a.dq_acc = const_cast<float *>(workspace);
    tlm_cuda_flash_dispatch_d(D, op, [&](auto dc) {
        fa32_backward_dq_kernel<decltype(dc)::value><<<fa32_row_blocks(B, Tq, H, op), FA32_THREADS, 0, st>>>(a);
    });
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

void tlm_attn_f32_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *fa, float *part) {
    /* out (B,Tq,H*D) ld_out; lse (B,H,Tq); q (B,Tq,H,D), k, v (B,Tk,H,D) ld_qkv */
    const char *op = "flash_attention_forward (fp32)";
    const float *q = (const float *)fa->q, *k = (const float *)fa->k, *v = (const float *)fa->v;
    float *out = (float *)fa->out, *lse = fa->lse;
    const int ld_qkv = fa->ld_qkv, B = fa->B;
    TLM_ASSERT(out && lse && q && k && v);
    fa32_args a = fa32_make_args(ld_qkv, fa->ld_out, B, fa->Tq, fa->Tk, fa->H, fa->D, fa->causal, op);
    a.out = out, a.lse = lse, a.q = q, a.k = k, a.v = v;
    a.vec_qkv = ld_qkv % 4 == 0 && tlm_aligned16(q) && tlm_aligned16(k) && tlm_aligned16(v);
    a.part = part, a.split = part ? c->split_len : 0;
    const int S = part ? c->split : 1;
    tlm_cuda_flash_dispatch_d(fa->D, op, [&](auto dc) { fa32_forward_launch<decltype(dc)::value>(be, a, B, S, op); });
}

void tlm_attn_f32_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *fa, float *dkv) {
    /* dq (B,Tq,H,D), dk, dv (B,Tk,H,D) ld_qkv; workspace (tlm_flash_workspace_floats): the dQ
     * accumulator (B,H,Tq,D) first, then delta (B,H,Tq); dout, out (B,Tq,H*D) ld_out; lse (B,H,Tq) */
    const char *op = "flash_attention_backward (fp32)";
    float *dq = (float *)fa->dq, *dk = (float *)fa->dk, *dv = (float *)fa->dv, *workspace = fa->workspace;
    const float *dout = (const float *)fa->dout, *q = (const float *)fa->q, *k = (const float *)fa->k;
    const float *v = (const float *)fa->v, *out = (const float *)fa->out, *lse = fa->lse;
    const int ld_qkv = fa->ld_qkv, ld_out = fa->ld_out, B = fa->B, Tq = fa->Tq, H = fa->H, D = fa->D;
    TLM_ASSERT(dq && dk && dv && workspace && dout && q && k && v && out && lse);
    fa32_args a = fa32_make_args(ld_qkv, ld_out, B, Tq, fa->Tk, H, D, fa->causal, op);
    a.dq = dq, a.dk = dk, a.dv = dv;
    a.dq_acc = workspace, a.delta = workspace + (size_t)B * H * Tq * D;
    a.q = q, a.k = k, a.v = v, a.dout = dout, a.o = out, a.lse_in = lse;
    a.vec_qkv = ld_qkv % 4 == 0 && tlm_aligned16(q) && tlm_aligned16(k) && tlm_aligned16(v);
    a.vec_out = ld_out % 4 == 0 && tlm_aligned16(dout);
    a.vec_acc = tlm_aligned16(workspace); /* rows of D floats, D a multiple of 16 */
    a.part = dkv, a.split = dkv ? c->split_len : 0;
    const int S = dkv ? c->split : 1;
    cudaStream_t st = tlm_cuda_stream(be);
    tlm_cuda_flash_dispatch_d(D, op, /* the pre-pass too, once the split is known */
                              [&](auto dc) { fa32_backward_launch<decltype(dc)::value>(be, a, B, S, op); });
    tlm_cuda_flash_backward_f32_dq(st, dq, workspace, ld_qkv, B, Tq, H, D);
}
