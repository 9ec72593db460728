/* step_plan.h — the training step's modes, decided once per run by the model (src/model/step_plan.c)
 * into one structure that the forward, the backward and the optimizer step read; other folders ask
 * it (m->plan, read-only outside src/model) and change it only through model functions (model.h:
 * tlm_model_plan_clipping, tlm_model_plan_data_parallel).
 *
 * What a plan decides, from the run (model.h's tlm_run_config) and what is attached to the model:
 *   where AdamW runs: after the backward (the plain step, tlm_model_adamw_step), in the backward
 *     (run.optimizer_in_backward: each group's update as its gradients complete, no whole gradient
 *     buffer), overlapped (run.optimizer_overlap: each group's update on the model's optimizer
 *     stream beside the backward), or sharded (ZeRO-1, ddp.h: the data-parallel layer's update of
 *     each rank's shard, through tlm_model_adamw_step_by);
 *   fp16 loss scaling (loss_scaler.h): the backward scales the loss, the step unscales and skips on
 *     an overflow;
 *   gradient clipping by the global norm: on or off, and where its factor is applied (the AdamW
 *     pass's gradient multiplier, or in fp16 the unscale);
 *   the bf16/fp16 weight copy for the GEMMs: present or not, who refreshes it (the update as it
 *     writes each span, else the next forward casts it whole), and where it lives: in its own
 *     allocation, or (the plain update after the backward, one micro-batch) one buffer per parameter
 *     group in the step's arena, alive until the group's backward has read it, its bytes then taken
 *     by the gradients of the groups completed after it, and written anew by the update, which runs
 *     group by group in reverse completion order (src/model/activations.h);
 *   gradient accumulation over micro-batches (run.grad_accum_steps): refused with updates in the
 *     backward (they would run before the last micro-batch's gradients are in);
 *   CUDA graphs for the forward and the backward (off with host callbacks every step, and the
 *     backward eager when updates run in it: each step's updates take t from the host). */
#ifndef TLM_STEP_PLAN_H
#define TLM_STEP_PLAN_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* where the AdamW update of a step runs (above) */
typedef enum {
    TLM_UPDATE_AFTER_BACKWARD = 0,
    TLM_UPDATE_IN_BACKWARD = 1,
    TLM_UPDATE_OVERLAPPED = 2,
    TLM_UPDATE_SHARDED = 3,
} tlm_update_place;

/* for messages: "the update after the backward", "optimizer-in-backward", "the overlapped optimizer",
 * "ZeRO-1's sharded update" */
const char *tlm_update_place_name(tlm_update_place u);

typedef struct {
    tlm_update_place update;
    bool updates_in_backward; /* IN_BACKWARD or OVERLAPPED: the backward pass takes the step, and
                                 tlm_model_adamw_step only sets the next step's hyperparameters */
    bool whole_grads;         /* every gradient exists before the first update (not IN_BACKWARD and
                                 not OVERLAPPED): what a global norm and fp16's overflow check need */
    bool loss_scaling;        /* fp16: dynamic loss scaling */
    bool clipping;            /* gradient clipping by the global norm is on (tlm_model_plan_clipping) */
    bool clip_in_unscale;     /* the clip factor folds into fp16's unscale; else the AdamW pass (or the
                                 sharded update) multiplies the gradients by it as it reads them */
    bool weight_copy;         /* a bf16/fp16 copy of the weights feeds the GEMMs (bf16, fp16) */
    bool copy_in_update;      /* the update refreshes the copy's span it writes (every update place but
                                 SHARDED, whose update says what it refreshed: tlm_model_params_changed) */
    bool weight_copy_in_arena; /* the copy is one buffer per parameter group in the step's arena, alive
                                 from the step's start to the end of its group's backward (weight_copy,
                                 update AFTER_BACKWARD, one micro-batch, not forward-only); else it is one
                                 allocation of its own, alive throughout */
    bool data_parallel;       /* a data-parallel reducer is attached (tlm_model_plan_data_parallel) */
    bool forward_graph;       /* the forward pass is captured as a CUDA graph once and replayed */
    bool backward_graph;      /* the backward pass likewise (not with updates in the backward); with
                                 accumulation two graphs: the first micro-batch's, the others' */
    int grad_accum_steps;     /* micro-batches per optimizer step (model.h's run.grad_accum_steps), >= 1 */
} tlm_step_plan;

#ifdef __cplusplus
}
#endif
#endif
