/* attention.c — naive causal scaled dot-product attention on the CPU (Vaswani et al. 2017,
 * "Attention Is All You Need", eq. 1): P = softmax(mask(Q K^T / sqrt(D))), out = P V, the
 * probabilities P saved (B,H,T,T) for the backward. One (batch, head) pair per work item; its
 * products are OpenBLAS SGEMMs (OpenBLAS runs single-threaded when called inside an OpenMP
 * parallel region).
 *
 * fp32: the SGEMMs read q, k, v in place through their row stride ld and write out, probs and
 * the gradients directly. bf16/fp16: each work item widens its head's blocks into float32 in
 * its own slice of the scratch arena and rounds what a GEMM or the softmax produces to dt,
 * where PyTorch's autocast would hold it in dt:
 *   forward:  S = q k^T/sqrt(D) (GEMM) -> dt;  P = softmax(S) in fp32 -> dt (saved);
 *             out = P v (GEMM) -> dt;
 *   backward: dv = P^T dout -> dt;  dP = dout v^T -> dt;  dS = P (dP - rowsum(P dP)) in fp32
 *             -> dt (left in dprobs, as the fp32 path leaves it);  dq = dS k/sqrt(D) -> dt;
 *             dk = dS^T q/sqrt(D) -> dt.
 * Both paths share the loops below; the roundings are passes of their own, outside the
 * softmax loops (with them inside, GCC 12 -O3 compiled the fp32 softmax up to 45% slower:
 * measured). The forward runs its three stages one after the other over all heads, each
 * announced as a range. */
#include "cpu/cpu_ops.h"

#include <math.h>
#include <cblas.h>

/* dst (T,D) float32, contiguous = the (T,D) block of src (dt) at `offset`, row stride ld */
static void widen_block(float *dst, const void *src, size_t offset, int T, int D, int ld,
                        tlm_dtype dt) {
    for (int t = 0; t < T; t++)
        tlm_cpu_widen(dst + (size_t)t * D, src, offset + (size_t)t * ld, D, dt);
}

/* the (T,D) block of dst (dt) at `offset`, row stride ld = src (T,D) float32 rounded to dt */
static void narrow_block(void *dst, size_t offset, int ld, const float *src, int T, int D,
                         tlm_dtype dt) {
    for (int t = 0; t < T; t++)
        tlm_cpu_narrow(dst, offset + (size_t)t * ld, src + (size_t)t * D, D, dt);
}

/* rows i of x (T,T), columns j <= i (the unmasked scores) rounded to dt, in float32 */
static void round_causal(float *x, int T, tlm_dtype dt) {
    for (int i = 0; i < T; i++) tlm_cpu_round(x + (size_t)i * T, (size_t)i + 1, dt);
}

/* what both passes derive from their arguments */
typedef struct {
    tlm_dtype dt;  /* the mode's activation dtype */
    int C;         /* H*D */
    float scale;   /* 1/sqrt(D) */
    bool lowp;     /* bf16/fp16: the heads are widened into per-thread scratch */
    size_t TD, TT; /* one head's (T,D) and (T,T) elements */
} attn_dims;

static attn_dims dims(tlm_precision p, int T, int H, int D) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    return (attn_dims){dt, H * D, 1.0f / sqrtf((float)D), dt != TLM_DTYPE_F32, (size_t)T * D, (size_t)T * T};
}

/* The (T,D) blocks of q, k, v at element `head`: the tensors themselves (fp32; row stride ld), or
 * widened into w, w + TD, w + 2 TD (bf16/fp16; row stride D). Returns the row stride. */
static int qkv_heads(const attn_dims *a, float *w, const void *q, const void *k, const void *v, size_t head, int T,
                     int D, int ld, const float **qh, const float **kh, const float **vh) {
    if (!a->lowp) {
        *qh = (const float *)q + head, *kh = (const float *)k + head, *vh = (const float *)v + head;
        return ld;
    }
    widen_block(w, q, head, T, D, ld, a->dt);
    widen_block(w + a->TD, k, head, T, D, ld, a->dt);
    widen_block(w + 2 * a->TD, v, head, T, D, ld, a->dt);
    *qh = w, *kh = w + a->TD, *vh = w + 2 * a->TD;
    return D;
}

/* The forward's three stages, each one parallel loop over the (batch, head) pairs, announced as
 * ranges (ops.h) as the CUDA backend announces its three launches, so a profile can time them
 * apart. bf16/fp16: what passes from one stage to the next is in dt in probs, exactly what the
 * single loop held rounded to dt (S, then P). */
void tlm_cpu_attention_forward(tlm_backend *be, void *out, void *probs, const void *q,
                               const void *k, const void *v, int ld, int B, int T, int H, int D,
                               tlm_precision p) {
    /* out (N,C) dt; probs (B,H,T,T) dt; q, k, v (N rows, row stride ld) dt, head h at
     * columns h*D.. */
    const attn_dims a = dims(p, T, H, D);
    const bool parallel = (size_t)B * H * T * T >= TLM_CPU_GRAIN;
    /* bf16/fp16, per thread: q, k, v (T,D), P (T,T), out (T,D) of one head, float32 */
    tlm_cpu_thread_scratch work =
        tlm_cpu_scratch_per_thread(be, a.lowp ? 4 * a.TD + a.TT : 0, "attention_forward");

    tlm_stage_begin(be, "computing attention scores"); /* S = Q K^T / sqrt(D), into probs */
#pragma omp parallel for schedule(static) if (parallel)
    for (int bh = 0; bh < B * H; bh++) {
        const size_t head = (size_t)(bh / H) * T * ld + (size_t)(bh % H) * D; /* (T,D) block of q, k, v */
        const float *qh, *kh, *vh; /* (T,D), row stride ldh */
        float *w = tlm_cpu_thread_buf(work, 0);
        const int ldh = qkv_heads(&a, w, q, k, v, head, T, D, ld, &qh, &kh, &vh);
        float *S = a.lowp ? w + 3 * a.TD : (float *)probs + (size_t)bh * a.TT;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, a.scale, qh, ldh, kh, ldh, 0.0f, S, T);
        if (a.lowp) tlm_cpu_narrow(probs, (size_t)bh * a.TT, S, a.TT, a.dt); /* S is a GEMM output: dt */
    }
    tlm_stage_end(be, "computing attention scores");

    tlm_stage_begin(be, "computing softmax"); /* P = softmax over keys j <= i of S; exact 0 where j > i */
#pragma omp parallel for schedule(static) if (parallel)
    for (int bh = 0; bh < B * H; bh++) {
        float *P = a.lowp ? tlm_cpu_thread_buf(work, 0) + 3 * a.TD : (float *)probs + (size_t)bh * a.TT;
        if (a.lowp) tlm_cpu_widen(P, probs, (size_t)bh * a.TT, a.TT, a.dt);
        for (int i = 0; i < T; i++) {
            float *restrict row = P + (size_t)i * T;
            float max = row[0];
            for (int j = 1; j <= i; j++) max = row[j] > max ? row[j] : max;
            double sum = 0.0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= i; j++) {
                row[j] = tlm_cpu_expf(row[j] - max);
                sum += (double)row[j];
            }
            float inv_sum = (float)(1.0 / sum);
            for (int j = 0; j <= i; j++) row[j] *= inv_sum;
            for (int j = i + 1; j < T; j++) row[j] = 0.0f;
        }
        if (a.lowp) { /* P is saved in a.dt and multiplies v as such */
            round_causal(P, T, a.dt);
            tlm_cpu_narrow(probs, (size_t)bh * a.TT, P, a.TT, a.dt);
        }
    }
    tlm_stage_end(be, "computing softmax");

    tlm_stage_begin(be, "final matmul"); /* out = P V, into this head's columns of out */
#pragma omp parallel for schedule(static) if (parallel)
    for (int bh = 0; bh < B * H; bh++) {
        const size_t head = (size_t)(bh / H) * T * ld + (size_t)(bh % H) * D;
        const size_t ohead = (size_t)(bh / H) * T * a.C + (size_t)(bh % H) * D; /* (T,D) block of out */
        const float *qh, *kh, *vh;
        float *w = tlm_cpu_thread_buf(work, 0);
        const int ldh = qkv_heads(&a, w, q, k, v, head, T, D, ld, &qh, &kh, &vh);
        const float *P = (const float *)probs + (size_t)bh * a.TT;
        float *oh = (float *)out + ohead;
        int ldo = a.C;
        if (a.lowp) {
            float *Pw = w + 3 * a.TD;
            tlm_cpu_widen(Pw, probs, (size_t)bh * a.TT, a.TT, a.dt);
            P = Pw;
            oh = w + 3 * a.TD + a.TT;
            ldo = D;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, P, T, vh, ldh, 0.0f, oh, ldo);
        if (a.lowp) narrow_block(out, ohead, a.C, oh, T, D, a.dt);
    }
    tlm_stage_end(be, "final matmul");
}

void tlm_cpu_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, void *dprobs,
                                const void *dout, const void *q, const void *k, const void *v,
                                const void *probs, int ld, int B, int T, int H, int D,
                                tlm_precision p) {
    /* dq, dk, dv, q, k, v (N rows, row stride ld) dt; dprobs, probs (B,H,T,T) dt;
     * dout (N,C) dt */
    const attn_dims a = dims(p, T, H, D);
    /* bf16/fp16, per thread: q, k, v, dout (T,D), P, dP (T,T), dq, dk, dv (T,D), float32 */
    tlm_cpu_thread_scratch work =
        tlm_cpu_scratch_per_thread(be, a.lowp ? 7 * a.TD + 2 * a.TT : 0, "attention_backward");
#pragma omp parallel for schedule(static) if ((size_t)B * H * T * T >= TLM_CPU_GRAIN)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t head = (size_t)b * T * ld + (size_t)h * D;  /* (T,D) block of q, k, v, dq, ... */
        size_t ohead = (size_t)b * T * a.C + (size_t)h * D;  /* (T,D) block of dout */
        const float *qh, *kh, *vh, *doh, *P; /* (T,D) row stride ldh; dout ldo; P (T,T) */
        float *dqh, *dkh, *dvh, *dP;         /* (T,D) row stride ldh; dP (T,T) */
        int ldh, ldo;
        float *w = tlm_cpu_thread_buf(work, 0);
        ldh = qkv_heads(&a, w, q, k, v, head, T, D, ld, &qh, &kh, &vh);
        if (!a.lowp) {
            dqh = (float *)dq + head, dkh = (float *)dk + head, dvh = (float *)dv + head;
            doh = (const float *)dout + ohead;
            P = (const float *)probs + (size_t)bh * a.TT;
            dP = (float *)dprobs + (size_t)bh * a.TT;
            ldo = a.C;
        } else {
            widen_block(w + 3 * a.TD, dout, ohead, T, D, a.C, a.dt);
            tlm_cpu_widen(w + 4 * a.TD, probs, (size_t)bh * a.TT, a.TT, a.dt);
            doh = w + 3 * a.TD;
            P = w + 4 * a.TD;
            dP = w + 4 * a.TD + a.TT;
            dqh = w + 4 * a.TD + 2 * a.TT, dkh = dqh + a.TD, dvh = dqh + 2 * a.TD;
            ldo = D;
        }

        /* dV = P^T dout */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T,
                    1.0f, P, T, doh, ldo, 0.0f, dvh, ldh);
        /* dP = dout V^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D,
                    1.0f, doh, ldo, vh, ldh, 0.0f, dP, T);

        if (a.lowp) round_causal(dP, T, a.dt); /* dP is a GEMM output: dt */

        /* dS = P * (dP - rowsum(P * dP)), in place in dP (softmax backward); 0 where j > i */
        for (int i = 0; i < T; i++) {
            const float *restrict p = P + (size_t)i * T;
            float *restrict ds = dP + (size_t)i * T;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j <= i; j++) dot += (double)(p[j] * ds[j]);
            float rowsum = (float)dot;
            for (int j = 0; j <= i; j++) ds[j] = p[j] * (ds[j] - rowsum);
            for (int j = i + 1; j < T; j++) ds[j] = 0.0f;
        }
        if (a.lowp) { /* dS, the operand of the GEMMs below: a.dt */
            round_causal(dP, T, a.dt);
            tlm_cpu_narrow(dprobs, (size_t)bh * a.TT, dP, a.TT, a.dt);
        }

        /* dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T,
                    a.scale, dP, T, kh, ldh, 0.0f, dqh, ldh);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T,
                    a.scale, dP, T, qh, ldh, 0.0f, dkh, ldh);
        if (a.lowp) {
            narrow_block(dq, head, ld, dqh, T, D, a.dt);
            narrow_block(dk, head, ld, dkh, T, D, a.dt);
            narrow_block(dv, head, ld, dvh, T, D, a.dt);
        }
    }
}
