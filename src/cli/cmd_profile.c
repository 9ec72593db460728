/* cmd_profile.c — `tlm profile`: where the time of a training step goes (SPEC.md §2.2), per kernel, per
 * phase, per layer and per op, with the roofline columns and the findings; or, with --exec, the same
 * kernel tables for another CUDA program (the PyTorch peer) run under tlm's injected profiler.
 * The profiler is src/profile (profile.h); this file runs the cases and writes the report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "profile/profile_exec.h"
#include "tlm/bench.h"
#include "tlm/output.h"
#include "tlm/profile.h"

#define MIB (1.0 / (1024.0 * 1024.0))

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
        "Where the time of a step goes (SPEC.md §2.2): every kernel (CUDA, through CUPTI) or op (CPU, host clock)\n"
        "attributed to its phase (warm-up steps left out), layer and op, CUDA graphs on or off. Per configuration:\n"
        "the kernel table per phase (calls per step, total/mean/min/max us, % of the phase, class), the op table\n"
        "with the roofline columns (ops.def's FLOPs and bytes, achieved TFLOP/s and GB/s, % of the ceilings that\n"
        "tlm measures on the same device: a GEMM per precision and a copy), the time per range, and the findings\n"
        "that answer the seeds' questions from those numbers.\n\n",
    .help_after =
        "  -S, --suite seeds           SPEC.md §2.2's sweep: small..2.7B at context 128,256,512,1024, naive\n"
        "                              attention, out-of-memory cases as OOM rows\n"
        "  -T, --trace FILE.json       also write a Chrome trace-event file (open it in ui.perfetto.dev or\n"
        "                              chrome://tracing): ranges on the host track, kernels per stream,\n"
        "                              memcpy/memset, the tracked bytes in use as a counter\n"
        "  -y, --phase LIST            the phases the tables show: forward, backward, optimizer, setup, all\n"
        "                              (default: forward,backward,optimizer)\n"
        "  -k, --top N                 the N kernels with the most time per phase and run (default: 15; 0: all)\n"
        "  -L, --layers                add the time per layer table\n"
        "  -O, --overhead              also run each configuration unprofiled and report the profiler's cost\n"
        "  -x, --exec -- CMD ARGS...   run CMD with tlm's profiler injected (CUDA_INJECTION64_PATH,\n"
        "                              NVTX_INJECTION64_PATH: libtlm_inject.so beside tlm) and report its\n"
        "                              kernels by NVTX range: ranges named forward, backward, optimizer are the\n"
        "                              phases, \"warmup step N\" is left out (bench/peers/pytorch_lm.py --nvtx\n"
        "                              writes them); --model names the model for the attention FLOP ratio\n",
    .name = "profile", CLI_USES(profile_uses), .options = profile_options, .short_options = "S:T:xk:y:LO",
    .handle = profile_handle, .max_positional = 1 << 20};

/* ---- the report's tables ------------------------------------------------------------------------------- */

/* every table's key: the run (case_key's name), and in the per-phase tables the phase */
#define RUN_KEY {"run", TLM_FIELD_STR, "run", "", -28, 0, 0, TLM_COL_KEY}
#define PHASE_KEY {"phase", TLM_FIELD_STR, "phase", "", -9, 0, 0, TLM_COL_KEY}
/* the share of its phase's time, in the per-phase tables */
#define PCT_OF_PHASE {"pct_of_phase", TLM_FIELD_NUM, "phase", "%", 6, 1, 0, 0}
/* the first KERNEL_OR_OP_NUM_KEYS columns of the kernel and op tables: the run, the phase, the kernel's or
 * op's name (its column `width` wide), its class and its calls per step (kernel_or_op_row writes them) */
enum { KERNEL_OR_OP_NUM_KEYS = 5 };
#define KERNEL_OR_OP_KEYS(name, width)                                                                          \
    RUN_KEY, PHASE_KEY, {name, TLM_FIELD_STR, name, "", width, 0, 0, TLM_COL_KEY},                              \
        {"class", TLM_FIELD_STR, "class", "", -13, 0, 0, 0},                                                      \
        {"calls_per_step", TLM_FIELD_NUM, "calls", "/step", 7, 1, 0, 0}
/* a phase's time per step: the wall clock and the kernels' */
#define PHASE_MS(wall_key, kernel_key, head)                                                                    \
    {wall_key, TLM_FIELD_NUM, head, "ms wall", 9, 3, 0, 0}, {kernel_key, TLM_FIELD_NUM, head, "ms kern", 9, 3, 0, 0}

/*   key                  type            head         unit      width prec scale flags */
static const tlm_column kernel_cols[] = {
    KERNEL_OR_OP_KEYS("kernel", -64),
    TLM_COL_US("total_us", "total", 12, 1),
    TLM_COL_US("per_step_us", "per step", 11, 1),
    TLM_COL_US("mean_us", "mean", 10, 2),
    TLM_COL_US("min_us", "min", 10, 2),
    TLM_COL_US("max_us", "max", 10, 2),
    PCT_OF_PHASE,
};
static const tlm_column op_cols[] = {
    KERNEL_OR_OP_KEYS("op", -24),
    {"kernels_per_call", TLM_FIELD_NUM, "kern", "/call", 6, 2, 0, 0},
    TLM_COL_US("per_step_us", "per step", 10, 1),
    PCT_OF_PHASE,
    {"flops_per_step", TLM_FIELD_NUM, "FLOP", "G/step", 9, 2, 1e-9, 0},
    {"bytes_per_step", TLM_FIELD_NUM, "bytes", "MB/step", 9, 1, 1e-6, 0},
    {"tflop_per_s", TLM_FIELD_NUM, "TFLOP/s", "", 8, 3, 0, 0},
    {"gb_per_s", TLM_FIELD_NUM, "GB/s", "", 8, 1, 0, 0},
    {"pct_of_peak_flops", TLM_FIELD_NUM, "peak", "%FLOP", 6, 1, 0, 0},
    {"pct_of_peak_bw", TLM_FIELD_NUM, "peak", "%BW", 6, 1, 0, 0},
    {"pct_of_roofline", TLM_FIELD_NUM, "roofl.", "%", 6, 1, 0, 0},
    {"bound", TLM_FIELD_STR, "bound", "", -7, 0, 0, 0},
};
static const tlm_column layer_cols[] = {
    RUN_KEY,
    PHASE_KEY,
    {"layer", TLM_FIELD_INT, "layer", "", 5, 0, 0, TLM_COL_KEY},
    TLM_COL_US("per_step_us", "per step", 10, 1),
    PCT_OF_PHASE,
};
static const tlm_column range_cols[] = {
    RUN_KEY,
    {"range", TLM_FIELD_STR, "range", "", -28, 0, 0, TLM_COL_KEY},
    {"kind", TLM_FIELD_STR, "kind", "", -6, 0, 0, 0},
    {"count_per_step", TLM_FIELD_NUM, "count", "/step", 7, 1, 0, 0},
    {"kernel_us_per_step", TLM_FIELD_NUM, "kernels", "us/step", 11, 1, 0, 0},
    TLM_COL_US("kernel_us_total", "total", 12, 1),
};
static const tlm_column run_cols[] = {
    RUN_KEY,
    TLM_COL_HIDDEN("model", TLM_FIELD_STR),
    TLM_COL_HIDDEN("context_length", TLM_FIELD_INT),
    TLM_COL_HIDDEN("batch_size", TLM_FIELD_INT),
    TLM_COL_HIDDEN("precision", TLM_FIELD_STR),
    TLM_COL_HIDDEN("attention", TLM_FIELD_STR),
    TLM_COL_HIDDEN("pass", TLM_FIELD_STR),
    TLM_COL_HIDDEN("cuda_graphs", TLM_FIELD_BOOL),
    TLM_COL_HIDDEN("command", TLM_FIELD_STR),
    {"steps", TLM_FIELD_INT, "steps", "", 5, 0, 0, 0},
    PHASE_MS("fwd_ms_mean", "fwd_kernel_ms", "forward"),
    {"fwd_span_ms", TLM_FIELD_NUM, "forward", "ms span", 9, 3, 0, 0},
    PHASE_MS("bwd_ms_mean", "bwd_kernel_ms", "backward"),
    PHASE_MS("opt_ms_mean", "opt_kernel_ms", "optim."),
    {"kernels_per_step", TLM_FIELD_NUM, "kernels", "/step", 8, 1, 0, 0},
    {"kernels_per_forward", TLM_FIELD_NUM, "kernels", "/fwd", 8, 1, 0, 0},
    {"gemm_pct_forward", TLM_FIELD_NUM, "GEMM", "% fwd", 6, 1, 0, 0},
    {"gemm_pct_step", TLM_FIELD_NUM, "GEMM", "% step", 6, 1, 0, 0},
    {"overhead_pct", TLM_FIELD_NUM, "overh.", "%", 6, 1, 0, 0},
    TLM_COL_HIDDEN("fwd_leader", TLM_FIELD_STR),
    TLM_COL_HIDDEN("fwd_leader_pct", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("fwd_leader_calls_per_step", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("fb_leader", TLM_FIELD_STR),
    TLM_COL_HIDDEN("fb_leader_pct", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("non_gemm_pct", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("attn_scores_ms", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("attn_softmax_ms", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("attn_final_ms", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("flash_fwd_ms", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("flash_bwd_ms", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("step_ms_unprofiled", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("step_ms_profiled", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("unattributed", TLM_FIELD_INT),
    TLM_COL_HIDDEN("dropped_records", TLM_FIELD_INT),
    TLM_COL_HIDDEN("peak_bytes", TLM_FIELD_INT),
};
#define NCOLS(c) ((int)(sizeof c / sizeof c[0]))

/* ---- one profiled run ----------------------------------------------------------------------------------- */

typedef struct {
    char key[64];                /* the run's name in every table */
    const tlm_bench_case *c;     /* NULL for --exec */
    tlm_bench_result r;
    tlm_profile *p;              /* NULL when the case failed */
    tlm_prof_summary s;
    double unprofiled_step_ms;   /* --overhead; NaN: not measured */
} run;

static void case_key(const tlm_bench_case *c, tlm_attention resolved, bool has_graphs, char *out, size_t n) {
    int k = snprintf(out, n, "%s ctx%d %s %s", c->model_name, c->context_length, tlm_precision_name(c->precision),
                     tlm_attention_name(resolved));
    if (c->batch_size != 4 && k < (int)n) k += snprintf(out + k, n - (size_t)k, " b%d", c->batch_size);
    if (c->pass != TLM_PASS_TRAIN && k < (int)n) k += snprintf(out + k, n - (size_t)k, " %s", tlm_pass_name(c->pass));
    if (has_graphs && !c->graphs && k < (int)n) snprintf(out + k, n - (size_t)k, " eager");
}

static bool shown(tlm_phase p) { return opts.phase[p]; }

/* a number that may be missing (NaN: not measured; with positive_only, 0: not profiled) */
static void num_if(tlm_report *rep, const char *key, double v, bool positive_only) {
    if (isfinite(v) && (!positive_only || v > 0)) tlm_report_num(rep, key, v);
}

/* a row begun with its keys: the run, and the phase (NULL: a table without one) */
static void row_begin(tlm_report *rep, const run *x, const char *phase) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "run", x->key);
    if (phase) tlm_report_str(rep, "phase", phase);
}

/* a kernel's or op's row begun with the columns of KERNEL_OR_OP_KEYS */
static void kernel_or_op_row(tlm_report *rep, const run *x, tlm_phase phase, const char *name_key, const char *name,
                             const char *cls, double calls_per_step) {
    row_begin(rep, x, tlm_phase_name(phase));
    tlm_report_str(rep, name_key, name);
    tlm_report_str(rep, "class", cls);
    tlm_report_num(rep, "calls_per_step", calls_per_step);
}

static void write_tables(tlm_report *rep, run *runs, int n, bool foreign) {
    tlm_report_table(rep, "kernels", kernel_cols, NCOLS(kernel_cols));
    for (int i = 0; i < n; i++) {
        if (!runs[i].p) continue;
        int shown_in_phase[TLM_PHASE_COUNT] = {0};
        for (size_t k = 0; k < runs[i].s.n_kernels; k++) {
            const tlm_prof_kernel_row *r = &runs[i].s.kernels[k];
            if (!shown(r->phase) || (opts.top > 0 && shown_in_phase[r->phase]++ >= opts.top)) continue;
            kernel_or_op_row(rep, &runs[i], r->phase, "kernel", r->name, tlm_kernel_class_name(r->cls),
                             r->calls_per_step);
            /* its times (us) and share of the phase, in kernel_cols's order */
            const double v[] = {r->total_us, r->per_step_us, r->mean_us, r->min_us, r->max_us, r->pct_of_phase};
            for (int c = 0; c < (int)(sizeof v / sizeof v[0]); c++)
                tlm_report_num(rep, kernel_cols[KERNEL_OR_OP_NUM_KEYS + c].key, v[c]);
            tlm_report_row_end(rep);
        }
    }
    if (!foreign) {
        tlm_report_table(rep, "ops", op_cols, NCOLS(op_cols));
        for (int i = 0; i < n; i++)
            for (size_t k = 0; runs[i].p && k < runs[i].s.n_ops; k++) {
                const tlm_prof_op_row *r = &runs[i].s.ops[k];
                if (!shown(r->phase)) continue;
                kernel_or_op_row(rep, &runs[i], r->phase, "op", tlm_op_name(r->op),
                                 tlm_op_class_name(tlm_op_class_of(r->op)), r->calls_per_step);
                tlm_report_num(rep, "kernels_per_call", r->kernels_per_call);
                tlm_report_num(rep, "per_step_us", r->per_step_us);
                tlm_report_num(rep, "pct_of_phase", r->pct_of_phase);
                tlm_report_num(rep, "flops_per_step", r->flops_per_step);
                tlm_report_num(rep, "bytes_per_step", r->bytes_per_step);
                tlm_report_num(rep, "tflop_per_s", r->tflops);
                tlm_report_num(rep, "gb_per_s", r->gbps);
                num_if(rep, "pct_of_peak_flops", r->pct_of_peak_flops, false);
                num_if(rep, "pct_of_peak_bw", r->pct_of_peak_bw, false);
                num_if(rep, "pct_of_roofline", r->pct_of_roofline, false);
                if (isfinite(r->pct_of_roofline)) tlm_report_str(rep, "bound", r->memory_bound ? "memory" : "compute");
                tlm_report_row_end(rep);
            }
    }
    if (opts.layers) {
        tlm_report_table(rep, "layers", layer_cols, NCOLS(layer_cols));
        for (int i = 0; i < n; i++)
            for (size_t k = 0; runs[i].p && k < runs[i].s.n_layers; k++) {
                const tlm_prof_layer_row *r = &runs[i].s.layers[k];
                if (!shown(r->phase)) continue;
                row_begin(rep, &runs[i], tlm_phase_name(r->phase));
                tlm_report_int(rep, "layer", r->layer);
                tlm_report_num(rep, "per_step_us", r->per_step_us);
                tlm_report_num(rep, "pct_of_phase", r->pct_of_phase);
                tlm_report_row_end(rep);
            }
    }
    tlm_report_table(rep, "ranges", range_cols, NCOLS(range_cols));
    static const char *const kinds[] = {"step", "phase", "layer", "stage", "nvtx"};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; runs[i].p && k < runs[i].s.n_ranges; k++) {
            const tlm_prof_range_row *r = &runs[i].s.ranges[k];
            if (r->kind == TLM_RANGE_LAYER) continue; /* the layer table has them */
            bool hidden = false; /* a phase's own range follows --phase */
            for (int p = 0; r->kind == TLM_RANGE_PHASE && p < TLM_PHASE_COUNT; p++)
                hidden |= !shown((tlm_phase)p) && strcmp(r->name, tlm_phase_name((tlm_phase)p)) == 0;
            if (hidden) continue;
            row_begin(rep, &runs[i], NULL);
            tlm_report_str(rep, "range", r->name);
            tlm_report_str(rep, "kind", r->kind >= 0 && r->kind <= TLM_PROF_RANGE_NVTX ? kinds[r->kind] : "?");
            tlm_report_num(rep, "count_per_step", r->count_per_step);
            tlm_report_num(rep, "kernel_us_per_step", r->per_step_us);
            tlm_report_num(rep, "kernel_us_total", r->total_us);
            tlm_report_row_end(rep);
        }
    tlm_report_table(rep, "runs", run_cols, NCOLS(run_cols));
    tlm_report_show(rep, "overhead_pct", opts.overhead);
    tlm_report_show(rep, "fwd_ms_mean", !foreign);
    tlm_report_show(rep, "bwd_ms_mean", !foreign);
    tlm_report_show(rep, "opt_ms_mean", !foreign);
    for (int i = 0; i < n; i++) {
        const run *x = &runs[i];
        row_begin(rep, x, NULL);
        if (x->c) {
            tlm_report_str(rep, "model", x->c->model_name);
            tlm_report_int(rep, "context_length", x->c->context_length);
            tlm_report_int(rep, "batch_size", x->c->batch_size);
            tlm_report_str(rep, "precision", tlm_precision_name(x->c->precision));
            tlm_report_str(rep, "attention", tlm_attention_name(x->r.attention));
            tlm_report_str(rep, "pass", tlm_pass_name(x->c->pass));
            tlm_report_bool(rep, "cuda_graphs", x->c->graphs);
            tlm_report_int(rep, "peak_bytes", (int64_t)x->r.peak_bytes);
        }
        if (x->p && x->p->foreign) tlm_report_str(rep, "command", x->p->title);
        if (!x->p) {
            const bool oom = x->r.status == TLM_ERR_OUT_OF_MEMORY;
            tlm_report_status(rep, oom ? "OOM" : "failed", x->r.error);
            tlm_report_row_end(rep);
            continue;
        }
        const tlm_prof_summary *s = &x->s;
        tlm_report_int(rep, "steps", s->steps);
        if (x->c) {
            tlm_report_num(rep, "fwd_ms_mean", x->r.forward.mean_ms);
            if (x->c->pass >= TLM_PASS_FORWARD_BACKWARD) tlm_report_num(rep, "bwd_ms_mean", x->r.backward.mean_ms);
            if (x->c->pass == TLM_PASS_TRAIN) tlm_report_num(rep, "opt_ms_mean", x->r.optimizer.mean_ms);
            tlm_report_num(rep, "step_ms_profiled", x->r.step.mean_ms);
            num_if(rep, "step_ms_unprofiled", x->unprofiled_step_ms, false);
            if (isfinite(x->unprofiled_step_ms) && x->unprofiled_step_ms > 0)
                tlm_report_num(rep, "overhead_pct", 100.0 * (x->r.step.mean_ms / x->unprofiled_step_ms - 1.0));
        }
        const tlm_prof_phase_stats *ph = s->phase;
        if (ph[TLM_PHASE_FORWARD].kernels > 0) {
            tlm_report_num(rep, "fwd_kernel_ms", ph[TLM_PHASE_FORWARD].busy_us * 1e-3);
            tlm_report_num(rep, "fwd_span_ms", ph[TLM_PHASE_FORWARD].span_us * 1e-3);
            tlm_report_num(rep, "kernels_per_forward", ph[TLM_PHASE_FORWARD].kernels);
        }
        if (ph[TLM_PHASE_BACKWARD].kernels > 0) tlm_report_num(rep, "bwd_kernel_ms", ph[TLM_PHASE_BACKWARD].busy_us * 1e-3);
        if (ph[TLM_PHASE_OPTIMIZER].kernels > 0)
            tlm_report_num(rep, "opt_kernel_ms", ph[TLM_PHASE_OPTIMIZER].busy_us * 1e-3);
        double kernels = 0;
        for (int p = 0; p < TLM_PHASE_COUNT; p++) kernels += ph[p].kernels;
        tlm_report_num(rep, "kernels_per_step", kernels);
        const tlm_prof_findings *f = &s->findings;
        num_if(rep, "gemm_pct_forward", f->gemm_pct_forward, false);
        num_if(rep, "gemm_pct_step", f->gemm_pct_step, false);
        if (f->fwd_leader) {
            tlm_report_str(rep, "fwd_leader", f->fwd_leader);
            num_if(rep, "fwd_leader_pct", f->fwd_leader_pct, false);
            tlm_report_num(rep, "fwd_leader_calls_per_step", f->fwd_leader_calls_per_step);
        }
        if (f->fb_leader) {
            tlm_report_str(rep, "fb_leader", f->fb_leader);
            num_if(rep, "fb_leader_pct", f->fb_leader_pct, false);
        }
        num_if(rep, "non_gemm_pct", f->non_gemm_pct, false);
        num_if(rep, "attn_scores_ms", f->attn_scores_ms, true);
        num_if(rep, "attn_softmax_ms", f->attn_softmax_ms, true);
        num_if(rep, "attn_final_ms", f->attn_final_ms, true);
        num_if(rep, "flash_fwd_ms", f->flash_fwd_ms, true);
        num_if(rep, "flash_bwd_ms", f->flash_bwd_ms, true);
        tlm_report_int(rep, "unattributed", s->unattributed);
        tlm_report_int(rep, "dropped_records", (int64_t)x->p->dropped);
        tlm_report_row_end(rep);
    }
    for (int i = 0; i < n; i++) {
        if (!runs[i].p) continue;
        for (int k = 0; k < runs[i].s.findings.n_text; k++) {
            char line[600];
            snprintf(line, sizeof line, "%s: %s", runs[i].key, runs[i].s.findings.text[k]);
            tlm_report_list(rep, "findings", line);
        }
    }
}

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

static int finish(const char *cmd, tlm_report *rep, run *runs, int n, bool foreign, bool failed) {
    tlm_output_batch_begin(); /* the report's file and the trace: both or neither */
    write_tables(rep, runs, n, foreign);
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

static void free_runs(run *runs, int n) {
    for (int i = 0; runs && i < n; i++) {
        tlm_prof_summary_free(&runs[i].s);
        tlm_profile_free(runs[i].p);
    }
    free(runs);
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
    tlm_prof_context ctx = {.precision = TLM_PRECISION_FP32};
    for (int p = 0; p < TLM_PHASE_COUNT; p++) ctx.wall_ms[p] = NAN;
    if (a->num_models > 1) {
        cli_error(cmd, "--model: one model with --exec (it names the model the program runs, for d_head)");
        return TLM_EXIT_USAGE;
    }
    if (a->num_models == 1) {
        tlm_config cfg;
        if (!cli_model_config(cmd, a, a->models[0], &cfg, NULL, 0)) return TLM_EXIT_USAGE;
        ctx.d_head = tlm_config_d_head(&cfg);
    }
    char program[4096], lib[4096];
    if (tlm_profile_find_program(a->positional[0], program, sizeof program) != TLM_OK ||
        tlm_profile_inject_library(lib, sizeof lib) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    if (!trace_writable(cmd) || !writable(cmd, "--out", a->out)) return TLM_EXIT_FAILURE;
    /* argv for the program: the positional words, NULL-terminated */
    char **child = cli_calloc(cmd, (size_t)a->num_positional + 1, sizeof *child);
    if (!child) return TLM_EXIT_FAILURE;
    memcpy(child, a->positional, (size_t)a->num_positional * sizeof *child);
    tlm_profile **profiles = NULL;
    int n = 0, status = -1;
    tlm_status s = tlm_profile_exec(child, lib, &profiles, &n, &status);
    free(child);
    if (s != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    if (status != 0) {
        for (int i = 0; i < n; i++) tlm_profile_free(profiles[i]);
        free(profiles);
        cli_error(cmd, "--exec: %s exited with status %d: no report written", a->positional[0], status);
        return TLM_EXIT_FAILURE;
    }
    run *runs = calloc((size_t)n, sizeof *runs);
    if (!runs) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; s == TLM_OK && i < n; i++) {
        runs[i].p = profiles[i];
        profiles[i] = NULL;
        runs[i].unprofiled_step_ms = NAN;
        if (n == 1) snprintf(runs[i].key, sizeof runs[i].key, "exec");
        else snprintf(runs[i].key, sizeof runs[i].key, "exec process %d", i); /* each CUDA process of the program */
        s = tlm_profile_summarize(runs[i].p, &ctx, &runs[i].s);
    }
    for (int i = 0; i < n; i++) tlm_profile_free(profiles[i]);
    free(profiles);
    tlm_report *rep = s == TLM_OK ? cli_open_report(cmd, a, "tlm profile", argc, argv) : NULL;
    if (!rep) {
        if (s != TLM_OK) cli_error(cmd, "%s", tlm_last_error());
        free_runs(runs, n);
        return TLM_EXIT_FAILURE;
    }
    tlm_report_meta_str(rep, "device", runs[0].p->device);
    tlm_report_meta_str(rep, "profiled", "kernels, memcpy and memset (CUPTI activity records) by the NVTX range "
                                         "open at their launch (on the launching thread, else on any thread); "
                                         "\"warmup step N\" ranges and what they hold left out");
    const int rc = finish(cmd, rep, runs, n, true, false);
    free_runs(runs, n);
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
    run *runs = NULL;
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
        run *x = &runs[i];
        x->c = bc;
        x->unprofiled_step_ms = NAN;
        case_key(bc, tlm_attention_resolve(be, &bc->config, bc->precision, bc->attention), tlm_backend_has_graphs(be),
                 x->key, sizeof x->key);
        tlm_report_progress(rep, x->key, tlm_config_forward_flops(&bc->config, bc->batch_size, bc->context_length) *
                                             (bc->warmup + bc->steps) * (opts.overhead ? 2 : 1));
        if (opts.overhead) {
            tlm_bench_result plain;
            if (tlm_bench_run(be, bc, &plain) == TLM_OK && plain.status == TLM_OK)
                x->unprofiled_step_ms = plain.step.mean_ms;
        }
        tlm_profiler *pr = NULL;
        tlm_status s = tlm_profiler_start(&pr, be, x->key);
        if (s == TLM_OK) {
            s = tlm_bench_run(be, bc, &x->r);
            const tlm_status stop = tlm_profiler_stop(pr, &x->p);
            if (s == TLM_OK) s = stop;
        }
        if (s != TLM_OK) { /* the profiler or the bench could not run at all */
            x->r.status = s;
            snprintf(x->r.error, sizeof x->r.error, "%s", tlm_last_error());
        }
        if (x->r.status != TLM_OK) {
            tlm_profile_free(x->p);
            x->p = NULL;
            if (x->r.status != TLM_ERR_OUT_OF_MEMORY) hard_failures++;
            continue;
        }
        tlm_prof_context ctx = {.precision = bc->precision, .d_head = tlm_config_d_head(&bc->config),
                                .ceilings = &ceil};
        ctx.wall_ms[TLM_PHASE_SETUP] = NAN;
        ctx.wall_ms[TLM_PHASE_FORWARD] = x->r.forward.mean_ms;
        ctx.wall_ms[TLM_PHASE_BACKWARD] = bc->pass >= TLM_PASS_FORWARD_BACKWARD ? x->r.backward.mean_ms : NAN;
        ctx.wall_ms[TLM_PHASE_OPTIMIZER] = bc->pass == TLM_PASS_TRAIN ? x->r.optimizer.mean_ms : NAN;
        if (tlm_profile_summarize(x->p, &ctx, &x->s) != TLM_OK) {
            x->r.status = TLM_ERR_OUT_OF_MEMORY;
            snprintf(x->r.error, sizeof x->r.error, "%s", tlm_last_error());
            tlm_profile_free(x->p);
            x->p = NULL;
            hard_failures++;
        }
    }
    rc = finish(cmd, rep, runs, n, false, hard_failures > 0);
    rep = NULL;
done:
    tlm_report_close(rep, false);
    free_runs(runs, n);
    free(cases);
    tlm_backend_destroy(be);
    if (a.models == suite_models || a.models == default_models) a.models = NULL;
    cli_args_free(&a);
    return rc;
}
