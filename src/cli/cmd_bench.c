/* cmd_bench.c — `tlm bench`: the end-to-end benchmark over model sizes x context lengths x precisions
 * (x batch sizes, passes, warm-ups). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"

static const cli_use bench_uses[] = {
    CLI_USES_WORKLOAD(/* --model */ "small,medium,large,xl,2.7B on a GPU; small on the CPU",
                      /* --context-length */ "256 on a GPU, 128 on the CPU",
                      /* --attention */ "auto",
                      /* --warmup */ "5; CPU default run: 1",
                      /* --steps */ "10; CPU default run: 3"),
    {CLI_OPTIMIZER_OVERLAP, "off", 1},
    {CLI_GRAD_ACCUM_STEPS, "1", 1},
    CLI_USES_DDP_SWEEP,
    {CLI_TIMEOUT, "600", 1},
    {CLI_MAX_CONTEXT, NULL, 1},
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};

static const cli_command bench_cmd = {
    .help =
        "Usage: tlm bench [options]\n"
        "End-to-end benchmark of the CS336 Transformer LM: random weights and batch, warm-up\n"
        "steps, then timed steps; forward, backward and the AdamW step each timed between device events.\n"
        "Every combination of the list flags is one row.\n\n",
    .help_after =
        "\nWith no --model, --context-length, --warmup or --steps on a machine without a GPU, tlm bench runs\n"
        "small at context 128 with 1 warm-up and 3 timed steps on the CPU (about 30 s on 2 cores).\n"
        "\nData parallelism: started by a launcher, one process per GPU (NCCL), or per share of the CPU's cores\n"
        "(MPI, --device cpu), every process with the same flags; --batch-size is then the global batch:\n"
        "  mpirun -np 2 tlm bench -m xl -c 256 -b 8 --ddp naive,flat,overlap,bucketed --bucket-mb 1,10,100,1000\n"
        "(as root add --allow-run-as-root; on the CPU: mpirun -np 2 tlm bench --device cpu ...). Only rank 0\n"
        "prints and writes; the memory columns are the largest over the ranks.\n",
    .name = "bench", CLI_USES(bench_uses)};

/* several ranks: the same flags on each (cli_agree: every rank fails alike, named), every --batch-size
 * divided over them */
static bool ddp_check_run(const cli_args *a, const tlm_ddp_process *p) {
    if (cli_agree("bench", a, p, NULL, 0) >= 0) return false;
    const tlm_comm *c = p->comm;
    for (int i = 0; i < a->num_batch_sizes; i++)
        if (a->batch_sizes[i] % c->world_size != 0) {
            if (c->rank == 0)
                cli_error("bench", "--batch-size %d is the global batch: it does not divide over %d ranks (give a "
                                   "multiple of %d)", a->batch_sizes[i], c->world_size, c->world_size);
            return false;
        }
    return true;
}

/* prints the rows from *next on that are ready: run, and their fp32 twin too (the "vs fp32" column),
 * so that rows come out in the sweep's order, each complete, whatever the twin's place in it */
static void print_ready_rows(tlm_report *rep, const tlm_bench_case *cases, tlm_bench_result *res, int n, int done,
                             int *next) {
    for (; *next < done; ++*next) {
        const int i = *next, twin = tlm_bench_fp32_twin(cases, n, i);
        if (twin >= done) return; /* its fp32 twin runs later */
        if (twin >= 0) tlm_bench_set_speedup(&res[i], &res[twin]);
        tlm_bench_report_row(rep, &cases[i], &res[i]);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    cli_args a;
    int rc = cli_parse(&bench_cmd, NULL, argc, argv, &a);
    if (rc >= 0) return rc;
    tlm_ddp_process proc;
    rc = cli_join(cmd, &a, 600, &proc);
    if (rc == TLM_EXIT_FAILURE) { /* this rank alone, maybe: no goodbye barrier, the others are told */
        cli_args_free(&a);
        return rc;
    }
    const int rank = proc.world.rank;
    if (rc < 0 && proc.comm && !ddp_check_run(&a, &proc)) rc = TLM_EXIT_USAGE;
    tlm_backend *be = rc >= 0 ? NULL : proc.comm ? proc.be : cli_create_backend(cmd, &a);
    if (!be) {
        tlm_ddp_leave(&proc, true);
        cli_args_free(&a);
        return rc >= 0 ? rc : TLM_EXIT_FAILURE;
    }
    if (proc.comm) a.out = rank == 0 ? a.out : NULL; /* one writer */
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    const bool cpu_default = on_cpu && !a.given[CLI_DEVICE] && !a.given[CLI_MODEL] && !a.given[CLI_CONTEXT_LENGTH] &&
                             !a.given[CLI_WARMUP] && !a.given[CLI_STEPS];
    /* defaults */
    static char *gpu_models[] = {"small", "medium", "large", "xl", "2.7B"}, *cpu_models[] = {"small"};
    if (!a.num_models) {
        a.models = on_cpu ? cpu_models : gpu_models;
        a.num_models = on_cpu ? 1 : 5;
    }
    cli_default_workload(&a, be, cpu_default ? 1 : 5, cpu_default ? 3 : 10);
    if (cpu_default && rank == 0)
        fprintf(stderr, "tlm bench: no GPU found: running the CPU backend with a short default (small, context 128, "
                        "batch %d, 1 warm-up + 3 timed steps, pass %s); see tlm bench --help to choose\n",
                a.batch_sizes[0], tlm_pass_name(a.passes[0]));

    tlm_bench_case *cases = NULL;
    tlm_bench_weights *weights = NULL;
    tlm_bench_result *res = NULL;
    tlm_report *rep = NULL;
    int n = 0;
    rc = TLM_EXIT_USAGE;
    size_t max_context_bytes = 0;
    if (!cli_bench_cases(cmd, &a, be, &cases, &n) || !cli_max_context_bytes(cmd, &a, be, &max_context_bytes))
        goto done;
    for (int i = 0; i < n; i++) {
        cases[i].max_context_bytes = max_context_bytes;
        cases[i].comm = proc.comm;
        cases[i].graphs &= !proc.comm; /* the data-parallel reducer runs the passes eagerly (ddp.h) */
    }
    rc = TLM_EXIT_FAILURE;
    if (!(res = cli_calloc(cmd, (size_t)n, sizeof *res))) goto done;
    /* the rows of one model share its initial weights, drawn once (bench.h): the models are the sweep's
     * outermost list, so a row shares them with the row before or after it; a model of one row keeps none */
    for (int i = 0; i < n; i++) {
        const bool shared = (i > 0 && strcmp(cases[i - 1].model_name, cases[i].model_name) == 0) ||
                            (i + 1 < n && strcmp(cases[i + 1].model_name, cases[i].model_name) == 0);
        if (shared && !weights && !(weights = tlm_bench_weights_new())) {
            cli_error(cmd, "out of host memory");
            goto done;
        }
        cases[i].weights = shared ? weights : NULL;
    }
    if (!(rep = cli_open_report(cmd, &a, "tlm bench", argc, argv))) goto done;
    cli_report_device(rep, be);
    tlm_bench_report_begin(rep, be, cases, n);
    /* progress: a step's cost is its FLOPs (x3 with backward) x (warm-up + timed steps) */
    double total = 0;
    for (int i = 0; i < n; i++)
        total += tlm_config_forward_flops(&cases[i].config, cases[i].batch_size, cases[i].context_length) *
                 (cases[i].pass == TLM_PASS_FORWARD ? 1 : 3) * (cases[i].warmup + cases[i].steps);
    if (rank == 0) tlm_report_progress_total(rep, n, total); /* the others show no progress */
    int failed = 0, hard_failures = 0, printed = 0;
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
            if (proc.comm) { /* a collective failed: the run cannot go on; the communication layer tells the others */
                cli_error(cmd, "rank %d: %s", rank, tlm_last_error());
                proc.comm = NULL; /* not destroyed: a failed communicator may not answer */
                goto done;
            }
            r->status = TLM_ERR_BACKEND;
            snprintf(r->error, sizeof r->error, "%s", tlm_last_error());
        }
        print_ready_rows(rep, cases, res, n, i + 1, &printed);
        if (r->status != TLM_OK) failed++;
        if (r->status != TLM_OK && r->status != TLM_ERR_OUT_OF_MEMORY) hard_failures++;
    }
    char line[96];
    snprintf(line, sizeof line, "%d configuration%s, %d ran, %d out of memory or failed", n, n == 1 ? "" : "s", n - failed, failed);
    tlm_report_summary_str(rep, "result", line);
    tlm_status s = tlm_report_close(rep, true);
    rep = NULL;
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    rc = hard_failures || s != TLM_OK ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
done:
    tlm_report_close(rep, false);
    free(res);
    free(cases);
    tlm_bench_weights_free(weights);
    if (proc.comm) {
        if (tlm_ddp_leave(&proc, true) != TLM_OK) rc = TLM_EXIT_FAILURE;
    } else if (proc.be != be) {
        tlm_backend_destroy(be); /* alone: the backend is ours (not after a failed collective: the process ends) */
    }
    if (a.models == cpu_models || a.models == gpu_models) a.models = NULL;
    cli_args_free(&a);
    return rc;
}
