/* attention_bench.h — `tlm attention`, the attention benchmark (docs/experiments.md, attention; CS336
 * assignment 2, pytorch_attention and flash_benchmarking): one case = one implementation
 * (naive or flash) at (batch, heads, seq, d_head, precision mode, causal). The mode is what the
 * model's would be (precision.h): its dtype holds q, k, v, dout and the outputs; tf32 keeps
 * them fp32 and runs the products on TF32 tensor cores (naive: TF32 GEMMs; flash: the TF32
 * FlashAttention kernels where the backend has them, ops.def). Random inputs (seeded normals,
 * never zeros), `warmup` untimed forward+backward passes, then `iters` timed forward passes and
 * `iters` timed backward passes, each synchronized; the backward passes reuse the outputs of
 * the last forward (what autograd saves). Memory from tlm's tracked allocator.
 *
 * FLOPs, FlashAttention's convention (Dao 2023, benchmark scripts): forward 4*b*h*s^2*d (the
 * two s x s x d products, 2 FLOPs per multiply-add), halved when causal; backward 2.5x the
 * forward (five products instead of two). */
#ifndef TLM_ATTENTION_BENCH_H
#define TLM_ATTENTION_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/backend.h"
#include "tlm/dtype.h"
#include "tlm/model.h" /* tlm_attention: NAIVE or FLASH (AUTO is not a benchmark case) */
#include "tlm/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FLOPs of one forward / one backward pass, FlashAttention's convention (see above). */
double tlm_attn_flops_forward(int batch, int heads, int seq, int d_head, bool causal);
double tlm_attn_flops_backward(int batch, int heads, int seq, int d_head, bool causal);

typedef struct {
    tlm_attention impl;            /* TLM_ATTENTION_NAIVE or TLM_ATTENTION_FLASH */
    int batch, heads, seq, d_head; /* >= 1; d_head even */
    tlm_precision precision;       /* fp32, tf32, bf16 or fp16: the tensors are of
                                      tlm_precision_act_dtype(precision) */
    bool causal;
    int warmup, iters;             /* warmup >= 0, iters >= 1 */
    uint64_t seed;
} tlm_attn_case;

typedef enum {
    TLM_ATTN_OK = 0,
    TLM_ATTN_OOM,          /* an allocation failed: note names it and the bytes asked for */
    TLM_ATTN_UNSUPPORTED,  /* this implementation cannot run the case here: note says why */
    TLM_ATTN_SKIPPED       /* not run by choice (set by the caller, e.g. seq > --max-seq) */
} tlm_attn_status;

const char *tlm_attn_status_name(tlm_attn_status s); /* "ok", "OOM", "unsupported", "skipped" */

typedef struct {
    tlm_attn_status status;
    char note[256];            /* why, when status != OK */
    size_t oom_bytes;          /* OOM: the bytes the failed allocation asked for */
    double fwd_ms, bwd_ms;     /* mean of the timed, synchronized passes */
    double fwdbwd_ms;          /* fwd_ms + bwd_ms */
    double tflops_fwd, tflops_bwd;
    size_t mem_before_bwd;     /* be->mem_current_total after the forward (inputs, dout, the
                                  forward's outputs and what it saves), before the backward */
    size_t peak_bytes;         /* tracked allocator peak over the case */
} tlm_attn_result;

/* Runs one case on `be`, freeing everything it allocated. Out of memory and unsupported
 * cases come back in r->status (TLM_OK returned); a case that is invalid (sizes < 1, odd
 * d_head, iters < 1, a mode outside the four) returns TLM_ERR_INVALID_ARGUMENT with the message set. */
tlm_status tlm_attention_bench_run(tlm_backend *be, const tlm_attn_case *c, tlm_attn_result *r);

#ifdef __cplusplus
}
#endif
#endif
