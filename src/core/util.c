/* util.c — name tables, the normwise relative error, the PATH search and checked number conversion (util.h). */
#include "tlm/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool tlm_find_program(const char *name, char *path, size_t n) {
    const char *env = getenv("PATH");
    char *dirs = strdup(env && *env ? env : "/usr/local/bin:/usr/bin:/bin");
    if (!dirs) return false;
    bool found = false;
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        const int len = snprintf(path, n, "%s/%s", d, name);
        struct stat st;
        found = len > 0 && (size_t)len < n && stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
    }
    free(dirs);
    return found;
}

bool tlm_double_to_int64(double v, int64_t lo, int64_t hi, int64_t *out) {
    /* compared as doubles first (NaN fails every comparison); 2^63 is the first double above INT64_MAX */
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0) || v != floor(v)) return false;
    const int64_t i = (int64_t)v;
    if (i < lo || i > hi) return false;
    *out = i;
    return true;
}
