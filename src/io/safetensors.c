/* safetensors.c — read and write the safetensors format.
 * Layout (https://github.com/huggingface/safetensors): u64 little-endian header length N,
 * N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}, then the data section; offsets are relative to its start.
 * The writer follows the Rust reference: the header is padded with spaces to a multiple of
 * 8 bytes, tensors are stored contiguously in the order given, and "__metadata__" is
 * {"format": "pt"}, which safetensors.torch.load_file expects. */
#include "tlm/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "tlm/output.h"
#include "io/convert.h"

/* The Rust reference refuses headers above 100 MB; tlm's largest are a few tens of KB. */
#define ST_MAX_HEADER 100000000ull

/* ---- reading ------------------------------------------------------------------------------ */

static tlm_status read_whole_file(const char *path, void **buf_out, size_t *size_out) {
    *buf_out = NULL;
    *size_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return tlm_fail(TLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return tlm_fail(TLM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        return tlm_fail(TLM_ERR_IO, "%s: is a directory", path);
    }
    size_t size = (size_t)st.st_size;
    void *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes to read it", path, size);
    }
    errno = 0;
    size_t got = fread(buf, 1, size, f);
    int e = errno, had_error = ferror(f);
    fclose(f);
    if (got != size) {
        free(buf);
        if (had_error)
            return tlm_fail(TLM_ERR_IO, "%s: read error: %s", path, strerror(e ? e : EIO));
        return tlm_fail(TLM_ERR_IO, "%s: file shrank while being read (%zu of %zu bytes)", path, got,
                        size);
    }
    *buf_out = buf;
    *size_out = size;
    return TLM_OK;
}

static int parse_dtype(const char *s, tlm_dtype *out) {
    for (int t = 0; t < TLM_DTYPE_NUM; t++) {
        if (strcmp(s, tlm_dtype_name((tlm_dtype)t)) == 0) {
            *out = (tlm_dtype)t;
            return 1;
        }
    }
    return 0;
}

/* A JSON number that is an integer in [0, 2^64). 0 if not. cJSON holds numbers as doubles,
 * exact up to 2^53; larger values cannot match a real file's size and fail the later checks. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Fills t from one header entry; data_len: bytes in the data section. */
static tlm_status parse_entry(const char *path, const cJSON *e, const unsigned char *data,
                              uint64_t data_len, tlm_st_tensor *t) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
    const cJSON *jdtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *joffs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    const char *missing = !jdtype ? "dtype" : !jshape ? "shape" : !joffs ? "data_offsets" : NULL;
    if (missing)
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': no \"%s\"", path, name, missing);

    if (!cJSON_IsString(jdtype))
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", path, name);
    if (!parse_dtype(jdtype->valuestring, &t->dtype))
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: tensor '%s': unknown dtype \"%s\" (tlm reads F32 F64 F16 BF16 I64 I32 U16 U8)",
                        path, name, jdtype->valuestring);

    if (!cJSON_IsArray(jshape))
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': shape is not a JSON array", path, name);
    int ndim = cJSON_GetArraySize(jshape);
    if (ndim > TLM_MAX_DIMS)
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': %d dimensions (tlm allows at most %d)", path,
                        name, ndim, TLM_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int overflow = 0, i = 0;
    const cJSON *jd;
    cJSON_ArrayForEach(jd, jshape) {
        uint64_t d;
        if (!json_uint(jd, &d)) {
            if (cJSON_IsNumber(jd) && jd->valuedouble < 0)
                return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': negative dimension %.17g in shape",
                                path, name, jd->valuedouble);
            return tlm_fail(TLM_ERR_FORMAT,
                            "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        }
        t->shape[i++] = (int64_t)d;
        overflow |= __builtin_mul_overflow(numel, d, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)tlm_dtype_size(t->dtype), &nbytes);
    if (overflow || numel > (uint64_t)INT64_MAX)
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': shape's element count overflows 64 bits",
                        path, name);
    t->numel = (int64_t)numel;

    uint64_t begin, end;
    if (!cJSON_IsArray(joffs) || cJSON_GetArraySize(joffs) != 2 ||
        !json_uint(cJSON_GetArrayItem(joffs, 0), &begin) || !json_uint(cJSON_GetArrayItem(joffs, 1), &end))
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets is not [begin, end] of two non-negative integers",
                        path, name);
    if (begin > end)
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] begin after end", path,
                        name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] not inside the %llu-byte data section "
                        "(truncated file?)",
                        path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_len);
    if (end - begin != nbytes)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets span %llu bytes but %s shape with %llu elements "
                        "needs %llu",
                        path, name, (unsigned long long)(end - begin), tlm_dtype_name(t->dtype),
                        (unsigned long long)numel, (unsigned long long)nbytes);
    t->data = data + begin;
    t->name = strdup(name);
    if (!t->name) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    return TLM_OK;
}

static tlm_status parse_file(const char *path, tlm_safetensors *st) {
    const unsigned char *buf = st->buffer;
    size_t size = st->buffer_size;
    if (size < 8)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: %zu bytes, shorter than the 8-byte header length of a safetensors file",
                        path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > size - 8)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: header length %llu exceeds the file size %zu (not safetensors, or truncated)",
                        path, (unsigned long long)n, size);
    if (n > ST_MAX_HEADER)
        return tlm_fail(TLM_ERR_FORMAT, "%s: header length %llu is absurd (limit %llu)", path,
                        (unsigned long long)n, ST_MAX_HEADER);
    const char *hdr = (const char *)buf + 8;
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &parse_end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= hdr && at <= hdr + n ? (long)(at - hdr) : -1;
        return tlm_fail(TLM_ERR_FORMAT, "%s: header is not valid JSON (error near byte %ld of %llu)",
                        path, off, (unsigned long long)n);
    }
    tlm_status s = TLM_OK;
    for (const char *p = parse_end; p && p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = tlm_fail(TLM_ERR_FORMAT, "%s: header has bytes after its JSON (at byte %ld of %llu)",
                         path, (long)(p - hdr), (unsigned long long)n);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = tlm_fail(TLM_ERR_FORMAT, "%s: header is JSON but not an object", path);
        goto done;
    }
    int count = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") != 0) count++;
    }
    st->tensors = calloc(count ? (size_t)count : 1, sizeof *st->tensors);
    if (!st->tensors) {
        s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto done;
    }
    const unsigned char *data = buf + 8 + n;
    uint64_t data_len = (uint64_t)size - 8 - n;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        for (int j = 0; j < st->num_tensors; j++) {
            if (strcmp(st->tensors[j].name, e->string) == 0) {
                s = tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path,
                             e->string);
                goto done;
            }
        }
        s = parse_entry(path, e, data, data_len, &st->tensors[st->num_tensors]);
        if (s != TLM_OK) goto done;
        st->num_tensors++;
    }
done:
    cJSON_Delete(root);
    return s;
}

tlm_status tlm_safetensors_read(const char *path, tlm_safetensors *out) {
    TLM_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    TLM_TRY(read_whole_file(path, &out->buffer, &out->buffer_size));
    tlm_status s = parse_file(path, out);
    if (s != TLM_OK) tlm_safetensors_free(out);
    return s;
}

const tlm_st_tensor *tlm_safetensors_find(const tlm_safetensors *st, const char *name) {
    for (int i = 0; i < st->num_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

void tlm_safetensors_free(tlm_safetensors *st) {
    if (!st) return;
    if (st->tensors)
        for (int i = 0; i < st->num_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    free(st->buffer);
    memset(st, 0, sizeof *st);
}

tlm_status tlm_st_tensor_to_f32(const tlm_st_tensor *t, float *dst) {
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case TLM_DTYPE_F32:
        if (t->numel) memcpy(dst, src, (size_t)t->numel * sizeof(float));
        return TLM_OK;
    case TLM_DTYPE_F64:
        for (int64_t i = 0; i < t->numel; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return TLM_OK;
    case TLM_DTYPE_F16: tlm_f16_to_f32_array(src, dst, t->numel); return TLM_OK;
    case TLM_DTYPE_BF16: tlm_bf16_to_f32_array(src, dst, t->numel); return TLM_OK;
    default:
        return tlm_fail(TLM_ERR_FORMAT, "tensor '%s' has dtype %s, not a float dtype (F32 F64 F16 BF16)",
                        t->name, tlm_dtype_name(t->dtype));
    }
}

/* ---- writing ------------------------------------------------------------------------------ */

static tlm_status entry_nbytes(const char *path, const tlm_st_entry *e, uint64_t *nbytes) {
    if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: a tensor has an empty or reserved name '%s'", path,
                        e->name ? e->name : "(null)");
    if ((unsigned)e->dtype >= TLM_DTYPE_NUM)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': invalid dtype %d", path, e->name,
                        (int)e->dtype);
    if (e->ndim < 0 || e->ndim > TLM_MAX_DIMS)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': ndim %d outside [0, %d]", path,
                        e->name, e->ndim, TLM_MAX_DIMS);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': negative dimension %lld", path,
                            e->name, (long long)e->shape[d]);
        overflow |= __builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel);
    }
    overflow |= __builtin_mul_overflow(numel, (uint64_t)tlm_dtype_size(e->dtype), nbytes);
    if (overflow)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': size overflows", path, e->name);
    if (*nbytes && !e->data)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': data is NULL", path, e->name);
    return TLM_OK;
}

/* the header as cJSON prints it (tensors in the order given, after __metadata__), padded with spaces
 * to a multiple of 8 bytes; integers as raw JSON numbers, so that any size is exact */
static tlm_status build_header(const char *path, const tlm_st_entry *entries, int n, const tlm_st_meta *meta,
                               int nmeta, char **out, size_t *out_len) {
    *out = NULL;
    cJSON *root = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(root, "__metadata__");
    bool ok = root && md && cJSON_AddStringToObject(md, "format", "pt");
    for (int i = 0; ok && i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) {
            cJSON_Delete(root);
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: a metadata entry without key or value", path);
        }
        ok = cJSON_AddStringToObject(md, meta[i].key, meta[i].value) != NULL;
    }
    uint64_t offset = 0;
    char num[32];
    for (int i = 0; ok && i < n; i++) {
        const tlm_st_entry *e = &entries[i];
        uint64_t nbytes = 0;
        tlm_status s = entry_nbytes(path, e, &nbytes);
        for (int j = 0; s == TLM_OK && j < i; j++)
            if (strcmp(entries[j].name, e->name) == 0)
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' given twice", path, e->name);
        if (s != TLM_OK) {
            cJSON_Delete(root);
            return s;
        }
        cJSON *t = cJSON_AddObjectToObject(root, e->name), *shape, *offs;
        ok = t && cJSON_AddStringToObject(t, "dtype", tlm_dtype_name(e->dtype)) &&
             (shape = cJSON_AddArrayToObject(t, "shape")) && (offs = cJSON_AddArrayToObject(t, "data_offsets"));
        for (int d = 0; ok && d < e->ndim; d++) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)e->shape[d]);
            ok = cJSON_AddItemToArray(shape, cJSON_CreateRaw(num));
        }
        snprintf(num, sizeof num, "%llu", (unsigned long long)offset);
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateRaw(num));
        offset += nbytes;
        snprintf(num, sizeof num, "%llu", (unsigned long long)offset);
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateRaw(num));
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory building the header", path);
    size_t len = strlen(text);
    const size_t padded = (len + 7) / 8 * 8; /* the data section starts 8-byte aligned */
    char *p = realloc(text, padded + 1);
    if (!p) {
        free(text);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory building the header", path);
    }
    memset(p + len, ' ', padded - len);
    p[padded] = '\0';
    *out = p;
    *out_len = padded;
    return TLM_OK;
}

tlm_status tlm_safetensors_write_meta(const char *path, const tlm_st_entry *entries, int n, const tlm_st_meta *meta,
                                      int nmeta) {
    TLM_ASSERT(path && n >= 0 && (entries || n == 0) && nmeta >= 0 && (meta || nmeta == 0));
    char *hdr;
    size_t hdr_len = 0;
    TLM_TRY(build_header(path, entries, n, meta, nmeta, &hdr, &hdr_len));
    tlm_output *w;
    tlm_status s = tlm_output_open(&w, path);
    if (s != TLM_OK) {
        free(hdr);
        return s;
    }
    FILE *f = tlm_output_file(w);
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
    fwrite(len_le, 1, 8, f); /* a failed write is reported by the commit */
    fwrite(hdr, 1, hdr_len, f);
    free(hdr);
    for (int i = 0; i < n; i++) {
        uint64_t nbytes = 0;
        entry_nbytes(path, &entries[i], &nbytes); /* checked by build_header */
        if (nbytes) fwrite(entries[i].data, 1, (size_t)nbytes, f);
    }
    return tlm_output_commit(w);
}

tlm_status tlm_safetensors_write(const char *path, const tlm_st_entry *entries, int n) {
    return tlm_safetensors_write_meta(path, entries, n, NULL, 0);
}
