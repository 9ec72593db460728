/* identity.c — a file's size and XXH3-128 hash, whole or sampled (identity.h). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/input.h"
#include "tlm/identity.h"

static void to_hex(XXH128_hash_t h, char hex[33]) {
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

/* reads n bytes at offset off into buf, all of them or an error naming the file */
static tlm_status read_at(FILE *f, const char *path, uint64_t off, void *buf, size_t n) {
    if (fseeko(f, (off_t)off, SEEK_SET) != 0)
        return tlm_fail(TLM_ERR_IO, "%s: cannot seek to byte %llu: %s", path, (unsigned long long)off, strerror(errno));
    if (fread(buf, 1, n, f) != n)
        return tlm_fail(TLM_ERR_IO, "%s: %s while reading byte %llu", path, ferror(f) ? strerror(errno) : "cut short",
                        (unsigned long long)off);
    return TLM_OK;
}

/* XXH3-128 over the whole file (sampled false) or the sampled blocks; the state is fed the size first */
static tlm_status hash_file(const char *path, bool sample_large, tlm_file_identity *id) {
    memset(id, 0, sizeof *id);
    FILE *f = NULL;
    uint64_t size = 0;
    TLM_TRY(tlm_input_open(path, &f, &size));
    const size_t chunk = (size_t)1 << 20;
    unsigned char *buf = malloc(chunk);
    XXH3_state_t *st = XXH3_createState();
    tlm_status s = buf && st ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    if (s == TLM_OK) XXH3_128bits_reset(st);
    id->bytes = size;
    id->sampled = sample_large && size > TLM_IDENTITY_FULL_MAX;
    if (s == TLM_OK && id->sampled) {
        XXH3_128bits_update(st, &size, sizeof size);
        const uint64_t b = TLM_IDENTITY_BLOCK_BYTES, span = size - b; /* the last block starts at span */
        for (int i = 0; s == TLM_OK && i < TLM_IDENTITY_BLOCKS; i++) {
            const uint64_t off = span / (TLM_IDENTITY_BLOCKS - 1) * (uint64_t)i;
            s = read_at(f, path, i == TLM_IDENTITY_BLOCKS - 1 ? span : off, buf, (size_t)b);
            if (s == TLM_OK) XXH3_128bits_update(st, buf, (size_t)b);
        }
    }
    for (uint64_t done = 0; s == TLM_OK && !id->sampled && done < size;) {
        const size_t n = size - done < chunk ? (size_t)(size - done) : chunk;
        s = read_at(f, path, done, buf, n);
        if (s == TLM_OK) XXH3_128bits_update(st, buf, n);
        done += n;
    }
    if (s == TLM_OK) to_hex(XXH3_128bits_digest(st), id->hash);
    XXH3_freeState(st);
    free(buf);
    fclose(f);
    return s;
}

tlm_status tlm_file_identify(const char *path, tlm_file_identity *id) { return hash_file(path, true, id); }

tlm_status tlm_file_digest(const char *path, char hex[33], uint64_t *bytes) {
    tlm_file_identity id;
    const tlm_status s = hash_file(path, false, &id);
    snprintf(hex, 33, "%s", s == TLM_OK ? id.hash : "");
    if (bytes) *bytes = id.bytes;
    return s;
}

void tlm_bytes_digest(const void *data, size_t n, char hex[33]) { to_hex(XXH3_128bits(data, n), hex); }

bool tlm_file_identity_same(const tlm_file_identity *a, const tlm_file_identity *b) {
    return a->bytes == b->bytes && a->sampled == b->sampled && strcmp(a->hash, b->hash) == 0;
}

void tlm_file_identity_diff(const tlm_file_identity *a, const tlm_file_identity *b, char *buf, size_t n) {
    if (a->bytes != b->bytes)
        snprintf(buf, n, "size %llu bytes vs %llu bytes", (unsigned long long)a->bytes, (unsigned long long)b->bytes);
    else if (!tlm_file_identity_same(a, b))
        snprintf(buf, n, "the same size, %llu bytes, different content", (unsigned long long)a->bytes);
    else snprintf(buf, n, "the same");
}
