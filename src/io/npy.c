/* npy.c — NumPy .npy arrays, token files and get_batch.
 * .npy format (numpy/lib/format.py): magic "\x93NUMPY", major and minor version bytes, header
 * length (u16 LE for 1.0; u32 LE for 2.0 and 3.0), then an ASCII (3.0: UTF-8) Python dict
 * literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and
 * ended by '\n' so the data starts at a multiple of 64 bytes; then the raw data. */
#include "tlm/npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "io/input.h"
#include "tlm/output.h"
#include "tlm/rng.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* numpy itself refuses headers above 10000 bytes by default */
#define NPY_ALIGN 64

typedef struct {
    tlm_dtype dtype;
    int ndim;
    int64_t shape[TLM_MAX_DIMS];
    int64_t numel;
    uint64_t nbytes;
} npy_header;

static const struct {
    const char *descr;
    tlm_dtype dtype;
} npy_descrs[] = {
    {"<f4", TLM_DTYPE_F32}, {"<f8", TLM_DTYPE_F64}, {"<f2", TLM_DTYPE_F16}, {"<i4", TLM_DTYPE_I32},
    {"<i8", TLM_DTYPE_I64}, {"<u2", TLM_DTYPE_U16}, {"|u1", TLM_DTYPE_U8},  {"<u1", TLM_DTYPE_U8},
};
#define NPY_DESCRS_KNOWN "<f4 <f8 <f2 <i4 <i8 <u2 |u1"

/* ---- header parsing ---------------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int accept(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A Python string literal '...' or "..." without escapes, copied to out (size cap). */
static int parse_pystr(cursor *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[n] = '\0';
    return 1;
}

static int accept_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* (), (5,), (2, 3), (2, 3,) — a tuple of non-negative integers. Returns an error message or NULL. */
static const char *parse_shape(cursor *c, npy_header *h) {
    if (!accept(c, '(')) return "'shape' is not a tuple";
    h->ndim = 0;
    int trailing_comma = 0;
    for (;;) {
        if (accept(c, ')')) break;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return "'shape' holds something other than non-negative integers";
        if (h->ndim == TLM_MAX_DIMS) return "'shape' has more dimensions than tlm allows (8)";
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c->p - '0', &v))
                return "'shape' has a dimension that overflows 64 bits";
            c->p++;
        }
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
        h->shape[h->ndim++] = v;
        trailing_comma = accept(c, ',');
        if (!trailing_comma) {
            if (accept(c, ')')) break;
            return "'shape' is not a well-formed tuple";
        }
    }
    if (h->ndim == 1 && !trailing_comma) return "'shape' is (n) rather than the tuple (n,)";
    return NULL;
}

/* Parses the dict literal; fills h. On failure sets the message and returns FORMAT. */
static tlm_status parse_header_dict(const char *path, const char *text, size_t len, npy_header *h) {
    cursor c = {text, text + len};
    char descr[64] = "", key[32];
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0;
    if (!accept(&c, '{')) return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header is not a dict", path);
    for (;;) {
        if (accept(&c, '}')) break;
        if (!parse_pystr(&c, key, sizeof key))
            return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header: expected a quoted key at byte %ld", path,
                            (long)(c.p - text));
        if (!accept(&c, ':'))
            return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header: expected ':' after '%s'", path, key);
        if (strcmp(key, "descr") == 0 && !seen_descr) {
            seen_descr = 1;
            if (!parse_pystr(&c, descr, sizeof descr))
                return tlm_fail(TLM_ERR_FORMAT,
                                "%s: .npy 'descr' is not a simple dtype string (structured dtypes "
                                "are not supported)", path);
        } else if (strcmp(key, "fortran_order") == 0 && !seen_fortran) {
            seen_fortran = 1;
            if (accept_word(&c, "True")) fortran = 1;
            else if (accept_word(&c, "False")) fortran = 0;
            else return tlm_fail(TLM_ERR_FORMAT, "%s: .npy 'fortran_order' is not True or False", path);
        } else if (strcmp(key, "shape") == 0 && !seen_shape) {
            seen_shape = 1;
            const char *msg = parse_shape(&c, h);
            if (msg) return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header: %s", path, msg);
        } else if (strcmp(key, "descr") == 0 || strcmp(key, "fortran_order") == 0 ||
                   strcmp(key, "shape") == 0) {
            return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header has '%s' twice", path, key);
        } else {
            return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header has an unexpected key '%s'", path, key);
        }
        if (accept(&c, ',')) continue;
        if (accept(&c, '}')) break;
        return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header: expected ',' or '}' at byte %ld", path,
                        (long)(c.p - text));
    }
    skip_ws(&c);
    if (c.p != c.end)
        return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header has bytes after its dict (at byte %ld)", path,
                        (long)(c.p - text));
    const char *missing = !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : !seen_shape ? "shape" : NULL;
    if (missing) return tlm_fail(TLM_ERR_FORMAT, "%s: .npy header has no '%s'", path, missing);
    if (fortran)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: .npy array is in Fortran order (fortran_order True); save it with "
                        "np.save(path, np.ascontiguousarray(a))", path);
    size_t i;
    for (i = 0; i < sizeof npy_descrs / sizeof npy_descrs[0]; i++)
        if (strcmp(descr, npy_descrs[i].descr) == 0) break;
    if (i == sizeof npy_descrs / sizeof npy_descrs[0]) {
        if (descr[0] == '>')
            return tlm_fail(TLM_ERR_FORMAT,
                            "%s: .npy dtype '%s' is big-endian; tlm reads little-endian only (" NPY_DESCRS_KNOWN ")",
                            path, descr);
        return tlm_fail(TLM_ERR_FORMAT, "%s: .npy dtype '%s' is not supported (tlm reads " NPY_DESCRS_KNOWN ")",
                        path, descr);
    }
    h->dtype = npy_descrs[i].dtype;
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < h->ndim; d++) overflow |= __builtin_mul_overflow(numel, (uint64_t)h->shape[d], &numel);
    overflow |= __builtin_mul_overflow(numel, (uint64_t)tlm_dtype_size(h->dtype), &h->nbytes);
    if (overflow || numel > (uint64_t)INT64_MAX)
        return tlm_fail(TLM_ERR_FORMAT, "%s: .npy shape's size overflows 64 bits", path);
    h->numel = (int64_t)numel;
    return TLM_OK;
}

/* Opens path and reads the magic and header, then checks that the file holds the data the
 * header claims, before anything is allocated for it; on success *f is positioned at the data. */
static tlm_status npy_open(const char *path, FILE **f_out, npy_header *h) {
    *f_out = NULL;
    memset(h, 0, sizeof *h);
    FILE *f;
    uint64_t size;
    TLM_TRY(tlm_input_open(path, &f, &size));
    unsigned char pre[12];
    tlm_status s = TLM_OK;
    char *text = NULL;
    errno = 0;
    size_t got = fread(pre, 1, 10, f);
    if (got < 10 && ferror(f)) {
        s = tlm_fail(TLM_ERR_IO, "%s: read error: %s", path, strerror(errno ? errno : EIO));
        goto fail;
    }
    if (got < 8 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        const char *kind = tlm_input_sniff(pre, got);
        s = tlm_input_refuse_pytorch(path, kind, ".npy");
        if (s == TLM_OK)
            s = kind && strcmp(kind, "safetensors") == 0
                ? tlm_fail(TLM_ERR_FORMAT, "%s: this is a safetensors file, not .npy", path)
                : tlm_fail(TLM_ERR_FORMAT, "%s: not a .npy file (no \\x93NUMPY magic at the start)", path);
        goto fail;
    }
    int major = pre[6], minor = pre[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0)) {
        s = tlm_fail(TLM_ERR_FORMAT, "%s: .npy format version %d.%d is not supported (1.0, 2.0, 3.0)", path,
                     major, minor);
        goto fail;
    }
    size_t prelen = major == 1 ? 10 : 12;
    if (got == 10 && prelen == 12) got += fread(pre + 10, 1, 2, f);
    if (got < prelen) {
        s = tlm_fail(TLM_ERR_FORMAT, "%s: .npy file ends inside its header length", path);
        goto fail;
    }
    uint32_t hl = major == 1 ? (uint32_t)pre[8] | (uint32_t)pre[9] << 8
                             : (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
                                   (uint32_t)pre[11] << 24;
    if (hl > NPY_MAX_HEADER) {
        s = tlm_fail(TLM_ERR_FORMAT, "%s: .npy header length %u is absurd (limit %u)", path, hl, NPY_MAX_HEADER);
        goto fail;
    }
    if (hl > size - prelen) { /* size >= prelen: those bytes were read */
        s = tlm_fail(TLM_ERR_FORMAT, "%s: .npy file ends inside its %u-byte header (%llu bytes in all)", path, hl,
                     (unsigned long long)size);
        goto fail;
    }
    text = malloc(hl + 1u);
    if (!text) {
        s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    errno = 0;
    if (fread(text, 1, hl, f) != hl) {
        s = ferror(f) ? tlm_fail(TLM_ERR_IO, "%s: read error: %s", path, strerror(errno ? errno : EIO))
                      : tlm_fail(TLM_ERR_FORMAT, "%s: .npy file ends inside its %u-byte header", path, hl);
        goto fail;
    }
    text[hl] = '\0';
    if (memchr(text, '\0', hl)) {
        s = tlm_fail(TLM_ERR_FORMAT, "%s: .npy header contains a NUL byte", path);
        goto fail;
    }
    s = parse_header_dict(path, text, hl, h);
    if (s != TLM_OK) goto fail;
    const uint64_t have = size - prelen - hl;
    if (h->nbytes > have) {
        char shape[TLM_SHAPE_STRLEN];
        s = tlm_fail(TLM_ERR_FORMAT,
                     "%s: data truncated: shape %s of %s needs %llu bytes of data, the file holds %llu after its header",
                     path, tlm_shape_format(h->ndim, h->shape, shape, sizeof shape), tlm_dtype_name(h->dtype),
                     (unsigned long long)h->nbytes, (unsigned long long)have);
        goto fail;
    }
    free(text);
    *f_out = f;
    return TLM_OK;
fail:
    free(text);
    fclose(f);
    return s;
}

/* Reads n bytes of array data; short reads are FORMAT (truncated) or IO (read error). */
static tlm_status read_data(const char *path, FILE *f, void *dst, size_t n, uint64_t want_total,
                            uint64_t done_before) {
    errno = 0;
    size_t got = fread(dst, 1, n, f);
    if (got == n) return TLM_OK;
    if (ferror(f)) return tlm_fail(TLM_ERR_IO, "%s: read error: %s", path, strerror(errno ? errno : EIO));
    return tlm_fail(TLM_ERR_FORMAT, "%s: data truncated: the shape needs %llu bytes, the file has %llu",
                    path, (unsigned long long)want_total, (unsigned long long)(done_before + got));
}

tlm_status tlm_npy_read(const char *path, tlm_array *out) {
    TLM_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    FILE *f;
    npy_header h;
    TLM_TRY(npy_open(path, &f, &h)); /* h.nbytes: no more than the file holds */
    void *data = malloc(h.nbytes ? (size_t)h.nbytes : 1);
    tlm_status s = data ? read_data(path, f, data, (size_t)h.nbytes, h.nbytes, 0)
                        : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes", path,
                                   (unsigned long long)h.nbytes);
    fclose(f);
    if (s != TLM_OK) {
        free(data);
        return s;
    }
    out->dtype = h.dtype;
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof h.shape);
    out->numel = h.numel;
    out->data = data;
    return TLM_OK;
}

void tlm_array_free(tlm_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

const char *tlm_shape_format(int ndim, const int64_t *shape, char *buf, size_t cap) {
    TLM_ASSERT(buf && cap > 0 && ndim >= 0 && ndim <= TLM_MAX_DIMS && (shape || ndim == 0));
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d <= ndim && len < cap; d++) {
        int k = d == ndim ? snprintf(buf + len, cap - len, "%s]", d ? "" : "[")
                          : snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "[", (long long)shape[d]);
        len += k > 0 ? (size_t)k : 0;
    }
    return buf;
}

tlm_status tlm_array_check_shape(const tlm_array *a, int ndim, int64_t max_dim, const char *expected,
                                 const char *what) {
    TLM_ASSERT(a && expected);
    bool ok = a->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = a->shape[d] >= 1 && a->shape[d] <= max_dim;
    if (ok) return TLM_OK;
    char got[TLM_SHAPE_STRLEN];
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: expected shape %s (%d dimension%s, each in [1, %lld]), got %s%s",
                    what ? what : "array", expected, ndim, ndim == 1 ? "" : "s", (long long)max_dim,
                    tlm_shape_format(a->ndim, a->shape, got, sizeof got), a->numel == 0 ? ": an empty array" : "");
}

tlm_status tlm_array_to_f32(const tlm_array *a, float *dst, const char *what) {
    TLM_ASSERT(a && (dst || a->numel == 0));
    return tlm_dtype_to_f32(a->data, a->dtype, a->numel, dst, what ? what : "array");
}

/* ---- writing ------------------------------------------------------------------------------ */

static const char *descr_of(tlm_dtype t) {
    switch (t) {
    case TLM_DTYPE_F32: return "<f4";
    case TLM_DTYPE_F64: return "<f8";
    case TLM_DTYPE_F16: return "<f2";
    case TLM_DTYPE_I64: return "<i8";
    case TLM_DTYPE_I32: return "<i4";
    case TLM_DTYPE_U16: return "<u2";
    case TLM_DTYPE_U8: return "|u1";
    default: return NULL; /* BF16: numpy has no bfloat16 */
    }
}

tlm_status tlm_npy_write(const char *path, tlm_dtype dtype, int ndim, const int64_t *shape,
                         const void *data) {
    TLM_ASSERT(path && (unsigned)dtype < TLM_DTYPE_NUM && (shape || ndim == 0));
    const char *descr = descr_of(dtype);
    if (!descr)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "%s: .npy has no %s dtype (numpy has no bfloat16)", path,
                        tlm_dtype_name(dtype));
    if (ndim < 0 || ndim > TLM_MAX_DIMS)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: ndim %d outside [0, %d]", path, ndim, TLM_MAX_DIMS);
    char hdr[512];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: negative dimension %lld", path, (long long)shape[d]);
        overflow |= __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel);
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, d ? ", %lld" : "%lld", (long long)shape[d]);
    }
    uint64_t nbytes;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)tlm_dtype_size(dtype), &nbytes);
    if (overflow) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: array size overflows", path);
    if (nbytes && !data) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: data is NULL", path);
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%s), }", ndim == 1 ? "," : "");
    /* pad with spaces and end with '\n' so that 10 + header length is a multiple of 64 */
    int total = (10 + len + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    int hl = total - 10;
    TLM_ASSERT(hl < (int)sizeof hdr);
    memset(hdr + len, ' ', (size_t)(hl - 1 - len));
    hdr[hl - 1] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                             (unsigned char)(hl >> 8)};
    tlm_output *w;
    TLM_TRY(tlm_output_open(&w, path));
    FILE *f = tlm_output_file(w);
    fwrite(pre, 1, sizeof pre, f); /* a failed write is reported by the commit */
    fwrite(hdr, 1, (size_t)hl, f);
    if (nbytes) fwrite(data, 1, (size_t)nbytes, f);
    return tlm_output_commit(w);
}

/* ---- tokens -------------------------------------------------------------------------------- */

static int dtype_is_int(tlm_dtype t) {
    return t == TLM_DTYPE_I64 || t == TLM_DTYPE_I32 || t == TLM_DTYPE_U16 || t == TLM_DTYPE_U8;
}

/* dst[i] = src[i] as int32 for n integers of dtype t, checking [0, vocab_size); base: the index
 * of src[0] in the whole array (for messages). */
static tlm_status ids_to_int32(tlm_dtype t, const void *src, int64_t n, int32_t *dst, int vocab_size,
                               const char *what, int64_t base) {
    const unsigned char *p = src;
    size_t esz = tlm_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        switch (t) {
        case TLM_DTYPE_I64: memcpy(&v, p + esz * i, 8); break;
        case TLM_DTYPE_I32: { int32_t x; memcpy(&x, p + esz * i, 4); v = x; break; }
        case TLM_DTYPE_U16: { uint16_t x; memcpy(&x, p + esz * i, 2); v = x; break; }
        case TLM_DTYPE_U8: v = p[i]; break;
        default: TLM_ASSERT(0); return TLM_ERR_FORMAT;
        }
        if (v < 0 || v >= vocab_size)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                            "%s: token id %lld at index %lld is outside [0, vocab_size = %d)", what,
                            (long long)v, (long long)(base + i), vocab_size);
        dst[i] = (int32_t)v;
    }
    return TLM_OK;
}

tlm_status tlm_array_to_tokens(const tlm_array *a, int32_t *dst, int vocab_size, const char *what) {
    TLM_ASSERT(a && (dst || a->numel == 0));
    if (!what) what = "token array";
    if (!dtype_is_int(a->dtype))
        return tlm_fail(TLM_ERR_FORMAT, "%s: token ids must be integers, the array holds %s", what,
                        tlm_dtype_name(a->dtype));
    if (vocab_size < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: vocab_size must be at least 1 (got %d)", what,
                        vocab_size);
    return ids_to_int32(a->dtype, a->data, a->numel, dst, vocab_size, what, 0);
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads n ids of dtype t from f in chunks, converting and checking each. */
static tlm_status read_ids(const char *path, FILE *f, tlm_dtype t, int64_t n, int vocab_size,
                           int32_t *dst) {
    enum { CHUNK = 1 << 16 };
    size_t esz = tlm_dtype_size(t);
    unsigned char *buf = malloc(CHUNK * esz);
    if (!buf) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    tlm_status s = TLM_OK;
    for (int64_t i = 0; i < n && s == TLM_OK; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        s = read_data(path, f, buf, (size_t)m * esz, (uint64_t)n * esz, (uint64_t)i * esz);
        if (s == TLM_OK) s = ids_to_int32(t, buf, m, dst + i, vocab_size, path, i);
    }
    free(buf);
    return s;
}

tlm_status tlm_tokens_load(const char *path, int vocab_size, tlm_tokens *out) {
    TLM_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    if (vocab_size < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: vocab_size must be at least 1 (got %d)", path,
                        vocab_size);
    FILE *f;
    tlm_dtype t;
    int64_t n;
    if (has_suffix(path, ".bin")) {
        uint64_t size;
        TLM_TRY(tlm_input_open(path, &f, &size));
        if (size % 2 != 0) {
            fclose(f);
            return tlm_fail(TLM_ERR_FORMAT,
                            "%s: %llu bytes, an odd length: not a raw file of uint16 token ids", path,
                            (unsigned long long)size);
        }
        t = TLM_DTYPE_U16;
        n = (int64_t)(size / 2);
    } else {
        npy_header h;
        TLM_TRY(npy_open(path, &f, &h));
        tlm_status s = TLM_OK;
        char shape[TLM_SHAPE_STRLEN];
        if (h.ndim != 1)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: a token file must be 1-D, this array has shape %s", path,
                         tlm_shape_format(h.ndim, h.shape, shape, sizeof shape));
        else if (!dtype_is_int(h.dtype))
            s = tlm_fail(TLM_ERR_FORMAT, "%s: token ids must be integers, the array holds %s", path,
                         tlm_dtype_name(h.dtype));
        if (s != TLM_OK) {
            fclose(f);
            return s;
        }
        t = h.dtype;
        n = h.numel;
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(int32_t)) {
        fclose(f);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: %lld tokens do not fit in memory", path, (long long)n);
    }
    int32_t *ids = malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    tlm_status s = ids ? read_ids(path, f, t, n, vocab_size, ids)
                       : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %lld token ids", path, (long long)n);
    fclose(f);
    if (s != TLM_OK) {
        free(ids);
        return s;
    }
    *out = (tlm_tokens){.ids = ids, .n = n};
    return TLM_OK;
}

void tlm_tokens_free(tlm_tokens *t) {
    if (!t) return;
    free(t->ids);
    memset(t, 0, sizeof *t);
}

tlm_status tlm_tokens_get_batch(const tlm_tokens *t, int B, int T, tlm_batch_draw draw, int32_t *inputs,
                                int32_t *targets) {
    TLM_ASSERT(t && inputs && targets);
    if (B < 1 || T < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "get_batch: batch size %d and context length %d must be >= 1",
                        B, T);
    if (draw.world_size < 1 || draw.rank < 0 || draw.rank >= draw.world_size)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "get_batch: rank %d is not one of world size %d", draw.rank,
                        draw.world_size);
    if (t->n < (int64_t)T + 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "get_batch: %lld tokens are too few for context length %d (need at least %lld)",
                        (long long)t->n, T, (long long)T + 1);
    const uint64_t starts = (uint64_t)(t->n - T); /* s in [0, n - T - 1] */
    for (int b = 0; b < B; b++) {
        const uint64_t g = (uint64_t)draw.rank * (uint64_t)B + (uint64_t)b; /* the row of the global batch */
        uint64_t state = tlm_rng_stream(draw.seed, ((uint64_t)draw.step << 32) ^ g);
        const int64_t s = (int64_t)tlm_rng_below(&state, starts);
        memcpy(inputs + (size_t)b * T, t->ids + s, (size_t)T * sizeof(int32_t));
        memcpy(targets + (size_t)b * T, t->ids + s + 1, (size_t)T * sizeof(int32_t));
    }
    return TLM_OK;
}
