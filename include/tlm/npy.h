/* npy.h — NumPy .npy arrays (format versions 1.0, 2.0 and 3.0; C order, little-endian)
 * and token files: a flat array of token ids as .npy (uint16, int32, int64) or a raw
 * .bin of uint16 (the np.memmap(path, dtype=np.uint16) convention of CS336). */
#ifndef TLM_NPY_H
#define TLM_NPY_H

#include <stddef.h>
#include <stdint.h>
#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    tlm_dtype dtype;
    int ndim;
    int64_t shape[TLM_MAX_DIMS];
    int64_t numel;
    void *data;          /* owned, numel * tlm_dtype_size(dtype) bytes */
} tlm_array;

/* Reads a .npy file. Supported descr: '<f4' '<f8' '<i4' '<i8' '<u2' '|u1' '<u1' '<f2'.
 * Bytes after the data are ignored, as numpy does. Every size the header states is checked
 * against the file's size before anything is allocated: a header claiming more data than the
 * file holds allocates nothing.
 * Errors: TLM_ERR_IO (cannot open or read; a directory, pipe or device); TLM_ERR_FORMAT for a bad
 * magic (a safetensors file is named as such), a malformed header, fortran_order True, an
 * unsupported dtype (named), or data shorter than the shape says (the message gives the shape and
 * both byte counts). */
tlm_status tlm_npy_read(const char *path, tlm_array *out);

/* Writes a .npy file (version 1.0) via a temporary name and rename. Errors: TLM_ERR_IO;
 * UNSUPPORTED for BF16 (numpy has no bfloat16); INVALID_ARGUMENT for a bad shape. */
tlm_status tlm_npy_write(const char *path, tlm_dtype dtype, int ndim, const int64_t *shape,
                         const void *data);

void tlm_array_free(tlm_array *a);

/* Longest text tlm_shape_format writes, NUL included (8 dimensions of 20 digits). */
#define TLM_SHAPE_STRLEN 192

/* Writes a shape as "[2, 3]" ("[]" for 0-d) into buf (cap bytes; TLM_SHAPE_STRLEN always
 * suffice) and returns buf. For messages. */
const char *tlm_shape_format(int ndim, const int64_t *shape, char *buf, size_t cap);

/* Checks that a has `ndim` dimensions, each in [1, max_dim]. `expected` describes the shape
 * ("[batch, context_length]"), `what` names the array ("inputs X.npy"). TLM_ERR_INVALID_ARGUMENT
 * otherwise, the message naming both shapes: "inputs X.npy: expected shape [batch,
 * context_length] (2 dimensions, each in [1, 1048576]), got [0, 17]: an empty array". */
tlm_status tlm_array_check_shape(const tlm_array *a, int ndim, int64_t max_dim, const char *expected,
                                 const char *what);

/* Converts a float array (F32, F64, F16, BF16) to float32 into dst (a->numel floats; F64
 * beyond the float range becomes +-inf). `what` names the array in messages ("a.npy").
 * TLM_ERR_FORMAT for an integer dtype: "a.npy: dtype I32 is not a float dtype (F32 F64 F16 BF16)". */
tlm_status tlm_array_to_f32(const tlm_array *a, float *dst, const char *what);

/* Converts an integer array to int32 token ids, checking every id is in [0, vocab_size).
 * `what` names the array in messages ("inputs X.npy"). TLM_ERR_FORMAT for a float dtype,
 * TLM_ERR_INVALID_ARGUMENT for an id out of range (the message gives the id, its index and
 * vocab_size). dst: a->numel int32. */
tlm_status tlm_array_to_tokens(const tlm_array *a, int32_t *dst, int vocab_size, const char *what);

/* A token file loaded whole: ids as int32. */
typedef struct {
    int32_t *ids;
    int64_t n;
} tlm_tokens;

/* Loads a .npy (1-D, integer) or a raw .bin (uint16, by extension ".bin") token file,
 * checking every id < vocab_size. The ids take 4 bytes a token in memory: at most 4x the file's
 * size is allocated, and only after the header's shape is checked against the file's size.
 * Errors as tlm_npy_read; FORMAT for a .npy that is not 1-D or not integer (the message gives the
 * shape or dtype) and a .bin of odd byte length; vocab_size < 1 is INVALID_ARGUMENT. */
tlm_status tlm_tokens_load(const char *path, int vocab_size, tlm_tokens *out);
void tlm_tokens_free(tlm_tokens *t);

/* Which rows of a global batch one process draws (data parallelism): the global batch of step
 * `step` has B * world_size rows; rank r in [0, world_size) takes rows r*B .. r*B + B - 1. Ranks
 * thus draw disjoint rows, deterministically, and one process with a batch of B * world_size
 * draws exactly the union. {seed, step, 0, 1}: one process alone. */
typedef struct {
    uint64_t seed;
    int64_t step;
    int rank, world_size;
} tlm_batch_draw;

/* Samples this rank's B rows of a batch as CS336's get_batch does: each row a random start
 * offset s in [0, n - T - 1] (global row g of step `step` from the generator stream
 * (seed, step << 32 | g), rng.h), inputs[b,:] = ids[s..s+T-1], targets[b,:] = ids[s+1..s+T].
 * TLM_ERR_INVALID_ARGUMENT when n < T + 1, B or T < 1, world_size < 1 or rank outside it. */
tlm_status tlm_tokens_get_batch(const tlm_tokens *t, int B, int T, tlm_batch_draw draw, int32_t *inputs,
                                int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
