/* snapshot.c — the memory timeline as the snapshot torch.cuda.memory._dump_snapshot writes
 * (memory_timeline.h: tlm_mem_timeline_write_snapshot): a pickle of protocol 2 that uses only the
 * opcodes the JavaScript unpickler of PyTorch's memory_viz page knows (torch/utils/viz/MemoryViz.js),
 * so the page, and `python -m torch.cuda._memory_viz`, open it. Opcodes (pickletools' names):
 *   PROTO 2, EMPTY_DICT + MARK ... SETITEMS, EMPTY_LIST + MARK ... APPENDS, BINUNICODE (a 4-byte
 *   length), BININT1 / BININT2 / BININT (unsigned byte, unsigned short, signed int32), LONG1 (a
 *   two's-complement little-endian integer of n bytes, for addresses and sizes past 2^31), NONE,
 *   NEWTRUE / NEWFALSE, STOP.
 * No memo: the pickle holds no shared object. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/memory_timeline.h"
#include "tlm/output.h"

/* ---- a pickle writer --------------------------------------------------------------------------------- */

typedef struct {
    unsigned char *b;
    size_t n, cap;
    bool oom;
} pk;

static void put(pk *p, const void *src, size_t n) {
    if (p->oom) return;
    if (p->n + n > p->cap) {
        size_t cap = p->cap ? p->cap : 1 << 16;
        while (cap < p->n + n) cap *= 2;
        unsigned char *b = realloc(p->b, cap);
        if (!b) {
            p->oom = true;
            return;
        }
        p->b = b;
        p->cap = cap;
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

static void op(pk *p, unsigned char c) { put(p, &c, 1); }

static void le(pk *p, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(p, b, (size_t)bytes);
}

static void p_int(pk *p, int64_t v) {
    if (v >= 0 && v < 256) {
        op(p, 'K'); /* BININT1 */
        le(p, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        op(p, 'M'); /* BININT2 */
        le(p, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op(p, 'J'); /* BININT */
        le(p, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else { /* LONG1: the fewest bytes whose top bit is the sign */
        int n = 1;
        while (n < 8 && !(v >= -((int64_t)1 << (8 * n - 1)) && v < ((int64_t)1 << (8 * n - 1)))) n++;
        op(p, 0x8a);
        le(p, (uint64_t)n, 1);
        le(p, (uint64_t)v, n);
    }
}

/* an unsigned 64-bit value (an address): LONG1 with a 0 byte on top when bit 63 is set */
static void p_uint(pk *p, uint64_t v) {
    if (v <= INT64_MAX) {
        p_int(p, (int64_t)v);
        return;
    }
    op(p, 0x8a);
    le(p, 9, 1);
    le(p, v, 8);
    le(p, 0, 1);
}

static void p_str(pk *p, const char *s) {
    const size_t n = strlen(s);
    op(p, 'X'); /* BINUNICODE */
    le(p, (uint64_t)n, 4);
    put(p, s, n);
}

static void p_bool(pk *p, bool v) { op(p, v ? 0x88 : 0x89); }

static void dict_begin(pk *p) {
    op(p, '}'); /* EMPTY_DICT */
    op(p, '(');  /* MARK */
}
static void dict_end(pk *p) { op(p, 'u'); } /* SETITEMS */
static void list_begin(pk *p) {
    op(p, ']'); /* EMPTY_LIST */
    op(p, '(');
}
static void list_end(pk *p) { op(p, 'e'); } /* APPENDS */

/* ---- the snapshot ----------------------------------------------------------------------------------- */

static void frame(pk *p, const char *filename, int64_t line, const char *name) {
    dict_begin(p);
    p_str(p, "filename");
    p_str(p, filename);
    p_str(p, "line");
    p_int(p, line);
    p_str(p, "name");
    p_str(p, name);
    dict_end(p);
}

/* innermost first: the buffer (its category and why it exists), the op (phase, layer; line = its
 * number, op_seq), the step */
static void frames(pk *p, const tlm_mem_timeline *t, const tlm_mem_allocation *a, bool at_free) {
    const tlm_scope *s = at_free ? &a->free_scope : &a->alloc_scope;
    /* an allocation: the op that runs next, the first to use it; a free: the last op before it */
    uint64_t seq = at_free ? a->free_op : a->alloc_op;
    if (at_free && seq != UINT64_MAX) seq = seq ? seq - 1 : UINT64_MAX;
    char what[128], where[64], step[48];
    const tlm_memwhy why = tlm_mem_allocation_why(a);
    if (why == TLM_MEMWHY_WORKSPACE) snprintf(what, sizeof what, "%s", tlm_memcat_name(a->category));
    else snprintf(what, sizeof what, "%s, %s", tlm_memcat_name(a->category), tlm_memwhy_name(why));
    if (s->layer >= 0) snprintf(where, sizeof where, "%s layer %d", tlm_phase_name(s->phase), s->layer);
    else snprintf(where, sizeof where, "%s", tlm_phase_name(s->phase));
    const tlm_mem_timeline_op *o = seq == UINT64_MAX ? NULL : tlm_mem_timeline_op_at(t, seq);
    if (s->step >= 0) snprintf(step, sizeof step, "%s %d", s->warmup ? "warm-up step" : "step", s->step);
    else snprintf(step, sizeof step, "outside a step");
    list_begin(p);
    frame(p, a->name, 0, what);
    frame(p, where, seq == UINT64_MAX ? -1 : (int64_t)seq, o ? tlm_op_name(o->op) : "(no op)");
    frame(p, step, 0, "tlm");
    list_end(p);
}

static void no_frames(pk *p) {
    list_begin(p);
    list_end(p);
}

static void block(pk *p, uint64_t addr, size_t size, bool active, const tlm_mem_timeline *t,
                  const tlm_mem_allocation *a) {
    dict_begin(p);
    p_str(p, "address");
    p_uint(p, addr);
    p_str(p, "size");
    p_int(p, (int64_t)size);
    p_str(p, "requested_size");
    p_int(p, (int64_t)(active ? size : 0));
    p_str(p, "state");
    p_str(p, active ? "active_allocated" : "inactive");
    p_str(p, "frames");
    if (a) frames(p, t, a, false);
    else no_frames(p);
    dict_end(p);
}

static void segment_head(pk *p, int device, uint64_t addr, size_t total, size_t active) {
    p_str(p, "device");
    p_int(p, device);
    p_str(p, "address");
    p_uint(p, addr);
    p_str(p, "total_size");
    p_int(p, (int64_t)total);
    p_str(p, "allocated_size");
    p_int(p, (int64_t)active);
    p_str(p, "active_size");
    p_int(p, (int64_t)active);
    p_str(p, "requested_size");
    p_int(p, (int64_t)active);
    p_str(p, "stream");
    p_int(p, 0);
    p_str(p, "segment_type");
    p_str(p, "large");
    p_str(p, "is_expandable");
    p_bool(p, false);
    p_str(p, "frames");
    no_frames(p);
}

static const tlm_mem_allocation *sort_allocs;
static int by_addr(const void *pa, const void *pb) {
    const uint64_t a = sort_allocs[*(const int *)pa].addr, b = sort_allocs[*(const int *)pb].addr;
    return a < b ? -1 : a > b;
}

/* the arena that holds addr, or -1 */
static int arena_of(const tlm_mem_timeline_arena *ar, int n, uint64_t addr) {
    for (int i = 0; i < n; i++)
        if (addr >= ar[i].addr && addr < ar[i].addr + ar[i].bytes) return i;
    return -1;
}

/* the segments: the state when recording stopped */
static bool segments(pk *p, const tlm_mem_timeline *t, int device) {
    const int na = tlm_mem_timeline_num_allocations(t), nr = tlm_mem_timeline_num_arenas(t);
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t);
    const tlm_mem_timeline_arena *ar = tlm_mem_timeline_arenas(t);
    int *live = malloc((size_t)(na ? na : 1) * sizeof *live);
    if (!live) return false;
    int n = 0;
    for (int i = 0; i < na; i++)
        if (al[i].free_op == UINT64_MAX && al[i].free_event < 0 && al[i].bytes) live[n++] = i;
    sort_allocs = al;
    qsort(live, (size_t)n, sizeof *live, by_addr);
    list_begin(p);
    for (int r = 0; r < nr; r++) { /* an arena: its placed allocations, the gaps inactive */
        size_t active = 0;
        for (int k = 0; k < n; k++)
            if (arena_of(ar, nr, al[live[k]].addr) == r) active += al[live[k]].bytes;
        dict_begin(p);
        segment_head(p, device, ar[r].addr, ar[r].bytes, active);
        p_str(p, "blocks");
        list_begin(p);
        uint64_t at = ar[r].addr;
        for (int k = 0; k < n; k++) {
            const tlm_mem_allocation *a = &al[live[k]];
            if (arena_of(ar, nr, a->addr) != r || a->addr < at) continue; /* (overlaps cannot happen) */
            if (a->addr > at) block(p, at, (size_t)(a->addr - at), false, t, NULL);
            const size_t size = a->addr + a->bytes <= ar[r].addr + ar[r].bytes ? a->bytes : (size_t)(ar[r].addr + ar[r].bytes - a->addr);
            block(p, a->addr, size, true, t, a);
            at = a->addr + size;
        }
        if (at < ar[r].addr + ar[r].bytes) block(p, at, (size_t)(ar[r].addr + ar[r].bytes - at), false, t, NULL);
        list_end(p);
        dict_end(p);
    }
    for (int k = 0; k < n; k++) { /* every other allocation: a segment of one block */
        const tlm_mem_allocation *a = &al[live[k]];
        if (arena_of(ar, nr, a->addr) >= 0) continue;
        dict_begin(p);
        segment_head(p, device, a->addr, a->bytes, a->bytes);
        p_str(p, "blocks");
        list_begin(p);
        block(p, a->addr, a->bytes, true, t, a);
        list_end(p);
        dict_end(p);
    }
    list_end(p);
    free(live);
    return true;
}

static void trace_event(pk *p, const char *action, const tlm_mem_timeline *t, const tlm_mem_allocation *a,
                        double time_us, bool at_free) {
    dict_begin(p);
    p_str(p, "action");
    p_str(p, action);
    p_str(p, "addr");
    p_uint(p, a->addr);
    p_str(p, "size");
    p_int(p, (int64_t)a->bytes);
    p_str(p, "stream");
    p_int(p, 0);
    p_str(p, "time_us");
    p_int(p, (int64_t)time_us);
    p_str(p, "frames");
    frames(p, t, a, at_free);
    dict_end(p);
}

tlm_status tlm_mem_timeline_write_snapshot(const tlm_mem_timeline *t, const char *path, int device) {
    if (device < 0 || device > 1024) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "snapshot device %d", device);
    pk p = {0};
    op(&p, 0x80); /* PROTO 2 */
    op(&p, 2);
    dict_begin(&p);
    p_str(&p, "segments");
    bool ok = segments(&p, t, device);
    p_str(&p, "device_traces");
    list_begin(&p);
    for (int d = 0; d < device; d++) { /* the other devices' traces: empty */
        list_begin(&p);
        list_end(&p);
    }
    list_begin(&p);
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t);
    const tlm_mem_timeline_event *ev = tlm_mem_timeline_events(t);
    for (int i = 0; i < tlm_mem_timeline_num_events(t); i++) {
        const tlm_mem_allocation *a = &al[ev[i].allocation];
        if (ev[i].alloc) {
            trace_event(&p, "alloc", t, a, ev[i].time_us, false);
        } else { /* stream-ordered: requested and completed at once */
            trace_event(&p, "free_requested", t, a, ev[i].time_us, true);
            trace_event(&p, "free_completed", t, a, ev[i].time_us, true);
        }
    }
    list_end(&p);
    list_end(&p);
    dict_end(&p);
    op(&p, '.'); /* STOP */
    if (!ok || p.oom) {
        free(p.b);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory writing the snapshot %s", path);
    }
    const tlm_status s = tlm_output_write_file(path, p.b, p.n);
    free(p.b);
    return s;
}
