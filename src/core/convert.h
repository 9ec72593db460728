/* convert.h — float32 <-> bf16 / fp16 conversions (internal): the scalar ones `static inline` so
 * that hot loops (the CPU backend's bf16/fp16 paths) inline them; the array forms for buffers that
 * may be unaligned (file tensors, src/io) and any float dtype to float32 (src/core/dtype.c).
 *
 * fp16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; max 65504, smallest
 *       subnormal 2^-24). bf16: bfloat16, the top 16 bits of a float32 (8 exponent bits,
 *       7 mantissa bits).
 * Narrowing (float32 -> 16 bits) rounds to nearest, ties to even, as IEEE 754 and PyTorch's
 * `.half()` / `.bfloat16()` do: values past the largest finite 16-bit value (after
 * rounding) become +-inf, tiny values become subnormals or +-0, NaN stays NaN (made quiet,
 * sign and top payload bits kept), +-inf stays +-inf. Widening (16 bits -> float32) is exact.
 * A 16-bit value is held as its bit pattern, uint16_t.
 *
 * fp16 goes through the compiler's _Float16 where the CPU converts in hardware (x86 F16C,
 * which -march=native enables on every AVX2 machine: one vcvtps2ph / vcvtph2ps, exact, 4x
 * faster than the bit manipulation); elsewhere (no F16C, where GCC would call libgcc and be
 * 2x slower than the bit manipulation; C++ before GCC 13) through the portable functions
 * below, which compute the same bits (test_cpu_ops compares the two). */
#ifndef TLM_CORE_CONVERT_H
#define TLM_CORE_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
#define TLM_CONVERT_RESTRICT __restrict__
#else
#define TLM_CONVERT_RESTRICT restrict
#endif

#if defined(__FLT16_MAX__) && defined(__F16C__) && !defined(__cplusplus)
#define TLM_F16_HARDWARE 1
#else
#define TLM_F16_HARDWARE 0
#endif

static inline uint32_t tlm_f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float tlm_f32_from_bits(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ---- bf16 ------------------------------------------------------------------------------- */

static inline uint16_t tlm_f32_to_bf16(float f) {
    uint32_t x = tlm_f32_bits(f);
    uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u); /* nearest even; overflow gives inf */
    uint32_t quiet_nan = x | 0x00400000u;                /* NaN: sign, top payload, quiet bit */
    return (uint16_t)(((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded) >> 16);
}

static inline float tlm_bf16_to_f32(uint16_t b) { return tlm_f32_from_bits((uint32_t)b << 16); }

/* ---- fp16, portable --------------------------------------------------------------------- */

static inline uint16_t tlm_f32_to_f16_portable(float f) {
    uint32_t x = tlm_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                       /* inf or NaN */
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* quiet NaN, top payload */
    }
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  /* >= 65520 = 65504 + half an ulp: rounds to inf */
    if (ax >= 0x38800000u) {                       /* >= 2^-14: a normal half */
        uint32_t r = ax - 0x38000000u;             /* rebias the exponent: 127 - 15 = 112 */
        r += 0x0fffu + ((r >> 13) & 1u);           /* round to nearest even on the 13 dropped bits;
                                                      a mantissa carry moves into the exponent */
        return (uint16_t)(sign | (r >> 13));
    }
    /* a subnormal half m * 2^-24, or zero: value = mant24 * 2^(e - 150) = (mant24 >> shift) * 2^-24 */
    uint32_t e = ax >> 23;
    if (e == 0) return sign;                       /* float subnormals are far below 2^-25 */
    uint32_t shift = 126u - e;                     /* 14 (e = 112) and up */
    if (shift > 25u) return sign;                  /* below 2^-26: rounds to 0 (and keeps the shift < 32) */
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++; /* q = 0x400 is the smallest normal: fine */
    return (uint16_t)(sign | q);
}

static inline float tlm_f16_to_f32_portable(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {                                  /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return tlm_f32_from_bits(tlm_f32_bits(v) | sign);
    }
    if (e == 31) return tlm_f32_from_bits(sign | 0x7f800000u | (m << 13)); /* inf, NaN (payload kept) */
    return tlm_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- fp16 ------------------------------------------------------------------------------- */

static inline uint16_t tlm_f32_to_f16(float f) {
#if TLM_F16_HARDWARE
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, sizeof b);
    return b;
#else
    return tlm_f32_to_f16_portable(f);
#endif
}

static inline float tlm_f16_to_f32(uint16_t b) {
#if TLM_F16_HARDWARE
    _Float16 h;
    memcpy(&h, &b, sizeof h);
    return (float)h;
#else
    return tlm_f16_to_f32_portable(b);
#endif
}

/* ---- arrays (aligned uint16_t; n elements): dst[i] = convert(src[i]); bf16 when `bf16`, else
 * fp16 (the branch is outside the loops, which vectorise) ------------------------------------- */

static inline void tlm_16_to_f32_n(const uint16_t *TLM_CONVERT_RESTRICT src, float *TLM_CONVERT_RESTRICT dst,
                                   size_t n, int bf16) {
    if (bf16) for (size_t i = 0; i < n; i++) dst[i] = tlm_bf16_to_f32(src[i]);
    else for (size_t i = 0; i < n; i++) dst[i] = tlm_f16_to_f32(src[i]);
}

static inline void tlm_f32_to_16_n(const float *TLM_CONVERT_RESTRICT src, uint16_t *TLM_CONVERT_RESTRICT dst,
                                   size_t n, int bf16) {
    if (bf16) for (size_t i = 0; i < n; i++) dst[i] = tlm_f32_to_bf16(src[i]);
    else for (size_t i = 0; i < n; i++) dst[i] = tlm_f32_to_f16(src[i]);
}

/* ---- buffers that may be unaligned (src/core/dtype.c) -------------------------------------------
 * The 16-bit side is bytes that may be unaligned (file buffers), little-endian (tlm only builds on
 * little-endian hosts); n is a count of elements. Same roundings as the scalar functions above. */

#ifdef __cplusplus
extern "C" {
#endif
/* dst[i] = widen(src[i]); src: n 16-bit values, maybe unaligned. */
void tlm_f16_to_f32_array(const void *src, float *dst, int64_t n);
void tlm_bf16_to_f32_array(const void *src, float *dst, int64_t n);
/* dst[i] = narrow(src[i]); dst: n 16-bit values, maybe unaligned. */
void tlm_f32_to_f16_array(const float *src, void *dst, int64_t n);
void tlm_f32_to_bf16_array(const float *src, void *dst, int64_t n);

/* dst[i] = float32(src[i]) for n elements of a float dtype (F32, F64, F16, BF16; F64 beyond the
 * float range becomes +-inf), src maybe unaligned. TLM_ERR_FORMAT for an integer dtype, the
 * message starting with `label` ("tensor 'w'", "a.npy"). Behind tlm_st_tensor_to_f32 and
 * tlm_array_to_f32 (src/io). */
tlm_status tlm_dtype_to_f32(const void *src, tlm_dtype t, int64_t n, float *dst, const char *label);
#ifdef __cplusplus
}
#endif

#endif
