/* flash_attention_sm90.cu — FlashAttention on Hopper's warpgroup tensor cores (wgmma, sm_90a),
 * bf16 and fp16: the forward and the backward for d_head 32, 64, 80 and 128, which flash_attention.cu's
 * ops run on a compute-capability 9.x device (tlm_cuda_flash_forward_sm90, _backward_sm90); the
 * mma.sync kernels of flash_attention.cu stay for the other d_head, for grids under two thirds
 * of a wave (split-KV, short-context tiles), and other GPUs.
 * Semantics, layout and masking are those of tlm/flash_attention.h (the CPU reference):
 * out (B,Tq,H*D) and the fp32 logsumexp lse (B,H,Tq); causal masking bottom-right aligned;
 * fully masked rows give 0 and -inf.
 *
 * Algorithm: FlashAttention-2's forward (Dao 2023, Algorithm 1) with the tile products on wgmma
 * as FlashAttention-3 does them (Shah et al. 2024, "FlashAttention-3: Fast and Accurate
 * Attention with Asynchrony and Low-precision", §3): one block per (query tile, head, batch): a
 * producer warpgroup copying tiles in, two or three consumer warpgroups of 64 query rows each
 * (three at d_head 32 and 64 from 1024 queries: fa90_fwd_consumers; the kernel's comment says how they
 * meet). Per key/value tile of BC = 128 rows:
 *   S = Q K^T        wgmma m64n128k16 (D / 16 k-steps), A = Q and B = K both from shared memory
 *                    (K-major);
 *   online softmax   in registers, in the log2 domain, as flash_attention.cu;
 *   O += P V         wgmma m64nDk16, A = P from registers (the accumulator fragment of S is,
 *                    rounded to bf16/fp16, the register A-fragment), B = V from shared memory
 *                    read N-major (the transposed-B mode of 16-bit wgmma: no transpose pass).
 * Shared memory holds every tile in the 128-byte-swizzled layout wgmma reads: a tile of R rows
 * by D columns is ceil(D/64) column blocks of R x 64 elements (128-byte rows), and the 16-byte
 * piece c of row r sits at piece (c ^ (r % 8)) of that row (bank-conflict free for the tensor
 * cores and for the 16-byte cp.async writes). At d_head 80 a tile is laid out as at 128, two
 * blocks, of which the second holds columns 64-79 in its pieces 0-1 (swizzled as any piece) and
 * its other 48 columns are never written nor read: the k-steps 0-3 of S = Q K^T read block 0, step
 * 4 block 1; the m64n80 P V reads block 0 and block 1's first 16 columns (its descriptor's leading
 * byte offset the distance between the blocks, as at 128).
 * At d_head 32 a tile is laid out as at 64, one block, of which only columns 0-31 (pieces 0-3)
 * are written and read (the other 64 bytes of each row never): S = Q K^T takes k-steps 0-1, P V
 * is one m64n32 product a k-step. The blocks of a causal launch run heaviest first. Where the grid
 * would be under two thirds of a wave (fa90_applies), flash_attention.cu's kernels run instead.
 * The GPU tests' sm90 twin runs every d_head through these kernels (H100, 2026-11-24: all pass).
 *
 * Descriptors (PTX ISA, "Matrix Descriptor Format" of wgmma): start address >> 4 (bits 0-13),
 * leading byte offset >> 4 (16-29), stride byte offset >> 4 (32-45), swizzle mode (62-63; 1 =
 * 128 bytes). K-major operand: stride = 1024 bytes between groups of 8 rows, the leading offset
 * unused; a k16 step moves the start by 32 bytes inside the 128-byte row, a 64-column block
 * moves it by R x 128 bytes. N-major B (V): leading offset = the distance between 64-column
 * blocks (BC x 128 bytes), stride = 1024 bytes between groups of 8 key rows; a k16 step moves the
 * start by 16 rows (2048 bytes). Every tile starts 1024-byte aligned (the swizzle repeats every
 * 1024 bytes of address).
 *
 * Environment: TLM_FLASH_SM90=0 sends every pass to the mma.sync kernels (side-by-side timing and
 * testing), TLM_FLASH_SM90=2 every pass they can take to these, whatever the grid (tests);
 * TLM_FLASH_TMA=0 copies by cp.async where TMA would (timing, tests). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap; the encoder comes through the runtime (no link to libcuda) */
#include <cudaTypedefs.h>

#include "cuda/cuda_common.cuh"

#define FA90_LOG2E 1.4426950408889634f
#define FA90_LN2 0.6931471805599453f
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

__device__ __forceinline__ void fa90_cp16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void fa90_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void fa90_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
 * against 5.49-5.53, d_head 64 unchanged (3.36-3.41 against 3.33-3.38). TLM_FLASH_TMA=0 turns it
 * off (timing; the GPU tests run the flash cases both ways). */
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
        for (int i = 0; i < ROWS / RSTEP; i++, src += step) fa90_cp16(dst + i * RSTEP * 128, src, true);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; i++, src += step) {
            const bool valid = row0 + r0 + i * RSTEP < nrows;
            fa90_cp16(dst + i * RSTEP * 128, valid ? src : g, valid);
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
        fa90_cp16(dst, g + (int64_t)(valid ? row0 + r : 0) * ld + p * 8, valid);
    }
}

template <typename E> __device__ __forceinline__ uint32_t fa90_pack(float lo, float hi) {
    if constexpr (std::is_same<E, __nv_bfloat16>::value) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
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
        for (int r = 0; r < 4; r++) p[kk][r] = fa90_pack<E>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
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

/* Register fragments of a warpgroup's 64 x N accumulator (PTX ISA, wgmma .m64nNk16 D layout):
 * thread t (warp w = t / 32 of the warpgroup, g = lane / 4, t4 = lane % 4) holds for each 8-column
 * block n: d[4n + 0, 1] = row 16w + g, columns 8n + 2 t4 + {0, 1}; d[4n + 2, 3] = row 16w + g + 8.
 *
 * Warp specialization (FlashAttention-3 §3.1): warpgroup 0 is the producer (it copies Q and the
 * key and value tiles into shared memory: at d_head 64 and 128 its thread 0 by TMA, fa90_maps, else
 * all 128 threads by cp.async; most of its registers go to the others by setmaxnreg), warpgroups
 * 1 and 2 the consumers (64 query rows each). Keys and values
 * go through rings of FA90_STAGES tiles each, with a "full" mbarrier per slot (the producer's
 * copies landed) and an "empty" one (both consumers are done with it): no block-wide barrier, so
 * the consumers drift apart and one's softmax runs beside the other's products.
 * Each consumer overlaps its softmax with its own tensor-core work (§3.2): at tile t it issues
 * S_t = Q K_t and O += P_{t-1} V_{t-1} together, waits for S_t only (and frees K_t's slot),
 * computes P_t while the PV product runs, then waits for it (freeing V_{t-1}'s slot) and rescales O.
 * With `pingpong` the consumers also take turns to issue their products (FlashAttention-3 §3.1's
 * ping-pong scheduling): consumer c waits at named barrier 1 + c for its turn, issues, and hands
 * the turn to consumer c + 1 (cyclically), so that one consumer's products run while the others
 * compute their softmax. Each consumer takes n_tiles turns (one per tile, the last PV product
 * outside); the last consumer starts the cycle and does not pass its last turn on, so every
 * barrier's arrivals match its waits. */
#define FA90_STAGES 2
__device__ __forceinline__ void fa90_turn_wait(int bar) { asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void fa90_turn_pass(int bar) { asm volatile("bar.arrive %0, 256;\n" ::"r"(bar) : "memory"); }
template <typename E, int D, int NC>
__global__ void __launch_bounds__(128 * (NC + 1), 1)
    flash_fwd_sm90_kernel(E *__restrict__ out, float *__restrict__ lse, const E *__restrict__ q,
                          const E *__restrict__ k, const E *__restrict__ v, int ld_qkv, int ld_out, int Tq, int Tk,
                          int H, float scale_log2, int causal, int group, int pingpong,
                          const __grid_constant__ fa90_maps maps, int tma) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(D == 32 || D == 64 || D == 80 || D == 128, "d_head 32, 64, 80 or 128");
    constexpr int BR = 64 * NC, BC = FA90_BC, NS = FA90_STAGES;
    constexpr uint32_t Q_BYTES = BR * fa90_tile_cols(D) * 2, KV_BYTES = BC * fa90_tile_cols(D) * 2;
    extern __shared__ unsigned char fa90_smem_raw[];
    /* 1024-byte aligned tiles (the launch asks for 1 KiB more), then the mbarriers */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(fa90_smem_raw);
    const uint32_t sQ = (raw + 1023) & ~1023u;
    const uint32_t sK = sQ + Q_BYTES;       /* [NS] tiles */
    const uint32_t sV = sK + NS * KV_BYTES; /* [NS] tiles */
    const uint32_t bars = sV + NS * KV_BYTES;
    const uint32_t q_full = bars, k_full = bars + 8, k_empty = k_full + 8 * NS, v_full = k_empty + 8 * NS,
                   v_empty = v_full + 8 * NS; /* 8 bytes each */

    const int tid = threadIdx.x, wg = tid >> 7;
    int m_block, h, b;
    fa90_block_of((Tq + BR - 1) / BR, H, group, causal, m_block, h, b);
    const int i0 = m_block * BR, offset = Tk - Tq;
    const int n_end = causal ? min(Tk, i0 + BR + offset) : Tk;
    const int n_tiles = n_end > 0 ? (n_end + BC - 1) / BC : 0;

    if (tid == 0) {
        const int producers = D % 64 == 0 && tma ? 1 : 128; /* the producer's copying threads */
        fa90_mbar_init(q_full, producers);
        for (int st = 0; st < NS; st++) {
            fa90_mbar_init(k_full + 8 * st, producers);
            fa90_mbar_init(v_full + 8 * st, producers);
            fa90_mbar_init(k_empty + 8 * st, 128 * NC); /* the consumer threads */
            fa90_mbar_init(v_empty + 8 * st, 128 * NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { /* ---- producer ---- */
        fa90_setmaxnreg_dec<NC == 3 ? 24 : 40>();
        if constexpr (D % 64 == 0) {
            if (tma) { /* one thread issues every copy; the tiles are whole boxes (rows past the end zero) */
                if (tid == 0) {
                    fa90_mbar_expect(q_full, Q_BYTES);
                    fa90_tma_tile<BR, D>(sQ, &maps.q, h, i0, b, q_full);
                    for (int t = 0; t < n_tiles; t++) {
                        const int st = t % NS;
                        const uint32_t par = ((t / NS) & 1) ^ 1;
                        if (t >= NS) fa90_mbar_wait(k_empty + 8 * st, par);
                        fa90_mbar_expect(k_full + 8 * st, KV_BYTES);
                        fa90_tma_tile<BC, D>(sK + st * KV_BYTES, &maps.k, h, t * BC, b, k_full + 8 * st);
                        if (t >= NS) fa90_mbar_wait(v_empty + 8 * st, par);
                        fa90_mbar_expect(v_full + 8 * st, KV_BYTES);
                        fa90_tma_tile<BC, D>(sV + st * KV_BYTES, &maps.v, h, t * BC, b, v_full + 8 * st);
                    }
                }
                return;
            }
        }
        const E *qb = q + (int64_t)b * Tq * ld_qkv + h * D;
        const E *kb = k + (int64_t)b * Tk * ld_qkv + h * D;
        const E *vb = v + (int64_t)b * Tk * ld_qkv + h * D;
        fa90_load_tile<BR, D, 128>(sQ, qb, ld_qkv, i0, Tq, tid);
        fa90_mbar_cp_arrive(q_full);
        for (int t = 0; t < n_tiles; t++) {
            const int st = t % NS;
            const uint32_t par = ((t / NS) & 1) ^ 1; /* the release of the tile NS before */
            if (t >= NS) fa90_mbar_wait(k_empty + 8 * st, par);
            fa90_load_tile<BC, D, 128>(sK + st * KV_BYTES, kb, ld_qkv, t * BC, Tk, tid);
            fa90_mbar_cp_arrive(k_full + 8 * st);
            if (t >= NS) fa90_mbar_wait(v_empty + 8 * st, par);
            fa90_load_tile<BC, D, 128>(sV + st * KV_BYTES, vb, ld_qkv, t * BC, Tk, tid);
            fa90_mbar_cp_arrive(v_full + 8 * st);
        }
        return;
    }
    /* ---- consumers ---- */
    /* 65536 registers: 128 x 40 + 256 x 232 (two consumers), 128 x 24 + 384 x 160 (three) */
    fa90_setmaxnreg_inc<NC == 3 ? 160 : 232>();
    const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int w0 = i0 + cw * 64 + warp * 16; /* the warp's first row */
    const uint32_t sQw = sQ + cw * 64 * 128; /* this warpgroup's 64 rows of Q */

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    float s[BC / 2];
    uint32_t p[BC / 16][4], p_next[BC / 16][4];
    /* ping-pong: this consumer's barrier, the next one's; the last consumer starts the cycle */
    const int my_turn = 1 + cw, next_turn = 1 + (cw + 1) % NC;
    if (pingpong && n_tiles > 0 && cw == NC - 1) fa90_turn_pass(next_turn);

    if (n_tiles > 0) {
        fa90_mbar_wait(q_full, 0);
        fa90_mbar_wait(k_full, 0);
        if (D % 64 != 0 || !tma) fa90_proxy_fence(); /* cp.async wrote through the generic proxy (TMA: the async one) */
        if (pingpong) fa90_turn_wait(my_turn);
        fa90_issue_qk<E, D, BR>(s, sQw, sK);
        if (pingpong && !(cw == NC - 1 && n_tiles == 1)) fa90_turn_pass(next_turn);
        fa90_wait<0>();
        fa90_pin<BC / 2>(s);
        fa90_mbar_arrive(k_empty);
        fa90_softmax<E>(s, p, m, l, alpha, 0, w0, g, t4, Tk, offset, causal, scale_log2);
        fa90_pin_regs(p);
    }
    for (int t = 1; t < n_tiles; t++) {
        const int st = t % NS, sp = (t - 1) % NS;
        fa90_mbar_wait(k_full + 8 * st, (t / NS) & 1);
        fa90_mbar_wait(v_full + 8 * sp, ((t - 1) / NS) & 1);
        if (D % 64 != 0 || !tma) fa90_proxy_fence();
        if (pingpong) fa90_turn_wait(my_turn);
        fa90_issue_qk<E, D, BR>(s, sQw, sK + st * KV_BYTES);
        fa90_issue_pv<E, D>(o, p, sV + sp * KV_BYTES);
        if (pingpong && !(cw == NC - 1 && t == n_tiles - 1)) fa90_turn_pass(next_turn);
        fa90_wait<1>(); /* S_t */
        fa90_pin<BC / 2>(s);
        fa90_mbar_arrive(k_empty + 8 * st);
        fa90_softmax<E>(s, p_next, m, l, alpha, t * BC, w0, g, t4, Tk, offset, causal, scale_log2);
        /* computed here, while the PV product runs: without the pins the compiler would sink the
         * softmax below the wait (nothing else ties it to this side) */
        fa90_pin_regs(p_next);
        fa90_pin_vals(alpha, l);
        fa90_wait<0>(); /* O += P_{t-1} V_{t-1} */
        fa90_pin<D / 2>(o);
        fa90_pin_regs(p); /* p was read by the tensor cores until here */
        fa90_mbar_arrive(v_empty + 8 * sp);
        fa90_rescale<D>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) p[kk][r] = p_next[kk][r];
        /* the next products' inputs defined here, before their wgmma.fence (else ptxas serializes) */
        fa90_pin<D / 2>(o);
        fa90_pin_regs(p);
    }
    if (n_tiles > 0) {
        const int sp = (n_tiles - 1) % NS;
        fa90_mbar_wait(v_full + 8 * sp, ((n_tiles - 1) / NS) & 1);
        if (D % 64 != 0 || !tma) fa90_proxy_fence();
        fa90_issue_pv<E, D>(o, p, sV + sp * KV_BYTES);
        fa90_wait<0>();
        fa90_pin<D / 2>(o);
    }

#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        float sum = l[h2];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = w0 + g + 8 * h2;
        if (row >= Tq) continue;
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* a fully masked row: out = 0 */
        E *orow = out + ((int64_t)b * Tq + row) * ld_out + h * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<uint32_t *>(orow + n * 8) = fa90_pack<E>(o[4 * n + 2 * h2] * inv, o[4 * n + 2 * h2 + 1] * inv);
        if (t4 == 0) lse[((int64_t)b * H + h) * Tq + row] = sum > 0.0f ? (m[h2] + log2f(sum)) * FA90_LN2 : -INFINITY;
    }
#else
    __trap(); /* built without sm_90a: the launcher never gets here (tlm_cuda_flash_forward_sm90) */
#endif
}

/* ---- backward ------------------------------------------------------------------------------ */

/* The backward on wgmma (FlashAttention-2's Algorithm 2 organized as FlashAttention-3's §3 backward:
 * one block per 128-key tile, K and V resident in shared memory, dK and dV in registers), d_head
 * 32, 64, 80 and 128. As in the forward, warpgroup 0 is the producer: K and V once, then each query
 * tile's Q, dO, logsumexp and delta through a ring of slots (mbarriers "full" and "empty").
 * The two consumer warpgroups each own 64 of the keys; per query tile of 64 rows, warpgroup w
 * computes with its keys K_w, V_w:
 *   S^T = K_w Q^T, dP^T = V_w dO^T          SS wgmma m64n64 (both operands K-major)
 *   P^T = exp2(S^T scale log2 e - L log2 e)  (0 where masked), dS^T = P^T (dP^T - delta)
 *   dV += P^T dO, dK += dS^T Q               RS wgmma m64nD: P^T, dS^T rounded to E in registers,
 *                                            dO and Q read N-major (transposed B)
 *   dQ_i[:, cols_w] += scale dS K[:, cols_w] dS^T stored to shared memory by both warpgroups
 *                                            (double-buffered, one barrier of the two a tile), read
 *                                            back M-major (transposed A): SS m64n(D/2) over all 128
 *                                            keys for the warpgroup's D/2 columns cols_w (half the
 *                                            accumulator registers of all D columns over its own 64
 *                                            keys: at d_head 128 dK and dV already take 128; at 64
 *                                            measured 1% faster); at d_head 80 cols_0 = 0-63
 *                                            (m64n64) and cols_1 = 64-79 (m64n16): a descriptor
 *                                            cannot start at column 40 (80 bytes into a swizzled
 *                                            row, its 5 pieces would run past the row's end).
 *                                            The tensor cores do the same work either way;
 *                                            warpgroup 0's products take longer (not measured);
 *                                            at d_head 32 cols_0 = 0-31 (m64n32, as warpgroup 0
 *                                            at 64) and warpgroup 1 none (an m64n16 from 32 bytes
 *                                            into the rows has not been run)
 * and adds its dQ partial to the fp32 accumulator in the workspace. Where Tq is a multiple of 64
 * (TILED_DQ) it does so as FlashAttention-3 does: the partial goes to shared memory in the
 * accumulator's own register order (conflict-free float4 stores) and one thread hands it (4, 8 or
 * 16 KiB) to the copy engine as a single bulk reduction (cp.reduce.async.bulk .add.f32) into a tile of the
 * accumulator kept in that same order (tlm_cuda_flash_dq_tiled_index, column blocks of D/2, at
 * d_head 80 of 64 and 16, at 32 one of 32; the rounding pass reads it back), double-buffered so
 * the add of one tile overlaps the next tile's products. Otherwise each warp adds its rows with
 * float4 atomics. The delta pre-pass and the dQ rounding post-pass are flash_attention.cu's.
 * TLM_FLASH_DQ_BULK=0 keeps the atomics everywhere (timing).
 * OWN (d_head 64 with the tiled dQ, the default there): each warpgroup computes the dQ partial of
 * all D columns over its own 64 keys instead, dQ_i += scale dS[:, keys_w] K_w (SS m64n64 over 64
 * keys: the same tensor work in half the instructions), so it reads only its own dS^T and the two
 * warpgroups never wait for each other within a tile (a barrier of the warpgroup's 128 threads
 * instead of the 256); the price is twice the bulk adds into the accumulator (16 KiB a warpgroup a
 * tile), in one column block of 64. H100, alternating processes (bench/results/
 * h100-2026-11-24-dq-own): leaderboard backward faster in 8 of 8 rounds in three calls, by 0.8-5.4%
 * (3.35-3.50 ms against 3.44-3.65); flash-benchmarking's single head at seq 16384-65536, 4-8%
 * faster. At d_head 32 (an m64n32 a warpgroup) it was 15-20% slower there, so d_head 32 keeps
 * warpgroup 0's shared product. TLM_FLASH_DQ_OWN=0 turns it off (timing).
 * RSKV (with OWN, the default at d_head 64): the warpgroup's K_w and V_w are loaded once into
 * registers as A-fragments (ldmatrix; 32 registers a thread), so S^T and dP^T are RS products that
 * read only Q and dO from shared memory (K-major B). The registers this takes leave none for PIPE
 * (ptxas serializes the products, C7512), so S^T and dP^T are issued at the top of each tile.
 * H100, alternating processes (bench/results/h100-2026-11-24-tma, calls 2 and 3): leaderboard
 * backward 3.15-3.21 ms against 3.33-3.43 with PIPE, in 6 of 6 rounds. Issuing S^T and dP^T as two
 * groups and computing P^T while dP^T runs was slower (3.20-3.22 ms; d_head 128 5.28-5.47 against
 * 5.14-5.31), so one group. TLM_FLASH_BWD_RSKV=0 turns it off (timing).
 * With TMA (fa90_maps: d_head 64 and 128) the producer's warp 0 alone copies: its lane 0 issues K
 * and V and each query tile's Q and dO as tensor copies that complete on the mbarriers' byte counts,
 * its 32 lanes copy the tile's logsumexp and delta by cp.async; the other producer warps exit. */
#define FA90_BWD_STAGES 3
template <typename E, int D, bool TILED_DQ, bool OWN, bool RSKV>
__global__ void __launch_bounds__(FA90_THREADS, 1)
    flash_bwd_sm90_kernel(float *__restrict__ dq_acc, E *__restrict__ dk, E *__restrict__ dv,
                          const E *__restrict__ dout, const E *__restrict__ q, const E *__restrict__ k,
                          const E *__restrict__ v, const float *__restrict__ lse, const float *__restrict__ delta,
                          int ld_qkv, int ld_out, int Tq, int Tk, int H, float scale, float scale_log2, int causal,
                          int group, const __grid_constant__ fa90_maps maps, int tma) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(D == 32 || D == 64 || D == 80 || D == 128, "d_head 32, 64, 80 or 128");
    /* DQ0, DQ1: the dQ columns of warpgroups 0 and 1 (D / 2 each; at d_head 80 64 and 16: a
     * descriptor cannot start at column 40, 80 bytes into a 128-byte swizzled row, and the operand
     * must not cross a row's end; at d_head 32 32 and 0: warpgroup 0's m64n32 from column 0, as at
     * d_head 64, rather than an m64n16 starting 32 bytes into the row, a descriptor offset not yet
     * run; warpgroup 1 issues no dQ product and no bulk add); NS: ring slots (d_head 80, 128: the
     * shared memory allows 2) */
    constexpr int BC = 128, BR = 64, NS = D <= 64 ? FA90_BWD_STAGES : 2;
    static_assert(!OWN || (TILED_DQ && D == 64), "OWN: d_head 64, tiled dQ");
    static_assert(!RSKV || OWN, "RSKV: with OWN (d_head 64)");
    constexpr int DQ0 = OWN ? D : D == 80 ? 64 : D == 32 ? 32 : D / 2, DQ1 = OWN ? D : D - DQ0;
    constexpr uint32_t KV_BYTES = BC * fa90_tile_cols(D) * 2, QT_BYTES = BR * fa90_tile_cols(D) * 2,
                       DS_BYTES = BC * BR * 2;
    extern __shared__ unsigned char fa90_smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(fa90_smem_raw);
    const uint32_t sK = (raw + 1023) & ~1023u;
    const uint32_t sV = sK + KV_BYTES;
    const uint32_t sQ = sV + KV_BYTES;        /* [NS] query tiles */
    const uint32_t sdO = sQ + NS * QT_BYTES;  /* [NS] */
    const uint32_t sdS = sdO + NS * QT_BYTES; /* [2] dS^T: BC keys x BR queries, swizzled like a tile */
    const uint32_t sdQ = sdS + 2 * DS_BYTES;  /* TILED_DQ: [2] partials BR x DQ0 fp32, then [2] BR x DQ1 */
    /* [NS][BR] fp32 logsumexp of the ring's tiles */
    const uint32_t sL = sdQ + (TILED_DQ ? 2 * BR * (DQ0 + DQ1) * 4 : 0);
    const uint32_t sDelta = sL + NS * BR * 4; /* [NS][BR] fp32 delta */
    const uint32_t bars = sDelta + NS * BR * 4;
    const uint32_t kv_full = bars, q_full = bars + 8, q_empty = q_full + 8 * NS; /* 8 bytes each */

    const int tid = threadIdx.x, wgp = tid >> 7;
    int n_block, h, b;
    fa90_block_of((Tk + BC - 1) / BC, H, group, false, n_block, h, b);
    const int j0 = n_block * BC, offset = Tk - Tq;
    const int m_begin = causal ? max(0, j0 - offset) / BR : 0; /* query tiles that see any key here */
    const int m_end = (Tq + BR - 1) / BR;
    const float *lse_b = lse + ((int64_t)b * H + h) * Tq;
    const float *delta_b = delta + ((int64_t)b * H + h) * Tq;

    if (tid == 0) {
        /* the producer's copying threads: all 128, or with TMA the one issuing K and V, and warp 0
         * (its lane 0 issuing Q and dO, every lane copying logsumexp and delta) */
        const bool by_tma = D % 64 == 0 && tma;
        fa90_mbar_init(kv_full, by_tma ? 1 : 128);
        for (int st = 0; st < NS; st++) {
            fa90_mbar_init(q_full + 8 * st, by_tma ? 33 : 128);
            fa90_mbar_init(q_empty + 8 * st, 256); /* the consumer threads */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wgp == 0) { /* ---- producer: K, V once, then the query tiles (Q, dO) through the ring ---- */
        fa90_setmaxnreg_dec<D <= 64 ? 56 : 40>();
        if constexpr (D % 64 == 0) {
            if (tma) {
                if (tid >= 32) return;
                if (tid == 0) {
                    fa90_mbar_expect(kv_full, 2 * KV_BYTES);
                    fa90_tma_tile<BC, D>(sK, &maps.k, h, j0, b, kv_full);
                    fa90_tma_tile<BC, D>(sV, &maps.v, h, j0, b, kv_full);
                }
                for (int mb = m_begin; mb < m_end; mb++) {
                    const int it = mb - m_begin, st = it % NS;
                    if (it >= NS) fa90_mbar_wait(q_empty + 8 * st, ((it / NS) & 1) ^ 1);
                    if (tid == 0) {
                        fa90_mbar_expect(q_full + 8 * st, 2 * QT_BYTES);
                        fa90_tma_tile<BR, D>(sQ + st * QT_BYTES, &maps.q, h, mb * BR, b, q_full + 8 * st);
                        fa90_tma_tile<BR, D>(sdO + st * QT_BYTES, &maps.dout, h, mb * BR, b, q_full + 8 * st);
                    }
#pragma unroll
                    for (int r = 0; r < 4; r++) { /* logsumexp rows tid, tid + 32, then delta's */
                        const int row = mb * BR + tid + 32 * (r & 1);
                        const bool valid = row < Tq;
                        const float *src = (r < 2 ? lse_b : delta_b) + (valid ? row : 0);
                        const uint32_t dst = (r < 2 ? sL : sDelta) + (uint32_t)(st * BR + tid + 32 * (r & 1)) * 4;
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                                     "r"(valid ? 4 : 0));
                    }
                    fa90_mbar_cp_arrive(q_full + 8 * st);
                }
                return;
            }
        }
        const E *qb = q + (int64_t)b * Tq * ld_qkv + h * D;
        const E *kb = k + (int64_t)b * Tk * ld_qkv + h * D;
        const E *vb = v + (int64_t)b * Tk * ld_qkv + h * D;
        const E *dob = dout + (int64_t)b * Tq * ld_out + h * D;
        fa90_load_tile_indexed<BC, D, 128>(sK, kb, ld_qkv, j0, Tk, tid);
        fa90_load_tile_indexed<BC, D, 128>(sV, vb, ld_qkv, j0, Tk, tid);
        fa90_mbar_cp_arrive(kv_full);
        for (int mb = m_begin; mb < m_end; mb++) {
            const int it = mb - m_begin, st = it % NS;
            if (it >= NS) fa90_mbar_wait(q_empty + 8 * st, ((it / NS) & 1) ^ 1);
            fa90_load_tile_indexed<BR, D, 128>(sQ + st * QT_BYTES, qb, ld_qkv, mb * BR, Tq, tid);
            fa90_load_tile_indexed<BR, D, 128>(sdO + st * QT_BYTES, dob, ld_out, mb * BR, Tq, tid);
            { /* the tile's logsumexp and delta, 4 bytes a thread (rows past Tq zero-filled) */
                const int row = mb * BR + (tid & 63);
                const bool valid = row < Tq;
                const float *src = (tid < 64 ? lse_b : delta_b) + (valid ? row : 0);
                const uint32_t dst = (tid < 64 ? sL : sDelta) + (uint32_t)(st * BR + (tid & 63)) * 4;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
            }
            fa90_mbar_cp_arrive(q_full + 8 * st);
        }
        return;
    }
    /* ---- consumers: warpgroup wg owns keys j0 + 64 wg .. ---- */
    /* 65536 registers less the launch's rounding (168 a thread): 128 x 56 + 256 x 224, 128 x 40 + 256 x 232 */
    fa90_setmaxnreg_inc<D <= 64 ? 224 : 232>();
    const int wg = wgp - 1, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int kwarp = j0 + wg * 64 + warp * 16; /* the warp's first key */
    /* the accumulator's slice of this (b, h), and this warpgroup's column block in a tile (tiled) */
    const int dqc = wg == 0 ? DQ0 : DQ1; /* this warpgroup's dQ columns: wg DQ0 .. + dqc */
    /* whether this warpgroup computes DQ0 columns (the m64n64 product at d_head 80, warpgroup 1 the
     * m64n16; at 32 warpgroup 0 the m64n32, warpgroup 1 nothing): read from lane 0, which shows
     * ptxas the branch is the same for the whole warp (with wg == 0 it serialized every wgmma:
     * C7520, "compiler-inserted WG.AR in divergent path") */
    bool dq_wide = true;
    if constexpr (DQ0 != DQ1) dq_wide = __shfl_sync(0xffffffffu, wg, 0) == 0;
    float *dqa = dq_acc + ((int64_t)b * H + h) * Tq * D + (TILED_DQ && !OWN ? wg * BR * DQ0 : 0);
    const uint32_t sKw = sK + wg * 64 * 128, sVw = sV + wg * 64 * 128;
    /* TILED_DQ: [2] partials BR x dqc (warpgroup 1 at d_head 32: none; its address, past the region,
     * is never used) */
    const uint32_t sdQw = sdQ + wg * 2 * BR * DQ0 * 4;
    const int tw = tid & 127;           /* the thread within its warpgroup */
    /* TILED_DQ: the thread that issues the warpgroup's bulk adds (none in warpgroup 1 at d_head 32) */
    const bool issuer = tw == 0 && (DQ1 > 0 || wg == 0);

    float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    /* RSKV: the warpgroup's K_w and V_w as register A-fragments, loaded once (after the copies
     * landed: through the async proxy, or by cp.async and then fenced) */
    uint32_t kfr[RSKV ? D / 16 : 1][4], vfr[RSKV ? D / 16 : 1][4];
    if (m_begin < m_end) {
        fa90_mbar_wait(kv_full, 0);
        if constexpr (RSKV) {
            if (!tma) fa90_proxy_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                fa90_ldsm_a(kfr[kk], sKw, warp, lane, kk);
                fa90_ldsm_a(vfr[kk], sVw, warp, lane, kk);
            }
        }
    }
    /* descriptors (fa90_desc) of the fixed operands; a step of k16 moves the start address field
     * (bits 0-13, address / 16) by 2 (32 bytes) in K-major, by 128 (16 rows) in N- or M-major */
    const uint64_t dK0 = fa90_desc(sKw, 16, 1024), dV0 = fa90_desc(sVw, 16, 1024);
    /* dQ's B: K N-major, all 128 keys, from column wg DQ0 (d_head 128: a 64-column block of the
     * tile; 64: the half of the single block, 64 bytes into its swizzled rows; 80: block 0 whole,
     * block 1's first 16 columns; 32: warpgroup 0 only, from the rows' start); OWN: the warpgroup's
     * own 64 keys, all columns */
    const uint64_t dKn = OWN       ? fa90_desc(sKw, BC * 128, 1024)
                         : D <= 64 ? fa90_desc(sK + wg * 64, BC * 128, 1024)
                                   : fa90_desc(sK + wg * BC * 128, BC * 128, 1024);

    /* S^T = K_w Q^T and dP^T = V_w dO^T of query tile it_ (once its Q and dO are in the ring), issued
     * and committed */
    float st[BR / 2], dpt[BR / 2];
    auto issue_sdp = [&](int it_) {
        const int slot_ = it_ % NS;
        fa90_mbar_wait(q_full + 8 * slot_, (it_ / NS) & 1);
        if (D % 64 != 0 || !tma) fa90_proxy_fence();
        const uint64_t dQ0 = fa90_desc(sQ + slot_ * QT_BYTES, 16, 1024), dO0 = fa90_desc(sdO + slot_ * QT_BYTES, 16, 1024);
        fa90_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) { /* k16 steps: 2 a step, 64-column blocks (R rows) R x 8 apart */
            const int ka = (kk & 3) * 2 + (kk >> 2) * BC * 8, kb = (kk & 3) * 2 + (kk >> 2) * BR * 8;
            if constexpr (RSKV) {
                fa90_wgmma_rs_kmajor<E>(st, kfr[kk], dQ0 + kb, kk > 0);
                fa90_wgmma_rs_kmajor<E>(dpt, vfr[kk], dO0 + kb, kk > 0);
            } else {
                fa90_wgmma_ss<E, BR>(st, dK0 + ka, dQ0 + kb, kk > 0);
                fa90_wgmma_ss<E, BR>(dpt, dV0 + ka, dO0 + kb, kk > 0);
            }
        }
        fa90_commit();
    };
    /* PIPE (d_head 64 without RSKV; at 32 by analogy, not measured): a tile's dQ product is
     * followed on the tensor cores by the next tile's S^T and dP^T, issued before the wait for it, so
     * they run while the dQ partial is stored (leaderboard backward 3.54-3.60 ms against 3.62-3.72
     * without; H100, alternating processes of one call). At d_head 128 the registers do not allow
     * S^T and dP^T beside dK, dV, dQ and the operands P^T, dS^T; nor at 80, nor beside RSKV's K_w and
     * V_w (ptxas then serializes the products for want of registers: C7512). */
    constexpr bool PIPE = D <= 64 && !RSKV;

    for (int mb = m_begin; mb < m_end; mb++) {
        const int it = mb - m_begin, slot = it % NS, i0 = mb * BR;
        const uint32_t sQb = sQ + slot * QT_BYTES, sdOb = sdO + slot * QT_BYTES;
        if (!PIPE || it == 0) issue_sdp(it); /* PIPE: issued by the previous tile */
        /* L (log2 domain) and delta of the query columns this thread holds (8n + 2 t4 + e of the
         * tile), from the copies the producer made with Q and dO; at d_head 80 and 128 read where
         * used (the registers are short) */
        constexpr bool PRE = D <= 64; /* L and delta read ahead (else where used) */
        float lc[PRE ? BR / 8 : 1][2], dc[PRE ? BR / 8 : 1][2];
        auto l_delta = [&](int n, float(&l2)[2], float(&d2)[2]) {
            const uint32_t at = (uint32_t)(slot * BR + n * 8 + 2 * t4) * 4;
            const float2 lv = fa90_lds2(sL + at), dv2 = fa90_lds2(sDelta + at);
            l2[0] = lv.x * FA90_LOG2E, l2[1] = lv.y * FA90_LOG2E;
            d2[0] = dv2.x, d2[1] = dv2.y;
        };
        if constexpr (PRE) {
#pragma unroll
            for (int n = 0; n < BR / 8; n++) l_delta(n, lc[n], dc[n]);
        }
        fa90_wait<0>();
        fa90_pin<BR / 2>(st);
        fa90_pin<BR / 2>(dpt);

        /* P^T and dS^T in place; the mask's tests only in tiles that reach the sequence ends or the
         * diagonal, as selects after the exponential (a branch around each one costs more than it) */
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int n = 0; n < BR / 8; n++) {
                if constexpr (!PRE) l_delta(n, lc[0], dc[0]);
                const float(&ln)[2] = lc[PRE ? n : 0];
                const float(&dn)[2] = dc[PRE ? n : 0];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = fa90_exp2(fmaf(st[4 * n + e], scale_log2, -ln[e & 1]));
                    if constexpr (decltype(masked)::value) {
                        const int key = kwarp + g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * t4 + (e & 1);
                        p = qi < Tq && key < Tk && (!causal || key <= qi + offset) ? p : 0.0f;
                    }
                    st[4 * n + e] = p;
                    dpt[4 * n + e] = p * (dpt[4 * n + e] - dn[e & 1]);
                }
            }
        };
        if (i0 + BR > Tq || kwarp + 16 > Tk || (causal && kwarp + 15 > i0 + offset)) p_ds(std::true_type{});
        else p_ds(std::false_type{});
        uint32_t pa[BR / 16][4], dsa[BR / 16][4];
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                pa[kk][r] = fa90_pack<E>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
                dsa[kk][r] = fa90_pack<E>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
            }
        /* dV += P^T dO, dK += dS^T Q */
        fa90_pin<D / 2>(dv_acc);
        fa90_pin<D / 2>(dk_acc);
        const uint64_t dOn = fa90_desc(sdOb, BR * 128, 1024), dQn = fa90_desc(sQb, BR * 128, 1024);
        fa90_fence();
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) {
            fa90_wgmma_rs<E, D>(dv_acc, pa[kk], dOn + 128 * kk);
            fa90_wgmma_rs<E, D>(dk_acc, dsa[kk], dQn + 128 * kk);
        }
        fa90_commit();
        /* dS^T to shared memory (the warpgroup's 64 key rows, 128-byte swizzled): register kk, r holds
         * row 16 warp + g + 8 (r & 1), queries 16 kk + 8 (r >> 1) + 2 t4 + {0, 1} */
        const uint32_t sdSb = sdS + (it & 1) * DS_BYTES, sdSw = sdSb + wg * 64 * 128;
#pragma unroll
        for (int kk = 0; kk < BR / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int row = warp * 16 + g + 8 * (r & 1), piece = 2 * kk + (r >> 1);
                const uint32_t addr = sdSw + row * 128 + ((piece ^ (row & 7)) << 4) + 4 * t4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsa[kk][r]) : "memory");
            }
        fa90_proxy_fence(); /* also publishes the previous tile's dQ partial to the bulk copy */
        if (TILED_DQ && issuer) fa90_bulk_wait_read(); /* the partial two tiles back is read: its buffer is free */
        /* both warpgroups' dS^T are complete (the other buffer is free: each warpgroup finished reading
         * it before this barrier) */
        if constexpr (OWN) { /* OWN: this warpgroup's dS^T is complete (it reads no other) */
            if (wg == 0) asm volatile("bar.sync 2, 128;\n" ::: "memory");
            else asm volatile("bar.sync 3, 128;\n" ::: "memory");
        } else {
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
        }
        if (TILED_DQ && issuer && it > 0) /* the previous query tile's partial, stored by the whole warpgroup */
            fa90_bulk_reduce_add(dqa + (int64_t)(mb - 1) * BR * D, sdQw + ((it - 1) & 1) * BR * dqc * 4, BR * dqc * 4);
        /* dQ_i partial (BR queries x dqc: the warpgroup's columns) = dS (M-major from dS^T) K (N-major)
         * over the 128 keys (OWN: all columns over the warpgroup's 64 keys); at d_head 80 warpgroup 1's
         * m64n16 product writes dqp[0..7] only, at 32 warpgroup 1 issues none (no wgmma group: its
         * waits below count the others only) */
        float dqp[DQ0 / 2];
        const uint64_t dS0 = fa90_desc(OWN ? sdSw : sdSb, 64 * 128, 1024);
        if (dq_wide) {
            fa90_fence();
#pragma unroll
            for (int kk = 0; kk < (OWN ? 64 : BC) / 16; kk++)
                fa90_wgmma_ss<E, DQ0, true>(dqp, dS0 + 128 * kk, dKn + 128 * kk, kk > 0);
            fa90_commit();
        } else if constexpr (DQ1 > 0) { /* fence and commit in each branch: outside, ptxas injects a
                                            fence of its own (C7519) */
            fa90_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                fa90_wgmma_ss<E, DQ1, true>(*reinterpret_cast<float(*)[DQ1 / 2]>(dqp), dS0 + 128 * kk,
                                            dKn + 128 * kk, kk > 0);
            fa90_commit();
        }
        if (PIPE && mb + 1 < m_end) {
            issue_sdp(it + 1);
            fa90_wait<1>(); /* dV, dK, dQ of this tile */
        } else {
            fa90_wait<0>();
        }
        fa90_pin<DQ0 / 2>(dqp);
        fa90_pin<D / 2>(dv_acc);
        fa90_pin<D / 2>(dk_acc);
        fa90_pin_regs(pa);
        fa90_pin_regs(dsa);
        fa90_mbar_arrive(q_empty + 8 * slot); /* done with this query tile's Q and dO */
        if constexpr (TILED_DQ) {
            /* the partial to shared memory in the tiled layout (tlm_cuda_flash_dq_tiled_index):
             * float4 c of thread tw at (c * 128 + tw) * 16 bytes, conflict-free; added to the
             * accumulator by one bulk copy after the next barrier */
            const uint32_t dst = sdQw + (it & 1) * BR * dqc * 4 + tw * 16;
#pragma unroll
            for (int c = 0; c < DQ0 / 8; c++)
                if (dq_wide || c < DQ1 / 8)
                    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + c * 128 * 16),
                                 "f"(dqp[4 * c] * scale), "f"(dqp[4 * c + 1] * scale), "f"(dqp[4 * c + 2] * scale),
                                 "f"(dqp[4 * c + 3] * scale)
                                 : "memory");
        } else if (dq_wide) {
            /* float4 atomics of this warp's 16 rows (dqp is, per warp, the m16n8 C-fragment layout) */
            tlm_cuda_atomic_add_c_block(dqa, D, i0 + warp * 16, wg * DQ0, Tq,
                                        *reinterpret_cast<const float(*)[DQ0 / 8][4]>(dqp), scale);
        } else if constexpr (DQ1 > 0) {
            tlm_cuda_atomic_add_c_block(dqa, D, i0 + warp * 16, DQ0, Tq,
                                        *reinterpret_cast<const float(*)[DQ1 / 8][4]>(dqp), scale);
        }
        /* this dS^T buffer is rewritten two tiles on, after both warpgroups passed the next barrier */
        if constexpr (PIPE) { /* the next tile's S^T, dP^T complete before the loop turns (ptxas then
                               sees no product in flight across it) */
            fa90_wait<0>();
            fa90_pin<BR / 2>(st);
            fa90_pin<BR / 2>(dpt);
        }
    }
    if (TILED_DQ && m_begin < m_end) { /* the last query tile's partial */
        const int it = m_end - 1 - m_begin;
        fa90_proxy_fence();
        if (wg == 0) asm volatile("bar.sync 2, 128;\n" ::: "memory"); /* the warpgroup's last partial is stored */
        else asm volatile("bar.sync 3, 128;\n" ::: "memory");
        if (issuer) {
            fa90_bulk_reduce_add(dqa + (int64_t)(m_end - 1) * BR * D, sdQw + (it & 1) * BR * dqc * 4, BR * dqc * 4);
            fa90_bulk_wait_all();
        }
    }

#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        const int key = kwarp + g + 8 * h2;
        if (key >= Tk) continue;
        const int64_t off = ((int64_t)b * Tk + key) * ld_qkv + h * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            *reinterpret_cast<uint32_t *>(dk + off + n * 8) =
                fa90_pack<E>(dk_acc[4 * n + 2 * h2] * scale, dk_acc[4 * n + 2 * h2 + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv + off + n * 8) = fa90_pack<E>(dv_acc[4 * n + 2 * h2], dv_acc[4 * n + 2 * h2 + 1]);
        }
    }
#else
    __trap();
#endif
}

/* ---- launcher --------------------------------------------------------------------------------- */

/* compute capability major of the current device, cached per device */
static int fa90_cc_major(void) {
    static int major[64];
    int dev = 0;
    TLM_CUDA_CHECK_OP("flash_attention_forward", cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return 0;
    if (!major[dev])
        TLM_CUDA_CHECK_OP("flash_attention_forward",
                          cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev));
    return major[dev];
}

/* TLM_FLASH_SM90: unset or 1 = where the kernels apply and their grid nearly fills the GPU, 0 = never,
 * 2 = wherever they apply, whatever the grid (the GPU tests' twin runs every case through them);
 * read once */
static int fa90_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *env = getenv("TLM_FLASH_SM90");
        mode = !env ? 1 : strcmp(env, "0") == 0 ? 0 : strcmp(env, "2") == 0 ? 2 : 1;
    }
    return mode;
}

/* fa90_block_of's group of (head, batch) pairs for a pass: `dflt` (0: all), or TLM_FLASH_GROUP
 * (timing); read once */
static int fa90_group(int dflt, int pairs) {
    static int forced = -2;
    if (forced == -2) {
        const char *env = getenv("TLM_FLASH_GROUP");
        forced = env ? atoi(env) : -1;
    }
    const int g = forced >= 0 ? forced : dflt;
    return g <= 0 || g > pairs ? pairs : g;
}

/* whether the Hopper kernels take a pass of `blocks` blocks (one an SM) */
static bool fa90_applies(tlm_backend *be, int D, tlm_dtype dt, int64_t blocks) {
    if (D != 32 && D != 64 && D != 80 && D != 128) return false;
    if (dt != TLM_DTYPE_BF16 && dt != TLM_DTYPE_F16) return false;
    const int mode = fa90_mode();
    if (mode == 0 || fa90_cc_major() != 9) return false;
    /* smaller grids: flash_attention.cu's split-KV path. From two thirds of a wave on, these
     * kernels with some SMs idle beat the split mma.sync ones (H100, flash-benchmarking d_head 128,
     * seq 16384: 128 blocks on 132 SMs, split took 0.51 / 1.60 ms against cuDNN's 0.36 / 0.83; the
     * LM's small model, 96 blocks at context 256: fwd+bwd 2.82 against 2.88 ms) */
    return mode == 2 || 3 * blocks >= 2 * (int64_t)tlm_cuda_of(be)->num_sms;
}

/* the forward's ping-pong scheduling: TLM_FLASH_PINGPONG=0 off, 1 on (timing); read once */
static int fa90_pingpong(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *env = getenv("TLM_FLASH_PINGPONG");
        mode = env && *env ? atoi(env) != 0 : 1;
    }
    return mode;
}

/* a timing switch, on unless the environment sets `name` to "0"; read once into *cached (-1 until
 * then) */
static bool fa90_switch(const char *name, int *cached) {
    if (*cached < 0) {
        const char *env = getenv(name);
        *cached = !(env && strcmp(env, "0") == 0);
    }
    return *cached == 1;
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no link to libcuda); NULL where
 * the driver lacks it; looked up once */
static PFN_cuTensorMapEncodeTiled_v12000 fa90_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int looked;
    if (!looked) {
        looked = 1;
        void *p = NULL;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) ==
                cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
        else
            (void)cudaGetLastError();
    }
    return fn;
}

/* the tensor map of a (B, T, cols) bf16 or fp16 array at base (row stride ld elements) read in
 * boxes of 64 columns x `rows` rows of one batch, into the kernels' 128-byte-swizzled tile layout,
 * rows past T zero-filled; false where TMA cannot describe the array (base not 16-byte aligned, a
 * row stride not a multiple of 16 bytes) or the driver has no encoder */
static bool fa90_map(CUtensorMap *map, tlm_dtype dt, const void *base, int ld, int T, int B, int cols, int rows) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = fa90_encoder();
    if (!encode || (uintptr_t)base % 16 != 0 || (int64_t)ld * 2 % 16 != 0) return false;
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)T * ld * 2}; /* bytes, of dims 1 and 2 */
    const cuuint32_t box[3] = {64, (cuuint32_t)rows, 1}, elem_strides[3] = {1, 1, 1};
    return encode(map, dt == TLM_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                  (void *)base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* TLM_FLASH_TMA=0: the producers copy with cp.async even where TMA applies (timing, testing) */
static bool fa90_tma_on(void) {
    static int mode = -1;
    return fa90_switch("TLM_FLASH_TMA", &mode);
}

/* a pass's tensor maps: q in tiles of q_rows rows, k and v of FA90_BC, and in the backward (dout not
 * NULL) dout as q; true where the kernels copy by TMA: d_head 64 or 128, TLM_FLASH_TMA not 0, every
 * map encoded (else *m is zeros and they copy by cp.async) */
template <typename E>
static bool fa90_maps_of(fa90_maps *m, int D, const void *q, const void *k, const void *v, const void *dout,
                         int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int q_rows) {
    const tlm_dtype dt = std::is_same<E, __nv_bfloat16>::value ? TLM_DTYPE_BF16 : TLM_DTYPE_F16;
    memset(m, 0, sizeof *m);
    return D % 64 == 0 && fa90_tma_on() && fa90_map(&m->q, dt, q, ld_qkv, Tq, B, H * D, q_rows) &&
           fa90_map(&m->k, dt, k, ld_qkv, Tk, B, H * D, FA90_BC) && fa90_map(&m->v, dt, v, ld_qkv, Tk, B, H * D, FA90_BC) &&
           (!dout || fa90_map(&m->dout, dt, dout, ld_out, Tq, B, H * D, q_rows));
}

template <typename E, int D, int NC>
static void fa90_forward_launch(tlm_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                                int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, bool causal) {
    const char *op = "flash_attention_forward";
    constexpr auto kernel = flash_fwd_sm90_kernel<E, D, NC>;
    constexpr int BR = 64 * NC;
    /* Q, the key and value rings (tiles of fa90_tile_cols(D) columns: 160 KiB at d_head 80 and 128,
     * two consumers; at 32 as at 64, 80 or 88 KiB), alignment, the mbarriers */
    const size_t smem = (size_t)(BR + 2 * FA90_STAGES * FA90_BC) * fa90_tile_cols(D) * sizeof(E) + 1024 +
                        8 * (1 + 4 * FA90_STAGES);
    tlm_cuda_set_smem<kernel>(op, smem);
    /* longest first over all heads at d_head 64 (leaderboard forward 1.28-1.30 ms against 1.37-1.38
     * head by head); head by head at 128, whose keys and values of all heads at once overflow the
     * L2 (2.42 against 2.50-2.51 ms longest first); H100, alternating processes of one call. At 80
     * head by head as at 128, at 32 longest first as at 64 (neither measured) */
    const unsigned grid = (unsigned)((Tq + BR - 1) / BR) * (unsigned)H * (unsigned)B;
    fa90_maps maps;
    const bool tma = fa90_maps_of<E>(&maps, D, q, k, v, NULL, ld_qkv, ld_out, B, Tq, Tk, H, BR);
    kernel<<<grid, 128 * (NC + 1), smem, tlm_cuda_stream(be)>>>(
        (E *)out, lse, (const E *)q, (const E *)k, (const E *)v, ld_qkv, ld_out, Tq, Tk, H, FA90_LOG2E / sqrtf((float)D),
        causal ? 1 : 0, fa90_group(D <= 64 ? 0 : 1, H * B), fa90_pingpong(), maps, tma ? 1 : 0);
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

/* consumer warpgroups of the forward: 3 at d_head 64 and 32 from 1024 queries on (192 query rows a
 * block: K and V are read from L2 once per 192 rows instead of 128; FlashAttention-3's tile for
 * d_head 64; at 32 by analogy, not measured: ptxas fits it in the 160 registers without spills),
 * else 2 (d_head 80 and 128: the accumulator of 80 or 128 columns beside S and P does not fit
 * three consumers' 160 registers a thread: at 80 ptxas spills 40 bytes and serializes the
 * products, C7512; short sequences: a last tile of 192 rows is mostly
 * empty at 256 queries, and the H100 measured 0.0225 ms against 0.0191 for the LM's large model
 * at context 256, bench/results/h100-2026-11-24-flash-hopper);
 * TLM_FLASH_FWD_WG=2 forces 2 (timing); read once */
static int fa90_fwd_consumers(int D, int Tq) {
    static int forced = -1;
    if (forced < 0) {
        const char *env = getenv("TLM_FLASH_FWD_WG");
        forced = env && strcmp(env, "2") == 0 ? 2 : 0;
    }
    return D <= 64 && Tq >= 1024 && forced != 2 ? 3 : 2;
}

bool tlm_cuda_flash_forward_sm90(tlm_backend *be, tlm_dtype dt, void *out, float *lse, const void *q, const void *k,
                                 const void *v, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D,
                                 bool causal) {
    const int BR = 64 * fa90_fwd_consumers(D, Tq);
    if (!fa90_applies(be, D, dt, (int64_t)B * H * ((Tq + BR - 1) / BR))) return false;
#define FA90_FWD_ARGS be, out, lse, q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, causal
#define FA90_FWD(E)                                                                                                   \
    do {                                                                                                              \
        if (D == 128) fa90_forward_launch<E, 128, 2>(FA90_FWD_ARGS);                                                  \
        else if (D == 80) fa90_forward_launch<E, 80, 2>(FA90_FWD_ARGS);                                               \
        else if (D == 32 && BR == 192) fa90_forward_launch<E, 32, 3>(FA90_FWD_ARGS);                                  \
        else if (D == 32) fa90_forward_launch<E, 32, 2>(FA90_FWD_ARGS);                                               \
        else if (BR == 192) fa90_forward_launch<E, 64, 3>(FA90_FWD_ARGS);                                             \
        else fa90_forward_launch<E, 64, 2>(FA90_FWD_ARGS);                                                            \
    } while (0)
    if (dt == TLM_DTYPE_BF16) FA90_FWD(__nv_bfloat16);
    else FA90_FWD(__half);
#undef FA90_FWD
#undef FA90_FWD_ARGS
    return true;
}

/* TLM_FLASH_DQ_BULK=0: the backward adds dQ by float4 atomics even where the tiled layout applies
 * (side-by-side timing) */
static bool fa90_dq_bulk(void) {
    static int mode = -1;
    return fa90_switch("TLM_FLASH_DQ_BULK", &mode);
}

/* TLM_FLASH_DQ_OWN=0: the d_head-64 backward's warpgroups share their dQ products as at the other
 * d_head (the kernel's OWN; side-by-side timing) */
static bool fa90_dq_own(void) {
    static int mode = -1;
    return fa90_switch("TLM_FLASH_DQ_OWN", &mode);
}

/* TLM_FLASH_BWD_RSKV=0: the d_head-64 backward reads K_w and V_w from shared memory (SS products
 * S^T and dP^T, and PIPE) instead of registers (the kernel's RSKV; side-by-side timing) */
static bool fa90_rskv(void) {
    static int mode = -1;
    return fa90_switch("TLM_FLASH_BWD_RSKV", &mode);
}

/* the backward's (head, batch) groups (fa90_block_of): 4 at d_head 64 (leaderboard backward, H100,
 * alternating processes: 3.43-3.54 ms, mean 3.48, against 3.45-3.56, mean 3.52, with 1; faster in 5
 * of 6 rounds: bench/results/h100-2026-11-24-issue17-final, calls 9 and 10), 1 (head by head) at the
 * others (d_head 128: 5.53-5.65 with 4 against 5.49-5.58 with 1, call 9) */
#define FA90_BWD_GROUP(D) ((D) == 64 ? 4 : 1)
template <typename E, int D, bool TILED_DQ, bool OWN = false, bool RSKV = false>
static void fa90_backward_launch(tlm_backend *be, float *dq_acc, void *dk, void *dv, const void *dout, const void *q,
                                 const void *k, const void *v, const float *lse, const float *delta, int ld_qkv,
                                 int ld_out, int B, int Tq, int Tk, int H, bool causal) {
    const char *op = "flash_attention_backward";
    constexpr auto kernel = flash_bwd_sm90_kernel<E, D, TILED_DQ, OWN, RSKV>;
    constexpr int NS = D <= 64 ? FA90_BWD_STAGES : 2, DS_TILES = 2;
    /* K, V, the (Q, dO) ring (tiles of fa90_tile_cols(D) columns), dS^T, the dQ partials (tiled:
     * two of 64 x D fp32 a warpgroup pair; OWN: two of 64 x D a warpgroup), alignment, the ring's
     * logsumexp and delta, the mbarriers: 226 KiB at d_head 128 (of the 227 a block may have), 202
     * KiB at 80, 179 KiB at 64 (OWN), 131 KiB at 32 (tiled; the ring's 3 slots as at 64) */
    const size_t smem = (size_t)(2 * 128 + 2 * NS * 64) * fa90_tile_cols(D) * sizeof(E) +
                        (size_t)DS_TILES * 128 * 64 * sizeof(E) + (TILED_DQ ? (OWN ? 4 : 2) * 64 * D * 4 : 0) + 1024 +
                        2 * NS * 64 * 4 + 8 * (1 + 2 * NS);
    tlm_cuda_set_smem<kernel>(op, smem);
    const float scale = 1.0f / sqrtf((float)D);
    const unsigned grid = (unsigned)((Tk + 127) / 128) * (unsigned)H * (unsigned)B;
    fa90_maps maps;
    const bool tma = fa90_maps_of<E>(&maps, D, q, k, v, dout, ld_qkv, ld_out, B, Tq, Tk, H, 64);
    kernel<<<grid, FA90_THREADS, smem, tlm_cuda_stream(be)>>>(
        dq_acc, (E *)dk, (E *)dv, (const E *)dout, (const E *)q, (const E *)k, (const E *)v, lse, delta, ld_qkv, ld_out,
        Tq, Tk, H, scale, FA90_LOG2E * scale, causal ? 1 : 0, fa90_group(FA90_BWD_GROUP(D), H * B), maps, tma ? 1 : 0);
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

bool tlm_cuda_flash_backward_sm90_applies(tlm_backend *be, tlm_dtype dt, int B, int Tk, int H, int D) {
    return fa90_applies(be, D, dt, (int64_t)B * H * ((Tk + 127) / 128));
}

bool tlm_cuda_flash_backward_sm90(tlm_backend *be, tlm_dtype dt, float *dq_acc, void *dk, void *dv,
                                  const void *dout, const void *q, const void *k, const void *v, const float *lse,
                                  const float *delta, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D,
                                  bool causal, int *dq_tiled) {
    if (!tlm_cuda_flash_backward_sm90_applies(be, dt, B, Tk, H, D)) return false;
    /* the tiled dQ layout needs whole 64-row tiles: a tile must not reach into the next head's rows */
    /* each warpgroup's column block (d_head 80: 64, then the other 16; 32: one block of all 32,
     * warpgroup 0's; OWN, d_head 64: one block of all 64 columns, both warpgroups') */
    const bool own = D == 64 && fa90_dq_own();
    *dq_tiled = Tq % 64 == 0 && fa90_dq_bulk() ? (own ? D : D == 80 ? 64 : D == 32 ? 32 : D / 2) : 0;
#define FA90_BWD_ARGS be, dq_acc, dk, dv, dout, q, k, v, lse, delta, ld_qkv, ld_out, B, Tq, Tk, H, causal
#define FA90_BWD(E)                                                                                                   \
    do {                                                                                                              \
        if (D == 128 && *dq_tiled) fa90_backward_launch<E, 128, true>(FA90_BWD_ARGS);                                 \
        else if (D == 128) fa90_backward_launch<E, 128, false>(FA90_BWD_ARGS);                                       \
        else if (D == 80 && *dq_tiled) fa90_backward_launch<E, 80, true>(FA90_BWD_ARGS);                              \
        else if (D == 80) fa90_backward_launch<E, 80, false>(FA90_BWD_ARGS);                                         \
        else if (D == 32 && *dq_tiled) fa90_backward_launch<E, 32, true>(FA90_BWD_ARGS);                              \
        else if (D == 32) fa90_backward_launch<E, 32, false>(FA90_BWD_ARGS);                                         \
        else if (*dq_tiled && own && fa90_rskv()) fa90_backward_launch<E, 64, true, true, true>(FA90_BWD_ARGS);      \
        else if (*dq_tiled && own) fa90_backward_launch<E, 64, true, true>(FA90_BWD_ARGS);                           \
        else if (*dq_tiled) fa90_backward_launch<E, 64, true>(FA90_BWD_ARGS);                                        \
        else fa90_backward_launch<E, 64, false>(FA90_BWD_ARGS);                                                      \
    } while (0)
    if (dt == TLM_DTYPE_BF16) FA90_BWD(__nv_bfloat16);
    else FA90_BWD(__half);
#undef FA90_BWD
#undef FA90_BWD_ARGS
    return true;
}
