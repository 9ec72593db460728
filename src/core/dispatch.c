/* dispatch.c — where every op is dispatched (ops.h): one function per op of ops.def, generated
 * here, that tells the hooks, calls the backend's kernel and counts the op; the op names and
 * classes; the scope (step, phase, layer) and the ranges that the hooks see. */
#include <stdio.h>
#include <string.h>

#include "core/backend_state.h"

/* ---- names -------------------------------------------------------------------------------------- */

static const char *const op_names[TLM_OP_COUNT] = {
#define TLM_OP(ID, name, cls, params, args, flops, bytes) #name,
#include "tlm/ops.def"
#undef TLM_OP
};

static const tlm_op_class op_classes[TLM_OP_COUNT] = {
#define TLM_OP(ID, name, cls, params, args, flops, bytes) TLM_OP_CLASS_##cls,
#include "tlm/ops.def"
#undef TLM_OP
};

const char *tlm_op_name(tlm_op_id op) { return (unsigned)op < TLM_OP_COUNT ? op_names[op] : "?"; }

tlm_op_class tlm_op_class_of(tlm_op_id op) { return (unsigned)op < TLM_OP_COUNT ? op_classes[op] : TLM_OP_CLASS_COUNT; }

const char *tlm_op_class_name(tlm_op_class c) {
    static const char *const names[TLM_OP_CLASS_COUNT] = {"gemm",        "attention", "normalization",
                                                          "elementwise", "reduction", "optimizer"};
    return (unsigned)c < TLM_OP_CLASS_COUNT ? names[c] : "?";
}

const char *tlm_phase_name(tlm_phase p) {
    static const char *const names[TLM_PHASE_COUNT] = {"setup", "forward", "backward", "optimizer"};
    return (unsigned)p < TLM_PHASE_COUNT ? names[p] : "?";
}

/* ---- the dispatch functions ----------------------------------------------------------------------
 * With no hook the op is one indirect call. With hooks, the FLOPs and bytes of ops.def are
 * computed from the arguments and each hook sees the op before and after it is issued. */

static void op_begin(const struct tlm_backend_state *s, const tlm_op_event *e) {
    for (int i = 0; i < s->num_hooks; i++)
        if (s->hooks[i].op_begin) s->hooks[i].op_begin(s->hooks[i].user, e);
}

static void op_end(const struct tlm_backend_state *s, const tlm_op_event *e) {
    for (int i = s->num_hooks - 1; i >= 0; i--)
        if (s->hooks[i].op_end) s->hooks[i].op_end(s->hooks[i].user, e);
}

#define TLM_OP(ID, name, cls, params, args, flops, bytes)                                     \
    void tlm_##name(tlm_backend *be, TLM_UNPAREN params) {                                    \
        struct tlm_backend_state *s_ = be->state;                                             \
        if (s_->num_hooks) {                                                                  \
            const tlm_op_event e_ = {TLM_OP_##ID, s_->scope, (double)(flops), (double)(bytes)}; \
            op_begin(s_, &e_);                                                                \
            be->ops->name(be, TLM_UNPAREN args);                                         \
            op_end(s_, &e_);                                                                  \
        } else {                                                                              \
            be->ops->name(be, TLM_UNPAREN args);                                         \
        }                                                                                     \
        s_->scope.op_seq++;                                                                   \
    }
#include "tlm/ops.def"
#undef TLM_OP

/* ---- hooks ---------------------------------------------------------------------------------------- */

static bool same_hook(const tlm_hook *a, const tlm_hook *b) {
    return a->user == b->user && a->op_begin == b->op_begin && a->op_end == b->op_end &&
           a->range_begin == b->range_begin && a->range_end == b->range_end;
}

tlm_status tlm_hook_add(tlm_backend *be, const tlm_hook *h) {
    struct tlm_backend_state *s = be->state;
    if (s->num_hooks == TLM_MAX_HOOKS) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "at most %d hooks", TLM_MAX_HOOKS);
    s->hooks[s->num_hooks++] = *h;
    return TLM_OK;
}

void tlm_hook_remove(tlm_backend *be, const tlm_hook *h) {
    struct tlm_backend_state *s = be->state;
    for (int i = 0; i < s->num_hooks; i++)
        if (same_hook(&s->hooks[i], h)) {
            memmove(&s->hooks[i], &s->hooks[i + 1], (size_t)(s->num_hooks - i - 1) * sizeof *h);
            s->num_hooks--;
            return;
        }
}

/* ---- scope and ranges ------------------------------------------------------------------------------ */

static void range(tlm_backend *be, bool begin, tlm_range_kind kind, const char *name) {
    struct tlm_backend_state *s = be->state;
    if (!s->num_hooks) return;
    const tlm_range_event e = {kind, name, s->scope};
    if (begin) {
        for (int i = 0; i < s->num_hooks; i++)
            if (s->hooks[i].range_begin) s->hooks[i].range_begin(s->hooks[i].user, &e);
    } else {
        for (int i = s->num_hooks - 1; i >= 0; i--)
            if (s->hooks[i].range_end) s->hooks[i].range_end(s->hooks[i].user, &e);
    }
}

void tlm_step_begin(tlm_backend *be, int step, bool warmup) {
    struct tlm_backend_state *s = be->state;
    s->scope.step = step;
    s->scope.warmup = warmup;
    snprintf(s->step_name, sizeof s->step_name, "%s %d", warmup ? "warmup step" : "step", step);
    range(be, true, TLM_RANGE_STEP, s->step_name);
}

void tlm_step_end(tlm_backend *be) {
    struct tlm_backend_state *s = be->state;
    range(be, false, TLM_RANGE_STEP, s->step_name);
    s->scope.step = -1;
    s->scope.warmup = false;
}

void tlm_phase_begin(tlm_backend *be, tlm_phase phase) {
    be->state->scope.phase = phase;
    range(be, true, TLM_RANGE_PHASE, tlm_phase_name(phase));
}

void tlm_phase_end(tlm_backend *be) {
    range(be, false, TLM_RANGE_PHASE, tlm_phase_name(be->state->scope.phase));
    be->state->scope.phase = TLM_PHASE_SETUP;
}

void tlm_layer_begin(tlm_backend *be, int layer) {
    struct tlm_backend_state *s = be->state;
    s->scope.layer = layer;
    snprintf(s->layer_name, sizeof s->layer_name, "layer %d", layer);
    range(be, true, TLM_RANGE_LAYER, s->layer_name);
}

void tlm_layer_end(tlm_backend *be) {
    struct tlm_backend_state *s = be->state;
    range(be, false, TLM_RANGE_LAYER, s->layer_name);
    s->scope.layer = -1;
}

void tlm_stage_begin(tlm_backend *be, const char *name) { range(be, true, TLM_RANGE_STAGE, name); }
void tlm_stage_end(tlm_backend *be, const char *name) { range(be, false, TLM_RANGE_STAGE, name); }

tlm_scope tlm_scope_now(const tlm_backend *be) { return be->state->scope; }
