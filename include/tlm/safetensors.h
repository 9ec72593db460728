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

/* One string entry of the header's "__metadata__" object. */
typedef struct {
    const char *key, *value;
} tlm_st_meta;

typedef struct {
    int num_tensors;
    tlm_st_tensor *tensors; /* in the header's order */
    int num_meta;
    tlm_st_meta *meta;      /* "__metadata__", in the header's order; owned copies */
    void *buffer;           /* the whole file */
    size_t buffer_size;
} tlm_safetensors;

/* Reads the whole file (a regular file: not a pipe) and checks it as the Rust reference does
 * (huggingface/safetensors, SafeTensors::read_metadata and Metadata::validate):
 * - the header length at most 10^8 bytes and within the file; the header UTF-8 JSON (no control
 *   bytes, no escaped NUL "\u0000", which a C string cannot hold), an object, nothing after it but
 *   whitespace;
 * - every tensor has a non-empty name given once, a known dtype, a shape of at most 8 integer
 *   dims in [0, 2^63), data_offsets [begin, end] with end - begin = numel * dtype size, every
 *   size computed with overflow checks;
 * - sorted by data_offsets, the tensors tile the data section exactly: no overlap, no gap, no
 *   byte after the last one;
 * - "__metadata__", if present, null or an object of strings, each key once.
 * Errors: TLM_ERR_IO (cannot open/read; a directory, pipe or device), TLM_ERR_FORMAT (malformed
 * or truncated: the message names the file and the tensor; a .npy file is named as such). */
tlm_status tlm_safetensors_read(const char *path, tlm_safetensors *out);

/* The tensor called `name`, or NULL. */
const tlm_st_tensor *tlm_safetensors_find(const tlm_safetensors *st, const char *name);

/* The value of `key` in the file's "__metadata__", or NULL. */
const char *tlm_safetensors_meta(const tlm_safetensors *st, const char *key);

void tlm_safetensors_free(tlm_safetensors *st);

/* Converts a tensor's data (any float dtype: F32, F64, F16, BF16) to float32 into dst
 * (numel floats; F64 beyond the float range becomes +-inf). TLM_ERR_FORMAT for a non-float
 * dtype ("tensor 'w': dtype I64 is not a float dtype ..."; a tensor without a name is called
 * "an unnamed tensor": for a .npy array, tlm_array_to_f32 of npy.h names the file). */
tlm_status tlm_st_tensor_to_f32(const tlm_st_tensor *t, float *dst);

typedef struct {
    const char *name;
    tlm_dtype dtype;
    int ndim;
    int64_t shape[TLM_MAX_DIMS];
    const void *data;    /* numel * tlm_dtype_size(dtype) bytes, host memory */
} tlm_st_entry;

/* Writes n tensors to `path` through the one file writer (output.h: a temporary file, fsync,
 * rename: never a half-written file; an existing `path` is left untouched on failure), with
 * "__metadata__" holding {"format": "pt"} and the nmeta entries of `meta`. The header is written
 * by cJSON. Errors: IO; INVALID_ARGUMENT for a duplicate, empty, "__metadata__" or non-UTF-8 name, a
 * negative dim, ndim outside 0..8, NULL data, a metadata entry without key or value or not UTF-8, a
 * metadata key given twice or the key "format" (tlm's own), a refused output path
 * (output.h); OUT_OF_MEMORY. */
tlm_status tlm_safetensors_write_meta(const char *path, const tlm_st_entry *entries, int n, const tlm_st_meta *meta,
                                      int nmeta);
/* The same with no metadata but the format. */
tlm_status tlm_safetensors_write(const char *path, const tlm_st_entry *entries, int n);

#ifdef __cplusplus
}
#endif
#endif
