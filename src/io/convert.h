/* convert.h — conversions between float32 and the 16-bit float formats for file tensors
 * (internal). The scalar conversions (tlm_f32_to_f16, tlm_f16_to_f32, tlm_f32_to_bf16,
 * tlm_bf16_to_f32: round to nearest even, exact widening, inf/NaN/subnormals as IEEE 754) are
 * the inline ones of core/convert.h, shared with the CPU backend.
 * The array forms here take the 16-bit side as bytes that may be unaligned (file buffers),
 * little-endian (tlm only builds on little-endian hosts); n is a count of elements. */
#ifndef TLM_IO_CONVERT_H
#define TLM_IO_CONVERT_H

#include <stdint.h>
#include "core/convert.h"
#include "tlm/dtype.h"
#include "tlm/status.h"

/* dst[i] = widen(src[i]); src: n 16-bit values, maybe unaligned. */
void tlm_f16_to_f32_array(const void *src, float *dst, int64_t n);
void tlm_bf16_to_f32_array(const void *src, float *dst, int64_t n);
/* dst[i] = narrow(src[i]); dst: n 16-bit values, maybe unaligned. */
void tlm_f32_to_f16_array(const float *src, void *dst, int64_t n);
void tlm_f32_to_bf16_array(const float *src, void *dst, int64_t n);

/* dst[i] = float32(src[i]) for n elements of a float dtype (F32, F64, F16, BF16; F64 beyond the
 * float range becomes +-inf), src maybe unaligned. TLM_ERR_FORMAT for an integer dtype, the
 * message starting with `label` ("tensor 'w'", "a.npy"). Behind tlm_st_tensor_to_f32 and
 * tlm_array_to_f32. */
tlm_status tlm_io_to_f32(const void *src, tlm_dtype t, int64_t n, float *dst, const char *label);

#endif
