/* profile_io.c — a profile as a file (profile.h: tlm_profile_write / tlm_profile_read): what the
 * injection library in another process hands to `tlm profile --exec`. The records are written as
 * they are in memory: the file is read back by the same build on the same machine, and its header
 * holds each record's size so that a file from another build is refused, not misread. */
#include "tlm/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "TLMPROF1"

typedef struct {
    char magic[8];
    uint32_t record_sizes[6]; /* activity, op, range, launch, node, mem sample */
    char title[160], device[256];
    uint8_t foreign, host_clock, resolved, pad[5];
    int64_t end_ns;
    uint64_t dropped;
    uint64_t counts[7]; /* acts, ops, ranges, launches, nodes, mem, strings */
} file_header;

static void sizes(uint32_t out[6]) {
    out[0] = sizeof(tlm_prof_activity);
    out[1] = sizeof(tlm_prof_op);
    out[2] = sizeof(tlm_prof_range);
    out[3] = sizeof(tlm_prof_launch);
    out[4] = sizeof(tlm_prof_graph_node);
    out[5] = sizeof(tlm_prof_mem_sample);
}

tlm_status tlm_profile_write(const tlm_profile *p, FILE *f) {
    file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    sizes(h.record_sizes);
    memcpy(h.title, p->title, sizeof h.title);
    memcpy(h.device, p->device, sizeof h.device);
    h.foreign = p->foreign;
    h.host_clock = p->host_clock;
    h.resolved = p->resolved;
    h.end_ns = p->end_ns;
    h.dropped = p->dropped;
    const uint64_t counts[7] = {p->n_acts, p->n_ops, p->n_ranges, p->n_launches, p->n_nodes, p->n_mem, p->n_strings};
    memcpy(h.counts, counts, sizeof counts);
    const void *arrays[6] = {p->acts, p->ops, p->ranges, p->launches, p->nodes, p->mem};
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    for (int i = 0; ok && i < 6; i++)
        ok = counts[i] == 0 || fwrite(arrays[i], h.record_sizes[i], counts[i], f) == counts[i];
    for (size_t i = 0; ok && i < p->n_strings; i++) {
        const uint32_t len = (uint32_t)strlen(p->strings[i]);
        ok = fwrite(&len, sizeof len, 1, f) == 1 && fwrite(p->strings[i], 1, len, f) == len;
    }
    return ok ? TLM_OK : tlm_fail(TLM_ERR_IO, "writing the profile: write failed");
}

/* ---- what a record read from a file may hold: every index, enum, bool and time in range --------------- */

#define MAX_ABS_NS (INT64_C(1) << 60) /* about 36 years: differences of two times never overflow */

static bool time_ok(int64_t t) { return t > -MAX_ABS_NS && t < MAX_ABS_NS; }
static bool span_ok(int64_t begin, int64_t end) { return time_ok(begin) && time_ok(end) && begin <= end; }
static bool index_ok(int32_t i, size_t n) { return i >= -1 && (i < 0 || (size_t)i < n); }
static bool phase_ok(tlm_phase ph) { return (int)ph >= 0 && (int)ph < TLM_PHASE_COUNT; }

/* a bool's byte as the file holds it: only 0 and 1 are bools (another value read as bool is undefined) */
static bool bool_ok(const bool *b) {
    uint8_t v;
    memcpy(&v, b, 1);
    return v <= 1;
}

static bool scope_ok(const tlm_scope *sc) {
    return phase_ok(sc->phase) && sc->layer >= -1 && sc->layer <= TLM_PROF_MAX_LAYER && sc->step >= -1 &&
           bool_ok(&sc->warmup);
}

static bool name_ok(const tlm_profile *p, int32_t id) { return id >= 0 && (size_t)id < p->n_strings; }

/* Every record of a profile read from a file: string ids that exist, indices into the other arrays
 * (or -1), enums of their type, bools of 0 or 1, times that subtract without overflow. FORMAT naming
 * the record otherwise. */
static tlm_status check_records(const tlm_profile *p, const char *name) {
    if (!time_ok(p->end_ns))
        return tlm_fail(TLM_ERR_FORMAT, "%s: end time %lld ns is out of range", name, (long long)p->end_ns);
    for (size_t i = 0; i < p->n_acts; i++) {
        const tlm_prof_activity *a = &p->acts[i];
        if (!name_ok(p, a->name) || (int)a->kind < TLM_PROF_KERNEL || (int)a->kind > TLM_PROF_MEMSET ||
            !span_ok(a->start_ns, a->end_ns) || !index_ok(a->op, p->n_ops) || !index_ok(a->range, p->n_ranges) ||
            !phase_ok(a->phase) || a->layer < -1 || a->layer > TLM_PROF_MAX_LAYER ||
            a->step < -1 || !bool_ok(&a->warmup))
            return tlm_fail(TLM_ERR_FORMAT, "%s: activity %zu is malformed", name, i);
    }
    for (size_t i = 0; i < p->n_ops; i++) {
        const tlm_prof_op *o = &p->ops[i];
        if ((int)o->op < 0 || (int)o->op >= TLM_OP_COUNT || !scope_ok(&o->scope) || !(o->flops >= 0) ||
            !isfinite(o->flops) || !(o->bytes >= 0) || !isfinite(o->bytes) || !span_ok(o->begin_ns, o->end_ns) ||
            !bool_ok(&o->captured))
            return tlm_fail(TLM_ERR_FORMAT, "%s: op %zu is malformed", name, i);
    }
    for (size_t i = 0; i < p->n_ranges; i++) {
        const tlm_prof_range *r = &p->ranges[i];
        if (!name_ok(p, r->name) || r->kind < TLM_RANGE_STEP || r->kind > TLM_PROF_RANGE_NVTX ||
            !span_ok(r->begin_ns, r->end_ns) || r->parent < -1 ||
            r->parent >= (int32_t)i || /* a parent is opened, and added, before its child */
            !scope_ok(&r->scope))
            return tlm_fail(TLM_ERR_FORMAT, "%s: range %zu is malformed", name, i);
    }
    for (size_t i = 0; i < p->n_launches; i++) {
        const tlm_prof_launch *l = &p->launches[i];
        if (!index_ok(l->op, p->n_ops) || !index_ok(l->range, p->n_ranges) || !time_ok(l->api_ns))
            return tlm_fail(TLM_ERR_FORMAT, "%s: launch %zu is malformed", name, i);
    }
    for (size_t i = 0; i < p->n_nodes; i++)
        if (!index_ok(p->nodes[i].op, p->n_ops) || !index_ok(p->nodes[i].range, p->n_ranges))
            return tlm_fail(TLM_ERR_FORMAT, "%s: graph node %zu is malformed", name, i);
    for (size_t i = 0; i < p->n_mem; i++)
        if (!time_ok(p->mem[i].t_ns)) return tlm_fail(TLM_ERR_FORMAT, "%s: memory sample %zu is malformed", name, i);
    return TLM_OK;
}

tlm_status tlm_profile_read(tlm_profile **out, FILE *f, const char *name) {
    *out = NULL;
    file_header h;
    uint32_t want[6];
    sizes(want);
    if (fseek(f, 0, SEEK_END) != 0) return tlm_fail(TLM_ERR_IO, "%s: cannot seek", name);
    const long size = ftell(f);
    rewind(f);
    if (size < (long)sizeof h || fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, 8) != 0)
        return tlm_fail(TLM_ERR_FORMAT, "%s: not a tlm profile (no TLMPROF1 header)", name);
    if (memcmp(h.record_sizes, want, sizeof want) != 0)
        return tlm_fail(TLM_ERR_FORMAT, "%s: written by another build of tlm (record sizes differ)", name);
    uint64_t left = (uint64_t)size - sizeof h;
    for (int i = 0; i < 6; i++) {
        if (h.counts[i] > left / want[i]) return tlm_fail(TLM_ERR_FORMAT, "%s: truncated (array %d)", name, i);
        left -= h.counts[i] * want[i];
    }
    if (h.counts[6] > left / sizeof(uint32_t)) return tlm_fail(TLM_ERR_FORMAT, "%s: truncated (strings)", name);
    tlm_profile *p;
    TLM_TRY(tlm_profile_create(&p));
    memcpy(p->title, h.title, sizeof p->title);
    memcpy(p->device, h.device, sizeof p->device);
    p->title[sizeof p->title - 1] = p->device[sizeof p->device - 1] = '\0';
    p->foreign = h.foreign;
    p->host_clock = h.host_clock;
    p->resolved = h.resolved;
    p->end_ns = h.end_ns;
    p->dropped = h.dropped;
    void **arrays[6] = {(void **)&p->acts, (void **)&p->ops, (void **)&p->ranges, (void **)&p->launches,
                        (void **)&p->nodes, (void **)&p->mem};
    size_t *ns[6] = {&p->n_acts, &p->n_ops, &p->n_ranges, &p->n_launches, &p->n_nodes, &p->n_mem};
    size_t *caps[6] = {&p->cap_acts, &p->cap_ops, &p->cap_ranges, &p->cap_launches, &p->cap_nodes, &p->cap_mem};
    tlm_status s = TLM_OK;
    for (int i = 0; s == TLM_OK && i < 6; i++) {
        const size_t n = (size_t)h.counts[i];
        *arrays[i] = malloc(n ? n * want[i] : 1);
        if (!*arrays[i]) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        else if (n && fread(*arrays[i], want[i], n, f) != n) s = tlm_fail(TLM_ERR_FORMAT, "%s: truncated", name);
        else *ns[i] = *caps[i] = n;
    }
    char *buf = NULL;
    for (uint64_t i = 0; s == TLM_OK && i < h.counts[6]; i++) {
        uint32_t len;
        if (fread(&len, sizeof len, 1, f) != 1 || len > (1u << 20)) {
            s = tlm_fail(TLM_ERR_FORMAT, "%s: truncated or corrupt string %llu", name, (unsigned long long)i);
            break;
        }
        char *b = realloc(buf, (size_t)len + 1);
        if (!b) {
            s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
            break;
        }
        buf = b;
        if (fread(buf, 1, len, f) != len) {
            s = tlm_fail(TLM_ERR_FORMAT, "%s: truncated string %llu", name, (unsigned long long)i);
            break;
        }
        buf[len] = '\0';
        /* ids are positions: a repeated string (not written by tlm) would shift them */
        if (tlm_profile_intern(p, buf) != (int32_t)i)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: string %llu repeated or out of memory", name, (unsigned long long)i);
    }
    free(buf);
    if (s == TLM_OK) s = check_records(p, name);
    if (s != TLM_OK) {
        tlm_profile_free(p);
        return s;
    }
    *out = p;
    return TLM_OK;
}
