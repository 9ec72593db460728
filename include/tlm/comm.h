/* comm.h — the communication layer: the processes (ranks) of one run sum, scatter, gather and
 * broadcast buffers together. Two communicators behind one interface:
 *   MPI   host buffers (the CPU backend's memory), Open MPI's collectives; synchronous;
 *   NCCL  GPU buffers (the CUDA backend's memory), one process per GPU; asynchronous on a stream.
 * Processes are started by a launcher, never by tlm: `mpirun -np 4 tlm ...`, `mpiexec`, or Slurm's
 * `srun` (PMI/PMIx through Open MPI). MPI gives every rank its rank, world size and local rank
 * (its index among the ranks of its host: MPI_COMM_TYPE_SHARED), and carries NCCL's unique id from
 * rank 0 to the others. A process started without a launcher is a world of one.
 *
 * The model uses a communicator to sum its mean loss and the fp16 overflow count (all_reduce_sum_f32,
 * below); tests may fake that one field. Data-parallel training uses the same layer.
 *
 * Counts are in elements, as NCCL counts them; buffers are backend memory of the communicator's
 * backend. dtypes: TLM_DTYPE_F32 and TLM_DTYPE_BF16 (bf16 sums: each combination of two partial
 * results is added in float32 and rounded to nearest even, as NCCL does; on MPI through a
 * user-defined MPI_Op). avg = the sum divided by the world size (NCCL: ncclAvg; MPI: the sum, then
 * each element divided in float32 and rounded to the dtype).
 *
 * Faults. Every blocking wait (an MPI collective, a NCCL stream synchronization, NCCL's
 * initialization, the host exchanges, the barrier) is watched by a thread with the run's timeout:
 * when a wait lasts longer, that thread asks every rank where it is (MPI point-to-point on a
 * communicator of its own; needs MPI_THREAD_MULTIPLE), prints one line naming the ranks that did
 * not arrive ("rank 1 did not answer: it exited, was killed or is stopped"; "rank 2 has not reached
 * it: it has issued 11 of the 12 collectives") and ends the job (MPI_Abort: the launcher stops every
 * process, the exit status is non-zero); the wait does not return. A rank that exits while its
 * communicator lives (an error, tlm_fatal, a return from main) first tells the others, which stop
 * at once naming it and its last error. A rank killed outright is named by the launcher (Open MPI's
 * mpirun ends the job at once) or, where the launcher lets the others run, by the timeout.
 * NCCL errors that its kernels report (ncclCommGetAsyncError, polled while waiting) abort the
 * communicator (ncclCommAbort) and return TLM_ERR_BACKEND naming the call. A failed MPI call
 * (MPI_ERRORS_RETURN) returns TLM_ERR_BACKEND naming the call and MPI's error string. */
#ifndef TLM_COMM_H
#define TLM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include "tlm/backend.h"
#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_COMM_MPI = 0, TLM_COMM_NCCL = 1 } tlm_comm_kind;
typedef enum { TLM_REDUCE_SUM = 0, TLM_REDUCE_AVG = 1 } tlm_reduce_op;

const char *tlm_comm_kind_name(tlm_comm_kind k); /* "mpi", "nccl" */
bool tlm_comm_kind_parse(const char *name, tlm_comm_kind *out);
const char *tlm_reduce_op_name(tlm_reduce_op op); /* "sum", "avg" */
bool tlm_reduce_op_parse(const char *name, tlm_reduce_op *out);

/* Whether this tlm was built with the NCCL communicator (CUDA and NCCL found at build time). */
bool tlm_comm_have_nccl(void);

/* The libraries' own version strings: MPI_Get_library_version's first line ("Open MPI v4.1.4, ...");
 * NCCL's "2.28.3" (the library loaded, ncclGetVersion), or "not built". */
const char *tlm_comm_mpi_version(void);
const char *tlm_comm_nccl_version(void);

/* ---- the world ----------------------------------------------------------------------------------------- */

typedef struct {
    int rank, world_size;        /* in MPI_COMM_WORLD */
    int local_rank, local_size;  /* among the ranks on this host */
    int num_hosts;               /* distinct processor names (MPI_Get_processor_name) */
    char host[64];               /* this rank's */
    bool thread_multiple;        /* MPI gave MPI_THREAD_MULTIPLE: the timeout can name ranks */
} tlm_comm_world;

/* True when a launcher started this process: Open MPI's, PMI's, PMIx's or Slurm's rank variables
 * are set (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, SLURM_PROCID with SLURM_STEP_ID). */
bool tlm_comm_launched(void);

/* Joins the run: MPI_Init_thread (MPI_THREAD_MULTIPLE asked) once per process, errors returned
 * (MPI_ERRORS_RETURN), the local ranks and hosts found, the watchdog started with timeout_s (> 0,
 * seconds: the longest any later wait may last; the first call's value holds). Fills *w (NULL: not
 * wanted). A second call only fills *w. From here on a rank that exits without
 * tlm_comm_finalize tells the others (see above). Errors: BACKEND (MPI failed, named),
 * INVALID_ARGUMENT (timeout_s <= 0; srun started several tasks without PMIx or PMI-2, srun --mpi=none,
 * which MPI cannot join into one world). */
tlm_status tlm_comm_init(tlm_comm_world *w, double timeout_s);

/* Leaves the run cleanly: a watched barrier of every rank, the watchdog stopped, MPI_Finalize.
 * Collective: every rank calls it (also after an error every rank saw, such as ranks that disagree);
 * a rank that stops alone just exits (the others are told). Destroy the communicators first.
 * No-op when tlm_comm_init did not run. */
tlm_status tlm_comm_finalize(void);

/* ---- a communicator ------------------------------------------------------------------------------------ */

typedef struct tlm_comm {
    int rank, world_size;
    void *impl;              /* the communication layer's state; a test's fake puts its own here */
    /* The model's seam: buf (count) float32 memory of `be`, replaced in place by the sum over the
     * ranks, ordered on be's compute stream (NCCL: queued, not waited for). tlm_comm_create sets it
     * to tlm_comm_all_reduce(c, buf, buf, count, F32, SUM, NULL); tests set a fake. */
    tlm_status (*all_reduce_sum_f32)(struct tlm_comm *c, tlm_backend *be, float *buf, size_t count);
    int local_rank, local_size;
    tlm_comm_kind kind;
    tlm_backend *be;         /* not owned: the buffers' backend */
} tlm_comm;

/* A communicator of every rank (MPI_COMM_WORLD) over `be`'s memory, after tlm_comm_init (called
 * here with timeout_s if it was not). Collective: every rank calls it with the same kind, checked
 * first (ranks that disagree: INVALID_ARGUMENT on every rank, naming them).
 *   MPI:  be must be the CPU backend (host memory).
 *   NCCL: be must be the CUDA backend on GPU `local_rank` (the caller creates it there:
 *         tlm_backend_cuda_create(&be, w.local_rank), which respects CUDA_VISIBLE_DEVICES); rank 0's
 *         ncclGetUniqueId goes to the others by MPI_Bcast, then ncclCommInitRank (watched).
 *         UNSUPPORTED when built without NCCL. NCCL refuses two ranks on one GPU.
 * Errors: INVALID_ARGUMENT (wrong backend for the kind, ranks that disagree), UNSUPPORTED,
 * BACKEND (MPI or NCCL failed: the call and its error string), OUT_OF_MEMORY. */
tlm_status tlm_comm_create(tlm_comm **out, tlm_comm_kind kind, tlm_backend *be, double timeout_s);

/* Frees the communicator; NCCL: waits first for the collectives queued on the compute stream
 * (watched; other streams are the caller's to wait for), then ncclCommDestroy. NULL: no-op. */
void tlm_comm_destroy(tlm_comm *c);

/* ---- collectives -------------------------------------------------------------------------------------------
 * Every rank calls the same collectives in the same order with the same count, dtype, op and root
 * (tlm_comm_check_same checks a configuration once; the collectives do not re-check). s: the stream
 * (NULL: be's compute stream). NCCL: queued on s, returning before the work is done; wait with
 * tlm_comm_synchronize or order other work after it with events. MPI: done when the call returns
 * (s ignored). Buffers: backend memory of c->be, not partly overlapping. Errors: INVALID_ARGUMENT
 * (a dtype other than F32/BF16, buffers that overlap partly, a count MPI cannot pass: > 2^31 - 1
 * elements, a root out of range), BACKEND (the library call failed, named). A rank that does not
 * arrive: see "Faults" above. */

/* recv[i] = op over ranks of send[i], i < count, on every rank. In place: send == recv. */
tlm_status tlm_comm_all_reduce(tlm_comm *c, const void *send, void *recv, size_t count, tlm_dtype dt,
                               tlm_reduce_op op, tlm_stream *s);

/* send: (world_size * recv_count) elements on every rank; rank r gets recv (recv_count) = op over
 * ranks of send[r*recv_count .. (r+1)*recv_count). In place: recv == send + rank * recv_count. */
tlm_status tlm_comm_reduce_scatter(tlm_comm *c, const void *send, void *recv, size_t recv_count, tlm_dtype dt,
                                   tlm_reduce_op op, tlm_stream *s);

/* recv (world_size * send_count) on every rank = every rank's send (send_count), rank r's at
 * r*send_count. In place: send == recv + rank * send_count. */
tlm_status tlm_comm_all_gather(tlm_comm *c, const void *send, void *recv, size_t send_count, tlm_dtype dt,
                               tlm_stream *s);

/* recv (count) on every rank = root's send (count); send is read on root only (in place: send ==
 * recv). */
tlm_status tlm_comm_broadcast(tlm_comm *c, const void *send, void *recv, size_t count, tlm_dtype dt, int root,
                              tlm_stream *s);

/* Waits until every rank has called it (the processes; queued NCCL work is not waited for). */
tlm_status tlm_comm_barrier(tlm_comm *c);

/* Waits for the collectives queued on s (NULL: the compute stream), watched; polls NCCL's
 * asynchronous error meanwhile (an error aborts the communicator and returns BACKEND). MPI: no-op. */
tlm_status tlm_comm_synchronize(tlm_comm *c, tlm_stream *s);

/* ---- the MPI communicator's all-reduce: whose schedule ---------------------------------------------------------
 *   mpi   MPI_Allreduce: Open MPI's algorithm and transport (shared memory within a host: vader).
 *   shm   tlm's schedule for ranks that share one host (src/comm/shm_allreduce.h): a shared-memory
 *         segment mapped by every rank; per chunk (TLM_COMM_SHM_CHUNK_BYTES per rank) each rank
 *         copies its buffer in once, sums its 1/n slice reading every rank's copy directly, and
 *         copies the others' sums out: B read and B written per rank in its own memory for B bytes.
 *         Sums in float32 in rank order 0..n-1 (bf16: converted, summed in float32, rounded to
 *         nearest even once; avg: divided by n in float32 before that rounding): every rank gets
 *         the same bits.
 *   auto  shm when every rank is on one host, there are at least 2, the segment could be made at
 *         the communicator's creation and the buffer is at least TLM_COMM_SHM_MIN_BYTES per rank;
 *         mpi otherwise (across hosts: MPI_Allreduce).
 * Faults as for every collective (above); a shm wait also gives up by itself past the timeout + 5 s
 * (TLM_ERR_BACKEND naming the rank), after which the communicator is not usable.
 * The segment (2 x 1 MiB per rank, in /dev/shm) is made by tlm_comm_create for an MPI communicator
 * whose ranks share one host; when it cannot be (a full /dev/shm), auto is mpi and
 * tlm_comm_shm_note says why. Reduce-scatter, all-gather and broadcast stay MPI's. */
typedef enum { TLM_MPI_ALGO_AUTO = 0, TLM_MPI_ALGO_MPI = 1, TLM_MPI_ALGO_SHM = 2 } tlm_mpi_algo;

#define TLM_COMM_SHM_MIN_BYTES ((size_t)256 << 10)  /* auto: shm from this size per rank (measured: see below) */
#define TLM_COMM_SHM_CHUNK_BYTES ((size_t)256 << 10) /* the default chunk per rank below LARGE_BYTES */
#define TLM_COMM_SHM_LARGE_BYTES ((size_t)512 << 20)  /* from this size per rank the default chunk is 1 MiB */
#define TLM_COMM_SHM_LARGE_CHUNK_BYTES ((size_t)1 << 20)
/* (the chunks measured on the H100 machine's 16 cores, 2 and 4 ranks, in place: 1 MiB chunks 18% and
 * 18% faster than 256 KiB at 1 GB a rank, 256 KiB ones 22% and 10% faster than 1 MiB at 100 MB:
 * bench/results/h100-2026-11-24-allreduce-shm/shm-chunks.txt) */

const char *tlm_mpi_algo_name(tlm_mpi_algo a); /* "auto", "mpi", "shm" */
bool tlm_mpi_algo_parse(const char *name, tlm_mpi_algo *out);

/* Chooses the MPI communicator's all-reduce (default: auto) and shm's chunk per rank in bytes (0:
 * by size, TLM_COMM_SHM_CHUNK_BYTES or from TLM_COMM_SHM_LARGE_BYTES a rank TLM_COMM_SHM_LARGE_CHUNK_BYTES;
 * more than 1 MiB is 1 MiB). Collective: every rank calls it with the same
 * values (checked: INVALID_ARGUMENT on every rank otherwise). Errors: INVALID_ARGUMENT (not an MPI
 * communicator, an unknown algorithm, ranks that disagree), UNSUPPORTED (shm asked for where there
 * is no segment: ranks on several hosts, one rank, or /dev/shm refused; the message says which). */
tlm_status tlm_comm_set_mpi_algo(tlm_comm *c, tlm_mpi_algo a, size_t shm_chunk_bytes);

/* The schedule tlm_comm_all_reduce uses for count elements of dt: "mpi", "shm", or "nccl". */
const char *tlm_comm_all_reduce_algo(const tlm_comm *c, size_t count, tlm_dtype dt);

/* Why this communicator has no shm schedule ("" when it has one): "ranks on 2 hosts", ... */
const char *tlm_comm_shm_note(const tlm_comm *c);

/* The threads this rank's shm schedule moves its bytes with (the host's cores / the ranks on it,
 * within the cores the rank may run on, at most 8; the environment's TLM_SHM_THREADS sets it); 0
 * without a segment. */
int tlm_comm_shm_threads(const tlm_comm *c);

/* ---- host exchanges (MPI on host memory, whatever the kind; watched) ------------------------------------------ */

/* recv (world_size * bytes) = every rank's send (bytes), rank r's at r*bytes. */
tlm_status tlm_comm_host_all_gather(tlm_comm *c, const void *send, void *recv, size_t bytes);

/* Checks that every rank describes its configuration with the same text (its sizes, dtype, op, ...):
 * else INVALID_ARGUMENT on every rank, naming `what`, the first rank that differs and both texts
 * (compared whole by a 64-bit hash, shown cut at 300 characters). Call it before the first
 * collective of a run: ranks that disagree on sizes would otherwise hang or corrupt each other. */
tlm_status tlm_comm_check_same(tlm_comm *c, const char *what, const char *text);

/* "2 ranks on 1 host: h1 (ranks 0-1)" into buf (n bytes): who runs where, as gathered at init. */
void tlm_comm_describe_hosts(char *buf, size_t n);

/* The links among this host's GPUs into buf (n bytes): the pairs of `nvidia-smi topo -m`'s matrix
 * ("GPU0-GPU1 NV18, ..."; NV<k> = NVLink with k links; PIX, PXB, PHB, NODE, SYS = PCIe paths through
 * a switch, switches, a host bridge, a NUMA node, across NUMA nodes), else CUDA peer access between
 * the visible GPUs ("GPU0-GPU1 peer access"), "1 GPU: no links", or what could not be found. */
void tlm_comm_describe_links(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
