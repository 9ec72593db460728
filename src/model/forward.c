/* forward.c — the forward pass of the CS336 model, written once for every backend: embedding, the
 * blocks, the final norm, lm_head, the per-position cross-entropy and its mean, each line one op
 * through the dispatch (ops.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "model/activations.h"
#include "model/model_internal.h"

static tlm_status check_tokens(const int32_t *ids, size_t n, int vocab, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s[%zu] = %d is outside [0, vocab_size %d)", what, i, (int)ids[i],
                            vocab);
    return TLM_OK;
}

/* Block l's forward from its input x (layers[l].x): the attention branch, h = x + output_proj(...),
 * and the feed-forward branch up to the SwiGLU product g; with `to_output`, x_next = h + w2(g) into the
 * next block's input (or final.x). The backward of --recompute block calls it without to_output. */
void tlm_block_forward(tlm_model *m, int l, bool to_output) {
    tlm_backend *be = m->backend;
    const tlm_config *c = &m->config;
    tlm_activations *a = m->acts;
    const tlm_precision pm = m->run.precision;
    const tlm_dtype dt = a->dt;
    const int B = m->B, T = m->T, C = c->d_model, F = c->d_ff, H = c->num_heads, D = C / H;
    const int n = B * T;
    tlm_layer_acts *x = &a->layers[l];
    const tlm_layer_weights *w = &m->w.layers[l];
    /* attention branch: h = x + output_proj(attn(RoPE(q), RoPE(k), v)) */
    tlm_rmsnorm_forward(be, x->ln1, x->ln1_rstd, x->x, w->ln1, n, C, c->rmsnorm_eps, dt);
    tlm_matmul_forward(be, x->qkv, NULL, x->ln1, tlm_gemm_w(m, w->qkv), n, C, 3 * C, pm);
    tlm_rope_forward(be, x->qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C, dt); /* q and k */
    if (m->run.attention == TLM_ATTENTION_FLASH) /* causal, Tq = Tk = T; saves lse */
        tlm_flash_attention_forward(be, x->att, x->lse, x->qkv, tlm_at(x->qkv, C, dt), tlm_at(x->qkv, 2 * C, dt),
                                    3 * C, C, B, T, T, H, D, true, pm);
    else /* saves probs */
        tlm_attention_forward(be, x->att, x->probs, x->qkv, tlm_at(x->qkv, C, dt), tlm_at(x->qkv, 2 * C, dt), 3 * C,
                              B, T, H, D, pm);
    tlm_matmul_forward(be, x->h, x->x, x->att, tlm_gemm_w(m, w->out_proj), n, C, C, pm);
    /* feed-forward branch: x_next = h + w2(silu(w1 ln2(h)) * w3 ln2(h)) */
    tlm_rmsnorm_forward(be, x->ln2, x->ln2_rstd, x->h, w->ln2, n, C, c->rmsnorm_eps, dt);
    tlm_matmul_forward(be, x->ab, NULL, x->ln2, tlm_gemm_w(m, w->w13), n, C, 2 * F, pm);
    tlm_swiglu_forward(be, x->g, x->ab, n, F, dt);
    if (!to_output) return;
    float *x_next = l + 1 < c->num_layers ? a->layers[l + 1].x : a->x_final;
    tlm_matmul_forward(be, x_next, x->h, x->g, tlm_gemm_w(m, w->w2), n, F, C, pm);
}

/* The forward ops, from the embedding to the mean loss (no host copy, no synchronization: a CUDA
 * graph can capture it). key: whether targets were given. Each stage announces itself to the
 * accounting of the step's buffers (activations.h). */
static void forward_pass(void *ctx, uint32_t with_targets) {
    tlm_model *m = ctx;
    tlm_backend *be = m->backend;
    const tlm_config *c = &m->config;
    tlm_activations *a = m->acts;
    const tlm_precision pm = m->run.precision;
    const tlm_dtype dt = a->dt;
    const int B = m->B, T = m->T, C = c->d_model, V = c->vocab_size, L = c->num_layers;
    const int n = B * T;
    tlm_activations_enter(a, be, TLM_STAGE_EMBED);
    tlm_embedding_forward(be, a->layers[0].x, a->inputs, m->w.wte, n, C);
    for (int l = 0; l < L; l++) {
        tlm_layer_begin(be, l);
        tlm_activations_enter(a, be, tlm_stage_fwd(l));
        tlm_block_forward(m, l, true);
        tlm_layer_end(be);
    }
    tlm_activations_enter(a, be, tlm_stage_head(L));
    tlm_rmsnorm_forward(be, a->ln_f, a->ln_f_rstd, a->x_final, m->w.ln_final, n, C, c->rmsnorm_eps, dt);
    tlm_matmul_forward(be, a->logits, NULL, a->ln_f, tlm_gemm_w(m, m->w.lm_head), n, C, V, pm);
    if (with_targets) {
        tlm_cross_entropy_forward(be, a->losses, a->lse, a->logits, a->targets, n, V, dt);
        tlm_reduce_mean(be, &m->step_scalars[0], a->losses, (size_t)n); /* the mean loss, on the backend */
    }
}

/* The step's buffers for (B, T) and the run's options, planned again when any changed. */
static tlm_status ensure_activations(tlm_model *m, int B, int T) {
    const tlm_step_shape s = {.B = B, .T = T, .dt = tlm_precision_act_dtype(m->run.precision),
                              .attention = m->run.attention, .recompute = m->run.recompute,
                              .forward_only = m->run.forward_only,
                              .optimizer_in_backward = m->plan.update == TLM_UPDATE_IN_BACKWARD,
                              .accumulate = m->plan.grad_accum_steps > 1,
                              .weight_copy = m->plan.weight_copy_in_arena};
    const tlm_activations *a = m->acts;
    if (a && a->shape.B == s.B && a->shape.T == s.T && a->shape.dt == s.dt && a->shape.attention == s.attention &&
        a->shape.recompute == s.recompute && a->shape.forward_only == s.forward_only &&
        a->shape.optimizer_in_backward == s.optimizer_in_backward && a->shape.accumulate == s.accumulate &&
        a->shape.weight_copy == s.weight_copy)
        return TLM_OK;
    tlm_model_free_activations(m); /* an arena's copy goes with it (stale) */
    TLM_TRY(tlm_activations_plan(&m->acts, m->backend, &m->config, &m->layout, &s, true));
    m->g = m->acts->grad_views; /* views into the arena (owned by the activations) */
    if (s.weight_copy) { /* the copy's new place: cast there; its own allocation, if any, no longer read */
        m->step->params_lp_stale = true;
        tlm_free(m->backend, m->params_lp);
        m->params_lp = NULL;
    }
    return TLM_OK;
}

tlm_status tlm_model_forward(tlm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float *loss) {
    const tlm_config *c = &m->config;
    if (B < 1 || T < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "batch size %d and context length %d must be at least 1", B, T);
    if (T > c->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "context length %d exceeds the model's context_length %d", T,
                        c->context_length);
    const double probs = m->run.attention == TLM_ATTENTION_FLASH ? 0 : (double)B * c->num_heads * T * T;
    if (probs > 2147483647.0 || (double)B * T * c->vocab_size > 2147483647.0 ||
        (double)B * T * 2 * c->d_ff > 2147483647.0 || (double)B * T * 3 * c->d_model > 2147483647.0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "batch %d x context %d makes an activation of more than 2^31 elements",
                        B, T);
    const size_t N = (size_t)B * T;
    TLM_TRY(check_tokens(inputs, N, c->vocab_size, "inputs"));
    if (targets) TLM_TRY(check_tokens(targets, N, c->vocab_size, "targets"));
    TLM_TRY(tlm_model_replan(m)); /* m->run may have changed since the last step (step_plan.h) */
    tlm_backend *be = m->backend;
    tlm_model_overlap_join(m); /* the last step's updates land before this forward reads the weights */
    tlm_phase_begin(be, TLM_PHASE_FORWARD); /* the activations are allocated in the forward phase */
    m->grads = NULL; /* this forward's buffers take the last gradients' bytes */
    m->step->grads_pending = false;
    m->have_forward = false;
    m->step->updated_in_backward = false;
    tlm_status s = ensure_activations(m, B, T);
    if (s == TLM_OK) tlm_activations_enter(m->acts, be, TLM_STAGE_INPUT); /* a new step */
    if (s == TLM_OK) s = tlm_model_refresh_lowp_weights(m);
    if (s == TLM_OK) {
        m->B = B;
        m->T = T;
        tlm_copy_to_backend(be, m->acts->inputs, inputs, N * sizeof(int32_t));
        if (targets) tlm_copy_to_backend(be, m->acts->targets, targets, N * sizeof(int32_t));
        tlm_graph_run(be, &m->graph_fwd, m->plan.forward_graph, forward_pass, m, targets != NULL);
        if (targets && m->comm && m->comm->world_size > 1) /* the sum of the ranks' means */
            s = m->comm->all_reduce_sum_f32(m->comm, be, &m->step_scalars[0], 1);
    }
    tlm_phase_end(be);
    TLM_TRY(s);
    m->have_forward = targets != NULL;
    if (!loss) return TLM_OK;
    *loss = NAN;
    if (!targets) return TLM_OK;
    tlm_copy_to_host(be, loss, &m->step_scalars[0], sizeof *loss);
    if (m->comm && m->comm->world_size > 1) *loss /= (float)m->comm->world_size;
    /* a non-finite loss is an error, naming where it comes from (in fp16 an overflow is the loss
     * scaler's to handle: the step is skipped) */
    if (!isfinite(*loss) && m->run.precision != TLM_PRECISION_FP16) {
        const float l = *loss;
        TLM_TRY(tlm_model_check_finite(m, m->params, "the weights"));
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the loss is %g with finite weights: an activation overflowed in %s",
                        (double)l, tlm_precision_name(m->run.precision));
    }
    return TLM_OK;
}

tlm_status tlm_model_copy_logits(const tlm_model *m, float *host) {
    if (!m->acts || !m->have_forward)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no logits: run a forward pass (before backward)");
    const size_t n = (size_t)m->B * m->T * m->config.vocab_size;
    const tlm_dtype dt = m->acts->dt;
    if (dt == TLM_DTYPE_F32) {
        tlm_copy_to_host(m->backend, host, m->acts->logits, n * sizeof(float));
        return TLM_OK;
    }
    uint16_t *raw = malloc(n * sizeof(uint16_t));
    if (!raw) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
    tlm_copy_to_host(m->backend, raw, m->acts->logits, n * sizeof(uint16_t));
    if (dt == TLM_DTYPE_BF16) tlm_bf16_to_f32_array(raw, host, (int64_t)n);
    else tlm_f16_to_f32_array(raw, host, (int64_t)n);
    free(raw);
    return TLM_OK;
}
