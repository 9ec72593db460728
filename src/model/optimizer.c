/* optimizer.c — AdamW over flat buffers (optimizer.h): the moments, allocated by the first step,
 * and one adamw_step op per step (or one per span, for optimizer-in-backward). */
#include <float.h>
#include <stdbool.h>
#include "tlm/optimizer.h"

#include <string.h>

tlm_adamw_config tlm_adamw_defaults(void) {
    return (tlm_adamw_config){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
}

tlm_status tlm_adamw_config_check(const tlm_adamw_config *c) {
    const struct {
        const char *name;
        float v, lo, hi;
        bool hi_open;
    } h[] = {{"lr", c->lr, FLT_MIN, 10.0f, false},       {"beta1", c->beta1, 0.0f, 1.0f, true},
             {"beta2", c->beta2, 0.0f, 1.0f, true},      {"eps", c->eps, FLT_MIN, 1.0f, true},
             {"weight_decay", c->weight_decay, 0.0f, 1.0f, false}};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (!(h[i].v >= h[i].lo && (h[i].hi_open ? h[i].v < h[i].hi : h[i].v <= h[i].hi)))
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "AdamW %s = %g is outside its domain [%g, %g%s", h[i].name,
                            (double)h[i].v, (double)h[i].lo, (double)h[i].hi, h[i].hi_open ? ")" : "]");
    return TLM_OK;
}

void tlm_adamw_init(tlm_adamw *opt, tlm_backend *be, size_t n, const tlm_adamw_config *config) {
    memset(opt, 0, sizeof *opt);
    opt->config = config ? *config : tlm_adamw_defaults();
    opt->backend = be;
    opt->n = n;
}

void tlm_adamw_free(tlm_adamw *opt) {
    if (!opt->backend) return;
    tlm_free(opt->backend, opt->m);
    tlm_free(opt->backend, opt->v);
    opt->m = opt->v = NULL;
}

tlm_status tlm_adamw_begin_step(tlm_adamw *opt) {
    tlm_backend *be = opt->backend;
    if (!opt->m) {
        const size_t bytes = opt->n * sizeof(float);
        opt->m = tlm_alloc(be, bytes, TLM_MEM_OPTIMIZER, "adamw.m");
        opt->v = opt->m ? tlm_alloc(be, bytes, TLM_MEM_OPTIMIZER, "adamw.v") : NULL;
        if (!opt->v) {
            tlm_free(be, opt->m);
            opt->m = NULL;
            return TLM_ERR_OUT_OF_MEMORY;
        }
        tlm_memset_zero(be, opt->m, bytes);
        tlm_memset_zero(be, opt->v, bytes);
    }
    opt->t++;
    return TLM_OK;
}

static void update_span(tlm_adamw *opt, size_t offset, size_t n, float *params, const float *grads,
                        float grad_scale, void *params_lp, tlm_dtype dt) {
    const tlm_adamw_config *c = &opt->config;
    /* the GEMM copy of the weights (bf16/fp16) is refreshed in the same pass */
    tlm_adamw_step(opt->backend, params, grads, grad_scale, opt->m + offset, opt->v + offset, n, c->lr, c->beta1,
                   c->beta2, c->eps, c->weight_decay, opt->t, params_lp, dt);
}

void tlm_adamw_update_span(tlm_adamw *opt, size_t offset, size_t n, float *params, const float *grads,
                           void *params_lp, tlm_dtype dt) {
    update_span(opt, offset, n, params, grads, 1.0f, params_lp, dt);
}

void tlm_adamw_update_span_scaled(tlm_adamw *opt, size_t offset, size_t n, float *params, const float *grads,
                                  float grad_scale, void *params_lp, tlm_dtype dt) {
    update_span(opt, offset, n, params, grads, grad_scale, params_lp, dt);
}

tlm_status tlm_adamw_update_scaled(tlm_adamw *opt, float *params, const float *grads, float grad_scale,
                                   void *params_lp, tlm_dtype dt) {
    TLM_TRY(tlm_adamw_begin_step(opt));
    update_span(opt, 0, opt->n, params, grads, grad_scale, params_lp, dt);
    return TLM_OK;
}

tlm_status tlm_adamw_update(tlm_adamw *opt, float *params, const float *grads, void *params_lp, tlm_dtype dt) {
    return tlm_adamw_update_scaled(opt, params, grads, 1.0f, params_lp, dt);
}
