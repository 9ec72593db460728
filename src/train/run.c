/* run.c — a training run (train.h, tlm_train_run): the steps to the budget with the cadence of
 * validation, checkpoints and log rows; the windowed timing, tokens/s, MFU and ETA; the stop agreed
 * over the ranks; and the run's log (its description, its rows, its summary) through the report writer. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tlm/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the log ------------------------------------------------------------------------------------------------- */

static const tlm_column log_columns[] = {
    {"step", TLM_FIELD_INT, "step", "", 7, 0, 0, TLM_COL_KEY},
    {"tokens", TLM_FIELD_INT, "tokens", "", 11, 0, 0, 0},
    {"loss", TLM_FIELD_NUM, "loss", "", 8, 4, 0, 0},
    {"val_loss", TLM_FIELD_NUM, "val loss", "", 8, 4, 0, 0},
    {"lr", TLM_FIELD_NUM, "lr", "", 9, 2, 0, TLM_COL_SCI},
    {"grad_norm", TLM_FIELD_NUM, "grad norm", "", 9, 3, 0, 0},
    {"clipped", TLM_FIELD_BOOL, "clip", "", 4, 0, 0, 0},
    {"loss_scale", TLM_FIELD_NUM, "scale", "", 8, 0, 0, 0},
    {"skipped", TLM_FIELD_BOOL, "skip", "", 4, 0, 0, 0},
    TLM_COL_MS("step_ms", "step", 9, 2),
    TLM_COL_MS("comm_ms", "comm", 8, 2),
    {"comm_share", TLM_FIELD_NUM, "comm", "%", 5, 1, 100, 0},
    {"tokens_per_s", TLM_FIELD_NUM, "tokens/s", "", 10, 0, 0, 0},
    {"mfu", TLM_FIELD_NUM, "MFU", "%", 6, 1, 100, 0},
    {"elapsed_s", TLM_FIELD_NUM, "elapsed", "s", 8, 1, 0, 0},
};

/* one row of the log; w NULL: a row replayed from a checkpoint (no timing) */
static void log_row(tlm_report *rep, const tlm_train_record *e, const tlm_train_window *w, bool fp16, bool norm) {
    tlm_report_row_begin(rep);
    tlm_report_int(rep, "step", e->step);
    tlm_report_int(rep, "tokens", e->tokens);
    tlm_report_num(rep, "loss", e->loss);
    if (!isnan(e->val_loss)) tlm_report_num(rep, "val_loss", e->val_loss);
    tlm_report_num(rep, "lr", e->lr);
    if (norm) { /* measured only with clipping */
        tlm_report_num(rep, "grad_norm", e->grad_norm);
        tlm_report_bool(rep, "clipped", e->clipped);
    }
    if (fp16) {
        tlm_report_num(rep, "loss_scale", e->loss_scale);
        tlm_report_bool(rep, "skipped", e->skipped);
    }
    if (w && !isnan(w->step_ms)) {
        tlm_report_num(rep, "step_ms", w->step_ms);
        tlm_report_num(rep, "tokens_per_s", w->tokens_per_s);
        if (!isnan(w->mfu)) tlm_report_num(rep, "mfu", w->mfu);
        if (!isnan(w->comm_ms)) {
            tlm_report_num(rep, "comm_ms", w->comm_ms);
            tlm_report_num(rep, "comm_share", w->comm_ms / w->step_ms);
        }
        tlm_report_num(rep, "elapsed_s", w->elapsed_s);
    }
    tlm_report_row_end(rep);
}

/* a row every log_every steps, at each evaluation and at the last step */
static bool row_due(const tlm_train_record *e, int64_t log_every, int64_t last) {
    return e->step % log_every == 0 || !isnan(e->val_loss) || e->step == last;
}

/* the model, the ranks and the recipe */
static void describe_run(const tlm_train_run_config *c, const tlm_train *t) {
    tlm_report *rep = c->report;
    const tlm_train_config *r = &t->config;
    tlm_report_meta_str(rep, "model", c->model_name);
    tlm_report_meta_int(rep, "params", tlm_config_num_params(c->model));
    tlm_report_meta_int(rep, "vocab_size", c->model->vocab_size);
    tlm_report_meta_int(rep, "d_model", c->model->d_model);
    tlm_report_meta_int(rep, "num_layers", c->model->num_layers);
    tlm_report_meta_int(rep, "batch_size", (int64_t)r->batch_size * t->world_size);
    if (r->grad_accum_steps > 1) { /* nanoGPT's convention: batch_size is the micro-batch */
        tlm_report_meta_int(rep, "grad_accum_steps", r->grad_accum_steps);
        tlm_report_meta_int(rep, "tokens_per_step",
                            (int64_t)r->grad_accum_steps * r->batch_size * t->world_size * r->context_length);
    }
    if (c->comm) {
        char hosts[512];
        tlm_comm_describe_hosts(hosts, sizeof hosts);
        tlm_report_meta_int(rep, "ranks", t->world_size);
        tlm_report_meta_str(rep, "ranks_where", hosts);
        tlm_report_meta_int(rep, "batch_size_per_rank", r->batch_size);
        tlm_report_meta_str(rep, "ddp", tlm_ddp_mode_name(c->ddp->mode));
        if (c->ddp->mode == TLM_DDP_BUCKETED) tlm_report_meta_num(rep, "bucket_mb", c->ddp->bucket_mb);
        tlm_report_meta_str(rep, "grad_reduce_dtype", c->ddp->reduce_dtype == TLM_DTYPE_BF16 ? "bf16" : "fp32");
        tlm_report_meta_int(rep, "zero", c->ddp->zero);
    }
    tlm_report_meta_int(rep, "context_length", r->context_length);
    tlm_report_meta_int(rep, "steps", r->steps);
    tlm_report_meta_str(rep, "precision", tlm_precision_name(c->precision));
    tlm_report_meta_str(rep, "attention", tlm_attention_name(c->attention));
    tlm_report_meta_bool(rep, "cuda_graphs", c->cuda_graphs);
    const struct {
        const char *key;
        double value; /* the header prints a whole number as one (%.10g), as tlm_report_meta_int does */
    } recipe[] = {{"lr_max", r->lr_max},
                  {"lr_min", r->lr_min},
                  {"warmup_iters", r->warmup_iters},
                  {"cosine_cycle_iters", r->cosine_cycle_iters},
                  {"max_grad_norm", r->max_grad_norm},
                  {"weight_decay", r->adamw.weight_decay}};
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++)
        tlm_report_meta_num(rep, recipe[i].key, recipe[i].value);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    tlm_report_meta_str(rep, "seed", seed);
}

void tlm_train_log_begin(const tlm_train_run_config *c, const tlm_train *t) {
    tlm_report *rep = c->report;
    const tlm_train_config *r = &t->config;
    const bool fp16 = c->precision == TLM_PRECISION_FP16, norm = r->max_grad_norm > 0;
    describe_run(c, t);
    tlm_report_meta_str(rep, "train_data", c->sources.train_data_path);
    tlm_report_meta_int(rep, "train_tokens", t->train_data->n);
    if (t->val_data) {
        tlm_report_meta_str(rep, "val_data", c->sources.val_data_path);
        tlm_report_meta_int(rep, "val_tokens", t->val_data->n);
        tlm_report_meta_int(rep, "eval_batches", r->eval_batches);
    }
    if (c->resumed_from) tlm_report_meta_str(rep, "resumed_from", c->resumed_from);
    if (c->resumed_from && t->data_change) /* --allow-data-change let other data through */
        tlm_report_meta_str(rep, "data_changed", t->data_change);
    if (c->peak_tflops > 0) tlm_report_meta_num(rep, "peak_tflops", c->peak_tflops);
    tlm_report_meta_str(rep, "notes",
                        "loss: the step's mean training loss before its update; val_loss: mean over the fixed "
                        "validation batches after the step; grad_norm: global L2 norm before clipping; step_ms, "
                        "tokens_per_s, mfu: wall clock of the steps since the last row, logging included (evaluation "
                        "and checkpoints not counted); mfu = 3 x forward matmul FLOPs per step (tlm bench's count) "
                        "/ time / peak; with grad_accum_steps a step is that many micro-batches of batch_size rows "
                        "and one update (its loss their mean, its tokens every micro-batch's); "
                        "rows before resumed_from are the checkpoint's log (no timing); with several ranks: loss and "
                        "tokens over every rank, MFU per GPU, comm_ms the communication a step waited for (ddp.h) and "
                        "comm_share its part of the step");
    tlm_report_table(rep, "log", log_columns, (int)(sizeof log_columns / sizeof log_columns[0]));
    tlm_report_show(rep, "loss_scale", fp16);
    tlm_report_show(rep, "skipped", fp16);
    tlm_report_show(rep, "mfu", c->peak_tflops > 0);
    tlm_report_show(rep, "grad_norm", norm);
    tlm_report_show(rep, "clipped", norm);
    tlm_report_show(rep, "comm_ms", c->comm != NULL);
    tlm_report_show(rep, "comm_share", c->comm != NULL);
    for (int64_t i = 0; i < t->log_len; i++) /* a resumed run's log starts with the checkpoint's */
        if (row_due(&t->log[i], c->log_every, r->steps)) log_row(rep, &t->log[i], NULL, fp16, norm);
}

/* ---- several ranks ---------------------------------------------------------------------------------------- */

/* *flag = whether it is set on any rank */
static tlm_status any_rank(tlm_comm *comm, bool *flag) {
    int mine = *flag, *all = malloc(sizeof(int) * (size_t)comm->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_status s = tlm_comm_host_all_gather(comm, &mine, all, sizeof mine);
    for (int r = 0; s == TLM_OK && r < comm->world_size; r++) *flag |= all[r] != 0;
    free(all);
    return s;
}

/* "r0 1.234 GiB, r1 1.234 GiB": every rank's tracked peak */
static tlm_status peaks_per_rank(tlm_comm *comm, tlm_backend *be, char *buf, size_t n) {
    uint64_t mine = tlm_mem_stats_now(be).peak_total, *all = malloc(sizeof(uint64_t) * (size_t)comm->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_status s = tlm_comm_host_all_gather(comm, &mine, all, sizeof mine);
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; s == TLM_OK && r < comm->world_size && used < n; r++)
        used += (size_t)snprintf(buf + used, n - used, "%sr%d %.3f GiB", r ? ", " : "", r,
                                 (double)all[r] / 1073741824.0);
    free(all);
    return s;
}

/* ---- stop on a signal ------------------------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
    stop_signal = sig;
    signal(sig, SIG_DFL); /* a second one ends the process */
}

/* ---- the loop --------------------------------------------------------------------------------------------------- */

/* the clock of a run: the steps' time, the window since the last row, the steady mean's */
typedef struct {
    double t0, tick;          /* the run's start; the end of the last step (or of what followed it) */
    double window_s, window_comm;
    int64_t window_steps;
    double last_step_s;       /* the last step's time */
    double eval_s;            /* the last evaluation's time; 0 before the first */
    double step_flops;        /* 3 x forward matmul FLOPs of a rank's step */
    double tokens_per_step;   /* every rank's */
} run_clock;

/* One step and the stop agreement: *stopping when a stop reached any rank. */
static tlm_status take_step(tlm_train *t, const tlm_train_run_config *c, run_clock *k, tlm_train_record *e,
                            bool *stopping) {
    tlm_status s = tlm_train_step(t, e);
    if (s == TLM_OK && t->ddp) {
        tlm_ddp_timing ct;
        s = tlm_ddp_last_timing(t->ddp, &ct);
        k->window_comm += ct.exposed_ms;
    }
    *stopping = stop_signal != 0;
    if (s == TLM_OK && c->comm) s = any_rank(c->comm, stopping);
    return s;
}

/* The step's time (since the last tick) into the totals and the window, and the window's figures. */
static tlm_train_window clock_step(const tlm_train *t, const tlm_train_run_config *c, run_clock *k,
                                   tlm_train_run_result *res) {
    const double now = now_s(), dt = now - k->tick;
    k->tick = now;
    k->last_step_s = dt;
    res->train_s += dt;
    k->window_s += dt;
    k->window_steps++;
    if (t->step - res->first_step > res->skip_steps) {
        res->steady_s += dt;
        res->steady_steps++;
    }
    tlm_train_window w = {.step_ms = 1e3 * k->window_s / (double)k->window_steps, .elapsed_s = now_s() - k->t0};
    w.tokens_per_s = k->tokens_per_step * (double)k->window_steps / k->window_s;
    w.comm_ms = t->ddp ? k->window_comm / (double)k->window_steps : NAN;
    w.mfu = c->peak_tflops > 0 ? k->step_flops * (double)k->window_steps / k->window_s / (c->peak_tflops * 1e12) : NAN;
    return w;
}

/* rank 0 writes the checkpoint (under ZeRO-1 the others first give it their moments); the others wait for it in
 * the next step's first collective */
static tlm_status save_checkpoint(tlm_train *t, const tlm_train_run_config *c, run_clock *k,
                                  tlm_train_run_result *res) {
    free(res->checkpoint);
    res->checkpoint = NULL;
    tlm_train_sources src = c->sources;
    src.save_every = c->save_every; /* recorded: a resumed run keeps the cadence */
    TLM_TRY(tlm_checkpoint_save(t, &src, c->checkpoint_dir, c->keep_checkpoints, &res->checkpoint));
    if (c->progress) tlm_train_progress_checkpoint(c->progress, t->step, res->checkpoint);
    k->tick = now_s();
    return TLM_OK;
}

/* After a step: the evaluation and the checkpoint due, the progress and the log row. */
static tlm_status after_step(tlm_train *t, const tlm_train_run_config *c, run_clock *k, tlm_train_record *e,
                             bool stopping, tlm_train_run_result *res) {
    const tlm_train_config *r = &t->config;
    const bool eval = tlm_train_eval_due(t);
    const bool save = c->checkpoint_dir &&
                      ((c->save_every && t->step % c->save_every == 0) || t->step == r->steps || stopping);
    if (eval || save) tlm_synchronize(c->backend); /* the step's device work ends here */
    const tlm_train_window w = clock_step(t, c, k, res);
    if (eval) {
        TLM_TRY(tlm_train_eval(t, &e->val_loss));
        k->eval_s = now_s() - k->tick;
        k->tick = now_s();
    }
    /* a step's time: the steady steps' mean once the first (slow: plans, caches) are past, else the last's */
    const double step_s = res->steady_steps > 0 ? res->steady_s / (double)res->steady_steps : k->last_step_s;
    const double eta = tlm_train_eta(t, step_s, k->eval_s);
    const bool row = row_due(e, c->log_every, r->steps) || stopping;
    if (c->progress) tlm_train_progress_step(c->progress, e, r->steps, &w, eta, row);
    if (row) {
        log_row(c->report, e, &w, c->precision == TLM_PRECISION_FP16, r->max_grad_norm > 0);
        k->window_s = 0;
        k->window_steps = 0;
        k->window_comm = 0;
    }
    if (save && (t->rank == 0 || tlm_ddp_shards_optimizer(t->ddp))) /* ZeRO-1: every rank gives its shard */
        return save_checkpoint(t, c, k, res);
    return TLM_OK;
}

double tlm_train_eta(const tlm_train *t, double step_s, double eval_s) {
    const int64_t steps = t->config.steps, step = t->step, every = t->config.eval_every;
    if (step >= steps) return 0;
    int64_t evals = 0;
    if (t->val_data) {
        evals = every > 0 ? steps / every - step / every : 0;
        if (every <= 0 || steps % every != 0) evals++; /* the last step's */
    }
    return step_s * (double)(steps - step) + eval_s * (double)evals;
}

static tlm_status run_steps(tlm_train *t, const tlm_train_run_config *c, tlm_train_run_result *res) {
    const tlm_train_config *r = &t->config;
    const double accum = r->grad_accum_steps; /* micro-batches per step */
    run_clock k = {.step_flops = 3.0 * accum * tlm_config_forward_flops(c->model, r->batch_size, r->context_length),
                   .tokens_per_step = accum * r->batch_size * t->world_size * r->context_length};
    k.t0 = now_s();
    /* a step's time runs from the end of the last one's (its logging included) to the end of its own; the
     * evaluations and checkpoints between are left out */
    k.tick = now_s();
    tlm_train_record e = {0};
    tlm_status s = TLM_OK;
    bool stopping = false; /* a stop reached a rank: every rank stops after the same step */
    while (t->step < r->steps && !stopping) {
        s = take_step(t, c, &k, &e, &stopping);
        if (s == TLM_OK) s = after_step(t, c, &k, &e, stopping, res);
        if (s != TLM_OK) {
            res->together = !c->comm; /* this rank's failure may be its own: it leaves, the others are told */
            break;
        }
    }
    res->stopped = stopping;
    return s;
}

tlm_status tlm_train_run(tlm_train *t, const tlm_train_run_config *c, tlm_train_run_result *res) {
    memset(res, 0, sizeof *res);
    res->together = true;
    res->first_step = t->step;
    res->skip_steps = t->config.steps - t->step > 10 ? 5 : 0; /* warm-up steps left out of the run's mean */
    struct sigaction sa = {.sa_handler = on_stop}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    if (c->stop_on_signals) {
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
    }
    const tlm_status s = res->status = run_steps(t, c, res);
    if (c->progress) tlm_train_progress_clear(c->progress);
    if (c->stop_on_signals) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    if (res->stopped) {
        res->stop_signal = stop_signal ? (int)stop_signal : SIGTERM;
        snprintf(res->stop_note, sizeof res->stop_note, "stopped by signal %d after step %lld of %lld",
                 res->stop_signal, (long long)t->step, (long long)t->config.steps);
    }
    if (s != TLM_OK) { /* the log is committed even after a failure (what ran is worth keeping) */
        tlm_report_row_begin(c->report);
        tlm_report_int(c->report, "step", t->step + 1);
        tlm_report_status(c->report, "failed", tlm_last_error());
        tlm_report_row_end(c->report);
    }
    return s;
}

/* ---- the summary ------------------------------------------------------------------------------------------- */

void tlm_train_log_summary(const tlm_train_run_config *c, const tlm_train *t, const tlm_train_run_result *res) {
    tlm_report *rep = c->report;
    const tlm_train_config *r = &t->config;
    const int64_t ran = t->step - res->first_step;
    tlm_report_summary_int(rep, "steps_run", ran);
    tlm_report_summary_int(rep, "last_step", t->step);
    char line[1024];
    if (ran > 0) {
        const double mean = res->steady_steps ? res->steady_s / (double)res->steady_steps : res->train_s / (double)ran;
        snprintf(line, sizeof line, "%.4f", 1e3 * mean);
        tlm_report_summary_str(rep, "step_ms_mean", line);
        const double accum = r->grad_accum_steps; /* micro-batches per step */
        snprintf(line, sizeof line, "%.1f", accum * r->batch_size * t->world_size * r->context_length / mean);
        tlm_report_summary_str(rep, "tokens_per_s", line);
        if (c->peak_tflops > 0) {
            const double step_flops = 3.0 * accum * tlm_config_forward_flops(c->model, r->batch_size, r->context_length);
            snprintf(line, sizeof line, "%.4f", step_flops / mean / (c->peak_tflops * 1e12));
            tlm_report_summary_str(rep, "mfu", line);
        }
        snprintf(line, sizeof line, "%s after the first %lld steps of this run (warm-up), evaluation and checkpoints "
                                    "not counted", res->steady_steps ? "mean over the steps" : "mean over every step",
                 (long long)(res->steady_steps ? res->skip_steps : 0));
        tlm_report_summary_str(rep, "step_ms_note", line);
        snprintf(line, sizeof line, "%.7g", (double)t->log[t->log_len - 1].loss);
        tlm_report_summary_str(rep, "final_loss", line);
        for (int64_t i = t->log_len; i-- > 0;)
            if (!isnan(t->log[i].val_loss)) {
                snprintf(line, sizeof line, "%.7g (step %lld)", t->log[i].val_loss, (long long)t->log[i].step);
                tlm_report_summary_str(rep, "final_val_loss", line);
                break;
            }
    }
    if (res->checkpoint) tlm_report_summary_str(rep, "checkpoint", res->checkpoint);
    if (c->comm && res->status == TLM_OK && peaks_per_rank(c->comm, c->backend, line, sizeof line) == TLM_OK)
        tlm_report_summary_str(rep, "peak_bytes_per_rank", line); /* every rank's peak, gathered */
    if (res->stopped && res->status == TLM_OK && t->rank == 0) tlm_report_summary_str(rep, "stopped", res->stop_note);
}

void tlm_train_run_result_free(tlm_train_run_result *res) {
    free(res->checkpoint);
    res->checkpoint = NULL;
}
