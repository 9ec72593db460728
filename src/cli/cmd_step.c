/* cmd_step.c — `tlm step`: one forward/backward (and optionally N AdamW steps) on given weights
 * and data, writing logits, loss, gradients and weights for comparison with another framework. The
 * model's shape comes from the weights file when one is given (its metadata, or its tensor shapes
 * and --num-heads); a flag that contradicts the file is refused by name. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/output.h"
#include "tlm/rng.h"

enum { OPT_INPUTS = 2000, OPT_TARGETS, OPT_DATA, OPT_OUT_LOGITS, OPT_OUT_GRADS,
       OPT_OPT_STEPS, OPT_OUT_WEIGHTS, OPT_LR, OPT_BETA1, OPT_ADAMW_END = OPT_BETA1 + CLI_ADAMW_NUM };

typedef struct {
    cli_weights_file weights; /* --weights, --strip-prefix */
    const char *inputs, *targets, *data, *out_logits, *out_grads, *out_weights;
    long opt_steps;
    tlm_adamw_config adamw;
} step_opts;

static const cli_use step_uses[] = {
    CLI_USES_RUN(/* --model */ "small; with --weights, the model the file holds",
                 /* --batch-size */ "4; with --data only",
                 /* --context-length */ "128; with --data only"),
    {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
};

static const struct option step_options[] = {
    CLI_WEIGHTS_OPTIONS("weights"),
    {"inputs", required_argument, 0, OPT_INPUTS},       {"targets", required_argument, 0, OPT_TARGETS},
    {"data", required_argument, 0, OPT_DATA},           {"out-logits", required_argument, 0, OPT_OUT_LOGITS},
    {"out-grads", required_argument, 0, OPT_OUT_GRADS}, {"optimizer-steps", required_argument, 0, OPT_OPT_STEPS},
    {"out-weights", required_argument, 0, OPT_OUT_WEIGHTS}, {"lr", required_argument, 0, OPT_LR},
    CLI_ADAMW_OPTIONS(OPT_BETA1),
    {0, 0, 0, 0}};

static bool step_handle(void *user, int opt, const char *arg) {
    step_opts *o = user;
    const char *cmd = "step";
    double x = 0;
    bool ok = true;
    if (cli_weights_option(&o->weights, opt, arg)) return true;
    switch (opt) {
    case OPT_INPUTS: o->inputs = arg; break;
    case OPT_TARGETS: o->targets = arg; break;
    case OPT_DATA: o->data = arg; break;
    case OPT_OUT_LOGITS: o->out_logits = arg; break;
    case OPT_OUT_GRADS: o->out_grads = arg; break;
    case OPT_OUT_WEIGHTS: o->out_weights = arg; break;
    case OPT_OPT_STEPS: ok = cli_parse_int(cmd, "--optimizer-steps", arg, 0, 1 << 20, &o->opt_steps); break;
    /* the domains of tlm_adamw_config_check, so a value is refused with the flag's own text */
    case OPT_LR: ok = cli_parse_double(cmd, "--lr", arg, FLT_MIN, 10, &x) && ((o->adamw.lr = (float)x), true); break;
    default: {
        float *adamw[CLI_ADAMW_NUM] = {[CLI_ADAMW_BETA1] = &o->adamw.beta1, [CLI_ADAMW_BETA2] = &o->adamw.beta2,
                                       [CLI_ADAMW_EPS] = &o->adamw.eps,
                                       [CLI_ADAMW_WEIGHT_DECAY] = &o->adamw.weight_decay};
        if (opt < OPT_BETA1 || opt >= OPT_ADAMW_END) return false;
        ok = cli_parse_adamw(cmd, opt - OPT_BETA1, arg, &x) && ((*adamw[opt - OPT_BETA1] = (float)x), true);
    }
    }
    return ok;
}

static const cli_command step_cmd = {
    .help =
        "Usage: tlm step [--weights W.safetensors] (--inputs X.npy --targets Y.npy | --data TOKENS) [outputs]\n"
        "One forward and backward pass of the CS336 model on one batch, for comparing with another framework\n"
        "(tensors use the CS336 state-dict names). Prints the mean cross-entropy loss.\n"
        "\n"
        "      --weights FILE        safetensors with the CS336 state-dict names (default: seeded init). The\n"
        "                            model is the one the file holds: its metadata (every file tlm writes) or,\n"
        "                            for a PyTorch state dict, its tensor shapes and --num-heads (or a --model\n"
        "                            whose shapes match); a flag that contradicts the file is refused\n"
        "      --strip-prefix P      remove P from the start of the file's tensor names (torch.compile's\n"
        "                            state dicts: --strip-prefix _orig_mod.)\n"
        "      --inputs FILE         .npy of token ids, shape [batch, context_length] (integer dtype)\n"
        "      --targets FILE        .npy of target ids, same shape\n"
        "      --data FILE           instead: a token file (.npy, or raw uint16 .bin) from which a random batch\n"
        "                            of -b x -c is drawn (targets = inputs shifted by one)\n"
        "      --out-logits FILE     write the logits of the first forward as float32 .npy [B, T, V]\n"
        "      --out-grads FILE      write the gradients of the first backward (safetensors)\n"
        "      --optimizer-steps N   then take N AdamW steps on the same batch (default: 0); step i uses the\n"
        "                            gradient of forward/backward i\n"
        "      --out-weights FILE    write the weights after the optimizer steps (safetensors)\n"
        "      --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
        "                            AdamW (CS336 defaults: 1e-3, 0.9, 0.999, 1e-8, 0.01; domains: lr in\n"
        "                            (0, 10], betas in [0, 1), eps in (0, 1), weight decay in [0, 1])\n"
        "All outputs of one run are written together or not at all; an output may not be one of the inputs.\n\n",
    .name = "step", CLI_USES(step_uses), .options = step_options, .handle = step_handle, .checks_own_files = true};

/* Reads a [B, T] integer .npy into int32 ids (checked against vocab). */
static bool read_batch_file(const char *path, const char *what, int vocab, int32_t **ids, int *B, int *T) {
    tlm_array a;
    if (tlm_npy_read(path, &a) != TLM_OK) {
        cli_error("step", "%s", tlm_last_error());
        return false;
    }
    char name[4200];
    snprintf(name, sizeof name, "%s %s", what, path);
    bool ok = false;
    if (tlm_array_check_shape(&a, 2, 1 << 20, "[batch, context_length]", name) != TLM_OK) {
        cli_error("step", "%s", tlm_last_error());
    } else if (!(*ids = malloc((size_t)a.numel * sizeof(int32_t)))) {
        cli_error("step", "out of host memory reading %s", path);
    } else if (tlm_array_to_tokens(&a, *ids, vocab, name) != TLM_OK) {
        cli_error("step", "%s", tlm_last_error());
        free(*ids);
        *ids = NULL;
    } else {
        *B = (int)a.shape[0];
        *T = (int)a.shape[1];
        ok = true;
    }
    tlm_array_free(&a);
    return ok;
}

/* The model's config: from the weights file (cli_weights_config), else the preset with the shape flags. */
static bool step_config(const cli_args *a, const step_opts *o, const tlm_safetensors *st, tlm_config *cfg) {
    if (!st) return cli_model_config("step", a, a->num_models ? a->models[0] : "small", cfg, NULL, 0);
    return cli_weights_config("step", a, &o->weights, st, cfg);
}

/* The batch a step runs on: rows drawn from --data, or --inputs and --targets read. */
typedef struct {
    int32_t *inputs, *targets; /* (B*T) */
    int B, T;
} step_batch;

/* The batch (its shape checked against the data before anything of its size is allocated), and the RoPE
 * table lengthened to cover it. Returns the exit code, or -1 to go on. */
static int load_batch(const cli_args *a, const step_opts *o, tlm_config *cfg, step_batch *b) {
    const char *cmd = "step";
    b->B = a->num_batch_sizes ? a->batch_sizes[0] : 4;
    b->T = a->num_contexts ? a->contexts[0] : 128;
    if (o->data) {
        tlm_tokens toks;
        if (tlm_tokens_load(o->data, cfg->vocab_size, &toks) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            return TLM_EXIT_FAILURE;
        }
        if ((int64_t)b->T + 1 > toks.n) {
            cli_error(cmd, "--context-length %d needs %d tokens, but %s holds %lld", b->T, b->T + 1, o->data,
                      (long long)toks.n);
            tlm_tokens_free(&toks);
            return TLM_EXIT_FAILURE;
        }
        b->inputs = malloc((size_t)b->B * b->T * sizeof(int32_t));
        b->targets = malloc((size_t)b->B * b->T * sizeof(int32_t));
        const tlm_batch_draw draw = {.seed = a->seed, .step = 0, .rank = 0, .world_size = 1};
        tlm_status s = b->inputs && b->targets ? tlm_tokens_get_batch(&toks, b->B, b->T, draw, b->inputs, b->targets)
                                               : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the batch");
        tlm_tokens_free(&toks);
        if (s != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            return TLM_EXIT_FAILURE;
        }
    } else {
        int Bt, Tt;
        if (!read_batch_file(o->inputs, "inputs", cfg->vocab_size, &b->inputs, &b->B, &b->T) ||
            !read_batch_file(o->targets, "targets", cfg->vocab_size, &b->targets, &Bt, &Tt))
            return TLM_EXIT_FAILURE;
        if (Bt != b->B || Tt != b->T) {
            cli_error(cmd, "targets %s has shape [%d, %d] but inputs %s has [%d, %d]", o->targets, Bt, Tt, o->inputs,
                      b->B, b->T);
            return TLM_EXIT_FAILURE;
        }
    }
    if (b->T > cfg->context_length) {
        if (a->shape.max_context != CLI_NOT_GIVEN) {
            cli_error(cmd, "the batch's context length %d conflicts with --max-context-length %ld", b->T,
                      a->shape.max_context);
            return TLM_EXIT_USAGE;
        }
        cfg->context_length = b->T; /* the RoPE table covers the batch */
    }
    return -1;
}

/* The first forward (and its logits), the backward (and its gradients), the AdamW steps and the weights
 * after them, written together or not at all. */
static tlm_status run_passes(tlm_model *m, const step_opts *o, const step_batch *b, int vocab,
                             tlm_precision precision) {
    float loss = 0, *logits = NULL;
    const int B = b->B, T = b->T, V = vocab;
    tlm_status s = tlm_model_forward(m, b->inputs, b->targets, B, T, &loss);
    if (s == TLM_OK) printf("loss %.7f\n", loss);
    tlm_output_batch_begin(); /* every output of the run, or none */
    if (s == TLM_OK && o->out_logits) {
        const size_t n = (size_t)B * T * V;
        if (!(logits = malloc(n * sizeof(float))))
            s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
        if (s == TLM_OK) s = tlm_model_copy_logits(m, logits);
        const int64_t shape3[3] = {B, T, V};
        if (s == TLM_OK) s = tlm_npy_write(o->out_logits, TLM_DTYPE_F32, 3, shape3, logits);
        free(logits);
    }
    if (s == TLM_OK && (o->out_grads || o->opt_steps > 0)) s = tlm_model_backward(m);
    if (s == TLM_OK && o->out_grads) s = tlm_model_save_grads(m, o->out_grads);
    for (long i = 0; s == TLM_OK && i < o->opt_steps; i++) {
        if (i > 0) {
            s = tlm_model_forward(m, b->inputs, b->targets, B, T, &loss);
            if (s == TLM_OK) s = tlm_model_backward(m);
        }
        if (s == TLM_OK) s = tlm_model_adamw_step(m, &o->adamw);
        if (s == TLM_OK && precision == TLM_PRECISION_FP16)
            printf("adamw step %ld: loss before %.7f, loss scale after %g%s\n", i + 1, loss, m->scaler.scale,
                   m->scaler.last_step_skipped ? " (step skipped: inf/NaN gradient)" : "");
        else if (s == TLM_OK)
            printf("adamw step %ld: loss before %.7f\n", i + 1, loss);
    }
    if (s == TLM_OK && o->out_weights) s = tlm_model_save(m, o->out_weights);
    if (s != TLM_OK) tlm_output_batch_end(false);
    else s = tlm_output_batch_end(true);
    return s;
}

/* The flags checked together; false after printing the error. */
static bool check_flags(const cli_args *a, const step_opts *o) {
    const char *cmd = "step";
    if (o->data && (o->inputs || o->targets)) {
        cli_error(cmd, "--data conflicts with --inputs/--targets: give one or the other");
        return false;
    }
    if (!o->data && (!o->inputs || !o->targets)) {
        cli_error(cmd, "give both --inputs and --targets (or --data)");
        return false;
    }
    if (!cli_refuse_together(cmd, a, CLI_BATCH_SIZE, o->inputs != NULL, "--inputs",
                             "the batch's shape is the shape of the --inputs array") ||
        !cli_refuse_together(cmd, a, CLI_CONTEXT_LENGTH, o->inputs != NULL, "--inputs",
                             "the batch's shape is the shape of the --inputs array"))
        return false;
    if (o->weights.strip_prefix && !o->weights.path) {
        cli_error(cmd, "--strip-prefix needs --weights");
        return false;
    }
    if (tlm_adamw_config_check(&o->adamw) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return false;
    }
    return true;
}

int cmd_step(int argc, char **argv) {
    const char *cmd = "step";
    step_opts given = {.adamw = tlm_adamw_defaults()}, *o = &given;
    cli_args a;
    int rc = cli_parse(&step_cmd, o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    if (!check_flags(&a, o)) goto out;
    tlm_io_plan files; /* an output may not replace an input, nor another output */
    tlm_io_plan_init(&files);
    tlm_io_plan_input(&files, "--weights", o->weights.path);
    tlm_io_plan_input(&files, "--inputs", o->inputs);
    tlm_io_plan_input(&files, "--targets", o->targets);
    tlm_io_plan_input(&files, "--data", o->data);
    tlm_io_plan_output(&files, "--out-logits", o->out_logits);
    tlm_io_plan_output(&files, "--out-grads", o->out_grads);
    tlm_io_plan_output(&files, "--out-weights", o->out_weights);
    if (!cli_check_files(cmd, &a, &files)) goto out;

    rc = TLM_EXIT_FAILURE;
    tlm_safetensors st;
    bool have_st = false;
    if (o->weights.path) {
        if (tlm_safetensors_read(o->weights.path, &st) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            goto out;
        }
        have_st = true;
    }
    tlm_config cfg;
    step_batch b = {0};
    tlm_backend *be = NULL;
    tlm_model *m = NULL;
    if (!step_config(&a, o, have_st ? &st : NULL, &cfg)) {
        rc = TLM_EXIT_USAGE;
        goto done;
    }
    if ((rc = load_batch(&a, o, &cfg, &b)) >= 0) goto done;
    rc = TLM_EXIT_FAILURE;

    if (!(be = cli_create_backend(cmd, &a))) goto done;
    const tlm_run_config run = {.precision = a.num_precisions ? a.precisions[0] : TLM_PRECISION_FP32,
                                .attention = a.attention, .cuda_graphs = false};
    tlm_status s = tlm_model_create(&m, &cfg, &run, be);
    tlm_dtype converted = TLM_DTYPE_F32;
    if (s == TLM_OK)
        s = have_st ? tlm_model_load_from(m, &st, o->weights.path, o->weights.strip_prefix, &converted)
                    : tlm_model_init_random(m, a.seed);
    if (have_st) {
        tlm_safetensors_free(&st);
        have_st = false;
    }
    if (s == TLM_OK && converted != TLM_DTYPE_F32)
        fprintf(stderr, "tlm step: note: %s stores %s tensors: converted to float32\n", o->weights.path,
                tlm_dtype_name(converted));
    if (s == TLM_OK) s = run_passes(m, o, &b, cfg.vocab_size, run.precision);
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    else rc = TLM_EXIT_OK;
done:
    if (have_st) tlm_safetensors_free(&st);
    tlm_model_free(m);
    tlm_backend_destroy(be);
    free(b.inputs);
    free(b.targets);
out:
    cli_args_free(&a);
    return rc;
}
