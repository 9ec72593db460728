/* profile.h — tlm's profiler: where the time of a training step goes, per kernel, per phase, per
 * layer and per op, for tlm's own runs (CPU and CUDA) and for any CUDA program (`tlm profile
 * --exec`). Three parts:
 *
 *   1. The profile: plain data (tlm_profile). Activities (a GPU kernel, memcpy or memset, or on
 *      the CPU one op's run), the ops tlm dispatched, host ranges (step, phase, layer, stage; a
 *      foreign program's NVTX ranges), the API launches and CUDA graph nodes that tie activities
 *      to ops and ranges, and the tracked allocator's bytes in use over time. Built by the
 *      recorder, by the injection library in another process (saved to a file and loaded), or by
 *      hand in tests.
 *   2. The recorder (tlm_profiler_start/stop): on the CPU backend a dispatch hook (ops.h) times
 *      each op with the host clock (the CPU's ops are synchronous); on CUDA the CUPTI Activity
 *      API (NVIDIA, "CUPTI" user guide, Activity API: CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME,
 *      DRIVER, EXTERNAL_CORRELATION records) with the same hook: every op and range pushes a CUPTI
 *      external correlation id, so each launch API record (and with it each kernel, by
 *      correlation id) names the op and the range it was issued in; kernels replayed from a CUDA
 *      graph carry the graph launch's correlation (which names the step and phase) and the
 *      graph node id (CUpti_ActivityKernel10.graphNodeId) that the resource callbacks
 *      CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED / _CLONED mapped to the op being captured. Both
 *      record the tracked allocator's bytes in use (memory.h listener) as a counter.
 *   3. The analysis (tlm_profile_summarize): the kernel table per phase, the op table with the
 *      roofline columns (ops.def's FLOPs and bytes against ceilings measured on the device),
 *      the layer table, kernel time per range name, and the findings that answer the CS336
 *      profiling questions (docs/experiments.md) from those tables; and the Chrome trace-event file.
 *
 * Clock: every time in a profile is in nanoseconds since the profile's origin (int64), on one
 * clock per profile: CUPTI's timestamp (cuptiGetTimestamp) on CUDA, CLOCK_MONOTONIC on the CPU.
 * Tables report microseconds (µs) and milliseconds (ms) as their names say.
 * Errors: TLM_ERR_OUT_OF_MEMORY (host), TLM_ERR_IO / TLM_ERR_FORMAT (files), TLM_ERR_UNSUPPORTED
 * (CUDA without CUPTI), TLM_ERR_BACKEND (a CUPTI call failed: the message names it). */
#ifndef TLM_PROFILE_H
#define TLM_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "tlm/ops.h"
#include "tlm/precision.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlm_backend tlm_backend;

/* ---- 1. the profile ------------------------------------------------------------------------------ */

typedef enum { TLM_PROF_KERNEL = 0, TLM_PROF_MEMCPY = 1, TLM_PROF_MEMSET = 2 } tlm_prof_kind;

/* One piece of device work (on the CPU: one op's run, or one stage of it). The attribution fields
 * (op .. graph) are filled by the recorder on the CPU and by tlm_profile_resolve on CUDA. */
typedef struct {
    tlm_prof_kind kind;
    int32_t name;           /* string id (tlm_profile_str): the kernel's shortened name; the CPU: the op
                               ("matmul_forward") or op and stage ("attention_forward: computing softmax");
                               copies: "memcpy HtoD", "memset" */
    int64_t start_ns, end_ns;
    uint32_t stream;        /* CUPTI's stream id; 0 on the CPU */
    uint32_t correlation;   /* CUPTI correlation id of the launching API call (0: none) */
    uint64_t graph_node;    /* CUPTI graph node id when replayed from a CUDA graph, else 0 */
    uint64_t bytes;         /* memcpy / memset: bytes; kernels: 0 */
    /* attribution */
    int32_t op;             /* index into ops[] of the tlm op that issued it; -1: none */
    int32_t range;          /* innermost host range (index into ranges[]) it was issued in; -1: none */
    tlm_phase phase;        /* foreign programs: from an enclosing range named forward/backward/optimizer */
    int32_t layer;          /* -1 outside the blocks; at most TLM_PROF_MAX_LAYER */
    int32_t step;           /* -1 outside any step */
    bool warmup;            /* issued in a warm-up step: left out of the tables */
} tlm_prof_activity;

/* The largest layer number attributed (the layer table is dense in it): a foreign program's NVTX
 * range "layer N" with N above it names no layer; a profile file holding one is refused. */
#define TLM_PROF_MAX_LAYER 65535

/* One op tlm dispatched (ops.h), with the scope it ran in and ops.def's FLOPs and bytes. */
typedef struct {
    tlm_op_id op;
    tlm_scope scope;
    double flops, bytes;
    int64_t begin_ns, end_ns; /* the dispatch call on the host (on the CPU, the op's run) */
    bool captured;            /* dispatched during CUDA graph capture: its kernels run at the replays */
} tlm_prof_op;

/* Host range kinds: tlm_range_kind (ops.h: step, phase, layer, stage), and a foreign program's
 * NVTX range. */
enum { TLM_PROF_RANGE_NVTX = 4 };

typedef struct {
    int32_t name;             /* string id */
    int32_t kind;             /* tlm_range_kind or TLM_PROF_RANGE_NVTX */
    int64_t begin_ns, end_ns; /* a range still open when recording stopped ends there */
    uint32_t thread;          /* host thread (Linux thread id; tlm's own ranges: 0) */
    int32_t parent;           /* the enclosing range on the same thread, -1: none */
    tlm_scope scope;          /* tlm's ranges: the scope inside the range */
} tlm_prof_range;

/* A launching API call, by CUPTI correlation id: the op and innermost range current when it was
 * made (tlm's runs, from the external correlation ids), or its host time and thread (foreign
 * programs: the NVTX range is found by time on that thread). */
typedef struct {
    uint32_t correlation;
    int32_t op, range;        /* -1: none */
    int64_t api_ns;           /* start of the API call */
    uint32_t thread;
} tlm_prof_launch;

/* A CUDA graph node (CUPTI's node id) created while capturing: the op and innermost range then. */
typedef struct {
    uint64_t node;
    int32_t op, range;
} tlm_prof_graph_node;

/* The tracked allocator's bytes in use after an allocation or free (memory.h). */
typedef struct {
    int64_t t_ns;
    uint64_t in_use;
} tlm_prof_mem_sample;

typedef struct tlm_profile {
    char title[160];          /* "small ctx 256 batch 4 fp32 train" / the command line of --exec */
    char device[256];         /* the backend's description */
    bool foreign;             /* recorded by the injection library (--exec): ranges are NVTX */
    bool host_clock;          /* CPU backend: activities are the ops, timed on the host */
    bool resolved;            /* attribution filled (tlm_profile_resolve) */
    int64_t end_ns;           /* when recording stopped */
    uint64_t dropped;         /* activity records CUPTI dropped (buffers full): the tables miss them */
    tlm_prof_activity *acts;  size_t n_acts, cap_acts;
    tlm_prof_op *ops;         size_t n_ops, cap_ops;
    tlm_prof_range *ranges;   size_t n_ranges, cap_ranges;
    tlm_prof_launch *launches; size_t n_launches, cap_launches;
    tlm_prof_graph_node *nodes; size_t n_nodes, cap_nodes;
    tlm_prof_mem_sample *mem; size_t n_mem, cap_mem;
    char **strings;           size_t n_strings, cap_strings;
    int32_t *string_index;    size_t string_index_cap; /* open addressing over strings, internal */
} tlm_profile;

/* An empty profile (calloc'ed); free with tlm_profile_free (NULL is a no-op). */
tlm_status tlm_profile_create(tlm_profile **out);
void tlm_profile_free(tlm_profile *p);

/* The id of string s in p's table, added once (copied); -1 when out of memory. */
int32_t tlm_profile_intern(tlm_profile *p, const char *s);
/* The string of id; "?" for an id not in the table. Valid while p lives. */
const char *tlm_profile_str(const tlm_profile *p, int32_t id);

/* Appenders: copy *x to the end of its array; return its index, or -1 when out of memory. */
int64_t tlm_profile_add_activity(tlm_profile *p, const tlm_prof_activity *x);
int64_t tlm_profile_add_op(tlm_profile *p, const tlm_prof_op *x);
int64_t tlm_profile_add_range(tlm_profile *p, const tlm_prof_range *x);
int64_t tlm_profile_add_launch(tlm_profile *p, const tlm_prof_launch *x);
int64_t tlm_profile_add_node(tlm_profile *p, const tlm_prof_graph_node *x);
int64_t tlm_profile_add_mem(tlm_profile *p, const tlm_prof_mem_sample *x);

/* An activity with no attribution (op, range -1; phase SETUP; layer, step -1). */
tlm_prof_activity tlm_prof_activity_blank(tlm_prof_kind kind, int32_t name, int64_t start_ns, int64_t end_ns);

/* Fills each activity's attribution from the launches and graph nodes (once; a no-op when
 * p->resolved):
 *   tlm runs: op and range from the graph node when the activity was replayed from a graph
 *     (else from its launch); phase and layer from the op's scope; step and warm-up from the
 *     range current at the launch (for a graph replay: the phase range it was launched in);
 *   foreign runs: the innermost NVTX range open at the launch's host time on the launching
 *     thread (if none there, on any thread: PyTorch runs backward on its own thread); phase
 *     from the innermost enclosing range named "forward", "backward" or "optimizer"
 *     ("optimizer step" too), layer from "layer N", step and warm-up from "step N" / "warmup
 *     step N" (the names tlm's own ranges have).
 * An activity with no launch at all (tlm runs) keeps op = range = -1 and phase SETUP, and is put in
 * the step begun last on the host before it started; the summary counts it as unattributed. */
void tlm_profile_resolve(tlm_profile *p);

/* The file the injection library writes and `tlm profile --exec` reads: a binary dump of the
 * profile (magic "TLMPROF1", native byte order, fixed-size records, then the string table).
 * write: to f (the caller writes it to a temporary name and renames it); read: from f, `name`
 * for messages, every count checked against what is left of the file. Errors: IO (naming the
 * file), FORMAT (not such a file, truncated), OUT_OF_MEMORY. */
tlm_status tlm_profile_write(const tlm_profile *p, FILE *f);
tlm_status tlm_profile_read(tlm_profile **out, FILE *f, const char *name);

/* ---- 2. the recorder ------------------------------------------------------------------------------ */

typedef struct tlm_profiler tlm_profiler;

/* Starts recording what `be` runs: adds a dispatch hook and a memory listener to it, and on CUDA
 * starts CUPTI (one profiler at a time per process: INVALID_ARGUMENT otherwise). title names the
 * profile. Errors: UNSUPPORTED (a CUDA build without CUPTI), BACKEND (CUPTI), OUT_OF_MEMORY. */
tlm_status tlm_profiler_start(tlm_profiler **out, tlm_backend *be, const char *title);

/* Stops: waits for the device, flushes CUPTI's buffers, removes the hook and listener, resolves
 * the attribution, and gives the profile to the caller (*out; free it with tlm_profile_free).
 * Frees the profiler either way. */
tlm_status tlm_profiler_stop(tlm_profiler *pr, tlm_profile **out);

/* True where tlm_profiler_start can record this backend (the CPU always; CUDA when built with
 * CUPTI). */
bool tlm_profiler_available(const tlm_backend *be);

/* ---- 3. the analysis ------------------------------------------------------------------------------ */

/* Kernel classes: the op classes (ops.h) plus memory copies (memcpy, memset). */
typedef enum {
    TLM_KCLASS_GEMM = TLM_OP_CLASS_GEMM,
    TLM_KCLASS_ATTENTION = TLM_OP_CLASS_ATTENTION,
    TLM_KCLASS_NORMALIZATION = TLM_OP_CLASS_NORMALIZATION,
    TLM_KCLASS_ELEMENTWISE = TLM_OP_CLASS_ELEMENTWISE,
    TLM_KCLASS_REDUCTION = TLM_OP_CLASS_REDUCTION,
    TLM_KCLASS_OPTIMIZER = TLM_OP_CLASS_OPTIMIZER,
    TLM_KCLASS_MEMORY = TLM_OP_CLASS_COUNT, /* "memory copy" */
    TLM_KCLASS_COUNT
} tlm_kernel_class;

const char *tlm_kernel_class_name(tlm_kernel_class c); /* "gemm", ..., "memory copy" */

/* The class of an activity: memcpy/memset are memory copies; a kernel whose name is a GEMM's
 * (cuBLAS/cuBLASLt/CUTLASS names: gemm, xmma, nvjet, cutlass, matmul) is a GEMM whatever op
 * launched it (the naive attention's two products); the CPU's attention stages "computing
 * attention scores" and "final matmul" are GEMMs; else the op's class; with no op (foreign
 * programs) by name: softmax/attention/flash/fmha -> attention, norm -> normalization,
 * adam/optim/multi_tensor -> optimizer, reduce -> reduction, else elementwise. */
tlm_kernel_class tlm_profile_classify(const tlm_profile *p, const tlm_prof_activity *a);

/* Demangles (the C++ ABI's __cxa_demangle, looked up at run time; mangled names without it keep
 * their last identifier) and shortens a kernel name into out (n bytes): no return type, no
 * parameter list, no namespace qualifiers, CUTLASS's Kernel/device_kernel wrapper dropped for its
 * template argument, at most `max_chars` characters ("..." at the end when cut). */
void tlm_kernel_name_short(const char *raw, char *out, size_t n, size_t max_chars);

/* Device ceilings measured by tlm (tlm_profile_measure_ceilings): GEMM TFLOP/s per precision
 * mode (0: not measured) and copy bandwidth in GB/s (10^9 bytes/s, bytes read + written). */
typedef struct {
    double gemm_tflops[TLM_PRECISION_COUNT];
    double copy_gbps;
    int gemm_n;          /* the square GEMM's size (n x n x n) */
    size_t copy_bytes;   /* bytes moved by one copy (read + write) */
} tlm_ceilings;

/* Measures the ceilings on `be` for the precision modes with want[p] true: the best of several
 * timed n^3 GEMMs through the backend's matmul_forward op (n = 8192 on CUDA, 1024 on the CPU) and
 * the best of several copies of a large float32 buffer through its cast op (F32 to F32: a copy;
 * 1 GiB moved on CUDA, 128 MiB on the CPU). Keeps what *c already holds for other modes.
 * Errors: OUT_OF_MEMORY (the buffers). */
tlm_status tlm_profile_measure_ceilings(tlm_backend *be, const bool want[TLM_PRECISION_COUNT], tlm_ceilings *c);

/* One row of the kernel table: a kernel name in a phase, over the profiled (non-warm-up) steps. */
typedef struct {
    tlm_phase phase;
    const char *name;         /* into the profile's strings */
    tlm_kernel_class cls;
    int64_t calls;
    double calls_per_step;
    double total_us;          /* over all profiled steps */
    double per_step_us;
    double mean_us, min_us, max_us; /* per call */
    double pct_of_phase;      /* of the phase's busy time (sum of its activities' durations) */
} tlm_prof_kernel_row;

/* One row of the op table (tlm's runs): an op in a phase, with the roofline columns. */
typedef struct {
    tlm_phase phase;
    tlm_op_id op;
    int64_t calls;            /* dispatches in profiled steps (graph replays counted per replay) */
    double calls_per_step;
    double kernels_per_call;  /* activities per dispatch (cuBLASLt may launch more than one per GEMM) */
    double per_step_us;       /* its activities' time per step */
    double pct_of_phase;
    double flops_per_step, bytes_per_step; /* ops.def's counts */
    double tflops, gbps;      /* achieved: FLOPs / time (TFLOP/s), bytes / time (GB/s, 10^9) */
    double pct_of_peak_flops; /* of the ceiling of the run's precision (the GEMM ceiling) */
    double pct_of_peak_bw;    /* of the copy ceiling */
    double pct_of_roofline;   /* achieved / min(peak, intensity x bandwidth) = max of the two above */
    bool memory_bound;        /* intensity x bandwidth < peak */
} tlm_prof_op_row;

typedef struct {
    tlm_phase phase;
    int layer;                /* -1: outside the blocks (embedding, final norm, lm_head, loss) */
    double per_step_us;
    double pct_of_phase;
} tlm_prof_layer_row;

/* Kernel time per host range name (every activity counted in each range that encloses its launch:
 * "forward", "computing softmax", "layer 3"), over profiled steps; step ranges left out. */
typedef struct {
    const char *name;
    int kind;                 /* tlm_range_kind or TLM_PROF_RANGE_NVTX */
    double count_per_step;    /* how many times the range was opened per profiled step */
    double per_step_us;       /* kernel time issued inside it per step */
    double total_us;
} tlm_prof_range_row;

/* Per phase, per profiled step. */
typedef struct {
    double busy_us;           /* sum of the phase's activity durations */
    double span_us;           /* first start to last end, mean over steps */
    double kernels;           /* activities (kernels, copies) */
    double gemm_us;
} tlm_prof_phase_stats;

/* What the caller knows beyond the profile: the run's precision (for the GEMM ceiling), the
 * model's d_head (for the attention FLOP ratio; 0: unknown), wall-clock phase times of the same
 * run (tlm bench's event-timed means, ms; NaN: not known), and the ceilings (NULL: no roofline
 * fractions). */
typedef struct {
    tlm_precision precision;
    int d_head;
    double wall_ms[TLM_PHASE_COUNT];
    const tlm_ceilings *ceilings;
} tlm_prof_context;

#define TLM_PROF_MAX_FINDINGS 12

/* The answers to the seeds' questions (docs/experiments.md), each from the tables; NaN / NULL where the
 * profile has no such phase. */
typedef struct {
    double fwd_busy_ms, fwd_span_ms, fwd_wall_ms;
    const char *fwd_leader;       /* the kernel with the most forward time */
    double fwd_leader_pct, fwd_leader_calls_per_step;
    const char *fb_leader;        /* the same over forward + backward */
    double fb_leader_pct;
    bool same_leader;
    double non_gemm_pct;          /* non-GEMM share of all profiled time (every phase) */
    const char *non_gemm[4];      /* the non-GEMM kernels with >= 1% of it, largest first */
    double non_gemm_share[4];
    int n_non_gemm;
    double gemm_pct_forward, gemm_pct_step; /* GEMM share of the forward phase; of the whole step */
    bool step_has_optimizer;
    /* naive attention, forward, per step: the three stages' kernel time (ms) and FLOPs */
    double attn_scores_ms, attn_softmax_ms, attn_final_ms;
    double attn_matmul_flops_per_softmax_flop; /* 4 d_head / 5 (ops.def); NaN when d_head unknown */
    double flash_fwd_ms, flash_bwd_ms;          /* the fused kernels (FlashAttention-2) per step */
    char text[TLM_PROF_MAX_FINDINGS][400];      /* the sentences */
    int n_text;
} tlm_prof_findings;

typedef struct {
    int steps;                    /* profiled steps (at least 1) */
    int64_t activities;           /* counted: those of profiled steps */
    int64_t unattributed;         /* tlm's runs: counted activities with no launch record (no op, no range) */
    tlm_prof_phase_stats phase[TLM_PHASE_COUNT];
    tlm_prof_kernel_row *kernels; size_t n_kernels;  /* by phase, then time, largest first */
    tlm_prof_op_row *ops;         size_t n_ops;      /* tlm's runs: by phase, then time */
    tlm_prof_layer_row *layers;   size_t n_layers;   /* by phase, then layer */
    tlm_prof_range_row *ranges;   size_t n_ranges;   /* by first appearance */
    tlm_prof_findings findings;
} tlm_prof_summary;

/* Builds the tables and findings of a resolved profile (resolves it first if needed). The
 * summary points into p's strings: keep p alive while using it. Free with tlm_prof_summary_free. */
tlm_status tlm_profile_summarize(tlm_profile *p, const tlm_prof_context *ctx, tlm_prof_summary *out);
void tlm_prof_summary_free(tlm_prof_summary *s);

/* Writes profiles as one Chrome trace-event JSON file (the "JSON Array/Object Format" of the
 * Trace Event Format document; Perfetto and chrome://tracing open it): one process per profile
 * (named by its title), on it the host track(s) (tid 0 for tlm's ranges and ops, the thread id
 * for a foreign program's NVTX ranges) with properly nested B/E events, one track per stream for
 * kernels and memcpy/memset ("X" events, args: class, op, phase, layer, bytes), and a counter
 * ("C") "tracked bytes in use". Times in µs. Through the one file writer (output.h): an
 * unwritable path gives IO and no file. */
tlm_status tlm_profile_write_trace(const char *path, tlm_profile *const *profiles, int n);

#ifdef __cplusplus
}
#endif
#endif
