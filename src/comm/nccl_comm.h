/* nccl_comm.h — the NCCL communicator's side of the communication layer (internal to src/comm):
 * nccl_comm.cu when tlm is built with CUDA and NCCL, no_nccl.c (UNSUPPORTED) otherwise. No MPI here:
 * comm.c carries the unique id and watches the waits. Semantics: comm.h. */
#ifndef TLM_NCCL_COMM_H
#define TLM_NCCL_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "tlm/backend.h"
#include "tlm/comm.h"
#include "tlm/dtype.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlm_nccl tlm_nccl;

#define TLM_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

bool tlm_nccl_built(void);
const char *tlm_nccl_version_string(void); /* "2.28.3" (the library loaded) */

/* The PCI bus id of be's GPU ("0000:18:00.0"), to tell ranks on one GPU apart. */
tlm_status tlm_nccl_bus_id(tlm_backend *be, char *buf, size_t n);

/* CUDA peer access between every pair of visible GPUs ("GPU0-GPU1 peer access, ..."), into buf. */
void tlm_nccl_peer_links(char *buf, size_t n);
/* Rank 0: a new unique id (TLM_NCCL_ID_BYTES bytes). */
tlm_status tlm_nccl_get_id(void *id);
/* ncclCommInitRank on be's GPU (blocking: the caller watches it). */
tlm_status tlm_nccl_init(tlm_nccl **out, const void *id, int nranks, int rank, tlm_backend *be);
/* Queued on s (NULL: be's compute stream). */
tlm_status tlm_nccl_all_reduce(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count,
                               tlm_dtype dt, tlm_reduce_op op, tlm_stream *s);
tlm_status tlm_nccl_reduce_scatter(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t recv_count,
                                   tlm_dtype dt, tlm_reduce_op op, tlm_stream *s);
tlm_status tlm_nccl_all_gather(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t send_count,
                               tlm_dtype dt, tlm_stream *s);
tlm_status tlm_nccl_broadcast(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count, tlm_dtype dt,
                              int root, tlm_stream *s);
/* Polls s (cudaStreamQuery) and the communicator's asynchronous error until s is done; an error
 * aborts the communicator (ncclCommAbort) and returns BACKEND, named. */
tlm_status tlm_nccl_synchronize(tlm_nccl *n, tlm_backend *be, tlm_stream *s);
void tlm_nccl_destroy(tlm_nccl *n); /* ncclCommDestroy, or nothing after an abort */

#ifdef __cplusplus
}
#endif
#endif
