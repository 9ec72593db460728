/* plan.c — a run's recipe from what its caller was given (train.h): a fresh run's from the defaults
 * and the given values, a resumed run's from its checkpoint with every given value checked against
 * it and the budget extended. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlm/train.h"

static const char *const arg_flags[TLM_TRAIN_NUM_ARGS] = {
    [TLM_TRAIN_ARG_STEPS] = "--steps",
    [TLM_TRAIN_ARG_TOKENS] = "--tokens",
    [TLM_TRAIN_ARG_LR_MAX] = "--lr-max",
    [TLM_TRAIN_ARG_LR_MIN] = "--lr-min",
    [TLM_TRAIN_ARG_WARMUP_ITERS] = "--warmup-iters",
    [TLM_TRAIN_ARG_COSINE_CYCLE_ITERS] = "--cosine-cycle-iters",
    [TLM_TRAIN_ARG_BETA1] = "--beta1",
    [TLM_TRAIN_ARG_BETA2] = "--beta2",
    [TLM_TRAIN_ARG_EPS] = "--eps",
    [TLM_TRAIN_ARG_WEIGHT_DECAY] = "--weight-decay",
    [TLM_TRAIN_ARG_MAX_GRAD_NORM] = "--max-grad-norm",
    [TLM_TRAIN_ARG_EVAL_EVERY] = "--eval-every",
    [TLM_TRAIN_ARG_EVAL_BATCHES] = "--eval-batches",
    [TLM_TRAIN_ARG_BATCH_SIZE] = "--batch-size",
    [TLM_TRAIN_ARG_CONTEXT_LENGTH] = "--context-length",
    [TLM_TRAIN_ARG_GRAD_ACCUM_STEPS] = "--grad-accum-steps",
    [TLM_TRAIN_ARG_SEED] = "--seed",
};

const char *tlm_train_arg_flag(tlm_train_arg arg) {
    return (int)arg >= 0 && arg < TLM_TRAIN_NUM_ARGS ? arg_flags[arg] : "?";
}

#define GIVEN(args, id) ((args)->given[TLM_TRAIN_ARG_##id])
#define VALUE(args, id) ((args)->value[TLM_TRAIN_ARG_##id])

tlm_status tlm_train_plan_fresh(const tlm_train_args *args, const tlm_config *model, int world_size,
                                tlm_train_config *out) {
    const int B = GIVEN(args, BATCH_SIZE) ? (int)VALUE(args, BATCH_SIZE) : 4 * world_size; /* global */
    if (B % world_size != 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--batch-size %d is the global batch: it does not divide over %d "
                        "ranks (give a multiple of %d)", B, world_size, world_size);
    const int T = GIVEN(args, CONTEXT_LENGTH) ? (int)VALUE(args, CONTEXT_LENGTH)
                                              : (model->context_length < 256 ? model->context_length : 256);
    const int accum = GIVEN(args, GRAD_ACCUM_STEPS) ? (int)VALUE(args, GRAD_ACCUM_STEPS) : 1;
    const int64_t steps = GIVEN(args, STEPS) ? (int64_t)VALUE(args, STEPS)
                                             : (int64_t)ceil(VALUE(args, TOKENS) / ((double)B * T * accum));
    tlm_train_config *r = out;
    *r = tlm_train_defaults(steps);
    r->grad_accum_steps = accum;
    r->batch_size = B / world_size; /* this rank's rows */
    r->context_length = T;
    r->seed = args->seed;
    if (GIVEN(args, LR_MAX)) r->lr_max = VALUE(args, LR_MAX);
    if (GIVEN(args, LR_MIN)) r->lr_min = VALUE(args, LR_MIN);
    else if (r->lr_min > r->lr_max) r->lr_min = r->lr_max / 10;
    if (GIVEN(args, WARMUP_ITERS)) r->warmup_iters = (int64_t)VALUE(args, WARMUP_ITERS);
    if (GIVEN(args, COSINE_CYCLE_ITERS)) r->cosine_cycle_iters = (int64_t)VALUE(args, COSINE_CYCLE_ITERS);
    else if (r->cosine_cycle_iters < r->warmup_iters) r->cosine_cycle_iters = r->warmup_iters;
    if (GIVEN(args, BETA1)) r->adamw.beta1 = (float)VALUE(args, BETA1);
    if (GIVEN(args, BETA2)) r->adamw.beta2 = (float)VALUE(args, BETA2);
    if (GIVEN(args, EPS)) r->adamw.eps = (float)VALUE(args, EPS);
    if (GIVEN(args, WEIGHT_DECAY)) r->adamw.weight_decay = (float)VALUE(args, WEIGHT_DECAY);
    if (GIVEN(args, MAX_GRAD_NORM)) r->max_grad_norm = VALUE(args, MAX_GRAD_NORM);
    if (GIVEN(args, EVAL_EVERY)) r->eval_every = (int64_t)VALUE(args, EVAL_EVERY);
    if (GIVEN(args, EVAL_BATCHES)) r->eval_batches = (int)VALUE(args, EVAL_BATCHES);
    return tlm_train_config_check(r);
}

tlm_status tlm_checkpoint_check_value(const tlm_checkpoint *ck, const char *flag, bool given, double value,
                                      double ckpt_value) {
    if (!given || value == ckpt_value) return TLM_OK;
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %.10g contradicts the checkpoint %s, whose run has %.10g: a resumed "
                    "run keeps its recipe (leave the flag out, or start a new run)", flag, value, ck->dir, ckpt_value);
}

/* every given recipe value, the batch, the context and the seed against the checkpoint's */
static tlm_status check_recipe(const tlm_train_args *args, const tlm_checkpoint *ck) {
    const tlm_train_config *r = &ck->config;
    const double ckpt[TLM_TRAIN_NUM_ARGS] = {
        [TLM_TRAIN_ARG_LR_MAX] = r->lr_max,
        [TLM_TRAIN_ARG_LR_MIN] = r->lr_min,
        [TLM_TRAIN_ARG_WARMUP_ITERS] = (double)r->warmup_iters,
        [TLM_TRAIN_ARG_COSINE_CYCLE_ITERS] = (double)r->cosine_cycle_iters,
        [TLM_TRAIN_ARG_BETA1] = r->adamw.beta1,
        [TLM_TRAIN_ARG_BETA2] = r->adamw.beta2,
        [TLM_TRAIN_ARG_EPS] = r->adamw.eps,
        [TLM_TRAIN_ARG_WEIGHT_DECAY] = r->adamw.weight_decay,
        [TLM_TRAIN_ARG_MAX_GRAD_NORM] = r->max_grad_norm,
        [TLM_TRAIN_ARG_EVAL_EVERY] = (double)r->eval_every,
        [TLM_TRAIN_ARG_EVAL_BATCHES] = r->eval_batches,
        [TLM_TRAIN_ARG_BATCH_SIZE] = (double)r->batch_size * ck->world_size,
        [TLM_TRAIN_ARG_CONTEXT_LENGTH] = r->context_length,
        [TLM_TRAIN_ARG_GRAD_ACCUM_STEPS] = r->grad_accum_steps,
        [TLM_TRAIN_ARG_SEED] = (double)r->seed,
    };
    for (int id = TLM_TRAIN_ARG_LR_MAX; id < TLM_TRAIN_NUM_ARGS; id++) {
        double given = id == TLM_TRAIN_ARG_SEED ? (double)args->seed : args->value[id];
        if (id >= TLM_TRAIN_ARG_BETA1 && id <= TLM_TRAIN_ARG_WEIGHT_DECAY) given = (float)given; /* AdamW's floats */
        TLM_TRY(tlm_checkpoint_check_value(ck, arg_flags[id], args->given[id], given, ckpt[id]));
    }
    return TLM_OK;
}

/* every given size, rope_theta and the preset's sizes against the checkpoint's model */
static tlm_status check_model(const tlm_train_args *args, const tlm_checkpoint *ck) {
    static const char *const flags[TLM_TRAIN_NUM_SIZES] = {"--vocab-size", "--d-model", "--d-ff", "--num-layers",
                                                            "--num-heads", "--max-context-length"};
    const tlm_config *m = &ck->model, *p = args->preset_name ? &args->preset : m;
    const int model[TLM_TRAIN_NUM_SIZES] = {m->vocab_size, m->d_model, m->d_ff, m->num_layers, m->num_heads,
                                            m->context_length};
    const int preset[TLM_TRAIN_NUM_SIZES] = {p->vocab_size, p->d_model, p->d_ff, p->num_layers, p->num_heads,
                                             m->context_length}; /* not a size a preset fixes */
    for (int i = 0; i < TLM_TRAIN_NUM_SIZES; i++) {
        const bool given = args->sizes[i] >= 0;
        TLM_TRY(tlm_checkpoint_check_value(ck, flags[i], given, (double)args->sizes[i], model[i]));
        if (args->preset_name && !given && preset[i] != model[i])
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--model %s (%s %d) contradicts the checkpoint %s, whose model "
                            "has %d", args->preset_name, flags[i] + 2, preset[i], ck->dir, model[i]);
    }
    if (!isnan(args->rope_theta))
        TLM_TRY(tlm_checkpoint_check_value(ck, "--rope-theta", true, args->rope_theta, m->rope_theta));
    return TLM_OK;
}

tlm_status tlm_train_plan_resume(const tlm_train_args *given, const tlm_checkpoint *ck, tlm_train_config *out) {
    const char *d = ck->dir;
    tlm_train_args named = *given, *args = &named; /* the preset named, resolved here */
    if (args->preset_name && tlm_config_preset(args->preset_name, &named.preset) != TLM_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tlm_last_error());
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--model: %s", why);
    }
    TLM_TRY(check_model(args, ck));
    TLM_TRY(check_recipe(args, ck));
    if (args->precision_given && args->precision != ck->precision)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--precision %s contradicts the checkpoint %s, whose run trained "
                        "in %s", tlm_precision_name(args->precision), d, tlm_precision_name(ck->precision));
    if (args->val_data_given && !ck->val_data_path)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--val-data contradicts the checkpoint %s, whose run had no "
                        "validation data", d);
    /* the global batch over this run's ranks (the draws are the global batch's rows: any count that divides) */
    const int global = ck->config.batch_size * ck->world_size, world = args->world_size > 0 ? args->world_size
                                                                                             : ck->world_size;
    if (global % world != 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the checkpoint %s's global batch of %d rows does not divide over "
                        "this run's %d ranks: resume it with a number of ranks that divides %d", d, global, world,
                        global);
    tlm_train_config *r = out;
    *r = ck->config;
    r->batch_size = global / world;
    /* the budget may grow */
    if (GIVEN(args, STEPS)) r->steps = (int64_t)VALUE(args, STEPS);
    if (GIVEN(args, TOKENS)) {
        const double per_step = (double)r->grad_accum_steps * global * r->context_length;
        r->steps = (int64_t)ceil(VALUE(args, TOKENS) / per_step);
    }
    if (r->steps <= ck->step)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the budget of %lld steps is already reached: the checkpoint %s "
                        "is at step %lld (give a larger --steps or --tokens to go on)", (long long)r->steps, d,
                        (long long)ck->step);
    return TLM_OK;
}

tlm_status tlm_train_plan_checkpoint_dir(const char *given, const tlm_checkpoint *ck, char **out) {
    *out = NULL;
    if (given && !ck) { /* a new run does not write over another run's checkpoints */
        char latest[4200];
        snprintf(latest, sizeof latest, "%s/latest", given);
        if (access(latest, F_OK) == 0)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--checkpoint-dir %s already holds a run's checkpoints: continue "
                            "it with --resume %s, or save this run elsewhere", given, given);
    }
    if (!given && !ck) return TLM_OK;
    /* a resumed run saves, beside the checkpoint it came from unless told otherwise */
    char *dir = strdup(given ? given : ck->dir);
    if (!dir) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    char *slash = strrchr(dir, '/');
    if (!given && slash) *slash = '\0';
    else if (!given) snprintf(dir, strlen(dir) + 1, "."); /* "step-N": ROOT is here */
    *out = dir;
    return TLM_OK;
}

int64_t tlm_train_plan_save_every(bool given, int64_t value, const tlm_checkpoint *ck) {
    return given ? value : ck ? ck->save_every : 0;
}

tlm_format tlm_train_log_format(const char *log, bool format_given, tlm_format given) {
    if (format_given || !log) return given;
    const size_t n = strlen(log);
    return n > 4 && strcmp(log + n - 4, ".csv") == 0 ? TLM_FORMAT_CSV : TLM_FORMAT_JSON;
}

void tlm_train_plan_files(tlm_io_plan *plan, const char *train_data, const char *val_data, const char *resume,
                          const char *checkpoint_dir, bool checkpoint_dir_given) {
    tlm_io_plan_init(plan);
    tlm_io_plan_input(plan, "--train-data", train_data);
    tlm_io_plan_input(plan, "--val-data", val_data);
    tlm_io_plan_inside(plan, "--resume", resume);
    tlm_io_plan_inside(plan, checkpoint_dir_given ? "--checkpoint-dir" : "--resume (where it saves)", checkpoint_dir);
}
