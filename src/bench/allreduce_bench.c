/* allreduce_bench.c — one size of `tlm allreduce` (allreduce_bench.h): buffers on the
 * communicator's backend, the check's fill and element-by-element comparison (in chunks of host
 * memory), warm-up, timed out-of-place and in-place all-reduces, and the ranks' times and wrong
 * counts gathered to every rank. */
#include "tlm/allreduce_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "tlm/backend.h"
#include "tlm/memory.h"

#define CHUNK_BYTES ((size_t)16 << 20) /* host staging of the fill and the check */

double tlm_allreduce_busbw_factor(int nranks) { return nranks > 0 ? 2.0 * (nranks - 1) / nranks : 0.0; }

double tlm_allreduce_algbw(size_t bytes, double time_us) { return time_us > 0 ? (double)bytes / (time_us * 1e3) : 0.0; }

static int pattern_modulus(tlm_dtype dt, int nranks) {
    if (dt != TLM_DTYPE_BF16) return 17;
    int m = 256 / (nranks > 0 ? nranks : 1);
    return m < 2 ? 2 : m > 17 ? 17 : m;
}

float tlm_allreduce_pattern(int rank, size_t i, tlm_dtype dt, int nranks) {
    const int m = pattern_modulus(dt, nranks);
    return (float)((7 * (i % (size_t)m) + 13 * (size_t)rank) % (size_t)m + 1);
}

float tlm_allreduce_expected(size_t i, tlm_dtype dt, tlm_reduce_op op, int nranks) {
    double sum = 0;
    for (int r = 0; r < nranks; r++) sum += tlm_allreduce_pattern(r, i, dt, nranks);
    float v = op == TLM_REDUCE_AVG ? (float)sum / (float)nranks : (float)sum;
    return dt == TLM_DTYPE_BF16 ? tlm_bf16_to_f32(tlm_f32_to_bf16(v)) : v;
}

/* the spacing of dt's values at |x| */
static double ulp(float x, tlm_dtype dt) {
    int e;
    frexpf(fabsf(x), &e); /* |x| = f * 2^e, f in [0.5, 1) */
    return ldexp(1.0, e - (dt == TLM_DTYPE_BF16 ? 8 : 24));
}

/* ---- the check's buffers: host chunks to and from backend memory ------------------------------------------ */

static void fill_pattern(tlm_backend *be, void *dst, size_t count, tlm_dtype dt, int rank, int nranks, void *host) {
    const size_t es = tlm_dtype_size(dt), per = CHUNK_BYTES / es;
    for (size_t at = 0; at < count; at += per) {
        const size_t n = count - at < per ? count - at : per;
        for (size_t i = 0; i < n; i++) {
            const float v = tlm_allreduce_pattern(rank, at + i, dt, nranks);
            if (dt == TLM_DTYPE_BF16) ((uint16_t *)host)[i] = tlm_f32_to_bf16(v);
            else ((float *)host)[i] = v;
        }
        tlm_copy_to_backend(be, (char *)dst + at * es, host, n * es);
    }
}

static int64_t count_wrong(tlm_backend *be, const void *src, size_t count, tlm_dtype dt, tlm_reduce_op op, int nranks,
                           void *host) {
    const int m = pattern_modulus(dt, nranks);
    float want[17];
    double tol[17];
    for (int j = 0; j < m; j++) {
        want[j] = tlm_allreduce_expected((size_t)j, dt, op, nranks);
        tol[j] = op == TLM_REDUCE_AVG ? nranks * ulp(want[j], dt) : 0.0;
    }
    const size_t es = tlm_dtype_size(dt), per = CHUNK_BYTES / es;
    int64_t wrong = 0;
    for (size_t at = 0; at < count; at += per) {
        const size_t n = count - at < per ? count - at : per;
        tlm_copy_to_host(be, host, (const char *)src + at * es, n * es);
        for (size_t i = 0; i < n; i++) {
            const size_t j = (at + i) % (size_t)m;
            const float got = dt == TLM_DTYPE_BF16 ? tlm_bf16_to_f32(((uint16_t *)host)[i]) : ((float *)host)[i];
            wrong += !(fabs((double)got - want[j]) <= tol[j]); /* NaN counts as wrong */
        }
    }
    return wrong;
}

/* ---- one size ---------------------------------------------------------------------------------------------- */

typedef struct {
    double us[2];       /* out-of-place, in-place */
    int64_t wrong[2];
} rank_numbers;

/* Timed: barrier, event, iters all-reduces, event, wait; the mean per all-reduce in microseconds. */
static tlm_status time_loop(tlm_comm *c, const tlm_allreduce_case *k, const void *send, void *recv, size_t count,
                            tlm_event *e0, tlm_event *e1, double *us) {
    tlm_backend *be = c->be;
    TLM_TRY(tlm_comm_synchronize(c, NULL));
    TLM_TRY(tlm_comm_barrier(c));
    tlm_event_record(be, e0, NULL);
    for (int it = 0; it < k->iters; it++) TLM_TRY(tlm_comm_all_reduce(c, send, recv, count, k->dtype, k->op, NULL));
    tlm_event_record(be, e1, NULL);
    TLM_TRY(tlm_comm_synchronize(c, NULL));
    *us = tlm_event_elapsed_ms(be, e0, e1) * 1e3 / k->iters;
    return TLM_OK;
}

static tlm_status run_case(tlm_comm *c, const tlm_allreduce_case *k, void *send, void *recv, size_t count,
                           void *host, rank_numbers *mine) {
    tlm_backend *be = c->be;
    const int n = c->world_size;
    mine->wrong[0] = mine->wrong[1] = -1;
    if (k->check) {
        /* out-of-place into a zeroed buffer (0 is never an expected value), then in place */
        fill_pattern(be, send, count, k->dtype, c->rank, n, host);
        tlm_memset_zero(be, recv, count * tlm_dtype_size(k->dtype));
        TLM_TRY(tlm_comm_all_reduce(c, send, recv, count, k->dtype, k->op, NULL));
        TLM_TRY(tlm_comm_synchronize(c, NULL));
        mine->wrong[0] = count_wrong(be, recv, count, k->dtype, k->op, n, host);
        fill_pattern(be, recv, count, k->dtype, c->rank, n, host);
        TLM_TRY(tlm_comm_all_reduce(c, recv, recv, count, k->dtype, k->op, NULL));
        TLM_TRY(tlm_comm_synchronize(c, NULL));
        mine->wrong[1] = count_wrong(be, recv, count, k->dtype, k->op, n, host);
    } else {
        fill_pattern(be, send, count, k->dtype, c->rank, n, host);
        tlm_memset_zero(be, recv, count * tlm_dtype_size(k->dtype));
    }
    for (int it = 0; it < k->warmup; it++) TLM_TRY(tlm_comm_all_reduce(c, send, recv, count, k->dtype, k->op, NULL));
    tlm_event *e0 = NULL, *e1 = NULL;
    tlm_status s = tlm_event_create(be, &e0);
    if (s == TLM_OK) s = tlm_event_create(be, &e1);
    if (s == TLM_OK) s = time_loop(c, k, send, recv, count, e0, e1, &mine->us[0]);
    if (s == TLM_OK) s = time_loop(c, k, recv, recv, count, e0, e1, &mine->us[1]);
    if (e0) tlm_event_destroy(be, e0);
    if (e1) tlm_event_destroy(be, e1);
    return s;
}

static void summarize(const rank_numbers *all, int n, int which, size_t bytes, tlm_allreduce_timing *t) {
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    int64_t wrong = 0;
    for (int r = 0; r < n; r++) {
        const double us = all[r].us[which];
        sum += us;
        lo = us < lo ? us : lo;
        hi = us > hi ? us : hi;
        wrong = all[r].wrong[which] < 0 || wrong < 0 ? -1 : wrong + all[r].wrong[which];
    }
    t->time_us_mean = sum / n;
    t->time_us_min = lo;
    t->time_us_max = hi;
    t->algbw_gb_per_s = tlm_allreduce_algbw(bytes, t->time_us_mean);
    t->busbw_gb_per_s = t->algbw_gb_per_s * tlm_allreduce_busbw_factor(n);
    t->wrong = wrong;
}

tlm_status tlm_allreduce_bench_run(tlm_comm *c, const tlm_allreduce_case *k, tlm_allreduce_result *r) {
    memset(r, 0, sizeof *r);
    if (k->dtype != TLM_DTYPE_F32 && k->dtype != TLM_DTYPE_BF16)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "all-reduce benchmark: dtype float32 or bf16, not %s",
                        tlm_dtype_name(k->dtype));
    const size_t es = tlm_dtype_size(k->dtype);
    if (k->bytes % es != 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "all-reduce benchmark: %zu bytes is not a whole number of %zu-byte "
                        "%s elements", k->bytes, es, tlm_dtype_name(k->dtype));
    if (k->iters < 1 || k->warmup < 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "all-reduce benchmark: iters %d (>= 1) and warmup %d (>= 0)",
                        k->iters, k->warmup);
    tlm_backend *be = c->be;
    r->count = k->bytes / es;

    /* every rank allocates, then all learn whether all could: a rank out of memory must not leave
     * the others waiting in the first all-reduce */
    typedef struct {
        int ok;
        char error[200];
    } alloc_said;
    alloc_said mine = {1, ""};
    void *send = tlm_alloc(be, k->bytes, TLM_MEM_WORKSPACE, "allreduce.send");
    void *recv = send ? tlm_alloc(be, k->bytes, TLM_MEM_WORKSPACE, "allreduce.recv") : NULL;
    void *host = send && recv ? malloc(CHUNK_BYTES) : NULL;
    if (!host) {
        mine.ok = 0;
        snprintf(mine.error, sizeof mine.error, "%s",
                 send && recv ? "out of host memory for the check's staging buffer" : tlm_last_error());
    }
    alloc_said *said = malloc(sizeof *said * (size_t)c->world_size);
    rank_numbers *all = malloc(sizeof *all * (size_t)c->world_size);
    tlm_status s = said && all ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    if (s == TLM_OK) s = tlm_comm_host_all_gather(c, &mine, said, sizeof mine);
    for (int q = 0; s == TLM_OK && q < c->world_size && r->status == TLM_OK; q++)
        if (!said[q].ok) {
            r->status = TLM_ERR_OUT_OF_MEMORY;
            snprintf(r->error, sizeof r->error, "rank %d: %s", q, said[q].error);
        }
    rank_numbers numbers = {{0, 0}, {-1, -1}};
    if (s == TLM_OK && r->status == TLM_OK) s = run_case(c, k, send, recv, r->count, host, &numbers);
    if (s == TLM_OK && r->status == TLM_OK) s = tlm_comm_host_all_gather(c, &numbers, all, sizeof numbers);
    if (s == TLM_OK && r->status == TLM_OK) {
        summarize(all, c->world_size, 0, k->bytes, &r->out_of_place);
        summarize(all, c->world_size, 1, k->bytes, &r->in_place);
    }
    free(host);
    free(said);
    free(all);
    tlm_free(be, recv);
    tlm_free(be, send);
    return s;
}
