/* backend_cuda.cu — the CUDA backend: the device (which ops, dtypes and d_heads it has kernels
 * for), stream-ordered device memory (cudaMallocAsync / cudaFreeAsync on the compute stream: a free
 * never synchronizes), the compute stream every op and copy runs on, the side stream for work off
 * the critical path, more streams and CUDA events for timing and ordering, CUDA graph capture, a
 * cuBLASLt handle with a 32 MiB workspace, and the table of ops (kernels in src/cuda/<op>.cu, GEMMs
 * through cuBLASLt in matmul.cu). NVTX ranges come from the hook in nvtx.cu, installed here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/attention/attention.cuh"
#include "tlm/tuning.h"

static tlm_ops cuda_ops_table(void) {
    tlm_ops ops;
    memset(&ops, 0, sizeof ops);
#define TLM_OP(ID, name, cls, params, args, flops, bytes) ops.name = tlm_cuda_##name;
#include "tlm/ops.def"
#undef TLM_OP
    return ops;
}

static const tlm_ops cuda_ops = cuda_ops_table();

/* ---- the device ------------------------------------------------------------------------------- */

/* every op in F32, BF16, F16 (the generic check refuses other dtypes); FlashAttention-2 for the
 * d_heads its kernels are built for */
static tlm_support cuda_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head) {
    if (op != TLM_OP_FLASH_ATTENTION_FORWARD && op != TLM_OP_FLASH_ATTENTION_BACKWARD) return TLM_SUPPORT_FAST;
    return tlm_cuda_flash_attention_check(d_head, dt) == TLM_OK ? TLM_SUPPORT_FAST : TLM_SUPPORT_NONE;
}

/* device memory in use as the driver counts it: total - free (cudaMemGetInfo) */
static size_t cuda_device_memory_used(tlm_backend *be) {
    size_t free_bytes = 0, total_bytes = 0;
    TLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return total_bytes - free_bytes;
}

/* the device's memory: cudaMemGetInfo's total */
static size_t cuda_device_memory_total(tlm_backend *be) {
    size_t free_bytes = 0, total_bytes = 0;
    TLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return total_bytes;
}

/* the default memory pool (cudaMallocAsync's) keeps freed memory until a synchronization releases it:
 * wait, then trim it to nothing */
static void cuda_release_cached(tlm_backend *be) {
    cudaMemPool_t pool;
    TLM_CUDA_CHECK(cudaStreamSynchronize(tlm_cuda_stream(be)));
    TLM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, tlm_cuda_of(be)->device));
    TLM_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

/* ---- memory: stream-ordered on the compute stream -------------------------------------------------- */

static void *cuda_raw_alloc(tlm_backend *be, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, bytes, tlm_cuda_stream(be));
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear the error so the next call does not see it */
        return NULL;
    }
    TLM_CUDA_CHECK(e);
    return p;
}

/* ordered after the work already queued on the compute stream, which may still read ptr */
static void cuda_raw_free(tlm_backend *be, void *ptr) { TLM_CUDA_CHECK(cudaFreeAsync(ptr, tlm_cuda_stream(be))); }

static void cuda_copy_to_backend(tlm_backend *be, void *dst, const void *src_host, size_t bytes) {
    /* from pageable memory the call returns once src_host has been staged: the caller may reuse it */
    TLM_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, tlm_cuda_stream(be)));
}

static void cuda_copy_to_host(tlm_backend *be, void *dst_host, const void *src, size_t bytes) {
    TLM_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, tlm_cuda_stream(be)));
    TLM_CUDA_CHECK(cudaStreamSynchronize(tlm_cuda_stream(be))); /* dst_host is valid on return */
}

static void cuda_memset_zero(tlm_backend *be, void *dst, size_t bytes) {
    TLM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, tlm_cuda_stream(be)));
}

/* ---- streams and events ------------------------------------------------------------------------------ */

static cudaStream_t stream_of(tlm_backend *be, tlm_stream *s) {
    return s ? (cudaStream_t)s->handle : tlm_cuda_stream(be);
}

static void cuda_stream_synchronize(tlm_backend *be, tlm_stream *s) {
    TLM_CUDA_CHECK(cudaStreamSynchronize(stream_of(be, s)));
}

/* a stream or event object holding the handle `create` makes; the failure is returned, not fatal */
template <typename Obj, typename Create>
static tlm_status create_handle(Obj **out, const char *what, Create &&create) {
    *out = NULL;
    Obj *o = (Obj *)calloc(1, sizeof *o);
    if (!o) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for %s", what);
    const cudaError_t e = create(&o->handle);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(o);
        return tlm_fail(TLM_ERR_BACKEND, "creating %s: %s", what, cudaGetErrorString(e));
    }
    *out = o;
    return TLM_OK;
}

/* at the compute stream's priority, or (background) the lowest */
static tlm_status cuda_stream_create(tlm_backend *be, bool background, tlm_stream **out) {
    const int priority = background ? tlm_cuda_of(be)->priority_low : tlm_cuda_of(be)->priority_high;
    return create_handle(out, "a CUDA stream", [priority](void **h) {
        return cudaStreamCreateWithPriority(reinterpret_cast<cudaStream_t *>(h), cudaStreamNonBlocking, priority);
    });
}

static void cuda_stream_destroy(tlm_backend *be, tlm_stream *s) {
    TLM_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)s->handle));
    free(s);
}

static tlm_status cuda_event_create(tlm_backend *be, tlm_event **out) { /* with timing */
    return create_handle(out, "a CUDA event",
                         [](void **h) { return cudaEventCreate(reinterpret_cast<cudaEvent_t *>(h)); });
}

static void cuda_event_destroy(tlm_backend *be, tlm_event *e) {
    TLM_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e->handle));
    free(e);
}

static void cuda_event_record(tlm_backend *be, tlm_event *e, tlm_stream *s) {
    TLM_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->handle, stream_of(be, s)));
}

static void cuda_stream_wait_event(tlm_backend *be, tlm_stream *s, tlm_event *e) {
    TLM_CUDA_CHECK(cudaStreamWaitEvent(stream_of(be, s), (cudaEvent_t)e->handle, 0));
}

static double cuda_event_elapsed_ms(tlm_backend *be, tlm_event *start, tlm_event *end) {
    float ms = 0;
    TLM_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)end->handle));
    TLM_CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start->handle, (cudaEvent_t)end->handle));
    return ms;
}

/* ---- CUDA graphs: capture on the compute stream, thread-local mode ------------------------------------- */

static void cuda_graph_begin(tlm_backend *be) {
    TLM_CUDA_CHECK(cudaStreamBeginCapture(tlm_cuda_stream(be), cudaStreamCaptureModeThreadLocal));
}

static void *cuda_graph_end(tlm_backend *be) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(tlm_cuda_stream(be), &graph);
    /* the kernels keep the priority of the stream they were captured on (the side stream's lower) */
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear it: the ops run uncaptured instead */
        tlm_fail(TLM_ERR_BACKEND, "CUDA graph capture failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    return exec;
}

static void cuda_graph_launch(tlm_backend *be, void *graph) {
    TLM_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, tlm_cuda_stream(be)));
}

static void cuda_graph_destroy(tlm_backend *be, void *graph) {
    if (graph) TLM_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

/* ---- the side stream (backend.h): the compute stream's work forks to it and joins back by events -------- */

static bool cuda_side_available(tlm_backend *be) { return tlm_cuda_of(be)->side_state >= 0; }

/* the side stream, its events and its cuBLASLt workspace, at the first side section (never while
 * a graph is being captured: the allocation would become part of it; that section runs in place);
 * after tlm_backend_release_workspaces, the workspace again (the stream and events stay) */
static bool side_setup(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TLM_CUDA_CHECK(cudaStreamIsCapturing(cu->compute_stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return false;
    cudaError_t e = cudaSuccess;
    if (!cu->side_stream) {
        e = cudaStreamCreateWithPriority(&cu->side_stream, cudaStreamNonBlocking, cu->priority_side);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&cu->side_fork, cudaEventDisableTiming);
        for (int i = 0; i < TLM_CUDA_SIDE_MARKS && e == cudaSuccess; i++)
            e = cudaEventCreateWithFlags(&cu->side_marks[i], cudaEventDisableTiming);
    }
    if (e == cudaSuccess)
        cu->side_workspace = tlm_alloc(be, TLM_CUDA_WORKSPACE_BYTES, TLM_MEM_WORKSPACE, "cublaslt.side_workspace");
    if (e != cudaSuccess || !cu->side_workspace) { /* the side's ops run in place from now on */
        (void)cudaGetLastError();
        fprintf(stderr, "tlm: the side stream could not be set up (%s): the weight-gradient GEMMs stay on the "
                        "compute stream\n", e != cudaSuccess ? cudaGetErrorString(e) : tlm_last_error());
        cu->side_state = -1;
        return false;
    }
    cu->side_state = 1;
    return true;
}

static bool cuda_side_begin(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (cu->side_state < 0 || (cu->side_state == 0 && !side_setup(be))) return false;
    TLM_CUDA_CHECK(cudaEventRecord(cu->side_fork, cu->compute_stream));
    TLM_CUDA_CHECK(cudaStreamWaitEvent(cu->side_stream, cu->side_fork, 0));
    cu->stream = cu->side_stream;
    cu->workspace = cu->side_workspace;
    return true;
}

static void cuda_side_join(tlm_backend *be, tlm_side_mark mark) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (cu->side_state <= 0) return;
    if (mark == TLM_SIDE_ALL || mark > cu->side_last) mark = cu->side_last;
    if (mark <= cu->side_joined) return;
    TLM_CUDA_CHECK(cudaStreamWaitEvent(cu->compute_stream, cu->side_marks[mark % TLM_CUDA_SIDE_MARKS], 0));
    cu->side_joined = mark;
}

static tlm_side_mark cuda_side_end(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    const int mark = cu->side_last + 1;
    /* the slot's earlier mark must be waited for before its event is recorded again */
    if (mark - cu->side_joined > TLM_CUDA_SIDE_MARKS) cuda_side_join(be, mark - TLM_CUDA_SIDE_MARKS);
    TLM_CUDA_CHECK(cudaEventRecord(cu->side_marks[mark % TLM_CUDA_SIDE_MARKS], cu->side_stream));
    cu->side_last = mark;
    cu->stream = cu->compute_stream;
    cu->workspace = cu->compute_workspace;
    return mark;
}

/* ---- ops on another stream (backend.h): the compute stream's workspace stays; no op there uses it ---- */

static void cuda_stream_ops(tlm_backend *be, tlm_stream *s) {
    tlm_cuda *cu = tlm_cuda_of(be);
    cu->stream = s ? (cudaStream_t)s->handle : cu->compute_stream;
}

/* the workspaces made on demand (backend.h): the FlashAttention split buffer and the side stream's
 * cuBLASLt workspace, after both streams are idle; the next launch that splits, or the next side
 * section, makes its own again. Outside a side section only (the compute stream's workspace is in use). */
static void cuda_release_workspaces(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (cu->stream != cu->compute_stream) tlm_fatal("tlm_backend_release_workspaces inside a side section");
    if (cu->side_stream) TLM_CUDA_CHECK(cudaStreamSynchronize(cu->side_stream));
    TLM_CUDA_CHECK(cudaStreamSynchronize(cu->compute_stream));
    tlm_free(be, cu->flash_split);
    cu->flash_split = NULL;
    cu->flash_split_floats = 0;
    cu->flash_split_failed = false; /* an out-of-memory of an earlier case is not this one's */
    if (cu->side_workspace) {
        tlm_free(be, cu->side_workspace);
        cu->side_workspace = NULL;
        cu->side_last = cu->side_joined = 0; /* every mark is waited for: the streams are idle */
    }
    if (cu->side_state > 0) cu->side_state = 0; /* set up again (the workspace) at the next side section */
}

static void cuda_destroy(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (!cu) return;
    if (cu->side_stream) TLM_CUDA_CHECK(cudaStreamSynchronize(cu->side_stream));
    if (cu->compute_stream) TLM_CUDA_CHECK(cudaStreamSynchronize(cu->compute_stream));
    tlm_cuda_matmul_cache_destroy(cu);
    if (cu->lt) TLM_CUBLAS_CHECK(cublasLtDestroy(cu->lt));
    if (cu->side_fork) TLM_CUDA_CHECK(cudaEventDestroy(cu->side_fork));
    for (int i = 0; i < TLM_CUDA_SIDE_MARKS; i++)
        if (cu->side_marks[i]) TLM_CUDA_CHECK(cudaEventDestroy(cu->side_marks[i]));
    if (cu->side_stream) TLM_CUDA_CHECK(cudaStreamDestroy(cu->side_stream));
    if (cu->compute_stream) TLM_CUDA_CHECK(cudaStreamDestroy(cu->compute_stream));
    free(cu);
    be->impl = NULL;
}

/* dense TFLOP/s of the GEMMs of a precision mode (backend.h): Hopper's datasheet, by the device's name */
static double cuda_peak_tflops(tlm_backend *be, tlm_precision p) {
    const char *d = be->description;
    const bool pcie = strstr(d, "PCIe") != NULL, hopper = strstr(d, "H100") || strstr(d, "H200");
    if (!hopper) return 0;
    if (p == TLM_PRECISION_FP32) return pcie ? 51 : 67;
    if (p == TLM_PRECISION_TF32) return pcie ? 378 : 494;
    return pcie ? 756 : 989; /* bf16, fp16 */
}

static const tlm_backend_iface cuda_iface = {
    cuda_supports,
    cuda_device_memory_used,
    cuda_device_memory_total,
    cuda_release_cached,
    cuda_raw_alloc,
    cuda_raw_free,
    cuda_copy_to_backend,
    cuda_copy_to_host,
    cuda_memset_zero,
    cuda_stream_synchronize,
    cuda_stream_create,
    cuda_stream_destroy,
    cuda_event_create,
    cuda_event_destroy,
    cuda_event_record,
    cuda_stream_wait_event,
    cuda_event_elapsed_ms,
    cuda_graph_begin,
    cuda_graph_end,
    cuda_graph_launch,
    cuda_graph_destroy,
    cuda_side_available,
    cuda_side_begin,
    cuda_side_end,
    cuda_side_join,
    cuda_stream_ops,
    cuda_destroy,
    cuda_peak_tflops,
    cuda_release_workspaces,
};

/* ---- creation ------------------------------------------------------------------------------------------ */

extern "C" int tlm_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" bool tlm_cuda_available(void) { return tlm_cuda_device_count() > 0; }

/* a cuda*() call made while creating the backend: its failure is returned, not fatal */
#define CREATE_TRY(call)                                                                                       \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            (void)cudaGetLastError();                                                                          \
            s = tlm_fail(TLM_ERR_BACKEND, "creating the CUDA backend on GPU %d: %s: %s", gpu, #call,           \
                         cudaGetErrorString(e_));                                                              \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

extern "C" tlm_status tlm_backend_cuda_create(tlm_backend **out, int gpu) {
    *out = NULL;
    const int n = tlm_cuda_device_count();
    if (n == 0) return tlm_fail(TLM_ERR_UNSUPPORTED, "no CUDA GPU found; use --device cpu");
    if (gpu < 0 || gpu >= n)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "GPU %d does not exist (%d visible: --gpu 0..%d; CUDA_VISIBLE_DEVICES "
                                                  "chooses which)", gpu, n, n - 1);
    tlm_status s = TLM_OK;
    cudaDeviceProp prop;
    cublasStatus_t bs;
    tlm_backend *be = NULL;
    TLM_TRY(tlm_backend_new(&be, "cuda", TLM_DEVICE_CUDA, &cuda_iface, &cuda_ops));
    tlm_cuda *cu = (tlm_cuda *)calloc(1, sizeof *cu);
    if (!cu) {
        tlm_backend_destroy(be);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the CUDA backend");
    }
    be->impl = cu;
    be->device_index = gpu;
    cu->device = gpu;
    CREATE_TRY(cudaSetDevice(gpu));
    CREATE_TRY(cudaGetDeviceProperties(&prop, gpu));
    cu->num_sms = prop.multiProcessorCount;
    snprintf(cu->device_name, sizeof cu->device_name, "%.120s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount);
    snprintf(be->description, sizeof be->description, "cuda: %s, GPU %d", cu->device_name, gpu);
    if (prop.major < 9) {
        s = tlm_fail(TLM_ERR_UNSUPPORTED, "GPU %d is %s: tlm's CUDA backend is built for Hopper (sm_90a)", gpu,
                     cu->device_name);
        goto fail;
    }
    cu->pdl = tlm_knob_int(TLM_KNOB_PDL) != 0; /* cuda_common.cuh: tlm_cuda_launch */
    /* TLM_SIDE_STREAM=0: the backward's weight-gradient GEMMs stay on the compute stream */
    cu->side_state = tlm_knob_int(TLM_KNOB_SIDE_STREAM) ? 0 : -1;
    /* with a side stream, the compute stream (and the communication streams) take the device's
     * highest priority and the side stream its lowest: where both have blocks waiting for an SM,
     * the critical path's go first; without one, every stream has the default priority */
    CREATE_TRY(cudaDeviceGetStreamPriorityRange(&cu->priority_low, &cu->priority_high));
    if (cu->side_state < 0) cu->priority_high = cu->priority_low = 0;
    /* the side stream one above the lowest where the range has room (the background streams' below it:
     * an overlapped AdamW update yields to the weight gradients the critical path joins) */
    cu->priority_side = cu->priority_low - 1 > cu->priority_high ? cu->priority_low - 1 : cu->priority_low;
    CREATE_TRY(cudaStreamCreateWithPriority(&cu->compute_stream, cudaStreamNonBlocking, cu->priority_high));
    cu->stream = cu->compute_stream;
    bs = cublasLtCreate(&cu->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        s = tlm_fail(TLM_ERR_BACKEND, "creating the CUDA backend: cublasLtCreate: %s", cublasLtGetStatusString(bs));
        goto fail;
    }
    /* through the tracked allocator, now that the stream exists */
    cu->workspace = tlm_alloc(be, TLM_CUDA_WORKSPACE_BYTES, TLM_MEM_WORKSPACE, "cublaslt.workspace");
    cu->workspace_bytes = TLM_CUDA_WORKSPACE_BYTES;
    cu->compute_workspace = cu->workspace;
    cu->scratch = (float *)tlm_alloc(be, TLM_CUDA_SCRATCH_BYTES, TLM_MEM_WORKSPACE, "cuda.scratch");
    cu->scratch_floats = TLM_CUDA_SCRATCH_BYTES / sizeof(float);
    if (!cu->workspace || !cu->scratch) {
        s = TLM_ERR_OUT_OF_MEMORY; /* tlm_alloc set the message */
        goto fail;
    }
    s = tlm_cuda_nvtx_hook_install(be);
    if (s != TLM_OK) goto fail;
    *out = be;
    return TLM_OK;

fail:
    tlm_backend_destroy(be); /* frees what was allocated, then cuda_destroy */
    return s;
}

/* the entry tlm_backend_create finds by name (backend.h) */
static tlm_status cuda_create(tlm_backend **out, int gpu, int cpu_threads) { return tlm_backend_cuda_create(out, gpu); }
extern "C" const tlm_backend_entry tlm_backend_cuda_entry = {"cuda", cuda_create, tlm_cuda_device_count};
