/* sm90_forward.cu — FlashAttention on Hopper's warpgroup tensor cores (wgmma, sm_90a), bf16 and
 * fp16: the forward kernel (flash_fwd_sm90_kernel) and its launcher tlm_attn_sm90_forward, and the
 * tensor maps both passes use (tlm_attn_sm90_maps); the backward is sm90_backward.cu's, the shared
 * device code sm90.cuh's. The selector (select.cu) sends a pass here on a compute-capability 9.x
 * device for d_head 32, 64, 80 and 128 where the grid is at least two thirds of a wave; the
 * mma.sync kernels (mma_forward.cu, mma_backward.cu) take the other d_head, smaller grids
 * (split-KV, short-context tiles), and other GPUs.
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
 *   online softmax   in registers, in the log2 domain, as mma_forward.cu;
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
 * would be under two thirds of a wave, the selector sends the pass to the mma.sync kernels.
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
 * Knobs (read by the selector, select.cu): TLM_FLASH_SM90=0 sends every pass to the mma.sync
 * kernels, 2 every pass these can take, whatever the grid (tests), 3 as 2 with cp.async copies
 * where TMA would copy (tests). */
#include <math.h>
#include <string.h>

#include "cuda/attention/sm90.cuh"

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
 * The consumers also take turns to issue their products (FlashAttention-3 §3.1's
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
                          int H, float scale_log2, int causal, int group,
                          const __grid_constant__ fa90_maps maps, int tma) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
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
    if (n_tiles > 0 && cw == NC - 1) fa90_turn_pass(next_turn);

    if (n_tiles > 0) {
        fa90_mbar_wait(q_full, 0);
        fa90_mbar_wait(k_full, 0);
        if (D % 64 != 0 || !tma) fa90_proxy_fence(); /* cp.async wrote through the generic proxy (TMA: the async one) */
        fa90_turn_wait(my_turn);
        fa90_issue_qk<E, D, BR>(s, sQw, sK);
        if (!(cw == NC - 1 && n_tiles == 1)) fa90_turn_pass(next_turn);
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
        fa90_turn_wait(my_turn);
        fa90_issue_qk<E, D, BR>(s, sQw, sK + st * KV_BYTES);
        fa90_issue_pv<E, D>(o, p, sV + sp * KV_BYTES);
        if (!(cw == NC - 1 && t == n_tiles - 1)) fa90_turn_pass(next_turn);
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
            *reinterpret_cast<uint32_t *>(orow + n * 8) = fa_pack<E>::two(o[4 * n + 2 * h2] * inv, o[4 * n + 2 * h2 + 1] * inv);
        if (t4 == 0) lse[((int64_t)b * H + h) * Tq + row] = sum > 0.0f ? (m[h2] + log2f(sum)) * FA_LN2 : -INFINITY;
    }
#else
    __trap(); /* built without sm_90a: the selector never sends a pass here (tlm_cuda_attention_select) */
#endif
}

/* ---- launcher --------------------------------------------------------------------------------- */

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


bool tlm_attn_sm90_maps(fa90_maps *m, tlm_dtype dt, int D, bool tma, const void *q, const void *k, const void *v,
                        const void *dout, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int q_rows) {
    memset(m, 0, sizeof *m);
    return D % 64 == 0 && tma && fa90_map(&m->q, dt, q, ld_qkv, Tq, B, H * D, q_rows) &&
           fa90_map(&m->k, dt, k, ld_qkv, Tk, B, H * D, FA90_BC) && fa90_map(&m->v, dt, v, ld_qkv, Tk, B, H * D, FA90_BC) &&
           (!dout || fa90_map(&m->dout, dt, dout, ld_out, Tq, B, H * D, q_rows));
}

template <typename E, int D, int NC>
static void fa90_forward_launch(tlm_backend *be, const tlm_attn_fwd_args *a, bool allow_tma) {
    const int ld_qkv = a->ld_qkv, ld_out = a->ld_out, B = a->B, Tq = a->Tq, Tk = a->Tk, H = a->H;
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
    const bool tma =
        tlm_attn_sm90_maps(&maps, a->dt, D, allow_tma, a->q, a->k, a->v, NULL, ld_qkv, ld_out, B, Tq, Tk, H, BR);
    tlm_cuda_launch(op, be, kernel, grid, dim3(128 * (NC + 1)), smem, tlm_cuda_stream(be), (E *)a->out, a->lse,
                    (const E *)a->q, (const E *)a->k, (const E *)a->v, ld_qkv, ld_out, Tq, Tk, H,
                    FA_LOG2E / sqrtf((float)D), a->causal ? 1 : 0, fa90_group(D <= 64 ? 0 : 1, H * B), maps,
                    tma ? 1 : 0);
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

/* consumer warpgroups of the forward: 3 at d_head 64 and 32 from 1024 queries on (192 query rows a
 * block: K and V are read from L2 once per 192 rows instead of 128; FlashAttention-3's tile for
 * d_head 64; at 32 by analogy, not measured: ptxas fits it in the 160 registers without spills),
 * else 2 (d_head 80 and 128: the accumulator of 80 or 128 columns beside S and P does not fit
 * three consumers' 160 registers a thread: at 80 ptxas spills 40 bytes and serializes the
 * products, C7512; short sequences: a last tile of 192 rows is mostly
 * empty at 256 queries, and the H100 measured 0.0225 ms against 0.0191 for the LM's large model
 * at context 256, bench/results/h100-2026-11-24-flash-hopper): the selector's sm90_consumers (select.cu) */

void tlm_attn_sm90_forward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_fwd_args *a) {
    const int D = a->D;
    const bool three = c->sm90_consumers == 3, tma = c->sm90_tma;
#define FA90_FWD(E)                                                                                                   \
    do {                                                                                                              \
        if (D == 128) fa90_forward_launch<E, 128, 2>(be, a, tma);                                                     \
        else if (D == 80) fa90_forward_launch<E, 80, 2>(be, a, tma);                                                  \
        else if (D == 32 && three) fa90_forward_launch<E, 32, 3>(be, a, tma);                                         \
        else if (D == 32) fa90_forward_launch<E, 32, 2>(be, a, tma);                                                  \
        else if (D == 64 && three) fa90_forward_launch<E, 64, 3>(be, a, tma);                                         \
        else if (D == 64) fa90_forward_launch<E, 64, 2>(be, a, tma);                                                  \
        else tlm_fatal("flash_attention_forward: no Hopper kernel for d_head %d", D);                                 \
    } while (0)
    if (a->dt == TLM_DTYPE_BF16) FA90_FWD(__nv_bfloat16);
    else FA90_FWD(__half);
#undef FA90_FWD
}
