/* cmd_bench.c — `tlm bench`: the end-to-end benchmark over model sizes x context lengths x precisions
 * (x batch sizes, passes, warm-ups). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"

static const cli_use bench_uses[] = {
    {CLI_MODEL, "small,medium,large,xl,2.7B on a GPU; small on the CPU", CLI_MAX_LIST},
    {CLI_CONTEXT_LENGTH, "256 on a GPU, 128 on the CPU", CLI_MAX_LIST},
    {CLI_BATCH_SIZE, "4", CLI_MAX_LIST},
    {CLI_PRECISION, "fp32", TLM_PRECISION_COUNT},
    {CLI_ATTENTION, "auto", 1},
    {CLI_PASS, "train", 3},
    {CLI_WARMUP, "5; CPU default run: 1", CLI_MAX_LIST},
    {CLI_STEPS, "10; CPU default run: 3", 1},
    {CLI_RECOMPUTE, "none", 3},
    {CLI_OPTIMIZER_IN_BACKWARD, "off", 1},
    {CLI_CUDA_GRAPH, "on", 1},
    {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};

static void bench_usage(FILE *f);
static const cli_command bench_cmd = {.name = "bench", .uses = bench_uses,
                                      .num_uses = (int)(sizeof bench_uses / sizeof bench_uses[0]),
                                      .usage = bench_usage};

static void bench_usage(FILE *f) {
    fprintf(f, "Usage: tlm bench [options]\n"
               "End-to-end benchmark of the CS336 Transformer LM (SPEC.md §2.1): random weights and batch, warm-up\n"
               "steps, then timed steps; forward, backward and the AdamW step each timed between device events.\n"
               "Every combination of the list flags is one row.\n\n");
    cli_print_shared_help(f, &bench_cmd);
    fprintf(f, "\nWith no --model, --context-length, --warmup or --steps on a machine without a GPU, tlm bench runs\n"
               "small at context 128 with 1 warm-up and 3 timed steps on the CPU (about 20 s on 2 cores).\n");
}

/* the fp32 row of the same model, context, batch, pass and warm-up, earlier in the sweep */
static const tlm_bench_result *fp32_twin(const tlm_bench_case *cases, const tlm_bench_result *res, int i) {
    for (int k = 0; k < i; k++)
        if (cases[k].precision == TLM_PRECISION_FP32 && res[k].status == TLM_OK &&
            strcmp(cases[k].model_name, cases[i].model_name) == 0 &&
            cases[k].context_length == cases[i].context_length && cases[k].batch_size == cases[i].batch_size &&
            cases[k].pass == cases[i].pass && cases[k].warmup == cases[i].warmup &&
            cases[k].recompute == cases[i].recompute && cases[k].optimizer_in_backward == cases[i].optimizer_in_backward)
            return &res[k];
    return NULL;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    cli_args a;
    int rc = cli_parse(&bench_cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    tlm_backend *be = cli_create_backend(cmd, &a);
    if (!be) {
        cli_args_free(&a);
        return TLM_EXIT_FAILURE;
    }
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    const bool cpu_default = on_cpu && !a.given[CLI_DEVICE] && !a.given[CLI_MODEL] && !a.given[CLI_CONTEXT_LENGTH] &&
                             !a.given[CLI_WARMUP] && !a.given[CLI_STEPS];
    /* defaults */
    static char *gpu_models[] = {"small", "medium", "large", "xl", "2.7B"}, *cpu_models[] = {"small"};
    if (!a.num_models) {
        a.models = on_cpu ? cpu_models : gpu_models;
        a.num_models = on_cpu ? 1 : 5;
    }
    if (!a.num_contexts) a.contexts[a.num_contexts++] = on_cpu ? 128 : 256;
    if (!a.num_batch_sizes) a.batch_sizes[a.num_batch_sizes++] = 4;
    if (!a.num_precisions) a.precisions[a.num_precisions++] = TLM_PRECISION_FP32;
    if (!a.num_passes) a.passes[a.num_passes++] = TLM_PASS_TRAIN;
    if (!a.num_warmups) a.warmups[a.num_warmups++] = cpu_default ? 1 : 5;
    if (!a.steps) a.steps = cpu_default ? 3 : 10;
    if (cpu_default)
        fprintf(stderr, "tlm bench: no GPU found: running the CPU backend with a short default (small, context 128, "
                        "batch %d, 1 warm-up + 3 timed steps, pass %s); see tlm bench --help to choose\n",
                a.batch_sizes[0], tlm_pass_name(a.passes[0]));

    tlm_bench_case *cases = NULL;
    tlm_bench_result *res = NULL;
    tlm_report *rep = NULL;
    int n = 0;
    rc = TLM_EXIT_USAGE;
    if (!cli_bench_cases(cmd, &a, be, &cases, &n)) goto done;
    rc = TLM_EXIT_FAILURE;
    if (!(res = calloc((size_t)n, sizeof *res))) {
        cli_error(cmd, "out of host memory");
        goto done;
    }
    if (!(rep = cli_open_report(cmd, &a, "tlm bench", argc, argv))) goto done;
    cli_report_device(rep, be);
    tlm_bench_report_begin(rep, be, cases, n);
    /* progress: a step's cost is its FLOPs (x3 with backward) x (warm-up + timed steps) */
    double total = 0;
    for (int i = 0; i < n; i++)
        total += tlm_config_forward_flops(&cases[i].config, cases[i].batch_size, cases[i].context_length) *
                 (cases[i].pass == TLM_PASS_FORWARD ? 1 : 3) * (cases[i].warmup + cases[i].steps);
    tlm_report_progress_total(rep, n, total);
    int failed = 0, hard_failures = 0;
    for (int i = 0; i < n; i++) {
        const tlm_bench_case *bc = &cases[i];
        char label[128];
        snprintf(label, sizeof label, "%s ctx %d batch %d %s %s%s%s", bc->model_name, bc->context_length,
                 bc->batch_size, tlm_precision_name(bc->precision), tlm_pass_name(bc->pass),
                 bc->recompute ? " recompute " : "", bc->recompute ? tlm_recompute_name(bc->recompute) : "");
        tlm_report_progress(rep, label, tlm_config_forward_flops(&bc->config, bc->batch_size, bc->context_length) *
                                            (bc->pass == TLM_PASS_FORWARD ? 1 : 3) * (bc->warmup + bc->steps));
        tlm_bench_result *r = &res[i];
        if (tlm_bench_run(be, bc, r) != TLM_OK) {
            r->status = TLM_ERR_BACKEND;
            snprintf(r->error, sizeof r->error, "%s", tlm_last_error());
        }
        const tlm_bench_result *twin = r->status == TLM_OK && bc->precision != TLM_PRECISION_FP32
                                           ? fp32_twin(cases, res, i) : NULL;
        if (twin && r->forward.mean_ms + r->backward.mean_ms > 0) /* the speed-up over fp32 (SPEC.md §2.5) */
            r->speedup_vs_fp32 = (twin->forward.mean_ms + twin->backward.mean_ms) /
                                 (r->forward.mean_ms + r->backward.mean_ms);
        tlm_bench_report_row(rep, bc, r);
        if (r->status != TLM_OK) failed++;
        if (r->status != TLM_OK && r->status != TLM_ERR_OUT_OF_MEMORY) hard_failures++;
    }
    char line[96];
    snprintf(line, sizeof line, "%d configurations, %d ran, %d out of memory or failed", n, n - failed, failed);
    tlm_report_summary_str(rep, "result", line);
    tlm_status s = tlm_report_close(rep, true);
    rep = NULL;
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    rc = hard_failures || s != TLM_OK ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
done:
    tlm_report_close(rep, false);
    free(res);
    free(cases);
    tlm_backend_destroy(be);
    if (a.models == cpu_models || a.models == gpu_models) a.models = NULL;
    cli_args_free(&a);
    return rc;
}
