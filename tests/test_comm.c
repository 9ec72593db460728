/* test_comm.c — the communication layer (comm.h) and the all-reduce benchmark's core
 * (allreduce_bench.h), on every rank of whatever world the launcher made: ctest runs it alone (a
 * world of one), under `mpirun -np 2` and `-np 3` (oversubscribed) with the MPI communicator on the
 * CPU backend, and its GPU twin test_gpu_comm with the NCCL communicator, one rank per GPU
 * (tests/CMakeLists.txt; without a GPU it exits 77, skipped).
 *
 * Checks, element by element on every rank, float32 and bf16, counts 1, 7, 1000 and 65537:
 *   all-reduce sum and avg, out-of-place and in place; reduce-scatter sum and avg, out-of-place and
 *   in place (rank r's block of the sum); all-gather, out-of-place and in place; broadcast from the
 *   last rank, out-of-place and in place; a barrier; the model's seam (all_reduce_sum_f32);
 *   bad arguments (fp16, partly overlapping buffers, a root that is not a rank, a count past MPI's
 *   int) refused with their message; ranks that disagree on a configuration refused on every rank,
 *   naming the rank; the busbw formula (2(n-1)/n) and algbw's units; the benchmark of one size with
 *   --check: no wrong element, the times and bandwidths consistent over the ranks.
 * The MPI communicator's shm all-reduce (comm.h, "whose schedule"), at 2 and 3 ranks: auto's choice
 *   by size; the checks above through shm with the default chunk and a 4 KiB one (many chunks, odd
 *   tails), counts 1..300001; the bits of random float32 and bf16 values (an inf, a NaN) equal to
 *   the float32 sum in rank order rounded once, on every rank; ranks that disagree on the algorithm
 *   refused; a world of one refused shm, naming why.
 *
 * Fault modes (tests/test_comm_fault.sh runs them under mpirun and checks the others' message, the
 * exit status and the time): `--fault exit|hang|kill` makes the last rank exit (with an error), sleep
 * forever, or kill itself before the 4th all-reduce of a loop; `--timeout S` sets the watchdog's;
 * `--algo mpi|shm` the MPI communicator's all-reduce for the loop. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/convert.h"
#include "test_check.h"
#include "tlm/allreduce_bench.h"
#include "tlm/comm.h"
#include "tlm/memory.h"

static int rank = 0, nranks = 1;

/* rank 0 prints every check; the others print only their failures */
#define RCHECK(ok, ...)                                   \
    do {                                                  \
        const bool ok_ = (ok);                            \
        if (rank == 0 || !ok_) {                          \
            if (rank) printf("rank %d: ", rank);          \
            check(ok_, __VA_ARGS__);                      \
        } else {                                          \
            passed++;                                     \
        }                                                 \
    } while (0)

static void rcheck_status(tlm_status s, tlm_status want, const char *needle, const char *what) {
    const bool ok = s == want && (!needle || strstr(tlm_last_error(), needle));
    RCHECK(ok, "%s -> %s%s%s", what, tlm_status_string(s), s != TLM_OK ? ": " : "", s != TLM_OK ? tlm_last_error() : "");
}

static tlm_backend *be;
static tlm_comm *comm;

/* ---- buffers: host values <-> backend memory of dtype dt -------------------------------------------------- */

static void *dev_alloc(size_t count, tlm_dtype dt) {
    void *p = tlm_alloc(be, count * tlm_dtype_size(dt) + 64, TLM_MEM_WORKSPACE, "test.comm");
    if (!p) die_on(TLM_ERR_OUT_OF_MEMORY, "allocating a test buffer");
    return p;
}

static void put(void *dst, const float *v, size_t count, tlm_dtype dt) {
    if (dt == TLM_DTYPE_F32) {
        tlm_copy_to_backend(be, dst, v, count * sizeof(float));
        return;
    }
    uint16_t *h = malloc(count * 2 + 2);
    tlm_f32_to_16_n(v, h, count, 1);
    tlm_copy_to_backend(be, dst, h, count * 2);
    free(h);
}

static void get(float *v, const void *src, size_t count, tlm_dtype dt) {
    die_on(tlm_comm_synchronize(comm, NULL), "synchronize");
    if (dt == TLM_DTYPE_F32) {
        tlm_copy_to_host(be, v, src, count * sizeof(float));
        return;
    }
    uint16_t *h = malloc(count * 2 + 2);
    tlm_copy_to_host(be, h, src, count * 2);
    tlm_16_to_f32_n(h, v, count, 1);
    free(h);
}

/* backend buffers of count elements: holding v, or zeros */
static void *dev_values(const float *v, size_t count, tlm_dtype dt) {
    void *p = dev_alloc(count, dt);
    put(p, v, count, dt);
    return p;
}

static void *dev_zeros(size_t count, tlm_dtype dt) {
    void *p = dev_alloc(count, dt);
    tlm_memset_zero(be, p, count * tlm_dtype_size(dt));
    return p;
}

/* the elements of got (count) that differ from want by more than tol; first mismatch in *at */
static size_t mismatches(const float *got, const float *want, size_t count, double tol, size_t *at) {
    size_t bad = 0;
    *at = 0;
    for (size_t i = 0; i < count; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            if (!bad) *at = i;
            bad++;
        }
    return bad;
}

static double avg_tolerance(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? nranks * 0.125 : nranks * 4e-6; }

static const char *dt_name(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? "bf16" : "fp32"; }

/* one check's host values, one allocation (free(h.v)): v (nv), what this rank sends, its pattern
 * (tlm_allreduce_pattern); want and got (n each) */
typedef struct {
    float *v, *want, *got;
} host_values;

static host_values host_values_new(size_t nv, size_t n, tlm_dtype dt) {
    float *p = malloc((nv + 2 * n) * sizeof(float));
    if (!p) die_on(TLM_ERR_OUT_OF_MEMORY, "allocating the host values");
    for (size_t i = 0; i < nv; i++) p[i] = tlm_allreduce_pattern(rank, i, dt, nranks);
    return (host_values){p, p + nv, p + nv + n};
}

/* fetches count elements of recv into h.got and reports them against h.want (within tol), the check
 * named by the printf-style fmt */
static void compare(host_values h, const void *recv, size_t count, tlm_dtype dt, double tol, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void compare(host_values h, const void *recv, size_t count, tlm_dtype dt, double tol, const char *fmt, ...) {
    char what[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    get(h.got, recv, count, dt);
    size_t at, bad = mismatches(h.got, h.want, count, tol, &at);
    RCHECK(bad == 0, "%-44s %s count %6zu: %zu wrong%s", what, dt_name(dt), count, bad, bad ? " (first:" : "");
    if (bad) printf("       element %zu is %g, expected %g\n", at, h.got[at], h.want[at]);
}

/* frees a check's buffers: `inner` unless in place (then it is owner or lies inside it), owner, the host values */
static void free_buffers(host_values h, void *owner, void *inner, bool in_place) {
    if (!in_place) tlm_free(be, inner);
    tlm_free(be, owner);
    free(h.v);
}

static const char *placement(bool in_place) { return in_place ? "in place" : "out-of-place"; }

/* ---- the collectives, element by element ------------------------------------------------------------------- */

static void check_all_reduce(size_t count, tlm_dtype dt, tlm_reduce_op op, bool in_place) {
    const host_values h = host_values_new(count, count, dt);
    for (size_t i = 0; i < count; i++) h.want[i] = tlm_allreduce_expected(i, dt, op, nranks);
    void *send = dev_values(h.v, count, dt), *recv = in_place ? send : dev_zeros(count, dt);
    die_on(tlm_comm_all_reduce(comm, send, recv, count, dt, op, NULL), "all_reduce");
    compare(h, recv, count, dt, op == TLM_REDUCE_AVG ? avg_tolerance(dt) : 0.0, "all_reduce %s %s",
            tlm_reduce_op_name(op), placement(in_place));
    free_buffers(h, send, recv, in_place);
}

static void check_reduce_scatter(size_t count, tlm_dtype dt, tlm_reduce_op op, bool in_place) {
    const size_t total = count * (size_t)nranks;
    const host_values h = host_values_new(total, count, dt);
    for (size_t i = 0; i < count; i++) h.want[i] = tlm_allreduce_expected((size_t)rank * count + i, dt, op, nranks);
    void *send = dev_values(h.v, total, dt);
    void *recv = in_place ? (char *)send + (size_t)rank * count * tlm_dtype_size(dt) : dev_alloc(count, dt);
    die_on(tlm_comm_reduce_scatter(comm, send, recv, count, dt, op, NULL), "reduce_scatter");
    compare(h, recv, count, dt, op == TLM_REDUCE_AVG ? avg_tolerance(dt) : 0.0, "reduce_scatter %s %s",
            tlm_reduce_op_name(op), placement(in_place));
    free_buffers(h, send, recv, in_place);
}

static void check_all_gather(size_t count, tlm_dtype dt, bool in_place) {
    const size_t total = count * (size_t)nranks;
    const host_values h = host_values_new(count, total, dt);
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < count; i++) h.want[(size_t)r * count + i] = tlm_allreduce_pattern(r, i, dt, nranks);
    void *recv = dev_zeros(total, dt);
    void *send = in_place ? (char *)recv + (size_t)rank * count * tlm_dtype_size(dt) : dev_alloc(count, dt);
    put(send, h.v, count, dt);
    die_on(tlm_comm_all_gather(comm, send, recv, count, dt, NULL), "all_gather");
    compare(h, recv, total, dt, 0.0, "all_gather %s", placement(in_place));
    free_buffers(h, recv, send, in_place);
}

static void check_broadcast(size_t count, tlm_dtype dt, bool in_place) {
    const int root = nranks - 1;
    const host_values h = host_values_new(count, count, dt);
    for (size_t i = 0; i < count; i++) h.want[i] = tlm_allreduce_pattern(root, i, dt, nranks);
    void *send = dev_values(h.v, count, dt), *recv = in_place ? send : dev_zeros(count, dt);
    die_on(tlm_comm_broadcast(comm, send, recv, count, dt, root, NULL), "broadcast");
    compare(h, recv, count, dt, 0.0, "broadcast from the last rank, %s", placement(in_place));
    free_buffers(h, send, recv, in_place);
}

static void check_collectives(void) {
    static const size_t counts[] = {1, 7, 1000, 65537};
    static const tlm_dtype dts[] = {TLM_DTYPE_F32, TLM_DTYPE_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            const size_t n = counts[k];
            const tlm_dtype dt = dts[d];
            for (int ip = 0; ip < 2; ip++) {
                check_all_reduce(n, dt, TLM_REDUCE_SUM, ip);
                check_all_reduce(n, dt, TLM_REDUCE_AVG, ip);
                check_reduce_scatter(n, dt, TLM_REDUCE_SUM, ip);
                check_reduce_scatter(n, dt, TLM_REDUCE_AVG, ip);
                check_all_gather(n, dt, ip);
                check_broadcast(n, dt, ip);
            }
        }
    rcheck_status(tlm_comm_barrier(comm), TLM_OK, NULL, "barrier");
}

/* the model's seam: three floats summed in place on the compute stream */
static void check_seam(void) {
    float v[3] = {1.0f + rank, 2.0f, -0.5f * rank}, got[3];
    float *buf = dev_alloc(3, TLM_DTYPE_F32);
    tlm_copy_to_backend(be, buf, v, sizeof v);
    die_on(comm->all_reduce_sum_f32(comm, be, buf, 3), "the model's all_reduce_sum_f32");
    get(got, buf, 3, TLM_DTYPE_F32);
    const double n = nranks;
    RCHECK(got[0] == (float)(n + n * (n - 1) / 2) && got[1] == (float)(2 * n) && got[2] == (float)(-0.25 * n * (n - 1)),
           "the model's seam all_reduce_sum_f32 sums in place: %g %g %g", got[0], got[1], got[2]);
    tlm_free(be, buf);
}

static void check_bad_arguments(void) {
    float *buf = dev_alloc(64, TLM_DTYPE_F32);
    rcheck_status(tlm_comm_all_reduce(comm, buf, buf, 16, TLM_DTYPE_F16, TLM_REDUCE_SUM, NULL),
                 TLM_ERR_INVALID_ARGUMENT, "float32 and bf16", "all_reduce in fp16 refused");
    rcheck_status(tlm_comm_all_reduce(comm, buf, buf + 1, 16, TLM_DTYPE_F32, TLM_REDUCE_SUM, NULL),
                 TLM_ERR_INVALID_ARGUMENT, "overlap", "all_reduce with partly overlapping buffers refused");
    rcheck_status(tlm_comm_broadcast(comm, buf, buf, 16, TLM_DTYPE_F32, nranks, NULL), TLM_ERR_INVALID_ARGUMENT,
                 "is not a rank", "broadcast from a root that is not a rank refused");
    if (comm->kind == TLM_COMM_MPI) /* the count is refused before any memory is touched */
        rcheck_status(tlm_comm_all_reduce(comm, buf, buf, (size_t)1 << 31, TLM_DTYPE_F32, TLM_REDUCE_SUM, NULL),
                     TLM_ERR_INVALID_ARGUMENT, "MPI counts are int", "a count past MPI's int refused");
    tlm_free(be, buf);
    rcheck_status(tlm_comm_check_same(comm, "the sizes", "sizes 1024,2048 dtype fp32"), TLM_OK, NULL,
                 "ranks that agree pass the check");
    if (nranks > 1) {
        char text[64];
        snprintf(text, sizeof text, "sizes 1024,%d dtype fp32", rank == nranks - 1 ? 4096 : 2048);
        char needle[64];
        snprintf(needle, sizeof needle, "rank %d has 'sizes 1024,4096", nranks - 1);
        rcheck_status(tlm_comm_check_same(comm, "the sizes", text), TLM_ERR_INVALID_ARGUMENT, needle,
                     "ranks that disagree are refused on every rank, naming the rank");
    }
}

static void check_formula(void) {
    RCHECK(tlm_allreduce_busbw_factor(1) == 0 && tlm_allreduce_busbw_factor(2) == 1.0 &&
               tlm_allreduce_busbw_factor(4) == 1.5 && tlm_allreduce_busbw_factor(8) == 1.75,
           "busbw factor 2(n-1)/n: n=1 0, n=2 1, n=4 1.5, n=8 1.75");
    RCHECK(fabs(tlm_allreduce_algbw(1000000000, 1e6) - 1.0) < 1e-12 &&
               fabs(tlm_allreduce_algbw(1048576, 100.0) - 10.48576) < 1e-9,
           "algbw = bytes / time in GB/s (10^9): 1e9 bytes in 1 s = 1, 1 MiB in 100 us = 10.49");
}

static void check_bench(void) {
    static const tlm_dtype dts[] = {TLM_DTYPE_F32, TLM_DTYPE_BF16};
    for (int d = 0; d < 2; d++)
        for (int op = 0; op < 2; op++) {
            tlm_allreduce_case k = {.bytes = 4 * 10007, .dtype = dts[d], .op = (tlm_reduce_op)op, .warmup = 1,
                                    .iters = 3, .check = true};
            tlm_allreduce_result r;
            die_on(tlm_allreduce_bench_run(comm, &k, &r), "allreduce bench");
            const tlm_allreduce_timing *o = &r.out_of_place, *i = &r.in_place;
            RCHECK(r.status == TLM_OK && o->wrong == 0 && i->wrong == 0,
                   "bench %s %s, %zu elements: 0 wrong out-of-place (%lld) and in place (%lld)", dt_name(k.dtype),
                   tlm_reduce_op_name(k.op), r.count, (long long)o->wrong, (long long)i->wrong);
            const bool sane = o->time_us_min > 0 && o->time_us_min <= o->time_us_mean &&
                              o->time_us_mean <= o->time_us_max && i->time_us_min > 0 &&
                              fabs(o->algbw_gb_per_s - k.bytes / (o->time_us_mean * 1e3)) < 1e-9 * o->algbw_gb_per_s &&
                              fabs(o->busbw_gb_per_s - o->algbw_gb_per_s * tlm_allreduce_busbw_factor(nranks)) <=
                                  1e-12 * o->algbw_gb_per_s;
            RCHECK(sane, "bench times min <= mean <= max (%.1f <= %.1f <= %.1f us), algbw %.3f, busbw %.3f GB/s",
                   o->time_us_min, o->time_us_mean, o->time_us_max, o->algbw_gb_per_s, o->busbw_gb_per_s);
        }
    tlm_allreduce_case bad = {.bytes = 4 * 3 + 2, .dtype = TLM_DTYPE_F32, .iters = 1};
    tlm_allreduce_result r;
    rcheck_status(tlm_allreduce_bench_run(comm, &bad, &r), TLM_ERR_INVALID_ARGUMENT, "not a whole number",
                 "bench: bytes that are not whole elements refused");
}

/* ---- the shm all-reduce ---------------------------------------------------------------------------------------- */

/* rank q's value of element i: pseudo-random in [-4, 4), an inf at 5 on rank 0, a NaN at 6 on the last */
static float random_value(int q, size_t i, tlm_dtype dt) {
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(q + 1) * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    float v = (float)((double)(x >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    if (i == 5 && q == 0) v = INFINITY;
    if (i == 6 && q == nranks - 1) v = NAN;
    return dt == TLM_DTYPE_BF16 ? tlm_bf16_to_f32(tlm_f32_to_bf16(v)) : v;
}

/* the shm schedule's bits: the float32 sum over the ranks in rank order (avg: / n), rounded once */
static void check_shm_bits(size_t count, tlm_dtype dt, tlm_reduce_op op) {
    const size_t es = tlm_dtype_size(dt);
    float *v = malloc(count * sizeof(float));
    void *want = malloc(count * es), *got = malloc(count * es);
    for (size_t i = 0; i < count; i++) {
        v[i] = random_value(rank, i, dt);
        float sum = random_value(0, i, dt);
        for (int q = 1; q < nranks; q++) sum += random_value(q, i, dt);
        if (op == TLM_REDUCE_AVG) sum /= (float)nranks;
        if (dt == TLM_DTYPE_BF16) ((uint16_t *)want)[i] = tlm_f32_to_bf16(sum);
        else ((float *)want)[i] = sum;
    }
    void *buf = dev_alloc(count, dt);
    put(buf, v, count, dt);
    die_on(tlm_comm_all_reduce(comm, buf, buf, count, dt, op, NULL), "all_reduce (shm)");
    tlm_copy_to_host(be, got, buf, count * es);
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < count; i++)
        if (memcmp((char *)got + i * es, (char *)want + i * es, es) != 0 && !bad++) at = i;
    RCHECK(bad == 0, "shm %s %s of random values, count %zu: the bits of the rank-order float32 sum rounded once "
           "(%zu differ)", dt_name(dt), tlm_reduce_op_name(op), count, bad);
    if (bad) printf("       first at element %zu\n", at);
    tlm_free(be, buf);
    free(v);
    free(want);
    free(got);
}

static void check_shm(void) {
    if (comm->kind != TLM_COMM_MPI) return;
    if (nranks == 1) {
        rcheck_status(tlm_comm_set_mpi_algo(comm, TLM_MPI_ALGO_SHM, 0), TLM_ERR_UNSUPPORTED, "one rank",
                     "shm for a world of one refused, saying why");
        return;
    }
    RCHECK(tlm_comm_shm_note(comm)[0] == '\0', "ranks on one host: a shared segment (%s)", tlm_comm_shm_note(comm));
    const size_t below = TLM_COMM_SHM_MIN_BYTES / 4 - 1, from = TLM_COMM_SHM_MIN_BYTES / 4;
    RCHECK(strcmp(tlm_comm_all_reduce_algo(comm, below, TLM_DTYPE_F32), "mpi") == 0 &&
               strcmp(tlm_comm_all_reduce_algo(comm, from, TLM_DTYPE_F32), "shm") == 0,
           "auto: mpi below %zu bytes, shm from it", TLM_COMM_SHM_MIN_BYTES);
    static const size_t counts[] = {1, 7, 1000, 65537, 300001};
    static const size_t chunks[] = {0, 4096};
    for (int c = 0; c < 2; c++) {
        die_on(tlm_comm_set_mpi_algo(comm, TLM_MPI_ALGO_SHM, chunks[c]), "the shm all-reduce");
        if (rank == 0) printf("# shm, chunk %zu bytes per rank (0: the default)\n", chunks[c]);
        RCHECK(strcmp(tlm_comm_all_reduce_algo(comm, 1, TLM_DTYPE_BF16), "shm") == 0, "shm chosen for any size");
        for (int d = 0; d < 2; d++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                for (int ip = 0; ip < 2; ip++) {
                    const tlm_dtype dt = d ? TLM_DTYPE_BF16 : TLM_DTYPE_F32;
                    check_all_reduce(counts[k], dt, TLM_REDUCE_SUM, ip);
                    check_all_reduce(counts[k], dt, TLM_REDUCE_AVG, ip);
                }
        for (int d = 0; d < 2; d++)
            for (int op = 0; op < 2; op++) check_shm_bits(100003, d ? TLM_DTYPE_BF16 : TLM_DTYPE_F32, (tlm_reduce_op)op);
    }
    die_on(tlm_comm_set_mpi_algo(comm, TLM_MPI_ALGO_MPI, 0), "MPI_Allreduce");
    RCHECK(strcmp(tlm_comm_all_reduce_algo(comm, (size_t)1 << 24, TLM_DTYPE_F32), "mpi") == 0,
           "--mpi-algorithm mpi: MPI_Allreduce for any size");
    rcheck_status(tlm_comm_set_mpi_algo(comm, rank == nranks - 1 ? TLM_MPI_ALGO_SHM : TLM_MPI_ALGO_AUTO, 0),
                 TLM_ERR_INVALID_ARGUMENT, "disagree on the MPI all-reduce algorithm",
                 "ranks that disagree on the algorithm are refused on every rank");
    die_on(tlm_comm_set_mpi_algo(comm, TLM_MPI_ALGO_AUTO, 0), "auto");
}

/* ---- the fault modes ----------------------------------------------------------------------------------------- */

static int run_fault(const char *mode) {
    float *buf = dev_alloc(1024, TLM_DTYPE_F32);
    tlm_memset_zero(be, buf, 1024 * sizeof(float));
    for (int it = 0; it < 1000; it++) {
        if (rank == nranks - 1 && it == 3) {
            if (strcmp(mode, "exit") == 0) {
                tlm_fail(TLM_ERR_INVALID_ARGUMENT, "injected fault: rank %d exits before all-reduce %d", rank, it + 1);
                exit(3);
            }
            if (strcmp(mode, "kill") == 0) raise(SIGKILL);
            if (strcmp(mode, "hang") == 0)
                for (;;) sleep(1);
        }
        die_on(tlm_comm_all_reduce(comm, buf, buf, 1024, TLM_DTYPE_F32, TLM_REDUCE_SUM, NULL), "all_reduce");
        die_on(tlm_comm_synchronize(comm, NULL), "synchronize");
        usleep(20000);
    }
    printf("rank %d: the fault did not stop the run\n", rank);
    return 1;
}

int main(int argc, char **argv) {
    const char *fault = NULL;
    double timeout = 60;
    tlm_mpi_algo algo = TLM_MPI_ALGO_AUTO;
    static const struct option opts[] = {{"fault", required_argument, 0, 'F'}, {"timeout", required_argument, 0, 'T'},
                                         {"algo", required_argument, 0, 'A'}, {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 'F') fault = optarg;
        else if (o == 'T') timeout = atof(optarg);
        else if (o == 'A' && tlm_mpi_algo_parse(optarg, &algo)) continue;
        else return 2;
    }
    tlm_comm_world w;
    die_on(tlm_comm_init(&w, timeout), "joining the run");
    rank = w.rank;
    nranks = w.world_size;
    const bool cuda = strcmp(TLM_TEST_DEVICE, "cuda") == 0;
    if (cuda) {
        /* every rank decides alike: no GPU for this rank means none for the test */
        if (!tlm_cuda_available() || tlm_cuda_device_count() <= w.local_rank || !tlm_comm_have_nccl()) {
            if (rank == 0)
                printf("no GPU for each rank, or no NCCL: skipped (%d GPUs, local rank %d, NCCL %s)\n",
                       tlm_cuda_device_count(), w.local_rank, tlm_comm_nccl_version());
            tlm_comm_finalize();
            return 77;
        }
        die_on(tlm_backend_cuda_create(&be, w.local_rank), "the CUDA backend");
    } else {
        die_on(tlm_backend_cpu_create(&be, 1), "the CPU backend");
    }
    die_on(tlm_comm_create(&comm, cuda ? TLM_COMM_NCCL : TLM_COMM_MPI, be, timeout), "the communicator");
    char hosts[256];
    tlm_comm_describe_hosts(hosts, sizeof hosts);
    if (rank == 0)
        printf("# %s communicator, %s; %s; MPI: %s; NCCL: %s\n", tlm_comm_kind_name(comm->kind), hosts,
               be->description, tlm_comm_mpi_version(), tlm_comm_nccl_version());
    if (fault) {
        if (comm->kind == TLM_COMM_MPI) die_on(tlm_comm_set_mpi_algo(comm, algo, 0), "--algo");
        return run_fault(fault);
    }

    RCHECK(comm->rank == rank && comm->world_size == nranks && w.local_rank < w.local_size && strstr(hosts, "rank"),
           "rank %d of %d, local rank %d of %d (%s)", rank, nranks, w.local_rank, w.local_size, hosts);
    check_formula();
    check_collectives();
    check_seam();
    check_bad_arguments();
    check_bench();
    check_shm();

    /* every rank's failures, summed on rank 0 */
    int mine[2] = {passed, failed}, *all = malloc(sizeof(int) * 2 * (size_t)nranks);
    die_on(tlm_comm_host_all_gather(comm, mine, all, sizeof mine), "gathering the results");
    int total_failed = 0;
    for (int r = 0; r < nranks; r++) total_failed += all[2 * r + 1];
    free(all);
    tlm_comm_destroy(comm);
    tlm_backend_destroy(be);
    die_on(tlm_comm_finalize(), "leaving the run");
    if (rank != 0) return total_failed ? 1 : 0;
    printf("# %d rank%s: %d failed checks over all ranks\n", nranks, nranks > 1 ? "s" : "", total_failed);
    failed = total_failed;
    return test_finish();
}
