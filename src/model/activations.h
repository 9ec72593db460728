/* activations.h — the step's buffers and how long each lives (internal to src/model; tests read it):
 * the activations, the backward's scratch and the gradients, each described once in the table of
 * activations.c (name, size, dtype, what it is for), planned into one arena for the batch shape and
 * the run's options (memory_plan.h), and placed in the arena stage by stage, so the tracked
 * allocator (memory.h) sees each buffer allocated when its life begins and freed when it ends.
 *
 * The stages of a step, in order; a lifetime is a span of them (L = num_layers):
 *   INPUT        the batch copied in                   0
 *   EMBED        the embedding                         1
 *   FWD(l)       block l's forward, l = 0 .. L-1       2 + l
 *   HEAD         final norm, lm_head, loss             L + 2
 *   HEAD_BWD     their backward                        L + 3
 *   BWD(l)       block l's backward, l = L-1 .. 0      L + 4 + (L - 1 - l)
 *   EMBED_BWD    the embedding's backward              2L + 4
 *   OPTIMIZER    the AdamW step                        2L + 5
 *
 * What each buffer is for, and so how long it lives:
 *   SAVED     written by the forward for the backward: block l's buffers from FWD(l) to BWD(l)
 *             (its input x from the stage that writes it); the final norm's from HEAD to HEAD_BWD;
 *   STEP      the step's own inputs and outputs: token ids, logits (the backward overwrites them with
 *             their gradient), the logsumexp and losses of each position;
 *   SCRATCH   shared by every block, alive over a pass: the backward's buffers, and the block
 *             buffers the forward does not keep (shared: one set for all blocks);
 *   GRADIENT  a group of gradients (layout.h), from the backward stage that writes it to the
 *             optimizer step; with optimizer-in-backward only its own stage.
 *   WEIGHT_COPY  (step_plan.h's weight_copy_in_arena) the bf16/fp16 GEMM copy of a group's
 *             parameters (not the embedding's: no GEMM reads it), from INPUT to the backward stage
 *             of the group (its last reader: the group's input-gradient GEMMs, and with recompute
 *             BLOCK the block's forward again); the gradients of the groups completed later may take
 *             its bytes. The update writes it anew at OPTIMIZER, the groups in reverse completion
 *             order (the embedding first, the head last), so every gradient in a copy's bytes is
 *             consumed before the copy is written (the plan checks this: the buffers in a copy's
 *             bytes that live at OPTIMIZER are gradients of groups completed after it); from there it
 *             lives on into the next step (tlm_activations_group_updated, tlm_activations_end_step).
 *             Where the copy of group g fits below its group's offset in the flat gradient layout,
 *             clear of the copies above it, it sits there, at the top of the bytes of the groups
 *             completed next (fixed offsets); others are placed as any buffer.
 * What is kept: training with recompute NONE keeps every block buffer; ATTENTION keeps all but naive
 * attention's probabilities (one shared buffer; the backward recomputes them); BLOCK keeps only the
 * block inputs (the backward re-runs the block's forward into the shared set). A forward-only pass
 * keeps only what the next block reads: the shared set, and each block's input until that block ran.
 * Training without optimizer-in-backward keeps the gradient groups in their flat layout (one
 * contiguous buffer at the arena's start: m->grads), whose bytes activations of higher blocks use
 * until the backward reaches them. N = B*T rows; `dt` is the mode's activation dtype; the residual
 * stream and the norms' statistics are float32. */
#ifndef TLM_MODEL_ACTIVATIONS_H
#define TLM_MODEL_ACTIVATIONS_H

#include "model/memory_plan.h"
#include "tlm/model.h"

typedef enum { TLM_ACT_SAVED = 0, TLM_ACT_STEP, TLM_ACT_SCRATCH, TLM_ACT_GRADIENT, TLM_ACT_WEIGHT_COPY } tlm_act_lifetime;

/* ---- stages ---------------------------------------------------------------------------------------- */
enum { TLM_STAGE_INPUT = 0, TLM_STAGE_EMBED = 1 };
static inline int tlm_stage_fwd(int l) { return 2 + l; }
static inline int tlm_stage_head(int L) { return L + 2; }
static inline int tlm_stage_head_bwd(int L) { return L + 3; }
static inline int tlm_stage_bwd(int L, int l) { return L + 4 + (L - 1 - l); }
static inline int tlm_stage_embed_bwd(int L) { return 2 * L + 4; }
static inline int tlm_stage_optimizer(int L) { return 2 * L + 5; }

/* What the plan depends on. */
typedef struct {
    int B, T;                  /* the batch shape */
    tlm_dtype dt;              /* the activation dtype */
    tlm_attention attention;   /* NAIVE or FLASH */
    tlm_recompute recompute;
    bool forward_only;
    bool optimizer_in_backward;
    bool accumulate;           /* gradient accumulation: the gradients live the whole step (from INPUT) */
    bool weight_copy;          /* the GEMM copy of each group in the arena (WEIGHT_COPY above; dt not f32) */
} tlm_step_shape;

/* Block l's buffers (in forward-only and recompute modes some are one shared buffer) */
typedef struct {
    float *x;        /* (N,C) float32: block input (residual stream) */
    void *ln1;       /* (N,C) dt */
    float *ln1_rstd; /* (N) */
    void *qkv;       /* (N,3C) dt: q, k after RoPE; v */
    void *probs;     /* (B,H,T,T) dt: softmax of the masked scores (naive attention; else NULL) */
    float *lse;      /* (B,H,T) float32: logsumexp of each query row (flash attention; else NULL) */
    void *att;       /* (N,C) dt: merged heads, before output_proj */
    float *h;        /* (N,C) float32: x + attention branch */
    void *ln2;       /* (N,C) dt */
    float *ln2_rstd; /* (N) */
    void *ab;        /* (N,2F) dt: w1 x | w3 x */
    void *g;         /* (N,F) dt: silu(w1 x) * w3 x */
} tlm_layer_acts;

/* a span of a gradient group that no tensor covers: floats [off, off + len) of group `group` */
typedef struct {
    int group;
    size_t off, len;
} tlm_grad_padding;

struct tlm_act_buffer; /* activations.c: one planned buffer */

typedef struct tlm_activations {
    int num_layers;
    tlm_step_shape shape;      /* what they are planned for */
    int B, T;                  /* = shape.B, shape.T */
    tlm_dtype dt;              /* = shape.dt */
    tlm_attention attention;   /* = shape.attention */
    tlm_layer_acts *layers;    /* [num_layers] */
    /* the final norm */
    float *x_final;            /* (N,C) float32: output of the last block */
    void *ln_f;                /* (N,C) dt */
    float *ln_f_rstd;          /* (N) */
    /* STEP */
    int32_t *inputs, *targets; /* (N) backend copies of the batch */
    void *logits;              /* (N,V) dt; overwritten by dlogits in backward */
    float *lse;                /* (N) logsumexp of each row of logits */
    float *losses;             /* (N) per-position cross-entropy */
    /* backward SCRATCH (NULL when forward_only) */
    float *d_resid;            /* (N,C) float32: gradient of the residual stream */
    void *d_resid_lp;          /* (N,C) dt: its GEMM-operand copy (== d_resid in fp32) */
    void *d_tmp;               /* (N,C) dt */
    void *d_qkv;               /* (N,3C) dt */
    void *d_probs;             /* (B,H,T,T) dt: naive attention's dP (else NULL) */
    float *flash_workspace;    /* (tlm_flash_workspace_floats(B,T,H,D)) float32: flash attention's
                                  backward workspace (else NULL) */
    void *d_ab;                /* (N,2F) dt */
    void *d_g;                 /* (N,F) dt */
    /* GRADIENT (NULL when forward_only) */
    float *grads;              /* (flat_numel) the flat gradient buffer; NULL with optimizer-in-backward */
    float **group_grads;       /* [num_groups] each group's gradients (layout.h order) */
    tlm_views grad_views;      /* views of every gradient tensor */
    /* WEIGHT_COPY (NULL unless shape.weight_copy) */
    void **weight_copy;        /* [num_groups] group i's GEMM copy (groups[i].numel elements of dt, its
                                  span of the flat layout), NULL for the embedding's group */
    /* the plan */
    void *arena;               /* NULL when only planned (tlm_activations_plan without reserve) */
    size_t arena_bytes;        /* the plan's arena */
    size_t live_bytes;         /* the most bytes alive at one stage (the plan's lower bound) */
    int num_buffers;
    struct tlm_act_buffer *buffers;
    size_t guest_bytes;        /* activation buffers placed in another's bytes (not planned apart:
                                  backward scratch whose lives do not meet, activations.c) */
    int num_pad;               /* padding spans of the gradient groups (zeroed when a group's life
                                  begins) */
    tlm_grad_padding *pad;     /* [num_pad] */
} tlm_activations;

/* Plans the step's buffers for shape `s` of the model (c, layout): with reserve, reserves the arena
 * on `be` (named "step") and points every buffer into it; without, only sizes (be unused: may be
 * NULL). Errors: OUT_OF_MEMORY (the message names the arena's size and the batch), INVALID_ARGUMENT
 * (a shape too large). */
tlm_status tlm_activations_plan(tlm_activations **out, tlm_backend *be, const tlm_config *c,
                                const tlm_param_layout *layout, const tlm_step_shape *s, bool reserve);
void tlm_activations_free(tlm_activations *a, tlm_backend *be);

/* The step enters `stage`: the buffers whose life ended before it are freed in the arena, those
 * born in it are placed (tracked allocations: memory.h, tlm_alloc_in); INPUT ends every life of the
 * previous step. Accounting only: the bytes are the arena's throughout. */
void tlm_activations_enter(tlm_activations *a, tlm_backend *be, int stage);

/* Frees every placed buffer (the accounting; the arena stays). */
void tlm_activations_leave_all(tlm_activations *a, tlm_backend *be);

/* The step ends: frees every placed buffer but the weight copies the update placed again (they carry
 * the copy to the next step's forward). */
void tlm_activations_end_step(tlm_activations *a, tlm_backend *be);

/* The update consumed group g's gradients and wrote its weight copy: the gradients are freed, the copy
 * (if the group has one) placed again. */
void tlm_activations_group_updated(tlm_activations *a, tlm_backend *be, int g);

/* The bytes of the step's buffers of tag `tag`, each buffer counted once (before the plan lets
 * buffers of disjoint lifetimes share bytes, and those that share a host's bytes included). */
size_t tlm_activations_bytes(const tlm_activations *a, tlm_mem_tag tag);

/* Zeroes the padding of gradient group i (issued on the compute stream). */
void tlm_activations_zero_padding(const tlm_activations *a, tlm_backend *be, int group);

#endif
