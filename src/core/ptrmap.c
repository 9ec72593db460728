/* ptrmap.c — the address-keyed hash table (ptrmap.h). */
#include "core/ptrmap.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(void *) == sizeof(uintptr_t), "an entry's first field, a pointer, reads as a uintptr_t");

static size_t slot_of(uintptr_t key, size_t capacity) {
    uint64_t h = (uint64_t)key;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL; /* MurmurHash3's finalizer: pointers differ in their low bits */
    h ^= h >> 33;
    return (size_t)h & (capacity - 1);
}

static char *entry_at(const tlm_ptrmap *m, size_t i) { return (char *)m->slots + i * m->entry_size; }

/* an entry's key (its first field; memcpy: the field is the caller's pointer or uintptr_t) */
static uintptr_t key_at(const tlm_ptrmap *m, size_t i) {
    uintptr_t k;
    memcpy(&k, entry_at(m, i), sizeof k);
    return k;
}

/* the slot of key, or the empty slot that ends its probe run (capacity > count) */
static size_t probe(const tlm_ptrmap *m, uintptr_t key) {
    size_t j = slot_of(key, m->capacity);
    for (uintptr_t k; (k = key_at(m, j)) && k != key;) j = (j + 1) & (m->capacity - 1);
    return j;
}

bool tlm_ptrmap_reserve(tlm_ptrmap *m, size_t entry_size, size_t first_capacity) {
    if (2 * (m->count + 1) <= m->capacity) return true;
    const size_t cap = m->capacity ? 2 * m->capacity : first_capacity;
    tlm_ptrmap bigger = {calloc(cap, entry_size), entry_size, cap, m->count};
    if (!bigger.slots) return false;
    for (size_t i = 0; i < m->capacity; i++) {
        const uintptr_t k = key_at(m, i);
        if (k) memcpy(entry_at(&bigger, probe(&bigger, k)), entry_at(m, i), entry_size);
    }
    free(m->slots);
    *m = bigger;
    return true;
}

void *tlm_ptrmap_find(const tlm_ptrmap *m, uintptr_t key) {
    if (!m->capacity) return NULL;
    const size_t j = probe(m, key);
    return key_at(m, j) ? entry_at(m, j) : NULL;
}

void *tlm_ptrmap_put(tlm_ptrmap *m, uintptr_t key, bool *found) {
    char *e = entry_at(m, probe(m, key));
    uintptr_t k;
    memcpy(&k, e, sizeof k);
    *found = k != 0;
    if (!k) {
        memcpy(e, &key, sizeof key);
        m->count++;
    }
    return e;
}

void tlm_ptrmap_remove(tlm_ptrmap *m, void *entry) {
    const size_t mask = m->capacity - 1;
    size_t hole = (size_t)((char *)entry - (char *)m->slots) / m->entry_size;
    /* backward-shift deletion: an entry of the run after the hole moves into it unless its home
     * slot lies in (hole, k] (cyclically), where it would no longer be found */
    for (size_t k = (hole + 1) & mask; key_at(m, k); k = (k + 1) & mask) {
        const size_t home = slot_of(key_at(m, k), m->capacity);
        const bool stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (stays) continue;
        memcpy(entry_at(m, hole), entry_at(m, k), m->entry_size);
        hole = k;
    }
    memset(entry_at(m, hole), 0, m->entry_size);
    m->count--;
}

void tlm_ptrmap_free(tlm_ptrmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}
