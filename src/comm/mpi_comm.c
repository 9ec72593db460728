/* mpi_comm.c — the MPI communicator's collectives on host memory (comm.h): the all-reduce by
 * MPI_Allreduce or by tlm's shared-memory schedule (shm_allreduce.c), chosen per call (comm.h,
 * "whose schedule"); MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast. float32 sums with MPI_SUM;
 * bf16 sums with a user-defined, commutative MPI_Op that adds two bf16 values in float32 and rounds
 * to nearest even (core/convert.h). avg: the sum, then each element divided by the world size in
 * float32 and rounded to the dtype. Arguments were checked by comm.c. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/shm_allreduce.h"
#include "core/convert.h"

static MPI_Op bf16_sum_op = MPI_OP_NULL;

/* inout[i] = bf16(float(in[i]) + float(inout[i])) */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = tlm_f32_to_bf16(tlm_bf16_to_f32(a[i]) + tlm_bf16_to_f32(b[i]));
}

void tlm_mpi_free_ops(void) {
    if (bf16_sum_op != MPI_OP_NULL) MPI_Op_free(&bf16_sum_op);
}

/* The MPI datatype and sum op of dt; the count as MPI's int. */
static tlm_status mpi_type(tlm_dtype dt, size_t count, MPI_Datatype *type, MPI_Op *sum, int *n) {
    if (count > INT_MAX)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "MPI counts are int: %zu elements is more than %d in one call", count,
                        INT_MAX);
    *n = (int)count;
    if (dt == TLM_DTYPE_F32) {
        *type = MPI_FLOAT;
        *sum = MPI_SUM;
        return TLM_OK;
    }
    *type = MPI_UINT16_T; /* bf16 bits; only the user op below reduces them */
    if (bf16_sum_op == MPI_OP_NULL) TLM_MPI_TRY(MPI_Op_create(bf16_sum, 1, &bf16_sum_op));
    *sum = bf16_sum_op;
    return TLM_OK;
}

/* buf (count) /= world_size, in dt */
static void divide(void *buf, size_t count, tlm_dtype dt, int world_size) {
    const float n = (float)world_size;
    if (dt == TLM_DTYPE_F32) {
        float *x = buf;
        for (size_t i = 0; i < count; i++) x[i] /= n;
    } else {
        uint16_t *x = buf;
        for (size_t i = 0; i < count; i++) x[i] = tlm_f32_to_bf16(tlm_bf16_to_f32(x[i]) / n);
    }
}

/* ---- the all-reduce: whose schedule ------------------------------------------------------------------------ */

static const char *const algo_names[] = {"auto", "mpi", "shm"};

const char *tlm_mpi_algo_name(tlm_mpi_algo a) { return (unsigned)a < 3 ? algo_names[a] : "?"; }

bool tlm_mpi_algo_parse(const char *name, tlm_mpi_algo *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, algo_names[i]) == 0) return (*out = (tlm_mpi_algo)i), true;
    return false;
}

tlm_status tlm_mpi_setup_shm(tlm_comm_state *st, const tlm_comm_world *w) {
    if (w->world_size < 2) {
        snprintf(st->shm_note, sizeof st->shm_note, "one rank: nothing to share");
        return TLM_OK;
    }
    if (w->local_size != w->world_size) {
        snprintf(st->shm_note, sizeof st->shm_note, "the %d ranks are on %d hosts: MPI_Allreduce between them",
                 w->world_size, w->num_hosts);
        return TLM_OK;
    }
    return tlm_shm_create(&st->shm, st->mpi, st->shm_note, sizeof st->shm_note);
}

static bool use_shm(const tlm_comm_state *st, size_t bytes) {
    if (!st->shm || st->algo == TLM_MPI_ALGO_MPI) return false;
    return st->algo == TLM_MPI_ALGO_SHM || bytes >= TLM_COMM_SHM_MIN_BYTES;
}

const char *tlm_comm_all_reduce_algo(const tlm_comm *c, size_t count, tlm_dtype dt) {
    if (c->kind == TLM_COMM_NCCL) return "nccl";
    return use_shm(tlm_comm_state_of((tlm_comm *)c), count * tlm_dtype_size(dt)) ? "shm" : "mpi";
}

const char *tlm_comm_shm_note(const tlm_comm *c) {
    const tlm_comm_state *st = tlm_comm_state_of((tlm_comm *)c);
    return c->kind == TLM_COMM_NCCL ? "NCCL communicator" : st->shm_note;
}

int tlm_comm_shm_threads(const tlm_comm *c) {
    const tlm_comm_state *st = tlm_comm_state_of((tlm_comm *)c);
    return c->kind == TLM_COMM_MPI && st->shm ? tlm_shm_threads(st->shm) : 0;
}

tlm_status tlm_comm_set_mpi_algo(tlm_comm *c, tlm_mpi_algo a, size_t shm_chunk_bytes) {
    tlm_comm_state *st = tlm_comm_state_of(c);
    if (c->kind != TLM_COMM_MPI)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the all-reduce algorithm is the MPI communicator's (NCCL picks its own)");
    if ((unsigned)a > TLM_MPI_ALGO_SHM) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown MPI all-reduce algorithm %d", a);
    char text[96];
    snprintf(text, sizeof text, "algorithm %s, shm chunk %zu bytes", tlm_mpi_algo_name(a), shm_chunk_bytes);
    TLM_TRY(tlm_comm_check_same(c, "the MPI all-reduce algorithm", text));
    if (a == TLM_MPI_ALGO_SHM && !st->shm)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "the shm all-reduce needs a shared-memory segment: %s", st->shm_note);
    st->algo = a;
    st->shm_chunk_bytes = shm_chunk_bytes;
    return TLM_OK;
}

tlm_status tlm_mpi_all_reduce(tlm_comm_state *st, const void *send, void *recv, size_t count, tlm_dtype dt,
                              tlm_reduce_op op) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op sum = MPI_OP_NULL;
    int n = 0, size = 1;
    TLM_TRY(mpi_type(dt, count, &type, &sum, &n));
    if (use_shm(st, count * tlm_dtype_size(dt)))
        return tlm_shm_all_reduce(st->shm, send, recv, count, dt, op, st->shm_chunk_bytes);
    TLM_MPI_TRY(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, type, sum, st->mpi));
    TLM_MPI_TRY(MPI_Comm_size(st->mpi, &size));
    if (op == TLM_REDUCE_AVG) divide(recv, count, dt, size);
    return TLM_OK;
}

tlm_status tlm_mpi_reduce_scatter(MPI_Comm comm, const void *send, void *recv, size_t recv_count, tlm_dtype dt,
                                  tlm_reduce_op op) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op sum = MPI_OP_NULL;
    int n = 0, size = 1, rank = 0;
    TLM_TRY(mpi_type(dt, recv_count, &type, &sum, &n));
    TLM_MPI_TRY(MPI_Comm_size(comm, &size));
    TLM_MPI_TRY(MPI_Comm_rank(comm, &rank));
    const size_t es = tlm_dtype_size(dt);
    if ((const char *)recv == (const char *)send + (size_t)rank * recv_count * es) {
        /* MPI's in place takes the whole input from its recv buffer and leaves the result at its
         * start; NCCL's (comm.h's) leaves it at this rank's block */
        void *whole = (void *)send;
        TLM_MPI_TRY(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, n, type, sum, comm));
        if (rank != 0) memmove(recv, whole, recv_count * es);
    } else {
        TLM_MPI_TRY(MPI_Reduce_scatter_block(send, recv, n, type, sum, comm));
    }
    if (op == TLM_REDUCE_AVG) divide(recv, recv_count, dt, size);
    return TLM_OK;
}

tlm_status tlm_mpi_all_gather(MPI_Comm comm, const void *send, void *recv, size_t send_count, tlm_dtype dt) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op sum = MPI_OP_NULL;
    int n = 0, rank = 0;
    TLM_TRY(mpi_type(dt, send_count, &type, &sum, &n));
    TLM_MPI_TRY(MPI_Comm_rank(comm, &rank));
    const bool in_place = (const char *)send == (const char *)recv + (size_t)rank * send_count * tlm_dtype_size(dt);
    if (in_place) TLM_MPI_TRY(MPI_Allgather(MPI_IN_PLACE, 0, type, recv, n, type, comm));
    else TLM_MPI_TRY(MPI_Allgather(send, n, type, recv, n, type, comm));
    return TLM_OK;
}

tlm_status tlm_mpi_broadcast(MPI_Comm comm, const void *send, void *recv, size_t count, tlm_dtype dt, int root) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op sum = MPI_OP_NULL;
    int n = 0, rank = 0;
    TLM_TRY(mpi_type(dt, count, &type, &sum, &n));
    TLM_MPI_TRY(MPI_Comm_rank(comm, &rank));
    if (rank == root && send != recv) memcpy(recv, send, count * tlm_dtype_size(dt));
    TLM_MPI_TRY(MPI_Bcast(recv, n, type, root, comm));
    return TLM_OK;
}
