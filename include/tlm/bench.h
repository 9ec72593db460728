/* bench.h — the end-to-end benchmark of SPEC.md §2.1: build the model from its
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
#include "tlm/config.h"
#include "tlm/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TLM_PASS_FORWARD = 0,          /* forward to logits and loss */
    TLM_PASS_FORWARD_BACKWARD = 1, /* + backward to every gradient */
    TLM_PASS_TRAIN = 2             /* + one AdamW step */
} tlm_pass;

const char *tlm_pass_name(tlm_pass p); /* "forward", "forward-backward", "train" */

typedef struct {
    char model_name[32];   /* preset name or "custom" */
    tlm_config config;
    int batch_size, context_length;
    int warmup, steps;     /* steps >= 1, warmup >= 0 */
    tlm_pass pass;
    tlm_precision precision;
    bool graphs;             /* CUDA graphs (tlm_run_config.cuda_graphs) */
    tlm_attention attention; /* naive, flash, or auto (resolved for the row: model.h) */
    uint64_t seed;         /* weights and batch */
} tlm_bench_case;

typedef struct {
    double mean_ms, std_ms; /* over the timed steps; 0 when the phase did not run */
} tlm_timing;

typedef struct {
    tlm_status status;      /* TLM_OK, or e.g. TLM_ERR_OUT_OF_MEMORY: the row says so */
    char error[256];        /* the message when status != TLM_OK */
    tlm_timing forward, backward, optimizer, step; /* step = the phases run, summed per step */
    double tokens_per_s;    /* batch_size * context_length / step mean */
    double tflops;          /* achieved TFLOP/s of forward (+ backward as 2x forward) over their time */
    int64_t params;
    size_t peak_bytes;      /* tracked allocator peak: every backend byte of the run */
    size_t peak_bytes_by_tag[TLM_MEM_NUM_TAGS];
    size_t device_peak_bytes; /* the device's own count (cudaMemGetInfo), sampled after every
                                 phase, less what was in use outside tlm's allocator at the
                                 start; 0 where the backend has no such count (CPU) */
    float loss_first, loss_last; /* first and last timed step's loss (a sanity check) */
    double speedup_vs_fp32; /* the fp32 row's time / this row's (forward, + backward when run),
                               set by the caller for the same model and context; 0: none */
    float loss_scale;       /* fp16: the loss scale after the run (GradScaler); else 1 */
    int64_t skipped_steps;  /* fp16: AdamW steps skipped for inf/NaN gradients, warm-up included */
    tlm_attention attention; /* the attention the row ran (or would have): naive or flash */
} tlm_bench_result;

/* Runs one case on `be`: creates and initialises the model, runs, frees it. Failures of the
 * case (out of memory, invalid shapes) are returned in r->status with r->error; the function
 * itself returns TLM_OK unless it could not run at all. */
tlm_status tlm_bench_run(tlm_backend *be, const tlm_bench_case *c, tlm_bench_result *r);

typedef enum { TLM_FORMAT_TABLE = 0, TLM_FORMAT_CSV, TLM_FORMAT_JSON } tlm_format;

/* Report writers. The header says device, date, versions and how FLOPs are counted;
 * table: fixed width with a units row; csv: one header row; json: one object with "rows". */
void tlm_bench_print_header(FILE *f, tlm_format fmt, const char *device_desc, const tlm_bench_case *first);
void tlm_bench_print_row(FILE *f, tlm_format fmt, const tlm_bench_case *c, const tlm_bench_result *r,
                         int index);
void tlm_bench_print_footer(FILE *f, tlm_format fmt, int num_rows, int num_failed);

/* Helpers every report shares: the current time as "YYYY-MM-DD HH:MM:SS UTC" into buf (n bytes),
 * and s written as a JSON string (quoted; '"', '\\' and control characters escaped). */
void tlm_utc_now(char *buf, size_t n);
void tlm_json_string(FILE *f, const char *s);

/* Parses "table", "csv" (when allow_csv) or "json"; false for anything else. */
bool tlm_format_parse(const char *name, bool allow_csv, tlm_format *out);

#ifdef __cplusplus
}
#endif
#endif
