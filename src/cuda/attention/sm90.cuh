/* sm90.cuh — what the Hopper FlashAttention kernels (sm90_forward.cu, sm90_backward.cu) share: the
 * wgmma products and their descriptors, mbarriers, TMA tensor copies and tensor maps (fa90_maps,
 * made by tlm_attn_sm90_maps), the swizzled-tile cp.async loads, the online-softmax step and the
 * block order (fa90_block_of). Device code but for the maps' declaration; the copy and pack helpers
 * of every family are common.cuh's. The layout, descriptors and algorithm: sm90_forward.cu's header. */
#ifndef TLM_CUDA_ATTENTION_SM90_CUH
#define TLM_CUDA_ATTENTION_SM90_CUH

#include <cuda.h> /* CUtensorMap; the encoder comes through the runtime (no link to libcuda) */
#include <cudaTypedefs.h>

#include "cuda/attention/attention.cuh"
#include "cuda/attention/common.cuh"

#define FA90_BR 128  /* the backward's query rows a block (the forward's: 64 per consumer warpgroup) */
#define FA90_BC 128  /* key rows a tile */
#define FA90_THREADS 384 /* a producer warpgroup and two consumer warpgroups */

/* the columns a shared-memory tile of d_head D is laid out for: whole 64-column blocks (128-byte
 * rows), ceil(D / 64) of them; at D = 80 the second block's columns 16-63 are never written or read,
 * at D = 32 the single block's columns 32-63 */
__host__ __device__ constexpr int fa90_tile_cols(int D) { return (D + 63) / 64 * 64; }

/* ---- wgmma, descriptors, copies ----------------------------------------------------------------- */

/* the 32 fp32 accumulator registers of an m64n64 product, as asm operands %0..%31 */
#define FA90_ACC32                                                                                                \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FA90_ACC32_OPERANDS                                                                                       \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
/* the 16 of an m64n32 product, %0..%15 */
#define FA90_ACC16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FA90_ACC16_OPERANDS                                                                                       \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
/* the 8 of an m64n16 product, %0..%7 */
#define FA90_ACC8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FA90_ACC8_OPERANDS "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
/* the 40 of an m64n80 product, %0..%39 */
#define FA90_ACC40                                                                                                \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                            \
    "%32, %33, %34, %35, %36, %37, %38, %39"
#define FA90_ACC40_OPERANDS                                                                                       \
    FA90_ACC32_OPERANDS, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),            \
        "+f"(d[38]), "+f"(d[39])
/* the 64 of an m64n128 product, %0..%63 */
#define FA90_ACC64                                                                                                \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                            \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FA90_ACC64_OPERANDS                                                                                       \
    FA90_ACC32_OPERANDS, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),            \
        "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),   \
        "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),   \
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),   \
        "+f"(d[62]), "+f"(d[63])

/* d (64 x N fp32) = (scale_d ? d : 0) + A B; A (64 x 16) and B (N x 16 stored, K-major) in shared
 * memory. ACC/OPS: the accumulator operands; IA, IB, IP: the operand numbers after them. */
#define FA90_WGMMA_SS(N, TY, ACC, OPS, IA, IB, IP, TRANS)                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TY "." TY " {" ACC "}, %" IA ", %" IB          \
                 ", p, 1, 1, " TRANS ";\n}\n"                                                                     \
                 : OPS                                                                                           \
                 : "l"(da), "l"(db), "r"(scale_d))
/* d (64 x N fp32) += A B; A (64 x 16) in registers a[0..3] (each warp's 16 rows in the m16n8k16
 * A-fragment layout), B (16 x N) N-major in shared memory (imm-trans-b = 1) */
#define FA90_WGMMA_RS(N, TY, ACC, OPS, IA, IB, IC, ID, IDESC, IP)                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TY "." TY " {" ACC "}, {%" IA ", %" IB ", %" IC \
                 ", %" ID "}, %" IDESC ", p, 1, 1, 1;\n}\n"                                                      \
                 : OPS                                                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))

/* TRANS: "0, 0" both K-major (S = Q K^T); "1, 1" A M-major and B N-major (dQ = dS K from dS^T) */
template <typename E, int N, bool TRANS = false>
__device__ __forceinline__ void fa90_wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
    constexpr bool bf = std::is_same<E, __nv_bfloat16>::value;
    if constexpr (N == 16) {
        static_assert(TRANS, "m64n16: dQ only (d_head 80's columns 64-79)");
        if constexpr (bf) FA90_WGMMA_SS("16", "bf16", FA90_ACC8, FA90_ACC8_OPERANDS, "8", "9", "10", "1, 1");
        else FA90_WGMMA_SS("16", "f16", FA90_ACC8, FA90_ACC8_OPERANDS, "8", "9", "10", "1, 1");
    } else if constexpr (N == 32) {
        static_assert(TRANS, "m64n32: dQ only");
        if constexpr (bf) FA90_WGMMA_SS("32", "bf16", FA90_ACC16, FA90_ACC16_OPERANDS, "16", "17", "18", "1, 1");
        else FA90_WGMMA_SS("32", "f16", FA90_ACC16, FA90_ACC16_OPERANDS, "16", "17", "18", "1, 1");
    } else if constexpr (N == 64 && !TRANS) {
        if constexpr (bf) FA90_WGMMA_SS("64", "bf16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "0, 0");
        else FA90_WGMMA_SS("64", "f16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "0, 0");
    } else if constexpr (N == 64) {
        if constexpr (bf) FA90_WGMMA_SS("64", "bf16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "1, 1");
        else FA90_WGMMA_SS("64", "f16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "1, 1");
    } else {
        static_assert(N == 128 && !TRANS, "m64n64, or m64n128 K-major");
        if constexpr (bf) FA90_WGMMA_SS("128", "bf16", FA90_ACC64, FA90_ACC64_OPERANDS, "64", "65", "66", "0, 0");
        else FA90_WGMMA_SS("128", "f16", FA90_ACC64, FA90_ACC64_OPERANDS, "64", "65", "66", "0, 0");
    }
}

template <typename E, int N>
__device__ __forceinline__ void fa90_wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
    constexpr bool bf = std::is_same<E, __nv_bfloat16>::value;
    if constexpr (N == 32) {
        if constexpr (bf) FA90_WGMMA_RS("32", "bf16", FA90_ACC16, FA90_ACC16_OPERANDS, "16", "17", "18", "19", "20", "21");
        else FA90_WGMMA_RS("32", "f16", FA90_ACC16, FA90_ACC16_OPERANDS, "16", "17", "18", "19", "20", "21");
    } else if constexpr (N == 64) {
        if constexpr (bf) FA90_WGMMA_RS("64", "bf16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "35", "36", "37");
        else FA90_WGMMA_RS("64", "f16", FA90_ACC32, FA90_ACC32_OPERANDS, "32", "33", "34", "35", "36", "37");
    } else if constexpr (N == 80) {
        if constexpr (bf) FA90_WGMMA_RS("80", "bf16", FA90_ACC40, FA90_ACC40_OPERANDS, "40", "41", "42", "43", "44", "45");
        else FA90_WGMMA_RS("80", "f16", FA90_ACC40, FA90_ACC40_OPERANDS, "40", "41", "42", "43", "44", "45");
    } else {
        static_assert(N == 128, "m64n32, m64n64, m64n80 or m64n128");
        if constexpr (bf) FA90_WGMMA_RS("128", "bf16", FA90_ACC64, FA90_ACC64_OPERANDS, "64", "65", "66", "67", "68", "69");
        else FA90_WGMMA_RS("128", "f16", FA90_ACC64, FA90_ACC64_OPERANDS, "64", "65", "66", "67", "68", "69");
    }
}

/* d (64 x 64 fp32) = (scale_d ? d : 0) + A B; A (64 x 16) in registers as in fa90_wgmma_rs, B (64
 * x 16 stored, K-major) in shared memory (imm-trans-b = 0) */
template <typename E>
__device__ __forceinline__ void fa90_wgmma_rs_kmajor(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
    if constexpr (std::is_same<E, __nv_bfloat16>::value)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" FA90_ACC32 "}, {%32, %33, %34, %35}, %36, "
                     "p, 1, 1, 0;\n}\n"
                     : FA90_ACC32_OPERANDS
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" FA90_ACC32 "}, {%32, %33, %34, %35}, %36, "
                     "p, 1, 1, 0;\n}\n"
                     : FA90_ACC32_OPERANDS
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
/* the A-fragments (fa90_wgmma_rs) of k-step kk of this warp's 16 rows of a swizzled tile block at
 * s (128-byte rows): ldmatrix x4, lane l giving row 16 warp + l % 16, piece 2 kk + l / 16 */
__device__ __forceinline__ void fa90_ldsm_a(uint32_t (&r)[4], uint32_t s, int warp, int lane, int kk) {
    const int row = warp * 16 + (lane & 15), piece = 2 * kk + (lane >> 4);
    const uint32_t addr = s + row * 128 + ((piece ^ (row & 7)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void fa90_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fa90_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa90_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* ties an accumulator array to this point of the program: the compiler may not move its reads
 * or writes across (the asynchronous wgmma writes them behind the compiler's back) */
template <int N> __device__ __forceinline__ void fa90_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* descriptor of a 128-byte-swizzled shared-memory operand at shared address addr */
__device__ __forceinline__ uint64_t fa90_desc(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(leading_bytes >> 4) << 16) |
           ((uint64_t)(stride_bytes >> 4) << 32) | (1ull << 62);
}

/* cp.async wrote through the generic proxy; wgmma reads through the async proxy */
__device__ __forceinline__ void fa90_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* two floats from shared address a (8-byte aligned) */
__device__ __forceinline__ float2 fa90_lds2(uint32_t a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}

/* bulk asynchronous reduction (PTX ISA "cp.reduce.async.bulk"): the copy engine adds `bytes`
 * (a multiple of 16) of fp32 from shared address src to global dst (both 16-byte aligned),
 * element by element, atomically; one thread issues it. Completion by bulk groups of the
 * issuing thread: wait_read lets the source be rewritten, wait_all the result be seen. */
__device__ __forceinline__ void fa90_bulk_reduce_add(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void fa90_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void fa90_bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* mbarriers (PTX ISA "mbarrier"): the producer/consumer rings of the warp-specialized kernels */
__device__ __forceinline__ void fa90_mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fa90_mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* arrives on bar when this thread's cp.async copies so far have landed (counted in the init) */
__device__ __forceinline__ void fa90_mbar_cp_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* waits until the phase of bar with this parity has completed */
__device__ __forceinline__ void fa90_mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
template <int N> __device__ __forceinline__ void fa90_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void fa90_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* TMA (PTX ISA "cp.async.bulk.tensor", CUDA programming guide "Tensor Memory Access"): the tensor
 * maps of a pass (fa90_map: each a (B, T, H D) array read in boxes of 64 columns by a tile's rows,
 * written to shared memory 128-byte swizzled, rows past T zero-filled), passed by value as a
 * __grid_constant__ parameter. d_head 64 and 128 only (whole 64-column blocks); the others, and
 * arrays TMA cannot describe, keep the cp.async copies. H100, leaderboard, alternating processes
 * (bench/results/h100-2026-11-24-tma, call 1): forward d_head 64 1.085-1.101 ms against 1.169-1.183
 * with cp.async, d_head 128 1.681-1.793 against 1.915-1.974; backward d_head 128 5.09-5.28
 * against 5.49-5.53, d_head 64 unchanged (3.36-3.41 against 3.33-3.38). TLM_FLASH_SM90=3 turns it
 * off (the selector's sm90_tma; the GPU tests run the flash cases both ways). */
struct fa90_maps {
    CUtensorMap q, k, v, dout; /* the forward leaves dout unused */
};
/* one thread declares `bytes` more to land on bar and arrives on it (the phase completes when the
 * arrivals are in and the bytes have landed) */
__device__ __forceinline__ void fa90_mbar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
/* the box of map at (column c, row r, batch b) into shared address dst, completing on bar */
__device__ __forceinline__ void fa90_tma_load(uint32_t dst, const CUtensorMap *map, int c, int r, int b, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(r), "r"(b), "r"(bar)
                 : "memory");
}
/* a tile of ROWS rows from row0, d_head D (64 or 128: D / 64 column blocks of ROWS x 128 bytes), of
 * head h and batch b, into the swizzled tile at s; one thread; bar must expect ROWS x D x 2 bytes */
template <int ROWS, int D>
__device__ __forceinline__ void fa90_tma_tile(uint32_t s, const CUtensorMap *map, int h, int row0, int b, uint32_t bar) {
    static_assert(D % 64 == 0, "whole 64-column blocks");
#pragma unroll
    for (int blk = 0; blk < D / 64; blk++) fa90_tma_load(s + blk * ROWS * 128, map, h * D + 64 * blk, row0, b, bar);
}

/* rows [row0, row0 + ROWS) of a (rows, D) slice with row stride ld (elements) into the swizzled
 * tile at shared address s (see the header); rows >= nrows are zero-filled. The 16-byte pieces
 * [P0, P0 + NP) of each row (piece p: columns 8p .. 8p + 7, in column block p / 8): thread tid < NT
 * copies the same piece p of rows r0, r0 + RSTEP, ...: RSTEP is a multiple of 8, so the piece's
 * swizzled column is the same in every row it copies and each copy's addresses are the previous
 * one's plus a constant (the producer's address arithmetic had been half of the d_head-128
 * forward's executed instructions: ncu, H100) */
template <int ROWS, int P0, int NP, int NT, typename E>
__device__ __forceinline__ void fa90_load_pieces(uint32_t s, const E *g, int64_t ld, int row0, int nrows, int tid) {
    constexpr int RSTEP = NT / NP; /* rows a round */
    static_assert(NT % NP == 0 && RSTEP % 8 == 0 && ROWS % RSTEP == 0, "whole rounds of 8-row groups");
    const int p = P0 + tid % NP, r0 = tid / NP;
    const uint32_t dst = s + (uint32_t)((p >> 3) * ROWS * 128 + r0 * 128 + (((p & 7) ^ (r0 & 7)) << 4));
    const E *src = g + (int64_t)(row0 + r0) * ld + p * 8;
    const int64_t step = RSTEP * ld;
    if (row0 + ROWS <= nrows) { /* every row inside */
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; i++, src += step) fa_cp16_s(dst + i * RSTEP * 128, src, true);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; i++, src += step) {
            const bool valid = row0 + r0 + i * RSTEP < nrows;
            fa_cp16_s(dst + i * RSTEP * 128, valid ? src : g, valid);
        }
    }
}
/* the whole tile: all D / 8 pieces of a row at once where NT threads make whole rounds of 8-row
 * groups of them (d_head 64, 128; 32: pieces 0-3 of the single block, 32 rows a round of 128
 * threads); at d_head 80 (10 pieces a row) column block 0's 8 pieces
 * (16 rows a round of 128 threads), then block 1's 2 (64 rows a round) */
template <int ROWS, int D, int NT, typename E>
__device__ __forceinline__ void fa90_load_tile(uint32_t s, const E *g, int64_t ld, int row0, int nrows, int tid) {
    if constexpr (D % 64 == 0 || D < 64) {
        fa90_load_pieces<ROWS, 0, D / 8, NT>(s, g, ld, row0, nrows, tid);
    } else {
        static_assert(D > 64 && D % 8 == 0, "d_head 80");
        fa90_load_pieces<ROWS, 0, D / 64 * 8, NT>(s, g, ld, row0, nrows, tid);
        fa90_load_pieces<ROWS, D / 64 * 8, D % 64 / 8, NT>(s, g, ld, row0, nrows, tid);
    }
}

/* The same copy with each piece's addresses worked out from its index (c = tid + i NT). The
 * backward's producer uses this one: with fa90_load_tile its leaderboard pass took 3-5% longer at
 * d_head 64 and 128 (H100, alternating processes of one call); its copies are a small share of
 * what the block executes. */
template <int ROWS, int D, int NT, typename E>
__device__ __forceinline__ void fa90_load_tile_indexed(uint32_t s, const E *g, int64_t ld, int row0, int nrows,
                                                       int tid) {
    constexpr int PIECES = D / 8;
    static_assert(ROWS * PIECES % NT == 0, "whole rounds of pieces");
#pragma unroll 4
    for (int i = 0; i < ROWS * PIECES / NT; i++) {
        const int c = tid + i * NT, r = c / PIECES, p = c % PIECES;
        const bool valid = row0 + r < nrows;
        const uint32_t dst = s + (uint32_t)((p >> 3) * ROWS * 128 + r * 128 + (((p & 7) ^ (r & 7)) << 4));
        fa_cp16_s(dst, g + (int64_t)(valid ? row0 + r : 0) * ld + p * 8, valid);
    }
}


/* ---- the kernel ------------------------------------------------------------------------------- */

/* 2^x on the special-function unit (subnormal results flush to 0) */
__device__ __forceinline__ float fa90_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* S = Q K^T for one warpgroup (issued, committed, not waited): sQw its 64 rows of the Q tile, sKb
 * the key tile; Q and K tiles are D/64 column blocks of 128-byte rows (BR and BC rows) */
template <typename E, int D, int BR>
__device__ __forceinline__ void fa90_issue_qk(float (&s)[FA90_BC / 2], uint32_t sQw, uint32_t sKb) {
    /* the descriptors' start-address field (address / 16, bits 0-13) moves by 2 a k16 step (32 bytes)
     * and by R x 8 a 64-column block (R rows of 128 bytes): added, not rebuilt, at d_head 64 and 32 (at
     * 128 the H100 measured the forward 2-8% slower so: built at each step there) */
    const uint64_t da0 = fa90_desc(sQw, 16, 1024), db0 = fa90_desc(sKb, 16, 1024);
    fa90_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        if constexpr (D <= 64)
            fa90_wgmma_ss<E, FA90_BC>(s, da0 + (kk & 3) * 2 + (kk >> 2) * BR * 8,
                                      db0 + (kk & 3) * 2 + (kk >> 2) * FA90_BC * 8, kk > 0 ? 1 : 0);
        else
            fa90_wgmma_ss<E, FA90_BC>(s, fa90_desc(sQw + (kk >> 2) * BR * 128 + (kk & 3) * 32, 16, 1024),
                                      fa90_desc(sKb + (kk >> 2) * FA90_BC * 128 + (kk & 3) * 32, 16, 1024),
                                      kk > 0 ? 1 : 0);
    }
    fa90_commit();
}

/* O += P V for one warpgroup (issued, committed, not waited): p the A-fragments of P's k16 steps */
template <typename E, int D>
__device__ __forceinline__ void fa90_issue_pv(float (&o)[D / 2], const uint32_t (&p)[FA90_BC / 16][4], uint32_t sVb) {
    const uint64_t db0 = fa90_desc(sVb, FA90_BC * 128, 1024);
    fa90_fence();
#pragma unroll
    for (int kk = 0; kk < FA90_BC / 16; kk++) /* 16 rows a step; as in fa90_issue_qk by d_head */
        fa90_wgmma_rs<E, D>(o, p[kk], D <= 64 ? db0 + 128 * kk : fa90_desc(sVb + kk * 16 * 128, FA90_BC * 128, 1024));
    fa90_commit();
}

/* Masks key tile j0 (keys >= Tk; causal: key > row + offset) when it reaches the sequence end or
 * the diagonal of this warp's rows (first row w0), then the online-softmax step of rows g
 * (h2 = 0) and g + 8 (h2 = 1) in the log2 domain: m, l updated, alpha[h2] = the factor the
 * output so far must be scaled by, P rounded to E into p (the C-fragments of 8-column blocks
 * 2kk, 2kk + 1 are the A-fragment of k-step kk). */
template <typename E>
__device__ __forceinline__ void fa90_softmax(float (&s)[FA90_BC / 2], uint32_t (&p)[FA90_BC / 16][4], float (&m)[2],
                                             float (&l)[2], float (&alpha)[2], int j0, int w0, int g, int t4,
                                             int Tk, int offset, int causal, float scale_log2) {
    constexpr int NS = FA90_BC / 8;
    if (j0 + FA90_BC > Tk || (causal && j0 + FA90_BC - 1 > w0 + offset)) {
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = w0 + g + (e >> 1) * 8, col = j0 + n * 8 + 2 * t4 + (e & 1);
                if (col >= Tk || (causal && col > row + offset)) s[4 * n + e] = -INFINITY;
            }
    }
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NS; n++) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * h2], s[4 * n + 2 * h2 + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[h2], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* a row with no key yet: no NaN */
        alpha[h2] = fa90_exp2(m[h2] - m_use);
        m[h2] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 2 * h2; e < 2 * h2 + 2; e++) {
                const float pe = fa90_exp2(fmaf(s[4 * n + e], scale_log2, -m_use));
                s[4 * n + e] = pe;
                sum += pe;
            }
        l[h2] = l[h2] * alpha[h2] + sum;
    }
#pragma unroll
    for (int kk = 0; kk < FA90_BC / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) p[kk][r] = fa_pack<E>::two(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

template <int D> __device__ __forceinline__ void fa90_rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        o[4 * n + 0] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
    }
}

/* Which (tile, head, batch) block `blockIdx.x` of a 1-D grid of n_tiles x H x B computes. Work
 * grows with the query tile in a causal forward and shrinks with the key tile in a causal backward
 * (reversed: the tiles that do the most work are the last ones). The (head, batch) pairs go in
 * groups of `group`; a group's blocks go out tile by tile in order of decreasing work, the pairs of
 * a tile consecutive. group 1 keeps each head's tiles together: a sawtooth of long and short blocks
 * whose last wave can hold long ones (a list schedule of the leaderboard's d_head-64 forward, 86
 * tiles of 192 rows x 16 heads on 132 SMs, ends 7% later than longest first); larger groups
 * approach longest first but read more heads' keys and values at once (L2). */
__device__ __forceinline__ void fa90_block_of(int n_tiles, int H, int group, bool reversed, int &tile, int &h,
                                              int &b) {
    const int hb_count = (int)gridDim.x / n_tiles, L = (int)blockIdx.x;
    const int g0 = L / (group * n_tiles) * group, rem = L - g0 * n_tiles, gs = min(group, hb_count - g0);
    const int level = rem / gs, hb = g0 + rem % gs;
    tile = reversed ? n_tiles - 1 - level : level;
    h = hb % H;
    b = hb / H;
}

template <int R, int C> __device__ __forceinline__ void fa90_pin_regs(uint32_t (&p)[R][C]) {
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++) asm volatile("" : "+r"(p[i][j])::"memory");
}

__device__ __forceinline__ void fa90_pin_vals(float (&a)[2], float (&b)[2]) {
    asm volatile("" : "+f"(a[0]), "+f"(a[1]), "+f"(b[0]), "+f"(b[1])::"memory");
}

/* a pass's tensor maps (sm90_forward.cu): q in tiles of q_rows rows, k and v of FA90_BC, and in the
 * backward (dout not NULL) dout as q; true where the kernels copy by TMA: d_head 64 or 128, tma (the
 * selector's sm90_tma), every map encoded (else *m is zeros and they copy by cp.async) */
bool tlm_attn_sm90_maps(fa90_maps *m, tlm_dtype dt, int D, bool tma, const void *q, const void *k, const void *v,
                        const void *dout, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int q_rows);

/* fa90_block_of's group of (head, batch) pairs: dflt (0: all pairs), at most the pairs there are */
static inline int fa90_group(int dflt, int pairs) { return dflt <= 0 || dflt > pairs ? pairs : dflt; }

#endif
