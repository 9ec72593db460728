/* backward.c — the backward pass of the CS336 model, written once for every backend: from the
 * gradient of the mean loss to every parameter gradient, each line one op through the dispatch
 * (ops.h). The weight gradients' GEMMs run on the side stream where the backend has one (backend.h:
 * linear_backward, joined before their inputs are overwritten). Where a layer's gradients become
 * ready: after the last op that writes them (and the side's work joined), the pass announces the
 * group (layout.h) to the model's grads_ready callback (model.h), then, with optimizer-in-backward,
 * takes the group's AdamW update. With recompute, a block's backward first re-runs what its
 * forward did not keep. With a bf16 gradient sink (model.h: a data-parallel bf16 reduction's
 * buffer), the linear layers' weight gradients go there in bf16, written by their GEMMs. */
#include <stdlib.h>
#include <string.h>

#include "model/activations.h"
#include "model/model_internal.h"

void tlm_model_set_grad_sink(tlm_model *m, uint16_t *sink) { m->grad_sink = sink; }

bool tlm_model_grads_to_sink(const tlm_model *m) {
    return m->grad_sink && m->run.precision == TLM_PRECISION_BF16 && tlm_model_grad_accum_steps(m) == 1 &&
           m->plan.update != TLM_UPDATE_IN_BACKWARD;
}

bool tlm_model_sink_tensor(const tlm_model *m, int t) {
    const tlm_tensor_info *ti = &m->layout.tensors[t];
    return ti->ndim == 2 && ti->offset != (size_t)(m->w.wte - m->params);
}

/* A linear layer's backward: dx = dy W on the compute stream, then, where the backend has a side
 * stream (backend.h), dW = dy^T x on it, off the critical path. dw is the weight's float32 gradient
 * in m->grads; with tlm_model_grads_to_sink the GEMM writes it in bf16 at the sink's same offset
 * instead (model.h). dx NULL: dW only. Returns the mark the caller joins before anything overwrites dy
 * or x and before dW's group is announced (0: dW already done in place, one op as before). */
static tlm_side_mark linear_backward(tlm_model *m, void *dx, float *dw, const void *dy, const void *x,
                                     const void *w, int N, int in, int out, tlm_precision p) {
    tlm_backend *be = m->backend;
    const bool sink = tlm_model_grads_to_sink(m);
    void *dwo = sink ? (void *)(m->grad_sink + (dw - m->grads)) : (void *)dw;
    const tlm_dtype dw_dt = sink ? TLM_DTYPE_BF16 : TLM_DTYPE_F32;
    if (!tlm_side_available(be)) {
        tlm_matmul_backward(be, dx, dwo, dw_dt, dy, x, w, N, in, out, p);
        return 0;
    }
    if (dx) tlm_matmul_backward(be, dx, NULL, dw_dt, dy, x, w, N, in, out, p);
    tlm_side_begin(be);
    tlm_matmul_backward(be, NULL, dwo, dw_dt, dy, x, w, N, in, out, p);
    return tlm_side_end(be);
}

/* group i of m->layout.groups (in completion order) is complete */
static void grads_ready(tlm_model *m, int i) {
    const tlm_param_group *g = &m->layout.groups[i];
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, m, g);
    if (m->plan.update == TLM_UPDATE_OVERLAPPED && !m->grads_ready) { /* the callback, if any, issues the updates */
        if (tlm_model_overlap_update(m, g->offset, g->numel, NULL) != TLM_OK) m->step->overlap_failed = true;
        return;
    }
    if (m->plan.update != TLM_UPDATE_IN_BACKWARD) return;
    /* the group's AdamW update (optimizer.h: update_span), then its gradients are dead */
    const tlm_dtype dt = tlm_precision_act_dtype(m->run.precision);
    void *lp = m->params_lp ? tlm_at(m->params_lp, g->offset, dt) : NULL;
    tlm_adamw_update_span(&m->optimizer, g->offset, g->numel, m->params + g->offset, m->acts->group_grads[i], lp, dt);
}

/* a group's life begins: its padding is zeroed (the arena's bytes held activations before) */
static void group_begins(tlm_model *m, int i) { tlm_activations_zero_padding(m->acts, m->backend, i); }

/* The backward ops, from dlogits to the embedding gradient, for a loss scaled by the float whose
 * bits are `scale_bits` (no host copy, no synchronization: a CUDA graph can capture it). */
static void backward_pass(void *ctx, uint32_t scale_bits) {
    tlm_model *m = ctx;
    tlm_backend *be = m->backend;
    const tlm_config *c = &m->config;
    tlm_activations *a = m->acts;
    const int B = m->B, T = m->T, C = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->num_heads;
    const int D = C / H, n = B * T, L = c->num_layers;
    const size_t N = (size_t)n;
    const tlm_precision pm = m->run.precision;
    const tlm_dtype dt = a->dt;
    const int lowp = dt != TLM_DTYPE_F32;
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    int group = 0; /* the next group of m->layout.groups to complete */
    tlm_activations_enter(a, be, tlm_stage_head_bwd(L));
    group_begins(m, group);
    /* loss = mean over N positions: dlogits = scale * (softmax - onehot) / N, in place */
    tlm_cross_entropy_backward(be, a->logits, a->logits, a->lse, a->targets, n, V, scale / (float)n, dt);
    linear_backward(m, a->d_tmp, m->g.lm_head, a->logits, a->ln_f, tlm_gemm_w(m, m->w.lm_head), n, C, V, pm);
    tlm_memset_zero(be, a->d_resid, N * C * sizeof(float));
    tlm_rmsnorm_backward(be, a->d_resid, m->g.ln_final, a->d_tmp, a->x_final, m->w.ln_final, a->ln_f_rstd, n, C, NULL,
                         dt);
    tlm_side_join(be, TLM_SIDE_ALL);
    grads_ready(m, group++); /* ln_final, lm_head */
    /* d_resid (float32) holds the gradient of the current block's output, walking down the layers;
     * d_resid_lp is its GEMM-operand copy: written with it by the blocks' rmsnorm backwards (dx_lp),
     * cast once after the head's (d_resid_lp is backward scratch of the blocks, activations.c: its
     * bytes are not its own before the last block's stage) */
    for (int l = L - 1; l >= 0; l--) {
        const tlm_layer_acts *x = &a->layers[l];
        const tlm_layer_weights *w = &m->w.layers[l];
        const tlm_layer_weights *g = &m->g.layers[l];
        tlm_layer_begin(be, l);
        tlm_activations_enter(a, be, tlm_stage_bwd(L, l));
        group_begins(m, group);
        if (m->run.recompute == TLM_RECOMPUTE_BLOCK) tlm_block_forward(m, l, false); /* from the kept input */
        /* feed-forward branch */
        /* the weight gradients' GEMMs run on the side stream (linear_backward), each joined before its dy
         * is overwritten: w2's and out_proj's (d_resid_lp) by the rmsnorm backwards, w13's (d_w13_out) by
         * the attention backward (d_qkv shares its bytes, activations.c); qkv's before the group is
         * announced */
        if (lowp && l == L - 1) tlm_cast(be, a->d_resid_lp, a->d_resid, N * C, dt);
        /* d_ab from d_g = d_resid_lp W2 and ab (d_g: the unfused path's scratch), then dW2 */
        tlm_matmul_swiglu_backward(be, a->d_ab, a->d_g, a->d_resid_lp, tlm_gemm_w(m, w->w2), x->ab, n, C, F, pm);
        const tlm_side_mark w2_done = linear_backward(m, NULL, g->w2, a->d_resid_lp, x->g, tlm_gemm_w(m, w->w2), n,
                                                      F, C, pm);
        const tlm_side_mark w13_done = linear_backward(m, a->d_tmp, g->w13, a->d_ab, x->ln2, tlm_gemm_w(m, w->w13),
                                                       n, C, 2 * F, pm);
        tlm_side_join(be, w2_done);
        tlm_rmsnorm_backward(be, a->d_resid, g->ln2, a->d_tmp, x->h, w->ln2, x->ln2_rstd, n, C,
                             lowp ? a->d_resid_lp : NULL, dt);
        /* attention branch */
        const tlm_side_mark out_done = linear_backward(m, a->d_tmp, g->out_proj, a->d_resid_lp, x->att,
                                                       tlm_gemm_w(m, w->out_proj), n, C, C, pm);
        tlm_side_join(be, w13_done);
        if (m->run.attention == TLM_ATTENTION_FLASH) { /* recomputes P from the forward's out and lse */
            tlm_flash_attention_backward(be, a->d_qkv, tlm_at(a->d_qkv, C, dt), tlm_at(a->d_qkv, 2 * C, dt),
                                         a->flash_workspace, a->d_tmp, x->qkv, tlm_at(x->qkv, C, dt),
                                         tlm_at(x->qkv, 2 * C, dt), x->att, x->lse, 3 * C, C, B, T, T, H, D, true, pm);
        } else {
            if (m->run.recompute == TLM_RECOMPUTE_ATTENTION) /* P again, into the shared buffer; the output
                                                                (the kept att's values) into d_qkv's bytes,
                                                                which attention_backward then overwrites */
                tlm_attention_forward(be, a->d_qkv, x->probs, x->qkv, tlm_at(x->qkv, C, dt),
                                      tlm_at(x->qkv, 2 * C, dt), 3 * C, B, T, H, D, pm);
            tlm_attention_backward(be, a->d_qkv, tlm_at(a->d_qkv, C, dt), tlm_at(a->d_qkv, 2 * C, dt), a->d_probs,
                                   a->d_tmp, x->qkv, tlm_at(x->qkv, C, dt), tlm_at(x->qkv, 2 * C, dt), x->probs, 3 * C,
                                   B, T, H, D, pm);
        }
        tlm_rope_backward(be, a->d_qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C, dt);
        linear_backward(m, a->d_tmp, g->qkv, a->d_qkv, x->ln1, tlm_gemm_w(m, w->qkv), n, C, 3 * C, pm);
        tlm_side_join(be, out_done);
        tlm_rmsnorm_backward(be, a->d_resid, g->ln1, a->d_tmp, x->x, w->ln1, x->ln1_rstd, n, C,
                             lowp && l > 0 ? a->d_resid_lp : NULL, dt); /* block l - 1's operand */
        tlm_side_join(be, TLM_SIDE_ALL);
        tlm_layer_end(be);
        grads_ready(m, group++); /* layer l */
    }
    tlm_activations_enter(a, be, tlm_stage_embed_bwd(L));
    group_begins(m, group);
    tlm_embedding_backward(be, m->g.wte, a->d_resid, a->inputs, n, V, C);
    grads_ready(m, group++); /* token_embeddings */
}

tlm_status tlm_model_backward(tlm_model *m) {
    if (m->run.forward_only)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "backward on a forward-only model (run.forward_only)");
    if (!m->have_forward || !m->acts || m->acts->shape.forward_only)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "backward needs a forward pass with targets first");
    if (m->acts->shape.recompute != m->run.recompute ||
        m->acts->shape.optimizer_in_backward != (m->plan.update == TLM_UPDATE_IN_BACKWARD))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the run's recompute or optimizer-in-backward changed since the "
                        "forward pass: run the forward again");
    tlm_backend *be = m->backend;
    const bool updates = m->plan.updates_in_backward; /* in the backward, or overlapped beside it */
    tlm_phase_begin(be, TLM_PHASE_BACKWARD);
    m->step->overlap_failed = false;
    if (updates) { /* this step's t, and the moments on the first step */
        const tlm_status s = tlm_adamw_begin_step(&m->optimizer);
        if (s != TLM_OK) {
            tlm_phase_end(be);
            return s;
        }
    }
    const float scale = m->plan.loss_scaling ? m->scaler.scale : 1.0f;
    /* accumulation: each micro-batch's loss weighs 1/N of the step's mean; after the first it adds */
    const int accum = m->plan.grad_accum_steps;
    const bool adds = accum > 1 && m->step->micro_batch > 0;
    const float pass_scale = accum > 1 ? scale / (float)accum : scale;
    uint32_t scale_bits;
    memcpy(&scale_bits, &pass_scale, sizeof scale_bits);
    m->grads = m->acts->grads; /* NULL with optimizer-in-backward */
    /* with optimizer-in-backward the pass runs eagerly: each step's updates take t from the host; an
     * accumulating pass has its own graph (captured with the writers adding) */
    be->accumulate_grads = adds;
    tlm_graph_run(be, adds ? &m->graph_bwd_acc : &m->graph_bwd, m->plan.backward_graph, backward_pass, m, scale_bits);
    be->accumulate_grads = false;
    tlm_phase_end(be);
    if (m->step->overlap_failed)
        return tlm_fail(TLM_ERR_BACKEND, "the overlapped optimizer's stream could not be made: %s", tlm_last_error());
    m->step->grads_scale = scale;
    m->step->grads_clip = 1.0f;
    m->have_forward = false; /* the logits now hold their gradient */
    if (updates) {
        m->step->updated_in_backward = true;
        m->step->params_lp_stale = false; /* each update refreshed its span of the GEMM copy */
    }
    /* a copy in the arena lived until its group's backward: later gradients may hold its bytes now, until
     * the update writes it again (a skipped or failed update leaves it to the next forward's cast) */
    if (m->acts->weight_copy) m->step->params_lp_stale = true;
    m->step->grads_pending = !updates;
    return TLM_OK;
}
