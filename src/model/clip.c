/* clip.c — the global L2 norm of the gradients and CS336's gradient clipping (model.h), over the
 * one flat gradient buffer: the sum_squares op (float64, fixed order) and one host copy; the
 * multiply is the AdamW pass's (the clip factor) or, in fp16, the unscale's (the step plan's
 * clip_in_unscale). */
#include <math.h>

#include "model/model_internal.h"

static tlm_status need_grads(const tlm_model *m) {
    if (!m->grads)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no gradients to measure: run a backward pass first%s",
                        m->plan.update == TLM_UPDATE_IN_BACKWARD ? " (optimizer-in-backward never holds them all at once)" : "");
    return TLM_OK;
}

/* sum of squares of grads (n) on the backend, to the host */
static double sum_squares(tlm_model *m, const float *x, size_t n, void *scratch) {
    double s = 0;
    tlm_sum_squares(m->backend, (double *)scratch, x, n);
    tlm_copy_to_host(m->backend, &s, scratch, sizeof s);
    return s;
}

tlm_status tlm_grad_norm(tlm_model *m, void *scratch, double *norm) {
    TLM_TRY(need_grads(m));
    /* fp16: the gradients carry the loss scale; a clip already asked for multiplies them in the update */
    const double scale = (double)m->step->grads_scale / m->step->grads_clip;
    *norm = sqrt(sum_squares(m, m->grads, m->layout.flat_numel, scratch)) / scale;
    return TLM_OK;
}

tlm_status tlm_clip_grad_norm(tlm_model *m, double max_norm, void *scratch, double *norm, bool *clipped) {
    *clipped = false;
    TLM_TRY(tlm_grad_norm(m, scratch, norm));
    tlm_clip_to_norm(m, max_norm, *norm, clipped);
    return TLM_OK;
}

void tlm_clip_to_norm(tlm_model *m, double max_norm, double norm, bool *clipped) {
    *clipped = false;
    if (!(max_norm > 0) || !isfinite(norm)) return;
    const double coef = max_norm / (norm + 1e-6); /* CS336 / clip_grad_norm_'s eps */
    if (coef >= 1.0) return;
    *clipped = true;
    /* no pass of its own: fp16's unscale before the update multiplies by coef too; in the other modes
     * the AdamW pass multiplies the gradients by it as it reads them */
    tlm_step_state *st = m->step;
    if (st->grads_scale != 1.0f) st->grads_scale = (float)((double)st->grads_scale / coef);
    else st->grads_clip = (float)((double)st->grads_clip * coef); /* the norm was of the clipped gradients */
}

const char *tlm_grad_nonfinite_tensor(tlm_model *m, void *scratch) {
    if (!m->grads) return NULL;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        if (!isfinite(sum_squares(m, m->grads + t->offset, t->numel, scratch))) return t->name;
    }
    return NULL;
}
