/* no_nccl.c — stands in for the NCCL communicator when tlm is built without CUDA or NCCL. */
#ifndef TLM_HAVE_NCCL
#include <stdio.h>

#include "comm/nccl_comm.h"

static tlm_status not_built(void) {
    return tlm_fail(TLM_ERR_UNSUPPORTED, "this tlm was built without NCCL (it needs the CUDA toolkit and nccl.h / "
                                         "libnccl at build time); use --backend mpi");
}

bool tlm_nccl_built(void) { return false; }
const char *tlm_nccl_version_string(void) { return "not built"; }
tlm_status tlm_nccl_bus_id(tlm_backend *be, char *buf, size_t n) { return not_built(); }
void tlm_nccl_peer_links(char *buf, size_t n) { snprintf(buf, n, "unknown (built without CUDA)"); }
tlm_status tlm_nccl_get_id(void *id) { return not_built(); }
tlm_status tlm_nccl_init(tlm_nccl **out, const void *id, int nranks, int rank, tlm_backend *be) {
    *out = NULL;
    return not_built();
}
tlm_status tlm_nccl_all_reduce(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count,
                               tlm_dtype dt, tlm_reduce_op op, tlm_stream *s) {
    return not_built();
}
tlm_status tlm_nccl_reduce_scatter(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t recv_count,
                                   tlm_dtype dt, tlm_reduce_op op, tlm_stream *s) {
    return not_built();
}
tlm_status tlm_nccl_all_gather(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t send_count,
                               tlm_dtype dt, tlm_stream *s) {
    return not_built();
}
tlm_status tlm_nccl_broadcast(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count, tlm_dtype dt,
                              int root, tlm_stream *s) {
    return not_built();
}
tlm_status tlm_nccl_synchronize(tlm_nccl *n, tlm_backend *be, tlm_stream *s) { return not_built(); }
void tlm_nccl_destroy(tlm_nccl *n) {}
#else
typedef int tlm_no_nccl_unused; /* ISO C: a translation unit is not empty */
#endif
