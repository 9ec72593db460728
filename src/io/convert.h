/* convert.h — conversions between float32 and the 16-bit float formats (internal).
 *
 * fp16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; max 65504, smallest
 *       subnormal 2^-24). bf16: bfloat16, the top 16 bits of a float32 (8 exponent bits,
 *       7 mantissa bits).
 * Narrowing (float32 -> 16 bits) rounds to nearest, ties to even, as IEEE 754 and PyTorch's
 * `.half()` / `.bfloat16()` do: values past the largest finite 16-bit value (after
 * rounding) become +-inf, tiny values become subnormals or +-0, NaN stays NaN (made quiet,
 * sign kept), +-inf stays +-inf. Widening (16 bits -> float32) is exact.
 * The array forms take the 16-bit side as bytes that may be unaligned (file buffers),
 * little-endian (tlm only builds on little-endian hosts); n is a count of elements. */
#ifndef TLM_IO_CONVERT_H
#define TLM_IO_CONVERT_H

#include <stdint.h>

uint16_t tlm_f32_to_f16(float f);
float tlm_f16_to_f32(uint16_t h);
uint16_t tlm_f32_to_bf16(float f);
float tlm_bf16_to_f32(uint16_t b);

/* dst[i] = widen(src[i]); src: n 16-bit values, maybe unaligned. */
void tlm_f16_to_f32_array(const void *src, float *dst, int64_t n);
void tlm_bf16_to_f32_array(const void *src, float *dst, int64_t n);
/* dst[i] = narrow(src[i]); dst: n 16-bit values, maybe unaligned. */
void tlm_f32_to_f16_array(const float *src, void *dst, int64_t n);
void tlm_f32_to_bf16_array(const float *src, void *dst, int64_t n);

#endif
