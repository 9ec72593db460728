/* allreduce_launch.c — the runs of `tlm allreduce` (allreduce_bench.h): one run on every rank of a
 * launcher's world (the backend and communicator of each rank, the same configuration checked on
 * every rank, each size measured, rank 0's report), and the sweep, which starts this program under
 * mpirun for each backend and process count and merges the runs' JSON reports into one. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench/allreduce_internal.h"
#include "io/input.h"
#include "tlm/allreduce_bench.h"
#include "tlm/backend.h"
#include "tlm/comm.h"
#include "tlm/tuning.h"
#include "tlm/util.h"

enum { RUN_OK = 0, RUN_FAILED = 1, RUN_USAGE = 2 };

/* "tlm allreduce: <message>" on stderr */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tlm allreduce: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* the report's device fields, as every command writes them */
static void report_device(tlm_report *rep, const tlm_backend *be) {
    tlm_report_meta_str(rep, "device", be->description);
    tlm_report_meta_int(rep, "threads", omp_get_max_threads());
}

/* ---- one run, on every rank ---------------------------------------------------------------------------------- */

/* "rank 3 (host): message" on stderr, for an error of this rank alone */
static void rank_error(const tlm_comm_world *w, const char *what) {
    if (w->world_size > 1) say("rank %d (%s): %s: %s", w->rank, w->host, what, tlm_last_error());
    else say("%s: %s", what, tlm_last_error());
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
static double size_cost(const tlm_allreduce_options *o, int i) { return (double)o->sizes[i] * (o->warmup + 2 * o->iters + 2 * o->check); }

/* ends the run: symmetric failures (every rank saw them) leave cleanly; a rank failing alone exits,
 * and the communication layer tells the others */
static int leave(int rc, bool symmetric) {
    if (rc == RUN_OK || symmetric) {
        if (tlm_comm_finalize() != TLM_OK) {
            say("leaving the run: %s", tlm_last_error());
            return RUN_FAILED;
        }
    }
    return rc;
}

int tlm_allreduce_run(const tlm_allreduce_options *o, tlm_allreduce_open_report open_report, void *user) {
    tlm_comm_world w;
    if (tlm_comm_init(&w, o->timeout) != TLM_OK) {
        say("joining the run: %s", tlm_last_error());
        return RUN_FAILED;
    }
    const tlm_comm_kind kind = o->backends[0];
    /* one GPU per rank: --gpu + the local rank, among the visible GPUs; a rank that sees a single GPU (Slurm's
     * --gpus-per-task=1 sets CUDA_VISIBLE_DEVICES so) uses it */
    const int gpu = (o->given_gpu ? o->gpu : 0) + (tlm_cuda_device_count() == 1 ? 0 : w.local_rank);
    tlm_backend *be = NULL;
    tlm_status s = kind == TLM_COMM_MPI ? tlm_backend_cpu_create(&be, 1) : tlm_backend_cuda_create(&be, gpu);
    if (s != TLM_OK) {
        rank_error(&w, kind == TLM_COMM_NCCL ? "the GPU of this rank (--gpu + local rank)" : "the CPU backend");
        return leave(RUN_FAILED, false);
    }
    tlm_comm *c = NULL;
    s = tlm_comm_create(&c, kind, be, o->timeout);
    if (s != TLM_OK) {
        /* failures every rank learned of (the creation's agreement) leave together; a failing library call may be
         * this rank's alone */
        if (w.rank == 0 || s == TLM_ERR_BACKEND) rank_error(&w, "the communicator");
        tlm_backend_destroy(be);
        return leave(RUN_FAILED, s != TLM_ERR_BACKEND);
    }
    /* the same configuration on every rank, before the first all-reduce */
    char config[2048];
    size_t used = (size_t)snprintf(config, sizeof config, "backend %s mpi-algorithm %s shm-chunk %llu dtype %s op %s "
                                   "warmup %ld iters %ld check %d sizes", tlm_comm_kind_name(kind),
                                   tlm_mpi_algo_name(o->mpi_algo), (unsigned long long)o->shm_chunk, tlm_allreduce_dtype_text(o->dtype),
                                   tlm_reduce_op_name(o->op), o->warmup, o->iters, o->check);
    for (int i = 0; i < o->num_sizes && used < sizeof config; i++)
        used += (size_t)snprintf(config + used, sizeof config - used, "%s%llu", i ? "," : " ",
                                 (unsigned long long)o->sizes[i]);
    if (tlm_comm_check_same(c, "the benchmark's configuration (flags)", config) != TLM_OK) {
        if (w.rank == 0) say("%s", tlm_last_error());
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(RUN_USAGE, true);
    }
    if (kind == TLM_COMM_MPI && tlm_comm_set_mpi_algo(c, o->mpi_algo, o->shm_chunk) != TLM_OK) {
        if (w.rank == 0) say("--mpi-algorithm %s: %s", tlm_mpi_algo_name(o->mpi_algo), tlm_last_error());
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(RUN_FAILED, true);
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
    int rc = RUN_FAILED;
    tlm_report *rep = NULL;
    if (gather_devices(c, mine, devices, sizeof devices) != TLM_OK) {
        rank_error(&w, "gathering the devices");
        return leave(rc, false);
    }
    tlm_comm_describe_hosts(hosts, sizeof hosts);
    if (w.rank == 0) {
        if (kind == TLM_COMM_NCCL) tlm_comm_describe_links(links, sizeof links);
        rep = open_report(user);
    }
    if (!all_ok(c, w.rank != 0 || rep)) { /* rank 0 said why */
        tlm_comm_destroy(c);
        tlm_backend_destroy(be);
        return leave(RUN_FAILED, true);
    }
    if (rep) {
        report_device(rep, be);
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
        tlm_allreduce_report_begin(rep, o);
        double total = 0;
        for (int i = 0; i < o->num_sizes; i++) total += size_cost(o, i);
        tlm_report_progress_total(rep, o->num_sizes, total);
    }
    tlm_allreduce_tally t = {0};
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
            return leave(RUN_FAILED, false); /* the other ranks are told */
        }
        if (rep) {
            const char *algo = tlm_comm_all_reduce_algo(c, bytes / tlm_dtype_size(o->dtype), o->dtype);
            tlm_allreduce_report_row(rep, tlm_comm_kind_name(kind), algo, w.world_size, bytes, o, false, &r, &t);
            tlm_allreduce_report_row(rep, tlm_comm_kind_name(kind), algo, w.world_size, bytes, o, true, &r, &t);
        } else {
            t.wrong += r.status == TLM_OK ? (r.out_of_place.wrong > 0 ? r.out_of_place.wrong : 0) +
                                                (r.in_place.wrong > 0 ? r.in_place.wrong : 0)
                                          : 0;
        }
    }
    rc = t.wrong ? RUN_FAILED : RUN_OK;
    if (rep) {
        tlm_allreduce_report_summary(rep, &t);
        if (tlm_report_close(rep, true) != TLM_OK) {
            say("%s", tlm_last_error());
            rc = RUN_FAILED;
        }
    }
    tlm_comm_destroy(c);
    tlm_backend_destroy(be);
    const int left = leave(RUN_OK, true);
    return left != RUN_OK ? left : rc;
}

/* ---- the sweep: this program under mpirun, per backend and process count ------------------------------------ */

typedef struct {
    tlm_comm_kind kind;
    int nproc;
    char skip[200];      /* why it was not run; "" ran */
    char json[512];      /* its report */
    int exit_code;
    char command[1024];
} sweep_run;

/* argv of `mpirun ... tlm allreduce <this run's flags> --format json --out json`; strings in store */
static int sweep_argv(const char *mpirun, const char *self, const tlm_allreduce_options *o, const sweep_run *sr,
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
    const char *extra = tlm_knob_str(TLM_KNOB_MPIRUN_FLAGS);
    char *copy = extra[0] ? strdup(extra) : NULL, *save = NULL;
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
    ARG("%s", tlm_allreduce_dtype_text(o->dtype));
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
    if (o->given_gpu && sr->kind == TLM_COMM_NCCL) {
        ARG("--gpu");
        ARG("%d", o->gpu);
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

/* a run's report (JSON, at most 1 GiB); NULL when unreadable or not JSON */
static cJSON *read_json(const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (tlm_input_read_text(path, (uint64_t)1 << 30, &text, &len) != TLM_OK) return NULL;
    cJSON *j = len > 0 ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    return j;
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* a row of a run's report into the merged table, field by field */
static void copy_row(tlm_report *rep, const cJSON *row, tlm_allreduce_tally *t) {
    tlm_report_row_begin(rep);
    for (int c = 0; c < tlm_allreduce_num_columns; c++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, tlm_allreduce_columns[c].key);
        if (!v || cJSON_IsNull(v)) continue;
        switch (tlm_allreduce_columns[c].type) {
        case TLM_FIELD_STR: if (cJSON_IsString(v)) tlm_report_str(rep, tlm_allreduce_columns[c].key, v->valuestring); break;
        case TLM_FIELD_INT: if (cJSON_IsNumber(v)) tlm_report_int(rep, tlm_allreduce_columns[c].key, (int64_t)v->valuedouble); break;
        case TLM_FIELD_NUM: if (cJSON_IsNumber(v)) tlm_report_num(rep, tlm_allreduce_columns[c].key, v->valuedouble); break;
        case TLM_FIELD_BOOL: if (cJSON_IsBool(v)) tlm_report_bool(rep, tlm_allreduce_columns[c].key, cJSON_IsTrue(v)); break;
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

int tlm_allreduce_sweep(const tlm_allreduce_options *o, tlm_allreduce_open_report open_report, void *user) {
    char mpirun[1024], self[1024];
    if (!tlm_find_program("mpirun", mpirun, sizeof mpirun)) {
        say("--sweep: mpirun is not on PATH (install Open MPI: apt-get install openmpi-bin)");
        return RUN_FAILED;
    }
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        say("--sweep: cannot find this program (/proc/self/exe): %s", strerror(errno));
        return RUN_FAILED;
    }
    self[len] = '\0';
    const int gpus = tlm_cuda_device_count();
    sweep_run runs[2 * TLM_ALLREDUCE_MAX_NPROC];
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
            say("--sweep: a temporary file in %s: %s", tmpdir, strerror(errno));
            return RUN_FAILED;
        }
        close(fd);
        snprintf(sr->json, sizeof sr->json, "%s", pattern);
        char store[8192], *child[128];
        const int argn = sweep_argv(mpirun, self, o, sr, store, sizeof store, child, 128);
        size_t used = 0;
        for (int k = 0; k < argn && used < sizeof sr->command; k++)
            used += (size_t)snprintf(sr->command + used, sizeof sr->command - used, "%s%s", k ? " " : "", child[k]);
        fprintf(stderr, "tlm allreduce --sweep: [%d/%d] %s\n", i + 1, n, sr->command);
        sr->exit_code = spawn(child);
        failures += sr->exit_code != 0;
    }

    /* the merged report: every run's rows, a row for each run skipped or failed */
    tlm_report *rep = open_report(user);
    int rc = RUN_FAILED;
    if (rep) {
        cJSON *reports[2 * TLM_ALLREDUCE_MAX_NPROC] = {0};
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
        tlm_allreduce_report_begin(rep, o);
        tlm_allreduce_tally t = {0};
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
        tlm_allreduce_report_summary(rep, &t);
        rc = t.wrong || failures ? RUN_FAILED : RUN_OK;
        if (tlm_report_close(rep, true) != TLM_OK) {
            say("%s", tlm_last_error());
            rc = RUN_FAILED;
        }
        for (int i = 0; i < n; i++) cJSON_Delete(reports[i]);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].json[0]) unlink(runs[i].json);
    return rc;
}
