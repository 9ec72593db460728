/* cmd_precision.c — `tlm precision <experiment>`: the mixed-precision experiments of SPEC.md
 * §2.3-2.4 (accumulate, autocast, layernorm), computed by tlm (precision_lab.h, toymodel.h).
 * Every figure printed here comes from those computations. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/util.h"
#include "tlm/bench.h"
#include "tlm/precision_lab.h"
#include "tlm/toymodel.h"

static void precision_usage(FILE *f) {
    fprintf(f,
            "Usage: tlm precision <experiment> [options]   (tlm precision <experiment> --help for its options)\n"
            "The mixed-precision experiments of CS336 Assignment 2 (SPEC.md §2.3-2.4), computed by tlm:\n"
            "\n"
            "  accumulate   add 0.01 a thousand times: fp32 into fp32, fp16 into fp16, fp16 into fp32, fp16\n"
            "               converted to fp32 into fp32, bf16 into bf16, bf16 into fp32; each sum, its error\n"
            "               and why (the rounding of 0.01, the format's spacing near the sum)\n"
            "  autocast     the ToyModel (Linear -> ReLU -> LayerNorm -> Linear) forward and backward under\n"
            "               fp16 or bf16 autocast: the dtype every tensor was computed in, loss, gradient norms\n"
            "  layernorm    LayerNorm entirely in fp16, in bf16, and with fp32 statistics, for input\n"
            "               magnitudes 1..1e4 and widths 10..10240: overflow and error against float64\n"
            "\n"
            "  -h, --help   this text\n");
}

/* ---- accumulate ------------------------------------------------------------------------------- */

static void accumulate_usage(FILE *f) {
    fprintf(f,
            "Usage: tlm precision accumulate [options]\n"
            "s = 0, then s += 0.01 a thousand times, in six ways (SPEC.md §2.3): fp32 += fp32, fp16 += fp16,\n"
            "fp32 += fp16 (type promotion), fp32 += fp32(fp16) (converted first), bf16 += bf16, fp32 += bf16.\n"
            "On the CPU every fp16/bf16 add is computed in fp32 and rounded to nearest even, which gives the\n"
            "correctly rounded 16-bit sum (src/precision/lowp.h); on the GPU one thread adds with __half and\n"
            "__nv_bfloat16 arithmetic, and the sums are compared with the CPU's bit for bit (exit status\n"
            "1 if any differs).\n"
            "\n"
            "  -d, --device D     cpu | cuda (default: cuda when a GPU is present, else cpu)\n"
            "  -f, --format F     table | json (default: table)\n"
            "  -h, --help         this text\n");
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static int run_accumulate(int argc, char **argv) {
    const char *cmd = "precision accumulate";
    static const struct option opts[] = {{"device", required_argument, 0, 'd'},
                                         {"format", required_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *device = NULL;
    bool json = false;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "d:f:h", opts, NULL)) != -1;) {
        switch (c) {
        case 'd': device = optarg; break;
        case 'f': {
            tlm_format f;
            if (!tlm_format_parse(optarg, false, &f)) {
                cli_error(cmd, "--format: unknown format '%s' (known: table, json)", optarg);
                return TLM_EXIT_USAGE;
            }
            json = f == TLM_FORMAT_JSON;
            break;
        }
        case 'h': accumulate_usage(stdout); return TLM_EXIT_OK;
        default: accumulate_usage(stderr); return TLM_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm precision accumulate --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }
    if (!cli_check_device(cmd, device)) return TLM_EXIT_USAGE;
    char desc[256];
    tlm_backend *be = cli_create_backend(cmd, device, 0, desc, sizeof desc);
    if (!be) return TLM_EXIT_FAILURE;
    static tlm_accumulation acc, cpu_acc;
    if (tlm_accumulate_run(be, TLM_ACCUMULATE_VALUE, &acc) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        tlm_backend_destroy(be);
        return TLM_EXIT_FAILURE;
    }
    /* on the GPU, the CPU's software rounding as the check */
    int same = TLM_ACC_NUM_WAYS;
    const bool on_gpu = be->kind == TLM_DEVICE_CUDA;
    if (on_gpu) {
        tlm_backend *cpu = NULL;
        if (tlm_backend_cpu_create(&cpu, 1) != TLM_OK ||
            tlm_accumulate_run(cpu, TLM_ACCUMULATE_VALUE, &cpu_acc) != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            tlm_backend_destroy(cpu);
            tlm_backend_destroy(be);
            return TLM_EXIT_FAILURE;
        }
        tlm_backend_destroy(cpu);
        same = 0;
        for (int w = 0; w < TLM_ACC_NUM_WAYS; w++)
            same += memcmp(acc.partial[w], cpu_acc.partial[w], sizeof acc.partial[w]) == 0 &&
                    acc.addend[w] == cpu_acc.addend[w];
    }
    const char *how = on_gpu ? "one GPU thread: __fadd_rn, __hadd on __half and __nv_bfloat16 (one rounding per add)"
                             : "fp32 adds of the CPU; fp16/bf16 adds computed in fp32 and rounded to nearest even "
                               "(the correctly rounded sum: src/precision/lowp.h)";
    tlm_accumulate_analysis an[TLM_ACC_NUM_WAYS];
    char why[TLM_ACC_NUM_WAYS][640], addend[64], sum[64];
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        tlm_accumulate_analyze(&acc, (tlm_accumulate_way)w, TLM_ACCUMULATE_VALUE, &an[w]);
        tlm_accumulate_why((tlm_accumulate_way)w, &an[w], why[w], sizeof why[w]);
    }

    if (json) {
        printf("{\"experiment\": \"accumulate\", \"tlm\": \"%s\", \"device\": ", TLM_VERSION);
        json_str(desc);
        printf(", \"arithmetic\": ");
        json_str(how);
        printf(", \"value\": %.17g, \"steps\": %d,", TLM_ACCUMULATE_VALUE, TLM_ACCUMULATE_STEPS);
        if (on_gpu) printf(" \"ways_equal_to_cpu\": %d,", same);
        printf(" \"ways\": [\n");
        for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
            const tlm_accumulate_way_info *info = tlm_accumulate_way_get((tlm_accumulate_way)w);
            tlm_exact_decimal(an[w].addend, addend, sizeof addend);
            tlm_exact_decimal(an[w].sum, sum, sizeof sum);
            printf("  {\"way\": \"%s\", \"sum_dtype\": \"%s\", \"addend_dtype\": \"%s\", \"addend\": %.17g, "
                   "\"addend_exact\": \"%s\", \"sum\": %.17g, \"sum_exact\": \"%s\", \"error\": %.17g, "
                   "\"representation_error\": %.17g, \"rounding_error\": %.17g, \"inexact_adds\": %d, "
                   "\"spacing_at_sum\": %.17g, \"last_increment\": %.17g, \"last_change\": %d, \"why\": ",
                   info->name, tlm_act_dtype_name(info->sum_dtype), tlm_act_dtype_name(info->addend_dtype),
                   an[w].addend, addend, an[w].sum, sum, an[w].error, an[w].representation, an[w].rounding,
                   an[w].inexact_adds, an[w].spacing, an[w].last_increment, an[w].last_change);
            json_str(why[w]);
            printf("}%s\n", w + 1 < TLM_ACC_NUM_WAYS ? "," : "");
        }
        printf("]}\n");
    } else {
        printf("# tlm precision accumulate: s = 0, then s += 0.01, %d times (SPEC.md §2.3; tlm %s)\n",
               TLM_ACCUMULATE_STEPS, TLM_VERSION);
        printf("# device: %s\n# arithmetic: %s\n", desc, how);
        printf("# addend: 0.01 rounded to the addend's dtype (through fp32); error = sum - %d x 0.01; the floats "
               "are printed exactly\n", TLM_ACCUMULATE_STEPS);
        printf("%-19s %-34s %11s  %-26s %12s\n", "way", "addend as stored", "sum", "sum, exactly", "error");
        for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
            tlm_exact_decimal(an[w].addend, addend, sizeof addend);
            tlm_exact_decimal(an[w].sum, sum, sizeof sum);
            printf("%-19s %-34s %11.6f  %-26s %+12.4e\n", tlm_accumulate_way_get((tlm_accumulate_way)w)->name, addend,
                   an[w].sum, sum, an[w].error);
        }
        printf("\nwhy:\n");
        for (int w = 0; w < TLM_ACC_NUM_WAYS; w++)
            printf("  %-19s %s\n", tlm_accumulate_way_get((tlm_accumulate_way)w)->name, why[w]);
        if (on_gpu)
            printf("\n# check: the GPU's trajectories (all %d partial sums) equal the CPU's software rounding bit "
                   "for bit in %d of %d ways\n", TLM_ACCUMULATE_STEPS, same, TLM_ACC_NUM_WAYS);
    }
    tlm_backend_destroy(be);
    return same == TLM_ACC_NUM_WAYS ? TLM_EXIT_OK : TLM_EXIT_FAILURE;
}

/* ---- autocast --------------------------------------------------------------------------------- */

static void autocast_usage(FILE *f) {
    const tlm_toymodel_config d = tlm_toymodel_defaults();
    fprintf(f,
            "Usage: tlm precision autocast [options]\n"
            "The ToyModel of SPEC.md §2.4 (fc1: Linear(in, 10, no bias) -> ReLU -> LayerNorm(10) -> fc2:\n"
            "Linear(10, out, no bias); squared-error loss against a random target) forward and backward\n"
            "through tlm's backend ops under PyTorch's autocast policy (include/tlm/toymodel.h). Prints the\n"
            "dtype each tensor was stored in and the ops were called with, the loss and the gradient norms,\n"
            "each against the same model run in fp32.\n"
            "\n"
            "  -D, --dtype T        fp16 | bf16 (autocast's dtype), or fp32 (no autocast) (default: fp16)\n"
            "  -l, --loss L         mse (mean of squared errors) | sum (sum of squared errors) (default: mse)\n"
            "  -d, --device D       cpu | cuda (default: cuda when a GPU is present, else cpu)\n"
            "  -b, --batch-size N   rows of the batch (default: %d)\n"
            "  -i, --in N           fc1's input features (default: %d)\n"
            "  -o, --out N          fc2's output features (default: %d)\n"
            "  -s, --seed N         weights, input and target (default: %llu)\n"
            "  -h, --help           this text\n",
            d.batch_size, d.in_features, d.out_features, (unsigned long long)d.seed);
}

static double norm(const float *v, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

static void shape_text(const tlm_toy_tensor *t, char *buf, size_t n) {
    if (t->ndim == 2) snprintf(buf, n, "[%d, %d]", t->rows, t->cols);
    else if (t->ndim == 1) snprintf(buf, n, "[%d]", t->cols);
    else snprintf(buf, n, "[]");
}

static int run_autocast(int argc, char **argv) {
    const char *cmd = "precision autocast";
    static const struct option opts[] = {
        {"dtype", required_argument, 0, 'D'}, {"loss", required_argument, 0, 'l'},
        {"device", required_argument, 0, 'd'}, {"batch-size", required_argument, 0, 'b'},
        {"in", required_argument, 0, 'i'},     {"out", required_argument, 0, 'o'},
        {"seed", required_argument, 0, 's'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    tlm_toymodel_config cfg = tlm_toymodel_defaults();
    cfg.precision = TLM_PRECISION_FP16;
    const char *device = NULL;
    long v;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "D:l:d:b:i:o:s:h", opts, NULL)) != -1;) {
        bool ok = true;
        switch (c) {
        case 'D': {
            tlm_dtype dt;
            if (!tlm_act_dtype_parse(optarg, &dt)) {
                cli_error(cmd, "--dtype: unknown dtype '%s' (known: fp16, bf16, fp32)", optarg);
                ok = false;
            } else {
                cfg.precision = dt == TLM_DTYPE_F16    ? TLM_PRECISION_FP16
                                : dt == TLM_DTYPE_BF16 ? TLM_PRECISION_BF16
                                                       : TLM_PRECISION_FP32;
            }
            break;
        }
        case 'l':
            if (strcmp(optarg, "mse") == 0) cfg.loss = TLM_TOY_LOSS_MSE;
            else if (strcmp(optarg, "sum") == 0) cfg.loss = TLM_TOY_LOSS_SUM;
            else {
                cli_error(cmd, "--loss: unknown loss '%s' (known: mse, sum)", optarg);
                ok = false;
            }
            break;
        case 'd': device = optarg; break;
        case 'b': if ((ok = cli_parse_int(cmd, "--batch-size", optarg, 1, 1 << 16, &v))) cfg.batch_size = (int)v; break;
        case 'i': if ((ok = cli_parse_int(cmd, "--in", optarg, 1, 1 << 16, &v))) cfg.in_features = (int)v; break;
        case 'o': if ((ok = cli_parse_int(cmd, "--out", optarg, 1, 1 << 16, &v))) cfg.out_features = (int)v; break;
        case 's': if ((ok = cli_parse_int(cmd, "--seed", optarg, 0, 0x7fffffffL, &v))) cfg.seed = (uint64_t)v; break;
        case 'h': autocast_usage(stdout); return TLM_EXIT_OK;
        default: autocast_usage(stderr); return TLM_EXIT_USAGE;
        }
        if (!ok) return TLM_EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm precision autocast --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }
    if (!cli_check_device(cmd, device)) return TLM_EXIT_USAGE;
    char desc[256];
    tlm_backend *be = cli_create_backend(cmd, device, 0, desc, sizeof desc);
    if (!be) return TLM_EXIT_FAILURE;

    /* the model in the chosen mode, and the same model (same seed) in fp32 for comparison */
    tlm_toymodel_config ref_cfg = cfg;
    ref_cfg.precision = TLM_PRECISION_FP32;
    tlm_toymodel *m = NULL, *ref = NULL;
    float loss = 0.0f, ref_loss = 0.0f;
    int rc = TLM_EXIT_OK;
    if (tlm_toymodel_create(&m, be, &cfg) != TLM_OK || tlm_toymodel_create(&ref, be, &ref_cfg) != TLM_OK ||
        tlm_toymodel_forward(m, &loss) != TLM_OK || tlm_toymodel_backward(m) != TLM_OK ||
        tlm_toymodel_forward(ref, &ref_loss) != TLM_OK || tlm_toymodel_backward(ref) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        rc = TLM_EXIT_FAILURE;
        goto done;
    }
    const char *mode = tlm_act_dtype_name(m->dt);
    printf("# tlm precision autocast: the ToyModel under %s%s (SPEC.md §2.4; tlm %s)\n", mode,
           m->dt == TLM_DTYPE_F32 ? " (no autocast)" : " autocast", TLM_VERSION);
    printf("# device: %s\n", desc);
    printf("# fc1: Linear(%d, %d, no bias) -> ReLU -> LayerNorm(%d) -> fc2: Linear(%d, %d, no bias); loss %s "
           "(%s of squared errors against a random target); batch %d, seed %llu\n",
           cfg.in_features, cfg.hidden, cfg.hidden, cfg.hidden, cfg.out_features, tlm_toy_loss_name(cfg.loss),
           cfg.loss == TLM_TOY_LOSS_MSE ? "mean" : "sum", cfg.batch_size, (unsigned long long)cfg.seed);
    printf("# dtype: what each tensor is stored in and what the ops that wrote and read it were called with\n");
    printf("%-50s %-6s %s\n", "tensor", "dtype", "shape");
    const tlm_toy_tensor *list[32];
    const int n = tlm_toymodel_tensors(m, list, 32);
    for (int i = 0; i < n; i++) {
        const tlm_toy_tensor *t = list[i];
        char shape[32];
        shape_text(t, shape, sizeof shape);
        const char *section = t == &m->fc1_weight ? "parameters (master weights), inside the autocast region"
                              : t == &m->x        ? "forward"
                              : t == &m->dlogits  ? "backward"
                                                  : NULL;
        if (section) printf("%s\n", section);
        printf("  %-48s %-6s %s\n", t->name, tlm_act_dtype_name(t->dtype), shape);
    }
    const bool grads_f32 = m->fc1_weight_grad.dtype == TLM_DTYPE_F32 && m->ln_weight_grad.dtype == TLM_DTYPE_F32 &&
                           m->ln_bias_grad.dtype == TLM_DTYPE_F32 && m->fc2_weight_grad.dtype == TLM_DTYPE_F32;
    const bool params_f32 = m->fc1_weight.dtype == TLM_DTYPE_F32 && m->ln_weight.dtype == TLM_DTYPE_F32 &&
                            m->ln_bias.dtype == TLM_DTYPE_F32 && m->fc2_weight.dtype == TLM_DTYPE_F32;
    printf("\nsummary (SPEC.md §2.4's question): parameters %s, fc1 output %s, ReLU output %s, LayerNorm output %s, "
           "logits %s, loss %s, gradients %s\n",
           params_f32 ? "fp32" : "mixed", tlm_act_dtype_name(m->fc1_out.dtype), tlm_act_dtype_name(m->relu_out.dtype),
           tlm_act_dtype_name(m->ln_out.dtype), tlm_act_dtype_name(m->logits.dtype), tlm_act_dtype_name(m->loss.dtype),
           grads_f32 ? "fp32" : "mixed");

    printf("\nloss %.7f   (the same model in fp32: %.7f; relative difference %.2e)\n", (double)loss, (double)ref_loss,
           fabs((double)loss - ref_loss) / fabs((double)ref_loss));
    printf("%-18s %12s %14s %28s\n", "gradient", "norm", "fp32 run's", "||g - g_fp32|| / ||g_fp32||");
    const tlm_toy_tensor *grads[] = {&m->fc1_weight_grad, &m->ln_weight_grad, &m->ln_bias_grad, &m->fc2_weight_grad};
    const tlm_toy_tensor *ref_grads[] = {&ref->fc1_weight_grad, &ref->ln_weight_grad, &ref->ln_bias_grad,
                                         &ref->fc2_weight_grad};
    float *g = malloc(m->num_params * sizeof(float)), *g32 = malloc(m->num_params * sizeof(float));
    if (!g || !g32) {
        free(g), free(g32);
        cli_error(cmd, "out of host memory");
        rc = TLM_EXIT_FAILURE;
        goto done;
    }
    for (int i = 0; i < 4; i++) {
        const size_t k = tlm_toy_numel(grads[i]);
        tlm_toymodel_read(m, grads[i], g);
        tlm_toymodel_read(ref, ref_grads[i], g32);
        printf("%-18s %12.6g %14.6g %28.2e\n", grads[i]->name, norm(g, k), norm(g32, k), tlm_rel_error_f32(g, g32, k));
    }
    free(g), free(g32);
done:
    tlm_toymodel_free(m);
    tlm_toymodel_free(ref);
    tlm_backend_destroy(be);
    return rc;
}

/* ---- layernorm -------------------------------------------------------------------------------- */

static void layernorm_usage(FILE *f) {
    const tlm_ln_lab_config d = tlm_ln_lab_defaults();
    fprintf(f,
            "Usage: tlm precision layernorm [options]\n"
            "LayerNorm y = (x - mean) / sqrt(var + 1e-5) of rows x = M (1 + z), z ~ N(0, 1), computed entirely\n"
            "in fp16, entirely in bf16 (every add, multiply, divide and sqrt rounded to the format), and with\n"
            "fp32 statistics (mean and variance in fp32, x - mean and the scaling rounded to the format), for\n"
            "magnitudes M = 1, 10, 100, 1e3, 1e4 and widths 10, 100, 1000, 10240, against float64 LayerNorm\n"
            "of the same inputs. Prints the grids and the findings read off them. CPU arithmetic (exact\n"
            "software rounding, src/precision/lowp.h).\n"
            "\n"
            "  -r, --rows N       rows per cell (default: %d)\n"
            "  -S, --sum S        sequential (left to right) | pairwise (a balanced tree) (default: sequential)\n"
            "  -s, --seed N       the z of the inputs (default: %llu)\n"
            "  -h, --help         this text\n",
            d.rows, (unsigned long long)d.seed);
}

static void print_grid(const tlm_ln_lab *lab, const char *title, int metric) {
    printf("\n## %s\n%-19s %6s", title, "scheme", "width");
    for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
        char head[16];
        snprintf(head, sizeof head, "M=1e%d", (int)lround(log10(lab->magnitude[mi])));
        printf(" %10s", head);
    }
    printf("\n");
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++) {
            printf("%-19s %6d", tlm_ln_scheme_get((tlm_ln_scheme)s)->name, lab->width[wi]);
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
                const tlm_ln_lab_cell *c = &lab->cell[s][wi][mi];
                const double v = metric == 0 ? c->out_err : metric == 1 ? c->mean_err : metric == 2 ? c->var_err
                                                                                                     : c->max_sumsq;
                if (isnan(v)) printf(" %10s", "NaN");
                else if (isinf(v)) printf(" %10s", "inf");
                else printf(" %10.2e", v);
            }
            printf("\n");
        }
}

static int run_layernorm(int argc, char **argv) {
    const char *cmd = "precision layernorm";
    static const struct option opts[] = {{"rows", required_argument, 0, 'r'},
                                         {"sum", required_argument, 0, 'S'},
                                         {"seed", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    tlm_ln_lab_config cfg = tlm_ln_lab_defaults();
    long v;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "r:S:s:h", opts, NULL)) != -1;) {
        bool ok = true;
        switch (c) {
        case 'r': if ((ok = cli_parse_int(cmd, "--rows", optarg, 1, 4096, &v))) cfg.rows = (int)v; break;
        case 's': if ((ok = cli_parse_int(cmd, "--seed", optarg, 0, 0x7fffffffL, &v))) cfg.seed = (uint64_t)v; break;
        case 'S':
            if (strcmp(optarg, "sequential") == 0) cfg.pairwise = false;
            else if (strcmp(optarg, "pairwise") == 0) cfg.pairwise = true;
            else {
                cli_error(cmd, "--sum: unknown order '%s' (known: sequential, pairwise)", optarg);
                ok = false;
            }
            break;
        case 'h': layernorm_usage(stdout); return TLM_EXIT_OK;
        default: layernorm_usage(stderr); return TLM_EXIT_USAGE;
        }
        if (!ok) return TLM_EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm precision layernorm --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }
    tlm_ln_lab *lab = malloc(sizeof *lab);
    if (!lab || tlm_ln_lab_run(&cfg, lab) != TLM_OK) {
        cli_error(cmd, "%s", lab ? tlm_last_error() : "out of host memory");
        free(lab);
        return TLM_EXIT_FAILURE;
    }
    printf("# tlm precision layernorm: LayerNorm y = (x - mean) / sqrt(var + 1e-5) in low precision (SPEC.md "
           "§2.4; tlm %s)\n", TLM_VERSION);
    printf("# rows x = M (1 + z), z ~ N(0, 1) (mean M, std M), %d rows per cell, seed %llu; sums %s\n", cfg.rows,
           (unsigned long long)cfg.seed, cfg.pairwise ? "pairwise (a balanced tree)" : "left to right");
    printf("# fp16, bf16: inputs in the format, every add, multiply, divide, sqrt rounded to it (computed in fp32, "
           "exact rounding); + fp32 stats: mean, sum of squares, variance, rstd in fp32, x - mean and the "
           "scaling rounded to the format; fp32: everything fp32\n");
    printf("# reference: float64 two-pass LayerNorm of the same inputs (as stored in the format); largest finite "
           "values: fp16 %.0f, bf16 %.4g; inf = overflowed, NaN = the output holds NaN or inf\n",
           tlm_lab_dtype_max(TLM_DTYPE_F16), tlm_lab_dtype_max(TLM_DTYPE_BF16));
    print_grid(lab, "output error ||y - y64|| / ||y64|| (over the cell's rows)", 0);
    print_grid(lab, "mean error |mean - mean64| / std64 (worst row)", 1);
    print_grid(lab, "variance error |var - var64| / var64 (worst row)", 2);
    print_grid(lab, "sum of squares sum((x - mean)^2) as computed (largest row)", 3);
    size_t bad_inputs = 0;
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++)
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) bad_inputs += lab->cell[s][wi][mi].input_overflow;
    if (bad_inputs) printf("\n# note: %zu inputs overflowed their format (x > its largest value)\n", bad_inputs);
    char lines[4][TLM_LN_LAB_LINE];
    const int n = tlm_ln_lab_findings(lab, lines, 4);
    printf("\nfindings:\n");
    for (int i = 0; i < n; i++) printf("- %s\n", lines[i]);
    free(lab);
    return TLM_EXIT_OK;
}

int cmd_precision(int argc, char **argv) {
    if (argc < 2) {
        precision_usage(stderr);
        return TLM_EXIT_USAGE;
    }
    const char *exp = argv[1];
    if (strcmp(exp, "-h") == 0 || strcmp(exp, "--help") == 0 || strcmp(exp, "help") == 0) {
        precision_usage(stdout);
        return TLM_EXIT_OK;
    }
    if (strcmp(exp, "accumulate") == 0) return run_accumulate(argc - 1, argv + 1);
    if (strcmp(exp, "autocast") == 0) return run_autocast(argc - 1, argv + 1);
    if (strcmp(exp, "layernorm") == 0) return run_layernorm(argc - 1, argv + 1);
    cli_error("precision", "unknown experiment '%s' (known: accumulate, autocast, layernorm; see tlm precision --help)",
              exp);
    return TLM_EXIT_USAGE;
}
