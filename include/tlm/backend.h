/* backend.h — the interface every compute backend (CPU, CUDA) implements, and the
 * tracked allocator that all backend memory goes through.
 *
 * The model (model.h) is written once against this interface: it owns no arithmetic,
 * only the order of the ops and the buffers they read and write. A backend supplies
 * raw memory (host memory for CPU, device memory for CUDA) and the ops below.
 *
 * Conventions for every op:
 * - Pointers are backend memory (device pointers on CUDA). dtype float32 unless noted;
 *   token ids are int32.
 * - Activations are row-major. N = batch_size * seq_len rows (row n = b*seq_len + t).
 * - A "+=" in a comment means the op accumulates into its output; "=" overwrites it.
 * - Ops do not fail on valid input: shapes are checked by the model beforehand. A backend
 *   call that fails anyway (a CUDA launch error) is fatal (tlm_fatal), with the op's name.
 * - Ops may run asynchronously; synchronize() waits for all of them. */
#ifndef TLM_BACKEND_H
#define TLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_DEVICE_CPU = 0, TLM_DEVICE_CUDA = 1 } tlm_device;

/* How GEMMs compute (PyTorch semantics). fp32: strict IEEE fp32 (PyTorch's default, no
 * TF32); tf32: fp32 storage, TF32 tensor-core GEMMs with fp32 accumulation (the CPU backend
 * computes tf32 as fp32). bf16/fp16 (autocast) come with the mixed-precision work. */
typedef enum { TLM_PRECISION_FP32 = 0, TLM_PRECISION_TF32 = 1 } tlm_precision;

/* What an allocation holds; memory is accounted per tag (current and peak bytes). */
typedef enum {
    TLM_MEM_PARAMETERS = 0,
    TLM_MEM_GRADIENTS,
    TLM_MEM_OPTIMIZER,    /* AdamW first and second moments */
    TLM_MEM_ACTIVATIONS,  /* saved for backward, and the backward pass's scratch */
    TLM_MEM_WORKSPACE,    /* everything else: RoPE tables, tokens, losses, library workspaces */
    TLM_MEM_NUM_TAGS
} tlm_mem_tag;

const char *tlm_mem_tag_name(tlm_mem_tag tag); /* "parameters", "gradients", ... */

typedef struct tlm_backend tlm_backend;

/* The ops. Shapes: B batch, T seq_len, N = B*T, C d_model, H num_heads, D d_head (C = H*D),
 * F d_ff, V vocab_size. */
typedef struct tlm_ops {
    /* ---- embedding: out[n,:] = wte[tokens[n],:] -------------------------------------- */
    /* out (N,C); tokens (N) int32 in [0,V); wte (V,C) */
    void (*embedding_forward)(tlm_backend *be, float *out, const int32_t *tokens,
                              const float *wte, int N, int C);
    /* dwte (V,C) = 0, then dwte[tokens[n],:] += dout[n,:] */
    void (*embedding_backward)(tlm_backend *be, float *dwte, const float *dout,
                               const int32_t *tokens, int N, int V, int C);

    /* ---- RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32 ------------
     * (Zhang & Sennrich 2019, eq. 4). out (N,C); rstd (N) saved for backward; x (N,C); w (C) */
    void (*rmsnorm_forward)(tlm_backend *be, float *out, float *rstd, const float *x,
                            const float *w, int N, int C, float eps);
    /* dx (N,C) += d out/dx . dout;  dw (C) = sum_n dout[n,:] * x[n,:] * rstd[n] */
    void (*rmsnorm_backward)(tlm_backend *be, float *dx, float *dw, const float *dout,
                             const float *x, const float *w, const float *rstd, int N, int C);

    /* ---- linear layer without bias: y = x W^T ------------------------------------------ */
    /* y (N,out) = x (N,in) . W^T, W (out,in) as nn.Linear stores it */
    void (*matmul_forward)(tlm_backend *be, float *y, const float *x, const float *w,
                           int N, int in, int out);
    /* dx (N,in) = dy . W  (skipped when dx == NULL);  dw (out,in) = dy^T . x */
    void (*matmul_backward)(tlm_backend *be, float *dx, float *dw, const float *dy,
                            const float *x, const float *w, int N, int in, int out);

    /* ---- RoPE (Su et al. 2021, RoFormer, eq. 34), pairs INTERLEAVED -----------------------
     * In place on x, whose rows are (B*T) with row stride ld floats; each row holds
     * nheads heads of D values starting at column 0. For pair k of a head at position t:
     * (x[2k], x[2k+1]) <- (c*x[2k] - s*x[2k+1], s*x[2k] + c*x[2k+1]), c = cos[t,k], s = sin[t,k].
     * cos, sin (T_max, D/2), rows indexed by position t = n % T. */
    void (*rope_forward)(tlm_backend *be, float *x, const float *cos, const float *sin,
                         int B, int T, int nheads, int D, int ld);
    /* In place on dx (same layout): the transposed rotation (angle -theta). */
    void (*rope_backward)(tlm_backend *be, float *dx, const float *cos, const float *sin,
                          int B, int T, int nheads, int D, int ld);

    /* ---- naive causal attention (Vaswani et al. 2017, eq. 1) ------------------------------
     * q, k, v: head h of row n at q[n*ld + h*D + d] (ld = 3*C when q, k, v are the thirds of
     * one fused projection). Scores S = q k^T / sqrt(D), masked to -inf where key j > query i,
     * P = softmax(S) (max-subtracted), out = P v.
     * out (N,C) merged heads (head h in columns h*D..h*D+D-1); probs (B,H,T,T) saved P. */
    void (*attention_forward)(tlm_backend *be, float *out, float *probs, const float *q,
                              const float *k, const float *v, int ld, int B, int T, int H, int D);
    /* dq, dk, dv: same layout as q, k, v (row stride ld) = gradients.
     * dout (N,C); dprobs (B,H,T,T) scratch. dP = dout v^T; dS = P*(dP - rowsum(P*dP));
     * dq = dS k/sqrt(D); dk = dS^T q/sqrt(D); dv = P^T dout. */
    void (*attention_backward)(tlm_backend *be, float *dq, float *dk, float *dv, float *dprobs,
                               const float *dout, const float *q, const float *k, const float *v,
                               const float *probs, int ld, int B, int T, int H, int D);

    /* ---- SwiGLU's elementwise part (Shazeer 2020): out = silu(a) * b ----------------------
     * ab (N, 2F): a = columns 0..F-1 (w1 x), b = columns F..2F-1 (w3 x); out (N,F).
     * silu(a) = a * sigmoid(a). */
    void (*swiglu_forward)(tlm_backend *be, float *out, const float *ab, int N, int F);
    /* dab (N,2F) = [dout*b*silu'(a), dout*silu(a)], silu'(a) = s(1 + a(1-s)), s = sigmoid(a) */
    void (*swiglu_backward)(tlm_backend *be, float *dab, const float *dout, const float *ab,
                            int N, int F);

    /* ---- residual connection: out (n) = x + y;  add: dst (n) += src ---------------------- */
    void (*residual_forward)(tlm_backend *be, float *out, const float *x, const float *y, size_t n);
    void (*add_inplace)(tlm_backend *be, float *dst, const float *src, size_t n);

    /* ---- cross-entropy over V classes, via max-subtracted log-softmax ----------------------
     * losses (N) = logsumexp(logits[n,:]) - logits[n, targets[n]]; lse (N) = logsumexp saved. */
    void (*cross_entropy_forward)(tlm_backend *be, float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int N, int V);
    /* dlogits (N,V) = dloss * (softmax(logits[n,:]) - onehot(targets[n])); may alias logits.
     * dloss = 1/N for the mean loss (times a loss scale, later). */
    void (*cross_entropy_backward)(tlm_backend *be, float *dlogits, const float *logits,
                                   const float *lse, const int32_t *targets, int N, int V,
                                   float dloss);

    /* ---- AdamW, CS336 version (Loshchilov & Hutter 2019, Algorithm 2) ---------------------
     * One pass over the flat buffers, n elements; step t >= 1:
     * m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  a_t = lr sqrt(1-b2^t)/(1-b1^t);
     * p -= a_t m/(sqrt(v)+eps);  p -= lr*wd*p. */
    void (*adamw_step)(tlm_backend *be, float *params, const float *grads, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t);
} tlm_ops;

struct tlm_backend {
    const char *name;  /* "cpu", "cuda" */
    tlm_device device;
    const tlm_ops *ops;
    void *impl;        /* backend-private state (cuBLAS handle, stream, ...) */
    tlm_precision precision; /* read by the GEMMs at each call; default TLM_PRECISION_FP32 */

    /* profiler ranges (NVTX on CUDA); NULL where the backend has none. Names are copied. */
    void (*range_push)(tlm_backend *be, const char *name);
    void (*range_pop)(tlm_backend *be);

    /* raw memory: the allocator below calls these; never call them directly */
    void *(*raw_alloc)(tlm_backend *be, size_t bytes); /* NULL when out of memory */
    void (*raw_free)(tlm_backend *be, void *ptr);
    void (*destroy)(tlm_backend *be);                  /* frees impl */

    /* copies between host memory and backend memory; memset of backend memory */
    void (*copy_to_backend)(tlm_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*copy_to_host)(tlm_backend *be, void *dst_host, const void *src, size_t bytes);
    void (*memset_zero)(tlm_backend *be, void *dst, size_t bytes);
    void (*synchronize)(tlm_backend *be);

    /* accounting, kept by the allocator (backend.c) */
    size_t mem_current[TLM_MEM_NUM_TAGS];
    size_t mem_peak[TLM_MEM_NUM_TAGS];
    size_t mem_current_total, mem_peak_total;
    struct tlm_allocation *allocations; /* live allocations (list), for free() and reports */
};

/* Creates the CPU backend (always present). threads <= 0: OpenMP's default. */
tlm_status tlm_backend_cpu_create(tlm_backend **out, int threads);

/* Creates the CUDA backend on GPU `device_index`. TLM_ERR_UNSUPPORTED when tlm was built
 * without CUDA or no GPU is present (the message says which). */
tlm_status tlm_backend_cuda_create(tlm_backend **out, int device_index);

/* True when tlm was built with CUDA and at least one GPU is visible. */
bool tlm_cuda_available(void);
const char *tlm_cuda_device_name(tlm_backend *be); /* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */

void tlm_backend_destroy(tlm_backend *be); /* frees every allocation still live, then the backend */

/* The tracked allocator. Every byte of backend memory goes through it.
 * Returns NULL and sets the message (TLM_ERR_OUT_OF_MEMORY, naming `name` and the bytes asked
 * for) when out of memory; the caller returns TLM_ERR_OUT_OF_MEMORY. `name` is copied
 * (e.g. "layers.3.attn.probs"). bytes == 0 returns a unique non-NULL pointer. */
void *tlm_alloc(tlm_backend *be, size_t bytes, tlm_mem_tag tag, const char *name);
void tlm_free(tlm_backend *be, void *ptr); /* NULL is a no-op */

/* Resets the per-tag and total peaks to the current values. */
void tlm_mem_reset_peak(tlm_backend *be);

#ifdef __cplusplus
}
#endif
#endif
