/* output.c — the one file writer (output.h): temporary file in the destination's directory,
 * fsync, rename, fsync of the directory; refusals of inputs and non-regular destinations; removal
 * of temporaries on SIGINT, SIGTERM, SIGHUP and SIGPIPE; batches committed together. */
#define _GNU_SOURCE
#include "tlm/output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tlm_output {
    FILE *f;    /* a stream over fd (fopencookie) whose writes keep the first failure's errno in err */
    int fd;     /* the temporary file's descriptor */
    int err;    /* the errno of the first failed write (ENOSPC: a full disk), 0 if none */
    char *path; /* the destination */
    char *tmp;  /* the temporary file beside it */
};

/* ---- the stream: write(2) under stdio, so a failure's reason reaches the commit's message ------------ */

static ssize_t stream_write(void *cookie, const char *buf, size_t n) {
    tlm_output *o = cookie;
    size_t done = 0;
    while (done < n) {
        const ssize_t k = write(o->fd, buf + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { /* stdio marks the stream in error when fewer than n bytes are taken */
            if (!o->err) o->err = k < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)k;
    }
    return (ssize_t)done;
}

static int stream_seek(void *cookie, off64_t *pos, int whence) {
    tlm_output *o = cookie;
    const off_t at = lseek(o->fd, (off_t)*pos, whence);
    if (at < 0) return -1;
    *pos = at;
    return 0;
}

static int stream_close(void *cookie) {
    tlm_output *o = cookie;
    const int rc = close(o->fd);
    if (rc != 0 && !o->err) o->err = errno;
    o->fd = -1;
    return rc;
}

/* ---- the temporaries alive now, for the signal handler ------------------------------------------- */

#define MAX_TEMPS 64
static char *volatile temps[MAX_TEMPS];

static void on_signal(int sig) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temps[i]) unlink(temps[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    static int installed;
    if (installed) return;
    installed = 1;
    /* SIGPIPE: stdout into a pipe whose reader left (`tlm ... --out F | head`), SIGHUP: the
     * terminal gone; both end the process as before, without the temporary */
    const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (int i = 0; i < 4; i++) {
        struct sigaction old;
        sigaction(sigs[i], NULL, &old);
        if (old.sa_handler == SIG_DFL) signal(sigs[i], on_signal); /* leave a caller's own handler alone */
    }
}

static bool track(char *tmp) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (!temps[i]) {
            temps[i] = tmp;
            return true;
        }
    return false;
}

static void untrack(const char *tmp) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temps[i] == tmp) temps[i] = NULL;
}

/* ---- inputs of this command ------------------------------------------------------------------------- */

#define MAX_INPUTS 32
static struct {
    dev_t dev;
    ino_t ino;
    char name[128];
} inputs[MAX_INPUTS];
static int num_inputs;

void tlm_output_input(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || num_inputs == MAX_INPUTS) return;
    inputs[num_inputs].dev = st.st_dev;
    inputs[num_inputs].ino = st.st_ino;
    snprintf(inputs[num_inputs].name, sizeof inputs[num_inputs].name, "%s", path);
    num_inputs++;
}

/* ---- one output ------------------------------------------------------------------------------------- */

static const char *kind_of(mode_t m) {
    return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) || S_ISBLK(m) ? "a device node"
           : S_ISFIFO(m) ? "a pipe" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

tlm_status tlm_output_open(tlm_output **out, const char *path) {
    *out = NULL;
    const size_t len = strlen(path);
    if (len == 0 || len > PATH_MAX - 32)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "output path of %zu characters: %s", len,
                        len ? "too long for a file name and its temporary beside it" : "empty");
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s exists and is %s: tlm writes outputs as regular files only, "
                            "and does not replace it", path, kind_of(st.st_mode));
        for (int i = 0; i < num_inputs; i++)
            if (inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino)
                return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "output %s is the input %s of this command: refusing to "
                                "overwrite it", path, inputs[i].name);
    }
    if (path[len - 1] == '/') return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "output %s names a directory", path);
    tlm_output *o = calloc(1, sizeof *o);
    const char *slash = strrchr(path, '/');
    const size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0; /* with the slash */
    if (o) o->path = strdup(path);
    if (o) o->tmp = malloc(len + 16);
    if (!o || !o->path || !o->tmp) {
        tlm_output_abort(o);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory opening %s", path);
    }
    /* "<dir>/.<name>.XXXXXX" */
    snprintf(o->tmp, len + 16, "%.*s.%s.XXXXXX", (int)dirlen, path, path + dirlen);
    install_handlers();
    const int fd = mkstemp(o->tmp);
    if (fd < 0) {
        const int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        tlm_output_abort(o);
        return tlm_fail(TLM_ERR_IO, "cannot write %s: cannot create a file in its directory: %s", path, strerror(e));
    }
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask); /* mkstemp made it 0600; an output gets the usual mode */
    o->fd = fd;
    const cookie_io_functions_t io = {.write = stream_write, .seek = stream_seek, .close = stream_close};
    if (!track(o->tmp) || !(o->f = fopencookie(o, "wb", io))) {
        close(fd);
        o->fd = -1;
        tlm_output_abort(o);
        return tlm_fail(TLM_ERR_IO, "cannot write %s: too many files open at once", path);
    }
    *out = o;
    return TLM_OK;
}

FILE *tlm_output_file(tlm_output *o) { return o->f; }

void tlm_output_abort(tlm_output *o) {
    if (!o) return;
    if (o->f) fclose(o->f);
    if (o->tmp) {
        untrack(o->tmp);
        unlink(o->tmp);
    }
    free(o->tmp);
    free(o->path);
    free(o);
}

static void fsync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* the rename reaches the disk (best effort: some file systems refuse) */
        close(fd);
    }
}

/* ---- batches ------------------------------------------------------------------------------------------ */

static bool batching;
static tlm_output *staged[MAX_TEMPS];
static int num_staged;

static tlm_status rename_into_place(tlm_output *o) {
    if (rename(o->tmp, o->path) != 0) {
        const tlm_status s = tlm_fail(TLM_ERR_IO, "cannot write %s: renaming %s to it: %s", o->path, o->tmp,
                                      strerror(errno));
        tlm_output_abort(o);
        return s;
    }
    untrack(o->tmp);
    fsync_dir_of(o->path);
    free(o->tmp);
    o->tmp = NULL;
    tlm_output_abort(o); /* frees what is left */
    return TLM_OK;
}

tlm_status tlm_output_commit(tlm_output *o) {
    /* the first failure's own errno (o->err: ENOSPC for a full disk), not a generic EIO */
    errno = 0;
    int err = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) err = o->err ? o->err : errno ? errno : EIO;
    else if (fsync(o->fd) != 0 && errno != EINVAL) err = errno; /* EINVAL: not syncable (a pipe) */
    if (fclose(o->f) != 0 && !err) err = o->err ? o->err : errno ? errno : EIO;
    o->f = NULL;
    if (err) {
        const tlm_status s = tlm_fail(TLM_ERR_IO, "cannot write %s: %s (nothing written)", o->path, strerror(err));
        tlm_output_abort(o);
        return s;
    }
    if (batching && num_staged < MAX_TEMPS) {
        staged[num_staged++] = o;
        return TLM_OK;
    }
    return rename_into_place(o);
}

void tlm_output_batch_begin(void) {
    batching = true;
    num_staged = 0;
}

tlm_status tlm_output_batch_end(bool commit) {
    tlm_status s = TLM_OK;
    for (int i = 0; i < num_staged; i++) {
        if (commit && s == TLM_OK) s = rename_into_place(staged[i]);
        else tlm_output_abort(staged[i]);
    }
    num_staged = 0;
    batching = false;
    return s;
}

bool tlm_output_in_batch(void) { return batching; }

tlm_status tlm_output_write_file(const char *path, const void *data, size_t n) {
    tlm_output *o;
    TLM_TRY(tlm_output_open(&o, path));
    if (n && fwrite(data, 1, n, o->f) != n) { /* the error is reported by the commit */
    }
    return tlm_output_commit(o);
}
