/* cmd_profile.c — `tlm profile`: where the time of a training step goes, per kernel, per
 * phase, per layer and per op, with the roofline columns and the findings; or, with --exec, the same
 * kernel tables for another CUDA program (the PyTorch peer) run under tlm's injected profiler.
 * The profiler, the runs and the tables are src/profile (profile.h, profile_run.h); this file reads the
 * flags and writes the report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"
#include "tlm/output.h"
#include "tlm/profile.h"
#include "tlm/profile_run.h"

/* ---- own options --------------------------------------------------------------------------------------- */

enum { OPT_SUITE = 'S', OPT_TRACE = 'T', OPT_EXEC = 'x', OPT_TOP = 'k', OPT_PHASE = 'y', OPT_LAYERS = 'L',
       OPT_OVERHEAD = 'O' };

typedef struct {
    const char *suite, *trace;
    bool exec, layers, overhead;
    long top;
    bool phase[TLM_PHASE_COUNT]; /* which phases the tables show */
} profile_opts;

static profile_opts opts;

static bool profile_handle(void *user, int opt, const char *arg) {
    profile_opts *o = user;
    const char *cmd = "profile";
    static const char *const suites[] = {"seeds"};
    int k;
    switch (opt) {
    case OPT_SUITE: return cli_parse_choice(cmd, "--suite", arg, suites, 1, &k) && ((o->suite = suites[k]), true);
    case OPT_TRACE: o->trace = arg; return true;
    case OPT_EXEC: o->exec = true; return true;
    case OPT_LAYERS: o->layers = true; return true;
    case OPT_OVERHEAD: o->overhead = true; return true;
    case OPT_TOP: return cli_parse_int(cmd, "--top", arg, 0, 1 << 20, &o->top);
    case OPT_PHASE: {
        static const char *const names[] = {"setup", "forward", "backward", "optimizer", "all"};
        char **items;
        int n;
        if (!cli_split_list(cmd, "--phase", arg, 8, &items, &n)) return false;
        bool ok = true;
        memset(o->phase, 0, sizeof o->phase);
        for (int i = 0; ok && i < n; i++) {
            ok = cli_parse_choice(cmd, "--phase", items[i], names, 5, &k);
            if (ok && k == 4) for (int p = 0; p < TLM_PHASE_COUNT; p++) o->phase[p] = true;
            else if (ok) o->phase[k] = true;
        }
        free(items);
        return ok;
    }
    }
    return false;
}

static const cli_use profile_uses[] = {
    CLI_USES_WORKLOAD(/* --model */ "small (--suite seeds: the five sizes)",
                      /* --context-length */ "256 on a GPU, 128 on the CPU (--suite seeds: 128,256,512,1024)",
                      /* --attention */ "auto (--suite seeds: naive, the seeds' model)",
                      /* --warmup */ "3; CPU: 1",
                      /* --steps */ "5; CPU: 2"),
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};
static const struct option profile_options[] = {
    {"suite", required_argument, 0, OPT_SUITE}, {"trace", required_argument, 0, OPT_TRACE},
    {"exec", no_argument, 0, OPT_EXEC},          {"top", required_argument, 0, OPT_TOP},
    {"phase", required_argument, 0, OPT_PHASE}, {"layers", no_argument, 0, OPT_LAYERS},
    {"overhead", no_argument, 0, OPT_OVERHEAD}, {0, 0, 0, 0}};

static const cli_command profile_cmd = {
    .help =
        "Usage: tlm profile [options]                 profile tlm's training step (the tlm bench flags)\n"
        "       tlm profile [options] --exec -- CMD ARGS...   profile another CUDA program\n"
        "Where the time of a step goes: every kernel (CUDA, through CUPTI) or op (CPU, host clock)\n"
        "attributed to its phase (warm-up steps left out), layer and op, CUDA graphs on or off. Per configuration:\n"
        "the kernel table per phase (calls per step, total/mean/min/max us, % of the phase, class), the op table\n"
        "with the roofline columns (ops.def's FLOPs and bytes, achieved TFLOP/s and GB/s, % of the ceilings that\n"
        "tlm measures on the same device: a GEMM per precision and a copy), the time per range, and the findings\n"
        "that answer the seeds' questions from those numbers.\n\n",
    .help_after =
        "  -S, --suite seeds           the profiling sweep: small..2.7B at context 128,256,512,1024, naive\n"
        "                              attention, out-of-memory cases as OOM rows\n"
        "  -T, --trace FILE.json       also write a Chrome trace-event file (open it in ui.perfetto.dev or\n"
        "                              chrome://tracing): ranges on the host track, kernels per stream,\n"
        "                              memcpy/memset, the tracked bytes in use as a counter\n"
        "  -y, --phase LIST            the phases the tables show: forward, backward, optimizer, setup, all\n"
        "                              (default: forward,backward,optimizer)\n"
        "  -k, --top N                 the N kernels with the most time per phase and run (default: 15; 0: all)\n"
        "  -L, --layers                add the time per layer table (layer '-': outside the blocks: the\n"
        "                              embedding, the final norm, the LM head and the loss)\n"
        "  -O, --overhead              also run each configuration unprofiled and report the profiler's cost\n"
        "  -x, --exec -- CMD ARGS...   run CMD with tlm's profiler injected (CUDA_INJECTION64_PATH,\n"
        "                              NVTX_INJECTION64_PATH: libtlm_inject.so beside tlm) and report its\n"
        "                              kernels by NVTX range: ranges named forward, backward, optimizer are the\n"
        "                              phases, \"warmup step N\" is left out (bench/peers/pytorch_lm.py --nvtx\n"
        "                              writes them); --model names the model for the attention FLOP ratio\n",
    .name = "profile", CLI_USES(profile_uses), .options = profile_options, .short_options = "S:T:xk:y:LO",
    .handle = profile_handle, .max_positional = 1 << 20, .checks_own_files = true};

/* ---- the command --------------------------------------------------------------------------------------- */

/* an output's destination can take a file: found out before anything runs */
static bool writable(const char *cmd, const char *flag, const char *path) {
    if (!path) return true;
    tlm_output *o;
    if (tlm_output_open(&o, path) != TLM_OK) {
        cli_error(cmd, "%s: %s", flag, tlm_last_error());
        return false;
    }
    tlm_output_abort(o);
    return true;
}

static bool trace_writable(const char *cmd) { return writable(cmd, "--trace", opts.trace); }

static int finish(const char *cmd, tlm_report *rep, tlm_prof_run *runs, int n, const tlm_ceilings *ceil, bool failed) {
    const bool foreign = !ceil;
    tlm_output_batch_begin(); /* the report's file and the trace: both or neither */
    tlm_prof_tables t = {.top = opts.top, .layers = opts.layers, .overhead = opts.overhead, .ceilings = ceil};
    memcpy(t.phase, opts.phase, sizeof t.phase);
    tlm_prof_write_tables(rep, runs, n, foreign, &t);
    int ran = 0, oom = 0;
    for (int i = 0; i < n; i++) {
        ran += runs[i].p != NULL;
        oom += !runs[i].p && runs[i].r.status == TLM_ERR_OUT_OF_MEMORY;
    }
    char line[128];
    if (foreign) snprintf(line, sizeof line, "%d CUDA process%s profiled", n, n == 1 ? "" : "es");
    else snprintf(line, sizeof line, "%d configuration%s, %d profiled, %d out of memory, %d failed", n,
                       n == 1 ? "" : "s", ran, oom,
                  n - ran - oom);
    tlm_report_summary_str(rep, "result", line);
    tlm_status s = tlm_report_close(rep, true);
    if (s == TLM_OK && opts.trace) {
        tlm_profile **v = malloc((size_t)(n ? n : 1) * sizeof *v);
        int m = 0;
        for (int i = 0; v && i < n; i++)
            if (runs[i].p) {
                if (!runs[i].p->foreign) /* the trace names tlm's runs as the tables do; --exec by command */
                    snprintf(runs[i].p->title, sizeof runs[i].p->title, "%s", runs[i].key);
                v[m++] = runs[i].p;
            }
        s = v ? tlm_profile_write_trace(opts.trace, v, m) : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        free(v);
    }
    const tlm_status b = tlm_output_batch_end(s == TLM_OK);
    if (s == TLM_OK) s = b;
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    else if (opts.trace) fprintf(stderr, "tlm profile: trace written to %s (open it in ui.perfetto.dev)\n", opts.trace);
    return s != TLM_OK || failed ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
}

static int profile_exec(const char *cmd, cli_args *a, int argc, char **argv) {
    static const cli_flag workload[] = {CLI_CONTEXT_LENGTH, CLI_BATCH_SIZE, CLI_PRECISION, CLI_ATTENTION, CLI_PASS,
                                        CLI_WARMUP, CLI_STEPS, CLI_CUDA_GRAPH, CLI_SEED, CLI_DEVICE, CLI_GPU, CLI_THREADS};
    for (size_t i = 0; i < sizeof workload / sizeof workload[0]; i++)
        if (!cli_refuse_together(cmd, a, workload[i], true, "--exec",
                                 "the program's own arguments choose its workload and device"))
            return TLM_EXIT_USAGE;
    if (opts.suite || opts.overhead) {
        cli_error(cmd, "%s conflicts with --exec: it runs tlm's own model", opts.suite ? "--suite" : "--overhead");
        return TLM_EXIT_USAGE;
    }
    if (a->num_positional == 0) {
        cli_error(cmd, "--exec needs a program: tlm profile --exec -- CMD ARGS...");
        return TLM_EXIT_USAGE;
    }
    int d_head = 0;
    if (a->num_models > 1) {
        cli_error(cmd, "--model: one model with --exec (it names the model the program runs, for d_head)");
        return TLM_EXIT_USAGE;
    }
    if (a->num_models == 1) {
        tlm_config cfg;
        if (!cli_model_config(cmd, a, a->models[0], &cfg, NULL, 0)) return TLM_EXIT_USAGE;
        d_head = tlm_config_d_head(&cfg);
    }
    if (!trace_writable(cmd) || !writable(cmd, "--out", a->out)) return TLM_EXIT_FAILURE;
    tlm_prof_run *runs = NULL;
    int n = 0, status = -1;
    tlm_status s = tlm_prof_run_exec(a->positional, a->num_positional, d_head, &runs, &n, &status);
    if (s == TLM_OK && status != 0) {
        cli_error(cmd, "--exec: %s exited with status %d: no report written", a->positional[0], status);
        return TLM_EXIT_FAILURE;
    }
    tlm_report *rep = s == TLM_OK ? cli_open_report(cmd, a, "tlm profile", argc, argv) : NULL;
    if (!rep) {
        if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
        tlm_prof_runs_free(runs, n);
        return TLM_EXIT_FAILURE;
    }
    tlm_report_meta_str(rep, "device", runs[0].p->device);
    tlm_report_meta_str(rep, "profiled", "kernels, memcpy and memset (CUPTI activity records) by the NVTX range "
                                         "open at their launch (on the launching thread, else on any thread); "
                                         "\"warmup step N\" ranges and what they hold left out");
    const int rc = finish(cmd, rep, runs, n, NULL, false);
    tlm_prof_runs_free(runs, n);
    return rc;
}

int cmd_profile(int argc, char **argv) {
    const char *cmd = "profile";
    memset(&opts, 0, sizeof opts);
    opts.top = 15;
    for (int p = TLM_PHASE_FORWARD; p < TLM_PHASE_COUNT; p++) opts.phase[p] = true;
    cli_args a;
    int rc = cli_parse(&profile_cmd, &opts, argc, argv, &a);
    if (rc >= 0) return rc;
    tlm_io_plan files; /* every file checked before anything runs */
    tlm_io_plan_init(&files);
    tlm_io_plan_output(&files, "--trace", opts.trace);
    if (opts.exec && a.num_positional > 0) tlm_io_plan_input(&files, "--exec", a.positional[0]);
    if (!cli_check_files(cmd, &a, &files)) {
        cli_args_free(&a);
        return TLM_EXIT_USAGE;
    }
    if (opts.exec) {
        rc = profile_exec(cmd, &a, argc, argv);
        cli_args_free(&a);
        return rc;
    }
    if (a.num_positional > 0) {
        cli_error(cmd, "unexpected argument '%s' (to profile another program: tlm profile --exec -- CMD ARGS...)",
                  a.positional[0]);
        cli_args_free(&a);
        return TLM_EXIT_USAGE;
    }
    if (opts.suite && (!cli_refuse_together(cmd, &a, CLI_MODEL, true, "--suite seeds", "the suite sets the models") ||
                       !cli_refuse_together(cmd, &a, CLI_CONTEXT_LENGTH, true, "--suite seeds",
                                            "the suite sets the context lengths"))) {
        cli_args_free(&a);
        return TLM_EXIT_USAGE;
    }
    if (!trace_writable(cmd)) {
        cli_args_free(&a);
        return TLM_EXIT_FAILURE;
    }
    tlm_backend *be = cli_create_backend(cmd, &a);
    if (!be) {
        cli_args_free(&a);
        return TLM_EXIT_FAILURE;
    }
    if (!tlm_profiler_available(be)) {
        tlm_profiler *pr;
        (void)tlm_profiler_start(&pr, be, NULL); /* sets the message */
        cli_error(cmd, "%s", tlm_last_error());
        tlm_backend_destroy(be);
        cli_args_free(&a);
        return TLM_EXIT_FAILURE;
    }
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    static char *suite_models[] = {"small", "medium", "large", "xl", "2.7B"}, *default_models[] = {"small"};
    if (!a.num_models) {
        a.models = opts.suite ? suite_models : default_models;
        a.num_models = opts.suite ? 5 : 1;
    }
    if (opts.suite && !a.num_contexts)
        for (int c = 128; c <= 1024; c *= 2) a.contexts[a.num_contexts++] = c;
    if (opts.suite && !a.given[CLI_ATTENTION]) a.attention = TLM_ATTENTION_NAIVE;
    cli_default_workload(&a, be, on_cpu ? 1 : 3, on_cpu ? 2 : 5);

    rc = TLM_EXIT_USAGE; /* a case the flags cannot make */
    tlm_bench_case *cases = NULL;
    tlm_prof_run *runs = NULL;
    tlm_report *rep = NULL;
    int n = 0;
    if (!cli_bench_cases(cmd, &a, be, &cases, &n)) goto done;
    rc = TLM_EXIT_FAILURE;
    if (!(runs = cli_calloc(cmd, (size_t)n, sizeof *runs))) goto done;
    if (!(rep = cli_open_report(cmd, &a, "tlm profile", argc, argv))) goto done;
    cli_report_device(rep, be);
    /* the ceilings of the precisions in the sweep, measured before anything is profiled */
    bool want[TLM_PRECISION_COUNT] = {false};
    for (int i = 0; i < n; i++) want[cases[i].precision] = true;
    tlm_ceilings ceil = {.gemm_n = 0};
    fprintf(stderr, "tlm profile: measuring the device's ceilings (a GEMM per precision, a copy)\n");
    if (tlm_profile_measure_ceilings(be, want, &ceil) != TLM_OK) {
        cli_error(cmd, "measuring the ceilings: %s", tlm_last_error());
        goto done;
    }
    char text[160];
    snprintf(text, sizeof text, "%d^3 GEMM through tlm's matmul_forward, best of several", ceil.gemm_n);
    tlm_report_meta_str(rep, "ceilings", text);
    for (int p = 0; p < TLM_PRECISION_COUNT; p++)
        if (want[p]) {
            char key[64];
            snprintf(key, sizeof key, "gemm_tflop_per_s_%s", tlm_precision_name((tlm_precision)p));
            tlm_report_meta_num(rep, key, ceil.gemm_tflops[p]);
        }
    tlm_report_meta_num(rep, "copy_gb_per_s", ceil.copy_gbps);
    tlm_report_meta_str(rep, "profiled", on_cpu ? "each op timed on the host clock (the CPU's ops are synchronous)"
                                                : "CUPTI activity records (kernels, memcpy, memset), attributed "
                                                  "through external correlation ids and CUDA graph node ids");
    tlm_report_meta_str(rep, "steps", "the timed steps of tlm bench's loop; warm-up steps are left out");
    tlm_report_meta_str(rep, "roofline", "pct_of_roofline = achieved / min(GEMM ceiling, FLOPs/bytes x copy "
                                         "bandwidth) = max(pct_of_peak_flops, pct_of_peak_bw); FLOPs and bytes "
                                         "from ops.def (bytes = each input read once, each output written once)");
    double total = 0;
    for (int i = 0; i < n; i++)
        total += tlm_config_forward_flops(&cases[i].config, cases[i].batch_size, cases[i].context_length) *
                 (cases[i].warmup + cases[i].steps) * (opts.overhead ? 2 : 1);
    tlm_report_progress_total(rep, n, total);
    int hard_failures = 0;
    for (int i = 0; i < n; i++) {
        const tlm_bench_case *bc = &cases[i];
        tlm_prof_run *x = &runs[i];
        tlm_prof_run_key(bc, tlm_attention_resolve(be, &bc->config, bc->precision, bc->attention),
                         tlm_backend_has_graphs(be), x->key, sizeof x->key);
        tlm_report_progress(rep, x->key, tlm_config_forward_flops(&bc->config, bc->batch_size, bc->context_length) *
                                             (bc->warmup + bc->steps) * (opts.overhead ? 2 : 1));
        hard_failures += tlm_prof_run_case(be, bc, &ceil, opts.overhead, x);
    }
    rc = finish(cmd, rep, runs, n, &ceil, hard_failures > 0);
    rep = NULL;
done:
    tlm_report_close(rep, false);
    tlm_prof_runs_free(runs, n);
    free(cases);
    tlm_backend_destroy(be);
    if (a.models == suite_models || a.models == default_models) a.models = NULL;
    cli_args_free(&a);
    return rc;
}
