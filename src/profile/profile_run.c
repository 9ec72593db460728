/* profile_run.c — `tlm profile`'s runs (profile_run.h): a benchmark case under the profiler, or
 * another program's CUDA processes under the injected profiler, each summarized. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile_exec.h"
#include "tlm/profile_run.h"

void tlm_prof_run_key(const tlm_bench_case *c, tlm_attention resolved, bool has_graphs, char *out, size_t n) {
    int k = snprintf(out, n, "%s ctx%d %s %s", c->model_name, c->context_length, tlm_precision_name(c->precision),
                     tlm_attention_name(resolved));
    if (c->batch_size != 4 && k < (int)n) k += snprintf(out + k, n - (size_t)k, " b%d", c->batch_size);
    if (c->pass != TLM_PASS_TRAIN && k < (int)n) k += snprintf(out + k, n - (size_t)k, " %s", tlm_pass_name(c->pass));
    if (has_graphs && !c->graphs && k < (int)n) snprintf(out + k, n - (size_t)k, " eager");
}

bool tlm_prof_run_case(tlm_backend *be, const tlm_bench_case *bc, const tlm_ceilings *ceil, bool overhead,
                       tlm_prof_run *x) {
    x->c = bc;
    x->unprofiled_step_ms = NAN;
    if (overhead) {
        tlm_bench_result plain;
        if (tlm_bench_run(be, bc, &plain) == TLM_OK && plain.status == TLM_OK) x->unprofiled_step_ms = plain.step.mean_ms;
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
        return x->r.status != TLM_ERR_OUT_OF_MEMORY;
    }
    tlm_prof_context ctx = {.precision = bc->precision, .d_head = tlm_config_d_head(&bc->config), .ceilings = ceil};
    ctx.wall_ms[TLM_PHASE_SETUP] = NAN;
    ctx.wall_ms[TLM_PHASE_FORWARD] = x->r.forward.mean_ms;
    ctx.wall_ms[TLM_PHASE_BACKWARD] = bc->pass >= TLM_PASS_FORWARD_BACKWARD ? x->r.backward.mean_ms : NAN;
    ctx.wall_ms[TLM_PHASE_OPTIMIZER] = bc->pass == TLM_PASS_TRAIN ? x->r.optimizer.mean_ms : NAN;
    if (tlm_profile_summarize(x->p, &ctx, &x->s) != TLM_OK) {
        x->r.status = TLM_ERR_OUT_OF_MEMORY;
        snprintf(x->r.error, sizeof x->r.error, "%s", tlm_last_error());
        tlm_profile_free(x->p);
        x->p = NULL;
        return true;
    }
    return false;
}

tlm_status tlm_prof_run_exec(char *const *argv, int argc, int d_head, tlm_prof_run **out, int *n_out,
                             int *exit_status) {
    *out = NULL;
    *n_out = 0;
    tlm_prof_context ctx = {.precision = TLM_PRECISION_FP32, .d_head = d_head};
    for (int p = 0; p < TLM_PHASE_COUNT; p++) ctx.wall_ms[p] = NAN;
    char program[4096], lib[4096];
    TLM_TRY(tlm_profile_find_program(argv[0], program, sizeof program));
    TLM_TRY(tlm_profile_inject_library(lib, sizeof lib));
    /* argv for the program: the words, NULL-terminated */
    char **child = calloc((size_t)argc + 1, sizeof *child);
    if (!child) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    memcpy(child, argv, (size_t)argc * sizeof *child);
    tlm_profile **profiles = NULL;
    int n = 0;
    tlm_status s = tlm_profile_exec(child, lib, &profiles, &n, exit_status);
    free(child);
    TLM_TRY(s);
    tlm_prof_run *runs = *exit_status == 0 ? calloc((size_t)n, sizeof *runs) : NULL;
    if (*exit_status == 0 && !runs) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; runs && s == TLM_OK && i < n; i++) {
        runs[i].p = profiles[i];
        profiles[i] = NULL;
        runs[i].unprofiled_step_ms = NAN;
        if (n == 1) snprintf(runs[i].key, sizeof runs[i].key, "exec");
        else snprintf(runs[i].key, sizeof runs[i].key, "exec process %d", i); /* each CUDA process of the program */
        s = tlm_profile_summarize(runs[i].p, &ctx, &runs[i].s);
    }
    for (int i = 0; i < n; i++) tlm_profile_free(profiles[i]);
    free(profiles);
    if (s != TLM_OK || !runs) {
        tlm_prof_runs_free(runs, runs ? n : 0);
        return s;
    }
    *out = runs;
    *n_out = n;
    return TLM_OK;
}

void tlm_prof_runs_free(tlm_prof_run *runs, int n) {
    for (int i = 0; runs && i < n; i++) {
        tlm_prof_summary_free(&runs[i].s);
        tlm_profile_free(runs[i].p);
    }
    free(runs);
}
