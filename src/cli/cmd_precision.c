/* cmd_precision.c — `tlm precision <experiment>`: the mixed-precision experiments of docs/experiments.md
 * §2.3-2.4 (accumulate, autocast, layernorm), computed by tlm (precision_lab.h, toymodel.h).
 * Every figure printed here comes from those computations. */
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
            "The mixed-precision experiments of CS336 Assignment 2 (docs/experiments.md), computed by tlm:\n"
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

static const cli_use accumulate_uses[] = {{CLI_DEVICE, NULL, 1}, {CLI_GPU, "0", 1}, CLI_USES_OUTPUT};

static const cli_command accumulate_cmd = {
    .help =
        "Usage: tlm precision accumulate [options]\n"
        "s = 0, then s += 0.01 a thousand times, in six ways: fp32 += fp32, fp16 += fp16,\n"
        "fp32 += fp16 (type promotion), fp32 += fp32(fp16) (converted first), bf16 += bf16, fp32 += bf16.\n"
        "On the CPU every fp16/bf16 add is computed in fp32 and rounded to nearest even, which gives the\n"
        "correctly rounded 16-bit sum (src/precision/lowp.h); on the GPU one thread adds with __half and\n"
        "__nv_bfloat16 arithmetic, and the sums are compared with the CPU's bit for bit (exit status\n"
        "1 if any differs).\n\n",
    .name = "precision accumulate", CLI_USES(accumulate_uses)};

static int run_accumulate(int argc, char **argv) {
    const char *cmd = "precision accumulate";
    cli_args a;
    int rc = cli_parse(&accumulate_cmd, NULL, argc, argv, &a);
    if (rc >= 0) return rc;
    tlm_backend *be = cli_create_backend(cmd, &a);
    if (!be) return TLM_EXIT_FAILURE;
    static tlm_accumulation acc;
    int same = 0;
    tlm_report *rep = NULL;
    rc = TLM_EXIT_FAILURE;
    if (tlm_accumulate_run_checked(be, TLM_ACCUMULATE_VALUE, &acc, &same) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto done;
    }
    if (!(rep = cli_open_report(cmd, &a, "tlm precision accumulate", argc, argv))) goto done;
    const bool on_gpu = be->kind == TLM_DEVICE_CUDA;
    cli_report_device(rep, be);
    tlm_report_meta_str(rep, "experiment", "s = 0, then s += 0.01, 1000 times (docs/experiments.md)");
    tlm_report_meta_str(rep, "arithmetic",
                        on_gpu ? "one GPU thread: __fadd_rn, __hadd on __half and __nv_bfloat16 (one rounding per add)"
                               : "fp32 adds of the CPU; fp16/bf16 adds computed in fp32 and rounded to nearest even "
                                 "(the correctly rounded sum: src/precision/lowp.h)");
    tlm_report_meta_str(rep, "addend", "0.01 rounded to the addend's dtype (through fp32); error = sum - 1000 x 0.01; "
                                       "the floats are printed exactly");
    tlm_accumulate_report_ways(rep, &acc);
    char line[160];
    if (on_gpu) {
        snprintf(line, sizeof line, "the GPU's trajectories (all %d partial sums) equal the CPU's software rounding "
                                    "bit for bit in %d of %d ways", TLM_ACCUMULATE_STEPS, same, TLM_ACC_NUM_WAYS);
        tlm_report_summary_str(rep, "check", line);
    }
    rc = same == TLM_ACC_NUM_WAYS ? TLM_EXIT_OK : TLM_EXIT_FAILURE;
    if (tlm_report_close(rep, true) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        rc = TLM_EXIT_FAILURE;
    }
    rep = NULL;
done:
    tlm_report_close(rep, false);
    tlm_backend_destroy(be);
    return rc;
}

/* ---- autocast --------------------------------------------------------------------------------- */

enum { OPT_IN_FEATURES = 2000, OPT_OUT_FEATURES };
static tlm_toymodel_config toy_cfg;

static bool autocast_handle(void *user, int opt, const char *arg) {
    const char *cmd = "precision autocast";
    long v;
    tlm_dtype dt;
    int k;
    static const char *const losses[] = {"mse", "sum"};
    switch (opt) {
    case 'D':
        if (!tlm_act_dtype_parse(arg, &dt)) {
            cli_error(cmd, "--dtype: unknown dtype '%s' (known: fp16, bf16, fp32)", arg);
            return false;
        }
        toy_cfg.precision = tlm_precision_of_dtype(dt);
        return true;
    case 'l':
        if (!cli_parse_choice(cmd, "--loss", arg, losses, 2, &k)) return false;
        toy_cfg.loss = (tlm_toy_loss)k;
        return true;
    case OPT_IN_FEATURES:
        return cli_parse_int(cmd, "--in-features", arg, 1, 1 << 16, &v) && ((toy_cfg.in_features = (int)v), true);
    case OPT_OUT_FEATURES:
        return cli_parse_int(cmd, "--out-features", arg, 1, 1 << 16, &v) && ((toy_cfg.out_features = (int)v), true);
    }
    return false;
}

static const cli_use autocast_uses[] = {{CLI_BATCH_SIZE, "8", 1}, {CLI_SEED, "0", 1}, {CLI_DEVICE, NULL, 1},
                                        {CLI_GPU, "0", 1}, CLI_USES_OUTPUT};
static const struct option autocast_options[] = {
    {"dtype", required_argument, 0, 'D'},                   {"loss", required_argument, 0, 'l'},
    {"in-features", required_argument, 0, OPT_IN_FEATURES}, {"out-features", required_argument, 0, OPT_OUT_FEATURES},
    {0, 0, 0, 0}};

static void autocast_usage(FILE *f, const cli_command *c) {
    const tlm_toymodel_config d = tlm_toymodel_defaults();
    fprintf(f,
            "Usage: tlm precision autocast [options]\n"
            "The autocast ToyModel (fc1: Linear(in, 10, no bias) -> ReLU -> LayerNorm(10) -> fc2:\n"
            "Linear(10, out, no bias); squared-error loss against a random target) forward and backward\n"
            "through tlm's backend ops under PyTorch's autocast policy (include/tlm/toymodel.h). Prints the\n"
            "dtype each tensor was stored in and the ops were called with, the loss and the gradient norms,\n"
            "each against the same model run in fp32.\n"
            "\n"
            "  -D, --dtype T               fp16 | bf16 (autocast's dtype), or fp32 (no autocast) (default: fp16)\n"
            "  -l, --loss L                mse (mean of squared errors) | sum (sum of squared errors) (default: mse)\n"
            "      --in-features N         fc1's input features (default: %d)\n"
            "      --out-features N        fc2's output features (default: %d)\n",
            d.in_features, d.out_features);
    cli_print_shared_help(f, c);
}

static const cli_command autocast_cmd = {.name = "precision autocast", CLI_USES(autocast_uses),
                                         .options = autocast_options, .short_options = "D:l:",
                                         .handle = autocast_handle, .usage = autocast_usage};

static const tlm_column toy_tensor_columns[] = {
    {"stage", TLM_FIELD_STR, "stage", "", -10, 0, 0, TLM_COL_KEY},
    {"tensor", TLM_FIELD_STR, "tensor", "", -40, 0, 0, TLM_COL_KEY},
    {"dtype", TLM_FIELD_STR, "dtype", "", -6, 0, 0, 0},
    {"shape", TLM_FIELD_STR, "shape", "", -10, 0, 0, 0},
};
static const tlm_column toy_result_columns[] = {
    {"quantity", TLM_FIELD_STR, "quantity", "", -18, 0, 0, TLM_COL_KEY},
    {"value", TLM_FIELD_NUM, "value", "", 13, 7, 0, 0},
    {"fp32_value", TLM_FIELD_NUM, "fp32 run's", "", 13, 7, 0, 0},
    {"rel_diff_vs_fp32", TLM_FIELD_NUM, "rel. diff.", "", 10, 2, 0, TLM_COL_SCI},
};

static void toy_result_row(tlm_report *rep, const char *name, double v, double v32, double rel) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "quantity", name);
    tlm_report_num(rep, "value", v);
    tlm_report_num(rep, "fp32_value", v32);
    tlm_report_num(rep, "rel_diff_vs_fp32", rel);
    tlm_report_row_end(rep);
}

static tlm_status autocast_report(tlm_report *rep, tlm_toymodel *m, tlm_toymodel *ref, float loss, float ref_loss) {
    const tlm_toymodel_config *cfg = &m->cfg;
    char line[512];
    tlm_toymodel_describe(cfg, line, sizeof line);
    tlm_report_meta_str(rep, "model", line);
    snprintf(line, sizeof line, "%s%s", tlm_act_dtype_name(m->dt), m->dt == TLM_DTYPE_F32 ? " (no autocast)" : " autocast");
    tlm_report_meta_str(rep, "mode", line);
    tlm_report_meta_str(rep, "dtype", "what each tensor is stored in and what the ops that wrote and read it were "
                                      "called with");
    tlm_report_table(rep, "tensors", toy_tensor_columns, 4);
    const tlm_toy_tensor *list[32];
    const int n = tlm_toymodel_tensors(m, list, 32);
    const char *stage = "parameters";
    for (int i = 0; i < n; i++) {
        const tlm_toy_tensor *t = list[i];
        if (t == &m->x) stage = "forward";
        else if (t == &m->dlogits) stage = "backward";
        char shape[32];
        if (t->ndim == 2) snprintf(shape, sizeof shape, "[%d, %d]", t->rows, t->cols);
        else if (t->ndim == 1) snprintf(shape, sizeof shape, "[%d]", t->cols);
        else snprintf(shape, sizeof shape, "[]");
        tlm_report_row_begin(rep);
        tlm_report_str(rep, "stage", stage);
        tlm_report_str(rep, "tensor", t->name);
        tlm_report_str(rep, "dtype", tlm_act_dtype_name(t->dtype));
        tlm_report_str(rep, "shape", shape);
        tlm_report_row_end(rep);
    }
    tlm_toymodel_dtypes(m, line, sizeof line);
    tlm_report_list(rep, "answer (the autocast question)", line);

    tlm_report_table(rep, "results", toy_result_columns, 4);
    toy_result_row(rep, "loss", loss, ref_loss, fabs((double)loss - ref_loss) / fabs((double)ref_loss));
    tlm_toy_grad_compare g[TLM_TOY_NUM_GRADS];
    TLM_TRY(tlm_toymodel_compare_grads(m, ref, g));
    for (int i = 0; i < TLM_TOY_NUM_GRADS; i++) /* the gradients' norms, and how far each is from the fp32 run's */
        toy_result_row(rep, g[i].name, g[i].norm, g[i].ref_norm, g[i].rel_diff);
    return TLM_OK;
}

static int run_autocast(int argc, char **argv) {
    const char *cmd = "precision autocast";
    toy_cfg = tlm_toymodel_defaults();
    toy_cfg.precision = TLM_PRECISION_FP16;
    cli_args a;
    int rc = cli_parse(&autocast_cmd, NULL, argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.num_batch_sizes) toy_cfg.batch_size = a.batch_sizes[0];
    if (a.given[CLI_SEED]) toy_cfg.seed = a.seed;
    tlm_backend *be = cli_create_backend(cmd, &a);
    if (!be) return TLM_EXIT_FAILURE;
    /* the model in the chosen mode, and the same model (same seed) in fp32 for comparison */
    tlm_toymodel *m = NULL, *ref = NULL;
    tlm_report *rep = NULL;
    float loss = 0.0f, ref_loss = 0.0f;
    rc = TLM_EXIT_FAILURE;
    if (tlm_toymodel_run_pair(be, &toy_cfg, &m, &ref, &loss, &ref_loss) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto done;
    }
    if (!(rep = cli_open_report(cmd, &a, "tlm precision autocast", argc, argv))) goto done;
    cli_report_device(rep, be);
    const tlm_status s = autocast_report(rep, m, ref, loss, ref_loss);
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    if (tlm_report_close(rep, s == TLM_OK) != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    else if (s == TLM_OK) rc = TLM_EXIT_OK;
    rep = NULL;
done:
    tlm_report_close(rep, false);
    tlm_toymodel_free(m);
    tlm_toymodel_free(ref);
    tlm_backend_destroy(be);
    return rc;
}

/* ---- layernorm -------------------------------------------------------------------------------- */

static tlm_ln_lab_config ln_cfg;

static bool layernorm_handle(void *user, int opt, const char *arg) {
    const char *cmd = "precision layernorm";
    static const char *const orders[] = {"sequential", "pairwise"};
    long v;
    int k;
    if (opt == 'r') return cli_parse_int(cmd, "--rows", arg, 1, 4096, &v) && ((ln_cfg.rows = (int)v), true);
    if (opt == 'S') return cli_parse_choice(cmd, "--sum", arg, orders, 2, &k) && ((ln_cfg.pairwise = k == 1), true);
    return false;
}

static const cli_use layernorm_uses[] = {{CLI_SEED, "0", 1}, CLI_USES_OUTPUT};
static const struct option layernorm_options[] = {
    {"rows", required_argument, 0, 'r'}, {"sum", required_argument, 0, 'S'}, {0, 0, 0, 0}};

static void layernorm_usage(FILE *f, const cli_command *c) {
    fprintf(f,
            "Usage: tlm precision layernorm [options]\n"
            "LayerNorm y = (x - mean) / sqrt(var + 1e-5) of rows x = M (1 + z), z ~ N(0, 1), computed entirely\n"
            "in fp16, entirely in bf16 (every add, multiply, divide and sqrt rounded to the format), and with\n"
            "fp32 statistics (mean and variance in fp32, x - mean and the scaling rounded to the format), for\n"
            "magnitudes M = 1, 10, 100, 1e3, 1e4 and widths 10, 100, 1000, 10240, against float64 LayerNorm\n"
            "of the same inputs. Prints the grids and the findings read off them. CPU arithmetic (exact\n"
            "software rounding, src/precision/lowp.h).\n"
            "\n"
            "  -r, --rows N                rows per cell (default: %d)\n"
            "  -S, --sum S                 sequential (left to right) | pairwise (a balanced tree) (default:\n"
            "                              sequential)\n",
            tlm_ln_lab_defaults().rows);
    cli_print_shared_help(f, c);
}

static const cli_command layernorm_cmd = {.name = "precision layernorm", CLI_USES(layernorm_uses),
                                          .options = layernorm_options, .short_options = "r:S:",
                                          .handle = layernorm_handle, .usage = layernorm_usage,
                                          .flag_help = {[CLI_SEED] = "seed of the random inputs z"}};

/* the grids' columns: scheme, width, then one per magnitude M = 1e0 .. 1e4 */
static const tlm_column ln_columns[2 + TLM_LN_LAB_MAGNITUDES] = {
    {"scheme", TLM_FIELD_STR, "scheme", "", -19, 0, 0, TLM_COL_KEY},
    {"width", TLM_FIELD_INT, "width", "", 6, 0, 0, TLM_COL_KEY},
    {"m_1e0", TLM_FIELD_NUM, "M=1e0", "", 10, 2, 0, TLM_COL_SCI},
    {"m_1e1", TLM_FIELD_NUM, "M=1e1", "", 10, 2, 0, TLM_COL_SCI},
    {"m_1e2", TLM_FIELD_NUM, "M=1e2", "", 10, 2, 0, TLM_COL_SCI},
    {"m_1e3", TLM_FIELD_NUM, "M=1e3", "", 10, 2, 0, TLM_COL_SCI},
    {"m_1e4", TLM_FIELD_NUM, "M=1e4", "", 10, 2, 0, TLM_COL_SCI},
};

static void ln_grid(tlm_report *rep, const tlm_ln_lab *lab, const char *name, const char *title, int metric) {
    tlm_report_table(rep, name, ln_columns, 2 + TLM_LN_LAB_MAGNITUDES);
    tlm_report_table_title(rep, title);
    for (int s = 0; s < TLM_LN_NUM_SCHEMES; s++)
        for (int wi = 0; wi < TLM_LN_LAB_WIDTHS; wi++) {
            tlm_report_row_begin(rep);
            tlm_report_str(rep, "scheme", tlm_ln_scheme_get((tlm_ln_scheme)s)->name);
            tlm_report_int(rep, "width", lab->width[wi]);
            for (int mi = 0; mi < TLM_LN_LAB_MAGNITUDES; mi++) {
                const tlm_ln_lab_cell *c = &lab->cell[s][wi][mi];
                const double v = metric == 0 ? c->out_err : metric == 1 ? c->mean_err : metric == 2 ? c->var_err
                                                                                                     : c->max_sumsq;
                tlm_report_num(rep, ln_columns[2 + mi].key, v); /* inf: overflowed; NaN: the output holds NaN */
            }
            tlm_report_row_end(rep);
        }
}

static int run_layernorm(int argc, char **argv) {
    const char *cmd = "precision layernorm";
    ln_cfg = tlm_ln_lab_defaults();
    cli_args a;
    int rc = cli_parse(&layernorm_cmd, NULL, argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.given[CLI_SEED]) ln_cfg.seed = a.seed;
    tlm_ln_lab *lab = malloc(sizeof *lab);
    if (!lab || tlm_ln_lab_run(&ln_cfg, lab) != TLM_OK) {
        cli_error(cmd, "%s", lab ? tlm_last_error() : "out of host memory");
        free(lab);
        return TLM_EXIT_FAILURE;
    }
    tlm_report *rep = cli_open_report(cmd, &a, "tlm precision layernorm", argc, argv);
    if (!rep) {
        free(lab);
        return TLM_EXIT_FAILURE;
    }
    char line[512];
    tlm_report_meta_str(rep, "experiment", "LayerNorm y = (x - mean) / sqrt(var + 1e-5) in low precision");
    snprintf(line, sizeof line, "x = M (1 + z), z ~ N(0, 1) (mean M, std M), %d rows per cell, seed %llu; sums %s",
             ln_cfg.rows, (unsigned long long)ln_cfg.seed, ln_cfg.pairwise ? "pairwise (a balanced tree)" : "left to right");
    tlm_report_meta_str(rep, "rows", line);
    tlm_report_meta_str(rep, "schemes", "fp16, bf16: inputs in the format, every add, multiply, divide, sqrt rounded "
                                        "to it (computed in fp32, exact rounding); + fp32 stats: mean, sum of squares, "
                                        "variance, rstd in fp32, x - mean and the scaling rounded to the format; fp32: "
                                        "everything fp32");
    snprintf(line, sizeof line, "float64 two-pass LayerNorm of the same inputs (as stored in the format); largest "
                                "finite values: fp16 %.0f, bf16 %.4g; inf = overflowed, nan = the output holds NaN or inf",
             tlm_lab_dtype_max(TLM_DTYPE_F16), tlm_lab_dtype_max(TLM_DTYPE_BF16));
    tlm_report_meta_str(rep, "reference", line);
    ln_grid(rep, lab, "output_error", "output error ||y - y64|| / ||y64|| (over the cell's rows)", 0);
    ln_grid(rep, lab, "mean_error", "mean error |mean - mean64| / std64 (worst row)", 1);
    ln_grid(rep, lab, "variance_error", "variance error |var - var64| / var64 (worst row)", 2);
    ln_grid(rep, lab, "sum_of_squares", "sum of squares sum((x - mean)^2) as computed (largest row)", 3);
    const size_t bad_inputs = tlm_ln_lab_inputs_overflowed(lab);
    if (bad_inputs) tlm_report_summary_int(rep, "inputs_overflowed", (int64_t)bad_inputs);
    char lines[4][TLM_LN_LAB_LINE];
    const int n = tlm_ln_lab_findings(lab, lines, 4);
    for (int i = 0; i < n; i++) tlm_report_list(rep, "findings", lines[i]);
    free(lab);
    if (tlm_report_close(rep, true) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    return TLM_EXIT_OK;
}

int cmd_precision(int argc, char **argv) {
    static const cli_subcommand experiments[] = {
        {"accumulate", run_accumulate}, {"autocast", run_autocast}, {"layernorm", run_layernorm}};
    return cli_run_subcommand("tlm precision", "experiment", argc, argv, experiments, 3, precision_usage);
}
