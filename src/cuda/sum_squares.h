/* sum_squares.h — the sum of squares on a stream of the caller's (sum_squares.cu), for work beside the
 * compute stream: the gradient norm during the backward pass (src/train/clip.c). C and C++. */
#ifndef TLM_CUDA_SUM_SQUARES_H
#define TLM_CUDA_SUM_SQUARES_H

#include <stddef.h>
#include "tlm/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bytes of the per-chunk partial sums that tlm_cuda_sum_squares_on needs for n floats */
size_t tlm_cuda_sum_squares_partial_bytes(size_t n);

/* out[0] = sum of x[i]^2 (n floats), float64, the same bits on every run (a function of n and x's
 * alignment; the additions are ordered otherwise than the sum_squares op's): blocks of one 32 KiB chunk
 * each, short enough to fill the gaps a background stream gets (backend.h,
 * tlm_stream_create_background); issued on stream s (NULL: the compute stream) with `partial`
 * (tlm_cuda_sum_squares_partial_bytes(n) of backend memory that no concurrent work uses). Not seen by
 * op hooks (it runs beside the step's ops). */
void tlm_cuda_sum_squares_on(tlm_backend *be, tlm_stream *s, double *out, const float *x, size_t n, double *partial);

#ifdef __cplusplus
}
#endif
#endif
