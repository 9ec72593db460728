/* reduce.c — the mean of a float32 vector on the CPU (the mean loss, reduced on the backend):
 * out[0] = (sum in float64, in index order) / n. */
#include "cpu/cpu_ops.h"

void tlm_cpu_reduce_mean(tlm_backend *be, float *out, const float *x, size_t n) {
    /* out (1); x (n) */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    out[0] = (float)(sum / (double)n);
}
