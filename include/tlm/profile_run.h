/* profile_run.h — `tlm profile`'s runs and report tables (src/profile/profile_run.c,
 * profile_report.c): a benchmark case run under the profiler (the timed steps of tlm_bench_run, the
 * warm-up left out) and summarized against the device's ceilings, or the CUDA processes of another
 * program run with tlm's profiler injected (profile_exec.h); then the report's tables of either.
 * Times are microseconds in the kernel tables, milliseconds per phase (profile.h). */
#ifndef TLM_PROFILE_RUN_H
#define TLM_PROFILE_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include "tlm/backend.h"
#include "tlm/bench.h"
#include "tlm/profile.h"
#include "tlm/report.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One profiled run: a case (c set) or a process of another program (c NULL). */
typedef struct {
    char key[64];                /* the run's name in every table */
    const tlm_bench_case *c;     /* not owned; NULL for --exec */
    tlm_bench_result r;          /* the case's timings; r.status/r.error: why it has no profile */
    tlm_profile *p;              /* NULL when the case failed */
    tlm_prof_summary s;
    double unprofiled_step_ms;   /* the step without the profiler; NaN: not measured */
} tlm_prof_run;

/* The run's name of a case: "small ctx256 fp32 flash" (+ " b8" off batch 4, " forward" off the train
 * pass, " eager" without CUDA graphs where the backend has them). */
void tlm_prof_run_key(const tlm_bench_case *c, tlm_attention resolved, bool has_graphs, char *out, size_t n);

/* Profiles case c on `be` into *x (its key set first): with `overhead` once unprofiled before; then the
 * profiler around tlm_bench_run and the summary (tlm_profile_summarize) against `ceilings`. A failed
 * case leaves x->p NULL and says why in x->r.status and x->r.error. Returns true for a failure other than
 * the case's running out of device memory (an OOM row), e.g. the profiler's or the summary's. */
bool tlm_prof_run_case(tlm_backend *be, const tlm_bench_case *c, const tlm_ceilings *ceilings, bool overhead,
                       tlm_prof_run *x);

/* Runs argv (argc words; argv[0] a path or found in PATH) with libtlm_inject.so injected and gives a
 * run per CUDA process it had (*runs, *n; free with tlm_prof_runs_free), named "exec" or "exec process
 * i", summarized with d_head (0: unknown) for the attention's FLOPs; *exit_status is the program's. A
 * program that exits non-zero gives no runs. Errors: INVALID_ARGUMENT (no such program), UNSUPPORTED
 * (no injection library), IO, FORMAT, OUT_OF_MEMORY. */
tlm_status tlm_prof_run_exec(char *const *argv, int argc, int d_head, tlm_prof_run **runs, int *n, int *exit_status);

void tlm_prof_runs_free(tlm_prof_run *runs, int n);

/* What the tables show: the phases, the kernels per phase and run (top; 0: all), the layer table, the
 * profiler's cost. */
typedef struct {
    bool phase[TLM_PHASE_COUNT];
    long top;
    bool layers, overhead;
    const tlm_ceilings *ceilings; /* the roofline's (NULL: none, --exec): a list line says how measured */
} tlm_prof_tables;

/* The report's tables: kernels (per phase), ops (tlm's runs: foreign false; its roofline percentages
 * above 100 marked "!" and above_ceiling true, and a "roofline_notes" list after it: the ceilings, how they
 * were measured, and what a row above one means), layers (o->layers), ranges, runs (a row per run,
 * failed ones as OOM or failed), and each run's findings as a list. */
void tlm_prof_write_tables(tlm_report *rep, tlm_prof_run *runs, int n, bool foreign, const tlm_prof_tables *o);

#ifdef __cplusplus
}
#endif
#endif
