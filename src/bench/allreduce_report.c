/* allreduce_report.c — the report of `tlm allreduce` (allreduce_bench.h): the rows' columns in
 * nccl-tests' terms, the header's notes on how the numbers are measured, a row per size and
 * placement, and the summary. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/allreduce_internal.h"
#include "tlm/allreduce_bench.h"

const tlm_column tlm_allreduce_columns[] = {
    {"backend", TLM_FIELD_STR, "backend", "", -7, 0, 0, TLM_COL_KEY},
    {"nranks", TLM_FIELD_INT, "ranks", "", 5, 0, 0, TLM_COL_KEY},
    {"bytes", TLM_FIELD_INT, "size", "B", 12, 0, 0, TLM_COL_KEY},
    {"count", TLM_FIELD_INT, "count", "elements", 11, 0, 0, 0},
    {"dtype", TLM_FIELD_STR, "type", "", 5, 0, 0, 0},
    {"op", TLM_FIELD_STR, "redop", "", 5, 0, 0, 0},
    {"algorithm", TLM_FIELD_STR, "algo", "", 5, 0, 0, 0},
    {"in_place", TLM_FIELD_BOOL, "in-place", "", 8, 0, 0, TLM_COL_KEY},
    TLM_COL_US("time_us_mean", "time", 11, 1),
    TLM_COL_US("time_us_min", "min", 11, 1),
    TLM_COL_US("time_us_max", "max", 11, 1),
    {"algbw_gb_per_s", TLM_FIELD_NUM, "algbw", "GB/s", 8, 2, 0, 0},
    {"busbw_gb_per_s", TLM_FIELD_NUM, "busbw", "GB/s", 8, 2, 0, 0},
    {"wrong", TLM_FIELD_INT, "#wrong", "", 7, 0, 0, 0},
};
const int tlm_allreduce_num_columns = (int)(sizeof tlm_allreduce_columns / sizeof tlm_allreduce_columns[0]);

static const char *time_note = "the mean over the ranks of each rank's mean time per all-reduce: --iters back-to-back "
                               "all-reduces after --warmup untimed ones and a barrier, between two events on the "
                               "stream (CUDA events with NCCL, the host clock with MPI); min and max over the ranks";
static const char *busbw_note = "algbw = bytes / time, busbw = algbw x 2(n-1)/n for n ranks; GB/s = 10^9 bytes/s "
                                "(nccl-tests, doc/PERFORMANCE.md); bytes per rank";
static const char *algo_note = "mpi: MPI_Allreduce; shm: tlm's schedule for ranks on one host (a shared-memory "
                               "segment: each rank copies its buffer in once, sums its 1/n slice of every rank's copy, "
                               "copies the sums out); nccl: NCCL's own";
static const char *wrong_note = "elements of all ranks' results that differ from the expected (sum: exactly; avg: by "
                                "more than n ulps); - when not checked";

const char *tlm_allreduce_dtype_text(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? "bf16" : "fp32"; }

static void put_config_meta(tlm_report *rep, const tlm_allreduce_options *o) {
    tlm_report_meta_str(rep, "mpi_version", tlm_comm_mpi_version());
    tlm_report_meta_str(rep, "nccl_version", tlm_comm_nccl_version());
    tlm_report_meta_str(rep, "dtype", tlm_allreduce_dtype_text(o->dtype));
    tlm_report_meta_str(rep, "op", tlm_reduce_op_name(o->op));
    tlm_report_meta_int(rep, "warmup", o->warmup);
    tlm_report_meta_int(rep, "iters", o->iters);
    tlm_report_meta_bool(rep, "check", o->check);
    tlm_report_meta_num(rep, "timeout_s", o->timeout);
    tlm_report_meta_str(rep, "mpi_algorithm", tlm_mpi_algo_name(o->mpi_algo));
    tlm_report_meta_int(rep, "shm_chunk_bytes", (int64_t)(o->shm_chunk ? o->shm_chunk : TLM_COMM_SHM_CHUNK_BYTES));
    if (!o->shm_chunk) /* the default by size (comm.h) */
        tlm_report_meta_str(rep, "shm_chunk_large", "1048576 bytes from 536870912 bytes a rank");
    tlm_report_meta_str(rep, "algorithm", algo_note);
    static const char *const nccl_env[] = {"NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_ALGO",
                                           "NCCL_PROTO"};
    char env[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof nccl_env / sizeof nccl_env[0]; i++)
        if (getenv(nccl_env[i]) && used < sizeof env)
            used += (size_t)snprintf(env + used, sizeof env - used, "%s%s=%s", used ? " " : "", nccl_env[i],
                                     getenv(nccl_env[i]));
    tlm_report_meta_str(rep, "nccl_env", used ? env : "(none set)");
    tlm_report_meta_str(rep, "time", time_note);
    tlm_report_meta_str(rep, "busbw", busbw_note);
    tlm_report_meta_str(rep, "wrong", wrong_note);
}

void tlm_allreduce_report_begin(tlm_report *rep, const tlm_allreduce_options *o) {
    put_config_meta(rep, o);
    tlm_report_table(rep, "rows", tlm_allreduce_columns, tlm_allreduce_num_columns);
    if (!o->check) tlm_report_show(rep, "wrong", false);
}

void tlm_allreduce_report_row(tlm_report *rep, const char *backend, const char *algo, int nranks, uint64_t bytes,
                              const tlm_allreduce_options *o, bool in_place, const tlm_allreduce_result *r,
                              tlm_allreduce_tally *t) {
    const tlm_allreduce_timing *m = in_place ? &r->in_place : &r->out_of_place;
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "backend", backend);
    tlm_report_int(rep, "nranks", nranks);
    tlm_report_int(rep, "bytes", (int64_t)bytes);
    tlm_report_int(rep, "count", (int64_t)(bytes / tlm_dtype_size(o->dtype)));
    tlm_report_str(rep, "dtype", tlm_allreduce_dtype_text(o->dtype));
    tlm_report_str(rep, "op", tlm_reduce_op_name(o->op));
    tlm_report_str(rep, "algorithm", algo);
    tlm_report_bool(rep, "in_place", in_place);
    if (r->status != TLM_OK) {
        tlm_report_status(rep, r->status == TLM_ERR_OUT_OF_MEMORY ? "OOM" : "failed", r->error);
        t->failed_rows++;
    } else {
        tlm_report_num(rep, "time_us_mean", m->time_us_mean);
        tlm_report_num(rep, "time_us_min", m->time_us_min);
        tlm_report_num(rep, "time_us_max", m->time_us_max);
        tlm_report_num(rep, "algbw_gb_per_s", m->algbw_gb_per_s);
        tlm_report_num(rep, "busbw_gb_per_s", m->busbw_gb_per_s);
        if (m->wrong >= 0) tlm_report_int(rep, "wrong", m->wrong);
        if (m->wrong > 0) {
            char e[96];
            snprintf(e, sizeof e, "%lld elements differ from the expected", (long long)m->wrong);
            tlm_report_status(rep, "WRONG", e);
            t->wrong += m->wrong;
        }
        t->busbw_sum += m->busbw_gb_per_s;
        t->ok_rows++;
    }
    tlm_report_row_end(rep);
}

void tlm_allreduce_report_summary(tlm_report *rep, const tlm_allreduce_tally *t) {
    char line[160];
    /* the mean busbw of the rows that ran */
    tlm_report_summary_num(rep, "busbw_gb_per_s_avg", t->ok_rows ? t->busbw_sum / t->ok_rows : 0.0);
    tlm_report_summary_int(rep, "wrong", t->wrong);
    snprintf(line, sizeof line, "%s%s%d rows ran, %d out of memory or failed, %d skipped",
             t->wrong ? "FAILED" : "OK", t->wrong ? " (wrong results); " : ": ", t->ok_rows, t->failed_rows,
             t->skipped_rows);
    tlm_report_summary_str(rep, "result", line);
}
