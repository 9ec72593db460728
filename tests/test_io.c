/* test_io.c — file I/O: dtype names and sizes, fp16/bf16 conversions, safetensors and .npy
 * round trips and malformed files, token files and get_batch.
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on a failure.
 * Files go to a fresh directory under /tmp, removed at the end. */
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/convert.h"
#include "io/input.h"
#include "tlm/dtype.h"
#include "tlm/npy.h"
#include "tlm/rng.h"
#include "tlm/safetensors.h"
#include "tlm/status.h"
#include "tlm/util.h"
#include "test_check.h"
#include "test_files.h"

static char tmpdir[64];

static const char *tpath(const char *name) { return test_path_in(tmpdir, name); }

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int temporaries_left(void) { return test_temporaries_in(tmpdir); }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "test_io: cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len ? (size_t)len : 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static uint32_t fbits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bitsf(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- dtype ---------------------------------------------------------------------------------- */

static void test_dtype(void) {
    static const struct { tlm_dtype t; size_t size; const char *name; } want[] = {
        {TLM_DTYPE_F32, 4, "F32"}, {TLM_DTYPE_F64, 8, "F64"}, {TLM_DTYPE_F16, 2, "F16"},
        {TLM_DTYPE_BF16, 2, "BF16"}, {TLM_DTYPE_I64, 8, "I64"}, {TLM_DTYPE_I32, 4, "I32"},
        {TLM_DTYPE_U16, 2, "U16"}, {TLM_DTYPE_U8, 1, "U8"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        check(tlm_dtype_size(want[i].t) == want[i].size && strcmp(tlm_dtype_name(want[i].t), want[i].name) == 0,
              "dtype %s: %zu bytes", want[i].name, want[i].size);
}

/* ---- conversions ---------------------------------------------------------------------------- */

/* Independent reference: round |x| to `bits` significant bits with rint (round to nearest even,
 * the default mode), the quantum never below 2^min_exp (subnormals); above maxfinite: inf. */
static double ref_round(double x, int bits, int min_exp, double maxfinite) {
    if (x == 0 || isinf(x)) return x;
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    int q = e - bits;
    if (q < min_exp) q = min_exp;
    double r = ldexp(rint(ldexp(fabs(x), -q)), q);
    if (r > maxfinite) r = INFINITY;
    return copysign(r, x);
}
static double ref_f16(float x) { return ref_round(x, 11, -24, 65504.0); }
static double ref_bf16(float x) { return ref_round(x, 8, -133, ldexp(255.0, 120)); }

/* value of a 16-bit pattern from its fields, independent of the code under test */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}
static double bf16_value(uint16_t b) {
    int e = (b >> 7) & 255, m = b & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return (b & 0x8000) ? -v : v;
}

static void test_convert_hand(void) {
    static const struct { float x; uint16_t h; const char *why; } f16[] = {
        {1.0f, 0x3c00, "1"},
        {-2.0f, 0xc000, "-2"},
        {0.5f, 0x3800, "0.5"},
        {0.01f, 0x211f, "0.01 -> 1311/131072"},
        {1.0f / 3.0f, 0x3555, "1/3 -> 1365/4096"},
        {0x1.002p0f, 0x3c00, "1+2^-11: tie, to even 1"},
        {0x1.006p0f, 0x3c02, "1+3*2^-11: tie, to even 1+2^-9"},
        {0x1.002002p0f, 0x3c01, "just above the tie: 1+2^-11+2^-23"},
        {0x1.ffep-1f, 0x3c00, "1-2^-12: tie across the binade, to even 1"},
        {2049.0f, 0x6800, "2049: tie, to even 2048"},
        {2051.0f, 0x6802, "2051: tie, to even 2052"},
        {65504.0f, 0x7bff, "65504, the largest half"},
        {65519.0f, 0x7bff, "65519 rounds down to 65504"},
        {65520.0f, 0x7c00, "65520: tie, to inf"},
        {1e5f, 0x7c00, "1e5 overflows to inf"},
        {-1e5f, 0xfc00, "-1e5 overflows to -inf"},
        {0x1p-14f, 0x0400, "2^-14, the smallest normal"},
        {0x1p-24f, 0x0001, "2^-24, the smallest subnormal"},
        {-0x1p-24f, 0x8001, "-2^-24"},
        {0x1p-25f, 0x0000, "2^-25: tie, to even 0"},
        {0x1.000002p-25f, 0x0001, "just above 2^-25"},
        {0x1.8p-25f, 0x0001, "0.75*2^-24"},
        {0x1.8p-24f, 0x0002, "1.5*2^-24: tie, to even 2"},
        {0x1.4p-23f, 0x0002, "2.5*2^-24: tie, to even 2"},
        {0x1.ff8p-15f, 0x03ff, "1023*2^-24, the largest subnormal"},
        {0x1.ffcp-15f, 0x0400, "1023.5*2^-24: tie, to even 2^-14"},
        {0x1p-26f, 0x0000, "2^-26 -> 0"},
        {1e-8f, 0x0000, "1e-8 -> 0"},
        {0x1p-149f, 0x0000, "float subnormal -> 0"},
        {0.0f, 0x0000, "+0"},
        {-0.0f, 0x8000, "-0 keeps its sign"},
        {INFINITY, 0x7c00, "inf"},
        {-INFINITY, 0xfc00, "-inf"},
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) {
        uint16_t got = tlm_f32_to_f16(f16[i].x);
        check(got == f16[i].h, "fp16(%.9g) = 0x%04x (want 0x%04x): %s", (double)f16[i].x, got, f16[i].h, f16[i].why);
    }
    static const struct { uint16_t h; double v; } f16w[] = {
        {0x211f, 0.01000213623046875}, {0x3555, 0.333251953125}, {0x0001, 5.9604644775390625e-08},
        {0x03ff, 0x1.ff8p-15 /* 1023 * 2^-24 */}, {0x0400, 6.103515625e-05}, {0x8001, -5.9604644775390625e-08},
        {0x7bff, 65504.0}, {0xfbff, -65504.0}, {0x3c01, 1.0009765625}, {0x7c00, INFINITY}, {0xfc00, -INFINITY},
    };
    for (size_t i = 0; i < sizeof f16w / sizeof f16w[0]; i++) {
        float got = tlm_f16_to_f32(f16w[i].h);
        check((double)got == f16w[i].v, "f32(fp16 0x%04x) = %.17g (want %.17g)", f16w[i].h, (double)got, f16w[i].v);
    }
    float nz = tlm_f16_to_f32(0x8000);
    check(nz == 0 && signbit(nz), "f32(fp16 0x8000) = -0");
    check(isnan(tlm_f16_to_f32(0x7e00)) && isnan(tlm_f16_to_f32(0x7c01)) && isnan(tlm_f16_to_f32(0xfe00)),
          "f32(fp16 NaNs 0x7e00 0x7c01 0xfe00) are NaN");
    uint16_t hn = tlm_f32_to_f16(NAN), hs = tlm_f32_to_f16(bitsf(0x7f800001u)), hm = tlm_f32_to_f16(-NAN);
    check((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) && (hs & 0x7c00) == 0x7c00 && (hs & 0x3ff) &&
              (hm & 0xfc00) == 0xfc00 && (hm & 0x3ff),
          "fp16(NaN) = 0x%04x, fp16(sNaN 0x7f800001) = 0x%04x, fp16(-NaN) = 0x%04x: all NaN, sign kept", hn, hs, hm);

    static const struct { float x; uint16_t b; const char *why; } bf[] = {
        {1.0f, 0x3f80, "1"},
        {0x1.01p0f, 0x3f80, "1+2^-8: tie, to even 1"},
        {0x1.03p0f, 0x3f82, "1+3*2^-8: tie, to even 1+2^-6"},
        {0x1.010002p0f, 0x3f81, "just above the tie: 1+2^-8+2^-23"},
        {0x1.ffp-1f, 0x3f80, "1-2^-9: tie across the binade, to even 1"},
        {1.0f / 3.0f, 0x3eab, "1/3 (0x3eaaaaab) rounds up to 0.333984375"},
        {3.14159274f, 0x4049, "pi -> 3.140625"},
        {-2.5f, 0xc020, "-2.5"},
        {FLT_MAX, 0x7f80, "FLT_MAX rounds to inf"},
        {0x1.fep127f, 0x7f7f, "(2-2^-7)*2^127, the largest bf16"},
        {0x1.fefffep127f, 0x7f7f, "just below the tie at the top -> largest bf16"},
        {0x1.ffp127f, 0x7f80, "(2-2^-8)*2^127: tie at the top, to even = inf"},
        {0.0f, 0x0000, "+0"},
        {-0.0f, 0x8000, "-0"},
        {INFINITY, 0x7f80, "inf"},
        {-INFINITY, 0xff80, "-inf"},
        {0x1p-133f, 0x0001, "2^-133, the smallest bf16 subnormal"},
        {0x1p-134f, 0x0000, "2^-134 (float bits 0x00008000): tie, to even 0"},
        {0x1.8p-133f, 0x0002, "1.5*2^-133 (0x00018000): tie, to even 2"},
        {0x1.0002p-134f, 0x0001, "2^-134+2^-149 (0x00008001), just above the tie"},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) {
        uint16_t got = tlm_f32_to_bf16(bf[i].x);
        check(got == bf[i].b, "bf16(%.9g) = 0x%04x (want 0x%04x): %s", (double)bf[i].x, got, bf[i].b, bf[i].why);
    }
    check((double)tlm_bf16_to_f32(0x3eab) == 0.333984375 && (double)tlm_bf16_to_f32(0x4049) == 3.140625 &&
              (double)tlm_bf16_to_f32(0x0001) == ldexp(1, -133) && tlm_bf16_to_f32(0xff80) == -INFINITY,
          "f32(bf16 0x3eab 0x4049 0x0001 0xff80) = 0.333984375 3.140625 2^-133 -inf");
    uint16_t bn = tlm_f32_to_bf16(NAN), bs = tlm_f32_to_bf16(bitsf(0x7f800001u)), bm = tlm_f32_to_bf16(-NAN);
    check((bn & 0x7f80) == 0x7f80 && (bn & 0x7f) && (bs & 0x7f80) == 0x7f80 && (bs & 0x7f) &&
              (bm & 0xff80) == 0xff80 && (bm & 0x7f),
          "bf16(NaN) = 0x%04x, bf16(sNaN 0x7f800001) = 0x%04x (not inf), bf16(-NaN) = 0x%04x", bn, bs, bm);
    check(isnan(tlm_bf16_to_f32(0x7fc0)) && isnan(tlm_bf16_to_f32(0x7f81)), "f32(bf16 NaNs) are NaN");

    /* the accumulation experiment: adding 0.01 a thousand times in fp16 gives 9.9531 */
    uint16_t acc = 0, h001 = tlm_f32_to_f16(0.01f);
    for (int i = 0; i < 1000; i++) acc = tlm_f32_to_f16(tlm_f16_to_f32(acc) + tlm_f16_to_f32(h001));
    check(fabs(tlm_f16_to_f32(acc) - 9.953125) < 1e-9, "0.01 summed 1000 times in fp16 = %.6f (PyTorch: 9.9531)",
          (double)tlm_f16_to_f32(acc));
}

static void test_convert_sweep(void) {
    /* every 16-bit pattern widens to its field value and narrows back to itself */
    int bad16 = 0, badbf = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        double want = f16_value(h);
        float got = tlm_f16_to_f32(h);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want) ||
                                         tlm_f32_to_f16(got) != h))
            bad16++;
        want = bf16_value(h);
        got = tlm_bf16_to_f32(h);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want) ||
                                         tlm_f32_to_bf16(got) != h))
            badbf++;
    }
    check(bad16 == 0, "all 65536 fp16 patterns widen exactly and narrow back (%d wrong)", bad16);
    check(badbf == 0, "all 65536 bf16 patterns widen exactly and narrow back (%d wrong)", badbf);

    /* narrowing against rint-based rounding: a strided sweep of all floats, and every exact
     * tie (and its neighbours) of the normal ranges */
    long n = 0, w16 = 0, wbf = 0;
#ifdef __FLT16_MAX__
    long wcc = 0; /* the compiler's own _Float16 conversion as a second reference */
#endif
    for (int pass = 0; pass < 4; pass++) {
        uint64_t count = pass == 0 ? (1ull << 32) / 997 : pass == 1 ? 1ull << 19 : pass == 2 ? 1ull << 16 : 0;
        for (uint64_t k = 0; k < count; k++) {
            for (int nb = -1; nb <= 1; nb++) {
                uint32_t bits;
                if (pass == 0) bits = (uint32_t)(k * 997 + (uint64_t)(nb + 1));
                else if (pass == 1) bits = (uint32_t)((k << 13) | 0x1000u) + (uint32_t)nb; /* fp16 ties */
                else bits = (uint32_t)((k << 16) | 0x8000u) + (uint32_t)nb;                /* bf16 ties */
                float x = bitsf(bits);
                if (isnan(x)) continue;
                n++;
                double r16 = ref_f16(x), rbf = ref_bf16(x);
                float g16 = tlm_f16_to_f32(tlm_f32_to_f16(x)), gbf = tlm_bf16_to_f32(tlm_f32_to_bf16(x));
                if (fbits(g16) != fbits((float)r16)) {
                    if (w16++ < 5) printf("     fp16 mismatch: x=%a got %a want %a\n", (double)x, (double)g16, r16);
                }
                if (fbits(gbf) != fbits((float)rbf)) {
                    if (wbf++ < 5) printf("     bf16 mismatch: x=%a got %a want %a\n", (double)x, (double)gbf, rbf);
                }
#ifdef __FLT16_MAX__
                volatile float vx = x;
                _Float16 hc = (_Float16)vx;
                uint16_t hb;
                memcpy(&hb, &hc, 2);
                if (hb != tlm_f32_to_f16(x) && wcc++ < 5)
                    printf("     _Float16 mismatch: x=%a tlm 0x%04x compiler 0x%04x\n", (double)x,
                           tlm_f32_to_f16(x), hb);
#endif
            }
        }
    }
    check(w16 == 0, "fp16 rounding of %ld floats (sweep + every tie +-1 ulp) matches rint reference (%ld wrong)", n, w16);
    check(wbf == 0, "bf16 rounding of %ld floats (sweep + every tie +-1 ulp) matches rint reference (%ld wrong)", n, wbf);
#ifdef __FLT16_MAX__
    check(wcc == 0, "fp16 rounding of the same floats matches the compiler's _Float16 cast (%ld wrong)", wcc);
#endif

    /* array forms on unaligned buffers */
    float src[5] = {1.0f, 0.01f, -65504.0f, 0x1p-24f, 3.0f}, back[5];
    unsigned char raw[11];
    tlm_f32_to_f16_array(src, raw + 1, 5);
    tlm_f16_to_f32_array(raw + 1, back, 5);
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= fbits(back[i]) == fbits(tlm_f16_to_f32(tlm_f32_to_f16(src[i])));
    tlm_f32_to_bf16_array(src, raw + 1, 5);
    tlm_bf16_to_f32_array(raw + 1, back, 5);
    for (int i = 0; i < 5; i++) ok &= fbits(back[i]) == fbits(tlm_bf16_to_f32(tlm_f32_to_bf16(src[i])));
    check(ok, "array conversions on an unaligned buffer agree with the scalar ones");
}

/* ---- safetensors ---------------------------------------------------------------------------- */

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void test_safetensors_roundtrip(void) {
    float f32[6] = {1.5f, -2.25f, 0.0f, 3.0e-8f, 1e30f, -0.0f};
    double f64[4] = {1.0 / 3.0, -1e300, 5e-324, 2.0};
    uint16_t f16 = tlm_f32_to_f16(0.01f);
    uint16_t bf16[3] = {tlm_f32_to_bf16(1.0f), tlm_f32_to_bf16(-3.0f), tlm_f32_to_bf16(0.5f)};
    int64_t i64[4] = {INT64_MIN, -1, 0, INT64_MAX};
    int32_t i32[5] = {INT32_MIN, -7, 0, 7, INT32_MAX};
    uint16_t u16[3] = {0, 9999, 65535};
    uint8_t u8[3] = {0, 128, 255};
    tlm_st_entry e[] = {
        {"layers.0.attn.q_proj.weight", TLM_DTYPE_F32, 2, {2, 3}, f32},
        {"f64", TLM_DTYPE_F64, 1, {4}, f64},
        {"scalar_f16", TLM_DTYPE_F16, 0, {0}, &f16},
        {"bf16", TLM_DTYPE_BF16, 1, {3}, bf16},
        {"empty", TLM_DTYPE_F32, 2, {0, 3}, NULL},
        {"i64", TLM_DTYPE_I64, 2, {2, 2}, i64},
        {"i32", TLM_DTYPE_I32, 1, {5}, i32},
        {"u16", TLM_DTYPE_U16, 1, {3}, u16},
        {"we\"ird\\name", TLM_DTYPE_U8, 1, {3}, u8},
    };
    int n = (int)(sizeof e / sizeof e[0]);
    const char *path = tpath("rt.safetensors");

    check_status(tlm_safetensors_write(path, e, n), TLM_OK, NULL, "safetensors write of 9 tensors");
    check(file_exists(path) && temporaries_left() == 0, "written file exists, no temporary file is left (%s)",
          "rt.safetensors");

    size_t size;
    unsigned char *raw = read_bytes(path, &size);
    uint64_t hl = le64(raw);
    int pad_ok = hl % 8 == 0 && raw[8] == '{';
    size_t last = 8 + (size_t)hl - 1;
    while (last > 8 && raw[last] == ' ') last--;
    pad_ok &= raw[last] == '}' && (8 + hl - 1 - last) < 8;
    check(pad_ok, "header length %llu is a multiple of 8, padded with fewer than 8 spaces",
          (unsigned long long)hl);
    check(strstr((char *)raw + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL, "header has __metadata__ format pt");

    tlm_safetensors st;
    tlm_status s = tlm_safetensors_read(path, &st);
    check_status(s, TLM_OK, NULL, "safetensors read back");
    if (s != TLM_OK) {
        free(raw);
        return;
    }
    check(st.num_tensors == n, "read %d tensors (wrote %d)", st.num_tensors, n);
    int all = st.num_tensors == n;
    const unsigned char *expect_next = (const unsigned char *)st.buffer + 8 + hl;
    for (int i = 0; i < n && all; i++) {
        const tlm_st_tensor *t = &st.tensors[i];
        int ok = strcmp(t->name, e[i].name) == 0 && t->dtype == e[i].dtype && t->ndim == e[i].ndim;
        int64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            ok &= t->shape[d] == e[i].shape[d];
            numel *= e[i].shape[d];
        }
        size_t nbytes = (size_t)numel * tlm_dtype_size(e[i].dtype);
        ok &= t->numel == numel && (nbytes == 0 || memcmp(t->data, e[i].data, nbytes) == 0);
        ok &= (const unsigned char *)t->data == expect_next; /* contiguous, in the order given */
        expect_next += nbytes;
        ok &= tlm_safetensors_find(&st, e[i].name) == t;
        check(ok, "tensor '%s' %s ndim %d numel %lld: name, dtype, shape, data and offset round trip",
              e[i].name, tlm_dtype_name(e[i].dtype), e[i].ndim, (long long)numel);
    }
    check(expect_next == (const unsigned char *)st.buffer + st.buffer_size, "data section ends at the end of the file");
    check(tlm_safetensors_find(&st, "nope") == NULL, "find of a missing name is NULL");
    check(st.num_meta == 1 && tlm_safetensors_meta(&st, "format") && !strcmp(tlm_safetensors_meta(&st, "format"), "pt") &&
              !tlm_safetensors_meta(&st, "nope"),
          "__metadata__ read back: format pt, nothing else");

    float out[6];
    const tlm_st_tensor *t = tlm_safetensors_find(&st, "layers.0.attn.q_proj.weight");
    check(t && tlm_st_tensor_to_f32(t, out) == TLM_OK && memcmp(out, f32, sizeof f32) == 0, "to_f32 of F32");
    t = tlm_safetensors_find(&st, "f64");
    check(t && tlm_st_tensor_to_f32(t, out) == TLM_OK && out[0] == (float)(1.0 / 3.0) && out[1] == -INFINITY &&
              out[2] == 0.0f && out[3] == 2.0f,
          "to_f32 of F64 (1/3, -1e300 -> -inf, 5e-324 -> 0, 2)");
    t = tlm_safetensors_find(&st, "scalar_f16");
    check(t && t->numel == 1 && tlm_st_tensor_to_f32(t, out) == TLM_OK && (double)out[0] == 0.01000213623046875,
          "to_f32 of 0-d F16 = 0.010002136230469");
    t = tlm_safetensors_find(&st, "bf16");
    check(t && tlm_st_tensor_to_f32(t, out) == TLM_OK && out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.5f,
          "to_f32 of BF16");
    t = tlm_safetensors_find(&st, "i64");
    check_status(t ? tlm_st_tensor_to_f32(t, out) : TLM_OK, TLM_ERR_FORMAT, "i64", "to_f32 of I64");
    tlm_safetensors_free(&st);
    check(st.buffer == NULL && st.tensors == NULL && st.num_tensors == 0, "free clears the struct");
    tlm_safetensors_free(&st); /* twice is harmless */
    free(raw);

    /* no tensors at all */
    const char *p0 = tpath("zero.safetensors");
    check_status(tlm_safetensors_write(p0, NULL, 0), TLM_OK, NULL, "write of 0 tensors");
    s = tlm_safetensors_read(p0, &st);
    check(s == TLM_OK && st.num_tensors == 0, "read of 0 tensors");
    tlm_safetensors_free(&st);

    /* failures leave nothing behind and do not harm an existing file */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", tmpdir);
    check_status(tlm_safetensors_write(bad, e, n), TLM_ERR_IO, "no/such/dir", "write into a nonexistent directory");
    check(!file_exists(bad) && temporaries_left() == 0, "nothing written for the nonexistent directory");

    const char *dirpath = tpath("adir");
    mkdir(dirpath, 0700);
    check_status(tlm_safetensors_write(dirpath, e, n), TLM_ERR_INVALID_ARGUMENT, "is a directory",
                 "write onto a directory (refused before writing)");
    check(temporaries_left() == 0, "no temporary file is left after the refused write");

    tlm_st_entry dup[2] = {e[0], e[0]};
    check_status(tlm_safetensors_write(path, dup, 2), TLM_ERR_INVALID_ARGUMENT, "twice", "write with a duplicate name");
    const tlm_st_meta fmt[1] = {{"format", "np"}}, twice[2] = {{"k", "a"}, {"k", "b"}}, bad8[1] = {{"k", "\xff"}};
    check_status(tlm_safetensors_write_meta(path, e, n, fmt, 1), TLM_ERR_INVALID_ARGUMENT, "'format'",
                 "write with a metadata key 'format' (tlm's own; a file with it twice is refused by readers)");
    check_status(tlm_safetensors_write_meta(path, e, n, twice, 2), TLM_ERR_INVALID_ARGUMENT, "'k' given twice",
                 "write with a metadata key twice");
    check_status(tlm_safetensors_write_meta(path, e, n, bad8, 1), TLM_ERR_INVALID_ARGUMENT, "UTF-8",
                 "write with a metadata value that is not UTF-8");
    tlm_st_entry bad_name = e[1];
    bad_name.name = "w\xc0";
    check_status(tlm_safetensors_write(path, &bad_name, 1), TLM_ERR_INVALID_ARGUMENT, "not UTF-8",
                 "write with a tensor name that is not UTF-8");
    tlm_st_entry neg = e[1];
    neg.shape[0] = -4;
    check_status(tlm_safetensors_write(path, &neg, 1), TLM_ERR_INVALID_ARGUMENT, "negative", "write with a negative dim");
    s = tlm_safetensors_read(path, &st);
    check(s == TLM_OK && st.num_tensors == n && temporaries_left() == 0, "the earlier file is intact after failed writes");
    tlm_safetensors_free(&st);
}

/* a safetensors file from a header string and `data_len` bytes of data (hl: header length field,
 * or UINT64_MAX for the string's own length) */
static const char *st_file(const char *name, const char *hdr, uint64_t hl, size_t data_len) {
    const char *path = tpath(name);
    size_t len = strlen(hdr);
    unsigned char *buf = calloc(1, 8 + len + data_len);
    uint64_t v = hl == UINT64_MAX ? len : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(v >> (8 * i));
    memcpy(buf + 8, hdr, len);
    write_bytes(path, buf, 8 + len + data_len);
    free(buf);
    return path;
}

static void expect_st_format(const char *path, const char *needle, const char *what) {
    tlm_safetensors st;
    memset(&st, 0xab, sizeof st);
    tlm_status s = tlm_safetensors_read(path, &st);
    check_status(s, TLM_ERR_FORMAT, needle, what);
    if (s != TLM_OK && (st.buffer || st.tensors || st.num_tensors)) check(0, "  ...and the struct is cleared");
    if (s == TLM_OK) tlm_safetensors_free(&st);
}

/* safetensors files the reader refuses as FORMAT with a message naming `needle`: each a header
 * (its own length in the length field) and data_len zero bytes */
typedef struct {
    const char *name, *hdr;
    size_t data_len;
    const char *needle, *what;
} st_bad_file;

static void expect_st_bad_files(const st_bad_file *f, size_t n) {
    for (size_t i = 0; i < n; i++)
        expect_st_format(st_file(f[i].name, f[i].hdr, UINT64_MAX, f[i].data_len), f[i].needle, f[i].what);
}

static void test_safetensors_malformed(void) {
    const char *p = tpath("empty.safetensors");
    write_bytes(p, "", 0);
    expect_st_format(p, "empty.safetensors", "empty file");
    p = tpath("four.safetensors");
    write_bytes(p, "\x10\0\0\0", 4);
    expect_st_format(p, "8-byte", "4-byte file");
    expect_st_format(st_file("hl_big.safetensors", "{}", 100, 0), "exceeds", "header length > file size");
    expect_st_format(st_file("hl_2p63.safetensors", "{}", 1ull << 63, 0), "9223372036854775808", "header length 2^63");
    expect_st_format(st_file("hl_zero.safetensors", "{}", 0, 0), "JSON", "header length 0");
    static const st_bad_file bad[] = {
        {"badjson.safetensors", "{\"a\": {\"dtype\": ", 0, "JSON", "invalid JSON"},
        {"array.safetensors", "[1, 2, 3]", 0, "not an object", "JSON array, not an object"},
        {"trailing.safetensors", "{} x", 0, "after", "bytes after the JSON"},
        {"noofs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets", "missing data_offsets"},
        {"nodtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "missing dtype"},
        {"noshape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape", "missing shape"},
        {"f99.safetensors", "{\"w\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "F99", "unknown dtype F99"},
        {"dtnum.safetensors", "{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "'w'", "dtype of the wrong JSON type"},
        {"shstr.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}",
         4, "shape", "shape a string"},
        {"shfrac.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
         4, "shape", "fractional dim"},
        {"entnum.safetensors", "{\"w\":3}", 0, "'w'", "entry not an object"},
        {"oor.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         4, "'w'", "data_offsets past the end of the data"},
        {"mism.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
         8, "needs 12", "data_offsets length != numel * 4"},
        {"rev.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}",
         8, "'w'", "data_offsets begin > end"},
        {"ofs1.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}",
         8, "data_offsets", "data_offsets of length 1"},
        {"ofsneg.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
         8, "data_offsets", "negative data_offsets"},
        {"neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
         4, "negative", "negative dim"},
        {"ovf.safetensors", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}",
         0, "overflow", "numel * size overflows 64 bits"},
        {"ovf2.safetensors", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}",
         0, "overflow", "numel * 8 overflows 64 bits (numel 2^61)"},
        {"dims9.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         1, "dimensions", "9 dimensions"},
        {"dup.safetensors",
         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
         1, "twice", "a name twice"},
    };
    expect_st_bad_files(bad, sizeof bad / sizeof bad[0]);

    /* a valid hand-made file with odd key order reads (rules of the reference: test_safetensors_reference) */
    tlm_safetensors st;
    /* escapes that are not NUL: a quote, a backslash, a \u escape of 'A' */
    tlm_safetensors st0;
    tlm_status s0 = tlm_safetensors_read(st_file("escapes.safetensors",
                                                 "{\"q\\\"\\\\\\u0041\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                                                 UINT64_MAX, 1), &st0);
    check(s0 == TLM_OK && st0.num_tensors == 1 && !strcmp(st0.tensors[0].name, "q\"\\A"), "a name with escaped quote, backslash, \\u0041");
    if (s0 == TLM_OK) tlm_safetensors_free(&st0);
    const char *ok = st_file("meta.safetensors",
                             "{\"w\":{\"data_offsets\":[0,2],\"shape\":[],\"dtype\":\"BF16\"},\"__metadata__\":{\"a\":\"b\"}}  ",
                             UINT64_MAX, 2);
    tlm_status s = tlm_safetensors_read(ok, &st);
    check(s == TLM_OK && st.num_tensors == 1 && st.tensors[0].ndim == 0 && st.tensors[0].numel == 1,
          "hand-made file: keys in another order, __metadata__ after the tensor, 0-d BF16");
    if (s == TLM_OK) tlm_safetensors_free(&st);

    p = tpath("nofile.safetensors");
    s = tlm_safetensors_read(p, &st);
    check_status(s, TLM_ERR_IO, "No such file", "read of a nonexistent file");
    s = tlm_safetensors_read(tmpdir, &st);
    check_status(s, TLM_ERR_IO, NULL, "read of a directory");

    /* truncated copies of a valid file: every prefix, and two named cuts */
    float w[4] = {1, 2, 3, 4};
    uint16_t b[3] = {1, 2, 3};
    tlm_st_entry e[2] = {{"a", TLM_DTYPE_F32, 2, {2, 2}, w}, {"b", TLM_DTYPE_U16, 1, {3}, b}};
    const char *full = tpath("full.safetensors");
    tlm_safetensors_write(full, e, 2);
    size_t size;
    unsigned char *raw = read_bytes(full, &size);
    uint64_t hl = le64(raw);
    const char *cut = tpath("cut.safetensors");
    write_bytes(cut, raw, size - 3);
    expect_st_format(cut, "'b'", "truncated in the data section (names the tensor)");
    write_bytes(cut, raw, 8 + (size_t)hl / 2);
    expect_st_format(cut, "exceeds", "truncated inside the header");
    int wrong = 0;
    for (size_t len = 0; len < size; len++) {
        write_bytes(cut, raw, len);
        tlm_status r = tlm_safetensors_read(cut, &st);
        if (r != TLM_ERR_FORMAT) {
            wrong++;
            if (r == TLM_OK) tlm_safetensors_free(&st);
        }
    }
    check(wrong == 0, "every one of the %zu strict prefixes of a valid file is FORMAT (%d not)", size, wrong);

    /* random byte corruption: never a crash, only OK or FORMAT */
    uint64_t rng = 12345;
    int other = 0;
    unsigned char *mut = malloc(size);
    for (int it = 0; it < 3000; it++) {
        memcpy(mut, raw, size);
        int flips = 1 + (int)tlm_rng_below(&rng, 3);
        for (int f = 0; f < flips; f++) {
            size_t at = (size_t)tlm_rng_below(&rng, it % 2 ? size : 8 + hl); /* half the time in the header */
            mut[at] = (unsigned char)tlm_rng_below(&rng, 256);
        }
        write_bytes(cut, mut, size);
        tlm_status r = tlm_safetensors_read(cut, &st);
        if (r == TLM_OK) tlm_safetensors_free(&st);
        else if (r != TLM_ERR_FORMAT) other++;
    }
    check(other == 0, "3000 randomly corrupted files: each OK or FORMAT, no crash (%d other)", other);
    free(mut);
    free(raw);
}

/* ---- npy ------------------------------------------------------------------------------------- */

static void test_npy_roundtrip(void) {
    float f4[6] = {1.5f, -2.0f, 0.25f, 1e-30f, 3e38f, -0.0f};
    double f8[5] = {1.0 / 3.0, -1e300, 0, 7, 5e-324};
    int32_t i4[4] = {INT32_MIN, -1, 0, INT32_MAX};
    int64_t i8[6] = {INT64_MIN, -1, 0, 1, 1ll << 40, INT64_MAX};
    uint16_t u2[3] = {0, 1234, 65535};
    uint8_t u1[2] = {0, 255};
    uint16_t f2[2] = {0x3c00, 0x211f};
    float scalar = 42.5f;
    const struct { const char *name; tlm_dtype t; int ndim; int64_t shape[2]; const void *data; } c[] = {
        {"f4_2d.npy", TLM_DTYPE_F32, 2, {2, 3}, f4},  {"f8_1d.npy", TLM_DTYPE_F64, 1, {5}, f8},
        {"i4_2d.npy", TLM_DTYPE_I32, 2, {2, 2}, i4},  {"i8_2d.npy", TLM_DTYPE_I64, 2, {3, 2}, i8},
        {"u2_1d.npy", TLM_DTYPE_U16, 1, {3}, u2},     {"u1_1d.npy", TLM_DTYPE_U8, 1, {2}, u1},
        {"f2_1d.npy", TLM_DTYPE_F16, 1, {2}, f2},     {"f4_0d.npy", TLM_DTYPE_F32, 0, {0}, &scalar},
        {"f4_empty.npy", TLM_DTYPE_F32, 2, {0, 4}, NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *path = tpath(c[i].name);
        tlm_status s = tlm_npy_write(path, c[i].t, c[i].ndim, c[i].shape, c[i].data);
        int64_t numel = 1;
        for (int d = 0; d < c[i].ndim; d++) numel *= c[i].shape[d];
        size_t nbytes = (size_t)numel * tlm_dtype_size(c[i].t);
        size_t fsize = 0;
        unsigned char *raw = read_bytes(path, &fsize);
        int hdr_ok = s == TLM_OK && raw && fsize >= 10 + nbytes && (fsize - nbytes) % 64 == 0 &&
                     raw[6] == 1 && raw[7] == 0 && (size_t)(raw[8] | raw[9] << 8) + 10 == fsize - nbytes &&
                     raw[fsize - nbytes - 1] == '\n' && temporaries_left() == 0;
        free(raw);
        tlm_array a;
        tlm_status r = tlm_npy_read(path, &a);
        int ok = s == TLM_OK && r == TLM_OK && a.dtype == c[i].t && a.ndim == c[i].ndim && a.numel == numel;
        for (int d = 0; ok && d < c[i].ndim; d++) ok &= a.shape[d] == c[i].shape[d];
        ok = ok && (nbytes == 0 || memcmp(a.data, c[i].data, nbytes) == 0);
        check(hdr_ok && ok, "npy %s: v1.0, data at a multiple of 64, no tmp left; dtype, shape, data round trip",
              c[i].name);
        if (r == TLM_OK) tlm_array_free(&a);
    }
    /* the exact header numpy writes for a (2, 3) float32 array, and for 1-d and 0-d */
    size_t n;
    unsigned char *raw = read_bytes(tpath("f4_2d.npy"), &n);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    check(raw && memcmp(raw + 10, want, strlen(want)) == 0 && n == 128 + 24, "npy header text as numpy writes it");
    free(raw);
    raw = read_bytes(tpath("u2_1d.npy"), &n);
    check(raw && strstr((char *)raw + 10, "'shape': (3,), }") != NULL, "1-d shape written as (3,)");
    free(raw);
    raw = read_bytes(tpath("f4_0d.npy"), &n);
    check(raw && strstr((char *)raw + 10, "'shape': (), }") != NULL, "0-d shape written as ()");
    free(raw);

    check_status(tlm_npy_write(tpath("bf.npy"), TLM_DTYPE_BF16, 1, (int64_t[]){1}, f2), TLM_ERR_UNSUPPORTED,
                 "bfloat16", "npy write of BF16");
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/x.npy", tmpdir);
    check_status(tlm_npy_write(bad, TLM_DTYPE_F32, 1, (int64_t[]){2}, f4), TLM_ERR_IO, "no/such", "npy write into a nonexistent directory");
}

/* a .npy file from a version, a header dict text (padded to 64 here) and data bytes */
static const char *npy_file(const char *name, int major, const char *dict, const void *data, size_t nbytes) {
    const char *path = tpath(name);
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hl = total - pre;
    unsigned char *buf = malloc(total + nbytes);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hl >> (8 * i));
    memset(buf + pre, ' ', hl);
    memcpy(buf + pre, dict, dl);
    buf[total - 1] = '\n';
    if (nbytes) memcpy(buf + total, data, nbytes);
    write_bytes(path, buf, total + nbytes);
    free(buf);
    return path;
}

static void test_npy_variants(void) {
    float d[6] = {1, 2, 3, 4, 5, 6};
    struct { const char *name; int major; const char *dict; int ndim; int64_t s0, s1; } v[] = {
        {"v_order.npy", 1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", 2, 2, 3},
        {"v_ws.npy", 1, "{ 'descr' :'<f4' ,'fortran_order':False,'shape':( 2 ,3 , ) , }", 2, 2, 3},
        {"v_dq.npy", 1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (6,)}", 1, 6, 0},
        {"v2.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 2, 3, 2},
        {"v3.npy", 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 1, 6, 0},
        {"v_0d.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tlm_array a;
        size_t nb = v[i].ndim == 0 ? 4 : 24;
        tlm_status s = tlm_npy_read(npy_file(v[i].name, v[i].major, v[i].dict, d, nb), &a);
        int ok = s == TLM_OK && a.dtype == TLM_DTYPE_F32 && a.ndim == v[i].ndim &&
                 (v[i].ndim < 1 || a.shape[0] == v[i].s0) && (v[i].ndim < 2 || a.shape[1] == v[i].s1) &&
                 a.numel == (v[i].ndim ? 6 : 1) && memcmp(a.data, d, nb) == 0;
        check(ok, "npy header variant %s: %s", v[i].name, v[i].dict);
        if (s == TLM_OK) tlm_array_free(&a);
    }
}

static void expect_npy(const char *path, tlm_status want, const char *needle, const char *what) {
    tlm_array a;
    tlm_status s = tlm_npy_read(path, &a);
    check_status(s, want, needle, what);
    if (s == TLM_OK) tlm_array_free(&a);
}

static void test_npy_malformed(void) {
    float d[6] = {0};
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    /* broken before the header dict: each file given byte by byte */
    static const struct { const char *name, *bytes; size_t len; const char *needle, *what; } raw_bad[] = {
        {"magic.npy", "\x93NUMPZ\x01\x00\x76\x00{}", 12, "magic", "bad magic"},
        {"short.npy", "\x93NU", 3, "short.npy", "3-byte file"},
        {"ver.npy", "\x93NUMPY\x04\x00\x10\x00{}", 12, "4.0", "version 4.0"},
        {"trunchdr.npy", "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_", 34, "header", "truncated header"},
    };
    for (size_t i = 0; i < sizeof raw_bad / sizeof raw_bad[0]; i++) {
        const char *p = tpath(raw_bad[i].name);
        write_bytes(p, raw_bad[i].bytes, raw_bad[i].len);
        expect_npy(p, TLM_ERR_FORMAT, raw_bad[i].needle, raw_bad[i].what);
    }
    /* version 1.0 files with a bad header dict, or too few data bytes: FORMAT, naming `needle` */
    const struct { const char *name, *dict; size_t nbytes; const char *needle, *what; } bad[] = {
        {"fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "fortran_order",
         "fortran_order True"},
        {"be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, ">f4", "big-endian '>f4'"},
        {"c8.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", 24, "'<c8'", "unsupported '<c8'"},
        {"struct.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12, "descr",
         "structured dtype"},
        {"truncdata.npy", good, 23, "truncated", "truncated data (23 of 24 bytes)"},
        {"noshape.npy", "{'descr': '<f4', 'fortran_order': False, }", 24, "'shape'", "header without 'shape'"},
        {"nodescr.npy", "{'fortran_order': False, 'shape': (2, 3), }", 24, "'descr'", "header without 'descr'"},
        {"notuple.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", 24, "shape",
         "shape (6) is not a tuple"},
        {"negdim.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 24, "shape", "negative dim"},
        {"extrakey.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 24, "'x'",
         "unexpected key"},
        {"dupkey.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", 24, "twice",
         "key twice"},
        {"garbage.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x", 24, "after",
         "bytes after the dict"},
        {"ovf.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 24, "overflow",
         "shape whose size overflows"},
        {"bigdim.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", 24, "overflow",
         "dimension beyond 64 bits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_npy(npy_file(bad[i].name, 1, bad[i].dict, d, bad[i].nbytes), TLM_ERR_FORMAT, bad[i].needle, bad[i].what);
    expect_npy(tpath("nofile.npy"), TLM_ERR_IO, "No such file", "nonexistent .npy");

    /* every strict prefix of a valid file is FORMAT */
    const char *full = npy_file("fullp.npy", 1, good, d, 24);
    size_t size;
    unsigned char *raw = read_bytes(full, &size);
    const char *cut = tpath("cutp.npy");
    int wrong = 0;
    for (size_t len = 0; len < size; len++) {
        write_bytes(cut, raw, len);
        tlm_array a;
        tlm_status s = tlm_npy_read(cut, &a);
        if (s != TLM_ERR_FORMAT) wrong++;
        if (s == TLM_OK) tlm_array_free(&a);
    }
    check(wrong == 0, "every one of the %zu strict prefixes of a valid .npy is FORMAT (%d not)", size, wrong);
    uint64_t rng = 99;
    int other = 0;
    for (int it = 0; it < 3000; it++) {
        unsigned char mut[256];
        memcpy(mut, raw, size);
        for (int f = 0; f < 2; f++) mut[tlm_rng_below(&rng, 128)] = (unsigned char)tlm_rng_below(&rng, 256);
        write_bytes(cut, mut, size);
        tlm_array a;
        tlm_status s = tlm_npy_read(cut, &a);
        if (s == TLM_OK) tlm_array_free(&a);
        else if (s != TLM_ERR_FORMAT) other++;
    }
    check(other == 0, "3000 randomly corrupted .npy headers: each OK or FORMAT, no crash (%d other)", other);
    free(raw);
}

/* ---- hardening: the readers against hostile files -------------------------------------------- */

/* the reference's rules (huggingface/safetensors read_metadata, Metadata::validate) */
static void test_safetensors_reference(void) {
#define W4(name, b, e) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" #b "," #e "]}"
    static const st_bad_file bad[] = {
        {"overlap.safetensors", "{" W4("a", 0, 4) "," W4("b", 2, 6) "}",
         6, "overlap tensor 'a'", "data_offsets overlapping the tensor before"},
        {"alias.safetensors",
         "{" W4("a", 0, 4) "," W4("b", 0, 4) "," W4("c", 0, 4) "," W4("d", 0, 4) ","
         W4("e", 0, 4) "," W4("f", 0, 4) "," W4("g", 0, 4) "}",
         4, "overlap", "seven tensors aliasing one buffer"},
        {"gap.safetensors", "{" W4("a", 0, 4) "," W4("b", 8, 12) "}", 12, "bytes [4, 8)", "a gap between two tensors"},
        {"gap0.safetensors", "{" W4("a", 4, 8) "}", 8, "bytes [0, 4)", "the first tensor not at offset 0"},
        {"trail.safetensors", "{" W4("a", 0, 4) "}", 9, "5 trailing bytes", "trailing bytes after the last tensor"},
        {"trail0.safetensors", "{}", 3, "3 trailing bytes", "data bytes with no tensor at all"},
        {"dim2p63.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808,0],\"data_offsets\":[0,0]}}",
         0, "2^63", "a dimension of 2^63 (would read as negative)"},
        {"metanum.safetensors", "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}," W4("a", 0, 4) "}",
         4, "__metadata__ entry 'n'", "a non-string __metadata__ value"},
        {"metaarr.safetensors", "{\"__metadata__\":[\"pt\"]," W4("a", 0, 4) "}",
         4, "__metadata__", "__metadata__ an array, not an object"},
        {"metastr.safetensors", "{\"__metadata__\":\"pt\"}", 0, "__metadata__", "__metadata__ a string"},
        {"meta2.safetensors", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice", "__metadata__ twice"},
        {"metadup.safetensors", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}",
         0, "'k' twice", "a __metadata__ key twice"},
        {"noname.safetensors", "{" W4("", 0, 4) "}", 4, "empty name", "an empty tensor name"},
        {"utf8.safetensors", "{" W4("\xff", 0, 4) "}", 4, "UTF-8", "a name that is not UTF-8"},
        {"overlong.safetensors", "{" W4("\xc0\xaf", 0, 4) "}", 4, "UTF-8", "an overlong UTF-8 form"},
        {"ctl.safetensors", "{" W4("a\x01", 0, 4) "}", 4, "control byte", "a control byte in a name"},
        {"escnul.safetensors", "{" W4("a\\u0000b", 0, 4) "}",
         4, "escaped NUL", "an escaped NUL in a name (\"a\\u0000b\" would read as \"a\")"},
        {"escnulmeta.safetensors", "{\"__metadata__\":{\"d_model\":\"64\\u0000 junk\"}}",
         0, "escaped NUL", "an escaped NUL in a __metadata__ value"},
        /* the header ends the file with a dangling comma: older cJSON read one byte past it (ASan) */
        {"comma.safetensors", "{\"a\":1,", 0, "JSON", "a header ending the file in a comma"},
    };
    expect_st_bad_files(bad, sizeof bad / sizeof bad[0]);
    /* NUL inside a name: "a\0b" would be read as "a" */
    const char *p = st_file("nul.safetensors", "{\"a_b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                            UINT64_MAX, 0);
    size_t size;
    unsigned char *raw = read_bytes(p, &size);
    raw[8 + 3] = '\0';
    write_bytes(p, raw, size);
    free(raw);
    expect_st_format(p, "control byte (0x00) at byte 3", "a NUL byte inside a tensor name");

    /* 20000 empty tensors, then one name again: found (the names are sorted, not compared pairwise) */
    enum { MANY = 20000 };
    const size_t cap = (size_t)MANY * 64 + 256;
    char *many = malloc(cap);
    size_t len = 0;
    for (int i = 0; i <= MANY; i++)
        len += (size_t)snprintf(many + len, cap - len, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}",
                                i ? "," : "{", i < MANY ? i : 4321);
    snprintf(many + len, cap - len, "}");
    expect_st_format(st_file("many_dup.safetensors", many, UINT64_MAX, 0), "'t4321' appears twice",
                     "20001 tensors, one name twice");
    many[len - strlen("4321\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}")] = 'x';
    tlm_safetensors stm;
    tlm_status sm = tlm_safetensors_read(st_file("many.safetensors", many, UINT64_MAX, 0), &stm);
    check(sm == TLM_OK && stm.num_tensors == MANY + 1, "20001 tensors, names distinct: read");
    if (sm == TLM_OK) tlm_safetensors_free(&stm);
    free(many);

    /* what the reference accepts */
    tlm_safetensors st;
    tlm_status s = tlm_safetensors_read(
        st_file("order.safetensors", "{" W4("b", 4, 8) "," W4("a", 0, 4) ",\"__metadata__\":null}", UINT64_MAX, 8), &st);
    check(s == TLM_OK && st.num_tensors == 2 && !strcmp(st.tensors[0].name, "b") &&
              (const unsigned char *)st.tensors[0].data == (const unsigned char *)st.buffer + 8 + strlen("{" W4("b", 4, 8) "," W4("a", 0, 4) ",\"__metadata__\":null}") + 4 &&
              st.num_meta == 0,
          "tensors listed out of offset order, __metadata__ null: read (the reference sorts by offset)");
    if (s == TLM_OK) tlm_safetensors_free(&st);
    s = tlm_safetensors_read(st_file("empties.safetensors",
                                     "{\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}," W4("a", 0, 4) ","
                                     "\"z0\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                                     "\"z2\":{\"dtype\":\"F32\",\"shape\":[5,0],\"data_offsets\":[4,4]},"
                                     "\"__metadata__\":{\"format\":\"pt\",\"d_model\":\"512\"}}",
                                     UINT64_MAX, 4), &st);
    check(s == TLM_OK && st.num_tensors == 4 && st.num_meta == 2 && tlm_safetensors_meta(&st, "d_model") &&
              !strcmp(tlm_safetensors_meta(&st, "d_model"), "512"),
          "empty tensors at the ends of a tensor and at 0; __metadata__ entries read");
    if (s == TLM_OK) tlm_safetensors_free(&st);
    s = tlm_safetensors_read(st_file("utf8ok.safetensors", "{" W4("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 0, 4) "}",
                                     UINT64_MAX, 4), &st);
    check(s == TLM_OK && st.num_tensors == 1 && !strcmp(st.tensors[0].name, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
          "a UTF-8 name of 2, 3 and 4-byte characters reads");
    if (s == TLM_OK) tlm_safetensors_free(&st);
#undef W4
}

/* every size a header claims is checked against the file before anything is allocated */
static void test_sizes_before_allocation(void) {
    uint64_t d = 0;
    /* the file: 10 bytes of magic, version and length, a 62-byte header, no data */
    static const char dict[] = "{'descr':'<f4','fortran_order':False,'shape':(1099511627776,)}";
    unsigned char tiny[72] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof dict - 1, 0};
    memcpy(tiny + 10, dict, sizeof dict - 1);
    const char *p = tpath("huge.npy");
    write_bytes(p, tiny, 10 + sizeof dict - 1);
    expect_npy(p, TLM_ERR_FORMAT, "needs 4398046511104 bytes of data, the file holds 0",
               "72-byte .npy claiming shape (2^40,): refused before allocating 4 TiB");
    tlm_tokens t;
    p = npy_file("huge_tok.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1099511627776,), }", &d, 8);
    check_status(tlm_tokens_load(p, 50257, &t), TLM_ERR_FORMAT, "needs 2199023255552 bytes",
                 "72-byte token .npy claiming 2^40 ids: refused before allocating 4 TiB of ids");
    p = npy_file("big2d.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (65536, 65536), }", &d, 8);
    expect_npy(p, TLM_ERR_FORMAT, "shape [65536, 65536] of F64", ".npy claiming 32 GiB names its shape");
    /* a v2.0 header length of 1 MiB in a 20-byte file */
    p = tpath("hl.npy");
    write_bytes(p, "\x93NUMPY\x02\x00\x00\x00\x10\x00{'descr'", 20);
    expect_npy(p, TLM_ERR_FORMAT, "ends inside its 1048576-byte header", ".npy header length beyond the file");
    /* not regular files: refused at once (a FIFO would block in open, /dev/zero never ends) */
    const char *fifo = tpath("fifo.npy");
    check(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    expect_npy(fifo, TLM_ERR_IO, "not a regular file", "a FIFO as .npy");
    check_status(tlm_tokens_load(fifo, 10, &t), TLM_ERR_IO, "not a regular file", "a FIFO as token .npy");
    expect_npy("/dev/zero", TLM_ERR_IO, "not a regular file", "/dev/zero as .npy");
    tlm_safetensors st;
    check_status(tlm_safetensors_read("/dev/null", &st), TLM_ERR_IO, "not a regular file", "/dev/null as safetensors");
    check_status(tlm_tokens_load("/dev/zero.bin", 10, &t), TLM_ERR_IO, NULL, "a missing .bin");
}

/* messages that name the problem */
static void test_reader_messages(void) {
    /* a [0, 17] array where [batch, context_length] is expected */
    const char *p = tpath("empty_batch.npy");
    tlm_npy_write(p, TLM_DTYPE_I64, 2, (int64_t[]){0, 17}, NULL);
    tlm_array a;
    tlm_status s = tlm_npy_read(p, &a);
    check(s == TLM_OK && a.ndim == 2 && a.numel == 0, "a [0, 17] .npy reads (numpy writes such arrays)");
    if (s == TLM_OK) {
        check_status(tlm_array_check_shape(&a, 2, 1 << 20, "[batch, context_length]", "inputs X.npy"),
                     TLM_ERR_INVALID_ARGUMENT, "inputs X.npy: expected shape [batch, context_length] (2 dimensions, each in [1, 1048576]), got [0, 17]: an empty array",
                     "[0, 17] where [batch, context_length] is expected: the message names both shapes");
        a.shape[0] = 3;
        a.numel = 51;
        check_status(tlm_array_check_shape(&a, 2, 1 << 20, "[batch, context_length]", "inputs X.npy"), TLM_OK, NULL,
                     "[3, 17] passes");
        a.ndim = 3;
        a.shape[2] = 2;
        check_status(tlm_array_check_shape(&a, 2, 1 << 20, "[batch, context_length]", "inputs X.npy"),
                     TLM_ERR_INVALID_ARGUMENT, "got [3, 17, 2]", "a 3-D array named by its shape");
        tlm_array_free(&a);
    }
    char buf[TLM_SHAPE_STRLEN];
    const int64_t big[8] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    check(!strcmp(tlm_shape_format(0, NULL, buf, sizeof buf), "[]") &&
              !strcmp(tlm_shape_format(1, (int64_t[]){5}, buf, sizeof buf), "[5]") &&
              strlen(tlm_shape_format(8, big, buf, sizeof buf)) == 2 + 8 * 19 + 7 * 2,
          "shape text: [], [5], eight 19-digit dims fit TLM_SHAPE_STRLEN");
    check(!strcmp(tlm_shape_format(2, (int64_t[]){12, 34}, buf, 5), "[12,"), "shape text cut to a small buffer");

    tlm_tokens t;
    p = tpath("tok_2d_msg.npy");
    tlm_npy_write(p, TLM_DTYPE_I32, 2, (int64_t[]){1, 3}, (int32_t[]){1, 2, 3});
    check_status(tlm_tokens_load(p, 10, &t), TLM_ERR_FORMAT, "must be 1-D, this array has shape [1, 3]",
                 "a 2-D token .npy named by its shape");

    /* an integer .npy where floats are expected: named, never "tensor '(null)'" */
    int32_t i4[2] = {1, 2};
    tlm_st_tensor unnamed = {.dtype = TLM_DTYPE_I32, .ndim = 1, .shape = {2}, .numel = 2, .data = i4};
    float f[2];
    s = tlm_st_tensor_to_f32(&unnamed, f);
    check(s == TLM_ERR_FORMAT && !strstr(tlm_last_error(), "(null)") && strstr(tlm_last_error(), "I32"),
          "to_f32 of an unnamed I32 tensor: FORMAT naming I32, no '(null)' (%s)", tlm_last_error());
    tlm_array ia = {.dtype = TLM_DTYPE_I32, .ndim = 1, .shape = {2}, .numel = 2, .data = i4};
    check_status(tlm_array_to_f32(&ia, f, "a.npy"), TLM_ERR_FORMAT, "a.npy: dtype I32 is not a float dtype",
                 "array_to_f32 of an I32 .npy names the file");
    uint16_t h[2] = {0x3c00, 0xc000};
    tlm_array ha = {.dtype = TLM_DTYPE_F16, .ndim = 1, .shape = {2}, .numel = 2, .data = h};
    check(tlm_array_to_f32(&ha, f, "h.npy") == TLM_OK && f[0] == 1.0f && f[1] == -2.0f, "array_to_f32 of F16");

    /* one format passed for the other */
    p = tpath("weights.npy");
    tlm_npy_write(p, TLM_DTYPE_F32, 1, (int64_t[]){2}, (float[]){1, 2});
    expect_st_format(p, "weights.npy: this is a .npy file, not safetensors", "a .npy passed as safetensors");
    /* PyTorch's own files (torch.save: a zip archive; its legacy format: a bare pickle) are named, with the
     * conversion, not reported as a bad header length */
    p = tpath("model.pt");
    FILE *pt = fopen(p, "wb");
    fwrite("PK\x03\x04\x00\x00\x08\x00archive/data.pkl", 1, 24, pt);
    fclose(pt);
    expect_st_format(p, "model.pt: this is a PyTorch file (torch.save's zip archive of pickles), not safetensors",
                     "a torch.save .pt passed as safetensors: named");
    expect_st_format(p, "safetensors.torch.save_file(model.state_dict(), \"w.safetensors\")",
                     "a torch.save .pt passed as safetensors: how to convert it");
    expect_npy(p, TLM_ERR_FORMAT, "model.pt: this is a PyTorch file", "a torch.save .pt passed as .npy");
    p = tpath("legacy.pt");
    pt = fopen(p, "wb");
    fwrite("\x80\x02\x8a\x0a" "lz\xfc\x9c" "F\xf9 j\xa8P\x19.", 1, 16, pt);
    fclose(pt);
    expect_st_format(p, "legacy.pt: this is a Python pickle (torch.save's legacy format), not safetensors",
                     "a legacy torch.save pickle passed as safetensors");
    p = tpath("arr.safetensors");
    tlm_safetensors_write(p, &(tlm_st_entry){"w", TLM_DTYPE_F32, 1, {2}, (float[]){1, 2}}, 1);
    expect_npy(p, TLM_ERR_FORMAT, "arr.safetensors: this is a safetensors file, not .npy", "a safetensors passed as .npy");
    check_status(tlm_tokens_load(p, 10, &t), TLM_ERR_FORMAT, "this is a safetensors file",
                 "a safetensors passed as a token file");
}

/* ---- tokens ---------------------------------------------------------------------------------- */

static void test_tokens(void) {
    tlm_tokens t;
    uint16_t ids[10] = {0, 1, 2, 3, 9999, 5, 6, 7, 8, 9};
    const char *bin = tpath("tok.bin");
    write_bytes(bin, ids, sizeof ids);
    tlm_status s = tlm_tokens_load(bin, 10000, &t);
    int ok = s == TLM_OK && t.n == 10;
    for (int i = 0; ok && i < 10; i++) ok &= t.ids[i] == ids[i];
    check(ok, "raw uint16 .bin loads as int32 ids");
    if (s == TLM_OK) tlm_tokens_free(&t);
    check_status(tlm_tokens_load(bin, 9999, &t), TLM_ERR_INVALID_ARGUMENT, "9999 at index 4", ".bin id 9999 >= vocab 9999");
    const char *odd = tpath("odd.bin");
    write_bytes(odd, ids, 7);
    check_status(tlm_tokens_load(odd, 10000, &t), TLM_ERR_FORMAT, "odd", ".bin of odd length");
    check_status(tlm_tokens_load(tpath("none.bin"), 10000, &t), TLM_ERR_IO, "No such file", "nonexistent .bin");

    int64_t i8[5] = {1, 2, 70000, 4, 5};
    const char *p = tpath("tok_i8.npy");
    tlm_npy_write(p, TLM_DTYPE_I64, 1, (int64_t[]){5}, i8);
    check_status(tlm_tokens_load(p, 10000, &t), TLM_ERR_INVALID_ARGUMENT, "70000", "int64 .npy with id 70000 >= vocab 10000");
    s = tlm_tokens_load(p, 70001, &t);
    check(s == TLM_OK && t.n == 5 && t.ids[2] == 70000, "int64 .npy loads with vocab 70001");
    if (s == TLM_OK) tlm_tokens_free(&t);
    int32_t i4[3] = {5, -1, 3};
    p = tpath("tok_i4.npy");
    tlm_npy_write(p, TLM_DTYPE_I32, 1, (int64_t[]){3}, i4);
    check_status(tlm_tokens_load(p, 10, &t), TLM_ERR_INVALID_ARGUMENT, "-1 at index 1", "int32 .npy with id -1");
    uint8_t u1[4] = {0, 1, 2, 255};
    p = tpath("tok_u1.npy");
    tlm_npy_write(p, TLM_DTYPE_U8, 1, (int64_t[]){4}, u1);
    s = tlm_tokens_load(p, 256, &t);
    check(s == TLM_OK && t.n == 4 && t.ids[3] == 255, "uint8 .npy loads");
    if (s == TLM_OK) tlm_tokens_free(&t);
    float f4[3] = {1, 2, 3};
    p = tpath("tok_f4.npy");
    tlm_npy_write(p, TLM_DTYPE_F32, 1, (int64_t[]){3}, f4);
    check_status(tlm_tokens_load(p, 10, &t), TLM_ERR_FORMAT, "F32", "float32 .npy as tokens");
    p = tpath("tok_2d.npy");
    tlm_npy_write(p, TLM_DTYPE_I32, 2, (int64_t[]){1, 3}, (int32_t[]){1, 2, 3});
    check_status(tlm_tokens_load(p, 10, &t), TLM_ERR_FORMAT, "1-D", "2-D .npy as tokens");
    check_status(tlm_tokens_load(tpath("f4_0d.npy"), 10, &t), TLM_ERR_FORMAT, "1-D", "0-d .npy as tokens");
    p = tpath("tok_trunc.npy");
    {
        const char *dict = "{'descr': '<u2', 'fortran_order': False, 'shape': (100,), }";
        npy_file("tok_trunc.npy", 1, dict, ids, 20);
    }
    check_status(tlm_tokens_load(p, 10000, &t), TLM_ERR_FORMAT, "truncated", "token .npy with truncated data");

    /* more than one read chunk (65536): values and the index in messages stay right */
    int64_t big = 200000;
    uint16_t *u2 = malloc((size_t)big * 2);
    for (int64_t i = 0; i < big; i++) u2[i] = (uint16_t)(i % 50000);
    p = tpath("tok_big.npy");
    tlm_npy_write(p, TLM_DTYPE_U16, 1, &big, u2);
    s = tlm_tokens_load(p, 50000, &t);
    ok = s == TLM_OK && t.n == big;
    for (int64_t i = 0; ok && i < big; i++) ok &= t.ids[i] == i % 50000;
    check(ok, "200000-token uint16 .npy loads across read chunks");
    if (s == TLM_OK) tlm_tokens_free(&t);
    u2[150001] = 60000;
    tlm_npy_write(p, TLM_DTYPE_U16, 1, &big, u2);
    check_status(tlm_tokens_load(p, 50000, &t), TLM_ERR_INVALID_ARGUMENT, "60000 at index 150001",
                 "bad id in the third chunk names its index");
    free(u2);

    /* tlm_array_to_tokens */
    tlm_array a = {.dtype = TLM_DTYPE_I64, .ndim = 2, .shape = {1, 5}, .numel = 5, .data = i8};
    int32_t dst[5];
    check_status(tlm_array_to_tokens(&a, dst, 10000, "inputs X.npy"), TLM_ERR_INVALID_ARGUMENT, "inputs X.npy: token id 70000",
                 "array_to_tokens with id 70000 >= vocab 10000");
    s = tlm_array_to_tokens(&a, dst, 100000, "inputs X.npy");
    check(s == TLM_OK && dst[0] == 1 && dst[2] == 70000 && dst[4] == 5, "array_to_tokens of a 2-D int64 array");
    a.dtype = TLM_DTYPE_F32;
    a.data = f4;
    a.numel = 3;
    check_status(tlm_array_to_tokens(&a, dst, 10, "inputs X.npy"), TLM_ERR_FORMAT, "inputs X.npy", "array_to_tokens of F32");
}

static void test_get_batch(void) {
    enum { N = 100, B = 8, T = 16 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = 1000 + i;
    tlm_tokens t = {ids, N};
    int32_t in[B * T], tg[B * T];
    const tlm_batch_draw one = {7, 0, 0, 1};
    int ok = tlm_tokens_get_batch(&t, B, T, one, in, tg) == TLM_OK;
    for (int b = 0; ok && b < B; b++) {
        int s = in[b * T] - 1000;
        ok &= s >= 0 && s <= N - T - 1;
        for (int j = 0; j < T; j++) ok &= in[b * T + j] == 1000 + s + j && tg[b * T + j] == in[b * T + j] + 1;
    }
    check(ok, "get_batch: rows are consecutive windows, targets = inputs shifted by one, starts in [0, n-T-1]");
    int32_t in2[B * T], tg2[B * T];
    tlm_tokens_get_batch(&t, B, T, one, in2, tg2);
    check(memcmp(in, in2, sizeof in) == 0, "get_batch is deterministic for (seed, step)");
    tlm_tokens_get_batch(&t, B, T, (tlm_batch_draw){7, 1, 0, 1}, in2, tg2);
    check(memcmp(in, in2, sizeof in) != 0, "the next step draws another batch");

    /* 4 ranks of 2 rows: each the matching rows of one process's batch of 8, and not all alike */
    int same = 1, distinct = 0;
    for (int r = 0; r < 4; r++) {
        int32_t rin[2 * T], rtg[2 * T];
        ok = tlm_tokens_get_batch(&t, 2, T, (tlm_batch_draw){7, 0, r, 4}, rin, rtg) == TLM_OK;
        same &= ok && memcmp(rin, in + (size_t)r * 2 * T, sizeof rin) == 0 && memcmp(rtg, tg + (size_t)r * 2 * T, sizeof rtg) == 0;
        distinct += r > 0 && rin[0] != in[0];
    }
    check(same && distinct > 0, "rank r of 4 (batch 2 each) draws rows 2r, 2r+1 of the global batch of 8");
    check_status(tlm_tokens_get_batch(&t, B, T, (tlm_batch_draw){7, 0, 4, 4}, in, tg), TLM_ERR_INVALID_ARGUMENT,
                 "rank 4", "get_batch with rank 4 of 4");

    /* n = T + 3: starts take exactly the values 0, 1, 2 */
    tlm_tokens small = {ids, T + 3};
    int seen[T + 3] = {0}, bad = 0;
    for (int it = 0; it < 300; it++) {
        tlm_tokens_get_batch(&small, B, T, (tlm_batch_draw){7, it, 0, 1}, in, tg);
        for (int b = 0; b < B; b++) {
            int s = in[b * T] - 1000;
            if (s < 0 || s > 2 || tg[b * T + T - 1] != 1000 + s + T) bad++;
            else seen[s]++;
        }
    }
    check(!bad && seen[0] && seen[1] && seen[2], "n = T+3: starts are 0, 1, 2 (counts %d %d %d), last target id[s+T]",
          seen[0], seen[1], seen[2]);
    tlm_tokens exact = {ids, T + 1};
    ok = tlm_tokens_get_batch(&exact, 2, T, one, in, tg) == TLM_OK && in[0] == 1000 && tg[T - 1] == 1000 + T &&
         in[T] == 1000;
    check(ok, "n = T+1: the only start is 0");
    tlm_tokens tiny = {ids, T};
    check_status(tlm_tokens_get_batch(&tiny, B, T, one, in, tg), TLM_ERR_INVALID_ARGUMENT, "too few", "get_batch with n = T < T+1");
    check_status(tlm_tokens_get_batch(&t, 0, T, one, in, tg), TLM_ERR_INVALID_ARGUMENT, NULL, "get_batch with B = 0");
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else remove(p);
    }
    closedir(d);
    rmdir(dir);
}

/* hardening: a message that prefixes the reason keeps it; numbers range-checked before a cast; whole text
 * files read only from regular files of at most a limit */
static void test_input_hardening(void) {
    tlm_fail(TLM_ERR_FORMAT, "lr_max = 1e+30 is outside [0, 10]");
    tlm_fail(TLM_ERR_FORMAT, "%s: %s", "state.json", tlm_last_error());
    check(strcmp(tlm_last_error(), "state.json: lr_max = 1e+30 is outside [0, 10]") == 0,
          "tlm_fail with tlm_last_error() as an argument keeps the reason (got '%s')", tlm_last_error());
    struct {
        double v;
        int64_t lo, hi;
        bool ok;
        int64_t want;
    } cases[] = {{0, 0, 10, true, 0},          {10, 0, 10, true, 10},          {11, 0, 10, false, 0},
                 {-1, 0, 10, false, 0},        {2.5, 0, 10, false, 0},         {NAN, 0, 10, false, 0},
                 {INFINITY, 0, 10, false, 0},  {-INFINITY, INT64_MIN, INT64_MAX, false, 0},
                 {1e300, INT64_MIN, INT64_MAX, false, 0},
                 {9223372036854775808.0, INT64_MIN, INT64_MAX, false, 0},  /* 2^63: one past INT64_MAX */
                 {-9223372036854775808.0, INT64_MIN, INT64_MAX, true, INT64_MIN},
                 {9007199254740992.0, 0, INT64_MAX, true, 9007199254740992}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t out = -7;
        const bool ok = tlm_double_to_int64(cases[i].v, cases[i].lo, cases[i].hi, &out);
        check(ok == cases[i].ok && out == (ok ? cases[i].want : -7), "tlm_double_to_int64(%g, [%lld, %lld]): %d %lld",
              cases[i].v, (long long)cases[i].lo, (long long)cases[i].hi, ok, (long long)out);
    }
    char *text = NULL;
    size_t n = 0;
    const char *fifo = tpath("state.fifo");
    check(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    check_status(tlm_input_read_text(fifo, 1024, &text, &n), TLM_ERR_IO, "state.fifo: a FIFO, not a regular file",
                 "a FIFO read as text: refused at once");
    check_status(tlm_input_read_text("/dev/zero", 1024, &text, &n), TLM_ERR_IO,
                 "/dev/zero: a character device, not a regular file", "/dev/zero read as text");
    check_status(tlm_input_read_text(tmpdir, 1024, &text, &n), TLM_ERR_IO, "a directory, not a regular file",
                 "a directory read as text");
    const char *p = tpath("five.json");
    write_bytes(p, "[1,2]", 5);
    check_status(tlm_input_read_text(p, 4, &text, &n), TLM_ERR_FORMAT, "5 bytes, over the limit of 4 bytes",
                 "a file one byte over its limit");
    check_status(tlm_input_read_text(p, 5, &text, &n), TLM_OK, NULL, "a file at its limit");
    check(text && n == 5 && strcmp(text, "[1,2]") == 0, "the text read whole, NUL-terminated");
    free(text);
    check_status(tlm_input_read_text(p, (uint64_t)2 << 20, &text, &n), TLM_OK, NULL, "under a 2 MiB limit");
    free(text);
    const char *big = tpath("big.json"); /* sparse: 3 MiB and one byte */
    write_bytes(big, "{", 1);
    check(truncate(big, (3 << 20) + 1) == 0, "truncate %s", big);
    check_status(tlm_input_read_text(big, 3 << 20, &text, &n), TLM_ERR_FORMAT,
                 "big.json: 3145729 bytes, over the limit of 3 MiB", "the limit named in MiB");
}

int main(void) {
    strcpy(tmpdir, "/tmp/tlm_test_io_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_dtype();
    test_convert_hand();
    test_convert_sweep();
    test_safetensors_roundtrip();
    test_safetensors_malformed();
    test_npy_roundtrip();
    test_npy_variants();
    test_npy_malformed();
    test_safetensors_reference();
    test_sizes_before_allocation();
    test_reader_messages();
    test_tokens();
    test_get_batch();
    test_input_hardening();
    if (!getenv("TLM_TEST_KEEP")) remove_tree(tmpdir);
    else printf("# files kept in %s\n", tmpdir);
    return test_finish();
}
