/* flash_attention.h — FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with
 * Better Parallelism and Work Partitioning", Algorithm 1 forward, Algorithm 2 backward; CS336
 * assignment 2 §2.8): scaled dot-product attention computed tile by tile with an online
 * softmax, saving only the output O and the logsumexp L of each query row; the backward
 * recomputes the probabilities P from L tile by tile. Nothing of size Tq x Tk is ever held.
 *
 * This header declares the CPU reference (src/cpu/flash_attention.c): fp32 throughout, written
 * as the paper's tile loops so that it is the spec the CUDA kernels follow.
 *
 * Layout (the one the QKV projection produces; no transpose passes):
 *   q  (B,Tq,H,D) float32: head h of query row n = b*Tq + i at q[n*ld_qkv + h*D + d];
 *   k, v (B,Tk,H,D) float32: head h of key row n = b*Tk + j at k[n*ld_qkv + h*D + d];
 *   out (B,Tq,H*D) float32: head h of row n at out[n*ld_out + h*D + d] (merged heads);
 *   lse (B,H,Tq) float32, contiguous: lse[(b*H + h)*Tq + i];
 *   ld_qkv >= H*D (3*H*D when q, k, v are the thirds of one fused projection), ld_out >= H*D,
 *   in elements. Only the H*D columns of each row are read or written; the rest of a row
 *   (the other thirds, padding) is left alone.
 *
 * Scores S = q k^T / sqrt(D), softmax over keys in fp32, natural exp and log.
 * Causal masking is BOTTOM-RIGHT aligned, as FlashAttention does: query i sees key j iff
 *   j <= i + (Tk - Tq)
 * (for Tq == Tk: j <= i, the usual lower triangle). Tiles whose every (i, j) is masked are
 * SKIPPED, not computed and masked; only tiles that cross the diagonal apply the mask.
 * When Tk < Tq the first Tq - Tk query rows see no key at all ("fully masked"): their out is 0,
 * their lse is -inf, and they contribute nothing to the gradients; never NaN.
 *
 * Tiles: Br query rows by Bc key columns, any sizes >= 1; sequence lengths need not be
 * multiples of them (the last tile of each is partial). The CPU reference accepts any d_head
 * D >= 1 (the CUDA kernels only 16, 32, 64, 80 and 128: tlm_backend_supports says so).
 *
 * Programmer errors (a size < 1, ld < H*D, a NULL tensor) abort via TLM_ASSERT. */
#ifndef TLM_FLASH_ATTENTION_H
#define TLM_FLASH_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A tile shape: Br query rows (the paper's B_r, rows of Q_i, O_i) by Bc key columns (B_c, rows
 * of K_j, V_j). */
typedef struct {
    int Br;
    int Bc;
} tlm_flash_tiles;

/* The CPU reference's default tiles, 64 x 64: per thread a 16 KiB score tile and Q, K, V, O
 * tiles of 64 x D floats (32 KiB each at D = 128). Timing, not results' correctness, depends on
 * them (the rounding differs slightly with the tile shape). */
static inline tlm_flash_tiles tlm_flash_cpu_default_tiles(void) {
    tlm_flash_tiles t = {64, 64};
    return t;
}

/* Forward (Algorithm 1). For each (batch b, head h, query tile i) and each key tile j that is
 * not entirely masked, with running row max m (init -inf), row sum l (init 0), O_i (init 0):
 *   S = Q_i K_j^T / sqrt(D)  (masked entries -inf, only in tiles that cross the diagonal)
 *   m_new = max(m, rowmax(S));  P = exp(S - m_new);  l = exp(m - m_new) l + rowsum(P)
 *   O_i = diag(exp(m - m_new)) O_i + P V_j;  m = m_new
 * then O_i = diag(l)^-1 O_i and L_i = m + log(l).
 * out (B,Tq,H*D) row stride ld_out: written (=) in the H*D columns of each row;
 * lse (B,H,Tq): written (=), the natural-log logsumexp of each query row's scaled, masked scores
 * (-inf for a fully masked row); q (B,Tq,H,D), k, v (B,Tk,H,D), row stride ld_qkv.
 * OpenMP over (batch, head, query tile). out and lse must not overlap q, k, v. */
void tlm_flash_attention_forward_cpu(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int ld_qkv, int ld_out, int B, int Tq,
                                     int Tk, int H, int D, bool causal, int Br, int Bc);

/* Backward (Algorithm 2), by recomputation. First delta_i = rowsum(dO_i * O_i) for every
 * query row (the paper's D_i) and dQ = 0; then for each (b, h), key tiles j outer, query tiles
 * i inner (skipping the entirely masked ones), with dK_j = dV_j = 0 at the start of each j:
 *   S = Q_i K_j^T / sqrt(D);  P = exp(S - L_i)  (0 where masked)
 *   dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - delta_i)
 *   dQ_i += dS K_j / sqrt(D)   (on the CPU a plain +=; on the GPU the atomic add of the paper)
 *   dK_j += dS^T Q_i / sqrt(D)
 * and dK_j, dV_j are written once the query loop is done.
 * dq (B,Tq,H,D), dk, dv (B,Tk,H,D): row stride ld_qkv, written (=) in the H*D columns of
 * each row (dq, dk, dv may be the thirds of one buffer, as q, k, v); dout (B,Tq,H*D) and
 * out (the forward's) row stride ld_out; lse (B,H,Tq) the forward's. Same shape arguments as
 * the forward (Br, Bc may differ from the forward's). OpenMP over (batch, head).
 * The gradients must not overlap the inputs. */
void tlm_flash_attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout,
                                      const float *q, const float *k, const float *v,
                                      const float *out, const float *lse, int ld_qkv,
                                      int ld_out, int B, int Tq, int Tk, int H, int D,
                                      bool causal, int Br, int Bc);

/* Test instrumentation: the number of (query tile, key tile) pairs computed, summed over all
 * (batch, head) pairs, forward and backward calls alike (added atomically, once per work item).
 * Never reset by the library: a test sets it to 0, calls one function and reads it. With
 * causal T = 256 and Br = Bc = 64 one (b, h) visits 10 of the 16 tiles. */
extern int64_t tlm_flash_cpu_tiles_visited;

#ifdef __cplusplus
}
#endif
#endif
