/* memory.c — the tracked allocator shared by every backend (memory.h): each allocation carries a
 * tag and a name; current and peak bytes are kept per tag and in total; every allocation and free
 * goes to the listeners with the current scope. Live allocations sit in an open-addressing hash
 * table keyed by pointer (linear probing, backward-shift deletion), so a free is O(1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_state.h"

const char *tlm_mem_tag_name(tlm_mem_tag tag) {
    static const char *names[TLM_MEM_NUM_TAGS] = {"parameters", "gradients", "optimizer", "activations",
                                                  "workspace"};
    return (unsigned)tag < TLM_MEM_NUM_TAGS ? names[tag] : "unknown";
}

static size_t slot_of(const void *ptr, size_t capacity) {
    uint64_t h = (uint64_t)(uintptr_t)ptr;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL; /* MurmurHash3's finalizer: pointers differ in their low bits */
    h ^= h >> 33;
    return (size_t)h & (capacity - 1);
}

/* doubles the table (or creates it); false when out of host memory */
static bool grow(struct tlm_backend_state *s) {
    const size_t cap = s->capacity ? 2 * s->capacity : 256;
    tlm_mem_record *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < s->capacity; i++) {
        if (!s->table[i].ptr) continue;
        size_t j = slot_of(s->table[i].ptr, cap);
        while (t[j].ptr) j = (j + 1) & (cap - 1);
        t[j] = s->table[i];
    }
    free(s->table);
    s->table = t;
    s->capacity = cap;
    return true;
}

static void notify(tlm_backend *be, tlm_mem_action action, const tlm_mem_record *r) {
    struct tlm_backend_state *s = be->state;
    if (!s->num_listeners) return;
    const tlm_mem_event e = {.action = action,
                             .ptr = r->ptr,
                             .bytes = r->bytes,
                             .tag = r->tag,
                             .name = r->name,
                             .scope = s->scope,
                             .time_us = tlm_host_clock_us() - s->created_us,
                             .in_use = s->stats.current_total};
    for (int i = 0; i < s->num_listeners; i++) s->listeners[i].event(s->listeners[i].user, &e);
}

static void format_gib(char *buf, size_t n, size_t bytes) {
    snprintf(buf, n, "%.3f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

void *tlm_alloc(tlm_backend *be, size_t bytes, tlm_mem_tag tag, const char *name) {
    TLM_ASSERT(be && (unsigned)tag < TLM_MEM_NUM_TAGS);
    struct tlm_backend_state *s = be->state;
    if (2 * (s->stats.live_allocations + 1) > s->capacity && !grow(s)) {
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the allocation table ('%s')", name ? name : "?");
        return NULL;
    }
    void *ptr = be->iface->raw_alloc(be, bytes ? bytes : 1);
    if (!ptr) {
        char want[32], have[32];
        format_gib(want, sizeof want, bytes);
        format_gib(have, sizeof have, s->stats.current_total);
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s backend out of memory: asked for %zu bytes (%s) for '%s' (%s) with %s in use",
                 be->name, bytes, want, name ? name : "?", tlm_mem_tag_name(tag), have);
        return NULL;
    }
    size_t j = slot_of(ptr, s->capacity);
    while (s->table[j].ptr) j = (j + 1) & (s->capacity - 1);
    tlm_mem_record *r = &s->table[j];
    r->ptr = ptr;
    r->bytes = bytes;
    r->tag = tag;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    tlm_mem_stats *st = &s->stats;
    st->live_allocations++;
    st->current[tag] += bytes;
    st->current_total += bytes;
    if (st->current[tag] > st->peak[tag]) st->peak[tag] = st->current[tag];
    if (st->current_total > st->peak_total) st->peak_total = st->current_total;
    notify(be, TLM_MEM_ALLOC, r);
    return ptr;
}

void tlm_free(tlm_backend *be, void *ptr) {
    if (!ptr) return;
    struct tlm_backend_state *s = be->state;
    size_t j = s->capacity ? slot_of(ptr, s->capacity) : 0;
    while (s->capacity && s->table[j].ptr && s->table[j].ptr != ptr) j = (j + 1) & (s->capacity - 1);
    if (!s->capacity || s->table[j].ptr != ptr) tlm_fatal("tlm_free: %p was not allocated by the %s backend", ptr, be->name);
    tlm_mem_record r = s->table[j];
    s->stats.live_allocations--;
    s->stats.current[r.tag] -= r.bytes;
    s->stats.current_total -= r.bytes;
    /* backward-shift deletion: pull later entries of the probe run into the hole */
    size_t hole = j;
    for (size_t k = (j + 1) & (s->capacity - 1); s->table[k].ptr; k = (k + 1) & (s->capacity - 1)) {
        const size_t home = slot_of(s->table[k].ptr, s->capacity);
        /* k may move to the hole when its home is not in (hole, k] (cyclically) */
        const bool stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (stays) continue;
        s->table[hole] = s->table[k];
        hole = k;
    }
    s->table[hole].ptr = NULL;
    notify(be, TLM_MEM_FREE, &r);
    be->iface->raw_free(be, ptr);
}

tlm_mem_stats tlm_mem_stats_now(const tlm_backend *be) { return be->state->stats; }

void tlm_mem_reset_peak(tlm_backend *be) {
    tlm_mem_stats *st = &be->state->stats;
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) st->peak[t] = st->current[t];
    st->peak_total = st->current_total;
}

void tlm_mem_for_each(const tlm_backend *be,
                      void (*fn)(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name),
                      void *user) {
    const struct tlm_backend_state *s = be->state;
    for (size_t i = 0; i < s->capacity; i++)
        if (s->table[i].ptr) fn(user, s->table[i].ptr, s->table[i].bytes, s->table[i].tag, s->table[i].name);
}

tlm_status tlm_mem_listener_add(tlm_backend *be, const tlm_mem_listener *l) {
    struct tlm_backend_state *s = be->state;
    if (!l || !l->event) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "memory listener without a callback");
    if (s->num_listeners == TLM_MAX_MEM_LISTENERS)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "at most %d memory listeners", TLM_MAX_MEM_LISTENERS);
    s->listeners[s->num_listeners++] = *l;
    return TLM_OK;
}

void tlm_mem_listener_remove(tlm_backend *be, const tlm_mem_listener *l) {
    struct tlm_backend_state *s = be->state;
    for (int i = 0; i < s->num_listeners; i++)
        if (s->listeners[i].user == l->user && s->listeners[i].event == l->event) {
            memmove(&s->listeners[i], &s->listeners[i + 1], (size_t)(s->num_listeners - i - 1) * sizeof *l);
            s->num_listeners--;
            return;
        }
}

void tlm_mem_state_free(tlm_backend *be) {
    struct tlm_backend_state *s = be->state;
    /* tlm_free shifts entries back into the freed slot: look at a slot until it is empty, and
     * scan again while anything is left */
    while (s->stats.live_allocations)
        for (size_t i = 0; i < s->capacity; i++)
            while (s->table[i].ptr) tlm_free(be, s->table[i].ptr);
    free(s->table);
    s->table = NULL;
    s->capacity = 0;
}
