/* profile_report.c — the tables of `tlm profile`'s report (profile_run.h): kernels and ops per phase,
 * layers, ranges, the runs, and the findings, from each run's summary (profile.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tlm/profile_run.h"

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

/* a secondary time column (--wide) in us */
#define US_WIDE(key, head, width, prec) {key, TLM_FIELD_NUM, head, "us", width, prec, 0, TLM_COL_WIDE}
/* a percentage of a measured ceiling ("!" above 100) */
#define PCT_OF_CEILING(key, head, unit) {key, TLM_FIELD_NUM, head, unit, 7, 1, 0, TLM_COL_OVER100}

/* The primary columns fit TLM_REPORT_WIDTH (kernel and op names up to their width); TLM_COL_WIDE ones
 * with --wide.
 *   key                  type            head         unit      width prec scale flags */
static const tlm_column kernel_cols[] = {
    KERNEL_OR_OP_KEYS("kernel", -64),
    US_WIDE("total_us", "total", 12, 1),
    TLM_COL_US("per_step_us", "per step", 11, 1),
    TLM_COL_US("mean_us", "mean", 10, 2),
    US_WIDE("min_us", "min", 10, 2),
    US_WIDE("max_us", "max", 10, 2),
    PCT_OF_PHASE,
};
static const tlm_column op_cols[] = {
    KERNEL_OR_OP_KEYS("op", -24),
    {"kernels_per_call", TLM_FIELD_NUM, "kern", "/call", 6, 2, 0, TLM_COL_WIDE},
    TLM_COL_US("per_step_us", "per step", 10, 1),
    PCT_OF_PHASE,
    {"flops_per_step", TLM_FIELD_NUM, "FLOP", "G/step", 9, 2, 1e-9, TLM_COL_WIDE},
    {"bytes_per_step", TLM_FIELD_NUM, "bytes", "MB/step", 9, 1, 1e-6, TLM_COL_WIDE},
    {"tflop_per_s", TLM_FIELD_NUM, "TFLOP/s", "", 8, 3, 0, 0},
    {"gb_per_s", TLM_FIELD_NUM, "GB/s", "", 8, 1, 0, 0},
    PCT_OF_CEILING("pct_of_peak_flops", "peak", "%FLOP"),
    PCT_OF_CEILING("pct_of_peak_bw", "peak", "%BW"),
    PCT_OF_CEILING("pct_of_roofline", "roofl.", "%"),
    {"bound", TLM_FIELD_STR, "bound", "", -7, 0, 0, 0},
    TLM_COL_HIDDEN("above_ceiling", TLM_FIELD_BOOL), /* a percentage of a ceiling above 100 */
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

static bool shown(const tlm_prof_tables *o, tlm_phase p) { return o->phase[p]; }

/* a number that may be missing (NaN: not measured; with positive_only, 0: not profiled) */
static void num_if(tlm_report *rep, const char *key, double v, bool positive_only) {
    if (isfinite(v) && (!positive_only || v > 0)) tlm_report_num(rep, key, v);
}

/* a row begun with its keys: the run, and the phase (NULL: a table without one) */
static void row_begin(tlm_report *rep, const tlm_prof_run *x, const char *phase) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "run", x->key);
    if (phase) tlm_report_str(rep, "phase", phase);
}

/* a kernel's or op's row begun with the columns of KERNEL_OR_OP_KEYS */
static void kernel_or_op_row(tlm_report *rep, const tlm_prof_run *x, tlm_phase phase, const char *name_key, const char *name,
                             const char *cls, double calls_per_step) {
    row_begin(rep, x, tlm_phase_name(phase));
    tlm_report_str(rep, name_key, name);
    tlm_report_str(rep, "class", cls);
    tlm_report_num(rep, "calls_per_step", calls_per_step);
}

static void kernel_table(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    tlm_report_table(rep, "kernels", kernel_cols, NCOLS(kernel_cols));
    for (int i = 0; i < n; i++) {
        if (!runs[i].p) continue;
        int shown_in_phase[TLM_PHASE_COUNT] = {0};
        for (size_t k = 0; k < runs[i].s.n_kernels; k++) {
            const tlm_prof_kernel_row *r = &runs[i].s.kernels[k];
            if (!shown(o, r->phase) || (o->top > 0 && shown_in_phase[r->phase]++ >= o->top)) continue;
            kernel_or_op_row(rep, &runs[i], r->phase, "kernel", r->name, tlm_kernel_class_name(r->cls),
                             r->calls_per_step);
            /* its times (us) and share of the phase, in kernel_cols's order */
            const double v[] = {r->total_us, r->per_step_us, r->mean_us, r->min_us, r->max_us, r->pct_of_phase};
            for (int c = 0; c < (int)(sizeof v / sizeof v[0]); c++)
                tlm_report_num(rep, kernel_cols[KERNEL_OR_OP_NUM_KEYS + c].key, v[c]);
            tlm_report_row_end(rep);
        }
    }
}

/* After the op table: the ceilings the percentages divide by and how they were measured, and the rows
 * above one (num_above of them, named in `above`). */
static void roofline_notes(tlm_report *rep, const tlm_ceilings *c, int num_above, const char *above) {
    if (!c) return;
    char line[1024], gemm[256] = "";
    for (int p = 0; p < TLM_PRECISION_COUNT; p++)
        if (c->gemm_tflops[p] > 0)
            snprintf(gemm + strlen(gemm), sizeof gemm - strlen(gemm), "%s%s %.3g TFLOP/s", gemm[0] ? ", " : "",
                     tlm_precision_name((tlm_precision)p), c->gemm_tflops[p]);
    snprintf(line, sizeof line, "ceilings, measured on this device before any row ran (best of several runs): GEMM "
             "%s (a %d^3 GEMM through matmul_forward); copy %.1f GB/s (%.0f MiB read + written through cast); "
             "roofl. = max(%%FLOP, %%BW)", gemm, c->gemm_n, c->copy_gbps, c->copy_bytes / 1048576.0);
    tlm_report_list(rep, "roofline_notes", line);
    if (num_above) {
        snprintf(line, sizeof line, "! = above the measured ceiling (%d op row%s: %s): the op beats the measured "
                 "GEMM or copy, e.g. its bytes stay in a cache the large copy does not fit; read its %%BW as an "
                 "upper bound on the ceiling's use, not the device's", num_above, num_above == 1 ? "" : "s", above);
        tlm_report_list(rep, "roofline_notes", line);
    }
}

static void op_table(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    char above_text[256] = "";
    int num_above = 0;
    if (!foreign) {
        tlm_report_table(rep, "ops", op_cols, NCOLS(op_cols));
        for (int i = 0; i < n; i++)
            for (size_t k = 0; runs[i].p && k < runs[i].s.n_ops; k++) {
                const tlm_prof_op_row *r = &runs[i].s.ops[k];
                if (!shown(o, r->phase)) continue;
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
                if (isfinite(r->pct_of_roofline)) {
                    tlm_report_str(rep, "bound", r->memory_bound ? "memory" : "compute");
                    const bool above = r->pct_of_peak_flops > 100 || r->pct_of_peak_bw > 100;
                    tlm_report_bool(rep, "above_ceiling", above);
                    if (above) snprintf(above_text + strlen(above_text), sizeof above_text - strlen(above_text),
                                        "%s%s %s", above_text[0] ? ", " : "", runs[i].key, tlm_op_name(r->op));
                    num_above += above;
                }
                tlm_report_row_end(rep);
            }
        roofline_notes(rep, o->ceilings, num_above, above_text);
    }
}

static void layer_table(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    if (o->layers) {
        tlm_report_table(rep, "layers", layer_cols, NCOLS(layer_cols));
        for (int i = 0; i < n; i++)
            for (size_t k = 0; runs[i].p && k < runs[i].s.n_layers; k++) {
                const tlm_prof_layer_row *r = &runs[i].s.layers[k];
                if (!shown(o, r->phase)) continue;
                row_begin(rep, &runs[i], tlm_phase_name(r->phase));
                if (r->layer >= 0) tlm_report_int(rep, "layer", r->layer); /* else none: outside the blocks */
                tlm_report_num(rep, "per_step_us", r->per_step_us);
                tlm_report_num(rep, "pct_of_phase", r->pct_of_phase);
                tlm_report_row_end(rep);
            }
    }
}

static void range_table(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    tlm_report_table(rep, "ranges", range_cols, NCOLS(range_cols));
    static const char *const kinds[] = {"step", "phase", "layer", "stage", "nvtx"};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; runs[i].p && k < runs[i].s.n_ranges; k++) {
            const tlm_prof_range_row *r = &runs[i].s.ranges[k];
            if (r->kind == TLM_RANGE_LAYER) continue; /* the layer table has them */
            bool hidden = false; /* a phase's own range follows --phase */
            for (int p = 0; r->kind == TLM_RANGE_PHASE && p < TLM_PHASE_COUNT; p++)
                hidden |= !shown(o, (tlm_phase)p) && strcmp(r->name, tlm_phase_name((tlm_phase)p)) == 0;
            if (hidden) continue;
            row_begin(rep, &runs[i], NULL);
            tlm_report_str(rep, "range", r->name);
            tlm_report_str(rep, "kind", r->kind >= 0 && r->kind <= TLM_PROF_RANGE_NVTX ? kinds[r->kind] : "?");
            tlm_report_num(rep, "count_per_step", r->count_per_step);
            tlm_report_num(rep, "kernel_us_per_step", r->per_step_us);
            tlm_report_num(rep, "kernel_us_total", r->total_us);
            tlm_report_row_end(rep);
        }
}

/* a run's row of the runs table: the case, the phases' times, the findings' numbers */
static void run_row(tlm_report *rep, const tlm_prof_run *x) {
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
        return;
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

static void run_table(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    tlm_report_table(rep, "runs", run_cols, NCOLS(run_cols));
    tlm_report_show(rep, "overhead_pct", o->overhead);
    tlm_report_show(rep, "fwd_ms_mean", !foreign);
    tlm_report_show(rep, "bwd_ms_mean", !foreign);
    tlm_report_show(rep, "opt_ms_mean", !foreign);
    for (int i = 0; i < n; i++) run_row(rep, &runs[i]);
}

void tlm_prof_write_tables(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o) {
    kernel_table(rep, runs, n, foreign, o);
    op_table(rep, runs, n, foreign, o);
    layer_table(rep, runs, n, foreign, o);
    range_table(rep, runs, n, foreign, o);
    run_table(rep, runs, n, foreign, o);
    for (int i = 0; i < n; i++) {
        if (!runs[i].p) continue;
        for (int k = 0; k < runs[i].s.findings.n_text; k++) {
            char line[600];
            snprintf(line, sizeof line, "%s: %s", runs[i].key, runs[i].s.findings.text[k]);
            tlm_report_list(rep, "findings", line);
        }
    }
}
