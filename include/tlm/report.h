/* report.h — the one report writer of every subcommand. A report is a header (what ran, where,
 * when, and how to read the numbers), one or more tables of rows, optional lists of sentences
 * (findings) and a summary; it is written from one description as
 *   table  `#` lines for the header, then per table a fixed-width heading, a units row and the rows
 *          (a row that did not run — OOM, failed, unsupported, skipped — prints its key columns, then
 *          "OOM: <the error>"; any other status, e.g. OVER, follows the full row), then `#` summary lines;
 *   csv    the same `#` header lines, then per table a row of field names and the rows (the error
 *          text in the `error` field), then `#` summary lines;
 *   json   one object, built with cJSON: the header's fields, one array per table, each list as an
 *          array of strings, and "summary".
 * The table goes to stdout as rows arrive; with --out FILE the file gets the chosen format through
 * the one file writer (output.h: all or nothing, committed by tlm_report_close).
 *
 * One schema for every subcommand: a quantity has one field name wherever it appears, with its
 * unit in the name (fwd_ms_mean, peak_bytes, tokens_per_s, tflop_per_s, busbw_gb_per_s), booleans
 * are JSON true/false (CSV true/false), byte counts are integers (bytes; tables show GiB = 2^30 or
 * MiB = 2^20), a ratio is named for what it holds (speedup_vs_naive = naive time / this row's time).
 * Shared fields: status ("ok", "OOM", "failed", "unsupported", "skipped") and error (the message
 * when status is not ok). The header of every report holds tool, version, date (UTC), device,
 * threads and command (the command line that produced it), and knobs: the TLM_* environment
 * variables not at their default (tuning.h), when any is set.
 *
 *   tlm_report *r;
 *   TLM_TRY(tlm_report_open(&r, "tlm bench", fmt, out_path, argc, argv));
 *   tlm_report_meta_str(r, "device", be->description);
 *   tlm_report_table(r, "rows", bench_columns, n);
 *   tlm_report_row_begin(r); tlm_report_num(r, "fwd_ms_mean", 12.5); ...; tlm_report_row_end(r);
 *   return tlm_report_close(r, true);
 */
#ifndef TLM_REPORT_H
#define TLM_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_FORMAT_TABLE = 0, TLM_FORMAT_CSV, TLM_FORMAT_JSON } tlm_format;

/* "table", "csv", "json"; parse: false for anything else. */
const char *tlm_format_name(tlm_format f);
bool tlm_format_parse(const char *name, tlm_format *out);

typedef enum { TLM_FIELD_STR = 0, TLM_FIELD_INT, TLM_FIELD_NUM, TLM_FIELD_BOOL } tlm_field_type;

/* Column flags. KEY: identifies the row (printed also when the row failed, before the error).
 * NO_TABLE: not in the fixed-width table (still in CSV and JSON). SCI: the table prints the number in
 * scientific notation (%.{prec}e). */
enum { TLM_COL_KEY = 1u << 0, TLM_COL_NO_TABLE = 1u << 1, TLM_COL_SCI = 1u << 2 };

/* One column of a table: its field name in CSV and JSON (unit in the name), and how the fixed-width
 * table shows it: heading, units row, width (negative: left-aligned), digits after the point for
 * numbers, and a scale (the table shows value * scale: 1/2^30 for bytes as GiB; 0 means 1). A
 * missing value is "-" in the table, empty in CSV and null in JSON. */
typedef struct {
    const char *key;
    tlm_field_type type;
    const char *head;
    const char *unit;
    int width;
    int prec;
    double scale;
    unsigned flags;
} tlm_column;

/* A column only in CSV and JSON. */
#define TLM_COL_HIDDEN(key, type) {key, type, NULL, NULL, 0, 0, 0, TLM_COL_NO_TABLE}

/* Columns by unit: a time (a number field) in ms or us; a byte count (an integer field) that the table
 * shows in GiB (2^30 bytes) or MiB (2^20 bytes). */
#define TLM_COL_MS(key, head, width, prec) {key, TLM_FIELD_NUM, head, "ms", width, prec, 0, 0}
#define TLM_COL_US(key, head, width, prec) {key, TLM_FIELD_NUM, head, "us", width, prec, 0, 0}
#define TLM_COL_GIB(key, head, width, prec) {key, TLM_FIELD_INT, head, "GiB", width, prec, 1.0 / (1 << 30), 0}
#define TLM_COL_MIB(key, head, width, prec) {key, TLM_FIELD_INT, head, "MiB", width, prec, 1.0 / (1 << 20), 0}

typedef struct tlm_report tlm_report;

/* Starts a report of `tool` ("tlm bench") in format fmt; out_path NULL writes fmt to stdout,
 * otherwise the file gets fmt and stdout the table. argv (argc words) is recorded as the command.
 * Fills tool, version, date and command. Errors: the file writer's (output.h) for out_path, named. */
tlm_status tlm_report_open(tlm_report **out, const char *tool, tlm_format fmt, const char *out_path, int argc,
                           char **argv);

/* A header field: table and CSV print "# key: value" (numbers as %g), JSON a top-level field. Call
 * before the first table. A key given twice keeps the last value. */
void tlm_report_meta_str(tlm_report *r, const char *key, const char *value);
void tlm_report_meta_num(tlm_report *r, const char *key, double value);
void tlm_report_meta_int(tlm_report *r, const char *key, int64_t value);
void tlm_report_meta_bool(tlm_report *r, const char *key, bool value);

/* Starts the table `name` ("rows" for a command's main table; JSON: the array of that name) with
 * these columns; the columns array must outlive the report. Every report has the fields status and
 * error after the given columns. */
void tlm_report_table(tlm_report *r, const char *name, const tlm_column *cols, int ncols);
/* A title for the current table: table and CSV print it as "## title" above the heading; JSON keeps it
 * in "titles": {name: title}. Call before its first row. */
void tlm_report_table_title(tlm_report *r, const char *title);
/* Shows or hides a column in the fixed-width table (a column that says nothing for this run: the
 * fp16 loss scale in an fp32 sweep). Call before the first row of the table. */
void tlm_report_show(tlm_report *r, const char *key, bool show);

/* A row: begin, set fields by key (a key that is not a column of the table is a programmer error),
 * optionally a status other than "ok" with its error text, end (writes the row to the table and CSV
 * now). */
void tlm_report_row_begin(tlm_report *r);
void tlm_report_str(tlm_report *r, const char *key, const char *value);
void tlm_report_int(tlm_report *r, const char *key, int64_t value);
/* A number is kept to 7 significant digits; one that is not finite is written as the string "inf",
 * "-inf" or "nan" (JSON has no such numbers) in every format. */
void tlm_report_num(tlm_report *r, const char *key, double value);
void tlm_report_bool(tlm_report *r, const char *key, bool value);
void tlm_report_status(tlm_report *r, const char *status, const char *error);
void tlm_report_row_end(tlm_report *r);

/* A sentence of the list `name` ("findings"): table and CSV print it after the current table as
 * "- text" under a "name:" line, JSON appends it to the array `name`. */
void tlm_report_list(tlm_report *r, const char *name, const char *text);

/* A summary field after the rows: "# key: value" in table and CSV, JSON "summary": {key: value}. */
void tlm_report_summary_str(tlm_report *r, const char *key, const char *value);
void tlm_report_summary_int(tlm_report *r, const char *key, int64_t value);
void tlm_report_summary_num(tlm_report *r, const char *key, double value); /* 7 significant digits */

/* Progress on stderr for a sweep of items of known relative cost (any unit, e.g. FLOPs per step x
 * steps): start an item with its label and cost, and the line says which item of how many is
 * running and about how long the rest will take, from the time per unit of cost so far. Rewritten
 * in place on a terminal (cleared before each table row), a plain line each otherwise. */
void tlm_report_progress_total(tlm_report *r, int items, double total_cost);
void tlm_report_progress(tlm_report *r, const char *label, double cost);

/* Ends the report: writes the summary (and JSON), and with commit the output file is renamed into
 * place; without commit (the command failed before its report meant anything) the file is not
 * written. Frees r. Returns the file writer's error (IO, naming the file). NULL: no-op. */
tlm_status tlm_report_close(tlm_report *r, bool commit);

#ifdef __cplusplus
}
#endif
#endif
