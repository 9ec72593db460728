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
#define MAX_CSV 16

typedef struct {
    FILE *f;
    tlm_format fmt;
} sink;

/* one CSV file: a table's rows ([0] the first table: the --out file, or stdout) */
typedef struct {
    char name[48];
    tlm_output *o;       /* NULL: r->file or stdout */
    FILE *f;
    const tlm_column *cols;
    int ncols;
    bool heading;        /* its row of field names written */
} csv_file;

struct tlm_report {
    char tool[64];
    char *out_path;       /* --out FILE (NULL: none) */
    sink sinks[2];        /* [0] stdout, [1] the --out file (f NULL: none, or a CSV table not written there) */
    tlm_output *file;
    bool wide, verbose;
    csv_file csv[MAX_CSV]; /* the CSV sink's files, one per table */
    int ncsv;
    char dropped[256];    /* the tables CSV on stdout leaves out */
    tlm_status csv_error; /* opening a table's CSV file failed: the report is not written */
    cJSON *root;          /* the whole report as JSON: meta fields, tables, lists, summary */
    cJSON *summary;
    bool header_written;  /* the `#` header lines of table sinks */
    /* the current table */
    const tlm_column *cols;
    int ncols;
    bool show[MAX_COLS];
    bool table_started;   /* its heading written */
    cJSON *rows;          /* its JSON array */
    cJSON *row;           /* the row being filled */
    char last_list[32];   /* the list whose heading the table sinks printed last */
    /* progress */
    int items, item;
    double total_cost, done_cost, cost_now, t0, item_t0;
    double fit_n, fit_c, fit_t, fit_cc, fit_ct; /* the finished items' costs c and times t: sums of 1, c, t,
                                                   c^2, c t (progress_left's fit) */
    bool progress_tty, progress_shown;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static bool table_sink(const sink *s) { return s->f && s->fmt == TLM_FORMAT_TABLE; }

/* printf to every table sink */
static void out_table(tlm_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_table(tlm_report *r, const char *fmt, ...) {
    for (int i = 0; i < 2; i++) {
        if (!table_sink(&r->sinks[i])) continue;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(r->sinks[i].f, fmt, ap);
        va_end(ap);
    }
}

/* Writes `text` to f in lines of at most TLM_REPORT_WIDTH characters, broken at spaces (a word longer
 * than a line is cut): the first line after `first`, the others after `cont`. */
static void write_wrapped(FILE *f, const char *first, const char *cont, const char *text) {
    const char *prefix = first;
    size_t left = strlen(text);
    do {
        const size_t room = TLM_REPORT_WIDTH > strlen(prefix) + 20 ? TLM_REPORT_WIDTH - strlen(prefix) : 20;
        size_t n = left;
        if (n > room) {
            n = room;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = room;
        }
        fprintf(f, "%s%.*s\n", prefix, (int)n, text);
        text += n;
        left -= n;
        while (left && *text == ' ') text++, left--;
        prefix = cont;
    } while (left);
}

void tlm_report_plan(tlm_io_plan *plan, const char *flag, tlm_format fmt, const char *out_path) {
    if (!out_path) return;
    tlm_io_plan_output(plan, flag, out_path);
    if (fmt != TLM_FORMAT_CSV) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.meta.json", out_path); /* write_sidecar's and csv_select's names */
    tlm_io_plan_output(plan, flag, path);
    snprintf(path, sizeof path, "%s.", out_path);
    tlm_io_plan_outputs(plan, flag, path, ".csv");
}

/* ---- open ------------------------------------------------------------------------------------------ */

tlm_status tlm_report_open(tlm_report **out, const char *tool, tlm_format fmt, const char *out_path, int argc,
                           char **argv) {
    *out = NULL;
    tlm_report *r = calloc(1, sizeof *r);
    if (!r || !(r->root = cJSON_CreateObject()) || !(r->summary = cJSON_CreateObject()) ||
        (out_path && !(r->out_path = strdup(out_path)))) {
        if (r) cJSON_Delete(r->root), cJSON_Delete(r->summary);
        free(r);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the report");
    }
    snprintf(r->tool, sizeof r->tool, "%s", tool);
    if (out_path) {
        tlm_status s = tlm_output_open(&r->file, out_path);
        if (s != TLM_OK) {
            cJSON_Delete(r->root);
            cJSON_Delete(r->summary);
            free(r->out_path);
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

void tlm_report_view(tlm_report *r, bool wide, bool verbose) {
    TLM_ASSERT(!r->header_written);
    r->wide = wide;
    r->verbose = verbose;
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

/* "# key: value" for a scalar item to f */
static void print_field_line(FILE *f, const cJSON *it) {
    if (cJSON_IsString(it)) fprintf(f, "# %s: %s\n", it->string, it->valuestring);
    else if (cJSON_IsBool(it)) fprintf(f, "# %s: %s\n", it->string, cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it)) fprintf(f, "# %s: %.10g\n", it->string, it->valuedouble);
}

static const char *meta_text(const tlm_report *r, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* The brief header: "# tool version, date", the command, the device and threads, the knobs (at most 4
 * lines), and how many fields --verbose adds. */
static void write_brief_header(const tlm_report *r, FILE *f) {
    static const char *const brief[] = {"tool", "version", "date", "command", "device", "threads", "knobs"};
    int more = 0;
    for (const cJSON *it = r->root->child; it; it = it->next) {
        bool shown = false;
        for (size_t k = 0; k < sizeof brief / sizeof brief[0]; k++) shown |= strcmp(it->string, brief[k]) == 0;
        more += !shown && (cJSON_IsString(it) || cJSON_IsNumber(it) || cJSON_IsBool(it));
    }
    const char *date = meta_text(r, "date"), *command = meta_text(r, "command");
    fprintf(f, "# %s %s, %s", r->tool, TLM_VERSION, date ? date : "");
    if (more) fprintf(f, " (--verbose: %d more header fields)", more);
    fputc('\n', f);
    if (command) fprintf(f, "# command: %s\n", command);
    const char *device = meta_text(r, "device");
    const cJSON *threads = cJSON_GetObjectItemCaseSensitive(r->root, "threads");
    if (device && cJSON_IsNumber(threads)) fprintf(f, "# device: %s; threads: %d\n", device, threads->valueint);
    else if (device) fprintf(f, "# device: %s\n", device);
    if (meta_text(r, "knobs")) fprintf(f, "# knobs: %s\n", meta_text(r, "knobs"));
}

static void write_header(tlm_report *r) {
    if (r->header_written) return;
    r->header_written = true;
    for (int i = 0; i < 2; i++) {
        const sink *s = &r->sinks[i];
        if (!s->f || s->fmt == TLM_FORMAT_JSON) continue;
        if (s->fmt == TLM_FORMAT_CSV) { /* CSV on stdout: the brief header on stderr; a CSV file: the sidecar */
            if (s->f == stdout) write_brief_header(r, stderr);
        } else if (r->verbose) {
            for (const cJSON *it = r->root->child; it; it = it->next) print_field_line(s->f, it);
        } else {
            write_brief_header(r, s->f);
        }
    }
}

/* ---- tables ---------------------------------------------------------------------------------------------- */

static int col_index(const tlm_report *r, const char *key) {
    for (int i = 0; i < r->ncols; i++)
        if (strcmp(r->cols[i].key, key) == 0) return i;
    return -1;
}

static bool col_in_table(const tlm_report *r, const tlm_column *c) {
    return c->head && !(c->flags & TLM_COL_NO_TABLE) && (r->wide || !(c->flags & TLM_COL_WIDE));
}

/* Points the CSV sink at the file of table `name`: the first table's is the --out file (or stdout),
 * each later one FILE.<name>.csv (on stdout: none, the table is dropped). */
static void csv_select(tlm_report *r, const char *name) {
    for (int i = 0; i < 2; i++) {
        sink *s = &r->sinks[i];
        if (s->fmt != TLM_FORMAT_CSV || (i == 1 && !r->file) || (i == 0 && r->file)) continue;
        int k = 0;
        while (k < r->ncsv && strcmp(r->csv[k].name, name) != 0) k++;
        if (k == r->ncsv && (i == 0 || r->csv_error != TLM_OK) && r->ncsv > 0) {
            if (!strstr(r->dropped, name))
                snprintf(r->dropped + strlen(r->dropped), sizeof r->dropped - strlen(r->dropped), "%s%s",
                         r->dropped[0] ? ", " : "", name);
            s->f = NULL;
            continue;
        }
        if (k == r->ncsv) {
            TLM_ASSERT(r->ncsv < MAX_CSV);
            csv_file *c = &r->csv[r->ncsv];
            *c = (csv_file){.f = i == 0 ? stdout : tlm_output_file(r->file)};
            snprintf(c->name, sizeof c->name, "%s", name);
            if (r->ncsv > 0) {
                char path[4096];
                snprintf(path, sizeof path, "%s.%s.csv", r->out_path, name);
                r->csv_error = tlm_output_open(&c->o, path);
                if (r->csv_error != TLM_OK) {
                    s->f = NULL;
                    continue;
                }
                c->f = tlm_output_file(c->o);
            }
            r->ncsv++;
        }
        r->csv[k].cols = r->cols;
        r->csv[k].ncols = r->ncols;
        s->f = r->csv[k].f;
    }
}

void tlm_report_table(tlm_report *r, const char *name, const tlm_column *cols, int ncols) {
    TLM_ASSERT(ncols <= MAX_COLS && !r->row);
    write_header(r);
    r->cols = cols;
    r->ncols = ncols;
    for (int i = 0; i < ncols; i++) r->show[i] = col_in_table(r, &cols[i]);
    r->table_started = false;
    r->last_list[0] = '\0';
    r->rows = cJSON_GetObjectItemCaseSensitive(r->root, name);
    if (!r->rows) r->rows = cJSON_AddArrayToObject(r->root, name);
    TLM_ASSERT(r->rows && cJSON_IsArray(r->rows));
    csv_select(r, name);
}

void tlm_report_table_title(tlm_report *r, const char *title) {
    TLM_ASSERT(r->cols && !r->table_started);
    for (int i = 0; i < 2; i++)
        if (table_sink(&r->sinks[i])) {
            fputc('\n', r->sinks[i].f);
            write_wrapped(r->sinks[i].f, "## ", "## ", title);
        }
    cJSON *titles = cJSON_GetObjectItemCaseSensitive(r->root, "titles");
    if (!titles) titles = cJSON_AddObjectToObject(r->root, "titles");
    const char *name = r->rows->string ? r->rows->string : "rows";
    if (titles && !cJSON_HasObjectItem(titles, name)) cJSON_AddStringToObject(titles, name, title);
}

void tlm_report_show(tlm_report *r, const char *key, bool show) {
    const int i = col_index(r, key);
    TLM_ASSERT(i >= 0 && !r->table_started);
    r->show[i] = show && col_in_table(r, &r->cols[i]);
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
    for (const sink *s = r->sinks; s < r->sinks + 2; s++) {
        if (!s->f || s->fmt == TLM_FORMAT_JSON) continue; /* JSON: the tables at the close */
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
            csv_file *cf = NULL; /* the field names once per file */
            for (int k = 0; k < r->ncsv; k++)
                if (r->csv[k].f == s->f) cf = &r->csv[k];
            if (!cf || cf->heading) continue;
            cf->heading = true;
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

void tlm_report_bytes_text(double b, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (u < 5 && fabs(b) >= 1023.5) b /= 1024, u++;
    if (u == 0) snprintf(buf, n, "%.0f B", b);
    else snprintf(buf, n, "%.*f %s", fabs(b) < 9.995 ? 2 : fabs(b) < 99.95 ? 1 : 0, b, units[u]);
}

/* the cell's text in the table: "-" when missing */
static void cell_text(const tlm_column *c, const cJSON *v, char *buf, size_t n) {
    const double scale = c->scale != 0 ? c->scale : 1.0;
    if (!v || cJSON_IsNull(v)) snprintf(buf, n, "-");
    else if ((c->flags & TLM_COL_BYTES) && cJSON_IsNumber(v)) tlm_report_bytes_text(v->valuedouble, buf, n);
    else if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "yes" : "no");
    else if (c->type == TLM_FIELD_INT && scale == 1.0) snprintf(buf, n, "%lld", (long long)v->valuedouble);
    else snprintf(buf, n, (c->flags & TLM_COL_SCI) ? "%.*e%s" : "%.*f%s", c->prec, v->valuedouble * scale,
                  (c->flags & TLM_COL_OVER100) && v->valuedouble * scale > 100 ? "!" : "");
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
        if (!s->f || s->fmt == TLM_FORMAT_JSON) continue;
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
        out_table(r, "%s:\n", name);
        snprintf(r->last_list, sizeof r->last_list, "%s", name);
    }
    for (int i = 0; i < 2; i++)
        if (table_sink(&r->sinks[i])) write_wrapped(r->sinks[i].f, "- ", "  ", text);
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
    r->done_cost = r->fit_n = r->fit_c = r->fit_t = r->fit_cc = r->fit_ct = 0;
}

static void format_duration(double s, char *buf, size_t n) {
    if (s < 60) snprintf(buf, n, "%.0f s", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* How long the items left will take (the one running included): each item's measured time fitted as
 * a + b x cost over the finished items (least squares, a and b at least 0), so that a fixed time per
 * item (a model's set-up) and a time per unit of work are both measured; with one finished item, or
 * all of one cost, the mean time per item. */
static double progress_left(const tlm_report *r, double items_left, double cost_left) {
    const double n = r->fit_n, mc = r->fit_c / n, mt = r->fit_t / n;
    const double var = r->fit_cc / n - mc * mc, cov = r->fit_ct / n - mc * mt;
    double b = var > 1e-12 * mc * mc ? cov / var : 0, a = mt - b * mc;
    if (b < 0) b = 0, a = mt;
    if (a < 0) a = 0, b = mc > 0 ? mt / mc : 0;
    return a * items_left + b * cost_left;
}

void tlm_report_progress(tlm_report *r, const char *label, double cost) {
    const double t = now_s();
    if (r->item > 0) { /* the item that just finished: its cost and measured time */
        const double c = r->cost_now, dt = t - r->item_t0;
        r->done_cost += c;
        r->fit_n += 1, r->fit_c += c, r->fit_t += dt, r->fit_cc += c * c, r->fit_ct += c * dt;
    }
    r->cost_now = cost > 0 ? cost : 1;
    r->item++;
    r->item_t0 = t;
    if (r->items <= 1) return;
    char left[64] = "";
    if (r->fit_n > 0) {
        char d[24];
        format_duration(progress_left(r, r->items - r->item + 1, r->total_cost - r->done_cost), d, sizeof d);
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

/* The CSV's sidecar: the report without its tables' rows, and per table its file and columns. */
static tlm_status write_sidecar(tlm_report *r) {
    cJSON *side = cJSON_Duplicate(r->root, true), *tables = cJSON_CreateObject();
    tlm_status s = side && tables ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the report");
    for (int k = 0; s == TLM_OK && k < r->ncsv; k++) {
        const csv_file *c = &r->csv[k];
        cJSON_DeleteItemFromObjectCaseSensitive(side, c->name);
        cJSON *t = cJSON_AddObjectToObject(tables, c->name), *cols = t ? cJSON_AddArrayToObject(t, "columns") : NULL;
        char path[4096];
        if (k == 0) snprintf(path, sizeof path, "%s", r->out_path);
        else snprintf(path, sizeof path, "%s.%s.csv", r->out_path, c->name);
        if (!cols || !cJSON_AddStringToObject(t, "file", path)) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        for (int i = 0; s == TLM_OK && i <= c->ncols + 1; i++) {
            cJSON *col = cJSON_CreateObject();
            if (!col) break;
            cJSON_AddItemToArray(cols, col);
            if (i >= c->ncols) { /* the fields every table ends with */
                cJSON_AddStringToObject(col, "key", i == c->ncols ? "status" : "error");
                continue;
            }
            const tlm_column *x = &c->cols[i];
            cJSON_AddStringToObject(col, "key", x->key);
            if (x->head) cJSON_AddStringToObject(col, "head", x->head);
            cJSON_AddStringToObject(col, "unit", x->flags & TLM_COL_BYTES ? "bytes" : x->unit ? x->unit : "");
            cJSON_AddBoolToObject(col, "primary", x->head && !(x->flags & (TLM_COL_WIDE | TLM_COL_NO_TABLE)));
        }
    }
    if (s == TLM_OK) {
        cJSON_AddItemToObject(side, "tables", tables);
        tables = NULL;
        char *json = cJSON_Print(side), path[4096];
        snprintf(path, sizeof path, "%s.meta.json", r->out_path);
        if (!json) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory printing the report");
        else s = tlm_output_write_file(path, json, strlen(json));
        free(json);
    }
    cJSON_Delete(tables);
    cJSON_Delete(side);
    return s;
}

/* Commits (or with !commit removes) the --out file, the later tables' CSV files and the sidecar,
 * together: in the caller's batch, else in one of its own. */
static tlm_status commit_files(tlm_report *r, bool commit) {
    if (!r->file) return TLM_OK;
    commit = commit && r->csv_error == TLM_OK;
    const bool own = commit && !tlm_output_in_batch();
    if (own) tlm_output_batch_begin();
    tlm_status s = commit ? tlm_output_commit(r->file) : (tlm_output_abort(r->file), TLM_OK);
    for (int k = 1; k < r->ncsv; k++) {
        if (s == TLM_OK && commit) s = tlm_output_commit(r->csv[k].o);
        else tlm_output_abort(r->csv[k].o);
    }
    if (s == TLM_OK && commit && r->sinks[1].fmt == TLM_FORMAT_CSV) s = write_sidecar(r);
    if (own) {
        const tlm_status e = tlm_output_batch_end(s == TLM_OK);
        if (s == TLM_OK) s = e;
    }
    return r->csv_error != TLM_OK ? r->csv_error : s;
}

tlm_status tlm_report_close(tlm_report *r, bool commit) {
    if (!r) return TLM_OK;
    progress_clear(r);
    write_header(r);
    for (int i = 0; i < 2; i++)
        if (table_sink(&r->sinks[i]))
            for (const cJSON *it = r->summary->child; it; it = it->next) print_field_line(r->sinks[i].f, it);
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
    if (r->dropped[0] && !r->file)
        fprintf(stderr, "%s: CSV on stdout holds the first table only; not written: %s (--out FILE writes each "
                        "table to a file, --format json has them all)\n", r->tool, r->dropped);
    fflush(stdout);
    const tlm_status s = commit_files(r, commit);
    cJSON_Delete(r->root);
    free(r->out_path);
    free(r);
    return s;
}
