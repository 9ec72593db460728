/* bench.h — the end-to-end benchmark of docs/experiments.md, benchmarking: build the model from its
 * hyperparameters, a random batch, `warmup` untimed steps, then `steps` timed steps, each
 * phase (forward, backward, optimizer) timed between events on the compute stream (CUDA events
 * on CUDA, the host clock on the CPU); mean and population standard deviation (divide by n) per
 * phase, in milliseconds. */
#ifndef TLM_BENCH_H
#define TLM_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "tlm/backend.h"
#include "tlm/comm.h"
#include "tlm/config.h"
#include "tlm/ddp.h"
#include "tlm/model.h"
#include "tlm/report.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TLM_PASS_FORWARD = 0,          /* forward to logits and loss */
    TLM_PASS_FORWARD_BACKWARD = 1, /* + backward to every gradient */
    TLM_PASS_TRAIN = 2             /* + one AdamW step */
} tlm_pass;

const char *tlm_pass_name(tlm_pass p); /* "forward", "forward-backward", "train" */

/* A sweep's initial weights, kept on the host between its cases: the rows of a sweep differ in batch,
 * context, precision or data-parallel mode, not in the weights their model and seed give, and drawing
 * them (tlm_model_init_random: a normal draw per parameter, 2.0 G for xl) takes seconds of host time a
 * row. Holds one model's (config and seed) at a time, m->layout.flat_numel floats of host memory; the
 * caller gives one to the cases that share a model with the case before or after them, and frees it after
 * the last. */
typedef struct tlm_bench_weights tlm_bench_weights;
tlm_bench_weights *tlm_bench_weights_new(void); /* NULL: out of host memory */
void tlm_bench_weights_free(tlm_bench_weights *w);

/* What a caller adds to a case's steps (tlm memory records its memory timeline so): before_steps
 * runs with the model created and its initial weights set, right before the first warm-up step;
 * after_steps right after the last step (steps: the steps' outcome), before the model is freed. Either
 * may be NULL. An error they return fails the case (its r->status and r->error). */
typedef struct {
    tlm_status (*before_steps)(void *user, tlm_model *m);
    tlm_status (*after_steps)(void *user, tlm_model *m, tlm_status steps);
    void *user;
} tlm_bench_hooks;

typedef struct {
    char model_name[32];   /* preset name or "custom" */
    tlm_config config;
    int batch_size, context_length;
    int warmup, steps;     /* steps >= 1, warmup >= 0 */
    tlm_pass pass;
    tlm_precision precision;
    bool graphs;             /* CUDA graphs (tlm_run_config.cuda_graphs) */
    tlm_attention attention; /* naive, flash, or auto (resolved for the row: model.h) */
    tlm_recompute recompute; /* activation checkpointing (tlm_run_config.recompute); default NONE */
    bool optimizer_in_backward; /* tlm_run_config.optimizer_in_backward (not with fp16) */
    bool optimizer_overlap;  /* tlm_run_config.optimizer_overlap (not with fp16, ZeRO or the above) */
    int grad_accum_steps;    /* tlm_run_config.grad_accum_steps (pass train; 0 or 1: none): a step is this many
                                micro-batches of batch_size rows (each a forward and a backward adding into the
                                gradients; different rows each) and one update; the timings, tokens/s and MFU
                                are per optimizer step, forward and backward summed over its micro-batches */
    uint64_t seed;         /* weights and batch */
    tlm_bench_weights *weights; /* not owned: the initial weights kept between the cases; NULL: drawn
                                   for this case alone */
    tlm_comm *comm;        /* not owned: data parallelism over its ranks (ddp.h); NULL: one process */
    tlm_ddp_config ddp;    /* with comm: how the gradients are averaged; batch_size is then the global
                              batch, batch_size / world_size rows a rank (it must divide) */
    size_t max_context_bytes; /* > 0: also find the longest context that fits in these bytes
                                 (tlm_bench_max_context; result max_context); 0: not asked */
    const tlm_bench_hooks *hooks; /* not owned; NULL: none */
} tlm_bench_case;

typedef struct {
    double mean_ms, std_ms; /* over the timed steps; 0 when the phase did not run */
} tlm_timing;

typedef struct {
    tlm_status status;      /* TLM_OK, or e.g. TLM_ERR_OUT_OF_MEMORY: the row says so */
    char error[256];        /* the message when status != TLM_OK */
    tlm_timing forward, backward, optimizer, step; /* step = the phases run, summed per step */
    double tokens_per_s;    /* grad_accum_steps * batch_size * context_length / step mean */
    double tflops;          /* achieved TFLOP/s of forward (+ backward as 2x forward) over their time */
    double mfu;             /* model FLOPs utilization of the whole step: 3 x forward matmul FLOPs per step
                               (train, forward-backward; 1x for forward) over the step's time (the update and
                               the communication included) / the peak (tlm_backend_peak_tflops); 0: no peak */
    int64_t params;
    size_t peak_bytes;      /* tracked allocator peak: the bytes live buffers held (memory.h current_total;
                               PyTorch's max_memory_allocated) */
    size_t peak_bytes_by_tag[TLM_MEM_NUM_TAGS];
    size_t reserved_peak_bytes; /* the most held from the device: allocations plus the step arena's
                               bytes no buffer held then (memory.h footprint; max_memory_reserved) */
    size_t device_peak_bytes; /* the device's own count (cudaMemGetInfo), sampled after every
                                 phase, less what was in use outside tlm's allocator at the
                                 start; 0 where the backend has no such count (CPU) */
    float loss_first, loss_last; /* first and last timed step's loss (a sanity check) */
    double speedup_vs_fp32; /* the fp32 row's time / this row's (forward, + backward when run),
                               set by tlm_bench_set_speedup from the fp32 twin's row; 0: none */
    float loss_scale;       /* fp16: the loss scale after the run (GradScaler); else 1 */
    int64_t skipped_steps;  /* fp16: AdamW steps skipped for inf/NaN gradients, warm-up included */
    tlm_attention attention; /* the attention the row ran (or would have): naive or flash */
    /* data parallelism (case comm set; else zero) */
    tlm_timing comm;        /* communication the step waited for (tlm_ddp_timing.exposed_ms); forward,
                               backward and optimizer exclude it, so the four phases add up to the step */
    double comm_share;      /* comm mean / step mean */
    int world_size;         /* ranks (1 alone) */
    size_t peak_bytes_min;  /* with several ranks peak_bytes (and reserved, per tag) is the largest over
                               the ranks, this the smallest */
    int max_context;        /* c->max_context_bytes > 0: tlm_bench_max_context's answer; else -1 */
    size_t mem_after_init_bytes, mem_before_opt_bytes, mem_after_opt_bytes; /* tracked bytes in use after
                               the model and reducer were set up, right before and after the last timed
                               optimizer step (the ZeRO memory table; largest over the ranks) */
} tlm_bench_result;

/* Runs one case on `be`: creates and initialises the model, runs, frees it. The case is measured on
 * its own: the backend's on-demand workspaces are freed before and after it
 * (tlm_backend_release_workspaces) and the peaks reset, so its peak does not depend on the cases run
 * before it. Failures of the
 * case (out of memory, invalid shapes) are returned in r->status with r->error; the function
 * itself returns TLM_OK unless it could not run at all.
 * With c->comm (every rank calls it with the same case): each rank runs its rows of the global batch
 * (its stretch of the one random sequence a single process would run) with the reducer of c->ddp; the
 * ranks agree after the model's creation and after every step, so a failure every rank saw (out of
 * memory) is every rank's failed row, and the memory figures are gathered from every rank (the
 * function returns BACKEND when a host exchange failed: the run cannot go on). A rank that fails alone
 * inside a step leaves the others in a collective: the watchdog ends the run (comm.h, "Faults"). */
tlm_status tlm_bench_run(tlm_backend *be, const tlm_bench_case *c, tlm_bench_result *r);

/* The "vs fp32" figure of a sweep, whatever the order of its rows:
 * tlm_bench_fp32_twin: the index of case i's fp32 twin in cases[0..n): the first fp32 case of the same
 *   model, context, batch, pass, warm-up, recompute and optimizer placement, earlier or later in the
 *   list; -1 when there is none or case i is fp32 itself.
 * tlm_bench_set_speedup: r->speedup_vs_fp32 = the twin's forward (+ backward) time over r's, when both
 *   ran (status TLM_OK) and r's time is not 0; else r is left as it is (0: none). */
int tlm_bench_fp32_twin(const tlm_bench_case *cases, int n, int i);
void tlm_bench_set_speedup(tlm_bench_result *r, const tlm_bench_result *fp32);

/* The model's run configuration of case c: its precision, attention, CUDA graphs, recompute and
 * optimizer-in-backward, and forward_only for the forward pass (no gradient, no activation kept for a
 * backward: model.h). */
tlm_run_config tlm_bench_run_config(const tlm_bench_case *c);

/* The longest context_length (tokens) at c's batch, model, precision, attention, pass, recompute and
 * optimizer-in-backward whose planned step fits in limit_bytes: the model's memory plan
 * (tlm_model_memory_estimate: parameters, gradients, optimizer state, the weight copy, activations
 * and workspaces, the bytes tlm's allocator would hold at the step's peak; the backend's own
 * libraries and context not included), searched by bisection up to 2^20 tokens; with several ranks
 * (c->comm) a rank's rows and memory under c->ddp (tlm_ddp_memory_estimate: ZeRO-1's shard of the
 * optimizer state, the bf16 staging buffer). 0 when not even one token fits. Runs nothing on the
 * device. */
int tlm_bench_max_context(tlm_backend *be, const tlm_bench_case *c, size_t limit_bytes);

/* ---- the report (src/bench/bench_report.c) ------------------------------------------------------------
 * The columns of a benchmark row in the one report schema (report.h): the case (model, context_length,
 * batch_size, precision, attention, pass, warmup_steps, grad_accum_steps, steps, cuda_graphs, seed), params,
 * fwd_ms_mean/std,
 * bwd_ms_mean/std, opt_ms_mean/std, step_ms_mean/std, tokens_per_s, tflop_per_s, peak_bytes (and per
 * tag: peak_bytes_parameters, ...), device_peak_bytes, loss_first, loss_last, speedup_vs_fp32,
 * loss_scale, skipped_steps. Commands that take the bench flags (bench, profile, memory) reuse the
 * case columns (tlm_bench_case_columns: the first n of the list) for their own tables. */
extern const tlm_column tlm_bench_columns[];
extern const int tlm_bench_num_columns;
extern const int tlm_bench_case_columns; /* model .. seed */

/* The header notes of a benchmark report (how times, FLOPs, peaks and the loss are measured), and the
 * table's columns, with those that say nothing for these cases hidden (the loss scale without fp16, the
 * device's peak on the CPU, a pass or warm-up column with one value). */
void tlm_bench_report_begin(tlm_report *rep, const tlm_backend *be, const tlm_bench_case *cases, int n);
/* Of the case columns of the current table, hides those that say nothing for these cases: pass and
 * warmup_steps with one value, recompute and optimizer_in_backward when no case uses them. */
void tlm_bench_report_show_case(tlm_report *rep, const tlm_bench_case *cases, int n);
/* The case's fields into the current row (for tables that reuse the case columns). */
void tlm_bench_report_case(tlm_report *rep, const tlm_bench_case *c);
/* One row: the case and its result (failed rows: status "OOM" or "failed" and the error). */
void tlm_bench_report_row(tlm_report *rep, const tlm_bench_case *c, const tlm_bench_result *r);

#ifdef __cplusplus
}
#endif
#endif
