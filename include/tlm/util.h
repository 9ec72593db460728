/* util.h — small helpers many places need: finding a name in a table of names (the parsers
 * of --precision, --attention, --pass, ...), the normwise relative error that every
 * comparison of tlm against a reference reports, and finding a program in PATH (gnuplot, mpirun,
 * the program `tlm profile --exec` runs). */
#ifndef TLM_UTIL_H
#define TLM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The index i with names[i] equal to `name` (exact, case-sensitive), or -1; NULL entries skipped. */
int tlm_name_index(const char *const *names, int n, const char *name);

/* ||got - want||_2 / ||want||_2 over n float32 values, summed in float64; ||got - want||_2 when
 * want is all zero; NaN when either holds a NaN. */
double tlm_rel_error_f32(const float *got, const float *want, size_t n);

/* The first DIR/name in PATH's directories (in order; empty entries skipped; PATH unset or empty:
 * /usr/local/bin:/usr/bin:/bin) that is a regular file this process may execute, into path (n
 * bytes, NUL-terminated). false when there is none (or out of host memory); path is then
 * unspecified. `name` is a file name, without '/'. */
bool tlm_find_program(const char *name, char *path, size_t n);

/* The conversion of a number read from JSON or text to an integer: true, *out = v, when v is a whole
 * number in [lo, hi]; false (*out untouched) for NaN, an infinity, a fraction or a value outside
 * [lo, hi] (a plain cast of those is undefined behaviour). */
bool tlm_double_to_int64(double v, int64_t lo, int64_t hi, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
