/* train.h — training the CS336 model on a token file: the CS336 training recipe (Assignment 1,
 * "Transformer LM training": random batches at fresh offsets each step, AdamW, a learning-rate
 * schedule of linear warm-up then cosine decay, gradient clipping by the global L2 norm), validation
 * on a fixed set of held-out batches, and checkpoints from which a run resumes bit for bit.
 *
 * One state (tlm_train), one function per step (tlm_train_step). Data parallelism (one process per
 * rank) plugs in without changing the loop: the batch draws are rank-aware (npy.h, tlm_batch_draw:
 * rank r of world_size takes its rows of each global batch), and the reducer (ddp.h, t->ddp) gives
 * the model its communicator (the loss averaged over the ranks), averages the gradients over the
 * ranks (overlapping the backward pass) before the step clips them by the norm of the average and
 * updates them, so every rank takes the same step (with ZeRO-1 each its shard, then the parameters
 * are all-gathered). Checkpoints are written by one rank (rank 0).
 *
 * Units: a step is one optimizer update; steps count from 1; tokens are token positions trained on
 * (grad_accum_steps x batch_size x context_length x world_size per step); learning rates are per step.
 *
 * Gradient accumulation (grad_accum_steps N > 1): the batch of step `it` is one draw of N x B rows a
 * rank (npy.h, as a step of batch N x B draws it), micro-batch k its rows [k B, (k+1) B); each
 * micro-batch's forward and backward add its share (1/N) of the mean loss's gradient into the one
 * gradient buffer (model.h, tlm_model_set_micro_batch); the reduction over the ranks happens in the last
 * micro-batch's backward; the norm, the clip and the update once per step. So (N, B) trains as (1, N B)
 * does, up to the order of the sums. */
#ifndef TLM_TRAIN_H
#define TLM_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "tlm/ddp.h"
#include "tlm/identity.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/report.h"
#include "tlm/safetensors.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the learning-rate schedule (src/train/schedule.c) ------------------------------------------
 * CS336 Assignment 1 (Spring 2025) §4.4, get_lr_cosine_schedule, at iteration `it` (0-based: the
 * step that follows `it` steps), with T_w = warmup_iters and T_c = cosine_cycle_iters:
 *   it < T_w:          lr_max * it / T_w                                             (warm-up)
 *   T_w <= it <= T_c:  lr_min + 0.5 * (1 + cos(pi * (it - T_w) / (T_c - T_w))) * (lr_max - lr_min)
 *   it > T_c:          lr_min                                                        (post-annealing)
 * in float64; T_c == T_w gives lr_max at it == T_w (the cosine's first point). Valid arguments:
 * it >= 0, 0 <= lr_min <= lr_max, 0 <= T_w <= T_c (tlm_train_config_check). */
double tlm_lr_cosine_schedule(int64_t it, double lr_max, double lr_min, int64_t warmup_iters,
                              int64_t cosine_cycle_iters);

/* The global gradient norm and clipping (tlm_grad_norm, tlm_clip_grad_norm, tlm_clip_to_norm,
 * tlm_grad_nonfinite_tensor, TLM_CLIP_SCRATCH_BYTES) are the model's: model.h, src/model/clip.c. */

/* ---- the recipe ----------------------------------------------------------------------------------- */

typedef struct {
    int batch_size;             /* B: rows per rank per micro-batch (per step without accumulation) */
    int grad_accum_steps;       /* N: micro-batches per optimizer step (gradient accumulation, nanoGPT's
                                   convention: batch_size stays the micro-batch); a step trains on
                                   N x B x T tokens a rank; the model is created with
                                   run.grad_accum_steps = N (model.h). 1: none */
    int context_length;         /* T: tokens per row (<= the model's context_length) */
    int64_t steps;              /* the budget: optimizer steps of the whole run, >= 1 */
    uint64_t seed;              /* the batch draws (npy.h: each step's from (seed, it, rank)) */
    double lr_max, lr_min;      /* the schedule (above) */
    int64_t warmup_iters, cosine_cycle_iters;
    tlm_adamw_config adamw;     /* betas, eps, weight_decay (CS336 AdamW); its lr is the schedule's */
    double max_grad_norm;       /* clipping threshold; 0: no clipping and no norm (a pass over the
                                   gradients saved; non-finite gradients then show in the next loss) */
    int64_t eval_every;         /* validation every this many steps (and after the last); 0: only after
                                   the last; without validation data: none */
    int eval_batches;           /* global batches of the fixed validation set (>= 1) */
} tlm_train_config;

/* CS336-style defaults for a budget of `steps`: batch 4 x context 256, lr 1e-3 -> 1e-4, warm-up 5%
 * of the steps (at least 1 when steps > 1), cosine over all the steps, AdamW's defaults (optimizer.h),
 * max_grad_norm 1.0, validation every 100 steps on 10 batches, seed 0. */
tlm_train_config tlm_train_defaults(int64_t steps);

/* Checks every field against its domain; INVALID_ARGUMENT naming the field, its value and the domain
 * otherwise (AdamW's through tlm_adamw_config_check). */
tlm_status tlm_train_config_check(const tlm_train_config *c);

/* ---- the state and the step (src/train/train.c) ------------------------------------------------ */

/* What one step did: the CS336 quantities a person watches, kept for every step (the loss log). */
typedef struct {
    int64_t step;       /* 1-based */
    int64_t tokens;     /* tokens trained on after this step (all ranks) */
    float loss;         /* the step's mean training loss (before the update; averaged over ranks) */
    double lr;          /* the learning rate the step used */
    double grad_norm;   /* global L2 norm of the gradients before clipping (unscaled in fp16; inf or
                           NaN on an fp16 overflow); NaN when not measured (max_grad_norm 0) */
    bool clipped;       /* the gradients were scaled by max_grad_norm / (grad_norm + 1e-6) */
    bool skipped;       /* fp16: the loss scaler skipped the update (inf/NaN gradient) */
    float loss_scale;   /* fp16: the scale after the step; 1 in the other modes */
    double val_loss;    /* mean validation loss after this step; NaN when there was no evaluation */
} tlm_train_record;

typedef struct tlm_train {
    tlm_model *model;               /* not owned */
    tlm_train_config config;
    const tlm_tokens *train_data;   /* not owned: ids < vocab_size, at least context_length + 1 */
    const tlm_tokens *val_data;     /* not owned; NULL: no validation */
    int rank, world_size;           /* this process among the data-parallel ranks; 0 and 1 alone */
    struct tlm_ddp *ddp;            /* not owned: the gradient reducer of a world of several ranks (ddp.h),
                                       set by the caller after tlm_train_init; NULL alone */
    int64_t step;                   /* steps taken (the next is step + 1) */
    int64_t tokens;                 /* tokens trained on (all ranks) */
    int32_t *inputs, *targets;      /* (B*T) host: the step's batch */
    int32_t *eval_inputs, *eval_targets; /* (eval_batches * B*T) host: this rank's rows of the fixed
                                            validation batches; NULL without validation */
    void *scratch;                  /* (TLM_CLIP_SCRATCH_BYTES) backend memory for the norm */
    tlm_train_record *log;          /* (log_len) every step's record, from step 1 (a resumed run
                                       carries the checkpoint's) */
    int64_t log_len, log_cap;
    const tlm_file_identity *train_data_id, *val_data_id; /* not owned: the data files' identities, recorded
                                                             in checkpoints; NULL: not known */
    const char *data_change;        /* not owned: what --allow-data-change let through on resuming ("training
                                       data: size ... vs ..."), in the log's header; NULL: none */
} tlm_train;

/* Sets up training of `m` (created for the recipe: training mode, not optimizer-in-backward, whose
 * updates cannot follow a global clip) on `train_data` (and `val_data`, may be NULL), as rank `rank`
 * of `world_size`. Draws the fixed validation batches (seed ^ TLM_TRAIN_EVAL_SEED, one draw per batch).
 * Errors: INVALID_ARGUMENT (the recipe, tlm_train_config_check; a token file shorter than
 * context_length + 1, named "training data" or "validation data"; T above the model's
 * context_length; a rank outside the world), UNSUPPORTED (optimizer-in-backward), OUT_OF_MEMORY. */
#define TLM_TRAIN_EVAL_SEED 0x5EEDE7A1ull
tlm_status tlm_train_init(tlm_train *t, tlm_model *m, const tlm_train_config *c, const tlm_tokens *train_data,
                          const tlm_tokens *val_data, int rank, int world_size);
void tlm_train_free(tlm_train *t);

/* One step, step s = t->step + 1: lr = the schedule at it = s - 1; this rank's rows of batch
 * (seed, it) drawn from the training data; forward (mean loss), backward (with t->ddp: the gradients
 * averaged over the ranks, tlm_ddp_sync_grads), the global norm and clipping, the AdamW update with
 * lr (with t->ddp: tlm_ddp_adamw_step); t->step, t->tokens advance and the record is appended to the
 * log and copied to *rec (may be NULL). Errors: the model's (OUT_OF_MEMORY, ...); INVALID_ARGUMENT
 * for a non-finite loss or gradient in fp32, tf32 or bf16 (the message names the step and the first
 * tensor whose gradient is not finite; the update is not taken). In fp16 an inf/NaN gradient is the
 * loss scaler's: the update is skipped (rec->skipped) and the scale halves. */
tlm_status tlm_train_step(tlm_train *t, tlm_train_record *rec);

/* The mean loss over the fixed validation batches (forward passes only: the parameters, the optimizer
 * and the step are untouched; the gradients of the last step are gone). Records it as the val_loss of
 * the last step's record. INVALID_ARGUMENT without validation data. */
tlm_status tlm_train_eval(tlm_train *t, double *val_loss);

/* Whether the step just taken (t->step) is one the recipe evaluates after: every eval_every steps
 * and the last step of the budget, when there is validation data. */
bool tlm_train_eval_due(const tlm_train *t);

/* ---- checkpoints (src/train/checkpoint.c) ----------------------------------------------------------
 * A checkpoint directory ROOT holds one directory per save and a pointer to the newest:
 *   ROOT/step-00000020/weights.safetensors    the parameters: CS336 state-dict names, float32, the
 *                                             model config in "__metadata__" (tlm_model_save): an
 *                                             ordinary weights file (tlm step --weights, PyTorch)
 *   ROOT/step-00000020/optimizer.safetensors  AdamW's moments, float32, named as PyTorch's AdamW state:
 *                                             "exp_avg.<name>" (m) and "exp_avg_sq.<name>" (v) for
 *                                             every parameter <name>; "__metadata__": step (AdamW's t),
 *                                             content "adamw moments", producer
 *   ROOT/step-00000020/state.json             the run: format "tlm-checkpoint" version 1, step, tokens,
 *                                             the recipe (tlm_train_config, precision, attention,
 *                                             world_size, the data files' paths and token counts), the
 *                                             data draws (seed, next draw = step: the draws are a
 *                                             function of (seed, step, rank), nothing else), the loss
 *                                             scaler, AdamW's t, and the loss log (every step's record)
 *   ROOT/latest                               "step-00000020\n": the newest complete checkpoint
 * A save writes a fresh ROOT/.tmp-step-XXXXXX directory (every file through the one file writer,
 * output.h: written, fsync'ed), fsyncs it, renames it to step-NNNNNNNN (a directory of that name
 * left by an earlier run is replaced), fsyncs ROOT, then replaces `latest` the same way, all under an
 * exclusive lock of ROOT/.lock (flock: two runs saving into one ROOT take turns). A crash at any
 * point leaves the last complete checkpoint and `latest` pointing at it; a temporary directory left
 * by a killed save is removed by the next save into ROOT. */

/* What a run needs to know of itself beyond the recipe, recorded in state.json. */
typedef struct {
    const char *train_data_path, *val_data_path; /* as given; val NULL: none */
    const char *model_name;                      /* "small", "tiny*"; NULL: none recorded */
    int64_t save_every;                          /* the run's checkpoint cadence in steps (0: only after the
                                                    last step and when stopped); a resumed run keeps it */
    bool allow_data_change;                      /* resuming: data files other than the checkpoint's are
                                                    accepted (tlm_train_session_load) */
} tlm_train_sources;

/* Writes the checkpoint of t's state after step t->step into ROOT `root` (created if missing, its
 * parent must exist), then keeps only the newest `keep` step directories (0: all). Rank 0 writes; under
 * ZeRO-1 (t->ddp shards the moments) it is a collective: every rank calls it, the moments are gathered
 * to rank 0 (tlm_ddp_gather_moments: the same files as a replicated run's), and the others return then.
 * *written (may be NULL) receives the step directory's path (malloc'ed, the caller frees). Errors: IO (naming the path
 * and the reason), INVALID_ARGUMENT (non-finite weights: nothing is written), OUT_OF_MEMORY (host
 * copies of the weights and moments). */
tlm_status tlm_checkpoint_save(const tlm_train *t, const tlm_train_sources *src, const char *root, int keep,
                               char **written);

/* A checkpoint read back, before a model exists: enough to check a resumed run's flags against it,
 * create the model and restore it. */
typedef struct {
    char *dir;                  /* the step directory read */
    tlm_config model;           /* from weights.safetensors's metadata */
    tlm_train_config config;
    tlm_precision precision;
    tlm_attention attention;    /* as resolved by the run that wrote it (naive or flash) */
    int world_size;
    char *train_data_path, *val_data_path; /* val NULL: none */
    char *model_name;           /* the name the run gave its model ("tiny*"); an older checkpoint
                                   that recorded none: tlm_config_name's, from its sizes */
    int64_t train_data_tokens, val_data_tokens;
    int64_t step, tokens;
    int64_t save_every;         /* the cadence its run saved at (0: none recorded, or only at the end) */
    int adamw_t;                /* AdamW's step count (below `step` after fp16 skips) */
    tlm_loss_scaler scaler;
    tlm_train_record *log;      /* (log_len) */
    int64_t log_len;
    tlm_safetensors weights;    /* the weights file, read whole (for tlm_checkpoint_restore) */
    int version;                /* of state.json: 1 recorded neither the data's identity nor the files'
                                   digests (then not checked: `warning` says so); 2 both */
    char warning[4352];         /* what the reader could not check, for the caller to print once (rank 0
                                   under a launcher; tlm_checkpoint_open prints nothing): "PATH/state.json is
                                   version 1: ..."; "": none */
    bool have_train_id, have_val_id;
    tlm_file_identity train_data_id, val_data_id; /* the data files' identities as the run saw them */
    char file_digest[2][33];    /* version 2: XXH3-128 (hex) and size of weights.safetensors and */
    uint64_t file_bytes[2];     /* optimizer.safetensors as saved; checked where each file is read */
} tlm_checkpoint;

/* Reads the checkpoint at `path`: a ROOT (its `latest` names the step directory) or a step directory.
 * Errors: IO (missing files), FORMAT (a file that is not what it should be: named, with the field or
 * tensor), each message naming the checkpoint's path. */
tlm_status tlm_checkpoint_open(const char *path, tlm_checkpoint *ck);
void tlm_checkpoint_close(tlm_checkpoint *ck);

/* Restores t (set up by tlm_train_init for a model created with ck->model and ck->precision) to the
 * checkpoint: the weights, AdamW's moments (one rank; several: tlm_checkpoint_restore_moments below) and
 * t, the loss scaler, the step, the tokens and the log.
 * Everything is checked (every moment present, float32, the parameter's shape, finite) before
 * anything changes. Errors: INVALID_ARGUMENT / FORMAT naming the file and tensor, OUT_OF_MEMORY. */
tlm_status tlm_checkpoint_restore(tlm_train *t, const tlm_checkpoint *ck);

/* AdamW's moments of ck (checked as above) into t's optimizer: the model's, or under ZeRO-1 (t->ddp shards
 * it: ddp.h) this rank's pieces re-cut from the whole tensors, so a checkpoint of any rank count, replicated
 * or ZeRO-1, resumes into either. tlm_checkpoint_restore calls it for a run of one rank; a run of several
 * calls it once its reducer exists (tlm_train_session_join). Errors: as tlm_checkpoint_restore's. */
tlm_status tlm_checkpoint_restore_moments(tlm_train *t, const tlm_checkpoint *ck);

/* ---- planning a run (src/train/plan.c) --------------------------------------------------------------
 * A run's recipe from what its caller was given (tlm train's flags): a fresh run's from the defaults
 * and the given values, a resumed run's from its checkpoint, every given value checked against it.
 * The messages name the values by their tlm train flag (tlm_train_arg_flag). */

typedef enum {
    TLM_TRAIN_ARG_STEPS = 0,         /* the budget in optimizer steps */
    TLM_TRAIN_ARG_TOKENS,            /* the budget in tokens: steps = ceil(tokens / (global batch x T)) */
    TLM_TRAIN_ARG_LR_MAX,
    TLM_TRAIN_ARG_LR_MIN,
    TLM_TRAIN_ARG_WARMUP_ITERS,
    TLM_TRAIN_ARG_COSINE_CYCLE_ITERS,
    TLM_TRAIN_ARG_BETA1,
    TLM_TRAIN_ARG_BETA2,
    TLM_TRAIN_ARG_EPS,
    TLM_TRAIN_ARG_WEIGHT_DECAY,
    TLM_TRAIN_ARG_MAX_GRAD_NORM,
    TLM_TRAIN_ARG_EVAL_EVERY,
    TLM_TRAIN_ARG_EVAL_BATCHES,
    TLM_TRAIN_ARG_BATCH_SIZE,        /* the global batch: rows per step over every rank */
    TLM_TRAIN_ARG_CONTEXT_LENGTH,
    TLM_TRAIN_ARG_GRAD_ACCUM_STEPS,  /* micro-batches per optimizer step */
    TLM_TRAIN_ARG_SEED,              /* its value is `seed` (a double holds no 64-bit seed) */
    TLM_TRAIN_NUM_ARGS
} tlm_train_arg;

/* The model's sizes a run may be given, by their flags: --vocab-size, --d-model, --d-ff, --num-layers,
 * --num-heads, --max-context-length (the RoPE table's length: the config's context_length). */
enum { TLM_TRAIN_SIZE_VOCAB, TLM_TRAIN_SIZE_D_MODEL, TLM_TRAIN_SIZE_D_FF, TLM_TRAIN_SIZE_NUM_LAYERS,
       TLM_TRAIN_SIZE_NUM_HEADS, TLM_TRAIN_SIZE_CONTEXT, TLM_TRAIN_NUM_SIZES };

/* "--steps", "--lr-max", ...: the tlm train flag of an argument ("?" for anything else). */
const char *tlm_train_arg_flag(tlm_train_arg arg);

/* What a run was given: each argument with whether it was given, in the argument's units (whole
 * numbers for iterations, batches and budgets; the caller checks each value's domain). */
typedef struct {
    bool given[TLM_TRAIN_NUM_ARGS];
    double value[TLM_TRAIN_NUM_ARGS];
    uint64_t seed;                   /* the batch draws' seed (given or not: the caller's default) */
    bool precision_given;            /* a resumed run: `precision` must be the checkpoint's */
    tlm_precision precision;
    bool val_data_given;             /* a resumed run: refused when its run had no validation data */
    /* a resumed run's model is the checkpoint's: each size given must be its, and so must the sizes of the
     * preset named (preset_name NULL: none) where no size is given */
    long sizes[TLM_TRAIN_NUM_SIZES]; /* < 0: not given */
    double rope_theta;               /* NaN: not given */
    const char *preset_name;         /* resolved by tlm_train_plan_resume (INVALID_ARGUMENT "--model: ...") */
    tlm_config preset;               /* set by tlm_train_plan_resume from preset_name */
    int world_size;                  /* a resumed run's ranks (0: the checkpoint's), over which its global
                                        batch is divided anew */
} tlm_train_args;

/* A fresh run's recipe for `model` over `world_size` ranks: tlm_train_defaults of the budget (STEPS,
 * or TOKENS over a global batch x T; one of them must be given), the global batch (default 4 a rank)
 * divided over the ranks (out->batch_size is a rank's rows), T (default: 256, or the model's
 * context_length when shorter), the seed, and every given recipe value (a default lr_min above a
 * given lr_max becomes lr_max / 10; a default cosine_cycle_iters below the warm-up becomes it).
 * Errors: INVALID_ARGUMENT for a batch that does not divide over the ranks, or the recipe's
 * (tlm_train_config_check). */
tlm_status tlm_train_plan_fresh(const tlm_train_args *args, const tlm_config *model, int world_size,
                                tlm_train_config *out);

/* A resumed run's recipe: first its model's sizes, rope_theta and preset are checked against the
 * checkpoint's model ("--model <name> (<size> N) contradicts the checkpoint <dir>, whose model has M");
 * then the checkpoint's recipe, its global batch divided over args->world_size ranks (INVALID_ARGUMENT
 * when it does not divide; the rows drawn are the same: npy.h), with a larger budget when STEPS or
 * TOKENS is given (TOKENS over the checkpoint's global batch). Every other given value must be the
 * checkpoint's (AdamW's as float32; the batch as the global batch; the precision); VAL_DATA given to a run
 * without validation data is refused. Errors: INVALID_ARGUMENT naming the flag, its value, the checkpoint and
 * the value it holds; or a budget the checkpoint's step already reached. */
tlm_status tlm_train_plan_resume(const tlm_train_args *args, const tlm_checkpoint *ck, tlm_train_config *out);

/* Where a run saves its checkpoints: `given` (a malloc'ed copy), else when resuming (ck not NULL) the
 * ROOT the checkpoint came from (its step directory's parent, "." for a bare "step-N"): a resumed run
 * always saves (after its last step, when stopped, and at its cadence: tlm_train_plan_save_every);
 * else NULL. A fresh run refuses a `given` ROOT that already holds a run's checkpoints (its `latest`):
 * INVALID_ARGUMENT. OUT_OF_MEMORY. */
tlm_status tlm_train_plan_checkpoint_dir(const char *given, const tlm_checkpoint *ck, char **out);

/* A run's checkpoint cadence in steps: `given` when given (0: only after the last step and when
 * stopped), else a resumed run's checkpoint's own (ck->save_every), else 0. */
int64_t tlm_train_plan_save_every(bool given, int64_t value, const tlm_checkpoint *ck);

/* The loss log's format: `given` when format_given, else CSV for a `log` name ending in ".csv", else JSON. */
tlm_format tlm_train_log_format(const char *log, bool format_given, tlm_format given);

/* Starts `plan` (tlm_io_plan_init) with a run's files (output.h, tlm_io_plan): the data read
 * (--train-data, --val-data), and the checkpoint read (--resume) and the ROOT saved into
 * (checkpoint_dir: --checkpoint-dir when checkpoint_dir_given, else --resume's) as directories no
 * other output may lie in. NULL: none. */
void tlm_train_plan_files(tlm_io_plan *plan, const char *train_data, const char *val_data, const char *resume,
                          const char *checkpoint_dir, bool checkpoint_dir_given);

/* One value given to a resumed run against the checkpoint's: TLM_OK when not given or equal, else
 * INVALID_ARGUMENT "<flag> <value> contradicts the checkpoint <dir>, whose run has <ckpt_value>: ...". */
tlm_status tlm_checkpoint_check_value(const tlm_checkpoint *ck, const char *flag, bool given, double value,
                                      double ckpt_value);

/* ---- a run: the loop (src/train/run.c) ----------------------------------------------------------------
 * tlm_train_run takes the steps from t->step to the budget, one tlm_train_step each, with the cadence
 * of the recipe and the run: validation when tlm_train_eval_due, a checkpoint every save_every steps,
 * after the last and when stopped (rank 0 writes; the others meet it in the next step's first collective), a log
 * row every log_every steps, at each evaluation and at the last step. Timing: a step's time runs
 * from the end of the last one's (its logging included) to the end of its own, the evaluations and
 * checkpoints between left out (the device is synchronized before them); the window is the steps since
 * the last row. MFU = 3 x forward matmul FLOPs a step (tlm_config_forward_flops, tlm bench's count)
 * / time / peak. Stopping: after each step every rank looks whether a stop signal came (stop_on_signals)
 * and with several ranks the answers are gathered, so every rank stops after the same step (a checkpoint is saved then
 * when the run saves). The log (tlm_report) receives the run's description (tlm_train_log_begin),
 * one row per logged step and the summary (tlm_train_log_summary). */

/* The figures of the steps since the last row. NaN step_ms: none (a row replayed from a checkpoint);
 * NaN mfu: no peak known; NaN comm_ms: one rank. */
typedef struct {
    double step_ms;        /* mean wall clock of a step, ms */
    double tokens_per_s;   /* tokens of every rank per second */
    double mfu;            /* model FLOPs utilization, a fraction of peak_tflops (per GPU) */
    double elapsed_s;      /* since the run began */
    double comm_ms;        /* several ranks: the communication a step waited for (ddp.h), ms */
} tlm_train_window;

typedef struct {
    tlm_backend *backend;        /* the model's (synchronized before evaluations and checkpoints) */
    tlm_comm *comm;              /* several ranks: the world (stop agreement, peaks); NULL alone */
    const tlm_config *model;     /* the model's config (the FLOPs of a step) */
    tlm_report *report;          /* the loss log; every rank writes to its own (rank 0's is the one kept) */
    tlm_train_sources sources;   /* the data files, recorded in checkpoints and the log */
    const char *checkpoint_dir;  /* ROOT of the checkpoints: one after the last step and when stopped;
                                    NULL: none are saved */
    int64_t save_every;          /* with checkpoint_dir: also one every this many steps (0: no more);
                                    recorded in the checkpoints (sources.save_every is overridden) */
    int keep_checkpoints;        /* the newest this many step directories are kept; 0: all */
    int64_t log_every;           /* a log row every this many steps (>= 1) */
    double peak_tflops;          /* the device's dense peak for MFU (tlm_backend_peak_tflops); 0: MFU n/a */
    /* the run's description in the log (tlm_train_log_begin) */
    const char *model_name;      /* "small", "tiny*", "custom: d_model 256, ..." */
    tlm_precision precision;
    tlm_attention attention;     /* as the model resolved it */
    bool cuda_graphs;            /* the steps run as CUDA graphs */
    const tlm_ddp_config *ddp;   /* several ranks: the reducer's configuration; NULL alone */
    const char *resumed_from;    /* the checkpoint's step directory; NULL: a fresh run */
    /* what a person watches */
    struct tlm_train_progress *progress; /* the progress line (below); NULL: none */
    bool stop_on_signals;        /* SIGINT/SIGTERM stop the run after the current step (a second one ends the
                                    process: the default action); the handlers before are restored after */
} tlm_train_run_config;

/* What a run did. */
typedef struct {
    tlm_status status;      /* TLM_OK, or the failure that ended it (the message is set) */
    int64_t first_step;     /* t->step when it began (a resumed run's checkpoint step) */
    bool stopped;           /* a stop signal reached some rank: every rank stopped after the same step */
    bool together;          /* every rank ended alike; false: this rank's failure alone (with several
                               ranks a collective may then hang: leave without one) */
    char *checkpoint;       /* the last checkpoint written (malloc'ed: tlm_train_run_result_free), or NULL */
    double train_s;         /* the steps' time (evaluations and checkpoints left out), s */
    double steady_s;        /* the same without the first skip_steps steps (warm-up) */
    int64_t steady_steps, skip_steps;
    int stop_signal;        /* stopped: the signal this rank received (SIGTERM when the stop came from another
                               rank); the exit status of a stopped run is 128 + stop_signal */
    char stop_note[96];     /* stopped: "stopped by signal S after step N of M" */
} tlm_train_run_result;

/* Writes the run's description to c->report: the model, the ranks, the recipe, the data, the peak,
 * the notes; declares the log table (its columns shown as the run has them) and replays the rows of
 * t's log (a resumed run's, from its checkpoint) that are due under log_every. */
void tlm_train_log_begin(const tlm_train_run_config *c, const tlm_train *t);

/* Runs t to its budget as above (t set up by tlm_train_init, restored when resuming, t->ddp set with
 * several ranks). Returns res->status: a step's, an evaluation's or a checkpoint's failure, or the
 * stop agreement's; after a failure the log gets a row "failed" (step t->step + 1, the message). One run
 * at a time in a process (stop_on_signals' handler is the process's). */
tlm_status tlm_train_run(tlm_train *t, const tlm_train_run_config *c, tlm_train_run_result *res);

/* The log's summary: steps run, last step, the mean step time over the steady steps, tokens/s, MFU,
 * the final training and validation losses, the last checkpoint, with several ranks (when the run
 * ended well) every rank's peak memory (a collective: every rank calls it), and a stop (stop_note). */
void tlm_train_log_summary(const tlm_train_run_config *c, const tlm_train *t, const tlm_train_run_result *res);

void tlm_train_run_result_free(tlm_train_run_result *res);

/* The time a run has left, in seconds, from what it measured: steps_left x step_s (the caller's measured
 * time of a step: the mean of the steady steps once the first few are past, else the last step's) plus
 * the evaluations still due (tlm_train_eval_due's steps in (step, steps]: every eval_every-th and the last;
 * none without validation data) x eval_s (the last evaluation's time; 0 before the first). */
double tlm_train_eta(const tlm_train *t, double step_s, double eval_s);

/* ---- the progress line (src/train/progress.c) -------------------------------------------------------
 * What a person watches on a terminal: "<prefix>: step S/N loss L lr X grad norm G | T tok/s MFU M | ETA E",
 * rewritten in place on a terminal (shown at each log row and every 0.2 s, erased before a log row and
 * before other text), a plain line at each log row otherwise; "<prefix>: step S: checkpoint DIR" after a
 * save. tlm_train_run shows it through these (tlm_train_run_config's progress). */
typedef struct tlm_train_progress {
    FILE *out;          /* stderr */
    const char *prefix; /* "tlm train" */
    bool tty;           /* out is a terminal */
    bool quiet;         /* nothing is shown (ranks other than 0) */
    bool shown;         /* a line is on the terminal now */
    double last_show;   /* when it was shown, s (CLOCK_MONOTONIC) */
} tlm_train_progress;

/* after a step: shown at a log row (row: then erased, the row follows) and on a terminal every 0.2 s */
void tlm_train_progress_step(tlm_train_progress *p, const tlm_train_record *rec, int64_t steps,
                             const tlm_train_window *w, double eta_s, bool row);
void tlm_train_progress_checkpoint(tlm_train_progress *p, int64_t step, const char *dir);
void tlm_train_progress_clear(tlm_train_progress *p); /* erases the line shown on a terminal */

/* ---- a run's pieces (src/train/session.c) ------------------------------------------------------------
 * The data, the model, the training state and the gradient reducer of a run, set up in order and freed
 * together. Zero-initialize, then: _load, _create, and with several ranks _join. */
typedef struct {
    tlm_tokens train_data, val_data;
    bool have_val_data;              /* val_data was loaded (a run with validation) */
    tlm_config config;               /* the model's (_create) */
    tlm_model *model;
    tlm_train train;                 /* valid when have_train */
    bool have_train;
    tlm_ddp *ddp;                    /* several ranks (_join); NULL alone */
    tlm_file_identity train_id, val_id; /* the data files' (_load), recorded in the checkpoints */
    char data_change[512];           /* resuming with allow_data_change: how the data differ ("" the same) */
    const tlm_checkpoint *resumed;   /* not owned: the checkpoint _create restored from (NULL: fresh); _join
                                        places its moments */
} tlm_train_session;

/* Loads the token files of src (val NULL: none), every id below `vocab`, and their identities
 * (identity.h: the whole file up to 256 MiB, else 4 MiB sampled); a resumed run's (ck not NULL) must
 * hold as many tokens as the checkpoint's run trained on and be the files it recorded (size and
 * hash), unless src->allow_data_change (then s->data_change says how they differ). Errors: "training
 * data: ..." or "validation data: ..." (npy.h's: IO, FORMAT, INVALID_ARGUMENT, naming the file);
 * INVALID_ARGUMENT "<what> <path> holds N tokens, but the checkpoint <dir> was trained on M: not the
 * same data", "<what> <path> is not the file the checkpoint <dir> was trained on (<how>): give
 * --allow-data-change to switch data deliberately". */
tlm_status tlm_train_session_load(tlm_train_session *s, const tlm_train_sources *src, int vocab,
                                  const tlm_checkpoint *ck);

/* Creates the model on be (model.h, tlm_model_create with run), initialized from `seed` (model.h's
 * random init) or, resuming, restored with the training state from ck (tlm_checkpoint_restore); sets up
 * the training state (tlm_train_init) of `recipe` as rank `rank` of `world_size`. Errors: theirs. */
tlm_status tlm_train_session_create(tlm_train_session *s, tlm_backend *be, const tlm_config *model,
                                    const tlm_run_config *run, const tlm_train_config *recipe, uint64_t seed,
                                    int rank, int world_size, const tlm_checkpoint *ck);

/* Several ranks (a collective): checks that every rank runs the same model, recipe, precision and data
 * (tlm_comm_check_same: INVALID_ARGUMENT naming the ranks that differ), then creates the reducer of
 * `ddp` (tlm_ddp_create: rank 0's weights everywhere) and gives it to the training state; a resumed run's
 * moments then go where the reducer keeps them (tlm_checkpoint_restore_moments; every rank fails alike). */
tlm_status tlm_train_session_join(tlm_train_session *s, tlm_comm *comm, tlm_precision precision,
                                  const tlm_ddp_config *ddp);

/* Frees what was set up; the reducer only when free_ddp (after this rank's failure alone its collectives
 * may hang: the process ends without them). */
void tlm_train_session_free(tlm_train_session *s, bool free_ddp);

#ifdef __cplusplus
}
#endif
#endif
