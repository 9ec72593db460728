/* memory.h — the tracked allocator, where memory events go. Every byte of backend memory (device
 * memory on CUDA, host memory on the CPU backend, the CPU ops' scratch included) is allocated
 * through tlm_alloc with a tag and a name; current and peak bytes are kept per tag and in total,
 * and every allocation and free is reported, with the scope it happened in (ops.h: phase, layer,
 * step, op count), to the listeners: the memory timeline (`tlm memory`), tests.
 *
 * A free is O(1) (a hash table from pointer to record). On CUDA memory is stream-ordered
 * (cudaMallocAsync / cudaFreeAsync on the compute stream): a free never synchronizes, and memory
 * freed while ops that use it are queued is reused only by work issued after them on the
 * compute stream (a buffer another stream used must be joined to the compute stream, with an
 * event, before it is freed). */
#ifndef TLM_MEMORY_H
#define TLM_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tlm/ops.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an allocation holds; memory is accounted per tag (current and peak bytes). */
typedef enum {
    TLM_MEM_PARAMETERS = 0, /* the float32 master weights and their bf16/fp16 GEMM copy */
    TLM_MEM_GRADIENTS,
    TLM_MEM_OPTIMIZER,      /* AdamW first and second moments */
    TLM_MEM_ACTIVATIONS,    /* saved for backward, and the passes' scratch */
    TLM_MEM_WORKSPACE,      /* everything else: RoPE tables, tokens, losses, library workspaces,
                               the CPU ops' scratch */
    TLM_MEM_NUM_TAGS
} tlm_mem_tag;

const char *tlm_mem_tag_name(tlm_mem_tag tag); /* "parameters", "gradients", ... */

/* Current and peak bytes, per tag and in total. Peaks since creation or tlm_mem_reset_peak. */
typedef struct {
    size_t current[TLM_MEM_NUM_TAGS], peak[TLM_MEM_NUM_TAGS];
    size_t current_total, peak_total;
    size_t live_allocations;
} tlm_mem_stats;

typedef enum { TLM_MEM_ALLOC = 0, TLM_MEM_FREE = 1 } tlm_mem_action;

/* One allocation or free, as a listener sees it. */
typedef struct {
    tlm_mem_action action;
    const void *ptr;
    size_t bytes;          /* the allocation's size (for a free: what it had) */
    tlm_mem_tag tag;
    const char *name;      /* "layers.7.ffn.w13_out"; valid during the callback */
    tlm_scope scope;       /* ops.h: phase, layer, step and ops dispatched so far */
    double time_us;        /* host clock, microseconds since the backend was created */
    size_t in_use;         /* tracked bytes in use after the event */
} tlm_mem_event;

typedef struct tlm_mem_listener {
    void *user;
    void (*event)(void *user, const tlm_mem_event *e);
} tlm_mem_listener;

#define TLM_MAX_MEM_LISTENERS 4

/* Adds a listener (copied; TLM_ERR_INVALID_ARGUMENT when TLM_MAX_MEM_LISTENERS are set); removes
 * the one whose user and callback equal l's. */
tlm_status tlm_mem_listener_add(tlm_backend *be, const tlm_mem_listener *l);
void tlm_mem_listener_remove(tlm_backend *be, const tlm_mem_listener *l);

/* Allocates `bytes` of backend memory (64-byte aligned on the CPU, 256 on CUDA) tagged `tag` and
 * named `name` (copied; at most 63 characters kept). bytes == 0 returns a unique non-NULL pointer.
 * Out of memory: NULL, and the message (TLM_ERR_OUT_OF_MEMORY) names `name`, the bytes asked for
 * and the bytes in use; the caller returns TLM_ERR_OUT_OF_MEMORY. */
void *tlm_alloc(tlm_backend *be, size_t bytes, tlm_mem_tag tag, const char *name);

/* Frees what tlm_alloc returned; NULL is a no-op; anything else is a programmer error (fatal). */
void tlm_free(tlm_backend *be, void *ptr);

/* The counters now. */
tlm_mem_stats tlm_mem_stats_now(const tlm_backend *be);

/* Resets the per-tag and total peaks to the current values. */
void tlm_mem_reset_peak(tlm_backend *be);

/* Calls fn for every live allocation (order unspecified): what is held now, for reports. */
void tlm_mem_for_each(const tlm_backend *be, void (*fn)(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag,
                                                        const char *name),
                      void *user);

#ifdef __cplusplus
}
#endif
#endif
