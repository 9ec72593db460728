/* allreduce_bench.h — `tlm allreduce`'s measurement of one size (SPEC.md §2.9), in nccl-tests'
 * conventions (NVIDIA nccl-tests, doc/PERFORMANCE.md):
 *   time   the mean time of one all-reduce on a rank: `iters` back-to-back all-reduces, after
 *          `warmup` untimed ones and a barrier, timed between two events on the communicator's
 *          stream (CUDA events with NCCL, the host clock with MPI), divided by iters; in
 *          microseconds. The reported time is the mean of the ranks' times (nccl-tests' default,
 *          -a 1); their min and max show the spread. Out-of-place (send != recv) and in-place
 *          (send == recv) are timed separately.
 *   algbw  bytes / time, GB/s (10^9 bytes per second); bytes = count * element size, per rank.
 *   busbw  algbw * 2(n-1)/n for n ranks: the bandwidth each link carries in a ring all-reduce
 *          (a reduce-scatter and an all-gather, each moving (n-1)/n of the data), comparable across
 *          rank counts and with the hardware's peak. 0 for one rank.
 *   wrong  with check: every rank fills its send buffer with tlm_allreduce_pattern(rank, i), one
 *          all-reduce runs, and every element of every rank's result is compared with the expected
 *          one (sum: exactly; avg: within n ulps of the dtype, for NCCL's premultiplied average);
 *          the count of mismatches over all ranks, out-of-place and in-place each; -1 unchecked. */
#ifndef TLM_ALLREDUCE_BENCH_H
#define TLM_ALLREDUCE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/comm.h"
#include "tlm/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2(n-1)/n: busbw = algbw * factor for an all-reduce of n ranks (nccl-tests, PERFORMANCE.md). */
double tlm_allreduce_busbw_factor(int nranks);
/* bytes / time in GB/s (10^9 bytes/s); time in microseconds (> 0; else 0). */
double tlm_allreduce_algbw(size_t bytes, double time_us);

/* The check's value of element i on `rank`: a small whole number ((7i + 13 rank) mod m) + 1, with
 * m = 17 for float32 and m = max(2, min(17, 256 / nranks)) for bf16, so that every sum over the
 * ranks is exact in the dtype whatever the order of the additions. */
float tlm_allreduce_pattern(int rank, size_t i, tlm_dtype dt, int nranks);
/* The expected result of element i: the sum over ranks of the pattern (avg: divided by nranks and
 * rounded to the dtype). */
float tlm_allreduce_expected(size_t i, tlm_dtype dt, tlm_reduce_op op, int nranks);

typedef struct {
    size_t bytes;       /* per rank; a multiple of the dtype's size */
    tlm_dtype dtype;    /* TLM_DTYPE_F32 or TLM_DTYPE_BF16 */
    tlm_reduce_op op;
    int warmup;         /* >= 0 untimed all-reduces (out-of-place) before the timed ones */
    int iters;          /* >= 1 timed all-reduces of each placement */
    bool check;
} tlm_allreduce_case;

typedef struct {
    double time_us_mean, time_us_min, time_us_max; /* over the ranks of each one's mean time */
    double algbw_gb_per_s, busbw_gb_per_s;         /* from time_us_mean */
    int64_t wrong;                                 /* over all ranks; -1: not checked */
} tlm_allreduce_timing;

typedef struct {
    tlm_status status;  /* TLM_OK, TLM_ERR_OUT_OF_MEMORY (on some rank: error says which), ... */
    char error[256];
    size_t count;       /* elements per rank */
    tlm_allreduce_timing out_of_place, in_place;
} tlm_allreduce_result;

/* Measures one case on communicator c (buffers allocated on c->be, tracked, freed before return).
 * Collective: every rank calls it with the same case (check that once with tlm_comm_check_same).
 * A failure every rank agrees on (one rank out of memory: every rank's result says so) comes back
 * in r->status and r->error with TLM_OK returned; other errors (a communication failure, a case
 * that is invalid: bytes not a multiple of the element size, iters < 1) are returned. */
tlm_status tlm_allreduce_bench_run(tlm_comm *c, const tlm_allreduce_case *k, tlm_allreduce_result *r);

#ifdef __cplusplus
}
#endif
#endif
