/* recorder.c — the profiler of tlm's own runs (profile.h, tlm_profiler_start/stop): a dispatch hook
 * (ops.h) that records every op and range, and a memory listener (memory.h) that records the
 * tracked bytes in use. On the CPU backend the ops run synchronously inside the dispatch, so the
 * hook's host clock times them: each op is one activity, cut where the naive attention announces
 * its stages. On CUDA the activities come from CUPTI (cupti_collect.c); the hook pushes the op
 * and the innermost range as external correlation ids and tells the collector which op a graph
 * node captured now belongs to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tlm/backend.h"
#include "tlm/profile.h"
#ifdef TLM_HAVE_CUPTI
#include "profile/cupti_collect.h"
#endif

#define MAX_DEPTH 64

struct tlm_profiler {
    tlm_backend *be;
    tlm_profile *p;
    bool cuda;
    int64_t origin_ns;         /* CPU: CLOCK_MONOTONIC at start */
    tlm_hook hook;
    tlm_mem_listener listener;
    int32_t stack[MAX_DEPTH];  /* open ranges, innermost last */
    int depth, overflow;
    int32_t op;                /* the op being dispatched, -1: none */
    /* CPU: the op's run is cut into pieces at its stages */
    int64_t piece_begin;
    int32_t piece_range;
    int pieces;
    bool out_of_memory;
};

static bool active; /* one profiler at a time: CUPTI's collection is process-wide */

static int64_t host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now(const tlm_profiler *pr) {
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) return tlm_cupti_now();
#endif
    return host_ns() - pr->origin_ns;
}

static int32_t top(const tlm_profiler *pr) { return pr->depth > 0 ? pr->stack[pr->depth - 1] : -1; }

static void context_changed(const tlm_profiler *pr) {
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) tlm_cupti_set_context(pr->op, top(pr));
#endif
}

/* CPU: the op's activity from piece_begin to t, named after its stage when inside one */
static void emit_piece(tlm_profiler *pr, int64_t t, bool last) {
    if (pr->op < 0 || (t <= pr->piece_begin && (pr->pieces > 0 || !last))) return;
    tlm_profile *p = pr->p;
    const tlm_prof_op *o = &p->ops[pr->op];
    char name[192];
    const tlm_prof_range *r = pr->piece_range >= 0 ? &p->ranges[pr->piece_range] : NULL;
    if (r && r->kind == TLM_RANGE_STAGE && r->begin_ns >= o->begin_ns)
        snprintf(name, sizeof name, "%s: %s", tlm_op_name(o->op), tlm_profile_str(p, r->name));
    else
        snprintf(name, sizeof name, "%s", tlm_op_name(o->op));
    const int32_t id = tlm_profile_intern(p, name);
    tlm_prof_activity a = tlm_prof_activity_blank(TLM_PROF_KERNEL, id, pr->piece_begin, t);
    a.op = pr->op;
    a.range = pr->piece_range;
    a.phase = o->scope.phase;
    a.layer = o->scope.layer;
    a.step = o->scope.step;
    a.warmup = o->scope.warmup;
    if (id < 0 || tlm_profile_add_activity(p, &a) < 0) pr->out_of_memory = true;
    pr->pieces++;
    pr->piece_begin = t;
}

static void on_op_begin(void *user, const tlm_op_event *e) {
    tlm_profiler *pr = user;
    const tlm_prof_op o = {.op = e->op, .scope = e->scope, .flops = e->flops, .bytes = e->bytes, .begin_ns = now(pr)};
    const int64_t i = tlm_profile_add_op(pr->p, &o);
    if (i < 0) {
        pr->out_of_memory = true;
        return;
    }
    pr->op = (int32_t)i;
    pr->piece_begin = o.begin_ns;
    pr->piece_range = top(pr);
    pr->pieces = 0;
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) tlm_cupti_push_op(pr->op);
#endif
    context_changed(pr);
}

static void on_op_end(void *user, const tlm_op_event *e) {
    tlm_profiler *pr = user;
    if (pr->op < 0) return;
    const int64_t t = now(pr);
    if (!pr->cuda) emit_piece(pr, t, true);
    pr->p->ops[pr->op].end_ns = t;
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) tlm_cupti_pop_op();
#endif
    pr->op = -1;
    context_changed(pr);
}

static void on_range_begin(void *user, const tlm_range_event *e) {
    tlm_profiler *pr = user;
    if (pr->depth == MAX_DEPTH) {
        pr->overflow++;
        return;
    }
    const int64_t t = now(pr);
    const tlm_prof_range r = {.name = tlm_profile_intern(pr->p, e->name), .kind = (int32_t)e->kind, .begin_ns = t,
                              .end_ns = -1, .parent = top(pr), .scope = e->scope};
    const int64_t i = r.name < 0 ? -1 : tlm_profile_add_range(pr->p, &r);
    if (i < 0) {
        pr->out_of_memory = true;
        pr->overflow++; /* its end is ignored */
        return;
    }
    if (!pr->cuda && e->kind == TLM_RANGE_STAGE) emit_piece(pr, t, false); /* the op's part before the stage */
    pr->stack[pr->depth++] = (int32_t)i;
    pr->piece_range = (int32_t)i;
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) tlm_cupti_push_range((int32_t)i);
#endif
    context_changed(pr);
}

static void on_range_end(void *user, const tlm_range_event *e) {
    tlm_profiler *pr = user;
    if (pr->overflow > 0) {
        pr->overflow--;
        return;
    }
    if (pr->depth == 0) return;
    const int64_t t = now(pr);
    if (!pr->cuda && e->kind == TLM_RANGE_STAGE) emit_piece(pr, t, false); /* the stage's part */
    pr->p->ranges[pr->stack[--pr->depth]].end_ns = t;
    pr->piece_range = top(pr);
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) tlm_cupti_pop_range();
#endif
    context_changed(pr);
}

static void on_memory(void *user, const tlm_mem_event *e) {
    tlm_profiler *pr = user;
    const tlm_prof_mem_sample m = {now(pr), e->in_use};
    if (tlm_profile_add_mem(pr->p, &m) < 0) pr->out_of_memory = true;
}

bool tlm_profiler_available(const tlm_backend *be) {
#ifdef TLM_HAVE_CUPTI
    return true;
#else
    return be->kind == TLM_DEVICE_CPU;
#endif
}

tlm_status tlm_profiler_start(tlm_profiler **out, tlm_backend *be, const char *title) {
    *out = NULL;
    if (!tlm_profiler_available(be))
        return tlm_fail(TLM_ERR_UNSUPPORTED, "profiling the %s backend needs CUPTI: rebuild tlm with the CUDA toolkit's "
                                             "CUPTI (extras/CUPTI) found by CMake", be->name);
    if (active) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a profiler is already recording");
    tlm_profiler *pr = calloc(1, sizeof *pr);
    if (!pr) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the profiler");
    tlm_status s = tlm_profile_create(&pr->p);
    if (s != TLM_OK) {
        free(pr);
        return s;
    }
    pr->be = be;
    pr->cuda = be->kind == TLM_DEVICE_CUDA;
    pr->op = pr->piece_range = -1;
    pr->p->host_clock = !pr->cuda;
    snprintf(pr->p->title, sizeof pr->p->title, "%s", title ? title : "tlm");
    snprintf(pr->p->device, sizeof pr->p->device, "%s", be->description);
    pr->hook = (tlm_hook){pr, on_op_begin, on_op_end, on_range_begin, on_range_end};
    pr->listener = (tlm_mem_listener){pr, on_memory};
    tlm_synchronize(be); /* work issued before the start is not this profile's */
    pr->origin_ns = host_ns();
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) s = tlm_cupti_begin(pr->p, TLM_CUPTI_TLM);
#endif
    if (s == TLM_OK) s = tlm_hook_add(be, &pr->hook);
    if (s == TLM_OK) {
        s = tlm_mem_listener_add(be, &pr->listener);
        if (s != TLM_OK) tlm_hook_remove(be, &pr->hook);
    }
    if (s != TLM_OK) {
#ifdef TLM_HAVE_CUPTI
        if (pr->cuda) {
            const tlm_status keep = s;
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tlm_last_error());
            (void)tlm_cupti_end();
            tlm_fail(keep, "%s", msg);
        }
#endif
        tlm_profile_free(pr->p);
        free(pr);
        return s;
    }
    active = true;
    *out = pr;
    return TLM_OK;
}

tlm_status tlm_profiler_stop(tlm_profiler *pr, tlm_profile **out) {
    *out = NULL;
    tlm_synchronize(pr->be); /* every activity issued has run */
    tlm_hook_remove(pr->be, &pr->hook);
    tlm_mem_listener_remove(pr->be, &pr->listener);
    tlm_profile *p = pr->p;
    const int64_t t = now(pr);
    while (pr->depth > 0) p->ranges[pr->stack[--pr->depth]].end_ns = t; /* still open: end now */
    tlm_status s = TLM_OK;
#ifdef TLM_HAVE_CUPTI
    if (pr->cuda) s = tlm_cupti_end();
#endif
    if (!pr->cuda) {
        p->end_ns = t;
        p->resolved = true; /* the hook attributed every activity as it happened */
    }
    if (s == TLM_OK && pr->out_of_memory) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory while profiling");
    active = false;
    free(pr);
    if (s != TLM_OK) {
        tlm_profile_free(p);
        return s;
    }
    tlm_profile_resolve(p);
    *out = p;
    return TLM_OK;
}
