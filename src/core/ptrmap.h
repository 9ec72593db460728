/* ptrmap.h — a hash table keyed by address (internal to the library): open addressing, linear
 * probing, backward-shift deletion, a power-of-two capacity kept at most half full. An entry is
 * the caller's struct whose FIRST field is the key, a pointer or a uintptr_t; key 0 (NULL) marks
 * an empty slot, so 0 is no key. The hash is MurmurHash3's 64-bit finalizer (addresses differ in
 * their low bits). The allocator keeps its live allocations in one (core/memory.c), the memory
 * timeline its live addresses (memory/timeline.c). Not thread-safe. */
#ifndef TLM_CORE_PTRMAP_H
#define TLM_CORE_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A zeroed tlm_ptrmap is an empty map; tlm_ptrmap_reserve sets the entry size. */
typedef struct {
    void *slots;       /* capacity entries of entry_size bytes, in slot order */
    size_t entry_size; /* bytes per entry (set by the first tlm_ptrmap_reserve) */
    size_t capacity;   /* 0 or a power of two */
    size_t count;      /* entries in use */
} tlm_ptrmap;

/* Room for one more entry: when 2 (count + 1) > capacity, the table grows to first_capacity (a
 * power of two) or doubles. False when out of host memory (the map is unchanged). */
bool tlm_ptrmap_reserve(tlm_ptrmap *m, size_t entry_size, size_t first_capacity);

/* the entry of key, or NULL when absent */
void *tlm_ptrmap_find(const tlm_ptrmap *m, uintptr_t key);

/* The entry of key (key != 0): the one there (*found = true), else a new one, zero but for its key
 * (count + 1). Needs room: tlm_ptrmap_reserve first. */
void *tlm_ptrmap_put(tlm_ptrmap *m, uintptr_t key, bool *found);

/* Removes entry (from find or put; count - 1). Later entries of its probe run move back, so an
 * entry pointer held across a remove may point at another entry, or none. */
void tlm_ptrmap_remove(tlm_ptrmap *m, void *entry);

/* frees the table; the map is empty (and zeroed) after */
void tlm_ptrmap_free(tlm_ptrmap *m);

#endif
