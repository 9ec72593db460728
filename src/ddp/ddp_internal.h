/* ddp_internal.h — what the data-parallel reducer's files share (internal to src/ddp): the casts of
 * a span of gradients to and from the bf16 staging buffer, on a stream of the gradients' backend. */
#ifndef TLM_DDP_INTERNAL_H
#define TLM_DDP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlm/backend.h"

/* to_bf16: dst (n) bf16 = round to nearest even(src (n) float32); else dst (n) float32 = src (n)
 * bf16, exactly. Backend memory of be, issued on stream s (NULL: the compute stream); on the CPU done
 * when it returns. */
void tlm_ddp_cast(tlm_backend *be, tlm_stream *s, void *dst, const void *src, size_t n, bool to_bf16);

#ifdef TLM_HAVE_CUDA
/* cast.cu: the same on a CUDA stream */
void tlm_ddp_cuda_cast(tlm_backend *be, tlm_stream *s, void *dst, const void *src, size_t n, bool to_bf16);
#endif

#endif
