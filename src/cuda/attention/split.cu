/* split.cu — split-KV for every FlashAttention kernel family (FlashAttention-2's and
 * Flash-Decoding's split of the key range; Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for
 * long-context inference"): the plan (tlm_cuda_flash_fwd_split, _bwd_split, which the selector
 * calls), the backend's split buffer, the partials' merge (flash_split_combine_kernel) and the
 * gradients' rounding out of their fp32 accumulators (flash_bwd_round_kernel: dQ of the bf16/fp16
 * backwards, and dK, dV of a split backward). Interface: attention.cuh.
 *
 * For grids of too few blocks to fill the GPU (batch 1, 1 head, seq 4096: 32 forward blocks, 32
 * backward blocks on 132 SMs, each pass as long as its longest block). fa_split_chunk picks, from
 * (B, H, Tq, Tk, the SM count and the kernel's resident blocks per SM), the most blocks that still
 * fit one wave (or, for the 32-bit kernels, an estimated best split: fa_split_chunk), each piece at
 * least 64 keys (queries) long, for the 16-bit kernels as for the 32-bit ones (it was 256 there;
 * H100, flash-benchmarking bf16, alternating processes: 64 took d_head 128 seq 512 and 1024 from
 * 0.074-0.079 ms forward+backward to 0.045-0.055, d_head 64 seq 512 from 0.053-0.058 to
 * 0.038-0.039, and left seq 2048 and longer unchanged; 32 was no better:
 * bench/results/h100-2026-11-24-tma, call 7). Forward: each query tile's key range [0, n_end) is
 * cut into pieces of split_keys (a multiple of BC), one block each (blockIdx.x = split * q_tiles +
 * tile), writing its O normalized by its own sum, and its lse, as fp32 partials; then
 * flash_split_combine_kernel merges them: lse = log sum_s exp(lse_s), O = sum_s exp(lse_s - lse)
 * O_s (a piece that saw no key of a row has lse_s = -inf and is skipped; a row no piece saw gets
 * out 0, lse -inf, as unsplit). Backward: each key tile's query range is cut likewise; every
 * piece adds its dK, dV to fp32 accumulators with float4 atomics (as dQ already is: the buffer is
 * one (B,H,Tk,D) pair whatever the split count, and dK, dV then vary in their last bits from run
 * to run, as dQ does), rounded to E with dQ at the end. The partials and accumulators live in the
 * backend's split buffer (tlm_cuda_flash_split_buffer), not in the op's workspace, so
 * tlm_flash_workspace_floats is unchanged. TLM_FLASH_SPLIT=0 turns splitting off (the selector).
 * The split kernels are the same bodies as the unsplit ones, instantiated with SPLIT = true (for
 * the mma.sync kernels, of the LONG lines of tiles.def only). */
#include <math.h>
#include <string.h>

#include "cuda/attention/attention.cuh"
#include "cuda/attention/common.cuh"
#include "tlm/memory.h"

/* The split-KV merge (Flash-Decoding; FlashAttention-2's split of the key range, Dao et al.
 * 2023): per row r and split s, lse_s and o_s (normalized by split s's own sum) as laid out in
 * attention.cuh (tlm_cuda_flash_split_combine). With M = max_s lse_s,
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

/* Up to three gradients from their fp32 accumulators, job blockIdx.y of jobs: dst (B,T,H*D) E with
 * row stride ld (head h at column h*D) = round(acc (B,H,T,D)) (E = float: a copy). Here dQ (T = Tq)
 * always, and dK and dV (T = Tk) when the backward was split; tlm_cuda_flash_split_dkv (the fp32
 * and tf32 backwards, whose dQ has its own kernel) runs dK and dV only, as jobs 0 and 1. */
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

float *tlm_cuda_flash_split_buffer(tlm_backend *be, size_t *floats) {
    tlm_cuda *cu = tlm_cuda_of(be);
    *floats = 0;
    if (cu->flash_split_failed) return NULL;
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


/* a split piece's least length in keys (forward) or queries (backward), for every kernel family
 * (attention.cuh says why) */
#define FA_SPLIT_MIN 64

/* Forward plan: keys per split (a multiple of BC; 0: unsplit), *S splits; the partials then take
 * S * B*H*Tq * (D + 1) floats of the split buffer (the layout of tlm_cuda_flash_split_combine). A
 * piece has at least the least keys (and one key tile). */
int tlm_cuda_flash_fwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S) {
    *S = 1;
    const int sms = tlm_cuda_of(be)->num_sms, q_tiles = (Tq + BR - 1) / BR, offset = Tk - Tq;
    const int64_t BH = (int64_t)B * H;
    if ((int64_t)q_tiles * BH >= (int64_t)sms * occ) return 0;
    const int64_t max_splits = (int64_t)(TLM_FLASH_SPLIT_FLOATS_PER_SM * sms) / (BH * Tq * (D + 1));
    auto key_tiles = [&](int m) { /* key tiles query tile m needs */
        const int n_end = causal ? min(Tk, (m + 1) * BR + offset) : Tk;
        return n_end > 0 ? (n_end + BC - 1) / BC : 0;
    };
    const int chunk = fa_split_chunk(q_tiles, BH, sms, occ, max(1, FA_SPLIT_MIN / BC),
                                     (int)min(max_splits, (int64_t)1024), family == TLM_FLASH_SPLIT_32BIT, key_tiles,
                                     S);
    return chunk * BC;
}

/* Backward plan: query tiles per split (0: unsplit), *S splits; the fp32 dK, dV accumulators (2 *
 * B*H*Tk*D floats) must fit the split buffer. A piece has at least the least queries. */
int tlm_cuda_flash_bwd_split(tlm_backend *be, int B, int H, int Tq, int Tk, int D, int BR, int BC, bool causal,
                             tlm_flash_split_family family, int occ, int *S) {
    *S = 1;
    const int sms = tlm_cuda_of(be)->num_sms, k_tiles = (Tk + BC - 1) / BC, m_last = (Tq + BR - 1) / BR;
    const int offset = Tk - Tq;
    const int64_t BH = (int64_t)B * H;
    if ((int64_t)k_tiles * BH >= (int64_t)sms * occ || (size_t)(2 * BH * Tk * D) > TLM_FLASH_SPLIT_FLOATS_PER_SM * sms)
        return 0;
    auto query_tiles = [&](int j) { /* query tiles that see key tile j */
        return m_last - (causal ? max(0, j * BC - offset) / BR : 0);
    };
    return fa_split_chunk(k_tiles, BH, sms, occ, max(1, FA_SPLIT_MIN / BR), 1024, family == TLM_FLASH_SPLIT_32BIT,
                          query_tiles, S);
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
    tlm_attn_round(be, &jobs, 2, ld_qkv, B, H, D, n / 2, dt);
}

void tlm_attn_round(tlm_backend *be, const fa_round_jobs *jobs, int n, int ld, int B, int H, int D, size_t pairs,
                    tlm_dtype dt) {
    const dim3 grid(tlm_cuda_grid(be, pairs, 256), (unsigned)n);
    tlm_cuda_dispatch(dt, "flash_attention_backward (gradients from their accumulators)", [&](auto tag) {
        using E = typename decltype(tag)::type;
        flash_bwd_round_kernel<E><<<grid, 256, 0, tlm_cuda_stream(be)>>>(*jobs, ld, B, H, D);
        TLM_CUDA_CHECK_LAUNCH();
    });
}

float *tlm_attn_take_split(tlm_backend *be, tlm_attn_choice *c) {
    if (c->split <= 1) return NULL;
    size_t floats = 0;
    float *ws = tlm_cuda_flash_split_buffer(be, &floats);
    if (!ws) c->split = 1, c->split_len = 0; /* run unsplit */
    return ws;
}
