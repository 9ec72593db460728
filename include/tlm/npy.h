/* npy.h — NumPy .npy arrays (format versions 1.0, 2.0 and 3.0; C order, little-endian)
 * and token files: a flat array of token ids as .npy (uint16, int32, int64) or a raw
 * .bin of uint16 (the np.memmap(path, dtype=np.uint16) convention of CS336). */
#ifndef TLM_NPY_H
#define TLM_NPY_H

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
 * Bytes after the data are ignored, as numpy does.
 * Errors: TLM_ERR_IO; TLM_ERR_FORMAT for a bad magic, a malformed header, fortran_order
 * True, an unsupported dtype (named), or data shorter than the shape says. */
tlm_status tlm_npy_read(const char *path, tlm_array *out);

/* Writes a .npy file (version 1.0) via a temporary name and rename. Errors: TLM_ERR_IO;
 * UNSUPPORTED for BF16 (numpy has no bfloat16); INVALID_ARGUMENT for a bad shape. */
tlm_status tlm_npy_write(const char *path, tlm_dtype dtype, int ndim, const int64_t *shape,
                         const void *data);

void tlm_array_free(tlm_array *a);

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
 * checking every id < vocab_size. Errors as above; a .bin of odd byte length is FORMAT;
 * vocab_size < 1 is INVALID_ARGUMENT. */
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
