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
#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_DEVICE_CPU = 0, TLM_DEVICE_CUDA = 1 } tlm_device;

/* Precision modes, with PyTorch autocast semantics. The one place that defines them
 * (docs/precision.md tells the same with the reasons):
 *   fp32: everything float32; GEMMs strict IEEE fp32 (PyTorch's default: no TF32).
 *   tf32: float32 storage; GEMMs on TF32 tensor cores, fp32 accumulation. The CPU backend
 *         computes it as fp32.
 *   bf16, fp16: master weights, gradients and AdamW state float32. GEMM operands (the
 *         activations and a low-precision copy of the weights, cast once per step) and GEMM
 *         outputs are bf16/fp16, accumulated in fp32; except where a GEMM's output lands in
 *         a float32 tensor: the residual stream (output_proj and w2 add into it in fp32) and
 *         the weight gradients. RMSNorm statistics, RoPE, softmax, SwiGLU's elementwise part
 *         and cross-entropy compute in fp32 from low-precision inputs and round their output
 *         to the low precision (round to nearest even). The residual stream and its gradient
 *         are float32. fp16 adds dynamic loss scaling (GradScaler semantics, model.h).
 *   The CPU backend stores bf16/fp16 as their 16-bit patterns and rounds at the same points,
 *   so the two backends agree in every mode. */
typedef enum {
    TLM_PRECISION_FP32 = 0,
    TLM_PRECISION_TF32 = 1,
    TLM_PRECISION_BF16 = 2,
    TLM_PRECISION_FP16 = 3
} tlm_precision;

/* The dtype of GEMM operands in a mode: F32 (fp32, tf32), BF16 or F16. */
static inline tlm_dtype tlm_precision_act_dtype(tlm_precision p) {
    return p == TLM_PRECISION_BF16 ? TLM_DTYPE_BF16 : p == TLM_PRECISION_FP16 ? TLM_DTYPE_F16 : TLM_DTYPE_F32;
}

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

/* float32 elements of the flash_attention_backward workspace: delta (B,H,Tq) and the fp32
 * dQ accumulator (B,H,Tq,D). */
static inline size_t tlm_flash_workspace_floats(int B, int Tq, int H, int D) {
    return (size_t)B * H * Tq * ((size_t)D + 1);
}

/* The ops. Shapes: B batch, T seq_len, N = B*T, C d_model, H num_heads, D d_head (C = H*D),
 * F d_ff, V vocab_size. `dt` is the activation dtype of the mode (tlm_precision_act_dtype):
 * a `void *` tensor holds dt elements; a `float *` tensor is always float32. Every op
 * computes in fp32 and rounds what it writes to dt (round to nearest even). */
typedef struct tlm_ops {
    /* ---- embedding: out[n,:] = wte[tokens[n],:] -------------------------------------- */
    /* out (N,C) float32 (the residual stream); tokens (N) int32 in [0,V); wte (V,C) */
    void (*embedding_forward)(tlm_backend *be, float *out, const int32_t *tokens,
                              const float *wte, int N, int C);
    /* dwte (V,C) = 0, then dwte[tokens[n],:] += dout[n,:] */
    void (*embedding_backward)(tlm_backend *be, float *dwte, const float *dout,
                               const int32_t *tokens, int N, int V, int C);

    /* ---- RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), in fp32 ------------
     * (Zhang & Sennrich 2019, eq. 4). out (N,C) dt (a GEMM operand); rstd (N) saved for
     * backward; x (N,C) float32; w (C) float32 */
    void (*rmsnorm_forward)(tlm_backend *be, void *out, float *rstd, const float *x,
                            const float *w, int N, int C, float eps, tlm_dtype dt);
    /* dx (N,C) float32 += d out/dx . dout;  dw (C) = sum_n dout[n,:] * x[n,:] * rstd[n];
     * dout (N,C) dt */
    void (*rmsnorm_backward)(tlm_backend *be, float *dx, float *dw, const void *dout,
                             const float *x, const float *w, const float *rstd, int N, int C,
                             tlm_dtype dt);

    /* ---- LayerNorm (Ba, Kiros & Hinton 2016, "Layer Normalization", eq. 4), in fp32 --------
     * Not used by the CS336 model (RMSNorm); the ToyModel of `tlm precision autocast`
     * (toymodel.h) uses it, with autocast's policy for layer_norm (an fp32-list op): the input
     * is widened to fp32, the statistics and the output are fp32.
     * out = (x - mean) * rstd * w + b, mean = mean(x), rstd = 1/sqrt(var + eps) with the biased
     * variance var = mean((x - mean)^2) (two passes), as torch.nn.LayerNorm.
     * x (N,C) dt; out (N,C) float32; w, b (C) float32 (init 1 and 0); mean, rstd (N) float32,
     * saved for backward. */
    void (*layernorm_forward)(tlm_backend *be, float *out, float *mean, float *rstd, const void *x,
                              const float *w, const float *b, int N, int C, float eps, tlm_dtype dt);
    /* With xhat = (x - mean) rstd and g = dout w (per element of row n):
     * dx (N,C) dt = rstd (g - mean(g) - xhat mean(g xhat)), computed in fp32, rounded to dt;
     * dw (C) float32 = sum_n dout xhat;  db (C) float32 = sum_n dout. All three overwritten.
     * dout (N,C) dt: the gradient of `out` as it comes back from the GEMM that read out's dt
     * copy (widening it to float32, what autocast's cast backward does, is exact, so the op
     * reads it as dt). x (N,C) dt; w (C); mean, rstd (N) from the forward. dx must not alias
     * dout or x. */
    void (*layernorm_backward)(tlm_backend *be, void *dx, float *dw, float *db, const void *dout,
                               const void *x, const float *w, const float *mean,
                               const float *rstd, int N, int C, tlm_dtype dt);

    /* ---- ReLU: out = max(x, 0), elementwise on n elements --------------------------------
     * Not used by the CS336 model; the ToyModel uses it. x, out (n) dt: ReLU keeps its input's
     * dtype (autocast leaves it alone) and is exact in every dtype; NaN stays NaN. out may
     * equal x (in place). */
    void (*relu_forward)(tlm_backend *be, void *out, const void *x, size_t n, tlm_dtype dt);
    /* dx (n) dt = 0 where x <= 0, else dout (the gradient at 0 taken as 0, and a NaN x passing
     * dout, as PyTorch's threshold_backward); dout, x (n) dt; dx may equal dout. */
    void (*relu_backward)(tlm_backend *be, void *dx, const void *dout, const void *x, size_t n,
                          tlm_dtype dt);

    /* ---- linear layer without bias: y = x W^T ------------------------------------------ */
    /* x (N,in) dt; W (out,in) dt, as nn.Linear stores it; fp32 accumulation.
     * residual == NULL: y (N,out) dt = x . W^T.
     * residual != NULL: y (N,out) float32 = residual (N,out) float32 + x . W^T (the residual
     * connection folded into the GEMM; y may equal residual). */
    void (*matmul_forward)(tlm_backend *be, void *y, const float *residual, const void *x,
                           const void *w, int N, int in, int out, tlm_dtype dt);
    /* dx (N,in) dt = dy . W (skipped when dx == NULL);  dw (out,in) float32 = dy^T . x;
     * dy (N,out) dt; x, W dt. Both outputs are overwritten. */
    void (*matmul_backward)(tlm_backend *be, void *dx, float *dw, const void *dy,
                            const void *x, const void *w, int N, int in, int out, tlm_dtype dt);

    /* ---- dst (n) dt = round(src (n) float32): weights to their GEMM copy, gradients of the
     * residual stream to GEMM operands. With dt == F32 a copy. */
    void (*cast)(tlm_backend *be, void *dst, const float *src, size_t n, tlm_dtype dt);

    /* ---- RoPE (Su et al. 2021, RoFormer, eq. 34), pairs INTERLEAVED -----------------------
     * In place on x (dt), whose rows are (B*T) with row stride ld elements; each row holds
     * nheads heads of D values starting at column 0. For pair k of a head at position t:
     * (x[2k], x[2k+1]) <- (c*x[2k] - s*x[2k+1], s*x[2k] + c*x[2k+1]), c = cos[t,k], s = sin[t,k].
     * cos, sin (T_max, D/2) float32, rows indexed by position t = n % T. */
    void (*rope_forward)(tlm_backend *be, void *x, const float *cos, const float *sin,
                         int B, int T, int nheads, int D, int ld, tlm_dtype dt);
    /* In place on dx (same layout): the transposed rotation (angle -theta). */
    void (*rope_backward)(tlm_backend *be, void *dx, const float *cos, const float *sin,
                          int B, int T, int nheads, int D, int ld, tlm_dtype dt);

    /* ---- naive causal attention (Vaswani et al. 2017, eq. 1) ------------------------------
     * q, k, v (dt): head h of row n at q[n*ld + h*D + d] (ld = 3*C when q, k, v are the thirds
     * of one fused projection). Scores S = q k^T / sqrt(D) (a GEMM: rounded to dt), masked
     * to -inf where key j > query i, P = softmax(S) in fp32 (max-subtracted), rounded to dt,
     * out = P v. out (N,C) dt, merged heads (head h in columns h*D..h*D+D-1);
     * probs (B,H,T,T) dt: P, saved for backward (exact 0 above the diagonal). */
    void (*attention_forward)(tlm_backend *be, void *out, void *probs, const void *q,
                              const void *k, const void *v, int ld, int B, int T, int H, int D,
                              tlm_dtype dt);
    /* dq, dk, dv (dt): same layout as q, k, v (row stride ld) = gradients.
     * dout (N,C) dt; dprobs (B,H,T,T) dt scratch. dP = dout v^T; dS = P*(dP - rowsum(P*dP))
     * in fp32; dq = dS k/sqrt(D); dk = dS^T q/sqrt(D); dv = P^T dout. */
    void (*attention_backward)(tlm_backend *be, void *dq, void *dk, void *dv, void *dprobs,
                               const void *dout, const void *q, const void *k, const void *v,
                               const void *probs, int ld, int B, int T, int H, int D, tlm_dtype dt);

    /* ---- FlashAttention-2 (Dao 2023, Algorithm 1 forward, Algorithm 2 backward) -------------
     * The exact semantics, layout and masking are those of tlm/flash_attention.h (the CPU
     * reference is the spec): q (B,Tq,H,D), k, v (B,Tk,H,D) dt with row stride ld_qkv (3*C for
     * the thirds of the fused projection); out (B,Tq,H*D) dt with row stride ld_out; lse (B,H,Tq)
     * float32 natural-log logsumexp of each query row (-inf for a fully masked row, whose out is
     * 0); causal masking bottom-right aligned (key j visible to query i iff j <= i + Tk - Tq),
     * tiles above the diagonal skipped. Scores, softmax and every accumulation in fp32; with
     * dt = BF16/F16 the tensor-core products take bf16/fp16 operands (P rounded to dt before
     * P V, dS before dS K and dS^T Q, as FlashAttention-2 does); with dt = F32 the products are
     * exact fp32 (no TF32, in the fp32 and the tf32 modes alike).
     * Which (D, dt) a backend has kernels for: flash_attention_check (below). The CUDA kernels
     * load rows in 16-byte pieces: q, k, v, out, dout (and dq, dk, dv) 16-byte aligned, ld_qkv
     * and ld_out multiples of 8 elements (true of every layout the model uses; violating it is
     * a programmer error, fatal with a message). */
    void (*flash_attention_forward)(tlm_backend *be, void *out, float *lse, const void *q,
                                    const void *k, const void *v, int ld_qkv, int ld_out, int B,
                                    int Tq, int Tk, int H, int D, bool causal, tlm_dtype dt);
    /* dq, dk, dv (dt): same layout as q, k, v (row stride ld_qkv), written (=); dout (B,Tq,H*D)
     * dt and out (the forward's) row stride ld_out; lse the forward's. workspace: float32 scratch
     * of tlm_flash_workspace_floats(B, Tq, H, D) elements (the CUDA backend keeps
     * delta_i = rowsum(dO_i * O_i) (B,H,Tq) and an fp32 dQ accumulator (B,H,Tq,D) there; the
     * CPU backend needs none and accepts NULL). Same shape arguments as the forward. */
    void (*flash_attention_backward)(tlm_backend *be, void *dq, void *dk, void *dv,
                                     float *workspace, const void *dout, const void *q,
                                     const void *k, const void *v, const void *out,
                                     const float *lse, int ld_qkv, int ld_out, int B, int Tq,
                                     int Tk, int H, int D, bool causal, tlm_dtype dt);
    /* TLM_OK when the two ops above have kernels for d_head D and dtype dt on this backend;
     * otherwise TLM_ERR_UNSUPPORTED with a message naming D, dt and what is supported
     * (CPU: any D >= 1 in F32, BF16, F16; CUDA: D in {16, 32, 64, 80, 128} in F32, BF16, F16).
     * Calling the ops with an unsupported (D, dt) is a programmer error (fatal). */
    tlm_status (*flash_attention_check)(tlm_backend *be, int D, tlm_dtype dt);

    /* ---- SwiGLU's elementwise part (Shazeer 2020): out = silu(a) * b ----------------------
     * ab (N, 2F) dt: a = columns 0..F-1 (w1 x), b = columns F..2F-1 (w3 x); out (N,F) dt.
     * silu(a) = a * sigmoid(a), in fp32. */
    void (*swiglu_forward)(tlm_backend *be, void *out, const void *ab, int N, int F, tlm_dtype dt);
    /* dab (N,2F) dt = [dout*b*silu'(a), dout*silu(a)], silu'(a) = s(1 + a(1-s)), s = sigmoid(a) */
    void (*swiglu_backward)(tlm_backend *be, void *dab, const void *dout, const void *ab,
                            int N, int F, tlm_dtype dt);

    /* ---- cross-entropy over V classes, via max-subtracted log-softmax, in fp32 -------------
     * logits (N,V) dt. losses (N) float32 = logsumexp(logits[n,:]) - logits[n, targets[n]];
     * lse (N) float32 = logsumexp, saved. */
    void (*cross_entropy_forward)(tlm_backend *be, float *losses, float *lse, const void *logits,
                                  const int32_t *targets, int N, int V, tlm_dtype dt);
    /* dlogits (N,V) dt = dloss * (softmax(logits[n,:]) - onehot(targets[n])); may alias logits.
     * dloss = 1/N for the mean loss (times the loss scale in fp16). */
    void (*cross_entropy_backward)(tlm_backend *be, void *dlogits, const void *logits,
                                   const float *lse, const int32_t *targets, int N, int V,
                                   float dloss, tlm_dtype dt);

    /* ---- AdamW, CS336 version (Loshchilov & Hutter 2019, Algorithm 2) ---------------------
     * One pass over the flat float32 buffers, n elements; step t >= 1:
     * m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  a_t = lr sqrt(1-b2^t)/(1-b1^t);
     * p -= a_t m/(sqrt(v)+eps);  p -= lr*wd*p.
     * params_lp != NULL: also params_lp (n) dt = round(p), the GEMM copy of the weights
     * refreshed in the same pass (bf16/fp16; saves a separate cast of every weight). */
    void (*adamw_step)(tlm_backend *be, float *params, const float *grads, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t, void *params_lp, tlm_dtype dt);

    /* ---- loss scaling (fp16): grads (n) *= inv_scale in place; returns the number of
     * elements that are inf or NaN after the multiply (0: the step may proceed). Synchronizes. */
    size_t (*grad_unscale)(tlm_backend *be, float *grads, size_t n, float inv_scale);
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
    /* bytes of device memory in use as the device reports it (CUDA: total - free from
     * cudaMemGetInfo, every process and the context included); NULL on the CPU. The benchmark
     * sets it against the tracked allocator's figures to show they agree. */
    size_t (*device_memory_used)(tlm_backend *be);

    /* CUDA graphs: the ops issued between graph_begin and graph_end (on the backend's stream,
     * with no synchronization or host copy among them) are captured, not run; graph_end
     * returns a replayable graph (NULL, message set, on failure); graph_launch replays it;
     * graph_destroy frees it. NULL on backends without graphs (CPU). */
    void (*graph_begin)(tlm_backend *be);
    void *(*graph_end)(tlm_backend *be);
    void (*graph_launch)(tlm_backend *be, void *graph);
    void (*graph_destroy)(tlm_backend *be, void *graph);
    bool use_graphs;   /* set by the caller: the model captures its passes once and replays them */

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
