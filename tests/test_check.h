/* test_check.h — the one test harness every C test uses: check() prints one line per assertion
 * ("ok" or "FAIL" and what was checked) and counts it, check_limit() the same for a measured value
 * against its bound; die_on() ends the test on a setup failure; test_backend() gives the test's
 * backend (the CPU, or CUDA for a test built with TLM_TEST_DEVICE="cuda": without a GPU it exits
 * 77, which ctest counts as skipped); test_random_ids() draws token ids; test_fixtures() the
 * PyTorch fixtures' folder; test_bytes_held() what a test left allocated; test_worst_tensor_error()
 * the worst relative error over a model's tensors; test_finish() prints the
 * closing "N passed, N failed" line and gives the exit status, test_finish_backend() the same
 * after checking that the backend holds no buffer and destroying it. */
#ifndef TLM_TESTS_TEST_CHECK_H
#define TLM_TESTS_TEST_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "tlm/backend.h"
#include "tlm/layout.h"
#include "tlm/rng.h"
#include "tlm/status.h"
#include "tlm/util.h"

static int passed, failed;

static inline void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    if (!ok && tlm_last_error()[0]) printf("   [last error: %s]", tlm_last_error());
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) passed++;
    else failed++;
}

/* a measured value against its bound: "ok  what  value (limit L)" */
static inline void check_limit(bool ok, const char *what, double value, double limit) {
    check(ok, "%-72s %.3e (limit %.1e)", what, value, limit);
}

/* status s is `want`, and the message contains `needle` (if not NULL) */
static inline void check_status(tlm_status s, tlm_status want, const char *needle, const char *what) {
    const bool ok = s == want && (!needle || strstr(tlm_last_error(), needle));
    char got[1200];
    snprintf(got, sizeof got, "%s%s%s%s", tlm_status_string(s), s != TLM_OK ? " (" : "",
             s != TLM_OK ? tlm_last_error() : "", s != TLM_OK ? ")" : "");
    if (ok) check(true, "%s -> %s", what, got);
    else check(false, "%s -> %s   [wanted %s%s%s]", what, got, tlm_status_string(want), needle ? " naming " : "",
               needle ? needle : "");
}

static inline void die_on(tlm_status s, const char *what) {
    if (s != TLM_OK) {
        fprintf(stderr, "%s: %s\n", what, tlm_last_error());
        exit(1);
    }
}

/* whether a tracked allocation of this name is one of the backend's own workspaces, kept between
 * calls (some made at their first use, until tlm_backend_release_workspaces): the CPU ops' scratch,
 * cuBLASLt's workspaces, the CUDA column-sum scratch, FlashAttention's split-KV buffer */
static inline bool test_backend_owns(const char *name) {
    static const char *const own[] = {"cpu.scratch", "cublaslt.workspace", "cublaslt.side_workspace", "cuda.scratch",
                                      "cuda.flash_split"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(name, own[i]) == 0) return true;
    return false;
}

/* tracked bytes held other than the backend's own workspaces: what a test's buffers left behind */
static inline void test_add_held_(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name) {
    if (!test_backend_owns(name)) *(size_t *)user += bytes;
}
static inline size_t test_bytes_held(const tlm_backend *be) {
    size_t n = 0;
    tlm_mem_for_each(be, test_add_held_, &n);
    return n;
}

/* The device a test runs on: "cpu", unless built with -DTLM_TEST_DEVICE="cuda" (a GPU twin of a
 * CPU test, tests/CMakeLists.txt). */
#ifndef TLM_TEST_DEVICE
#define TLM_TEST_DEVICE "cpu"
#endif

/* The backend of this test's device; a CUDA test without a usable GPU exits 77 (skipped). */
static inline tlm_backend *test_backend(void) {
    tlm_backend *be = NULL;
    if (strcmp(TLM_TEST_DEVICE, "cuda") == 0 && (!tlm_cuda_available() || tlm_backend_cuda_create(&be, 0) != TLM_OK)) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        exit(77);
    }
    tlm_backends_register_builtin();
    if (!be) die_on(tlm_backend_create(&be, TLM_TEST_DEVICE, 0, 0), TLM_TEST_DEVICE " backend");
    printf("# %s\n", be->description);
    return be;
}

/* n token ids drawn uniformly from [0, bound) by tlm_rng_below, from the generator state `seed` */
static inline void test_random_ids(int32_t *ids, size_t n, uint64_t bound, uint64_t seed) {
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)tlm_rng_below(&seed, bound);
}

/* the tiny model's PyTorch fixtures: $TLM_FIXTURES/tiny (ctest sets it), else tests/fixtures/tiny */
static inline const char *test_fixtures(void) {
    static char dir[512];
    const char *env = getenv("TLM_FIXTURES");
    snprintf(dir, sizeof dir, "%s/tiny", env ? env : "tests/fixtures");
    return dir;
}

/* the worst normwise relative error (tlm_rel_error_f32) over the tensors of layout l, flat host buffers a
 * against b; *where the tensor's name ("" when none differs) */
static inline double test_worst_tensor_error(const tlm_param_layout *l, const float *a, const float *b,
                                             const char **where) {
    double worst = 0;
    *where = "";
    for (int i = 0; i < l->num_tensors; i++) {
        const double e = tlm_rel_error_f32(a + l->tensors[i].offset, b + l->tensors[i].offset, l->tensors[i].numel);
        if (!(e <= worst)) {
            worst = e;
            *where = l->tensors[i].name;
        }
    }
    return worst;
}

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* the end of a test with a backend: checks that every buffer was freed, destroys the backend and
 * gives test_finish()'s exit status */
static inline int test_finish_backend(tlm_backend *be) {
    check(test_bytes_held(be) == 0, "every buffer freed (%zu bytes held)", test_bytes_held(be));
    tlm_backend_destroy(be);
    return test_finish();
}

#endif
