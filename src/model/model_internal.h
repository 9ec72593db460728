/* model_internal.h — what the model's source files share and the public header does not. */
#ifndef TLM_MODEL_INTERNAL_H
#define TLM_MODEL_INTERNAL_H

#include "tlm/model.h"

/* The step's mutable state (model.h's m->step): written by src/model only; other folders read it
 * through tlm_model_grad_factors / tlm_model_weight_copy_current and change it through model
 * functions (tlm_clip_to_norm, tlm_model_params_changed, tlm_model_grads_replaced). */
typedef struct tlm_step_state {
    float grads_scale;             /* the factor the gradients in m->grads carry now: the loss scale
                                      after backward in fp16, 1 after unscaling and in other modes */
    float grads_clip;              /* the factor gradient clipping asks the next AdamW step to apply
                                      to the gradients inside its pass (fp32, tf32, bf16; fp16 folds
                                      it into grads_scale's unscale); 1 after each backward */
    bool params_lp_stale;          /* params changed since the last cast of the GEMM copy */
    bool grads_pending;            /* a backward's gradients await the AdamW step (until it ends or the
                                      next forward): with the copy in the arena they hold its bytes */
    bool updated_in_backward;      /* updates in the backward (plan): the last backward took the step */
    struct tlm_stream *opt_stream; /* OVERLAPPED: where the updates run (made at the first) */
    struct tlm_event *opt_after, *opt_done; /* the compute stream's point an update follows; the end of them */
    bool opt_pending;              /* updates issued that the compute stream has not waited for */
    bool overlap_failed;           /* the last backward could not issue an update (its error set) */
    /* what was attached to the model, kept across a new plan when m->run changes */
    bool clipping, data_parallel, sharded;
    bool weight_copy_apart;        /* the GEMM copy in its own allocation even where the plan could put
                                      it in the arena (the plan before weight_copy_in_arena: tests compare
                                      the two bit for bit) */
    int micro_batch;               /* accumulation: the micro-batch of the next backward (tlm_model_set_micro_batch) */
} tlm_step_state;

/* step_plan.c: the plan again from m->run and what is attached (a forward, after m->run changed).
 * The plan's errors (tlm_step_plan_decide); the model unchanged then. */
tlm_status tlm_model_replan(tlm_model *m);

/* model.c: frees the activations (and forgets the captured graphs that use them) */
void tlm_model_free_activations(tlm_model *m);

/* forward.c: block l's forward from layers[l].x to the SwiGLU product, and with to_output the
 * block's output into the next block's input (the backward of recompute BLOCK re-runs it without) */
void tlm_block_forward(tlm_model *m, int l, bool to_output);

/* model.c: the compute stream waits for the overlapped optimizer's updates issued so far
 * (plan.update OVERLAPPED); nothing when none is pending */
void tlm_model_overlap_join(tlm_model *m);

/* model.c: casts the parameters to their bf16/fp16 GEMM copy when they changed: into the arena's
 * buffers of each group when the activations hold them (plan.weight_copy_in_arena), else into
 * m->params_lp (allocating it the first time); nothing in fp32/tf32. OUT_OF_MEMORY. */
tlm_status tlm_model_refresh_lowp_weights(tlm_model *m);

/* model.c: the arena's per-group GEMM copy ([num_groups] pointers, NULL for a group without one),
 * or NULL when the copy is not in the arena (m->params_lp, or none) */
void *const *tlm_model_arena_copy(const tlm_model *m);

/* model_io.c: TLM_OK when the flat buffer (params or grads, backend memory) holds only finite
 * values; else INVALID_ARGUMENT naming `what`, the first tensor with a NaN/Inf, how many it holds
 * and where the first is. Copies tensor by tensor to the host: for error paths, not every step. */
tlm_status tlm_model_check_finite(const tlm_model *m, const float *flat, const char *what);

/* element i of a dt buffer */
static inline void *tlm_at(void *p, size_t i, tlm_dtype dt) { return (char *)p + i * tlm_dtype_size(dt); }

/* The GEMM copy of weight w (a pointer into m->params): its place in the arena's copy of its group
 * or in params_lp (bf16/fp16), or the weight itself (fp32, tf32). */
const void *tlm_gemm_w(const tlm_model *m, const float *w);

#endif
