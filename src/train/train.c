/* train.c — the training loop's state and its step (train.h): the batch of the step, forward,
 * backward, the global norm and clipping, the AdamW update at the schedule's learning rate, the loss
 * log; and validation on the fixed held-out batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/train.h"

/* a token file holds at least one row: T + 1 tokens */
static tlm_status check_data(const tlm_tokens *d, int T, const char *what) {
    if (d->n < (int64_t)T + 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "the %s holds %lld tokens: a row of context length %d needs at least %lld", what,
                        (long long)d->n, T, (long long)T + 1);
    return TLM_OK;
}

tlm_status tlm_train_init(tlm_train *t, tlm_model *m, const tlm_train_config *c, const tlm_tokens *train_data,
                          const tlm_tokens *val_data, int rank, int world_size) {
    memset(t, 0, sizeof *t);
    TLM_TRY(tlm_train_config_check(c));
    if (!m->plan.whole_grads) /* the step plan's (step_plan.h) */
        return tlm_fail(TLM_ERR_UNSUPPORTED, "training with %s: the updates run before the global "
                        "gradient norm is known (clipping needs every gradient)", tlm_update_place_name(m->plan.update));
    if (m->run.forward_only) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "training a model created forward-only");
    if (tlm_model_grad_accum_steps(m) != c->grad_accum_steps)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the recipe's %d micro-batches per step are not the model's %d "
                        "(create it with run.grad_accum_steps = %d)", c->grad_accum_steps,
                        tlm_model_grad_accum_steps(m), c->grad_accum_steps);
    TLM_TRY(tlm_model_plan_clipping(m, c->max_grad_norm > 0));
    if (c->context_length > m->config.context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "context length %d exceeds the model's context_length %d",
                        c->context_length, m->config.context_length);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "rank %d is not one of world size %d", rank, world_size);
    TLM_TRY(check_data(train_data, c->context_length, "training data"));
    if (val_data) TLM_TRY(check_data(val_data, c->context_length, "validation data"));
    t->model = m;
    t->config = *c;
    t->train_data = train_data;
    t->val_data = val_data;
    t->rank = rank;
    t->world_size = world_size;
    const size_t bt = (size_t)c->batch_size * c->context_length;
    t->inputs = malloc(bt * (size_t)c->grad_accum_steps * sizeof(int32_t)); /* every micro-batch's rows */
    t->targets = malloc(bt * (size_t)c->grad_accum_steps * sizeof(int32_t));
    if (val_data) {
        t->eval_inputs = malloc(bt * c->eval_batches * sizeof(int32_t));
        t->eval_targets = malloc(bt * c->eval_batches * sizeof(int32_t));
    }
    t->scratch = tlm_alloc(m->backend, TLM_CLIP_SCRATCH_BYTES, TLM_MEM_WORKSPACE, "train.scratch");
    if (!t->inputs || !t->targets || (val_data && (!t->eval_inputs || !t->eval_targets)) || !t->scratch) {
        tlm_train_free(t);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of memory for the training batches");
    }
    for (int i = 0; val_data && i < c->eval_batches; i++) { /* the fixed validation set */
        const tlm_batch_draw draw = {c->seed ^ TLM_TRAIN_EVAL_SEED, i, rank, world_size};
        const tlm_status s = tlm_tokens_get_batch(val_data, c->batch_size, c->context_length, draw,
                                                  t->eval_inputs + i * bt, t->eval_targets + i * bt);
        if (s != TLM_OK) {
            tlm_train_free(t);
            return s;
        }
    }
    return TLM_OK;
}

void tlm_train_free(tlm_train *t) {
    if (t->scratch) tlm_free(t->model ? t->model->backend : NULL, t->scratch);
    free(t->inputs);
    free(t->targets);
    free(t->eval_inputs);
    free(t->eval_targets);
    free(t->log);
    memset(t, 0, sizeof *t);
}

static tlm_status log_append(tlm_train *t, const tlm_train_record *r) {
    if (t->log_len == t->log_cap) {
        const int64_t cap = t->log_cap ? 2 * t->log_cap : 1024;
        tlm_train_record *p = realloc(t->log, (size_t)cap * sizeof *p);
        if (!p) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the loss log");
        t->log = p;
        t->log_cap = cap;
    }
    t->log[t->log_len++] = *r;
    return TLM_OK;
}

/* The step's micro-batches (one without accumulation): rows [k B, (k+1) B) of the step's batch each, a
 * forward and a backward adding into the gradients (model.h, tlm_model_set_micro_batch); *loss the mean
 * of their mean losses (equal-sized: the mean over every token of the step). */
static tlm_status micro_batches(tlm_train *t, float *loss) {
    tlm_model *m = t->model;
    const tlm_train_config *c = &t->config;
    const size_t bt = (size_t)c->batch_size * c->context_length;
    double sum = 0;
    for (int k = 0; k < c->grad_accum_steps; k++) {
        float l = 0;
        TLM_TRY(tlm_model_set_micro_batch(m, k));
        TLM_TRY(tlm_model_forward(m, t->inputs + k * bt, t->targets + k * bt, c->batch_size, c->context_length, &l));
        TLM_TRY(tlm_model_backward(m));
        sum += l;
    }
    *loss = (float)(sum / c->grad_accum_steps);
    return TLM_OK;
}

tlm_status tlm_train_step(tlm_train *t, tlm_train_record *rec) {
    tlm_model *m = t->model;
    const tlm_train_config *c = &t->config;
    const int64_t it = t->step; /* CS336's iteration: steps taken before this one */
    tlm_train_record r = {.step = it + 1, .val_loss = NAN, .loss_scale = 1.0f};
    r.lr = tlm_lr_cosine_schedule(it, c->lr_max, c->lr_min, c->warmup_iters, c->cosine_cycle_iters);
    /* one draw of every micro-batch's rows: the batch a step of N x B rows would draw */
    const tlm_batch_draw draw = {c->seed, it, t->rank, t->world_size};
    TLM_TRY(tlm_tokens_get_batch(t->train_data, c->grad_accum_steps * c->batch_size, c->context_length, draw,
                                 t->inputs, t->targets));
    tlm_backend *be = m->backend;
    tlm_step_begin(be, (int)it, false);
    tlm_status s = micro_batches(t, &r.loss);
    if (s == TLM_OK && t->ddp) s = tlm_ddp_sync_grads(t->ddp); /* the ranks' average from here on */
    r.grad_norm = NAN; /* not measured without clipping: a pass over the gradients saved */
    if (s == TLM_OK && c->max_grad_norm > 0) {
        s = t->ddp ? tlm_ddp_grad_norm(t->ddp, t->scratch, &r.grad_norm) : tlm_grad_norm(m, t->scratch, &r.grad_norm);
        if (s == TLM_OK) tlm_clip_to_norm(m, c->max_grad_norm, r.grad_norm, &r.clipped);
    }
    const bool fp16 = m->run.precision == TLM_PRECISION_FP16;
    if (s == TLM_OK && c->max_grad_norm > 0 && !isfinite(r.grad_norm) && !fp16) { /* fp16: the scaler's */
        const char *where = tlm_grad_nonfinite_tensor(m, t->scratch);
        s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "step %lld: the gradient norm is %g in %s (the gradient of '%s' "
                                               "holds NaN/inf at loss %g): the update is not taken",
                     (long long)r.step, r.grad_norm, tlm_precision_name(m->run.precision),
                     where ? where : "?", (double)r.loss);
    }
    if (s == TLM_OK) {
        tlm_adamw_config opt = c->adamw;
        opt.lr = (float)r.lr;
        s = t->ddp ? tlm_ddp_adamw_step(t->ddp, &opt) : tlm_model_adamw_step(m, &opt);
    }
    tlm_step_end(be);
    TLM_TRY(s);
    if (fp16) {
        r.skipped = m->scaler.last_step_skipped;
        r.loss_scale = m->scaler.scale;
    }
    t->step = r.step;
    t->tokens += (int64_t)c->grad_accum_steps * c->batch_size * c->context_length * t->world_size;
    r.tokens = t->tokens;
    TLM_TRY(log_append(t, &r));
    if (rec) *rec = r;
    return TLM_OK;
}

bool tlm_train_eval_due(const tlm_train *t) {
    if (!t->val_data || t->step < 1) return false;
    return t->step == t->config.steps || (t->config.eval_every > 0 && t->step % t->config.eval_every == 0);
}

tlm_status tlm_train_eval(tlm_train *t, double *val_loss) {
    if (!t->val_data) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no validation data to evaluate on");
    const tlm_train_config *c = &t->config;
    const size_t bt = (size_t)c->batch_size * c->context_length;
    double sum = 0; /* equal-sized batches: the mean of their means is the mean over every position */
    for (int i = 0; i < c->eval_batches; i++) {
        float loss = 0;
        TLM_TRY(tlm_model_forward(t->model, t->eval_inputs + i * bt, t->eval_targets + i * bt, c->batch_size,
                                  c->context_length, &loss));
        sum += loss;
    }
    *val_loss = sum / c->eval_batches;
    if (t->log_len > 0 && t->log[t->log_len - 1].step == t->step) t->log[t->log_len - 1].val_loss = *val_loss;
    return TLM_OK;
}
