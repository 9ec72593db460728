/* fuzz_safetensors.c — libFuzzer harness of tlm_safetensors_read: the input is the file. On success
 * every tensor must be found by its name, lie inside the file, and the tensors must tile the data
 * section exactly (the reference's rule); every float tensor is converted to float32 (ASan checks
 * each byte it reads), every metadata entry looked up, and the whole written back and read again
 * (round_trip). On failure: a message naming the file and a cleared struct. */
#include "fuzz_common.h"
#include "tlm/safetensors.h"

/* tlm writes what it read and reads back the same tensors, and the same metadata but "format",
 * which the writer sets to "pt" */
static void round_trip(const char *path, const tlm_safetensors *st) {
    const int n = st->num_tensors;
    tlm_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    tlm_st_meta *m = calloc((size_t)st->num_meta + 1, sizeof *m);
    fuzz_require(e && m);
    int nm = 0;
    for (int i = 0; i < n; i++) {
        const tlm_st_tensor *t = &st->tensors[i];
        e[i] = (tlm_st_entry){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    for (int i = 0; i < st->num_meta; i++)
        if (strcmp(st->meta[i].key, "format") != 0) m[nm++] = st->meta[i];
    const char *out = fuzz_output_path(path);
    fuzz_require(tlm_safetensors_write_meta(out, e, n, m, nm) == TLM_OK);
    tlm_safetensors back;
    fuzz_require(tlm_safetensors_read(out, &back) == TLM_OK);
    fuzz_require(back.num_tensors == n && back.num_meta == nm + 1);
    fuzz_require(!strcmp(tlm_safetensors_meta(&back, "format"), "pt"));
    for (int i = 0; i < nm; i++) fuzz_require(!strcmp(tlm_safetensors_meta(&back, m[i].key), m[i].value));
    for (int i = 0; i < n; i++) {
        const tlm_st_tensor *t = &st->tensors[i], *b = &back.tensors[i]; /* written in this order */
        fuzz_require(!strcmp(b->name, t->name) && b->dtype == t->dtype && b->ndim == t->ndim && b->numel == t->numel);
        fuzz_require(!memcmp(b->shape, t->shape, sizeof t->shape));
        fuzz_require(!memcmp(b->data, t->data, (size_t)t->numel * tlm_dtype_size(t->dtype)));
    }
    tlm_safetensors_free(&back);
    unlink(out);
    free(e);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_input(data, size, ".safetensors");
    tlm_safetensors st;
    if (tlm_safetensors_read(path, &st) != TLM_OK) {
        fuzz_require_message(path);
        fuzz_require(st.buffer == NULL && st.tensors == NULL && st.meta == NULL && st.num_tensors == 0);
        return 0;
    }
    fuzz_require(st.buffer_size == size && size >= 8);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | data[i];
    const unsigned char *begin = (const unsigned char *)st.buffer + 8 + header, *end = (const unsigned char *)st.buffer + size;
    uint64_t covered = 0;
    for (int i = 0; i < st.num_tensors; i++) {
        const tlm_st_tensor *t = &st.tensors[i];
        fuzz_require(t->name[0] && tlm_safetensors_find(&st, t->name) == t);
        fuzz_require(t->ndim >= 0 && t->ndim <= TLM_MAX_DIMS && fuzz_numel(t->ndim, t->shape) == t->numel);
        const uint64_t nbytes = (uint64_t)t->numel * tlm_dtype_size(t->dtype);
        const unsigned char *p = t->data;
        fuzz_require(p >= begin && p <= end && nbytes <= (uint64_t)(end - p));
        covered += nbytes;
        float *f = malloc((size_t)t->numel * sizeof(float) + 1);
        fuzz_require(f != NULL);
        const tlm_status s = tlm_st_tensor_to_f32(t, f);
        fuzz_require(fuzz_is_float(t->dtype) ? s == TLM_OK : s == TLM_ERR_FORMAT);
        free(f);
    }
    fuzz_require(covered == (uint64_t)(end - begin)); /* no overlap, no gap, no trailing byte */
    for (int i = 0; i < st.num_meta; i++)
        fuzz_require(tlm_safetensors_meta(&st, st.meta[i].key) == st.meta[i].value);
    round_trip(path, &st);
    tlm_safetensors_free(&st);
    return 0;
}
