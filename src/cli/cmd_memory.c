/* cmd_memory.c — `tlm memory`: where every byte goes over a training step (docs/experiments.md, memory).
 * For each configuration of the bench flags: the model, warm-up steps and one measured step with the
 * memory timeline recording (memory_timeline.h); then the peaks table (peak, its phase, what was live
 * by category, bytes around the phases, the device's own count), the largest allocations with their
 * lifetimes, and on request the event stream as JSON (--timeline, for `tlm plot memory-timeline`) and
 * a snapshot that PyTorch's memory_viz opens (--snapshot). --suite seeds is the seeds' experiment. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"
#include "tlm/memory_timeline.h"
#include "tlm/output.h"

#define MAX_TOP TLM_MEM_MAX_TOP

enum { OPT_SUITE = 3100, OPT_TOP, OPT_SNAPSHOT, OPT_TIMELINE };

typedef struct {
    bool seeds;
    int top;
    const char *snapshot, *timeline;
    size_t memory_limit; /* --max-context: bytes (cli_max_context_bytes); 0: not asked */
} memory_opts;

static const cli_use memory_uses[] = {
    {CLI_MODEL, "small on the CPU, 2.7B on a GPU; --suite seeds: 2.7B", CLI_MAX_LIST},
    {CLI_CONTEXT_LENGTH, "128 on the CPU, 256 on a GPU; --suite seeds: 128,256,512", CLI_MAX_LIST},
    {CLI_BATCH_SIZE, "4", CLI_MAX_LIST},
    {CLI_PRECISION, "fp32; --suite seeds: fp32,bf16", TLM_PRECISION_COUNT},
    {CLI_ATTENTION, "auto", 1},
    {CLI_PASS, "train; --suite seeds: forward,train", 3},
    {CLI_WARMUP, "1", 1},
    CLI_USES_RECOMPUTE,
    {CLI_SEED, "0", 1},
    {CLI_MAX_CONTEXT, NULL, 1},
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};

static const struct option memory_options[] = {{"suite", required_argument, 0, OPT_SUITE},
                                               {"top", required_argument, 0, OPT_TOP},
                                               {"snapshot", required_argument, 0, OPT_SNAPSHOT},
                                               {"timeline", required_argument, 0, OPT_TIMELINE},
                                               {0, 0, 0, 0}};

static bool memory_option(void *user, int opt, const char *arg) {
    memory_opts *o = user;
    long v;
    switch (opt) {
    case OPT_SUITE:
        if (strcmp(arg, "seeds") != 0) {
            cli_error("memory", "--suite: unknown suite '%s' (known: seeds)", arg);
            return false;
        }
        o->seeds = true;
        return true;
    case OPT_TOP: return cli_parse_int("memory", "--top", arg, 0, MAX_TOP, &v) && ((o->top = (int)v), true);
    case OPT_SNAPSHOT: o->snapshot = arg; return true;
    case OPT_TIMELINE: o->timeline = arg; return true;
    }
    return false;
}

static const cli_command memory_cmd = {
    .help =
        "Usage: tlm memory [options]\n"
        "Where every byte goes over a training step: the model, --warmup steps and one measured step, every\n"
        "allocation and free recorded (tag, name, phase, layer, op). Per configuration: the peak, its phase and\n"
        "what was live then by category (parameters, weight copy, gradients, optimizer state, activations,\n"
        "workspace), the bytes after the forward, during the backward and around the optimizer step, the\n"
        "device's own count beside tlm's, and the largest allocations with their lifetimes and why they exist.\n"
        "Runs without CUDA graphs (ops and layers are seen as they are issued). Every combination of the list\n"
        "flags is one configuration; one that does not fit gives an OOM row.\n\n",
    .help_after =
        "      --suite seeds           the seeds' experiment: 2.7B (or --model) at context 128,\n"
        "                              256, 512, forward only and a full training step, fp32 and bf16, batch 4,\n"
        "                              with the size of one residual-stream tensor from the shapes\n"
        "      --top N                 the N largest allocations per configuration (default: 10; 0: none)\n"
        "      --timeline FILE.json    the event stream, for `tlm plot memory-timeline FILE.json`\n"
        "      --snapshot FILE.pickle  a snapshot as torch.cuda.memory._dump_snapshot writes it: drop it on\n"
        "                              pytorch.org/memory_viz (ops, layers and phases as its stack frames)\n"
        "                              With several configurations each file's name gets the configuration\n"
        "                              before its extension (FILE-2.7B-ctx256-b4-fp32-train.json).\n",
    .name = "memory", CLI_USES(memory_uses), .options = memory_options, .handle = memory_option,
    .checks_own_files = true};

/* ---- one configuration ----------------------------------------------------------------------------------- */

/* the configuration as a file-name part: 2.7B-ctx256-b4-fp32-train */
static void case_label(const tlm_bench_case *c, const memory_opts *o, char *buf, size_t n) {
    snprintf(buf, n, "%s-ctx%d-b%d-%s-%s%s%s%s", c->model_name, c->context_length, c->batch_size,
             tlm_precision_name(c->precision), tlm_pass_name(c->pass), c->recompute ? "-recompute-" : "",
             c->recompute ? tlm_recompute_name(c->recompute) : "", c->optimizer_in_backward ? "-oib" : "");
    for (char *p = buf; *p; p++)
        if (*p == '*' || *p == '/') *p = '_';
}

/* Measures one configuration (memory_timeline.h: through the benchmark's step) and writes its files; a
 * failure of the configuration (out of memory) is in r->status, a failure to measure or to write its
 * files is returned. */
static tlm_status run_case(tlm_backend *be, const tlm_bench_case *c, const memory_opts *o, const char *label,
                           tlm_mem_measurement *r) {
    tlm_mem_timeline *t = NULL;
    TLM_TRY(tlm_mem_measure(be, c, o->memory_limit, o->top, r, &t));
    char json[4200], snapshot[4200];
    if (o->timeline) tlm_mem_file_for(o->timeline, label, json, sizeof json);
    if (o->snapshot) tlm_mem_file_for(o->snapshot, label, snapshot, sizeof snapshot);
    const tlm_status s = t ? tlm_mem_write_case_files(t, c, r->attention, be, o->timeline ? json : NULL,
                                                      o->snapshot ? snapshot : NULL)
                           : TLM_OK;
    tlm_mem_timeline_free(t);
    return s;
}

/* ---- the report ------------------------------------------------------------------------------------------- */

/* Primary (the default table, at most TLM_REPORT_WIDTH wide): the case, the peak and where, and what was
 * live then by category, after forward, the backward's and the optimizer's peaks; the weight copy,
 * reserved, device and residual columns with --wide. The largest allocations: the case's columns with
 * --wide (the title names the case of a single case).
 *   key                            type            head        unit   width prec scale flags */
static const tlm_column extra_columns[] = {
    TLM_COL_SIZE("peak_bytes", "peak", 8),
    {"peak_phase", TLM_FIELD_STR, "at", "", -9, 0, 0, 0},
    {"peak_layer", TLM_FIELD_INT, "layer", "", 5, 0, 0, 0},
    TLM_COL_HIDDEN("peak_op", TLM_FIELD_STR),
    TLM_COL_SIZE("parameters_bytes", "params", 8),
    TLM_COL_SIZE_W("weight_copy_bytes", "w.copy", 8),
    TLM_COL_SIZE("gradients_bytes", "grads", 8),
    TLM_COL_SIZE("optimizer_bytes", "adam", 8),
    TLM_COL_SIZE("activations_bytes", "acts", 8),
    TLM_COL_SIZE("workspace_bytes", "wksp", 8),
    TLM_COL_SIZE("after_forward_bytes", "after fwd", 9),
    TLM_COL_SIZE("backward_peak_bytes", "bwd peak", 8),
    TLM_COL_HIDDEN("before_optimizer_bytes", TLM_FIELD_INT),
    TLM_COL_SIZE("optimizer_peak_bytes", "opt peak", 8),
    TLM_COL_HIDDEN("after_optimizer_bytes", TLM_FIELD_INT),
    TLM_COL_SIZE_W("reserved_bytes", "reserved", 8),
    TLM_COL_SIZE_W("device_peak_bytes", "device", 8),
    TLM_COL_HIDDEN("planned_bytes", TLM_FIELD_INT),
    TLM_COL_SIZE_W("residual_bytes", "resid", 8),
    {"max_context", TLM_FIELD_INT, "max ctx", "", 7, 0, 0, 0},
};

static const tlm_column top_columns[] = {
    {"model", TLM_FIELD_STR, "model", "", -8, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"context_length", TLM_FIELD_INT, "ctx", "", 5, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"batch_size", TLM_FIELD_INT, "batch", "", 5, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"precision", TLM_FIELD_STR, "prec", "", -5, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"pass", TLM_FIELD_STR, "pass", "", -16, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"rank", TLM_FIELD_INT, "#", "", 3, 0, 0, 0},
    {"name", TLM_FIELD_STR, "allocation", "", -28, 0, 0, 0},
    TLM_COL_SIZE("bytes", "size", 8),
    {"category", TLM_FIELD_STR, "category", "", -15, 0, 0, 0},
    {"why", TLM_FIELD_STR, "why", "", -25, 0, 0, 0},
    {"from_op", TLM_FIELD_STR, "from", "", -36, 0, 0, 0},
    {"to_op", TLM_FIELD_STR, "to", "", -36, 0, 0, 0},
};

static tlm_column peak_columns[64];
static int num_peak_columns;

static void build_columns(void) {
    num_peak_columns = 0;
    for (int i = 0; i < tlm_bench_case_columns; i++) peak_columns[num_peak_columns++] = tlm_bench_columns[i];
    for (size_t i = 0; i < sizeof extra_columns / sizeof extra_columns[0]; i++)
        peak_columns[num_peak_columns++] = extra_columns[i];
}

static void peaks_row(tlm_report *rep, const tlm_bench_case *c, const memory_opts *o, const tlm_mem_measurement *r) {
    tlm_report_row_begin(rep);
    tlm_bench_report_case(rep, c);
    tlm_report_str(rep, "attention", tlm_attention_name(r->attention));
    const int64_t resid = (int64_t)c->batch_size * c->context_length * c->config.d_model * 4;
    tlm_report_int(rep, "residual_bytes", resid);
    tlm_report_int(rep, "planned_bytes", (int64_t)r->plan.total);
    if (r->max_context >= 0) tlm_report_int(rep, "max_context", r->max_context);
    if (r->status != TLM_OK) {
        tlm_report_status(rep, r->status == TLM_ERR_OUT_OF_MEMORY ? "OOM" : "failed", r->error);
        tlm_report_row_end(rep);
        return;
    }
    const tlm_mem_peaks *p = &r->peaks;
    static const char *const at_keys[TLM_MEMCAT_COUNT] = {"parameters_bytes", "weight_copy_bytes",
                                                          "gradients_bytes",  "optimizer_bytes",
                                                          "activations_bytes", "workspace_bytes"};
    tlm_report_int(rep, "peak_bytes", (int64_t)p->peak);
    tlm_report_str(rep, "peak_phase", tlm_phase_name(p->peak_scope.phase));
    if (p->peak_scope.layer >= 0) tlm_report_int(rep, "peak_layer", p->peak_scope.layer);
    tlm_report_str(rep, "peak_op", p->peak_op);
    for (int k = 0; k < TLM_MEMCAT_COUNT; k++) tlm_report_int(rep, at_keys[k], (int64_t)p->at_peak[k]);
    tlm_report_int(rep, "after_forward_bytes", (int64_t)p->after_forward);
    if (c->pass >= TLM_PASS_FORWARD_BACKWARD) tlm_report_int(rep, "backward_peak_bytes", (int64_t)p->backward_peak);
    if (c->pass == TLM_PASS_TRAIN) {
        tlm_report_int(rep, "before_optimizer_bytes", (int64_t)p->before_optimizer);
        tlm_report_int(rep, "optimizer_peak_bytes", (int64_t)p->optimizer_peak);
        tlm_report_int(rep, "after_optimizer_bytes", (int64_t)p->after_optimizer);
    }
    tlm_report_int(rep, "reserved_bytes", (int64_t)p->peak_footprint);
    if (p->device_peak) tlm_report_int(rep, "device_peak_bytes", (int64_t)p->device_peak);
    tlm_report_row_end(rep);
}

static void top_rows(tlm_report *rep, const tlm_bench_case *c, const tlm_mem_measurement *r) {
    for (int k = 0; k < r->n_top; k++) {
        const tlm_mem_top *e = &r->top[k];
        tlm_report_row_begin(rep);
        tlm_report_str(rep, "model", c->model_name);
        tlm_report_int(rep, "context_length", c->context_length);
        tlm_report_int(rep, "batch_size", c->batch_size);
        tlm_report_str(rep, "precision", tlm_precision_name(c->precision));
        tlm_report_str(rep, "pass", tlm_pass_name(c->pass));
        tlm_report_int(rep, "rank", k + 1);
        tlm_report_str(rep, "name", e->name);
        tlm_report_int(rep, "bytes", (int64_t)e->bytes);
        tlm_report_str(rep, "category", tlm_memcat_name(e->category));
        tlm_report_str(rep, "why", tlm_memwhy_name(e->why));
        tlm_report_str(rep, "from_op", e->from);
        tlm_report_str(rep, "to_op", e->to);
        tlm_report_row_end(rep);
    }
}

/* refuses an output path that cannot be written before anything runs */
static bool check_output(const char *cmd, const char *flag, const char *path, const char *label) {
    char p[4200];
    tlm_mem_file_for(path, label, p, sizeof p);
    tlm_output *o = NULL;
    if (tlm_output_open(&o, p) != TLM_OK) {
        cli_error(cmd, "%s: %s", flag, tlm_last_error());
        return false;
    }
    tlm_output_abort(o);
    return true;
}

int cmd_memory(int argc, char **argv) {
    const char *cmd = "memory";
    memory_opts o = {.top = 10};
    cli_args a;
    int rc = cli_parse(&memory_cmd, &o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    static char *seeds_model[] = {"2.7B"}, *gpu_model[] = {"2.7B"}, *cpu_model[] = {"small"};
    tlm_backend *be = NULL;
    tlm_bench_case *cases = NULL;
    tlm_mem_measurement *res = NULL;
    tlm_report *rep = NULL;
    int n = 0;
    bool batch = false;
    if (o.seeds) {
        const char *why = "--suite seeds fixes the context lengths, passes, precisions and batch size";
        if (!cli_refuse_together(cmd, &a, CLI_CONTEXT_LENGTH, true, "--suite seeds", why) ||
            !cli_refuse_together(cmd, &a, CLI_PASS, true, "--suite seeds", why) ||
            !cli_refuse_together(cmd, &a, CLI_PRECISION, true, "--suite seeds", why) ||
            !cli_refuse_together(cmd, &a, CLI_BATCH_SIZE, true, "--suite seeds", why))
            goto done;
        if (!a.num_models) {
            a.models = seeds_model;
            a.num_models = 1;
        }
        const int ctx[] = {128, 256, 512};
        for (int i = 0; i < 3; i++) a.contexts[a.num_contexts++] = ctx[i];
        a.passes[a.num_passes++] = TLM_PASS_FORWARD;
        a.passes[a.num_passes++] = TLM_PASS_TRAIN;
        a.precisions[a.num_precisions++] = TLM_PRECISION_FP32;
        a.precisions[a.num_precisions++] = TLM_PRECISION_BF16;
        a.batch_sizes[a.num_batch_sizes++] = 4;
    }
    rc = TLM_EXIT_FAILURE;
    if (!(be = cli_create_backend(cmd, &a))) goto done;
    rc = TLM_EXIT_USAGE;
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    if (!a.num_models) {
        a.models = on_cpu ? cpu_model : gpu_model;
        a.num_models = 1;
    }
    cli_default_workload(&a, be, 1, 1); /* 1 warm-up step, 1 measured */
    a.cuda_graphs = false;
    if (!cli_bench_cases(cmd, &a, be, &cases, &n) || !cli_max_context_bytes(cmd, &a, be, &o.memory_limit)) goto done;
    /* every file's destination is checked before anything runs: a bad path costs no run */
    tlm_io_plan files;
    tlm_io_plan_init(&files);
    tlm_mem_plan_files(&files, "--timeline", o.timeline, n);
    tlm_mem_plan_files(&files, "--snapshot", o.snapshot, n);
    if (!cli_check_files(cmd, &a, &files)) goto done;
    for (int i = 0; i < n; i++) {
        char label[160];
        case_label(&cases[i], &o, label, sizeof label);
        if ((o.timeline && !check_output(cmd, "--timeline", o.timeline, n > 1 ? label : NULL)) ||
            (o.snapshot && !check_output(cmd, "--snapshot", o.snapshot, n > 1 ? label : NULL)))
            goto done;
    }
    rc = TLM_EXIT_FAILURE;
    if (!(res = cli_calloc(cmd, (size_t)n, sizeof *res))) goto done;
    tlm_output_batch_begin(); /* the report and every file are committed together */
    batch = true;
    if (!(rep = cli_open_report(cmd, &a, "tlm memory", argc, argv))) goto done;
    cli_report_device(rep, be);
    tlm_report_meta_str(rep, "measured", "the tracked allocator over warm-up steps and one measured step, without "
                                         "CUDA graphs; the peaks are the measured step's");
    tlm_report_meta_str(rep, "peak_bytes", "bytes held by live allocations at the step's peak (PyTorch's "
                                           "max_memory_allocated), and by category what was live then; "
                                           "reserved_bytes adds the arenas' unused bytes (memory_reserved); "
                                           "device_peak_bytes is the device's own count (cudaMemGetInfo) at the "
                                           "step's phase boundaries less what it held outside tlm before; table: "
                                           "each in B, KiB, MiB or GiB (2^10, 2^20, 2^30 bytes)");
    tlm_report_meta_str(rep, "residual_bytes", "one residual-stream tensor, batch x context x d_model x 4 bytes "
                                               "(float32)");
    if (o.memory_limit)
        tlm_report_meta_int(rep, "max_context_memory_bytes", (int64_t)o.memory_limit);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += tlm_config_forward_flops(&cases[i].config, cases[i].batch_size, cases[i].context_length) *
                 (cases[i].pass == TLM_PASS_FORWARD ? 1 : 3) * (cases[i].warmup + 1);
    tlm_report_progress_total(rep, n, total);
    tlm_status file_error = TLM_OK;
    for (int i = 0; i < n && file_error == TLM_OK; i++) {
        char label[160], what[200];
        case_label(&cases[i], &o, label, sizeof label);
        snprintf(what, sizeof what, "%s", label);
        tlm_report_progress(rep, what, tlm_config_forward_flops(&cases[i].config, cases[i].batch_size,
                                                                cases[i].context_length) *
                                           (cases[i].pass == TLM_PASS_FORWARD ? 1 : 3) * (cases[i].warmup + 1));
        file_error = run_case(be, &cases[i], &o, n > 1 ? label : NULL, &res[i]);
    }
    if (file_error != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto done;
    }
    build_columns();
    tlm_report_table(rep, "rows", peak_columns, num_peak_columns);
    tlm_report_table_title(rep, "Peaks of the measured step");
    bool any_device = false, any_ctx = false;
    for (int i = 0; i < n; i++) {
        any_device |= res[i].peaks.device_peak > 0;
        any_ctx |= res[i].max_context >= 0;
    }
    tlm_bench_report_show_case(rep, cases, n);
    tlm_report_show(rep, "pass", true);
    tlm_report_show(rep, "warmup_steps", false);
    tlm_report_show(rep, "device_peak_bytes", any_device);
    tlm_report_show(rep, "max_context", any_ctx);
    int failed = 0, hard = 0;
    for (int i = 0; i < n; i++) {
        peaks_row(rep, &cases[i], &o, &res[i]);
        failed += res[i].status != TLM_OK;
        hard += res[i].status != TLM_OK && res[i].status != TLM_ERR_OUT_OF_MEMORY;
    }
    if (o.seeds || a.given[CLI_MODEL]) { /* the residual stream from the shapes (docs/experiments.md) */
        const tlm_bench_case *big = &cases[0];
        for (int i = 1; i < n; i++)
            if (cases[i].context_length > big->context_length) big = &cases[i];
        char line[256], size[32];
        const double bytes = (double)big->batch_size * big->context_length * big->config.d_model * 4;
        tlm_report_bytes_text(bytes, size, sizeof size);
        snprintf(line, sizeof line, "one residual-stream tensor of %s: batch %d x context %d x d_model %d x 4 bytes "
                 "(float32) = %.0f bytes = %s", big->model_name, big->batch_size, big->context_length,
                 big->config.d_model, bytes, size);
        tlm_report_list(rep, "findings", line);
    }
    if (o.top > 0) {
        tlm_report_table(rep, "largest", top_columns, (int)(sizeof top_columns / sizeof top_columns[0]));
        tlm_report_table_title(rep, "Largest allocations alive in the measured step: lifetime from the op that "
                                    "first runs with it to the last before it is freed");
        for (int i = 0; i < n; i++) top_rows(rep, &cases[i], &res[i]);
    }
    char line[96];
    snprintf(line, sizeof line, "%d configuration%s, %d ran, %d out of memory or failed", n, n == 1 ? "" : "s", n - failed, failed);
    tlm_report_summary_str(rep, "result", line);
    tlm_status s = tlm_report_close(rep, true);
    rep = NULL;
    if (s == TLM_OK) s = tlm_output_batch_end(true);
    else tlm_output_batch_end(false);
    batch = false;
    if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
    rc = hard || s != TLM_OK ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
done:
    tlm_report_close(rep, false);
    if (batch) tlm_output_batch_end(false);
    free(res);
    free(cases);
    tlm_backend_destroy(be);
    if (a.models == seeds_model || a.models == gpu_model || a.models == cpu_model) a.models = NULL;
    cli_args_free(&a);
    return rc;
}
