/* ops.h — where an op is dispatched. From the one list (ops.def) it makes the op ids, the table
 * type every backend fills (tlm_ops), and one dispatch function per op, tlm_<op>(be, ...), through
 * which the model and every other caller run it. The dispatch carries the hooks: listeners that
 * see each op (its phase, layer, FLOPs and bytes moved) before and after it is issued, and the
 * ranges around ops (a step, a phase, a layer, a stage inside an op). NVTX ranges, profilers and
 * per-op FLOP/byte accounting are hooks; nothing else writes ranges.
 *
 *   tlm_rmsnorm_forward(be, out, rstd, x, w, N, C, eps, dt);    runs be->ops->rmsnorm_forward
 *
 * The scope (phase, layer, step) is set by whoever drives the work: the bench or trainer opens a
 * step (tlm_step_begin), the model opens its phases and layers (tlm_phase_begin, tlm_layer_begin);
 * each op event, and each memory event (memory.h), carries the scope current when it happened.
 * During CUDA graph capture (backend.h) hooks see the ops once, as they are captured; a replay
 * issues no host calls and no op events. */
#ifndef TLM_OPS_H
#define TLM_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/dtype.h"
#include "tlm/precision.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlm_backend tlm_backend;

/* expands a parenthesised list: TLM_UNPAREN (a, b) -> a, b */
#define TLM_UNPAREN(...) __VA_ARGS__

typedef enum {
#define TLM_OP(ID, name, cls, params, args, flops, bytes) TLM_OP_##ID,
#include "tlm/ops.def"
#undef TLM_OP
    TLM_OP_COUNT
} tlm_op_id;

typedef enum {
    TLM_OP_CLASS_GEMM = 0,
    TLM_OP_CLASS_ATTENTION,
    TLM_OP_CLASS_NORMALIZATION,
    TLM_OP_CLASS_ELEMENTWISE,
    TLM_OP_CLASS_REDUCTION,
    TLM_OP_CLASS_OPTIMIZER,
    TLM_OP_CLASS_COUNT
} tlm_op_class;

const char *tlm_op_name(tlm_op_id op);              /* "rmsnorm_forward" */
tlm_op_class tlm_op_class_of(tlm_op_id op);
const char *tlm_op_class_name(tlm_op_class c);      /* "gemm", "attention", "normalization", ... */

/* The table every backend fills: one function per op, `be` first, then the op's parameters. */
typedef struct tlm_ops {
#define TLM_OP(ID, name, cls, params, args, flops, bytes) void (*name)(tlm_backend * be, TLM_UNPAREN params);
#include "tlm/ops.def"
#undef TLM_OP
} tlm_ops;

/* ---- the dispatch: tlm_<op>(be, params) runs be->ops-><op> with the hooks around it -------- */
#define TLM_OP(ID, name, cls, params, args, flops, bytes) void tlm_##name(tlm_backend *be, TLM_UNPAREN params);
#include "tlm/ops.def"
#undef TLM_OP

/* float32 elements of the flash_attention_backward workspace: delta (B,H,Tq) and the fp32 dQ
 * accumulator (B,H,Tq,D). */
static inline size_t tlm_flash_workspace_floats(int B, int Tq, int H, int D) {
    return (size_t)B * H * Tq * ((size_t)D + 1);
}

/* ---- scope ------------------------------------------------------------------------------------ */

/* What part of a training step is running. SETUP: anything outside the three phases (creating
 * the model, loading weights, copying a batch). */
typedef enum {
    TLM_PHASE_SETUP = 0,
    TLM_PHASE_FORWARD,
    TLM_PHASE_BACKWARD,
    TLM_PHASE_OPTIMIZER,
    TLM_PHASE_COUNT
} tlm_phase;

const char *tlm_phase_name(tlm_phase p); /* "setup", "forward", "backward", "optimizer" */

typedef struct {
    tlm_phase phase;
    int layer;        /* Transformer block, -1 outside the blocks */
    int step;         /* the step the driver opened, -1 outside any */
    bool warmup;      /* that step is a warm-up step (profilers leave it out) */
    uint64_t op_seq;  /* ops dispatched on this backend so far: orders op and memory events */
} tlm_scope;

/* ---- hooks -------------------------------------------------------------------------------------- */

/* One dispatched op, as a hook sees it. */
typedef struct {
    tlm_op_id op;
    tlm_scope scope;  /* scope.op_seq numbers this op (0 for the first) */
    double flops;     /* ops.def's count for these arguments */
    double bytes;
} tlm_op_event;

/* Ranges, nested: a step holds phases, a phase holds layers and ops, an op may announce stages. */
typedef enum { TLM_RANGE_STEP = 0, TLM_RANGE_PHASE, TLM_RANGE_LAYER, TLM_RANGE_STAGE } tlm_range_kind;

typedef struct {
    tlm_range_kind kind;
    const char *name;  /* "step 3" / "warmup step 0", "forward", "layer 7", "computing softmax" */
    tlm_scope scope;   /* after entering (begin) / before leaving (end) */
} tlm_range_event;

/* A listener on the dispatch; any callback may be NULL. Called on the host thread that issues
 * the work, in issue order: on a GPU an op may still be running (or not yet started) when
 * op_end is called. */
typedef struct tlm_hook {
    void *user;
    void (*op_begin)(void *user, const tlm_op_event *e);
    void (*op_end)(void *user, const tlm_op_event *e);
    void (*range_begin)(void *user, const tlm_range_event *e);
    void (*range_end)(void *user, const tlm_range_event *e);
} tlm_hook;

#define TLM_MAX_HOOKS 4

/* Adds a hook (the struct is copied); TLM_ERR_INVALID_ARGUMENT when TLM_MAX_HOOKS are set.
 * Removes the hook whose `user` and callbacks equal h's. */
tlm_status tlm_hook_add(tlm_backend *be, const tlm_hook *h);
void tlm_hook_remove(tlm_backend *be, const tlm_hook *h);

/* ---- ranges: each opens a scope level and tells the hooks ------------------------------------------ */
void tlm_step_begin(tlm_backend *be, int step, bool warmup);
void tlm_step_end(tlm_backend *be);
void tlm_phase_begin(tlm_backend *be, tlm_phase phase);
void tlm_phase_end(tlm_backend *be);                 /* back to TLM_PHASE_SETUP */
void tlm_layer_begin(tlm_backend *be, int layer);
void tlm_layer_end(tlm_backend *be);                 /* back to -1 */
/* a named part of an op (the naive attention's three stages); `name` must outlive the call */
void tlm_stage_begin(tlm_backend *be, const char *name);
void tlm_stage_end(tlm_backend *be, const char *name);

/* The scope now. */
tlm_scope tlm_scope_now(const tlm_backend *be);

#ifdef __cplusplus
}
#endif
#endif
