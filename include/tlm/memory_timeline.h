/* memory_timeline.h — the memory timeline: every allocation and free of the tracked allocator
 * (memory.h) and every op of the dispatch (ops.h) over a window of steps, recorded by a memory
 * listener and a dispatch hook; and what `tlm memory` makes of it: the peaks table, the largest
 * allocations with their lifetimes, the event stream as JSON (for `tlm plot`), and a snapshot in the
 * format of PyTorch's torch.cuda.memory._dump_snapshot, which pytorch.org/memory_viz opens.
 *
 *   tlm_mem_timeline *t;
 *   TLM_TRY(tlm_mem_timeline_start(&t, be));       before the warm-up
 *   ... warm-up steps and one measured step (tlm_step_begin/end around each) ...
 *   tlm_mem_timeline_stop(t);                       detaches; the record stays
 *   tlm_mem_peaks p; tlm_mem_timeline_peaks(t, step, &p);
 *   tlm_mem_timeline_free(t);
 *
 * Bytes are bytes; GiB = 2^30. Times are the host clock in microseconds since the backend was
 * created (memory.h's tlm_mem_event.time_us): on a GPU the host issues work ahead of the device, so
 * order the events by op_seq (ops dispatched before the event), which is the program order on both.
 * Ops and layers are known where the passes are issued on the host (eagerly, or while a CUDA graph
 * is captured; a replay issues no host calls): `tlm memory` runs without CUDA graphs.
 *
 * For tlm profile's counter track: tlm_mem_timeline_event's in_use, footprint and
 * by_category over time_us are the bytes in use per category after each event. */
#ifndef TLM_MEMORY_TIMELINE_H
#define TLM_MEMORY_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/backend.h"
#include "tlm/bench.h"
#include "tlm/memory.h"
#include "tlm/ops.h"
#include "tlm/output.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What memory holds: the allocator's tags (memory.h), with the bf16/fp16 GEMM copy of the weights
 * (tag parameters, named "parameters.bf16" / "parameters.fp16") apart from the float32 master
 * weights. */
typedef enum {
    TLM_MEMCAT_PARAMETERS = 0,
    TLM_MEMCAT_WEIGHT_COPY,
    TLM_MEMCAT_GRADIENTS,
    TLM_MEMCAT_OPTIMIZER,
    TLM_MEMCAT_ACTIVATIONS,
    TLM_MEMCAT_WORKSPACE,
    TLM_MEMCAT_COUNT
} tlm_memcat;

const char *tlm_memcat_name(tlm_memcat c); /* "parameters", "weight copy", "gradients", "optimizer state",
                                              "activations", "workspace" */
const char *tlm_memcat_key(tlm_memcat c);  /* the same as a field name: "parameters", "weight_copy", ... */
tlm_memcat tlm_memcat_of(tlm_mem_tag tag, const char *name);

/* One allocation, over the recorded window. op_seq values number the ops of the backend
 * (ops.h); an allocation made before the window started has alloc_op UINT64_MAX (and before = true),
 * one alive when it stopped has free_op UINT64_MAX. */
typedef struct {
    char name[64];
    size_t bytes;
    tlm_memcat category;
    uint64_t addr;            /* the address, for the snapshot */
    uint64_t arena;           /* the arena it is placed in (memory.h), or 0 */
    bool before;              /* alive when the recording started */
    double alloc_us, free_us; /* free_us < 0: alive when it stopped */
    uint64_t alloc_op, free_op;
    tlm_scope alloc_scope, free_scope; /* phase, layer, step at the events */
    int32_t alloc_event, free_event;   /* indices into the events; -1: outside the window */
} tlm_mem_allocation;

/* One event: an allocation or a free, and the bytes in use after it. */
typedef struct {
    double time_us;
    tlm_scope scope;          /* phase, layer, step, op_seq (ops dispatched before it) */
    bool alloc;               /* false: a free */
    uint32_t allocation;      /* index into the allocations */
    size_t in_use;            /* tracked bytes in use after it (memory.h: current_total) */
    size_t footprint;         /* bytes held from the device after it (memory.h: footprint) */
    size_t by_category[TLM_MEMCAT_COUNT]; /* in_use by category */
} tlm_mem_timeline_event;

/* One op issued on the host, as the dispatch hook saw it. */
typedef struct {
    tlm_op_id op;
    tlm_scope scope;          /* scope.op_seq numbers it */
} tlm_mem_timeline_op;

/* A step or phase boundary (ops.h ranges): phases are marked in every step, with or without graphs. */
typedef struct {
    bool begin;
    bool step;                /* a step boundary; else a phase */
    tlm_scope scope;          /* after entering (begin) / before leaving (end) */
    int32_t event;            /* events recorded before it */
    size_t in_use, footprint; /* tracked bytes then */
    size_t device_used;       /* the device's own count then (0 without one) */
} tlm_mem_timeline_mark;

typedef struct tlm_mem_timeline tlm_mem_timeline;

/* Starts recording on `be` (a memory listener and a dispatch hook): every live allocation becomes
 * an allocation with before = true. Errors: INVALID_ARGUMENT when the backend has no free listener
 * or hook slot, OUT_OF_MEMORY. Recording runs out of host memory only past ~100 million events: it
 * then stops recording and tlm_mem_timeline_stop reports OUT_OF_MEMORY. */
tlm_status tlm_mem_timeline_start(tlm_mem_timeline **out, tlm_backend *be);
/* Stops recording (detaches from the backend; notes the arenas reserved now). OUT_OF_MEMORY when
 * events were lost. Idempotent. */
tlm_status tlm_mem_timeline_stop(tlm_mem_timeline *t);
void tlm_mem_timeline_free(tlm_mem_timeline *t);

/* The record. Pointers stay valid until tlm_mem_timeline_free (or more recording). */
int tlm_mem_timeline_num_events(const tlm_mem_timeline *t);
const tlm_mem_timeline_event *tlm_mem_timeline_events(const tlm_mem_timeline *t);
int tlm_mem_timeline_num_allocations(const tlm_mem_timeline *t);
const tlm_mem_allocation *tlm_mem_timeline_allocations(const tlm_mem_timeline *t);
int tlm_mem_timeline_num_marks(const tlm_mem_timeline *t);
const tlm_mem_timeline_mark *tlm_mem_timeline_marks(const tlm_mem_timeline *t);
/* The op numbered op_seq, or NULL when it was not seen (a graph replay, outside the window). */
const tlm_mem_timeline_op *tlm_mem_timeline_op_at(const tlm_mem_timeline *t, uint64_t op_seq);
/* The bytes in use by category when the recording started. */
const size_t *tlm_mem_timeline_start_bytes(const tlm_mem_timeline *t); /* [TLM_MEMCAT_COUNT] */

/* The arenas (memory.h) reserved when the recording stopped. */
typedef struct {
    uint64_t addr;
    size_t bytes;
    char name[64];
} tlm_mem_timeline_arena;
int tlm_mem_timeline_num_arenas(const tlm_mem_timeline *t);
const tlm_mem_timeline_arena *tlm_mem_timeline_arenas(const tlm_mem_timeline *t);

/* ---- analysis ------------------------------------------------------------------------------------- */

/* The peaks table of one step (ops.h step number `step`, not a warm-up step; -1: the last step
 * recorded). */
typedef struct {
    int step;
    size_t peak;                 /* tracked bytes in use at the step's peak (current_total) */
    tlm_scope peak_scope;        /* where: phase, layer, op_seq */
    const char *peak_op;         /* the op issued next after the peak ("?" when unknown) */
    size_t at_peak[TLM_MEMCAT_COUNT]; /* what was live then, by category */
    size_t peak_footprint;       /* the most bytes held from the device (arenas whole) */
    size_t start;                /* in use when the step began */
    size_t after_forward;        /* in use when the forward pass ended */
    size_t backward_peak;        /* the most in use during the backward pass (0: none) */
    size_t before_optimizer, optimizer_peak, after_optimizer; /* around the optimizer step (0: none) */
    size_t device_peak;          /* the device's own count (tlm_device_memory_used) at the step's phase
                                    boundaries, highest, less what the device held outside tlm's
                                    allocator when recording began; 0 without a count (CPU) */
} tlm_mem_peaks;

/* The peaks of step `step`. INVALID_ARGUMENT when that step was not recorded. */
tlm_status tlm_mem_timeline_peaks(const tlm_mem_timeline *t, int step, tlm_mem_peaks *out);

/* Why an allocation exists, from its category and the phases it lived between. */
typedef enum {
    TLM_MEMWHY_STATE = 0,        /* parameters, weight copy, optimizer state: lives across steps */
    TLM_MEMWHY_SAVED,            /* written by the forward, read by the backward */
    TLM_MEMWHY_GRADIENT,         /* a gradient, until the optimizer step (or its update) */
    TLM_MEMWHY_SCRATCH,          /* lives within one phase */
    TLM_MEMWHY_OUTPUT,           /* a step's input or output (tokens, logits, losses) */
    TLM_MEMWHY_WORKSPACE,        /* tables and library workspaces kept across steps */
    TLM_MEMWHY_COUNT
} tlm_memwhy;
const char *tlm_memwhy_name(tlm_memwhy w); /* "state", "saved for backward", "gradient", "scratch", ... */
tlm_memwhy tlm_mem_allocation_why(const tlm_mem_allocation *a);

/* The n largest allocations alive at some point of step `step` (-1: the last): indices into the
 * allocations, largest first, ties by allocation order, into out[0..*count). An allocation placed
 * anew each step counts once per step; those of `step` are taken. */
tlm_status tlm_mem_timeline_largest(const tlm_mem_timeline *t, int step, int n, int *out, int *count);

/* "rmsnorm_forward (layer 3, forward)" for op op_seq, into buf; "before the window" / "after the
 * window" for UINT64_MAX as the first / last op, "?" when the op was not seen. */
void tlm_mem_timeline_op_label(const tlm_mem_timeline *t, uint64_t op_seq, char *buf, size_t n);

/* ---- files ---------------------------------------------------------------------------------------- */

/* The event stream as JSON for `tlm plot` (src/plot/plot_memory.c reads it): an object with "kind":
 * "tlm.memory_timeline", "meta" (the caller's key/value strings: model, context, precision, ...),
 * "categories" (keys), "start" (bytes by category when recording began), "events" (each: t_us,
 * op_seq, step, warmup, phase, layer, action alloc|free, bytes, category, name, in_use, footprint,
 * by_category), "marks" (step and phase boundaries: t_us, op_seq, step, warmup, kind step|phase, name,
 * begin, in_use) and "peaks" of the last step. Written through the one file writer (output.h).
 * meta: n pairs of key and value (strings). */
tlm_status tlm_mem_timeline_write_json(const tlm_mem_timeline *t, const char *path, const char *const *meta_keys,
                                       const char *const *meta_values, int n_meta);

/* A snapshot as torch.cuda.memory._dump_snapshot writes it, so pytorch.org/memory_viz and
 * `python -m torch.cuda._memory_viz trace_plot` open it: a pickle (protocol 2; only the opcodes the
 * viewer's JavaScript unpickler knows: PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS,
 * BINUNICODE, BININT1/2, BININT, LONG1, NONE, NEWTRUE, NEWFALSE, STOP) of
 *   {"segments": [{"device", "address", "total_size", "allocated_size", "active_size",
 *                  "requested_size", "stream", "segment_type", "is_expandable", "frames",
 *                  "blocks": [{"address", "size", "requested_size", "state", "frames"}]}],
 *    "device_traces": [[{"action": "alloc" | "free_requested" | "free_completed", "addr", "size",
 *                        "stream", "time_us", "frames": [{"filename", "line", "name"}]}]]}
 * The segments are the state when recording stopped: an arena is one segment, its placed
 * allocations its blocks (the gaps "inactive"); any other live allocation a segment of one block.
 * The frames name, innermost first, the buffer and its category, the op next issued with its phase
 * and layer, and the step. Written through the one file writer (output.h). */
tlm_status tlm_mem_timeline_write_snapshot(const tlm_mem_timeline *t, const char *path, int device);

/* ---- tlm memory's measurement of a case (src/memory/measure.c) --------------------------------------- */

#define TLM_MEM_MAX_TOP 100

/* One of the largest allocations: its lifetime from the op first run with it to the last before it
 * was freed ("before the warm-up", "still alive" at the window's ends). */
typedef struct {
    char name[64];
    size_t bytes;
    tlm_memcat category;
    tlm_memwhy why;
    char from[96], to[96];
} tlm_mem_top;

typedef struct {
    tlm_status status;           /* TLM_OK, or the case's failure (OUT_OF_MEMORY: an OOM row) */
    char error[400];
    tlm_attention attention;     /* the attention the case runs */
    tlm_mem_peaks peaks;         /* of the measured step */
    tlm_memory_estimate plan;    /* the model's memory plan of the case */
    tlm_mem_top top[TLM_MEM_MAX_TOP];
    int n_top;
    int max_context;             /* tlm_bench_max_context within memory_limit; -1: not asked */
} tlm_mem_measurement;

/* Measures case c on `be` through the benchmark's step (tlm_bench_run, c->warmup warm-up steps and
 * one measured step, without CUDA graphs) with the timeline recording from right after the model's
 * creation to its last step: the peaks of the measured step, the model's plan, the `top` (<=
 * TLM_MEM_MAX_TOP) largest allocations, and with memory_limit > 0 the longest context that fits in
 * it. The case's failure (out of memory) is r->status; *out (NULL: not wanted) gets the timeline for
 * the files (the caller frees it; NULL when the case failed). Returns OUT_OF_MEMORY (host) or the
 * like when the measurement could not run. */
tlm_status tlm_mem_measure(tlm_backend *be, const tlm_bench_case *c, size_t memory_limit, int top,
                           tlm_mem_measurement *r, tlm_mem_timeline **out);

/* The files of a measured case: the event stream as JSON (json_path; its meta: the case, the
 * attention and the device) and the snapshot (snapshot_path); a NULL path is not written. */
tlm_status tlm_mem_write_case_files(const tlm_mem_timeline *t, const tlm_bench_case *c, tlm_attention attention,
                                    const tlm_backend *be, const char *json_path, const char *snapshot_path);

/* The name of one configuration's file among several (tlm memory --timeline, --snapshot): FILE.ext ->
 * FILE-label.ext (label NULL: FILE.ext itself), into buf (n bytes). */
void tlm_mem_file_for(const char *path, const char *label, char *buf, size_t n);

/* Declares (output.h, tlm_io_plan) the files `flag` FILE.ext names for n configurations: FILE.ext
 * itself for one, every FILE-<label>.ext for several. A NULL path declares nothing. */
void tlm_mem_plan_files(tlm_io_plan *plan, const char *flag, const char *path, int n);

#ifdef __cplusplus
}
#endif
#endif
