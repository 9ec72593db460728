/* model.c — the CS336 model's parameters: the flat layout with its state-dict names,
 * creation on a backend, the CS336 initialisation, and the RoPE tables. */
#include "tlm/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "tlm/rng.h"

#define TLM_TENSOR_ALIGN 64 /* floats: every tensor group starts on a 256-byte boundary */

tlm_adamw_config tlm_adamw_defaults(void) {
    return (tlm_adamw_config){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f};
}

static size_t align_up(size_t n) { return (n + TLM_TENSOR_ALIGN - 1) / TLM_TENSOR_ALIGN * TLM_TENSOR_ALIGN; }

/* Appends a tensor at *offset. `packed` keeps it adjacent to the previous one (q, k, v and
 * w1, w3 form one GEMM each); otherwise it starts on an aligned offset. */
static void add_tensor(tlm_model *m, size_t *offset, int packed, const char *name,
                       int ndim, int64_t d0, int64_t d1) {
    tlm_tensor_info *t = &m->tensors[m->num_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    if (!packed) *offset = align_up(*offset);
    t->offset = *offset;
    *offset += t->numel;
    m->num_params += t->numel;
}

/* The flat layout, in this order: token_embeddings; per layer ln1, q_proj, k_proj, v_proj
 * (packed), output_proj, ln2, w1, w3 (packed), w2; ln_final; lm_head. */
static void build_layout(tlm_model *m) {
    const tlm_config *c = &m->config;
    const int64_t C = c->d_model, F = c->d_ff, V = c->vocab_size;
    size_t off = 0;
    char name[64];
    add_tensor(m, &off, 0, "token_embeddings.weight", 2, V, C);
    for (int l = 0; l < c->num_layers; l++) {
        snprintf(name, sizeof name, "layers.%d.ln1.weight", l);
        add_tensor(m, &off, 0, name, 1, C, 0);
        static const char *qkv[3] = {"q_proj", "k_proj", "v_proj"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "layers.%d.attn.%s.weight", l, qkv[i]);
            add_tensor(m, &off, i > 0, name, 2, C, C);
        }
        snprintf(name, sizeof name, "layers.%d.attn.output_proj.weight", l);
        add_tensor(m, &off, 0, name, 2, C, C);
        snprintf(name, sizeof name, "layers.%d.ln2.weight", l);
        add_tensor(m, &off, 0, name, 1, C, 0);
        snprintf(name, sizeof name, "layers.%d.ffn.w1.weight", l);
        add_tensor(m, &off, 0, name, 2, F, C);
        snprintf(name, sizeof name, "layers.%d.ffn.w3.weight", l);
        add_tensor(m, &off, 1, name, 2, F, C);
        snprintf(name, sizeof name, "layers.%d.ffn.w2.weight", l);
        add_tensor(m, &off, 0, name, 2, C, F);
    }
    add_tensor(m, &off, 0, "ln_final.weight", 1, C, 0);
    add_tensor(m, &off, 0, "lm_head.weight", 2, V, C);
    m->flat_numel = align_up(off);
}

/* Per-layer views into a flat buffer laid out by build_layout: layer l owns tensors 1 + 9*l ..
 * 1 + 9*l + 8 (ln1, q, k, v, output_proj, ln2, w1, w3, w2). */
static void set_views(const tlm_model *m, float *base, float **wte, tlm_layer_weights *layers,
                      float **ln_final, float **lm_head) {
    const tlm_tensor_info *t = m->tensors;
    *wte = base + t[0].offset;
    for (int l = 0; l < m->config.num_layers; l++) {
        const tlm_tensor_info *lt = &t[1 + 9 * l];
        layers[l] = (tlm_layer_weights){.ln1 = base + lt[0].offset,
                                        .qkv = base + lt[1].offset,
                                        .out_proj = base + lt[4].offset,
                                        .ln2 = base + lt[5].offset,
                                        .w13 = base + lt[6].offset,
                                        .w2 = base + lt[8].offset};
    }
    *ln_final = base + t[m->num_tensors - 2].offset;
    *lm_head = base + t[m->num_tensors - 1].offset;
}

void tlm_model_set_grad_views(tlm_model *m) {
    float *wte, *lnf, *lmh;
    set_views(m, m->grads, &wte, m->layer_g, &lnf, &lmh);
}

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
    m->backend->copy_to_backend(m->backend, m->rope_cos, cs, n * sizeof(float));
    m->backend->copy_to_backend(m->backend, m->rope_sin, cs + n, n * sizeof(float));
    m->backend->synchronize(m->backend);
    free(cs);
    return TLM_OK;
}

tlm_status tlm_model_create(tlm_model **out, const tlm_config *cfg, tlm_backend *be) {
    *out = NULL;
    TLM_TRY(tlm_config_validate(cfg));
    tlm_model *m = calloc(1, sizeof *m);
    if (!m) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the model");
    m->config = *cfg;
    m->backend = be;
    m->tensors = calloc((size_t)(3 + 9 * cfg->num_layers), sizeof *m->tensors);
    m->layer_w = calloc((size_t)cfg->num_layers, sizeof *m->layer_w);
    m->layer_g = calloc((size_t)cfg->num_layers, sizeof *m->layer_g);
    if (!m->tensors || !m->layer_w || !m->layer_g) {
        tlm_model_free(m);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the model's tables");
    }
    build_layout(m);
    m->params = tlm_alloc(be, m->flat_numel * sizeof(float), TLM_MEM_PARAMETERS, "parameters");
    if (!m->params) {
        tlm_model_free(m);
        return TLM_ERR_OUT_OF_MEMORY;
    }
    be->memset_zero(be, m->params, m->flat_numel * sizeof(float)); /* padding stays zero */
    m->loss_scale = 65536.0f; /* 2^16, GradScaler's initial scale */
    m->grads_scale = 1.0f;
    m->params_lp_stale = 1;
    set_views(m, m->params, &m->wte, m->layer_w, &m->ln_final, &m->lm_head);
    tlm_status s = make_rope_tables(m);
    if (s != TLM_OK) {
        tlm_model_free(m);
        return s;
    }
    *out = m;
    return TLM_OK;
}


void tlm_model_free(tlm_model *m) {
    if (!m) return;
    tlm_backend *be = m->backend;
    tlm_model_free_activations(m);
    tlm_free(be, m->params);
    tlm_free(be, m->grads);
    tlm_free(be, m->adam_m);
    tlm_free(be, m->adam_v);
    tlm_free(be, m->params_lp);
    tlm_free(be, m->rope_cos);
    tlm_free(be, m->rope_sin);
    free(m->tensors);
    free(m->layer_w);
    free(m->layer_g);
    free(m);
}

/* ---- attention: naive or FlashAttention-2 ------------------------------------------------ */

const char *tlm_attention_name(tlm_attention a) {
    switch (a) {
    case TLM_ATTENTION_NAIVE: return "naive";
    case TLM_ATTENTION_FLASH: return "flash";
    case TLM_ATTENTION_AUTO: return "auto";
    }
    return "?";
}

bool tlm_attention_parse(const char *name, tlm_attention *out) {
    static const tlm_attention all[] = {TLM_ATTENTION_NAIVE, TLM_ATTENTION_FLASH, TLM_ATTENTION_AUTO};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, tlm_attention_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    return false;
}

static const char *mode_name(tlm_precision p) {
    return p == TLM_PRECISION_TF32 ? "tf32" : p == TLM_PRECISION_BF16 ? "bf16" : p == TLM_PRECISION_FP16 ? "fp16" : "fp32";
}

tlm_status tlm_attention_check(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a) {
    if (a != TLM_ATTENTION_FLASH) return TLM_OK;
    const tlm_ops *op = be->ops;
    const int D = tlm_config_d_head(c);
    if (!op->flash_attention_forward || !op->flash_attention_backward || !op->flash_attention_check)
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention is not supported on the %s backend: it has no FlashAttention-2 "
                        "kernels (use the naive attention)", be->name);
    if (op->flash_attention_check(be, D, tlm_precision_act_dtype(p)) != TLM_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", tlm_last_error());
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention is not supported on the %s backend for d_head %d in %s (use the "
                        "naive attention): %s", be->name, D, mode_name(p), why);
    }
    return TLM_OK;
}

tlm_attention tlm_attention_resolve(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a) {
    if (a != TLM_ATTENTION_AUTO) return a;
    if (be->device == TLM_DEVICE_CPU) return TLM_ATTENTION_NAIVE;
    return tlm_attention_check(be, c, p, TLM_ATTENTION_FLASH) == TLM_OK ? TLM_ATTENTION_FLASH : TLM_ATTENTION_NAIVE;
}

tlm_status tlm_model_set_attention(tlm_model *m, tlm_attention a) {
    if (a != TLM_ATTENTION_NAIVE && a != TLM_ATTENTION_FLASH && a != TLM_ATTENTION_AUTO)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown attention %d (known: naive, flash, auto)", (int)a);
    tlm_backend *be = m->backend;
    a = tlm_attention_resolve(be, &m->config, be->precision, a);
    TLM_TRY(tlm_attention_check(be, &m->config, be->precision, a));
    if (a != m->attention) {
        tlm_model_free_activations(m); /* the saved tensors differ: the next forward allocates */
        m->attention = a;
    }
    return TLM_OK;
}

int tlm_model_find_tensor(const tlm_model *m, const char *name) {
    for (int i = 0; i < m->num_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

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
    size_t max_numel = 0;
    for (int i = 0; i < m->num_tensors; i++)
        if (m->tensors[i].numel > max_numel) max_numel = m->tensors[i].numel;
    float *staging = malloc(max_numel * sizeof(float));
    if (!staging) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for initialisation");
    for (int i = 0; i < m->num_tensors; i++) {
        const tlm_tensor_info *t = &m->tensors[i];
        init_tensor(t, i, seed, staging);
        m->backend->copy_to_backend(m->backend, m->params + t->offset, staging, t->numel * sizeof(float));
        m->backend->synchronize(m->backend); /* staging is reused */
    }
    free(staging);
    m->adam_t = 0;
    m->params_lp_stale = 1;
    return TLM_OK;
}
