/* plot.c — the plotting framework of `tlm plot` (plot.h): the registry of plot kinds, the
 * description a kind builds (data blocks and gnuplot commands), and drawing it: gnuplot run through a
 * pipe once, the description sent for each terminal (PNG, SVG) into a private temporary folder, the
 * files then committed together through the one file writer (output.h). */
#define _GNU_SOURCE /* mkdtemp */
#include "tlm/plot.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/input.h"
#include "tlm/output.h"
#include "tlm/tuning.h"
#include "tlm/util.h"

extern char **environ;

/* ---- the registry: one name per kind; each is defined in its own file of src/plot/ --------------- */
#define TLM_PLOT_KINDS(X)                                                                             \
    X(tlm_plot_memory_timeline) X(tlm_plot_memory_context) X(tlm_plot_loss_curve) X(tlm_plot_allreduce_size) \
    X(tlm_plot_allreduce_nproc) X(tlm_plot_allreduce_backends) X(tlm_plot_ddp_buckets) X(tlm_plot_ddp_scaling)

#define DECLARE(k) extern const tlm_plot_kind k;
TLM_PLOT_KINDS(DECLARE)
#undef DECLARE
#define ENTRY(k) &k,
static const tlm_plot_kind *const kinds[] = {TLM_PLOT_KINDS(ENTRY)};
#undef ENTRY

int tlm_plot_num_kinds(void) { return (int)(sizeof kinds / sizeof kinds[0]); }
const tlm_plot_kind *tlm_plot_kind_at(int i) { return i >= 0 && i < tlm_plot_num_kinds() ? kinds[i] : NULL; }

const tlm_plot_kind *tlm_plot_find(const char *name) {
    for (int i = 0; i < tlm_plot_num_kinds(); i++)
        if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
    return NULL;
}

/* ---- the description ----------------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
} text;

struct tlm_plot {
    text data, cmds;
    char **strs;
    int n_strs, cap_strs;
    int width, height;
    bool oom;
};

static void vappend(tlm_plot *p, text *t, const char *fmt, va_list ap) {
    if (p->oom) return;
    va_list aq;
    va_copy(aq, ap);
    const int k = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (k < 0) return;
    if (t->n + (size_t)k + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->n + (size_t)k + 1) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            p->oom = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    t->n += (size_t)k;
}

static void append(tlm_plot *p, text *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(tlm_plot *p, text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vappend(p, t, fmt, ap);
    va_end(ap);
}

void tlm_plot_data_begin(tlm_plot *p, const char *name) { append(p, &p->data, "$%s << EOD\n", name); }

void tlm_plot_row(tlm_plot *p, int n, const double *v) {
    for (int i = 0; i < n; i++) {
        if (isfinite(v[i])) append(p, &p->data, i ? " %.10g" : "%.10g", v[i]);
        else append(p, &p->data, i ? " NaN" : "NaN");
    }
    append(p, &p->data, "\n");
}

void tlm_plot_data_end(tlm_plot *p) { append(p, &p->data, "EOD\n"); }

void tlm_plot_cmd(tlm_plot *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vappend(p, &p->cmds, fmt, ap);
    va_end(ap);
    append(p, &p->cmds, "\n");
}

const char *tlm_plot_str(tlm_plot *p, const char *s) {
    static const char none[] = "''";
    if (p->oom) return none;
    if (p->n_strs == p->cap_strs) {
        const int cap = p->cap_strs ? 2 * p->cap_strs : 16;
        char **v = realloc(p->strs, (size_t)cap * sizeof *v);
        if (!v) {
            p->oom = true;
            return none;
        }
        p->strs = v;
        p->cap_strs = cap;
    }
    char *q = malloc(2 * strlen(s) + 3), *w = q;
    if (!q) {
        p->oom = true;
        return none;
    }
    *w++ = '\'';
    for (const char *c = s; *c; c++) {
        if ((unsigned char)*c < 0x20) continue;
        if (*c == '\'') *w++ = '\'';
        *w++ = *c;
    }
    *w++ = '\'';
    *w = '\0';
    p->strs[p->n_strs++] = q;
    return q;
}

const char *tlm_plot_json_str(const cJSON *o, const char *key, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

double tlm_plot_json_num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

tlm_status tlm_plot_json_int(const cJSON *o, const char *key, int dflt, int lo, int hi, const char *file, int *out) {
    *out = dflt;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return TLM_OK;
    int64_t i;
    if (!tlm_double_to_int64(v->valuedouble, lo, hi, &i))
        return tlm_fail(TLM_ERR_FORMAT, "%s: \"%s\": %.15g is not a whole number in [%d, %d]", file, key,
                        v->valuedouble, lo, hi);
    *out = (int)i;
    return TLM_OK;
}

bool tlm_plot_json_true(const cJSON *o, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

bool tlm_plot_append(char *buf, size_t cap, size_t *used, const char *fmt, ...) {
    if (*used >= cap) return false;
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(buf + *used, cap - *used, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - *used) {
        buf[*used] = '\0';
        return false;
    }
    *used += (size_t)k;
    return true;
}

void tlm_plot_size(tlm_plot *p, int width, int height) {
    if (width > 0) p->width = width;
    if (height > 0) p->height = height;
}

static void plot_free(tlm_plot *p) {
    free(p->data.s);
    free(p->cmds.s);
    for (int i = 0; i < p->n_strs; i++) free(p->strs[i]);
    free(p->strs);
}

/* ---- gnuplot ------------------------------------------------------------------------------------------- */

tlm_status tlm_plot_find_gnuplot(char *path, size_t n) {
    const char *env = tlm_knob_str(TLM_KNOB_GNUPLOT);
    if (env && *env) {
        if (access(env, X_OK) != 0)
            return tlm_fail(TLM_ERR_UNSUPPORTED, "TLM_GNUPLOT=%s is not an executable program", env);
        snprintf(path, n, "%s", env);
        return TLM_OK;
    }
    if (tlm_find_program("gnuplot", path, n)) return TLM_OK;
    return tlm_fail(TLM_ERR_UNSUPPORTED, "gnuplot not found on PATH: tlm plot draws with gnuplot; install the Debian "
                    "package gnuplot-nox (apt-get install gnuplot-nox) or set TLM_GNUPLOT to the program");
}

/* the first lines of gnuplot's messages, for an error */
static void read_messages(const char *path, char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    const size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
    for (char *c = buf; *c; c++)
        if (*c == '\n' && c[1]) *c = ' ';
}

/* writes all of s to fd; false on a write error (a gnuplot that died: EPIPE) */
static bool write_all(int fd, const char *s, size_t n) {
    while (n) {
        const ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

/* runs gnuplot on the description, once per wanted format, into dir/plot.png and dir/plot.svg */
static tlm_status run_gnuplot(const char *gnuplot, tlm_plot *p, const char *dir, bool png, bool svg) {
    text script = {0};
    tlm_plot q = {.width = p->width}; /* only for append's out-of-memory flag */
    append(&q, &script, "set encoding utf8\n%s", p->data.s ? p->data.s : "");
    const char *fmts[2] = {png ? "png" : NULL, svg ? "svg" : NULL};
    for (int i = 0; i < 2; i++) {
        if (!fmts[i]) continue;
        append(&q, &script, "reset\n");
        if (i == 0)
            append(&q, &script,
                   "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                   "  set terminal pngcairo size %d,%d enhanced font 'Sans,11' background rgb 'white'\n"
                   "} else {\n  set terminal png size %d,%d enhanced background rgb 'white'\n}\n",
                   p->width, p->height, p->width, p->height);
        else
            append(&q, &script, "set terminal svg size %d,%d dynamic enhanced font 'Sans,11' background rgb 'white'\n",
                   p->width, p->height);
        append(&q, &script, "set output '%s/plot.%s'\n%s\nunset output\n", dir, fmts[i], p->cmds.s ? p->cmds.s : "");
    }
    if (q.oom) {
        free(script.s);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the gnuplot script");
    }
    char err_path[4200];
    snprintf(err_path, sizeof err_path, "%s/gnuplot.err", dir);
    int fds[2];
    if (pipe(fds) != 0) {
        free(script.s);
        return tlm_fail(TLM_ERR_IO, "pipe to gnuplot: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)gnuplot, NULL};
    pid_t pid;
    const int rc = posix_spawn(&pid, gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    if (rc != 0) {
        close(fds[1]);
        free(script.s);
        return tlm_fail(TLM_ERR_UNSUPPORTED, "cannot run %s: %s", gnuplot, strerror(rc));
    }
    /* a gnuplot that stops reading must not kill tlm with SIGPIPE: the write fails instead */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    const bool sent = write_all(fds[1], script.s, script.n);
    close(fds[1]);
    sigaction(SIGPIPE, &old, NULL);
    free(script.s);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char msg[600];
    read_messages(err_path, msg, sizeof msg);
    if (!sent || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return tlm_fail(TLM_ERR_BACKEND, "gnuplot (%s) failed%s%s", gnuplot, msg[0] ? ": " : "", msg);
    return TLM_OK;
}

/* a plot's input (JSON), or a picture gnuplot drew: at most this many bytes */
#define MAX_PLOT_FILE_BYTES ((uint64_t)1 << 30)

/* reads a whole regular file (n bytes, at most MAX_PLOT_FILE_BYTES) into *data (malloc'ed, NUL-terminated) */
static tlm_status read_file(const char *path, char **data, size_t *n) {
    return tlm_input_read_text(path, MAX_PLOT_FILE_BYTES, data, n);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void free_docs(cJSON **docs, int n) {
    for (int i = 0; docs && i < n; i++) cJSON_Delete(docs[i]);
    free(docs);
}

/* reads and parses the n inputs into *docs (calloc'ed, n entries; free_docs frees them, on failure too) */
static tlm_status read_inputs(const tlm_plot_kind *k, const char *const *inputs, int n, cJSON ***docs) {
    if (!(*docs = calloc((size_t)(n > 0 ? n : 1), sizeof **docs)))
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < n; i++) {
        char *data;
        size_t len;
        TLM_TRY(read_file(inputs[i], &data, &len));
        (*docs)[i] = cJSON_ParseWithLength(data, len);
        free(data);
        if (!(*docs)[i])
            return tlm_fail(TLM_ERR_FORMAT, "%s is not JSON (tlm plot %s reads %s)", inputs[i], k->name, k->reads);
    }
    return TLM_OK;
}

/* OUT without a .png / .svg extension */
static void stem(const char *out, char *buf, size_t n) {
    snprintf(buf, n, "%s", out);
    const size_t k = strlen(buf);
    if (k > 4 && (strcmp(buf + k - 4, ".png") == 0 || strcmp(buf + k - 4, ".svg") == 0)) buf[k - 4] = '\0';
}

tlm_status tlm_plot_render(const tlm_plot_kind *k, const char *const *inputs, int n, const tlm_plot_options *o) {
    if (n < k->min_inputs || n > k->max_inputs)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "tlm plot %s takes %d to %d input files (%s), not %d", k->name,
                        k->min_inputs, k->max_inputs, k->reads, n);
    if (!o->out || !*o->out) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "tlm plot %s: no output name", k->name);
    if (!o->png && !o->svg) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "tlm plot %s: neither PNG nor SVG asked for", k->name);
    tlm_io_plan files; /* every file checked before anything runs: an output over an input is refused */
    tlm_io_plan_init(&files);
    for (int i = 0; i < n; i++) tlm_io_plan_input(&files, "FILE", inputs[i]);
    char base[4096], path[4200];
    stem(o->out, base, sizeof base);
    for (int i = 0; i < 2; i++)
        if (i ? o->svg : o->png) {
            snprintf(path, sizeof path, "%s.%s", base, i ? "svg" : "png");
            tlm_io_plan_output(&files, "--out", path);
        }
    TLM_TRY(tlm_io_plan_check(&files));
    cJSON **docs = NULL;
    tlm_status s = read_inputs(k, inputs, n, &docs);
    char gnuplot[4096]; /* looked for once the inputs are read: a bad input is named with or without gnuplot */
    if (s == TLM_OK) s = tlm_plot_find_gnuplot(gnuplot, sizeof gnuplot);
    tlm_plot p = {.width = 1200, .height = 700};
    if (s == TLM_OK) s = k->build(&p, (const struct cJSON *const *)docs, inputs, n);
    if (s == TLM_OK && p.oom) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory describing the plot");
    if (s == TLM_OK) tlm_plot_size(&p, o->width, o->height);
    char dir[4096] = "";
    if (s == TLM_OK) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tlm-plot.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            s = tlm_fail(TLM_ERR_IO, "cannot make a temporary folder in %s: %s", tmp && *tmp ? tmp : "/tmp",
                         strerror(errno));
            dir[0] = '\0';
        }
    }
    if (s == TLM_OK) s = run_gnuplot(gnuplot, &p, dir, o->png, o->svg);
    if (s == TLM_OK) { /* both files, or neither */
        tlm_output_batch_begin();
        const char *fmts[2] = {o->png ? "png" : NULL, o->svg ? "svg" : NULL};
        for (int i = 0; i < 2 && s == TLM_OK; i++) {
            if (!fmts[i]) continue;
            char from[4200], to[4200];
            snprintf(from, sizeof from, "%s/plot.%s", dir, fmts[i]);
            snprintf(to, sizeof to, "%s.%s", base, fmts[i]);
            char *data;
            size_t len;
            s = read_file(from, &data, &len);
            if (s == TLM_OK && len == 0) s = tlm_fail(TLM_ERR_BACKEND, "gnuplot wrote an empty %s", fmts[i]);
            if (s == TLM_OK) s = tlm_output_write_file(to, data, len);
            if (data) free(data);
        }
        const tlm_status e = tlm_output_batch_end(s == TLM_OK);
        if (s == TLM_OK) s = e;
    }
    if (dir[0]) remove_dir(dir);
    plot_free(&p);
    free_docs(docs, n);
    return s;
}

tlm_status tlm_plot_describe(const tlm_plot_kind *k, const char *const *inputs, int n, char **script) {
    *script = NULL;
    if (n < k->min_inputs || n > k->max_inputs)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "tlm plot %s takes %d to %d input files (%s), not %d", k->name,
                        k->min_inputs, k->max_inputs, k->reads, n);
    cJSON **docs = NULL;
    tlm_status s = read_inputs(k, inputs, n, &docs);
    tlm_plot p = {.width = 1200, .height = 700};
    if (s == TLM_OK) s = k->build(&p, (const struct cJSON *const *)docs, inputs, n);
    if (s == TLM_OK && p.oom) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory describing the plot");
    if (s == TLM_OK && asprintf(script, "%s%s", p.data.s ? p.data.s : "", p.cmds.s ? p.cmds.s : "") < 0) {
        *script = NULL;
        s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory describing the plot");
    }
    plot_free(&p);
    free_docs(docs, n);
    return s;
}
