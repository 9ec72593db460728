/* dtype.c — element sizes and names of file dtypes; float32 <-> fp16/bf16 conversions. */
#include "tlm/dtype.h"
#include "io/convert.h"

#include <string.h>

#include "tlm/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tlm reads and writes little-endian files with memcpy: it needs a little-endian host"
#endif

static const struct {
    size_t size;
    const char *name;
} dtype_table[TLM_DTYPE_NUM] = {
    [TLM_DTYPE_F32] = {4, "F32"}, [TLM_DTYPE_F64] = {8, "F64"},  [TLM_DTYPE_F16] = {2, "F16"},
    [TLM_DTYPE_BF16] = {2, "BF16"}, [TLM_DTYPE_I64] = {8, "I64"}, [TLM_DTYPE_I32] = {4, "I32"},
    [TLM_DTYPE_U16] = {2, "U16"}, [TLM_DTYPE_U8] = {1, "U8"},
};

size_t tlm_dtype_size(tlm_dtype t) {
    TLM_ASSERT((unsigned)t < TLM_DTYPE_NUM);
    return dtype_table[t].size;
}

const char *tlm_dtype_name(tlm_dtype t) {
    TLM_ASSERT((unsigned)t < TLM_DTYPE_NUM);
    return dtype_table[t].name;
}

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float f32_from_bits(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t tlm_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
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

float tlm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {                                  /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13)); /* inf, NaN (payload kept) */
    return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t tlm_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep sign and top payload, make quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);               /* round to nearest even; overflow gives inf */
    return (uint16_t)(x >> 16);
}

float tlm_bf16_to_f32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

void tlm_f16_to_f32_array(const void *src, float *dst, int64_t n) {
    const unsigned char *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = tlm_f16_to_f32(h);
    }
}

void tlm_bf16_to_f32_array(const void *src, float *dst, int64_t n) {
    const unsigned char *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, p + 2 * i, 2);
        dst[i] = tlm_bf16_to_f32(b);
    }
}

void tlm_f32_to_f16_array(const float *src, void *dst, int64_t n) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = tlm_f32_to_f16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void tlm_f32_to_bf16_array(const float *src, void *dst, int64_t n) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = tlm_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &b, 2);
    }
}
