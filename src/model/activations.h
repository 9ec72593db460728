/* activations.h — the model's activations and how long each lives (internal to src/model; tests
 * read it). Every buffer is described once, in the table of activations.c: its name, size, dtype
 * and lifetime:
 *
 *   SAVED     written by the forward pass and read by the backward pass: one per layer (and the
 *             final norm's), alive from the forward to the end of the backward;
 *   STEP      the step's own inputs and outputs: token ids, logits (the backward overwrites them
 *             with their gradient), per-position losses and their logsumexp;
 *   BACKWARD  scratch of the backward pass, shared by every layer (each layer overwrites it).
 *
 * Today every buffer is allocated together before the first forward of a batch shape and freed
 * together; the lifetimes say when each could exist (a forward-only pass needs no BACKWARD buffer,
 * a SAVED buffer of layer l is dead once the backward of layer l has read it).
 * N = B*T rows; `dt` is the mode's activation dtype; the residual stream and the norms'
 * statistics are float32. */
#ifndef TLM_MODEL_ACTIVATIONS_H
#define TLM_MODEL_ACTIVATIONS_H

#include "tlm/model.h"

typedef enum { TLM_ACT_SAVED = 0, TLM_ACT_STEP, TLM_ACT_BACKWARD } tlm_act_lifetime;

/* SAVED, per layer */
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

typedef struct tlm_activations {
    int num_layers;
    int B, T;                  /* the batch shape they are allocated for */
    tlm_dtype dt;
    tlm_attention attention;   /* what the attention buffers are for */
    tlm_layer_acts *layers;    /* [num_layers], SAVED */
    /* SAVED: the final norm */
    float *x_final;            /* (N,C) float32: output of the last block */
    void *ln_f;                /* (N,C) dt */
    float *ln_f_rstd;          /* (N) */
    /* STEP */
    int32_t *inputs, *targets; /* (N) backend copies of the batch */
    void *logits;              /* (N,V) dt; overwritten by dlogits in backward */
    float *lse;                /* (N) logsumexp of each row of logits */
    float *losses;             /* (N) per-position cross-entropy */
    /* BACKWARD scratch */
    float *d_resid;            /* (N,C) float32: gradient of the residual stream */
    void *d_resid_lp;          /* (N,C) dt: its GEMM-operand copy (== d_resid in fp32) */
    void *d_tmp;               /* (N,C) dt */
    void *d_qkv;               /* (N,3C) dt */
    void *d_probs;             /* (B,H,T,T) dt: naive attention's dP (else NULL) */
    float *flash_workspace;    /* (tlm_flash_workspace_floats(B,T,H,D)) float32: flash attention's
                                  backward workspace (else NULL) */
    void *d_ab;                /* (N,2F) dt */
    void *d_g;                 /* (N,F) dt */
} tlm_activations;

/* Allocates every buffer for (B, T) in dtype dt with the model's attention, each tagged activations
 * (token ids: workspace) and named by layer ("layers.7.ffn.w13_out"). OUT_OF_MEMORY (the message
 * names the buffer and the batch), with nothing left allocated. */
tlm_status tlm_activations_alloc(tlm_activations **out, tlm_model *m, int B, int T, tlm_dtype dt);
void tlm_activations_free(tlm_activations *a, tlm_backend *be);

#endif
