/* allreduce_bench.h — `tlm allreduce`'s measurement of one size (docs/experiments.md), in nccl-tests'
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
#include "tlm/report.h"

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

/* ---- the command's runs (src/bench/allreduce_launch.c, allreduce_report.c) -------------------------
 * `tlm allreduce` under a launcher runs every size of the options on every rank (tlm_allreduce_run);
 * `tlm allreduce --sweep` starts itself under mpirun for each backend and process count and merges the
 * runs' JSON reports into one (tlm_allreduce_sweep). Both print their errors on stderr as
 * "tlm allreduce: ..." and return an exit status: 0 every element right, 1 a failure (a rank, a
 * run, the report) or a wrong element, 2 the ranks were given different configurations. */

#define TLM_ALLREDUCE_MAX_SIZES 64
#define TLM_ALLREDUCE_MAX_NPROC 16

typedef struct {
    uint64_t sizes[TLM_ALLREDUCE_MAX_SIZES]; /* bytes per rank, whole elements of dtype */
    int num_sizes;
    tlm_comm_kind backends[2];  /* one without the sweep */
    int num_backends;
    tlm_dtype dtype;            /* TLM_DTYPE_F32 or TLM_DTYPE_BF16 */
    tlm_reduce_op op;
    long iters, warmup;
    bool check;
    double timeout;             /* seconds: the watchdog's (comm.h) */
    tlm_mpi_algo mpi_algo;
    uint64_t shm_chunk;         /* bytes; 0: the default by size (comm.h) */
    int nprocs[TLM_ALLREDUCE_MAX_NPROC]; /* the sweep's process counts */
    int num_nprocs;
    bool given_gpu;             /* --gpu given: rank r uses GPU gpu + its local rank */
    int gpu;
} tlm_allreduce_options;

/* Opens the report (of the command's --format and --out); NULL after printing why. */
typedef tlm_report *(*tlm_allreduce_open_report)(void *user);

/* One run on every rank of the launcher's world: joins it, makes the backend (NCCL: the GPU
 * gpu + local rank, or the one GPU a rank sees; MPI: the CPU) and communicator, checks that every
 * rank has the same options, and measures each size; rank 0 opens the report and writes a row per
 * size and placement. */
int tlm_allreduce_run(const tlm_allreduce_options *o, tlm_allreduce_open_report open_report, void *user);

/* The sweep: for each backend x process count, `mpirun -np N [--allow-run-as-root] [--oversubscribe
 * --bind-to none for mpi] $TLM_MPIRUN_FLAGS <this program> allreduce <the options> --format json --out
 * <a temporary file>` (mpirun found in PATH; its stdout dropped); NCCL counts above the visible GPUs
 * and NCCL without an NCCL build are skipped rows; then one report of every run's rows, a row per run
 * skipped or failed, and each run's command, ranks, devices and links. */
int tlm_allreduce_sweep(const tlm_allreduce_options *o, tlm_allreduce_open_report open_report, void *user);

/* The report's parts (allreduce_report.c): the rows' columns (backend, nranks, bytes, count, dtype, op,
 * algorithm, in_place, time_us_mean/min/max, algbw_gb_per_s, busbw_gb_per_s, wrong) and the header's
 * notes on the options; the tally of the rows and the summary (mean busbw of the rows that ran, wrong
 * elements, the result line). */
typedef struct {
    double busbw_sum;
    int ok_rows, failed_rows, skipped_rows;
    int64_t wrong;
} tlm_allreduce_tally;

void tlm_allreduce_report_begin(tlm_report *rep, const tlm_allreduce_options *o);
void tlm_allreduce_report_row(tlm_report *rep, const char *backend, const char *algo, int nranks, uint64_t bytes,
                              const tlm_allreduce_options *o, bool in_place, const tlm_allreduce_result *r,
                              tlm_allreduce_tally *t);
void tlm_allreduce_report_summary(tlm_report *rep, const tlm_allreduce_tally *t);

#ifdef __cplusplus
}
#endif
#endif
