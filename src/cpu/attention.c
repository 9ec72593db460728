/* attention.c — naive causal scaled dot-product attention on the CPU (Vaswani et al. 2017,
 * "Attention Is All You Need", eq. 1): P = softmax(mask(Q K^T / sqrt(D))), out = P V, the
 * probabilities P saved (B,H,T,T) for the backward. One (batch, head) pair per work item; its
 * products are OpenBLAS SGEMMs reading q, k, v in place through their row stride ld (OpenBLAS
 * runs single-threaded when called inside an OpenMP parallel region). */
#include "cpu/cpu_ops.h"

#include <math.h>
#include <cblas.h>

void tlm_cpu_attention_forward(tlm_backend *be, float *out, float *probs, const float *q,
                               const float *k, const float *v, int ld, int B, int T, int H, int D) {
    /* out (N,C); probs (B,H,T,T); q, k, v (N rows, row stride ld), head h at columns h*D.. */
    int C = H * D;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for schedule(static) if ((size_t)B * H * T * T >= TLM_CPU_GRAIN)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t head = (size_t)b * T * ld + (size_t)h * D;
        const float *qh = q + head, *kh = k + head, *vh = v + head; /* (T,D), row stride ld */
        float *P = probs + (size_t)bh * T * T;                      /* (T,T) */
        float *oh = out + (size_t)b * T * C + (size_t)h * D;        /* (T,D), row stride C */

        /* S = Q K^T / sqrt(D), into P */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D,
                    scale, qh, ld, kh, ld, 0.0f, P, T);

        /* P = softmax over keys j <= i of S (max-subtracted); exact 0 where j > i */
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

        /* out = P V, into this head's columns of out */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T,
                    1.0f, P, T, vh, ld, 0.0f, oh, C);
    }
}

void tlm_cpu_attention_backward(tlm_backend *be, float *dq, float *dk, float *dv, float *dprobs,
                                const float *dout, const float *q, const float *k, const float *v,
                                const float *probs, int ld, int B, int T, int H, int D) {
    /* dq, dk, dv, q, k, v (N rows, row stride ld); dprobs, probs (B,H,T,T); dout (N,C) */
    int C = H * D;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for schedule(static) if ((size_t)B * H * T * T >= TLM_CPU_GRAIN)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t head = (size_t)b * T * ld + (size_t)h * D;
        const float *qh = q + head, *kh = k + head, *vh = v + head; /* (T,D), row stride ld */
        float *dqh = dq + head, *dkh = dk + head, *dvh = dv + head; /* (T,D), row stride ld */
        const float *doh = dout + (size_t)b * T * C + (size_t)h * D; /* (T,D), row stride C */
        const float *P = probs + (size_t)bh * T * T;                 /* (T,T) */
        float *dP = dprobs + (size_t)bh * T * T;                     /* (T,T) */

        /* dV = P^T dout */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T,
                    1.0f, P, T, doh, C, 0.0f, dvh, ld);
        /* dP = dout V^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D,
                    1.0f, doh, C, vh, ld, 0.0f, dP, T);

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

        /* dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T,
                    scale, dP, T, kh, ld, 0.0f, dqh, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T,
                    scale, dP, T, qh, ld, 0.0f, dkh, ld);
    }
}
