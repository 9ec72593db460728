/* bench.c — runs one benchmark case: warm-up, then timed steps, each phase between two events on the
 * compute stream (CUDA events on CUDA, the host clock on the CPU); one synchronization per step. */
#include "tlm/bench.h"

#include <math.h>
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

tlm_status tlm_bench_run(tlm_backend *be, const tlm_bench_case *c, tlm_bench_result *r) {
    memset(r, 0, sizeof *r);
    r->params = tlm_config_num_params(&c->config);
    if (c->steps < 1 || c->warmup < 0 || c->batch_size < 1 || c->context_length < 1) {
        fail_case(r, tlm_fail(TLM_ERR_INVALID_ARGUMENT, "steps, batch size and context length must be >= 1"));
        return TLM_OK;
    }
    tlm_config cfg = c->config;
    if (cfg.context_length < c->context_length) cfg.context_length = c->context_length;
    const int B = c->batch_size, T = c->context_length;
    const size_t N = (size_t)B * T;

    /* a forward-only case keeps no gradient and no activation for a backward (model.h) */
    const tlm_run_config run = {.precision = c->precision, .attention = c->attention, .cuda_graphs = c->graphs,
                                .forward_only = c->pass == TLM_PASS_FORWARD, .recompute = c->recompute,
                                .optimizer_in_backward = c->optimizer_in_backward};
    r->attention = tlm_attention_resolve(be, &cfg, c->precision, c->attention);
    tlm_backend_release_cached(be); /* what earlier cases freed is not held by this one */
    tlm_mem_reset_peak(be);
    /* device memory in use that tlm's allocator does not hold (context, libraries, others) */
    const size_t outside = tlm_device_memory_used(be) ? tlm_device_memory_used(be) - tlm_mem_stats_now(be).current_total : 0;
    size_t device_max = 0;
    tlm_model *m = NULL;
    tlm_event *ev[4] = {NULL, NULL, NULL, NULL}; /* before forward, after forward, backward, optimizer */
    int32_t *tokens = malloc((N + 1) * sizeof(int32_t));
    double *ms = malloc(4 * (size_t)c->steps * sizeof(double));
    if (!tokens || !ms) {
        free(tokens);
        free(ms);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the benchmark batch");
    }
    /* one random sequence; targets are the inputs shifted by one */
    uint64_t rng = tlm_rng_stream(c->seed, 0xBA7C4);
    for (size_t i = 0; i <= N; i++) tokens[i] = (int32_t)tlm_rng_below(&rng, (uint64_t)cfg.vocab_size);

    tlm_status s = TLM_OK;
    for (int e = 0; e < 4 && s == TLM_OK; e++) s = tlm_event_create(be, &ev[e]);
    if (s == TLM_OK) s = tlm_model_create(&m, &cfg, &run, be);
    if (s == TLM_OK) s = tlm_model_init_random(m, c->seed);
    const tlm_adamw_config opt = tlm_adamw_defaults();
    double *fwd = ms, *bwd = ms + c->steps, *upd = ms + 2 * c->steps, *step = ms + 3 * c->steps;
    for (int i = 0; s == TLM_OK && i < c->warmup + c->steps; i++) {
        const int timed = i - c->warmup; /* < 0 during warm-up */
        float loss = 0;
        /* profilers leave the warm-up out by the step's scope (ops.h) */
        tlm_step_begin(be, timed < 0 ? i : timed, timed < 0);
        tlm_event_record(be, ev[0], NULL);
        s = tlm_model_forward(m, tokens, tokens + 1, B, T, &loss);
        tlm_event_record(be, ev[1], NULL);
        if (s == TLM_OK && c->pass >= TLM_PASS_FORWARD_BACKWARD) s = tlm_model_backward(m);
        tlm_event_record(be, ev[2], NULL);
        if (s == TLM_OK && c->pass == TLM_PASS_TRAIN) s = tlm_model_adamw_step(m, &opt);
        tlm_event_record(be, ev[3], NULL);
        tlm_step_end(be);
        tlm_synchronize(be);
        if (s == TLM_OK) {
            const size_t used = tlm_device_memory_used(be);
            if (used > device_max) device_max = used;
        }
        if (timed >= 0 && s == TLM_OK) {
            fwd[timed] = tlm_event_elapsed_ms(be, ev[0], ev[1]);
            bwd[timed] = tlm_event_elapsed_ms(be, ev[1], ev[2]);
            upd[timed] = tlm_event_elapsed_ms(be, ev[2], ev[3]);
            step[timed] = tlm_event_elapsed_ms(be, ev[0], ev[3]);
            if (timed == 0) r->loss_first = loss;
            r->loss_last = loss;
        }
    }
    if (s == TLM_OK) {
        r->forward = summarize(fwd, c->steps);
        if (c->pass >= TLM_PASS_FORWARD_BACKWARD) r->backward = summarize(bwd, c->steps);
        if (c->pass == TLM_PASS_TRAIN) r->optimizer = summarize(upd, c->steps);
        r->step = summarize(step, c->steps);
        r->tokens_per_s = (double)N / (r->step.mean_ms * 1e-3);
        const double flops = tlm_config_forward_flops(&cfg, B, T);
        const double gemm_ms = r->forward.mean_ms + r->backward.mean_ms;
        const double counted = c->pass >= TLM_PASS_FORWARD_BACKWARD ? 3 * flops : flops;
        r->tflops = counted / (gemm_ms * 1e-3) / 1e12;
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
    tlm_model_free(m);
    for (int e = 0; e < 4; e++) tlm_event_destroy(be, ev[e]);
    free(tokens);
    free(ms);
    return TLM_OK;
}
