/* safetensors.c — read and write the safetensors format.
 * Layout (https://github.com/huggingface/safetensors): u64 little-endian header length N,
 * N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}, then the data section; offsets are relative to its start.
 * The reader follows the Rust reference's checks (safetensors/src/tensor.rs, read_metadata and
 * Metadata::validate): N at most 10^8 and within the file, the header UTF-8 JSON, sorted by
 * data_offsets the tensors tile the data section exactly (no overlap, no gap, no trailing bytes),
 * every size computed with overflow checks; "__metadata__" an object of strings (or null).
 * The writer follows the reference too: the header is padded with spaces to a multiple of
 * 8 bytes, tensors are stored contiguously in the order given, and "__metadata__" is
 * {"format": "pt"}, which safetensors.torch.load_file expects. */
#include "tlm/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/convert.h"
#include "io/input.h"
#include "tlm/output.h"

/* The Rust reference refuses headers above 100 MB; tlm's largest are a few tens of KB. */
#define ST_MAX_HEADER 100000000ull

/* ---- reading ------------------------------------------------------------------------------ */

/* The whole file, with one byte more, a NUL: the header handed to cJSON always has a NUL after it
 * (parse_file), so that even a cJSON that reads one byte past the length it is given (releases
 * before 1.7.18, CVE-2023-53154) stays inside the buffer. */
static tlm_status read_whole_file(const char *path, unsigned char **buf_out, size_t *size_out) {
    *buf_out = NULL;
    *size_out = 0;
    FILE *f;
    uint64_t size;
    TLM_TRY(tlm_input_open(path, &f, &size));
    unsigned char *buf = size < SIZE_MAX ? malloc((size_t)size + 1) : NULL;
    if (!buf) {
        fclose(f);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes to read it", path,
                        (unsigned long long)size + 1);
    }
    errno = 0;
    size_t got = fread(buf, 1, (size_t)size, f);
    int e = errno, had_error = ferror(f);
    fclose(f);
    if (got != size) {
        free(buf);
        if (had_error) return tlm_fail(TLM_ERR_IO, "%s: read error: %s", path, strerror(e ? e : EIO));
        return tlm_fail(TLM_ERR_IO, "%s: file shrank while being read (%zu of %llu bytes)", path, got,
                        (unsigned long long)size);
    }
    buf[size] = '\0';
    *buf_out = buf;
    *size_out = (size_t)size;
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

/* A JSON number that is an integer in [0, 2^bits), bits <= 64. 0 if not. cJSON holds numbers as
 * doubles, exact up to 2^53; a larger offset cannot match a real file's size and fails the later
 * checks, a larger dimension can only come with another one of 0. */
static int json_uint(const cJSON *j, int bits, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    const double d = j->valuedouble;
    if (!(d >= 0 && d < ldexp(1.0, bits)) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* The length of the UTF-8 sequence at s (n > 0 bytes left): 1 to 4, or 0 if the bytes there are
 * not UTF-8 (RFC 3629: no overlong form, no surrogate, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || n < len) return 0;
    uint32_t cp = c & (0x7fu >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* below: an overlong form */
    return cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : len;
}

static bool utf8_valid(const char *s) {
    for (size_t n = strlen(s), i = 0, k; i < n; i += k)
        if (!(k = utf8_seq((const unsigned char *)s + i, n - i))) return false;
    return true;
}

/* NULL if the header's n bytes are text the reference reads: UTF-8 without control bytes (JSON
 * allows none but tab, newline and carriage return between tokens, and none at all in a string)
 * and without an escaped NUL (\u0000) in a string, which would cut a C string short; else what is
 * wrong, *at its offset. */
static const char *header_text_error(const unsigned char *s, size_t n, size_t *at) {
    bool in_string = false;
    for (size_t i = 0, len; i < n; i += len) {
        *at = i;
        const unsigned c = s[i];
        if (!(len = utf8_seq(s + i, n - i))) return "a byte that is not UTF-8";
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return "a control byte";
        if (c == '"') in_string = !in_string;
        if (in_string && c == '\\' && i + 1 < n) {
            if (n - i >= 6 && memcmp(s + i + 1, "u0000", 5) == 0) return "an escaped NUL (\\u0000)";
            len = 2; /* the escaped character, '"' or '\\' among them */
        }
    }
    return NULL;
}

/* Fills t from one header entry; data_len: bytes in the data section. */
static tlm_status parse_entry(const char *path, const cJSON *e, const unsigned char *data,
                              uint64_t data_len, tlm_st_tensor *t) {
    const char *name = e->string;
    if (!name[0]) return tlm_fail(TLM_ERR_FORMAT, "%s: a tensor has an empty name", path);
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
        if (!json_uint(jd, 63, &d)) { /* a dimension is an int64 in tlm */
            if (cJSON_IsNumber(jd) && jd->valuedouble < 0)
                return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': negative dimension %.17g in shape",
                                path, name, jd->valuedouble);
            if (cJSON_IsNumber(jd) && jd->valuedouble == floor(jd->valuedouble))
                return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': shape[%d] = %.0f is beyond 2^63 - 1", path,
                                name, i, jd->valuedouble);
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
        !json_uint(cJSON_GetArrayItem(joffs, 0), 64, &begin) || !json_uint(cJSON_GetArrayItem(joffs, 1), 64, &end))
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

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* *twice: a name given more than once among n records of `stride` bytes, each starting with its
 * name (tlm_st_tensor, tlm_st_meta), or NULL. O(n log n): a hostile header holds a million names. */
_Static_assert(offsetof(tlm_st_tensor, name) == 0 && offsetof(tlm_st_meta, key) == 0, "records start with the name");
static tlm_status duplicate_name(const char *path, const void *records, int n, size_t stride, const char **twice) {
    *twice = NULL;
    const char **names = malloc((n ? (size_t)n : 1) * sizeof *names);
    if (!names) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (int i = 0; i < n; i++) memcpy(&names[i], (const char *)records + (size_t)i * stride, sizeof *names);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 1; i < n && !*twice; i++)
        if (strcmp(names[i - 1], names[i]) == 0) *twice = names[i];
    free(names);
    return TLM_OK;
}

/* Copies "__metadata__" (null, or an object of strings, as the reference requires) into st. */
static tlm_status parse_meta(const char *path, const cJSON *m, tlm_safetensors *st) {
    if (cJSON_IsNull(m)) return TLM_OK;
    if (!cJSON_IsObject(m))
        return tlm_fail(TLM_ERR_FORMAT, "%s: __metadata__ is not an object of strings", path);
    const int n = cJSON_GetArraySize(m);
    st->meta = calloc(n ? (size_t)n : 1, sizeof *st->meta);
    if (!st->meta) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        if (!cJSON_IsString(e))
            return tlm_fail(TLM_ERR_FORMAT, "%s: __metadata__ entry '%s' is not a string", path, e->string);
        tlm_st_meta *kv = &st->meta[st->num_meta];
        kv->key = strdup(e->string);
        kv->value = kv->key ? strdup(e->valuestring) : NULL;
        if (kv->key) st->num_meta++; /* freed with the others from here on */
        if (!kv->value) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    const char *twice;
    TLM_TRY(duplicate_name(path, st->meta, st->num_meta, sizeof *st->meta, &twice));
    if (twice) return tlm_fail(TLM_ERR_FORMAT, "%s: __metadata__ has '%s' twice", path, twice);
    return TLM_OK;
}

typedef struct {
    uint64_t begin, end;
    int index;
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The reference's rule (Metadata::validate and the check after it): sorted by data_offsets, the
 * tensors tile the data section exactly: the first begins at 0, each where the one before ends,
 * the last at the end of the file. */
static tlm_status check_layout(const char *path, const tlm_safetensors *st, const unsigned char *data,
                               uint64_t data_len) {
    const int n = st->num_tensors;
    st_span *v = malloc((n ? (size_t)n : 1) * sizeof *v);
    if (!v) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (int i = 0; i < n; i++) {
        const tlm_st_tensor *t = &st->tensors[i];
        v[i].begin = (uint64_t)((const unsigned char *)t->data - data);
        v[i].end = v[i].begin + (uint64_t)t->numel * tlm_dtype_size(t->dtype); /* checked by parse_entry */
        v[i].index = i;
    }
    qsort(v, (size_t)n, sizeof *v, span_cmp);
    tlm_status s = TLM_OK;
    uint64_t at = 0;
    for (int i = 0; i < n && s == TLM_OK; i++) {
        const char *name = st->tensors[v[i].index].name;
        if (v[i].begin < at)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                         path, name, (unsigned long long)v[i].begin, (unsigned long long)v[i].end,
                         st->tensors[v[i - 1].index].name, (unsigned long long)v[i - 1].begin,
                         (unsigned long long)v[i - 1].end);
        else if (v[i].begin > at)
            s = tlm_fail(TLM_ERR_FORMAT,
                         "%s: bytes [%llu, %llu) of the data section belong to no tensor (a gap before tensor '%s')",
                         path, (unsigned long long)at, (unsigned long long)v[i].begin, name);
        at = v[i].end;
    }
    if (s == TLM_OK && at != data_len)
        s = tlm_fail(TLM_ERR_FORMAT,
                     "%s: %llu trailing bytes: the tensors end at byte %llu of the %llu-byte data section", path,
                     (unsigned long long)(data_len - at), (unsigned long long)at, (unsigned long long)data_len);
    free(v);
    return s;
}

/* cJSON's tree of the header (n bytes at buf + 8, NUL-terminated for the parse), or NULL with the
 * message set. */
static cJSON *parse_header(const char *path, unsigned char *buf, uint64_t n, tlm_status *s) {
    char *hdr = (char *)buf + 8;
    size_t at = 0;
    const char *bad = header_text_error((const unsigned char *)hdr, (size_t)n, &at);
    if (bad) {
        *s = tlm_fail(TLM_ERR_FORMAT, "%s: header has %s (0x%02x) at byte %zu of %llu", path, bad,
                      (unsigned char)hdr[at], at, (unsigned long long)n);
        return NULL;
    }
    const char saved = hdr[n]; /* the first data byte, or the NUL after the file */
    hdr[n] = '\0';
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &parse_end, 0);
    const char *err = root ? NULL : cJSON_GetErrorPtr();
    hdr[n] = saved;
    if (!root) {
        long off = err && err >= hdr && err <= hdr + n ? (long)(err - hdr) : -1;
        *s = tlm_fail(TLM_ERR_FORMAT, "%s: header is not valid JSON (error near byte %ld of %llu)", path, off,
                      (unsigned long long)n);
        return NULL;
    }
    for (const char *p = parse_end; p && p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            *s = tlm_fail(TLM_ERR_FORMAT, "%s: header has bytes after its JSON (at byte %ld of %llu)", path,
                          (long)(p - hdr), (unsigned long long)n);
            cJSON_Delete(root);
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        *s = tlm_fail(TLM_ERR_FORMAT, "%s: header is JSON but not an object", path);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static tlm_status parse_file(const char *path, tlm_safetensors *st) {
    unsigned char *buf = st->buffer;
    size_t size = st->buffer_size;
    const char *kind = tlm_input_sniff(buf, size);
    if (kind && strcmp(kind, "npy") == 0)
        return tlm_fail(TLM_ERR_FORMAT, "%s: this is a .npy file, not safetensors", path);
    TLM_TRY(tlm_input_refuse_pytorch(path, kind, "safetensors"));
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
    tlm_status s = TLM_OK;
    cJSON *root = parse_header(path, buf, n, &s);
    if (!root) return s;
    int count = 0, metas = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") != 0) count++;
        else if (++metas > 1) {
            s = tlm_fail(TLM_ERR_FORMAT, "%s: header has __metadata__ twice", path);
            goto done;
        }
    }
    st->tensors = calloc(count ? (size_t)count : 1, sizeof *st->tensors);
    if (!st->tensors) {
        s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto done;
    }
    const unsigned char *data = buf + 8 + n;
    uint64_t data_len = (uint64_t)size - 8 - n;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            s = parse_meta(path, e, st);
            if (s != TLM_OK) goto done;
            continue;
        }
        s = parse_entry(path, e, data, data_len, &st->tensors[st->num_tensors]);
        if (s != TLM_OK) goto done;
        st->num_tensors++;
    }
    const char *twice;
    s = duplicate_name(path, st->tensors, st->num_tensors, sizeof *st->tensors, &twice);
    if (s == TLM_OK && twice) s = tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path, twice);
    if (s == TLM_OK) s = check_layout(path, st, data, data_len);
done:
    cJSON_Delete(root);
    return s;
}

tlm_status tlm_safetensors_read(const char *path, tlm_safetensors *out) {
    TLM_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    unsigned char *buf;
    TLM_TRY(read_whole_file(path, &buf, &out->buffer_size));
    out->buffer = buf;
    tlm_status s = parse_file(path, out);
    if (s != TLM_OK) tlm_safetensors_free(out);
    return s;
}

const tlm_st_tensor *tlm_safetensors_find(const tlm_safetensors *st, const char *name) {
    for (int i = 0; i < st->num_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char *tlm_safetensors_meta(const tlm_safetensors *st, const char *key) {
    for (int i = 0; i < st->num_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

void tlm_safetensors_free(tlm_safetensors *st) {
    if (!st) return;
    if (st->tensors)
        for (int i = 0; i < st->num_tensors; i++) free(st->tensors[i].name);
    if (st->meta)
        for (int i = 0; i < st->num_meta; i++) {
            free((char *)st->meta[i].key);
            free((char *)st->meta[i].value);
        }
    free(st->tensors);
    free(st->meta);
    free(st->buffer);
    memset(st, 0, sizeof *st);
}

tlm_status tlm_st_tensor_to_f32(const tlm_st_tensor *t, float *dst) {
    char label[300];
    if (t->name) snprintf(label, sizeof label, "tensor '%s'", t->name);
    else snprintf(label, sizeof label, "an unnamed tensor");
    return tlm_dtype_to_f32(t->data, t->dtype, t->numel, dst, label);
}

/* ---- writing ------------------------------------------------------------------------------ */

static tlm_status entry_nbytes(const char *path, const tlm_st_entry *e, uint64_t *nbytes) {
    if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: a tensor has an empty or reserved name '%s'", path,
                        e->name ? e->name : "(null)");
    if (!utf8_valid(e->name))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor name '%s' is not UTF-8", path, e->name);
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
        if (!meta[i].key || !meta[i].value || !utf8_valid(meta[i].key) || !utf8_valid(meta[i].value)) {
            cJSON_Delete(root);
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: a metadata entry without key or value, or not UTF-8", path);
        }
        if (cJSON_GetObjectItemCaseSensitive(md, meta[i].key)) { /* a file with a key twice is refused by readers */
            cJSON_Delete(root);
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, strcmp(meta[i].key, "format") == 0
                                ? "%s: metadata key '%s' is tlm's own (it writes \"pt\")" : "%s: metadata key '%s' given twice",
                            path, meta[i].key);
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
