/* plot.h — `tlm plot`: pictures of tlm's JSON results, drawn by gnuplot through a pipe (Debian's
 * gnuplot-nox; its pngcairo, else png, terminal and its svg terminal), never drawn by hand. GPU
 * machines write the JSON; the pictures are drawn anywhere gnuplot is.
 *
 * One registry of plot kinds (src/plot/plot.c: TLM_PLOT_KINDS): a kind is one file of src/plot/
 * that defines a tlm_plot_kind, and one name in that list. Its build function reads the parsed JSON
 * inputs and describes the picture: data blocks (named tables of numbers, gnuplot's `$name << EOD`)
 * and gnuplot commands that draw them (the terminal and output are the framework's). The framework
 * runs gnuplot once per format on the same description and writes PNG and SVG through the one file
 * writer (output.h), committed together: both or neither.
 *
 *   static tlm_status build(tlm_plot *p, const struct cJSON *const *docs, const char *const *paths, int n) {
 *       tlm_plot_data_begin(p, "loss");
 *       for (...) tlm_plot_row(p, 2, (double[]){step, loss});
 *       tlm_plot_data_end(p);
 *       tlm_plot_cmd(p, "plot $loss using 1:2 with lines title %s", tlm_plot_str(p, "tlm"));
 *       return TLM_OK;
 *   }
 *   const tlm_plot_kind tlm_plot_loss_curve = {"loss-curve", "training loss against step",
 *                                              "tlm train --out FILE.json", 1, 8, build};
 */
#ifndef TLM_PLOT_H
#define TLM_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
typedef struct tlm_plot tlm_plot; /* one picture being described */

typedef struct {
    const char *name;    /* as `tlm plot NAME` takes it: "memory-timeline" */
    const char *summary; /* one line for --help: what it draws */
    const char *reads;   /* which JSON it reads: "tlm memory --timeline FILE.json" */
    int min_inputs, max_inputs;
    /* Describes the picture from the inputs (docs[i] parsed from paths[i]). Errors: FORMAT naming the
     * file and the field that is missing or malformed. */
    tlm_status (*build)(tlm_plot *p, const struct cJSON *const *docs, const char *const *paths, int n);
} tlm_plot_kind;

/* The registry. */
int tlm_plot_num_kinds(void);
const tlm_plot_kind *tlm_plot_kind_at(int i);
const tlm_plot_kind *tlm_plot_find(const char *name); /* NULL when unknown */

/* ---- for the kinds: the description ---------------------------------------------------------------- */

/* A data block $name: rows of numbers (NaN is written as NaN, a gap for gnuplot), ended by
 * tlm_plot_data_end. A blank row (tlm_plot_row with n = 0) separates data sets. */
void tlm_plot_data_begin(tlm_plot *p, const char *name);
void tlm_plot_row(tlm_plot *p, int n, const double *v);
void tlm_plot_data_end(tlm_plot *p);

/* One gnuplot command line (printf format). */
void tlm_plot_cmd(tlm_plot *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* s as a gnuplot string literal ('...' with quotes doubled, control characters dropped); the text
 * lives as long as the plot. */
const char *tlm_plot_str(tlm_plot *p, const char *s);

/* A field of JSON object o (struct cJSON): the string, or dflt when missing or not a string; the number,
 * or dflt when missing or not a number (null included); whether it is true. */
const char *tlm_plot_json_str(const struct cJSON *o, const char *key, const char *dflt);
double tlm_plot_json_num(const struct cJSON *o, const char *key, double dflt);
bool tlm_plot_json_true(const struct cJSON *o, const char *key);
/* The integer field o[key] into *out: dflt when missing or not a number; FORMAT naming `file`, the key
 * and the value when it is a number that is not a whole number in [lo, hi] (2.5, 1e300: a cast of
 * those to int is undefined). */
tlm_status tlm_plot_json_int(const struct cJSON *o, const char *key, int dflt, int lo, int hi, const char *file,
                             int *out);

/* Appends printf(fmt, ...) to the command being built in buf (cap bytes, *used so far: a "plot a, b,
 * ..." line); false, *used unchanged, when it does not fit. */
bool tlm_plot_append(char *buf, size_t cap, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The picture's size in pixels (PNG; the SVG gets the same), default 1200 x 700. */
void tlm_plot_size(tlm_plot *p, int width, int height);

/* ---- for the command -------------------------------------------------------------------------------- */

typedef struct {
    const char *out;     /* OUT: writes OUT.png and OUT.svg (an extension .png or .svg is dropped) */
    bool png, svg;       /* which to write (both by default in `tlm plot`) */
    int width, height;   /* 0: the kind's size */
} tlm_plot_options;

/* Where gnuplot is: $TLM_GNUPLOT, else `gnuplot` on PATH. UNSUPPORTED when it is not there, the
 * message naming the Debian package (gnuplot-nox) to install. */
tlm_status tlm_plot_find_gnuplot(char *path, size_t n);

/* Reads the inputs (JSON files, declared inputs of the command: output.h), builds the picture with
 * kind k and draws it. Errors: UNSUPPORTED (no gnuplot), IO (a file that cannot be read or written),
 * FORMAT (not JSON, or not what the kind reads), BACKEND (gnuplot failed: its message). Nothing is
 * written unless every picture is. */
tlm_status tlm_plot_render(const tlm_plot_kind *k, const char *const *inputs, int n, const tlm_plot_options *o);

/* Reads the inputs and builds kind k's description without drawing it (no gnuplot needed): the data
 * blocks and commands as one text (*script, malloc'ed; NULL on failure). For tests and the fuzz
 * harness of the readers (tests/fuzz/fuzz_plot.c). Errors: INVALID_ARGUMENT (the number of inputs),
 * IO, FORMAT, OUT_OF_MEMORY, as tlm_plot_render. */
tlm_status tlm_plot_describe(const tlm_plot_kind *k, const char *const *inputs, int n, char **script);

#ifdef __cplusplus
}
#endif
#endif
