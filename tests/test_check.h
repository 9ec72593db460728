/* test_check.h — what the C tests share: check() prints one line per assertion ("ok" or
 * "FAIL" and what was checked) and counts it; die_on() ends the test on a setup failure;
 * test_finish() prints the closing "N passed, N failed" line and gives the exit status. */
#ifndef TLM_TESTS_TEST_CHECK_H
#define TLM_TESTS_TEST_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "tlm/backend.h"
#include "tlm/status.h"

static int passed, failed;

static inline void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

static inline void die_on(tlm_status s, const char *what) {
    if (s != TLM_OK) {
        fprintf(stderr, "%s: %s\n", what, tlm_last_error());
        exit(1);
    }
}

/* tracked bytes held other than the backend's own workspaces (the CPU ops' scratch, cuBLASLt's
 * workspace, the CUDA column-sum scratch): what a test's buffers left behind */
static inline void test_add_held_(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name) {
    static const char *const own[] = {"cpu.scratch", "cublaslt.workspace", "cuda.scratch"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(name, own[i]) == 0) return;
    *(size_t *)user += bytes;
}
static inline size_t test_bytes_held(const tlm_backend *be) {
    size_t n = 0;
    tlm_mem_for_each(be, test_add_held_, &n);
    return n;
}

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
