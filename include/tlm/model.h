/* model.h — the CS336 BasicsTransformerLM: parameters, forward to logits and mean cross-entropy,
 * backward to every parameter gradient, and the CS336 AdamW step. One model, any backend
 * (backend.h): this code orders the ops (through the dispatch, ops.h); the backend computes them.
 *
 * Architecture (docs/experiments.md, the model): token embedding -> num_layers pre-norm blocks
 *   h = x + output_proj(attn(RoPE(q_proj(ln1(x))), RoPE(k_proj(..)), v_proj(..)))
 *   x' = h + w2(silu(w1(ln2(h))) * w3(ln2(h)))
 * -> ln_final -> lm_head -> logits (B,T,V). No biases, no weight tying.
 *
 * Its parts, one job each: the flat parameter layout (layout.h: parameters, gradients and the two
 * AdamW moments each live in ONE flat allocation of that layout); the gradients, whose groups the
 * backward pass announces as complete (tlm_model_on_grads_ready: where a layer's gradients become
 * ready); the optimizer (optimizer.h); the fp16 loss scaler (loss_scaler.h); the step plan, the
 * step's modes decided once per run (step_plan.h, src/model/step_plan.c: where the update runs, loss
 * scaling, clipping, the GEMM weight copy, graphs); the activations with their lifetimes
 * (src/model/activations.h); the passes (src/model/forward.c, backward.c). Only src/model writes a
 * field of tlm_model; other folders call its functions. */
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
#include "tlm/safetensors.h"
#include "tlm/status.h"
#include "tlm/step_plan.h"

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

/* Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
 * selective recomputation: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
 * Transformer Models", sec. 4): what the forward pass keeps for the backward pass of each block.
 *   NONE       every block keeps all its activations (about 2 x (6C + 3F) bytes per token in
 *              fp32, plus the (B,H,T,T) probabilities with naive attention);
 *   ATTENTION  naive attention's probabilities are not kept: the backward recomputes them from the
 *              kept q, k, v (one attention forward per block; with flash attention, which keeps only
 *              the logsumexp, the same as NONE);
 *   BLOCK      a block keeps only its input (B,T,C) float32: the backward re-runs the block's
 *              forward (up to the SwiGLU product) into one set of buffers shared by all blocks,
 *              then its backward (about one more forward pass per step).
 * The results are the same bits as NONE: the recomputation runs the same ops on the same inputs. */
typedef enum { TLM_RECOMPUTE_NONE = 0, TLM_RECOMPUTE_ATTENTION = 1, TLM_RECOMPUTE_BLOCK = 2 } tlm_recompute;

const char *tlm_recompute_name(tlm_recompute r);                /* "none", "attention", "block" */
bool tlm_recompute_parse(const char *name, tlm_recompute *out); /* those three; false otherwise */

/* How a model runs (the backend holds no such state). precision, attention and cuda_graphs are chosen
 * when the model is created; forward_only, recompute and optimizer_in_backward may be changed in
 * m->run between steps (the next forward decides the step plan, step_plan.h, and plans the step's
 * memory again). The run is what was asked; m->plan is what the step does.
 *
 * Memory: a step's activations, backward scratch and gradients live in one arena planned for the
 * batch shape and these options (src/model/activations.h): a buffer occupies bytes only from the
 * stage that writes it to the last that reads it, so activations are dead once the backward of
 * their block has used them, and gradients take memory from the backward stage that writes them to
 * the optimizer step (the flat gradient buffer shares its bytes with activations of the blocks above
 * it). A forward pass ends the life of the last backward's gradients: read them and take the
 * optimizer step before the next forward (with gradient accumulation, grad_accum_steps below, the
 * gradient buffer has its own bytes and lives across the micro-batches' forwards). */
typedef struct {
    tlm_precision precision;  /* precision.h: fp32, tf32, bf16, fp16 */
    tlm_attention attention;  /* NAIVE, FLASH or AUTO; the model keeps it resolved */
    bool cuda_graphs;         /* capture forward and backward as CUDA graphs once and replay them
                                 (backend.h, tlm_graph_run); no effect without graphs (CPU) */
    bool forward_only;        /* forward passes only (inference, evaluation; `--pass forward`): no
                                 gradient, no backward buffer, and of the activations only what the
                                 next block reads; tlm_model_backward is then INVALID_ARGUMENT */
    tlm_recompute recompute;  /* what the forward keeps for the backward (above); default NONE */
    bool optimizer_in_backward; /* each group's AdamW update (optimizer.h) runs in the backward pass
                                 as soon as the group's gradients are complete (after the
                                 grads-ready callback, so a data-parallel all-reduce comes first), and
                                 the group's gradients die there: the whole gradient buffer never
                                 exists (m->grads stays NULL; tlm_model_group_grads gives a group's
                                 gradients during its callback). The update uses m->optimizer.config:
                                 tlm_model_adamw_step then only sets the hyperparameters for the next
                                 step. The same bits as a plain step (AdamW is elementwise). Excluded:
                                 anything that needs every gradient before the first update: global
                                 gradient-norm clipping (tlm train's --max-grad-norm) and fp16's overflow check
                                 (loss_scaler.h: a step is skipped when any gradient is inf/NaN), so
                                 fp16 is refused (UNSUPPORTED; use bf16). The backward then runs
                                 eagerly, without CUDA graphs (each step's updates take the step
                                 count t from the host). */
    bool optimizer_overlap;   /* each group's AdamW update is issued as soon as the group's
                                 gradients are complete, on a stream of its own (the model's
                                 optimizer stream, background priority: backend.h), so the updates
                                 run beside the rest of the backward; the gradient buffer stays
                                 (unlike optimizer_in_backward: the same memory as a plain step).
                                 With a grads-ready callback (a data-parallel reducer, ddp.h) the
                                 callback issues the updates instead (tlm_model_overlap_update), each
                                 after its bucket's average. The compute stream waits for the
                                 updates in tlm_model_adamw_step (which then only sets the next
                                 step's hyperparameters, as with optimizer_in_backward) and before
                                 the next forward. The same bits as a plain step; the same
                                 exclusions and eager backward as optimizer_in_backward, and not both. */
    int grad_accum_steps;     /* gradient accumulation: an optimizer step is this many micro-batches (a
                                 forward and a backward each, tlm_model_set_micro_batch saying which),
                                 their gradients summed in place into the one gradient buffer, each
                                 micro-batch's loss scaled by 1/grad_accum_steps, so that the gradients
                                 are those of the mean loss over every token of the equal-sized
                                 micro-batches (nanoGPT's gradient_accumulation_steps). The gradient
                                 buffer then lives across the step's forwards (its own bytes, not shared
                                 with activations). 0 or 1: none. Not with optimizer_in_backward or
                                 optimizer_overlap (UNSUPPORTED: their updates run before the last
                                 micro-batch's gradients are in). */
} tlm_run_config;

/* fp32, attention AUTO, graphs off, training, recompute NONE, the optimizer after backward */
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
struct tlm_step_state;  /* src/model/model_internal.h: the step's mutable state, private to src/model */

typedef struct tlm_model {
    tlm_config config;
    tlm_run_config run;            /* run.attention is NAIVE or FLASH, never AUTO */
    tlm_step_plan plan;            /* the step's modes (step_plan.h), decided from run at creation and
                                      again by a forward after run changed; written by src/model only */
    tlm_backend *backend;          /* not owned */
    tlm_param_layout layout;       /* names, shapes, offsets, groups */

    float *params;                 /* (flat_numel) backend memory, tag parameters */
    tlm_views w;                   /* views of params */
    void *params_lp;               /* (flat_numel) bf16/fp16 copy of params for the GEMMs, cast once
                                      per step (the AdamW pass refreshes it); NULL in fp32/tf32, and
                                      where the plan keeps the copy in the step's arena, one buffer per
                                      group (step_plan.h: weight_copy_in_arena) */

    float *grads;                  /* (flat_numel) the gradients of the last backward, in the step's
                                      arena; set when a backward starts, NULL from the next forward
                                      on, and always NULL with optimizer_in_backward; padding zero */
    tlm_views g;                   /* views of each gradient in the arena (they hold gradients only
                                      while m->grads is set, or during their group's callback) */
    tlm_grads_ready_fn grads_ready;
    void *grads_ready_user;
    uint16_t *grad_sink;           /* (flat_numel) bf16 or NULL: where the weight gradients may go
                                      (tlm_model_set_grad_sink) */

    tlm_adamw optimizer;
    tlm_loss_scaler scaler;        /* fp16; unused in the other modes */
    tlm_comm *comm;                /* not owned; NULL: one process */

    float *rope_cos, *rope_sin;    /* (context_length, d_head/2), computed in float64, stored float32 */
    struct tlm_activations *acts;  /* for the batch shape of the last forward; NULL before */
    float *step_scalars;           /* (2) backend memory: [0] the mean loss, [1] found_inf */
    int B, T;                      /* shape of the last forward */
    bool have_forward;             /* a forward with targets ran and backward may follow */
    struct tlm_step_state *step;   /* the gradients' scale and clip factors, the GEMM copy's staleness,
                                      the overlapped updates' stream, events and flags: src/model only */
    tlm_graph graph_fwd, graph_bwd;
    tlm_graph graph_bwd_acc;       /* the backward of micro-batches after the first (accumulating) */
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

/* ---- the step plan (step_plan.h; src/model/step_plan.c) ------------------------------------------ */

/* The plan `run` gives (no clipping, no data parallelism attached). Errors: INVALID_ARGUMENT (an
 * unknown precision or recompute mode; optimizer_in_backward and optimizer_overlap both), UNSUPPORTED
 * (either with fp16). */
tlm_status tlm_step_plan_decide(tlm_step_plan *out, const tlm_run_config *run);

/* Gradient clipping by the global norm on or off for the steps to come (tlm train's --max-grad-norm).
 * UNSUPPORTED (the model unchanged) when on and the plan's updates run in the backward pass: they
 * are taken before the global norm is known. */
tlm_status tlm_model_plan_clipping(tlm_model *m, bool on);

/* A data-parallel reducer attaches (ddp.h): its grads-ready callback must run on the host every
 * step (no CUDA graphs from now on), and with `sharded` (ZeRO-1) the update is its own, through
 * tlm_model_adamw_step_by. UNSUPPORTED (the model unchanged) for sharded with optimizer-in-backward
 * or the overlapped optimizer (ddp.h says why). */
tlm_status tlm_model_plan_data_parallel(tlm_model *m, bool sharded);

/* The parameters changed outside the model's own passes (a broadcast, a sharded update, a load):
 * `copy_current` true when the writer refreshed the bf16/fp16 GEMM copy too, false when the next
 * forward must cast it again. */
void tlm_model_params_changed(tlm_model *m, bool copy_current);

/* The gradients in m->grads are the caller's own (written by hand; no loss scale, no clip asked):
 * their scale and clip factors return to 1. */
void tlm_model_grads_replaced(tlm_model *m);

/* The factors the gradients in m->grads carry now: *scale the loss scale (fp16 after the backward;
 * divided by a clip folded into the unscale), 1 after unscaling and in other modes; *clip the factor
 * that clipping asks the next update to multiply them by (1 after each backward). The true gradient
 * of element i is grads[i] / scale, and the update reads grads[i] * clip. Either may be NULL. */
void tlm_model_grad_factors(const tlm_model *m, float *scale, float *clip);

/* true when the bf16/fp16 GEMM copy exists and matches the parameters (the next forward casts nothing) */
bool tlm_model_weight_copy_current(const tlm_model *m);

/* The bf16/fp16 GEMM copy as the GEMMs read it, to host: flat_numel 2-byte elements in the flat layout
 * (params_lp's, or each group's buffer in the arena); the span of a group without a copy (the
 * embedding's, which no GEMM reads, when the copy is in the arena) is left as it was. INVALID_ARGUMENT
 * when the copy is not current (tlm_model_weight_copy_current; fp32, tf32). */
tlm_status tlm_model_weight_copy_to_host(const tlm_model *m, uint16_t *host);

/* A checkpoint's optimizer state: AdamW's step count t (the moments are written by the caller into
 * m->optimizer.m / .v) and the loss scaler (its last step counts as not skipped). */
void tlm_model_restore_optimizer_state(tlm_model *m, int64_t t, const tlm_loss_scaler *scaler);

/* ---- the global gradient norm and clipping (src/model/clip.c) ------------------------------------
 * CS336 Assignment 1 §4.5, gradient_clipping (as torch.nn.utils.clip_grad_norm_): the L2 norm of all
 * gradients together, total = sqrt(sum g^2) (the sum_squares op over the one flat gradient buffer,
 * float64, a fixed order: reproducible); coef = max_norm / (total + 1e-6); when coef < 1 every
 * gradient is multiplied by coef, else left alone. The multiply has no pass of its own (the plan's
 * clip_in_unscale): clipping records coef as the clip factor and the AdamW pass multiplies each
 * gradient as it reads it (ops.def, adamw_step's grad_scale: the same bits as a multiply
 * beforehand); gradients carrying a loss scale (fp16, tlm_model_grad_factors' scale != 1) are
 * measured unscaled (the sum divided by the scale squared) and the clip divides the scale by coef, so
 * the unscale before the update applies it. The norm is of the gradients as the update will see them.
 * Cost: one read of the gradients (the norm).
 * scratch: TLM_CLIP_SCRATCH_BYTES of backend memory (tlm_alloc). Waits for the norm (a host copy).
 * Errors: INVALID_ARGUMENT when m holds no gradients (no backward since the last forward, or
 * optimizer-in-backward, which never has them all at once). A non-finite gradient gives a non-finite
 * norm (and no clipping); tlm_grad_nonfinite_tensor names where it is. */
#define TLM_CLIP_SCRATCH_BYTES 16
tlm_status tlm_grad_norm(tlm_model *m, void *scratch, double *norm);
tlm_status tlm_clip_grad_norm(tlm_model *m, double max_norm, void *scratch, double *norm, bool *clipped);
/* The clip of a norm measured elsewhere (data parallelism: ddp.h's norm of the averaged gradients):
 * records coef as tlm_clip_grad_norm does; nothing when norm is not finite or within max_norm. */
void tlm_clip_to_norm(tlm_model *m, double max_norm, double norm, bool *clipped);
/* The name of the first tensor (layout order) whose gradient holds a NaN or inf, or NULL. */
const char *tlm_grad_nonfinite_tensor(tlm_model *m, void *scratch);

/* Calls fn (NULL: none) each time a group of gradients is complete (tlm_grads_ready_fn). */
void tlm_model_on_grads_ready(tlm_model *m, tlm_grads_ready_fn fn, void *user);

/* A bf16 home for the weight gradients: a data-parallel reducer's bf16 buffer (ddp.h, reduce_dtype
 * BF16), sink (flat_numel) bf16 backend memory in the flat layout; NULL: none. A backward pass for
 * which tlm_model_grads_to_sink holds writes each linear layer's weight gradient (tlm_model_sink_tensor)
 * by its GEMM rounded to bf16 at sink + the tensor's offset (ops.def, matmul_backward's dw_dt: the bits
 * of casting the float32 gradient) and leaves that tensor's span of m->grads unwritten (it holds other
 * bytes of the arena) until the reducer writes the average there; the other gradients (RMSNorm gains,
 * the embedding) are float32 in m->grads as before. Set before a backward captured in a CUDA graph
 * (a reducer's model runs without graphs: tlm_model_plan_data_parallel). */
void tlm_model_set_grad_sink(tlm_model *m, uint16_t *sink);
/* Whether the next backward pass writes the weight gradients into the sink: one is set, the precision
 * is bf16 (cuBLASLt writes a bf16 GEMM output from bf16 operands only), no gradient accumulation (the
 * micro-batches add in float32), and a flat gradient buffer exists (not optimizer-in-backward). */
bool tlm_model_grads_to_sink(const tlm_model *m);
/* Whether tensor t of m->layout is a linear layer's weight (every 2-D tensor but the token embeddings:
 * the attention's qkv and output projections, w1/w3, w2, lm_head), whose gradient goes to the sink. */
bool tlm_model_sink_tensor(const tlm_model *m, int t);

/* The gradients of group i of m->layout.groups (groups[i].numel floats, backend memory, the group's
 * span of the flat layout): m->grads + groups[i].offset when the flat buffer exists, else (with
 * optimizer_in_backward) the group's own place in the arena, which holds them only during the
 * group's grads-ready callback. NULL before the first forward of a training step. */
float *tlm_model_group_grads(const tlm_model *m, int i);

/* What a step of `cfg` needs at batch B x context T under `run` (attention AUTO resolved for `be`),
 * computed from the memory plan without allocating anything (bytes). The backend's own workspaces
 * (cuBLASLt's, the CUDA FlashAttention split-KV buffer, the CPU ops' scratch) are not included. */
typedef struct {
    size_t parameters;        /* float32 master weights */
    size_t weight_copy;       /* the bf16/fp16 GEMM copy of the weights in its own allocation; 0 in
                                 fp32/tf32 and where the plan keeps the copy in the arena */
    size_t weight_copy_in_arena; /* the copy's buffers in the arena (counted in arena), else 0 */
    size_t optimizer;         /* AdamW's first and second moments; 0 when forward_only */
    size_t arena;             /* the step's arena: activations, backward scratch, gradients (and the
                                 copy, where the plan keeps it there: step_plan.h) */
    size_t arena_live;        /* the most bytes alive at one stage in it (no plan needs less) */
    size_t arena_copy_apart;  /* the arena when the copy is kept apart (ZeRO-1's sharded update keeps it
                                 so: tlm_ddp_memory_estimate); = arena where it is apart anyway */
    size_t arena_live_copy_apart; /* arena_live of that plan */
    size_t workspace;         /* the RoPE tables and the step scalars */
    size_t total;             /* parameters + weight_copy + optimizer + arena + workspace */
} tlm_memory_estimate;
tlm_status tlm_model_memory_estimate(tlm_backend *be, const tlm_config *cfg, const tlm_run_config *run, int B, int T,
                                     tlm_memory_estimate *out);

/* Gradient accumulation (run.grad_accum_steps = N > 1): the next backward is micro-batch k (0-based) of
 * the optimizer step: k == 0 overwrites the gradients, k > 0 adds into them (backend.h's
 * accumulate_grads: the weight-gradient GEMMs with beta 1, the other writers add), every micro-batch's
 * loss gradient scaled by 1/N. The grads-ready callback runs in each micro-batch's backward; a
 * data-parallel reducer acts only on the last (tlm_model_last_micro_batch: PyTorch DDP's no_sync for the
 * others). INVALID_ARGUMENT for k outside [0, N) (N taken as 1 without accumulation). */
tlm_status tlm_model_set_micro_batch(tlm_model *m, int k);
/* the number of micro-batches of an optimizer step (run.grad_accum_steps, at least 1), and the micro-batch of
 * the backward to come or running (0 without accumulation) */
int tlm_model_grad_accum_steps(const tlm_model *m);
int tlm_model_micro_batch(const tlm_model *m);
/* true when the backward to come (or running) is the optimizer step's last micro-batch (always without
 * accumulation) */
bool tlm_model_last_micro_batch(const tlm_model *m);

/* Combines the mean loss and the fp16 overflow check across the ranks of `comm` (NULL: none). */
void tlm_model_set_comm(tlm_model *m, tlm_comm *comm);

/* CS336 initialisation from `seed`: Linear weights trunc_normal(0, std = sqrt(2/(d_in+d_out)),
 * cut at +-3 std); embedding trunc_normal(0, 1, cut at +-3); RMSNorm weights 1. */
tlm_status tlm_model_init_random(tlm_model *m, uint64_t seed);

/* Sets every parameter from host memory: `host` holds m->layout.flat_numel floats in the flat layout's
 * order (layout.h, padding included), as tlm_copy_to_host of m->params after tlm_model_init_random gives
 * them. Like tlm_model_init_random, AdamW's step count restarts at 0 and the GEMM copy (bf16/fp16) is
 * cast again at the next forward. */
void tlm_model_set_params(tlm_model *m, const float *host);

/* ---- weights files (src/model/model_io.c) ------------------------------------------------------
 * safetensors with the CS336 state-dict names, float32. Every file tlm writes carries the model's
 * config in its "__metadata__" (string values): vocab_size, context_length, d_model, num_layers,
 * num_heads, d_ff, rope_theta, rmsnorm_eps, and "content" (parameters or gradients) and "producer"
 * ("tlm <version>"), so the weights say what model they are. */

/* The config of the model whose parameters `st` (read from `path`) holds, tensor names taken after
 * strip_prefix (NULL: none): from the file's metadata when tlm wrote it (*from_metadata true); else
 * from the tensor shapes (vocab_size and d_model from token_embeddings.weight, d_ff from
 * layers.0.ffn.w1.weight, num_layers from the highest layer index) with num_heads given by the
 * caller (a PyTorch state dict does not record it), rope_theta 10000 and context_length 1024
 * (CS336's defaults); num_heads 0 leaves out->num_heads 0 for the caller to supply and validate.
 * Errors: FORMAT (metadata that is not a valid config, a tensor the shapes need missing),
 * INVALID_ARGUMENT (torch.compile's prefix without strip_prefix; an invalid config: named). */
tlm_status tlm_weights_config(const tlm_safetensors *st, const char *path, const char *strip_prefix, int num_heads,
                              tlm_config *out, bool *from_metadata);

/* Loads the parameters from a file already read: every parameter present with the model's shape,
 * no other tensor (names after strip_prefix; a file of torch.compile'd names, "_orig_mod.", is
 * refused with the hint to strip it), every value finite; checked whole before anything is copied,
 * so a refused file leaves the model as it was. float16, bfloat16 and float64 tensors are converted
 * to float32: *converted (NULL: not wanted) receives the first such dtype, or TLM_DTYPE_F32 when
 * none. Errors: INVALID_ARGUMENT (missing, misshapen, unexpected or non-finite tensor), FORMAT
 * (non-float dtype), OUT_OF_MEMORY. */
tlm_status tlm_model_load_from(tlm_model *m, const tlm_safetensors *st, const char *path, const char *strip_prefix,
                               tlm_dtype *converted);
/* Reads `path` and loads it (tlm_model_load_from, no prefix). Errors: the reader's (IO, FORMAT) too. */
tlm_status tlm_model_load(tlm_model *m, const char *path);

/* Writes parameters (or gradients, divided by any loss scale they carry), float32, with the config
 * in the metadata, through the one file writer (output.h). Non-finite values are refused
 * (INVALID_ARGUMENT naming the first bad tensor) and nothing is written. */
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
 * parameter gradient into m->grads (overwriting; with accumulation, micro-batches after the first add:
 * tlm_model_set_micro_batch), announcing each group as it completes. The
 * logits of that forward are replaced by their gradient. Errors: INVALID_ARGUMENT if no forward
 * with targets preceded; OUT_OF_MEMORY for the first gradient buffer. */
tlm_status tlm_model_backward(tlm_model *m);

/* One AdamW step with these hyperparameters over the flat buffers (one op launch). In fp16 it
 * first unscales and checks the gradients (loss_scaler.h); if any is inf/NaN the step is skipped
 * (m->scaler.last_step_skipped, the scale halves) and TLM_OK is returned. */
tlm_status tlm_model_adamw_step(tlm_model *m, const tlm_adamw_config *opt);

/* The optimizer step with someone else's update (data-parallel ZeRO-1, ddp.h: each rank updates its
 * shard of the parameters with its own AdamW state): what tlm_model_adamw_step does around its own
 * AdamW pass (the optimizer phase, the step's memory stage: the gradients' life ends with it; in fp16
 * the unscale and overflow check, `update` skipped on an overflow), with update(user, m) in place of
 * that pass. update reads m->grads (unscaled) times the clip factor (tlm_model_grad_factors), writes
 * m->params, and says whether it refreshed the GEMM copy (tlm_model_params_changed). Not with
 * optimizer-in-backward.
 * Errors: INVALID_ARGUMENT without gradients; update's. */
tlm_status tlm_model_adamw_step_by(tlm_model *m, tlm_status (*update)(void *user, tlm_model *m), void *user);

/* optimizer_overlap: issues AdamW's update of the span [offset, offset + n) of the flat buffers (the
 * step's t and m->optimizer.config; the GEMM copy's span refreshed in the same pass) on the model's
 * optimizer stream, after event `after` (NULL: after the compute stream's work so far). For a
 * grads-ready callback that takes over the updates (ddp.h); the spans of a step must cover each element
 * once. Errors: OUT_OF_MEMORY, BACKEND (the stream or its events could not be made). */
tlm_status tlm_model_overlap_update(tlm_model *m, size_t offset, size_t n, struct tlm_event *after);

/* Copies the logits of the last forward (before backward) to host memory as float32
 * (B*T*V floats; widened from bf16/fp16 in those modes). */
tlm_status tlm_model_copy_logits(const tlm_model *m, float *host);

/* Index of a tensor by state-dict name, or -1. */
int tlm_model_find_tensor(const tlm_model *m, const char *name);

#ifdef __cplusplus
}
#endif
#endif
