/* precision.h — the precision modes, with PyTorch autocast semantics: the one place that
 * defines them, their names, and the dtype of the GEMM operands in each.
 *
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
 *         are float32. fp16 adds dynamic loss scaling (GradScaler semantics, loss_scaler.h).
 *   The CPU backend stores bf16/fp16 as their 16-bit patterns and rounds at the same points,
 *   so the two backends agree in every mode.
 *
 * Two places are slightly more precise than autocast, on purpose (README "Precision modes"):
 * the residual add happens in fp32 inside the GEMM epilogue, and the weight gradients are
 * written in fp32 directly. */
#ifndef TLM_PRECISION_H
#define TLM_PRECISION_H

#include <stdbool.h>
#include "tlm/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TLM_PRECISION_FP32 = 0,
    TLM_PRECISION_TF32 = 1,
    TLM_PRECISION_BF16 = 2,
    TLM_PRECISION_FP16 = 3,
    TLM_PRECISION_COUNT
} tlm_precision;

/* "fp32", "tf32", "bf16", "fp16" ("?" for anything else). */
const char *tlm_precision_name(tlm_precision p);

/* Parses one of the four names; false for anything else. */
bool tlm_precision_parse(const char *name, tlm_precision *out);

/* The dtype of GEMM operands and activations in a mode: F32 (fp32, tf32), BF16 or F16. */
static inline tlm_dtype tlm_precision_act_dtype(tlm_precision p) {
    return p == TLM_PRECISION_BF16 ? TLM_DTYPE_BF16 : p == TLM_PRECISION_FP16 ? TLM_DTYPE_F16 : TLM_DTYPE_F32;
}

/* The mode whose activation dtype is dt, fp32 strict for F32: FP32, BF16 or FP16 (FP32 for any
 * other dtype). For callers that hold a dtype and call a GEMM-bearing op. */
static inline tlm_precision tlm_precision_of_dtype(tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? TLM_PRECISION_BF16 : dt == TLM_DTYPE_F16 ? TLM_PRECISION_FP16 : TLM_PRECISION_FP32;
}

/* "fp32", "bf16", "fp16" for the three activation dtypes (the names the reports use), else
 * tlm_dtype_name's. */
const char *tlm_act_dtype_name(tlm_dtype dt);
/* Parses "fp32", "bf16", "fp16" into F32, BF16, F16; false for anything else. */
bool tlm_act_dtype_parse(const char *name, tlm_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
