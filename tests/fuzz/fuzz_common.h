/* fuzz_common.h — what the fuzz harnesses share. The readers take a path (they check every size
 * against the file's size, fstat), so each input is written to a file of this process first:
 * $TMPDIR (else /tmp)/tlm-fuzz-<pid><suffix>, removed at exit. fuzz_require() is the harnesses'
 * oracle: a property of a successful read that does not hold is a crash, as a sanitizer report is.
 * The safetensors and .npy harnesses also write what they read (the writers, output.h's temporary
 * file and rename included) and read it back: the same tensors must come back. */
#ifndef TLM_FUZZ_COMMON_H
#define TLM_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlm/dtype.h"
#include "tlm/status.h"

#define fuzz_require(cond)                                                                             \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "fuzz: %s:%d: property violated: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, tlm_last_error());                                                          \
            abort();                                                                                   \
        }                                                                                              \
    } while (0)

/* $TMPDIR, else /tmp: where the harnesses write their files */
static inline const char *fuzz_tmpdir(void) {
    const char *dir = getenv("TMPDIR");
    return dir && dir[0] ? dir : "/tmp";
}

/* FUZZ_WRITE_SEEDS: the folder a harness that makes its own seeds writes them into (then exits), or NULL */
static inline const char *fuzz_seed_dir(void) {
    const char *dir = getenv("FUZZ_WRITE_SEEDS");
    return dir && dir[0] ? dir : NULL;
}

static char fuzz_paths[4][512];
static int fuzz_num_paths;

static inline void fuzz_remove_inputs(void) {
    for (int i = 0; i < fuzz_num_paths; i++) unlink(fuzz_paths[i]);
}

/* Writes the input to this process's file for `suffix` (".npy", ".bin", ".safetensors"); its path. */
static inline const char *fuzz_write_input(const uint8_t *data, size_t size, const char *suffix) {
    int k = 0;
    while (k < fuzz_num_paths && !strstr(fuzz_paths[k], suffix)) k++;
    if (k == fuzz_num_paths) {
        if (k == 4) abort();
        snprintf(fuzz_paths[k], sizeof fuzz_paths[k], "%s/tlm-fuzz-%d%s", fuzz_tmpdir(), (int)getpid(), suffix);
        if (fuzz_num_paths++ == 0) atexit(fuzz_remove_inputs);
    }
    int fd = open(fuzz_paths[k], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(fuzz_paths[k]);
        abort();
    }
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            perror(fuzz_paths[k]);
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
    return fuzz_paths[k];
}

/* The element count of a shape: every dim >= 0, the product without overflow (0 if a dim is 0);
 * -1 if that does not hold. */
static inline int64_t fuzz_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int zero = 0, overflow = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        zero |= shape[d] == 0;
        overflow |= __builtin_mul_overflow(n, shape[d], &n);
    }
    return zero ? 0 : overflow ? -1 : n;
}

static inline int fuzz_is_float(tlm_dtype t) {
    return t == TLM_DTYPE_F32 || t == TLM_DTYPE_F64 || t == TLM_DTYPE_F16 || t == TLM_DTYPE_BF16;
}

/* The path a harness writes its round trip to: beside its input, removed after each use. */
static inline const char *fuzz_output_path(const char *input) {
    static char out[600];
    snprintf(out, sizeof out, "%s.out%s", input, strrchr(input, '.'));
    return out;
}

/* A failed read must leave a message naming the file (FUZZ_VERBOSE=1 in the environment prints it:
 * why a seed is refused). */
static inline void fuzz_require_message(const char *path) {
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "fuzz: refused: %s\n", tlm_last_error());
    fuzz_require(tlm_last_error()[0] != '\0');
    fuzz_require(strstr(tlm_last_error(), path) != NULL);
}

#endif
