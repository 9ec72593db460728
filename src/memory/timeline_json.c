/* timeline_json.c — the memory timeline as JSON (memory_timeline.h: tlm_mem_timeline_write_json),
 * the input of `tlm plot memory-timeline`: built with cJSON, written through the one file writer. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tlm/memory_timeline.h"
#include "tlm/output.h"

/* adds a number; false when out of memory */
static bool num(cJSON *o, const char *key, double v) { return cJSON_AddNumberToObject(o, key, v) != NULL; }

/* an array of the bytes by category, added to o as `key`; false when out of memory */
static bool add_by_category(cJSON *o, const char *key, const size_t *by) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int c = 0; a && c < TLM_MEMCAT_COUNT; c++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)by[c]))) return false;
    return a != NULL;
}

static bool add_scope(cJSON *o, const tlm_scope *s) {
    return num(o, "op_seq", (double)s->op_seq) && num(o, "step", s->step) &&
           cJSON_AddBoolToObject(o, "warmup", s->warmup) && cJSON_AddStringToObject(o, "phase", tlm_phase_name(s->phase)) &&
           num(o, "layer", s->layer);
}

/* the whole document into root; false when out of memory */
static bool build(cJSON *root, const tlm_mem_timeline *t, const char *const *keys, const char *const *values,
                  int n_meta) {
    if (!cJSON_AddStringToObject(root, "kind", "tlm.memory_timeline")) return false;
    cJSON *meta = cJSON_AddObjectToObject(root, "meta"), *cats = cJSON_AddArrayToObject(root, "categories");
    if (!meta || !cats) return false;
    for (int i = 0; i < n_meta; i++)
        if (!cJSON_AddStringToObject(meta, keys[i], values[i])) return false;
    for (int c = 0; c < TLM_MEMCAT_COUNT; c++)
        if (!cJSON_AddItemToArray(cats, cJSON_CreateString(tlm_memcat_key((tlm_memcat)c)))) return false;
    if (!add_by_category(root, "start", tlm_mem_timeline_start_bytes(t))) return false;
    cJSON *events = cJSON_AddArrayToObject(root, "events"), *marks = cJSON_AddArrayToObject(root, "marks");
    if (!events || !marks) return false;
    const tlm_mem_allocation *allocs = tlm_mem_timeline_allocations(t);
    const tlm_mem_timeline_event *ev = tlm_mem_timeline_events(t);
    for (int i = 0; i < tlm_mem_timeline_num_events(t); i++) {
        const tlm_mem_allocation *a = &allocs[ev[i].allocation];
        cJSON *e = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(events, e)) {
            cJSON_Delete(e);
            return false;
        }
        if (!num(e, "t_us", ev[i].time_us) || !add_scope(e, &ev[i].scope) ||
            !cJSON_AddStringToObject(e, "action", ev[i].alloc ? "alloc" : "free") || !num(e, "bytes", (double)a->bytes) ||
            !cJSON_AddStringToObject(e, "category", tlm_memcat_key(a->category)) ||
            !cJSON_AddStringToObject(e, "name", a->name) || !num(e, "in_use", (double)ev[i].in_use) ||
            !num(e, "footprint", (double)ev[i].footprint) || !add_by_category(e, "by_category", ev[i].by_category))
            return false;
    }
    const tlm_mem_timeline_mark *mk = tlm_mem_timeline_marks(t);
    for (int i = 0; i < tlm_mem_timeline_num_marks(t); i++) {
        cJSON *m = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(marks, m)) {
            cJSON_Delete(m);
            return false;
        }
        if (!add_scope(m, &mk[i].scope) || !cJSON_AddStringToObject(m, "kind", mk[i].step ? "step" : "phase") ||
            !cJSON_AddStringToObject(m, "name", mk[i].step ? "step" : tlm_phase_name(mk[i].scope.phase)) ||
            !cJSON_AddBoolToObject(m, "begin", mk[i].begin) || !num(m, "event", mk[i].event) ||
            !num(m, "in_use", (double)mk[i].in_use) || !num(m, "footprint", (double)mk[i].footprint) ||
            !num(m, "device_used", (double)mk[i].device_used))
            return false;
    }
    tlm_mem_peaks p;
    if (tlm_mem_timeline_peaks(t, -1, &p) != TLM_OK) return true; /* no step recorded: no peaks */
    cJSON *pk = cJSON_AddObjectToObject(root, "peaks");
    return pk && num(pk, "step", p.step) && num(pk, "peak_bytes", (double)p.peak) &&
           cJSON_AddStringToObject(pk, "peak_phase", tlm_phase_name(p.peak_scope.phase)) &&
           num(pk, "peak_layer", p.peak_scope.layer) && num(pk, "peak_op_seq", (double)p.peak_scope.op_seq) &&
           cJSON_AddStringToObject(pk, "peak_op", p.peak_op) && add_by_category(pk, "at_peak", p.at_peak) &&
           num(pk, "peak_footprint_bytes", (double)p.peak_footprint) &&
           num(pk, "device_peak_bytes", (double)p.device_peak);
}

tlm_status tlm_mem_timeline_write_json(const tlm_mem_timeline *t, const char *path, const char *const *meta_keys,
                                       const char *const *meta_values, int n_meta) {
    cJSON *root = cJSON_CreateObject();
    char *text = root && build(root, t, meta_keys, meta_values, n_meta) ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory writing the memory timeline %s", path);
    tlm_output *o = NULL;
    tlm_status s = tlm_output_open(&o, path);
    if (s == TLM_OK) {
        fputs(text, tlm_output_file(o));
        fputc('\n', tlm_output_file(o));
        s = tlm_output_commit(o);
    }
    free(text);
    return s;
}

/* ---- the names of the files (tlm memory) ------------------------------------------------------------ */

void tlm_mem_file_for(const char *path, const char *label, char *buf, size_t n) {
    if (!label) {
        snprintf(buf, n, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1)) dot = path + strlen(path);
    snprintf(buf, n, "%.*s-%s%s", (int)(dot - path), path, label, dot);
}

void tlm_mem_plan_files(tlm_io_plan *plan, const char *flag, const char *path, int n) {
    if (!path || n <= 1) {
        tlm_io_plan_output(plan, flag, path);
        return;
    }
    char stem[4200];
    tlm_mem_file_for(path, "\001", stem, sizeof stem); /* FILE-\001.ext: the label's place */
    char *mark = strchr(stem, '\001');
    *mark = '\0';
    tlm_io_plan_outputs(plan, flag, stem, mark + 1);
}
