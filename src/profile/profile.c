/* profile.c — the profile as data (profile.h): growing arrays, the string table, and the
 * attribution of activities to ops, ranges, phases, layers and steps (tlm_profile_resolve). No
 * CUDA here: the injection library compiles this file too. */
#define _GNU_SOURCE /* qsort_r, RTLD_DEFAULT */
#include "tlm/profile.h"

#include <stdlib.h>
#include <string.h>

tlm_status tlm_profile_create(tlm_profile **out) {
    *out = calloc(1, sizeof **out);
    return *out ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for a profile");
}

void tlm_profile_free(tlm_profile *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_strings; i++) free(p->strings[i]);
    free(p->strings);
    free(p->string_index);
    free(p->acts);
    free(p->ops);
    free(p->ranges);
    free(p->launches);
    free(p->nodes);
    free(p->mem);
    free(p);
}

/* ---- growing arrays ---------------------------------------------------------------------------------- */

/* room for one more element of `size` bytes in *arr (n used, *cap allocated); false: out of memory */
static bool grow(void **arr, size_t n, size_t *cap, size_t size) {
    if (n < *cap) return true;
    const size_t c = *cap ? *cap * 2 : 256;
    void *a = realloc(*arr, c * size);
    if (!a) return false;
    *arr = a;
    *cap = c;
    return true;
}

#define APPEND(p, arr, n, cap, x)                                                    \
    do {                                                                             \
        if (!grow((void **)&(p)->arr, (p)->n, &(p)->cap, sizeof *(p)->arr)) return -1; \
        (p)->arr[(p)->n] = *(x);                                                     \
        return (int64_t)(p)->n++;                                                    \
    } while (0)

int64_t tlm_profile_add_activity(tlm_profile *p, const tlm_prof_activity *x) { APPEND(p, acts, n_acts, cap_acts, x); }
int64_t tlm_profile_add_op(tlm_profile *p, const tlm_prof_op *x) { APPEND(p, ops, n_ops, cap_ops, x); }
int64_t tlm_profile_add_range(tlm_profile *p, const tlm_prof_range *x) { APPEND(p, ranges, n_ranges, cap_ranges, x); }
int64_t tlm_profile_add_launch(tlm_profile *p, const tlm_prof_launch *x) {
    APPEND(p, launches, n_launches, cap_launches, x);
}
int64_t tlm_profile_add_node(tlm_profile *p, const tlm_prof_graph_node *x) { APPEND(p, nodes, n_nodes, cap_nodes, x); }
int64_t tlm_profile_add_mem(tlm_profile *p, const tlm_prof_mem_sample *x) { APPEND(p, mem, n_mem, cap_mem, x); }

tlm_prof_activity tlm_prof_activity_blank(tlm_prof_kind kind, int32_t name, int64_t start_ns, int64_t end_ns) {
    return (tlm_prof_activity){.kind = kind, .name = name, .start_ns = start_ns, .end_ns = end_ns, .op = -1,
                               .range = -1, .phase = TLM_PHASE_SETUP, .layer = -1, .step = -1};
}

/* ---- strings: FNV-1a into an open-addressing table of ids --------------------------------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool rehash(tlm_profile *p, size_t cap) {
    int32_t *t = malloc(cap * sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < cap; i++) t[i] = -1;
    for (size_t id = 0; id < p->n_strings; id++) {
        size_t k = hash_str(p->strings[id]) & (cap - 1);
        while (t[k] >= 0) k = (k + 1) & (cap - 1);
        t[k] = (int32_t)id;
    }
    free(p->string_index);
    p->string_index = t;
    p->string_index_cap = cap;
    return true;
}

int32_t tlm_profile_intern(tlm_profile *p, const char *s) {
    if (2 * (p->n_strings + 1) > p->string_index_cap && !rehash(p, p->string_index_cap ? 2 * p->string_index_cap : 256))
        return -1;
    size_t k = hash_str(s) & (p->string_index_cap - 1);
    for (; p->string_index[k] >= 0; k = (k + 1) & (p->string_index_cap - 1))
        if (strcmp(p->strings[p->string_index[k]], s) == 0) return p->string_index[k];
    if (p->n_strings >= INT32_MAX || !grow((void **)&p->strings, p->n_strings, &p->cap_strings, sizeof *p->strings))
        return -1;
    char *copy = strdup(s);
    if (!copy) return -1;
    p->strings[p->n_strings] = copy;
    p->string_index[k] = (int32_t)p->n_strings;
    return (int32_t)p->n_strings++;
}

const char *tlm_profile_str(const tlm_profile *p, int32_t id) {
    return id >= 0 && (size_t)id < p->n_strings ? p->strings[id] : "?";
}

/* ---- attribution -------------------------------------------------------------------------------------- */

/* sorted views for lookups: launches by correlation, nodes by id (the last added wins on ties:
 * a node cloned at instantiation overrides what its creation recorded) */
static int cmp_launch(const void *a, const void *b, void *user) {
    const tlm_profile *p = user;
    const tlm_prof_launch *x = &p->launches[*(const size_t *)a], *y = &p->launches[*(const size_t *)b];
    if (x->correlation != y->correlation) return x->correlation < y->correlation ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static int cmp_node(const void *a, const void *b, void *user) {
    const tlm_profile *p = user;
    const tlm_prof_graph_node *x = &p->nodes[*(const size_t *)a], *y = &p->nodes[*(const size_t *)b];
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static size_t *sorted_index(const tlm_profile *p, size_t n, int (*cmp)(const void *, const void *, void *)) {
    size_t *ix = malloc((n ? n : 1) * sizeof *ix);
    if (!ix) return NULL;
    for (size_t i = 0; i < n; i++) ix[i] = i;
    qsort_r(ix, n, sizeof *ix, cmp, (void *)p);
    return ix;
}

/* the last launch with this correlation, or NULL */
static const tlm_prof_launch *find_launch(const tlm_profile *p, const size_t *ix, uint32_t corr) {
    size_t lo = 0, hi = p->n_launches;
    while (lo < hi) { /* first index with correlation > corr */
        const size_t mid = (lo + hi) / 2;
        if (p->launches[ix[mid]].correlation <= corr) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && p->launches[ix[lo - 1]].correlation == corr ? &p->launches[ix[lo - 1]] : NULL;
}

static const tlm_prof_graph_node *find_node(const tlm_profile *p, const size_t *ix, uint64_t node) {
    size_t lo = 0, hi = p->n_nodes;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (p->nodes[ix[mid]].node <= node) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && p->nodes[ix[lo - 1]].node == node ? &p->nodes[ix[lo - 1]] : NULL;
}

static void resolve_tlm(tlm_profile *p, const size_t *lix, const size_t *nix) {
    for (size_t i = 0; i < p->n_acts; i++) {
        tlm_prof_activity *a = &p->acts[i];
        const tlm_prof_launch *l = a->correlation ? find_launch(p, lix, a->correlation) : NULL;
        const tlm_prof_graph_node *g = a->graph_node ? find_node(p, nix, a->graph_node) : NULL;
        a->op = g ? g->op : l ? l->op : -1;
        a->range = g ? g->range : l ? l->range : -1;
        const int32_t at_launch = l ? l->range : -1; /* for a replay: the range the graph was launched in */
        if (a->op >= 0 && (size_t)a->op < p->n_ops) {
            a->phase = p->ops[a->op].scope.phase;
            a->layer = p->ops[a->op].scope.layer;
        } else if (a->range >= 0 && (size_t)a->range < p->n_ranges) {
            a->phase = p->ranges[a->range].scope.phase;
            a->layer = p->ranges[a->range].scope.layer;
        }
        if (at_launch >= 0 && (size_t)at_launch < p->n_ranges) {
            a->step = p->ranges[at_launch].scope.step;
            a->warmup = p->ranges[at_launch].scope.warmup;
        } else if (a->op >= 0 && (size_t)a->op < p->n_ops) {
            a->step = p->ops[a->op].scope.step;
            a->warmup = p->ops[a->op].scope.warmup;
        }
    }
    for (size_t i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op >= 0 && (size_t)p->nodes[i].op < p->n_ops) p->ops[p->nodes[i].op].captured = true;
    /* work with no launch record at all still belongs to a step: the last one begun on the host
     * before it started (a step's work starts before the next step begins: the driver synchronizes
     * at each step's end); it stays without op and phase, and the summary counts it as unattributed */
    for (size_t i = 0; i < p->n_acts; i++) {
        tlm_prof_activity *a = &p->acts[i];
        if (a->op >= 0 || a->range >= 0 || a->step >= 0) continue;
        int32_t best = -1;
        for (size_t r = 0; r < p->n_ranges; r++)
            if (p->ranges[r].kind == TLM_RANGE_STEP && p->ranges[r].begin_ns <= a->start_ns &&
                (best < 0 || p->ranges[r].begin_ns > p->ranges[best].begin_ns))
                best = (int32_t)r;
        if (best >= 0) {
            a->step = p->ranges[best].scope.step;
            a->warmup = p->ranges[best].scope.warmup;
        }
    }
}

/* foreign programs: ranges of each thread sorted by begin time */
typedef struct {
    uint32_t thread;
    size_t *ix; /* into p->ranges, by begin */
    size_t n;
} thread_ranges;

static int cmp_range_thread_begin(const void *a, const void *b, void *user) {
    const tlm_profile *p = user;
    const tlm_prof_range *x = &p->ranges[*(const size_t *)a], *y = &p->ranges[*(const size_t *)b];
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    if (x->begin_ns != y->begin_ns) return x->begin_ns < y->begin_ns ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1; /* a parent was opened before its child */
}

/* the innermost range of one thread open at time t (begin <= t < end), or -1 */
static int32_t innermost_at(const tlm_profile *p, const thread_ranges *tr, int64_t t) {
    size_t lo = 0, hi = tr->n;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (p->ranges[tr->ix[mid]].begin_ns <= t) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    /* the innermost range holding t is the last one begun before t, or one of its ancestors */
    for (int32_t r = (int32_t)tr->ix[lo - 1]; r >= 0; r = p->ranges[r].parent)
        if (p->ranges[r].begin_ns <= t && t < p->ranges[r].end_ns) return r;
    return -1;
}

/* "step 3" -> 3, "warmup step 0" -> 0 with *warmup; "layer 7" -> 7; else -1 */
static int number_after(const char *s, const char *prefix) {
    const size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] < '0' || s[n] > '9') return -1;
    char *end;
    const long v = strtol(s + n, &end, 10);
    return *end == '\0' && v < 1000000000 ? (int)v : -1;
}

static int phase_of_name(const char *s) {
    if (strcmp(s, "forward") == 0) return TLM_PHASE_FORWARD;
    if (strcmp(s, "backward") == 0) return TLM_PHASE_BACKWARD;
    if (strcmp(s, "optimizer") == 0 || strcmp(s, "optimizer step") == 0) return TLM_PHASE_OPTIMIZER;
    return -1;
}

static void resolve_foreign(tlm_profile *p, const size_t *lix) {
    size_t *rix = malloc((p->n_ranges ? p->n_ranges : 1) * sizeof *rix);
    thread_ranges *threads = calloc(p->n_ranges ? p->n_ranges : 1, sizeof *threads);
    size_t n_threads = 0;
    if (!rix || !threads) goto done; /* out of memory: activities stay unattributed */
    for (size_t i = 0; i < p->n_ranges; i++) rix[i] = i;
    qsort_r(rix, p->n_ranges, sizeof *rix, cmp_range_thread_begin, p);
    for (size_t i = 0; i < p->n_ranges; i++) {
        const uint32_t t = p->ranges[rix[i]].thread;
        if (!n_threads || threads[n_threads - 1].thread != t) threads[n_threads++] = (thread_ranges){t, rix + i, 0};
        threads[n_threads - 1].n++;
    }
    for (size_t i = 0; i < p->n_acts; i++) {
        tlm_prof_activity *a = &p->acts[i];
        const tlm_prof_launch *l = a->correlation ? find_launch(p, lix, a->correlation) : NULL;
        if (!l) continue;
        int32_t r = -1;
        for (size_t k = 0; k < n_threads && r < 0; k++)
            if (threads[k].thread == l->thread) r = innermost_at(p, &threads[k], l->api_ns);
        if (r < 0) /* none on the launching thread: another thread's, the latest begun */
            for (size_t k = 0; k < n_threads; k++) {
                const int32_t c = innermost_at(p, &threads[k], l->api_ns);
                if (c >= 0 && (r < 0 || p->ranges[c].begin_ns > p->ranges[r].begin_ns)) r = c;
            }
        a->range = r;
        for (int32_t q = r; q >= 0; q = p->ranges[q].parent) {
            const char *name = tlm_profile_str(p, p->ranges[q].name);
            const int ph = phase_of_name(name);
            if (ph >= 0 && a->phase == TLM_PHASE_SETUP) a->phase = (tlm_phase)ph;
            const int layer = number_after(name, "layer "); /* the layer table is dense: a bounded number */
            if (a->layer < 0 && layer >= 0 && layer <= TLM_PROF_MAX_LAYER) a->layer = layer;
            if (a->step < 0 && number_after(name, "step ") >= 0) a->step = number_after(name, "step ");
            if (a->step < 0 && number_after(name, "warmup step ") >= 0) {
                a->step = number_after(name, "warmup step ");
                a->warmup = true;
            }
        }
    }
done:
    free(rix);
    free(threads);
}

void tlm_profile_resolve(tlm_profile *p) {
    if (p->resolved) return;
    size_t *lix = sorted_index(p, p->n_launches, cmp_launch);
    size_t *nix = sorted_index(p, p->n_nodes, cmp_node);
    if (lix && nix) {
        if (p->foreign) resolve_foreign(p, lix);
        else resolve_tlm(p, lix, nix);
        p->resolved = true;
    }
    free(lix);
    free(nix);
}
