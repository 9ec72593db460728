/* model.h — the CS336 BasicsTransformerLM: parameters, forward to logits and mean
 * cross-entropy, backward to every parameter gradient, and the CS336 AdamW step.
 * One model, any backend (backend.h): this code orders the ops; the backend computes them.
 *
 * Architecture (SPEC.md §1): token embedding -> num_layers pre-norm blocks
 *   h = x + output_proj(attn(RoPE(q_proj(ln1(x))), RoPE(k_proj(..)), v_proj(..)))
 *   x' = h + w2(silu(w1(ln2(h))) * w3(ln2(h)))
 * -> ln_final -> lm_head -> logits (B,T,V). No biases, no weight tying.
 *
 * Memory: parameters, gradients and the two AdamW moments each live in ONE flat backend
 * allocation, sliced per tensor in the order of tlm_model.tensors. Within a layer q, k, v
 * are adjacent (one (3C,C) GEMM) and w1, w3 are adjacent (one (2F,C) GEMM). */
#ifndef TLM_MODEL_H
#define TLM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/backend.h"
#include "tlm/config.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One named tensor of the flat parameter buffer. */
typedef struct {
    char name[64];     /* CS336 state-dict name, e.g. "layers.0.attn.q_proj.weight" */
    int ndim;          /* 1 or 2 */
    int64_t shape[2];  /* as PyTorch stores it: Linear (out, in), embedding (V, C), norm (C) */
    size_t offset;     /* in floats, into params / grads / m / v */
    size_t numel;
} tlm_tensor_info;

/* Views into the flat buffers for one Transformer block (floats; backend memory). */
typedef struct {
    float *ln1;       /* (C) */
    float *qkv;       /* (3C, C): q_proj, k_proj, v_proj stacked */
    float *out_proj;  /* (C, C) */
    float *ln2;       /* (C) */
    float *w13;       /* (2F, C): w1 then w3 */
    float *w2;        /* (C, F) */
} tlm_layer_weights;

/* Activations saved by the forward pass of one block (backend memory). N = B*T rows.
 * `dt` tensors hold the mode's activation dtype (backend.h, tlm_precision): float32 in fp32
 * and tf32, bf16/fp16 otherwise; the residual stream and the norms' statistics are float32. */
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

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} tlm_adamw_config;

/* How the model computes attention; the function is the same (causal softmax(q k^T/sqrt(D)) v),
 * the memory and the kernels differ:
 *   NAIVE: the backend's attention_forward/backward (backend.h). Saves P (B,H,T,T) dt per layer;
 *          the backward needs one (B,H,T,T) dt scratch for dP.
 *   FLASH: FlashAttention-2 (Dao 2023; flash_attention_forward/backward), on the fused q, k, v
 *          projection in place. Saves the logsumexp (B,H,T) float32 per layer, nothing of size
 *          T x T; the backward recomputes P tile by tile and needs one float32 workspace of
 *          tlm_flash_workspace_floats(B,T,H,D) elements, shared by all layers.
 *   AUTO:  chosen by tlm_attention_resolve: FLASH on CUDA where the backend has kernels for the
 *          model's d_head in the mode's dtype, else NAIVE; NAIVE on the CPU (its flash is the
 *          fp32 reference, slower than the naive op's BLAS products). */
typedef enum { TLM_ATTENTION_NAIVE = 0, TLM_ATTENTION_FLASH = 1, TLM_ATTENTION_AUTO = 2 } tlm_attention;

const char *tlm_attention_name(tlm_attention a);             /* "naive", "flash", "auto" */
bool tlm_attention_parse(const char *name, tlm_attention *out); /* those three; false otherwise */

/* TLM_OK when `be` can run attention `a` for the shape `c` in precision mode `p`: NAIVE and AUTO
 * always; FLASH when the backend has the FlashAttention-2 ops (a NULL op is unsupported) and its
 * flash_attention_check accepts d_head and the mode's dtype. Otherwise TLM_ERR_UNSUPPORTED with a
 * message naming the backend, d_head, the mode and what the backend supports. */
tlm_status tlm_attention_check(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a);

/* NAIVE or FLASH: `a` itself, or what AUTO means for (be, c, p) (above). */
tlm_attention tlm_attention_resolve(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a);

/* A pass (forward or backward) as a CUDA graph: the first run with the current buffers runs
 * eagerly (it warms the GEMM plan cache), the second is captured, later runs replay it. */
typedef struct {
    void *exec;     /* the captured graph, or NULL */
    uint32_t key;   /* what the capture depends on beyond the buffers (targets, loss scale) */
    int warm;       /* one eager run with this key happened */
    int failed;     /* capture failed once: stay eager */
} tlm_graph_slot;

/* CS336 defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 */
tlm_adamw_config tlm_adamw_defaults(void);

typedef struct tlm_model {
    tlm_config config;
    tlm_backend *backend;          /* not owned */

    int num_tensors;
    tlm_tensor_info *tensors;      /* host; state-dict names, shapes, offsets */
    size_t num_params;             /* real parameter count (SPEC.md §1 table) */
    size_t flat_numel;             /* floats in each flat buffer: tensors start at multiples of
                                      64 floats (256 bytes); the padding stays zero */

    float *params;                 /* (num_params) backend memory */
    float *grads;                  /* (num_params) allocated by the first backward */
    float *adam_m, *adam_v;        /* (num_params) allocated by the first AdamW step */
    int adam_t;                    /* AdamW steps taken (skipped fp16 steps do not count) */
    void *params_lp;               /* (flat_numel) bf16/fp16 copy of params for the GEMMs, cast
                                      once per step; NULL in fp32/tf32 */
    int params_lp_stale;           /* params changed since the last cast */
    tlm_attention attention;       /* NAIVE (the default) or FLASH, never AUTO:
                                      tlm_model_set_attention */

    /* fp16 dynamic loss scaling, torch.cuda.amp.GradScaler semantics: the loss is multiplied
     * by loss_scale (initially 2^16) before backward; the step unscales the gradients; a step
     * with an inf/NaN gradient is skipped and halves the scale; 2000 clean steps in a row
     * double it. 1 and unused in the other modes. */
    float loss_scale;
    float grads_scale;             /* the factor the gradients in `grads` carry now (the loss
                                      scale after backward in fp16, 1 after unscaling) */
    int scale_growth_tracker;      /* clean steps since the last change of scale */
    int last_step_skipped;         /* the last AdamW step found inf/NaN and was skipped */
    int64_t skipped_steps;

    float *wte;                    /* (V,C) token_embeddings.weight */
    tlm_layer_weights *layer_w;    /* [num_layers] views into params */
    tlm_layer_weights *layer_g;    /* [num_layers] views into grads (NULL before backward) */
    float *ln_final;               /* (C) */
    float *lm_head;                /* (V,C) */

    /* RoPE tables (context_length, d_head/2), computed in float64, stored float32 */
    float *rope_cos, *rope_sin;

    /* activations for the batch shape and dtype they were allocated for */
    int act_B, act_T;              /* 0 before the first forward */
    tlm_dtype act_dt;              /* dt of the activations */
    int B, T;                      /* shape of the last forward */
    int32_t *inputs, *targets;     /* (N) backend copies of the last batch */
    tlm_layer_acts *acts;          /* [num_layers] */
    float *x_final;                /* (N,C) output of the last block */
    void *ln_f;                    /* (N,C) dt */
    float *ln_f_rstd;              /* (N) */
    void *logits;                  /* (N,V) dt; overwritten by dlogits in backward */
    float *lse, *losses;           /* (N), (N) */
    float *host_losses;            /* (N) host copy for the mean */
    /* backward scratch */
    float *d_resid;                /* (N,C) float32: gradient of the residual stream */
    void *d_resid_lp;              /* (N,C) dt: its GEMM-operand copy (== d_resid in fp32) */
    void *d_tmp;                   /* (N,C) dt */
    void *d_qkv;                   /* (N,3C) dt */
    void *d_probs;                 /* (B,H,T,T) dt: naive attention's dP (else NULL) */
    float *flash_workspace;        /* (tlm_flash_workspace_floats(B,T,H,D)) float32: flash
                                      attention's backward workspace, every layer's (else NULL) */
    void *d_ab;                    /* (N,2F) dt */
    void *d_g;                     /* (N,F) dt */
    int have_forward;              /* a forward ran and backward may follow */
    tlm_graph_slot graph_fwd, graph_bwd; /* used when backend->use_graphs */
} tlm_model;

/* Creates the model on `be` and allocates its parameters (uninitialised: call
 * tlm_model_init_random or tlm_model_load). Attention is NAIVE until tlm_model_set_attention.
 * Errors: INVALID_ARGUMENT (config, see tlm_config_validate), OUT_OF_MEMORY. */
tlm_status tlm_model_create(tlm_model **out, const tlm_config *cfg, tlm_backend *be);
void tlm_model_free(tlm_model *m);

/* Chooses the attention (AUTO is resolved here, for be->precision), checked with
 * tlm_attention_check for be->precision: TLM_ERR_UNSUPPORTED, message set and the model
 * unchanged, when the backend cannot run it. A change frees the activations (the next forward
 * allocates the new layout). The forward checks again when the precision mode has changed. */
tlm_status tlm_model_set_attention(tlm_model *m, tlm_attention a);

/* CS336 initialisation from `seed`: Linear weights trunc_normal(0, std = sqrt(2/(d_in+d_out)),
 * cut at +-3 std); embedding trunc_normal(0, 1, cut at +-3); RMSNorm weights 1. */
tlm_status tlm_model_init_random(tlm_model *m, uint64_t seed);

/* Loads parameters from a safetensors file with the CS336 state-dict names. Every tensor
 * must be present with the model's shape; float dtypes are converted to float32; extra
 * tensors are an error. Errors: IO, FORMAT, INVALID_ARGUMENT (missing/misshapen tensor). */
tlm_status tlm_model_load(tlm_model *m, const char *path);

/* Writes parameters (or gradients, divided by any loss scale they carry) as safetensors with
 * the state-dict names, float32. */
tlm_status tlm_model_save(const tlm_model *m, const char *path);
tlm_status tlm_model_save_grads(const tlm_model *m, const char *path);

/* Forward pass on a batch: inputs, targets (B*T int32, host memory, row-major (B,T)).
 * targets may be NULL (logits only). Token ids must be < vocab_size (checked:
 * INVALID_ARGUMENT); T <= context_length. Activations are (re)allocated for (B,T) when
 * needed (OUT_OF_MEMORY). *loss (may be NULL) = mean cross-entropy; this synchronizes. */
tlm_status tlm_model_forward(tlm_model *m, const int32_t *inputs, const int32_t *targets,
                             int B, int T, float *loss);

/* Backward pass from the mean loss of the last forward (which had targets): writes every
 * parameter gradient into m->grads (overwriting). The logits of that forward are replaced
 * by their gradient. Errors: INVALID_ARGUMENT if no forward with targets preceded. */
tlm_status tlm_model_backward(tlm_model *m);

/* One AdamW step over the flat buffers (one op launch). In fp16 it first unscales the
 * gradients; if any is inf/NaN the step is skipped (m->last_step_skipped = 1, the scale
 * halves) and TLM_OK is returned. */
tlm_status tlm_model_adamw_step(tlm_model *m, const tlm_adamw_config *opt);

/* Copies the logits of the last forward (before backward) to host memory as float32
 * (B*T*V floats; widened from bf16/fp16 in those modes). */
tlm_status tlm_model_copy_logits(const tlm_model *m, float *host);

/* Index of a tensor by state-dict name, or -1. */
int tlm_model_find_tensor(const tlm_model *m, const char *name);

#ifdef __cplusplus
}
#endif
#endif
