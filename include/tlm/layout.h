/* layout.h — the flat parameter layout of the CS336 model: every tensor's state-dict name, shape and
 * offset in ONE flat float32 buffer, and views of a flat buffer per layer. Parameters, gradients
 * and the AdamW moments all use this layout (one allocation each, sliced per tensor), so the
 * optimizer is one pass and a gradient all-reduce is one call, or one per group.
 *
 * Order: token_embeddings; per layer ln1, q_proj, k_proj, v_proj (packed: one (3C,C) GEMM),
 * output_proj, ln2, w1, w3 (packed: one (2F,C) GEMM), w2; ln_final; lm_head. Every tensor that
 * is not packed with its predecessor starts on a multiple of 64 floats (256 bytes); the padding
 * stays zero.
 *
 * Groups: the spans of the flat buffer whose gradients become ready together in the backward pass,
 * in that order: the head (ln_final, lm_head), layer num_layers-1, ..., layer 0, the embedding.
 * Each group is contiguous and they tile [0, flat_numel) (padding included), so a group can be
 * reduced in place as soon as it is ready (model.h, tlm_model_on_grads_ready). */
#ifndef TLM_LAYOUT_H
#define TLM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "tlm/config.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One named tensor of the flat buffer. */
typedef struct {
    char name[64];     /* CS336 state-dict name, e.g. "layers.0.attn.q_proj.weight" */
    int ndim;          /* 1 or 2 */
    int64_t shape[2];  /* as PyTorch stores it: Linear (out, in), embedding (V, C), norm (C) */
    size_t offset;     /* in floats, into params / grads / m / v */
    size_t numel;
    int layer;         /* the block it belongs to; -1 for the embedding, ln_final and lm_head */
} tlm_tensor_info;

/* A span of the flat buffer whose gradients are complete at the same point of the backward pass. */
typedef struct {
    int layer;          /* the block, or TLM_GROUP_HEAD / TLM_GROUP_EMBEDDING */
    int first_tensor;   /* tensors[first_tensor .. first_tensor + num_tensors - 1] */
    int num_tensors;
    size_t offset;      /* floats: [offset, offset + numel) of the flat buffer, padding included */
    size_t numel;
} tlm_param_group;

#define TLM_GROUP_HEAD (-1)       /* ln_final and lm_head: the first gradients the backward completes */
#define TLM_GROUP_EMBEDDING (-2)  /* token_embeddings: the last */

typedef struct {
    int num_tensors;
    tlm_tensor_info *tensors;   /* host memory, in layout order */
    size_t num_params;          /* real parameter count (docs/experiments.md) */
    size_t flat_numel;          /* floats in each flat buffer, padding included */
    int num_groups;             /* num_layers + 2 */
    tlm_param_group *groups;    /* in the order the backward completes them */
} tlm_param_layout;

/* Builds the layout of `c` (validated by tlm_config_validate). Errors: INVALID_ARGUMENT when a size
 * overflows, OUT_OF_MEMORY. */
tlm_status tlm_layout_build(tlm_param_layout *out, const tlm_config *c);
void tlm_layout_free(tlm_param_layout *l);

/* Index of a tensor by state-dict name, or -1. */
int tlm_layout_find(const tlm_param_layout *l, const char *name);

/* Views into a flat buffer for one Transformer block (floats; backend memory). */
typedef struct {
    float *ln1;       /* (C) */
    float *qkv;       /* (3C, C): q_proj, k_proj, v_proj stacked */
    float *out_proj;  /* (C, C) */
    float *ln2;       /* (C) */
    float *w13;       /* (2F, C): w1 then w3 */
    float *w2;        /* (C, F) */
} tlm_layer_weights;

/* Views into a whole flat buffer. */
typedef struct {
    float *wte;                 /* (V, C) token_embeddings.weight */
    tlm_layer_weights *layers;  /* [num_layers], owned (tlm_views_free) */
    float *ln_final;            /* (C) */
    float *lm_head;             /* (V, C) */
} tlm_views;

/* Views of `base` (a flat buffer of this layout; NULL gives NULL views). OUT_OF_MEMORY. */
tlm_status tlm_views_make(tlm_views *out, const tlm_param_layout *l, int num_layers, float *base);

/* Views of a buffer kept as one piece per group: group_base[i] holds the span of groups[i] (its
 * first float is the flat offset groups[i].offset). OUT_OF_MEMORY. */
tlm_status tlm_views_make_grouped(tlm_views *out, const tlm_param_layout *l, int num_layers, float *const *group_base);

/* The group (index into groups) that holds tensor t. */
int tlm_layout_group_of(const tlm_param_layout *l, int t);
void tlm_views_free(tlm_views *v);

#ifdef __cplusplus
}
#endif
#endif
