/* activations.c — the table of the step's buffers (activations.h): each buffer once, with its name,
 * shape, dtype and what it is for; the lifetimes that follow from the run's options; the plan of
 * the arena (memory_plan.h); and the stage-by-stage accounting of what is alive. */
#include "model/activations.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { E_F32, E_DT, E_I32 } elem;                                   /* element type */
typedef enum { S_NC, S_N, S_N3C, S_N2F, S_NF, S_NV, S_BHTT, S_BHT, S_FLASH_WS } size_kind; /* shape */
typedef enum { ALWAYS, NAIVE_ONLY, FLASH_ONLY } only;

/* what a buffer is for: its lifetime follows (lifetime() below) */
typedef enum {
    R_X,        /* block input (residual stream), per block */
    R_BLOCK,    /* a block's own buffer: kept per block, or one shared set */
    R_PROBS,    /* naive attention's probabilities: as R_BLOCK, shared also with recompute attention */
    R_FINAL_X,  /* the last block's output */
    R_FINAL,    /* the final norm's output and statistics, logits, their logsumexp */
    R_LOSSES,   /* per-position losses: read by the mean right away */
    R_INPUTS,
    R_TARGETS,
    R_D_RESID,  /* the residual stream's gradient: from the head's backward to the embedding's */
    R_D_HEAD,   /* backward scratch used from the head's backward on */
    R_D_BLOCK   /* backward scratch of the blocks */
} role;

typedef struct {
    const char *name; /* "layers.%d.ln1" (per block; "blocks.ln1" when shared) or "logits" */
    size_t offset;    /* of the pointer in tlm_layer_acts (per block) or tlm_activations */
    int per_layer;
    elem elem;
    size_kind size;
    role role;
    only only;
} act_desc;

#define L_(field) offsetof(tlm_layer_acts, field), 1
#define A_(field) offsetof(tlm_activations, field), 0

static const act_desc table[] = {
    {"layers.%d.x", L_(x), E_F32, S_NC, R_X, ALWAYS},
    {"layers.%d.ln1", L_(ln1), E_DT, S_NC, R_BLOCK, ALWAYS},
    {"layers.%d.ln1.rstd", L_(ln1_rstd), E_F32, S_N, R_BLOCK, ALWAYS},
    {"layers.%d.attn.qkv", L_(qkv), E_DT, S_N3C, R_BLOCK, ALWAYS},
    {"layers.%d.attn.probs", L_(probs), E_DT, S_BHTT, R_PROBS, NAIVE_ONLY},
    {"layers.%d.attn.lse", L_(lse), E_F32, S_BHT, R_BLOCK, FLASH_ONLY},
    {"layers.%d.attn.out", L_(att), E_DT, S_NC, R_BLOCK, ALWAYS},
    {"layers.%d.h", L_(h), E_F32, S_NC, R_BLOCK, ALWAYS},
    {"layers.%d.ln2", L_(ln2), E_DT, S_NC, R_BLOCK, ALWAYS},
    {"layers.%d.ln2.rstd", L_(ln2_rstd), E_F32, S_N, R_BLOCK, ALWAYS},
    {"layers.%d.ffn.w13_out", L_(ab), E_DT, S_N2F, R_BLOCK, ALWAYS},
    {"layers.%d.ffn.swiglu", L_(g), E_DT, S_NF, R_BLOCK, ALWAYS},
    {"final.x", A_(x_final), E_F32, S_NC, R_FINAL_X, ALWAYS},
    {"ln_final", A_(ln_f), E_DT, S_NC, R_FINAL, ALWAYS},
    {"ln_final.rstd", A_(ln_f_rstd), E_F32, S_N, R_FINAL, ALWAYS},
    {"logits", A_(logits), E_DT, S_NV, R_FINAL, ALWAYS},
    {"logsumexp", A_(lse), E_F32, S_N, R_FINAL, ALWAYS},
    {"losses", A_(losses), E_F32, S_N, R_LOSSES, ALWAYS},
    {"inputs", A_(inputs), E_I32, S_N, R_INPUTS, ALWAYS},
    {"targets", A_(targets), E_I32, S_N, R_TARGETS, ALWAYS},
    {"backward.d_resid", A_(d_resid), E_F32, S_NC, R_D_RESID, ALWAYS},
    {"backward.d_resid_lowp", A_(d_resid_lp), E_DT, S_NC, R_D_BLOCK, ALWAYS}, /* fp32: d_resid itself */
    {"backward.d_tmp", A_(d_tmp), E_DT, S_NC, R_D_HEAD, ALWAYS},
    {"backward.d_qkv", A_(d_qkv), E_DT, S_N3C, R_D_BLOCK, ALWAYS},
    {"backward.d_probs", A_(d_probs), E_DT, S_BHTT, R_D_BLOCK, NAIVE_ONLY},
    {"backward.flash_workspace", A_(flash_workspace), E_F32, S_FLASH_WS, R_D_BLOCK, FLASH_ONLY},
    {"backward.d_w13_out", A_(d_ab), E_DT, S_N2F, R_D_BLOCK, ALWAYS},
    {"backward.d_swiglu", A_(d_g), E_DT, S_NF, R_D_BLOCK, ALWAYS},
};
#define NUM_DESC ((int)(sizeof table / sizeof table[0]))

/* one planned buffer */
typedef struct tlm_act_buffer {
    char name[64];
    tlm_mem_tag tag;
    tlm_act_lifetime life;
    int desc;           /* index into table, or -1 for a gradient group */
    int layer;          /* the block (per-block buffers), -1 when shared or not per block; a gradient
                           group's index into layout.groups */
    tlm_plan_buffer plan;
    void *placed;       /* the tracked allocation while its life lasts, else NULL */
} tlm_act_buffer;

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

/* Backward scratch that shares another's bytes: each block's backward is done with the host (the
 * SwiGLU part: d_swiglu, d_w13_out) before it writes the guest (the attention part), and the next
 * block writes the host again only after the guest's last reader. */
static const struct {
    size_t guest, host;
} shares[] = {
    {offsetof(tlm_activations, d_qkv), offsetof(tlm_activations, d_ab)},
    {offsetof(tlm_activations, flash_workspace), offsetof(tlm_activations, d_g)},
};

static int desc_at(size_t offset) {
    for (int i = 0; i < NUM_DESC; i++)
        if (!table[i].per_layer && table[i].offset == offset) return i;
    return -1;
}

static bool wanted(const act_desc *d, const tlm_step_shape *s);

/* the table entry whose bytes entry i shares (it is then not planned), or -1 */
static int host_of(int i, const tlm_config *c, const tlm_step_shape *s) {
    const size_t es[] = {sizeof(float), tlm_dtype_size(s->dt), sizeof(int32_t)};
    for (size_t k = 0; k < sizeof shares / sizeof shares[0]; k++) {
        if (table[i].per_layer || table[i].offset != shares[k].guest) continue;
        const int h = desc_at(shares[k].host);
        const size_t need = numel(table[i].size, c, (size_t)s->B, (size_t)s->T) * es[table[i].elem];
        const size_t have = numel(table[h].size, c, (size_t)s->B, (size_t)s->T) * es[table[h].elem];
        if (wanted(&table[h], s) && have >= need) return h;
    }
    return -1;
}

static bool wanted(const act_desc *d, const tlm_step_shape *s) {
    if (d->role >= R_D_RESID && s->forward_only) return false;
    if (d->offset == offsetof(tlm_activations, d_resid_lp) && !d->per_layer && s->dt == TLM_DTYPE_F32)
        return false; /* fp32: the GEMM operand is d_resid itself */
    return d->only == ALWAYS || (d->only == NAIVE_ONLY) == (s->attention == TLM_ATTENTION_NAIVE);
}

/* whether a block buffer is kept per block (else one buffer shared by every block) */
static bool kept(const act_desc *d, const tlm_step_shape *s) {
    if (d->role == R_X) return true;
    if (s->forward_only || s->recompute == TLM_RECOMPUTE_BLOCK) return false;
    return !(d->role == R_PROBS && s->recompute == TLM_RECOMPUTE_ATTENTION);
}

/* [first, last] stages of a buffer of role r (block l; -1: shared) */
static void lifetime(role r, int l, int L, const tlm_step_shape *s, int *first, int *last) {
    const bool fo = s->forward_only;
    switch (r) {
    case R_X:
        *first = l == 0 ? TLM_STAGE_EMBED : tlm_stage_fwd(l - 1);
        *last = fo ? tlm_stage_fwd(l) : tlm_stage_bwd(L, l);
        return;
    case R_BLOCK:
    case R_PROBS:
        *first = tlm_stage_fwd(l < 0 ? 0 : l);
        *last = fo ? tlm_stage_fwd(L - 1) : tlm_stage_bwd(L, l < 0 ? 0 : l);
        return;
    case R_FINAL_X:
        *first = tlm_stage_fwd(L - 1);
        *last = fo ? tlm_stage_head(L) : tlm_stage_head_bwd(L);
        return;
    case R_FINAL:
        *first = tlm_stage_head(L);
        *last = fo ? tlm_stage_head(L) : tlm_stage_head_bwd(L);
        return;
    case R_LOSSES: *first = *last = tlm_stage_head(L); return;
    case R_INPUTS:
        *first = TLM_STAGE_INPUT;
        *last = fo ? TLM_STAGE_EMBED : tlm_stage_embed_bwd(L);
        return;
    case R_TARGETS:
        *first = TLM_STAGE_INPUT;
        *last = fo ? tlm_stage_head(L) : tlm_stage_head_bwd(L);
        return;
    case R_D_RESID:
        *first = tlm_stage_head_bwd(L);
        *last = tlm_stage_embed_bwd(L);
        return;
    case R_D_HEAD:
        *first = tlm_stage_head_bwd(L);
        *last = tlm_stage_bwd(L, 0);
        return;
    case R_D_BLOCK:
        *first = tlm_stage_bwd(L, L - 1);
        *last = tlm_stage_bwd(L, 0);
        return;
    }
}

static tlm_act_lifetime lifetime_class(role r, bool per_block, const tlm_step_shape *s) {
    if (r >= R_D_RESID) return TLM_ACT_SCRATCH;
    if (r == R_LOSSES || r == R_INPUTS || r == R_TARGETS) return TLM_ACT_STEP;
    if (s->forward_only) return r == R_FINAL ? TLM_ACT_STEP : TLM_ACT_SCRATCH;
    return per_block || r == R_FINAL_X || r == R_FINAL ? TLM_ACT_SAVED : TLM_ACT_SCRATCH;
}

/* the stage whose backward completes gradient group g (layout.h order) */
static int group_stage(const tlm_param_group *g, int L) {
    if (g->layer == TLM_GROUP_HEAD) return tlm_stage_head_bwd(L);
    if (g->layer == TLM_GROUP_EMBEDDING) return tlm_stage_embed_bwd(L);
    return tlm_stage_bwd(L, g->layer);
}

static void **slot(tlm_activations *a, const act_desc *d, int layer) {
    char *base = d->per_layer ? (char *)&a->layers[layer] : (char *)a;
    return (void **)(base + d->offset);
}

static void group_name(char *buf, size_t n, const tlm_param_group *g) {
    if (g->layer == TLM_GROUP_HEAD) snprintf(buf, n, "gradients.head");
    else if (g->layer == TLM_GROUP_EMBEDDING) snprintf(buf, n, "gradients.token_embeddings");
    else snprintf(buf, n, "gradients.layers.%d", g->layer);
}

/* the spans of each group not covered by a tensor: zeroed when the group's life begins */
static tlm_status find_padding(tlm_activations *a, const tlm_param_layout *l) {
    int cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = 0;
        for (int gi = 0; gi < l->num_groups; gi++) {
            const tlm_param_group *g = &l->groups[gi];
            size_t at = g->offset;
            for (int t = g->first_tensor; t <= g->first_tensor + g->num_tensors; t++) {
                const size_t next = t < g->first_tensor + g->num_tensors ? l->tensors[t].offset : g->offset + g->numel;
                if (next > at) {
                    if (pass == 1) {
                        a->pad[n] = (tlm_grad_padding){.group = gi, .off = at - g->offset, .len = next - at};
                    }
                    n++;
                }
                if (t < g->first_tensor + g->num_tensors) at = l->tensors[t].offset + l->tensors[t].numel;
            }
        }
        if (pass == 0) {
            cap = n;
            a->pad = malloc((size_t)(cap ? cap : 1) * sizeof *a->pad);
            if (!a->pad)
                return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the gradient padding");
        }
        a->num_pad = n;
    }
    return TLM_OK;
}

/* The GEMM copy of every group but the embedding's (activations.h, WEIGHT_COPY), appended at b[*n]:
 * from the head down, each at the top of the bytes below its group's gradients in the flat layout
 * and below the copies placed before it, where it fits; else placed as any buffer. */
static void list_weight_copies(tlm_activations *a, const tlm_param_layout *layout, const tlm_step_shape *s, int *n) {
    const int L = a->num_layers;
    const size_t es = tlm_dtype_size(s->dt);
    size_t ceiling = layout->flat_numel * sizeof(float); /* the lowest copy placed so far */
    for (int gi = 0; gi < layout->num_groups; gi++) {
        const tlm_param_group *g = &layout->groups[gi];
        if (g->layer == TLM_GROUP_EMBEDDING) continue; /* the embedding's forward reads float32 */
        tlm_act_buffer *b = &a->buffers[(*n)++];
        b->desc = -1;
        b->layer = gi;
        char group[48];
        group_name(group, sizeof group, g);
        snprintf(b->name, sizeof b->name, "parameters.%s.%s", s->dt == TLM_DTYPE_BF16 ? "bf16" : "fp16",
                 group + strlen("gradients."));
        b->tag = TLM_MEM_PARAMETERS; /* "parameters.<dtype>...": the weight copy's category (memory_timeline.h) */
        b->life = TLM_ACT_WEIGHT_COPY;
        b->plan.bytes = g->numel * es;
        b->plan.first = TLM_STAGE_INPUT;
        b->plan.last = group_stage(g, L);
        const size_t size = (b->plan.bytes + TLM_PLAN_ALIGN - 1) / TLM_PLAN_ALIGN * TLM_PLAN_ALIGN;
        size_t top = g->offset * sizeof(float);
        if (top > ceiling) top = ceiling;
        top = top / TLM_PLAN_ALIGN * TLM_PLAN_ALIGN;
        b->plan.fixed = -1;
        if (top >= size) {
            b->plan.fixed = (int64_t)(top - size);
            ceiling = top - size;
        }
    }
}

/* The update writes group g's copy after consuming the gradients of the groups completed after g, and
 * nothing else lives from the update to the next step's INPUT: so the buffers in a copy's bytes that
 * live at the update must be gradients of groups completed after it (layout.groups index > g). */
static void check_weight_copies(const tlm_activations *a) {
    const int opt = tlm_stage_optimizer(a->num_layers);
    for (int i = 0; i < a->num_buffers; i++) {
        const tlm_act_buffer *c = &a->buffers[i];
        if (c->life != TLM_ACT_WEIGHT_COPY) continue;
        for (int j = 0; j < a->num_buffers; j++) {
            const tlm_act_buffer *b = &a->buffers[j];
            if (j == i || b->plan.last < opt || !b->plan.bytes) continue;
            const bool overlap = b->plan.offset < c->plan.offset + c->plan.bytes &&
                                 c->plan.offset < b->plan.offset + b->plan.bytes;
            if (overlap && !(b->life == TLM_ACT_GRADIENT && b->layer > c->layer))
                tlm_fatal("memory plan: '%s' [%zu, +%zu) shares bytes with '%s' [%zu, +%zu), which the update "
                          "of the groups in reverse completion order has not consumed when it writes the copy",
                          c->name, c->plan.offset, c->plan.bytes, b->name, b->plan.offset, b->plan.bytes);
        }
    }
}

/* the buffers of shape s: every wanted table entry (per block or shared), then the gradient groups */
static tlm_status list_buffers(tlm_activations *a, const tlm_config *c, const tlm_param_layout *layout,
                               const tlm_step_shape *s) {
    const int L = c->num_layers;
    const size_t es[] = {sizeof(float), tlm_dtype_size(s->dt), sizeof(int32_t)};
    int n = layout->num_groups + (s->weight_copy ? layout->num_groups : 0);
    for (int i = 0; i < NUM_DESC; i++)
        if (wanted(&table[i], s) && host_of(i, c, s) < 0) n += table[i].per_layer && kept(&table[i], s) ? L : 1;
    a->buffers = calloc((size_t)n, sizeof *a->buffers);
    if (!a->buffers) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the step's buffer table");
    n = 0;
    for (int i = 0; i < NUM_DESC; i++) {
        const act_desc *d = &table[i];
        if (!wanted(d, s)) continue;
        if (host_of(i, c, s) >= 0) { /* in its host's bytes: counted, not planned */
            a->guest_bytes += numel(d->size, c, (size_t)s->B, (size_t)s->T) * es[d->elem];
            continue;
        }
        const bool per_block = d->per_layer && kept(d, s);
        for (int l = 0; l < (per_block ? L : 1); l++) {
            tlm_act_buffer *b = &a->buffers[n++];
            b->desc = i;
            b->layer = per_block ? l : -1;
            if (per_block || !d->per_layer) snprintf(b->name, sizeof b->name, d->name, l);
            else snprintf(b->name, sizeof b->name, "blocks.%s", d->name + strlen("layers.%d."));
            b->tag = d->elem == E_I32 ? TLM_MEM_WORKSPACE : TLM_MEM_ACTIVATIONS;
            b->life = lifetime_class(d->role, per_block, s);
            b->plan.bytes = numel(d->size, c, (size_t)s->B, (size_t)s->T) * es[d->elem];
            b->plan.fixed = -1;
            lifetime(d->role, b->layer, L, s, &b->plan.first, &b->plan.last);
        }
    }
    if (!s->forward_only)
        for (int gi = 0; gi < layout->num_groups; gi++) {
            const tlm_param_group *g = &layout->groups[gi];
            tlm_act_buffer *b = &a->buffers[n++];
            b->desc = -1;
            b->layer = gi;
            group_name(b->name, sizeof b->name, g);
            b->tag = TLM_MEM_GRADIENTS;
            b->life = TLM_ACT_GRADIENT;
            b->plan.bytes = g->numel * sizeof(float);
            /* accumulating over micro-batches: the gradients outlive the forwards between their backwards */
            b->plan.first = s->accumulate ? TLM_STAGE_INPUT : group_stage(g, L);
            b->plan.last = s->optimizer_in_backward ? b->plan.first : tlm_stage_optimizer(L);
            /* the flat buffer at the arena's start: the groups keep their layout offsets */
            b->plan.fixed = s->optimizer_in_backward ? -1 : (int64_t)(g->offset * sizeof(float));
        }
    if (s->weight_copy) list_weight_copies(a, layout, s, &n);
    a->num_buffers = n;
    return TLM_OK;
}

/* points every buffer into the arena */
static tlm_status point(tlm_activations *a, const tlm_config *c, const tlm_param_layout *layout) {
    const int L = a->num_layers;
    for (int i = 0; i < a->num_buffers; i++) {
        const tlm_act_buffer *b = &a->buffers[i];
        void *p = (char *)a->arena + b->plan.offset;
        if (b->life == TLM_ACT_WEIGHT_COPY) {
            a->weight_copy[b->layer] = p;
            continue;
        }
        if (b->desc < 0) {
            a->group_grads[b->layer] = p;
            continue;
        }
        const act_desc *d = &table[b->desc];
        if (!d->per_layer) *slot(a, d, 0) = p;
        else if (b->layer >= 0) *slot(a, d, b->layer) = p;
        else
            for (int l = 0; l < L; l++) *slot(a, d, l) = p; /* shared by every block */
    }
    if (a->shape.forward_only) return TLM_OK;
    if (a->dt == TLM_DTYPE_F32) a->d_resid_lp = a->d_resid;
    for (int i = 0; i < NUM_DESC; i++) {
        const int h = wanted(&table[i], &a->shape) ? host_of(i, c, &a->shape) : -1;
        if (h >= 0) *slot(a, &table[i], 0) = *slot(a, &table[h], 0);
    }
    if (!a->shape.optimizer_in_backward) {
        a->grads = a->arena; /* every group at its layout offset */
        return tlm_views_make(&a->grad_views, layout, L, a->grads);
    }
    return tlm_views_make_grouped(&a->grad_views, layout, L, a->group_grads);
}

tlm_status tlm_activations_plan(tlm_activations **out, tlm_backend *be, const tlm_config *c,
                                const tlm_param_layout *layout, const tlm_step_shape *s, bool reserve) {
    *out = NULL;
    tlm_activations *a = calloc(1, sizeof *a);
    if (a) a->layers = calloc((size_t)c->num_layers, sizeof *a->layers);
    if (a && a->layers) a->group_grads = calloc((size_t)layout->num_groups, sizeof *a->group_grads);
    if (a && a->group_grads && s->weight_copy)
        a->weight_copy = calloc((size_t)layout->num_groups, sizeof *a->weight_copy);
    if (!a || !a->layers || !a->group_grads || (s->weight_copy && !a->weight_copy)) {
        if (a) free(a->layers);
        if (a) free(a->group_grads);
        free(a);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the activation table");
    }
    a->num_layers = c->num_layers;
    a->shape = *s;
    a->B = s->B;
    a->T = s->T;
    a->dt = s->dt;
    a->attention = s->attention;
    tlm_status st = list_buffers(a, c, layout, s);
    if (st == TLM_OK) st = find_padding(a, layout);
    tlm_plan_buffer *plan = st == TLM_OK ? malloc((size_t)a->num_buffers * sizeof *plan) : NULL;
    if (st == TLM_OK && !plan) st = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the memory plan");
    if (st == TLM_OK) {
        for (int i = 0; i < a->num_buffers; i++) plan[i] = a->buffers[i].plan;
        st = tlm_memory_plan(plan, a->num_buffers, &a->arena_bytes);
        a->live_bytes = tlm_memory_plan_lower_bound(plan, a->num_buffers);
        for (int i = 0; i < a->num_buffers && st == TLM_OK; i++) a->buffers[i].plan = plan[i];
        if (st == TLM_OK) check_weight_copies(a);
    }
    free(plan);
    if (st == TLM_OK && reserve) {
        a->arena = tlm_arena_reserve(be, a->arena_bytes, "step");
        if (!a->arena) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tlm_last_error());
            st = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "the step's activations and gradients for batch %d x context %d "
                          "(%.3f GiB): %s", s->B, s->T, (double)a->arena_bytes / (1u << 30), msg);
        }
    }
    if (st == TLM_OK && reserve) st = point(a, c, layout);
    if (st != TLM_OK) {
        tlm_activations_free(a, be);
        return st;
    }
    *out = a;
    return TLM_OK;
}

void tlm_activations_leave_all(tlm_activations *a, tlm_backend *be) {
    for (int i = 0; a && i < a->num_buffers; i++) {
        tlm_free(be, a->buffers[i].placed);
        a->buffers[i].placed = NULL;
    }
}

void tlm_activations_end_step(tlm_activations *a, tlm_backend *be) {
    for (int i = 0; a && i < a->num_buffers; i++) {
        if (a->buffers[i].life == TLM_ACT_WEIGHT_COPY) continue; /* placed again by the update */
        tlm_free(be, a->buffers[i].placed);
        a->buffers[i].placed = NULL;
    }
}

void tlm_activations_group_updated(tlm_activations *a, tlm_backend *be, int g) {
    if (!a->arena) return;
    for (int i = 0; i < a->num_buffers; i++) {
        tlm_act_buffer *b = &a->buffers[i];
        if (b->layer != g || b->desc >= 0) continue;
        if (b->life == TLM_ACT_GRADIENT && b->placed) {
            tlm_free(be, b->placed);
            b->placed = NULL;
        }
    }
    for (int i = 0; i < a->num_buffers; i++) { /* after the frees: the copy may start where they did */
        tlm_act_buffer *b = &a->buffers[i];
        if (b->layer == g && b->life == TLM_ACT_WEIGHT_COPY && !b->placed)
            b->placed = tlm_alloc_in(be, a->arena, b->plan.offset, b->plan.bytes, b->tag, b->name);
    }
}

void tlm_activations_enter(tlm_activations *a, tlm_backend *be, int stage) {
    if (!a->arena) return;
    if (stage == TLM_STAGE_INPUT) tlm_activations_end_step(a, be); /* a copy the update wrote stays */
    for (int i = 0; i < a->num_buffers; i++) { /* the lives that ended */
        tlm_act_buffer *b = &a->buffers[i];
        if (b->placed && b->plan.last < stage) {
            tlm_free(be, b->placed);
            b->placed = NULL;
        }
    }
    for (int i = 0; i < a->num_buffers; i++) { /* the lives that begin */
        tlm_act_buffer *b = &a->buffers[i];
        if (b->plan.first != stage || b->placed) continue;
        b->placed = tlm_alloc_in(be, a->arena, b->plan.offset, b->plan.bytes, b->tag, b->name);
        /* NULL only when the host is out of memory for the allocator's table: the accounting then
         * misses this buffer, the step itself is unaffected */
    }
}

size_t tlm_activations_bytes(const tlm_activations *a, tlm_mem_tag tag) {
    size_t n = a && tag == TLM_MEM_ACTIVATIONS ? a->guest_bytes : 0;
    for (int i = 0; a && i < a->num_buffers; i++)
        if (a->buffers[i].tag == tag) n += a->buffers[i].plan.bytes;
    return n;
}

void tlm_activations_zero_padding(const tlm_activations *a, tlm_backend *be, int group) {
    for (int i = 0; i < a->num_pad; i++)
        if (a->pad[i].group == group)
            tlm_memset_zero(be, a->group_grads[group] + a->pad[i].off, a->pad[i].len * sizeof(float));
}

void tlm_activations_free(tlm_activations *a, tlm_backend *be) {
    if (!a) return;
    tlm_activations_leave_all(a, be);
    tlm_arena_release(be, a->arena);
    tlm_views_free(&a->grad_views);
    void *owned[] = {a->buffers, a->group_grads, a->weight_copy, a->pad, a->layers, a};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
}
