/* model.h — the CS336 BasicsTransformerLM: parameters, forward to logits and mean cross-entropy,
 * backward to every parameter gradient, and the CS336 AdamW step. One model, any backend
 * (backend.h): this code orders the ops (through the dispatch, ops.h); the backend computes them.
 *
 * Architecture (SPEC.md §1): token embedding -> num_layers pre-norm blocks
 *   h = x + output_proj(attn(RoPE(q_proj(ln1(x))), RoPE(k_proj(..)), v_proj(..)))
 *   x' = h + w2(silu(w1(ln2(h))) * w3(ln2(h)))
 * -> ln_final -> lm_head -> logits (B,T,V). No biases, no weight tying.
 *
 * Its parts, one job each: the flat parameter layout (layout.h: parameters, gradients and the two
 * AdamW moments each live in ONE flat allocation of that layout); the gradients, whose groups the
 * backward pass announces as complete (tlm_model_on_grads_ready: where a layer's gradients become
 * ready); the optimizer (optimizer.h); the fp16 loss scaler (loss_scaler.h); the activations with
 * their lifetimes (src/model/activations.h); the passes (src/model/forward.c, backward.c). */
#ifndef TLM_MODEL_H
#define TLM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/backend.h"
#include "tlm/comm.h"
#include "tlm/config.h"
#include "tlm/layout.h"
#include "tlm/loss_scaler.h"
#include "tlm/optimizer.h"
#include "tlm/precision.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the model computes attention; the function is the same (causal softmax(q k^T/sqrt(D)) v),
 * the memory and the kernels differ:
 *   NAIVE: the attention_forward/backward ops (ops.def). Saves P (B,H,T,T) dt per layer; the
 *          backward needs one (B,H,T,T) dt scratch for dP.
 *   FLASH: FlashAttention-2 (Dao 2023; flash_attention_forward/backward), on the fused q, k, v
 *          projection in place. Saves the logsumexp (B,H,T) float32 per layer, nothing of size
 *          T x T; the backward recomputes P tile by tile and needs one float32 workspace of
 *          tlm_flash_workspace_floats(B,T,H,D) elements, shared by all layers.
 *   AUTO:  chosen by tlm_attention_resolve: FLASH where the backend runs it fast for the model's
 *          d_head in the mode's dtype (tlm_backend_supports says TLM_SUPPORT_FAST: CUDA), else
 *          NAIVE (the CPU, whose flash is the fp32 reference, slower than BLAS products). */
typedef enum { TLM_ATTENTION_NAIVE = 0, TLM_ATTENTION_FLASH = 1, TLM_ATTENTION_AUTO = 2 } tlm_attention;

const char *tlm_attention_name(tlm_attention a);                /* "naive", "flash", "auto" */
bool tlm_attention_parse(const char *name, tlm_attention *out); /* those three; false otherwise */

/* TLM_OK when `be` can run attention `a` for the shape `c` in precision mode `p`: NAIVE and AUTO
 * always; FLASH when tlm_backend_supports the FlashAttention-2 ops for d_head and the mode's dtype.
 * Otherwise TLM_ERR_UNSUPPORTED with a message naming the backend, d_head, the mode and what the
 * backend supports. */
tlm_status tlm_attention_check(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a);

/* NAIVE or FLASH: `a` itself, or what AUTO means for (be, c, p) (above). */
tlm_attention tlm_attention_resolve(tlm_backend *be, const tlm_config *c, tlm_precision p, tlm_attention a);

/* How a model runs: chosen when it is created (the backend holds no such state). */
typedef struct {
    tlm_precision precision;  /* precision.h: fp32, tf32, bf16, fp16 */
    tlm_attention attention;  /* NAIVE, FLASH or AUTO; the model keeps it resolved */
    bool cuda_graphs;         /* capture forward and backward as CUDA graphs once and replay them
                                 (backend.h, tlm_graph_run); no effect without graphs (CPU) */
} tlm_run_config;

/* fp32, attention AUTO, graphs off */
tlm_run_config tlm_run_defaults(void);

struct tlm_model;
/* A group of gradients is complete (layout.h: the head, then each layer from the last down, then
 * the embedding). Called on the host as the backward pass issues its ops, right after the last op
 * that writes the group: the callback may issue work on the backend's streams (an all-reduce of
 * the group, a per-layer optimizer step), ordered after those ops. With CUDA graphs, that work is
 * captured with the backward pass and replayed with it; the callback itself then runs only while
 * the pass is issued eagerly or captured: a callback that must run on the host every step needs
 * run.cuda_graphs off. */
typedef void (*tlm_grads_ready_fn)(void *user, struct tlm_model *m, const tlm_param_group *group);

struct tlm_activations; /* src/model/activations.h */

typedef struct tlm_model {
    tlm_config config;
    tlm_run_config run;            /* run.attention is NAIVE or FLASH, never AUTO */
    tlm_backend *backend;          /* not owned */
    tlm_param_layout layout;       /* names, shapes, offsets, groups */

    float *params;                 /* (flat_numel) backend memory, tag parameters */
    tlm_views w;                   /* views of params */
    void *params_lp;               /* (flat_numel) bf16/fp16 copy of params for the GEMMs, cast once
                                      per step (the AdamW pass refreshes it); NULL in fp32/tf32 */
    bool params_lp_stale;          /* params changed since the last cast */

    float *grads;                  /* (flat_numel) allocated by the first backward; padding zero */
    tlm_views g;                   /* views of grads (NULL before) */
    float grads_scale;             /* the factor the gradients in `grads` carry now: the loss scale
                                      after backward in fp16, 1 after unscaling and in other modes */
    tlm_grads_ready_fn grads_ready;
    void *grads_ready_user;

    tlm_adamw optimizer;
    tlm_loss_scaler scaler;        /* fp16; unused in the other modes */
    tlm_comm *comm;                /* not owned; NULL: one process */

    float *rope_cos, *rope_sin;    /* (context_length, d_head/2), computed in float64, stored float32 */
    struct tlm_activations *acts;  /* for the batch shape of the last forward; NULL before */
    float *step_scalars;           /* (2) backend memory: [0] the mean loss, [1] found_inf */
    int B, T;                      /* shape of the last forward */
    bool have_forward;             /* a forward with targets ran and backward may follow */
    tlm_graph graph_fwd, graph_bwd;
} tlm_model;

/* Creates the model on `be` for `run` (NULL: tlm_run_defaults) and allocates its parameters
 * (uninitialised: call tlm_model_init_random or tlm_model_load). Errors: INVALID_ARGUMENT (config,
 * see tlm_config_validate), UNSUPPORTED (run.attention FLASH where the backend has no kernel),
 * OUT_OF_MEMORY. */
tlm_status tlm_model_create(tlm_model **out, const tlm_config *cfg, const tlm_run_config *run, tlm_backend *be);
void tlm_model_free(tlm_model *m);

/* Changes the attention (AUTO is resolved here), checked with tlm_attention_check:
 * TLM_ERR_UNSUPPORTED, message set and the model unchanged, when the backend cannot run it. A
 * change frees the activations (the next forward allocates the new layout). */
tlm_status tlm_model_set_attention(tlm_model *m, tlm_attention a);

/* Calls fn (NULL: none) each time a group of gradients is complete (tlm_grads_ready_fn). */
void tlm_model_on_grads_ready(tlm_model *m, tlm_grads_ready_fn fn, void *user);

/* Combines the mean loss and the fp16 overflow check across the ranks of `comm` (NULL: none). */
void tlm_model_set_comm(tlm_model *m, tlm_comm *comm);

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
 * needed (OUT_OF_MEMORY). The mean cross-entropy is reduced on the backend (and summed over the
 * ranks of m->comm, then divided by their number); *loss (may be NULL) receives it, which waits
 * for the pass; with loss NULL nothing waits. */
tlm_status tlm_model_forward(tlm_model *m, const int32_t *inputs, const int32_t *targets,
                             int B, int T, float *loss);

/* Backward pass from the mean loss of the last forward (which had targets): writes every
 * parameter gradient into m->grads (overwriting), announcing each group as it completes. The
 * logits of that forward are replaced by their gradient. Errors: INVALID_ARGUMENT if no forward
 * with targets preceded; OUT_OF_MEMORY for the first gradient buffer. */
tlm_status tlm_model_backward(tlm_model *m);

/* One AdamW step with these hyperparameters over the flat buffers (one op launch). In fp16 it
 * first unscales and checks the gradients (loss_scaler.h); if any is inf/NaN the step is skipped
 * (m->scaler.last_step_skipped, the scale halves) and TLM_OK is returned. */
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
