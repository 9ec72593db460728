/* clip.c — the global L2 norm of the gradients and CS336's gradient clipping (train.h). Two ways to
 * the same norm:
 *   - tlm_grad_norm, after the backward pass: the sum_squares op (float64, fixed order) over the one
 *     flat gradient buffer and one host copy: a read of every gradient that the step waits for (10.9 GB
 *     for 2.7B: about 3.5 ms of a 78 ms step on an H100);
 *   - tlm_grad_norm_overlap, during it (what tlm_train_step uses alone): each group's sum of squares on
 *     a background stream as soon as the backward pass completes the group (the grads-ready seam,
 *     model.h), into the group's float64 slot of a small device buffer; the read hides behind the
 *     backward's GEMMs, and after the pass one host copy of the slots gives the norm.
 * The multiply is the AdamW pass's (m->grads_clip) or, in fp16, the unscale's. */
#include <math.h>
#include <stdlib.h>

#include "tlm/train.h"
#ifdef TLM_HAVE_CUDA
#include "cuda/sum_squares.h"
#endif

static tlm_status need_grads(const tlm_model *m) {
    if (!m->grads)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no gradients to measure: run a backward pass first%s",
                        m->run.optimizer_in_backward ? " (optimizer-in-backward never holds them all at once)" : "");
    return TLM_OK;
}

/* sum of squares of grads (n) on the backend, to the host */
static double sum_squares(tlm_model *m, const float *x, size_t n, void *scratch) {
    double s = 0;
    tlm_sum_squares(m->backend, (double *)scratch, x, n);
    tlm_copy_to_host(m->backend, &s, scratch, sizeof s);
    return s;
}

/* the factor the gradients carry: fp16's loss scale over a clip already asked for (the update's view) */
static double carried_scale(const tlm_model *m) { return (double)m->grads_scale / m->grads_clip; }

tlm_status tlm_grad_norm(tlm_model *m, void *scratch, double *norm) {
    TLM_TRY(need_grads(m));
    *norm = sqrt(sum_squares(m, m->grads, m->layout.flat_numel, scratch)) / carried_scale(m);
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
    if (m->grads_scale != 1.0f) m->grads_scale = (float)((double)m->grads_scale / coef);
    else m->grads_clip = (float)((double)m->grads_clip * coef); /* the norm was of the clipped gradients */
}

const char *tlm_grad_nonfinite_tensor(tlm_model *m, void *scratch) {
    if (!m->grads) return NULL;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        if (!isfinite(sum_squares(m, m->grads + t->offset, t->numel, scratch))) return t->name;
    }
    return NULL;
}

/* ---- the norm beside the backward pass ------------------------------------------------------------------ */

struct tlm_grad_norm_overlap {
    tlm_model *m;
    tlm_stream *stream;     /* background: its blocks yield to the compute stream's */
    tlm_event *ready;       /* recorded on the compute stream after a group's last gradient op */
    tlm_event *done;        /* recorded on the background stream after the last group's sum */
    double *sums;           /* (num_groups) backend float64: group i's sum of squares */
    double *partial;        /* the background stream's per-chunk partial sums (CUDA; sum_squares.h) */
    double *host;           /* (num_groups) host copy of sums */
};

/* sum of squares of x (n) into out on the background stream: on CUDA in short blocks (sum_squares.h) with
 * the stream's own partials; on a backend of one synchronous queue (CPU) the op, done when it returns */
static void sum_squares_on(tlm_grad_norm_overlap *o, double *out, const float *x, size_t n) {
    tlm_backend *be = o->m->backend;
#ifdef TLM_HAVE_CUDA
    if (be->kind == TLM_DEVICE_CUDA) {
        tlm_cuda_sum_squares_on(be, o->stream, out, x, n, o->partial);
        return;
    }
#endif
    tlm_sum_squares(be, out, x, n);
}

/* the grads-ready callback (model.h): group g is complete on the compute stream. The background stream
 * forks from the compute stream at this point, sums the group, and at the last group (the embedding)
 * the compute stream joins it: whatever follows the backward pass (the host copy of the sums, the
 * update, the next forward, which ends the gradients' life) comes after every sum. Under CUDA graph
 * capture the fork and join are captured with the pass (cross-stream capture through events). */
static void on_group_ready(void *user, tlm_model *m, const tlm_param_group *g) {
    tlm_grad_norm_overlap *o = user;
    tlm_backend *be = m->backend;
    const int i = (int)(g - m->layout.groups);
    tlm_event_record(be, o->ready, NULL);
    tlm_stream_wait_event(be, o->stream, o->ready);
    sum_squares_on(o, o->sums + i, tlm_model_group_grads(m, i), g->numel);
    if (i == m->layout.num_groups - 1) {
        tlm_event_record(be, o->done, o->stream);
        tlm_stream_wait_event(be, NULL, o->done);
    }
}

tlm_status tlm_grad_norm_overlap_create(tlm_grad_norm_overlap **out, tlm_model *m) {
    *out = NULL;
    if (m->grads_ready)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the model's grads-ready callback is taken (a data-parallel "
                                                  "reducer?): the norm cannot be measured beside the backward pass");
    if (m->run.optimizer_in_backward)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "the gradient norm with optimizer-in-backward: each group is updated "
                                             "before the norm of all is known");
    tlm_backend *be = m->backend;
    tlm_grad_norm_overlap *o = calloc(1, sizeof *o);
    if (!o) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the gradient norm");
    o->m = m;
    const size_t G = (size_t)m->layout.num_groups;
    tlm_status s = TLM_OK;
    o->host = malloc(G * sizeof(double));
    o->sums = tlm_alloc(be, G * sizeof(double), TLM_MEM_WORKSPACE, "train.norm_sums");
    if (!o->host || !o->sums) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of memory for the gradient norm's sums");
#ifdef TLM_HAVE_CUDA
    if (s == TLM_OK && be->kind == TLM_DEVICE_CUDA) { /* for the largest group; the groups' sums take turns */
        size_t largest = 0;
        for (size_t i = 0; i < G; i++)
            if (m->layout.groups[i].numel > largest) largest = m->layout.groups[i].numel;
        o->partial = tlm_alloc(be, tlm_cuda_sum_squares_partial_bytes(largest), TLM_MEM_WORKSPACE,
                               "train.norm_partial");
        if (!o->partial) s = TLM_ERR_OUT_OF_MEMORY; /* tlm_alloc set the message */
    }
#endif
    if (s == TLM_OK) s = tlm_stream_create_background(be, &o->stream);
    if (s == TLM_OK) s = tlm_event_create(be, &o->ready);
    if (s == TLM_OK) s = tlm_event_create(be, &o->done);
    if (s != TLM_OK) {
        tlm_grad_norm_overlap_free(o);
        return s;
    }
    /* a backward graph captured before has no sums: the next backward runs eagerly and captures again */
    tlm_graph_reset(be, &m->graph_bwd);
    tlm_model_on_grads_ready(m, on_group_ready, o);
    *out = o;
    return TLM_OK;
}

bool tlm_grad_norm_overlap_active(const tlm_grad_norm_overlap *o) {
    return o && o->m->grads_ready == on_group_ready && o->m->grads_ready_user == o;
}

void tlm_grad_norm_overlap_free(tlm_grad_norm_overlap *o) {
    if (!o) return;
    tlm_model *m = o->m;
    tlm_backend *be = m->backend;
    if (tlm_grad_norm_overlap_active(o)) tlm_model_on_grads_ready(m, NULL, NULL);
    /* a captured backward graph would still write the sums freed below */
    tlm_graph_reset(be, &m->graph_bwd);
    if (o->stream) tlm_stream_synchronize(be, o->stream);
    tlm_event_destroy(be, o->ready);
    tlm_event_destroy(be, o->done);
    tlm_stream_destroy(be, o->stream);
    tlm_free(be, o->partial);
    tlm_free(be, o->sums);
    free(o->host);
    free(o);
}

tlm_status tlm_grad_norm_overlapped(tlm_grad_norm_overlap *o, double *norm) {
    tlm_model *m = o->m;
    TLM_TRY(need_grads(m));
    if (!tlm_grad_norm_overlap_active(o))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the gradient norm beside the backward pass lost the model's "
                                                  "grads-ready callback: measure it with tlm_grad_norm");
    const int G = m->layout.num_groups;
    tlm_copy_to_host(m->backend, o->host, o->sums, (size_t)G * sizeof(double)); /* after the join: every sum */
    double total = 0;
    for (int i = 0; i < G; i++) total += o->host[i]; /* the groups' order: the same sum every time */
    *norm = sqrt(total) / carried_scale(m);
    return TLM_OK;
}
