/* dtype.c — element sizes and names of the dtypes (dtype.h); float32 <-> fp16/bf16 conversions of
 * (maybe unaligned) buffers and any float dtype to float32 (convert.h). */
#include "tlm/dtype.h"
#include "core/convert.h"

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

/* The scalar conversions are the inline ones of convert.h. */

/* file buffers may be unaligned: every 16-bit value goes through memcpy */
static void widen_array(const void *src, float *dst, int64_t n, float (*widen)(uint16_t)) {
    const unsigned char *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = widen(h);
    }
}

static void narrow_array(const float *src, void *dst, int64_t n, uint16_t (*narrow)(float)) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = narrow(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void tlm_f16_to_f32_array(const void *src, float *dst, int64_t n) { widen_array(src, dst, n, tlm_f16_to_f32); }
void tlm_bf16_to_f32_array(const void *src, float *dst, int64_t n) { widen_array(src, dst, n, tlm_bf16_to_f32); }
void tlm_f32_to_f16_array(const float *src, void *dst, int64_t n) { narrow_array(src, dst, n, tlm_f32_to_f16); }
void tlm_f32_to_bf16_array(const float *src, void *dst, int64_t n) { narrow_array(src, dst, n, tlm_f32_to_bf16); }

tlm_status tlm_dtype_to_f32(const void *data, tlm_dtype t, int64_t n, float *dst, const char *label) {
    const unsigned char *src = data;
    switch (t) {
    case TLM_DTYPE_F32:
        if (n) memcpy(dst, src, (size_t)n * sizeof(float));
        return TLM_OK;
    case TLM_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return TLM_OK;
    case TLM_DTYPE_F16: tlm_f16_to_f32_array(src, dst, n); return TLM_OK;
    case TLM_DTYPE_BF16: tlm_bf16_to_f32_array(src, dst, n); return TLM_OK;
    default:
        return tlm_fail(TLM_ERR_FORMAT, "%s: dtype %s is not a float dtype (F32 F64 F16 BF16)", label,
                        tlm_dtype_name(t));
    }
}
