/* test_memory_timeline.c — the memory timeline (memory_timeline.h) on the tiny model:
 * 1. The recorded event stream balances: a model created, trained (a warm-up and a measured step)
 *    and freed inside the window: every allocation made in it is freed in it, after it was made;
 *    the bytes in use after each event are the running sum and never negative, the categories add up
 *    to them, and their highest equals the allocator's peak.
 * 2. The peaks table of the measured step: the peak is the step's highest bytes in use and what was
 *    live then adds up to it; after the forward <= the backward's peak; the optimizer's figures.
 * 3. The largest allocations: in size order, once per name, each alive in the step; why each exists
 *    (a block's buffer is saved for backward, the backward's scratch is scratch, a gradient group is a
 *    gradient, the weights and the moments are state, a forward-only pass's logits an output); the
 *    lifetime of layer 1's ln1 from its rmsnorm_forward to its rmsnorm_backward.
 * 4. The files: the snapshot is a pickle of protocol 2 made only of the opcodes PyTorch's memory_viz
 *    unpickler knows, with one "alloc" per allocation event and a "free_requested" and
 *    "free_completed" per free; the JSON timeline parses with the same events. (tests/cli/memory.sh
 *    loads the snapshot with Python's pickle.)
 * 5. Bad use: a second step number that was not recorded; an unwritable path (IO, nothing left). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "test_check.h"
#include "tlm/memory_timeline.h"
#include "tlm/model.h"
#include "tlm/rng.h"

static tlm_backend *be;
static tlm_config cfg;
enum { B = 2, T = 12 };
static int32_t tokens[B * T + 1];

static void step(tlm_model *m, int i, bool warmup, bool train) {
    const tlm_adamw_config opt = tlm_adamw_defaults();
    tlm_step_begin(be, i, warmup);
    die_on(tlm_model_forward(m, tokens, tokens + 1, B, T, NULL), "forward");
    if (train) {
        die_on(tlm_model_backward(m), "backward");
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    tlm_step_end(be);
}

static tlm_model *model(bool forward_only) {
    tlm_run_config r = tlm_run_defaults();
    r.attention = TLM_ATTENTION_NAIVE;
    r.forward_only = forward_only;
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, &r, be), "model");
    die_on(tlm_model_init_random(m, 3), "init");
    return m;
}

/* the allocation of the measured step named `name` (the last one recorded), or NULL */
static const tlm_mem_allocation *named(const tlm_mem_timeline *t, const char *name) {
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t), *found = NULL;
    for (int i = 0; i < tlm_mem_timeline_num_allocations(t); i++)
        if (strcmp(al[i].name, name) == 0) found = &al[i];
    return found;
}

static void test_balance(void) {
    tlm_mem_reset_peak(be);
    tlm_mem_timeline *t;
    die_on(tlm_mem_timeline_start(&t, be), "start");
    tlm_model *m = model(false);
    step(m, 0, true, true);
    step(m, 0, false, true);
    tlm_model_free(m);
    die_on(tlm_mem_timeline_stop(t), "stop");
    const size_t allocator_peak = tlm_mem_stats_now(be).peak_total;
    const int ne = tlm_mem_timeline_num_events(t), na = tlm_mem_timeline_num_allocations(t);
    const tlm_mem_timeline_event *ev = tlm_mem_timeline_events(t);
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t);
    const size_t *start = tlm_mem_timeline_start_bytes(t);
    size_t running = 0;
    for (int c = 0; c < TLM_MEMCAT_COUNT; c++) running += start[c];
    size_t highest = running;
    int bad_sum = 0, negative = 0, bad_cats = 0, unfreed = 0, order = 0;
    for (int i = 0; i < ne; i++) {
        const size_t bytes = al[ev[i].allocation].bytes;
        if (ev[i].alloc) running += bytes;
        else if (bytes > running) negative++;
        else running -= bytes;
        bad_sum += ev[i].in_use != running;
        size_t cats = 0;
        for (int c = 0; c < TLM_MEMCAT_COUNT; c++) cats += ev[i].by_category[c];
        bad_cats += cats != ev[i].in_use;
        if (ev[i].in_use > highest) highest = ev[i].in_use;
    }
    for (int i = 0; i < na; i++) {
        if (al[i].before) continue;
        /* the backend's own buffers made at first use stay: the CPU ops' scratch (it grows by
         * reallocation), the CUDA side stream's cuBLASLt workspace (backend.h), ... */
        if (al[i].free_event < 0 && !test_backend_owns(al[i].name)) unfreed++;
        if (al[i].free_event >= 0 && al[i].free_event <= al[i].alloc_event) order++;
    }
    check(ne > 100 && negative == 0 && bad_sum == 0,
          "timeline: %d events; bytes in use after each = the running sum (%d off), never negative (%d)", ne, bad_sum,
          negative);
    check(bad_cats == 0, "timeline: the categories add up to the bytes in use after every event (%d off)", bad_cats);
    check(unfreed == 0 && order == 0,
          "timeline: every allocation made in the window is freed in it (%d not), after it was made (%d not)",
          unfreed, order);
    check(highest == allocator_peak, "timeline: the highest bytes in use %zu = the allocator's peak %zu", highest,
          allocator_peak);
    const tlm_mem_allocation *copy = named(t, "parameters");
    check(copy && copy->category == TLM_MEMCAT_PARAMETERS && tlm_memcat_of(TLM_MEM_PARAMETERS, "parameters.bf16") ==
                                                                   TLM_MEMCAT_WEIGHT_COPY,
          "categories: the float32 weights are parameters, the bf16 GEMM copy a category of its own");
    tlm_mem_peaks p;
    check_status(tlm_mem_timeline_peaks(t, 5, &p), TLM_ERR_INVALID_ARGUMENT, "not recorded",
                 "peaks of a step that was not recorded");
    tlm_mem_timeline_free(t);
}

static void test_peaks_and_largest(void) {
    tlm_model *m = model(false);
    tlm_mem_timeline *t;
    die_on(tlm_mem_timeline_start(&t, be), "start");
    step(m, 0, true, true);
    step(m, 0, false, true);
    die_on(tlm_mem_timeline_stop(t), "stop");
    tlm_mem_peaks p;
    die_on(tlm_mem_timeline_peaks(t, 0, &p), "peaks");
    /* the step's window: events from its begin mark to its end mark */
    const tlm_mem_timeline_mark *mk = tlm_mem_timeline_marks(t);
    int first = -1, last = -1;
    for (int i = 0; i < tlm_mem_timeline_num_marks(t); i++)
        if (mk[i].step && !mk[i].scope.warmup) {
            if (mk[i].begin) first = mk[i].event;
            else last = mk[i].event;
        }
    const tlm_mem_timeline_event *ev = tlm_mem_timeline_events(t);
    size_t highest = 0;
    for (int i = first; i < last; i++)
        if (ev[i].in_use > highest) highest = ev[i].in_use;
    size_t live = 0;
    for (int c = 0; c < TLM_MEMCAT_COUNT; c++) live += p.at_peak[c];
    check(first >= 0 && p.peak == highest && live == p.peak,
          "peaks: the measured step's peak %zu = its highest bytes in use; what was live then adds up to it", p.peak);
    check(p.peak_scope.phase == TLM_PHASE_BACKWARD && strcmp(p.peak_op, "?") != 0 && p.at_peak[TLM_MEMCAT_GRADIENTS] > 0 &&
              p.at_peak[TLM_MEMCAT_OPTIMIZER] > 0,
          "peaks: in the backward pass (before %s, layer %d), with gradients and the moments live", p.peak_op,
          p.peak_scope.layer);
    check(p.after_forward > 0 && p.after_forward <= p.backward_peak && p.backward_peak <= p.peak &&
              p.before_optimizer >= p.after_optimizer && p.optimizer_peak <= p.peak && p.peak_footprint >= p.peak,
          "peaks: after forward %zu <= backward peak %zu <= peak; before the optimizer %zu >= after it %zu; the "
          "footprint %zu >= the peak", p.after_forward, p.backward_peak, p.before_optimizer, p.after_optimizer,
          p.peak_footprint);
    if (be->kind == TLM_DEVICE_CPU) check(p.device_peak == 0, "peaks: the CPU has no device count (0)");
    else check(p.device_peak > 0, "peaks: the device's own count is recorded (%zu bytes)", p.device_peak);

    int idx[12], n = 0;
    die_on(tlm_mem_timeline_largest(t, 0, 12, idx, &n), "largest");
    const tlm_mem_allocation *al = tlm_mem_timeline_allocations(t);
    int sorted = 1, unique = 1, alive = 1;
    for (int k = 0; k < n; k++) {
        if (k) sorted &= al[idx[k]].bytes <= al[idx[k - 1]].bytes;
        for (int j = 0; j < k; j++) unique &= strcmp(al[idx[k]].name, al[idx[j]].name) != 0;
        alive &= (al[idx[k]].before || al[idx[k]].alloc_event < last) &&
                 (al[idx[k]].free_event < 0 || al[idx[k]].free_event >= first);
    }
    check(n == 12 && sorted && unique && alive, "largest: %d allocations, in size order, once per name, alive in the "
          "step (the largest: %s, %zu bytes)", n, al[idx[0]].name, al[idx[0]].bytes);
    const tlm_mem_allocation *saved = named(t, "layers.1.ffn.w13_out"), *scratch = named(t, "backward.d_w13_out"),
                             *grad = named(t, "gradients.layers.0"), *params = named(t, "parameters"),
                             *moment = named(t, "adamw.m");
    check(saved && scratch && grad && params && moment && tlm_mem_allocation_why(saved) == TLM_MEMWHY_SAVED &&
              tlm_mem_allocation_why(scratch) == TLM_MEMWHY_SCRATCH &&
              tlm_mem_allocation_why(grad) == TLM_MEMWHY_GRADIENT &&
              tlm_mem_allocation_why(params) == TLM_MEMWHY_STATE && tlm_mem_allocation_why(moment) == TLM_MEMWHY_STATE,
          "why: a block's buffer %s, the backward's %s, a gradient group %s, weights and moments %s",
          tlm_memwhy_name(TLM_MEMWHY_SAVED), tlm_memwhy_name(TLM_MEMWHY_SCRATCH), tlm_memwhy_name(TLM_MEMWHY_GRADIENT),
          tlm_memwhy_name(TLM_MEMWHY_STATE));
    const tlm_mem_allocation *ln1 = named(t, "layers.1.ln1");
    char from[96] = "", to[96] = "";
    if (ln1) {
        tlm_mem_timeline_op_label(t, ln1->alloc_op, from, sizeof from);
        tlm_mem_timeline_op_label(t, ln1->free_op - 1, to, sizeof to);
    }
    check(ln1 && strcmp(from, "rmsnorm_forward (forward, layer 1)") == 0 &&
              strcmp(to, "rmsnorm_backward (backward, layer 1)") == 0,
          "lifetime: layers.1.ln1 lives from %s to %s", from, to);

    /* 4. the files */
    char dir[] = "/tmp/tlm_test_memory.XXXXXX";
    die_on(mkdtemp(dir) ? TLM_OK : TLM_ERR_IO, "temporary folder");
    char snap[256], json[256];
    snprintf(snap, sizeof snap, "%s/s.pickle", dir);
    snprintf(json, sizeof json, "%s/t.json", dir);
    die_on(tlm_mem_timeline_write_snapshot(t, snap, 0), "snapshot");
    const char *keys[] = {"title"}, *values[] = {"tiny"};
    die_on(tlm_mem_timeline_write_json(t, json, keys, values, 1), "json");
    /* the pickle: walk its opcodes; only the memory_viz unpickler's, and count the actions */
    FILE *f = fopen(snap, "rb");
    static unsigned char buf[1 << 22];
    const size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    int allocs = 0, requested = 0, completed = 0, unknown = 0, stopped = 0;
    size_t i = 2;
    const bool proto = len > 2 && buf[0] == 0x80 && buf[1] == 2;
    while (proto && i < len && !stopped && !unknown) {
        const unsigned char op = buf[i++];
        switch (op) {
        case '}': case ']': case '(': case 'u': case 'e': case 'N': case 0x88: case 0x89: break;
        case 'K': i += 1; break;
        case 'M': i += 2; break;
        case 'J': i += 4; break;
        case 0x8a: i += 1 + buf[i]; break;
        case 'X': {
            const size_t n = buf[i] | buf[i + 1] << 8 | (size_t)buf[i + 2] << 16 | (size_t)buf[i + 3] << 24;
            i += 4;
            allocs += n == 5 && memcmp(buf + i, "alloc", 5) == 0;
            requested += n == 14 && memcmp(buf + i, "free_requested", 14) == 0;
            completed += n == 14 && memcmp(buf + i, "free_completed", 14) == 0;
            i += n;
            break;
        }
        case '.': stopped = 1; break;
        default: unknown = op;
        }
    }
    int n_alloc = 0, n_free = 0;
    for (int k = 0; k < tlm_mem_timeline_num_events(t); k++) {
        n_alloc += ev[k].alloc;
        n_free += !ev[k].alloc;
    }
    check(proto && stopped && !unknown && i == len,
          "snapshot: pickle protocol 2, only memory_viz's opcodes (unknown: 0x%02x), ends at STOP", unknown);
    check(allocs == n_alloc && requested == n_free && completed == n_free,
          "snapshot: %d alloc, %d free_requested, %d free_completed actions for %d allocation and %d free events",
          allocs, requested, completed, n_alloc, n_free);
    f = fopen(json, "rb");
    static char text[1 << 22];
    const size_t tl = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[tl] = '\0';
    cJSON *doc = cJSON_Parse(text);
    const cJSON *events = cJSON_GetObjectItem(doc, "events"), *peaks = cJSON_GetObjectItem(doc, "peaks");
    check(doc && cJSON_GetArraySize(events) == tlm_mem_timeline_num_events(t) &&
              cJSON_GetObjectItem(peaks, "peak_bytes")->valuedouble == (double)p.peak &&
              strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "meta"), "title")->valuestring, "tiny") == 0,
          "timeline JSON: parses, one entry per event, the peak, the caller's meta");
    cJSON_Delete(doc);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/s.pickle", dir);
    check_status(tlm_mem_timeline_write_snapshot(t, bad, 0), TLM_ERR_IO, "no/such/dir",
                 "snapshot into a folder that does not exist");
    check(access(bad, F_OK) != 0, "nothing written there");
    unlink(snap);
    unlink(json);
    rmdir(dir);
    tlm_mem_timeline_free(t);
    tlm_model_free(m);

    /* a forward-only pass's logits: its output */
    m = model(true);
    die_on(tlm_mem_timeline_start(&t, be), "start");
    step(m, 0, true, false);
    step(m, 0, false, false);
    tlm_mem_timeline_stop(t);
    const tlm_mem_allocation *logits = named(t, "logits");
    const tlm_mem_allocation *al2 = tlm_mem_timeline_allocations(t);
    const tlm_mem_allocation *first_logits = NULL;
    for (int k = 0; k < tlm_mem_timeline_num_allocations(t) && !first_logits; k++)
        if (strcmp(al2[k].name, "logits") == 0) first_logits = &al2[k];
    check(logits && first_logits && tlm_mem_allocation_why(first_logits) == TLM_MEMWHY_OUTPUT &&
              tlm_mem_allocation_why(logits) == TLM_MEMWHY_OUTPUT && logits->free_event < 0,
          "forward-only: the logits are the step's output, alive until the next step begins");
    tlm_mem_timeline_free(t);
    tlm_model_free(m);
}

int main(void) {
    be = test_backend();
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    test_random_ids(tokens, B * T + 1, (uint64_t)cfg.vocab_size, 9);
    test_balance();
    test_peaks_and_largest();
    return test_finish_backend(be);
}
