/* attention.cuh — the CUDA FlashAttention's internal interface (src/cuda/attention/): the one
 * selector (tlm_cuda_attention_select: which kernel family, tile line and split-KV count a pass
 * runs, and why), the tile lines of tiles.def, the kernel families' launchers that run a selection,
 * and the split-KV machinery they share (split.cu). The ops themselves (tlm/backend.h's
 * flash_attention_forward, _backward, _check) are in ops.cu; the semantics, layout and masking
 * rules are those of tlm/flash_attention.h (the CPU reference).
 *
 * Files: select.cu  the selector, TLM_FLASH_TILES, TLM_FLASH_LOG (the only reader of knobs);
 *        ops.cu     the ops: check, select, take the split buffer, log, one switch per pass;
 *        mma_forward.cu, mma_backward.cu  bf16/fp16 mma.sync FlashAttention-2 (tiles.def);
 *        sm90.cuh, sm90_forward.cu, sm90_backward.cu  bf16/fp16 Hopper wgmma/TMA kernels;
 *        tf32.cu, f32.cu  the tf32 tensor-core and exact-fp32 kernels;
 *        split.cu   split-KV: plan, buffer, combine, the accumulators' rounding;
 *        common.cuh the device helpers every family shares; naive.cu  the naive attention ops. */
#ifndef TLM_CUDA_ATTENTION_CUH
#define TLM_CUDA_ATTENTION_CUH

#include "cuda/cuda_common.cuh"

/* the d_head values the FlashAttention kernels are instantiated for (every family), and the switch
 * from a runtime D to a compile-time one: f(std::integral_constant<int, D>{}); another D is fatal */
static inline bool tlm_cuda_flash_supports_d(int D) { return D == 16 || D == 32 || D == 64 || D == 80 || D == 128; }
template <typename F> static inline void tlm_cuda_flash_dispatch_d(int D, const char *op, F &&f) {
    switch (D) {
    case 16: f(std::integral_constant<int, 16>{}); return;
    case 32: f(std::integral_constant<int, 32>{}); return;
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 80: f(std::integral_constant<int, 80>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    default: tlm_fatal("%s: d_head %d has no FlashAttention kernel (16, 32, 64, 80, 128)", op, D);
    }
}
/* TLM_OK when the FlashAttention-2 ops have kernels for (D, dt), else TLM_ERR_UNSUPPORTED naming
 * what they have (ops.cu; the backend's `supports` asks it) */
tlm_status tlm_cuda_flash_attention_check(int D, tlm_dtype dt);

/* ---- the tile lines of the bf16/fp16 mma.sync kernels (tiles.def) --------------------------------- */

typedef enum { TLM_ATTN_FORWARD, TLM_ATTN_BACKWARD } tlm_attn_pass;
enum { TLM_ATTN_LONG, TLM_ATTN_SHORT };

/* One line of tiles.def. outer: the block's tile (forward: BR query rows; backward: BC keys);
 * inner: the tiles it walks (forward: BC keys; backward: BR query rows); role LONG or SHORT. */
typedef struct {
    int pass, d, outer, inner, warps, role;
} tlm_attn_tile;
static constexpr tlm_attn_tile tlm_attn_tiles[] = {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE) {TLM_ATTN_FORWARD, D, BR, BC, W, TLM_ATTN_##ROLE},
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE) {TLM_ATTN_BACKWARD, D, BC, BR, W, TLM_ATTN_##ROLE},
#include "cuda/attention/tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
};
#define TLM_ATTN_NTILES ((int)(sizeof tlm_attn_tiles / sizeof tlm_attn_tiles[0]))

/* ---- the selection ------------------------------------------------------------------------------ */

typedef enum {
    TLM_ATTN_SM90, /* bf16/fp16 Hopper wgmma kernels (sm90_forward.cu, sm90_backward.cu) */
    TLM_ATTN_MMA,  /* bf16/fp16 mma.sync kernels, one line of tiles.def (mma_forward.cu, mma_backward.cu) */
    TLM_ATTN_TF32, /* fp32 tensors on TF32 tensor cores (tf32.cu) */
    TLM_ATTN_F32,  /* exact fp32 (f32.cu) */
} tlm_attn_family;

/* what the selector must know of the tensors (the op works it out from its pointers and strides) */
enum {
    TLM_ATTN_TF32_ALIGNED = 1, /* every tensor (and the backward's workspace) 16-byte aligned, ld_qkv and
                                  ld_out multiples of 4: the tf32 kernels may run */
    TLM_ATTN_F32_SPLITS = 2,   /* the rows a split writes back (forward: out; backward: dk, dv) 16-byte
                                  aligned: the exact-fp32 kernels may split */
};

typedef struct {
    tlm_attn_family family;
    const tlm_attn_tile *tile; /* MMA: its line of tiles.def; NULL for the other families */
    int sm90_consumers;        /* SM90 forward: consumer warpgroups of 64 query rows (2 or 3); else 0 */
    bool sm90_tma;             /* SM90: the producers may copy by TMA (false: cp.async, TLM_FLASH_SM90=3) */
    int split;                 /* S: pieces per tile (1: unsplit) */
    int split_len;             /* split: forward, keys per piece; backward, query tiles per piece; else 0 */
    const char *why;           /* the reason, for TLM_FLASH_LOG ("rule: long", "TLM_FLASH_TILES", ...) */
} tlm_attn_choice;

/* THE rule: which attention kernel runs a pass (pass; precision p; B batches, H heads, Tq queries,
 * Tk keys, d_head D; causal; layout: TLM_ATTN_* flags), decided here and nowhere else, read in
 * this order (TLM_FLASH_* knobs: include/tlm/tuning.h):
 *  1. fp32 tensors (p FP32 or TF32): TF32 when p is TF32, layout has TLM_ATTN_TF32_ALIGNED and the
 *     pass's tf32 tiles fit the device's shared memory; else F32 (exact). Split-KV as in 4 (the
 *     32-bit plan, which also rebalances a grid of nearly a wave), F32 only with
 *     TLM_ATTN_F32_SPLITS.
 *  2. bf16/fp16: TLM_FLASH_TILES naming a line of tiles.def for (pass, D): MMA on that line (split
 *     only if it is a LONG line), never SM90.
 *  3. SM90 on a compute-capability 9.x device for d_head 32, 64, 80 and 128 when the grid is at
 *     least two thirds of a wave (3 x blocks >= 2 x SMs; blocks: forward B*H*ceil(Tq / (64 x
 *     consumers)), 3 consumers at d_head <= 64 from 1024 queries, else 2; backward
 *     B*H*ceil(Tk / 128)); TLM_FLASH_SM90: 0 never, 2 whatever the grid, 3 as 2 with cp.async
 *     copies in place of TMA. Never split.
 *  4. Else MMA: the LONG line of (pass, D), or its SHORT line (where there is one) when the
 *     context is at most 1024, the LONG grid is under two waves (B*H*ceil(T / outer) < 2 x SMs x
 *     the LONG kernel's resident blocks per SM) and the LONG grid is not split. A LONG line is
 *     split-KV when its grid is under one wave (split.cu's plan, from the split kernel's resident
 *     blocks per SM); TLM_FLASH_SPLIT=0: never.
 * A function of the arguments, the device (SM count, compute capability, the kernels' occupancy)
 * and the knobs; the split buffer is not taken here (tlm_attn_take_split). */
tlm_attn_choice tlm_cuda_attention_select(tlm_backend *be, tlm_attn_pass pass, tlm_precision p, int B, int H, int Tq,
                                          int Tk, int D, bool causal, unsigned layout);
/* The split buffer for a choice that splits: the backend's (tlm_cuda_flash_split_buffer), or NULL
 * with c->split set to 1 and c->split_len to 0 (run unsplit: inside graph capture before it exists,
 * or out of memory). NULL for a choice that does not split. */
float *tlm_attn_take_split(tlm_backend *be, tlm_attn_choice *c);
/* TLM_FLASH_LOG=1: one line on stderr, "tlm flash forward: B=.. H=.. Tq=.. Tk=.. D=.. causal: WHAT
 * (WHY)[, split-KV into S]" (WHAT: the tile line's name, "sm90 wgmma[, N consumers]", "tf32 mma.sync" or
 * "fp32 exact"), whenever a pass's shape or choice differs from the pass's previous one; called
 * after tlm_attn_take_split, so a split that could not get its buffer shows as unsplit */
void tlm_attn_log(tlm_attn_pass pass, const tlm_attn_choice *c, int B, int H, int Tq, int Tk, int D, bool causal);
/* "q<BR>k<BC>w<WARPS>" (forward), "k<BC>q<BR>w<WARPS>" (backward) */
void tlm_attn_tile_name(const tlm_attn_tile *t, char *buf, size_t cap);

/* ---- what the selector asks of the families -------------------------------------------------------- */

/* resident blocks per SM of line t's kernel for dt (BF16 or F16), its split instantiation when
 * split (LONG lines only); the kernel's shared-memory limit raised first */
int tlm_attn_mma_forward_occupancy(tlm_dtype dt, const tlm_attn_tile *t, bool split);
int tlm_attn_mma_backward_occupancy(tlm_dtype dt, const tlm_attn_tile *t, bool split);
/* the tf32 and exact-fp32 kernels of (pass, D): their tiles as the split plans take them (*br query
 * rows, *bc keys) and their split instantiation's resident blocks per SM; tf32: 0 where its tiles do
 * not fit the device's shared memory (the selector then takes F32) */
int tlm_attn_tf32_occupancy(tlm_backend *be, tlm_attn_pass pass, int D, int *br, int *bc);
int tlm_attn_f32_occupancy(tlm_attn_pass pass, int D, int *br, int *bc);

/* ---- the families' launchers: each runs what the choice says, on the backend's stream --------- */

/* the forward's tensors: out (B,Tq,H*D) row stride ld_out, lse (B,H,Tq) fp32, q (B,Tq,H*D), k, v
 * (B,Tk,H*D) row stride ld_qkv (head h at column h*D), of dt */
typedef struct {
    void *out;
    float *lse;
    const void *q, *k, *v;
    int ld_qkv, ld_out, B, Tq, Tk, H, D;
    bool causal;
    tlm_dtype dt;
} tlm_attn_fwd_args;
/* the backward's: dq (B,Tq,H*D), dk, dv (B,Tk,H*D) row stride ld_qkv; workspace
 * (tlm_flash_workspace_floats: the dQ accumulator (B,H,Tq,D), then delta (B,H,Tq)); dout, out
 * (B,Tq,H*D) ld_out; lse (B,H,Tq) */
typedef struct {
    void *dq, *dk, *dv;
    float *workspace;
    const void *dout, *q, *k, *v, *out;
    const float *lse;
    int ld_qkv, ld_out, B, Tq, Tk, H, D;
    bool causal;
    tlm_dtype dt;
} tlm_attn_bwd_args;

/* part: the split's partials (tlm_attn_take_split), NULL unsplit; dkv: the split backward's dK, dV
 * accumulators (the same buffer), NULL unsplit. The caller has checked the arguments. */
void tlm_attn_mma_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a, float *part);
void tlm_attn_mma_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a, float *dkv);
void tlm_attn_sm90_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a);
/* the Hopper backward: the pre-pass (delta, dQ accumulator zeroed: mma_backward.cu's), the wgmma
 * kernel, dQ rounded from its accumulator. The kernel's dQ accumulator layout (*dq_tiled, below):
 * 0: (B,H,Tq,D) rows; else (Tq % 64 == 0): per (b, h), tiles of 64 query rows of 64 x D floats
 * each, in the wgmma accumulator's order, in blocks of dq_tiled columns
 * (tlm_cuda_flash_dq_tiled_index) */
void tlm_attn_sm90_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a);
void tlm_attn_tf32_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a, float *part);
void tlm_attn_tf32_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a, float *dkv);
void tlm_attn_f32_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a, float *part);
void tlm_attn_f32_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a, float *dkv);

/* the bf16/fp16 backward's first and last kernels (mma_backward.cu), for the mma.sync and the
 * Hopper backward: delta = rowsum(dout * out) and the dQ accumulator zeroed (with dkv, the split's
 * dK, dV accumulators too); and dQ (and, with dkv, dK and dV) rounded from the accumulators
 * (dq_tiled: tlm_attn_sm90_backward's layout, 0 rows) */
void tlm_attn_bwd16_prepass(tlm_backend *be, const tlm_attn_bwd_args *a, float *dkv);
void tlm_attn_bwd16_round(tlm_backend *be, const tlm_attn_bwd_args *a, const float *dkv, int dq_tiled);

/* the fp32 backward's first and last kernels (f32.cu), for every fp32 backward that
 * keeps its workspace layout (tlm_flash_workspace_floats: the dQ accumulator dq_acc (B,H,Tq,D)
 * first, then delta (B,H,Tq)): _prep writes delta = rowsum(dout * out) (dout, out (B,Tq,H*D) row
 * stride ld_out) and zeroes dq_acc, and, when dkv is not NULL, the split backward's dK and dV
 * accumulators ((B,H,Tk,D) each, dV after dK); _dq writes dq (B,Tq,H*D), row stride
 * ld_qkv, = dq_acc / sqrt(D). Exact fp32; on st, in order; D one of tlm_cuda_flash_supports_d's. */
void tlm_cuda_flash_backward_f32_prep(cudaStream_t st, float *workspace, const float *dout, const float *out,
                                      int ld_out, int B, int Tq, int H, int D, float *dkv, int Tk);
void tlm_cuda_flash_backward_f32_dq(cudaStream_t st, float *dq, const float *workspace, int ld_qkv, int B, int Tq,
                                    int H, int D);

/* where row i, column d (d even: d and d + 1 are adjacent) of a (b, h) slice sits in the tiled dQ
 * layout with column blocks of `cols` (32 or 64: the columns one warpgroup computes; the last
 * block may be narrower, D % cols columns: 16 at D = 80, cols 64; at D = 32, cols 32, one block,
 * all of warpgroup 0), from the slice's start: tile i / 64 of 64 x D floats; inside it, block
 * d / cols (64 x cols floats, the last 64 x its width), in which thread tw = 32 warp + 4 g + t4
 * of the warpgroup that computed it (row i % 64 = 16 warp + 8 hi + g, column d % cols =
 * 8 c + 2 t4 + (d & 1)) stored its accumulator registers 4c .. 4c + 3
 * (rows g, g + 8 of column pair c) as one float4 at float offset (c * 128 + tw) * 4 */
__host__ __device__ __forceinline__ int64_t tlm_cuda_flash_dq_tiled_index(int64_t i, int d, int D, int cols) {
    const int r = (int)(i & 63), warp = r >> 4, hi = (r >> 3) & 1, g = r & 7, c = (d % cols) >> 3, t4 = (d & 7) >> 1;
    const int tw = warp * 32 + g * 4 + t4;
    return (i >> 6) * 64 * D + (int64_t)(d / cols) * 64 * cols + ((int64_t)c * 128 + tw) * 4 + 2 * hi + (d & 1);
}


/* ---- split-KV (split.cu) ------------------------------------------------------------------------ */

/* Split-KV (FlashAttention-2's and Flash-Decoding's split of the key range, Dao et al. 2023), for
 * grids of too few (batch x heads x tiles) blocks to fill the GPU; used by the bf16/fp16 mma.sync
 * kernels, the tf32 ones and the exact fp32 ones (split.cu's header says how).
 * tlm_cuda_flash_split_buffer: the backend's split workspace, TLM_FLASH_SPLIT_FLOATS_PER_SM floats
 * per SM (16.6 MiB on a 132-SM H100: the forward's partials of 2 x SMs tiles of 128 rows at
 * d_head 128, or the backward's dK, dV accumulators of B*H*Tk = SMs x 128 keys at d_head 128),
 * allocated by the first launch that splits, outside graph capture (tracked: TLM_MEM_WORKSPACE,
 * "cuda.flash_split"; freed with the backend or by tlm_backend_release_workspaces), never
 * regrown (a captured graph keeps its address); NULL while capturing before it exists, or when it could not be allocated: the caller
 * then runs unsplit. *floats: its size. Its users run in stream order on the compute stream, one
 * op at a time.
 * tlm_cuda_flash_split_combine: merges S partial results into out (B,Tq,H*D) dt (row stride
 * ld_out) and lse (B,H,Tq) float32, with the unsplit kernel's semantics; part holds, for
 * P = B*H*Tq rows (r = (b*H + h)*Tq + i):
 *   o_part   float32 [S][P][D] at part: split s's output normalized by its own softmax sum;
 *   lse_part float32 [S][P] at part + S*P*D: split s's natural-log logsumexp of its (scaled)
 *            scores, -inf when split s saw no key of row r (its o_part row is then never read).
 * lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) o_s; a row with every lse_s = -inf
 * gets out 0, lse -inf. Any forward kernel that writes this layout may use it. */
#define TLM_FLASH_SPLIT_FLOATS_PER_SM ((size_t)2 * 128 * 129)
float *tlm_cuda_flash_split_buffer(tlm_backend *be, size_t *floats);
/* dt F32 (the fp32 and tf32 kernels): out written as float, no rounding; rows 16-byte aligned
 * (ld_out a multiple of 4, out 16-byte aligned); BF16, F16: ld_out a multiple of 8 */
void tlm_cuda_flash_split_combine(tlm_backend *be, void *out, float *lse, const float *part, int S, int B, int Tq,
                                  int H, int D, int ld_out, tlm_dtype dt);
/* The split plans (the selector's), for every FlashAttention kernel family (bf16/fp16 mma.sync,
 * tf32, exact fp32): the kernel's tiles (BR query rows, BC keys) and resident blocks per SM (occ,
 * of the split instantiation) in, the split out; splitting only grids under one wave (SMs x occ
 * blocks). family: TLM_FLASH_SPLIT_16BIT for the bf16/fp16 kernels, TLM_FLASH_SPLIT_32BIT for the
 * tf32 and exact-fp32 ones, whose tiles cost more per key. It sets whether a grid no split fits in
 * one wave is split by the estimate (32-bit only: split.cu's fa_split_chunk). A piece's least
 * length in keys (forward) or queries (backward) is 64 for both (flash-benchmarking on the H100,
 * batch 1, 1 head: 32-bit fwd+bwd 0.69-1.01x the time with 128, itself 0.61-0.95x the time with 256
 * at seq 256-2048, bench/results/h100-2026-11-24-pingpong; 16-bit, 64 against 256: d_head 128 at
 * seq 512-1024 0.045-0.055 ms against 0.074-0.079, seq 2048 on unchanged,
 * bench/results/h100-2026-11-24-tma). Nothing is allocated (tlm_attn_take_split does).
 * tlm_cuda_flash_fwd_split: returns keys per piece (a multiple of BC, at least the least length;
 *   0: unsplit), *S the pieces per query tile; the partials then take S*B*H*Tq*(D+1) floats of the
 *   split buffer (the layout of tlm_cuda_flash_split_combine).
 * tlm_cuda_flash_bwd_split: returns query tiles (of BR) per piece (0: unsplit), *S the pieces per
 *   key tile; the fp32 dK, dV accumulators (B,H,Tk,D) each, dV at dkv + B*H*Tk*D, then live in the
 *   split buffer; the caller zeroes them, the kernels add dK already scaled by 1/sqrt(D), and
 *   tlm_cuda_flash_split_dkv writes them out. */
typedef enum { TLM_FLASH_SPLIT_16BIT, TLM_FLASH_SPLIT_32BIT } tlm_flash_split_family;
int tlm_cuda_flash_fwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S);
int tlm_cuda_flash_bwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S);
/* dk, dv (B,Tk,H*D) dt, row stride ld_qkv (head h at column h*D) = the accumulators dkv (above),
 * rounded to dt (F32: copied; 8-byte aligned rows: ld_qkv even, dk and dv 8-byte aligned) */
void tlm_cuda_flash_split_dkv(tlm_backend *be, void *dk, void *dv, const float *dkv, int ld_qkv, int B, int H, int Tk,
                              int D, tlm_dtype dt);

/* Up to three gradients from their fp32 accumulators (split.cu's flash_bwd_round_kernel), job j of
 * n: dst[j] (B,T[j],H*D) dt with row stride ld (head h at column h*D) = round(acc[j] (B,H,T[j],D))
 * (F32: a copy); acc[0] in the Hopper backward's tiled layout when dq_tiled (its column blocks).
 * One launch of min(blocks, what the largest job needs) x n blocks of 256 threads. */
typedef struct {
    void *dst[3];
    const float *acc[3];
    int T[3];
    int dq_tiled; /* acc[0] in the Hopper backward's tiled layout, in blocks of so many columns (0: rows) */
} fa_round_jobs;
void tlm_attn_round(tlm_backend *be, const fa_round_jobs *jobs, int n, int ld, int B, int H, int D, size_t pairs,
                    tlm_dtype dt);

#endif
