/* memory_plan.h — a static memory plan (internal to src/model): where in one arena each buffer of a
 * step lives. Every buffer has a size and a lifetime, a span [first, last] of the step's stages
 * (activations.h numbers them); two buffers whose lifetimes intersect get disjoint bytes, others may
 * share them. A buffer may have a fixed offset (the flat gradient buffer, whose groups must stay one
 * contiguous span); the others are placed greedily, largest first, each at the lowest offset where
 * it overlaps no placed buffer that lives at the same time ("greedy by size", the offset planner of
 * TensorFlow Lite's arena: Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
 * Inference", sec. 4.3). The plan is pure host computation: sizes for any shape are known without
 * allocating (tlm memory's OOM rows, the longest context that fits). */
#ifndef TLM_MODEL_MEMORY_PLAN_H
#define TLM_MODEL_MEMORY_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "tlm/status.h"

#define TLM_PLAN_ALIGN 256 /* bytes: every offset and size is a multiple (CUDA's vector loads, cuBLASLt) */

typedef struct {
    size_t bytes;      /* in: the buffer's size (rounded up to TLM_PLAN_ALIGN by the plan) */
    int first, last;   /* in: stages, inclusive, first <= last */
    int64_t fixed;     /* in: a fixed offset (a multiple of TLM_PLAN_ALIGN), or -1 */
    size_t offset;     /* out: bytes from the arena's start */
} tlm_plan_buffer;

/* Places buffers b[0..n): sets every offset and *arena_bytes (the end of the highest buffer).
 * Fixed buffers must not overlap each other where their lifetimes intersect (INVALID_ARGUMENT).
 * OUT_OF_MEMORY for the host tables. */
tlm_status tlm_memory_plan(tlm_plan_buffer *b, int n, size_t *arena_bytes);

/* The least arena any plan of b[0..n) needs: the most bytes alive at one stage (sizes rounded up). */
size_t tlm_memory_plan_lower_bound(const tlm_plan_buffer *b, int n);

#endif
