/* cmd_allreduce.c — `tlm allreduce`: the communication benchmark (docs/experiments.md) in nccl-tests'
 * conventions, run under a launcher (`mpirun -np 4 tlm allreduce`), or `--sweep`, which starts itself
 * under mpirun for each backend and process count and merges the runs into one report. This file reads
 * the flags; the runs are src/bench/allreduce_launch.c's (allreduce_bench.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/allreduce_bench.h"
#include "tlm/comm.h"

#define MAX_SIZES TLM_ALLREDUCE_MAX_SIZES
#define MAX_NPROC TLM_ALLREDUCE_MAX_NPROC

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
        "All-reduce benchmark in nccl-tests' conventions: per size, out-of-place and in-place\n"
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

/* the report of --format and --out, for the run (rank 0) or the sweep */
typedef struct {
    const cli_args *a;
    int argc;
    char **argv;
} report_target;

static tlm_report *open_report(void *user) {
    const report_target *t = user;
    return cli_open_report(cmd, t->a, "tlm allreduce", t->argc, t->argv);
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
    } else if (!o->sweep && has[TLM_COMM_NCCL] && !(tlm_comm_have_nccl() && tlm_cuda_available())) {
        cli_error(cmd, "--backend nccl needs %s: NCCL reduces GPU buffers; on CPU processes use --backend mpi",
                  !tlm_comm_have_nccl() ? "a tlm built with NCCL (this one is not)" : "a GPU, and none was found");
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
        tlm_allreduce_options lo = {.num_sizes = o->num_sizes, .num_backends = o->num_backends, .dtype = o->dtype,
                                    .op = o->op, .iters = o->iters, .warmup = o->warmup, .check = o->check,
                                    .timeout = o->timeout, .mpi_algo = o->mpi_algo, .shm_chunk = o->shm_chunk,
                                    .num_nprocs = o->num_nprocs, .given_gpu = a.given[CLI_GPU], .gpu = a.gpu};
        memcpy(lo.sizes, o->sizes, sizeof lo.sizes);
        memcpy(lo.backends, o->backends, sizeof lo.backends);
        memcpy(lo.nprocs, o->nprocs, sizeof lo.nprocs);
        report_target t = {&a, argc, argv};
        rc = o->sweep ? tlm_allreduce_sweep(&lo, open_report, &t) : tlm_allreduce_run(&lo, open_report, &t);
    }
    cli_args_free(&a);
    return rc;
}
