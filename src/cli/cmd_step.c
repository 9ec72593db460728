/* cmd_step.c — `tlm step`: one forward/backward (and optionally N AdamW steps) on given
 * weights and data, writing logits, loss, gradients and weights for comparison with
 * another framework. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/rng.h"

static void step_usage(FILE *f) {
    fprintf(f,
            "Usage: tlm step --model NAME [--weights W.safetensors] (--inputs X.npy --targets Y.npy |\n"
            "                --data TOKENS -b B -c T) [outputs]\n"
            "One forward and backward pass of the CS336 model on one batch, for comparing with another\n"
            "framework (tensors use the CS336 state-dict names). Prints the mean cross-entropy loss.\n"
            "\n"
            "  -m, --model NAME          preset: %s (default: small)\n"
            "      --weights FILE        safetensors with the CS336 state-dict names (default: seeded init)\n"
            "      --inputs FILE         .npy of token ids, shape [batch, context_length] (int)\n"
            "      --targets FILE        .npy of target ids, same shape\n"
            "      --data FILE           instead of --inputs/--targets: a token file (.npy, or raw uint16\n"
            "                            .bin) from which a random batch is drawn (targets = inputs + 1)\n"
            "  -b, --batch-size N        with --data (default: 4)\n"
            "  -c, --context-length N    with --data (default: 128)\n"
            "  -s, --seed N              initialisation and batch seed (default: 0)\n"
            "      --out-logits FILE     write the logits of the first forward as float32 .npy [B, T, V]\n"
            "      --out-grads FILE      write the gradients of the first backward (safetensors)\n"
            "      --optimizer-steps N   then take N AdamW steps on the same batch (default: 0); step i\n"
            "                            uses the gradient of forward/backward i\n"
            "      --out-weights FILE    write the weights after the optimizer steps (safetensors)\n"
            "      --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
            "                            AdamW (CS336 defaults: 1e-3, 0.9, 0.999, 1e-8, 0.01)\n"
            "  -P, --precision P         fp32 | tf32 | bf16 | fp16 (default: fp32; see tlm bench --help)\n"
            "  -d, --device D            cpu | cuda (default: cuda when a GPU is present, else cpu)\n"
            "  -t, --threads N           CPU threads (default: all cores)\n"
            "  -h, --help                this text\n",
            tlm_config_preset_names());
    cli_print_attention_help(f);
    cli_print_shape_flags_help(f);
}

enum { OPT_WEIGHTS = OPT_FIRST_FREE, OPT_INPUTS, OPT_TARGETS, OPT_DATA, OPT_OUT_LOGITS, OPT_OUT_GRADS,
       OPT_OPT_STEPS, OPT_OUT_WEIGHTS, OPT_LR, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD };

/* Reads a [B, T] integer .npy into int32 ids (checked against vocab). */
static bool read_batch_file(const char *path, const char *what, int vocab, int32_t **ids, int *B, int *T) {
    tlm_array a;
    if (tlm_npy_read(path, &a) != TLM_OK) {
        cli_error("step", "%s", tlm_last_error());
        return false;
    }
    bool ok = false;
    if (a.ndim != 2 || a.shape[0] < 1 || a.shape[1] < 1 || a.shape[0] > 1 << 20 || a.shape[1] > 1 << 20) {
        cli_error("step", "%s %s: expected shape [batch, context_length], got %d dimensions", what, path, a.ndim);
    } else if (!(*ids = malloc((size_t)a.numel * sizeof(int32_t)))) {
        cli_error("step", "out of host memory reading %s", path);
    } else {
        char name[4200];
        snprintf(name, sizeof name, "%s %s", what, path);
        if (tlm_array_to_tokens(&a, *ids, vocab, name) != TLM_OK) {
            cli_error("step", "%s", tlm_last_error());
            free(*ids);
            *ids = NULL;
        } else {
            *B = (int)a.shape[0];
            *T = (int)a.shape[1];
            ok = true;
        }
    }
    tlm_array_free(&a);
    return ok;
}

int cmd_step(int argc, char **argv) {
    const char *cmd = "step";
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"weights", required_argument, 0, OPT_WEIGHTS},
        {"inputs", required_argument, 0, OPT_INPUTS}, {"targets", required_argument, 0, OPT_TARGETS},
        {"data", required_argument, 0, OPT_DATA},  {"batch-size", required_argument, 0, 'b'},
        {"context-length", required_argument, 0, 'c'}, {"seed", required_argument, 0, 's'},
        {"out-logits", required_argument, 0, OPT_OUT_LOGITS}, {"out-grads", required_argument, 0, OPT_OUT_GRADS},
        {"optimizer-steps", required_argument, 0, OPT_OPT_STEPS},
        {"out-weights", required_argument, 0, OPT_OUT_WEIGHTS}, {"lr", required_argument, 0, OPT_LR},
        {"beta1", required_argument, 0, OPT_BETA1}, {"beta2", required_argument, 0, OPT_BETA2},
        {"eps", required_argument, 0, OPT_EPS},    {"weight-decay", required_argument, 0, OPT_WD},
        {"device", required_argument, 0, 'd'},     {"threads", required_argument, 0, 't'},
        {"precision", required_argument, 0, 'P'}, {"attention", required_argument, 0, 'a'},
        {"help", no_argument, 0, 'h'},             CLI_SHAPE_LONG_OPTIONS, {0, 0, 0, 0}};
    const char *model_name = "small", *weights = NULL, *inputs_path = NULL, *targets_path = NULL;
    const char *data_path = NULL, *out_logits = NULL, *out_grads = NULL, *out_weights = NULL, *device = NULL;
    long batch = 4, ctx = 128, seed = 0, opt_steps = 0, threads = 0;
    tlm_adamw_config adamw = tlm_adamw_defaults();
    tlm_precision precision = TLM_PRECISION_FP32;
    tlm_attention attention = TLM_ATTENTION_AUTO;
    cli_shape_flags shape;
    cli_shape_flags_init(&shape);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:b:c:s:d:t:P:a:h", opts, NULL)) != -1;) {
        bool ok = true;
        double x = 0;
        switch (c) {
        case 'm': model_name = optarg; break;
        case OPT_WEIGHTS: weights = optarg; break;
        case OPT_INPUTS: inputs_path = optarg; break;
        case OPT_TARGETS: targets_path = optarg; break;
        case OPT_DATA: data_path = optarg; break;
        case OPT_OUT_LOGITS: out_logits = optarg; break;
        case OPT_OUT_GRADS: out_grads = optarg; break;
        case OPT_OUT_WEIGHTS: out_weights = optarg; break;
        case 'd': device = optarg; break;
        case 'P':
            if (!tlm_precision_parse(optarg, &precision)) {
                cli_error(cmd, "--precision: unknown precision '%s' (known: fp32, tf32, bf16, fp16)", optarg);
                ok = false;
            }
            break;
        case 'a': ok = cli_parse_attention(cmd, optarg, &attention); break;
        case 'b': ok = cli_parse_int(cmd, "--batch-size", optarg, 1, 1 << 20, &batch); break;
        case 'c': ok = cli_parse_int(cmd, "--context-length", optarg, 1, 1 << 20, &ctx); break;
        case 's': ok = cli_parse_int(cmd, "--seed", optarg, 0, 0x7fffffffL, &seed); break;
        case 't': ok = cli_parse_int(cmd, "--threads", optarg, 1, 4096, &threads); break;
        case OPT_OPT_STEPS: ok = cli_parse_int(cmd, "--optimizer-steps", optarg, 0, 1 << 20, &opt_steps); break;
        case OPT_LR: ok = cli_parse_double(cmd, "--lr", optarg, &x); adamw.lr = (float)x; break;
        case OPT_BETA1: ok = cli_parse_double(cmd, "--beta1", optarg, &x); adamw.beta1 = (float)x; break;
        case OPT_BETA2: ok = cli_parse_double(cmd, "--beta2", optarg, &x); adamw.beta2 = (float)x; break;
        case OPT_EPS: ok = cli_parse_double(cmd, "--eps", optarg, &x); adamw.eps = (float)x; break;
        case OPT_WD: ok = cli_parse_double(cmd, "--weight-decay", optarg, &x); adamw.weight_decay = (float)x; break;
        case 'h': step_usage(stdout); return TLM_EXIT_OK;
        default: {
            int r = cli_handle_shape_option(cmd, c, optarg, &shape);
            if (r == 0) { step_usage(stderr); return TLM_EXIT_USAGE; }
            ok = r > 0;
        }
        }
        if (!ok) return TLM_EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm step --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }
    if (data_path && (inputs_path || targets_path)) {
        cli_error(cmd, "--data conflicts with --inputs/--targets: give one or the other");
        return TLM_EXIT_USAGE;
    }
    if (!data_path && (!inputs_path || !targets_path)) {
        cli_error(cmd, "give both --inputs and --targets (or --data)");
        return TLM_EXIT_USAGE;
    }
    if (!cli_check_device(cmd, device)) return TLM_EXIT_USAGE;
    tlm_config cfg;
    if (tlm_config_preset(model_name, &cfg) != TLM_OK) {
        cli_error(cmd, "--model: %s", tlm_last_error());
        return TLM_EXIT_USAGE;
    }
    if (!cli_apply_shape_flags(cmd, &shape, &cfg)) return TLM_EXIT_USAGE;

    /* the batch */
    int32_t *inputs = NULL, *targets = NULL;
    int B = 0, T = 0;
    if (data_path) {
        tlm_tokens toks;
        if (tlm_tokens_load(data_path, cfg.vocab_size, &toks) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            return TLM_EXIT_FAILURE;
        }
        B = (int)batch;
        T = (int)ctx;
        inputs = malloc((size_t)B * T * sizeof(int32_t));
        targets = malloc((size_t)B * T * sizeof(int32_t));
        const tlm_batch_draw draw = {.seed = (uint64_t)seed, .step = 0, .rank = 0, .world_size = 1};
        tlm_status s = inputs && targets ? tlm_tokens_get_batch(&toks, B, T, draw, inputs, targets)
                                         : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the batch");
        tlm_tokens_free(&toks);
        if (s != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            free(inputs);
            free(targets);
            return TLM_EXIT_FAILURE;
        }
    } else {
        int Bt, Tt;
        if (!read_batch_file(inputs_path, "inputs", cfg.vocab_size, &inputs, &B, &T)) return TLM_EXIT_FAILURE;
        if (!read_batch_file(targets_path, "targets", cfg.vocab_size, &targets, &Bt, &Tt)) {
            free(inputs);
            return TLM_EXIT_FAILURE;
        }
        if (Bt != B || Tt != T) {
            cli_error(cmd, "targets %s has shape [%d, %d] but inputs %s has [%d, %d]", targets_path, Bt, Tt,
                      inputs_path, B, T);
            free(inputs);
            free(targets);
            return TLM_EXIT_FAILURE;
        }
    }

    int rc = TLM_EXIT_FAILURE;
    char desc[256];
    tlm_model *m = NULL;
    float *logits = NULL;
    tlm_backend *be = cli_create_backend(cmd, device, (int)threads, desc, sizeof desc);
    if (!be) goto done;
    const tlm_run_config run = {.precision = precision, .attention = attention, .cuda_graphs = false};
    tlm_status s = tlm_model_create(&m, &cfg, &run, be);
    if (s == TLM_OK) s = weights ? tlm_model_load(m, weights) : tlm_model_init_random(m, (uint64_t)seed);
    float loss = 0;
    if (s == TLM_OK) s = tlm_model_forward(m, inputs, targets, B, T, &loss);
    if (s == TLM_OK) printf("loss %.7f\n", loss);
    if (s == TLM_OK && out_logits) {
        const size_t n = (size_t)B * T * cfg.vocab_size;
        if (!(logits = malloc(n * sizeof(float)))) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
        if (s == TLM_OK) s = tlm_model_copy_logits(m, logits);
        const int64_t shape3[3] = {B, T, cfg.vocab_size};
        if (s == TLM_OK) s = tlm_npy_write(out_logits, TLM_DTYPE_F32, 3, shape3, logits);
    }
    if (s == TLM_OK && (out_grads || opt_steps > 0)) s = tlm_model_backward(m);
    if (s == TLM_OK && out_grads) s = tlm_model_save_grads(m, out_grads);
    for (long i = 0; s == TLM_OK && i < opt_steps; i++) {
        if (i > 0) {
            s = tlm_model_forward(m, inputs, targets, B, T, &loss);
            if (s == TLM_OK) s = tlm_model_backward(m);
        }
        if (s == TLM_OK) s = tlm_model_adamw_step(m, &adamw);
        if (s == TLM_OK && precision == TLM_PRECISION_FP16)
            printf("adamw step %ld: loss before %.7f, loss scale after %g%s\n", i + 1, loss, m->scaler.scale,
                   m->scaler.last_step_skipped ? " (step skipped: inf/NaN gradient)" : "");
        else if (s == TLM_OK)
            printf("adamw step %ld: loss before %.7f\n", i + 1, loss);
    }
    if (s == TLM_OK && out_weights) s = tlm_model_save(m, out_weights);
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    else rc = TLM_EXIT_OK;
done:
    free(logits);
    tlm_model_free(m);
    tlm_backend_destroy(be);
    free(inputs);
    free(targets);
    return rc;
}
