/* model_internal.h — what the model's source files share and the public header does not. */
#ifndef TLM_MODEL_INTERNAL_H
#define TLM_MODEL_INTERNAL_H

#include "tlm/model.h"

void tlm_model_set_grad_views(tlm_model *m);      /* model.c: layer_g views into grads */

/* profiler ranges (NVTX on CUDA): no-ops on backends without them */
static inline void tlm_range_push(tlm_backend *be, const char *name) {
    if (be->range_push) be->range_push(be, name);
}
static inline void tlm_range_pop(tlm_backend *be) {
    if (be->range_pop) be->range_pop(be);
}
void tlm_model_free_activations(tlm_model *m);    /* model_pass.c */

#endif
