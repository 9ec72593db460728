/* fuzz_npy.c — libFuzzer harness of tlm_npy_read: the input is the file. On success the array must
 * hold no more data than the file (numel * dtype size <= size) and its numel must be the product of
 * its shape; it is then converted to float32 or to token ids (both directions of the dtype check),
 * and its shape checked as [batch, context_length]; then written back and read again, the same array.
 * On failure: a message naming the file. */
#include "fuzz_common.h"
#include "tlm/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_input(data, size, ".npy");
    tlm_array a;
    if (tlm_npy_read(path, &a) != TLM_OK) {
        fuzz_require_message(path);
        fuzz_require(a.data == NULL);
        return 0;
    }
    fuzz_require(a.ndim >= 0 && a.ndim <= TLM_MAX_DIMS && a.numel >= 0 && a.data != NULL);
    fuzz_require(fuzz_numel(a.ndim, a.shape) == a.numel);
    const uint64_t nbytes = (uint64_t)a.numel * tlm_dtype_size(a.dtype);
    fuzz_require(nbytes <= size);
    volatile unsigned char sink = 0;
    for (uint64_t i = 0; i < nbytes; i++) sink ^= ((const unsigned char *)a.data)[i]; /* ASan: inside the buffer */
    (void)sink;
    float *f = malloc((size_t)a.numel * sizeof(float) + 1);
    int32_t *ids = malloc((size_t)a.numel * sizeof(int32_t) + 1);
    fuzz_require(f && ids);
    const tlm_status sf = tlm_array_to_f32(&a, f, path), st = tlm_array_to_tokens(&a, ids, 50257, path);
    if (fuzz_is_float(a.dtype)) fuzz_require(sf == TLM_OK && st == TLM_ERR_FORMAT);
    else fuzz_require(sf == TLM_ERR_FORMAT && (st == TLM_OK || st == TLM_ERR_INVALID_ARGUMENT));
    free(f);
    free(ids);
    const tlm_status ss = tlm_array_check_shape(&a, 2, 1 << 20, "[batch, context_length]", path);
    fuzz_require(ss == TLM_OK || strstr(tlm_last_error(), "expected shape [batch, context_length]"));
    /* tlm writes what it read and reads back the same array */
    const char *out = fuzz_output_path(path);
    fuzz_require(tlm_npy_write(out, a.dtype, a.ndim, a.shape, a.data) == TLM_OK);
    tlm_array b;
    fuzz_require(tlm_npy_read(out, &b) == TLM_OK);
    fuzz_require(b.dtype == a.dtype && b.ndim == a.ndim && b.numel == a.numel && !memcmp(b.shape, a.shape, sizeof a.shape));
    fuzz_require(!memcmp(b.data, a.data, (size_t)nbytes));
    tlm_array_free(&b);
    unlink(out);
    tlm_array_free(&a);
    return 0;
}
