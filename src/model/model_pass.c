/* model_pass.c — the training step of the CS336 model, written once for every backend:
 * forward to logits and the mean cross-entropy, backward to every parameter gradient,
 * and the AdamW step over the flat buffers. Each line is one backend op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/convert.h"
#include "model/model_internal.h"

/* ---- activations ------------------------------------------------------------------------ */

typedef struct {
    tlm_backend *be;
    tlm_status status;
} act_alloc;

/* one tagged activation buffer of numel elements of `elem_size` bytes */
static void *act_bytes(act_alloc *a, size_t numel, size_t elem_size, const char *fmt, int layer) {
    if (a->status != TLM_OK) return NULL;
    char name[64];
    snprintf(name, sizeof name, fmt, layer);
    void *p = tlm_alloc(a->be, numel * elem_size, TLM_MEM_ACTIVATIONS, name);
    if (!p) a->status = TLM_ERR_OUT_OF_MEMORY;
    return p;
}

static void graphs_reset(tlm_model *m);

void tlm_model_free_activations(tlm_model *m) {
    tlm_backend *be = m->backend;
    graphs_reset(m);
    if (m->acts) {
        for (int l = 0; l < m->config.num_layers; l++) {
            tlm_layer_acts *a = &m->acts[l];
            void *bufs[] = {a->x, a->ln1, a->ln1_rstd, a->qkv, a->probs, a->lse, a->att,
                            a->h, a->ln2, a->ln2_rstd, a->ab, a->g};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
        }
        free(m->acts);
        m->acts = NULL;
    }
    void *bufs[] = {m->x_final, m->ln_f, m->ln_f_rstd, m->logits, m->lse, m->losses, m->d_resid,
                    m->d_resid_lp != (void *)m->d_resid ? m->d_resid_lp : NULL, m->d_tmp, m->d_qkv,
                    m->d_probs, m->flash_workspace, m->d_ab, m->d_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
    tlm_free(be, m->inputs);
    tlm_free(be, m->targets);
    free(m->host_losses);
    m->x_final = m->ln_f = m->ln_f_rstd = m->logits = m->lse = m->losses = NULL;
    m->d_resid = m->flash_workspace = NULL;
    m->d_resid_lp = m->d_tmp = m->d_qkv = m->d_probs = m->d_ab = m->d_g = NULL;
    m->inputs = m->targets = NULL;
    m->host_losses = NULL;
    m->act_B = m->act_T = 0;
    m->have_forward = 0;
}

/* Allocates what a forward and backward over (B,T) need, each buffer tagged with its layer;
 * `dt` buffers (GEMM operands and outputs) in the activation dtype, the rest float32. What
 * attention saves depends on m->attention (model.h): naive, P (B,H,T,T) dt per layer and a dP
 * scratch of the same size; flash, the logsumexp (B,H,T) float32 per layer and one float32
 * backward workspace (tlm_flash_workspace_floats) for all layers. */
static tlm_status alloc_activations(tlm_model *m, int B, int T, tlm_dtype dt) {
    if (m->act_B == B && m->act_T == T && m->act_dt == dt) return TLM_OK;
    tlm_model_free_activations(m);
    const tlm_config *c = &m->config;
    const bool flash = m->attention == TLM_ATTENTION_FLASH;
    /* the mode may have changed since tlm_model_set_attention checked */
    if (flash) TLM_TRY(tlm_attention_check(m->backend, c, m->backend->precision, m->attention));
    const size_t N = (size_t)B * T, C = c->d_model, F = c->d_ff, V = c->vocab_size;
    const size_t H = c->num_heads, D = tlm_config_d_head(c);
    const size_t P = flash ? 0 : H * B * T * T;  /* naive: attention probabilities */
    const size_t L = flash ? H * B * T : 0;      /* flash: logsumexp of each query row */
    const size_t f4 = sizeof(float), e = tlm_dtype_size(dt);
    act_alloc a = {m->backend, TLM_OK};
    m->acts = calloc((size_t)c->num_layers, sizeof *m->acts);
    if (!m->acts) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int l = 0; l < c->num_layers; l++) {
        tlm_layer_acts *x = &m->acts[l];
        x->x = act_bytes(&a, N * C, f4, "layers.%d.x", l);
        x->ln1 = act_bytes(&a, N * C, e, "layers.%d.ln1", l);
        x->ln1_rstd = act_bytes(&a, N, f4, "layers.%d.ln1.rstd", l);
        x->qkv = act_bytes(&a, N * 3 * C, e, "layers.%d.attn.qkv", l);
        if (flash) x->lse = act_bytes(&a, L, f4, "layers.%d.attn.lse", l);
        else x->probs = act_bytes(&a, P, e, "layers.%d.attn.probs", l);
        x->att = act_bytes(&a, N * C, e, "layers.%d.attn.out", l);
        x->h = act_bytes(&a, N * C, f4, "layers.%d.h", l);
        x->ln2 = act_bytes(&a, N * C, e, "layers.%d.ln2", l);
        x->ln2_rstd = act_bytes(&a, N, f4, "layers.%d.ln2.rstd", l);
        x->ab = act_bytes(&a, N * 2 * F, e, "layers.%d.ffn.w13_out", l);
        x->g = act_bytes(&a, N * F, e, "layers.%d.ffn.swiglu", l);
    }
    m->x_final = act_bytes(&a, N * C, f4, "final.x", 0);
    m->ln_f = act_bytes(&a, N * C, e, "ln_final", 0);
    m->ln_f_rstd = act_bytes(&a, N, f4, "ln_final.rstd", 0);
    m->logits = act_bytes(&a, N * V, e, "logits", 0);
    m->lse = act_bytes(&a, N, f4, "logsumexp", 0);
    m->losses = act_bytes(&a, N, f4, "losses", 0);
    m->d_resid = act_bytes(&a, N * C, f4, "backward.d_resid", 0);
    m->d_resid_lp = dt == TLM_DTYPE_F32 ? (void *)m->d_resid : act_bytes(&a, N * C, e, "backward.d_resid_lowp", 0);
    m->d_tmp = act_bytes(&a, N * C, e, "backward.d_tmp", 0);
    m->d_qkv = act_bytes(&a, N * 3 * C, e, "backward.d_qkv", 0);
    if (flash)
        m->flash_workspace = act_bytes(&a, tlm_flash_workspace_floats(B, T, (int)H, (int)D), f4,
                                       "backward.flash_workspace", 0);
    else
        m->d_probs = act_bytes(&a, P, e, "backward.d_probs", 0);
    m->d_ab = act_bytes(&a, N * 2 * F, e, "backward.d_w13_out", 0);
    m->d_g = act_bytes(&a, N * F, e, "backward.d_swiglu", 0);
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
    m->act_dt = dt;
    return TLM_OK;
}

/* element i of a dt buffer */
static inline void *at(void *p, size_t i, tlm_dtype dt) { return (char *)p + i * tlm_dtype_size(dt); }

/* The GEMM copy of a weight: its place in params_lp (bf16/fp16), or the weight itself. */
static inline const void *gemm_w(const tlm_model *m, const float *w) {
    if (!m->params_lp) return w;
    return (const char *)m->params_lp + (size_t)(w - m->params) * tlm_dtype_size(m->act_dt);
}

/* ---- CUDA graphs -------------------------------------------------------------------------- */

static void graph_reset(tlm_backend *be, tlm_graph_slot *g) {
    if (g->exec) be->graph_destroy(be, g->exec);
    memset(g, 0, sizeof *g);
}

/* Forgets the captured passes: their buffers are about to change. */
static void graphs_reset(tlm_model *m) {
    graph_reset(m->backend, &m->graph_fwd);
    graph_reset(m->backend, &m->graph_bwd);
}

typedef void (*pass_fn)(tlm_model *m, uint32_t arg);

/* Runs a pass eagerly, or as a CUDA graph (tlm_graph_slot says when). */
static void run_pass(tlm_model *m, tlm_graph_slot *g, pass_fn fn, uint32_t key) {
    tlm_backend *be = m->backend;
    if (!be->use_graphs || !be->graph_begin || g->failed) {
        fn(m, key);
        return;
    }
    if (g->key != key) graph_reset(be, g);
    if (g->exec) {
        be->graph_launch(be, g->exec);
        return;
    }
    if (!g->warm) {
        g->warm = 1;
        g->key = key;
        fn(m, key);
        return;
    }
    be->graph_begin(be);
    fn(m, key);
    g->exec = be->graph_end(be);
    if (g->exec) {
        be->graph_launch(be, g->exec);
    } else { /* capture failed (message set): stay eager */
        g->failed = 1;
        fn(m, key);
    }
}

/* Casts the parameters to their GEMM copy once per step (after init, load or AdamW). */
static tlm_status refresh_lowp_weights(tlm_model *m, tlm_dtype dt) {
    tlm_backend *be = m->backend;
    if (dt == TLM_DTYPE_F32) {
        if (m->params_lp) graphs_reset(m);
        tlm_free(be, m->params_lp);
        m->params_lp = NULL;
        return TLM_OK;
    }
    if (!m->params_lp) {
        graphs_reset(m);
        m->params_lp = tlm_alloc(be, m->flat_numel * tlm_dtype_size(dt), TLM_MEM_PARAMETERS,
                                 dt == TLM_DTYPE_BF16 ? "parameters.bf16" : "parameters.fp16");
        if (!m->params_lp) return TLM_ERR_OUT_OF_MEMORY;
        m->params_lp_stale = 1;
    }
    if (m->params_lp_stale) be->ops->cast(be, m->params_lp, m->params, m->flat_numel, dt);
    m->params_lp_stale = 0;
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

/* The forward ops, from the embedding to the per-position losses (no host copy, no
 * synchronization: a CUDA graph can capture it). */
static void forward_pass(tlm_model *m, uint32_t with_targets) {
    tlm_backend *be = m->backend;
    const tlm_ops *op = be->ops;
    const tlm_config *c = &m->config;
    const tlm_dtype dt = m->act_dt;
    const int B = m->B, T = m->T, C = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->num_heads, D = C / H;
    const int n = B * T;
    char layer_name[32];
    op->embedding_forward(be, m->acts[0].x, m->inputs, m->wte, n, C);
    for (int l = 0; l < c->num_layers; l++) {
        tlm_layer_acts *a = &m->acts[l];
        const tlm_layer_weights *w = &m->layer_w[l];
        float *x_next = l + 1 < c->num_layers ? m->acts[l + 1].x : m->x_final;
        snprintf(layer_name, sizeof layer_name, "layer %d", l);
        tlm_range_push(be, layer_name);
        /* attention branch: h = x + output_proj(attn(RoPE(q), RoPE(k), v)) */
        op->rmsnorm_forward(be, a->ln1, a->ln1_rstd, a->x, w->ln1, n, C, c->rmsnorm_eps, dt);
        op->matmul_forward(be, a->qkv, NULL, a->ln1, gemm_w(m, w->qkv), n, C, 3 * C, dt);
        op->rope_forward(be, a->qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C, dt); /* q and k */
        if (m->attention == TLM_ATTENTION_FLASH) /* causal, Tq = Tk = T; saves lse */
            op->flash_attention_forward(be, a->att, a->lse, a->qkv, at(a->qkv, C, dt), at(a->qkv, 2 * C, dt),
                                        3 * C, C, B, T, T, H, D, true, dt);
        else /* saves probs */
            op->attention_forward(be, a->att, a->probs, a->qkv, at(a->qkv, C, dt), at(a->qkv, 2 * C, dt),
                                  3 * C, B, T, H, D, dt);
        op->matmul_forward(be, a->h, a->x, a->att, gemm_w(m, w->out_proj), n, C, C, dt);
        /* feed-forward branch: x_next = h + w2(silu(w1 ln2(h)) * w3 ln2(h)) */
        op->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->h, w->ln2, n, C, c->rmsnorm_eps, dt);
        op->matmul_forward(be, a->ab, NULL, a->ln2, gemm_w(m, w->w13), n, C, 2 * F, dt);
        op->swiglu_forward(be, a->g, a->ab, n, F, dt);
        op->matmul_forward(be, x_next, a->h, a->g, gemm_w(m, w->w2), n, F, C, dt);
        tlm_range_pop(be);
    }
    op->rmsnorm_forward(be, m->ln_f, m->ln_f_rstd, m->x_final, m->ln_final, n, C, c->rmsnorm_eps, dt);
    op->matmul_forward(be, m->logits, NULL, m->ln_f, gemm_w(m, m->lm_head), n, C, V, dt);
    if (with_targets) op->cross_entropy_forward(be, m->losses, m->lse, m->logits, m->targets, n, V, dt);
}

tlm_status tlm_model_forward(tlm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float *loss) {
    const tlm_config *c = &m->config;
    if (B < 1 || T < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "batch size %d and context length %d must be at least 1", B, T);
    if (T > c->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "context length %d exceeds the model's context_length %d",
                        T, c->context_length);
    const double probs = m->attention == TLM_ATTENTION_FLASH ? 0 : (double)B * c->num_heads * T * T;
    if (probs > 2147483647.0 || (double)B * T * c->vocab_size > 2147483647.0 ||
        (double)B * T * 2 * c->d_ff > 2147483647.0 || (double)B * T * 3 * c->d_model > 2147483647.0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "batch %d x context %d makes an activation of more than 2^31 elements", B, T);
    const size_t N = (size_t)B * T;
    TLM_TRY(check_tokens(inputs, N, c->vocab_size, "inputs"));
    if (targets) TLM_TRY(check_tokens(targets, N, c->vocab_size, "targets"));
    tlm_backend *be = m->backend;
    const tlm_dtype dt = tlm_precision_act_dtype(be->precision);
    if (m->act_dt != dt && m->params_lp) { /* the mode changed: a new GEMM copy */
        tlm_free(be, m->params_lp);
        m->params_lp = NULL;
    }
    TLM_TRY(alloc_activations(m, B, T, dt));
    TLM_TRY(refresh_lowp_weights(m, dt));

    m->B = B;
    m->T = T;
    tlm_range_push(be, "forward");
    be->copy_to_backend(be, m->inputs, inputs, N * sizeof(int32_t));
    if (targets) be->copy_to_backend(be, m->targets, targets, N * sizeof(int32_t));

    run_pass(m, &m->graph_fwd, forward_pass, targets != NULL);
    m->have_forward = targets != NULL;
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
    const size_t n = (size_t)m->B * m->T * m->config.vocab_size;
    if (m->act_dt == TLM_DTYPE_F32) {
        m->backend->copy_to_host(m->backend, host, m->logits, n * sizeof(float));
        m->backend->synchronize(m->backend);
        return TLM_OK;
    }
    uint16_t *raw = malloc(n * sizeof(uint16_t));
    if (!raw) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
    m->backend->copy_to_host(m->backend, raw, m->logits, n * sizeof(uint16_t));
    m->backend->synchronize(m->backend);
    if (m->act_dt == TLM_DTYPE_BF16) tlm_bf16_to_f32_array(raw, host, (int64_t)n);
    else tlm_f16_to_f32_array(raw, host, (int64_t)n);
    free(raw);
    return TLM_OK;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* The backward ops, from dlogits to the embedding gradient, for a loss scaled by the float
 * whose bits are `scale_bits` (no host copy, no synchronization: a CUDA graph can capture it). */
static void backward_pass(tlm_model *m, uint32_t scale_bits) {
    tlm_backend *be = m->backend;
    const tlm_ops *op = be->ops;
    const tlm_config *c = &m->config;
    const int B = m->B, T = m->T, C = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->num_heads;
    const int D = C / H, n = B * T;
    const size_t N = (size_t)n;
    const tlm_dtype dt = m->act_dt;
    const int lowp = dt != TLM_DTYPE_F32;
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    float *g_wte = m->grads + m->tensors[0].offset;
    float *g_ln_final = m->grads + m->tensors[m->num_tensors - 2].offset;
    float *g_lm_head = m->grads + m->tensors[m->num_tensors - 1].offset;
    char layer_name[32];
    /* loss = mean over N positions: dlogits = scale * (softmax - onehot) / N, in place */
    op->cross_entropy_backward(be, m->logits, m->logits, m->lse, m->targets, n, V, scale / (float)n, dt);
    op->matmul_backward(be, m->d_tmp, g_lm_head, m->logits, m->ln_f, gemm_w(m, m->lm_head), n, C, V, dt);
    be->memset_zero(be, m->d_resid, N * C * sizeof(float));
    op->rmsnorm_backward(be, m->d_resid, g_ln_final, m->d_tmp, m->x_final, m->ln_final, m->ln_f_rstd, n, C, dt);
    /* d_resid (float32) holds the gradient of the current block's output, walking down the
     * layers; d_resid_lp is its GEMM-operand copy */
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const tlm_layer_acts *a = &m->acts[l];
        const tlm_layer_weights *w = &m->layer_w[l];
        const tlm_layer_weights *g = &m->layer_g[l];
        snprintf(layer_name, sizeof layer_name, "layer %d", l);
        tlm_range_push(be, layer_name);
        /* feed-forward branch */
        if (lowp) op->cast(be, m->d_resid_lp, m->d_resid, N * C, dt);
        op->matmul_backward(be, m->d_g, g->w2, m->d_resid_lp, a->g, gemm_w(m, w->w2), n, F, C, dt);
        op->swiglu_backward(be, m->d_ab, m->d_g, a->ab, n, F, dt);
        op->matmul_backward(be, m->d_tmp, g->w13, m->d_ab, a->ln2, gemm_w(m, w->w13), n, C, 2 * F, dt);
        op->rmsnorm_backward(be, m->d_resid, g->ln2, m->d_tmp, a->h, w->ln2, a->ln2_rstd, n, C, dt);
        /* attention branch */
        if (lowp) op->cast(be, m->d_resid_lp, m->d_resid, N * C, dt);
        op->matmul_backward(be, m->d_tmp, g->out_proj, m->d_resid_lp, a->att, gemm_w(m, w->out_proj), n, C, C, dt);
        if (m->attention == TLM_ATTENTION_FLASH) /* recomputes P from the forward's out and lse */
            op->flash_attention_backward(be, m->d_qkv, at(m->d_qkv, C, dt), at(m->d_qkv, 2 * C, dt),
                                         m->flash_workspace, m->d_tmp, a->qkv, at(a->qkv, C, dt),
                                         at(a->qkv, 2 * C, dt), a->att, a->lse, 3 * C, C, B, T, T, H, D, true, dt);
        else
            op->attention_backward(be, m->d_qkv, at(m->d_qkv, C, dt), at(m->d_qkv, 2 * C, dt), m->d_probs,
                                   m->d_tmp, a->qkv, at(a->qkv, C, dt), at(a->qkv, 2 * C, dt), a->probs, 3 * C, B,
                                   T, H, D, dt);
        op->rope_backward(be, m->d_qkv, m->rope_cos, m->rope_sin, B, T, 2 * H, D, 3 * C, dt);
        op->matmul_backward(be, m->d_tmp, g->qkv, m->d_qkv, a->ln1, gemm_w(m, w->qkv), n, C, 3 * C, dt);
        op->rmsnorm_backward(be, m->d_resid, g->ln1, m->d_tmp, a->x, w->ln1, a->ln1_rstd, n, C, dt);
        tlm_range_pop(be);
    }
    op->embedding_backward(be, g_wte, m->d_resid, m->inputs, n, V, C);
}

tlm_status tlm_model_backward(tlm_model *m) {
    if (!m->have_forward)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "backward needs a forward pass with targets first");
    tlm_backend *be = m->backend;
    if (!m->grads) {
        m->grads = tlm_alloc(be, m->flat_numel * sizeof(float), TLM_MEM_GRADIENTS, "gradients");
        if (!m->grads) return TLM_ERR_OUT_OF_MEMORY;
        be->memset_zero(be, m->grads, m->flat_numel * sizeof(float)); /* padding stays zero */
        tlm_model_set_grad_views(m);
    }
    const float scale = be->precision == TLM_PRECISION_FP16 ? m->loss_scale : 1.0f;

    tlm_range_push(be, "backward");
    uint32_t scale_bits;
    memcpy(&scale_bits, &scale, sizeof scale_bits);
    run_pass(m, &m->graph_bwd, backward_pass, scale_bits);
    tlm_range_pop(be);
    m->grads_scale = scale;
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
    tlm_range_push(be, "optimizer");
    if (be->precision == TLM_PRECISION_FP16) {
        /* GradScaler: unscale; skip the step on inf/NaN and halve the scale; double it after
         * 2000 clean steps in a row */
        size_t bad = be->ops->grad_unscale(be, m->grads, m->flat_numel, 1.0f / m->grads_scale);
        m->grads_scale = 1.0f;
        m->last_step_skipped = bad != 0;
        if (bad) {
            m->loss_scale *= 0.5f;
            m->scale_growth_tracker = 0;
            m->skipped_steps++;
            tlm_range_pop(be);
            return TLM_OK;
        }
        if (++m->scale_growth_tracker == 2000) {
            m->loss_scale *= 2.0f;
            m->scale_growth_tracker = 0;
        }
    }
    m->adam_t++;
    /* the GEMM copy of the weights (bf16/fp16) is refreshed in the same pass */
    be->ops->adamw_step(be, m->params, m->grads, m->adam_m, m->adam_v, m->flat_numel, opt->lr, opt->beta1,
                        opt->beta2, opt->eps, opt->weight_decay, m->adam_t, m->params_lp, m->act_dt);
    m->params_lp_stale = 0;
    tlm_range_pop(be);
    return TLM_OK;
}
