/* util.c — name tables and the normwise relative error (util.h). */
#include "tlm/util.h"

#include <math.h>
#include <string.h>

int tlm_name_index(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return i;
    return -1;
}

double tlm_rel_error_f32(const float *got, const float *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}
