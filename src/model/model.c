/* model.c — the CS336 model as an object: creation on a backend for a run configuration (the
 * parameters in their flat layout, the RoPE tables, the optimizer and loss scaler), the choice of
 * attention, the CS336 initialisation, and what the passes share (model_internal.h). */
#include "tlm/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/activations.h"
#include "model/model_internal.h"
#include "tlm/rng.h"
#include "tlm/util.h"

tlm_run_config tlm_run_defaults(void) {
    return (tlm_run_config){.precision = TLM_PRECISION_FP32,
                            .attention = TLM_ATTENTION_AUTO,
                            .cuda_graphs = false,
                            .forward_only = false,
                            .recompute = TLM_RECOMPUTE_NONE,
                            .optimizer_in_backward = false,
                            .optimizer_overlap = false,
                            .grad_accum_steps = 1};
}

static const char *const recompute_names[] = {"none", "attention", "block"}; /* by tlm_recompute */

const char *tlm_recompute_name(tlm_recompute r) {
    return (unsigned)r <= TLM_RECOMPUTE_BLOCK ? recompute_names[r] : "?";
}

bool tlm_recompute_parse(const char *name, tlm_recompute *out) {
    const int i = tlm_name_index(recompute_names, 3, name);
    if (i >= 0) *out = (tlm_recompute)i;
    return i >= 0;
}


/* ---- attention: naive or FlashAttention-2 ---------------------------------------------------- */

static const char *const attention_names[] = {"naive", "flash", "auto"}; /* by tlm_attention */

const char *tlm_attention_name(tlm_attention a) { return (unsigned)a <= TLM_ATTENTION_AUTO ? attention_names[a] : "?"; }

bool tlm_attention_parse(const char *name, tlm_attention *out) {
    const int i = tlm_name_index(attention_names, 3, name);
    if (i >= 0) *out = (tlm_attention)i;
    return i >= 0;
}

/* how well `be` runs FlashAttention-2 forward and backward for (c, p): the lesser of the two. Asked
 * by dtype: tf32 has fp32's kernels (the ops take p and pick TF32 products where they can, ops.def) */
static tlm_support flash_support(tlm_backend *be, const tlm_config *c, tlm_precision p) {
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const int D = tlm_config_d_head(c);
    const tlm_support f = tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_FORWARD, dt, D);
    if (f == TLM_SUPPORT_NONE) return f;
    const tlm_support b = tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_BACKWARD, dt, D);
    return b < f ? b : f;
}

tlm_status tlm_attention_check(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a) {
    if (a != TLM_ATTENTION_FLASH || flash_support(be, c, p) != TLM_SUPPORT_NONE) return TLM_OK;
    char why[400];
    snprintf(why, sizeof why, "%s", tlm_last_error());
    return tlm_fail(TLM_ERR_UNSUPPORTED,
                    "flash attention is not supported on the %s backend for d_head %d in %s (use the naive "
                    "attention): %s", be->name, tlm_config_d_head(c), tlm_precision_name(p), why);
}

tlm_attention tlm_attention_resolve(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a) {
    if (a != TLM_ATTENTION_AUTO) return a;
    return flash_support(be, c, p) == TLM_SUPPORT_FAST ? TLM_ATTENTION_FLASH : TLM_ATTENTION_NAIVE;
}

tlm_status tlm_model_set_attention(tlm_model *m, tlm_attention a) {
    if (a != TLM_ATTENTION_NAIVE && a != TLM_ATTENTION_FLASH && a != TLM_ATTENTION_AUTO)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown attention %d (known: naive, flash, auto)", (int)a);
    tlm_backend *be = m->backend;
    a = tlm_attention_resolve(be, &m->config, m->run.precision, a);
    TLM_TRY(tlm_attention_check(be, &m->config, m->run.precision, a));
    if (a != m->run.attention) {
        tlm_model_free_activations(m); /* the saved tensors differ: the next forward allocates */
        m->run.attention = a;
    }
    return TLM_OK;
}

/* ---- creation ---------------------------------------------------------------------------------- */

/* RoPE tables (context_length, d_head/2): angle = pos * theta^(-2k/d_head), in float64. */
static tlm_status make_rope_tables(tlm_model *m) {
    const tlm_config *c = &m->config;
    const int half = tlm_config_d_head(c) / 2;
    const size_t n = (size_t)c->context_length * half;
    float *cs = malloc(2 * n * sizeof(float));
    if (!cs) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the RoPE tables");
    for (int pos = 0; pos < c->context_length; pos++) {
        for (int k = 0; k < half; k++) {
            double angle = pos * pow(c->rope_theta, -2.0 * k / (2.0 * half));
            cs[(size_t)pos * half + k] = (float)cos(angle);
            cs[n + (size_t)pos * half + k] = (float)sin(angle);
        }
    }
    m->rope_cos = tlm_alloc(m->backend, n * sizeof(float), TLM_MEM_WORKSPACE, "rope.cos");
    m->rope_sin = tlm_alloc(m->backend, n * sizeof(float), TLM_MEM_WORKSPACE, "rope.sin");
    if (!m->rope_cos || !m->rope_sin) {
        free(cs);
        return TLM_ERR_OUT_OF_MEMORY;
    }
    tlm_copy_to_backend(m->backend, m->rope_cos, cs, n * sizeof(float));
    tlm_copy_to_backend(m->backend, m->rope_sin, cs + n, n * sizeof(float));
    tlm_synchronize(m->backend);
    free(cs);
    return TLM_OK;
}

static tlm_status create(tlm_model *m) {
    tlm_backend *be = m->backend;
    TLM_TRY(tlm_layout_build(&m->layout, &m->config));
    m->params = tlm_alloc(be, m->layout.flat_numel * sizeof(float), TLM_MEM_PARAMETERS, "parameters");
    if (!m->params) return TLM_ERR_OUT_OF_MEMORY;
    tlm_memset_zero(be, m->params, m->layout.flat_numel * sizeof(float)); /* padding stays zero */
    TLM_TRY(tlm_views_make(&m->w, &m->layout, m->config.num_layers, m->params));
    TLM_TRY(make_rope_tables(m));
    m->step_scalars = tlm_alloc(be, 2 * sizeof(float), TLM_MEM_WORKSPACE, "step.scalars");
    if (!m->step_scalars) return TLM_ERR_OUT_OF_MEMORY;
    tlm_adamw_init(&m->optimizer, be, m->layout.flat_numel, NULL);
    tlm_loss_scaler_init(&m->scaler);
    m->step->grads_scale = 1.0f;
    m->step->grads_clip = 1.0f;
    m->step->params_lp_stale = true;
    return TLM_OK;
}

tlm_status tlm_model_create(tlm_model **out, const tlm_config *cfg, const tlm_run_config *run, tlm_backend *be) {
    *out = NULL;
    TLM_TRY(tlm_config_validate(cfg));
    tlm_run_config r = run ? *run : tlm_run_defaults();
    tlm_step_plan plan;
    TLM_TRY(tlm_step_plan_decide(&plan, &r)); /* the step's modes, once (step_plan.h) */
    r.attention = tlm_attention_resolve(be, cfg, r.precision, r.attention);
    TLM_TRY(tlm_attention_check(be, cfg, r.precision, r.attention));
    tlm_model *m = calloc(1, sizeof *m);
    if (m && !(m->step = calloc(1, sizeof *m->step))) {
        free(m);
        m = NULL;
    }
    if (!m) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the model");
    m->config = *cfg;
    m->run = r;
    m->plan = plan;
    m->backend = be;
    tlm_status s = create(m);
    if (s == TLM_OK) *out = m;
    else tlm_model_free(m);
    return s;
}

void tlm_model_free(tlm_model *m) {
    if (!m) return;
    tlm_backend *be = m->backend;
    if (m->step->opt_stream) tlm_stream_synchronize(be, m->step->opt_stream); /* no update still reads the buffers */
    tlm_model_free_activations(m);
    tlm_event_destroy(be, m->step->opt_after);
    tlm_event_destroy(be, m->step->opt_done);
    tlm_stream_destroy(be, m->step->opt_stream);
    tlm_adamw_free(&m->optimizer);
    tlm_free(be, m->params);
    tlm_free(be, m->params_lp);
    tlm_free(be, m->rope_cos);
    tlm_free(be, m->rope_sin);
    tlm_free(be, m->step_scalars);
    tlm_views_free(&m->w);
    tlm_layout_free(&m->layout);
    free(m->step);
    free(m);
}

void tlm_model_on_grads_ready(tlm_model *m, tlm_grads_ready_fn fn, void *user) {
    m->grads_ready = fn;
    m->grads_ready_user = user;
}

void tlm_model_set_comm(tlm_model *m, tlm_comm *comm) { m->comm = comm; }

int tlm_model_find_tensor(const tlm_model *m, const char *name) { return tlm_layout_find(&m->layout, name); }

float *tlm_model_group_grads(const tlm_model *m, int i) {
    if (!m->acts || m->acts->shape.forward_only || i < 0 || i >= m->layout.num_groups) return NULL;
    return m->acts->group_grads[i];
}

tlm_status tlm_model_memory_estimate(tlm_backend *be, const tlm_config *cfg, const tlm_run_config *run, int B, int T,
                                     tlm_memory_estimate *out) {
    memset(out, 0, sizeof *out);
    TLM_TRY(tlm_config_validate(cfg));
    tlm_run_config r = run ? *run : tlm_run_defaults();
    tlm_step_plan plan;
    TLM_TRY(tlm_step_plan_decide(&plan, &r));
    if (B < 1 || T < 1 || T > cfg->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "batch %d x context %d (context_length %d)", B, T,
                        cfg->context_length);
    tlm_param_layout layout;
    TLM_TRY(tlm_layout_build(&layout, cfg));
    const tlm_dtype dt = tlm_precision_act_dtype(r.precision);
    tlm_step_shape shape = {.B = B, .T = T, .dt = dt,
                            .attention = tlm_attention_resolve(be, cfg, r.precision, r.attention),
                            .recompute = r.recompute, .forward_only = r.forward_only,
                            .optimizer_in_backward = plan.update == TLM_UPDATE_IN_BACKWARD,
                            .accumulate = plan.grad_accum_steps > 1, .weight_copy = false};
    tlm_activations *a = NULL, *in = NULL; /* the copy apart; in the arena (when the plan puts it there) */
    tlm_status s = tlm_activations_plan(&a, NULL, cfg, &layout, &shape, false);
    shape.weight_copy = true;
    if (s == TLM_OK && plan.weight_copy_in_arena) s = tlm_activations_plan(&in, NULL, cfg, &layout, &shape, false);
    if (s == TLM_OK) {
        const size_t n = layout.flat_numel;
        out->parameters = n * sizeof(float);
        out->weight_copy = dt == TLM_DTYPE_F32 || in ? 0 : n * tlm_dtype_size(dt);
        out->weight_copy_in_arena = in ? tlm_activations_bytes(in, TLM_MEM_PARAMETERS) : 0;
        out->optimizer = r.forward_only ? 0 : 2 * n * sizeof(float);
        out->arena = in ? in->arena_bytes : a->arena_bytes;
        out->arena_live = in ? in->live_bytes : a->live_bytes;
        out->arena_copy_apart = a->arena_bytes;
        out->arena_live_copy_apart = a->live_bytes;
        out->workspace = 2 * (size_t)cfg->context_length * (size_t)(tlm_config_d_head(cfg) / 2) * sizeof(float) +
                         2 * sizeof(float);
        out->total = out->parameters + out->weight_copy + out->optimizer + out->arena + out->workspace;
    }
    tlm_activations_free(a, NULL);
    tlm_activations_free(in, NULL);
    tlm_layout_free(&layout);
    return s;
}

/* ---- what the passes share ------------------------------------------------------------------------- */

void tlm_model_free_activations(tlm_model *m) {
    if (m->acts && m->acts->weight_copy) m->step->params_lp_stale = true; /* the copy goes with the arena */
    tlm_graph_reset(m->backend, &m->graph_fwd); /* the captured passes use these buffers */
    tlm_graph_reset(m->backend, &m->graph_bwd);
    tlm_graph_reset(m->backend, &m->graph_bwd_acc);
    tlm_activations_free(m->acts, m->backend);
    m->acts = NULL;
    m->grads = NULL; /* they lived in the arena */
    memset(&m->g, 0, sizeof m->g);
    m->have_forward = false;
}

void *const *tlm_model_arena_copy(const tlm_model *m) { return m->acts ? m->acts->weight_copy : NULL; }

/* the group of m->layout.groups holding flat element i (the groups tile the flat buffer, their offsets
 * falling with the index) */
static int group_at(const tlm_param_layout *l, size_t i) {
    int lo = 0, hi = l->num_groups - 1;
    while (lo < hi) { /* the first group whose offset is <= i */
        const int mid = (lo + hi) / 2;
        if (l->groups[mid].offset <= i) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

const void *tlm_gemm_w(const tlm_model *m, const float *w) {
    const tlm_dtype dt = tlm_precision_act_dtype(m->run.precision);
    const size_t i = (size_t)(w - m->params);
    void *const *copy = tlm_model_arena_copy(m);
    if (copy) {
        const int g = group_at(&m->layout, i);
        return tlm_at(copy[g], i - m->layout.groups[g].offset, dt);
    }
    return m->params_lp ? tlm_at(m->params_lp, i, dt) : w;
}

tlm_status tlm_model_weight_copy_to_host(const tlm_model *m, uint16_t *host) {
    if (!tlm_model_weight_copy_current(m))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no current GEMM copy of the weights (%s%s)",
                        tlm_precision_name(m->run.precision), m->plan.weight_copy ? ": stale" : "");
    void *const *copy = tlm_model_arena_copy(m);
    if (!copy) {
        tlm_copy_to_host(m->backend, host, m->params_lp, m->layout.flat_numel * sizeof *host);
        return TLM_OK;
    }
    for (int g = 0; g < m->layout.num_groups; g++)
        if (copy[g])
            tlm_copy_to_host(m->backend, host + m->layout.groups[g].offset, copy[g],
                             m->layout.groups[g].numel * sizeof *host);
    return TLM_OK;
}

tlm_status tlm_model_refresh_lowp_weights(tlm_model *m) {
    tlm_backend *be = m->backend;
    if (!m->plan.weight_copy) return TLM_OK; /* fp32, tf32 */
    const tlm_dtype dt = tlm_precision_act_dtype(m->run.precision);
    void *const *copy = tlm_model_arena_copy(m);
    if (copy) { /* each group's buffer in the arena (activations.h, WEIGHT_COPY) */
        if (m->step->params_lp_stale && m->step->grads_pending)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the %s copy of the weights shares the step's arena with the "
                            "gradients of the last backward until the AdamW step: run it (or a forward) first",
                            tlm_precision_name(m->run.precision));
        for (int g = 0; g < m->layout.num_groups && m->step->params_lp_stale; g++)
            if (copy[g])
                tlm_cast(be, copy[g], m->params + m->layout.groups[g].offset, m->layout.groups[g].numel, dt);
        m->step->params_lp_stale = false;
        return TLM_OK;
    }
    if (!m->params_lp) {
        tlm_graph_reset(be, &m->graph_fwd);
        tlm_graph_reset(be, &m->graph_bwd);
        tlm_graph_reset(be, &m->graph_bwd_acc);
        m->params_lp = tlm_alloc(be, m->layout.flat_numel * tlm_dtype_size(dt), TLM_MEM_PARAMETERS,
                                 dt == TLM_DTYPE_BF16 ? "parameters.bf16" : "parameters.fp16");
        if (!m->params_lp) return TLM_ERR_OUT_OF_MEMORY;
        m->step->params_lp_stale = true;
    }
    if (m->step->params_lp_stale) tlm_cast(be, m->params_lp, m->params, m->layout.flat_numel, dt);
    m->step->params_lp_stale = false;
    return TLM_OK;
}

/* ---- initialisation ---------------------------------------------------------------------------------- */

/* Fills one tensor (host staging) with trunc_normal or ones; chunks of 64K elements each
 * draw from their own stream so the result does not depend on the thread count. */
static void init_tensor(const tlm_tensor_info *t, int index, uint64_t seed, float *dst) {
    const size_t chunk = 65536;
    const size_t nchunks = (t->numel + chunk - 1) / chunk;
    double std, cut = 3.0;
    if (t->ndim == 1) {
        for (size_t i = 0; i < t->numel; i++) dst[i] = 1.0f;
        return;
    }
    if (strcmp(t->name, "token_embeddings.weight") == 0)
        std = 1.0;
    else
        std = sqrt(2.0 / (double)(t->shape[0] + t->shape[1])); /* d_out + d_in */
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        uint64_t state = tlm_rng_stream(seed, ((uint64_t)index << 32) | c);
        size_t end = (c + 1) * chunk < t->numel ? (c + 1) * chunk : t->numel;
        for (size_t i = c * chunk; i < end; i++) dst[i] = (float)tlm_rng_trunc_normal(&state, std, cut);
    }
}

tlm_status tlm_model_init_random(tlm_model *m, uint64_t seed) {
    const tlm_param_layout *l = &m->layout;
    size_t max_numel = 0;
    for (int i = 0; i < l->num_tensors; i++)
        if (l->tensors[i].numel > max_numel) max_numel = l->tensors[i].numel;
    float *staging = malloc(max_numel * sizeof(float));
    if (!staging) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for initialisation");
    for (int i = 0; i < l->num_tensors; i++) {
        const tlm_tensor_info *t = &l->tensors[i];
        init_tensor(t, i, seed, staging);
        tlm_copy_to_backend(m->backend, m->params + t->offset, staging, t->numel * sizeof(float));
        tlm_synchronize(m->backend); /* staging is reused */
    }
    free(staging);
    m->optimizer.t = 0;
    m->step->params_lp_stale = true;
    return TLM_OK;
}

void tlm_model_set_params(tlm_model *m, const float *host) {
    tlm_copy_to_backend(m->backend, m->params, host, m->layout.flat_numel * sizeof(float));
    m->optimizer.t = 0;
    m->step->params_lp_stale = true;
}

/* ---- the optimizer step ------------------------------------------------------------------------------- */

/* the model's own update: one AdamW pass over the flat buffers, or with the copy in the arena one per
 * group, in reverse completion order: a group's copy may sit in the gradients' bytes of the groups
 * completed after it, which are then already consumed (activations.h, WEIGHT_COPY; AdamW is elementwise:
 * the same bits as one pass) */
static tlm_status own_update(void *user, tlm_model *m) {
    m->optimizer.config = *(const tlm_adamw_config *)user;
    const tlm_dtype dt = tlm_precision_act_dtype(m->run.precision);
    void *const *copy = tlm_model_arena_copy(m);
    if (!copy) { /* the GEMM copy of the weights (bf16/fp16) is refreshed in the same pass */
        const tlm_status s = tlm_adamw_update_scaled(&m->optimizer, m->params, m->grads, m->step->grads_clip,
                                                     m->params_lp, dt);
        if (s == TLM_OK) m->step->params_lp_stale = m->params_lp == NULL;
        return s;
    }
    TLM_TRY(tlm_adamw_begin_step(&m->optimizer));
    for (int g = m->layout.num_groups - 1; g >= 0; g--) {
        const tlm_param_group *pg = &m->layout.groups[g];
        tlm_adamw_update_span_scaled(&m->optimizer, pg->offset, pg->numel, m->params + pg->offset,
                                     m->grads + pg->offset, m->step->grads_clip, copy[g], dt);
        tlm_activations_group_updated(m->acts, m->backend, g);
    }
    m->step->params_lp_stale = false;
    return TLM_OK;
}

/* ---- the overlapped optimizer (plan.update OVERLAPPED) ------------------------------------------------------ */

tlm_status tlm_model_overlap_update(tlm_model *m, size_t offset, size_t n, tlm_event *after) {
    tlm_backend *be = m->backend;
    if (!m->step->opt_stream) { /* all three, or none kept */
        tlm_stream *s = NULL;
        tlm_event *after_ev = NULL, *done_ev = NULL;
        tlm_status st = tlm_stream_create_background(be, &s);
        if (st == TLM_OK) st = tlm_event_create(be, &after_ev);
        if (st == TLM_OK) st = tlm_event_create(be, &done_ev);
        if (st != TLM_OK) {
            tlm_event_destroy(be, after_ev);
            tlm_event_destroy(be, done_ev);
            tlm_stream_destroy(be, s);
            return st;
        }
        m->step->opt_stream = s, m->step->opt_after = after_ev, m->step->opt_done = done_ev;
    }
    if (!after) {
        tlm_event_record(be, m->step->opt_after, NULL);
        after = m->step->opt_after;
    }
    tlm_stream_wait_event(be, m->step->opt_stream, after);
    const tlm_dtype dt = tlm_precision_act_dtype(m->run.precision);
    void *lp = m->params_lp ? tlm_at(m->params_lp, offset, dt) : NULL;
    tlm_stream_ops_begin(be, m->step->opt_stream);
    tlm_adamw_update_span(&m->optimizer, offset, n, m->params + offset, m->grads + offset, lp, dt);
    tlm_stream_ops_end(be);
    m->step->opt_pending = true;
    return TLM_OK;
}

void tlm_model_overlap_join(tlm_model *m) {
    if (!m->step->opt_pending) return;
    tlm_event_record(m->backend, m->step->opt_done, m->step->opt_stream);
    tlm_stream_wait_event(m->backend, NULL, m->step->opt_done);
    m->step->opt_pending = false;
}

tlm_status tlm_model_adamw_step(tlm_model *m, const tlm_adamw_config *opt) {
    tlm_backend *be = m->backend;
    if (m->plan.updates_in_backward) { /* the updates ran in the backward pass */
        if (!m->step->updated_in_backward)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "AdamW step needs a backward pass first (with %s the backward "
                            "pass takes the step)", m->plan.update == TLM_UPDATE_IN_BACKWARD ? "optimizer-in-backward"
                                                                                 : "the overlapped optimizer");
        m->optimizer.config = *opt; /* for the next step's updates */
        m->step->updated_in_backward = false;
        tlm_phase_begin(be, TLM_PHASE_OPTIMIZER);
        tlm_model_overlap_join(m); /* overlapped: the compute stream waits for the updates (timed here) */
        tlm_activations_enter(m->acts, be, tlm_stage_optimizer(m->config.num_layers));
        tlm_activations_end_step(m->acts, be); /* the step ends */
        tlm_phase_end(be);
        return TLM_OK;
    }
    return tlm_model_adamw_step_by(m, own_update, (void *)opt);
}

tlm_status tlm_model_adamw_step_by(tlm_model *m, tlm_status (*update)(void *user, tlm_model *m), void *user) {
    tlm_backend *be = m->backend;
    if (!m->grads) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "AdamW step needs gradients: run backward first");
    tlm_status s = TLM_OK;
    bool skip = false;
    tlm_phase_begin(be, TLM_PHASE_OPTIMIZER);
    tlm_activations_enter(m->acts, be, tlm_stage_optimizer(m->config.num_layers));
    if (m->plan.loss_scaling) { /* GradScaler: unscale, skip on inf/NaN */
        s = tlm_loss_scaler_unscale_check(&m->scaler, be, m->grads, m->layout.flat_numel, m->step->grads_scale,
                                          &m->step_scalars[1], m->comm, &skip);
        m->step->grads_scale = 1.0f;
    }
    if (s == TLM_OK && !skip) s = update(user, m);
    m->step->grads_clip = 1.0f;
    m->step->grads_pending = false;
    tlm_activations_end_step(m->acts, be); /* the step ends: the gradients' bytes are free (their values
                                              stay until the next forward); the copy the update wrote lives */
    tlm_phase_end(be);
    return s;
}
