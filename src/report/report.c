/* report.c — the one report writer (report.h): a header of fields, tables of typed columns, lists
 * and a summary, written as a fixed-width table, CSV or JSON (cJSON) to stdout and/or a file that
 * the one file writer (output.h) commits; and progress lines on stderr. */
#define _GNU_SOURCE
#include "tlm/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tlm/output.h"
#include "tlm/tuning.h"

static const char *const format_names[] = {"table", "csv", "json"};

const char *tlm_format_name(tlm_format f) { return (unsigned)f < 3 ? format_names[f] : "?"; }

bool tlm_format_parse(const char *name, tlm_format *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, format_names[i]) == 0) {
            *out = (tlm_format)i;
            return true;
        }
    return false;
}

/* ---- state ----------------------------------------------------------------------------------------- */

#define MAX_COLS 96

typedef struct {
    FILE *f;
    tlm_format fmt;
} sink;

struct tlm_report {
    char tool[64];
    sink sinks[2];        /* [0] stdout, [1] the --out file (f NULL: none) */
    tlm_output *file;
    cJSON *root;          /* the whole report as JSON: meta fields, tables, lists, summary */
    cJSON *summary;
    bool header_written;  /* the `#` header lines of table/CSV sinks */
    /* the current table */
    const tlm_column *cols;
    int ncols;
    bool show[MAX_COLS];
    bool table_started;   /* its heading written */
    cJSON *rows;          /* its JSON array */
    cJSON *row;           /* the row being filled */
    char last_list[32];   /* the list whose heading the table/CSV sinks printed last */
    /* progress */
    int items, item;
    double total_cost, done_cost, cost_now, t0, item_t0;
    bool progress_tty, progress_shown;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static bool text_sink(const sink *s) { return s->f && s->fmt != TLM_FORMAT_JSON; }

/* printf to every table/CSV sink (kind: -1 any, else that format only) */
static void out_text(tlm_report *r, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void out_text(tlm_report *r, int kind, const char *fmt, ...) {
    for (int i = 0; i < 2; i++) {
        if (!text_sink(&r->sinks[i]) || (kind >= 0 && (int)r->sinks[i].fmt != kind)) continue;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(r->sinks[i].f, fmt, ap);
        va_end(ap);
    }
}

/* ---- open ------------------------------------------------------------------------------------------ */

tlm_status tlm_report_open(tlm_report **out, const char *tool, tlm_format fmt, const char *out_path, int argc,
                           char **argv) {
    *out = NULL;
    tlm_report *r = calloc(1, sizeof *r);
    if (!r || !(r->root = cJSON_CreateObject()) || !(r->summary = cJSON_CreateObject())) {
        if (r) cJSON_Delete(r->root);
        free(r);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the report");
    }
    snprintf(r->tool, sizeof r->tool, "%s", tool);
    if (out_path) {
        tlm_status s = tlm_output_open(&r->file, out_path);
        if (s != TLM_OK) {
            cJSON_Delete(r->root);
            cJSON_Delete(r->summary);
            free(r);
            return s;
        }
        r->sinks[1] = (sink){tlm_output_file(r->file), fmt};
        r->sinks[0] = (sink){stdout, TLM_FORMAT_TABLE};
    } else {
        r->sinks[0] = (sink){stdout, fmt};
    }
    r->progress_tty = isatty(STDERR_FILENO);
    r->t0 = now_s();
    char date[64];
    const time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tm);
    tlm_report_meta_str(r, "tool", tool);
    tlm_report_meta_str(r, "version", TLM_VERSION);
    tlm_report_meta_str(r, "date", date);
    /* the command line: the tool's name, then the subcommand's arguments (argv[0] is its name) */
    size_t len = strlen(tool) + 1;
    for (int i = 1; i < argc; i++) len += strlen(argv[i]) + 3;
    char *cmd = malloc(len + 4);
    if (cmd) {
        size_t k = (size_t)snprintf(cmd, len + 4, "%s", tool);
        for (int i = 1; i < argc; i++) /* quote words with spaces, so the line can be run again */
            k += (size_t)snprintf(cmd + k, len + 4 - k, strchr(argv[i], ' ') ? " '%s'" : " %s", argv[i]);
        tlm_report_meta_str(r, "command", cmd);
        free(cmd);
    }
    char knobs[1024]; /* the knobs not at their default (tuning.h), so the figures say what they ran with */
    if (tlm_tuning_describe(knobs, sizeof knobs) > 0) tlm_report_meta_str(r, "knobs", knobs);
    *out = r;
    return TLM_OK;
}

/* ---- header -------------------------------------------------------------------------------------------- */

static void meta_set(tlm_report *r, const char *key, cJSON *item) {
    TLM_ASSERT(!r->header_written && item);
    if (cJSON_HasObjectItem(r->root, key)) cJSON_ReplaceItemInObjectCaseSensitive(r->root, key, item);
    else cJSON_AddItemToObject(r->root, key, item);
}

void tlm_report_meta_str(tlm_report *r, const char *key, const char *value) {
    meta_set(r, key, cJSON_CreateString(value ? value : ""));
}
void tlm_report_meta_num(tlm_report *r, const char *key, double value) { meta_set(r, key, cJSON_CreateNumber(value)); }
void tlm_report_meta_int(tlm_report *r, const char *key, int64_t value) {
    meta_set(r, key, cJSON_CreateNumber((double)value));
}
void tlm_report_meta_bool(tlm_report *r, const char *key, bool value) { meta_set(r, key, cJSON_CreateBool(value)); }

/* "# key: value" for a scalar item */
static void print_field_line(tlm_report *r, const cJSON *it) {
    if (cJSON_IsString(it)) out_text(r, -1, "# %s: %s\n", it->string, it->valuestring);
    else if (cJSON_IsBool(it)) out_text(r, -1, "# %s: %s\n", it->string, cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it)) out_text(r, -1, "# %s: %.10g\n", it->string, it->valuedouble);
}

static void write_header(tlm_report *r) {
    if (r->header_written) return;
    r->header_written = true;
    for (const cJSON *it = r->root->child; it; it = it->next) print_field_line(r, it);
}

/* ---- tables ---------------------------------------------------------------------------------------------- */

static int col_index(const tlm_report *r, const char *key) {
    for (int i = 0; i < r->ncols; i++)
        if (strcmp(r->cols[i].key, key) == 0) return i;
    return -1;
}

void tlm_report_table(tlm_report *r, const char *name, const tlm_column *cols, int ncols) {
    TLM_ASSERT(ncols <= MAX_COLS && !r->row);
    write_header(r);
    r->cols = cols;
    r->ncols = ncols;
    for (int i = 0; i < ncols; i++) r->show[i] = !(cols[i].flags & TLM_COL_NO_TABLE) && cols[i].head;
    r->table_started = false;
    r->last_list[0] = '\0';
    r->rows = cJSON_GetObjectItemCaseSensitive(r->root, name);
    if (!r->rows) r->rows = cJSON_AddArrayToObject(r->root, name);
    TLM_ASSERT(r->rows && cJSON_IsArray(r->rows));
}

void tlm_report_table_title(tlm_report *r, const char *title) {
    TLM_ASSERT(r->cols && !r->table_started);
    out_text(r, -1, "\n## %s\n", title);
    cJSON *titles = cJSON_GetObjectItemCaseSensitive(r->root, "titles");
    if (!titles) titles = cJSON_AddObjectToObject(r->root, "titles");
    const char *name = r->rows->string ? r->rows->string : "rows";
    if (titles && !cJSON_HasObjectItem(titles, name)) cJSON_AddStringToObject(titles, name, title);
}

void tlm_report_show(tlm_report *r, const char *key, bool show) {
    const int i = col_index(r, key);
    TLM_ASSERT(i >= 0 && !r->table_started);
    r->show[i] = show && r->cols[i].head && !(r->cols[i].flags & TLM_COL_NO_TABLE);
}

/* A table line is built in a buffer: cells one space apart, trailing blanks cut when it is written. */
typedef struct {
    char text[4096];
    size_t len;
} line_buf;

static void line_put(line_buf *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line_put(line_buf *l, const char *fmt, ...) {
    if (l->len >= sizeof l->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(l->text + l->len, sizeof l->text - l->len, fmt, ap);
    va_end(ap);
    if (n > 0) l->len += (size_t)n < sizeof l->text - l->len ? (size_t)n : sizeof l->text - 1 - l->len;
}

static void line_cell(line_buf *l, const tlm_column *c, const char *text) {
    line_put(l, c->width < 0 ? "%s%-*s" : "%s%*s", l->len ? " " : "", abs(c->width), text);
}

static void line_write(line_buf *l, FILE *f) {
    while (l->len && l->text[l->len - 1] == ' ') l->len--;
    fprintf(f, "%.*s\n", (int)l->len, l->text);
    l->len = 0;
}

static void write_table_heading(tlm_report *r) {
    if (r->table_started) return;
    r->table_started = true;
    for (int i = 0; i < 2; i++) {
        const sink *s = &r->sinks[i];
        if (!text_sink(s)) continue;
        if (s->fmt == TLM_FORMAT_TABLE) {
            bool units = false;
            for (int c = 0; c < r->ncols; c++) units |= r->show[c] && r->cols[c].unit && r->cols[c].unit[0];
            line_buf l = {.len = 0};
            for (int row = 0; row < 1 + units; row++) { /* the heading, and the units row when any */
                for (int c = 0; c < r->ncols; c++)
                    if (r->show[c]) line_cell(&l, &r->cols[c], row ? (r->cols[c].unit ? r->cols[c].unit : "") : r->cols[c].head);
                line_write(&l, s->f);
            }
        } else {
            for (int c = 0; c < r->ncols; c++) fprintf(s->f, "%s,", r->cols[c].key);
            fprintf(s->f, "status,error\n");
        }
    }
}

void tlm_report_row_begin(tlm_report *r) {
    TLM_ASSERT(r->cols && !r->row);
    r->row = cJSON_CreateObject();
    TLM_ASSERT(r->row);
}

static void row_set(tlm_report *r, const char *key, cJSON *item, tlm_field_type type) {
    const int i = col_index(r, key);
    if (i < 0 || r->cols[i].type != type)
        tlm_fatal("report: '%s' is not a column of type %d in this table (programmer error)", key, (int)type);
    TLM_ASSERT(r->row && item);
    if (cJSON_HasObjectItem(r->row, key)) cJSON_ReplaceItemInObjectCaseSensitive(r->row, key, item);
    else cJSON_AddItemToObject(r->row, key, item);
}

void tlm_report_str(tlm_report *r, const char *key, const char *value) {
    row_set(r, key, value ? cJSON_CreateString(value) : cJSON_CreateNull(), TLM_FIELD_STR);
}
void tlm_report_int(tlm_report *r, const char *key, int64_t value) {
    row_set(r, key, cJSON_CreateNumber((double)value), TLM_FIELD_INT);
}
void tlm_report_num(tlm_report *r, const char *key, double value) {
    /* 7 significant digits: what the measurements hold, and JSON a reader can scan */
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", value);
    row_set(r, key,
            isfinite(value) ? cJSON_CreateNumber(strtod(buf, NULL))
                            : cJSON_CreateString(isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"),
            TLM_FIELD_NUM);
}
void tlm_report_bool(tlm_report *r, const char *key, bool value) {
    row_set(r, key, cJSON_CreateBool(value), TLM_FIELD_BOOL);
}

void tlm_report_status(tlm_report *r, const char *status, const char *error) {
    TLM_ASSERT(r->row && status);
    cJSON_DeleteItemFromObjectCaseSensitive(r->row, "status");
    cJSON_DeleteItemFromObjectCaseSensitive(r->row, "error");
    cJSON_AddStringToObject(r->row, "status", status);
    if (error) cJSON_AddStringToObject(r->row, "error", error);
}

static void progress_clear(tlm_report *r) {
    if (r->progress_shown) fputs("\r\033[K", stderr);
    r->progress_shown = false;
}

/* the cell's text in the table: "-" when missing */
static void cell_text(const tlm_column *c, const cJSON *v, char *buf, size_t n) {
    const double scale = c->scale != 0 ? c->scale : 1.0;
    if (!v || cJSON_IsNull(v)) snprintf(buf, n, "-");
    else if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "yes" : "no");
    else if (c->type == TLM_FIELD_INT && scale == 1.0) snprintf(buf, n, "%lld", (long long)v->valuedouble);
    else snprintf(buf, n, (c->flags & TLM_COL_SCI) ? "%.*e" : "%.*f", c->prec, v->valuedouble * scale);
}

/* a CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180) */
static void csv_field(FILE *f, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return;
    if (cJSON_IsBool(v)) fputs(cJSON_IsTrue(v) ? "true" : "false", f);
    else if (cJSON_IsNumber(v)) fprintf(f, "%.10g", v->valuedouble);
    else if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strpbrk(s, ",\"\n\r")) {
            fputs(s, f);
            return;
        }
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"') fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    }
}

void tlm_report_row_end(tlm_report *r) {
    TLM_ASSERT(r->row);
    if (!cJSON_HasObjectItem(r->row, "status")) cJSON_AddStringToObject(r->row, "status", "ok");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(r->row, "status");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(r->row, "error");
    const bool ok = strcmp(status->valuestring, "ok") == 0;
    /* a row that did not run shows what it is and why; one that ran but failed a check (OVER, WRONG)
     * shows its figures, then the status */
    static const char *const not_run[] = {"OOM", "failed", "unsupported", "skipped"};
    bool compact = false;
    for (int i = 0; i < 4; i++) compact |= strcmp(status->valuestring, not_run[i]) == 0;
    progress_clear(r);
    write_table_heading(r);
    char buf[512];
    for (int i = 0; i < 2; i++) {
        const sink *s = &r->sinks[i];
        if (!text_sink(s)) continue;
        if (s->fmt == TLM_FORMAT_TABLE) {
            line_buf l = {.len = 0};
            for (int c = 0; c < r->ncols; c++) {
                if (!r->show[c] || (compact && !(r->cols[c].flags & TLM_COL_KEY))) continue;
                cell_text(&r->cols[c], cJSON_GetObjectItemCaseSensitive(r->row, r->cols[c].key), buf, sizeof buf);
                line_cell(&l, &r->cols[c], buf);
            }
            if (!ok) line_put(&l, " %s%s%s", status->valuestring, error ? ": " : "", error ? error->valuestring : "");
            line_write(&l, s->f);
        } else {
            for (int c = 0; c < r->ncols; c++) {
                csv_field(s->f, cJSON_GetObjectItemCaseSensitive(r->row, r->cols[c].key));
                fputc(',', s->f);
            }
            csv_field(s->f, status);
            fputc(',', s->f);
            csv_field(s->f, error);
            fputc('\n', s->f);
        }
        fflush(s->f);
    }
    /* JSON: every column present, in order, null when missing; then status and error */
    cJSON *ordered = cJSON_CreateObject();
    TLM_ASSERT(ordered);
    for (int c = 0; c < r->ncols; c++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(r->row, r->cols[c].key);
        cJSON_AddItemToObject(ordered, r->cols[c].key, v ? v : cJSON_CreateNull());
    }
    cJSON_AddItemToObject(ordered, "status", cJSON_DetachItemFromObjectCaseSensitive(r->row, "status"));
    cJSON *err = cJSON_DetachItemFromObjectCaseSensitive(r->row, "error");
    cJSON_AddItemToObject(ordered, "error", err ? err : cJSON_CreateNull());
    cJSON_Delete(r->row);
    r->row = NULL;
    cJSON_AddItemToArray(r->rows, ordered);
}

/* ---- lists and summary ------------------------------------------------------------------------------------- */

void tlm_report_list(tlm_report *r, const char *name, const char *text) {
    write_header(r);
    progress_clear(r);
    if (strcmp(r->last_list, name) != 0) {
        out_text(r, -1, "%s:\n", name);
        snprintf(r->last_list, sizeof r->last_list, "%s", name);
    }
    out_text(r, -1, "- %s\n", text);
    cJSON *list = cJSON_GetObjectItemCaseSensitive(r->root, name);
    if (!list) list = cJSON_AddArrayToObject(r->root, name);
    TLM_ASSERT(list && cJSON_IsArray(list));
    cJSON_AddItemToArray(list, cJSON_CreateString(text));
}

static void summary_set(tlm_report *r, const char *key, cJSON *item) {
    TLM_ASSERT(item);
    if (cJSON_HasObjectItem(r->summary, key)) cJSON_ReplaceItemInObjectCaseSensitive(r->summary, key, item);
    else cJSON_AddItemToObject(r->summary, key, item);
}
void tlm_report_summary_str(tlm_report *r, const char *key, const char *value) {
    summary_set(r, key, cJSON_CreateString(value ? value : ""));
}
void tlm_report_summary_int(tlm_report *r, const char *key, int64_t value) {
    summary_set(r, key, cJSON_CreateNumber((double)value));
}
void tlm_report_summary_num(tlm_report *r, const char *key, double value) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", value);
    summary_set(r, key, isfinite(value) ? cJSON_CreateNumber(strtod(buf, NULL)) : cJSON_CreateNull());
}

/* ---- progress ---------------------------------------------------------------------------------------------- */

void tlm_report_progress_total(tlm_report *r, int items, double total_cost) {
    r->items = items;
    r->item = 0;
    r->total_cost = total_cost > 0 ? total_cost : items;
    r->done_cost = 0;
}

static void format_duration(double s, char *buf, size_t n) {
    if (s < 60) snprintf(buf, n, "%.0f s", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void tlm_report_progress(tlm_report *r, const char *label, double cost) {
    const double t = now_s();
    if (r->item > 0) r->done_cost += r->cost_now;
    r->cost_now = cost > 0 ? cost : 1;
    r->item++;
    r->item_t0 = t;
    if (r->items <= 1) return;
    char left[64] = "";
    const double elapsed = t - r->t0;
    if (r->done_cost > 0 && elapsed > 0) {
        char d[24];
        format_duration(elapsed / r->done_cost * (r->total_cost - r->done_cost), d, sizeof d);
        snprintf(left, sizeof left, ", about %s left", d);
    }
    progress_clear(r);
    if (r->progress_tty) {
        fprintf(stderr, "%s: [%d/%d] %s%s", r->tool, r->item, r->items, label, left);
        r->progress_shown = true;
    } else {
        fprintf(stderr, "%s: [%d/%d] %s%s\n", r->tool, r->item, r->items, label, left);
    }
    fflush(stderr);
}

/* ---- close ------------------------------------------------------------------------------------------------ */

tlm_status tlm_report_close(tlm_report *r, bool commit) {
    if (!r) return TLM_OK;
    progress_clear(r);
    write_header(r);
    for (const cJSON *it = r->summary->child; it; it = it->next) print_field_line(r, it);
    cJSON_AddItemToObject(r->root, "summary", r->summary);
    r->summary = NULL;
    char *json = NULL;
    for (int i = 0; i < 2; i++)
        if (r->sinks[i].f && r->sinks[i].fmt == TLM_FORMAT_JSON) {
            if (!json) json = cJSON_Print(r->root);
            if (json) fprintf(r->sinks[i].f, "%s\n", json);
            else fprintf(r->sinks[i].f, "{\"error\": \"out of host memory printing the report\"}\n");
        }
    free(json);
    fflush(stdout);
    tlm_status s = TLM_OK;
    if (r->file) s = commit ? tlm_output_commit(r->file) : (tlm_output_abort(r->file), TLM_OK);
    cJSON_Delete(r->root);
    free(r);
    return s;
}
