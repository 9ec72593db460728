/* timeline.c — the memory timeline recorder (memory_timeline.h): a memory listener that turns each
 * allocation and free into an event (with the bytes in use per category after it) and an
 * allocation record (with the ops and phases it lived between), and a dispatch hook that records
 * each op and the step and phase boundaries; then the analysis: the peaks of a step and its largest
 * allocations. */
#include "tlm/memory_timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ptrmap.h"

/* ---- categories and reasons ---------------------------------------------------------------------- */

static const char *const cat_names[TLM_MEMCAT_COUNT] = {"parameters",      "weight copy", "gradients",
                                                        "optimizer state", "activations", "workspace"};
static const char *const cat_keys[TLM_MEMCAT_COUNT] = {"parameters", "weight_copy", "gradients",
                                                       "optimizer",  "activations", "workspace"};

const char *tlm_memcat_name(tlm_memcat c) { return (unsigned)c < TLM_MEMCAT_COUNT ? cat_names[c] : "?"; }
const char *tlm_memcat_key(tlm_memcat c) { return (unsigned)c < TLM_MEMCAT_COUNT ? cat_keys[c] : "?"; }

tlm_memcat tlm_memcat_of(tlm_mem_tag tag, const char *name) {
    switch (tag) {
    case TLM_MEM_PARAMETERS:
        /* model.c names the GEMM copy "parameters.bf16" / "parameters.fp16" */
        return name && strncmp(name, "parameters.", 11) == 0 ? TLM_MEMCAT_WEIGHT_COPY : TLM_MEMCAT_PARAMETERS;
    case TLM_MEM_GRADIENTS: return TLM_MEMCAT_GRADIENTS;
    case TLM_MEM_OPTIMIZER: return TLM_MEMCAT_OPTIMIZER;
    case TLM_MEM_ACTIVATIONS: return TLM_MEMCAT_ACTIVATIONS;
    default: return TLM_MEMCAT_WORKSPACE;
    }
}

static const char *const why_names[TLM_MEMWHY_COUNT] = {"state (kept across steps)", "saved for backward",
                                                        "gradient",                  "scratch",
                                                        "step input/output",         "workspace"};

const char *tlm_memwhy_name(tlm_memwhy w) { return (unsigned)w < TLM_MEMWHY_COUNT ? why_names[w] : "?"; }

tlm_memwhy tlm_mem_allocation_why(const tlm_mem_allocation *a) {
    const bool freed = a->free_op != UINT64_MAX && !a->before;
    switch (a->category) {
    case TLM_MEMCAT_PARAMETERS:
    case TLM_MEMCAT_WEIGHT_COPY:
    case TLM_MEMCAT_OPTIMIZER: return TLM_MEMWHY_STATE;
    case TLM_MEMCAT_GRADIENTS: return TLM_MEMWHY_GRADIENT;
    case TLM_MEMCAT_WORKSPACE:
        if (!freed) return TLM_MEMWHY_WORKSPACE;
        return a->alloc_scope.phase == a->free_scope.phase && a->alloc_scope.step == a->free_scope.step
                   ? TLM_MEMWHY_SCRATCH
                   : TLM_MEMWHY_OUTPUT;
    case TLM_MEMCAT_ACTIVATIONS:
    default: break;
    }
    const tlm_phase born = a->alloc_scope.phase;
    if (born != TLM_PHASE_FORWARD) return TLM_MEMWHY_SCRATCH;
    if (!freed) return TLM_MEMWHY_OUTPUT; /* a forward's output still alive */
    const bool same_step = a->alloc_scope.step == a->free_scope.step && a->alloc_scope.warmup == a->free_scope.warmup;
    if (same_step && a->free_scope.phase == TLM_PHASE_BACKWARD) return TLM_MEMWHY_SAVED;
    if (same_step && a->free_scope.phase == TLM_PHASE_FORWARD) return TLM_MEMWHY_SCRATCH;
    return TLM_MEMWHY_OUTPUT; /* lived to the next step (a forward-only pass's logits) */
}

/* ---- the recorder --------------------------------------------------------------------------------- */

#define MAX_EVENTS (100 * 1000 * 1000)

/* a live allocation: an entry of the ptrmap live, address -> allocation index */
typedef struct {
    uintptr_t addr; /* the key (first field); 0: an empty slot */
    int32_t index;  /* into allocs */
} live_entry;

struct tlm_mem_timeline {
    tlm_backend *be;
    tlm_mem_listener listener;
    tlm_hook hook;
    bool recording, lost;
    tlm_mem_timeline_event *events;
    int n_events, cap_events;
    tlm_mem_allocation *allocs;
    int n_allocs, cap_allocs;
    tlm_mem_timeline_op *ops;
    int n_ops, cap_ops;
    uint64_t first_op;
    tlm_mem_timeline_mark *marks;
    int n_marks, cap_marks;
    tlm_ptrmap live; /* live_entry entries */
    size_t cur[TLM_MEMCAT_COUNT], start[TLM_MEMCAT_COUNT];
    size_t device_outside; /* the device's count less tlm's footprint when recording began */
    tlm_mem_timeline_arena *arenas; /* reserved when recording stopped */
    int n_arenas, cap_arenas;
};

/* room for one more element in *arr (n used, *cap allocated); false when out of memory */
static bool grow_array(void **arr, int n, int *cap, size_t size) {
    if (n < *cap) return true;
    if (n >= MAX_EVENTS) return false;
    const int c = *cap ? 2 * *cap : 1024;
    void *p = realloc(*arr, (size_t)c * size);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}
#define ROOM(t, arr, n, cap) grow_array((void **)&(t)->arr, (t)->n, &(t)->cap, sizeof *(t)->arr)

/* address -> allocation index i (replacing any index it had); false when out of host memory */
static bool live_put(tlm_mem_timeline *t, uintptr_t addr, int32_t i) {
    if (!tlm_ptrmap_reserve(&t->live, sizeof(live_entry), 1024)) return false;
    bool found;
    live_entry *e = tlm_ptrmap_put(&t->live, addr, &found);
    e->index = i;
    return true;
}

/* removes addr; its allocation index, or -1 when absent */
static int32_t live_take(tlm_mem_timeline *t, uintptr_t addr) {
    live_entry *e = tlm_ptrmap_find(&t->live, addr);
    if (!e) return -1;
    const int32_t i = e->index;
    tlm_ptrmap_remove(&t->live, e);
    return i;
}

static int32_t new_allocation(tlm_mem_timeline *t, const char *name, size_t bytes, tlm_mem_tag tag, const void *ptr,
                              const void *arena) {
    if (!ROOM(t, allocs, n_allocs, cap_allocs)) return -1;
    tlm_mem_allocation *a = &t->allocs[t->n_allocs];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    a->bytes = bytes;
    a->category = tlm_memcat_of(tag, name);
    a->addr = (uint64_t)(uintptr_t)ptr;
    a->arena = (uint64_t)(uintptr_t)arena;
    a->alloc_op = a->free_op = UINT64_MAX;
    a->free_us = -1;
    a->alloc_event = a->free_event = -1;
    a->alloc_scope.layer = a->free_scope.layer = -1;
    a->alloc_scope.step = a->free_scope.step = -1;
    if (!live_put(t, (uintptr_t)ptr, t->n_allocs)) return -1;
    return t->n_allocs++;
}

static void on_event(void *user, const tlm_mem_event *e) {
    tlm_mem_timeline *t = user;
    if (!t->recording) return;
    int32_t i;
    if (e->action == TLM_MEM_ALLOC) {
        i = new_allocation(t, e->name, e->bytes, e->tag, e->ptr, e->arena);
    } else {
        i = live_take(t, (uintptr_t)e->ptr);
        if (i < 0) { /* not seen allocated (cannot happen after start's census): an allocation of its own */
            i = new_allocation(t, e->name, e->bytes, e->tag, e->ptr, e->arena);
            if (i >= 0) {
                t->allocs[i].before = true;
                live_take(t, (uintptr_t)e->ptr);
            }
        }
    }
    if (i < 0 || !ROOM(t, events, n_events, cap_events)) {
        t->lost = true;
        t->recording = false;
        return;
    }
    tlm_mem_allocation *a = &t->allocs[i];
    const bool alloc = e->action == TLM_MEM_ALLOC;
    if (alloc) {
        a->alloc_us = e->time_us;
        a->alloc_op = e->scope.op_seq;
        a->alloc_scope = e->scope;
        a->alloc_event = t->n_events;
        t->cur[a->category] += a->bytes;
    } else {
        a->free_us = e->time_us;
        a->free_op = e->scope.op_seq;
        a->free_scope = e->scope;
        a->free_event = t->n_events;
        t->cur[a->category] -= t->cur[a->category] >= a->bytes ? a->bytes : t->cur[a->category];
    }
    tlm_mem_timeline_event *ev = &t->events[t->n_events++];
    ev->time_us = e->time_us;
    ev->scope = e->scope;
    ev->alloc = alloc;
    ev->allocation = (uint32_t)i;
    ev->in_use = e->in_use;
    ev->footprint = e->footprint;
    memcpy(ev->by_category, t->cur, sizeof t->cur);
}

static void on_op(void *user, const tlm_op_event *e) {
    tlm_mem_timeline *t = user;
    if (!t->recording) return;
    if (!t->n_ops) t->first_op = e->scope.op_seq;
    /* ops are numbered without gaps while the host issues them; a gap (a graph replayed between two
       eager passes does not number ops) starts the array again from here */
    if (t->n_ops && e->scope.op_seq != t->first_op + (uint64_t)t->n_ops) {
        t->n_ops = 0;
        t->first_op = e->scope.op_seq;
    }
    if (!ROOM(t, ops, n_ops, cap_ops)) {
        t->lost = true;
        t->recording = false;
        return;
    }
    t->ops[t->n_ops++] = (tlm_mem_timeline_op){e->op, e->scope};
}

static void on_range(tlm_mem_timeline *t, const tlm_range_event *e, bool begin) {
    if (!t->recording || (e->kind != TLM_RANGE_STEP && e->kind != TLM_RANGE_PHASE)) return;
    if (!ROOM(t, marks, n_marks, cap_marks)) {
        t->lost = true;
        t->recording = false;
        return;
    }
    const tlm_mem_stats st = tlm_mem_stats_now(t->be);
    t->marks[t->n_marks++] = (tlm_mem_timeline_mark){.begin = begin,
                                                     .step = e->kind == TLM_RANGE_STEP,
                                                     .scope = e->scope,
                                                     .event = t->n_events,
                                                     .in_use = st.current_total,
                                                     .footprint = st.footprint,
                                                     .device_used = tlm_device_memory_used(t->be)};
}

static void on_range_begin(void *user, const tlm_range_event *e) { on_range(user, e, true); }
static void on_range_end(void *user, const tlm_range_event *e) { on_range(user, e, false); }

/* the census of what is alive when recording starts */
static void census(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name) {
    tlm_mem_timeline *t = user;
    /* the arena of a placed allocation is not known here: 0 (the snapshot finds it by address) */
    const int32_t i = new_allocation(t, name, bytes, tag, ptr, NULL);
    if (i < 0) {
        t->lost = true;
        return;
    }
    t->allocs[i].before = true;
    t->cur[t->allocs[i].category] += bytes;
}

tlm_status tlm_mem_timeline_start(tlm_mem_timeline **out, tlm_backend *be) {
    *out = NULL;
    tlm_mem_timeline *t = calloc(1, sizeof *t);
    if (!t) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the memory timeline");
    t->be = be;
    tlm_mem_for_each(be, census, t);
    if (t->lost) {
        tlm_mem_timeline_free(t);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the memory timeline");
    }
    memcpy(t->start, t->cur, sizeof t->cur);
    const size_t used = tlm_device_memory_used(be), fp = tlm_mem_stats_now(be).footprint;
    t->device_outside = used > fp ? used - fp : 0;
    t->listener = (tlm_mem_listener){t, on_event};
    t->hook = (tlm_hook){t, on_op, NULL, on_range_begin, on_range_end};
    tlm_status s = tlm_mem_listener_add(be, &t->listener);
    if (s == TLM_OK) {
        s = tlm_hook_add(be, &t->hook);
        if (s != TLM_OK) tlm_mem_listener_remove(be, &t->listener);
    }
    if (s != TLM_OK) {
        tlm_mem_timeline_free(t);
        return s;
    }
    t->recording = true;
    *out = t;
    return TLM_OK;
}

static void add_arena(void *user, const void *arena, size_t bytes, const char *name) {
    tlm_mem_timeline *t = user;
    if (!ROOM(t, arenas, n_arenas, cap_arenas)) {
        t->lost = true;
        return;
    }
    tlm_mem_timeline_arena *a = &t->arenas[t->n_arenas++];
    a->addr = (uint64_t)(uintptr_t)arena;
    a->bytes = bytes;
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
}

tlm_status tlm_mem_timeline_stop(tlm_mem_timeline *t) {
    if (t->recording) {
        tlm_mem_listener_remove(t->be, &t->listener);
        tlm_hook_remove(t->be, &t->hook);
        t->n_arenas = 0;
        tlm_mem_for_each_arena(t->be, add_arena, t);
    }
    t->recording = false;
    if (t->lost)
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "the memory timeline ran out of host memory after %d events",
                        t->n_events);
    return TLM_OK;
}

void tlm_mem_timeline_free(tlm_mem_timeline *t) {
    if (!t) return;
    if (t->recording) tlm_mem_timeline_stop(t);
    free(t->events);
    free(t->allocs);
    free(t->ops);
    free(t->marks);
    tlm_ptrmap_free(&t->live);
    free(t->arenas);
    free(t);
}

int tlm_mem_timeline_num_events(const tlm_mem_timeline *t) { return t->n_events; }
const tlm_mem_timeline_event *tlm_mem_timeline_events(const tlm_mem_timeline *t) { return t->events; }
int tlm_mem_timeline_num_allocations(const tlm_mem_timeline *t) { return t->n_allocs; }
const tlm_mem_allocation *tlm_mem_timeline_allocations(const tlm_mem_timeline *t) { return t->allocs; }
int tlm_mem_timeline_num_marks(const tlm_mem_timeline *t) { return t->n_marks; }
const tlm_mem_timeline_mark *tlm_mem_timeline_marks(const tlm_mem_timeline *t) { return t->marks; }
const size_t *tlm_mem_timeline_start_bytes(const tlm_mem_timeline *t) { return t->start; }
int tlm_mem_timeline_num_arenas(const tlm_mem_timeline *t) { return t->n_arenas; }
const tlm_mem_timeline_arena *tlm_mem_timeline_arenas(const tlm_mem_timeline *t) { return t->arenas; }

const tlm_mem_timeline_op *tlm_mem_timeline_op_at(const tlm_mem_timeline *t, uint64_t op_seq) {
    if (!t->n_ops || op_seq < t->first_op || op_seq >= t->first_op + (uint64_t)t->n_ops) return NULL;
    return &t->ops[op_seq - t->first_op];
}

void tlm_mem_timeline_op_label(const tlm_mem_timeline *t, uint64_t op_seq, char *buf, size_t n) {
    if (op_seq == UINT64_MAX) {
        snprintf(buf, n, "outside the window");
        return;
    }
    const tlm_mem_timeline_op *o = tlm_mem_timeline_op_at(t, op_seq);
    if (!o) {
        snprintf(buf, n, "?");
        return;
    }
    if (o->scope.layer >= 0)
        snprintf(buf, n, "%s (%s, layer %d)", tlm_op_name(o->op), tlm_phase_name(o->scope.phase), o->scope.layer);
    else
        snprintf(buf, n, "%s (%s)", tlm_op_name(o->op), tlm_phase_name(o->scope.phase));
}

/* ---- analysis --------------------------------------------------------------------------------------- */

/* the marks [*b, *e] that open and close step `step` (-1: the last step begun) */
static bool step_window(const tlm_mem_timeline *t, int step, int *b, int *e) {
    *b = *e = -1;
    for (int i = 0; i < t->n_marks; i++) {
        const tlm_mem_timeline_mark *m = &t->marks[i];
        if (!m->step || !m->begin) continue;
        if (step < 0 || (m->scope.step == step && !m->scope.warmup)) *b = i;
    }
    if (*b < 0) return false;
    for (int i = *b + 1; i < t->n_marks && *e < 0; i++)
        if (t->marks[i].step && !t->marks[i].begin) *e = i;
    if (*e < 0) *e = t->n_marks - 1;
    return true;
}

/* the first phase mark of `phase` (begin or end) inside marks (b, e); -1 when none */
static int phase_mark(const tlm_mem_timeline *t, int b, int e, tlm_phase phase, bool begin) {
    for (int i = b + 1; i < e; i++)
        if (!t->marks[i].step && t->marks[i].begin == begin && t->marks[i].scope.phase == phase) return i;
    return -1;
}

/* the most in use over the events [first, last) and at the mark that opens them */
static size_t max_in_use(const tlm_mem_timeline *t, const tlm_mem_timeline_mark *open, int first, int last) {
    size_t m = open->in_use;
    for (int i = first; i < last && i < t->n_events; i++)
        if (t->events[i].in_use > m) m = t->events[i].in_use;
    return m;
}

tlm_status tlm_mem_timeline_peaks(const tlm_mem_timeline *t, int step, tlm_mem_peaks *out) {
    memset(out, 0, sizeof *out);
    int b, e;
    if (!step_window(t, step, &b, &e))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "step %d was not recorded by the memory timeline", step);
    const tlm_mem_timeline_mark *mb = &t->marks[b], *me = &t->marks[e];
    out->step = mb->scope.step;
    out->start = mb->in_use;
    out->peak = mb->in_use;
    out->peak_scope = mb->scope;
    out->peak_op = "?";
    out->peak_footprint = mb->footprint;
    int peak_event = -1;
    for (int i = mb->event; i < me->event && i < t->n_events; i++) {
        const tlm_mem_timeline_event *ev = &t->events[i];
        if (ev->in_use > out->peak) {
            out->peak = ev->in_use;
            peak_event = i;
        }
        if (ev->footprint > out->peak_footprint) out->peak_footprint = ev->footprint;
    }
    if (peak_event >= 0) {
        const tlm_mem_timeline_event *ev = &t->events[peak_event];
        out->peak_scope = ev->scope;
        memcpy(out->at_peak, ev->by_category, sizeof out->at_peak);
        const tlm_mem_timeline_op *o = tlm_mem_timeline_op_at(t, ev->scope.op_seq);
        if (o) out->peak_op = tlm_op_name(o->op);
    } else { /* nothing happened in the step: what was live when it began */
        const size_t *by = mb->event > 0 ? t->events[mb->event - 1].by_category : t->start;
        memcpy(out->at_peak, by, sizeof out->at_peak);
    }
    const int fe = phase_mark(t, b, e, TLM_PHASE_FORWARD, false);
    if (fe >= 0) out->after_forward = t->marks[fe].in_use;
    const int bb = phase_mark(t, b, e, TLM_PHASE_BACKWARD, true), be = phase_mark(t, b, e, TLM_PHASE_BACKWARD, false);
    if (bb >= 0 && be >= 0) out->backward_peak = max_in_use(t, &t->marks[bb], t->marks[bb].event, t->marks[be].event);
    const int ob = phase_mark(t, b, e, TLM_PHASE_OPTIMIZER, true), oe = phase_mark(t, b, e, TLM_PHASE_OPTIMIZER, false);
    if (ob >= 0 && oe >= 0) {
        out->before_optimizer = t->marks[ob].in_use;
        out->optimizer_peak = max_in_use(t, &t->marks[ob], t->marks[ob].event, t->marks[oe].event);
        out->after_optimizer = t->marks[oe].in_use;
    }
    size_t dev = 0;
    for (int i = b; i <= e; i++)
        if (t->marks[i].device_used > dev) dev = t->marks[i].device_used;
    out->device_peak = dev > t->device_outside ? dev - t->device_outside : 0;
    return TLM_OK;
}

static const tlm_mem_timeline *sort_t;

static int by_bytes(const void *pa, const void *pb) {
    const int a = *(const int *)pa, b = *(const int *)pb;
    const size_t x = sort_t->allocs[a].bytes, y = sort_t->allocs[b].bytes;
    if (x != y) return x > y ? -1 : 1;
    return a < b ? -1 : a > b;
}

tlm_status tlm_mem_timeline_largest(const tlm_mem_timeline *t, int step, int n, int *out, int *count) {
    *count = 0;
    int b, e;
    if (!step_window(t, step, &b, &e))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "step %d was not recorded by the memory timeline", step);
    const int first = t->marks[b].event, last = t->marks[e].event;
    int *idx = malloc((size_t)(t->n_allocs ? t->n_allocs : 1) * sizeof *idx);
    if (!idx) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory ranking allocations");
    int m = 0;
    for (int i = 0; i < t->n_allocs; i++) {
        const tlm_mem_allocation *a = &t->allocs[i];
        const bool born_before_end = a->alloc_event < 0 ? a->before : a->alloc_event < last;
        const bool alive_after_start = a->free_event < 0 || a->free_event >= first;
        if (born_before_end && alive_after_start) idx[m++] = i;
    }
    sort_t = t;
    qsort(idx, (size_t)m, sizeof *idx, by_bytes);
    /* once per name: of two allocations of one buffer (the last step's and this one's), this one's */
    for (int k = 0; k < m && *count < n; k++) {
        const tlm_mem_allocation *a = &t->allocs[idx[k]];
        int dup = -1;
        for (int j = 0; j < *count; j++)
            if (strcmp(t->allocs[out[j]].name, a->name) == 0) dup = j;
        if (dup < 0) out[(*count)++] = idx[k];
        else if (a->alloc_event >= first && t->allocs[out[dup]].alloc_event < first) out[dup] = idx[k];
    }
    free(idx);
    return TLM_OK;
}
