/* memory_plan.c — the greedy offset planner (memory_plan.h): fixed buffers first, then the others
 * one by one, each at the lowest aligned offset that leaves it clear of every placed buffer whose
 * lifetime intersects its own; tried in three orders (by size, by birth, by death), the smallest
 * arena kept. */
#include "model/memory_plan.h"

#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t n) { return (n + TLM_PLAN_ALIGN - 1) / TLM_PLAN_ALIGN * TLM_PLAN_ALIGN; }

static int live_together(const tlm_plan_buffer *a, const tlm_plan_buffer *b) {
    return a->first <= b->last && b->first <= a->last;
}

/* The orders the greedy placement is tried in; the smallest arena wins. */
typedef enum { BY_SIZE = 0, BY_BIRTH, BY_DEATH, NUM_ORDERS } order_kind;

static const tlm_plan_buffer *sort_base;
static order_kind sort_kind;

static int cmp_int(int a, int b) { return a < b ? -1 : a > b; }

/* BY_SIZE: larger first, then born earlier; BY_BIRTH: born earlier first, then larger (one block's
 * buffers together, from the first block up); BY_DEATH: dies earlier first, then larger. Ties by
 * index: a total order, so the plan is the same on every machine. */
static int compare(const void *pa, const void *pb) {
    const int ia = *(const int *)pa, ib = *(const int *)pb;
    const tlm_plan_buffer *a = &sort_base[ia], *b = &sort_base[ib];
    const size_t sa = round_up(a->bytes), sb = round_up(b->bytes);
    const int size = sa != sb ? (sa > sb ? -1 : 1) : 0;
    int c = 0;
    switch (sort_kind) {
    case BY_SIZE: c = size ? size : cmp_int(a->first, b->first); break;
    case BY_BIRTH: c = a->first != b->first ? cmp_int(a->first, b->first) : size; break;
    case BY_DEATH: c = a->last != b->last ? cmp_int(a->last, b->last) : size; break;
    case NUM_ORDERS: break;
    }
    return c ? c : cmp_int(ia, ib);
}

/* [offset, end) spans of the placed buffers that conflict with the one being placed */
typedef struct {
    size_t begin, end;
} span;

static int by_begin(const void *pa, const void *pb) {
    const span *a = pa, *b = pb;
    return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* One greedy placement of the buffers that are not fixed, in order[0..m): each at the lowest offset
 * clear of the placed buffers it lives with. Returns the arena's end. */
static size_t place(tlm_plan_buffer *b, int n, const int *order, int m, char *placed, span *busy, size_t top) {
    for (int k = 0; k < m; k++) {
        tlm_plan_buffer *x = &b[order[k]];
        const size_t size = round_up(x->bytes);
        int nb = 0;
        for (int j = 0; j < n; j++)
            if (placed[j] && live_together(x, &b[j]) && b[j].bytes)
                busy[nb++] = (span){b[j].offset, b[j].offset + round_up(b[j].bytes)};
        qsort(busy, (size_t)nb, sizeof *busy, by_begin);
        size_t at = 0; /* the lowest gap of `size` bytes between the busy spans */
        for (int j = 0; j < nb; j++) {
            if (busy[j].begin >= at + size) break;
            if (busy[j].end > at) at = busy[j].end;
        }
        x->offset = at;
        placed[order[k]] = 1;
        if (at + size > top) top = at + size;
    }
    return top;
}

tlm_status tlm_memory_plan(tlm_plan_buffer *b, int n, size_t *arena_bytes) {
    *arena_bytes = 0;
    const size_t cnt = (size_t)(n ? n : 1);
    int *order = malloc(cnt * sizeof *order);
    span *busy = malloc(cnt * sizeof *busy);
    char *placed = calloc(cnt, 1), *fixed = calloc(cnt, 1);
    size_t *best = malloc(cnt * sizeof *best);
    if (!order || !busy || !placed || !fixed || !best) {
        free(order);
        free(busy);
        free(placed);
        free(fixed);
        free(best);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the memory plan (%d buffers)", n);
    }
    tlm_status s = TLM_OK;
    size_t top = 0;
    /* fixed buffers where they are asked to be */
    for (int i = 0; i < n && s == TLM_OK; i++) {
        if (b[i].fixed < 0) continue;
        b[i].offset = (size_t)b[i].fixed;
        const size_t end = b[i].offset + round_up(b[i].bytes);
        for (int j = 0; j < i; j++)
            if (fixed[j] && live_together(&b[i], &b[j]) && b[j].offset < end &&
                b[i].offset < b[j].offset + round_up(b[j].bytes))
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "memory plan: fixed buffers %d and %d overlap", j, i);
        fixed[i] = 1;
        if (end > top) top = end;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (b[i].fixed < 0) order[m++] = i;
    size_t best_top = (size_t)-1;
    for (int k = 0; k < NUM_ORDERS && s == TLM_OK; k++) {
        sort_base = b;
        sort_kind = (order_kind)k;
        qsort(order, (size_t)m, sizeof *order, compare);
        memcpy(placed, fixed, cnt);
        const size_t t = place(b, n, order, m, placed, busy, top);
        if (t < best_top) {
            best_top = t;
            for (int i = 0; i < n; i++) best[i] = b[i].offset;
        }
    }
    if (s == TLM_OK) {
        for (int i = 0; i < n; i++) b[i].offset = best[i];
        *arena_bytes = best_top;
    }
    free(order);
    free(busy);
    free(placed);
    free(fixed);
    free(best);
    return s;
}

size_t tlm_memory_plan_lower_bound(const tlm_plan_buffer *b, int n) {
    int last_stage = 0;
    for (int i = 0; i < n; i++)
        if (b[i].last > last_stage) last_stage = b[i].last;
    size_t best = 0;
    for (int t = 0; t <= last_stage; t++) {
        size_t live = 0;
        for (int i = 0; i < n; i++)
            if (b[i].first <= t && t <= b[i].last) live += round_up(b[i].bytes);
        if (live > best) best = live;
    }
    return best;
}
