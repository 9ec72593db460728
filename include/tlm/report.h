/* report.h — the one report writer of every subcommand. A report is a header (what ran, where,
 * when, and how to read the numbers), one or more tables of rows, optional lists of sentences
 * (findings) and a summary; it is written from one description as
 *   table  a brief header of at most 4 `#` lines (tool, version and date; command; device and
 *          threads; knobs when any is set), with --verbose every header field as a `#` line; per
 *          table an optional "## title", a fixed-width heading, a units row and the rows (a row
 *          that did not run — OOM, failed, unsupported, skipped — prints its key columns, then "OOM:
 *          <the error>"; any other status, e.g. OVER, follows the full row); lists as "- text"
 *          lines and titles wrapped at TLM_REPORT_WIDTH; then `#` summary lines. By default a table
 *          shows its primary columns (it fits TLM_REPORT_WIDTH characters); --wide adds the
 *          secondary ones (TLM_COL_WIDE).
 *   csv    nothing but a row of field names and the data rows (every column, primary or not; the
 *          error text in the `error` field), so that pandas.read_csv(path) and Python's csv module
 *          read it with no options. One table per file: with --out FILE, FILE holds the report's
 *          first table and FILE.<table>.csv each other one (profile: FILE.ops.csv, FILE.layers.csv,
 *          ...); the provenance — every header field, the table titles, the lists, the summary and
 *          each table's file and columns (key, heading, unit, primary) — goes to the JSON sidecar
 *          FILE.meta.json. All of them are committed together (output.h: all or nothing). CSV on
 *          stdout (no --out): the first table only; the brief header goes to stderr as `#` lines,
 *          and the rest of the provenance and any later table are dropped (a line on stderr names
 *          the tables dropped: --out FILE or --format json has them).
 *   json   one object, built with cJSON: the header's fields, one array per table (every column),
 *          each list as an array of strings, and "summary".
 * The table goes to stdout as rows arrive; with --out FILE the file gets the chosen format through
 * the one file writer (output.h: all or nothing, committed by tlm_report_close).
 *
 * One schema for every subcommand: a quantity has one field name wherever it appears, with its
 * unit in the name (fwd_ms_mean, peak_bytes, tokens_per_s, tflop_per_s, busbw_gb_per_s), booleans
 * are JSON true/false (CSV true/false), byte counts are integers (bytes; a table shows each in the
 * unit that shows it: B, KiB, MiB or GiB = 2^10, 2^20, 2^30 bytes, three significant digits, e.g.
 * "513 MiB", "1.21 GiB"), a ratio is named for what it holds (speedup_vs_naive = naive time /
 * this row's time). Shared fields: status ("ok", "OOM", "failed", "unsupported", "skipped") and
 * error (the message when status is not ok). The header of every report holds tool, version, date
 * (UTC), device, threads and command (the command line that produced it), and knobs: the TLM_*
 * environment variables not at their default (tuning.h), when any is set.
 *
 *   tlm_report *r;
 *   TLM_TRY(tlm_report_open(&r, "tlm bench", fmt, out_path, argc, argv));
 *   tlm_report_view(r, wide, verbose);
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
#include "tlm/output.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_FORMAT_TABLE = 0, TLM_FORMAT_CSV, TLM_FORMAT_JSON } tlm_format;

/* "table", "csv", "json"; parse: false for anything else. */
const char *tlm_format_name(tlm_format f);
bool tlm_format_parse(const char *name, tlm_format *out);

typedef enum { TLM_FIELD_STR = 0, TLM_FIELD_INT, TLM_FIELD_NUM, TLM_FIELD_BOOL } tlm_field_type;

/* The widest line a default table writes (characters): its primary columns, lists and titles. */
#define TLM_REPORT_WIDTH 160

/* Column flags. KEY: identifies the row (printed also when the row failed, before the error).
 * NO_TABLE: not in the fixed-width table (still in CSV and JSON). SCI: the table prints the number in
 * scientific notation (%.{prec}e). WIDE: a secondary column: in the table only with --wide (always in
 * CSV and JSON); a column without it is primary. BYTES: an integer byte count the table shows with
 * its own unit per cell (B, KiB, MiB, GiB; three significant digits). OVER100: a percentage of a
 * measured ceiling; the table marks a value above 100 with "!" ("163.1!"). */
enum { TLM_COL_KEY = 1u << 0, TLM_COL_NO_TABLE = 1u << 1, TLM_COL_SCI = 1u << 2, TLM_COL_WIDE = 1u << 3,
       TLM_COL_BYTES = 1u << 4, TLM_COL_OVER100 = 1u << 5 };

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
 * shows in the unit that shows it ("812 B", "12.3 KiB", "513 MiB", "1.21 GiB": width 8 holds any);
 * the _W forms are secondary columns (TLM_COL_WIDE). */
#define TLM_COL_MS(key, head, width, prec) {key, TLM_FIELD_NUM, head, "ms", width, prec, 0, 0}
#define TLM_COL_US(key, head, width, prec) {key, TLM_FIELD_NUM, head, "us", width, prec, 0, 0}
#define TLM_COL_SIZE(key, head, width) {key, TLM_FIELD_INT, head, "", width, 0, 0, TLM_COL_BYTES}
#define TLM_COL_MS_W(key, head, width, prec) {key, TLM_FIELD_NUM, head, "ms", width, prec, 0, TLM_COL_WIDE}
#define TLM_COL_SIZE_W(key, head, width) {key, TLM_FIELD_INT, head, "", width, 0, 0, TLM_COL_BYTES | TLM_COL_WIDE}

typedef struct tlm_report tlm_report;

/* A byte count as the table shows it, in the unit that shows it: "812 B", "12.3 KiB", "513 MiB",
 * "1.21 GiB" (2^10, 2^20, 2^30 bytes; three significant digits), into buf (n bytes; 16 hold any). */
void tlm_report_bytes_text(double bytes, char *buf, size_t n);

/* Starts a report of `tool` ("tlm bench") in format fmt; out_path NULL writes fmt to stdout,
 * otherwise the file gets fmt and stdout the table. argv (argc words) is recorded as the command.
 * Fills tool, version, date and command. Errors: the file writer's (output.h) for out_path, named. */
tlm_status tlm_report_open(tlm_report **out, const char *tool, tlm_format fmt, const char *out_path, int argc,
                           char **argv);

/* Declares the files a report to out_path in fmt will write (NULL: none): out_path, and for CSV its
 * sidecar out_path.meta.json and its later tables' out_path.<table>.csv, all under `flag` ("--out"). */
void tlm_report_plan(tlm_io_plan *plan, const char *flag, tlm_format fmt, const char *out_path);

/* How the table shows: wide, every column (the secondary ones too); verbose, every header field
 * (else the brief header: tool, version, date, command, device, threads, knobs). CSV and JSON carry
 * everything either way. Call before the first table or list. Default: neither. */
void tlm_report_view(tlm_report *r, bool wide, bool verbose);

/* A header field: the verbose table prints "# key: value" (numbers as %.10g), the CSV's sidecar and
 * JSON a top-level field. Call before the first table. A key given twice keeps the last value. */
void tlm_report_meta_str(tlm_report *r, const char *key, const char *value);
void tlm_report_meta_num(tlm_report *r, const char *key, double value);
void tlm_report_meta_int(tlm_report *r, const char *key, int64_t value);
void tlm_report_meta_bool(tlm_report *r, const char *key, bool value);

/* Starts the table `name` ("rows" for a command's main table; JSON: the array of that name) with
 * these columns; the columns array must outlive the report. Every report has the fields status and
 * error after the given columns. */
void tlm_report_table(tlm_report *r, const char *name, const tlm_column *cols, int ncols);
/* A title for the current table: the table prints it as "## title" above the heading; JSON (and the
 * CSV's sidecar) keeps it in "titles": {name: title}. Call before its first row. */
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

/* A sentence of the list `name` ("findings"): the table prints it after the current table as "- text"
 * under a "name:" line (wrapped at TLM_REPORT_WIDTH), JSON (and the CSV's sidecar) appends it to the
 * array `name`. */
void tlm_report_list(tlm_report *r, const char *name, const char *text);

/* A summary field after the rows: "# key: value" in the table, JSON (and the CSV's sidecar) "summary":
 * {key: value}. */
void tlm_report_summary_str(tlm_report *r, const char *key, const char *value);
void tlm_report_summary_int(tlm_report *r, const char *key, int64_t value);
void tlm_report_summary_num(tlm_report *r, const char *key, double value); /* 7 significant digits */

/* Progress on stderr for a sweep of items of known relative cost (any unit, e.g. FLOPs per step x
 * steps): start an item with its label and cost, and the line says which item of how many is
 * running and about how long the rest will take, from the finished items' measured times (each
 * fitted as a fixed time per item plus a time per unit of cost). Rewritten in place on a terminal
 * (cleared before each table row), a plain line each otherwise. */
void tlm_report_progress_total(tlm_report *r, int items, double total_cost);
void tlm_report_progress(tlm_report *r, const char *label, double cost);

/* Ends the report: writes the summary (and JSON, or the CSV's sidecar), and with commit the output
 * files are renamed into place together (in the caller's batch when one is open, output.h); without
 * commit (the command failed before its report meant anything) none is written. Frees r. Returns the
 * file writer's error (IO, naming the file). NULL: no-op. */
tlm_status tlm_report_close(tlm_report *r, bool commit);

#ifdef __cplusplus
}
#endif
#endif
