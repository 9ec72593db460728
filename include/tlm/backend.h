/* backend.h — a compute backend (CPU, CUDA), split by concern as ggml splits device, stream and
 * buffer:
 *   - the device: its name, description and what it can run (tlm_backend_supports: op x dtype x
 *     d_head), asked by callers instead of checking which backend they hold;
 *   - memory: the tracked allocator (memory.h) over the backend's raw memory, and copies;
 *   - streams and events: every op runs on the compute stream, in order; more streams (for
 *     communication) can be created; events are recorded on streams, waited for, and timed
 *     (CUDA events on CUDA, the host clock on the CPU, whose ops are synchronous);
 *   - CUDA graph capture, as a service (tlm_graph_run);
 *   - the ops (ops.h): the table of kernels, reached through the dispatch functions tlm_<op>.
 * A backend holds no run configuration: the precision mode and the use of graphs are the
 * caller's (model.h, tlm_run_config), passed to what needs them.
 *
 * One generic constructor (tlm_backend_new) builds every backend from its interface table;
 * src/cpu/backend_cpu.c and src/cuda/backend_cuda.cu fill one each. */
#ifndef TLM_BACKEND_H
#define TLM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/dtype.h"
#include "tlm/memory.h"
#include "tlm/ops.h"
#include "tlm/precision.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_DEVICE_CPU = 0, TLM_DEVICE_CUDA = 1 } tlm_device_kind;

/* How well a backend runs an op for a dtype (and d_head, for attention):
 *   NONE       it has no kernel (tlm_backend_supports set the message: what it supports);
 *   REFERENCE  correct but slow: chosen only when asked for by name (the CPU's FlashAttention-2
 *              is the fp32 reference, slower than its naive attention's BLAS products);
 *   FAST       what an automatic choice should use. */
typedef enum { TLM_SUPPORT_NONE = 0, TLM_SUPPORT_REFERENCE = 1, TLM_SUPPORT_FAST = 2 } tlm_support;

/* A queue of work on the backend (NULL: the compute stream), and a point in one. The handles are
 * the backend's (cudaStream_t, cudaEvent_t on CUDA); on the CPU an event is the host clock. */
typedef struct tlm_stream {
    void *handle;
} tlm_stream;
typedef struct tlm_event {
    void *handle;
    double host_ms;
} tlm_event;

/* A point in the side stream's work (tlm_side_end); TLM_SIDE_ALL: all of it so far. */
typedef int tlm_side_mark;
#define TLM_SIDE_ALL (-1)

/* What a backend implements. Memory: raw allocation for the tracked allocator (never called by
 * anyone else). Streams and events may be NULL where the backend has one synchronous queue (the
 * generic code then gives host-clock events). Graphs NULL: no graphs. */
typedef struct tlm_backend_iface {
    /* device: TLM_SUPPORT_NONE with the message set, or how well; d_head 0 where not relevant */
    tlm_support (*supports)(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head);
    size_t (*device_memory_used)(tlm_backend *be); /* the device's own count; NULL: none */
    size_t (*device_memory_total)(tlm_backend *be); /* the device's size in bytes; NULL: none */
    void (*release_cached)(tlm_backend *be);       /* freed memory a pool keeps, back to the device */

    void *(*raw_alloc)(tlm_backend *be, size_t bytes); /* NULL when out of memory */
    void (*raw_free)(tlm_backend *be, void *ptr);
    void (*copy_to_backend)(tlm_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*copy_to_host)(tlm_backend *be, void *dst_host, const void *src, size_t bytes);
    void (*memset_zero)(tlm_backend *be, void *dst, size_t bytes);

    void (*stream_synchronize)(tlm_backend *be, tlm_stream *s);
    tlm_status (*stream_create)(tlm_backend *be, bool background, tlm_stream **out);
    void (*stream_destroy)(tlm_backend *be, tlm_stream *s);
    tlm_status (*event_create)(tlm_backend *be, tlm_event **out);
    void (*event_destroy)(tlm_backend *be, tlm_event *e);
    void (*event_record)(tlm_backend *be, tlm_event *e, tlm_stream *s);
    void (*stream_wait_event)(tlm_backend *be, tlm_stream *s, tlm_event *e);
    double (*event_elapsed_ms)(tlm_backend *be, tlm_event *start, tlm_event *end);

    void (*graph_begin)(tlm_backend *be);
    void *(*graph_end)(tlm_backend *be);
    void (*graph_launch)(tlm_backend *be, void *graph);
    void (*graph_destroy)(tlm_backend *be, void *graph);

    /* the side stream (below); all NULL: none, the side's ops run in place */
    bool (*side_available)(tlm_backend *be);
    bool (*side_begin)(tlm_backend *be);     /* false: not now (the ops then run in place) */
    tlm_side_mark (*side_end)(tlm_backend *be);
    void (*side_join)(tlm_backend *be, tlm_side_mark mark);
    /* ops issued from now on run on stream s (NULL: the compute stream again); NULL: in place */
    void (*stream_ops)(tlm_backend *be, tlm_stream *s);

    void (*destroy)(tlm_backend *be); /* frees impl; the generic part frees the rest */
    double (*peak_tflops)(tlm_backend *be, tlm_precision p); /* NULL: unknown (tlm_backend_peak_tflops) */
    void (*release_workspaces)(tlm_backend *be); /* NULL: none kept (tlm_backend_release_workspaces) */
} tlm_backend_iface;

struct tlm_backend_state; /* src/core: the allocator's table, hooks, listeners, scope */

struct tlm_backend {
    const char *name;            /* "cpu", "cuda" */
    tlm_device_kind kind;
    int device_index;            /* the GPU's ordinal among the visible ones; 0 on the CPU */
    char description[256];       /* "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs), GPU 0" */
    const tlm_backend_iface *iface;
    const tlm_ops *ops;          /* the kernels; call them through tlm_<op> (ops.h) */
    void *impl;                  /* backend-private state (stream, cuBLASLt handle, scratch) */
    struct tlm_backend_state *state;
    bool accumulate_grads;       /* the weight-gradient writers add into their outputs instead of overwriting
                                    them (ops.def: matmul_backward's dw, GEMM beta = 1; rmsnorm_backward's dw;
                                    embedding_backward's dwte, not zeroed first): gradient accumulation over
                                    micro-batches (model.h, tlm_model_set_micro_batch sets it around a
                                    backward); false otherwise. A CUDA graph replays the mode it was captured in */
};

/* ---- creation ------------------------------------------------------------------------------ */

/* The CPU backend (always present). threads <= 0: OpenMP's default. */
tlm_status tlm_backend_cpu_create(tlm_backend **out, int threads);

/* The CUDA backend on GPU `gpu` (an ordinal among those CUDA_VISIBLE_DEVICES leaves visible).
 * TLM_ERR_UNSUPPORTED when tlm was built without CUDA or no GPU is present; INVALID_ARGUMENT for
 * a GPU that does not exist (the message says how many are visible). */
tlm_status tlm_backend_cuda_create(tlm_backend **out, int gpu);

/* ---- creation by name: a table of backend kinds, registered with core -----------------------
 * core calls no backend's code: each backend defines its entry (src/cpu/backend_cpu.c, src/cuda/
 * backend_cuda.cu or no_cuda.c) and whoever creates backends by name registers them first
 * (tlm_backends_register_builtin: the CLI, the tests). */
typedef struct {
    const char *name;                                                  /* "cpu", "cuda": --device */
    tlm_status (*create)(tlm_backend **out, int gpu, int cpu_threads); /* gpu: an ordinal among the
                                                                          visible GPUs; cpu_threads <= 0:
                                                                          OpenMP's default */
    int (*device_count)(void); /* devices usable now: 0 when none (the CPU: 1) */
} tlm_backend_entry;

/* Adds `e` (static storage, not copied) to the table; an entry of the same name is replaced. At most 8
 * names: INVALID_ARGUMENT beyond. Not thread-safe: register before creating backends. */
tlm_status tlm_backend_register(const tlm_backend_entry *e);

extern const tlm_backend_entry tlm_backend_cpu_entry;  /* src/cpu/backend_cpu.c */
extern const tlm_backend_entry tlm_backend_cuda_entry; /* src/cuda/backend_cuda.cu; no_cuda.c without nvcc */

/* Registers the built-in backends, cuda before cpu (the order of the default choice). */
static inline void tlm_backends_register_builtin(void) {
    tlm_backend_register(&tlm_backend_cuda_entry);
    tlm_backend_register(&tlm_backend_cpu_entry);
}

/* By name among the registered kinds: "cpu", "cuda", or NULL (the first registered with a usable
 * device: cuda when a GPU is visible, else cpu). INVALID_ARGUMENT for a name not registered (the
 * message lists those that are; none registered: says to call tlm_backends_register_builtin); the
 * entry's create's errors. */
tlm_status tlm_backend_create(tlm_backend **out, const char *device, int gpu, int cpu_threads);

bool tlm_cuda_available(void);  /* built with CUDA and at least one GPU visible */
int tlm_cuda_device_count(void); /* 0 without CUDA */

/* Frees every allocation still live, then the backend. NULL is a no-op. */
void tlm_backend_destroy(tlm_backend *be);

/* For backend implementations: a backend with the generic state (allocator, hooks), its name,
 * kind and tables set; the caller fills description, device_index and impl. */
tlm_status tlm_backend_new(tlm_backend **out, const char *name, tlm_device_kind kind, const tlm_backend_iface *iface,
                           const tlm_ops *ops);

/* ---- the device ----------------------------------------------------------------------------- */

/* How well `be` runs `op` on dtype dt (d_head for the attention ops, else 0). TLM_SUPPORT_NONE
 * sets the message (tlm_last_error) naming the op, the dtype or d_head, and what is supported. */
tlm_support tlm_backend_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head);

/* Bytes of device memory in use as the device reports it (CUDA: total - free from cudaMemGetInfo,
 * every process and the context included); 0 where the backend has no such count (CPU). */
size_t tlm_device_memory_used(tlm_backend *be);

/* Bytes of device memory the device has (CUDA: cudaMemGetInfo's total); 0 where the backend has no
 * such size (CPU: host memory is not the backend's to size). */
size_t tlm_device_memory_total(tlm_backend *be);

/* Waits for the compute stream, then gives device memory that freed allocations left cached in the
 * backend's pool back to the device (torch.cuda.empty_cache's counterpart), so that
 * tlm_device_memory_used counts live allocations only. A no-op where nothing is cached (CPU). */
void tlm_backend_release_cached(tlm_backend *be);

/* Waits for the backend's streams, then frees the workspaces it grows on demand and keeps between
 * calls (tracked, TLM_MEM_WORKSPACE): the CPU's scratch arena ("cpu.scratch"); CUDA's FlashAttention
 * split buffer ("cuda.flash_split") and side-stream cuBLASLt workspace ("cublaslt.side_workspace").
 * The next op that needs one makes it again. Those made at creation (CUDA's "cublaslt.workspace",
 * "cuda.scratch") stay. A benchmark calls it between cases, so that no buffer of one case is live in
 * the next and each case's peak is its own. No captured graph may be alive (one keeps the addresses):
 * free the models first. */
void tlm_backend_release_workspaces(tlm_backend *be);

/* The device's dense peak in TFLOP/s (10^12 FLOP/s) for the GEMMs precision mode p runs on (fp32: FP32
 * CUDA cores; tf32: TF32 tensor cores; bf16, fp16: 16-bit tensor cores), from the device's datasheet:
 * the denominator of MFU. CUDA: H100/H200 SXM 67 / 494 / 989, H100 PCIe 51 / 378 / 756 (fp32 / tf32 /
 * bf16 and fp16), recognized by the device's name. 0 where unknown (another GPU; the CPU). */
double tlm_backend_peak_tflops(tlm_backend *be, tlm_precision p);

/* ---- memory ------------------------------------------------------------------------------------
 * Allocation: memory.h. Copies between host and backend memory, in order on the compute stream.
 * copy_to_backend: the host buffer may be reused when it returns. copy_to_host: synchronous (the
 * host buffer is valid when it returns). */
void tlm_copy_to_backend(tlm_backend *be, void *dst, const void *src_host, size_t bytes);
void tlm_copy_to_host(tlm_backend *be, void *dst_host, const void *src, size_t bytes);
void tlm_memset_zero(tlm_backend *be, void *dst, size_t bytes);

/* ---- streams and events ------------------------------------------------------------------------ */

/* Waits for everything issued on stream s (NULL: the compute stream). */
void tlm_stream_synchronize(tlm_backend *be, tlm_stream *s);
static inline void tlm_synchronize(tlm_backend *be) { tlm_stream_synchronize(be, NULL); }

/* Another stream (a communication stream beside the compute stream); work on it runs
 * concurrently with the compute stream, ordered against it only by events. _background: its work
 * yields to the compute stream's where both have work ready (CUDA: the lowest stream priority, the
 * side stream's), for work off the critical path (model.h's overlapped optimizer). */
tlm_status tlm_stream_create(tlm_backend *be, tlm_stream **out);
tlm_status tlm_stream_create_background(tlm_backend *be, tlm_stream **out);
void tlm_stream_destroy(tlm_backend *be, tlm_stream *s);

tlm_status tlm_event_create(tlm_backend *be, tlm_event **out);
void tlm_event_destroy(tlm_backend *be, tlm_event *e);
/* Records e at the current end of stream s (NULL: compute stream). */
void tlm_event_record(tlm_backend *be, tlm_event *e, tlm_stream *s);
/* Work issued on s after this call starts after e has completed. */
void tlm_stream_wait_event(tlm_backend *be, tlm_stream *s, tlm_event *e);
/* Milliseconds between two recorded events; waits for `end` to complete. */
double tlm_event_elapsed_ms(tlm_backend *be, tlm_event *start, tlm_event *end);

/* ---- the side stream: work off the critical path ----------------------------------------------
 * Ops issued between tlm_side_begin and tlm_side_end run on a second stream beside the compute
 * stream, after everything issued on the compute stream before tlm_side_begin; nothing on the
 * compute stream waits for them until tlm_side_join. The backward issues its weight-gradient GEMMs
 * there (backward.c): nothing on the critical path needs them, and they fill the SMs that its small
 * kernels leave idle. Only GEMMs may run there: every other kernel shares the backend's scratch
 * (CUDA: the side stream has a cuBLASLt workspace of its own, 32 MiB, allocated at its first use and
 * counted as TLM_MEM_WORKSPACE "cublaslt.side_workspace").
 * The caller joins the side's work before anything overwrites what it reads, before its outputs are
 * read, and before a captured pass ends (a CUDA graph's side branch must rejoin the compute stream).
 *   tlm_side_available: whether the backend runs side work concurrently: false on the CPU (one
 *     synchronous queue), with TLM_SIDE_STREAM=0 at the backend's creation, or after the side stream
 *     could not be set up; then begin, end and join do nothing and the ops run in place.
 *   tlm_side_begin: nesting is a programming error (fatal).
 *   tlm_side_end: the ops go back to the compute stream; returns a mark of the side's work so far
 *     (0 where nothing ran on the side).
 *   tlm_side_join(be, mark): the compute stream waits for the side's work up to `mark` (TLM_SIDE_ALL:
 *     all of it). Marks are joined in any order; joining one joins every earlier one. */
bool tlm_side_available(tlm_backend *be);
void tlm_side_begin(tlm_backend *be);
tlm_side_mark tlm_side_end(tlm_backend *be);
void tlm_side_join(tlm_backend *be, tlm_side_mark mark);

/* ---- ops on another stream -------------------------------------------------------------------------
 * Between tlm_stream_ops_begin(be, s) and tlm_stream_ops_end(be) the ops issued run on stream s (from
 * tlm_stream_create) instead of the compute stream, ordered against other streams only by the
 * caller's events. Only ops that use no workspace or scratch of the backend may run there (elementwise
 * ones: adamw_step, cast): model.h's overlapped optimizer issues its updates so. Where the backend has
 * one synchronous queue the ops run in place. Nesting, a side section inside, or either inside a side
 * section is a programming error (fatal). */
void tlm_stream_ops_begin(tlm_backend *be, tlm_stream *s);
void tlm_stream_ops_end(tlm_backend *be);

/* ---- CUDA graphs ---------------------------------------------------------------------------------
 * A pass as a CUDA graph: the first run with a key runs eagerly (it warms the GEMM plan cache),
 * the second is captured and launched, later runs replay it. The pass must issue only work on the
 * compute stream (and streams joined to it by events), with no synchronization, host copy or
 * allocation. `key` is what the capture depends on beyond the buffers (targets given, the loss
 * scale); a new key recaptures. Where the backend has no graphs, where `enabled` is false, or after
 * a capture failed once (the message set), fn runs eagerly every time. */
typedef struct {
    void *exec;     /* the captured graph, or NULL */
    uint32_t key;
    int warm;       /* one eager run with this key happened */
    int failed;     /* capture failed once: stay eager */
} tlm_graph;

typedef void (*tlm_graph_fn)(void *ctx, uint32_t key);

bool tlm_backend_has_graphs(const tlm_backend *be);
void tlm_graph_run(tlm_backend *be, tlm_graph *g, bool enabled, tlm_graph_fn fn, void *ctx, uint32_t key);
/* Forgets a captured graph: call it before the buffers it uses change. */
void tlm_graph_reset(tlm_backend *be, tlm_graph *g);

#ifdef __cplusplus
}
#endif
#endif
