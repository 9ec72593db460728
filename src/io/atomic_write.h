/* atomic_write.h — write a file under "<path>.tmp", then rename it to <path> (internal).
 * Readers never see a half-written file: on any failure the temporary file is removed and
 * <path> is left as it was. Used by the safetensors and .npy writers.
 *
 *   tlm_atomic_file w;
 *   TLM_TRY(tlm_atomic_open(&w, path));
 *   tlm_atomic_write(&w, bytes, n);   ... as often as needed; errors are remembered
 *   return tlm_atomic_commit(&w);     flush, fsync, close, rename (or clean up); TLM_ERR_IO */
#ifndef TLM_IO_ATOMIC_WRITE_H
#define TLM_IO_ATOMIC_WRITE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlm/status.h"

typedef struct {
    FILE *f;
    const char *path;
    char *tmp;      /* "<path>.tmp", owned */
    int err;        /* first errno seen by a write (0: none) */
} tlm_atomic_file;

static inline tlm_status tlm_atomic_open(tlm_atomic_file *w, const char *path) {
    size_t len = strlen(path);
    w->path = path;
    w->err = 0;
    w->f = NULL;
    w->tmp = malloc(len + 5);
    if (!w->tmp) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    memcpy(w->tmp, path, len);
    memcpy(w->tmp + len, ".tmp", 5);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int e = errno;
        tlm_status s = tlm_fail(TLM_ERR_IO, "%s: cannot create %s: %s", path, w->tmp, strerror(e));
        free(w->tmp);
        w->tmp = NULL;
        return s;
    }
    return TLM_OK;
}

static inline void tlm_atomic_write(tlm_atomic_file *w, const void *data, size_t n) {
    if (w->err || n == 0) return;
    errno = 0;
    if (fwrite(data, 1, n, w->f) != n) w->err = errno ? errno : EIO;
}

/* Gives up: closes and removes the temporary file. Returns s unchanged. */
static inline tlm_status tlm_atomic_abort(tlm_atomic_file *w, tlm_status s) {
    if (w->f) fclose(w->f);
    if (w->tmp) remove(w->tmp);
    free(w->tmp);
    w->f = NULL;
    w->tmp = NULL;
    return s;
}

static inline tlm_status tlm_atomic_commit(tlm_atomic_file *w) {
    errno = 0;
    if (!w->err && fflush(w->f) != 0) w->err = errno ? errno : EIO;
    if (!w->err && fsync(fileno(w->f)) != 0 && errno != EINVAL) w->err = errno; /* EINVAL: not syncable */
    errno = 0;
    int close_rc = fclose(w->f);
    w->f = NULL;
    if (!w->err && close_rc != 0) w->err = errno ? errno : EIO;
    if (w->err) {
        tlm_status s = tlm_fail(TLM_ERR_IO, "%s: cannot write %s: %s", w->path, w->tmp, strerror(w->err));
        return tlm_atomic_abort(w, s);
    }
    if (rename(w->tmp, w->path) != 0) {
        tlm_status s = tlm_fail(TLM_ERR_IO, "%s: cannot rename %s to it: %s", w->path, w->tmp,
                                strerror(errno));
        return tlm_atomic_abort(w, s);
    }
    free(w->tmp);
    w->tmp = NULL;
    return TLM_OK;
}

#endif
