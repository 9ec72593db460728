/* bench.c — runs one benchmark case: warm-up, then timed steps, each phase between two events on the
 * compute stream (CUDA events on CUDA, the host clock on the CPU); one synchronization per step. */
#include "tlm/bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tlm/model.h"
#include "tlm/rng.h"

const char *tlm_pass_name(tlm_pass p) {
    switch (p) {
    case TLM_PASS_FORWARD: return "forward";
    case TLM_PASS_FORWARD_BACKWARD: return "forward-backward";
    case TLM_PASS_TRAIN: return "train";
    }
    return "?";
}

static tlm_timing summarize(const double *ms, int n) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    double mean = sum / n;
    for (int i = 0; i < n; i++) sq += (ms[i] - mean) * (ms[i] - mean);
    return (tlm_timing){.mean_ms = mean, .std_ms = sqrt(sq / n)};
}

static void fail_case(tlm_bench_result *r, tlm_status s) {
    r->status = s;
    snprintf(r->error, sizeof r->error, "%s", tlm_last_error());
}

/* ---- data parallelism: the ranks agree, and their memory figures meet ------------------------------- */

enum { MEM_PEAK, MEM_RESERVED, MEM_AFTER_INIT, MEM_BEFORE_OPT, MEM_AFTER_OPT, MEM_TAGS, MEM_N = MEM_TAGS + TLM_MEM_NUM_TAGS };

/* the largest figure over the ranks (and the smallest peak) */
static tlm_status gather_memory(tlm_comm *c, tlm_bench_result *r) {
    uint64_t mine[MEM_N] = {r->peak_bytes, r->reserved_peak_bytes, r->mem_after_init_bytes, r->mem_before_opt_bytes,
                            r->mem_after_opt_bytes};
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) mine[MEM_TAGS + t] = r->peak_bytes_by_tag[t];
    uint64_t *all = malloc(sizeof mine * (size_t)c->world_size);
    if (!all) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const tlm_status s = tlm_comm_host_all_gather(c, mine, all, sizeof mine);
    r->peak_bytes_min = r->peak_bytes;
    for (int k = 0; s == TLM_OK && k < c->world_size; k++) {
        const uint64_t *v = all + (size_t)k * MEM_N;
        if (v[MEM_PEAK] < r->peak_bytes_min) r->peak_bytes_min = v[MEM_PEAK];
        for (int i = 0; i < MEM_N; i++) mine[i] = v[i] > mine[i] ? v[i] : mine[i];
    }
    free(all);
    r->peak_bytes = mine[MEM_PEAK];
    r->reserved_peak_bytes = mine[MEM_RESERVED];
    r->mem_after_init_bytes = mine[MEM_AFTER_INIT];
    r->mem_before_opt_bytes = mine[MEM_BEFORE_OPT];
    r->mem_after_opt_bytes = mine[MEM_AFTER_OPT];
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) r->peak_bytes_by_tag[t] = mine[MEM_TAGS + t];
    return s;
}

/* ---- the initial weights --------------------------------------------------------------------------------- */

struct tlm_bench_weights {
    tlm_config config; /* the model and seed the weights are of */
    uint64_t seed;
    size_t numel;      /* floats at host; 0: none kept yet */
    float *host;
};

tlm_bench_weights *tlm_bench_weights_new(void) { return calloc(1, sizeof(tlm_bench_weights)); }

void tlm_bench_weights_free(tlm_bench_weights *w) {
    if (w) free(w->host);
    free(w);
}

static bool same_config(const tlm_config *a, const tlm_config *b) {
    return a->vocab_size == b->vocab_size && a->context_length == b->context_length && a->d_model == b->d_model &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->d_ff == b->d_ff &&
           a->rope_theta == b->rope_theta && a->rmsnorm_eps == b->rmsnorm_eps;
}

/* The case's initial weights: none drawn by a rank other than 0 of a data-parallel case (the reducer
 * broadcasts rank 0's: ddp.h); else those kept in c->weights when they are of this model and seed; else
 * drawn (tlm_model_init_random), and kept there for the next case. */
static tlm_status initial_weights(tlm_model *m, const tlm_bench_case *c) {
    if (c->comm && c->comm->world_size > 1 && c->comm->rank > 0) return TLM_OK;
    tlm_bench_weights *w = c->weights;
    const size_t n = m->layout.flat_numel;
    if (w && w->numel == n && w->seed == c->seed && same_config(&w->config, &m->config)) {
        tlm_model_set_params(m, w->host);
        return TLM_OK;
    }
    TLM_TRY(tlm_model_init_random(m, c->seed));
    if (!w) return TLM_OK;
    free(w->host); /* the last model's go first: at most one model's copy is held */
    w->numel = 0;
    if (!(w->host = malloc(n * sizeof(float)))) return TLM_OK; /* out of host memory: this row draws, unkept */
    tlm_copy_to_host(m->backend, w->host, m->params, n * sizeof(float));
    w->config = m->config, w->seed = c->seed, w->numel = n;
    return TLM_OK;
}

int tlm_bench_fp32_twin(const tlm_bench_case *cases, int n, int i) {
    const tlm_bench_case *a = &cases[i];
    if (a->precision == TLM_PRECISION_FP32) return -1;
    for (int k = 0; k < n; k++) {
        const tlm_bench_case *b = &cases[k];
        if (b->precision == TLM_PRECISION_FP32 && strcmp(b->model_name, a->model_name) == 0 &&
            b->context_length == a->context_length && b->batch_size == a->batch_size && b->pass == a->pass &&
            b->warmup == a->warmup && b->recompute == a->recompute &&
            b->optimizer_in_backward == a->optimizer_in_backward && b->optimizer_overlap == a->optimizer_overlap &&
            b->grad_accum_steps == a->grad_accum_steps)
            return k;
    }
    return -1;
}

void tlm_bench_set_speedup(tlm_bench_result *r, const tlm_bench_result *fp32) {
    const double mine = r->forward.mean_ms + r->backward.mean_ms;
    if (!fp32 || r->status != TLM_OK || fp32->status != TLM_OK || mine <= 0) return;
    r->speedup_vs_fp32 = (fp32->forward.mean_ms + fp32->backward.mean_ms) / mine;
}

tlm_run_config tlm_bench_run_config(const tlm_bench_case *c) {
    return (tlm_run_config){.precision = c->precision, .attention = c->attention, .cuda_graphs = c->graphs,
                            .forward_only = c->pass == TLM_PASS_FORWARD, .recompute = c->recompute,
                            .optimizer_in_backward = c->optimizer_in_backward,
                            .optimizer_overlap = c->optimizer_overlap,
                            .grad_accum_steps = c->pass == TLM_PASS_TRAIN && c->grad_accum_steps > 1 ? c->grad_accum_steps : 1};
}

int tlm_bench_max_context(tlm_backend *be, const tlm_bench_case *c, size_t limit_bytes) {
    tlm_config cfg = c->config;
    const tlm_run_config run = tlm_bench_run_config(c);
    const int ranks = c->comm ? c->comm->world_size : 1;
    const int rows = c->batch_size / ranks > 0 ? c->batch_size / ranks : 1;
    int lo = 0, hi = 1 << 20;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        cfg.context_length = mid;
        tlm_memory_estimate e;
        if (tlm_model_memory_estimate(be, &cfg, &run, rows, mid, &e) == TLM_OK &&
            tlm_ddp_memory_estimate(&cfg, &run, &c->ddp, ranks, &e) == TLM_OK && e.total <= limit_bytes)
            lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* One step's passes: N micro-batches (the case's grad_accum_steps; 1 without), micro-batch k on the rows at
 * tokens + k * B*T, each a forward and (pass >= forward-backward) a backward, then the reduction and the update.
 * ev[0..2N+1]: before the first forward, after each forward and each backward, after the update; *loss the mean of
 * the micro-batches' losses. */
static tlm_status step_passes(tlm_backend *be, const tlm_bench_case *c, tlm_model *m, tlm_ddp *d, const int32_t *tokens,
                              int B, int T, tlm_event **ev, tlm_bench_result *r, float *loss) {
    const int accum = tlm_model_grad_accum_steps(m);
    const size_t N = (size_t)B * T;
    const tlm_adamw_config opt = tlm_adamw_defaults();
    tlm_status s = TLM_OK;
    double sum = 0;
    tlm_event_record(be, ev[0], NULL);
    for (int k = 0; k < accum && s == TLM_OK; k++) {
        float l = 0;
        s = tlm_model_set_micro_batch(m, k);
        if (s == TLM_OK) s = tlm_model_forward(m, tokens + k * N, tokens + k * N + 1, B, T, &l);
        tlm_event_record(be, ev[1 + 2 * k], NULL);
        if (s == TLM_OK && c->pass >= TLM_PASS_FORWARD_BACKWARD) s = tlm_model_backward(m);
        tlm_event_record(be, ev[2 + 2 * k], NULL);
        sum += l;
    }
    *loss = (float)(sum / accum);
    if (s == TLM_OK && d && c->pass >= TLM_PASS_FORWARD_BACKWARD) s = tlm_ddp_sync_grads(d);
    if (d) r->mem_before_opt_bytes = tlm_mem_stats_now(be).current_total;
    if (s == TLM_OK && c->pass == TLM_PASS_TRAIN) s = d ? tlm_ddp_adamw_step(d, &opt) : tlm_model_adamw_step(m, &opt);
    if (d) r->mem_after_opt_bytes = tlm_mem_stats_now(be).current_total;
    tlm_event_record(be, ev[2 * accum + 1], NULL);
    return s;
}

/* the phases' times of the step step_passes timed (ms): forward and backward summed over the micro-batches */
static void step_times(tlm_backend *be, tlm_event **ev, int accum, double *fwd, double *bwd, double *upd,
                       double *step) {
    *fwd = *bwd = 0;
    for (int k = 0; k < accum; k++) {
        *fwd += tlm_event_elapsed_ms(be, ev[2 * k], ev[1 + 2 * k]);
        *bwd += tlm_event_elapsed_ms(be, ev[1 + 2 * k], ev[2 + 2 * k]);
    }
    *upd = tlm_event_elapsed_ms(be, ev[2 * accum], ev[2 * accum + 1]);
    *step = tlm_event_elapsed_ms(be, ev[0], ev[2 * accum + 1]);
}

tlm_status tlm_bench_run(tlm_backend *be, const tlm_bench_case *c, tlm_bench_result *r) {
    memset(r, 0, sizeof *r);
    r->max_context = c->max_context_bytes ? tlm_bench_max_context(be, c, c->max_context_bytes) : -1;
    r->params = tlm_config_num_params(&c->config);
    if (c->steps < 1 || c->warmup < 0 || c->batch_size < 1 || c->context_length < 1) {
        fail_case(r, tlm_fail(TLM_ERR_INVALID_ARGUMENT, "steps, batch size and context length must be >= 1"));
        return TLM_OK;
    }
    tlm_config cfg = c->config;
    if (cfg.context_length < c->context_length) cfg.context_length = c->context_length;
    tlm_comm *comm = c->comm;
    r->world_size = comm ? comm->world_size : 1;
    if (c->batch_size % r->world_size != 0) {
        fail_case(r, tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the global batch of %d rows does not divide over %d ranks",
                              c->batch_size, r->world_size));
        return TLM_OK;
    }
    const int B = c->batch_size / r->world_size, T = c->context_length; /* this rank's rows */
    const tlm_run_config run = tlm_bench_run_config(c);
    const int accum = run.grad_accum_steps; /* micro-batches per step, each of B x T */
    const size_t N = (size_t)B * T * accum;
    r->attention = tlm_attention_resolve(be, &cfg, c->precision, c->attention);
    /* no buffer of an earlier case is live in this one (a bf16 case's scratch arena, a split buffer), and
     * what earlier cases freed is not held by it: the case's peak is its own, whatever ran before */
    tlm_backend_release_workspaces(be);
    tlm_backend_release_cached(be);
    tlm_mem_reset_peak(be);
    /* device memory in use that tlm's allocator does not hold (context, libraries, others) */
    const size_t outside = tlm_device_memory_used(be) ? tlm_device_memory_used(be) - tlm_mem_stats_now(be).current_total : 0;
    size_t device_max = 0;
    tlm_model *m = NULL;
    const int nev = 2 * accum + 2; /* step_passes' events */
    tlm_event **ev = calloc((size_t)nev, sizeof *ev);
    int32_t *tokens = malloc((N + 1) * sizeof(int32_t));
    double *ms = malloc(4 * (size_t)c->steps * sizeof(double));
    if (!tokens || !ms || !ev) {
        free(tokens);
        free(ms);
        free(ev);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the benchmark batch");
    }
    /* one random sequence of the global batch (this rank's stretch of it); targets are the inputs shifted by
     * one */
    uint64_t rng = tlm_rng_stream(c->seed, 0xBA7C4);
    const size_t skip = (size_t)(comm ? comm->rank : 0) * N;
    for (size_t i = 0; i < skip; i++) tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);
    for (size_t i = 0; i <= N; i++) tokens[i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);

    tlm_status s = TLM_OK;
    tlm_ddp *d = NULL;
    double *comm_ms = comm ? calloc((size_t)c->steps, sizeof(double)) : NULL;
    if (comm && !comm_ms) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int e = 0; e < nev && s == TLM_OK; e++) s = tlm_event_create(be, &ev[e]);
    if (s == TLM_OK) s = tlm_model_create(&m, &cfg, &run, be);
    if (s == TLM_OK) s = initial_weights(m, c);
    if (comm && (s = tlm_ddp_agree(comm, s)) == TLM_OK) s = tlm_ddp_create(&d, m, comm, &c->ddp); /* symmetric errors */
    r->mem_after_init_bytes = tlm_mem_stats_now(be).current_total;
    const tlm_bench_hooks *hooks = c->hooks;
    if (s == TLM_OK && hooks && hooks->before_steps) s = hooks->before_steps(hooks->user, m);
    double *fwd = ms, *bwd = ms + c->steps, *upd = ms + 2 * c->steps, *step = ms + 3 * c->steps;
    for (int i = 0; s == TLM_OK && i < c->warmup + c->steps; i++) {
        const int timed = i - c->warmup; /* < 0 during warm-up */
        float loss = 0;
        /* profilers leave the warm-up out by the step's scope (ops.h) */
        tlm_step_begin(be, timed < 0 ? i : timed, timed < 0);
        s = step_passes(be, c, m, d, tokens, B, T, ev, r, &loss);
        tlm_step_end(be);
        tlm_synchronize(be);
        if (comm) s = tlm_ddp_agree(comm, s); /* a failure of every rank (out of memory) is the row's */
        if (s == TLM_OK) {
            const size_t used = tlm_device_memory_used(be);
            if (used > device_max) device_max = used;
        }
        if (timed >= 0 && s == TLM_OK) {
            step_times(be, ev, accum, &fwd[timed], &bwd[timed], &upd[timed], &step[timed]);
            if (d) { /* the communication the step waited for, out of the phases it happened in */
                tlm_ddp_timing t;
                tlm_ddp_last_timing(d, &t);
                bwd[timed] -= t.in_backward_ms;
                upd[timed] -= t.after_backward_ms + t.params_ms;
                comm_ms[timed] = t.exposed_ms;
            }
            if (timed == 0) r->loss_first = loss;
            r->loss_last = loss;
        }
    }
    if (m && hooks && hooks->after_steps) {
        const tlm_status after = hooks->after_steps(hooks->user, m, s);
        if (s == TLM_OK) s = after;
    }
    if (s == TLM_OK) {
        r->forward = summarize(fwd, c->steps);
        if (c->pass >= TLM_PASS_FORWARD_BACKWARD) r->backward = summarize(bwd, c->steps);
        if (c->pass == TLM_PASS_TRAIN) r->optimizer = summarize(upd, c->steps);
        r->step = summarize(step, c->steps);
        r->tokens_per_s = (double)N * r->world_size / (r->step.mean_ms * 1e-3);
        if (d) {
            r->comm = summarize(comm_ms, c->steps);
            r->comm_share = r->comm.mean_ms / r->step.mean_ms;
        }
        const double flops = tlm_config_forward_flops(&cfg, B, T) * accum; /* every micro-batch's */
        const double gemm_ms = r->forward.mean_ms + r->backward.mean_ms;
        const double counted = c->pass >= TLM_PASS_FORWARD_BACKWARD ? 3 * flops : flops;
        r->tflops = counted / (gemm_ms * 1e-3) / 1e12;
        const double peak = tlm_backend_peak_tflops(be, c->precision);
        r->mfu = peak > 0 ? counted / (r->step.mean_ms * 1e-3) / (peak * 1e12) : 0;
    } else {
        fail_case(r, s);
    }
    if (m) {
        r->loss_scale = c->precision == TLM_PRECISION_FP16 ? m->scaler.scale : 1.0f;
        r->skipped_steps = m->scaler.skipped_steps;
    }
    const tlm_mem_stats mem = tlm_mem_stats_now(be);
    r->peak_bytes = mem.peak_total;
    r->device_peak_bytes = device_max > outside ? device_max - outside : 0;
    memcpy(r->peak_bytes_by_tag, mem.peak, sizeof r->peak_bytes_by_tag);
    r->reserved_peak_bytes = mem.peak_footprint;
    tlm_ddp_free(d);
    tlm_model_free(m);
    tlm_backend_release_workspaces(be); /* the next case, or the caller, starts with none of this one's */
    for (int e = 0; e < nev; e++)
        if (ev[e]) tlm_event_destroy(be, ev[e]);
    free(ev);
    free(tokens);
    free(ms);
    free(comm_ms);
    return comm ? gather_memory(comm, r) : TLM_OK;
}
