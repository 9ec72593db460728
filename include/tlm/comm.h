/* comm.h — the communication seam: what the model needs from a group of processes (ranks) that
 * train together. A communicator sums small device buffers across ranks on the compute stream;
 * the model uses it to combine the mean loss and the fp16 overflow count, so every rank reports the
 * global loss and skips the same steps. NULL (or world_size 1) is one process alone.
 *
 * Implementations (NCCL for GPU buffers, MPI for host buffers) belong to the communication layer;
 * tests use fakes. */
#ifndef TLM_COMM_H
#define TLM_COMM_H

#include <stddef.h>
#include "tlm/backend.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlm_comm {
    int rank, world_size;
    void *impl;
    /* buf (count) float32 backend memory of `be`: replaced by the sum over ranks, in place,
     * ordered on the compute stream. A failure (a dead rank) returns an error naming it. */
    tlm_status (*all_reduce_sum_f32)(struct tlm_comm *c, tlm_backend *be, float *buf, size_t count);
} tlm_comm;

#ifdef __cplusplus
}
#endif
#endif
