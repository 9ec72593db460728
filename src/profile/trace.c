/* trace.c — profiles as a Chrome trace-event file (profile.h, tlm_profile_write_trace), the JSON
 * format of Google's "Trace Event Format" document that Perfetto (ui.perfetto.dev) and
 * chrome://tracing open: {"traceEvents": [...]} with, per profile (one process each), host ranges
 * as nested B/E pairs, device work as X (complete) events on one track per stream, and the tracked
 * allocator's bytes in use as a C (counter) track. Written through output.h (all or nothing). */
#include <stdlib.h>
#include <string.h>

#include "tlm/output.h"
#include "tlm/profile.h"

enum { STREAM_TID0 = 2000000000 }; /* device tracks' thread ids: above any Linux thread id */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

typedef struct {
    FILE *f;
    bool first;
} writer;

/* starts an event object with its required fields */
static void event(writer *w, const char *ph, const char *name, int64_t ts_ns, int pid, int64_t tid) {
    fputs(w->first ? "\n" : ",\n", w->f);
    w->first = false;
    fprintf(w->f, "{\"ph\":\"%s\",\"name\":", ph);
    json_str(w->f, name);
    fprintf(w->f, ",\"ts\":%.3f,\"pid\":%d,\"tid\":%lld", (double)ts_ns * 1e-3, pid, (long long)tid);
}

static void metadata(writer *w, const char *what, int pid, int64_t tid, const char *value) {
    event(w, "M", what, 0, pid, tid);
    fputs(",\"args\":{\"name\":", w->f);
    json_str(w->f, value);
    fputs("}}", w->f);
}

/* one host interval: a range or a dispatched op */
typedef struct {
    int64_t begin, end;
    int32_t name;
    const char *cat;
    size_t order; /* ties: the one added first (the enclosing one) opens first */
} interval;

static int cmp_interval(const void *x, const void *y) {
    const interval *a = x, *b = y;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end > b->end ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* B/E pairs that nest in file order and in time: a child that would outlive its parent (clock
 * jitter) is cut at the parent's end */
static bool nested(writer *w, const tlm_profile *p, interval *v, size_t n, int pid, int64_t tid) {
    qsort(v, n, sizeof *v, cmp_interval);
    size_t *stack = malloc((n ? n : 1) * sizeof *stack), depth = 0;
    if (!stack) return false;
    for (size_t i = 0; i <= n; i++) {
        while (depth && (i == n || v[stack[depth - 1]].end <= v[i].begin)) {
            const interval *t = &v[stack[--depth]];
            event(w, "E", tlm_profile_str(p, t->name), t->end, pid, tid);
            fputc('}', w->f);
        }
        if (i == n) break;
        if (depth && v[i].end > v[stack[depth - 1]].end) v[i].end = v[stack[depth - 1]].end;
        event(w, "B", tlm_profile_str(p, v[i].name), v[i].begin, pid, tid);
        fprintf(w->f, ",\"cat\":\"%s\"}", v[i].cat);
        stack[depth++] = i;
    }
    free(stack);
    return true;
}

static const char *range_cat(int kind) {
    static const char *const cats[] = {"step", "phase", "layer", "stage", "nvtx"};
    return kind >= 0 && kind <= TLM_PROF_RANGE_NVTX ? cats[kind] : "range";
}

static bool write_profile(writer *w, tlm_profile *p, int pid) {
    tlm_profile_resolve(p);
    metadata(w, "process_name", pid, 0, p->title[0] ? p->title : "tlm");
    /* host tracks: tlm's ranges and ops on tid 0; a foreign program's NVTX ranges, one track per thread */
    const size_t total = p->n_ranges + p->n_ops;
    interval *v = malloc((total ? total : 1) * sizeof *v);
    uint32_t *threads = malloc((p->n_ranges + 1) * sizeof *threads);
    size_t n_threads = 0;
    bool ok = v && threads;
    if (ok && !p->foreign) threads[n_threads++] = 0;
    for (size_t r = 0; ok && p->foreign && r < p->n_ranges; r++) {
        size_t k = 0;
        while (k < n_threads && threads[k] != p->ranges[r].thread) k++;
        if (k == n_threads) threads[n_threads++] = p->ranges[r].thread;
    }
    for (size_t t = 0; ok && t < n_threads; t++) {
        size_t n = 0;
        for (size_t r = 0; r < p->n_ranges; r++) {
            const tlm_prof_range *x = &p->ranges[r];
            if (p->foreign && x->thread != threads[t]) continue;
            const int64_t end = x->end_ns >= x->begin_ns ? x->end_ns : p->end_ns;
            v[n] = (interval){x->begin_ns, end > x->begin_ns ? end : x->begin_ns, x->name, range_cat(x->kind), n};
            n++;
        }
        for (size_t o = 0; !p->foreign && o < p->n_ops; o++) {
            const tlm_prof_op *x = &p->ops[o];
            const int32_t name = tlm_profile_intern(p, tlm_op_name(x->op));
            ok = name >= 0;
            v[n] = (interval){x->begin_ns, x->end_ns > x->begin_ns ? x->end_ns : x->begin_ns, name, "op", n};
            n++;
        }
        char label[64];
        if (p->foreign) snprintf(label, sizeof label, "thread %u: NVTX ranges", threads[t]);
        else snprintf(label, sizeof label, "host: steps, phases, layers, ops");
        metadata(w, "thread_name", pid, threads[t], label);
        if (ok) ok = nested(w, p, v, n, pid, threads[t]);
    }
    free(v);
    free(threads);
    if (!ok) return false;
    /* device tracks: one per stream */
    uint32_t streams[256];
    size_t n_streams = 0;
    for (size_t i = 0; i < p->n_acts; i++) {
        const tlm_prof_activity *a = &p->acts[i];
        bool known = false;
        for (size_t k = 0; k < n_streams && !known; k++) known = streams[k] == a->stream;
        if (!known && n_streams < 256) {
            streams[n_streams++] = a->stream;
            char label[64];
            if (p->host_clock) snprintf(label, sizeof label, "cpu: ops");
            else snprintf(label, sizeof label, "stream %u", a->stream);
            metadata(w, "thread_name", pid, STREAM_TID0 + (int64_t)a->stream, label);
        }
        event(w, "X", tlm_profile_str(p, a->name), a->start_ns, pid, STREAM_TID0 + (int64_t)a->stream);
        fprintf(w->f, ",\"dur\":%.3f,\"cat\":\"%s\",\"args\":{\"phase\":\"%s\",\"layer\":%d,\"step\":%d,\"warmup\":%s",
                (double)(a->end_ns > a->start_ns ? a->end_ns - a->start_ns : 0) * 1e-3,
                tlm_kernel_class_name(tlm_profile_classify(p, a)), tlm_phase_name(a->phase), a->layer, a->step,
                a->warmup ? "true" : "false");
        if (a->op >= 0 && (size_t)a->op < p->n_ops) fprintf(w->f, ",\"op\":\"%s\"", tlm_op_name(p->ops[a->op].op));
        if (a->range >= 0 && (size_t)a->range < p->n_ranges) {
            fputs(",\"range\":", w->f);
            json_str(w->f, tlm_profile_str(p, p->ranges[a->range].name));
        }
        if (a->kind != TLM_PROF_KERNEL) fprintf(w->f, ",\"bytes\":%llu", (unsigned long long)a->bytes);
        fputs("}}", w->f);
    }
    /* the tracked allocator */
    for (size_t i = 0; i < p->n_mem; i++) {
        event(w, "C", "tracked bytes in use", p->mem[i].t_ns, pid, 0);
        fprintf(w->f, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)p->mem[i].in_use);
    }
    return true;
}

tlm_status tlm_profile_write_trace(const char *path, tlm_profile *const *profiles, int n) {
    tlm_output *o;
    TLM_TRY(tlm_output_open(&o, path));
    writer w = {tlm_output_file(o), true};
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", w.f);
    bool ok = true;
    for (int i = 0; ok && i < n; i++) ok = write_profile(&w, profiles[i], i + 1);
    fputs("\n]}\n", w.f);
    if (!ok) {
        tlm_output_abort(o);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of host memory writing the trace", path);
    }
    return tlm_output_commit(o);
}
