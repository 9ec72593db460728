/* mma_backward.cu — the FlashAttention-2 backward on bf16/fp16 tensor cores (Dao 2023, Algorithm
 * 2): flash_bwd_kernel, one instantiation per line of tiles.def (and a split-KV one per LONG line),
 * its launcher tlm_attn_mma_backward, which runs the line the selector chose (select.cu), and the
 * first and last kernels of every bf16/fp16 backward, the Hopper one's too
 * (tlm_attn_bwd16_prepass, _round). The forward, the tensor-core and copy primitives:
 * mma_forward.cu, common.cuh.
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
 * ptxas (nvcc 13.0, sm_90a, bf16 = fp16), registers / shared memory per block / resident blocks per
 * SM (an H100), no spills: D 64: k128q32w4 255 / 64.5 KiB / 2 (LONG), k64q64w4 241 / 64 KiB / 2
 * (SHORT); D 80: k128q64w8 244 / 107 KiB / 1 (LONG), k64q64w4 242 / 76 KiB / 2 (SHORT). */
#include <math.h>
#include <type_traits>

#include "cuda/attention/attention.cuh"
#include "cuda/attention/common.cuh"
#include "cuda/attention/mma.cuh"

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
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
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
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
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

/* ---- launchers ---------------------------------------------------------------------------------- */

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

/* f(cfg) with the configuration type of line t (d_head DD); false when t is not a backward line
 * of DD (not reached: t comes from the table) */
template <int DD, typename F> static bool fa_bwd_with(const tlm_attn_tile *t, F &&f) {
#define TLM_FLASH_FWD(D, BR, BC, W, MINB, ROLE)
#define TLM_FLASH_BWD(D, BC, BR, W, MINB, ROLE)                                                                       \
    if constexpr (DD == D) {                                                                                          \
        static_assert(BC % (16 * W) == 0 && BR % 16 == 0 && BR <= 16 * W, "tiles.def: backward tiles");              \
        if (t->pass == TLM_ATTN_BACKWARD && t->outer == BC && t->inner == BR && t->warps == W) {                      \
            f(fa_bwd_cfg<W, BR, BC / (16 * W), MINB, TLM_ATTN_##ROLE == TLM_ATTN_LONG>{});                            \
            return true;                                                                                              \
        }                                                                                                             \
    }
#include "cuda/attention/tiles.def"
#undef TLM_FLASH_FWD
#undef TLM_FLASH_BWD
    return false;
}

/* the backward pass for fa_mma_occupancy (mma.cuh) */
struct fa_bwd_pass {
    template <int DD, typename F> static bool with(const tlm_attn_tile *t, F &&f) { return fa_bwd_with<DD>(t, f); }
    template <typename E, int DD, typename C, bool SPLIT>
    static constexpr auto kernel = flash_bwd_kernel<E, DD, C::br, C::warps, C::rk, C::minb, SPLIT>;
};

int tlm_attn_mma_backward_occupancy(tlm_dtype dt, const tlm_attn_tile *t, bool split) {
    return fa_mma_occupancy<fa_bwd_pass>(dt, t, split, "flash_attention_backward");
}

/* the workspace: the dQ accumulator (B,H,Tq,D) first (16-byte aligned for float4 atomics), then delta */
static float *fa_dq_acc(const tlm_attn_bwd_args *a) { return a->workspace; }
static float *fa_delta(const tlm_attn_bwd_args *a) { return a->workspace + (size_t)a->B * a->H * a->Tq * a->D; }

void tlm_attn_bwd16_prepass(tlm_backend *be, const tlm_attn_bwd_args *a, float *dkv) {
    const char *op = "flash_attention_backward";
    tlm_cuda_dispatch(a->dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        if constexpr (!std::is_same<E, float>::value) {
            tlm_cuda_flash_dispatch_d(a->D, op, [&](auto dc) {
                constexpr int DD = decltype(dc)::value;
                /* delta, and the dQ accumulator (with dkv: the split's dK, dV accumulators too)
                 * zeroed, no memset; L lanes a (b, i, h) position */
                constexpr int CH = DD / 8, L = CH <= 2 ? 2 : CH <= 4 ? 4 : CH <= 8 ? 8 : CH <= 16 ? 16 : 32;
                const int64_t positions = (int64_t)a->B * (dkv ? max(a->Tq, a->Tk) : a->Tq) * a->H;
                tlm_cuda_launch(op, be, flash_bwd_delta_kernel<E, DD>, dim3((unsigned)((positions * L + 255) / 256)),
                                dim3(256), 0, tlm_cuda_stream(be), fa_delta(a), fa_dq_acc(a), dkv, (const E *)a->dout,
                                (const E *)a->out, a->ld_out, a->B, a->Tq, a->Tk, a->H);
                TLM_CUDA_CHECK_LAUNCH();
            });
        }
    });
}

void tlm_attn_bwd16_round(tlm_backend *be, const tlm_attn_bwd_args *a, const float *dkv, int dq_tiled) {
    /* dQ, and dK, dV when split, rounded from their accumulators */
    const size_t dkv_n = (size_t)a->B * a->H * a->Tk * a->D;
    const fa_round_jobs jobs = {
        {a->dq, a->dk, a->dv}, {fa_dq_acc(a), dkv, dkv ? dkv + dkv_n : NULL}, {a->Tq, a->Tk, a->Tk}, dq_tiled};
    tlm_attn_round(be, &jobs, dkv ? 3 : 1, a->ld_qkv, a->B, a->H, a->D,
                   (size_t)a->B * a->H * (dkv ? max(a->Tq, a->Tk) : a->Tq) * (a->D / 2), a->dt);
}

void tlm_attn_mma_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a, float *dkv) {
    const char *op = "flash_attention_backward";
    const float scale = 1.0f / sqrtf((float)a->D), scale_log2 = FA_LOG2E * scale;
    cudaStream_t st = tlm_cuda_stream(be);
    float *dq_acc = fa_dq_acc(a), *delta = fa_delta(a);
    const tlm_attn_tile *t = c->tile;
    fa_mma_dispatch(a->dt, a->D, op, [&](auto tag, auto dc) {
        using E = typename decltype(tag)::type;
        constexpr int DD = decltype(dc)::value;
        auto launch = [&](auto cfg) {
            using C = decltype(cfg);
            /* split query ranges (LONG lines) as the selector planned them, dkv the dK, dV accumulators
             * (the split buffer: tlm_alloc, 256-byte aligned) */
            const auto kernel = fa_mma_kernel<fa_bwd_pass, E, DD, C>(dkv != nullptr, op);
            const int S = dkv ? c->split : 1, split_q = dkv ? c->split_len : 0;
            const dim3 grid((unsigned)((a->Tk + C::bc - 1) / C::bc * S), (unsigned)a->H, (unsigned)a->B);
            tlm_cuda_launch(op, be, kernel, grid, dim3(C::warps * 32), C::template smem<E, DD>(), st, dq_acc,
                            (E *)a->dk, (E *)a->dv, (const E *)a->dout, (const E *)a->q, (const E *)a->k,
                            (const E *)a->v, a->lse, delta, a->ld_qkv, a->ld_out, a->Tq, a->Tk, a->H, scale, scale_log2,
                            a->causal ? 1 : 0, split_q, dkv);
            TLM_CUDA_CHECK_LAUNCH();
        };
        /* the pre-pass zeroes the split's dK, dV accumulators too */
        tlm_attn_bwd16_prepass(be, a, dkv);
        if (!fa_bwd_with<DD>(t, launch)) tlm_fatal("%s: no backward tiles for d_head %d", op, DD);
    });
    tlm_attn_bwd16_round(be, a, dkv, 0);
}
