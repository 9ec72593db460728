/* flash_attention.c — FlashAttention-2 on the CPU, fp32: the reference the CUDA kernels follow
 * (Dao 2023, "FlashAttention-2", Algorithm 1 forward, Algorithm 2 backward; CS336 A2 §2.8).
 * Layout, masking and the meaning of every argument: include/tlm/flash_attention.h.
 *
 * The loops are the paper's. Where a GPU kernel loads a tile from HBM into shared memory or
 * registers, this file copies it into a small per-thread buffer (load_tile), so each step
 * reads like a line of the algorithm and works on contiguous (rows, D) blocks:
 *   forward:  work item = (b, h, query tile i); key tiles j = 0 .. last visible one;
 *             buffers Q_i, K_j, V_j, O_i (rows x D), S/P (Br x Bc), m, l (Br).
 *   backward: a first pass computes delta = rowsum(dO * O) (B,H,Tq) and zeroes dq;
 *             work item = (b, h); key tiles j outer, query tiles i inner (first visible one on);
 *             buffers K_j, V_j, dK_j, dV_j, Q_i, dO_i (rows x D), P, dS (Br x Bc).
 * Nothing of size Tq x Tk exists. Work items are independent and each writes its own rows, so
 * the results do not depend on the number of threads.
 *
 * Tile visibility (causal, bottom-right aligned, off = Tk - Tq; query i sees key j iff
 * j <= i + off), for query tile rows [i0, i0+br) and key tile columns [j0, j0+bc):
 *   visible (computed) iff j0 <= (i0 + br - 1) + off: its last row sees its first key;
 *   needs the mask   iff j0 + bc - 1 > i0 + off: its first row does not see its last key.
 * The forward runs key tiles j0 < min(Tk, i0 + br + off); the backward runs, for key tile j0,
 * query tiles from the one holding row max(0, j0 - off). Both visit exactly the visible tiles.
 *
 * Fully masked rows (i + off < 0, only when causal and Tk < Tq) see -inf scores in every tile
 * they meet: the forward keeps their m at -inf, adds nothing (P = 0) and writes out = 0,
 * lse = -inf; the backward gives their masked entries P = 0 without reading L. exp is
 * tlm_cpu_expf (cpu_ops.h: vectorises; within 1 ulp of expf).
 *
 * At the end, the CPU backend's ops (tlm_cpu_flash_attention_forward/_backward, and the check of
 * what they take): the reference with the default tiles, bf16/fp16 tensors widened to float32 at
 * the edges. */
#include "tlm/flash_attention.h"
#include "tlm/status.h"
#include "cpu/cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t tlm_flash_cpu_tiles_visited;

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

/* dst (rows, D) contiguous = rows [row0, row0+rows) of src, columns [col, col+D), stride ld */
static void load_tile(float *restrict dst, const float *restrict src, size_t row0, int rows,
                      int ld, int col, int D) {
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * D, src + (row0 + r) * (size_t)ld + col, (size_t)D * sizeof(float));
}

/* the inverse: rows of dst (stride ld, columns [col, col+D)) = src (rows, D) */
static void store_tile(float *restrict dst, size_t row0, int ld, int col,
                       const float *restrict src, int rows, int D) {
    for (int r = 0; r < rows; r++)
        memcpy(dst + (row0 + r) * (size_t)ld + col, src + (size_t)r * D, (size_t)D * sizeof(float));
}

static float dot(const float *restrict a, const float *restrict b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* y[0..n) += a * x[0..n) */
static void axpy(float *restrict y, float a, const float *restrict x, int n) {
#pragma omp simd
    for (int d = 0; d < n; d++) y[d] += a * x[d];
}

/* The scores of query tile i0 against key tile j0: S (br rows of stride Bc) = Q_i K_j^T / sqrt(D)
 * (scale) for Q_i (br, D), K_j (bc, D); given L (L_i (br): the backward), P = exp(S - L_i)
 * instead. When the tile crosses the causal diagonal, where key j0+c > query i0+r + off: S = -inf,
 * P = 0 (L not read). Keep the mask as written: as c > r + (i0 + off - j0) it let the compiler
 * vectorise these loops another way, which changed the bits of the sums. */
static void scores(float *restrict S, int Bc, const float *restrict Qi, const float *restrict Kj,
                   const float *restrict L, int br, int bc, int D, float scale, bool crosses,
                   int i0, int j0, int off) {
    for (int r = 0; r < br; r++)
        for (int c = 0; c < bc; c++) {
            const bool masked = crosses && j0 + c > i0 + r + off;
            const float *q = Qi + (size_t)r * D, *k = Kj + (size_t)c * D;
            if (L) S[r * Bc + c] = masked ? 0.0f : tlm_cpu_expf(scale * dot(q, k, D) - L[r]);
            else S[r * Bc + c] = masked ? -INFINITY : scale * dot(q, k, D);
        }
}

static void *tile_alloc(size_t floats, const char *what) {
    float *p = malloc(floats * sizeof(float));
    if (!p) tlm_fatal("flash attention (cpu): out of memory for the %s tiles (%zu floats)",
                      what, floats);
    return p;
}

static void check_args(const float *q, const float *k, const float *v, int ld_qkv, int ld_out,
                       int B, int Tq, int Tk, int H, int D, int Br, int Bc) {
    TLM_ASSERT(q && k && v);
    TLM_ASSERT(B >= 1 && Tq >= 1 && Tk >= 1 && H >= 1 && D >= 1 && Br >= 1 && Bc >= 1);
    TLM_ASSERT(ld_qkv >= H * D && ld_out >= H * D);
}

/* ---- forward: Algorithm 1 ------------------------------------------------------------------ */

void tlm_flash_attention_forward_cpu(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int ld_qkv, int ld_out, int B, int Tq,
                                     int Tk, int H, int D, bool causal, int Br, int Bc) {
    check_args(q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, Br, Bc);
    TLM_ASSERT(out && lse);
    const float scale = 1.0f / sqrtf((float)D);
    const int off = Tk - Tq;                 /* causal: query i sees key j iff j <= i + off */
    const int Tr = (Tq + Br - 1) / Br;       /* query tiles */
    const int items = B * H * Tr;

#pragma omp parallel if ((double)B * H * Tq * Tk >= TLM_CPU_GRAIN)
    {
        /* this thread's tiles ("on-chip memory") */
        float *Qi = tile_alloc((size_t)(2 * Br + 2 * Bc) * D + (size_t)Br * Bc + 2 * Br, "forward");
        float *Oi = Qi + (size_t)Br * D;     /* (Br, D) unnormalised output accumulator */
        float *Kj = Oi + (size_t)Br * D;     /* (Bc, D) */
        float *Vj = Kj + (size_t)Bc * D;     /* (Bc, D) */
        float *S = Vj + (size_t)Bc * D;      /* (Br, Bc) scores, then P in place */
        float *m = S + (size_t)Br * Bc;      /* (Br) running row max */
        float *l = m + Br;                   /* (Br) running row sum of exp(S - m) */
        int64_t visited = 0;

        /* dynamic: with causal masking later query tiles have more key tiles */
#pragma omp for schedule(dynamic)
        for (int item = 0; item < items; item++) {
            const int b = item / (H * Tr), h = item / Tr % H, i0 = item % Tr * Br;
            const int br = min_int(Br, Tq - i0);
            const size_t qrow0 = (size_t)b * Tq + i0, krow0 = (size_t)b * Tk;

            /* load Q_i; O_i = 0, l = 0, m = -inf */
            load_tile(Qi, q, qrow0, br, ld_qkv, h * D, D);
            memset(Oi, 0, (size_t)br * D * sizeof(float));
            for (int r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0.0f;

            /* key tiles up to the last one this query tile sees (the rest are skipped) */
            const int j_end = causal ? max_int(0, min_int(Tk, i0 + br + off)) : Tk;
            for (int j0 = 0; j0 < j_end; j0 += Bc) {
                visited++;
                const int bc = min_int(Bc, Tk - j0);
                const bool crosses = causal && j0 + bc - 1 > i0 + off;

                /* load K_j, V_j */
                load_tile(Kj, k, krow0 + j0, bc, ld_qkv, h * D, D);
                load_tile(Vj, v, krow0 + j0, bc, ld_qkv, h * D, D);

                /* S = Q_i K_j^T / sqrt(D); -inf where key j0+c > query i0+r + off */
                scores(S, Bc, Qi, Kj, NULL, br, bc, D, scale, crosses, i0, j0, off);

                /* online softmax, row by row */
                for (int r = 0; r < br; r++) {
                    float *restrict s = S + r * Bc;
                    float m_new = m[r];
                    for (int c = 0; c < bc; c++) m_new = s[c] > m_new ? s[c] : m_new;
                    if (m_new == -INFINITY) continue; /* every key so far masked: P = 0 */

                    /* P = exp(S - m_new), in place; rowsum(P) */
                    float rowsum = 0.0f;
#pragma omp simd reduction(+ : rowsum)
                    for (int c = 0; c < bc; c++) {
                        s[c] = tlm_cpu_expf(s[c] - m_new);
                        rowsum += s[c];
                    }

                    /* rescale what earlier tiles added by exp(m_old - m_new) (0 if m_old = -inf) */
                    const float alpha = tlm_cpu_expf(m[r] - m_new);
                    l[r] = alpha * l[r] + rowsum;
                    m[r] = m_new;

                    /* O_i[r] = alpha O_i[r] + P[r] V_j */
                    float *restrict o = Oi + (size_t)r * D;
#pragma omp simd
                    for (int d = 0; d < D; d++) o[d] *= alpha;
                    for (int c = 0; c < bc; c++) axpy(o, s[c], Vj + (size_t)c * D, D);
                }
            }

            /* O_i = diag(l)^-1 O_i;  L_i = m + log(l); a fully masked row: O = 0, L = -inf */
            for (int r = 0; r < br; r++) {
                float *restrict o = Oi + (size_t)r * D;
                const bool empty = m[r] == -INFINITY; /* then l = 0 and O_i[r] = 0 */
                const float inv_l = empty ? 0.0f : 1.0f / l[r];
                for (int d = 0; d < D; d++) o[d] *= inv_l;
                lse[((size_t)b * H + h) * Tq + i0 + r] = empty ? -INFINITY : m[r] + logf(l[r]);
            }
            store_tile(out, qrow0, ld_out, h * D, Oi, br, D);
        }
#pragma omp atomic
        tlm_flash_cpu_tiles_visited += visited;
        free(Qi);
    }
}

/* ---- backward: Algorithm 2 ----------------------------------------------------------------- */

void tlm_flash_attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout,
                                      const float *q, const float *k, const float *v,
                                      const float *out, const float *lse, int ld_qkv,
                                      int ld_out, int B, int Tq, int Tk, int H, int D,
                                      bool causal, int Br, int Bc) {
    check_args(q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, Br, Bc);
    TLM_ASSERT(dq && dk && dv && dout && out && lse);
    const float scale = 1.0f / sqrtf((float)D);
    const int off = Tk - Tq;
    const bool parallel = (double)B * H * Tq * Tk >= TLM_CPU_GRAIN; /* as the naive op */

    /* delta (B,H,Tq) = rowsum(dO * O), the paper's D; and dQ = 0 (it is accumulated into) */
    float *delta = tile_alloc((size_t)B * H * Tq, "backward delta");
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < B * Tq; n++) {
        const int b = n / Tq, i = n % Tq;
        for (int h = 0; h < H; h++) {
            const size_t o = (size_t)n * ld_out + (size_t)h * D;
            delta[((size_t)b * H + h) * Tq + i] = dot(dout + o, out + o, D);
            memset(dq + (size_t)n * ld_qkv + (size_t)h * D, 0, (size_t)D * sizeof(float));
        }
    }

#pragma omp parallel if (parallel)
    {
        float *Kj = tile_alloc((size_t)(4 * Bc + 2 * Br) * D + 2 * (size_t)Br * Bc, "backward");
        float *Vj = Kj + (size_t)Bc * D;     /* (Bc, D) */
        float *dKj = Vj + (size_t)Bc * D;    /* (Bc, D) accumulated over query tiles */
        float *dVj = dKj + (size_t)Bc * D;   /* (Bc, D) accumulated over query tiles */
        float *Qi = dVj + (size_t)Bc * D;    /* (Br, D) */
        float *dOi = Qi + (size_t)Br * D;    /* (Br, D) */
        float *P = dOi + (size_t)Br * D;     /* (Br, Bc) */
        float *dS = P + (size_t)Br * Bc;     /* (Br, Bc): dP, then dS in place */
        int64_t visited = 0;

#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            const int b = bh / H, h = bh % H;
            const size_t qrow0 = (size_t)b * Tq, krow0 = (size_t)b * Tk;
            const float *L = lse + (size_t)bh * Tq, *delta_bh = delta + (size_t)bh * Tq;

            for (int j0 = 0; j0 < Tk; j0 += Bc) {
                const int bc = min_int(Bc, Tk - j0);

                /* load K_j, V_j; dK_j = dV_j = 0 */
                load_tile(Kj, k, krow0 + j0, bc, ld_qkv, h * D, D);
                load_tile(Vj, v, krow0 + j0, bc, ld_qkv, h * D, D);
                memset(dKj, 0, (size_t)bc * D * sizeof(float));
                memset(dVj, 0, (size_t)bc * D * sizeof(float));

                /* query tiles from the one holding the first row that sees key j0 */
                const int i_first = causal ? max_int(0, j0 - off) : 0;
                for (int i0 = i_first / Br * Br; i0 < Tq; i0 += Br) {
                    const int br = min_int(Br, Tq - i0);
                    const bool crosses = causal && j0 + bc - 1 > i0 + off;
                    visited++;

                    /* load Q_i, dO_i (and L_i, delta_i: read in place) */
                    load_tile(Qi, q, qrow0 + i0, br, ld_qkv, h * D, D);
                    load_tile(dOi, dout, qrow0 + i0, br, ld_out, h * D, D);

                    /* P = exp(Q_i K_j^T / sqrt(D) - L_i); 0 where masked */
                    scores(P, Bc, Qi, Kj, L + i0, br, bc, D, scale, crosses, i0, j0, off);

                    /* dV_j += P^T dO_i */
                    for (int r = 0; r < br; r++)
                        for (int c = 0; c < bc; c++)
                            axpy(dVj + (size_t)c * D, P[r * Bc + c], dOi + (size_t)r * D, D);

                    /* dP = dO_i V_j^T;  dS = P * (dP - delta_i) */
                    for (int r = 0; r < br; r++)
                        for (int c = 0; c < bc; c++) {
                            const float dP = dot(dOi + (size_t)r * D, Vj + (size_t)c * D, D);
                            dS[r * Bc + c] = P[r * Bc + c] * (dP - delta_bh[i0 + r]);
                        }

                    /* dQ_i += dS K_j / sqrt(D), straight into dq (the GPU: atomic adds) */
                    for (int r = 0; r < br; r++) {
                        float *dq_row = dq + (qrow0 + i0 + r) * (size_t)ld_qkv + (size_t)h * D;
                        for (int c = 0; c < bc; c++)
                            axpy(dq_row, scale * dS[r * Bc + c], Kj + (size_t)c * D, D);
                    }

                    /* dK_j += dS^T Q_i / sqrt(D) */
                    for (int r = 0; r < br; r++)
                        for (int c = 0; c < bc; c++)
                            axpy(dKj + (size_t)c * D, scale * dS[r * Bc + c], Qi + (size_t)r * D, D);
                }

                /* write dK_j, dV_j */
                store_tile(dk, krow0 + j0, ld_qkv, h * D, dKj, bc, D);
                store_tile(dv, krow0 + j0, ld_qkv, h * D, dVj, bc, D);
            }
        }
#pragma omp atomic
        tlm_flash_cpu_tiles_visited += visited;
        free(Kj);
    }
    free(delta);
}

/* ---- the backend ops (tlm_ops.flash_attention_*, tlm/backend.h) ------------------------------
 * The reference above with the default tiles, in the mode p's dtype dt = tlm_precision_act_dtype(p):
 * fp32 and tf32 alike compute exact fp32 (the CPU has no TF32 products: precision.h).
 * dt = F32: called on the tensors directly.
 * dt = BF16/F16: the inputs are widened (exactly) into float32 copies in the scratch arena, the
 * reference computes on them in fp32, and what the op writes (out; dq, dk, dv) is rounded to dt
 * (nearest even); lse is float32 in every mode. So the CPU's low-precision flash rounds only at
 * its edges: it does not round P before P V nor dS before dS K, dS^T Q as the CUDA kernels'
 * tensor-core products do; the two differ by about one dt rounding of those products (a GPU test
 * compares them at dt's tolerance). The workspace is not needed (the reference allocates its own
 * delta); it may be NULL. */

static bool flash_dtype_ok(tlm_dtype dt) {
    return dt == TLM_DTYPE_F32 || dt == TLM_DTYPE_BF16 || dt == TLM_DTYPE_F16;
}

tlm_status tlm_cpu_flash_attention_check(int D, tlm_dtype dt) {
    if (D < 1)
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention (cpu): d_head %d is not supported (the CPU backend takes any d_head "
                        ">= 1, in F32, BF16 and F16)", D);
    if (!flash_dtype_ok(dt))
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention (cpu): dtype %s is not supported (the CPU backend takes F32, BF16 and "
                        "F16, any d_head >= 1)", tlm_dtype_name(dt));
    return TLM_OK;
}

static void check_op(int D, tlm_dtype dt, const char *op) {
    if (D < 1 || !flash_dtype_ok(dt))
        tlm_fatal("cpu %s: d_head %d, dtype %s: not supported (tlm_backend_supports says which are)", op, D,
                  tlm_dtype_name(dt));
}

/* dst (rows, HD) float32, contiguous = the first HD columns of each of `rows` rows of src (dt),
 * row stride ld */
static void widen_rows(float *dst, const void *src, size_t rows, int ld, int HD, tlm_dtype dt) {
#pragma omp parallel for schedule(static) if (rows * HD >= TLM_CPU_GRAIN)
    for (size_t n = 0; n < rows; n++) tlm_cpu_widen(dst + n * HD, src, n * (size_t)ld, (size_t)HD, dt);
}

/* the first HD columns of each row of dst (dt, row stride ld) = src (rows, HD) rounded to dt */
static void narrow_rows(void *dst, int ld, const float *src, size_t rows, int HD, tlm_dtype dt) {
#pragma omp parallel for schedule(static) if (rows * HD >= TLM_CPU_GRAIN)
    for (size_t n = 0; n < rows; n++) tlm_cpu_narrow(dst, n * (size_t)ld, src + n * HD, (size_t)HD, dt);
}

void tlm_cpu_flash_attention_forward(tlm_backend *be, void *out, float *lse, const void *q, const void *k,
                                     const void *v, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D,
                                     bool causal, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    check_op(D, dt, "flash_attention_forward");
    const tlm_flash_tiles t = tlm_flash_cpu_default_tiles();
    if (dt == TLM_DTYPE_F32) {
        tlm_flash_attention_forward_cpu(out, lse, q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, causal, t.Br, t.Bc);
        return;
    }
    /* one scratch request, partitioned: q, out (B*Tq, HD); k, v (B*Tk, HD); float32, ld = HD */
    const int HD = H * D;
    const size_t nq = (size_t)B * Tq * HD, nk = (size_t)B * Tk * HD;
    float *q32 = tlm_cpu_scratch(be, (2 * nq + 2 * nk) * sizeof(float), "flash_attention_forward");
    float *o32 = q32 + nq, *k32 = o32 + nq, *v32 = k32 + nk;
    widen_rows(q32, q, (size_t)B * Tq, ld_qkv, HD, dt);
    widen_rows(k32, k, (size_t)B * Tk, ld_qkv, HD, dt);
    widen_rows(v32, v, (size_t)B * Tk, ld_qkv, HD, dt);
    tlm_flash_attention_forward_cpu(o32, lse, q32, k32, v32, HD, HD, B, Tq, Tk, H, D, causal, t.Br, t.Bc);
    narrow_rows(out, ld_out, o32, (size_t)B * Tq, HD, dt);
}

void tlm_cpu_flash_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, float *workspace,
                                      const void *dout, const void *q, const void *k, const void *v,
                                      const void *out, const float *lse, int ld_qkv, int ld_out, int B, int Tq,
                                      int Tk, int H, int D, bool causal, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    check_op(D, dt, "flash_attention_backward");
    const tlm_flash_tiles t = tlm_flash_cpu_default_tiles();
    if (dt == TLM_DTYPE_F32) {
        tlm_flash_attention_backward_cpu(dq, dk, dv, dout, q, k, v, out, lse, ld_qkv, ld_out, B, Tq, Tk, H, D,
                                         causal, t.Br, t.Bc);
        return;
    }
    /* one scratch request, partitioned: q, out, dout, dq (B*Tq, HD); k, v, dk, dv (B*Tk, HD) */
    const int HD = H * D;
    const size_t rq = (size_t)B * Tq, rk = (size_t)B * Tk, nq = rq * HD, nk = rk * HD;
    float *q32 = tlm_cpu_scratch(be, (4 * nq + 4 * nk) * sizeof(float), "flash_attention_backward");
    float *o32 = q32 + nq, *do32 = o32 + nq, *dq32 = do32 + nq;
    float *k32 = dq32 + nq, *v32 = k32 + nk, *dk32 = v32 + nk, *dv32 = dk32 + nk;
    widen_rows(q32, q, rq, ld_qkv, HD, dt);
    widen_rows(o32, out, rq, ld_out, HD, dt);
    widen_rows(do32, dout, rq, ld_out, HD, dt);
    widen_rows(k32, k, rk, ld_qkv, HD, dt);
    widen_rows(v32, v, rk, ld_qkv, HD, dt);
    tlm_flash_attention_backward_cpu(dq32, dk32, dv32, do32, q32, k32, v32, o32, lse, HD, HD, B, Tq, Tk, H, D,
                                     causal, t.Br, t.Bc);
    narrow_rows(dq, ld_qkv, dq32, rq, HD, dt);
    narrow_rows(dk, ld_qkv, dk32, rk, HD, dt);
    narrow_rows(dv, ld_qkv, dv32, rk, HD, dt);
}
