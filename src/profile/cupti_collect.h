/* cupti_collect.h — the CUPTI side of the profiler (cupti_collect.c), shared by tlm's recorder
 * (recorder.c) and the injection library (inject.c); internal to src/profile. One collection at a
 * time per process. Built only with CUPTI (TLM_HAVE_CUPTI).
 *
 * tlm mode: kernels, memcpy, memset, the runtime and driver API and external correlation records;
 * the recorder pushes the op (CUSTOM0) and the innermost range (CUSTOM1) as external correlation
 * ids, which become the profile's launches (correlation -> op, range); graph nodes created during
 * capture are mapped to the context set by tlm_cupti_set_context.
 * foreign mode: the same activity kinds without external ids; the launches are the API records
 * (correlation -> host time, thread), and NVTX ranges (inject.c) name what ran. */
#ifndef TLM_PROFILE_CUPTI_COLLECT_H
#define TLM_PROFILE_CUPTI_COLLECT_H

#include <stdint.h>
#include "tlm/profile.h"

typedef enum { TLM_CUPTI_TLM = 0, TLM_CUPTI_FOREIGN = 1 } tlm_cupti_mode;

/* Starts collecting into p (which must outlive tlm_cupti_end): the profile's origin is now.
 * Errors: INVALID_ARGUMENT (a collection is running), BACKEND (a CUPTI call failed, named). */
tlm_status tlm_cupti_begin(tlm_profile *p, tlm_cupti_mode mode);

/* CUPTI's clock (cuptiGetTimestamp), in ns since the origin. */
int64_t tlm_cupti_now(void);

/* External correlation ids (tlm mode): the op being dispatched and the innermost open range. A
 * failing CUPTI call is remembered and returned by tlm_cupti_end. */
void tlm_cupti_push_op(int32_t op);
void tlm_cupti_pop_op(void);
void tlm_cupti_push_range(int32_t range);
void tlm_cupti_pop_range(void);

/* What graph nodes created from now on, on this thread, belong to (-1: none). */
void tlm_cupti_set_context(int32_t op, int32_t range);

/* Locks the profile against the CUPTI callbacks of other threads (foreign mode appends ranges
 * from every thread). */
void tlm_cupti_lock(void);
void tlm_cupti_unlock(void);

/* Flushes CUPTI's buffers, stops collecting, and adds the records to the profile (activities,
 * launches; p->end_ns, p->dropped). Returns the first failure of the collection. */
tlm_status tlm_cupti_end(void);

#endif
