/* cmd_compare.c — `tlm compare A B`: relative error ||a - b|| / ||b|| (2-norm, float64) between
 * two .safetensors files tensor by tensor (B's names must all be in A, same shapes), or two
 * .npy arrays. Exit 0 when every error is within --rtol, 1 otherwise. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/npy.h"
#include "tlm/safetensors.h"

static void compare_usage(FILE *f) {
    fprintf(f, "Usage: tlm compare [--rtol X] A B\n"
               "Relative error ||A - B|| / ||B|| (B is the reference) per tensor of two .safetensors files,\n"
               "or between two .npy arrays. Float dtypes of any width; computed in float64.\n"
               "  -r, --rtol X   largest relative error that passes (default: 1e-5)\n"
               "  -h, --help     this text\n"
               "Exit status: 0 all within rtol, 1 some tensor over rtol or missing or misshapen.\n");
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* float64 copy of float data of any width; NULL (message set) for a non-float dtype */
static double *to_f64(const void *data, tlm_dtype dt, int64_t n) {
    double *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!out) return NULL;
    if (dt == TLM_DTYPE_F64) {
        memcpy(out, data, (size_t)n * sizeof(double));
        return out;
    }
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    tlm_st_tensor t = {.dtype = dt, .ndim = 1, .shape = {n}, .numel = n, .data = data};
    if (!f || tlm_st_tensor_to_f32(&t, f) != TLM_OK) {
        free(f);
        free(out);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
    return out;
}

/* *err = the relative error (NaN when the data holds NaN); false (message set) when a dtype
 * is not a float type */
static bool rel_error(const void *a, tlm_dtype ta, const void *b, tlm_dtype tb, int64_t n, double *err) {
    double *x = to_f64(a, ta, n), *y = to_f64(b, tb, n);
    bool ok = x && y;
    if (ok) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            num += (x[i] - y[i]) * (x[i] - y[i]);
            den += y[i] * y[i];
        }
        *err = den > 0 ? sqrt(num / den) : sqrt(num);
    }
    free(x);
    free(y);
    return ok;
}

static bool same_shape(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static int report(const char *name, double err, double rtol, int *worst) {
    bool ok = err <= rtol;
    printf("%-48s %12.3e  %s\n", name, err, ok ? "ok" : "OVER");
    if (!ok) (*worst)++;
    return ok;
}

int cmd_compare(int argc, char **argv) {
    const char *cmd = "compare";
    static const struct option opts[] = {{"rtol", required_argument, 0, 'r'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    double rtol = 1e-5;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "r:h", opts, NULL)) != -1;) {
        if (c == 'r') {
            if (!cli_parse_double(cmd, "--rtol", optarg, &rtol)) return TLM_EXIT_USAGE;
        } else if (c == 'h') {
            compare_usage(stdout);
            return TLM_EXIT_OK;
        } else {
            compare_usage(stderr);
            return TLM_EXIT_USAGE;
        }
    }
    if (argc - optind != 2) {
        cli_error(cmd, "give two files: A (to check) and B (the reference)");
        return TLM_EXIT_USAGE;
    }
    const char *pa = argv[optind], *pb = argv[optind + 1];
    int over = 0;
    printf("%-48s %12s  (||a-b||/||b||, rtol %.1e)\n", "tensor", "rel error", rtol);
    if (has_suffix(pa, ".npy") && has_suffix(pb, ".npy")) {
        tlm_array a, b;
        if (tlm_npy_read(pa, &a) != TLM_OK) { cli_error(cmd, "%s", tlm_last_error()); return TLM_EXIT_FAILURE; }
        if (tlm_npy_read(pb, &b) != TLM_OK) { cli_error(cmd, "%s", tlm_last_error()); tlm_array_free(&a); return TLM_EXIT_FAILURE; }
        int rc = TLM_EXIT_FAILURE;
        if (!same_shape(a.ndim, a.shape, b.ndim, b.shape)) {
            cli_error(cmd, "%s and %s have different shapes", pa, pb);
        } else {
            double err;
            if (!rel_error(a.data, a.dtype, b.data, b.dtype, a.numel, &err)) cli_error(cmd, "cannot compare %s and %s: %s", pa, pb, tlm_last_error());
            else rc = report(pb, err, rtol, &over) ? TLM_EXIT_OK : TLM_EXIT_FAILURE;
        }
        tlm_array_free(&a);
        tlm_array_free(&b);
        return rc;
    }
    tlm_safetensors a, b;
    if (tlm_safetensors_read(pa, &a) != TLM_OK) { cli_error(cmd, "%s", tlm_last_error()); return TLM_EXIT_FAILURE; }
    if (tlm_safetensors_read(pb, &b) != TLM_OK) { cli_error(cmd, "%s", tlm_last_error()); tlm_safetensors_free(&a); return TLM_EXIT_FAILURE; }
    int problems = 0;
    for (int i = 0; i < b.num_tensors; i++) {
        const tlm_st_tensor *tb = &b.tensors[i];
        const tlm_st_tensor *ta = tlm_safetensors_find(&a, tb->name);
        if (!ta) {
            cli_error(cmd, "%s: missing tensor '%s' (present in %s)", pa, tb->name, pb);
            problems++;
        } else if (!same_shape(ta->ndim, ta->shape, tb->ndim, tb->shape)) {
            cli_error(cmd, "tensor '%s' has different shapes in %s and %s", tb->name, pa, pb);
            problems++;
        } else {
            double err;
            if (!rel_error(ta->data, ta->dtype, tb->data, tb->dtype, tb->numel, &err)) {
                cli_error(cmd, "tensor '%s': %s", tb->name, tlm_last_error());
                problems++;
            } else {
                report(tb->name, err, rtol, &over);
            }
        }
    }
    printf("# %d tensors, %d over rtol, %d missing or misshapen\n", b.num_tensors, over, problems);
    tlm_safetensors_free(&a);
    tlm_safetensors_free(&b);
    return over || problems ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
}
