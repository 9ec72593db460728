/* backend.c — what every backend shares (backend.h): the generic constructor and destructor, the
 * device queries, copies, streams and events (host-clock events for a backend whose ops run
 * synchronously), the CUDA graph capture service, and creation by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend_state.h"

double tlm_host_clock_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

tlm_status tlm_backend_new(tlm_backend **out, const char *name, tlm_device_kind kind, const tlm_backend_iface *iface,
                           const tlm_ops *ops) {
    *out = NULL;
    tlm_backend *be = calloc(1, sizeof *be);
    struct tlm_backend_state *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the %s backend", name);
    }
    be->name = name;
    be->kind = kind;
    be->iface = iface;
    be->ops = ops;
    be->state = s;
    snprintf(be->description, sizeof be->description, "%s", name);
    s->scope = (tlm_scope){.phase = TLM_PHASE_SETUP, .layer = -1, .step = -1};
    s->created_us = tlm_host_clock_us();
    *out = be;
    return TLM_OK;
}

void tlm_backend_destroy(tlm_backend *be) {
    if (!be) return;
    tlm_mem_state_free(be);
    if (be->iface->destroy) be->iface->destroy(be);
    free(be->state);
    free(be);
}

/* ---- the registered backend kinds (backend.h: core calls no backend's code) ---------------------- */

enum { MAX_BACKEND_KINDS = 8 };
static const tlm_backend_entry *backend_kinds[MAX_BACKEND_KINDS];
static int num_backend_kinds;

tlm_status tlm_backend_register(const tlm_backend_entry *e) {
    for (int i = 0; i < num_backend_kinds; i++)
        if (strcmp(backend_kinds[i]->name, e->name) == 0) {
            backend_kinds[i] = e;
            return TLM_OK;
        }
    if (num_backend_kinds == MAX_BACKEND_KINDS)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "backend '%s': the table holds %d kinds at most", e->name,
                        MAX_BACKEND_KINDS);
    backend_kinds[num_backend_kinds++] = e;
    return TLM_OK;
}

tlm_status tlm_backend_create(tlm_backend **out, const char *device, int gpu, int cpu_threads) {
    *out = NULL;
    if (num_backend_kinds == 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no backend is registered (call tlm_backends_register_builtin)");
    for (int i = 0; i < num_backend_kinds; i++) {
        const tlm_backend_entry *e = backend_kinds[i];
        if (device ? strcmp(device, e->name) == 0 : (i == num_backend_kinds - 1 || e->device_count() > 0))
            return e->create(out, gpu, cpu_threads);
    }
    char known[128] = "";
    for (int i = 0; i < num_backend_kinds; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", backend_kinds[i]->name);
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown device '%s' (known: %s)", device, known);
}

/* ---- the device ------------------------------------------------------------------------------------ */

tlm_support tlm_backend_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int d_head) {
    if (dt != TLM_DTYPE_F32 && dt != TLM_DTYPE_BF16 && dt != TLM_DTYPE_F16) { /* no backend has other dtypes */
        tlm_fail(TLM_ERR_UNSUPPORTED, "%s on %s: dtype %s is not supported (F32, BF16, F16)", tlm_op_name(op),
                 be->name, tlm_dtype_name(dt));
        return TLM_SUPPORT_NONE;
    }
    return be->iface->supports(be, op, dt, d_head);
}

size_t tlm_device_memory_used(tlm_backend *be) {
    return be->iface->device_memory_used ? be->iface->device_memory_used(be) : 0;
}

size_t tlm_device_memory_total(tlm_backend *be) {
    return be->iface->device_memory_total ? be->iface->device_memory_total(be) : 0;
}

double tlm_backend_peak_tflops(tlm_backend *be, tlm_precision p) {
    return be->iface->peak_tflops ? be->iface->peak_tflops(be, p) : 0;
}

void tlm_backend_release_cached(tlm_backend *be) {
    if (be->iface->release_cached) be->iface->release_cached(be);
}

void tlm_backend_release_workspaces(tlm_backend *be) {
    if (be->iface->release_workspaces) be->iface->release_workspaces(be);
}

/* ---- memory ------------------------------------------------------------------------------------------ */

void tlm_copy_to_backend(tlm_backend *be, void *dst, const void *src_host, size_t bytes) {
    if (bytes) be->iface->copy_to_backend(be, dst, src_host, bytes);
}

void tlm_copy_to_host(tlm_backend *be, void *dst_host, const void *src, size_t bytes) {
    if (bytes) be->iface->copy_to_host(be, dst_host, src, bytes);
}

void tlm_memset_zero(tlm_backend *be, void *dst, size_t bytes) {
    if (bytes) be->iface->memset_zero(be, dst, bytes);
}

/* ---- streams and events -------------------------------------------------------------------------------
 * A backend without its own (the CPU: ops are synchronous, one queue) gets these: a stream is a
 * token, an event the host clock at the moment it is recorded, when all earlier work is done. */

void tlm_stream_synchronize(tlm_backend *be, tlm_stream *s) {
    if (be->iface->stream_synchronize) be->iface->stream_synchronize(be, s);
}

/* a handle of `bytes` for a backend without its own (a token) */
static tlm_status token(void **out, size_t bytes, const char *what) {
    *out = calloc(1, bytes);
    return *out ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for %s", what);
}

static tlm_status stream_create(tlm_backend *be, bool background, tlm_stream **out) {
    return be->iface->stream_create ? be->iface->stream_create(be, background, out)
                                    : token((void **)out, sizeof **out, "a stream");
}

tlm_status tlm_stream_create(tlm_backend *be, tlm_stream **out) { return stream_create(be, false, out); }

tlm_status tlm_stream_create_background(tlm_backend *be, tlm_stream **out) { return stream_create(be, true, out); }

void tlm_stream_destroy(tlm_backend *be, tlm_stream *s) {
    if (s && be->iface->stream_destroy) be->iface->stream_destroy(be, s);
    else free(s); /* a token, or NULL */
}

tlm_status tlm_event_create(tlm_backend *be, tlm_event **out) {
    return be->iface->event_create ? be->iface->event_create(be, out) : token((void **)out, sizeof **out, "an event");
}

void tlm_event_destroy(tlm_backend *be, tlm_event *e) {
    if (e && be->iface->event_destroy) be->iface->event_destroy(be, e);
    else free(e); /* a token, or NULL */
}

void tlm_event_record(tlm_backend *be, tlm_event *e, tlm_stream *s) {
    if (be->iface->event_record) be->iface->event_record(be, e, s);
    else e->host_ms = tlm_host_clock_us() * 1e-3;
}

void tlm_stream_wait_event(tlm_backend *be, tlm_stream *s, tlm_event *e) {
    if (be->iface->stream_wait_event) be->iface->stream_wait_event(be, s, e);
}

double tlm_event_elapsed_ms(tlm_backend *be, tlm_event *start, tlm_event *end) {
    if (be->iface->event_elapsed_ms) return be->iface->event_elapsed_ms(be, start, end);
    return end->host_ms - start->host_ms;
}

/* ---- the side stream ------------------------------------------------------------------------------------ */

bool tlm_side_available(tlm_backend *be) { return be->iface->side_available && be->iface->side_available(be); }

/* side_active: a side section is open and its ops go to the side stream (false: they run in place) */
void tlm_side_begin(tlm_backend *be) {
    if (be->state->side_open) tlm_fatal("tlm_side_begin: a side section is already open");
    if (be->state->stream_ops_open) tlm_fatal("tlm_side_begin: inside tlm_stream_ops_begin's section");
    be->state->side_open = true;
    be->state->side_active = be->iface->side_begin && be->iface->side_begin(be);
}

tlm_side_mark tlm_side_end(tlm_backend *be) {
    if (!be->state->side_open) tlm_fatal("tlm_side_end: no side section is open");
    be->state->side_open = false;
    if (!be->state->side_active) return 0;
    be->state->side_active = false;
    return be->iface->side_end(be);
}

void tlm_side_join(tlm_backend *be, tlm_side_mark mark) {
    if (be->state->side_open) tlm_fatal("tlm_side_join: inside a side section");
    if (be->iface->side_join) be->iface->side_join(be, mark);
}

/* ---- ops on another stream ------------------------------------------------------------------------------ */

void tlm_stream_ops_begin(tlm_backend *be, tlm_stream *s) {
    if (be->state->side_open || be->state->stream_ops_open)
        tlm_fatal("tlm_stream_ops_begin: inside a side section or another stream's");
    be->state->stream_ops_open = true;
    if (be->iface->stream_ops) be->iface->stream_ops(be, s);
}

void tlm_stream_ops_end(tlm_backend *be) {
    if (!be->state->stream_ops_open) tlm_fatal("tlm_stream_ops_end: no tlm_stream_ops_begin");
    be->state->stream_ops_open = false;
    if (be->iface->stream_ops) be->iface->stream_ops(be, NULL);
}

/* ---- CUDA graphs ---------------------------------------------------------------------------------------- */

bool tlm_backend_has_graphs(const tlm_backend *be) { return be->iface->graph_begin != NULL; }

void tlm_graph_reset(tlm_backend *be, tlm_graph *g) {
    if (g->exec) be->iface->graph_destroy(be, g->exec);
    memset(g, 0, sizeof *g);
}

void tlm_graph_run(tlm_backend *be, tlm_graph *g, bool enabled, tlm_graph_fn fn, void *ctx, uint32_t key) {
    if (!enabled || !tlm_backend_has_graphs(be) || g->failed) {
        fn(ctx, key);
        return;
    }
    if (g->key != key) tlm_graph_reset(be, g);
    if (g->exec) {
        be->iface->graph_launch(be, g->exec);
        return;
    }
    if (!g->warm) { /* the first run with this key: eager, warming plan caches */
        g->warm = 1;
        g->key = key;
        fn(ctx, key);
        return;
    }
    be->iface->graph_begin(be);
    fn(ctx, key);
    g->exec = be->iface->graph_end(be);
    if (g->exec) {
        be->iface->graph_launch(be, g->exec);
    } else { /* capture failed (message set): stay eager */
        g->failed = 1;
        fn(ctx, key);
    }
}
