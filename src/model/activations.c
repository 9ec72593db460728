/* activations.c — the table of the model's activations (activations.h): each buffer once, with its
 * name, shape, dtype and lifetime; allocation and freeing walk the table. */
#include "model/activations.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { E_F32, E_DT, E_I32 } elem;                                   /* element type */
typedef enum { S_NC, S_N, S_N3C, S_N2F, S_NF, S_NV, S_BHTT, S_BHT, S_FLASH_WS } size_kind; /* shape */
typedef enum { ALWAYS, NAIVE_ONLY, FLASH_ONLY } only;

typedef struct {
    const char *name; /* "layers.%d.ln1": %d is the layer */
    size_t offset;    /* of the pointer in tlm_layer_acts (per layer) or tlm_activations */
    int per_layer;
    elem elem;
    size_kind size;
    tlm_act_lifetime life;
    only only;
} act_desc;

#define L(field) offsetof(tlm_layer_acts, field), 1
#define A(field) offsetof(tlm_activations, field), 0

static const act_desc table[] = {
    /* SAVED, per layer: the forward pass of block l writes them, the backward of block l reads them */
    {"layers.%d.x", L(x), E_F32, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ln1", L(ln1), E_DT, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ln1.rstd", L(ln1_rstd), E_F32, S_N, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.attn.qkv", L(qkv), E_DT, S_N3C, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.attn.probs", L(probs), E_DT, S_BHTT, TLM_ACT_SAVED, NAIVE_ONLY},
    {"layers.%d.attn.lse", L(lse), E_F32, S_BHT, TLM_ACT_SAVED, FLASH_ONLY},
    {"layers.%d.attn.out", L(att), E_DT, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.h", L(h), E_F32, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ln2", L(ln2), E_DT, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ln2.rstd", L(ln2_rstd), E_F32, S_N, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ffn.w13_out", L(ab), E_DT, S_N2F, TLM_ACT_SAVED, ALWAYS},
    {"layers.%d.ffn.swiglu", L(g), E_DT, S_NF, TLM_ACT_SAVED, ALWAYS},
    /* SAVED: the final norm */
    {"final.x", A(x_final), E_F32, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"ln_final", A(ln_f), E_DT, S_NC, TLM_ACT_SAVED, ALWAYS},
    {"ln_final.rstd", A(ln_f_rstd), E_F32, S_N, TLM_ACT_SAVED, ALWAYS},
    /* STEP */
    {"logits", A(logits), E_DT, S_NV, TLM_ACT_STEP, ALWAYS},
    {"logsumexp", A(lse), E_F32, S_N, TLM_ACT_STEP, ALWAYS},
    {"losses", A(losses), E_F32, S_N, TLM_ACT_STEP, ALWAYS},
    /* BACKWARD scratch, shared by the layers */
    {"backward.d_resid", A(d_resid), E_F32, S_NC, TLM_ACT_BACKWARD, ALWAYS},
    {"backward.d_resid_lowp", A(d_resid_lp), E_DT, S_NC, TLM_ACT_BACKWARD, ALWAYS}, /* fp32: d_resid */
    {"backward.d_tmp", A(d_tmp), E_DT, S_NC, TLM_ACT_BACKWARD, ALWAYS},
    {"backward.d_qkv", A(d_qkv), E_DT, S_N3C, TLM_ACT_BACKWARD, ALWAYS},
    {"backward.d_probs", A(d_probs), E_DT, S_BHTT, TLM_ACT_BACKWARD, NAIVE_ONLY},
    {"backward.flash_workspace", A(flash_workspace), E_F32, S_FLASH_WS, TLM_ACT_BACKWARD, FLASH_ONLY},
    {"backward.d_w13_out", A(d_ab), E_DT, S_N2F, TLM_ACT_BACKWARD, ALWAYS},
    {"backward.d_swiglu", A(d_g), E_DT, S_NF, TLM_ACT_BACKWARD, ALWAYS},
    /* STEP: the batch's token ids (workspace) */
    {"inputs", A(inputs), E_I32, S_N, TLM_ACT_STEP, ALWAYS},
    {"targets", A(targets), E_I32, S_N, TLM_ACT_STEP, ALWAYS},
};
#define NUM_DESC (sizeof table / sizeof table[0])

static size_t numel(size_kind k, const tlm_config *c, size_t B, size_t T) {
    const size_t N = B * T, C = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab_size;
    const size_t H = (size_t)c->num_heads, D = (size_t)tlm_config_d_head(c);
    switch (k) {
    case S_NC: return N * C;
    case S_N: return N;
    case S_N3C: return N * 3 * C;
    case S_N2F: return N * 2 * F;
    case S_NF: return N * F;
    case S_NV: return N * V;
    case S_BHTT: return B * H * T * T;
    case S_BHT: return B * H * T;
    case S_FLASH_WS: return tlm_flash_workspace_floats((int)B, (int)T, (int)H, (int)D);
    }
    return 0;
}

static bool wanted(const act_desc *d, tlm_attention a) {
    return d->only == ALWAYS || (d->only == NAIVE_ONLY) == (a == TLM_ATTENTION_NAIVE);
}

static void **slot(tlm_activations *a, const act_desc *d, int layer) {
    char *base = d->per_layer ? (char *)&a->layers[layer] : (char *)a;
    return (void **)(base + d->offset);
}

tlm_status tlm_activations_alloc(tlm_activations **out, tlm_model *m, int B, int T, tlm_dtype dt) {
    *out = NULL;
    const tlm_config *c = &m->config;
    tlm_backend *be = m->backend;
    tlm_activations *a = calloc(1, sizeof *a);
    if (a) a->layers = calloc((size_t)c->num_layers, sizeof *a->layers);
    if (!a || !a->layers) {
        free(a);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the activation table");
    }
    a->num_layers = c->num_layers;
    a->B = B;
    a->T = T;
    a->dt = dt;
    a->attention = m->run.attention;
    const size_t es[] = {sizeof(float), tlm_dtype_size(dt), sizeof(int32_t)};
    for (size_t i = 0; i < NUM_DESC; i++) {
        const act_desc *d = &table[i];
        if (!wanted(d, a->attention)) continue;
        for (int l = 0; l < (d->per_layer ? c->num_layers : 1); l++) {
            if (d->offset == offsetof(tlm_activations, d_resid_lp) && dt == TLM_DTYPE_F32) {
                a->d_resid_lp = a->d_resid; /* fp32: the GEMM operand is d_resid itself */
                continue;
            }
            char name[64];
            snprintf(name, sizeof name, d->name, l);
            const tlm_mem_tag tag = d->elem == E_I32 ? TLM_MEM_WORKSPACE : TLM_MEM_ACTIVATIONS;
            void *p = tlm_alloc(be, numel(d->size, c, (size_t)B, (size_t)T) * es[d->elem], tag, name);
            if (!p) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", tlm_last_error());
                tlm_activations_free(a, be);
                return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "activations for batch %d x context %d: %s", B, T, msg);
            }
            *slot(a, d, l) = p;
        }
    }
    *out = a;
    return TLM_OK;
}

void tlm_activations_free(tlm_activations *a, tlm_backend *be) {
    if (!a) return;
    if (a->d_resid_lp == (void *)a->d_resid) a->d_resid_lp = NULL; /* fp32: an alias, not an allocation */
    for (size_t i = NUM_DESC; i-- > 0;) /* in reverse allocation order */
        for (int l = table[i].per_layer ? a->num_layers - 1 : 0; l >= 0; l--) {
            void **p = slot(a, &table[i], l);
            tlm_free(be, *p);
            *p = NULL;
        }
    free(a->layers);
    free(a);
}
