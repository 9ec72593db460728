/* cmd_allreduce.c — `tlm allreduce`: the communication benchmark (SPEC.md §2.9) in nccl-tests'
 * conventions, run under a launcher (`mpirun -np 4 tlm allreduce`): every rank joins the run, makes
 * its backend and communicator (NCCL on GPU local_rank, or MPI on host memory), checks that every
 * rank was given the same configuration, and measures each size (allreduce_bench.h); rank 0 alone
 * writes the report. `--sweep` runs itself under mpirun for each backend and process count and
 * merges the runs' JSON into one report. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "tlm/allreduce_bench.h"
#include "tlm/comm.h"

#define MAX_SIZES 64
#define MAX_NPROC 16

static const char *const cmd = "allreduce";

typedef struct {
    uint64_t sizes[MAX_SIZES]; /* bytes per rank, whole elements */
    int num_sizes;
    char *sizes_text;          /* --sizes as given */
    uint64_t minbytes, maxbytes;
    long stepfactor;
    bool given_min, given_max, given_step;
    tlm_comm_kind backends[2];
    int num_backends;
    tlm_dtype dtype;
    tlm_reduce_op op;
    long iters, warmup;
    bool check;
    double timeout;
    tlm_mpi_algo mpi_algo;
    uint64_t shm_chunk;        /* bytes; 0: the default */
    bool given_algo, given_chunk;
    bool sweep;
    int nprocs[MAX_NPROC], num_nprocs;
} opts;

/* ---- flags ------------------------------------------------------------------------------------------------ */

enum { OPT_SIZES = 300, OPT_BACKEND, OPT_OP, OPT_TIMEOUT, OPT_SWEEP, OPT_NPROC, OPT_MPI_ALGO, OPT_SHM_CHUNK };

static const struct option allreduce_options[] = {
    {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
    {"stepfactor", required_argument, 0, 'F'}, {"sizes", required_argument, 0, OPT_SIZES},
    {"backend", required_argument, 0, OPT_BACKEND}, {"dtype", required_argument, 0, 'T'},
    {"op", required_argument, 0, OPT_OP}, {"iters", required_argument, 0, 'n'},
    {"warmup", required_argument, 0, 'w'}, {"check", required_argument, 0, 'c'},
    {"timeout", required_argument, 0, OPT_TIMEOUT}, {"sweep", no_argument, 0, OPT_SWEEP},
    {"nproc", required_argument, 0, OPT_NPROC}, {"mpi-algorithm", required_argument, 0, OPT_MPI_ALGO},
    {"shm-chunk", required_argument, 0, OPT_SHM_CHUNK}, {0, 0, 0, 0},
};

static const cli_use allreduce_uses[] = {
    {CLI_DEVICE, "cuda with --backend nccl, cpu with mpi", 1},
    {CLI_GPU, "0: the first GPU; rank r uses GPU N + its local rank", 1},
    {CLI_FORMAT, "table", 1},
    {CLI_OUT, NULL, 1},
};

static bool parse_backends(const char *text, opts *o) {
    char **items;
    int n;
    if (!cli_split_list(cmd, "--backend", text, 2, &items, &n)) return false;
    bool ok = true;
    o->num_backends = 0;
    for (int i = 0; ok && i < n; i++) {
        tlm_comm_kind k;
        if (!tlm_comm_kind_parse(items[i], &k)) {
            cli_error(cmd, "--backend: unknown backend '%s' (known: nccl, mpi)", items[i]);
            ok = false;
        } else if (o->num_backends == 1 && o->backends[0] == k) {
            cli_error(cmd, "--backend: '%s' given twice", items[i]);
            ok = false;
        } else {
            o->backends[o->num_backends++] = k;
        }
    }
    free(items);
    return ok;
}

static bool handle(void *user, int opt, const char *arg) {
    opts *o = user;
    switch (opt) {
    case 'b': o->given_min = true; return cli_parse_bytes(cmd, "--minbytes", arg, 1, (uint64_t)1 << 40, &o->minbytes);
    case 'e': o->given_max = true; return cli_parse_bytes(cmd, "--maxbytes", arg, 1, (uint64_t)1 << 40, &o->maxbytes);
    case 'F': o->given_step = true; return cli_parse_int(cmd, "--stepfactor", arg, 2, 1 << 20, &o->stepfactor);
    case OPT_SIZES: o->sizes_text = (char *)arg; return true;
    case OPT_BACKEND: return parse_backends(arg, o);
    case 'T':
        if (strcmp(arg, "fp32") == 0) o->dtype = TLM_DTYPE_F32;
        else if (strcmp(arg, "bf16") == 0) o->dtype = TLM_DTYPE_BF16;
        else {
            cli_error(cmd, "--dtype: unknown dtype '%s' (known: fp32, bf16)", arg);
            return false;
        }
        return true;
    case OPT_OP:
        if (tlm_reduce_op_parse(arg, &o->op)) return true;
        cli_error(cmd, "--op: unknown reduction '%s' (known: sum, avg)", arg);
        return false;
    case 'n': return cli_parse_int(cmd, "--iters", arg, 1, 1 << 24, &o->iters);
    case 'w': return cli_parse_int(cmd, "--warmup", arg, 0, 1 << 24, &o->warmup);
    case 'c': return cli_parse_on_off(cmd, "--check", arg, &o->check);
    case OPT_TIMEOUT: return cli_parse_double(cmd, "--timeout", arg, 0.5, 86400, &o->timeout);
    case OPT_SWEEP: o->sweep = true; return true;
    case OPT_NPROC: return cli_parse_int_list(cmd, "--nproc", arg, 1, 4096, o->nprocs, MAX_NPROC, &o->num_nprocs);
    case OPT_MPI_ALGO:
        o->given_algo = true;
        if (tlm_mpi_algo_parse(arg, &o->mpi_algo)) return true;
        cli_error(cmd, "--mpi-algorithm: unknown algorithm '%s' (known: auto, mpi, shm)", arg);
        return false;
    case OPT_SHM_CHUNK:
        o->given_chunk = true;
        return cli_parse_bytes(cmd, "--shm-chunk", arg, 4096, (uint64_t)1 << 20, &o->shm_chunk);
    default: return false;
    }
}

static const cli_command allreduce_cmd = {
    .help =
        "Usage: mpirun -np N tlm allreduce [options]      (or srun, mpiexec; tlm allreduce --sweep starts mpirun)\n"
        "All-reduce benchmark (SPEC.md §2.9) in nccl-tests' conventions: per size, out-of-place and in-place\n"
        "time (us: the mean over the ranks of each rank's mean over --iters back-to-back all-reduces after\n"
        "--warmup), algbw = bytes / time and busbw = algbw x 2(n-1)/n (GB/s = 10^9 bytes/s; nccl-tests'\n"
        "doc/PERFORMANCE.md), #wrong (--check: every element of every rank against the expected sum), and\n"
        "the spread of the ranks' times (min, max). One process per GPU with NCCL (the GPU = --gpu + the\n"
        "local rank among CUDA_VISIBLE_DEVICES; a rank that sees one GPU uses it); host memory with MPI.\n"
        "Only rank 0 writes the report.\n"
        "\n"
        "  -b, --minbytes SIZE   smallest size per rank (default: 32M with -e or -F); K, M, G = 2^10, 2^20,\n"
        "                        2^30 bytes, KB, MB, GB = 10^3, 10^6, 10^9\n"
        "  -e, --maxbytes SIZE   largest size (default: the larger of --minbytes and 32M)\n"
        "  -F, --stepfactor N    multiply the size by N from min to max (default: 2; nccl-tests' -f, which\n"
        "                        is tlm's --format)\n"
        "      --sizes LIST      comma list of sizes instead (default, the seeds': 1MB,10MB,100MB,1GB)\n"
        "                        sizes are rounded down to whole elements\n"
        "      --backend B       nccl | mpi (default: nccl when built with NCCL and a GPU is present, else\n"
        "                        mpi); with --sweep a comma list (default: nccl,mpi, or mpi without NCCL/GPU)\n"
        "  -T, --dtype T         fp32 | bf16 (default: fp32; bf16 sums add in fp32 and round to nearest even)\n"
        "      --op OP           sum | avg (default: sum)\n"
        "  -n, --iters N         timed all-reduces per size and placement (default: 20)\n"
        "  -w, --warmup N        untimed all-reduces first (default: 5)\n"
        "  -c, --check on|off    check every element of every rank's result once per size (default: on)\n"
        "      --mpi-algorithm A auto | mpi | shm: the MPI backend's all-reduce: MPI_Allreduce (mpi), or tlm's\n"
        "                        schedule for ranks that share a host (shm: a shared-memory segment, each\n"
        "                        rank sums its 1/n slice of every rank's copy; comm.h); auto: shm from\n"
        "                        256K per rank when every rank is on one host, else mpi (default: auto)\n"
        "      --shm-chunk SIZE  shm's chunk per rank, 4K..1M (default: 256K; 1M from 512M a rank)\n"
        "      --timeout S       the longest any rank waits in one collective before the run stops, naming\n"
        "                        the ranks that did not arrive (default: 60)\n"
        "      --sweep           run under mpirun for each --backend and --nproc and merge the results\n"
        "                        (do not start it with mpirun; NCCL counts above the GPUs are skipped rows)\n"
        "      --nproc LIST      process counts of the sweep (default: 2,4,6)\n",
    .help_after =
        "\n"
        "Launch: mpirun -np 4 tlm allreduce --backend nccl         (one host, 4 GPUs; as root add\n"
        "        --allow-run-as-root; for more processes than cores with mpi add --oversubscribe)\n"
        "        srun -N 2 --ntasks-per-node=4 --gpus-per-task=1 --mpi=pmix tlm allreduce   (Slurm)\n"
        "The sweep passes TLM_MPIRUN_FLAGS (e.g. \"--mca btl self,tcp\") to mpirun, and for mpi --oversubscribe\n"
        "--bind-to none (the shm all-reduce's threads share the host's cores). Keep NCCL_NVLS_ENABLE=0\n"
        "on machines whose NVLink multicast is off. Exit status 1 when an element is wrong or a rank fails.\n",
    .name = "allreduce",
    CLI_USES(allreduce_uses),
    .options = allreduce_options,
    .short_options = "b:e:F:T:n:w:c:",
    .handle = handle,
};

/* The sizes of the flags, rounded down to whole elements of dt; prints the error. */
static bool make_sizes(opts *o) {
    const uint64_t es = tlm_dtype_size(o->dtype);
    uint64_t raw[MAX_SIZES];
    int n = 0;
    if (o->sizes_text && (o->given_min || o->given_max || o->given_step)) {
        cli_error(cmd, "--sizes conflicts with %s: give a list or a range, not both",
                  o->given_min ? "--minbytes" : o->given_max ? "--maxbytes" : "--stepfactor");
        return false;
    }
    if (o->given_min || o->given_max || o->given_step) {
        const uint64_t def = (uint64_t)32 << 20;
        uint64_t lo = o->given_min ? o->minbytes : (o->given_max && o->maxbytes < def ? o->maxbytes : def);
        uint64_t hi = o->given_max ? o->maxbytes : (lo > def ? lo : def);
        if (lo > hi) {
            cli_error(cmd, "--minbytes %llu is larger than --maxbytes %llu", (unsigned long long)lo,
                      (unsigned long long)hi);
            return false;
        }
        const uint64_t f = o->given_step ? (uint64_t)o->stepfactor : 2;
        for (uint64_t s = lo; s <= hi; s *= f) {
            if (n == MAX_SIZES) {
                cli_error(cmd, "more than %d sizes from --minbytes to --maxbytes: use a larger --stepfactor", MAX_SIZES);
                return false;
            }
            raw[n++] = s;
            if (s > hi / f) break;
        }
    } else {
        char **items;
        int ni;
        if (!cli_split_list(cmd, "--sizes", o->sizes_text ? o->sizes_text : "1MB,10MB,100MB,1GB", MAX_SIZES, &items,
                            &ni))
            return false;
        bool ok = true;
        for (int i = 0; ok && i < ni; i++) ok = cli_parse_bytes(cmd, "--sizes", items[i], 1, (uint64_t)1 << 40, &raw[n++]);
        free(items);
        if (!ok) return false;
    }
    o->num_sizes = 0;
    for (int i = 0; i < n; i++) {
        if (raw[i] < es) {
            cli_error(cmd, "size %llu bytes is less than one %s element (%llu bytes)", (unsigned long long)raw[i],
                      o->dtype == TLM_DTYPE_BF16 ? "bf16" : "fp32", (unsigned long long)es);
            return false;
        }
        o->sizes[o->num_sizes++] = raw[i] / es * es;
    }
    return true;
}

/* ---- the report -------------------------------------------------------------------------------------------- */

static const tlm_column columns[] = {
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
#define NUM_COLUMNS ((int)(sizeof columns / sizeof columns[0]))

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

static const char *dtype_text(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? "bf16" : "fp32"; }

static void put_config_meta(tlm_report *rep, const opts *o) {
    tlm_report_meta_str(rep, "mpi_version", tlm_comm_mpi_version());
    tlm_report_meta_str(rep, "nccl_version", tlm_comm_nccl_version());
    tlm_report_meta_str(rep, "dtype", dtype_text(o->dtype));
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

typedef struct {
    double busbw_sum;
    int ok_rows, failed_rows, skipped_rows;
    int64_t wrong;
} tally;

static void put_timing_row(tlm_report *rep, const char *backend, const char *algo, int nranks, uint64_t bytes,
                           const opts *o, bool in_place, const tlm_allreduce_result *r, tally *t) {
    const tlm_allreduce_timing *m = in_place ? &r->in_place : &r->out_of_place;
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "backend", backend);
    tlm_report_int(rep, "nranks", nranks);
    tlm_report_int(rep, "bytes", (int64_t)bytes);
    tlm_report_int(rep, "count", (int64_t)(bytes / tlm_dtype_size(o->dtype)));
    tlm_report_str(rep, "dtype", dtype_text(o->dtype));
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

static void put_summary(tlm_report *rep, const tally *t) {
    char line[160];
    /* the mean busbw of the rows that ran */
    tlm_report_summary_num(rep, "busbw_gb_per_s_avg", t->ok_rows ? t->busbw_sum / t->ok_rows : 0.0);
    tlm_report_summary_int(rep, "wrong", t->wrong);
    snprintf(line, sizeof line, "%s%s%d rows ran, %d out of memory or failed, %d skipped",
             t->wrong ? "FAILED" : "OK", t->wrong ? " (wrong results); " : ": ", t->ok_rows, t->failed_rows,
             t->skipped_rows);
    tlm_report_summary_str(rep, "result", line);
}

/* ---- one run, on every rank ---------------------------------------------------------------------------------- */

/* "rank 3 (host): message" on stderr, for an error of this rank alone */
static void rank_error(const tlm_comm_world *w, const char *what) {
    if (w->world_size > 1) cli_error(cmd, "rank %d (%s): %s: %s", w->rank, w->host, what, tlm_last_error());
    else cli_error(cmd, "%s: %s", what, tlm_last_error());
}

/* every rank's ok -> whether all are */
static bool all_ok(tlm_comm *c, bool mine) {
    int m = mine, *all = malloc(sizeof(int) * (size_t)c->world_size);
    bool ok = all && tlm_comm_host_all_gather(c, &m, all, sizeof m) == TLM_OK;
    for (int r = 0; ok && r < c->world_size; r++) ok = all[r];
    free(all);
    return ok;
}

/* "rank 0: <desc>; rank 1: ..." (identical descriptions of consecutive ranks not repeated) */
static tlm_status gather_devices(tlm_comm *c, const char *mine_text, char *out, size_t n) {
    typedef struct {
        char text[200];
    } said;
    said mine;
    snprintf(mine.text, sizeof mine.text, "%.199s", mine_text);
    said *all = malloc(sizeof *all * (size_t)c->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    tlm_status s = tlm_comm_host_all_gather(c, &mine, all, sizeof mine);
    size_t used = 0;
    out[0] = '\0';
    for (int r = 0; s == TLM_OK && r < c->world_size && used < n; r++) {
        if (r > 0 && strcmp(all[r].text, all[r - 1].text) == 0) continue;
        int end = r;
        while (end + 1 < c->world_size && strcmp(all[end + 1].text, all[r].text) == 0) end++;
        if (end > r) used += (size_t)snprintf(out + used, n - used, "%sranks %d-%d: %s", used ? "; " : "", r, end, all[r].text);
        else used += (size_t)snprintf(out + used, n - used, "%srank %d: %s", used ? "; " : "", r, all[r].text);
    }
    free(all);
    return s;
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            char *v = strchr(line, ':') + 1;
            while (*v == ' ') v++;
            v[strcspn(v, "\n")] = '\0';
            snprintf(buf, n, "%s", v);
            break;
        }
    fclose(f);
}

/* the progress line's cost of a size: the bytes of every all-reduce it runs */
static double size_cost(const opts *o, int i) { return (double)o->sizes[i] * (o->warmup + 2 * o->iters + 2 * o->check); }

/* ends the run: symmetric failures (every rank saw them) leave cleanly; a rank failing alone exits,
 * and the communication layer tells the others */
static int leave(int rc, bool symmetric) {
    if (rc == TLM_EXIT_OK || symmetric) {
        if (tlm_comm_finalize() != TLM_OK) {
            cli_error(cmd, "leaving the run: %s", tlm_last_error());
            return TLM_EXIT_FAILURE;
        }
    }
    return rc;
}

static int run_once(const cli_args *a, const opts *o, int argc, char **argv) {
    tlm_comm_world w;
    if (tlm_comm_init(&w, o->timeout) != TLM_OK) {
        cli_error(cmd, "joining the run: %s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    const tlm_comm_kind kind = o->backends[0];
    /* one GPU per rank: --gpu + the local rank, among the visible GPUs; a rank that sees a single GPU (Slurm's
     * --gpus-per-task=1 sets CUDA_VISIBLE_DEVICES so) uses it */
    const int gpu = (a->given[CLI_GPU] ? a->gpu : 0) + (tlm_cuda_device_count() == 1 ? 0 : w.local_rank);
    tlm_backend *be = NULL;
    tlm_status s = kind == TLM_COMM_MPI ? tlm_backend_cpu_create(&be, 1) : tlm_backend_cuda_create(&be, gpu);
    if (s != TLM_OK) {
        rank_error(&w, kind == TLM_COMM_NCCL ? "the GPU of this rank (--gpu + local rank)" : "the CPU backend");
        return leave(TLM_EXIT_FAILURE, false);
    }
    tlm_comm *c = NULL;
    s = tlm_comm_create(&c, kind, be, o->timeout);
    if (s != TLM_OK) {
        /* failures every rank learned of (the creation's agreement) leave together; a failing library call may be
         * this rank's alone */
        if (w.rank == 0 || s == TLM_ERR_BACKEND) rank_error(&w, "the communicator");
        tlm_backend_destroy(be);
        return leave(TLM_EXIT_FAILURE, s != TLM_ERR_BACKEND);
    }
    /* the same configuration on every rank, before the first all-reduce */
    char config[2048];
    size_t used = (size_t)snprintf(config, sizeof config, "backend %s mpi-algorithm %s shm-chunk %llu dtype %s op %s "
                                   "warmup %ld iters %ld check %d sizes", tlm_comm_kind_name(kind),
                                   tlm_mpi_algo_name(o->mpi_algo), (unsigned long long)o->shm_chunk, dtype_text(o->dtype),
                                   tlm_reduce_op_name(o->op), o->warmup, o->iters, o->check);
    for (int i = 0; i < o->num_sizes && used < sizeof config; i++)
        used += (size_t)snprintf(config + used, sizeof config - used, "%s%llu", i ? "," : " ",
                                 (unsigned long long)o->sizes[i]);
    if (tlm_comm_check_same(c, "the benchmark's configuration (flags)", config) != TLM_OK) {
        if (w.rank == 0) cli_error(cmd, "%s", tlm_last_error());
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(TLM_EXIT_USAGE, true);
    }
    if (kind == TLM_COMM_MPI && tlm_comm_set_mpi_algo(c, o->mpi_algo, o->shm_chunk) != TLM_OK) {
        if (w.rank == 0) cli_error(cmd, "--mpi-algorithm %s: %s", tlm_mpi_algo_name(o->mpi_algo), tlm_last_error());
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(TLM_EXIT_FAILURE, true);
    }
    /* who runs where, on what */
    char mine[256], devices[4096], hosts[1024], links[1024] = "";
    if (kind == TLM_COMM_NCCL) {
        snprintf(mine, sizeof mine, "%s", be->description);
    } else {
        char cpu[160];
        cpu_model(cpu, sizeof cpu);
        snprintf(mine, sizeof mine, "host memory, %s (%ld cores)", cpu, sysconf(_SC_NPROCESSORS_ONLN));
    }
    int rc = TLM_EXIT_FAILURE;
    tlm_report *rep = NULL;
    if (gather_devices(c, mine, devices, sizeof devices) != TLM_OK) {
        rank_error(&w, "gathering the devices");
        return leave(rc, false);
    }
    tlm_comm_describe_hosts(hosts, sizeof hosts);
    if (w.rank == 0) {
        if (kind == TLM_COMM_NCCL) tlm_comm_describe_links(links, sizeof links);
        rep = cli_open_report(cmd, a, "tlm allreduce", argc, argv);
    }
    if (!all_ok(c, w.rank != 0 || rep)) { /* rank 0 said why */
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(TLM_EXIT_FAILURE, true);
    }
    if (rep) {
        cli_report_device(rep, be);
        tlm_report_meta_str(rep, "backend", tlm_comm_kind_name(kind));
        tlm_report_meta_int(rep, "nranks", w.world_size);
        tlm_report_meta_str(rep, "ranks", hosts);
        tlm_report_meta_str(rep, "devices", devices);
        if (kind == TLM_COMM_MPI) {
            char threads[64] = ""; /* rank 0's */
            if (tlm_comm_shm_threads(c) > 0)
                snprintf(threads, sizeof threads, " (%d thread%s a rank)", tlm_comm_shm_threads(c),
                         tlm_comm_shm_threads(c) > 1 ? "s" : "");
            snprintf(links, sizeof links, "host processes: %s%s%s; Open MPI's transports for the mpi rows (shared "
                     "memory within a host, the network between)", tlm_comm_shm_note(c)[0] ? "no shm segment: " :
                     "tlm's shared-memory segment for the shm rows", tlm_comm_shm_note(c), threads);
        }
        tlm_report_meta_str(rep, "links", links);
        put_config_meta(rep, o);
        tlm_report_table(rep, "rows", columns, NUM_COLUMNS);
        if (!o->check) tlm_report_show(rep, "wrong", false);
        double total = 0;
        for (int i = 0; i < o->num_sizes; i++) total += size_cost(o, i);
        tlm_report_progress_total(rep, o->num_sizes, total);
    }
    tally t = {0};
    for (int i = 0; i < o->num_sizes; i++) {
        const uint64_t bytes = o->sizes[i];
        if (rep) {
            char label[64];
            snprintf(label, sizeof label, "%llu bytes", (unsigned long long)bytes);
            tlm_report_progress(rep, label, size_cost(o, i));
        }
        const tlm_allreduce_case k = {.bytes = bytes, .dtype = o->dtype, .op = o->op, .warmup = (int)o->warmup,
                                      .iters = (int)o->iters, .check = o->check};
        tlm_allreduce_result r;
        if (tlm_allreduce_bench_run(c, &k, &r) != TLM_OK) {
            rank_error(&w, "the all-reduce");
            tlm_report_close(rep, false);
            return leave(TLM_EXIT_FAILURE, false); /* the other ranks are told */
        }
        if (rep) {
            const char *algo = tlm_comm_all_reduce_algo(c, bytes / tlm_dtype_size(o->dtype), o->dtype);
            put_timing_row(rep, tlm_comm_kind_name(kind), algo, w.world_size, bytes, o, false, &r, &t);
            put_timing_row(rep, tlm_comm_kind_name(kind), algo, w.world_size, bytes, o, true, &r, &t);
        } else {
            t.wrong += r.status == TLM_OK ? (r.out_of_place.wrong > 0 ? r.out_of_place.wrong : 0) +
                                                (r.in_place.wrong > 0 ? r.in_place.wrong : 0)
                                          : 0;
        }
    }
    rc = t.wrong ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
    if (rep) {
        put_summary(rep, &t);
        if (tlm_report_close(rep, true) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            rc = TLM_EXIT_FAILURE;
        }
    }
    tlm_comm_destroy(c);
    tlm_backend_destroy(be);
    const int left = leave(TLM_EXIT_OK, true);
    return left != TLM_EXIT_OK ? left : rc;
}

/* ---- the sweep: this command under mpirun, per backend and process count ------------------------------------------ */

typedef struct {
    tlm_comm_kind kind;
    int nproc;
    char skip[200];      /* why it was not run; "" ran */
    char json[512];      /* its report */
    int exit_code;
    char command[1024];
} sweep_run;

static bool find_on_path(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char *copy = strdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d[0] ? d : ".", name);
        found = access(out, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* argv of `mpirun ... tlm allreduce <this run's flags> --format json --out json`; strings in store */
static int sweep_argv(const char *mpirun, const char *self, const cli_args *a, const opts *o, const sweep_run *sr,
                      char *store, size_t store_n, char **argv, int max) {
    int n = 0;
    size_t used = 0;
#define ARG(...)                                                                          \
    do {                                                                                  \
        argv[n++] = store + used;                                                         \
        used += (size_t)snprintf(store + used, store_n - used, __VA_ARGS__) + 1;          \
    } while (0)
    ARG("%s", mpirun);
    ARG("-np");
    ARG("%d", sr->nproc);
    if (geteuid() == 0) ARG("--allow-run-as-root");
    if (sr->kind == TLM_COMM_MPI) { /* the ranks' threads (shm) may use the host's cores: not one core each */
        ARG("--oversubscribe");
        ARG("--bind-to");
        ARG("none");
    }
    const char *extra = getenv("TLM_MPIRUN_FLAGS");
    char *copy = extra ? strdup(extra) : NULL, *save = NULL;
    for (char *t = copy ? strtok_r(copy, " ", &save) : NULL; t && n < max - 40; t = strtok_r(NULL, " ", &save))
        ARG("%s", t);
    free(copy);
    ARG("%s", self);
    ARG("allreduce");
    ARG("--backend");
    ARG("%s", tlm_comm_kind_name(sr->kind));
    ARG("--sizes");
    argv[n++] = store + used;
    for (int i = 0; i < o->num_sizes; i++)
        used += (size_t)snprintf(store + used, store_n - used, "%s%llu", i ? "," : "", (unsigned long long)o->sizes[i]);
    used++;
    ARG("--dtype");
    ARG("%s", dtype_text(o->dtype));
    ARG("--op");
    ARG("%s", tlm_reduce_op_name(o->op));
    ARG("--iters");
    ARG("%ld", o->iters);
    ARG("--warmup");
    ARG("%ld", o->warmup);
    ARG("--check");
    ARG("%s", o->check ? "on" : "off");
    ARG("--timeout");
    ARG("%g", o->timeout);
    if (sr->kind == TLM_COMM_MPI) {
        ARG("--mpi-algorithm");
        ARG("%s", tlm_mpi_algo_name(o->mpi_algo));
        if (o->shm_chunk) {
            ARG("--shm-chunk");
            ARG("%llu", (unsigned long long)o->shm_chunk);
        }
    }
    if (a->given[CLI_GPU] && sr->kind == TLM_COMM_NCCL) {
        ARG("--gpu");
        ARG("%d", a->gpu);
    }
    ARG("--format");
    ARG("json");
    ARG("--out");
    ARG("%s", sr->json);
#undef ARG
    argv[n] = NULL;
    TLM_ASSERT(used < store_n && n < max);
    return n;
}

/* runs argv with stdout to /dev/null (the child's table; its JSON goes to its --out); the exit code */
static int spawn(char **argv) {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO);
        execv(argv[0], argv);
        fprintf(stderr, "tlm allreduce --sweep: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
    cJSON *j = NULL;
    if (text && fread(text, 1, (size_t)len, f) == (size_t)len) {
        text[len] = '\0';
        j = cJSON_Parse(text);
    }
    free(text);
    fclose(f);
    return j;
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* a row of a run's report into the merged table, field by field */
static void copy_row(tlm_report *rep, const cJSON *row, tally *t) {
    tlm_report_row_begin(rep);
    for (int c = 0; c < NUM_COLUMNS; c++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, columns[c].key);
        if (!v || cJSON_IsNull(v)) continue;
        switch (columns[c].type) {
        case TLM_FIELD_STR: if (cJSON_IsString(v)) tlm_report_str(rep, columns[c].key, v->valuestring); break;
        case TLM_FIELD_INT: if (cJSON_IsNumber(v)) tlm_report_int(rep, columns[c].key, (int64_t)v->valuedouble); break;
        case TLM_FIELD_NUM: if (cJSON_IsNumber(v)) tlm_report_num(rep, columns[c].key, v->valuedouble); break;
        case TLM_FIELD_BOOL: if (cJSON_IsBool(v)) tlm_report_bool(rep, columns[c].key, cJSON_IsTrue(v)); break;
        }
    }
    const char *status = json_str(row, "status");
    const cJSON *wrong = cJSON_GetObjectItemCaseSensitive(row, "wrong");
    if (cJSON_IsNumber(wrong) && wrong->valuedouble > 0) t->wrong += (int64_t)wrong->valuedouble;
    if (status[0] && strcmp(status, "ok") != 0) tlm_report_status(rep, status, json_str(row, "error"));
    if (strcmp(status, "ok") == 0 || strcmp(status, "WRONG") == 0) {
        const cJSON *bw = cJSON_GetObjectItemCaseSensitive(row, "busbw_gb_per_s");
        t->busbw_sum += cJSON_IsNumber(bw) ? bw->valuedouble : 0;
        t->ok_rows++;
    } else {
        t->failed_rows++;
    }
    tlm_report_row_end(rep);
}

static void key_row(tlm_report *rep, const sweep_run *sr, const char *status, const char *error) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "backend", tlm_comm_kind_name(sr->kind));
    tlm_report_int(rep, "nranks", sr->nproc);
    tlm_report_status(rep, status, error);
    tlm_report_row_end(rep);
}

static int run_sweep(const cli_args *a, opts *o, int argc, char **argv) {
    char mpirun[1024], self[1024];
    if (!find_on_path("mpirun", mpirun, sizeof mpirun)) {
        cli_error(cmd, "--sweep: mpirun is not on PATH (install Open MPI: apt-get install openmpi-bin)");
        return TLM_EXIT_FAILURE;
    }
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        cli_error(cmd, "--sweep: cannot find this program (/proc/self/exe): %s", strerror(errno));
        return TLM_EXIT_FAILURE;
    }
    self[len] = '\0';
    const int gpus = tlm_cuda_device_count();
    sweep_run runs[2 * MAX_NPROC];
    int n = 0;
    for (int b = 0; b < o->num_backends; b++)
        for (int p = 0; p < o->num_nprocs; p++) {
            sweep_run *sr = &runs[n++];
            memset(sr, 0, sizeof *sr);
            sr->kind = o->backends[b];
            sr->nproc = o->nprocs[p];
            if (sr->kind == TLM_COMM_NCCL && !tlm_comm_have_nccl())
                snprintf(sr->skip, sizeof sr->skip, "this tlm was built without NCCL");
            else if (sr->kind == TLM_COMM_NCCL && sr->nproc > gpus)
                snprintf(sr->skip, sizeof sr->skip, "%d processes need %d GPUs (one per rank); %d visible on this host",
                         sr->nproc, sr->nproc, gpus);
        }
    const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int failures = 0;
    for (int i = 0; i < n; i++) {
        sweep_run *sr = &runs[i];
        if (sr->skip[0]) {
            fprintf(stderr, "tlm allreduce --sweep: [%d/%d] %s at %d processes: skipped: %s\n", i + 1, n,
                    tlm_comm_kind_name(sr->kind), sr->nproc, sr->skip);
            continue;
        }
        char pattern[256];
        snprintf(pattern, sizeof pattern, "%s/tlm-allreduce-XXXXXX", tmpdir);
        const int fd = mkstemp(pattern);
        if (fd < 0) {
            cli_error(cmd, "--sweep: a temporary file in %s: %s", tmpdir, strerror(errno));
            return TLM_EXIT_FAILURE;
        }
        close(fd);
        snprintf(sr->json, sizeof sr->json, "%s", pattern);
        char store[8192], *child[128];
        const int argn = sweep_argv(mpirun, self, a, o, sr, store, sizeof store, child, 128);
        size_t used = 0;
        for (int k = 0; k < argn && used < sizeof sr->command; k++)
            used += (size_t)snprintf(sr->command + used, sizeof sr->command - used, "%s%s", k ? " " : "", child[k]);
        fprintf(stderr, "tlm allreduce --sweep: [%d/%d] %s\n", i + 1, n, sr->command);
        sr->exit_code = spawn(child);
        failures += sr->exit_code != 0;
    }

    /* the merged report: every run's rows, a row for each run skipped or failed */
    tlm_report *rep = cli_open_report(cmd, a, "tlm allreduce", argc, argv);
    int rc = TLM_EXIT_FAILURE;
    if (rep) {
        cJSON *reports[2 * MAX_NPROC] = {0};
        const char *devices = "see each run below";
        for (int i = 0; i < n; i++)
            if (runs[i].json[0] && (reports[i] = read_json(runs[i].json)) && strcmp(devices, "see each run below") == 0)
                devices = json_str(reports[i], "device");
        char sweep_text[256];
        size_t used = (size_t)snprintf(sweep_text, sizeof sweep_text, "backends");
        for (int b = 0; b < o->num_backends; b++)
            used += (size_t)snprintf(sweep_text + used, sizeof sweep_text - used, "%s%s", b ? "," : " ",
                                     tlm_comm_kind_name(o->backends[b]));
        used += (size_t)snprintf(sweep_text + used, sizeof sweep_text - used, " x processes");
        for (int p = 0; p < o->num_nprocs && used < sizeof sweep_text; p++)
            used += (size_t)snprintf(sweep_text + used, sizeof sweep_text - used, "%s%d", p ? "," : " ", o->nprocs[p]);
        tlm_report_meta_str(rep, "device", devices[0] ? devices : "see each run below");
        tlm_report_meta_str(rep, "sweep", sweep_text);
        tlm_report_meta_int(rep, "gpus_visible", gpus);
        put_config_meta(rep, o);
        tlm_report_table(rep, "rows", columns, NUM_COLUMNS);
        if (!o->check) tlm_report_show(rep, "wrong", false);
        tally t = {0};
        for (int i = 0; i < n; i++) {
            const cJSON *rows = reports[i] ? cJSON_GetObjectItemCaseSensitive(reports[i], "rows") : NULL;
            if (runs[i].skip[0]) {
                key_row(rep, &runs[i], "skipped", runs[i].skip);
                t.skipped_rows++;
            } else if (cJSON_IsArray(rows) && cJSON_GetArraySize(rows) > 0) {
                const cJSON *row;
                cJSON_ArrayForEach(row, rows) copy_row(rep, row, &t);
            } else {
                char why[128];
                snprintf(why, sizeof why, "the run exited with status %d and wrote no rows (its messages are above)",
                         runs[i].exit_code);
                key_row(rep, &runs[i], "failed", why);
                t.failed_rows++;
            }
        }
        for (int i = 0; i < n; i++) {
            char text[6144];
            const sweep_run *sr = &runs[i];
            if (sr->skip[0])
                snprintf(text, sizeof text, "%s at %d processes: skipped: %s", tlm_comm_kind_name(sr->kind), sr->nproc,
                         sr->skip);
            else
                snprintf(text, sizeof text, "%s at %d processes: exit %d; %s; devices: %s; links: %s; command: %s",
                         tlm_comm_kind_name(sr->kind), sr->nproc, sr->exit_code,
                         reports[i] ? json_str(reports[i], "ranks") : "-",
                         reports[i] ? json_str(reports[i], "devices") : "-",
                         reports[i] ? json_str(reports[i], "links") : "-", sr->command);
            tlm_report_list(rep, "runs", text);
        }
        put_summary(rep, &t);
        rc = t.wrong || failures ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
        if (tlm_report_close(rep, true) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            rc = TLM_EXIT_FAILURE;
        }
        for (int i = 0; i < n; i++) cJSON_Delete(reports[i]);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].json[0]) unlink(runs[i].json);
    return rc;
}

/* ---- the command ---------------------------------------------------------------------------------------------- */

int cmd_allreduce(int argc, char **argv) {
    opts given = {.dtype = TLM_DTYPE_F32, .op = TLM_REDUCE_SUM, .iters = 20, .warmup = 5, .check = true, .timeout = 60};
    opts *o = &given;
    cli_args a;
    int rc = cli_parse(&allreduce_cmd, o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    const bool on_cpu = a.device && strcmp(a.device, "cpu") == 0, on_cuda = a.device && strcmp(a.device, "cuda") == 0;
    const bool nccl_here = tlm_comm_have_nccl() && !on_cpu && (on_cuda || tlm_cuda_available());
    if (o->num_backends == 0) {
        o->backends[o->num_backends++] = nccl_here ? TLM_COMM_NCCL : TLM_COMM_MPI;
        if (o->sweep && nccl_here) o->backends[o->num_backends++] = TLM_COMM_MPI;
    }
    bool has[2] = {false, false};
    for (int b = 0; b < o->num_backends; b++) has[o->backends[b]] = true;
    if (o->num_backends > 1 && !o->sweep) {
        cli_error(cmd, "--backend takes one value without --sweep (under mpirun, one run is one backend)");
    } else if (o->num_nprocs && !o->sweep) {
        cli_error(cmd, "--nproc goes with --sweep (under mpirun, -np sets the number of processes)");
    } else if (o->sweep && tlm_comm_launched()) {
        cli_error(cmd, "--sweep starts mpirun itself: run it without mpirun, srun or mpiexec");
    } else if (on_cuda && has[TLM_COMM_MPI] && !o->sweep) {
        cli_error(cmd, "--device cuda conflicts with --backend mpi: the MPI communicator reduces host buffers");
    } else if (on_cpu && has[TLM_COMM_NCCL]) {
        cli_error(cmd, "--device cpu conflicts with --backend nccl: NCCL reduces GPU buffers");
    } else if (a.given[CLI_GPU] && !has[TLM_COMM_NCCL]) {
        cli_error(cmd, "--gpu conflicts with --backend mpi: the MPI communicator uses no GPU");
    } else if ((o->given_algo || o->given_chunk) && !has[TLM_COMM_MPI]) {
        cli_error(cmd, "%s conflicts with --backend nccl: it chooses the MPI backend's all-reduce",
                  o->given_algo ? "--mpi-algorithm" : "--shm-chunk");
    } else if (o->given_chunk && o->mpi_algo == TLM_MPI_ALGO_MPI) {
        cli_error(cmd, "--shm-chunk conflicts with --mpi-algorithm mpi: the chunk is the shm schedule's");
    } else if (make_sizes(o)) {
        rc = -1;
        for (int i = 0; i < o->num_sizes && has[TLM_COMM_MPI]; i++)
            if (o->sizes[i] / tlm_dtype_size(o->dtype) > 2147483647ULL) {
                cli_error(cmd, "size %llu bytes: MPI counts are int, at most 2147483647 elements per all-reduce",
                          (unsigned long long)o->sizes[i]);
                rc = TLM_EXIT_USAGE;
                break;
            }
    }
    if (rc == -1) {
        if (!o->num_nprocs) {
            static const int defaults[] = {2, 4, 6};
            for (int i = 0; i < 3; i++) o->nprocs[o->num_nprocs++] = defaults[i];
        }
        rc = o->sweep ? run_sweep(&a, o, argc, argv) : run_once(&a, o, argc, argv);
    }
    cli_args_free(&a);
    return rc;
}
