/* shm_allreduce.h — tlm's own all-reduce schedule for ranks that share a host (internal to
 * src/comm; the MPI communicator uses it: comm.h, "The MPI communicator's all-reduce").
 *
 * One shared-memory segment (POSIX shm_open + mmap, made by rank 0, opened by the others, unlinked
 * once every rank has it mapped) holds per rank three progress counters and two slots of
 * TLM_SHM_SLOT_BYTES. A buffer of B bytes per rank goes through in chunks of C bytes (C <= the
 * slot), each chunk cut into n slices (one per rank, 64-byte aligned), and for each chunk g:
 *   1. copy-in   rank r copies the chunk of its send buffer into its slot g % 2, except slice r
 *                (nobody else reads it); publishes in = g + 1
 *   2. reduce    rank r sums slice r over the ranks in rank order 0, 1, ..., n-1 in float32, its
 *                own term read from its send buffer, the others' from their slots (avg: the sum
 *                divided by n in float32; bf16: rounded to nearest even once, at the end), and
 *                writes the result to its recv buffer and to slice r of its slot; publishes red
 *   3. copy-out  rank r copies slice q of rank q's slot into its recv buffer, q != r; publishes out
 * and a slot is refilled (chunk g + 2) only after every rank has copied chunk g out. The stages are
 * skewed by one chunk (copy-in of g + 1 runs between the reduce and the copy-out of g) so that a
 * rank waits for the others as little as possible. Every element is summed once, by one rank, in a
 * fixed order: every rank gets the same bits, whatever the chunk size.
 *
 * Bytes moved per rank for B bytes (n ranks): from its memory, B read (send) and B written (recv:
 * streamed past the cache, non-temporal stores, when B is larger than the last-level cache); in
 * the shared cache, B written ((n-1)/n copied in, 1/n results) and 2(n-1)/n B read (the others'
 * terms, the others' results). Open MPI's MPI_Allreduce over its shared-memory transport moves
 * each byte through send and receive fragments and a temporary buffer besides.
 *
 * Threads: each stage of a chunk (from 64 KiB a stage) is one OpenMP region, split over the rank's
 * threads in whole 64-byte lines: the host's cores / ranks, no more than the cores the rank may run
 * on (its affinity: mpirun binds 2 ranks to a core each unless told --bind-to none), at most
 * TLM_SHM_MAX_THREADS. Each element is still summed by one thread in rank order, so the bits do not
 * depend on the thread count.
 *
 * Waits: a rank spins on a peer's counter (pause, then sched_yield: oversubscribed ranks still
 * progress) and, past the run's timeout plus 5 s, gives up with TLM_ERR_BACKEND naming the rank
 * and the stage; the communication watchdog (watchdog.c) normally ends the job first, naming the
 * ranks that did not arrive. */
#ifndef TLM_SHM_ALLREDUCE_H
#define TLM_SHM_ALLREDUCE_H

#include <mpi.h>
#include <stddef.h>

#include "tlm/comm.h"

#define TLM_SHM_SLOT_BYTES ((size_t)1 << 20) /* per rank and slot; the largest chunk */
#define TLM_SHM_MAX_THREADS 8 /* threads a rank moves its bytes with: the host's cores / ranks, at most this;
                                 the environment's TLM_SHM_THREADS sets it (tests of the threaded path) */

typedef struct tlm_shm tlm_shm;

/* Collective over comm, whose ranks share one host (MPI_COMM_TYPE_SHARED; at least 2): maps the
 * segment on every rank. When shared memory cannot be had on some rank (shm_open, the space in
 * /dev/shm, mmap), every rank learns it: TLM_OK with *out NULL and why (n bytes) saying which
 * rank and what failed. Errors: BACKEND (an MPI call failed), OUT_OF_MEMORY. Not watched: the
 * caller arms the watchdog. */
tlm_status tlm_shm_create(tlm_shm **out, MPI_Comm comm, char *why, size_t n);

/* recv[i] = op over the ranks of send[i], i < count elements of dt (F32 or BF16); send == recv
 * in place, else disjoint (checked by comm.c). chunk_bytes: the chunk per rank (0: the default by
 * size, comm.h's TLM_COMM_SHM_CHUNK_BYTES or TLM_COMM_SHM_LARGE_CHUNK_BYTES; at most
 * TLM_SHM_SLOT_BYTES; rounded down to whole 64-byte lines).
 * Collective: every rank calls it with the same count, dt, op and chunk_bytes. Errors: BACKEND (a
 * peer did not progress within the timeout: named). */
tlm_status tlm_shm_all_reduce(tlm_shm *s, const void *send, void *recv, size_t count, tlm_dtype dt,
                              tlm_reduce_op op, size_t chunk_bytes);

/* The threads this rank moves its bytes with (Threads above). */
int tlm_shm_threads(const tlm_shm *s);

/* Unmaps the segment (local: no rank waits for the others). NULL: no-op. */
void tlm_shm_destroy(tlm_shm *s);

#endif
