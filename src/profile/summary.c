/* summary.c — from a profile to its tables and findings (profile.h, tlm_profile_summarize): the
 * kernel table per phase, the op table with the roofline columns, the layer table, kernel time
 * per range name, and the answers to the CS336 profiling questions (docs/experiments.md), each computed
 * from those numbers. Only activities of profiled steps count (warm-up steps and work outside any
 * step, such as the model's initialisation, are left out). */
#define _GNU_SOURCE /* qsort_r, RTLD_DEFAULT */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/profile.h"

const char *tlm_kernel_class_name(tlm_kernel_class c) {
    if (c == TLM_KCLASS_MEMORY) return "memory copy";
    return tlm_op_class_name((tlm_op_class)c);
}

/* does lower-cased `s` contain any of the words? */
static bool has_any(const char *s, const char *const *words, int n) {
    char low[512];
    size_t i = 0;
    for (; s[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)s[i]);
    low[i] = '\0';
    for (int k = 0; k < n; k++)
        if (strstr(low, words[k])) return true;
    return false;
}

static const char *const STAGE_SCORES = "computing attention scores", *const STAGE_SOFTMAX = "computing softmax",
                        *const STAGE_FINAL = "final matmul";

/* the innermost range around activity a (itself included) with name `name`, or -1 */
static int32_t enclosing_named(const tlm_profile *p, int32_t r, const char *name) {
    for (; r >= 0 && (size_t)r < p->n_ranges; r = p->ranges[r].parent)
        if (strcmp(tlm_profile_str(p, p->ranges[r].name), name) == 0) return r;
    return -1;
}

tlm_kernel_class tlm_profile_classify(const tlm_profile *p, const tlm_prof_activity *a) {
    if (a->kind != TLM_PROF_KERNEL) return TLM_KCLASS_MEMORY;
    const char *name = tlm_profile_str(p, a->name);
    static const char *const gemm[] = {"gemm", "xmma", "nvjet", "cutlass", "matmul", "cublas"};
    if (has_any(name, gemm, 6)) return TLM_KCLASS_GEMM;
    if (a->range >= 0 && (enclosing_named(p, a->range, STAGE_SCORES) >= 0 || enclosing_named(p, a->range, STAGE_FINAL) >= 0))
        return TLM_KCLASS_GEMM; /* the CPU's attention products (BLAS), named after their op */
    if (a->op >= 0 && (size_t)a->op < p->n_ops) return (tlm_kernel_class)tlm_op_class_of(p->ops[a->op].op);
    static const char *const attn[] = {"softmax", "attention", "flash", "fmha", "sdpa"};
    static const char *const norm[] = {"norm"};
    static const char *const optim[] = {"adam", "optim", "multi_tensor"};
    static const char *const red[] = {"reduce"};
    if (has_any(name, attn, 5)) return TLM_KCLASS_ATTENTION;
    if (has_any(name, norm, 1)) return TLM_KCLASS_NORMALIZATION;
    if (has_any(name, optim, 3)) return TLM_KCLASS_OPTIMIZER;
    if (has_any(name, red, 1)) return TLM_KCLASS_REDUCTION;
    return TLM_KCLASS_ELEMENTWISE;
}

void tlm_prof_summary_free(tlm_prof_summary *s) {
    if (!s) return;
    free(s->kernels);
    free(s->ops);
    free(s->layers);
    free(s->ranges);
    memset(s, 0, sizeof *s);
}

/* ---- which activities count -------------------------------------------------------------------------- */

typedef struct {
    const tlm_profile *p;
    bool has_steps;
} filter;

static bool counted(const filter *f, const tlm_prof_activity *a) {
    return f->has_steps ? a->step >= 0 && !a->warmup : true;
}

static double dur_us(const tlm_prof_activity *a) { return (double)(a->end_ns - a->start_ns) * 1e-3; }

/* ---- the kernel table ---------------------------------------------------------------------------------- */

static int cmp_by_phase_name(const void *x, const void *y, void *user) {
    const tlm_profile *p = user;
    const tlm_prof_activity *a = &p->acts[*(const size_t *)x], *b = &p->acts[*(const size_t *)y];
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    return a->name == b->name ? 0 : strcmp(tlm_profile_str(p, a->name), tlm_profile_str(p, b->name));
}

static int cmp_kernel_rows(const void *x, const void *y) {
    const tlm_prof_kernel_row *a = x, *b = y;
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    if (a->total_us != b->total_us) return a->total_us > b->total_us ? -1 : 1;
    return strcmp(a->name, b->name);
}

static tlm_status kernel_rows(const tlm_profile *p, const size_t *ix, size_t n, tlm_prof_summary *s) {
    s->kernels = calloc(n ? n : 1, sizeof *s->kernels);
    if (!s->kernels) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    size_t *by = malloc((n ? n : 1) * sizeof *by);
    if (!by) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    memcpy(by, ix, n * sizeof *by);
    qsort_r(by, n, sizeof *by, cmp_by_phase_name, (void *)p);
    for (size_t i = 0; i < n;) {
        const tlm_prof_activity *a = &p->acts[by[i]];
        tlm_prof_kernel_row *r = &s->kernels[s->n_kernels++];
        *r = (tlm_prof_kernel_row){.phase = a->phase, .name = tlm_profile_str(p, a->name),
                                   .cls = tlm_profile_classify(p, a), .min_us = INFINITY};
        for (; i < n && p->acts[by[i]].phase == a->phase && p->acts[by[i]].name == a->name; i++) {
            const double d = dur_us(&p->acts[by[i]]);
            r->calls++;
            r->total_us += d;
            if (d < r->min_us) r->min_us = d;
            if (d > r->max_us) r->max_us = d;
        }
        r->calls_per_step = (double)r->calls / s->steps;
        r->per_step_us = r->total_us / s->steps;
        r->mean_us = r->total_us / (double)r->calls;
        const double busy = s->phase[r->phase].busy_us * s->steps;
        r->pct_of_phase = busy > 0 ? 100.0 * r->total_us / busy : 0;
    }
    free(by);
    qsort(s->kernels, s->n_kernels, sizeof *s->kernels, cmp_kernel_rows);
    return TLM_OK;
}

/* ---- the op table: one call per dispatch, or per graph replay of a captured dispatch --------------------- */

typedef struct {
    tlm_phase phase;
    tlm_op_id id;
    int32_t op;          /* the dispatch */
    uint32_t replay;     /* the graph launch's correlation for a replayed kernel, else 0 */
    double us;
} op_piece;

static int cmp_pieces(const void *x, const void *y) {
    const op_piece *a = x, *b = y;
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    if (a->op != b->op) return a->op < b->op ? -1 : 1;
    return a->replay < b->replay ? -1 : a->replay > b->replay;
}

static int cmp_op_rows(const void *x, const void *y) {
    const tlm_prof_op_row *a = x, *b = y;
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    if (a->per_step_us != b->per_step_us) return a->per_step_us > b->per_step_us ? -1 : 1;
    return a->op < b->op ? -1 : a->op > b->op;
}

static tlm_status op_rows(const tlm_profile *p, const size_t *ix, size_t n, const tlm_prof_context *ctx,
                          tlm_prof_summary *s) {
    op_piece *v = malloc((n ? n : 1) * sizeof *v);
    s->ops = calloc(n ? n : 1, sizeof *s->ops);
    if (!v || !s->ops) {
        free(v);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the op table");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const tlm_prof_activity *a = &p->acts[ix[i]];
        if (a->op < 0 || (size_t)a->op >= p->n_ops) continue;
        v[m++] = (op_piece){a->phase, p->ops[a->op].op, a->op, a->graph_node ? a->correlation : 0, dur_us(a)};
    }
    qsort(v, m, sizeof *v, cmp_pieces);
    const double peak = ctx && ctx->ceilings ? ctx->ceilings->gemm_tflops[ctx->precision] : 0;
    const double bw = ctx && ctx->ceilings ? ctx->ceilings->copy_gbps : 0;
    for (size_t i = 0; i < m;) {
        tlm_prof_op_row *r = &s->ops[s->n_ops++];
        *r = (tlm_prof_op_row){.phase = v[i].phase, .op = v[i].id};
        int64_t pieces = 0;
        double us = 0, flops = 0, bytes = 0;
        for (size_t j = i; i < m && v[i].phase == v[j].phase && v[i].id == v[j].id; i++) {
            const bool new_call = i == j || v[i].op != v[i - 1].op || v[i].replay != v[i - 1].replay;
            if (new_call) {
                r->calls++;
                flops += p->ops[v[i].op].flops;
                bytes += p->ops[v[i].op].bytes;
            }
            pieces++;
            us += v[i].us;
        }
        r->calls_per_step = (double)r->calls / s->steps;
        r->kernels_per_call = (double)pieces / (double)r->calls;
        r->per_step_us = us / s->steps;
        r->pct_of_phase = s->phase[r->phase].busy_us > 0 ? 100.0 * r->per_step_us / s->phase[r->phase].busy_us : 0;
        r->flops_per_step = flops / s->steps;
        r->bytes_per_step = bytes / s->steps;
        r->tflops = us > 0 ? flops / (us * 1e-6) / 1e12 : 0;
        r->gbps = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0;
        r->pct_of_peak_flops = peak > 0 ? 100.0 * r->tflops / peak : NAN;
        r->pct_of_peak_bw = bw > 0 ? 100.0 * r->gbps / bw : NAN;
        r->pct_of_roofline = peak > 0 && bw > 0 ? fmax(r->pct_of_peak_flops, r->pct_of_peak_bw) : NAN;
        r->memory_bound = peak > 0 && bw > 0 && bytes > 0 && flops / bytes * bw * 1e9 < peak * 1e12;
    }
    free(v);
    qsort(s->ops, s->n_ops, sizeof *s->ops, cmp_op_rows);
    return TLM_OK;
}

/* ---- the layer table ------------------------------------------------------------------------------------- */

static tlm_status layer_rows(const tlm_profile *p, const size_t *ix, size_t n, tlm_prof_summary *s) {
    int max_layer = -1;
    for (size_t i = 0; i < n; i++)
        if (p->acts[ix[i]].layer > max_layer) max_layer = p->acts[ix[i]].layer;
    const size_t per_phase = (size_t)max_layer + 2; /* layer -1 .. max_layer */
    double *us = calloc(TLM_PHASE_COUNT * per_phase, sizeof *us);
    bool *seen = calloc(TLM_PHASE_COUNT * per_phase, sizeof *seen);
    s->layers = calloc(TLM_PHASE_COUNT * per_phase, sizeof *s->layers);
    if (!us || !seen || !s->layers) {
        free(us);
        free(seen);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the layer table");
    }
    for (size_t i = 0; i < n; i++) {
        const tlm_prof_activity *a = &p->acts[ix[i]];
        const size_t k = (size_t)a->phase * per_phase + (size_t)(a->layer < 0 ? 0 : a->layer + 1);
        us[k] += dur_us(a);
        seen[k] = true;
    }
    for (int ph = 0; ph < TLM_PHASE_COUNT; ph++)
        for (size_t l = 0; l < per_phase; l++) {
            const size_t k = (size_t)ph * per_phase + l;
            if (!seen[k]) continue;
            const double busy = s->phase[ph].busy_us;
            s->layers[s->n_layers++] = (tlm_prof_layer_row){(tlm_phase)ph, (int)l - 1, us[k] / s->steps,
                                                            busy > 0 ? 100.0 * us[k] / s->steps / busy : 0};
        }
    free(us);
    free(seen);
    return TLM_OK;
}

/* ---- kernel time per range name ------------------------------------------------------------------------- */

static bool is_step_range(const tlm_profile *p, const tlm_prof_range *r) {
    if (r->kind == TLM_RANGE_STEP) return true;
    const char *name = tlm_profile_str(p, r->name);
    return r->kind == TLM_PROF_RANGE_NVTX && (strncmp(name, "step ", 5) == 0 || strncmp(name, "warmup step ", 12) == 0);
}

/* is range r inside a profiled step? tlm's ranges know their scope; NVTX ranges by their ancestors */
static bool range_profiled(const tlm_profile *p, const filter *f, int32_t r) {
    if (!f->has_steps) return true;
    if (p->ranges[r].kind != TLM_PROF_RANGE_NVTX) return p->ranges[r].scope.step >= 0 && !p->ranges[r].scope.warmup;
    for (int32_t q = r; q >= 0; q = p->ranges[q].parent) {
        const char *name = tlm_profile_str(p, p->ranges[q].name);
        if (strncmp(name, "warmup step ", 12) == 0) return false;
        if (strncmp(name, "step ", 5) == 0) return true;
    }
    /* a range of a thread without steps (PyTorch's autograd thread): the step open at its start */
    const int64_t t = p->ranges[r].begin_ns;
    for (size_t q = 0; q < p->n_ranges; q++)
        if (is_step_range(p, &p->ranges[q]) && p->ranges[q].begin_ns <= t && t < p->ranges[q].end_ns)
            return strncmp(tlm_profile_str(p, p->ranges[q].name), "step ", 5) == 0;
    return false;
}

/* step ranges outside warm-up: the profiled steps */
static int profiled_step_ranges(const tlm_profile *p) {
    int n = 0;
    for (size_t r = 0; r < p->n_ranges; r++)
        if (is_step_range(p, &p->ranges[r]))
            n += p->ranges[r].kind == TLM_RANGE_STEP ? !p->ranges[r].scope.warmup
                                                     : strncmp(tlm_profile_str(p, p->ranges[r].name), "step ", 5) == 0;
    return n;
}

static tlm_status range_rows(const tlm_profile *p, const filter *f, const size_t *ix, size_t n, tlm_prof_summary *s) {
    /* one row per (name, kind), in order of first appearance */
    int32_t *row_of_range = malloc((p->n_ranges ? p->n_ranges : 1) * sizeof *row_of_range);
    s->ranges = calloc(p->n_ranges ? p->n_ranges : 1, sizeof *s->ranges);
    if (!row_of_range || !s->ranges) {
        free(row_of_range);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the range table");
    }
    for (size_t r = 0; r < p->n_ranges; r++) {
        row_of_range[r] = -1;
        if (is_step_range(p, &p->ranges[r])) continue;
        const char *name = tlm_profile_str(p, p->ranges[r].name);
        int32_t k = 0;
        while ((size_t)k < s->n_ranges && (s->ranges[k].kind != p->ranges[r].kind || strcmp(s->ranges[k].name, name)))
            k++;
        if ((size_t)k == s->n_ranges) s->ranges[s->n_ranges++] = (tlm_prof_range_row){.name = name, .kind = p->ranges[r].kind};
        row_of_range[r] = k;
        if (range_profiled(p, f, (int32_t)r)) s->ranges[k].count_per_step += 1.0 / s->steps;
    }
    for (size_t i = 0; i < n; i++) {
        const tlm_prof_activity *a = &p->acts[ix[i]];
        for (int32_t q = a->range; q >= 0 && (size_t)q < p->n_ranges; q = p->ranges[q].parent)
            if (row_of_range[q] >= 0) s->ranges[row_of_range[q]].total_us += dur_us(a);
    }
    for (size_t k = 0; k < s->n_ranges; k++) s->ranges[k].per_step_us = s->ranges[k].total_us / s->steps;
    free(row_of_range);
    return TLM_OK;
}

/* ---- findings ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    double us;
} named_time;

/* the kernel name with the most time over the phases in mask (bit per phase), and its share */
static const char *leader(const tlm_prof_summary *s, unsigned mask, double *pct, double *calls_per_step) {
    named_time best = {NULL, -1};
    double total = 0;
    for (size_t i = 0; i < s->n_kernels; i++) {
        if (!(mask >> s->kernels[i].phase & 1)) continue;
        total += s->kernels[i].per_step_us;
        double us = 0, calls = 0;
        for (size_t j = 0; j < s->n_kernels; j++)
            if ((mask >> s->kernels[j].phase & 1) && strcmp(s->kernels[j].name, s->kernels[i].name) == 0) {
                us += s->kernels[j].per_step_us;
                calls += s->kernels[j].calls_per_step;
            }
        if (us > best.us) {
            best = (named_time){s->kernels[i].name, us};
            if (calls_per_step) *calls_per_step = calls;
        }
    }
    if (pct) *pct = total > 0 && best.name ? 100.0 * best.us / total : NAN;
    return best.name;
}

static void say(tlm_prof_findings *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(tlm_prof_findings *f, const char *fmt, ...) {
    if (f->n_text == TLM_PROF_MAX_FINDINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text[f->n_text++], sizeof f->text[0], fmt, ap);
    va_end(ap);
}

/* 6. of the findings: inside attention, the naive stages against their FLOPs, or the fused kernel */
static void attention_findings(const tlm_profile *p, const size_t *ix, size_t n, const tlm_prof_context *ctx,
                               tlm_prof_summary *s) {
    tlm_prof_findings *f = &s->findings;
    const tlm_prof_phase_stats *fw = &s->phase[TLM_PHASE_FORWARD], *bw = &s->phase[TLM_PHASE_BACKWARD];
    double stage_us[3] = {0, 0, 0}, flash_us[2] = {0, 0};
    const char *const stages[3] = {STAGE_SCORES, STAGE_SOFTMAX, STAGE_FINAL};
    for (size_t i = 0; i < n; i++) {
        const tlm_prof_activity *a = &p->acts[ix[i]];
        if (a->phase == TLM_PHASE_FORWARD && a->range >= 0)
            for (int k = 0; k < 3; k++)
                if (enclosing_named(p, a->range, stages[k]) >= 0) stage_us[k] += dur_us(a);
        static const char *const fused[] = {"flash", "fmha"};
        const bool flash_op = a->op >= 0 && (size_t)a->op < p->n_ops &&
                              (p->ops[a->op].op == TLM_OP_FLASH_ATTENTION_FORWARD ||
                               p->ops[a->op].op == TLM_OP_FLASH_ATTENTION_BACKWARD);
        if (flash_op || (a->op < 0 && a->kind == TLM_PROF_KERNEL && has_any(tlm_profile_str(p, a->name), fused, 2))) {
            if (a->phase == TLM_PHASE_FORWARD) flash_us[0] += dur_us(a);
            if (a->phase == TLM_PHASE_BACKWARD) flash_us[1] += dur_us(a);
        }
    }
    f->attn_scores_ms = stage_us[0] / s->steps * 1e-3;
    f->attn_softmax_ms = stage_us[1] / s->steps * 1e-3;
    f->attn_final_ms = stage_us[2] / s->steps * 1e-3;
    f->attn_matmul_flops_per_softmax_flop = ctx && ctx->d_head > 0 ? 4.0 * ctx->d_head / 5.0 : NAN;
    f->flash_fwd_ms = flash_us[0] / s->steps * 1e-3;
    f->flash_bwd_ms = flash_us[1] / s->steps * 1e-3;
    const double mm = f->attn_scores_ms + f->attn_final_ms;
    if (f->attn_softmax_ms > 0 && mm > 0) {
        char ratio[160] = "";
        if (isfinite(f->attn_matmul_flops_per_softmax_flop))
            snprintf(ratio, sizeof ratio, " for 1/%.1f of their FLOPs (per score: the two matmuls 4 x d_head = %d, "
                                          "softmax 5)", f->attn_matmul_flops_per_softmax_flop, 4 * ctx->d_head);
        say(f, "naive attention, forward: softmax %.3f ms per step against the two matmuls' %.3f ms (scores %.3f, "
               "final %.3f): %.2fx their time%s", f->attn_softmax_ms, mm, f->attn_scores_ms, f->attn_final_ms,
            f->attn_softmax_ms / mm, ratio);
    } else if (f->flash_fwd_ms > 0) {
        char back[96] = "";
        if (f->flash_bwd_ms > 0 && bw->busy_us > 0)
            snprintf(back, sizeof back, "; backward %.3f ms (%.1f%% of the backward)", f->flash_bwd_ms,
                     100.0 * f->flash_bwd_ms * 1e3 / bw->busy_us);
        say(f, "fused attention (FlashAttention-2, no softmax of its own to time): forward %.3f ms per step (%.1f%% "
               "of the forward)%s", f->flash_fwd_ms, 100.0 * f->flash_fwd_ms * 1e3 / fw->busy_us, back);
    } else {
        say(f, "attention: no naive stages (computing attention scores / computing softmax / final matmul) and no "
               "fused attention kernel profiled");
    }
}

static void findings(const tlm_profile *p, const filter *flt, const size_t *ix, size_t n, const tlm_prof_context *ctx,
                     tlm_prof_summary *s) {
    tlm_prof_findings *f = &s->findings;
    const char *unit = p->host_clock ? "op" : "kernel", *units = p->host_clock ? "ops" : "kernels";
    const tlm_prof_phase_stats *fw = &s->phase[TLM_PHASE_FORWARD], *bw = &s->phase[TLM_PHASE_BACKWARD],
                               *op = &s->phase[TLM_PHASE_OPTIMIZER];
    const unsigned F = 1u << TLM_PHASE_FORWARD, B = 1u << TLM_PHASE_BACKWARD, O = 1u << TLM_PHASE_OPTIMIZER;
    f->fwd_leader_pct = f->fwd_leader_calls_per_step = f->fb_leader_pct = f->non_gemm_pct = NAN;
    f->gemm_pct_forward = f->gemm_pct_step = f->attn_matmul_flops_per_softmax_flop = NAN;
    f->fwd_busy_ms = fw->kernels > 0 ? fw->busy_us * 1e-3 : NAN;
    f->fwd_span_ms = fw->kernels > 0 ? fw->span_us * 1e-3 : NAN;
    f->fwd_wall_ms = ctx ? ctx->wall_ms[TLM_PHASE_FORWARD] : NAN;
    f->step_has_optimizer = op->kernels > 0;
    if (fw->kernels == 0) {
        say(f, "no forward phase was profiled: the findings need one (ranges named forward/backward/optimizer)");
        return;
    }
    /* 1. profiled forward against the wall clock */
    if (isfinite(f->fwd_wall_ms) && f->fwd_wall_ms > 0)
        say(f, "forward: %s run %.3f ms per step (first start to last end %.3f ms) against %.3f ms wall-clock "
               "(tlm bench's synchronized forward, same run): the device is busy %.0f%% of it",
            units, f->fwd_busy_ms, f->fwd_span_ms, f->fwd_wall_ms, 100.0 * f->fwd_busy_ms / f->fwd_wall_ms);
    else
        say(f, "forward: %s run %.3f ms per step (first start to last end %.3f ms); no wall-clock time of the "
               "same run to compare with", units, f->fwd_busy_ms, f->fwd_span_ms);
    /* 2. the forward's leading kernel and its calls per forward pass */
    f->fwd_leader = leader(s, F, &f->fwd_leader_pct, &f->fwd_leader_calls_per_step);
    tlm_kernel_class cls = TLM_KCLASS_COUNT;
    for (size_t i = 0; i < s->n_kernels; i++)
        if (s->kernels[i].name == f->fwd_leader) cls = s->kernels[i].cls;
    say(f, "the %s with the most forward time: %s (%s), %.1f%% of the forward, %g calls per forward pass", unit,
        f->fwd_leader, cls < TLM_KCLASS_COUNT ? tlm_kernel_class_name(cls) : "?", f->fwd_leader_pct,
        f->fwd_leader_calls_per_step);
    /* 3. the same over forward + backward */
    if (bw->kernels > 0) {
        f->fb_leader = leader(s, F | B, &f->fb_leader_pct, NULL);
        f->same_leader = f->fb_leader && strcmp(f->fb_leader, f->fwd_leader) == 0;
        if (f->same_leader)
            say(f, "the same %s leads forward + backward: %.1f%% of their time", unit, f->fb_leader_pct);
        else
            say(f, "another %s leads forward + backward: %s, %.1f%% of their time", unit, f->fb_leader,
                f->fb_leader_pct);
    } else {
        say(f, "no backward pass profiled: forward + backward not compared");
    }
    /* kernels that overlap (the backward's side stream, backend.h): say so, since a phase's shares are
     * of its summed kernel time, which then exceeds the span */
    for (int ph = TLM_PHASE_FORWARD; ph < TLM_PHASE_COUNT; ph++) {
        const tlm_prof_phase_stats *st = &s->phase[ph];
        if (st->kernels > 0 && st->span_us > 0 && st->busy_us > 1.01 * st->span_us)
            say(f, "%s: %s overlap on more than one stream: %.3f ms of %s time per step within %.3f ms from first "
                   "start to last end (%.2fx); its shares are of the summed %s time",
                tlm_phase_name((tlm_phase)ph), units, st->busy_us * 1e-3, unit, st->span_us * 1e-3,
                st->busy_us / st->span_us, unit);
    }
    /* 4. the non-GEMM kernels that matter, over every profiled phase */
    const unsigned all = F | B | O;
    double total = 0, gemm = 0;
    for (int ph = TLM_PHASE_FORWARD; ph < TLM_PHASE_COUNT; ph++) {
        total += s->phase[ph].busy_us;
        gemm += s->phase[ph].gemm_us;
    }
    f->non_gemm_pct = total > 0 ? 100.0 * (total - gemm) / total : NAN;
    char list[300] = "";
    for (size_t i = 0; i < s->n_kernels; i++) {
        const tlm_prof_kernel_row *k = &s->kernels[i];
        if (k->cls == TLM_KCLASS_GEMM || !(all >> k->phase & 1)) continue;
        bool dup = false;
        for (int j = 0; j < f->n_non_gemm; j++) dup |= strcmp(f->non_gemm[j], k->name) == 0;
        if (dup) continue;
        double us = 0;
        for (size_t j = 0; j < s->n_kernels; j++)
            if ((all >> s->kernels[j].phase & 1) && strcmp(s->kernels[j].name, k->name) == 0) us += s->kernels[j].per_step_us;
        const double share = total > 0 ? 100.0 * us / total : 0;
        if (share < 1.0) continue;
        /* keep the four largest */
        int at = f->n_non_gemm < 4 ? f->n_non_gemm++ : 3;
        if (at == 3 && f->n_non_gemm == 4 && share <= f->non_gemm_share[3]) continue;
        while (at > 0 && f->non_gemm_share[at - 1] < share) {
            f->non_gemm[at] = f->non_gemm[at - 1];
            f->non_gemm_share[at] = f->non_gemm_share[at - 1];
            at--;
        }
        f->non_gemm[at] = k->name;
        f->non_gemm_share[at] = share;
    }
    for (int j = 0; j < f->n_non_gemm; j++) {
        const size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s %.1f%%", j ? ", " : "", f->non_gemm[j], f->non_gemm_share[j]);
    }
    say(f, "non-GEMM %s take %.1f%% of the profiled time%s%s", units, f->non_gemm_pct,
        f->n_non_gemm ? "; those with 1% or more: " : "; none reaches 1% on its own", list);
    /* 5. the GEMM share: forward only against the whole step */
    f->gemm_pct_forward = fw->busy_us > 0 ? 100.0 * fw->gemm_us / fw->busy_us : NAN;
    f->gemm_pct_step = total > 0 ? 100.0 * gemm / total : NAN;
    if (f->step_has_optimizer)
        say(f, "GEMM share: %.1f%% of the forward pass, %.1f%% of the full training step with AdamW (the optimizer "
               "adds %.3f ms of non-GEMM work per step)", f->gemm_pct_forward, f->gemm_pct_step,
            (op->busy_us - op->gemm_us) * 1e-3);
    else
        say(f, "GEMM share: %.1f%% of the forward pass, %.1f%% of all profiled phases (no optimizer step profiled)",
            f->gemm_pct_forward, f->gemm_pct_step);
    (void)flt;
    attention_findings(p, ix, n, ctx, s); /* 6. */
    if (s->unattributed > 0 && !p->foreign)
        say(f, "%lld activities could not be tied to an op or a range (no launch record; the tables list them "
               "under setup)",
            (long long)s->unattributed);
    if (p->dropped) say(f, "CUPTI dropped %llu activity records (its buffers were full): the tables miss them",
                        (unsigned long long)p->dropped);
}

/* ---- the summary ----------------------------------------------------------------------------------------- */

typedef struct {
    int32_t step;
    tlm_phase phase;
    int64_t first, last;
} span_acc;

tlm_status tlm_profile_summarize(tlm_profile *p, const tlm_prof_context *ctx, tlm_prof_summary *out) {
    memset(out, 0, sizeof *out);
    tlm_profile_resolve(p);
    const int step_ranges = profiled_step_ranges(p);
    filter flt = {p, step_ranges > 0};
    for (size_t i = 0; i < p->n_acts && !flt.has_steps; i++) flt.has_steps = p->acts[i].step >= 0;
    size_t *ix = malloc((p->n_acts ? p->n_acts : 1) * sizeof *ix);
    span_acc *spans = calloc(p->n_acts ? p->n_acts : 1, sizeof *spans);
    if (!ix || !spans) {
        free(ix);
        free(spans);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory summarizing the profile");
    }
    size_t n = 0, n_spans = 0;
    int32_t steps_seen[4096];
    int n_steps = 0;
    for (size_t i = 0; i < p->n_acts; i++) {
        const tlm_prof_activity *a = &p->acts[i];
        if (!counted(&flt, a)) continue;
        ix[n++] = i;
        if (a->op < 0 && a->range < 0 && !p->foreign) out->unattributed++;
        tlm_prof_phase_stats *ph = &out->phase[a->phase];
        ph->busy_us += dur_us(a);
        ph->kernels += 1;
        if (tlm_profile_classify(p, a) == TLM_KCLASS_GEMM) ph->gemm_us += dur_us(a);
        bool known = false;
        for (int k = 0; k < n_steps && !known; k++) known = steps_seen[k] == a->step;
        if (!known && n_steps < 4096) steps_seen[n_steps++] = a->step;
        size_t k = 0; /* the (step, phase) span, found from the most recent: activities come in time order */
        for (k = n_spans; k > 0; k--)
            if (spans[k - 1].step == a->step && spans[k - 1].phase == a->phase) break;
        if (k == 0) spans[n_spans++] = (span_acc){a->step, a->phase, a->start_ns, a->end_ns};
        else {
            if (a->start_ns < spans[k - 1].first) spans[k - 1].first = a->start_ns;
            if (a->end_ns > spans[k - 1].last) spans[k - 1].last = a->end_ns;
        }
    }
    out->activities = (int64_t)n;
    out->steps = step_ranges > 0 ? step_ranges : flt.has_steps && n_steps > 0 ? n_steps : 1;
    for (int ph = 0; ph < TLM_PHASE_COUNT; ph++) {
        double sum = 0;
        int cnt = 0;
        for (size_t k = 0; k < n_spans; k++)
            if (spans[k].phase == (tlm_phase)ph) {
                sum += (double)(spans[k].last - spans[k].first) * 1e-3;
                cnt++;
            }
        out->phase[ph].span_us = cnt ? sum / cnt : 0;
        out->phase[ph].busy_us /= out->steps;
        out->phase[ph].kernels /= out->steps;
        out->phase[ph].gemm_us /= out->steps;
    }
    free(spans);
    tlm_status s = kernel_rows(p, ix, n, out);
    if (s == TLM_OK && !p->foreign) s = op_rows(p, ix, n, ctx, out);
    if (s == TLM_OK) s = layer_rows(p, ix, n, out);
    if (s == TLM_OK) s = range_rows(p, &flt, ix, n, out);
    if (s == TLM_OK) findings(p, &flt, ix, n, ctx, out);
    free(ix);
    if (s != TLM_OK) tlm_prof_summary_free(out);
    return s;
}
