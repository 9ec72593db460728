/* backend.c — the tracked allocator shared by every backend: each allocation carries a tag
 * and a name; current and peak bytes are kept per tag and in total. */
#include "tlm/backend.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct tlm_allocation {
    void *ptr;
    size_t bytes;
    tlm_mem_tag tag;
    char name[64];
    struct tlm_allocation *next;
};

const char *tlm_mem_tag_name(tlm_mem_tag tag) {
    static const char *names[TLM_MEM_NUM_TAGS] = {"parameters", "gradients", "optimizer",
                                                  "activations", "workspace"};
    return (unsigned)tag < TLM_MEM_NUM_TAGS ? names[tag] : "unknown";
}

static int format_bytes_gib(char *buf, size_t n, size_t bytes) {
    return snprintf(buf, n, "%.3f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

void *tlm_alloc(tlm_backend *be, size_t bytes, tlm_mem_tag tag, const char *name) {
    TLM_ASSERT(be && (unsigned)tag < TLM_MEM_NUM_TAGS);
    struct tlm_allocation *a = calloc(1, sizeof *a);
    if (!a) {
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory allocating the record of '%s'", name);
        return NULL;
    }
    a->ptr = be->raw_alloc(be, bytes ? bytes : 1);
    if (!a->ptr) {
        char want[32], have[32];
        format_bytes_gib(want, sizeof want, bytes);
        format_bytes_gib(have, sizeof have, be->mem_current_total);
        tlm_fail(TLM_ERR_OUT_OF_MEMORY,
                 "%s backend out of memory: asked for %zu bytes (%s) for '%s' (%s) with %s in use",
                 be->name, bytes, want, name ? name : "?", tlm_mem_tag_name(tag), have);
        free(a);
        return NULL;
    }
    a->bytes = bytes;
    a->tag = tag;
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    a->next = be->allocations;
    be->allocations = a;
    be->mem_current[tag] += bytes;
    be->mem_current_total += bytes;
    if (be->mem_current[tag] > be->mem_peak[tag]) be->mem_peak[tag] = be->mem_current[tag];
    if (be->mem_current_total > be->mem_peak_total) be->mem_peak_total = be->mem_current_total;
    return a->ptr;
}

void tlm_free(tlm_backend *be, void *ptr) {
    if (!ptr) return;
    for (struct tlm_allocation **p = &be->allocations; *p; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            struct tlm_allocation *a = *p;
            *p = a->next;
            be->mem_current[a->tag] -= a->bytes;
            be->mem_current_total -= a->bytes;
            be->raw_free(be, a->ptr);
            free(a);
            return;
        }
    }
    tlm_fatal("tlm_free: %p was not allocated by the %s backend", ptr, be->name);
}

void tlm_mem_reset_peak(tlm_backend *be) {
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) be->mem_peak[t] = be->mem_current[t];
    be->mem_peak_total = be->mem_current_total;
}

void tlm_backend_destroy(tlm_backend *be) {
    if (!be) return;
    while (be->allocations) tlm_free(be, be->allocations->ptr);
    if (be->destroy) be->destroy(be);
    free(be);
}
