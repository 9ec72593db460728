/* nccl_comm.cu — the NCCL communicator (nccl_comm.h, comm.h): one process per GPU, collectives
 * queued on a CUDA stream (NULL: the CUDA backend's compute stream), waits that poll the stream
 * and NCCL's asynchronous error, ncclCommAbort on an error. Every NCCL and CUDA call is checked
 * and a failure returned, naming the call and NCCL's own message (ncclGetLastError). */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_comm.h"
#include "cuda/cuda_common.cuh"

struct tlm_nccl {
    ncclComm_t comm;
    bool aborted;
};

static tlm_status nccl_fail(ncclResult_t r, const char *call, ncclComm_t comm) {
    const char *detail = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
    return tlm_fail(TLM_ERR_BACKEND, "NCCL: %s failed: %s%s%s", call, ncclGetErrorString(r),
                    detail && detail[0] ? ": " : "", detail ? detail : "");
}

static tlm_status cuda_fail(cudaError_t e, const char *call) {
    (void)cudaGetLastError();
    return tlm_fail(TLM_ERR_BACKEND, "CUDA: %s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define NCCL_TRY(comm, call)                                          \
    do {                                                              \
        ncclResult_t r_ = (call);                                     \
        if (r_ != ncclSuccess) return nccl_fail(r_, #call, (comm));   \
    } while (0)
#define CUDA_TRY(call)                                                \
    do {                                                              \
        cudaError_t e_ = (call);                                      \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call);           \
    } while (0)

extern "C" bool tlm_nccl_built(void) { return true; }

extern "C" const char *tlm_nccl_version_string(void) {
    static char v[32];
    int code = 0;
    if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
    snprintf(v, sizeof v, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    return v;
}

extern "C" tlm_status tlm_nccl_bus_id(tlm_backend *be, char *buf, size_t n) {
    if (be->kind != TLM_DEVICE_CUDA) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "NCCL needs the CUDA backend");
    CUDA_TRY(cudaDeviceGetPCIBusId(buf, (int)n, be->device_index));
    return TLM_OK;
}

extern "C" void tlm_nccl_peer_links(char *buf, size_t n) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, n, "unknown (no CUDA device)");
        return;
    }
    if (count < 2) {
        snprintf(buf, n, "%d GPU: no links", count);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int a = 0; a < count; a++)
        for (int b = a + 1; b < count && used < n; b++) {
            int ok = 0;
            if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess) (void)cudaGetLastError();
            used += (size_t)snprintf(buf + used, n - used, "%sGPU%d-GPU%d %s", used ? ", " : "", a, b,
                                     ok ? "peer access" : "no peer access");
        }
}

extern "C" tlm_status tlm_nccl_get_id(void *id) {
    ncclUniqueId u;
    NCCL_TRY(NULL, ncclGetUniqueId(&u));
    static_assert(sizeof u == TLM_NCCL_ID_BYTES, "NCCL_UNIQUE_ID_BYTES");
    memcpy(id, &u, sizeof u);
    return TLM_OK;
}

extern "C" tlm_status tlm_nccl_init(tlm_nccl **out, const void *id, int nranks, int rank, tlm_backend *be) {
    *out = NULL;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    CUDA_TRY(cudaSetDevice(be->device_index));
    tlm_nccl *n = (tlm_nccl *)calloc(1, sizeof *n);
    if (!n) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory (NCCL communicator)");
    ncclResult_t r = ncclCommInitRank(&n->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        tlm_status s = nccl_fail(r, "ncclCommInitRank", NULL);
        free(n);
        return s;
    }
    *out = n;
    return TLM_OK;
}

/* after an abort the communicator is gone: every later call says so */
#define LIVE(n)                                                                                          \
    do {                                                                                                 \
        if ((n)->aborted)                                                                                \
            return tlm_fail(TLM_ERR_BACKEND, "NCCL: the communicator was aborted after an earlier error"); \
    } while (0)

static ncclDataType_t nccl_type(tlm_dtype dt) { return dt == TLM_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32; }
static ncclRedOp_t nccl_op(tlm_reduce_op op) { return op == TLM_REDUCE_AVG ? ncclAvg : ncclSum; }
static cudaStream_t stream_of(tlm_backend *be, tlm_stream *s) {
    return s ? (cudaStream_t)s->handle : tlm_cuda_stream(be);
}

extern "C" tlm_status tlm_nccl_all_reduce(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count,
                                          tlm_dtype dt, tlm_reduce_op op, tlm_stream *s) {
    LIVE(n);
    NCCL_TRY(n->comm, ncclAllReduce(send, recv, count, nccl_type(dt), nccl_op(op), n->comm, stream_of(be, s)));
    return TLM_OK;
}

extern "C" tlm_status tlm_nccl_reduce_scatter(tlm_nccl *n, tlm_backend *be, const void *send, void *recv,
                                              size_t recv_count, tlm_dtype dt, tlm_reduce_op op, tlm_stream *s) {
    LIVE(n);
    NCCL_TRY(n->comm,
             ncclReduceScatter(send, recv, recv_count, nccl_type(dt), nccl_op(op), n->comm, stream_of(be, s)));
    return TLM_OK;
}

extern "C" tlm_status tlm_nccl_all_gather(tlm_nccl *n, tlm_backend *be, const void *send, void *recv,
                                          size_t send_count, tlm_dtype dt, tlm_stream *s) {
    LIVE(n);
    NCCL_TRY(n->comm, ncclAllGather(send, recv, send_count, nccl_type(dt), n->comm, stream_of(be, s)));
    return TLM_OK;
}

extern "C" tlm_status tlm_nccl_broadcast(tlm_nccl *n, tlm_backend *be, const void *send, void *recv, size_t count,
                                         tlm_dtype dt, int root, tlm_stream *s) {
    LIVE(n);
    NCCL_TRY(n->comm, ncclBroadcast(send, recv, count, nccl_type(dt), root, n->comm, stream_of(be, s)));
    return TLM_OK;
}

extern "C" tlm_status tlm_nccl_synchronize(tlm_nccl *n, tlm_backend *be, tlm_stream *s) {
    LIVE(n);
    cudaStream_t st = stream_of(be, s);
    for (;;) {
        const cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess) return TLM_OK;
        if (e != cudaErrorNotReady) return cuda_fail(e, "cudaStreamQuery (waiting for NCCL)");
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(n->comm, ncclCommGetAsyncError(n->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            tlm_status st_err = nccl_fail(async, "a queued collective (ncclCommGetAsyncError)", n->comm);
            ncclCommAbort(n->comm); /* frees the communicator and stops its kernels */
            n->aborted = true;
            return st_err;
        }
    }
}

extern "C" void tlm_nccl_destroy(tlm_nccl *n) {
    if (!n) return;
    if (!n->aborted) ncclCommDestroy(n->comm);
    free(n);
}
