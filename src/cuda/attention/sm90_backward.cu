/* sm90_backward.cu — the FlashAttention backward on Hopper's warpgroup tensor cores (wgmma, sm_90a),
 * bf16 and fp16, d_head 32, 64, 80 and 128: flash_bwd_sm90_kernel and tlm_attn_sm90_backward, which
 * runs it between the bf16/fp16 backward's pre-pass and dQ rounding (mma_backward.cu) where the
 * selector (select.cu) chose the Hopper kernels. The shared device code: sm90.cuh; the tile layout,
 * descriptors and the forward: sm90_forward.cu. */
#include <math.h>

#include "cuda/attention/sm90.cuh"


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
 * float4 atomics. The delta pre-pass and the dQ rounding post-pass are mma_backward.cu's.
 * OWN (d_head 64 with the tiled dQ, the default there): each warpgroup computes the dQ partial of
 * all D columns over its own 64 keys instead, dQ_i += scale dS[:, keys_w] K_w (SS m64n64 over 64
 * keys: the same tensor work in half the instructions), so it reads only its own dS^T and the two
 * warpgroups never wait for each other within a tile (a barrier of the warpgroup's 128 threads
 * instead of the 256); the price is twice the bulk adds into the accumulator (16 KiB a warpgroup a
 * tile), in one column block of 64. H100, alternating processes (bench/results/
 * h100-2026-11-24-dq-own): leaderboard backward faster in 8 of 8 rounds in three calls, by 0.8-5.4%
 * (3.35-3.50 ms against 3.44-3.65); flash-benchmarking's single head at seq 16384-65536, 4-8%
 * faster. At d_head 32 (an m64n32 a warpgroup) it was 15-20% slower there, so d_head 32 keeps
 * warpgroup 0's shared product.
 * RSKV (with OWN, the default at d_head 64): the warpgroup's K_w and V_w are loaded once into
 * registers as A-fragments (ldmatrix; 32 registers a thread), so S^T and dP^T are RS products that
 * read only Q and dO from shared memory (K-major B). The registers this takes leave none for PIPE
 * (ptxas serializes the products, C7512), so S^T and dP^T are issued at the top of each tile.
 * H100, alternating processes (bench/results/h100-2026-11-24-tma, calls 2 and 3): leaderboard
 * backward 3.15-3.21 ms against 3.33-3.43 with PIPE, in 6 of 6 rounds. Issuing S^T and dP^T as two
 * groups and computing P^T while dP^T runs was slower (3.20-3.22 ms; d_head 128 5.28-5.47 against
 * 5.14-5.31), so one group. OWN and RSKV go together: both where TILED_DQ at d_head 64, neither
 * elsewhere (the variants without them there lost, above; git has them).
 * With TMA (fa90_maps: d_head 64 and 128) the producer's warp 0 alone copies: its lane 0 issues K
 * and V and each query tile's Q and dO as tensor copies that complete on the mbarriers' byte counts,
 * its 32 lanes copy the tile's logsumexp and delta by cp.async; the other producer warps exit. */
#define FA90_BWD_STAGES 3
template <typename E, int D, bool TILED_DQ>
__global__ void __launch_bounds__(FA90_THREADS, 1)
    flash_bwd_sm90_kernel(float *__restrict__ dq_acc, E *__restrict__ dk, E *__restrict__ dv,
                          const E *__restrict__ dout, const E *__restrict__ q, const E *__restrict__ k,
                          const E *__restrict__ v, const float *__restrict__ lse, const float *__restrict__ delta,
                          int ld_qkv, int ld_out, int Tq, int Tk, int H, float scale, float scale_log2, int causal,
                          int group, const __grid_constant__ fa90_maps maps, int tma) {
    tlm_pdl_wait(); /* tlm_cuda_launch: the previous kernel has completed */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(D == 32 || D == 64 || D == 80 || D == 128, "d_head 32, 64, 80 or 128");
    constexpr bool OWN = D == 64 && TILED_DQ, RSKV = OWN; /* the header says why */
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
            l2[0] = lv.x * FA_LOG2E, l2[1] = lv.y * FA_LOG2E;
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
                pa[kk][r] = fa_pack<E>::two(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
                dsa[kk][r] = fa_pack<E>::two(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
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
                fa_pack<E>::two(dk_acc[4 * n + 2 * h2] * scale, dk_acc[4 * n + 2 * h2 + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv + off + n * 8) = fa_pack<E>::two(dv_acc[4 * n + 2 * h2], dv_acc[4 * n + 2 * h2 + 1]);
        }
    }
#else
    __trap();
#endif
}

/* ---- launcher --------------------------------------------------------------------------------- */

/* the backward's (head, batch) groups (fa90_block_of): 4 at d_head 64 (leaderboard backward, H100,
 * alternating processes: 3.43-3.54 ms, mean 3.48, against 3.45-3.56, mean 3.52, with 1; faster in 5
 * of 6 rounds: bench/results/h100-2026-11-24-speed-final, calls 9 and 10), 1 (head by head) at the
 * others (d_head 128: 5.53-5.65 with 4 against 5.49-5.58 with 1, call 9) */
#define FA90_BWD_GROUP(D) ((D) == 64 ? 4 : 1)
template <typename E, int D, bool TILED_DQ>
static void fa90_backward_launch(tlm_backend *be, const tlm_attn_bwd_args *a, bool allow_tma) {
    const char *op = "flash_attention_backward";
    const int ld_qkv = a->ld_qkv, ld_out = a->ld_out, B = a->B, Tq = a->Tq, Tk = a->Tk, H = a->H;
    constexpr bool OWN = D == 64 && TILED_DQ; /* the kernel's */
    constexpr auto kernel = flash_bwd_sm90_kernel<E, D, TILED_DQ>;
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
    float *dq_acc = a->workspace, *delta = a->workspace + (size_t)B * H * Tq * D;
    fa90_maps maps;
    const bool tma =
        tlm_attn_sm90_maps(&maps, a->dt, D, allow_tma, a->q, a->k, a->v, a->dout, ld_qkv, ld_out, B, Tq, Tk, H, 64);
    tlm_cuda_launch(op, be, kernel, grid, dim3(FA90_THREADS), smem, tlm_cuda_stream(be), dq_acc, (E *)a->dk, (E *)a->dv,
                    (const E *)a->dout, (const E *)a->q, (const E *)a->k, (const E *)a->v, a->lse, delta, ld_qkv,
                    ld_out, Tq, Tk, H, scale, FA_LOG2E * scale, a->causal ? 1 : 0, fa90_group(FA90_BWD_GROUP(D), H * B),
                    maps, tma ? 1 : 0);
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
}

void tlm_attn_sm90_backward(tlm_backend *be, const tlm_attn_choice *c, const tlm_attn_bwd_args *a) {
    const int D = a->D;
    const bool tma = c->sm90_tma;
    /* the tiled dQ layout needs whole 64-row tiles: a tile must not reach into the next head's rows;
     * each warpgroup's column block (d_head 80: 64, then the other 16; 32: one block of all 32,
     * warpgroup 0's; 64 (OWN): one block of all 64 columns, both warpgroups') */
    const int dq_tiled = a->Tq % 64 == 0 ? (D == 64 ? D : D == 80 ? 64 : D == 32 ? 32 : D / 2) : 0;
    tlm_attn_bwd16_prepass(be, a, NULL);
#define FA90_BWD(E)                                                                                                   \
    do {                                                                                                              \
        if (D == 128 && dq_tiled) fa90_backward_launch<E, 128, true>(be, a, tma);                                     \
        else if (D == 128) fa90_backward_launch<E, 128, false>(be, a, tma);                                           \
        else if (D == 80 && dq_tiled) fa90_backward_launch<E, 80, true>(be, a, tma);                                  \
        else if (D == 80) fa90_backward_launch<E, 80, false>(be, a, tma);                                             \
        else if (D == 32 && dq_tiled) fa90_backward_launch<E, 32, true>(be, a, tma);                                  \
        else if (D == 32) fa90_backward_launch<E, 32, false>(be, a, tma);                                             \
        else if (D == 64 && dq_tiled) fa90_backward_launch<E, 64, true>(be, a, tma);                                  \
        else if (D == 64) fa90_backward_launch<E, 64, false>(be, a, tma);                                             \
        else tlm_fatal("flash_attention_backward: no Hopper kernel for d_head %d", D);                                \
    } while (0)
    if (a->dt == TLM_DTYPE_BF16) FA90_BWD(__nv_bfloat16);
    else FA90_BWD(__half);
#undef FA90_BWD
    tlm_attn_bwd16_round(be, a, NULL, dq_tiled);
}
