/* test_report.c — the report writer's views (report.h): the default table shows the brief header
 * (at most 4 `#` lines) and the primary columns, --wide the secondary ones too, --verbose every
 * header field; a byte count shows in the unit that shows it; a percentage of a ceiling above 100
 * is marked "!"; a list wraps at TLM_REPORT_WIDTH; CSV holds a field row and data rows only, one
 * table per file (FILE, FILE.<table>.csv), the provenance in FILE.meta.json; nothing is written when
 * the report is not committed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_check.h"
#include "test_files.h"
#include "tlm/report.h"

static char dir[64];

static const char *at(const char *name) { return test_path_in(dir, name); }

/* the file's text ("" when absent; a static buffer) */
static const char *slurp(const char *path) {
    static char buf[1 << 16];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return buf;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const tlm_column cols[] = {
    {"name", TLM_FIELD_STR, "name", "", -6, 0, 0, TLM_COL_KEY},
    {"std_ms", TLM_FIELD_NUM, "std", "ms", 7, 2, 0, TLM_COL_WIDE},
    TLM_COL_SIZE("peak_bytes", "peak", 9),
    {"pct_of_roofline", TLM_FIELD_NUM, "roofl.", "%", 7, 1, 0, TLM_COL_OVER100},
};
static const tlm_column more_cols[] = {{"k", TLM_FIELD_INT, "k", "", 3, 0, 0, TLM_COL_KEY}};

/* a report of two tables, a list and a summary in fmt to `file`, with the view given */
static tlm_status write_report(const char *file, tlm_format fmt, bool wide, bool verbose, bool commit) {
    char *argv[] = {"test", "--flag", NULL};
    tlm_report *r;
    tlm_status s = tlm_report_open(&r, "tlm test", fmt, file, 2, argv);
    if (s != TLM_OK) return s;
    tlm_report_view(r, wide, verbose);
    tlm_report_meta_str(r, "device", "a test device");
    tlm_report_meta_int(r, "threads", 3);
    tlm_report_meta_str(r, "timing", "how the times were taken");
    tlm_report_table(r, "rows", cols, 4);
    const double pct[] = {42.0, 163.14};
    const int64_t bytes[] = {1536, 3 << 20};
    for (int i = 0; i < 2; i++) {
        tlm_report_row_begin(r);
        tlm_report_str(r, "name", i ? "b" : "a");
        tlm_report_num(r, "std_ms", 0.5);
        tlm_report_int(r, "peak_bytes", bytes[i]);
        tlm_report_num(r, "pct_of_roofline", pct[i]);
        tlm_report_row_end(r);
    }
    char long_text[400];
    memset(long_text, 'x', sizeof long_text);
    for (int i = 9; i < (int)sizeof long_text; i += 10) long_text[i] = ' ';
    long_text[sizeof long_text - 1] = '\0';
    tlm_report_list(r, "findings", long_text);
    tlm_report_table(r, "more", more_cols, 1);
    tlm_report_row_begin(r);
    tlm_report_int(r, "k", 7);
    tlm_report_row_end(r);
    tlm_report_summary_str(r, "result", "OK");
    return tlm_report_close(r, commit);
}

static int count_lines(const char *text, const char *prefix, size_t *widest) {
    int n = 0;
    *widest = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > *widest) *widest = len;
        n += strncmp(p, prefix, strlen(prefix)) == 0;
        p += len + (e != NULL);
    }
    return n;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tlm_report.XXXXXX");
    TLM_ASSERT(mkdtemp(dir));

    /* the default table: brief header, primary columns, sizes in units, "!" above 100, wrapped list */
    check(write_report(at("t.txt"), TLM_FORMAT_TABLE, false, false, true) == TLM_OK, "table written");
    const char *t = slurp(at("t.txt"));
    size_t widest;
    int hashes_before = 0; /* the # lines before the heading ("name ...") */
    for (const char *p = t; *p == '#'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "") hashes_before++;
    check(strncmp(strstr(t, "\nname") ? strstr(t, "\nname") + 1 : "", "name", 4) == 0, "table: the heading follows");
    check(hashes_before <= 4, "table: %d # lines above the table (at most 4)", hashes_before);
    check(strstr(t, "# device: a test device; threads: 3") != NULL, "table: the device line");
    check(strstr(t, "timing") == NULL, "table: a note only with --verbose");
    check(strstr(t, " std") == NULL, "table: a secondary column left out");
    check(strstr(t, "1.50 KiB") && strstr(t, "3.00 MiB"), "table: sizes in KiB and MiB");
    check(strstr(t, "163.1!") && !strstr(t, "42.0!"), "table: 163.1%% marked, 42.0%% not");
    count_lines(t, "", &widest);
    check(widest <= TLM_REPORT_WIDTH, "table: the widest line %zu <= %d (the list wrapped)", widest, TLM_REPORT_WIDTH);
    check(strstr(t, "# result: OK") != NULL, "table: the summary");

    /* --wide and --verbose */
    check(write_report(at("w.txt"), TLM_FORMAT_TABLE, true, true, true) == TLM_OK, "wide verbose table written");
    t = slurp(at("w.txt"));
    check(strstr(t, " std") != NULL, "--wide: the secondary column shown");
    check(strstr(t, "# timing: how the times were taken") != NULL, "--verbose: the note shown");

    /* CSV: plain files, one per table, the provenance beside them */
    check(write_report(at("r.csv"), TLM_FORMAT_CSV, false, false, true) == TLM_OK, "csv written");
    t = slurp(at("r.csv"));
    check(strncmp(t, "name,std_ms,peak_bytes,pct_of_roofline,status,error\n", 52) == 0, "csv: the field row first");
    check(strchr(t, '#') == NULL && count_lines(t, "", &widest) == 3, "csv: no # line, 2 data rows");
    check(strstr(t, "a,0.5,1536,42,ok,") != NULL, "csv: every column, bytes as integers");
    check(strcmp(slurp(at("r.csv.more.csv")), "k,status,error\n7,ok,\n") == 0, "csv: the second table in r.csv.more.csv");
    t = slurp(at("r.csv.meta.json"));
    check(strstr(t, "\"timing\":\t\"how the times were taken\"") && strstr(t, "\"findings\":") &&
              strstr(t, "\"result\":\t\"OK\"") && strstr(t, "\"tables\":"),
          "csv: the sidecar holds the notes, the list, the summary and the tables");

    /* not committed: nothing written */
    check(write_report(at("n.csv"), TLM_FORMAT_CSV, false, false, false) == TLM_OK, "csv not committed");
    check(access(at("n.csv"), F_OK) != 0 && access(at("n.csv.more.csv"), F_OK) != 0 &&
              access(at("n.csv.meta.json"), F_OK) != 0 && test_temporaries_in(dir) == 0,
          "not committed: no file, no temporary");

    char bytes[16];
    tlm_report_bytes_text(0, bytes, sizeof bytes);
    check(strcmp(bytes, "0 B") == 0, "bytes: 0 -> '%s'", bytes);
    tlm_report_bytes_text(1.21 * (1 << 30), bytes, sizeof bytes);
    check(strcmp(bytes, "1.21 GiB") == 0, "bytes: 1.21 GiB -> '%s'", bytes);
    tlm_report_bytes_text(513.0 * (1 << 20), bytes, sizeof bytes);
    check(strcmp(bytes, "513 MiB") == 0, "bytes: 513 MiB -> '%s'", bytes);
    const char *names[] = {"t.txt", "w.txt", "r.csv", "r.csv.more.csv", "r.csv.meta.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(at(names[i]));
    rmdir(dir);
    return test_finish();
}
