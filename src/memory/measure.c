/* measure.c — `tlm memory`'s measurement of one case (memory_timeline.h): the benchmark's step
 * (tlm_bench_run) with the memory timeline recording through the case's hooks, then the peaks, the
 * largest allocations and the case's files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/bench.h"
#include "tlm/memory_timeline.h"

/* the hooks' state: the timeline, started once the model holds its weights */
typedef struct {
    tlm_backend *be;
    tlm_mem_timeline *t;
} recording;

static tlm_status start_recording(void *user, tlm_model *m) {
    recording *rec = user;
    return tlm_mem_timeline_start(&rec->t, rec->be);
}

static tlm_status stop_recording(void *user, tlm_model *m, tlm_status steps) {
    recording *rec = user;
    return rec->t ? tlm_mem_timeline_stop(rec->t) : TLM_OK;
}

static void fail(tlm_mem_measurement *r, tlm_status s, const char *error) {
    r->status = s;
    snprintf(r->error, sizeof r->error, "%s", error);
}

/* the `top` largest allocations of the measured step, with their lifetimes */
static tlm_status largest(const tlm_mem_timeline *t, int top, tlm_mem_measurement *r) {
    int idx[TLM_MEM_MAX_TOP];
    if (top <= 0) return TLM_OK;
    TLM_TRY(tlm_mem_timeline_largest(t, 0, top > TLM_MEM_MAX_TOP ? TLM_MEM_MAX_TOP : top, idx, &r->n_top));
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t);
    for (int k = 0; k < r->n_top; k++) {
        const tlm_mem_allocation *a = &al[idx[k]];
        tlm_mem_top *e = &r->top[k];
        snprintf(e->name, sizeof e->name, "%s", a->name);
        e->bytes = a->bytes;
        e->category = a->category;
        e->why = tlm_mem_allocation_why(a);
        if (a->before) snprintf(e->from, sizeof e->from, "before the warm-up");
        else tlm_mem_timeline_op_label(t, a->alloc_op, e->from, sizeof e->from);
        if (a->free_op == UINT64_MAX) snprintf(e->to, sizeof e->to, "still alive");
        else tlm_mem_timeline_op_label(t, a->free_op ? a->free_op - 1 : 0, e->to, sizeof e->to);
    }
    return TLM_OK;
}

tlm_status tlm_mem_measure(tlm_backend *be, const tlm_bench_case *c, size_t memory_limit, int top,
                           tlm_mem_measurement *r, tlm_mem_timeline **out) {
    memset(r, 0, sizeof *r);
    if (out) *out = NULL;
    r->max_context = -1;
    recording rec = {.be = be, .t = NULL};
    const tlm_bench_hooks hooks = {.before_steps = start_recording, .after_steps = stop_recording, .user = &rec};
    tlm_bench_case k = *c; /* one measured step, issued eagerly: the hooks see every op only so */
    k.steps = 1;
    k.graphs = false;
    k.weights = NULL;
    k.comm = NULL;
    k.max_context_bytes = 0;
    k.hooks = &hooks;
    tlm_config cfg = k.config;
    if (cfg.context_length < k.context_length) cfg.context_length = k.context_length;
    const tlm_run_config run = tlm_bench_run_config(&k);
    r->attention = tlm_attention_resolve(be, &cfg, k.precision, k.attention);
    if (memory_limit) r->max_context = tlm_bench_max_context(be, &k, memory_limit);
    tlm_status s = tlm_model_memory_estimate(be, &cfg, &run, k.batch_size, k.context_length, &r->plan);
    if (s != TLM_OK) {
        fail(r, s, tlm_last_error());
        return TLM_OK;
    }
    tlm_bench_result *br = malloc(sizeof *br);
    if (!br) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    s = tlm_bench_run(be, &k, br);
    if (s == TLM_OK && br->status != TLM_OK) fail(r, br->status, br->error);
    else if (s == TLM_OK) {
        const tlm_status a = tlm_mem_timeline_peaks(rec.t, 0, &r->peaks);
        const tlm_status b = a == TLM_OK ? largest(rec.t, top, r) : a;
        if (b != TLM_OK) fail(r, b, tlm_last_error());
    }
    free(br);
    if (s == TLM_OK && r->status == TLM_OK && out) *out = rec.t;
    else tlm_mem_timeline_free(rec.t);
    return s;
}

tlm_status tlm_mem_write_case_files(const tlm_mem_timeline *t, const tlm_bench_case *c, tlm_attention attention,
                                    const tlm_backend *be, const char *json_path, const char *snapshot_path) {
    if (json_path) {
        char ctx[16], batch[16], title[256];
        snprintf(ctx, sizeof ctx, "%d", c->context_length);
        snprintf(batch, sizeof batch, "%d", c->batch_size);
        snprintf(title, sizeof title, "%s, context %d, batch %d, %s, %s%s%s%s, %s attention (%s)", c->model_name,
                 c->context_length, c->batch_size, tlm_precision_name(c->precision), tlm_pass_name(c->pass),
                 c->recompute ? ", recompute " : "", c->recompute ? tlm_recompute_name(c->recompute) : "",
                 c->optimizer_in_backward ? ", optimizer in backward" : "", tlm_attention_name(attention), be->name);
        const char *keys[] = {"title", "model", "context_length", "batch_size", "precision", "pass", "attention",
                              "recompute", "optimizer_in_backward", "device"};
        const char *values[] = {title, c->model_name, ctx, batch, tlm_precision_name(c->precision),
                                tlm_pass_name(c->pass), tlm_attention_name(attention),
                                tlm_recompute_name(c->recompute), c->optimizer_in_backward ? "true" : "false",
                                be->description};
        TLM_TRY(tlm_mem_timeline_write_json(t, json_path, keys, values, (int)(sizeof keys / sizeof keys[0])));
    }
    if (snapshot_path) TLM_TRY(tlm_mem_timeline_write_snapshot(t, snapshot_path, be->device_index));
    return TLM_OK;
}
