/* schedule.c — the training recipe's numbers: CS336's learning-rate schedule (linear warm-up, cosine
 * decay, then the minimum), the recipe's defaults and the check of its domains (train.h). */
#include <math.h>

#include "tlm/train.h"

double tlm_lr_cosine_schedule(int64_t it, double lr_max, double lr_min, int64_t warmup_iters,
                              int64_t cosine_cycle_iters) {
    if (it < warmup_iters) return lr_max * (double)it / (double)warmup_iters; /* warm-up */
    if (it > cosine_cycle_iters) return lr_min;                                /* post-annealing */
    if (cosine_cycle_iters == warmup_iters) return lr_max;                     /* a cycle of no length */
    const double progress = (double)(it - warmup_iters) / (double)(cosine_cycle_iters - warmup_iters);
    return lr_min + 0.5 * (1.0 + cos(M_PI * progress)) * (lr_max - lr_min);
}

tlm_train_config tlm_train_defaults(int64_t steps) {
    int64_t warmup = steps / 20;
    if (warmup < 1 && steps > 1) warmup = 1;
    return (tlm_train_config){.batch_size = 4, .grad_accum_steps = 1, .context_length = 256, .steps = steps, .seed = 0,
                              .lr_max = 1e-3, .lr_min = 1e-4, .warmup_iters = warmup,
                              .cosine_cycle_iters = steps, .adamw = tlm_adamw_defaults(), .max_grad_norm = 1.0,
                              .eval_every = 100, .eval_batches = 10};
}

tlm_status tlm_train_config_check(const tlm_train_config *c) {
    const struct {
        const char *name;
        double v, lo, hi;
    } f[] = {{"batch_size", c->batch_size, 1, 1 << 20},
             {"grad_accum_steps", c->grad_accum_steps, 1, 1 << 20},
             {"context_length", c->context_length, 1, 1 << 24},
             {"steps", (double)c->steps, 1, 1e15},
             {"lr_max", c->lr_max, 0, 10},
             {"lr_min", c->lr_min, 0, c->lr_max},
             {"warmup_iters", (double)c->warmup_iters, 0, 1e15},
             {"cosine_cycle_iters", (double)c->cosine_cycle_iters, (double)c->warmup_iters, 1e15},
             {"max_grad_norm", c->max_grad_norm, 0, 1e30},
             {"eval_every", (double)c->eval_every, 0, 1e15},
             {"eval_batches", c->eval_batches, 1, 1 << 20}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!(f[i].v >= f[i].lo && f[i].v <= f[i].hi))
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "training recipe: %s = %g is outside [%g, %g]%s", f[i].name,
                            f[i].v, f[i].lo, f[i].hi,
                            i == 5 ? " (lr_min may not exceed lr_max)"
                            : i == 7 ? " (the cosine cycle ends at or after the warm-up)" : "");
    if ((double)c->grad_accum_steps * c->batch_size > (double)(1 << 20))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "training recipe: grad_accum_steps %d x batch_size %d rows a step "
                        "exceeds %d", c->grad_accum_steps, c->batch_size, 1 << 20);
    tlm_adamw_config a = c->adamw;
    a.lr = c->lr_max > 0 ? (float)c->lr_max : 1e-3f; /* the schedule's lr is checked above */
    return tlm_adamw_config_check(&a);
}
