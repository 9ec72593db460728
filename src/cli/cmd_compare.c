/* cmd_compare.c — `tlm compare A B`: relative error ||a - b|| / ||b|| (2-norm, float64) between two
 * .safetensors files tensor by tensor (every tensor of B, the reference, must be in A with B's
 * shape), or two .npy arrays. Non-finite elements must match exactly (the same infinity in both;
 * NaN never matches); the norms run over the finite ones. Exit 0 when every tensor is within
 * --rtol, 1 otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/input.h"
#include "tlm/npy.h"
#include "tlm/safetensors.h"

static double rtol = 1e-5;

static bool compare_handle(void *user, int opt, const char *arg) {
    return opt == 'r' && cli_parse_double("compare", "--rtol", arg, 0, 1e30, &rtol);
}

static const cli_use compare_uses[] = {CLI_USES_OUTPUT};
static const struct option compare_options[] = {{"rtol", required_argument, 0, 'r'}, {0, 0, 0, 0}};

static const cli_command compare_cmd = {
    .help =
        "Usage: tlm compare [--rtol X] A B\n"
        "Relative error ||A - B|| / ||B|| (B is the reference) per tensor of two .safetensors files, or\n"
        "between two .npy arrays; float dtypes of any width, computed in float64. Non-finite elements\n"
        "must be equal in both (the same infinity; NaN never is) and are left out of the norms.\n"
        "Exit status: 0 all within rtol, 1 a tensor over rtol, missing, misshapen or mismatched.\n\n"
        "  -r, --rtol X                largest relative error that passes (default: 1e-5)\n",
    .name = "compare", CLI_USES(compare_uses), .options = compare_options, .short_options = "r:",
    .handle = compare_handle, .min_positional = 2, .max_positional = 2, .checks_own_files = true};

static const tlm_column compare_columns[] = {
    {"tensor", TLM_FIELD_STR, "tensor", "", -48, 0, 0, TLM_COL_KEY},
    {"numel", TLM_FIELD_INT, "numel", "", 11, 0, 0, TLM_COL_KEY},
    {"rel_error", TLM_FIELD_NUM, "rel error", "", 10, 3, 0, TLM_COL_SCI},
    {"max_abs_error", TLM_FIELD_NUM, "max |a-b|", "", 10, 3, 0, TLM_COL_SCI},
    {"nonfinite_mismatches", TLM_FIELD_INT, "non-finite", "mismatches", 10, 0, 0, 0},
    TLM_COL_HIDDEN("rtol", TLM_FIELD_NUM),
};

/* float64 copy of float data of any width; NULL (message set) for a non-float dtype */
static double *to_f64(const void *data, tlm_dtype dt, int64_t n, const char *what) {
    double *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!out) {
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory comparing %s", what);
        return NULL;
    }
    if (dt == TLM_DTYPE_F64) {
        memcpy(out, data, (size_t)n * sizeof(double));
        return out;
    }
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    const tlm_array a = {.dtype = dt, .ndim = 1, .shape = {n}, .numel = n, .data = (void *)data};
    if (!f || tlm_array_to_f32(&a, f, what) != TLM_OK) {
        if (!f) tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory comparing %s", what);
        free(f);
        free(out);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
    return out;
}

typedef struct {
    double rel, max_abs;
    int64_t mismatches;
} errors;

static bool compare_data(const void *a, tlm_dtype ta, const void *b, tlm_dtype tb, int64_t n, const char *what,
                         errors *e) {
    double *x = to_f64(a, ta, n, what), *y = to_f64(b, tb, n, what);
    const bool ok = x && y;
    if (ok) {
        double num = 0, den = 0;
        *e = (errors){0};
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(x[i]) || !isfinite(y[i])) {
                e->mismatches += !(x[i] == y[i]); /* equal infinities match; NaN never does */
                continue;
            }
            const double d = fabs(x[i] - y[i]);
            num += d * d;
            den += y[i] * y[i];
            if (d > e->max_abs) e->max_abs = d;
        }
        e->rel = den > 0 ? sqrt(num / den) : sqrt(num);
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

/* one row; returns true when the tensor passes */
static bool row(tlm_report *rep, const char *name, int64_t numel, const errors *e, const char *problem) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "tensor", name);
    tlm_report_int(rep, "numel", numel);
    tlm_report_num(rep, "rtol", rtol);
    bool ok = !problem;
    if (e) {
        tlm_report_num(rep, "rel_error", e->rel);
        tlm_report_num(rep, "max_abs_error", e->max_abs);
        tlm_report_int(rep, "nonfinite_mismatches", e->mismatches);
        ok = e->rel <= rtol && e->mismatches == 0;
    }
    if (problem) tlm_report_status(rep, "failed", problem);
    else if (!ok) tlm_report_status(rep, "OVER", e->mismatches ? "non-finite elements differ" : "over rtol");
    tlm_report_row_end(rep);
    return ok;
}

/* a .npy array by its magic; false for anything else, a file that cannot be read included (the
 * reader then says why). A regular file only: a pipe is never opened to wait on it. */
static bool is_npy(const char *path) {
    FILE *f = NULL;
    uint64_t size = 0;
    unsigned char head[16] = {0};
    if (tlm_input_open(path, &f, &size) != TLM_OK) return false;
    const size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    const char *kind = tlm_input_sniff(head, n);
    return kind && strcmp(kind, "npy") == 0;
}

int cmd_compare(int argc, char **argv) {
    const char *cmd = "compare";
    cli_args a;
    int rc = cli_parse(&compare_cmd, NULL, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *pa = a.positional[0], *pb = a.positional[1];
    tlm_io_plan files;
    tlm_io_plan_init(&files);
    tlm_io_plan_input(&files, "A", pa);
    tlm_io_plan_input(&files, "B", pb);
    if (!cli_check_files(cmd, &a, &files)) {
        cli_args_free(&a);
        return TLM_EXIT_USAGE;
    }
    if (is_npy(pa) != is_npy(pb)) {
        cli_error(cmd, "%s is %s and %s %s: compare two .npy arrays or two safetensors files", pa,
                  is_npy(pa) ? "a .npy array" : "not a .npy array", pb, is_npy(pb) ? "is one" : "is not");
        return TLM_EXIT_USAGE;
    }
    tlm_report *rep = cli_open_report(cmd, &a, "tlm compare", argc, argv);
    if (!rep) return TLM_EXIT_FAILURE;
    tlm_report_meta_str(rep, "a", pa);
    tlm_report_meta_str(rep, "b", pb);
    tlm_report_meta_str(rep, "rel_error", "||a - b||_2 / ||b||_2 over the finite elements, in float64 (b is the "
                                          "reference); non-finite elements must be equal in both");
    tlm_report_meta_num(rep, "rtol", rtol);
    tlm_report_table(rep, "tensors", compare_columns, (int)(sizeof compare_columns / sizeof compare_columns[0]));
    int compared = 0, failing = 0;
    char problem[512];
    rc = TLM_EXIT_FAILURE;
    if (is_npy(pa)) {
        tlm_array x, y;
        if (tlm_npy_read(pa, &x) != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
        else {
            if (tlm_npy_read(pb, &y) != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
            else {
                errors e;
                compared = 1;
                if (!same_shape(x.ndim, x.shape, y.ndim, y.shape)) {
                    char sa[TLM_SHAPE_STRLEN], sb[TLM_SHAPE_STRLEN];
                    snprintf(problem, sizeof problem, "shapes differ: %s in %s, %s in %s",
                             tlm_shape_format(x.ndim, x.shape, sa, sizeof sa), pa,
                             tlm_shape_format(y.ndim, y.shape, sb, sizeof sb), pb);
                    failing += !row(rep, pb, y.numel, NULL, problem);
                } else if (!compare_data(x.data, x.dtype, y.data, y.dtype, y.numel, pb, &e)) {
                    failing += !row(rep, pb, y.numel, NULL, tlm_last_error());
                } else {
                    failing += !row(rep, pb, y.numel, &e, NULL);
                }
                rc = TLM_EXIT_OK;
                tlm_array_free(&y);
            }
            tlm_array_free(&x);
        }
    } else {
        tlm_safetensors x, y;
        if (tlm_safetensors_read(pa, &x) != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
        else {
            if (tlm_safetensors_read(pb, &y) != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
            else {
                if (y.num_tensors == 0) cli_error(cmd, "%s holds no tensors: nothing to compare against", pb);
                else rc = TLM_EXIT_OK;
                for (int i = 0; i < y.num_tensors; i++) {
                    const tlm_st_tensor *tb = &y.tensors[i], *ta = tlm_safetensors_find(&x, tb->name);
                    errors e;
                    compared++;
                    if (!ta) {
                        snprintf(problem, sizeof problem, "missing in %s", pa);
                        failing += !row(rep, tb->name, tb->numel, NULL, problem);
                    } else if (!same_shape(ta->ndim, ta->shape, tb->ndim, tb->shape)) {
                        char sa[TLM_SHAPE_STRLEN], sb[TLM_SHAPE_STRLEN];
                        snprintf(problem, sizeof problem, "shapes differ: %s in %s, %s in %s",
                                 tlm_shape_format(ta->ndim, ta->shape, sa, sizeof sa), pa,
                                 tlm_shape_format(tb->ndim, tb->shape, sb, sizeof sb), pb);
                        failing += !row(rep, tb->name, tb->numel, NULL, problem);
                    } else if (!compare_data(ta->data, ta->dtype, tb->data, tb->dtype, tb->numel, tb->name, &e)) {
                        failing += !row(rep, tb->name, tb->numel, NULL, tlm_last_error());
                    } else {
                        failing += !row(rep, tb->name, tb->numel, &e, NULL);
                    }
                }
                tlm_safetensors_free(&y);
            }
            tlm_safetensors_free(&x);
        }
    }
    char line[128];
    snprintf(line, sizeof line, "%d tensors compared, %d within rtol, %d over rtol, missing, misshapen or mismatched",
             compared, compared - failing, failing);
    tlm_report_summary_str(rep, "result", line);
    if (rc == TLM_EXIT_OK && failing) rc = TLM_EXIT_FAILURE;
    if (tlm_report_close(rep, rc != TLM_EXIT_FAILURE || compared > 0) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        rc = TLM_EXIT_FAILURE;
    }
    return rc;
}
