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
 * (batch_size x context_length x world_size per step); learning rates are per step. */
#ifndef TLM_TRAIN_H
#define TLM_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/ddp.h"
#include "tlm/model.h"
#include "tlm/npy.h"
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
    int batch_size;             /* B: rows per rank per step */
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
} tlm_train_sources;

/* Writes the checkpoint of t's state after step t->step into ROOT `root` (created if missing, its
 * parent must exist), then keeps only the newest `keep` step directories (0: all). *written (may be
 * NULL) receives the step directory's path (malloc'ed, the caller frees). Errors: IO (naming the path
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
    int64_t train_data_tokens, val_data_tokens;
    int64_t step, tokens;
    int adamw_t;                /* AdamW's step count (below `step` after fp16 skips) */
    tlm_loss_scaler scaler;
    tlm_train_record *log;      /* (log_len) */
    int64_t log_len;
    tlm_safetensors weights;    /* the weights file, read whole (for tlm_checkpoint_restore) */
} tlm_checkpoint;

/* Reads the checkpoint at `path`: a ROOT (its `latest` names the step directory) or a step directory.
 * Errors: IO (missing files), FORMAT (a file that is not what it should be: named, with the field or
 * tensor), each message naming the checkpoint's path. */
tlm_status tlm_checkpoint_open(const char *path, tlm_checkpoint *ck);
void tlm_checkpoint_close(tlm_checkpoint *ck);

/* Restores t (set up by tlm_train_init for a model created with ck->model and ck->precision) to the
 * checkpoint: the weights, AdamW's moments and t, the loss scaler, the step, the tokens and the log.
 * Everything is checked (every moment present, float32, the parameter's shape, finite) before
 * anything changes. Errors: INVALID_ARGUMENT / FORMAT naming the file and tensor, OUT_OF_MEMORY. */
tlm_status tlm_checkpoint_restore(tlm_train *t, const tlm_checkpoint *ck);

#ifdef __cplusplus
}
#endif
#endif
