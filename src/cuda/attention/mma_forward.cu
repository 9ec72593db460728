/* mma_forward.cu — the FlashAttention-2 forward on bf16/fp16 tensor cores (Dao 2023,
 * "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", Algorithm 1):
 * flash_fwd_kernel, one instantiation per line of tiles.def (and a split-KV one per LONG line),
 * and its launcher tlm_attn_mma_forward, which runs the line the selector chose (select.cu). The
 * backward: mma_backward.cu; the shared device helpers: common.cuh; the spec, layout and masking
 * rules: tlm/flash_attention.h (the CPU reference).
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
 * (D 32, 64), 128 x 32 (D 128), 64 x 128 (D 16), 64 x 64 (D 80); at short ones (SHORT): below.
 *
 * Tile configurations: tiles.def lists them (d_head, tile sizes, warps, launch bounds, role); the
 * selector (tlm_cuda_attention_select) picks one per pass: the LONG line (the shapes above, chosen
 * by timing the leaderboard shape on an H100: bench/results/h100-2026-11-21-flash/tuning.md), or,
 * for a short context (at most 1024) whose LONG grid is under two waves of the GPU and is not
 * split, the SHORT line: more, smaller blocks. ptxas (nvcc 13.0, sm_90a, bf16 = fp16), registers /
 * shared memory per block / resident blocks per SM (computed for an H100: 64K registers and 228 KiB
 * of shared memory an SM, 1 KiB of it reserved per block), no spills:
 *   forward  D 64: q128k64w4 230 / 54 KiB / 2 (LONG), q64k64w4 128 / 45 KiB / 4 (SHORT);
 *            D 80: q64k64w4 128 / 55 KiB / 4 (LONG).
 *
 * Split-KV (split.cu): the LONG lines' SPLIT = true instantiation writes fp32 partials that
 * tlm_cuda_flash_split_combine merges.
 *
 * Supported: D in {16, 32, 64, 80, 128}; any Tq, Tk >= 1; causal (bottom-right) or not. */
#include <math.h>
#include <type_traits>

#include "cuda/attention/attention.cuh"
#include "cuda/attention/common.cuh"
#include "cuda/attention/mma.cuh"

/* ---- forward --------------------------------------------------------------------------------- */

/* One block per (query tile, split, head, batch): blockIdx.x = split * q_tiles + tile (causal:
 * tiles heaviest first), blockIdx.y = head, blockIdx.z = batch. The block's keys are
 * [kv_begin, kv_end): all it needs, [0, n_end), unsplit; split (SPLIT and split_keys > 0), the
 * piece [split * split_keys, +split_keys) of it (split_keys a multiple of BC: the pieces are whole
 * tiles, masked per tile as unsplit). Output: unsplit, out (E) and lse, the op's; split, fp32
 * partials into part, the layout of tlm_cuda_flash_split_combine (attention.cuh) with
 * S = gridDim.x / q_tiles: the piece's O normalized by its own sum, and its lse (-inf for a row
 * that saw no key of it; a block whose piece is empty writes only that). SPLIT = false compiles
 * the split away (split_keys_arg and part_arg unread). */
/* Launch bounds: the split instantiation asks for 1 block per SM (ptxas then may use up to 255
 * registers: without it, it held d_head 32 at 168 and spilled); the unsplit ones MINB, their line
 * of tiles.def: 0 (ptxas's own choice) but for d_head 80, held to 4 blocks per SM: 128
 * registers, as before splitting existed (left alone, ptxas now takes 135, 3 blocks). */
template <typename E, int D, int BC, int WARPS, int R, int MINB, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, SPLIT ? 1 : MINB)
    flash_fwd_kernel(E *__restrict__ out, float *__restrict__ lse, const E *__restrict__ q, const E *__restrict__ k,
                     const E *__restrict__ v, int ld_qkv, int ld_out, int Tq, int Tk, int H, float scale_log2,
                     int causal, int split_keys_arg, float *__restrict__ part_arg) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
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

/* ---- launcher ----------------------------------------------------------------------------------- */

/* forward configuration: WARPS warps of R x 16 query rows, BC keys per tile; MINB, LONG: its line */
template <int W, int BC, int R, int MINB, bool LONG> struct fa_fwd_cfg {
    static constexpr int warps = W, bc = BC, r = R, br = 16 * R * W, minb = MINB;
    static constexpr bool is_long = LONG; /* only LONG lines have a split-KV instantiation */
    template <typename E, int D> static constexpr size_t smem() {
        return (size_t)(br + 4 * BC) * (D + FA_PAD) * sizeof(E); /* Q; K, V double-buffered */
    }
};

/* f(cfg) with the configuration type of line t (d_head DD); false when t is not a forward line of
 * DD (not reached: t comes from the table) */
template <int DD, typename F> static bool fa_fwd_with(const tlm_attn_tile *t, F &&f) {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE)                                                                       \
    if constexpr (DD == D) {                                                                                          \
        static_assert(BR % (16 * W) == 0, "tiles.def: BR a multiple of 16 x WARPS");                                  \
        if (t->pass == TLM_ATTN_FORWARD && t->outer == BR && t->inner == BC && t->warps == W) {                       \
            f(fa_fwd_cfg<W, BC, BR / (16 * W), MINB, TLM_ATTN_##ROLE == TLM_ATTN_LONG>{});                            \
            return true;                                                                                              \
        }                                                                                                             \
    }
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE)
#include "cuda/attention/tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
    return false;
}

/* the forward pass for fa_mma_occupancy (mma.cuh) */
struct fa_fwd_pass {
    template <int DD, typename F> static bool with(const tlm_attn_tile *t, F &&f) { return fa_fwd_with<DD>(t, f); }
    template <typename E, int DD, typename C, bool SPLIT>
    static constexpr auto kernel = flash_fwd_kernel<E, DD, C::bc, C::warps, C::r, C::minb, SPLIT>;
};

int tlm_attn_mma_forward_occupancy(tlm_dtype dt, const tlm_attn_tile *t, bool split) {
    return fa_mma_occupancy<fa_fwd_pass>(dt, t, split, "flash_attention_forward");
}

void tlm_attn_mma_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a, float *part) {
    const char *op = "flash_attention_forward";
    const float scale_log2 = FA_LOG2E / sqrtf((float)a->D);
    cudaStream_t st = tlm_cuda_stream(be);
    const tlm_attn_tile *t = c->tile;
    fa_mma_dispatch(a->dt, a->D, op, [&](auto tag, auto dc) {
        using E = typename decltype(tag)::type;
        constexpr int DD = decltype(dc)::value;
        auto launch = [&](auto cfg) {
            using C = decltype(cfg);
            /* split-KV (LONG lines) as the selector planned it, part its partials */
            const auto kernel = fa_mma_kernel<fa_fwd_pass, E, DD, C>(part != nullptr, op);
            const int S = part ? c->split : 1, split_keys = part ? c->split_len : 0;
            const dim3 grid((unsigned)((a->Tq + C::br - 1) / C::br * S), (unsigned)a->H, (unsigned)a->B);
            tlm_cuda_launch(op, be, kernel, grid, dim3(C::warps * 32), C::template smem<E, DD>(), st, (E *)a->out,
                            a->lse, (const E *)a->q, (const E *)a->k, (const E *)a->v, a->ld_qkv, a->ld_out, a->Tq,
                            a->Tk, a->H, scale_log2, a->causal ? 1 : 0, split_keys, part);
            TLM_CUDA_CHECK_LAUNCH();
            if (part) tlm_cuda_flash_split_combine(be, a->out, a->lse, part, S, a->B, a->Tq, a->H, DD, a->ld_out, a->dt);
        };
        if (!fa_fwd_with<DD>(t, launch)) tlm_fatal("%s: no forward tiles for d_head %d", op, DD);
    });
}
