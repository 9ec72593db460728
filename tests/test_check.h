/* test_check.h — what the C tests share: check() prints one line per assertion ("ok" or
 * "FAIL" and what was checked) and counts it; die_on() ends the test on a setup failure;
 * test_finish() prints the closing "N passed, N failed" line and gives the exit status. */
#ifndef TLM_TESTS_TEST_CHECK_H
#define TLM_TESTS_TEST_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

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

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
