/* agree.c — the ranks' fingerprints gathered and compared (agreement.h). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/agreement.h"

static tlm_agreement_item *find(tlm_agreement *a, const char *name) {
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->items[i].name, name) == 0) return &a->items[i];
    return NULL;
}

tlm_status tlm_agreement_add(tlm_agreement *a, const char *name, bool given, const char *value) {
    tlm_agreement_item *v = a->n < a->cap ? a->items : realloc(a->items, (size_t)(a->cap + 64) * sizeof *v);
    if (!v) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    a->cap += a->n < a->cap ? 0 : 64; /* grown by 64 items */
    a->items = v;
    tlm_agreement_item *it = &a->items[a->n++];
    memset(it, 0, sizeof *it); /* every byte defined: the items travel whole */
    snprintf(it->name, sizeof it->name, "%s", name);
    it->given = given && value;
    if (it->given) {
        snprintf(it->value, sizeof it->value, "%s", value);
        it->value_hash = XXH3_64bits(value, strlen(value));
    }
    return TLM_OK;
}

tlm_status tlm_agreement_add_file(tlm_agreement *a, const char *name, const char *path) {
    tlm_agreement_item *it = find(a, name);
    if (!it) {
        TLM_TRY(tlm_agreement_add(a, name, true, path));
        it = &a->items[a->n - 1];
    }
    tlm_file_identity id;
    if (tlm_file_identify(path, &id) != TLM_OK) return TLM_OK; /* the path compared; the reader names it */
    it->is_file = true;
    it->file = id;
    return TLM_OK;
}

/* how rank r's item y differs from rank 0's x, into msg; false when it does not */
static bool differs(const tlm_agreement_item *x, const tlm_agreement_item *y, int r, int world, char *msg,
                    size_t n) {
    if (strcmp(x->name, y->name) != 0) {
        snprintf(msg, n, "the ranks run different commands or flags: rank 0 has %s where rank %d has %s", x->name, r,
                 y->name);
        return true;
    }
    if (x->given != y->given) {
        const int with = x->given ? 0 : r, without = x->given ? r : 0;
        if (world == 2) snprintf(msg, n, "%s is given to rank %d only", x->name, with);
        else snprintf(msg, n, "%s is given to rank %d but not to rank %d", x->name, with, without);
        return true;
    }
    if (x->is_file && y->is_file) {
        if (tlm_file_identity_same(&x->file, &y->file)) return false;
        char why[128];
        tlm_file_identity_diff(&x->file, &y->file, why, sizeof why);
        snprintf(msg, n, "%s: rank %d's file differs from rank 0's (%s)", x->name, r, why);
        return true;
    }
    if (x->value_hash == y->value_hash && x->is_file == y->is_file && strcmp(x->value, y->value) == 0) return false;
    snprintf(msg, n, "the ranks disagree on %s: rank 0 has %s, rank %d has %s%s", x->name, x->value, r, y->value,
             x->is_file != y->is_file ? " (one rank cannot read it)" : "");
    return true;
}

tlm_status tlm_agreement_check(tlm_comm *c, const tlm_agreement *a) {
    const int world = c->world_size;
    int *counts = malloc(sizeof(int) * (size_t)world);
    if (!counts) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    tlm_status s = tlm_comm_host_all_gather(c, &a->n, counts, sizeof(int));
    int n = a->n;
    for (int r = 0; s == TLM_OK && r < world; r++) n = counts[r] < n ? counts[r] : n;
    const size_t bytes = (size_t)n * sizeof(tlm_agreement_item);
    tlm_agreement_item *all = s == TLM_OK && n > 0 ? malloc(bytes * (size_t)world) : NULL;
    if (s == TLM_OK && n > 0 && !all) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    /* every rank sends its first n items (the shortest list's length): the same size on every rank */
    if (s == TLM_OK && n > 0) s = tlm_comm_host_all_gather(c, a->items, all, bytes);
    char msg[512] = "";
    for (int i = 0; s == TLM_OK && !msg[0] && i < n; i++)
        for (int r = 1; !msg[0] && r < world; r++) differs(&all[i], &all[(size_t)r * n + i], r, world, msg, sizeof msg);
    for (int r = 1; s == TLM_OK && !msg[0] && r < world; r++)
        if (counts[r] != counts[0])
            snprintf(msg, sizeof msg, "the ranks run different commands: rank 0 has %d flags, rank %d has %d",
                     counts[0], r, counts[r]);
    if (s == TLM_OK && msg[0]) s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s", msg);
    free(all);
    free(counts);
    return s;
}

void tlm_agreement_free(tlm_agreement *a) {
    free(a->items);
    memset(a, 0, sizeof *a);
}
