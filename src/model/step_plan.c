/* step_plan.c — the step plan (step_plan.h): decided once from the run and what is attached to the
 * model (clipping, a data-parallel reducer), and the model functions through which other folders
 * change the step's state (model.h). */
#include "model/model_internal.h"

static const char *const update_names[] = {"the update after the backward", "optimizer-in-backward",
                                           "the overlapped optimizer", "ZeRO-1's sharded update"};

const char *tlm_update_place_name(tlm_update_place u) {
    return (unsigned)u <= TLM_UPDATE_SHARDED ? update_names[u] : "?";
}

tlm_status tlm_step_plan_decide(tlm_step_plan *out, const tlm_run_config *r) {
    if ((unsigned)r->precision >= TLM_PRECISION_COUNT)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown precision mode %d", (int)r->precision);
    if ((unsigned)r->recompute > TLM_RECOMPUTE_BLOCK)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown recompute mode %d (known: none, attention, block)",
                        (int)r->recompute);
    if ((r->optimizer_in_backward || r->optimizer_overlap) && r->precision == TLM_PRECISION_FP16)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "%s does not support fp16: dynamic loss scaling must see every "
                        "gradient for inf/NaN before any update is taken (use bf16)",
                        r->optimizer_in_backward ? "optimizer-in-backward" : "the overlapped optimizer");
    if (r->optimizer_in_backward && r->optimizer_overlap)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "optimizer-in-backward and the overlapped optimizer are two ways "
                        "of updating in the backward pass: choose one");
    if (r->grad_accum_steps < 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "grad_accum_steps %d: the micro-batches of an optimizer step "
                        "must be at least 1", r->grad_accum_steps);
    if (r->grad_accum_steps > 1 && (r->optimizer_in_backward || r->optimizer_overlap))
        return tlm_fail(TLM_ERR_UNSUPPORTED, "gradient accumulation (--grad-accum-steps %d) with %s: its updates run "
                        "in each backward pass, before the last micro-batch's gradients are added (use one or the "
                        "other)", r->grad_accum_steps,
                        r->optimizer_in_backward ? "optimizer-in-backward" : "the overlapped optimizer");
    tlm_step_plan p = {0};
    p.grad_accum_steps = r->grad_accum_steps > 1 ? r->grad_accum_steps : 1;
    p.update = r->optimizer_in_backward ? TLM_UPDATE_IN_BACKWARD
               : r->optimizer_overlap   ? TLM_UPDATE_OVERLAPPED
                                        : TLM_UPDATE_AFTER_BACKWARD;
    p.updates_in_backward = p.update != TLM_UPDATE_AFTER_BACKWARD;
    p.whole_grads = !p.updates_in_backward;
    p.loss_scaling = r->precision == TLM_PRECISION_FP16;
    p.clip_in_unscale = p.loss_scaling;
    p.weight_copy = tlm_precision_act_dtype(r->precision) != TLM_DTYPE_F32;
    p.copy_in_update = true;
    /* the copy of a group is dead once its backward has run: its bytes can hold the gradients of the
     * groups completed later, when the update consumes those before it writes the copy again (the plain
     * update, group by group). Not with updates in the backward (they write the copy while later groups'
     * gradients are still being made), nor accumulation (every micro-batch's backward reads the copy) */
    p.weight_copy_in_arena = p.weight_copy && p.update == TLM_UPDATE_AFTER_BACKWARD && p.grad_accum_steps == 1 &&
                             !r->forward_only;
    p.forward_graph = r->cuda_graphs;
    /* with updates in the backward the pass runs eagerly: each step's updates take t from the host */
    p.backward_graph = r->cuda_graphs && !p.updates_in_backward;
    *out = p;
    return TLM_OK;
}

/* what is attached (st) applied to a plan of the run alone */
static void attach(tlm_step_plan *p, const tlm_step_state *st) {
    p->clipping = st->clipping;
    p->data_parallel = st->data_parallel;
    if (st->data_parallel) p->forward_graph = p->backward_graph = false; /* the callbacks run on the host */
    if (st->sharded) {
        p->update = TLM_UPDATE_SHARDED;
        p->copy_in_update = false; /* the sharded update says what it refreshed */
        p->weight_copy_in_arena = false; /* it writes and gathers the copy in the flat layout (ddp.c) */
    }
    if (st->weight_copy_apart) p->weight_copy_in_arena = false;
}

tlm_status tlm_model_replan(tlm_model *m) {
    tlm_step_plan p;
    TLM_TRY(tlm_step_plan_decide(&p, &m->run));
    attach(&p, m->step);
    m->plan = p;
    return TLM_OK;
}

tlm_status tlm_model_plan_clipping(tlm_model *m, bool on) {
    if (on && !m->plan.whole_grads)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "clipping by the global gradient norm with %s: the updates run before "
                        "the norm is known (clipping needs every gradient)",
                        tlm_update_place_name(m->plan.update));
    m->step->clipping = on;
    m->plan.clipping = on;
    return TLM_OK;
}

tlm_status tlm_model_plan_data_parallel(tlm_model *m, bool sharded) {
    if (sharded && m->plan.update == TLM_UPDATE_IN_BACKWARD)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "ZeRO-1 with optimizer-in-backward: a layer's update would need its "
                        "shard's averaged gradients, which the reduce-scatter of its bucket gives only once the "
                        "bucket is complete (use one or the other)");
    if (sharded && m->plan.update == TLM_UPDATE_OVERLAPPED)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "ZeRO-1 with the overlapped optimizer: ZeRO's update and all-gather "
                        "already follow the backward on the communication stream (use one or the other)");
    m->step->data_parallel = true;
    m->step->sharded = sharded;
    attach(&m->plan, m->step);
    return TLM_OK;
}

tlm_status tlm_model_set_micro_batch(tlm_model *m, int k) {
    if (k < 0 || k >= m->plan.grad_accum_steps)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "micro-batch %d of an optimizer step of %d", k,
                        m->plan.grad_accum_steps);
    m->step->micro_batch = k;
    return TLM_OK;
}

int tlm_model_grad_accum_steps(const tlm_model *m) { return m->plan.grad_accum_steps; }

int tlm_model_micro_batch(const tlm_model *m) { return m->plan.grad_accum_steps > 1 ? m->step->micro_batch : 0; }

bool tlm_model_last_micro_batch(const tlm_model *m) {
    return m->step->micro_batch == m->plan.grad_accum_steps - 1 || m->plan.grad_accum_steps <= 1;
}

void tlm_model_params_changed(tlm_model *m, bool copy_current) { m->step->params_lp_stale = !copy_current; }

void tlm_model_grads_replaced(tlm_model *m) { m->step->grads_scale = m->step->grads_clip = 1.0f; }

void tlm_model_grad_factors(const tlm_model *m, float *scale, float *clip) {
    if (scale) *scale = m->step->grads_scale;
    if (clip) *clip = m->step->grads_clip;
}

bool tlm_model_weight_copy_current(const tlm_model *m) {
    return (m->params_lp || tlm_model_arena_copy(m)) && !m->step->params_lp_stale;
}

void tlm_model_restore_optimizer_state(tlm_model *m, int64_t t, const tlm_loss_scaler *scaler) {
    m->optimizer.t = (int)t;
    m->scaler = *scaler;
    m->scaler.last_step_skipped = false;
}
