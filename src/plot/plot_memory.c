/* plot_memory.c — the memory plot kinds of `tlm plot` (plot.h):
 *   memory-timeline  the bytes in use over one recorded window (tlm memory --timeline FILE.json),
 *                    stacked by category, the forward, backward and optimizer phases shaded, the steps
 *                    marked, the footprint (what the backend holds from the device: allocations plus
 *                    arenas) as a line and the measured step's peak labelled;
 *   memory-context   the peak against the context length (tlm memory --format json reports, and
 *                    bench/peers/pytorch_lm.py --format json files for PyTorch's rows), one line per
 *                    implementation, model, precision, pass; out-of-memory rows as crosses on top. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tlm/memory_timeline.h"
#include "tlm/plot.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* colours by category (Tableau 10, as PyTorch's memory_viz) and by phase (light shades) */
static const char *const cat_colors[TLM_MEMCAT_COUNT] = {"#4e79a7", "#76b7b2", "#e15759", "#f28e2c", "#59a14f", "#bab0ab"};
static const char *const phase_colors[TLM_PHASE_COUNT] = {"#ffffff", "#dde8f4", "#fbe3cf", "#dcefd8"};

static int phase_index(const char *name) {
    for (int p = 0; p < TLM_PHASE_COUNT; p++)
        if (strcmp(name, tlm_phase_name((tlm_phase)p)) == 0) return p;
    return -1;
}

/* ---- memory-timeline ------------------------------------------------------------------------------------ */

/* phases shaded, steps marked: the timeline's "marks" (events counted from 0) */
static tlm_status draw_marks(tlm_plot *p, const cJSON *marks, const char *path) {
    int obj = 1, open_x[TLM_PHASE_COUNT];
    for (int i = 0; i < TLM_PHASE_COUNT; i++) open_x[i] = -1;
    for (const cJSON *m = marks->child; m; m = m->next) {
        int mx, step;
        TLM_TRY(tlm_plot_json_int(m, "event", 0, 0, INT_MAX, path, &mx));
        TLM_TRY(tlm_plot_json_int(m, "step", 0, INT_MIN, INT_MAX, path, &step));
        if (strcmp(tlm_plot_json_str(m, "kind", ""), "step") == 0) {
            if (!tlm_plot_json_true(m, "begin")) continue;
            char label[48];
            snprintf(label, sizeof label, "%s %d", tlm_plot_json_true(m, "warmup") ? "warm-up step" : "step", step);
            tlm_plot_cmd(p, "set arrow from %d, graph 0 to %d, graph 1 nohead dt 2 lc rgb '#555555' front", mx, mx);
            tlm_plot_cmd(p, "set label %s at %d, graph 0.03 offset 0.5,0 left front font ',9' tc rgb '#555555'",
                         tlm_plot_str(p, label), mx);
            continue;
        }
        const int ph = phase_index(tlm_plot_json_str(m, "name", ""));
        if (ph <= 0) continue;
        if (tlm_plot_json_true(m, "begin")) {
            open_x[ph] = mx;
        } else if (open_x[ph] >= 0) {
            tlm_plot_cmd(p, "set object %d rect from %d, graph 0 to %d, graph 1 behind fc rgb '%s' fs solid 1.0 noborder",
                         obj++, open_x[ph], mx > open_x[ph] ? mx : open_x[ph] + 1, phase_colors[ph]);
            open_x[ph] = -1;
        }
    }
    return TLM_OK;
}

static tlm_status timeline(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    const cJSON *d = docs[0];
    const char *path = paths[0];
    if (strcmp(tlm_plot_json_str(d, "kind", ""), "tlm.memory_timeline") != 0)
        return tlm_fail(TLM_ERR_FORMAT, "%s is not a memory timeline (\"kind\": \"tlm.memory_timeline\"; written by "
                        "tlm memory --timeline)", path);
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(d, "categories");
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start");
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(d, "events");
    const cJSON *marks = cJSON_GetObjectItemCaseSensitive(d, "marks");
    const int nc = cJSON_GetArraySize(cats);
    if (!cJSON_IsArray(cats) || nc < 1 || nc > 16 || cJSON_GetArraySize(start) != nc || !cJSON_IsArray(events) ||
        !cJSON_IsArray(marks))
        return tlm_fail(TLM_ERR_FORMAT, "%s: a memory timeline needs \"categories\", \"start\" (one count per "
                        "category), \"events\" and \"marks\"", path);
    /* the stack: x = events so far; two rows per event (before and after) draw the steps */
    double cum[17], by[16];
    int k = 0;
    for (const cJSON *v = start->child; v; v = v->next) by[k++] = cJSON_IsNumber(v) ? v->valuedouble : 0;
    const int ne = cJSON_GetArraySize(events);
    double ymax = 0, peak = -1, peak_x = 0;
    /* the last step's window, for the peak label */
    int last_step_begin = 0;
    for (const cJSON *m = marks->child; m; m = m->next)
        if (strcmp(tlm_plot_json_str(m, "kind", ""), "step") == 0 && tlm_plot_json_true(m, "begin"))
            TLM_TRY(tlm_plot_json_int(m, "event", 0, 0, INT_MAX, path, &last_step_begin));
    /* the axis's unit: GiB from 1 GiB on, else MiB (a small model's step reads 3 MiB, not 0.003 GiB) */
    double most = 0;
    for (const cJSON *e = events->child; e; e = e->next) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "by_category");
        double sum = 0;
        for (const cJSON *v = cJSON_IsArray(b) ? b->child : NULL; v; v = v->next)
            sum += cJSON_IsNumber(v) ? v->valuedouble : 0;
        most = fmax(most, fmax(sum, tlm_plot_json_num(e, "footprint", 0)));
    }
    const bool gib = most >= GIB;
    const double unit = gib ? GIB : GIB / 1024;
    tlm_plot_data_begin(p, "mem");
    int x = 0;
    for (const cJSON *e = events->child;; e = e ? e->next : NULL, x++) {
        cum[0] = 0;
        for (int c = 0; c < nc; c++) cum[c + 1] = cum[c] + by[c] / unit;
        double row[18] = {x};
        for (int c = 0; c <= nc; c++) row[c + 1] = cum[c];
        tlm_plot_row(p, nc + 2, row);
        if (!e) break;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "by_category");
        if (cJSON_GetArraySize(b) != nc)
            return tlm_fail(TLM_ERR_FORMAT, "%s: event %d has no \"by_category\" of %d counts", path, x, nc);
        k = 0;
        for (const cJSON *v = b->child; v; v = v->next) by[k++] = cJSON_IsNumber(v) ? v->valuedouble : 0;
        cum[0] = 0;
        for (int c = 0; c < nc; c++) cum[c + 1] = cum[c] + by[c] / unit;
        row[0] = x;
        for (int c = 0; c <= nc; c++) row[c + 1] = cum[c];
        tlm_plot_row(p, nc + 2, row);
        const double fp = tlm_plot_json_num(e, "footprint", 0) / unit;
        if (cum[nc] > ymax) ymax = cum[nc];
        if (fp > ymax) ymax = fp;
        if (x >= last_step_begin && cum[nc] > peak) {
            peak = cum[nc];
            peak_x = x;
        }
    }
    tlm_plot_data_end(p);
    tlm_plot_data_begin(p, "footprint");
    x = 0;
    for (const cJSON *e = events->child; e; e = e->next, x++)
        tlm_plot_row(p, 2, (double[]){x, tlm_plot_json_num(e, "footprint", 0) / unit});
    tlm_plot_data_end(p);

    TLM_TRY(draw_marks(p, marks, path));
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(d, "meta");
    char title[400];
    snprintf(title, sizeof title, "tlm memory: %s", tlm_plot_json_str(meta, "title", path));
    tlm_plot_cmd(p, "set title %s", tlm_plot_str(p, title));
    tlm_plot_cmd(p, "set xlabel 'allocation events (program order)'");
    tlm_plot_cmd(p, gib ? "set ylabel 'GiB in use (2^{30} bytes)'" : "set ylabel 'MiB in use (2^{20} bytes)'");
    tlm_plot_cmd(p, "set key outside right top vertical Left reverse noautotitle");
    tlm_plot_cmd(p, "set grid ytics lc rgb '#dddddd'");
    tlm_plot_cmd(p, "set xrange [0:%d]", ne > 0 ? ne : 1);
    tlm_plot_cmd(p, "set yrange [0:%g]", ymax > 0 ? ymax * 1.16 : 1);
    if (peak >= 0) {
        char label[96];
        if (gib && peak >= 1) snprintf(label, sizeof label, "peak %.2f GiB", peak);
        else snprintf(label, sizeof label, "peak %.2f MiB", gib ? peak * 1024 : peak);
        /* the pointer rises from the peak to below the label, which sits above it on an opaque box (the
         * footprint's line may pass there) */
        const double top = peak + ymax * 0.05;
        tlm_plot_cmd(p, "set style textbox opaque fc rgb 'white' noborder margins 2,1");
        tlm_plot_cmd(p, "set label %s at %g, %g center front boxed offset 0,0.9 font ',10'", tlm_plot_str(p, label),
                     peak_x, top);
        tlm_plot_cmd(p, "set arrow from %g, %g to %g, %g head size graph 0.01,20 front lc rgb 'black'", peak_x, top,
                     peak_x, peak);
    }
    /* the stacked categories, the footprint, and key entries for the phases */
    char plot[4096];
    size_t at = (size_t)snprintf(plot, sizeof plot, "plot ");
    int c = 0;
    for (const cJSON *v = cats->child; v && at < sizeof plot; v = v->next, c++) {
        /* the category's name for its key (memory_timeline.h), or the key as written */
        char name[64];
        snprintf(name, sizeof name, "%s", cJSON_IsString(v) ? v->valuestring : "?");
        for (int k2 = 0; k2 < TLM_MEMCAT_COUNT; k2++)
            if (strcmp(name, tlm_memcat_key((tlm_memcat)k2)) == 0) snprintf(name, sizeof name, "%s", tlm_memcat_name((tlm_memcat)k2));
        at += (size_t)snprintf(plot + at, sizeof plot - at,
                               "$mem using 1:%d:%d with filledcurves fc rgb '%s' fs solid 0.9 title %s, ", c + 2, c + 3,
                               cat_colors[c % TLM_MEMCAT_COUNT], tlm_plot_str(p, name));
    }
    if (at < sizeof plot)
        at += (size_t)snprintf(plot + at, sizeof plot - at,
                               "$footprint using 1:2 with steps lw 1.5 dt 2 lc rgb 'black' title 'held from the device', "
                               "NaN with boxes fc rgb '%s' fs solid 1.0 title 'forward', "
                               "NaN with boxes fc rgb '%s' fs solid 1.0 title 'backward', "
                               "NaN with boxes fc rgb '%s' fs solid 1.0 title 'optimizer'",
                               phase_colors[TLM_PHASE_FORWARD], phase_colors[TLM_PHASE_BACKWARD],
                               phase_colors[TLM_PHASE_OPTIMIZER]);
    if (at >= sizeof plot) return tlm_fail(TLM_ERR_FORMAT, "%s: too many categories to plot", path);
    tlm_plot_cmd(p, "%s", plot);
    (void)n;
    return TLM_OK;
}

const tlm_plot_kind tlm_plot_memory_timeline = {
    "memory-timeline",
    "bytes in use over a recorded step, stacked by category, phases shaded (PNG and SVG)",
    "tlm memory --timeline FILE.json",
    1,
    1,
    timeline,
};

/* ---- memory-context ---------------------------------------------------------------------------------------- */

#define MAX_SERIES 24
#define MAX_POINTS 64

typedef struct {
    char label[128];
    double ctx[MAX_POINTS], gib[MAX_POINTS];
    bool oom[MAX_POINTS];
    int n;
} series;

/* the series of a row (impl, model, precision, pass, and the options that change memory) */
static series *series_of(series *s, int *ns, const char *label) {
    for (int i = 0; i < *ns; i++)
        if (strcmp(s[i].label, label) == 0) return &s[i];
    if (*ns == MAX_SERIES) return NULL;
    series *x = &s[(*ns)++];
    memset(x, 0, sizeof *x);
    snprintf(x->label, sizeof x->label, "%s", label);
    return x;
}

static tlm_status context(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    series s[MAX_SERIES];
    int ns = 0;
    double ymax = 0;
    for (int f = 0; f < n; f++) {
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(docs[f], "rows");
        if (!cJSON_IsArray(rows))
            return tlm_fail(TLM_ERR_FORMAT, "%s: no \"rows\" array (tlm memory --format json, or pytorch_lm.py "
                            "--format json)", paths[f]);
        for (const cJSON *r = rows->child; r; r = r->next) {
            const double ctx = tlm_plot_json_num(r, "context_length", NAN);
            double bytes = tlm_plot_json_num(r, "peak_bytes", NAN);
            if (isnan(bytes)) bytes = tlm_plot_json_num(r, "peak_mib", NAN) * 1048576.0; /* the PyTorch peer */
            const bool oom = strcmp(tlm_plot_json_str(r, "status", "ok"), "OOM") == 0;
            if (isnan(ctx) || (isnan(bytes) && !oom))
                return tlm_fail(TLM_ERR_FORMAT, "%s: a row without \"context_length\" and \"peak_bytes\" (or "
                                "\"peak_mib\")", paths[f]);
            char label[128];
            const char *impl = tlm_plot_json_str(r, "impl", "tlm");
            const char *rc = tlm_plot_json_str(r, "recompute", "none");
            snprintf(label, sizeof label, "%s %s %s %s%s%s%s", strncmp(impl, "pytorch", 7) == 0 ? impl : "tlm",
                     tlm_plot_json_str(r, "model", "?"), tlm_plot_json_str(r, "precision", "?"),
                     tlm_plot_json_str(r, "pass", "?"), strcmp(rc, "none") ? " recompute " : "",
                     strcmp(rc, "none") ? rc : "", tlm_plot_json_true(r, "optimizer_in_backward") ? " opt-in-bwd" : "");
            series *x = series_of(s, &ns, label);
            if (!x || x->n == MAX_POINTS)
                return tlm_fail(TLM_ERR_FORMAT, "%s: more than %d series or %d points in one", paths[f], MAX_SERIES,
                                MAX_POINTS);
            x->ctx[x->n] = ctx;
            x->gib[x->n] = oom ? NAN : bytes / GIB;
            x->oom[x->n] = oom;
            x->n++;
            if (!oom && bytes / GIB > ymax) ymax = bytes / GIB;
        }
    }
    if (!ns) return tlm_fail(TLM_ERR_FORMAT, "%s: no rows to plot", paths[0]);
    /* the axis's unit: GiB from 1 GiB on, else MiB */
    const bool gib = ymax >= 1;
    const double scale = gib ? 1 : 1024;
    const double top = ymax > 0 ? ymax * scale * 1.15 : 1;
    char name[32];
    for (int i = 0; i < ns; i++) {
        /* points in context order */
        for (int a = 1; a < s[i].n; a++)
            for (int b = a; b > 0 && s[i].ctx[b] < s[i].ctx[b - 1]; b--) {
                double t = s[i].ctx[b];
                s[i].ctx[b] = s[i].ctx[b - 1], s[i].ctx[b - 1] = t;
                t = s[i].gib[b];
                s[i].gib[b] = s[i].gib[b - 1], s[i].gib[b - 1] = t;
                const bool o = s[i].oom[b];
                s[i].oom[b] = s[i].oom[b - 1], s[i].oom[b - 1] = o;
            }
        snprintf(name, sizeof name, "s%d", i);
        tlm_plot_data_begin(p, name);
        for (int k = 0; k < s[i].n; k++)
            tlm_plot_row(p, 3, (double[]){s[i].ctx[k], s[i].gib[k] * scale, s[i].oom[k] ? top * 0.97 : NAN});
        tlm_plot_data_end(p);
    }
    tlm_plot_cmd(p, "set title 'Peak memory of a step against the context length'");
    tlm_plot_cmd(p, "set xlabel 'context length (tokens)'");
    tlm_plot_cmd(p, gib ? "set ylabel 'peak GiB (2^{30} bytes)'" : "set ylabel 'peak MiB (2^{20} bytes)'");
    tlm_plot_cmd(p, "set logscale x 2");
    tlm_plot_cmd(p, "set key outside right top vertical Left reverse");
    tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
    tlm_plot_cmd(p, "set yrange [0:%g]", top);
    bool any_oom = false;
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < s[i].n; k++) any_oom |= s[i].oom[k];
    if (any_oom) tlm_plot_cmd(p, "set label 'x: out of memory' at graph 0.01, graph 0.97 left font ',9'");
    char plot[8192];
    size_t at = (size_t)snprintf(plot, sizeof plot, "plot ");
    for (int i = 0; i < ns && at < sizeof plot; i++) {
        const bool torch = strncmp(s[i].label, "pytorch", 7) == 0;
        at += (size_t)snprintf(plot + at, sizeof plot - at,
                               "%s$s%d using 1:2 with linespoints lw 2 pt %d dt %d lc %d title %s, "
                               "$s%d using 1:3 with points pt 2 ps 2 lw 2 lc %d notitle",
                               i ? ", " : "", i, torch ? 6 : 7, torch ? 2 : 1, i + 1, tlm_plot_str(p, s[i].label), i,
                               i + 1);
    }
    if (at >= sizeof plot) return tlm_fail(TLM_ERR_FORMAT, "%s: too many series to plot", paths[0]);
    tlm_plot_cmd(p, "%s", plot);
    return TLM_OK;
}

const tlm_plot_kind tlm_plot_memory_context = {
    "memory-context",
    "peak memory of a step against the context length, per model, precision and pass; PyTorch's rows beside",
    "tlm memory --format json reports; bench/peers/pytorch_lm.py --format json files",
    1,
    16,
    context,
};
