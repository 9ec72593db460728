/* model_pass.c — the training step of the CS336 model, written once for every backend:
 * forward to logits and the mean cross-entropy, backward to every parameter gradient,
 * and the AdamW step over the flat buffers. Each line is one backend op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

/* ---- activations ------------------------------------------------------------------------ */

typedef struct {
    tlm_backend *be;
    tlm_status status;
} act_alloc;

static float *act(act_alloc *a, size_t numel, tlm_mem_tag tag, const char *fmt, int layer) {
    if (a->status != TLM_OK) return NULL;
    char name[64];
    snprintf(name, sizeof name, fmt, layer);
    float *p = tlm_alloc(a->be, numel * sizeof(float), tag, name);
    if (!p) a->status = TLM_ERR_OUT_OF_MEMORY;
    return p;
}

void tlm_model_free_activations(tlm_model *m) {
    tlm_backend *be = m->backend;
    if (m->acts) {
        for (int l = 0; l < m->config.num_layers; l++) {
            tlm_layer_acts *a = &m->acts[l];
            float *bufs[] = {a->x, a->ln1, a->ln1_rstd, a->qkv, a->probs, a->att,
                             a->h, a->ln2, a->ln2_rstd, a->ab, a->g};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
        }
        free(m->acts);
        m->acts = NULL;
    }
    float *bufs[] = {m->x_final, m->ln_f, m->ln_f_rstd, m->logits, m->lse, m->losses,
                     m->d_resid, m->d_tmp, m->d_qkv, m->d_probs, m->d_ab, m->d_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
    tlm_free(be, m->inputs);
    tlm_free(be, m->targets);
    free(m->host_losses);
    m->x_final = m->ln_f = m->ln_f_rstd = m->logits = m->lse = m->losses = NULL;
    m->d_resid = m->d_tmp = m->d_qkv = m->d_probs = m->d_ab = m->d_g = NULL;
    m->inputs = m->targets = NULL;
    m->host_losses = NULL;
    m->act_B = m->act_T = 0;
    m->have_forward = 0;
}

/* Allocates what a forward and backward over (B,T) need, each buffer tagged with its layer. */
static tlm_status alloc_activations(tlm_model *m, int B, int T) {
    if (m->act_B == B && m->act_T == T) return TLM_OK;
    tlm_model_free_activations(m);
    const tlm_config *c = &m->config;
    const size_t N = (size_t)B * T, C = c->d_model, F = c->d_ff, V = c->vocab_size;
    const size_t P = (size_t)B * c->num_heads * T * T; /* attention probabilities */
    act_alloc a = {m->backend, TLM_OK};
    m->acts = calloc((size_t)c->num_layers, sizeof *m->acts);
    if (!m->acts) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_mem_tag A = TLM_MEM_ACTIVATIONS;
    for (int l = 0; l < c->num_layers; l++) {
        tlm_layer_acts *x = &m->acts[l];
        x->x = act(&a, N * C, A, "layers.%d.x", l);
        x->ln1 = act(&a, N * C, A, "layers.%d.ln1", l);
        x->ln1_rstd = act(&a, N, A, "layers.%d.ln1.rstd", l);
        x->qkv = act(&a, N * 3 * C, A, "layers.%d.attn.qkv", l);
        x->probs = act(&a, P, A, "layers.%d.attn.probs", l);
        x->att = act(&a, N * C, A, "layers.%d.attn.out", l);
        x->h = act(&a, N * C, A, "layers.%d.h", l);
        x->ln2 = act(&a, N * C, A, "layers.%d.ln2", l);
        x->ln2_rstd = act(&a, N, A, "layers.%d.ln2.rstd", l);
        x->ab = act(&a, N * 2 * F, A, "layers.%d.ffn.w13_out", l);
        x->g = act(&a, N * F, A, "layers.%d.ffn.swiglu", l);
    }
    m->x_final = act(&a, N * C, A, "final.x", 0);
    m->ln_f = act(&a, N * C, A, "ln_final", 0);
    m->ln_f_rstd = act(&a, N, A, "ln_final.rstd", 0);
    m->logits = act(&a, N * V, A, "logits", 0);
    m->lse = act(&a, N, A, "logsumexp", 0);
    m->losses = act(&a, N, A, "losses", 0);
    m->d_resid = act(&a, N * C, A, "backward.d_resid", 0);
    m->d_tmp = act(&a, N * C, A, "backward.d_tmp", 0);
    m->d_qkv = act(&a, N * 3 * C, A, "backward.d_qkv", 0);
    m->d_probs = act(&a, P, A, "backward.d_probs", 0);
    m->d_ab = act(&a, N * 2 * F, A, "backward.d_w13_out", 0);
    m->d_g = act(&a, N * F, A, "backward.d_swiglu", 0);
    if (a.status == TLM_OK) {
        m->inputs = tlm_alloc(m->backend, N * sizeof(int32_t), TLM_MEM_WORKSPACE, "inputs");
        m->targets = tlm_alloc(m->backend, N * sizeof(int32_t), TLM_MEM_WORKSPACE, "targets");
        m->host_losses = malloc(N * sizeof(float));
        if (!m->inputs || !m->targets || !m->host_losses) a.status = TLM_ERR_OUT_OF_MEMORY;
    }
    if (a.status != TLM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tlm_last_error());
        tlm_model_free_activations(m);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "activations for batch %d x context %d: %s", B, T, msg);
    }
    m->act_B = B;
    m->act_T = T;
    return TLM_OK;
}

/* ---- forward ------------------------------------------------------------------------------ */

static tlm_status check_tokens(const int32_t *ids, size_t n, int vocab, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s[%zu] = %d is outside [0, vocab_size %d)", what,
                            i, (int)ids[i], vocab);
    return TLM_OK;
}

tlm_status tlm_model_forward(tlm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float *loss) {
    const tlm_config *c = &m->config;
    if (B < 1 || T < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "batch size %d and context length %d must be at least 1", B, T);
    if (T > c->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "context length %d exceeds the model's context_length %d",
                        T, c->context_length);
    if ((double)B * c->num_heads * T * T > 2147483647.0 || (double)B * T * c->vocab_size > 2147483647.0 ||
        (double)B * T * 2 * c->d_ff > 2147483647.0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "batch %d x context %d makes an activation of more than 2^31 elements", B, T);
    const size_t N = (size_t)B * T;
    TLM_TRY(check_tokens(inputs, N, c->vocab_size, "inputs"));
    if (targets) TLM_TRY(check_tokens(targets, N, c->vocab_size, "targets"));
    TLM_TRY(alloc_activations(m, B, T));

    tlm_backend *be = m->backend;
    const tlm_ops *op = be->ops;
    const int C = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->num_heads, D = C / H;
    const int n = (int)N;
    m->B = B;
    m->T = T;
    tlm_range_push(be, "forward");
    be->copy_to_backend(be, m->inputs, inputs, N * sizeof(int32_t));
    if (targets) be->copy_to_backend(be, m->targets, targets, N * sizeof(int32_t));

    char layer_name[32];
    op->embedding_forward(be, m->acts[0].x, m->inputs, m->wte, n, C);
    for (int l = 0; l < c->num_layers; l++) {
        tlm_layer_acts *a = &m->acts[l];
        const tlm_layer_weights *w = &m->layer_w[l];
        float *x_next = l + 1 < c->num_layers ? m->acts[l + 1].x : m->x_final;
        snprintf(layer_name, sizeof layer_name, "layer %d", l);
        tlm_range_push(be, layer_name);
        /* attention branch: h = x + output_proj(attn(RoPE(q), RoPE(k), v)) */
        op->rmsnorm_forward(be, a->ln1, a->ln1_rstd, a->x, w->ln1, n, C, c->rmsnorm_eps);
        op->matmul_forward(be, a->qkv, a->ln1, w->qkv, n, C, 3 * C);
        op->rope_forward(be, a->qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C); /* q and k */
        op->attention_forward(be, a->att, a->probs, a->qkv, a->qkv + C, a->qkv + 2 * C, 3 * C, B, T, H, D);
        op->matmul_forward(be, a->h, a->att, w->out_proj, n, C, C);
        op->add_inplace(be, a->h, a->x, N * C);
        /* feed-forward branch: x_next = h + w2(silu(w1 ln2(h)) * w3 ln2(h)) */
        op->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->h, w->ln2, n, C, c->rmsnorm_eps);
        op->matmul_forward(be, a->ab, a->ln2, w->w13, n, C, 2 * F);
        op->swiglu_forward(be, a->g, a->ab, n, F);
        op->matmul_forward(be, x_next, a->g, w->w2, n, F, C);
        op->add_inplace(be, x_next, a->h, N * C);
        tlm_range_pop(be);
    }
    op->rmsnorm_forward(be, m->ln_f, m->ln_f_rstd, m->x_final, m->ln_final, n, C, c->rmsnorm_eps);
    op->matmul_forward(be, m->logits, m->ln_f, m->lm_head, n, C, V);
    m->have_forward = targets != NULL;
    if (targets) op->cross_entropy_forward(be, m->losses, m->lse, m->logits, m->targets, n, V);
    tlm_range_pop(be);
    if (!targets) {
        if (loss) *loss = NAN;
        return TLM_OK;
    }
    if (loss) {
        be->copy_to_host(be, m->host_losses, m->losses, N * sizeof(float));
        be->synchronize(be);
        double sum = 0;
        for (size_t i = 0; i < N; i++) sum += m->host_losses[i];
        *loss = (float)(sum / (double)N);
    }
    return TLM_OK;
}

tlm_status tlm_model_copy_logits(const tlm_model *m, float *host) {
    if (!m->logits || !m->have_forward)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no logits: run a forward pass (before backward)");
    m->backend->copy_to_host(m->backend, host, m->logits,
                             (size_t)m->B * m->T * m->config.vocab_size * sizeof(float));
    m->backend->synchronize(m->backend);
    return TLM_OK;
}

/* ---- backward ----------------------------------------------------------------------------- */

tlm_status tlm_model_backward(tlm_model *m) {
    if (!m->have_forward)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "backward needs a forward pass with targets first");
    tlm_backend *be = m->backend;
    const tlm_ops *op = be->ops;
    const tlm_config *c = &m->config;
    if (!m->grads) {
        m->grads = tlm_alloc(be, m->flat_numel * sizeof(float), TLM_MEM_GRADIENTS, "gradients");
        if (!m->grads) return TLM_ERR_OUT_OF_MEMORY;
        be->memset_zero(be, m->grads, m->flat_numel * sizeof(float)); /* padding stays zero */
        tlm_model_set_grad_views(m);
    }
    const int B = m->B, T = m->T, C = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->num_heads;
    const int D = C / H, n = B * T;
    const size_t N = (size_t)n;
    float *g_wte = m->grads + m->tensors[0].offset;
    float *g_ln_final = m->grads + m->tensors[m->num_tensors - 2].offset;
    float *g_lm_head = m->grads + m->tensors[m->num_tensors - 1].offset;

    tlm_range_push(be, "backward");
    char layer_name[32];
    /* loss = mean over N positions: dlogits = (softmax - onehot) / N, in place of the logits */
    op->cross_entropy_backward(be, m->logits, m->logits, m->lse, m->targets, n, V, 1.0f / (float)n);
    op->matmul_backward(be, m->d_tmp, g_lm_head, m->logits, m->ln_f, m->lm_head, n, C, V);
    be->memset_zero(be, m->d_resid, N * C * sizeof(float));
    op->rmsnorm_backward(be, m->d_resid, g_ln_final, m->d_tmp, m->x_final, m->ln_final, m->ln_f_rstd, n, C);
    /* d_resid holds the gradient of the current block's output, walking down the layers */
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const tlm_layer_acts *a = &m->acts[l];
        const tlm_layer_weights *w = &m->layer_w[l];
        const tlm_layer_weights *g = &m->layer_g[l];
        snprintf(layer_name, sizeof layer_name, "layer %d", l);
        tlm_range_push(be, layer_name);
        /* feed-forward branch */
        op->matmul_backward(be, m->d_g, g->w2, m->d_resid, a->g, w->w2, n, F, C);
        op->swiglu_backward(be, m->d_ab, m->d_g, a->ab, n, F);
        op->matmul_backward(be, m->d_tmp, g->w13, m->d_ab, a->ln2, w->w13, n, C, 2 * F);
        op->rmsnorm_backward(be, m->d_resid, g->ln2, m->d_tmp, a->h, w->ln2, a->ln2_rstd, n, C);
        /* attention branch */
        op->matmul_backward(be, m->d_tmp, g->out_proj, m->d_resid, a->att, w->out_proj, n, C, C);
        op->attention_backward(be, m->d_qkv, m->d_qkv + C, m->d_qkv + 2 * C, m->d_probs, m->d_tmp, a->qkv,
                               a->qkv + C, a->qkv + 2 * C, a->probs, 3 * C, B, T, H, D);
        op->rope_backward(be, m->d_qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C);
        op->matmul_backward(be, m->d_tmp, g->qkv, m->d_qkv, a->ln1, w->qkv, n, C, 3 * C);
        op->rmsnorm_backward(be, m->d_resid, g->ln1, m->d_tmp, a->x, w->ln1, a->ln1_rstd, n, C);
        tlm_range_pop(be);
    }
    op->embedding_backward(be, g_wte, m->d_resid, m->inputs, n, V, C);
    tlm_range_pop(be);
    m->have_forward = 0; /* the logits now hold their gradient */
    return TLM_OK;
}

/* ---- optimizer ---------------------------------------------------------------------------- */

tlm_status tlm_model_adamw_step(tlm_model *m, const tlm_adamw_config *opt) {
    tlm_backend *be = m->backend;
    if (!m->grads) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "AdamW step needs gradients: run backward first");
    if (!m->adam_m) {
        const size_t bytes = m->flat_numel * sizeof(float);
        m->adam_m = tlm_alloc(be, bytes, TLM_MEM_OPTIMIZER, "adamw.m");
        m->adam_v = m->adam_m ? tlm_alloc(be, bytes, TLM_MEM_OPTIMIZER, "adamw.v") : NULL;
        if (!m->adam_v) {
            tlm_free(be, m->adam_m);
            m->adam_m = NULL;
            return TLM_ERR_OUT_OF_MEMORY;
        }
        be->memset_zero(be, m->adam_m, bytes);
        be->memset_zero(be, m->adam_v, bytes);
    }
    m->adam_t++;
    tlm_range_push(be, "optimizer");
    be->ops->adamw_step(be, m->params, m->grads, m->adam_m, m->adam_v, m->flat_numel, opt->lr, opt->beta1,
                        opt->beta2, opt->eps, opt->weight_decay, m->adam_t);
    tlm_range_pop(be);
    return TLM_OK;
}
