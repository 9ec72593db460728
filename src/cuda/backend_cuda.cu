/* backend_cuda.cu — the CUDA backend: device memory through cudaMalloc, one non-blocking stream
 * that every op and copy runs on, a cuBLASLt handle with a 32 MiB workspace, NVTX ranges, and
 * the table of ops (kernels in src/cuda/<op>.cu, GEMMs through cuBLASLt in matmul.cu), each
 * taking the mode's activation dtype (fp32, bf16, fp16) where the interface says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nvtx3/nvToolsExt.h>

#include "cuda/cuda_common.cuh"

static tlm_ops cuda_ops_table(void) {
    tlm_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.embedding_forward = tlm_cuda_embedding_forward;
    ops.embedding_backward = tlm_cuda_embedding_backward;
    ops.rmsnorm_forward = tlm_cuda_rmsnorm_forward;
    ops.rmsnorm_backward = tlm_cuda_rmsnorm_backward;
    ops.layernorm_forward = tlm_cuda_layernorm_forward;
    ops.layernorm_backward = tlm_cuda_layernorm_backward;
    ops.relu_forward = tlm_cuda_relu_forward;
    ops.relu_backward = tlm_cuda_relu_backward;
    ops.matmul_forward = tlm_cuda_matmul_forward;
    ops.matmul_backward = tlm_cuda_matmul_backward;
    ops.cast = tlm_cuda_cast;
    ops.rope_forward = tlm_cuda_rope_forward;
    ops.rope_backward = tlm_cuda_rope_backward;
    ops.attention_forward = tlm_cuda_attention_forward;
    ops.attention_backward = tlm_cuda_attention_backward;
    ops.flash_attention_forward = tlm_cuda_flash_attention_forward;
    ops.flash_attention_backward = tlm_cuda_flash_attention_backward;
    ops.flash_attention_check = tlm_cuda_flash_attention_check;
    ops.swiglu_forward = tlm_cuda_swiglu_forward;
    ops.swiglu_backward = tlm_cuda_swiglu_backward;
    ops.cross_entropy_forward = tlm_cuda_cross_entropy_forward;
    ops.cross_entropy_backward = tlm_cuda_cross_entropy_backward;
    ops.adamw_step = tlm_cuda_adamw_step;
    ops.grad_unscale = tlm_cuda_grad_unscale;
    return ops;
}

static const tlm_ops cuda_ops = cuda_ops_table();

/* ---- memory, copies, synchronization ------------------------------------------------------- */

static void *cuda_raw_alloc(tlm_backend *be, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear the error so the next call does not see it */
        return NULL;
    }
    TLM_CUDA_CHECK(e);
    return p;
}

static void cuda_raw_free(tlm_backend *be, void *ptr) {
    /* ops queued on the stream may still use ptr: wait for them (frees are rare) */
    if (tlm_cuda_of(be) && tlm_cuda_of(be)->stream) TLM_CUDA_CHECK(cudaStreamSynchronize(tlm_cuda_of(be)->stream));
    TLM_CUDA_CHECK(cudaFree(ptr));
}

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

static void cuda_synchronize(tlm_backend *be) { TLM_CUDA_CHECK(cudaStreamSynchronize(tlm_cuda_stream(be))); }

/* device memory in use as the driver counts it: total - free (cudaMemGetInfo) */
static size_t cuda_device_memory_used(tlm_backend *be) {
    size_t free_bytes = 0, total_bytes = 0;
    TLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return total_bytes - free_bytes;
}

/* ---- CUDA graphs: capture on the backend's stream, thread-local mode ----------------------------- */
static void cuda_graph_begin(tlm_backend *be) {
    TLM_CUDA_CHECK(cudaStreamBeginCapture(tlm_cuda_stream(be), cudaStreamCaptureModeThreadLocal));
}

static void *cuda_graph_end(tlm_backend *be) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(tlm_cuda_stream(be), &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
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

static void cuda_range_push(tlm_backend *be, const char *name) { nvtxRangePushA(name); }
static void cuda_range_pop(tlm_backend *be) { nvtxRangePop(); }

static void cuda_destroy(tlm_backend *be) {
    tlm_cuda *cu = tlm_cuda_of(be);
    if (!cu) return;
    if (cu->stream) TLM_CUDA_CHECK(cudaStreamSynchronize(cu->stream));
    tlm_cuda_matmul_cache_destroy(cu);
    if (cu->lt) TLM_CUBLAS_CHECK(cublasLtDestroy(cu->lt));
    if (cu->stream) TLM_CUDA_CHECK(cudaStreamDestroy(cu->stream));
    free(cu);
    be->impl = NULL;
}

/* ---- creation ------------------------------------------------------------------------------- */

extern "C" bool tlm_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && n > 0;
}

extern "C" const char *tlm_cuda_device_name(tlm_backend *be) {
    if (!be || be->device != TLM_DEVICE_CUDA || !be->impl) return "cuda";
    return tlm_cuda_of(be)->device_name;
}

/* a cuda*() call made while creating the backend: its failure is returned, not fatal */
#define CREATE_TRY(call)                                                                              \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            (void)cudaGetLastError();                                                                 \
            s = tlm_fail(TLM_ERR_BACKEND, "creating the CUDA backend on GPU %d: %s: %s", device_index, \
                         #call, cudaGetErrorString(e_));                                              \
            goto fail;                                                                                \
        }                                                                                             \
    } while (0)

extern "C" tlm_status tlm_backend_cuda_create(tlm_backend **out, int device_index) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return tlm_fail(TLM_ERR_UNSUPPORTED, "no CUDA GPU found (%s); use --device cpu",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device_index < 0 || device_index >= n)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "GPU %d does not exist (%d visible)", device_index, n);

    tlm_status s = TLM_OK;
    cudaDeviceProp prop;
    cublasStatus_t bs;
    tlm_backend *be = (tlm_backend *)calloc(1, sizeof *be);
    tlm_cuda *cu = (tlm_cuda *)calloc(1, sizeof *cu);
    if (!be || !cu) {
        free(be);
        free(cu);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the CUDA backend");
    }
    be->name = "cuda";
    be->device = TLM_DEVICE_CUDA;
    be->ops = &cuda_ops;
    be->impl = cu;
    be->precision = TLM_PRECISION_FP32;
    be->graph_begin = cuda_graph_begin;
    be->graph_end = cuda_graph_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_destroy = cuda_graph_destroy;
    be->range_push = cuda_range_push;
    be->range_pop = cuda_range_pop;
    be->raw_alloc = cuda_raw_alloc;
    be->raw_free = cuda_raw_free;
    be->destroy = cuda_destroy;
    be->copy_to_backend = cuda_copy_to_backend;
    be->copy_to_host = cuda_copy_to_host;
    be->memset_zero = cuda_memset_zero;
    be->synchronize = cuda_synchronize;
    be->device_memory_used = cuda_device_memory_used;

    cu->device = device_index;
    CREATE_TRY(cudaSetDevice(device_index));
    CREATE_TRY(cudaGetDeviceProperties(&prop, device_index));
    cu->num_sms = prop.multiProcessorCount;
    snprintf(cu->device_name, sizeof cu->device_name, "%.120s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount);
    if (prop.major < 9) {
        s = tlm_fail(TLM_ERR_UNSUPPORTED, "GPU %d is %s: tlm's CUDA backend is built for Hopper (sm_90a)",
                     device_index, cu->device_name);
        goto fail;
    }
    CREATE_TRY(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking));
    bs = cublasLtCreate(&cu->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        s = tlm_fail(TLM_ERR_BACKEND, "creating the CUDA backend: cublasLtCreate: %s", cublasLtGetStatusString(bs));
        goto fail;
    }
    /* through the tracked allocator, now that the struct is set up */
    cu->workspace = tlm_alloc(be, TLM_CUDA_WORKSPACE_BYTES, TLM_MEM_WORKSPACE, "cublaslt.workspace");
    cu->workspace_bytes = TLM_CUDA_WORKSPACE_BYTES;
    cu->scratch = (float *)tlm_alloc(be, TLM_CUDA_SCRATCH_BYTES, TLM_MEM_WORKSPACE, "cuda.scratch");
    cu->scratch_floats = TLM_CUDA_SCRATCH_BYTES / sizeof(float);
    cu->counter = (unsigned long long *)tlm_alloc(be, 256, TLM_MEM_WORKSPACE, "cuda.counter");
    if (!cu->workspace || !cu->scratch || !cu->counter) {
        s = TLM_ERR_OUT_OF_MEMORY; /* tlm_alloc set the message */
        goto fail;
    }
    *out = be;
    return TLM_OK;

fail:
    tlm_backend_destroy(be); /* frees what was allocated, then cuda_destroy */
    return s;
}
