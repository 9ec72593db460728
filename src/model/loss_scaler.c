/* loss_scaler.c — fp16 dynamic loss scaling with GradScaler's rules (loss_scaler.h): unscale and
 * count non-finite gradients on the device, combine the count across ranks, skip or take the step,
 * halve or grow the scale. */
#include "tlm/loss_scaler.h"

void tlm_loss_scaler_init(tlm_loss_scaler *s) {
    *s = (tlm_loss_scaler){.scale = TLM_LOSS_SCALE_INIT};
}

tlm_status tlm_loss_scaler_unscale_check(tlm_loss_scaler *s, tlm_backend *be, float *grads, size_t n,
                                         float grads_scale, float *found_inf, tlm_comm *comm, bool *skip) {
    tlm_memset_zero(be, found_inf, sizeof(float));
    tlm_grad_unscale(be, grads, n, 1.0f / grads_scale, found_inf);
    if (comm && comm->world_size > 1) TLM_TRY(comm->all_reduce_sum_f32(comm, be, found_inf, 1));
    float count = 0;
    tlm_copy_to_host(be, &count, found_inf, sizeof count);
    *skip = count != 0.0f;
    s->last_step_skipped = *skip;
    if (*skip) {
        s->scale *= 0.5f;
        s->growth_tracker = 0;
        s->skipped_steps++;
    } else if (++s->growth_tracker == TLM_LOSS_SCALE_GROWTH_INTERVAL) {
        s->scale *= 2.0f;
        s->growth_tracker = 0;
    }
    return TLM_OK;
}
