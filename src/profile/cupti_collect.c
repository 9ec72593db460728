/* cupti_collect.c — CUPTI's Activity API and callbacks for the profiler (cupti_collect.h).
 * Source: NVIDIA CUPTI documentation, "Activity API" (asynchronous buffers: cuptiActivity-
 * RegisterCallbacks, cuptiActivityFlushAll, cuptiActivityGetNextRecord), "External correlation"
 * (cuptiActivityPushExternalCorrelationId: each API record made while an id is pushed is preceded
 * by a CUpti_ActivityExternalCorrelation record per kind), "CUDA graphs" (kernel records carry
 * graphNodeId; CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED / _CLONED with cuptiGetGraphNodeId map the
 * nodes of a captured graph, and of the executable graph cloned from it, to their creator).
 *
 * CUPTI hands completed buffers over on its own thread: they are kept as they are (under a lock)
 * and parsed at the end, on the caller's thread, so that only one thread ever writes the profile's
 * activities. Kernel names are CUPTI's strings, valid while the module is loaded: parsed before
 * anything unloads. */
#include "profile/cupti_collect.h"

#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES ((size_t)8 << 20) /* one activity buffer: 8 MiB */

typedef struct {
    uint8_t *data;
    size_t valid;
} buffer;

static struct {
    bool active, registered;
    tlm_cupti_mode mode;
    tlm_profile *p;
    uint64_t origin;
    CUpti_SubscriberHandle subscriber;
    pthread_mutex_t buffers_lock, profile_lock;
    buffer *buffers;
    size_t n_buffers, cap_buffers;
    uint64_t dropped;
    bool out_of_memory;
    tlm_status error;         /* the first failure during the collection */
    char error_text[512];
} C = {.buffers_lock = PTHREAD_MUTEX_INITIALIZER, .profile_lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int32_t ctx_op = -1, ctx_range = -1;

static const char *cupti_error(CUptiResult r) {
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    return s;
}

/* a CUPTI call made while setting up or ending: its failure is returned */
#define CUPTI_TRY(call)                                                                                      \
    do {                                                                                                     \
        const CUptiResult r_ = (call);                                                                       \
        if (r_ != CUPTI_SUCCESS) return tlm_fail(TLM_ERR_BACKEND, "CUPTI: %s: %s", #call, cupti_error(r_));  \
    } while (0)

/* a CUPTI call inside a hook or callback, which cannot return it: the first failure is kept */
static void remember(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS || C.error != TLM_OK) return;
    C.error = TLM_ERR_BACKEND;
    snprintf(C.error_text, sizeof C.error_text, "CUPTI: %s: %s", what, cupti_error(r));
}
#define CUPTI_KEEP(call) remember((call), #call)

/* ---- buffers ---------------------------------------------------------------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **data, size_t *size, size_t *max_records) {
    *data = aligned_alloc(8, BUFFER_BYTES); /* NULL: CUPTI drops records and counts them */
    *size = *data ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *data, size_t size, size_t valid) {
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
    pthread_mutex_lock(&C.buffers_lock);
    C.dropped += dropped;
    if (valid == 0) {
        free(data);
    } else if (C.n_buffers == C.cap_buffers) {
        const size_t cap = C.cap_buffers ? 2 * C.cap_buffers : 16;
        buffer *b = realloc(C.buffers, cap * sizeof *b);
        if (b) {
            C.buffers = b;
            C.cap_buffers = cap;
            C.buffers[C.n_buffers++] = (buffer){data, valid};
        } else {
            C.out_of_memory = true;
            free(data);
        }
    } else {
        C.buffers[C.n_buffers++] = (buffer){data, valid};
    }
    pthread_mutex_unlock(&C.buffers_lock);
}

/* ---- graph nodes ----------------------------------------------------------------------------------- */

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || !C.active) return;
    if (cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED && cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) return;
    const CUpti_GraphData *g = (const CUpti_GraphData *)((const CUpti_ResourceData *)data)->resourceDescriptor;
    uint64_t id = 0;
    CUptiResult r = cuptiGetGraphNodeId(g->node, &id);
    if (r != CUPTI_SUCCESS) {
        CUPTI_KEEP(r);
        return;
    }
    tlm_prof_graph_node node = {id, ctx_op, ctx_range};
    pthread_mutex_lock(&C.profile_lock);
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) { /* the executable graph's copy: its original's owner */
        uint64_t original = 0;
        r = cuptiGetGraphNodeId(g->originalNode, &original);
        CUPTI_KEEP(r);
        node.op = node.range = -1;
        for (size_t i = C.p->n_nodes; r == CUPTI_SUCCESS && i > 0; i--)
            if (C.p->nodes[i - 1].node == original) {
                node.op = C.p->nodes[i - 1].op;
                node.range = C.p->nodes[i - 1].range;
                break;
            }
    }
    /* a node made outside any op or range (instantiation's own copies) says nothing */
    if ((node.op >= 0 || node.range >= 0) && tlm_profile_add_node(C.p, &node) < 0) C.out_of_memory = true;
    pthread_mutex_unlock(&C.profile_lock);
}

void tlm_cupti_set_context(int32_t op, int32_t range) {
    ctx_op = op;
    ctx_range = range;
}

void tlm_cupti_lock(void) { pthread_mutex_lock(&C.profile_lock); }
void tlm_cupti_unlock(void) { pthread_mutex_unlock(&C.profile_lock); }

/* ---- external correlation ---------------------------------------------------------------------------- */

void tlm_cupti_push_op(int32_t op) {
    CUPTI_KEEP(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)op));
}

void tlm_cupti_pop_op(void) {
    uint64_t last;
    CUPTI_KEEP(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
}

void tlm_cupti_push_range(int32_t range) {
    CUPTI_KEEP(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, (uint64_t)range));
}

void tlm_cupti_pop_range(void) {
    uint64_t last;
    CUPTI_KEEP(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, &last));
}

int64_t tlm_cupti_now(void) {
    uint64_t t = 0;
    CUPTI_KEEP(cuptiGetTimestamp(&t));
    return (int64_t)(t - C.origin);
}

/* ---- begin and end ------------------------------------------------------------------------------------ */

static const CUpti_ActivityKind KINDS[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_RUNTIME,
                                           CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
enum { N_KINDS = sizeof KINDS / sizeof KINDS[0] };

static tlm_status enable_all(bool on) {
    const int n = C.mode == TLM_CUPTI_TLM ? N_KINDS : N_KINDS - 1; /* foreign: no external ids */
    for (int i = 0; i < n; i++) {
        if (on) CUPTI_TRY(cuptiActivityEnable(KINDS[i]));
        else CUPTI_TRY(cuptiActivityDisable(KINDS[i]));
    }
    CUPTI_TRY(cuptiEnableCallback(on, C.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
    CUPTI_TRY(cuptiEnableCallback(on, C.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
    return TLM_OK;
}

tlm_status tlm_cupti_begin(tlm_profile *p, tlm_cupti_mode mode) {
    if (C.active) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a CUPTI collection is already running");
    if (!C.registered) { /* once per process: CUPTI has one set of buffer callbacks and one subscriber */
        CUPTI_TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
        CUPTI_TRY(cuptiSubscribe(&C.subscriber, on_callback, NULL));
        CUPTI_TRY(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)); /* gettid, as NVTX ranges record */
        C.registered = true;
    }
    C.p = p;
    C.mode = mode;
    C.error = TLM_OK;
    C.dropped = 0;
    C.out_of_memory = false;
    CUPTI_TRY(cuptiGetTimestamp(&C.origin));
    C.active = true;
    const tlm_status s = enable_all(true);
    if (s != TLM_OK) {
        enable_all(false);
        C.active = false;
    }
    return s;
}

static const char *copy_name(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
    }
}

/* the kernel record of this CUPTI (its fields up to graphNodeId keep their place across versions) */
typedef CUpti_ActivityKernel10 kernel_record;

static bool add_activity(tlm_prof_kind kind, const char *name, uint64_t start, uint64_t end, uint32_t stream,
                         uint32_t corr, uint64_t node, uint64_t bytes) {
    if (start == 0 && end == 0) return true; /* CUPTI could not time it */
    const int32_t id = tlm_profile_intern(C.p, name);
    if (id < 0) return false;
    tlm_prof_activity a = tlm_prof_activity_blank(kind, id, (int64_t)(start - C.origin), (int64_t)(end - C.origin));
    a.stream = stream;
    a.correlation = corr;
    a.graph_node = node;
    a.bytes = bytes;
    return tlm_profile_add_activity(C.p, &a) >= 0;
}

static bool parse(const CUpti_Activity *rec) {
    char name[256];
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const kernel_record *k = (const kernel_record *)rec;
        tlm_kernel_name_short(k->name ? k->name : "?", name, sizeof name, 64); /* the table's column */
        return add_activity(TLM_PROF_KERNEL, name, k->start, k->end, k->streamId, k->correlationId, k->graphNodeId, 0);
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        return add_activity(TLM_PROF_MEMCPY, copy_name(m->copyKind), m->start, m->end, m->streamId, m->correlationId,
                            m->graphNodeId, m->bytes);
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        return add_activity(TLM_PROF_MEMSET, "memset", m->start, m->end, m->streamId, m->correlationId,
                            m->graphNodeId, m->bytes);
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: { /* tlm: what the host was doing at an API call */
        const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)rec;
        tlm_prof_launch l = {.correlation = x->correlationId, .op = -1, .range = -1};
        if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) l.op = (int32_t)x->externalId;
        else if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1) l.range = (int32_t)x->externalId;
        else return true;
        return tlm_profile_add_launch(C.p, &l) >= 0;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: { /* foreign: when and on which thread an API call was made */
        if (C.mode != TLM_CUPTI_FOREIGN) return true;
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        const tlm_prof_launch l = {a->correlationId, -1, -1, (int64_t)(a->start - C.origin), a->threadId};
        return tlm_profile_add_launch(C.p, &l) >= 0;
    }
    default: return true;
    }
}

static int cmp_launch(const void *x, const void *y) {
    const tlm_prof_launch *a = x, *b = y;
    return a->correlation < b->correlation ? -1 : a->correlation > b->correlation;
}

static int cmp_u32(const void *x, const void *y) {
    const uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* one launch per correlation id (the op and the range came as two records), and only those an
 * activity refers to */
static bool merge_launches(tlm_profile *p) {
    qsort(p->launches, p->n_launches, sizeof *p->launches, cmp_launch);
    uint32_t *used = malloc((p->n_acts ? p->n_acts : 1) * sizeof *used);
    if (!used) return false;
    for (size_t i = 0; i < p->n_acts; i++) used[i] = p->acts[i].correlation;
    qsort(used, p->n_acts, sizeof *used, cmp_u32);
    size_t m = 0;
    for (size_t i = 0; i < p->n_launches; i++) {
        const tlm_prof_launch *l = &p->launches[i];
        if (!bsearch(&l->correlation, used, p->n_acts, sizeof *used, cmp_u32)) continue;
        if (m && p->launches[m - 1].correlation == l->correlation) {
            tlm_prof_launch *d = &p->launches[m - 1];
            if (l->op >= 0) d->op = l->op;
            if (l->range >= 0) d->range = l->range;
            if (l->thread) {
                d->thread = l->thread;
                d->api_ns = l->api_ns;
            }
        } else {
            p->launches[m++] = *l;
        }
    }
    p->n_launches = m;
    free(used);
    return true;
}

tlm_status tlm_cupti_end(void) {
    if (!C.active) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no CUPTI collection is running");
    tlm_status s = TLM_OK;
    const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) s = tlm_fail(TLM_ERR_BACKEND, "CUPTI: cuptiActivityFlushAll: %s", cupti_error(r));
    const tlm_status off = enable_all(false);
    if (s == TLM_OK) s = off;
    C.p->end_ns = tlm_cupti_now();
    C.active = false;
    pthread_mutex_lock(&C.buffers_lock);
    for (size_t b = 0; b < C.n_buffers; b++) {
        CUpti_Activity *rec = NULL;
        while (cuptiActivityGetNextRecord(C.buffers[b].data, C.buffers[b].valid, &rec) == CUPTI_SUCCESS)
            if (!parse(rec)) C.out_of_memory = true;
        free(C.buffers[b].data);
    }
    C.n_buffers = 0;
    C.p->dropped = C.dropped;
    pthread_mutex_unlock(&C.buffers_lock);
    if (!merge_launches(C.p)) C.out_of_memory = true;
    if (s == TLM_OK && C.error != TLM_OK) s = tlm_fail(C.error, "%s", C.error_text);
    if (s == TLM_OK && C.out_of_memory) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the profile");
    C.p = NULL;
    return s;
}
