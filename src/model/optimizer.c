/* optimizer.c — AdamW over flat buffers (optimizer.h): the moments, allocated by the first step,
 * and one adamw_step op per step. */
#include "tlm/optimizer.h"

#include <string.h>

tlm_adamw_config tlm_adamw_defaults(void) {
    return (tlm_adamw_config){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
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

tlm_status tlm_adamw_update(tlm_adamw *opt, float *params, const float *grads, void *params_lp, tlm_dtype dt) {
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
    const tlm_adamw_config *c = &opt->config;
    opt->t++;
    /* the GEMM copy of the weights (bf16/fp16) is refreshed in the same pass */
    tlm_adamw_step(be, params, grads, opt->m, opt->v, opt->n, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                   opt->t, params_lp, dt);
    return TLM_OK;
}
