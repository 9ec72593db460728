/* memory.h — the tracked allocator, where memory events go. Every byte of backend memory (device
 * memory on CUDA, host memory on the CPU backend, the CPU ops' scratch included) is allocated
 * through tlm_alloc with a tag and a name; current and peak bytes are kept per tag and in total,
 * and every allocation and free is reported, with the scope it happened in (ops.h: phase, layer,
 * step, op count), to the listeners: the memory timeline (`tlm memory`), tests.
 *
 * Arenas: a memory plan (src/model/memory_plan.h: the step's activations, gradients and backward
 * scratch) reserves one arena and places buffers whose lifetimes do not overlap in the same bytes of
 * it. A buffer placed in an arena (tlm_alloc_in) is a tracked allocation like any other: counted per
 * tag in current and peak, reported to the listeners, freed with tlm_free; but it takes no device
 * memory of its own. The arena's bytes are counted apart, as reserved. So current_total is the bytes
 * live buffers hold (PyTorch's torch.cuda.memory_allocated) and footprint = current_total - placed +
 * reserved is what the backend holds from the device (memory_reserved, for tlm's allocator).
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
    size_t current_total, peak_total; /* bytes of live allocations, placed ones included */
    size_t live_allocations;
    size_t placed;                    /* bytes of live allocations placed in arenas (tlm_alloc_in) */
    size_t reserved;                  /* bytes of arenas reserved (tlm_arena_reserve) */
    size_t footprint, peak_footprint; /* current_total - placed + reserved: held from the device */
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
    size_t in_use;         /* tracked bytes in use after the event (current_total) */
    const void *arena;     /* the arena the allocation is placed in (tlm_alloc_in), else NULL */
    size_t footprint;      /* bytes held from the device after the event (tlm_mem_stats.footprint) */
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

/* Frees what tlm_alloc or tlm_alloc_in returned; NULL is a no-op; anything else is a programmer
 * error (fatal). A placed allocation gives nothing back to the device: its arena keeps the bytes. */
void tlm_free(tlm_backend *be, void *ptr);

/* ---- arenas --------------------------------------------------------------------------------------- */

/* Reserves an arena of `bytes` backend memory named `name` (aligned as tlm_alloc): counted in
 * reserved and footprint, not in current_total. Out of memory: NULL, the message as tlm_alloc's. */
void *tlm_arena_reserve(tlm_backend *be, size_t bytes, const char *name);

/* Gives an arena back to the device. Every allocation placed in it must have been freed (fatal
 * otherwise). NULL is a no-op. */
void tlm_arena_release(tlm_backend *be, void *arena);

/* Places an allocation of `bytes` at arena + offset, tagged and named as tlm_alloc's: counted and
 * reported like one, with e.arena set. [offset, offset + bytes) must lie inside the arena, and no
 * other live allocation may start at arena + offset (fatal otherwise); bytes may be 0 only where no
 * other live allocation starts at that address. Returns arena + offset, or NULL when the host is out
 * of memory for the allocator's table (OUT_OF_MEMORY). The caller keeps placed allocations whose
 * lifetimes overlap in disjoint bytes. */
void *tlm_alloc_in(tlm_backend *be, void *arena, size_t offset, size_t bytes, tlm_mem_tag tag, const char *name);

/* Calls fn for every arena reserved now: its address, size and name. */
void tlm_mem_for_each_arena(const tlm_backend *be,
                            void (*fn)(void *user, const void *arena, size_t bytes, const char *name), void *user);

/* The counters now. */
tlm_mem_stats tlm_mem_stats_now(const tlm_backend *be);

/* Resets the per-tag, total and footprint peaks to the current values. */
void tlm_mem_reset_peak(tlm_backend *be);

/* Calls fn for every live allocation, placed ones included (order unspecified): what is held now. */
void tlm_mem_for_each(const tlm_backend *be, void (*fn)(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag,
                                                        const char *name),
                      void *user);

#ifdef __cplusplus
}
#endif
#endif
