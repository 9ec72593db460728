/* comm.c — the communication layer's front (comm.h): joining the run (MPI), the communicators'
 * creation, argument checks and dispatch to MPI (mpi_comm.c) or NCCL (nccl_comm.cu), every wait
 * watched (watchdog.c), the host exchanges, and the exit hook that tells the other ranks when this
 * one leaves early. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/nccl_comm.h"
#include "comm/shm_allreduce.h"

/* ---- names -------------------------------------------------------------------------------------------- */

static const char *const kind_names[] = {"mpi", "nccl"};
static const char *const op_names[] = {"sum", "avg"};

const char *tlm_comm_kind_name(tlm_comm_kind k) { return (unsigned)k < 2 ? kind_names[k] : "?"; }
const char *tlm_reduce_op_name(tlm_reduce_op op) { return (unsigned)op < 2 ? op_names[op] : "?"; }

bool tlm_comm_kind_parse(const char *name, tlm_comm_kind *out) {
    for (int i = 0; i < 2; i++)
        if (strcmp(name, kind_names[i]) == 0) return (*out = (tlm_comm_kind)i), true;
    return false;
}

bool tlm_reduce_op_parse(const char *name, tlm_reduce_op *out) {
    for (int i = 0; i < 2; i++)
        if (strcmp(name, op_names[i]) == 0) return (*out = (tlm_reduce_op)i), true;
    return false;
}

bool tlm_comm_have_nccl(void) { return tlm_nccl_built(); }
const char *tlm_comm_nccl_version(void) { return tlm_nccl_version_string(); }

const char *tlm_comm_mpi_version(void) {
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (!v[0] && MPI_Get_library_version(v, &len) == MPI_SUCCESS) v[strcspn(v, "\n")] = '\0';
    return v[0] ? v : "unknown";
}

tlm_status tlm_mpi_fail(int rc, const char *call) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error code %d", rc);
    return tlm_fail(TLM_ERR_BACKEND, "MPI: %s failed: %s", call, text);
}

/* ---- the world ------------------------------------------------------------------------------------------ */

static struct {
    bool inited, finalized, exit_hook;
    tlm_comm_world w;
    char (*hosts)[64]; /* (world_size) every rank's host */
} g;

bool tlm_comm_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return getenv("SLURM_PROCID") && getenv("SLURM_STEP_ID");
}

/* A rank that exits while the run lives tells the others why (its last error); a world of one just
 * finalizes. */
static void at_exit(void) {
    if (!g.inited || g.finalized) return;
    int done = 1;
    if (MPI_Finalized(&done) != MPI_SUCCESS || done) return;
    if (g.w.world_size == 1) {
        tlm_watchdog_stop();
        tlm_mpi_free_ops();
        MPI_Finalize();
        return;
    }
    const char *why = tlm_last_error();
    char text[240];
    snprintf(text, sizeof text, "it exited%s%s", why[0] ? ": " : " without an error message", why);
    tlm_watchdog_leave(text);
}

/* A watched blocking MPI call on the host. */
#define WATCHED(what, bytes, call)                      \
    do {                                                \
        tlm_watchdog_begin((what), (bytes));            \
        int rc_ = (call);                               \
        tlm_watchdog_end();                             \
        if (rc_ != MPI_SUCCESS) return tlm_mpi_fail(rc_, #call); \
    } while (0)

tlm_status tlm_comm_init(tlm_comm_world *w, double timeout_s) {
    if (g.inited) {
        if (w) *w = g.w;
        return TLM_OK;
    }
    if (!(timeout_s > 0)) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the communication timeout must be > 0 s");
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    TLM_MPI_TRY(MPI_Initialized(&initialized));
    /* srun starts every task itself; MPI joins them into one world only through the process-management
     * interface srun offers them (PMIx: PMIX_RANK; PMI-2: PMI_RANK). Without one (srun --mpi=none, a
     * cluster's MpiDefault=none) Open MPI aborts in MPI_Init saying it was built without Slurm's PMI,
     * other MPIs run each task as a world of its own. */
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (!initialized && getenv("SLURM_STEP_ID") && tasks && atoi(tasks) > 1 && !getenv("PMIX_RANK") &&
        !getenv("PMI_RANK") && !getenv("OMPI_COMM_WORLD_SIZE"))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "srun started %s tasks without a process-management interface for MPI (srun --mpi=none, or "
                        "the cluster's MpiDefault), so they cannot join one run: start them with srun --mpi=pmix "
                        "(srun --mpi=list names what the cluster has)", tasks);
    if (!initialized) {
        const int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) return tlm_fail(TLM_ERR_BACKEND, "MPI: MPI_Init_thread failed (code %d)", rc);
    } else {
        TLM_MPI_TRY(MPI_Query_thread(&provided));
    }
    TLM_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    tlm_comm_world *cw = &g.w;
    memset(cw, 0, sizeof *cw);
    TLM_MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &cw->rank));
    TLM_MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &cw->world_size));
    cw->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    TLM_MPI_TRY(MPI_Get_processor_name(name, &len));
    snprintf(cw->host, sizeof cw->host, "%.63s", name);
    g.inited = true;
    if (!g.exit_hook) {
        atexit(at_exit);
        g.exit_hook = true;
    }
    TLM_TRY(tlm_watchdog_start(timeout_s, cw->thread_multiple, cw->rank, cw->world_size, cw->host));

    MPI_Comm node;
    WATCHED("finding the local ranks", 0,
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    TLM_MPI_TRY(MPI_Comm_rank(node, &cw->local_rank));
    TLM_MPI_TRY(MPI_Comm_size(node, &cw->local_size));
    TLM_MPI_TRY(MPI_Comm_free(&node));
    g.hosts = calloc((size_t)cw->world_size, sizeof *g.hosts);
    if (!g.hosts) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory (host names)");
    WATCHED("gathering the host names", sizeof *g.hosts,
            MPI_Allgather(cw->host, sizeof *g.hosts, MPI_BYTE, g.hosts, sizeof *g.hosts, MPI_BYTE, MPI_COMM_WORLD));
    cw->num_hosts = 0;
    for (int r = 0; r < cw->world_size; r++) {
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = strcmp(g.hosts[q], g.hosts[r]) == 0;
        cw->num_hosts += !seen;
    }
    if (w) *w = *cw;
    return TLM_OK;
}

tlm_status tlm_comm_finalize(void) {
    if (!g.inited || g.finalized) return TLM_OK;
    tlm_status s = TLM_OK;
    tlm_watchdog_begin("the final barrier", 0);
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    tlm_watchdog_end();
    if (rc != MPI_SUCCESS) s = tlm_mpi_fail(rc, "MPI_Barrier (finalize)");
    tlm_watchdog_stop();
    tlm_mpi_free_ops();
    g.finalized = true;
    rc = MPI_Finalize();
    free(g.hosts);
    g.hosts = NULL;
    if (rc != MPI_SUCCESS && s == TLM_OK) s = tlm_fail(TLM_ERR_BACKEND, "MPI: MPI_Finalize failed (code %d)", rc);
    return s;
}

void tlm_comm_describe_hosts(char *buf, size_t n) {
    if (!g.inited || !g.hosts) {
        snprintf(buf, n, "1 rank (no launcher)");
        return;
    }
    const int size = g.w.world_size;
    size_t used = (size_t)snprintf(buf, n, "%d rank%s on %d host%s:", size, size == 1 ? "" : "s", g.w.num_hosts,
                                   g.w.num_hosts == 1 ? "" : "s");
    for (int r = 0; r < size; r++) {
        bool first = true;
        for (int q = 0; q < r && first; q++) first = strcmp(g.hosts[q], g.hosts[r]) != 0;
        if (!first) continue;
        /* this host's ranks as ranges: "0-3,8" */
        char ranks[256] = "";
        size_t k = 0;
        int count = 0;
        for (int q = r; q < size; q++) {
            if (strcmp(g.hosts[q], g.hosts[r]) != 0) continue;
            int end = q;
            while (end + 1 < size && strcmp(g.hosts[end + 1], g.hosts[r]) == 0) end++;
            if (k < sizeof ranks) k += (size_t)snprintf(ranks + k, sizeof ranks - k, count ? ",%d" : "%d", q);
            if (end > q && k < sizeof ranks) k += (size_t)snprintf(ranks + k, sizeof ranks - k, "-%d", end);
            count += end - q + 1;
            q = end;
        }
        if (used < n)
            used += (size_t)snprintf(buf + used, n - used, "%s %s (rank%s %s)", r ? "," : "", g.hosts[r],
                                     count > 1 ? "s" : "", ranks);
    }
}

/* `nvidia-smi topo -m`: a header of column names (GPU0, GPU1, NIC0, CPU Affinity, ...) separated by
 * tabs, then a row per device ("GPU0\t X \tNV18\t..."), then a legend. The GPU pairs, or false. */
static bool topo_links(char *buf, size_t n) {
    FILE *p = popen("nvidia-smi topo -m 2>/dev/null", "r");
    if (!p) return false;
    char line[4096], *cols[64];
    int ncols = 0, ngpus = 0;
    size_t used = 0;
    buf[0] = '\0';
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *tok[64];
        int nt = 0;
        for (char *save = NULL, *t = strtok_r(line, "\t", &save); t && nt < 64; t = strtok_r(NULL, "\t", &save)) {
            while (*t == ' ') t++;
            for (char *e = t + strlen(t); e > t && e[-1] == ' ';) *--e = '\0';
            tok[nt++] = t;
        }
        if (nt == 0) continue;
        if (ncols == 0 && strncmp(tok[0], "GPU", 3) == 0 && nt > 1) { /* the header (no row name) */
            for (int i = 0; i < nt; i++) cols[ncols++] = strdup(tok[i]);
            continue;
        }
        if (ncols == 0 || strncmp(tok[0], "GPU", 3) != 0) continue;
        ngpus++;
        for (int c = 0; c + 1 < nt && c < ncols; c++) /* row token c+1 is column c */
            if (strncmp(cols[c], "GPU", 3) == 0 && atoi(cols[c] + 3) > atoi(tok[0] + 3) && used < n)
                used += (size_t)snprintf(buf + used, n - used, "%s%s-%s %s", used ? ", " : "", tok[0], cols[c],
                                         tok[c + 1]);
    }
    for (int i = 0; i < ncols; i++) free(cols[i]);
    const int rc = pclose(p);
    if (rc != 0 || ngpus == 0) return false;
    if (ngpus == 1) snprintf(buf, n, "1 GPU: no links");
    return true;
}

void tlm_comm_describe_links(char *buf, size_t n) {
    if (topo_links(buf, n)) return;
    tlm_nccl_peer_links(buf, n);
}

/* ---- a communicator --------------------------------------------------------------------------------------- */

/* Every rank's (ok, kind): the ranks agree or all fail. `mine_ok` false: this rank's message is set. */
static tlm_status agree_on_creation(tlm_comm_kind kind, bool mine_ok) {
    const int size = g.w.world_size;
    int mine[2] = {mine_ok, (int)kind};
    int *all = malloc(sizeof(int) * 2 * (size_t)size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    char my_error[512];
    snprintf(my_error, sizeof my_error, "%s", tlm_last_error());
    tlm_watchdog_begin("the communicator's creation", sizeof mine);
    const int rc = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    tlm_watchdog_end();
    if (rc != MPI_SUCCESS) {
        free(all);
        return tlm_mpi_fail(rc, "MPI_Allgather (communicator kinds)");
    }
    tlm_status s = TLM_OK;
    for (int r = 0; r < size && s == TLM_OK; r++) {
        if (!all[2 * r])
            s = r == g.w.rank ? tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s", my_error)
                              : tlm_fail(TLM_ERR_INVALID_ARGUMENT, "rank %d could not create its %s communicator "
                                                                   "(its own message says why)", r,
                                         tlm_comm_kind_name((tlm_comm_kind)all[2 * r + 1]));
        else if (all[2 * r + 1] != (int)kind)
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the ranks disagree on the communicator: rank %d asks for %s, rank %d "
                         "for %s", g.w.rank, tlm_comm_kind_name(kind), r,
                         tlm_comm_kind_name((tlm_comm_kind)all[2 * r + 1]));
    }
    free(all);
    return s;
}

/* NCCL: no two ranks of one host on the same GPU (NCCL refuses them; say which). */
static tlm_status check_gpus(tlm_comm *c, const char *bus_id) {
    const int size = g.w.world_size;
    char(*ids)[32] = calloc((size_t)size, sizeof *ids);
    if (!ids) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    char mine[32] = "";
    snprintf(mine, sizeof mine, "%s", bus_id);
    tlm_status s = tlm_comm_host_all_gather(c, mine, ids, sizeof mine);
    for (int r = 0; r < size && s == TLM_OK; r++)
        for (int q = 0; q < r && s == TLM_OK; q++)
            if (strcmp(ids[q], ids[r]) == 0 && strcmp(g.hosts[q], g.hosts[r]) == 0)
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "ranks %d and %d both use GPU %s on %s: NCCL needs one GPU per "
                             "rank (run at most as many processes per host as it has GPUs)", q, r, ids[r], g.hosts[r]);
    free(ids);
    return s;
}

static tlm_status seam_all_reduce(tlm_comm *c, tlm_backend *be, float *buf, size_t count) {
    (void)be;
    return tlm_comm_all_reduce(c, buf, buf, count, TLM_DTYPE_F32, TLM_REDUCE_SUM, NULL);
}

tlm_status tlm_comm_create(tlm_comm **out, tlm_comm_kind kind, tlm_backend *be, double timeout_s) {
    *out = NULL;
    TLM_TRY(tlm_comm_init(NULL, timeout_s));
    /* this rank's checks first; then every rank learns whether all passed (no rank left waiting) */
    tlm_status local = TLM_OK;
    char bus_id[32] = "";
    if ((unsigned)kind > TLM_COMM_NCCL)
        local = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown communicator kind %d", (int)kind);
    else if (kind == TLM_COMM_MPI && be->kind != TLM_DEVICE_CPU)
        local = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the MPI communicator reduces host buffers: it needs the CPU "
                         "backend, not %s (NCCL is the communicator for GPU buffers)", be->name);
    else if (kind == TLM_COMM_NCCL && be->kind != TLM_DEVICE_CUDA && tlm_nccl_built())
        local = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the NCCL communicator needs the CUDA backend (GPU buffers), not %s",
                         be->name);
    else if (kind == TLM_COMM_NCCL)
        local = tlm_nccl_bus_id(be, bus_id, sizeof bus_id); /* without NCCL: "built without NCCL" */
    TLM_TRY(agree_on_creation(kind, local == TLM_OK));

    tlm_comm *c = calloc(1, sizeof *c);
    tlm_comm_state *st = calloc(1, sizeof *st);
    if (!c || !st) {
        free(c);
        free(st);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory (communicator)");
    }
    st->magic = TLM_COMM_MAGIC;
    st->mpi = MPI_COMM_NULL;
    *c = (tlm_comm){.rank = g.w.rank, .world_size = g.w.world_size, .impl = st, .all_reduce_sum_f32 = seam_all_reduce,
                    .local_rank = g.w.local_rank, .local_size = g.w.local_size, .kind = kind, .be = be};
    tlm_status s = TLM_OK;
    tlm_watchdog_begin("MPI_Comm_dup", 0);
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &st->mpi);
    tlm_watchdog_end();
    if (rc != MPI_SUCCESS) {
        st->mpi = MPI_COMM_NULL;
        s = tlm_mpi_fail(rc, "MPI_Comm_dup");
    }
    if (s == TLM_OK && kind == TLM_COMM_NCCL) {
        s = check_gpus(c, bus_id);
        unsigned char id[TLM_NCCL_ID_BYTES] = {0};
        int id_ok = 1;
        if (s == TLM_OK && c->rank == 0) id_ok = tlm_nccl_get_id(id) == TLM_OK;
        char id_error[512];
        snprintf(id_error, sizeof id_error, "%s", tlm_last_error());
        if (s == TLM_OK) {
            tlm_watchdog_begin("the NCCL unique id's broadcast", sizeof id);
            rc = MPI_Bcast(&id_ok, 1, MPI_INT, 0, st->mpi);
            if (rc == MPI_SUCCESS) rc = MPI_Bcast(id, sizeof id, MPI_BYTE, 0, st->mpi);
            tlm_watchdog_end();
            if (rc != MPI_SUCCESS) s = tlm_mpi_fail(rc, "MPI_Bcast (the NCCL unique id)");
            else if (!id_ok)
                s = c->rank == 0 ? tlm_fail(TLM_ERR_BACKEND, "%s", id_error)
                                 : tlm_fail(TLM_ERR_BACKEND, "rank 0 could not make NCCL's unique id (its message says why)");
        }
        if (s == TLM_OK) {
            tlm_watchdog_begin("ncclCommInitRank", 0);
            s = tlm_nccl_init((tlm_nccl **)&st->nccl, id, c->world_size, c->rank, be);
            tlm_watchdog_end();
        }
    }
    if (s == TLM_OK && kind == TLM_COMM_MPI) {
        tlm_watchdog_begin("the shared-memory segment's creation", 0);
        s = tlm_mpi_setup_shm(st, &g.w);
        tlm_watchdog_end();
    }
    if (s != TLM_OK) {
        tlm_shm_destroy(st->shm);
        if (st->mpi != MPI_COMM_NULL) MPI_Comm_free(&st->mpi);
        free(st);
        free(c);
        return s;
    }
    *out = c;
    return TLM_OK;
}

void tlm_comm_destroy(tlm_comm *c) {
    if (!c) return;
    tlm_comm_state *st = tlm_comm_state_of(c);
    if (st->nccl) {
        (void)tlm_comm_synchronize(c, NULL);
        tlm_watchdog_wait("ncclCommDestroy");
        tlm_nccl_destroy((tlm_nccl *)st->nccl);
        tlm_watchdog_end();
    }
    tlm_shm_destroy(st->shm);
    if (st->mpi != MPI_COMM_NULL) MPI_Comm_free(&st->mpi);
    st->magic = 0;
    free(st);
    free(c);
}

/* ---- collectives ------------------------------------------------------------------------------------------- */

static tlm_status check_dtype(tlm_dtype dt, tlm_reduce_op op) {
    if (dt != TLM_DTYPE_F32 && dt != TLM_DTYPE_BF16)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the communicator carries float32 and bf16, not %s",
                        (unsigned)dt < TLM_DTYPE_NUM ? tlm_dtype_name(dt) : "an unknown dtype");
    if ((unsigned)op > TLM_REDUCE_AVG) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown reduction %d", op);
    return TLM_OK;
}

/* [a, a+na) and [b, b+nb) are the same start or disjoint */
static tlm_status check_overlap(const char *what, const void *a, size_t na, const void *b, size_t nb) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (x == y || x + na <= y || y + nb <= x) return TLM_OK;
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: the send and receive buffers overlap without being in place", what);
}

static tlm_status check_buffers(const char *what, const void *send, size_t send_bytes, const void *recv,
                                size_t recv_bytes) {
    if ((!send && send_bytes) || (!recv && recv_bytes))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: a NULL buffer", what);
    return check_overlap(what, send, send_bytes, recv, recv_bytes);
}

/* Runs an MPI collective (blocking) or queues a NCCL one, watched, counted as `what`. */
#define DISPATCH(what, bytes, mpi_call, nccl_call)          \
    do {                                                    \
        tlm_watchdog_begin((what), (bytes));                \
        tlm_status s_ = c->kind == TLM_COMM_MPI ? (mpi_call) : (nccl_call); \
        tlm_watchdog_end();                                 \
        return s_;                                          \
    } while (0)

tlm_status tlm_comm_all_reduce(tlm_comm *c, const void *send, void *recv, size_t count, tlm_dtype dt,
                               tlm_reduce_op op, tlm_stream *s) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    TLM_TRY(check_dtype(dt, op));
    const size_t bytes = count * tlm_dtype_size(dt);
    TLM_TRY(check_buffers("all_reduce", send, bytes, recv, bytes));
    DISPATCH("all_reduce", bytes, tlm_mpi_all_reduce(st, send, recv, count, dt, op),
             tlm_nccl_all_reduce((tlm_nccl *)st->nccl, c->be, send, recv, count, dt, op, s));
}

tlm_status tlm_comm_reduce_scatter(tlm_comm *c, const void *send, void *recv, size_t recv_count, tlm_dtype dt,
                                   tlm_reduce_op op, tlm_stream *s) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    TLM_TRY(check_dtype(dt, op));
    const size_t block = recv_count * tlm_dtype_size(dt);
    const bool in_place = send && (const char *)recv == (const char *)send + (size_t)c->rank * block;
    if (!in_place) TLM_TRY(check_buffers("reduce_scatter", send, block * (size_t)c->world_size, recv, block));
    DISPATCH("reduce_scatter", block * (size_t)c->world_size,
             tlm_mpi_reduce_scatter(st->mpi, send, recv, recv_count, dt, op),
             tlm_nccl_reduce_scatter((tlm_nccl *)st->nccl, c->be, send, recv, recv_count, dt, op, s));
}

tlm_status tlm_comm_all_gather(tlm_comm *c, const void *send, void *recv, size_t send_count, tlm_dtype dt,
                               tlm_stream *s) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    TLM_TRY(check_dtype(dt, TLM_REDUCE_SUM));
    const size_t block = send_count * tlm_dtype_size(dt);
    const bool in_place = recv && (const char *)send == (const char *)recv + (size_t)c->rank * block;
    if (!in_place) TLM_TRY(check_buffers("all_gather", send, block, recv, block * (size_t)c->world_size));
    DISPATCH("all_gather", block * (size_t)c->world_size, tlm_mpi_all_gather(st->mpi, send, recv, send_count, dt),
             tlm_nccl_all_gather((tlm_nccl *)st->nccl, c->be, send, recv, send_count, dt, s));
}

tlm_status tlm_comm_broadcast(tlm_comm *c, const void *send, void *recv, size_t count, tlm_dtype dt, int root,
                              tlm_stream *s) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    TLM_TRY(check_dtype(dt, TLM_REDUCE_SUM));
    if (root < 0 || root >= c->world_size)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "broadcast: root %d is not a rank (0..%d)", root, c->world_size - 1);
    const size_t bytes = count * tlm_dtype_size(dt);
    TLM_TRY(check_buffers("broadcast", c->rank == root ? send : recv, bytes, recv, bytes));
    DISPATCH("broadcast", bytes, tlm_mpi_broadcast(st->mpi, send, recv, count, dt, root),
             tlm_nccl_broadcast((tlm_nccl *)st->nccl, c->be, send, recv, count, dt, root, s));
}

tlm_status tlm_comm_barrier(tlm_comm *c) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    WATCHED("barrier", 0, MPI_Barrier(st->mpi));
    return TLM_OK;
}

tlm_status tlm_comm_synchronize(tlm_comm *c, tlm_stream *s) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    if (c->kind == TLM_COMM_MPI) return TLM_OK;
    tlm_watchdog_wait("the wait for queued NCCL collectives");
    const tlm_status r = tlm_nccl_synchronize((tlm_nccl *)st->nccl, c->be, s);
    tlm_watchdog_end();
    return r;
}

/* ---- host exchanges -------------------------------------------------------------------------------------------- */

tlm_status tlm_comm_host_all_gather(tlm_comm *c, const void *send, void *recv, size_t bytes) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    if (bytes > INT_MAX) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "host all-gather of %zu bytes: more than MPI's int", bytes);
    WATCHED("a host all-gather", bytes, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, st->mpi));
    return TLM_OK;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

tlm_status tlm_comm_check_same(tlm_comm *c, const char *what, const char *text) {
    typedef struct {
        uint64_t hash;
        char head[304];
    } said;
    said mine = {.hash = fnv1a(text)};
    snprintf(mine.head, sizeof mine.head, "%.300s", text);
    said *all = malloc(sizeof(said) * (size_t)c->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    tlm_status s = tlm_comm_host_all_gather(c, &mine, all, sizeof mine);
    for (int r = 1; s == TLM_OK && r < c->world_size; r++)
        if (all[r].hash != all[0].hash)
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the ranks disagree on %s: rank 0 has '%s', rank %d has '%s'", what,
                         all[0].head, r, all[r].head);
    free(all);
    return s;
}
