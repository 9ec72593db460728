/* optimizer.h — AdamW over flat buffers, an object of its own (CS336 version; Loshchilov & Hutter
 * 2019, "Decoupled Weight Decay Regularization", Algorithm 2): the hyperparameters, the first and
 * second moments (one flat float32 allocation each, the parameters' layout) and the step count.
 * One step (tlm_adamw_update) is one adamw_step op over the whole buffer (ops.def), which in bf16/fp16 also refreshes
 * the low-precision GEMM copy of the weights. */
#ifndef TLM_OPTIMIZER_H
#define TLM_OPTIMIZER_H

#include <stddef.h>
#include "tlm/backend.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} tlm_adamw_config;

/* CS336 defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 */
tlm_adamw_config tlm_adamw_defaults(void);

/* Checks the hyperparameters against their domains: lr in [FLT_MIN, 10] (1.2e-38: a smaller one is 0
 * or a subnormal in float32), beta1 and beta2 in [0, 1), eps in [FLT_MIN, 1), weight_decay in [0, 1].
 * INVALID_ARGUMENT naming the hyperparameter, its value and its domain otherwise. */
tlm_status tlm_adamw_config_check(const tlm_adamw_config *c);

typedef struct {
    tlm_adamw_config config;
    tlm_backend *backend;  /* not owned */
    size_t n;              /* elements of the flat buffers it updates */
    float *m, *v;          /* (n) backend memory, tag optimizer: allocated (zeroed) by the first step */
    int t;                 /* steps taken */
} tlm_adamw;

/* An optimizer for flat buffers of n floats; allocates nothing yet. */
void tlm_adamw_init(tlm_adamw *opt, tlm_backend *be, size_t n, const tlm_adamw_config *config);
/* Frees the moments. */
void tlm_adamw_free(tlm_adamw *opt);

/* One step: t += 1, then params (n) -= the AdamW update from grads (n); params_lp (n) dt, when not
 * NULL, = round(params) in the same pass. The first step allocates m and v (OUT_OF_MEMORY). */
tlm_status tlm_adamw_update(tlm_adamw *opt, float *params, const float *grads, void *params_lp, tlm_dtype dt);
/* The same with the gradients multiplied by grad_scale inside the pass (gradient clipping's factor). */
tlm_status tlm_adamw_update_scaled(tlm_adamw *opt, float *params, const float *grads, float grad_scale,
                                   void *params_lp, tlm_dtype dt);

/* The same step in parts, for optimizer-in-backward (model.h: one group of the flat buffers at a
 * time, as its gradients are complete): begin_step (t += 1; the first allocates m and v:
 * OUT_OF_MEMORY), then update_span over spans that together cover each element once. params and
 * grads (n floats) and params_lp (n, dt; NULL: none) point at the span's first element; the moments
 * are taken at `offset` (floats) of the flat buffers. AdamW is elementwise: the parts give the same
 * bits as tlm_adamw_update. */
tlm_status tlm_adamw_begin_step(tlm_adamw *opt);
void tlm_adamw_update_span(tlm_adamw *opt, size_t offset, size_t n, float *params, const float *grads,
                           void *params_lp, tlm_dtype dt);
/* The same with the span's gradients multiplied by grad_scale inside the pass (as update_scaled). */
void tlm_adamw_update_span_scaled(tlm_adamw *opt, size_t offset, size_t n, float *params, const float *grads,
                                  float grad_scale, void *params_lp, tlm_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
