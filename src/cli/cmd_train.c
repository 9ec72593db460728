/* cmd_train.c — `tlm train`: trains the CS336 model on a token file with the CS336 recipe (train.h),
 * validates on held-out tokens, saves checkpoints and resumes from them bit for bit, and shows what a
 * person watches: a progress line on stderr (step, loss, lr, gradient norm, tokens/s, MFU, ETA) and
 * the loss log through the report writer (table on stdout, CSV or JSON with --log). */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tlm/npy.h"
#include "tlm/output.h"
#include "tlm/train.h"

enum { OPT_TRAIN_DATA = 2000, OPT_VAL_DATA, OPT_STEPS, OPT_TOKENS, OPT_LR_MAX, OPT_LR_MIN, OPT_WARMUP_ITERS,
       OPT_COSINE_ITERS, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD, OPT_MAX_GRAD_NORM, OPT_EVAL_EVERY, OPT_EVAL_BATCHES,
       OPT_SAVE_EVERY, OPT_CKPT_DIR, OPT_KEEP, OPT_RESUME, OPT_LOG, OPT_LOG_EVERY, OPT_PEAK, OPT_NUM };

/* the options as given; a recipe option's `given` says whether it appeared (a resumed run refuses one
 * that contradicts the checkpoint) */
typedef struct {
    const char *train_data, *val_data, *ckpt_dir, *resume, *log;
    double num[OPT_NUM - OPT_TRAIN_DATA];
    bool given[OPT_NUM - OPT_TRAIN_DATA];
} train_opts;
#define NUM(o, id) ((o)->num[(id) - OPT_TRAIN_DATA])
#define GIVEN(o, id) ((o)->given[(id) - OPT_TRAIN_DATA])

static const cli_use train_uses[] = {
    CLI_USES_RUN(/* --model */ "small (a resumed run: the checkpoint's)",
                 /* --batch-size */ "4; under a launcher the global batch, 4 a rank",
                 /* --context-length */ "256, or the model's context_length when shorter"),
    {CLI_CUDA_GRAPH, "on", 1},
    {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
    {CLI_FORMAT, "json with --log FILE (csv for FILE.csv); table on stdout", 1},
    CLI_USES_DDP,
    {CLI_TIMEOUT, "1800 (longer than rank 0's slowest checkpoint save)", 1},
};

static const struct option train_options[] = {
    {"train-data", required_argument, 0, OPT_TRAIN_DATA}, {"val-data", required_argument, 0, OPT_VAL_DATA},
    {"steps", required_argument, 0, OPT_STEPS},           {"tokens", required_argument, 0, OPT_TOKENS},
    {"lr-max", required_argument, 0, OPT_LR_MAX},         {"lr-min", required_argument, 0, OPT_LR_MIN},
    {"warmup-iters", required_argument, 0, OPT_WARMUP_ITERS},
    {"cosine-cycle-iters", required_argument, 0, OPT_COSINE_ITERS},
    {"beta1", required_argument, 0, OPT_BETA1},           {"beta2", required_argument, 0, OPT_BETA2},
    {"eps", required_argument, 0, OPT_EPS},               {"weight-decay", required_argument, 0, OPT_WD},
    {"max-grad-norm", required_argument, 0, OPT_MAX_GRAD_NORM},
    {"eval-every", required_argument, 0, OPT_EVAL_EVERY}, {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
    {"save-every", required_argument, 0, OPT_SAVE_EVERY}, {"checkpoint-dir", required_argument, 0, OPT_CKPT_DIR},
    {"keep-checkpoints", required_argument, 0, OPT_KEEP}, {"resume", required_argument, 0, OPT_RESUME},
    {"log", required_argument, 0, OPT_LOG},               {"log-every", required_argument, 0, OPT_LOG_EVERY},
    {"peak-tflops", required_argument, 0, OPT_PEAK},      {0, 0, 0, 0}};

/* the numeric options: flag name, domain, whether a whole number */
static const struct {
    int id;
    const char *flag;
    double lo, hi;
    bool whole;
} numeric[] = {
    {OPT_STEPS, "--steps", 1, 1e15, true},           {OPT_TOKENS, "--tokens", 1, 1e18, true},
    {OPT_LR_MAX, "--lr-max", 0, 10, false},          {OPT_LR_MIN, "--lr-min", 0, 10, false},
    {OPT_WARMUP_ITERS, "--warmup-iters", 0, 1e15, true}, {OPT_COSINE_ITERS, "--cosine-cycle-iters", 0, 1e15, true},
    {OPT_BETA1, "--beta1", 0, 1, false},             {OPT_BETA2, "--beta2", 0, 1, false},
    {OPT_EPS, "--eps", FLT_MIN, 1, false},           {OPT_WD, "--weight-decay", 0, 1, false},
    {OPT_MAX_GRAD_NORM, "--max-grad-norm", 0, 1e30, false}, {OPT_EVAL_EVERY, "--eval-every", 0, 1e15, true},
    {OPT_EVAL_BATCHES, "--eval-batches", 1, 1 << 20, true}, {OPT_SAVE_EVERY, "--save-every", 1, 1e15, true},
    {OPT_KEEP, "--keep-checkpoints", 0, 1 << 20, true}, {OPT_LOG_EVERY, "--log-every", 1, 1e15, true},
    {OPT_PEAK, "--peak-tflops", 1e-6, 1e9, false},
};

static bool train_handle(void *user, int opt, const char *arg) {
    train_opts *o = user;
    const char **paths[] = {[OPT_TRAIN_DATA - OPT_TRAIN_DATA] = &o->train_data,
                            [OPT_VAL_DATA - OPT_TRAIN_DATA] = &o->val_data,
                            [OPT_CKPT_DIR - OPT_TRAIN_DATA] = &o->ckpt_dir,
                            [OPT_RESUME - OPT_TRAIN_DATA] = &o->resume,
                            [OPT_LOG - OPT_TRAIN_DATA] = &o->log,
                            [OPT_NUM - OPT_TRAIN_DATA - 1] = NULL};
    if (opt < OPT_TRAIN_DATA || opt >= OPT_NUM) return false;
    GIVEN(o, opt) = true;
    if (paths[opt - OPT_TRAIN_DATA]) {
        *paths[opt - OPT_TRAIN_DATA] = arg;
        return true;
    }
    for (size_t i = 0; i < sizeof numeric / sizeof numeric[0]; i++) {
        if (numeric[i].id != opt) continue;
        double x;
        if (!cli_parse_double("train", numeric[i].flag, arg, numeric[i].lo, numeric[i].hi, &x)) return false;
        if (numeric[i].whole && x != floor(x)) {
            cli_error("train", "%s: '%s' is not a whole number", numeric[i].flag, arg);
            return false;
        }
        if ((opt == OPT_BETA1 || opt == OPT_BETA2) && x >= 1) {
            cli_error("train", "%s: %s is outside [0, 1)", numeric[i].flag, arg);
            return false;
        }
        NUM(o, opt) = x;
        return true;
    }
    return false;
}

static const cli_command train_cmd = {
    .help =
        "Usage: tlm train --train-data FILE (--steps N | --tokens N) [options]\n"
        "       tlm train --resume DIR [options]\n"
        "Trains the CS336 model with the CS336 recipe: each step a batch of rows at random offsets of the token\n"
        "file, AdamW at the cosine schedule's learning rate, the gradients clipped to a global L2 norm; the\n"
        "validation loss on a fixed set of held-out batches; checkpoints that resume bit for bit (CPU).\n"
        "\n"
        "Data and budget:\n"
        "      --train-data FILE     token ids: .npy (1-D integer) or raw uint16 .bin (np.memmap); every id below\n"
        "                            the vocabulary size (tools/make_tokens.py makes one from text)\n"
        "      --val-data FILE       held-out token ids (same formats) for the validation loss\n"
        "      --steps N             optimizer steps of the whole run\n"
        "      --tokens N            instead: train on N tokens (steps = ceil(N / (batch x context)))\n"
        "Recipe (CS336 get_lr_cosine_schedule, gradient_clipping, AdamW):\n"
        "      --lr-max X            peak learning rate (default 1e-3)\n"
        "      --lr-min X            final learning rate (default 1e-4)\n"
        "      --warmup-iters N      linear warm-up from 0 (default 5% of the steps)\n"
        "      --cosine-cycle-iters N  the step where the cosine reaches lr-min (default: the steps)\n"
        "      --beta1 X --beta2 X --eps X --weight-decay X   AdamW (defaults 0.9, 0.999, 1e-8, 0.01)\n"
        "      --max-grad-norm X     clip the global gradient norm to X (default 1.0; 0: no clipping, and the norm\n"
        "                            is not measured: a pass over the gradients saved)\n"
        "      --eval-every N        validation every N steps and after the last (default 100; 0: after the last)\n"
        "      --eval-batches N      batches of the fixed validation set (default 10)\n"
        "Checkpoints (DIR/step-NNNNNNNN/{weights,optimizer}.safetensors + state.json, DIR/latest):\n"
        "      --save-every N        save every N steps and after the last (needs --checkpoint-dir)\n"
        "      --checkpoint-dir DIR  where to save (created if missing; default with --resume: its DIR)\n"
        "      --keep-checkpoints N  keep the newest N step directories (default 0: all)\n"
        "      --resume DIR          continue from DIR's latest checkpoint (or a step directory): the model,\n"
        "                            recipe and data are the checkpoint's; a flag that contradicts them is refused;\n"
        "                            --steps / --tokens may extend the budget\n"
        "Output:\n"
        "      --log FILE            the loss log (every logged step: loss, val_loss, lr, grad_norm, tokens/s,\n"
        "                            MFU) as --format (json; csv for *.csv); stdout shows the table\n"
        "      --log-every N         a log row every N steps (default 10; eval steps and the last always)\n"
        "      --peak-tflops X       the device's dense peak for MFU (default: H100/H200 SXM 989 bf16/fp16, 494\n"
        "                            tf32, 67 fp32; H100 PCIe 756/378/51; otherwise MFU is n/a, as on the CPU)\n"
        "SIGINT/SIGTERM stop the run after the current step (saving a checkpoint when --checkpoint-dir is set and\n"
        "committing the log); a second one ends it at once.\n"
        "Data parallelism: started by a launcher (mpirun -np 2 tlm train ...; srun), one process per GPU (NCCL) or\n"
        "per share of the CPU's cores (MPI, --device cpu), every process with the same flags: --batch-size is the\n"
        "global batch, each rank draws its rows; the gradients are averaged as --ddp says; rank 0 alone prints, logs\n"
        "and saves checkpoints, which resume with as many ranks. A rank that dies or hangs ends the run, named.\n\n",
    .name = "train", CLI_USES(train_uses), .options = train_options, .handle = train_handle};

/* ---- the device's peak, for MFU ----------------------------------------------------------------------- */

/* dense TFLOP/s of the GEMMs the precision mode runs on; 0: unknown (MFU n/a) */
static double default_peak(const tlm_backend *be, tlm_precision p) {
    if (be->kind != TLM_DEVICE_CUDA) return 0;
    const char *d = be->description;
    const bool pcie = strstr(d, "PCIe") != NULL, hopper = strstr(d, "H100") || strstr(d, "H200");
    if (!hopper) return 0;
    if (p == TLM_PRECISION_FP32) return pcie ? 51 : 67;
    if (p == TLM_PRECISION_TF32) return pcie ? 378 : 494;
    return pcie ? 756 : 989; /* bf16, fp16 */
}

/* ---- stop on a signal ------------------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
    stop_signal = sig;
    signal(sig, SIG_DFL); /* a second one ends the process */
}

/* ---- resolving the run --------------------------------------------------------------------------------------- */

typedef struct {
    int world; /* ranks: --batch-size is the global batch, recipe.batch_size a rank's rows */
    tlm_config model;
    char model_name[48];
    tlm_train_config recipe;
    tlm_precision precision;
    tlm_attention attention;
    const char *train_path, *val_path;
    const char *ckpt_dir;
    int64_t save_every, log_every;
    int keep;
} run_plan;

/* a recipe flag given with a resumed run must say what the checkpoint says */
static bool same_or_refuse(const char *flag, bool given, double flag_value, double ckpt_value, const char *dir) {
    if (!given || flag_value == ckpt_value) return true;
    cli_error("train", "%s %.10g contradicts the checkpoint %s, whose run has %.10g: a resumed run keeps its recipe "
                       "(leave the flag out, or start a new run)", flag, flag_value, dir, ckpt_value);
    return false;
}

/* the run's plan from a checkpoint, every given flag checked against it */
static bool plan_resume(const cli_args *a, const train_opts *o, const tlm_checkpoint *ck, run_plan *p) {
    const char *d = ck->dir;
    const tlm_config *m = &ck->model;
    p->model = *m;
    snprintf(p->model_name, sizeof p->model_name, "checkpoint");
    tlm_config preset = *m; /* --model's when given */
    if (a->num_models) {
        if (tlm_config_preset(a->models[0], &preset) != TLM_OK) {
            cli_error("train", "--model: %s", tlm_last_error());
            return false;
        }
        snprintf(p->model_name, sizeof p->model_name, "%s", a->models[0]);
    }
    cli_size sizes[CLI_NUM_SIZES + 1];
    cli_sizes(a, &preset, m, sizes);
    const int ctx = m->context_length; /* not a size --model fixes: only the flag is checked */
    sizes[CLI_NUM_SIZES] = (cli_size){"--max-context-length", a->shape.max_context, ctx, ctx};
    for (int i = 0; i < CLI_NUM_SIZES + 1; i++) {
        const cli_size *s = &sizes[i];
        if (!same_or_refuse(s->flag, s->given != CLI_NOT_GIVEN, (double)s->given, s->model, d)) return false;
        if (a->num_models && s->given == CLI_NOT_GIVEN && s->preset != s->model) {
            cli_error("train", "--model %s (%s %d) contradicts the checkpoint %s, whose model has %d", a->models[0],
                      s->flag + 2, s->preset, d, s->model);
            return false;
        }
    }
    if (!isnan(a->shape.rope_theta) && !same_or_refuse("--rope-theta", true, a->shape.rope_theta, m->rope_theta, d))
        return false;
    tlm_train_config *r = &p->recipe;
    *r = ck->config;
    const struct {
        int id;
        double ckpt;
    } recipe[] = {{OPT_LR_MAX, r->lr_max}, {OPT_LR_MIN, r->lr_min}, {OPT_WARMUP_ITERS, (double)r->warmup_iters},
                  {OPT_COSINE_ITERS, (double)r->cosine_cycle_iters}, {OPT_BETA1, r->adamw.beta1},
                  {OPT_BETA2, r->adamw.beta2}, {OPT_EPS, r->adamw.eps}, {OPT_WD, r->adamw.weight_decay},
                  {OPT_MAX_GRAD_NORM, r->max_grad_norm}, {OPT_EVAL_EVERY, (double)r->eval_every},
                  {OPT_EVAL_BATCHES, r->eval_batches}};
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        const int id = recipe[i].id;
        double given = NUM(o, id);
        if (id >= OPT_BETA1 && id <= OPT_WD) given = (float)given; /* AdamW keeps floats */
        const char *flag = NULL;
        for (size_t k = 0; k < sizeof numeric / sizeof numeric[0]; k++)
            if (numeric[k].id == id) flag = numeric[k].flag;
        if (!same_or_refuse(flag, GIVEN(o, id), given, recipe[i].ckpt, d)) return false;
    }
    if (!same_or_refuse("--batch-size", a->num_batch_sizes > 0, a->num_batch_sizes ? a->batch_sizes[0] : 0,
                        (double)r->batch_size * ck->world_size, d) ||
        !same_or_refuse("--context-length", a->num_contexts > 0, a->num_contexts ? a->contexts[0] : 0,
                        r->context_length, d) ||
        !same_or_refuse("--seed", a->given[CLI_SEED], (double)a->seed, (double)r->seed, d))
        return false;
    p->precision = ck->precision;
    if (a->num_precisions && a->precisions[0] != ck->precision) {
        cli_error("train", "--precision %s contradicts the checkpoint %s, whose run trained in %s",
                  tlm_precision_name(a->precisions[0]), d, tlm_precision_name(ck->precision));
        return false;
    }
    p->attention = a->given[CLI_ATTENTION] ? a->attention : ck->attention;
    /* the data: the checkpoint's files unless given; either way the token counts must be its */
    p->train_path = o->train_data ? o->train_data : ck->train_data_path;
    p->val_path = o->val_data ? o->val_data : ck->val_data_path;
    if (o->val_data && !ck->val_data_path) {
        cli_error("train", "--val-data contradicts the checkpoint %s, whose run had no validation data", d);
        return false;
    }
    /* the budget may grow */
    if (GIVEN(o, OPT_STEPS)) r->steps = (int64_t)NUM(o, OPT_STEPS);
    if (GIVEN(o, OPT_TOKENS)) {
        const double per_step = (double)r->batch_size * r->context_length * ck->world_size;
        r->steps = (int64_t)ceil(NUM(o, OPT_TOKENS) / per_step);
    }
    if (r->steps <= ck->step) {
        cli_error("train", "the budget of %lld steps is already reached: the checkpoint %s is at step %lld (give a "
                           "larger --steps or --tokens to go on)", (long long)r->steps, d, (long long)ck->step);
        return false;
    }
    return true;
}

/* the run's plan from the flags alone */
static bool plan_fresh(const cli_args *a, const train_opts *o, run_plan *p) {
    if (!o->train_data) {
        cli_error("train", "give --train-data FILE (or --resume DIR)");
        return false;
    }
    if (!GIVEN(o, OPT_STEPS) && !GIVEN(o, OPT_TOKENS)) {
        cli_error("train", "give the budget: --steps N or --tokens N");
        return false;
    }
    const char *name = a->num_models ? a->models[0] : "small";
    if (!cli_model_config("train", a, name, &p->model, p->model_name, sizeof p->model_name)) return false;
    const int B = a->num_batch_sizes ? a->batch_sizes[0] : 4 * p->world; /* global */
    if (B % p->world != 0) {
        cli_error("train", "--batch-size %d is the global batch: it does not divide over %d ranks (give a multiple of "
                           "%d)", B, p->world, p->world);
        return false;
    }
    const int T = a->num_contexts ? a->contexts[0] : (p->model.context_length < 256 ? p->model.context_length : 256);
    const int64_t steps = GIVEN(o, OPT_STEPS) ? (int64_t)NUM(o, OPT_STEPS)
                                              : (int64_t)ceil(NUM(o, OPT_TOKENS) / ((double)B * T));
    tlm_train_config *r = &p->recipe;
    *r = tlm_train_defaults(steps);
    r->batch_size = B / p->world; /* this rank's rows */
    r->context_length = T;
    r->seed = a->seed;
    if (GIVEN(o, OPT_LR_MAX)) r->lr_max = NUM(o, OPT_LR_MAX);
    if (GIVEN(o, OPT_LR_MIN)) r->lr_min = NUM(o, OPT_LR_MIN);
    else if (r->lr_min > r->lr_max) r->lr_min = r->lr_max / 10;
    if (GIVEN(o, OPT_WARMUP_ITERS)) r->warmup_iters = (int64_t)NUM(o, OPT_WARMUP_ITERS);
    if (GIVEN(o, OPT_COSINE_ITERS)) r->cosine_cycle_iters = (int64_t)NUM(o, OPT_COSINE_ITERS);
    else if (r->cosine_cycle_iters < r->warmup_iters) r->cosine_cycle_iters = r->warmup_iters;
    if (GIVEN(o, OPT_BETA1)) r->adamw.beta1 = (float)NUM(o, OPT_BETA1);
    if (GIVEN(o, OPT_BETA2)) r->adamw.beta2 = (float)NUM(o, OPT_BETA2);
    if (GIVEN(o, OPT_EPS)) r->adamw.eps = (float)NUM(o, OPT_EPS);
    if (GIVEN(o, OPT_WD)) r->adamw.weight_decay = (float)NUM(o, OPT_WD);
    if (GIVEN(o, OPT_MAX_GRAD_NORM)) r->max_grad_norm = NUM(o, OPT_MAX_GRAD_NORM);
    if (GIVEN(o, OPT_EVAL_EVERY)) r->eval_every = (int64_t)NUM(o, OPT_EVAL_EVERY);
    if (GIVEN(o, OPT_EVAL_BATCHES)) r->eval_batches = (int)NUM(o, OPT_EVAL_BATCHES);
    if (tlm_train_config_check(r) != TLM_OK) {
        cli_error("train", "%s", tlm_last_error());
        return false;
    }
    p->precision = a->num_precisions ? a->precisions[0] : TLM_PRECISION_FP32;
    p->attention = a->attention;
    p->train_path = o->train_data;
    p->val_path = o->val_data;
    return true;
}

/* ---- the log ------------------------------------------------------------------------------------------------- */

static const tlm_column log_columns[] = {
    {"step", TLM_FIELD_INT, "step", "", 7, 0, 0, TLM_COL_KEY},
    {"tokens", TLM_FIELD_INT, "tokens", "", 11, 0, 0, 0},
    {"loss", TLM_FIELD_NUM, "loss", "", 8, 4, 0, 0},
    {"val_loss", TLM_FIELD_NUM, "val loss", "", 8, 4, 0, 0},
    {"lr", TLM_FIELD_NUM, "lr", "", 9, 2, 0, TLM_COL_SCI},
    {"grad_norm", TLM_FIELD_NUM, "grad norm", "", 9, 3, 0, 0},
    {"clipped", TLM_FIELD_BOOL, "clip", "", 4, 0, 0, 0},
    {"loss_scale", TLM_FIELD_NUM, "scale", "", 8, 0, 0, 0},
    {"skipped", TLM_FIELD_BOOL, "skip", "", 4, 0, 0, 0},
    TLM_COL_MS("step_ms", "step", 9, 2),
    TLM_COL_MS("comm_ms", "comm", 8, 2),
    {"comm_share", TLM_FIELD_NUM, "comm", "%", 5, 1, 100, 0},
    {"tokens_per_s", TLM_FIELD_NUM, "tokens/s", "", 10, 0, 0, 0},
    {"mfu", TLM_FIELD_NUM, "MFU", "%", 6, 1, 100, 0},
    {"elapsed_s", TLM_FIELD_NUM, "elapsed", "s", 8, 1, 0, 0},
};

/* the figures of the steps since the last row (NaN step_ms: none, a row replayed from a checkpoint) */
typedef struct {
    double step_ms, tokens_per_s, mfu, elapsed_s;
    double comm_ms; /* several ranks: the communication a step waited for (ddp.h); NaN alone */
} window_stats;

static void log_row(tlm_report *rep, const tlm_train_record *e, const window_stats *w, bool fp16, bool norm) {
    tlm_report_row_begin(rep);
    tlm_report_int(rep, "step", e->step);
    tlm_report_int(rep, "tokens", e->tokens);
    tlm_report_num(rep, "loss", e->loss);
    if (!isnan(e->val_loss)) tlm_report_num(rep, "val_loss", e->val_loss);
    tlm_report_num(rep, "lr", e->lr);
    if (norm) { /* measured only with clipping */
        tlm_report_num(rep, "grad_norm", e->grad_norm);
        tlm_report_bool(rep, "clipped", e->clipped);
    }
    if (fp16) {
        tlm_report_num(rep, "loss_scale", e->loss_scale);
        tlm_report_bool(rep, "skipped", e->skipped);
    }
    if (w && !isnan(w->step_ms)) {
        tlm_report_num(rep, "step_ms", w->step_ms);
        tlm_report_num(rep, "tokens_per_s", w->tokens_per_s);
        if (!isnan(w->mfu)) tlm_report_num(rep, "mfu", w->mfu);
        if (!isnan(w->comm_ms)) {
            tlm_report_num(rep, "comm_ms", w->comm_ms);
            tlm_report_num(rep, "comm_share", w->comm_ms / w->step_ms);
        }
        tlm_report_num(rep, "elapsed_s", w->elapsed_s);
    }
    tlm_report_row_end(rep);
}

/* a row every log_every steps, at each evaluation and at the last step */
static bool row_due(const tlm_train_record *e, int64_t log_every, int64_t last) {
    return e->step % log_every == 0 || !isnan(e->val_loss) || e->step == last;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void format_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* The progress line on stderr: rewritten in place on a terminal, a plain line otherwise. */
typedef struct {
    bool tty, shown;
} progress;

static void progress_clear(progress *pr) {
    if (pr->shown) fputs("\r\033[K", stderr);
    pr->shown = false;
}

static void progress_show(progress *pr, const tlm_train_record *e, int64_t steps, const window_stats *w,
                          double eta_s) {
    char eta[32], mfu[16];
    format_eta(eta_s, eta, sizeof eta);
    if (isnan(w->mfu)) snprintf(mfu, sizeof mfu, "n/a");
    else snprintf(mfu, sizeof mfu, "%.1f%%", 100 * w->mfu);
    progress_clear(pr);
    char norm[48] = "";
    if (!isnan(e->grad_norm) || e->clipped)
        snprintf(norm, sizeof norm, " grad norm %.3f%s", e->grad_norm, e->clipped ? " (clipped)" : "");
    fprintf(stderr, "tlm train: step %lld/%lld loss %.4f lr %.2e%s | %.0f tok/s MFU %s | ETA %s%s", (long long)e->step,
            (long long)steps, (double)e->loss, e->lr, norm, w->tokens_per_s, mfu, eta, pr->tty ? "" : "\n");
    pr->shown = pr->tty;
    fflush(stderr);
}

/* ---- several ranks ------------------------------------------------------------------------------------------------ */

/* *flag = whether it is set on any rank */
static tlm_status any_rank(tlm_comm *c, bool *flag) {
    int mine = *flag, *all = malloc(sizeof(int) * (size_t)c->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_status s = tlm_comm_host_all_gather(c, &mine, all, sizeof mine);
    for (int r = 0; s == TLM_OK && r < c->world_size; r++) *flag |= all[r] != 0;
    free(all);
    return s;
}

/* "r0 1.234 GiB, r1 1.234 GiB": every rank's tracked peak */
static tlm_status peaks_per_rank(tlm_comm *c, tlm_backend *be, char *buf, size_t n) {
    uint64_t mine = tlm_mem_stats_now(be).peak_total, *all = malloc(sizeof(uint64_t) * (size_t)c->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_status s = tlm_comm_host_all_gather(c, &mine, all, sizeof mine);
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; s == TLM_OK && r < c->world_size && used < n; r++)
        used += (size_t)snprintf(buf + used, n - used, "%sr%d %.3f GiB", r ? ", " : "", r, (double)all[r] / 1073741824.0);
    free(all);
    return s;
}

/* ---- the command ----------------------------------------------------------------------------------------------- */

static bool load_tokens(const char *path, const char *what, int vocab, int64_t expect, const char *ckpt,
                        tlm_tokens *t) {
    if (tlm_tokens_load(path, vocab, t) != TLM_OK) {
        cli_error("train", "%s: %s", what, tlm_last_error()); /* the message names the file */
        return false;
    }
    if (expect > 0 && t->n != expect) {
        cli_error("train", "%s %s holds %lld tokens, but the checkpoint %s was trained on %lld: not the same data",
                  what, path, (long long)t->n, ckpt, (long long)expect);
        tlm_tokens_free(t);
        return false;
    }
    return true;
}

int cmd_train(int argc, char **argv) {
    const char *cmd = "train";
    train_opts given = {0}, *o = &given;
    cli_args a;
    int rc = cli_parse(&train_cmd, o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    run_plan plan = {0};
    tlm_checkpoint ck;
    bool have_ck = false;
    tlm_tokens train_data = {0}, val_data = {0};
    tlm_backend *be = NULL;
    tlm_model *m = NULL;
    tlm_train t = {0};
    tlm_report *rep = NULL;
    bool have_train = false;
    char *resume_root = NULL;
    tlm_ddp *ddp = NULL;
    bool agreed = false;  /* several ranks: they met after setting up (a failure before is met there) */
    bool together = true; /* every rank ends here alike (else a failure of this rank's alone: no goodbye barrier) */

    /* data parallelism: the world the launcher made (a world of one without one) */
    tlm_ddp_process proc;
    const int joined = cli_join(cmd, &a, 1800, &proc);
    if (joined >= 0) {
        cli_args_free(&a);
        return joined;
    }
    const int rank = proc.world.rank;
    plan.world = proc.world.world_size;
    if (rank != 0) o->log = NULL; /* rank 0 alone prints, logs and saves */
    tlm_ddp_config dcfg = tlm_ddp_defaults();
    if (a.num_ddp_modes) dcfg.mode = a.ddp_modes[0];
    if (a.num_bucket_mbs) dcfg.bucket_mb = a.bucket_mbs[0];
    if (a.num_zeros) dcfg.zero = a.zeros[0];
    if (a.num_grad_reduce_dtypes) dcfg.reduce_dtype = a.grad_reduce_dtypes[0];
    if (dcfg.zero && (o->ckpt_dir || o->resume || GIVEN(o, OPT_SAVE_EVERY))) {
        cli_error(cmd, "--zero 1 conflicts with checkpoints (--save-every, --checkpoint-dir, --resume): the sharded AdamW "
                       "state is not gathered into a checkpoint yet (train with --zero 0 to save)");
        goto out;
    }

    if (GIVEN(o, OPT_STEPS) && GIVEN(o, OPT_TOKENS)) {
        cli_error(cmd, "--steps conflicts with --tokens: give the budget one way");
        goto out;
    }
    if (GIVEN(o, OPT_SAVE_EVERY) && !o->ckpt_dir && !o->resume) {
        cli_error(cmd, "--save-every needs --checkpoint-dir DIR");
        goto out;
    }
    if (o->ckpt_dir && !GIVEN(o, OPT_SAVE_EVERY)) {
        cli_error(cmd, "--checkpoint-dir needs --save-every N");
        goto out;
    }
    if (o->resume) {
        if (tlm_checkpoint_open(o->resume, &ck) != TLM_OK) {
            cli_error(cmd, "--resume %s: %s", o->resume, tlm_last_error());
            rc = TLM_EXIT_FAILURE;
            goto out;
        }
        have_ck = true;
        if (ck.world_size != plan.world) {
            cli_error(cmd, "the checkpoint %s was written by a run of %d rank%s, this run has %d: resume it with as many "
                           "(the batch draws are each rank's)", ck.dir, ck.world_size, ck.world_size == 1 ? "" : "s",
                      plan.world);
            goto out;
        }
        if (!plan_resume(&a, o, &ck, &plan)) goto out;
    } else if (!plan_fresh(&a, o, &plan)) {
        goto out;
    }
    /* a resumed run saves beside the checkpoint it came from unless told otherwise */
    resume_root = have_ck ? strdup(ck.dir) : NULL;
    if (resume_root && strrchr(resume_root, '/')) *strrchr(resume_root, '/') = '\0';
    else if (resume_root) snprintf(resume_root, strlen(resume_root) + 1, "."); /* "step-N": ROOT is here */
    plan.ckpt_dir = o->ckpt_dir ? o->ckpt_dir : GIVEN(o, OPT_SAVE_EVERY) ? resume_root : NULL;
    if (o->ckpt_dir && !have_ck) { /* a new run does not write over another run's checkpoints */
        char latest[4200];
        snprintf(latest, sizeof latest, "%s/latest", o->ckpt_dir);
        if (access(latest, F_OK) == 0) {
            cli_error(cmd, "--checkpoint-dir %s already holds a run's checkpoints: continue it with --resume %s, or "
                           "save this run elsewhere", o->ckpt_dir, o->ckpt_dir);
            goto out;
        }
    }
    plan.save_every = GIVEN(o, OPT_SAVE_EVERY) ? (int64_t)NUM(o, OPT_SAVE_EVERY) : 0;
    plan.keep = (int)NUM(o, OPT_KEEP);
    plan.log_every = GIVEN(o, OPT_LOG_EVERY) ? (int64_t)NUM(o, OPT_LOG_EVERY) : 10;
    if (o->val_data == NULL && !have_ck && (GIVEN(o, OPT_EVAL_EVERY) || GIVEN(o, OPT_EVAL_BATCHES))) {
        cli_error(cmd, "--eval-every/--eval-batches need --val-data FILE");
        goto out;
    }
    const char *inputs[] = {plan.train_path, plan.val_path};
    for (int i = 0; i < 2; i++) tlm_output_input(inputs[i]);

    /* the data, checked against the vocabulary (and a resumed run's token counts) */
    rc = TLM_EXIT_FAILURE;
    const char *ckdir = have_ck ? ck.dir : NULL;
    if (!load_tokens(plan.train_path, "training data", plan.model.vocab_size, have_ck ? ck.train_data_tokens : 0,
                     ckdir, &train_data))
        goto out;
    if (plan.val_path && !load_tokens(plan.val_path, "validation data", plan.model.vocab_size,
                                      have_ck ? ck.val_data_tokens : 0, ckdir, &val_data))
        goto out;

    /* the model and the training state */
    if (!(be = proc.comm ? proc.be : cli_create_backend(cmd, &a))) goto out;
    const tlm_run_config run = {.precision = plan.precision, .attention = plan.attention, .cuda_graphs = a.cuda_graphs};
    if (tlm_attention_check(be, &plan.model, plan.precision, plan.attention) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        rc = TLM_EXIT_USAGE;
        goto out;
    }
    tlm_status s = tlm_model_create(&m, &plan.model, &run, be);
    if (s == TLM_OK && !have_ck) s = tlm_model_init_random(m, a.seed);
    if (s == TLM_OK)
        s = tlm_train_init(&t, m, &plan.recipe, &train_data, plan.val_path ? &val_data : NULL, rank, plan.world);
    have_train = s == TLM_OK;
    if (s == TLM_OK && have_ck) s = tlm_checkpoint_restore(&t, &ck);
    if (s != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto out;
    }

    /* the log */
    tlm_format fmt = a.format;
    if (o->log && !a.given[CLI_FORMAT]) {
        const size_t n = strlen(o->log);
        fmt = n > 4 && strcmp(o->log + n - 4, ".csv") == 0 ? TLM_FORMAT_CSV : TLM_FORMAT_JSON;
    }
    if (tlm_report_open(&rep, "tlm train", fmt, o->log, argc, argv) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto out;
    }
    if (proc.comm) { /* every rank set up alike (or all stop here), then the reducer: rank 0's weights everywhere */
        agreed = true;
        if ((s = tlm_ddp_agree(proc.comm, TLM_OK)) != TLM_OK) {
            if (rank == 0) cli_error(cmd, "%s", tlm_last_error());
            goto out;
        }
        char text[1024];
        snprintf(text, sizeof text, "model %d %d %d %d %d %d; recipe batch %d ctx %d steps %lld seed %llu lr %g %g; %s; "
                 "data %lld %lld", plan.model.vocab_size, plan.model.d_model, plan.model.d_ff, plan.model.num_layers,
                 plan.model.num_heads, plan.model.context_length, plan.recipe.batch_size, plan.recipe.context_length,
                 (long long)plan.recipe.steps, (unsigned long long)plan.recipe.seed, plan.recipe.lr_max,
                 plan.recipe.lr_min, tlm_precision_name(plan.precision), (long long)train_data.n, (long long)val_data.n);
        s = tlm_comm_check_same(proc.comm, "the run's configuration", text);
        if (s == TLM_OK) s = tlm_ddp_create(&ddp, m, proc.comm, &dcfg);
        if (s != TLM_OK) { /* every rank failed alike */
            if (rank == 0) cli_error(cmd, "%s", tlm_last_error());
            rc = s == TLM_ERR_INVALID_ARGUMENT || s == TLM_ERR_UNSUPPORTED ? TLM_EXIT_USAGE : TLM_EXIT_FAILURE;
            goto out;
        }
        t.ddp = ddp;
    }

    const tlm_train_config *r = &t.config;
    const bool fp16 = plan.precision == TLM_PRECISION_FP16;
    const double peak = GIVEN(o, OPT_PEAK) ? NUM(o, OPT_PEAK) : default_peak(be, plan.precision);
    const double step_flops = 3.0 * tlm_config_forward_flops(&plan.model, r->batch_size, r->context_length);
    cli_report_device(rep, be);
    tlm_report_meta_str(rep, "model", plan.model_name);
    tlm_report_meta_int(rep, "params", tlm_config_num_params(&plan.model));
    tlm_report_meta_int(rep, "vocab_size", plan.model.vocab_size);
    tlm_report_meta_int(rep, "d_model", plan.model.d_model);
    tlm_report_meta_int(rep, "num_layers", plan.model.num_layers);
    tlm_report_meta_int(rep, "batch_size", (int64_t)r->batch_size * plan.world);
    if (proc.comm) {
        char hosts[512];
        tlm_comm_describe_hosts(hosts, sizeof hosts);
        tlm_report_meta_int(rep, "ranks", plan.world);
        tlm_report_meta_str(rep, "ranks_where", hosts);
        tlm_report_meta_int(rep, "batch_size_per_rank", r->batch_size);
        tlm_report_meta_str(rep, "ddp", tlm_ddp_mode_name(dcfg.mode));
        if (dcfg.mode == TLM_DDP_BUCKETED) tlm_report_meta_num(rep, "bucket_mb", dcfg.bucket_mb);
        tlm_report_meta_str(rep, "grad_reduce_dtype", dcfg.reduce_dtype == TLM_DTYPE_BF16 ? "bf16" : "fp32");
        tlm_report_meta_int(rep, "zero", dcfg.zero);
    }
    tlm_report_meta_int(rep, "context_length", r->context_length);
    tlm_report_meta_int(rep, "steps", r->steps);
    tlm_report_meta_str(rep, "precision", tlm_precision_name(plan.precision));
    tlm_report_meta_str(rep, "attention", tlm_attention_name(m->run.attention));
    tlm_report_meta_bool(rep, "cuda_graphs", a.cuda_graphs && be->kind == TLM_DEVICE_CUDA);
    tlm_report_meta_num(rep, "lr_max", r->lr_max);
    tlm_report_meta_num(rep, "lr_min", r->lr_min);
    tlm_report_meta_int(rep, "warmup_iters", r->warmup_iters);
    tlm_report_meta_int(rep, "cosine_cycle_iters", r->cosine_cycle_iters);
    tlm_report_meta_num(rep, "max_grad_norm", r->max_grad_norm);
    tlm_report_meta_num(rep, "weight_decay", r->adamw.weight_decay);
    {
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
        tlm_report_meta_str(rep, "seed", seed);
    }
    tlm_report_meta_str(rep, "train_data", plan.train_path);
    tlm_report_meta_int(rep, "train_tokens", train_data.n);
    if (plan.val_path) {
        tlm_report_meta_str(rep, "val_data", plan.val_path);
        tlm_report_meta_int(rep, "val_tokens", val_data.n);
        tlm_report_meta_int(rep, "eval_batches", r->eval_batches);
    }
    if (have_ck) tlm_report_meta_str(rep, "resumed_from", ck.dir);
    if (peak > 0) tlm_report_meta_num(rep, "peak_tflops", peak);
    tlm_report_meta_str(rep, "notes",
                        "loss: the step's mean training loss before its update; val_loss: mean over the fixed "
                        "validation batches after the step; grad_norm: global L2 norm before clipping; step_ms, "
                        "tokens_per_s, mfu: wall clock of the steps since the last row, logging included (evaluation "
                        "and checkpoints not counted); mfu = 3 x forward matmul FLOPs per step (tlm bench's count) / time / peak; "
                        "rows before resumed_from are the checkpoint's log (no timing); with several ranks: loss and "
                        "tokens over every rank, MFU per GPU, comm_ms the communication a step waited for (ddp.h) and "
                        "comm_share its part of the step");
    tlm_report_table(rep, "log", log_columns, (int)(sizeof log_columns / sizeof log_columns[0]));
    tlm_report_show(rep, "loss_scale", fp16);
    tlm_report_show(rep, "skipped", fp16);
    tlm_report_show(rep, "mfu", peak > 0);
    tlm_report_show(rep, "grad_norm", r->max_grad_norm > 0);
    tlm_report_show(rep, "clipped", r->max_grad_norm > 0);
    tlm_report_show(rep, "comm_ms", proc.comm != NULL);
    tlm_report_show(rep, "comm_share", proc.comm != NULL);
    for (int64_t i = 0; i < t.log_len; i++) /* a resumed run's log starts with the checkpoint's */
        if (row_due(&t.log[i], plan.log_every, r->steps)) log_row(rep, &t.log[i], NULL, fp16, r->max_grad_norm > 0);

    /* the loop */
    struct sigaction sa = {.sa_handler = on_stop}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    progress pr = {.tty = isatty(STDERR_FILENO) != 0};
    bool stopping = false; /* a signal reached a rank: every rank stops after the same step */
    double window_comm = 0;
    const int64_t first = t.step;
    const double t0 = now_s();
    double train_s = 0, window_s = 0, last_show = 0, steady_s = 0;
    int64_t window_steps = 0, steady_steps = 0;
    const int64_t skip_steps = r->steps - first > 10 ? 5 : 0; /* warm-up steps left out of the run's mean */
    tlm_train_record e = {0};
    char *saved = NULL;
    s = TLM_OK;
    /* a step's time runs from the end of the last one's (its logging included) to the end of its own; the
     * evaluations and checkpoints between are left out */
    double tick = now_s();
    while (t.step < r->steps && !stopping) {
        s = tlm_train_step(&t, &e);
        if (s == TLM_OK && ddp) {
            tlm_ddp_timing ct;
            s = tlm_ddp_last_timing(ddp, &ct);
            window_comm += ct.exposed_ms;
        }
        stopping = stop_signal != 0;
        if (s == TLM_OK && proc.comm) s = any_rank(proc.comm, &stopping);
        if (s != TLM_OK) {
            together = !proc.comm; /* this rank's failure may be its own: it leaves, the others are told */
            break;
        }
        const bool eval = tlm_train_eval_due(&t), save = plan.save_every && (t.step % plan.save_every == 0 ||
                                                                              t.step == r->steps || stopping);
        if (eval || save) tlm_synchronize(be); /* the step's device work ends here */
        const double now = now_s(), dt = now - tick;
        tick = now;
        train_s += dt;
        window_s += dt;
        window_steps++;
        if (t.step - first > skip_steps) {
            steady_s += dt;
            steady_steps++;
        }
        window_stats w = {.step_ms = 1e3 * window_s / (double)window_steps, .elapsed_s = now_s() - t0};
        w.tokens_per_s = (double)r->batch_size * plan.world * r->context_length * (double)window_steps / window_s;
        w.comm_ms = ddp ? window_comm / (double)window_steps : NAN;
        w.mfu = peak > 0 ? step_flops * (double)window_steps / window_s / (peak * 1e12) : NAN;
        if (eval && (s = tlm_train_eval(&t, &e.val_loss)) != TLM_OK) {
            together = !proc.comm;
            break;
        }
        if (eval) tick = now_s();
        const double eta = train_s / (double)(t.step - first) * (double)(r->steps - t.step);
        const bool row = row_due(&e, plan.log_every, r->steps) || stopping;
        if (rank == 0 && (row || (pr.tty && now_s() - last_show > 0.2))) {
            if (row || pr.tty) progress_show(&pr, &e, r->steps, &w, eta);
            last_show = now_s();
        }
        if (row) {
            progress_clear(&pr);
            log_row(rep, &e, &w, fp16, r->max_grad_norm > 0);
            window_s = 0;
            window_steps = 0;
            window_comm = 0;
        }
        if (save && rank == 0) { /* one writer; the others wait for it in the next step's first collective */
            free(saved);
            saved = NULL;
            const tlm_train_sources src = {plan.train_path, plan.val_path};
            if ((s = tlm_checkpoint_save(&t, &src, plan.ckpt_dir, plan.keep, &saved)) != TLM_OK) {
                together = !proc.comm;
                break;
            }
            progress_clear(&pr);
            fprintf(stderr, "tlm train: step %lld: checkpoint %s\n", (long long)t.step, saved);
            tick = now_s();
        }
    }
    progress_clear(&pr);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);

    /* the summary; the log is committed even after a failure (what ran is worth keeping) */
    if (s != TLM_OK) {
        tlm_report_row_begin(rep);
        tlm_report_int(rep, "step", t.step + 1);
        tlm_report_status(rep, "failed", tlm_last_error());
        tlm_report_row_end(rep);
        cli_error(cmd, "%s", tlm_last_error());
    }
    const int64_t ran = t.step - first;
    tlm_report_summary_int(rep, "steps_run", ran);
    tlm_report_summary_int(rep, "last_step", t.step);
    if (ran > 0) {
        char line[256];
        const double mean = steady_steps ? steady_s / (double)steady_steps : train_s / (double)ran;
        snprintf(line, sizeof line, "%.4f", 1e3 * mean);
        tlm_report_summary_str(rep, "step_ms_mean", line);
        snprintf(line, sizeof line, "%.1f", (double)r->batch_size * plan.world * r->context_length / mean);
        tlm_report_summary_str(rep, "tokens_per_s", line);
        if (peak > 0) {
            snprintf(line, sizeof line, "%.4f", step_flops / mean / (peak * 1e12));
            tlm_report_summary_str(rep, "mfu", line);
        }
        snprintf(line, sizeof line, "%s after the first %lld steps of this run (warm-up), evaluation and checkpoints "
                                    "not counted", steady_steps ? "mean over the steps" : "mean over every step",
                 (long long)(steady_steps ? skip_steps : 0));
        tlm_report_summary_str(rep, "step_ms_note", line);
        snprintf(line, sizeof line, "%.7g", (double)t.log[t.log_len - 1].loss);
        tlm_report_summary_str(rep, "final_loss", line);
        for (int64_t i = t.log_len; i-- > 0;)
            if (!isnan(t.log[i].val_loss)) {
                snprintf(line, sizeof line, "%.7g (step %lld)", t.log[i].val_loss, (long long)t.log[i].step);
                tlm_report_summary_str(rep, "final_val_loss", line);
                break;
            }
    }
    if (saved) tlm_report_summary_str(rep, "checkpoint", saved);
    if (proc.comm && s == TLM_OK) { /* every rank's peak, gathered */
        char line[1024];
        if (peaks_per_rank(proc.comm, be, line, sizeof line) == TLM_OK) tlm_report_summary_str(rep, "peak_bytes_per_rank", line);
    }
    if (stopping && s == TLM_OK && rank == 0) {
        char line[96];
        snprintf(line, sizeof line, "stopped by signal %d after step %lld of %lld", stop_signal ? (int)stop_signal : SIGTERM,
                 (long long)t.step, (long long)r->steps);
        tlm_report_summary_str(rep, "stopped", line);
        fprintf(stderr, "tlm train: %s\n", line);
    }
    free(saved);
    const tlm_status cs = tlm_report_close(rep, true);
    rep = NULL;
    if (cs != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    rc = s != TLM_OK || cs != TLM_OK ? TLM_EXIT_FAILURE
         : stopping                  ? 128 + (stop_signal ? (int)stop_signal : SIGTERM)
                                     : TLM_EXIT_OK;
out:
    if (proc.comm && !agreed) tlm_ddp_agree(proc.comm, TLM_ERR_INVALID_ARGUMENT); /* meet the others: all stop */
    tlm_report_close(rep, false);
    if (together) tlm_ddp_free(ddp); /* else a collective may hang: the process ends */
    if (have_train) tlm_train_free(&t);
    tlm_model_free(m);
    if (!proc.be) tlm_backend_destroy(be); /* alone: the backend is ours */
    else if (together && tlm_ddp_leave(&proc, true) != TLM_OK && rc == TLM_EXIT_OK) rc = TLM_EXIT_FAILURE;
    if (train_data.ids) tlm_tokens_free(&train_data);
    if (val_data.ids) tlm_tokens_free(&val_data);
    if (have_ck) tlm_checkpoint_close(&ck);
    free(resume_root);
    cli_args_free(&a);
    return rc;
}
