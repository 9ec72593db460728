/* backend_state.h — the generic part of every backend (internal to src/core): the tracked
 * allocator's table and counters, the memory listeners, the dispatch's hooks and the current
 * scope. backend.c creates it, memory.c keeps the allocator, dispatch.c the hooks and scope. */
#ifndef TLM_CORE_BACKEND_STATE_H
#define TLM_CORE_BACKEND_STATE_H

#include "core/ptrmap.h"
#include "tlm/backend.h"

/* one live allocation: an entry of the allocator's ptrmap, keyed by ptr */
typedef struct {
    void *ptr;           /* the key (first field); NULL: an empty slot */
    size_t bytes;
    tlm_mem_tag tag;
    void *arena;         /* the arena it is placed in (tlm_alloc_in), else NULL */
    char name[64];
} tlm_mem_record;

/* one reserved arena (memory.h) */
typedef struct {
    void *ptr;
    size_t bytes;
    int live;            /* allocations placed in it and not yet freed */
    char name[64];
} tlm_arena_record;

struct tlm_backend_state {
    /* allocator (memory.c) */
    tlm_ptrmap live;     /* the live allocations: tlm_mem_record entries keyed by ptr */
    tlm_mem_stats stats;
    tlm_mem_listener listeners[TLM_MAX_MEM_LISTENERS];
    int num_listeners;
    double created_us;   /* host clock at creation: memory events' time origin */
    tlm_arena_record *arenas; /* the reserved arenas, [num_arenas] of capacity arenas_cap */
    int num_arenas, arenas_cap;

    /* dispatch (dispatch.c) */
    tlm_hook hooks[TLM_MAX_HOOKS];
    int num_hooks;
    tlm_scope scope;
    char step_name[32], layer_name[32];

    /* the side stream (backend.c): a section is open; its ops go to the side stream */
    bool side_open, side_active;
    bool stream_ops_open;      /* between tlm_stream_ops_begin and _end */
};

double tlm_host_clock_us(void);               /* backend.c: CLOCK_MONOTONIC in microseconds */
void tlm_mem_state_free(tlm_backend *be);     /* memory.c: frees every live allocation, the table */

#endif
