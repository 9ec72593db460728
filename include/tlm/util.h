/* util.h — two small helpers many places need: finding a name in a table of names (the parsers
 * of --precision, --attention, --pass, ...), and the normwise relative error that every
 * comparison of tlm against a reference reports. */
#ifndef TLM_UTIL_H
#define TLM_UTIL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The index i with names[i] equal to `name` (exact, case-sensitive), or -1; NULL entries skipped. */
int tlm_name_index(const char *const *names, int n, const char *name);

/* ||got - want||_2 / ||want||_2 over n float32 values, summed in float64; ||got - want||_2 when
 * want is all zero; NaN when either holds a NaN. */
double tlm_rel_error_f32(const float *got, const float *want, size_t n);

#ifdef __cplusplus
}
#endif
#endif
