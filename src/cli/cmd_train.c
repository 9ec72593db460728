/* cmd_train.c — `tlm train`: the flags of a training run, checked and planned (train.h's planning), then
 * the run (tlm_train_run: the CS336 recipe, validation, checkpoints that resume bit for bit, the progress
 * line on stderr and the loss log through the report writer: table on stdout, CSV or JSON with --log). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tlm/train.h"

enum { OPT_TRAIN_DATA = 2000, OPT_VAL_DATA, OPT_STEPS, OPT_TOKENS, OPT_LR_MAX, OPT_LR_MIN, OPT_WARMUP_ITERS,
       OPT_COSINE_ITERS, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD, OPT_MAX_GRAD_NORM, OPT_EVAL_EVERY, OPT_EVAL_BATCHES,
       OPT_SAVE_EVERY, OPT_CKPT_DIR, OPT_KEEP, OPT_RESUME, OPT_LOG, OPT_LOG_EVERY, OPT_PEAK, OPT_ALLOW, OPT_NUM };

/* the options as given; a recipe option's `given` says whether it appeared (a resumed run refuses one
 * that contradicts the checkpoint) */
typedef struct {
    const char *train_data, *val_data, *ckpt_dir, *resume, *log;
    cli_weights_file init; /* --init-weights, --strip-prefix */
    double num[OPT_NUM - OPT_TRAIN_DATA];
    bool given[OPT_NUM - OPT_TRAIN_DATA];
} train_opts;
#define NUM(o, id) ((o)->num[(id) - OPT_TRAIN_DATA])
#define GIVEN(o, id) ((o)->given[(id) - OPT_TRAIN_DATA])

static const cli_use train_uses[] = {
    CLI_USES_RUN(/* --model */ "small (a resumed run: the checkpoint's)",
                 /* --batch-size */ "4; under a launcher the global batch, 4 a rank",
                 /* --context-length */ "256, or the model's context_length when shorter"),
    {CLI_GRAD_ACCUM_STEPS, "1", 1}, {CLI_CUDA_GRAPH, "on", 1}, {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
    {CLI_FORMAT, "json with --log FILE (csv for FILE.csv); table on stdout", 1},
    CLI_USES_DDP,
    {CLI_TIMEOUT, "1800 (longer than rank 0's slowest checkpoint save)", 1},
};

static const struct option train_options[] = {
    {"train-data", required_argument, 0, OPT_TRAIN_DATA}, {"val-data", required_argument, 0, OPT_VAL_DATA},
    {"steps", required_argument, 0, OPT_STEPS},           {"tokens", required_argument, 0, OPT_TOKENS},
    {"max-grad-norm", required_argument, 0, OPT_MAX_GRAD_NORM},
    {"lr-max", required_argument, 0, OPT_LR_MAX},         {"lr-min", required_argument, 0, OPT_LR_MIN},
    {"warmup-iters", required_argument, 0, OPT_WARMUP_ITERS}, {"cosine-cycle-iters", required_argument, 0, OPT_COSINE_ITERS},
    CLI_ADAMW_OPTIONS(OPT_BETA1),
    {"eval-every", required_argument, 0, OPT_EVAL_EVERY}, {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
    {"save-every", required_argument, 0, OPT_SAVE_EVERY}, {"checkpoint-dir", required_argument, 0, OPT_CKPT_DIR},
    {"keep-checkpoints", required_argument, 0, OPT_KEEP}, {"resume", required_argument, 0, OPT_RESUME},
    {"log", required_argument, 0, OPT_LOG},               {"log-every", required_argument, 0, OPT_LOG_EVERY},
    {"peak-tflops", required_argument, 0, OPT_PEAK},      {"allow-data-change", no_argument, 0, OPT_ALLOW},
    CLI_WEIGHTS_OPTIONS("init-weights"), {0}};

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
    {OPT_MAX_GRAD_NORM, "--max-grad-norm", 0, 1e30, false}, {OPT_EVAL_EVERY, "--eval-every", 0, 1e15, true},
    {OPT_EVAL_BATCHES, "--eval-batches", 1, 1 << 20, true}, {OPT_SAVE_EVERY, "--save-every", 0, 1e15, true},
    {OPT_KEEP, "--keep-checkpoints", 0, 1 << 20, true}, {OPT_LOG_EVERY, "--log-every", 1, 1e15, true},
    {OPT_PEAK, "--peak-tflops", 1e-6, 1e9, false},
};

static bool train_handle(void *user, int opt, const char *arg) {
    train_opts *o = user;
    const char **paths[OPT_NUM - OPT_TRAIN_DATA] = {[OPT_TRAIN_DATA - OPT_TRAIN_DATA] = &o->train_data,
                                                    [OPT_VAL_DATA - OPT_TRAIN_DATA] = &o->val_data,
                                                    [OPT_CKPT_DIR - OPT_TRAIN_DATA] = &o->ckpt_dir,
                                                    [OPT_RESUME - OPT_TRAIN_DATA] = &o->resume,
                                                    [OPT_LOG - OPT_TRAIN_DATA] = &o->log};
    if (cli_weights_option(&o->init, opt, arg)) return true;
    if (opt < OPT_TRAIN_DATA || opt >= OPT_NUM) return false;
    if ((GIVEN(o, opt) = true) && opt == OPT_ALLOW) return true;
    if (paths[opt - OPT_TRAIN_DATA]) return (*paths[opt - OPT_TRAIN_DATA] = arg), true;
    if (opt >= OPT_BETA1 && opt <= OPT_WD) { /* cli_parse_adamw's domains; a beta's 1 refused here */
        double x;
        if (!cli_parse_adamw("train", opt - OPT_BETA1, arg, &x)) return false;
        if ((opt == OPT_BETA1 || opt == OPT_BETA2) && x >= 1) {
            cli_error("train", "--beta%d: %s is outside [0, 1)", opt == OPT_BETA1 ? 1 : 2, arg);
            return false;
        }
        NUM(o, opt) = x;
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
        "      --tokens N            instead: train on N tokens (steps = ceil(N / (accum x batch x context)))\n"
        "      --init-weights FILE   start from these weights, AdamW fresh: a tlm weights file or a PyTorch state\n"
        "                            dict with the CS336 names (as tlm step --weights: the model is the file's)\n"
        "      --strip-prefix P      remove P from the start of its tensor names (_orig_mod., module.)\n"
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
        "      --save-every N        save every N steps, after the last and when stopped (0: those two only; needs\n"
        "                            --checkpoint-dir). A resumed run always saves, by default at its checkpoint's N\n"
        "      --checkpoint-dir DIR  where to save (created if missing; default with --resume: its DIR)\n"
        "      --keep-checkpoints N  keep the newest N step directories (default 0: all)\n"
        "      --resume DIR          continue from DIR's latest checkpoint (or a step directory): the model,\n"
        "                            recipe and data are the checkpoint's; a flag that contradicts them is refused;\n"
        "                            --steps / --tokens may extend the budget; its files and data are checked\n"
        "      --allow-data-change   resume on data other than the checkpoint's (said in the log's header)\n"
        "Output:\n"
        "      --log FILE            the loss log (every logged step: loss, val_loss, lr, grad_norm, tokens/s,\n"
        "                            MFU) as --format (json; csv for *.csv); stdout shows the table\n"
        "      --log-every N         a log row every N steps (default 10; eval steps and the last always)\n"
        "      --peak-tflops X       the device's dense peak for MFU (default: H100/H200 SXM 989 bf16/fp16, 494\n"
        "                            tf32, 67 fp32; H100 PCIe 756/378/51; otherwise MFU is n/a, as on the CPU)\n"
        "SIGINT/SIGTERM stop the run after the current step (saving a checkpoint when the run saves, a resumed one\n"
        "always, and committing the log); a second one ends it at once. No output may lie in a checkpoint DIR.\n"
        "Data parallelism: started by a launcher (mpirun -np 2 tlm train ...; srun), one process per GPU (NCCL) or\n"
        "per share of the CPU's cores (MPI, --device cpu), every process with the same flags: --batch-size is the\n"
        "global batch, each rank draws its rows; the gradients are averaged as --ddp says; rank 0 alone prints, logs\n"
        "and saves checkpoints (with --zero 1 the AdamW moments gathered to it: the same files); a checkpoint\n"
        "resumes at any number of ranks that divides its global batch, with or without --zero 1. A rank that dies\n"
        "or hangs ends the run, named.\n\n",
    .name = "train", CLI_USES(train_uses), .options = train_options, .handle = train_handle, .checks_own_files = true};

/* ---- resolving the run --------------------------------------------------------------------------------------- */

typedef struct {
    int world; /* ranks: --batch-size is the global batch, recipe.batch_size a rank's rows */
    tlm_config model;
    char model_name[64];
    tlm_train_config recipe;
    tlm_precision precision;
    tlm_attention attention;
    const char *train_path, *val_path;
    int64_t save_every, log_every;
    int keep;
    tlm_format log_format; /* --format, else by --log's name */
    tlm_safetensors init;  /* --init-weights, read (have_init) */
    bool have_init;
} run_plan;

/* the flags the planning reads (train.h); --steps .. --eval-batches are in tlm_train_arg's order */
static tlm_train_args train_args(const cli_args *a, const train_opts *o) {
    tlm_train_args t = {.seed = a->seed, .precision_given = a->num_precisions > 0, .val_data_given = o->val_data,
                        .rope_theta = a->shape.rope_theta, .preset_name = a->num_models ? a->models[0] : NULL};
    for (int id = OPT_STEPS; id <= OPT_EVAL_BATCHES; id++) {
        t.given[TLM_TRAIN_ARG_STEPS + id - OPT_STEPS] = GIVEN(o, id);
        t.value[TLM_TRAIN_ARG_STEPS + id - OPT_STEPS] = NUM(o, id);
    }
    t.given[TLM_TRAIN_ARG_BATCH_SIZE] = a->num_batch_sizes > 0;
    t.value[TLM_TRAIN_ARG_BATCH_SIZE] = a->num_batch_sizes ? a->batch_sizes[0] : 0;
    t.given[TLM_TRAIN_ARG_CONTEXT_LENGTH] = a->num_contexts > 0;
    t.value[TLM_TRAIN_ARG_CONTEXT_LENGTH] = a->num_contexts ? a->contexts[0] : 0;
    t.given[TLM_TRAIN_ARG_SEED] = a->given[CLI_SEED];
    t.given[TLM_TRAIN_ARG_GRAD_ACCUM_STEPS] = a->grad_accum_steps > 0; /* micro-batches a step */
    t.value[TLM_TRAIN_ARG_GRAD_ACCUM_STEPS] = a->grad_accum_steps;
    if (a->num_precisions) t.precision = a->precisions[0];
    const cli_shape_flags *f = &a->shape;
    const long sizes[TLM_TRAIN_NUM_SIZES] = {f->vocab_size, f->d_model, f->d_ff, f->num_layers, f->num_heads,
                                             f->max_context};
    for (int i = 0; i < TLM_TRAIN_NUM_SIZES; i++) t.sizes[i] = sizes[i] == CLI_NOT_GIVEN ? -1 : sizes[i];
    return t;
}

/* the run's plan from a checkpoint, every given flag checked against it */
static bool plan_resume(const cli_args *a, const train_opts *o, const tlm_checkpoint *ck, run_plan *p) {
    tlm_train_args args = train_args(a, o);
    args.world_size = p->world;
    if (tlm_train_plan_resume(&args, ck, &p->recipe) != TLM_OK) {
        cli_error("train", "%s", tlm_last_error());
        return false;
    }
    p->model = ck->model;
    snprintf(p->model_name, sizeof p->model_name, "%s", ck->model_name); /* the name its first run gave it */
    p->precision = ck->precision;
    p->attention = a->given[CLI_ATTENTION] ? a->attention : ck->attention;
    /* the data: the checkpoint's files unless given; either way the token counts must be its */
    p->train_path = o->train_data ? o->train_data : ck->train_data_path;
    p->val_path = o->val_data ? o->val_data : ck->val_data_path;
    return true;
}

/* the run's plan from the flags alone */
static bool plan_fresh(const cli_args *a, const train_opts *o, run_plan *p) {
    const char *name = a->num_models ? a->models[0] : "small"; /* with --init-weights the model is the file's */
    if (o->init.path ? !(p->have_init = cli_weights_open("train", a, &o->init, &p->init, &p->model, p->model_name,
                                                         sizeof p->model_name))
                        : !cli_model_config("train", a, name, &p->model, p->model_name, sizeof p->model_name))
        return false;
    const tlm_train_args args = train_args(a, o);
    if (tlm_train_plan_fresh(&args, &p->model, p->world, &p->recipe) != TLM_OK) {
        cli_error("train", "%s", tlm_last_error());
        return false;
    }
    p->precision = a->num_precisions ? a->precisions[0] : TLM_PRECISION_FP32;
    p->attention = a->attention;
    p->train_path = o->train_data;
    p->val_path = o->val_data;
    return true;
}

/* ---- the command ----------------------------------------------------------------------------------------------- */

/* everything a run holds, freed by finish() */
typedef struct {
    const char *cmd;
    train_opts *o;
    cli_args a;
    run_plan plan;
    tlm_checkpoint ck;
    bool have_ck;
    tlm_train_session run;
    tlm_backend *be;
    tlm_report *rep;
    char *ckpt_dir;
    tlm_ddp_process proc;
    tlm_ddp_config dcfg;
    bool agreed;   /* several ranks: they met after setting up (a failure before is met there) */
    bool together; /* every rank ends here alike (else a failure of this rank's alone: no goodbye barrier) */
} train_cli;

/* The flags checked together and the run's plan (fresh or from the checkpoint). Returns the exit code, or
 * -1 to go on. */
static int plan_run(train_cli *x) {
    train_opts *o = x->o;
    const cli_args *a = &x->a;
    x->dcfg = cli_ddp_config(a);
    const char *conflict =
        GIVEN(o, OPT_STEPS) && GIVEN(o, OPT_TOKENS) ? "--steps conflicts with --tokens: give the budget one way"
        : o->init.path && o->resume ? "--init-weights conflicts with --resume: the weights are the checkpoint's"
        : o->init.strip_prefix && !o->init.path ? "--strip-prefix needs --init-weights FILE"
        : !o->resume && !o->train_data ? "give --train-data FILE (or --resume DIR)"
        : !o->resume && !GIVEN(o, OPT_STEPS) && !GIVEN(o, OPT_TOKENS) ? "give the budget: --steps N or --tokens N"
        : !o->resume && !o->val_data && (GIVEN(o, OPT_EVAL_EVERY) || GIVEN(o, OPT_EVAL_BATCHES))
            ? "--eval-every/--eval-batches need --val-data FILE"
        : GIVEN(o, OPT_SAVE_EVERY) && !o->ckpt_dir && !o->resume ? "--save-every needs --checkpoint-dir DIR"
        : o->ckpt_dir && !GIVEN(o, OPT_SAVE_EVERY) && !o->resume ? "--checkpoint-dir needs --save-every N"
        : GIVEN(o, OPT_ALLOW) && !o->resume ? "--allow-data-change needs --resume DIR (a fresh run has no data to change)"
                                                                   : NULL;
    if (conflict) {
        cli_error(x->cmd, "%s", conflict);
        return TLM_EXIT_USAGE;
    }
    if (o->resume) {
        if (tlm_checkpoint_open(o->resume, &x->ck) != TLM_OK) {
            cli_error(x->cmd, "--resume %s: %s", o->resume, tlm_last_error());
            return TLM_EXIT_FAILURE;
        }
        x->have_ck = true;
        if (x->ck.warning[0] && x->proc.world.rank == 0) /* every rank read the same: rank 0 says it once */
            fprintf(stderr, "tlm: warning: %s\n", x->ck.warning);
        if (!plan_resume(a, o, &x->ck, &x->plan)) return TLM_EXIT_USAGE;
    } else if (!plan_fresh(a, o, &x->plan)) {
        return TLM_EXIT_USAGE;
    }
    const tlm_checkpoint *ck = x->have_ck ? &x->ck : NULL;
    if (tlm_train_plan_checkpoint_dir(o->ckpt_dir, ck, &x->ckpt_dir) != TLM_OK) {
        cli_error(x->cmd, "%s", tlm_last_error());
        return TLM_EXIT_USAGE;
    }
    x->plan.save_every = tlm_train_plan_save_every(GIVEN(o, OPT_SAVE_EVERY), (int64_t)NUM(o, OPT_SAVE_EVERY), ck);
    x->plan.log_format = tlm_train_log_format(o->log, a->given[CLI_FORMAT], a->format);
    tlm_io_plan files; /* every file checked before anything runs: no output over an input or in a checkpoint */
    tlm_train_plan_files(&files, x->plan.train_path, x->plan.val_path, o->resume, x->ckpt_dir, o->ckpt_dir != NULL);
    tlm_io_plan_input(&files, "--init-weights", o->init.path);
    tlm_report_plan(&files, "--log", x->plan.log_format, o->log);
    if (!cli_check_files(x->cmd, a, &files)) return TLM_EXIT_USAGE;
    x->plan.keep = (int)NUM(o, OPT_KEEP);
    x->plan.log_every = GIVEN(o, OPT_LOG_EVERY) ? (int64_t)NUM(o, OPT_LOG_EVERY) : 10;
    return -1;
}

/* The data, the backend, the model and the training state (restored when resuming), the log, and with
 * several ranks the reducer. Returns the exit code, or -1 to go on. */
static int set_up(train_cli *x, int argc, char **argv) {
    const run_plan *p = &x->plan;
    const tlm_checkpoint *ck = x->have_ck ? &x->ck : NULL;
    const tlm_train_sources src = {p->train_path, p->val_path, p->model_name, p->save_every, GIVEN(x->o, OPT_ALLOW)};
    if (tlm_train_session_load(&x->run, &src, p->model.vocab_size, ck) != TLM_OK) {
        cli_error(x->cmd, "%s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    if (!(x->be = x->proc.comm ? x->proc.be : cli_create_backend(x->cmd, &x->a))) return TLM_EXIT_FAILURE;
    if (tlm_attention_check(x->be, &p->model, p->precision, p->attention) != TLM_OK) {
        cli_error(x->cmd, "%s", tlm_last_error());
        return TLM_EXIT_USAGE;
    }
    const tlm_run_config run = {.precision = p->precision, .attention = p->attention, .cuda_graphs = x->a.cuda_graphs};
    tlm_status s = tlm_train_session_create(&x->run, x->be, &p->model, &run, &p->recipe, x->a.seed,
                                            x->proc.world.rank, p->world, ck);
    if (s == TLM_OK && p->have_init) /* checks every tensor, then copies; AdamW starts fresh */
        s = tlm_model_load_from(x->run.model, &p->init, x->o->init.path, x->o->init.strip_prefix, NULL);
    if (s == TLM_OK) s = tlm_report_open(&x->rep, "tlm train", p->log_format, x->o->log, argc, argv);
    if (s == TLM_OK) tlm_report_view(x->rep, x->a.wide, x->a.verbose);
    if (s != TLM_OK) {
        cli_error(x->cmd, "%s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    if (!x->proc.comm) return -1;
    x->agreed = true; /* every rank set up alike (or all stop here), then the reducer: rank 0's weights everywhere */
    s = tlm_ddp_agree(x->proc.comm, TLM_OK);
    const bool alike = s == TLM_OK;
    if (alike) s = tlm_train_session_join(&x->run, x->proc.comm, p->precision, &x->dcfg);
    if (s == TLM_OK) return -1;
    if (x->proc.world.rank == 0) cli_error(x->cmd, "%s", tlm_last_error());
    return alike && (s == TLM_ERR_INVALID_ARGUMENT || s == TLM_ERR_UNSUPPORTED) ? TLM_EXIT_USAGE : TLM_EXIT_FAILURE;
}

/* The run itself, its log and its summary; returns the exit code. */
static int train_and_report(train_cli *x) {
    const run_plan *p = &x->plan;
    tlm_train *t = &x->run.train;
    const int rank = x->proc.world.rank;
    tlm_train_progress pr = {.out = stderr, .prefix = "tlm train", .tty = isatty(STDERR_FILENO) != 0,
                             .quiet = rank != 0};
    const tlm_train_run_config c = {
        .backend = x->be, .comm = x->proc.comm, .model = &p->model, .report = x->rep,
        .sources = {p->train_path, p->val_path, p->model_name, p->save_every, GIVEN(x->o, OPT_ALLOW)},
        .checkpoint_dir = x->ckpt_dir, .save_every = p->save_every,
        .keep_checkpoints = p->keep, .log_every = p->log_every,
        .peak_tflops = GIVEN(x->o, OPT_PEAK) ? NUM(x->o, OPT_PEAK) : tlm_backend_peak_tflops(x->be, p->precision),
        .model_name = p->model_name, .precision = p->precision,
        .attention = tlm_attention_resolve(x->be, &p->model, p->precision, p->attention),
        .cuda_graphs = x->a.cuda_graphs && x->be->kind == TLM_DEVICE_CUDA, .ddp = x->proc.comm ? &x->dcfg : NULL,
        .resumed_from = x->have_ck ? x->ck.dir : NULL, .progress = &pr, .stop_on_signals = true};
    cli_report_device(x->rep, x->be);
    tlm_train_log_begin(&c, t);
    tlm_train_run_result res;
    const tlm_status s = tlm_train_run(t, &c, &res);
    x->together = res.together;
    if (s != TLM_OK) cli_error(x->cmd, "%s", tlm_last_error());
    tlm_train_log_summary(&c, t, &res);
    if (res.stopped && s == TLM_OK && rank == 0) fprintf(stderr, "tlm train: %s\n", res.stop_note);
    tlm_train_run_result_free(&res);
    const tlm_status cs = tlm_report_close(x->rep, true);
    x->rep = NULL;
    if (cs != TLM_OK) cli_error(x->cmd, "%s", tlm_last_error());
    return s != TLM_OK || cs != TLM_OK ? TLM_EXIT_FAILURE : res.stopped ? 128 + res.stop_signal : TLM_EXIT_OK;
}

static int finish(train_cli *x, int rc) {
    if (x->proc.comm && !x->agreed) tlm_ddp_agree(x->proc.comm, TLM_ERR_INVALID_ARGUMENT); /* meet the others */
    tlm_report_close(x->rep, false);
    tlm_train_session_free(&x->run, x->together); /* the reducer: else a collective may hang, the process ends */
    if (!x->proc.be) tlm_backend_destroy(x->be); /* alone: the backend is ours */
    else if (x->together && tlm_ddp_leave(&x->proc, true) != TLM_OK && rc == TLM_EXIT_OK) rc = TLM_EXIT_FAILURE;
    if (x->have_ck) tlm_checkpoint_close(&x->ck);
    if (x->plan.have_init) tlm_safetensors_free(&x->plan.init);
    free(x->ckpt_dir);
    cli_args_free(&x->a);
    return rc;
}

int cmd_train(int argc, char **argv) {
    train_opts given = {0};
    train_cli x = {.cmd = "train", .o = &given, .together = true};
    int rc = cli_parse(&train_cmd, x.o, argc, argv, &x.a);
    if (rc >= 0) return rc;
    /* data parallelism: the world the launcher made (a world of one without one) */
    const int joined = cli_join(x.cmd, &x.a, 1800, &x.proc);
    if (joined >= 0) return cli_args_free(&x.a), joined;
    x.plan.world = x.proc.world.world_size;
    if (x.proc.world.rank != 0) x.o->log = NULL; /* rank 0 alone prints, logs and saves */
    static const char *const data_flags[] = {"--train-data", "--val-data", "--init-weights"}; /* files, not paths */
    cli_errors_alike(true); /* the flags' errors: rank 0 says them once */
    if ((rc = cli_agree(x.cmd, &x.a, &x.proc, data_flags, 3)) < 0) rc = plan_run(&x);
    cli_errors_alike(false);
    if (rc < 0 && (rc = set_up(&x, argc, argv)) < 0) rc = train_and_report(&x);
    return finish(&x, rc);
}
