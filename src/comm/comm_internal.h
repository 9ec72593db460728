/* comm_internal.h — what the communication layer's files share (internal to src/comm): the MPI
 * check, the communicator's state, the MPI collectives (mpi_comm.c) and the watchdog (watchdog.c).
 * The NCCL side is nccl_comm.h (no MPI there: the .cu file is compiled by nvcc). */
#ifndef TLM_COMM_INTERNAL_H
#define TLM_COMM_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "tlm/comm.h"

/* A failed MPI call (MPI_ERRORS_RETURN): TLM_ERR_BACKEND, "MPI: <call> failed: <MPI's string>". */
tlm_status tlm_mpi_fail(int rc, const char *call);
#define TLM_MPI_TRY(call)                                    \
    do {                                                     \
        int tlm_mpi_rc_ = (call);                            \
        if (tlm_mpi_rc_ != MPI_SUCCESS) return tlm_mpi_fail(tlm_mpi_rc_, #call); \
    } while (0)

#define TLM_COMM_MAGIC 0x434f4d4du /* "COMM": a communicator made by tlm_comm_create, not a fake */

struct tlm_shm;

typedef struct {
    unsigned magic;
    MPI_Comm mpi;          /* a duplicate of MPI_COMM_WORLD: the MPI collectives and the host exchanges */
    void *nccl;            /* nccl_comm.h's state (NCCL only) */
    struct tlm_shm *shm;   /* shm_allreduce.h: the host's shared segment (MPI, ranks on one host), or NULL */
    char shm_note[200];    /* why shm is NULL */
    tlm_mpi_algo algo;     /* tlm_comm_set_mpi_algo */
    size_t shm_chunk_bytes;
} tlm_comm_state;

static inline tlm_comm_state *tlm_comm_state_of(tlm_comm *c) {
    TLM_ASSERT(c && c->impl && ((tlm_comm_state *)c->impl)->magic == TLM_COMM_MAGIC); /* not a fake */
    return (tlm_comm_state *)c->impl;
}

/* ---- mpi_comm.c: the MPI collectives on host memory (arguments checked by comm.c) --------------------- */

/* The MPI communicator's segment for the shm all-reduce (st->shm, or st->shm_note saying why not);
 * collective, at creation. tlm_mpi_setup_shm's errors: BACKEND (MPI failed), OUT_OF_MEMORY. */
tlm_status tlm_mpi_setup_shm(tlm_comm_state *st, const tlm_comm_world *w);
/* MPI_Allreduce, or the shm schedule (st->algo, the size: comm.h) */
tlm_status tlm_mpi_all_reduce(tlm_comm_state *st, const void *send, void *recv, size_t count, tlm_dtype dt,
                              tlm_reduce_op op);
tlm_status tlm_mpi_reduce_scatter(MPI_Comm comm, const void *send, void *recv, size_t recv_count, tlm_dtype dt,
                                  tlm_reduce_op op);
tlm_status tlm_mpi_all_gather(MPI_Comm comm, const void *send, void *recv, size_t send_count, tlm_dtype dt);
tlm_status tlm_mpi_broadcast(MPI_Comm comm, const void *send, void *recv, size_t count, tlm_dtype dt, int root);
void tlm_mpi_free_ops(void); /* the bf16 MPI_Op, before MPI_Finalize */

/* ---- watchdog.c: one per process, started by tlm_comm_init ------------------------------------------------
 * Counts the collectives this rank issues and watches every blocking wait against the timeout; on
 * its own MPI communicator it answers the other ranks' questions ("which collective are you at?")
 * and hears a leaving rank's goodbye. See comm.h, "Faults". */

tlm_status tlm_watchdog_start(double timeout_s, bool thread_multiple, int rank, int world_size, const char *host);
/* A collective `what` of `bytes` per rank is issued: counted, and the deadline armed for the call
 * (an MPI call blocks until done; a NCCL call may block while it connects). */
void tlm_watchdog_begin(const char *what, size_t bytes);
/* A wait for what was issued (NCCL's stream synchronization, initialization): arms the deadline. */
void tlm_watchdog_wait(const char *what);
void tlm_watchdog_end(void); /* the wait is over */
double tlm_watchdog_timeout(void);
/* Tells the other ranks that this one is leaving (why: its last error), and waits up to 2 s for them
 * to hear it; then stops the thread. For exits without tlm_comm_finalize. */
void tlm_watchdog_leave(const char *why);
void tlm_watchdog_stop(void); /* clean stop (tlm_comm_finalize); frees its communicator */

#endif
