/* loss_scaler.h — dynamic loss scaling for fp16, with torch.cuda.amp.GradScaler's semantics
 * (after Micikevicius et al. 2018, "Mixed Precision Training", sec. 3.2): the loss is multiplied by
 * `scale` (initially 2^16) before backward; before the optimizer step the gradients are unscaled
 * and checked; a step with an inf/NaN gradient is skipped and halves the scale; 2000 clean steps in
 * a row double it. The check runs on the device (the grad_unscale op counts into a device scalar)
 * and is combined across ranks when a communicator is given (comm.h), so every rank decides alike. */
#ifndef TLM_LOSS_SCALER_H
#define TLM_LOSS_SCALER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/backend.h"
#include "tlm/comm.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TLM_LOSS_SCALE_INIT 65536.0f /* 2^16, GradScaler's init_scale */
#define TLM_LOSS_SCALE_GROWTH_INTERVAL 2000

typedef struct {
    float scale;             /* the factor the next backward multiplies the loss by */
    int growth_tracker;      /* clean steps since the last change of scale */
    bool last_step_skipped;  /* the last check found inf/NaN */
    int64_t skipped_steps;
} tlm_loss_scaler;

void tlm_loss_scaler_init(tlm_loss_scaler *s);

/* Unscales grads (n) by 1/grads_scale in place and checks them: *skip = true when any element
 * (on any rank, with comm) is inf or NaN, and then the scale halves and the growth restarts;
 * otherwise the 2000th clean step in a row doubles the scale. found_inf (1) float32 is backend
 * scratch the check counts into. Waits for the count (a host copy). */
tlm_status tlm_loss_scaler_unscale_check(tlm_loss_scaler *s, tlm_backend *be, float *grads, size_t n,
                                         float grads_scale, float *found_inf, tlm_comm *comm, bool *skip);

#ifdef __cplusplus
}
#endif
#endif
