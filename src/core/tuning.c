/* tuning.c — the knob registry (tlm/tuning.h): the one place a TLM_* environment variable is read. */
#include "tlm/tuning.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { KNOB_INT, KNOB_STR };

typedef struct {
    const char *name;
    tlm_knob_kind kind;
    int type;
    int dflt, lo, hi;
    const char *doc;
} knob_def;

static const knob_def knobs[TLM_KNOB_COUNT] = {
#define TLM_KNOB(id, kind, type, dflt, lo, hi, doc) {"TLM_" #id, TLM_KNOB_##kind, KNOB_##type, dflt, lo, hi, doc},
#include "tlm/knobs.def"
#undef TLM_KNOB
};

#define KNOB_TEXT 256 /* a STR knob's longest value, with its NUL */

static struct {
    bool set[TLM_KNOB_COUNT]; /* given a non-empty value */
    int num[TLM_KNOB_COUNT];
    char text[TLM_KNOB_COUNT][KNOB_TEXT];
} current;

static pthread_once_t loaded = PTHREAD_ONCE_INIT;

/* parses `value` (NULL or "": the default) into knob k's slot; INVALID_ARGUMENT naming it */
static tlm_status knob_parse(tlm_knob k, const char *value) {
    const knob_def *d = &knobs[k];
    if (!value || !*value) {
        current.set[k] = false;
        current.num[k] = d->dflt;
        current.text[k][0] = '\0';
        return TLM_OK;
    }
    if (strlen(value) >= KNOB_TEXT)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: longer than %d characters", d->name, KNOB_TEXT - 1);
    if (d->type == KNOB_INT) {
        char *end;
        errno = 0;
        const long v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < d->lo || v > d->hi)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s=%s: not a whole number from %d to %d (%s)", d->name, value,
                            d->lo, d->hi, d->doc);
        current.num[k] = (int)v;
    }
    current.set[k] = true;
    snprintf(current.text[k], KNOB_TEXT, "%s", value);
    return TLM_OK;
}

tlm_status tlm_tuning_init(void) {
    for (int k = 0; k < TLM_KNOB_COUNT; k++) TLM_TRY(knob_parse((tlm_knob)k, getenv(knobs[k].name)));
    return TLM_OK;
}

static void load_once(void) {
    if (tlm_tuning_init() != TLM_OK) tlm_fatal("%s", tlm_last_error());
}

static const knob_def *knob_of(tlm_knob k) {
    TLM_ASSERT(k >= 0 && k < TLM_KNOB_COUNT);
    pthread_once(&loaded, load_once);
    return &knobs[k];
}

int tlm_knob_int(tlm_knob k) {
    TLM_ASSERT(knob_of(k)->type == KNOB_INT);
    return current.num[k];
}

const char *tlm_knob_str(tlm_knob k) {
    TLM_ASSERT(knob_of(k)->type == KNOB_STR);
    return current.text[k];
}

tlm_status tlm_knob_set(tlm_knob k, const char *value) {
    const knob_def *d = knob_of(k);
    TLM_TRY(knob_parse(k, value));
    if (value && *value) setenv(d->name, value, 1);
    else unsetenv(d->name);
    return TLM_OK;
}

const char *tlm_knob_name(tlm_knob k) { return knob_of(k)->name; }

const char *tlm_knob_kind_name(tlm_knob k) {
    static const char *const names[] = {"user", "test", "dev", "internal"};
    return names[knob_of(k)->kind];
}

bool tlm_knob_changed(tlm_knob k) {
    const knob_def *d = knob_of(k);
    return current.set[k] && (d->type == KNOB_STR || current.num[k] != d->dflt);
}

int tlm_tuning_describe(char *buf, size_t n) {
    int count = 0;
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int k = 0; k < TLM_KNOB_COUNT; k++) {
        if (!tlm_knob_changed((tlm_knob)k) || knobs[k].kind == TLM_KNOB_INTERNAL) continue;
        if (used < n) {
            const int w = snprintf(buf + used, n - used, "%s%s=%s", count ? " " : "", knobs[k].name, current.text[k]);
            used += w > 0 ? (size_t)w : 0;
        }
        count++;
    }
    return count;
}

void tlm_tuning_print_header(FILE *f, const char *prefix) {
    char buf[1024];
    if (tlm_tuning_describe(buf, sizeof buf) > 0) fprintf(f, "%sknobs: %s\n", prefix ? prefix : "", buf);
}

void tlm_tuning_print_doc(FILE *f, bool markdown) {
    if (markdown) {
        fprintf(f, "| variable | kind | default | values | what it does |\n|---|---|---|---|---|\n");
    }
    for (int k = 0; k < TLM_KNOB_COUNT; k++) {
        const knob_def *d = knob_of((tlm_knob)k);
        char dflt[32], range[48];
        if (d->type == KNOB_INT) {
            snprintf(dflt, sizeof dflt, "%d", d->dflt);
            snprintf(range, sizeof range, "%d to %d", d->lo, d->hi);
        } else {
            snprintf(dflt, sizeof dflt, "unset");
            snprintf(range, sizeof range, "text");
        }
        if (markdown)
            fprintf(f, "| `%s` | %s | %s | %s | %s |\n", d->name, tlm_knob_kind_name((tlm_knob)k), dflt, range,
                    d->doc);
        else if (current.set[k])
            fprintf(f, "%-17s %-8s =%s (default %s)\n    %s\n", d->name, tlm_knob_kind_name((tlm_knob)k),
                    current.text[k], dflt, d->doc);
        else
            fprintf(f, "%-17s %-8s default %s (%s)\n    %s\n", d->name, tlm_knob_kind_name((tlm_knob)k), dflt, range,
                    d->doc);
    }
}
