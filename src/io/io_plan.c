/* io_plan.c — a command's files, declared before it does any work and checked together (output.h,
 * tlm_io_plan): an output may not be an input, another output, a file inside a directory another
 * reader or writer owns, or an existing file that is not a regular file. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tlm/output.h"

void tlm_io_plan_init(tlm_io_plan *p) {
    p->n = 0;
    p->overflow = false;
    p->used = 0;
}

/* a copy of s in the pool: its offset, or -1 when full */
static int keep(tlm_io_plan *p, const char *s) {
    const size_t n = strlen(s) + 1;
    if (p->used + n > sizeof p->pool) {
        p->overflow = true;
        return -1;
    }
    memcpy(p->pool + p->used, s, n);
    const int at = (int)p->used;
    p->used += n;
    return at;
}

static void add(tlm_io_plan *p, tlm_io_kind kind, const char *flag, const char *path, const char *suffix) {
    if (!path) return;
    if (p->n == TLM_IO_PLAN_MAX) {
        p->overflow = true;
        return;
    }
    const int f = keep(p, flag), a = keep(p, path), x = keep(p, suffix ? suffix : "");
    if (f < 0 || a < 0 || x < 0) return;
    p->e[p->n].kind = kind;
    p->e[p->n].flag = f;
    p->e[p->n].path = a;
    p->e[p->n].suffix = x;
    p->n++;
}

void tlm_io_plan_input(tlm_io_plan *p, const char *flag, const char *path) { add(p, TLM_IO_INPUT, flag, path, NULL); }
void tlm_io_plan_output(tlm_io_plan *p, const char *flag, const char *path) { add(p, TLM_IO_OUTPUT, flag, path, NULL); }
void tlm_io_plan_outputs(tlm_io_plan *p, const char *flag, const char *prefix, const char *suffix) {
    add(p, TLM_IO_OUTPUTS, flag, prefix, suffix);
}
void tlm_io_plan_inside(tlm_io_plan *p, const char *flag, const char *dir) { add(p, TLM_IO_INSIDE, flag, dir, NULL); }

/* ---- the check ------------------------------------------------------------------------------------------ */

/* One entry resolved: its canonical spelling (the real path of its directory, then its name; a
 * directory entry's own real path), and what stands at the path now. */
typedef struct {
    const char *flag, *path, *suffix;
    tlm_io_kind kind;
    char canon[PATH_MAX + NAME_MAX + 2];
    char real[PATH_MAX]; /* realpath of an existing path (links followed); "" otherwise */
    bool exists, lexists; /* stat, lstat succeeded */
    dev_t dev;
    ino_t ino;
    mode_t lmode; /* lstat's mode */
} resolved;

static void canonical(const char *path, bool whole, char *out, size_t n) {
    char buf[PATH_MAX];
    if (whole && realpath(path, buf)) { /* a directory: its own real path */
        snprintf(out, n, "%s", buf);
        return;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0'; /* "a/" is a */
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    char name[NAME_MAX + 1];
    const size_t name_len = strlen(base);
    if (name_len > NAME_MAX) { /* no file can have this name: as spelled */
        snprintf(out, n, "%s", path);
        return;
    }
    memcpy(name, base, name_len + 1);
    if (slash == dir) snprintf(dir, sizeof dir, "/");
    else if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    if (!strcmp(name, ".") || !strcmp(name, "..") || !realpath(dir, buf)) {
        snprintf(out, n, "%s", path); /* a directory not there yet: as spelled */
        return;
    }
    snprintf(out, n, "%s%s%s", buf, strcmp(buf, "/") ? "/" : "", name);
}

static void resolve(const tlm_io_plan *p, int i, resolved *r) {
    r->flag = p->pool + p->e[i].flag;
    r->path = p->pool + p->e[i].path;
    r->suffix = p->pool + p->e[i].suffix;
    r->kind = p->e[i].kind;
    canonical(r->path, r->kind == TLM_IO_INSIDE, r->canon, sizeof r->canon);
    struct stat st;
    r->exists = stat(r->path, &st) == 0;
    r->dev = st.st_dev;
    r->ino = st.st_ino;
    if (!r->exists || !realpath(r->path, r->real)) r->real[0] = '\0';
    r->lexists = lstat(r->path, &st) == 0;
    r->lmode = st.st_mode;
}

static bool same_file(const resolved *a, const resolved *b) {
    return !strcmp(a->canon, b->canon) || (a->exists && b->exists && a->dev == b->dev && a->ino == b->ino) ||
           (a->real[0] && !strcmp(a->real, b->real));
}

/* whether `name` is below the directory `dir` */
static bool below(const char *name, const char *dir) {
    const size_t n = strlen(dir);
    return n && !strncmp(name, dir, n) && (name[n] == '/' || dir[n - 1] == '/');
}

/* whether `name` is one of the files prefix*suffix */
static bool of_family(const char *name, const resolved *f) {
    const size_t n = strlen(name), lp = strlen(f->canon), ls = strlen(f->suffix);
    return n >= lp + ls && !strncmp(name, f->canon, lp) && !strcmp(name + n - ls, f->suffix);
}

/* whether a ends with b, or (swap) b with a */
static bool ends_with(const char *a, const char *b, bool swap) {
    if (swap) return ends_with(b, a, false);
    const size_t n = strlen(a), m = strlen(b);
    return n >= m && !strcmp(a + n - m, b);
}

static const char *kind_of(mode_t m) {
    return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) || S_ISBLK(m) ? "a device node"
           : S_ISFIFO(m) ? "a pipe" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* how the message shows an entry: its path, or a family's pattern (FILE.<name>.csv) */
static const char *shown(const resolved *e, char *buf, size_t n) {
    if (e->kind != TLM_IO_OUTPUTS) return e->path;
    snprintf(buf, n, "%s<name>%s", e->path, e->suffix);
    return buf;
}

/* output o (one file, or a family) against another entry x */
static tlm_status check_pair(const resolved *o, const resolved *x) {
    const bool family = o->kind == TLM_IO_OUTPUTS;
    char ob[PATH_MAX + 64], xb[PATH_MAX + 64];
    const char *on = shown(o, ob, sizeof ob), *xn = shown(x, xb, sizeof xb);
    if (x->kind == TLM_IO_INSIDE && (below(o->canon, x->canon) || (!family && below(o->real, x->canon))))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s is inside %s %s, whose files the command reads or saves "
                        "itself: write it elsewhere", o->flag, on, x->flag, xn);
    if (x->kind == TLM_IO_INSIDE) return TLM_OK;
    bool hit;
    if (family && x->kind == TLM_IO_OUTPUTS) /* two families share a name where both ends fit */
        hit = (!strncmp(o->canon, x->canon, strlen(o->canon)) || !strncmp(o->canon, x->canon, strlen(x->canon))) &&
              ends_with(o->suffix, x->suffix, strlen(o->suffix) < strlen(x->suffix));
    else if (family) hit = of_family(x->canon, o) || (x->real[0] && of_family(x->real, o));
    else if (x->kind == TLM_IO_OUTPUTS) hit = of_family(o->canon, x) || (o->real[0] && of_family(o->real, x));
    else hit = same_file(o, x);
    if (!hit) return TLM_OK;
    const char *same = family || x->kind == TLM_IO_OUTPUTS ? "may be the same file as" : "is the same file as";
    if (x->kind == TLM_IO_INPUT)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s %s the input %s %s of this command: an output may not "
                        "replace a file the command reads", o->flag, on, same, x->flag, xn);
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s %s %s %s: two outputs may not share a file", o->flag, on, same,
                    x->flag, xn);
}

tlm_status tlm_io_plan_check(const tlm_io_plan *p) {
    if (p->overflow)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "too many files for one command (at most %d paths, 16 KiB of them)",
                        TLM_IO_PLAN_MAX);
    resolved *r = calloc((size_t)p->n + 1, sizeof *r);
    if (!r) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory checking the command's files");
    for (int i = 0; i < p->n; i++) resolve(p, i, &r[i]);
    tlm_status s = TLM_OK;
    for (int i = 0; s == TLM_OK && i < p->n; i++) {
        const resolved *o = &r[i];
        if (o->kind != TLM_IO_OUTPUT && o->kind != TLM_IO_OUTPUTS) continue;
        if (!o->path[0]) {
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: an empty file name", o->flag);
            break;
        }
        for (int j = 0; s == TLM_OK && j < p->n; j++) /* outputs: each pair once, the later one named first */
            if (j != i && (j < i || (r[j].kind != TLM_IO_OUTPUT && r[j].kind != TLM_IO_OUTPUTS)))
                s = check_pair(o, &r[j]);
        if (s == TLM_OK && o->kind == TLM_IO_OUTPUT && o->lexists && !S_ISREG(o->lmode))
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s exists and is %s: tlm writes outputs as regular files "
                         "only, and does not replace it%s", o->flag, o->path, kind_of(o->lmode),
                         S_ISDIR(o->lmode) ? " (give a file name)" : "");
        else if (s == TLM_OK && o->kind == TLM_IO_OUTPUT && !o->lexists && o->path[strlen(o->path) - 1] == '/')
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s names a directory: give a file name", o->flag, o->path);
    }
    for (int i = 0; s == TLM_OK && i < p->n; i++) { /* a checkpoint directory that is a file: before the run */
        struct stat st;
        if (r[i].kind == TLM_IO_INSIDE && stat(r[i].path, &st) == 0 && !S_ISDIR(st.st_mode))
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s exists and is %s, not a directory", r[i].flag, r[i].path,
                         S_ISREG(st.st_mode) ? "a regular file" : kind_of(st.st_mode));
    }
    for (int i = 0; s == TLM_OK && i < p->n; i++) /* an input in a checkpoint may be replaced by its save */
        for (int j = 0; s == TLM_OK && r[i].kind == TLM_IO_INPUT && j < p->n; j++)
            if (r[j].kind == TLM_IO_INSIDE && (below(r[i].canon, r[j].canon) || below(r[i].real, r[j].canon)))
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s is inside %s %s, whose files the command reads or "
                             "saves itself: move it elsewhere", r[i].flag, r[i].path, r[j].flag, r[j].path);
    for (int i = 0; s == TLM_OK && i < p->n; i++)
        if (r[i].kind == TLM_IO_INPUT) tlm_output_input(r[i].path); /* the writer refuses them too */
    free(r);
    return s;
}
