/* dtype.h — element types of tensors (in files: safetensors, .npy; on backends: F32, BF16, F16), their
 * sizes and names (src/core/dtype.c); conversions between them: src/core/convert.h. */
#ifndef TLM_DTYPE_H
#define TLM_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TLM_DTYPE_F32 = 0,
    TLM_DTYPE_F64,
    TLM_DTYPE_F16,   /* IEEE binary16 */
    TLM_DTYPE_BF16,  /* bfloat16: the top 16 bits of a float32 */
    TLM_DTYPE_I64,
    TLM_DTYPE_I32,
    TLM_DTYPE_U16,
    TLM_DTYPE_U8,
    TLM_DTYPE_NUM
} tlm_dtype;

size_t tlm_dtype_size(tlm_dtype t);        /* bytes per element */
const char *tlm_dtype_name(tlm_dtype t);   /* safetensors spelling: "F32", "BF16", "I64", ... */

#define TLM_MAX_DIMS 8

#ifdef __cplusplus
}
#endif
#endif
