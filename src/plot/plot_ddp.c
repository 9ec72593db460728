/* plot_ddp.c — the data-parallel plot kinds of `tlm plot` (plot.h), the two data-parallel pictures
 * (docs/experiments.md), from `tlm bench --format json` files (rows of a run under a launcher, and one-process rows:
 * the 1-GPU step) and bench/peers/pytorch_ddp.py's (tlm bench's field names), one or more at once:
 *   ddp-buckets  the step time against the bucket size (log x), one panel per precision, one line per
 *                tool, GPU count and gradient-reduction dtype (tlm's bucketed rows, PyTorch DDP's);
 *                each tool's 1-GPU step (with a rank's rows where that row is given) a dashed line;
 *   ddp-scaling  tokens/s against the GPU count as the speed-up over the same tool's 1-GPU row, one
 *                line per tool and precision (buckets of 25 MiB, PyTorch's default cap; float32
 *                reduction) for each 1-GPU row given: one running a rank's rows (weak scaling) and one
 *                running the whole global batch (strong scaling), beside the ideal N-fold line.
 * The rows drawn: status "ok" (pytorch_ddp.py's rows carry none), the train pass, ZeRO 0, and neither
 * optimizer-in-backward nor the overlapped optimizer (another comparison: bench/ddp_table.py's table).
 * Where a tool has several 1-GPU rows of a precision (and batch), the one without CUDA graphs is the
 * baseline (the data-parallel rows run eagerly: ddp.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tlm/plot.h"

#define MAX_ROWS 4096
#define MAX_SERIES 16
#define MAX_PRECISIONS 4

static const char *const colors[8] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2c",
                                      "#76b7b2", "#b07aa1", "#edc948", "#9c755f"};
static const char *const tool_names[2] = {"tlm", "PyTorch DDP"};

typedef struct {
    int tool; /* 0 tlm bench, 1 pytorch_ddp.py */
    int ranks, batch;      /* batch: the global batch (rows) */
    bool bucketed, graphs; /* tlm "bucketed" or PyTorch's DDP; CUDA graphs (a 1-GPU row) */
    bool gpu;              /* the file's "device" is a GPU (else the ranks are CPU processes) */
    double bucket_mb, step_ms, tokens_per_s;
    char precision[8], reduce[8], model[32];
} ddp_row;

typedef struct {
    ddp_row *rows;
    int n;
    char precisions[MAX_PRECISIONS][8];
    int n_precisions;
} ddp_rows;

/* Every train row of ZeRO 0 that ran, of every file. Errors: FORMAT (not a bench or PyTorch DDP result,
 * a row that ran without its numbers, nothing to draw, too much). */
static tlm_status collect(ddp_rows *r, const cJSON *const *docs, const char *const *paths, int n) {
    memset(r, 0, sizeof *r);
    if (!(r->rows = malloc(sizeof *r->rows * MAX_ROWS))) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int f = 0; f < n; f++) {
        const char *tool = tlm_plot_json_str(docs[f], "tool", "");
        const int t = strcmp(tool, "tlm bench") == 0 ? 0 : strcmp(tool, "pytorch_ddp.py") == 0 ? 1 : -1;
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(docs[f], "rows");
        if (t < 0 || !cJSON_IsArray(rows))
            return tlm_fail(TLM_ERR_FORMAT,
                            "%s is not a benchmark result (\"tool\": \"tlm bench\" or "
                            "\"pytorch_ddp.py\" with a \"rows\" array; written by tlm bench --format json or "
                            "bench/peers/pytorch_ddp.py)",
                            paths[f]);
        for (const cJSON *row = rows->child; row; row = row->next) {
            if (strcmp(tlm_plot_json_str(row, "status", "ok"), "ok") != 0 ||
                strcmp(tlm_plot_json_str(row, "pass", "train"), "train") != 0 ||
                tlm_plot_json_num(row, "zero", 0) != 0 || tlm_plot_json_true(row, "optimizer_in_backward") ||
                tlm_plot_json_true(row, "optimizer_overlap"))
                continue;
            ddp_row x = {.tool = t,
                         .bucket_mb = tlm_plot_json_num(row, "bucket_mb", NAN),
                         .step_ms = tlm_plot_json_num(row, "step_ms_mean", NAN),
                         .tokens_per_s = tlm_plot_json_num(row, "tokens_per_s", NAN),
                         .graphs = tlm_plot_json_true(row, "cuda_graphs"),
                         .gpu = strncmp(tlm_plot_json_str(docs[f], "device", "cpu"), "cpu", 3) != 0};
            TLM_TRY(tlm_plot_json_int(row, "ranks", 1, 1, 1 << 20, paths[f], &x.ranks));
            TLM_TRY(tlm_plot_json_int(row, "batch_size", 0, 0, INT_MAX, paths[f], &x.batch));
            const char *mode = tlm_plot_json_str(row, "ddp", "none");
            x.bucketed = strcmp(mode, t == 0 ? "bucketed" : "pytorch") == 0;
            snprintf(x.precision, sizeof x.precision, "%s", tlm_plot_json_str(row, "precision", "?"));
            snprintf(x.reduce, sizeof x.reduce, "%s", tlm_plot_json_str(row, "grad_reduce_dtype", "fp32"));
            snprintf(x.model, sizeof x.model, "%s", tlm_plot_json_str(row, "model", "?"));
            if (!(x.ranks >= 1) || !(x.step_ms > 0) || !(x.tokens_per_s > 0) || (x.bucketed && !(x.bucket_mb > 0)))
                return tlm_fail(TLM_ERR_FORMAT,
                                "%s: a row that ran without \"step_ms_mean\", \"tokens_per_s\" (and, "
                                "bucketed, \"bucket_mb\")",
                                paths[f]);
            if (x.ranks > 1 && !x.bucketed && t == 1) continue; /* PyTorch: no other mode */
            if (r->n == MAX_ROWS) return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d rows to draw", paths[f], MAX_ROWS);
            int k = 0;
            while (k < r->n_precisions && strcmp(r->precisions[k], x.precision) != 0) k++;
            if (k == r->n_precisions) {
                if (k == MAX_PRECISIONS) return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d precisions",
                                                         paths[f], MAX_PRECISIONS);
                snprintf(r->precisions[r->n_precisions++], sizeof r->precisions[0], "%s", x.precision);
            }
            r->rows[r->n++] = x;
        }
    }
    if (!r->n)
        return tlm_fail(TLM_ERR_FORMAT, "%s%s: no train row of ZeRO 0 that ran to draw", paths[0],
                        n > 1 ? " and the others" : "");
    return TLM_OK;
}

/* "GPUs", "GPU", "processes", "process": what the ranks of a file on a GPU (or not) are */
static const char *ranks_word(bool gpu, int ranks) {
    return gpu ? (ranks == 1 ? "GPU" : "GPUs") : (ranks == 1 ? "process" : "processes");
}

/* the tool's 1-GPU row of the precision at `batch` rows (0: any; without CUDA graphs where there are
 * both); NULL: none */
static const ddp_row *one_gpu(const ddp_rows *r, int tool, const char *precision, int batch) {
    const ddp_row *best = NULL;
    for (int i = 0; i < r->n; i++) {
        const ddp_row *x = &r->rows[i];
        if (x->tool == tool && x->ranks == 1 && strcmp(x->precision, precision) == 0 && (!batch || x->batch == batch) &&
            (!best || (best->graphs && !x->graphs)))
            best = x;
    }
    return best;
}

/* x's series among keys (tool, ranks, reduce; precision given by the panel): its index, added when new */
typedef struct {
    int tool, ranks;
    bool gpu;
    char reduce[8];
} series_key;

static int series_of(series_key *keys, int *n, const ddp_row *x) {
    for (int i = 0; i < *n; i++)
        if (keys[i].tool == x->tool && keys[i].ranks == x->ranks && strcmp(keys[i].reduce, x->reduce) == 0) return i;
    if (*n == MAX_SERIES) return -1;
    keys[*n] = (series_key){.tool = x->tool, .ranks = x->ranks, .gpu = x->gpu};
    snprintf(keys[*n].reduce, sizeof keys[0].reduce, "%s", x->reduce);
    return (*n)++;
}

/* a data block $name of (x, y) sorted by x */
static void sorted_block(tlm_plot *p, const char *name, double *xs, double *ys, int k) {
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && xs[j - 1] > xs[j]; j--) {
            const double tx = xs[j], ty = ys[j];
            xs[j] = xs[j - 1], ys[j] = ys[j - 1];
            xs[j - 1] = tx, ys[j - 1] = ty;
        }
    tlm_plot_data_begin(p, name);
    for (int i = 0; i < k; i++) tlm_plot_row(p, 2, (double[]){xs[i], ys[i]});
    tlm_plot_data_end(p);
}

/* ---- ddp-buckets --------------------------------------------------------------------------------------------- */

static tlm_status buckets(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    ddp_rows r;
    tlm_status s = collect(&r, docs, paths, n);
    double lo = INFINITY, hi = 0;
    for (int i = 0; s == TLM_OK && i < r.n; i++)
        if (r.rows[i].bucketed && r.rows[i].ranks > 1)
            lo = fmin(lo, r.rows[i].bucket_mb), hi = fmax(hi, r.rows[i].bucket_mb);
    if (s == TLM_OK && !(hi > 0))
        s = tlm_fail(TLM_ERR_FORMAT,
                     "%s%s: no bucketed row of 2 or more ranks (tlm bench --ddp bucketed under a "
                     "launcher; pytorch_ddp.py --nproc 2)",
                     paths[0], n > 1 ? " and the others" : "");
    if (s != TLM_OK) {
        free(r.rows);
        return s;
    }
    tlm_plot_size(p, 620 * r.n_precisions + 300, 640);
    /* two lines: one would be clipped at one panel's width (a double-quoted string: gnuplot reads \n) */
    tlm_plot_cmd(p, "set multiplot layout 1,%d title \"Data-parallel training: the step against the bucket size\\n"
                    "(forward + backward + communication not hidden + optimizer; the slowest rank)\" noenhanced",
                 r.n_precisions);
    tlm_plot_cmd(p, "set logscale x");
    tlm_plot_cmd(p, "set xrange [%.17g:%.17g]", lo / 2, hi * 2);
    tlm_plot_cmd(p, "set xlabel 'bucket size (MiB of float32 gradients)'");
    tlm_plot_cmd(p, "set ylabel 'step (ms)'");
    tlm_plot_cmd(p, "set yrange [0:*]");
    tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
    /* the key below the panels, off the lines */
    tlm_plot_cmd(p, "set key outside below center vertical maxrows 4 Left reverse noenhanced font ',9'");
    tlm_plot_cmd(p, "set bmargin 9"); /* the key's 4 rows below the x label */
    for (int pi = 0; s == TLM_OK && pi < r.n_precisions; pi++) {
        const char *prec = r.precisions[pi];
        series_key keys[MAX_SERIES];
        int nk = 0;
        for (int i = 0; i < r.n; i++)
            if (r.rows[i].bucketed && r.rows[i].ranks > 1 && strcmp(r.rows[i].precision, prec) == 0 &&
                series_of(keys, &nk, &r.rows[i]) < 0)
                s = tlm_fail(TLM_ERR_FORMAT, "%s%s: more than %d lines in one panel",
                             paths[0], n > 1 ? " and the others" : "", MAX_SERIES);
        char plot[8192], name[48], title[160];
        size_t used = 0;
        bool fits = tlm_plot_append(plot, sizeof plot, &used, "plot ");
        int lines = 0;
        for (int k = 0; s == TLM_OK && k < nk; k++) {
            double xs[64], ys[64];
            int m = 0;
            for (int i = 0; i < r.n && m < 64; i++) {
                const ddp_row *x = &r.rows[i];
                if (x->bucketed && x->ranks > 1 && strcmp(x->precision, prec) == 0 && series_of(keys, &nk, x) == k)
                    xs[m] = x->bucket_mb, ys[m++] = x->step_ms;
            }
            snprintf(name, sizeof name, "b%d_%d", pi, k);
            sorted_block(p, name, xs, ys, m);
            snprintf(title, sizeof title, "%s, %d %s, %s reduction", tool_names[keys[k].tool], keys[k].ranks,
                     ranks_word(keys[k].gpu, keys[k].ranks), keys[k].reduce);
            fits = fits && tlm_plot_append(plot, sizeof plot, &used,
                                           "%s$%s using 1:2 with linespoints lw 2 lc rgb '%s' "
                                           "dt %d pt 7 ps 1.1 title %s",
                                           lines++ ? ", " : "", name, colors[(2 * keys[k].tool + k) % 8],
                                           keys[k].tool + 1, tlm_plot_str(p, title));
        }
        for (int t = 0; s == TLM_OK && t < 2; t++) { /* one GPU with a rank's rows (the first such row's) */
            const ddp_row *one = NULL;
            for (int i = 0; i < r.n && !one; i++) {
                const ddp_row *x = &r.rows[i];
                if (x->tool == t && x->bucketed && x->ranks > 1 && strcmp(x->precision, prec) == 0)
                    one = one_gpu(&r, t, prec, x->batch / x->ranks);
            }
            if (!one) one = one_gpu(&r, t, prec, 0);
            if (!one) continue;
            snprintf(title, sizeof title, "%s, 1 %s, %d rows: %.1f ms", tool_names[t], ranks_word(one->gpu, 1),
                     one->batch, one->step_ms);
            fits = fits && tlm_plot_append(plot, sizeof plot, &used,
                                           "%s%.17g with lines lw 1.5 dt 2 lc rgb '%s' title %s", lines++ ? ", " : "",
                                           one->step_ms, t ? "#7f7f7f" : "#000000", tlm_plot_str(p, title));
        }
        if (s == TLM_OK && !fits) s = tlm_fail(TLM_ERR_FORMAT, "%s%s: too many lines to draw in one panel",
                                               paths[0], n > 1 ? " and the others" : "");
        snprintf(title, sizeof title, "%s, %s", r.rows[0].model, prec);
        tlm_plot_cmd(p, "set title %s", tlm_plot_str(p, title));
        tlm_plot_cmd(p, "%s", lines && s == TLM_OK ? plot : "plot NaN notitle");
    }
    tlm_plot_cmd(p, "unset multiplot");
    free(r.rows);
    return s;
}

/* ---- ddp-scaling --------------------------------------------------------------------------------------------- */

static tlm_status scaling(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    ddp_rows r;
    tlm_status s = collect(&r, docs, paths, n);
    char plot[8192], name[48], title[200];
    size_t used = 0;
    bool fits = tlm_plot_append(plot, sizeof plot, &used, "plot ");
    int lines = 0, most = 1;
    const ddp_row *unit = NULL;
    /* whole: each row against one GPU running the global batch (strong scaling); else against one GPU
     * running a rank's rows (weak scaling) */
    for (int pi = 0; s == TLM_OK && pi < r.n_precisions; pi++)
        for (int t = 0; t < 2; t++)
            for (int whole = 0; whole < 2; whole++) {
                double xs[64] = {1}, ys[64] = {1};
                int m = 1;
                for (int i = 0; i < r.n && m < 64; i++) {
                    const ddp_row *x = &r.rows[i];
                    if (x->tool != t || x->ranks < 2 || !x->bucketed || x->bucket_mb != 25 ||
                        strcmp(x->reduce, "fp32") != 0 || strcmp(x->precision, r.precisions[pi]) != 0)
                        continue;
                    const ddp_row *one = one_gpu(&r, t, x->precision, whole ? x->batch : x->batch / x->ranks);
                    if (!one) continue;
                    xs[m] = x->ranks, ys[m++] = x->tokens_per_s / one->tokens_per_s;
                    most = x->ranks > most ? x->ranks : most;
                    unit = x;
                }
                if (m == 1) continue;
                snprintf(name, sizeof name, "s%d_%d_%d", pi, t, whole);
                sorted_block(p, name, xs, ys, m);
                snprintf(title, sizeof title, "%s, %s, against 1 %s with %s", tool_names[t], r.precisions[pi],
                         ranks_word(unit->gpu, 1), whole ? "the whole batch" : "a rank's rows");
                fits = fits && tlm_plot_append(plot, sizeof plot, &used,
                                               "%s$%s using 1:2 with linespoints lw 2 lc rgb '%s' dt %d pt %d ps 1.2 "
                                               "title %s",
                                               lines++ ? ", " : "", name, colors[(2 * pi + t) % 8], whole ? 2 : 1,
                                               whole ? 5 : 7, tlm_plot_str(p, title));
            }
    if (s == TLM_OK && !lines)
        s = tlm_fail(TLM_ERR_FORMAT,
                     "%s%s: no bucketed rows of 25 MiB (float32 reduction) of 2 or more ranks with a 1-GPU row of "
                     "the same tool and precision at a rank's rows or at the whole batch",
                     paths[0], n > 1 ? " and the others" : "");
    if (s == TLM_OK && !(fits && tlm_plot_append(plot, sizeof plot, &used,
                                                 ", x with lines lw 1 dt 3 lc rgb '#7f7f7f' title 'ideal (N-fold)'")))
        s = tlm_fail(TLM_ERR_FORMAT, "%s%s: too many lines to draw in one picture",
                     paths[0], n > 1 ? " and the others" : "");
    if (s == TLM_OK) {
        snprintf(title, sizeof title,
                 "Data-parallel training, %s: tokens/s over one %s's (bucketed 25 MiB, float32 reduction)",
                 r.rows[0].model, ranks_word(unit->gpu, 1));
        tlm_plot_cmd(p, "set title %s", tlm_plot_str(p, title));
        tlm_plot_cmd(p, "set xlabel %s", tlm_plot_str(p, unit->gpu ? "GPUs (ranks)" : "processes (ranks)"));
        tlm_plot_cmd(p, "set ylabel 'speed-up in tokens/s'");
        tlm_plot_cmd(p, "set xrange [0.5:%g]", most + 0.5);
        tlm_plot_cmd(p, "set yrange [0:%g]", most + 0.5);
        tlm_plot_cmd(p, "set xtics 1");
        tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
        tlm_plot_cmd(p, "set key top left vertical Left reverse noenhanced");
        tlm_plot_cmd(p, "%s", plot);
    }
    free(r.rows);
    return s;
}

#define READS "tlm bench --format json (rows under a launcher, and the 1-GPU rows); bench/peers/pytorch_ddp.py's JSON"

const tlm_plot_kind tlm_plot_ddp_buckets = {
    "ddp-buckets",
    "data-parallel step time against bucket size, per precision: tlm and PyTorch DDP, the 1-GPU steps",
    READS,
    1,
    8,
    buckets};
const tlm_plot_kind tlm_plot_ddp_scaling = {
    "ddp-scaling",
    "data-parallel speed-up in tokens/s against the GPU count, tlm and PyTorch DDP, the ideal line",
    READS,
    1,
    8,
    scaling};
