/* safetensors.h — read and write the safetensors format (Hugging Face, format spec:
 * 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw little-endian data).
 * tlm writes the CS336 state-dict names (model.h) so PyTorch's safetensors.torch.load_file
 * reads tlm's weights and the reverse. */
#ifndef TLM_SAFETENSORS_H
#define TLM_SAFETENSORS_H

#include <stdint.h>
#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *name;
    tlm_dtype dtype;
    int ndim;
    int64_t shape[TLM_MAX_DIMS];
    int64_t numel;
    const void *data;    /* points into the file's buffer; little-endian, maybe unaligned */
} tlm_st_tensor;

typedef struct {
    int num_tensors;
    tlm_st_tensor *tensors;
    void *buffer;        /* the whole file */
    size_t buffer_size;
} tlm_safetensors;

/* Reads the whole file and checks it: header length within the file, valid JSON, every
 * entry has a known dtype, a shape of non-negative dims, data_offsets inside the data
 * section and equal in length to numel * dtype size. Errors: TLM_ERR_IO (cannot open/read),
 * TLM_ERR_FORMAT (malformed or truncated; the message names the file and the tensor). */
tlm_status tlm_safetensors_read(const char *path, tlm_safetensors *out);

/* The tensor called `name`, or NULL. */
const tlm_st_tensor *tlm_safetensors_find(const tlm_safetensors *st, const char *name);

void tlm_safetensors_free(tlm_safetensors *st);

/* Converts a tensor's data (any float dtype: F32, F64, F16, BF16) to float32 into dst
 * (numel floats; F64 beyond the float range becomes +-inf). TLM_ERR_FORMAT for a non-float
 * dtype. */
tlm_status tlm_st_tensor_to_f32(const tlm_st_tensor *t, float *dst);

typedef struct {
    const char *name;
    tlm_dtype dtype;
    int ndim;
    int64_t shape[TLM_MAX_DIMS];
    const void *data;    /* numel * tlm_dtype_size(dtype) bytes, host memory */
} tlm_st_entry;

/* One string entry of the header's "__metadata__" object (key and value are copied). */
typedef struct {
    const char *key, *value;
} tlm_st_meta;

/* Writes n tensors to `path` through the one file writer (output.h: a temporary file, fsync,
 * rename: never a half-written file; an existing `path` is left untouched on failure), with
 * "__metadata__" holding {"format": "pt"} and the nmeta entries of `meta`. The header is written
 * by cJSON. Errors: IO; INVALID_ARGUMENT for a duplicate, empty or "__metadata__" name, a negative
 * dim, ndim outside 0..8, NULL data, a metadata entry without key or value, a refused output path
 * (output.h); OUT_OF_MEMORY. */
tlm_status tlm_safetensors_write_meta(const char *path, const tlm_st_entry *entries, int n, const tlm_st_meta *meta,
                                      int nmeta);
/* The same with no metadata but the format. */
tlm_status tlm_safetensors_write(const char *path, const tlm_st_entry *entries, int n);

#ifdef __cplusplus
}
#endif
#endif
