/* layout.c — the flat parameter layout (layout.h): names, shapes and offsets of every tensor, the
 * groups whose gradients complete together, and per-layer views of a flat buffer. */
#include "tlm/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TLM_TENSOR_ALIGN 64 /* floats: every tensor group starts on a 256-byte boundary */

static size_t align_up(size_t n) { return (n + TLM_TENSOR_ALIGN - 1) / TLM_TENSOR_ALIGN * TLM_TENSOR_ALIGN; }

/* Appends a tensor at *offset. `packed` keeps it adjacent to the previous one (q, k, v and
 * w1, w3 form one GEMM each); otherwise it starts on an aligned offset. */
static void add_tensor(tlm_param_layout *l, size_t *offset, int packed, int layer, const char *name, int ndim,
                       int64_t d0, int64_t d1) {
    tlm_tensor_info *t = &l->tensors[l->num_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->layer = layer;
    if (!packed) *offset = align_up(*offset);
    t->offset = *offset;
    *offset += t->numel;
    l->num_params += t->numel;
}

/* a group of tensors [first, first + n), spanning from its first tensor to `end` */
static tlm_param_group group(const tlm_param_layout *l, int layer, int first, int n, size_t end) {
    const size_t begin = l->tensors[first].offset;
    return (tlm_param_group){layer, first, n, begin, end - begin};
}

tlm_status tlm_layout_build(tlm_param_layout *l, const tlm_config *c) {
    memset(l, 0, sizeof *l);
    const int64_t C = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->num_layers;
    /* the flat buffer's size in double first: past size_t (or an int count of tensors) is refused */
    const double total = 2.0 * V * C + L * (4.0 * C * C + 3.0 * C * F + 2.0 * C + 6 * TLM_TENSOR_ALIGN) + C;
    if (L > 100000000 || total * sizeof(float) > 9.0e18)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a model of %lld layers, d_model %lld, d_ff %lld has too many "
                        "parameters (%.3g)", (long long)L, (long long)C, (long long)F, total);
    l->tensors = calloc((size_t)(3 + 9 * L), sizeof *l->tensors);
    l->groups = calloc((size_t)(L + 2), sizeof *l->groups);
    if (!l->tensors || !l->groups) {
        tlm_layout_free(l);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the model's tables");
    }
    size_t off = 0;
    char name[64];
    add_tensor(l, &off, 0, -1, "token_embeddings.weight", 2, V, C);
    for (int i = 0; i < L; i++) {
        snprintf(name, sizeof name, "layers.%d.ln1.weight", i);
        add_tensor(l, &off, 0, i, name, 1, C, 0);
        static const char *qkv[3] = {"q_proj", "k_proj", "v_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "layers.%d.attn.%s.weight", i, qkv[k]);
            add_tensor(l, &off, k > 0, i, name, 2, C, C);
        }
        snprintf(name, sizeof name, "layers.%d.attn.output_proj.weight", i);
        add_tensor(l, &off, 0, i, name, 2, C, C);
        snprintf(name, sizeof name, "layers.%d.ln2.weight", i);
        add_tensor(l, &off, 0, i, name, 1, C, 0);
        snprintf(name, sizeof name, "layers.%d.ffn.w1.weight", i);
        add_tensor(l, &off, 0, i, name, 2, F, C);
        snprintf(name, sizeof name, "layers.%d.ffn.w3.weight", i);
        add_tensor(l, &off, 1, i, name, 2, F, C);
        snprintf(name, sizeof name, "layers.%d.ffn.w2.weight", i);
        add_tensor(l, &off, 0, i, name, 2, C, F);
    }
    add_tensor(l, &off, 0, -1, "ln_final.weight", 1, C, 0);
    add_tensor(l, &off, 0, -1, "lm_head.weight", 2, V, C);
    l->flat_numel = align_up(off);

    /* the groups, in the order the backward pass completes them; each ends where the next begins */
    const int head = l->num_tensors - 2;
    l->groups[l->num_groups++] = group(l, TLM_GROUP_HEAD, head, 2, l->flat_numel);
    for (int i = (int)L - 1; i >= 0; i--) {
        const int first = 1 + 9 * i;
        l->groups[l->num_groups++] = group(l, i, first, 9, l->tensors[first + 9].offset);
    }
    l->groups[l->num_groups++] = group(l, TLM_GROUP_EMBEDDING, 0, 1, l->tensors[1].offset);
    return TLM_OK;
}

void tlm_layout_free(tlm_param_layout *l) {
    free(l->tensors);
    free(l->groups);
    memset(l, 0, sizeof *l);
}

int tlm_layout_find(const tlm_param_layout *l, const char *name) {
    for (int i = 0; i < l->num_tensors; i++)
        if (strcmp(l->tensors[i].name, name) == 0) return i;
    return -1;
}

int tlm_layout_group_of(const tlm_param_layout *l, int t) {
    for (int g = 0; g < l->num_groups; g++)
        if (t >= l->groups[g].first_tensor && t < l->groups[g].first_tensor + l->groups[g].num_tensors) return g;
    return -1;
}

/* where tensor t of the layout lies: in one flat buffer, or in its group's piece */
typedef struct {
    const tlm_param_layout *l;
    float *base;
    float *const *group_base;
} placement;

static float *at(const placement *p, int t) {
    const size_t off = p->l->tensors[t].offset;
    if (p->base) return p->base + off;
    const tlm_param_group *g = &p->l->groups[tlm_layout_group_of(p->l, t)];
    return p->group_base[g - p->l->groups] + (off - g->offset);
}

/* layer i owns tensors 1 + 9i .. 1 + 9i + 8: ln1, q, k, v, output_proj, ln2, w1, w3, w2 */
static tlm_status views(tlm_views *v, const placement *p, int num_layers) {
    memset(v, 0, sizeof *v);
    v->layers = calloc((size_t)num_layers, sizeof *v->layers);
    if (!v->layers) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the layer views");
    v->wte = at(p, 0);
    for (int i = 0; i < num_layers; i++) {
        const int t = 1 + 9 * i;
        v->layers[i] = (tlm_layer_weights){.ln1 = at(p, t),
                                           .qkv = at(p, t + 1),
                                           .out_proj = at(p, t + 4),
                                           .ln2 = at(p, t + 5),
                                           .w13 = at(p, t + 6),
                                           .w2 = at(p, t + 8)};
    }
    v->ln_final = at(p, p->l->num_tensors - 2);
    v->lm_head = at(p, p->l->num_tensors - 1);
    return TLM_OK;
}

tlm_status tlm_views_make(tlm_views *v, const tlm_param_layout *l, int num_layers, float *base) {
    memset(v, 0, sizeof *v);
    if (!base) return TLM_OK;
    const placement p = {l, base, NULL};
    return views(v, &p, num_layers);
}

tlm_status tlm_views_make_grouped(tlm_views *v, const tlm_param_layout *l, int num_layers, float *const *group_base) {
    const placement p = {l, NULL, group_base};
    return views(v, &p, num_layers);
}

void tlm_views_free(tlm_views *v) {
    free(v->layers);
    memset(v, 0, sizeof *v);
}
