/* plot_allreduce.c — the all-reduce plot kinds of `tlm plot` (plot.h), the seeds' three pictures
 * (docs/experiments.md) from `tlm allreduce --format json` files (a run under mpirun, or a --sweep) and
 * bench/peers/torch_allreduce.py's and bench/peers/nccl_tests_json.py's (the same field names), one or
 * more at once:
 *   allreduce-size      time per all-reduce against the size, log-log, one line per implementation
 *                       and process count;
 *   allreduce-nproc     time against the process count, one line per size and implementation;
 *   allreduce-backends  busbw against the size, one panel per process count, one line per
 *                       implementation: tlm's NCCL against tlm's MPI, beside torch.distributed's
 *                       gloo and NCCL when their files are given.
 * An implementation is the tool and its backend: "tlm mpi" (with the --mpi-algorithm of the run
 * when it was written: "tlm mpi (shm)"), "tlm nccl" ("net" when NCCL's P2P and SHM transports were
 * off), "torch gloo", "torch nccl", "nccl-tests" (its all_reduce_perf); the same name from two files
 * gets the file's name. The rows drawn are the in-place ones (torch.distributed all-reduces in place)
 * that ran: status "ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tlm/plot.h"

#define MAX_IMPLS 8
#define MAX_POINTS 4096
#define MAX_KEYS 16 /* distinct process counts, distinct sizes */

static const char *const colors[8] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2c",
                                      "#76b7b2", "#b07aa1", "#edc948", "#9c755f"};
static const int points_types[6] = {7, 5, 9, 11, 13, 15};

typedef struct {
    int impl, nranks;
    double bytes, time_us, busbw;
} point;

typedef struct {
    char impl[MAX_IMPLS][160];
    int n_impls;
    point *pts;
    int n_pts;
    double nranks[MAX_KEYS], sizes[MAX_KEYS]; /* distinct, ascending */
    int n_nranks, n_sizes;
} results;

/* v into the ascending list (n so far, at most MAX_KEYS); false when full */
static bool add_key(double *list, int *n, double v) {
    int i = 0;
    while (i < *n && list[i] < v) i++;
    if (i < *n && list[i] == v) return true;
    if (*n == MAX_KEYS) return false;
    memmove(list + i + 1, list + i, sizeof *list * (size_t)(*n - i));
    list[i] = v;
    (*n)++;
    return true;
}

/* the peers whose JSON the pictures read beside tlm's: tool field -> the name their lines get ("torch nccl") */
typedef enum { TOOL_TLM, TOOL_TORCH, TOOL_NCCL_TESTS, TOOL_OTHER } tool_kind;

static tool_kind tool_of(const cJSON *doc) {
    const char *tool = tlm_plot_json_str(doc, "tool", "");
    if (strcmp(tool, "tlm allreduce") == 0) return TOOL_TLM;
    if (strcmp(tool, "torch_allreduce.py") == 0) return TOOL_TORCH;
    if (strcmp(tool, "nccl-tests") == 0) return TOOL_NCCL_TESTS;
    return TOOL_OTHER;
}

/* the implementation's name of a row of file f */
static void impl_name(const cJSON *doc, const cJSON *row, tool_kind tool, char *out, size_t n) {
    const char *backend = tlm_plot_json_str(row, "backend", "?");
    if (tool == TOOL_NCCL_TESTS) {
        snprintf(out, n, "nccl-tests");
        return;
    }
    if (tool == TOOL_TORCH) {
        snprintf(out, n, "torch %s", backend);
        return;
    }
    const char *algo = tlm_plot_json_str(doc, "mpi_algorithm", NULL);
    const char *env = tlm_plot_json_str(doc, "nccl_env", "");
    if (strcmp(backend, "mpi") == 0 && algo)
        snprintf(out, n, "tlm mpi (%s)", strcmp(algo, "mpi") == 0 ? "MPI_Allreduce" : algo);
    else if (strcmp(backend, "nccl") == 0 && strstr(env, "NCCL_P2P_DISABLE=1") && strstr(env, "NCCL_SHM_DISABLE=1"))
        snprintf(out, n, "tlm nccl (net)");
    else
        snprintf(out, n, "tlm %s", backend);
}

/* the implementation's index for a name from file f: a name another file already gave gets f's name */
static int impl_of(results *r, const char *name, int f, int *owner, const char *path) {
    char label[160];
    snprintf(label, sizeof label, "%s", name);
    for (int i = 0; i < r->n_impls; i++)
        if (strcmp(r->impl[i], label) == 0) {
            if (owner[i] == f) return i;
            const char *base = strrchr(path, '/');
            snprintf(label, sizeof label, "%s [%s]", name, base ? base + 1 : path);
            break;
        }
    for (int i = 0; i < r->n_impls; i++)
        if (strcmp(r->impl[i], label) == 0) return i;
    if (r->n_impls == MAX_IMPLS) return -1;
    snprintf(r->impl[r->n_impls], sizeof r->impl[0], "%s", label);
    owner[r->n_impls] = f;
    return r->n_impls++;
}

/* Every in-place row that ran, of every file. Errors: FORMAT (not an all-reduce result, nothing
 * to draw, too many lines). */
static tlm_status collect(results *r, const cJSON *const *docs, const char *const *paths, int n) {
    memset(r, 0, sizeof *r);
    r->pts = malloc(sizeof *r->pts * MAX_POINTS);
    if (!r->pts) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    int owner[MAX_IMPLS];
    for (int f = 0; f < n; f++) {
        const tool_kind tool = tool_of(docs[f]);
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(docs[f], "rows");
        if (tool == TOOL_OTHER || !cJSON_IsArray(rows))
            return tlm_fail(TLM_ERR_FORMAT, "%s is not an all-reduce result (\"tool\": \"tlm allreduce\", "
                            "\"torch_allreduce.py\" or \"nccl-tests\" with a \"rows\" array; written by tlm allreduce "
                            "--format json, bench/peers/torch_allreduce.py --format json or "
                            "bench/peers/nccl_tests_json.py)", paths[f]);
        for (const cJSON *row = rows->child; row; row = row->next) {
            if (strcmp(tlm_plot_json_str(row, "status", "ok"), "ok") != 0) continue; /* skipped, failed, OOM, WRONG */
            if (!tlm_plot_json_true(row, "in_place")) continue;
            point p = {.bytes = tlm_plot_json_num(row, "bytes", NAN),
                             .time_us = tlm_plot_json_num(row, "time_us_mean", NAN),
                             .busbw = tlm_plot_json_num(row, "busbw_gb_per_s", NAN)};
            TLM_TRY(tlm_plot_json_int(row, "nranks", 0, 1, 1 << 20, paths[f], &p.nranks));
            if (!(p.nranks >= 1) || !(p.bytes > 0) || !(p.time_us > 0) || isnan(p.busbw))
                return tlm_fail(TLM_ERR_FORMAT, "%s: a row that ran without \"nranks\", \"bytes\", \"time_us_mean\" "
                                "and \"busbw_gb_per_s\"", paths[f]);
            char name[128];
            impl_name(docs[f], row, tool, name, sizeof name);
            const int i = impl_of(r, name, f, owner, paths[f]);
            if (i < 0) return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d implementations to draw in one picture",
                                       paths[f], MAX_IMPLS);
            if (r->n_pts == MAX_POINTS) return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d rows to draw",
                                                        paths[f], MAX_POINTS);
            if (!add_key(r->nranks, &r->n_nranks, p.nranks) || !add_key(r->sizes, &r->n_sizes, p.bytes))
                return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d process counts or sizes to draw", paths[f], MAX_KEYS);
            r->pts[r->n_pts] = p;
            r->pts[r->n_pts++].impl = i;
        }
    }
    if (!r->n_pts)
        return tlm_fail(TLM_ERR_FORMAT, "%s%s: no in-place row that ran (status \"ok\") to draw", paths[0],
                        n > 1 ? " and the others" : "");
    return TLM_OK;
}

/* "1 MB", "64 KiB", "1000 B" */
static void size_label(double b, char *out, size_t n) {
    static const struct {
        double unit;
        const char *name;
    } units[] = {{1e9, "GB"}, {1073741824.0, "GiB"}, {1e6, "MB"}, {1048576.0, "MiB"}, {1e3, "KB"}, {1024.0, "KiB"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (b >= units[i].unit && fmod(b, units[i].unit) == 0) {
            snprintf(out, n, "%.0f %s", b / units[i].unit, units[i].name);
            return;
        }
    snprintf(out, n, "%.0f B", b);
}

/* the sizes as x tics of a log axis of bytes, with room on both sides */
static void size_tics(tlm_plot *p, const results *r, const char *axis) {
    tlm_plot_cmd(p, "set %srange [%.17g:%.17g]", axis, r->sizes[0] / 1.6, r->sizes[r->n_sizes - 1] * 1.6);
    char tics[2048];
    size_t used = (size_t)snprintf(tics, sizeof tics, "set %stics (", axis);
    for (int i = 0; i < r->n_sizes && used < sizeof tics; i++) {
        char label[32];
        size_label(r->sizes[i], label, sizeof label);
        used += (size_t)snprintf(tics + used, sizeof tics - used, "%s'%s' %.17g", i ? ", " : "", label, r->sizes[i]);
    }
    if (used + 2 < sizeof tics) {
        tlm_plot_cmd(p, "%s)", tics);
        return;
    }
    tlm_plot_cmd(p, "set format %s '%%.0s %%cB'", axis);
}

/* A data block $name of (x, y) for the points with impl and key (by nranks or by size), sorted by x;
 * false when none. by_size: the points of size key, x = nranks; else of nranks key, x = bytes. */
static bool block(tlm_plot *p, const results *r, const char *name, int impl, double key, bool by_size, bool busbw) {
    double xs[MAX_KEYS], ys[MAX_KEYS];
    int k = 0;
    for (int i = 0; i < r->n_pts && k < MAX_KEYS; i++) {
        const point *q = &r->pts[i];
        if (q->impl != impl || (by_size ? q->bytes : q->nranks) != key) continue;
        if (busbw && !(q->busbw > 0)) continue;
        const double x = by_size ? q->nranks : q->bytes, y = busbw ? q->busbw : q->time_us / 1e3;
        int at = k++;
        while (at > 0 && xs[at - 1] > x) xs[at] = xs[at - 1], ys[at] = ys[at - 1], at--;
        xs[at] = x, ys[at] = y;
    }
    if (!k) return false;
    tlm_plot_data_begin(p, name);
    for (int i = 0; i < k; i++) tlm_plot_row(p, 2, (double[]){xs[i], ys[i]});
    tlm_plot_data_end(p);
    return true;
}

static void common_style(tlm_plot *p) {
    tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
    tlm_plot_cmd(p, "set key outside right top vertical Left reverse noenhanced");
}

/* ---- allreduce-size, allreduce-nproc ------------------------------------------------------------------------ */

/* Time per all-reduce against the size (nproc false: one line per implementation and process count;
 * a color per implementation, a dash and point type per count) or against the process count (nproc:
 * one line per size and implementation; a color per size, a dash and point type per implementation). */
static tlm_status time_against(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n, bool nproc) {
    results r;
    tlm_status s = collect(&r, docs, paths, n);
    char plot[16384];
    size_t used = 0;
    bool fits = tlm_plot_append(plot, sizeof plot, &used, "plot ");
    int lines = 0;
    const int n_keys = nproc ? r.n_sizes : r.n_nranks;
    for (int i = 0; s == TLM_OK && i < r.n_impls; i++)
        for (int k = 0; k < n_keys; k++) {
            const double key = nproc ? r.sizes[k] : r.nranks[k];
            char name[32], title[220], size[32];
            snprintf(name, sizeof name, "%c%d_%d", nproc ? 'n' : 's', i, k);
            if (!block(p, &r, name, i, key, nproc, false)) continue;
            if (nproc) {
                size_label(key, size, sizeof size);
                snprintf(title, sizeof title, "%s, %s", r.impl[i], size);
            } else {
                snprintf(title, sizeof title, "%s, %.0f rank%s", r.impl[i], key, key == 1 ? "" : "s");
            }
            const int color = nproc ? k : i, dash = nproc ? i : k;
            fits = fits && tlm_plot_append(plot, sizeof plot, &used,
                                           "%s$%s using 1:2 with linespoints lw 2 lc rgb '%s' dt %d "
                                           "pt %d ps 1.2 title %s",
                                           lines++ ? ", " : "", name, colors[color % 8], dash % 5 + 1,
                                           points_types[dash % 6], tlm_plot_str(p, title));
        }
    if (s == TLM_OK && !fits) s = tlm_fail(TLM_ERR_FORMAT, "%s%s: too many lines to draw in one picture",
                                           paths[0], n > 1 ? " and the others" : "");
    if (s == TLM_OK) {
        tlm_plot_cmd(p, "set title 'All-reduce: time against %s (in place; the mean over the ranks)'",
                     nproc ? "the number of processes" : "size");
        tlm_plot_cmd(p, "set xlabel '%s'", nproc ? "processes (ranks)" : "size per rank");
        tlm_plot_cmd(p, "set ylabel 'time per all-reduce (ms)'");
        if (nproc) {
            char xtics[512];
            size_t xt = (size_t)snprintf(xtics, sizeof xtics, "set xtics (");
            for (int k = 0; k < r.n_nranks && xt < sizeof xtics; k++)
                xt += (size_t)snprintf(xtics + xt, sizeof xtics - xt, "%s%.0f", k ? ", " : "", r.nranks[k]);
            tlm_plot_cmd(p, "set logscale y");
            if (xt < sizeof xtics) tlm_plot_cmd(p, "%s)", xtics);
            tlm_plot_cmd(p, "set xrange [%g:%g]", r.nranks[0] - 0.5, r.nranks[r.n_nranks - 1] + 0.5);
        } else {
            tlm_plot_cmd(p, "set logscale xy");
            size_tics(p, &r, "x");
        }
        common_style(p);
        tlm_plot_cmd(p, "%s", plot);
    }
    free(r.pts);
    return s;
}

static tlm_status against_size(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    return time_against(p, docs, paths, n, false);
}

static tlm_status against_nproc(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    return time_against(p, docs, paths, n, true);
}

/* ---- allreduce-backends ------------------------------------------------------------------------------------ */

static tlm_status backends(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    results r;
    tlm_status s = collect(&r, docs, paths, n);
    int panels = 0;
    for (int k = 0; k < r.n_nranks; k++) panels += r.nranks[k] >= 2;
    if (s == TLM_OK && !panels)
        s = tlm_fail(TLM_ERR_FORMAT, "%s: no row of 2 or more ranks (busbw is 0 for one rank)", paths[0]);
    if (s != TLM_OK) {
        free(r.pts);
        return s;
    }
    /* one busbw axis for every panel: whole decades around the values */
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < r.n_pts; i++)
        if (r.pts[i].nranks >= 2 && r.pts[i].busbw > 0) {
            lo = fmin(lo, r.pts[i].busbw);
            hi = fmax(hi, r.pts[i].busbw);
        }
    const double ylo = hi > 0 ? pow(10, floor(log10(lo))) : 0.1, yhi = hi > 0 ? pow(10, floor(log10(hi)) + 1) : 10;
    const int cols = panels < 3 ? panels : 3, rows = (panels + cols - 1) / cols;
    tlm_plot_size(p, 560 * cols + 260, 520 * rows + 60);
    tlm_plot_cmd(p, "set multiplot layout %d,%d title 'All-reduce: bus bandwidth by backend (in place; busbw = "
                    "algbw x 2(n-1)/n, GB/s = 10^9 bytes/s)'", rows, cols);
    tlm_plot_cmd(p, "set xlabel 'size per rank'");
    tlm_plot_cmd(p, "set ylabel 'busbw (GB/s)'");
    tlm_plot_cmd(p, "set logscale xy");
    size_tics(p, &r, "x");
    tlm_plot_cmd(p, "set yrange [%.17g:%.17g]", ylo, yhi);
    tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
    tlm_plot_cmd(p, "set key top left vertical Left reverse noenhanced font ',9'");
    for (int k = 0; s == TLM_OK && k < r.n_nranks; k++) {
        if (r.nranks[k] < 2) continue;
        char plot[8192];
        size_t used = 0;
        bool fits = tlm_plot_append(plot, sizeof plot, &used, "plot ");
        int lines = 0;
        for (int i = 0; i < r.n_impls; i++) {
            char name[32];
            snprintf(name, sizeof name, "b%d_%d", i, k);
            if (!block(p, &r, name, i, r.nranks[k], false, true)) continue;
            fits = fits && tlm_plot_append(plot, sizeof plot, &used,
                                           "%s$%s using 1:2 with linespoints lw 2 lc rgb '%s' pt %d "
                                           "ps 1.2 title %s",
                                           lines++ ? ", " : "", name, colors[i % 8], points_types[i % 6],
                                           tlm_plot_str(p, r.impl[i]));
        }
        if (!fits) s = tlm_fail(TLM_ERR_FORMAT, "%s%s: too many lines to draw in one panel",
                                paths[0], n > 1 ? " and the others" : "");
        tlm_plot_cmd(p, "set title '%.0f ranks'", r.nranks[k]);
        tlm_plot_cmd(p, "%s", lines ? plot : "plot NaN notitle");
    }
    tlm_plot_cmd(p, "unset multiplot");
    free(r.pts);
    return s;
}

#define READS                                                                                                  \
    "tlm allreduce --format json (a run or a --sweep); bench/peers/torch_allreduce.py --format json; "        \
    "bench/peers/nccl_tests_json.py (nccl-tests' all_reduce_perf)"

const tlm_plot_kind tlm_plot_allreduce_size = {
    "allreduce-size", "all-reduce time against size, log-log, one line per implementation and process count", READS,
    1, 8, against_size};
const tlm_plot_kind tlm_plot_allreduce_nproc = {
    "allreduce-nproc", "all-reduce time against the number of processes, one line per size and implementation", READS,
    1, 8, against_nproc};
const tlm_plot_kind tlm_plot_allreduce_backends = {
    "allreduce-backends", "all-reduce busbw against size per process count: NCCL, MPI, gloo side by side", READS, 1, 8,
    backends};
