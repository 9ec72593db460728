/* memory.c — the tracked allocator shared by every backend (memory.h): each allocation carries a
 * tag and a name; current and peak bytes are kept per tag and in total; every allocation and free
 * goes to the listeners with the current scope; arenas hold placed allocations (counted as
 * allocations, their bytes as reserved). Live allocations sit in a hash table keyed by pointer
 * (ptrmap.h), so a free is O(1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_state.h"

const char *tlm_mem_tag_name(tlm_mem_tag tag) {
    static const char *names[TLM_MEM_NUM_TAGS] = {"parameters", "gradients", "optimizer", "activations",
                                                  "workspace"};
    return (unsigned)tag < TLM_MEM_NUM_TAGS ? names[tag] : "unknown";
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
                             .in_use = s->stats.current_total,
                             .arena = r->arena,
                             .footprint = s->stats.footprint};
    for (int i = 0; i < s->num_listeners; i++) s->listeners[i].event(s->listeners[i].user, &e);
}

/* footprint = what live allocations hold, less what arenas hold for them, plus the arenas */
static void update_footprint(tlm_mem_stats *st) {
    st->footprint = st->current_total - st->placed + st->reserved;
    if (st->footprint > st->peak_footprint) st->peak_footprint = st->footprint;
}

static void format_gib(char *buf, size_t n, size_t bytes) {
    snprintf(buf, n, "%.3f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

/* room in the table for one more record; false (message set) when out of host memory */
static bool table_room(struct tlm_backend_state *s, const char *name) {
    if (tlm_ptrmap_reserve(&s->live, sizeof(tlm_mem_record), 256)) return true;
    tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the allocation table ('%s')", name ? name : "?");
    return false;
}

/* the message of a device allocation that failed */
static void out_of_memory(tlm_backend *be, size_t bytes, const char *name, const char *what) {
    char want[32], have[32];
    format_gib(want, sizeof want, bytes);
    format_gib(have, sizeof have, be->state->stats.footprint);
    tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s backend out of memory: asked for %zu bytes (%s) for '%s' (%s) with %s in use",
             be->name, bytes, want, name ? name : "?", what, have);
}

/* enters a live allocation (table_room checked) and tells the listeners */
static void record(tlm_backend *be, void *ptr, size_t bytes, tlm_mem_tag tag, const char *name, void *arena) {
    struct tlm_backend_state *s = be->state;
    bool taken;
    tlm_mem_record *r = tlm_ptrmap_put(&s->live, (uintptr_t)ptr, &taken);
    if (taken) tlm_fatal("tlm_alloc_in: '%s' at %p: a live allocation starts there", name, ptr);
    r->bytes = bytes;
    r->tag = tag;
    r->arena = arena;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    tlm_mem_stats *st = &s->stats;
    st->live_allocations++;
    st->current[tag] += bytes;
    st->current_total += bytes;
    if (arena) st->placed += bytes;
    if (st->current[tag] > st->peak[tag]) st->peak[tag] = st->current[tag];
    if (st->current_total > st->peak_total) st->peak_total = st->current_total;
    update_footprint(st);
    notify(be, TLM_MEM_ALLOC, r);
}

void *tlm_alloc(tlm_backend *be, size_t bytes, tlm_mem_tag tag, const char *name) {
    TLM_ASSERT(be && (unsigned)tag < TLM_MEM_NUM_TAGS);
    if (!table_room(be->state, name)) return NULL;
    void *ptr = be->iface->raw_alloc(be, bytes ? bytes : 1);
    if (!ptr) {
        out_of_memory(be, bytes, name, tlm_mem_tag_name(tag));
        return NULL;
    }
    record(be, ptr, bytes, tag, name, NULL);
    return ptr;
}

static tlm_arena_record *find_arena(struct tlm_backend_state *s, const void *arena) {
    for (int i = 0; i < s->num_arenas; i++)
        if (s->arenas[i].ptr == arena) return &s->arenas[i];
    return NULL;
}

void *tlm_arena_reserve(tlm_backend *be, size_t bytes, const char *name) {
    struct tlm_backend_state *s = be->state;
    if (s->num_arenas == s->arenas_cap) {
        const int cap = s->arenas_cap ? 2 * s->arenas_cap : 4;
        tlm_arena_record *a = realloc(s->arenas, (size_t)cap * sizeof *a);
        if (!a) {
            tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the arena table ('%s')", name ? name : "?");
            return NULL;
        }
        s->arenas = a;
        s->arenas_cap = cap;
    }
    void *ptr = be->iface->raw_alloc(be, bytes ? bytes : 1);
    if (!ptr) {
        out_of_memory(be, bytes, name, "arena");
        return NULL;
    }
    tlm_arena_record *a = &s->arenas[s->num_arenas++];
    a->ptr = ptr;
    a->bytes = bytes;
    a->live = 0;
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    s->stats.reserved += bytes;
    update_footprint(&s->stats);
    return ptr;
}

void tlm_arena_release(tlm_backend *be, void *arena) {
    if (!arena) return;
    struct tlm_backend_state *s = be->state;
    tlm_arena_record *a = find_arena(s, arena);
    if (!a) tlm_fatal("tlm_arena_release: %p is not an arena of the %s backend", arena, be->name);
    if (a->live) tlm_fatal("tlm_arena_release: arena '%s' still holds %d allocations", a->name, a->live);
    s->stats.reserved -= a->bytes;
    update_footprint(&s->stats);
    *a = s->arenas[--s->num_arenas];
    be->iface->raw_free(be, arena);
}

void *tlm_alloc_in(tlm_backend *be, void *arena, size_t offset, size_t bytes, tlm_mem_tag tag, const char *name) {
    TLM_ASSERT(be && (unsigned)tag < TLM_MEM_NUM_TAGS);
    struct tlm_backend_state *s = be->state;
    tlm_arena_record *a = find_arena(s, arena);
    if (!a) tlm_fatal("tlm_alloc_in: '%s': %p is not an arena of the %s backend", name ? name : "?", arena, be->name);
    if (offset > a->bytes || bytes > a->bytes - offset)
        tlm_fatal("tlm_alloc_in: '%s' [%zu, +%zu) outside arena '%s' of %zu bytes", name ? name : "?", offset, bytes,
                  a->name, a->bytes);
    if (!table_room(s, name)) return NULL;
    void *ptr = (char *)arena + offset;
    a->live++;
    record(be, ptr, bytes, tag, name, arena);
    return ptr;
}

void tlm_mem_for_each_arena(const tlm_backend *be,
                            void (*fn)(void *user, const void *arena, size_t bytes, const char *name), void *user) {
    const struct tlm_backend_state *s = be->state;
    for (int i = 0; i < s->num_arenas; i++) fn(user, s->arenas[i].ptr, s->arenas[i].bytes, s->arenas[i].name);
}

void tlm_free(tlm_backend *be, void *ptr) {
    if (!ptr) return;
    struct tlm_backend_state *s = be->state;
    tlm_mem_record *e = tlm_ptrmap_find(&s->live, (uintptr_t)ptr);
    if (!e) tlm_fatal("tlm_free: %p was not allocated by the %s backend", ptr, be->name);
    const tlm_mem_record r = *e;
    tlm_ptrmap_remove(&s->live, e);
    s->stats.live_allocations--;
    s->stats.current[r.tag] -= r.bytes;
    s->stats.current_total -= r.bytes;
    if (r.arena) {
        s->stats.placed -= r.bytes;
        find_arena(s, r.arena)->live--;
    }
    update_footprint(&s->stats);
    notify(be, TLM_MEM_FREE, &r);
    if (!r.arena) be->iface->raw_free(be, ptr); /* a placed allocation's bytes stay with its arena */
}

tlm_mem_stats tlm_mem_stats_now(const tlm_backend *be) { return be->state->stats; }

void tlm_mem_reset_peak(tlm_backend *be) {
    tlm_mem_stats *st = &be->state->stats;
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) st->peak[t] = st->current[t];
    st->peak_total = st->current_total;
    st->peak_footprint = st->footprint;
}

void tlm_mem_for_each(const tlm_backend *be,
                      void (*fn)(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name),
                      void *user) {
    const tlm_mem_record *table = be->state->live.slots;
    for (size_t i = 0; i < be->state->live.capacity; i++)
        if (table[i].ptr) fn(user, table[i].ptr, table[i].bytes, table[i].tag, table[i].name);
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
    const tlm_mem_record *table = s->live.slots;
    while (s->stats.live_allocations)
        for (size_t i = 0; i < s->live.capacity; i++)
            while (table[i].ptr) tlm_free(be, table[i].ptr);
    tlm_ptrmap_free(&s->live);
    while (s->num_arenas) tlm_arena_release(be, s->arenas[0].ptr);
    free(s->arenas);
    s->arenas = NULL;
    s->arenas_cap = 0;
}
