/* tuning.h — THE registry of tlm's environment variables (knobs): each one's name, kind, default
 * and one-line doc, parsed once from the environment and validated (a bad value is refused by
 * name). No other file reads a TLM_* variable; every report names the knobs not at their default
 * (tlm_tuning_describe). docs/tuning.md is generated from this list (`tlm knobs --markdown`).
 *
 * Kinds: USER    a documented choice a person makes (where gnuplot is, what the selector logs);
 *        TEST    makes a test reach a path the default never takes on its machine (every tile line,
 *                the Hopper kernels on every grid, the threaded shm path on 2 cores);
 *        DEV     a developer's measurement of a variant (the GEMMs' timed algorithm choice);
 *        INTERNAL  set by tlm itself for a program it starts (never by a person).
 *
 * The list is tlm/knobs.def (an X-macro file, as tlm/ops.def). */
#ifndef TLM_TUNING_H
#define TLM_TUNING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
#define TLM_KNOB(id, kind, type, dflt, lo, hi, doc) TLM_KNOB_##id,
#include "tlm/knobs.def"
#undef TLM_KNOB
        TLM_KNOB_COUNT
} tlm_knob;

typedef enum { TLM_KNOB_USER, TLM_KNOB_TEST, TLM_KNOB_DEV, TLM_KNOB_INTERNAL } tlm_knob_kind;

/* Reads and validates every knob from the environment (again, if called again). Errors:
 * INVALID_ARGUMENT naming the first bad one ("TLM_GEMM_TUNE=7: not a whole number from 0 to 2").
 * The getters call it on first use and end the process (tlm_fatal) on a bad value; the tlm command
 * calls it first, so a bad value is refused before any work. */
tlm_status tlm_tuning_init(void);

/* A knob's value: INT knobs as a number (the default when unset or empty), STR knobs as text
 * ("" when unset). Asking an INT knob for text or a STR knob for a number is a programmer error. */
int tlm_knob_int(tlm_knob k);
const char *tlm_knob_str(tlm_knob k);

/* Sets a knob for this process (tests that change it between cases; the environment is updated too,
 * so a program tlm starts inherits it); value NULL restores the default. Errors: INVALID_ARGUMENT
 * as tlm_tuning_init's. */
tlm_status tlm_knob_set(tlm_knob k, const char *value);

/* "TLM_X" of a knob; its kind's name ("user", "test", "dev", "internal"); true when set to other
 * than its default. */
const char *tlm_knob_name(tlm_knob k);
const char *tlm_knob_kind_name(tlm_knob k);
bool tlm_knob_changed(tlm_knob k);

/* The knobs not at their default, as "TLM_X=v TLM_Y=w" into buf (NUL-terminated; cut at n - 1);
 * "" when all are at their default. Returns the number of such knobs. For every report's header. */
int tlm_tuning_describe(char *buf, size_t n);

/* Prints "# knobs: TLM_X=v ..." (one line, with `prefix` before it, e.g. "# ") when any knob is not
 * at its default; nothing otherwise. */
void tlm_tuning_print_header(FILE *f, const char *prefix);

/* The registry as a Markdown table (docs/tuning.md) or as plain lines with the current values. */
void tlm_tuning_print_doc(FILE *f, bool markdown);

#ifdef __cplusplus
}
#endif
#endif
