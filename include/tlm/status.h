/* status.h — tlm's error model: a status enum for runtime failures, a per-thread
 * message that says what exactly went wrong, and one assert macro for programmer errors.
 *
 * Runtime failures (a malformed file, a wrong shape, an unknown model, out of memory)
 * are returned as a tlm_status != TLM_OK; the function that detects the failure sets a
 * message with tlm_fail() naming the problem, and the caller prints tlm_last_error().
 * Programmer errors (a NULL where the API forbids it, an index past a table) abort
 * through TLM_ASSERT with file:line. */
#ifndef TLM_STATUS_H
#define TLM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TLM_OK = 0,
    TLM_ERR_INVALID_ARGUMENT = 1, /* a flag, size or shape that cannot work */
    TLM_ERR_IO = 2,               /* a file that cannot be opened, read or written */
    TLM_ERR_FORMAT = 3,           /* a file whose contents are malformed or truncated */
    TLM_ERR_OUT_OF_MEMORY = 4,    /* host or device memory exhausted */
    TLM_ERR_UNSUPPORTED = 5,      /* a feature not built in or not available (no GPU) */
    TLM_ERR_BACKEND = 6,          /* a CUDA, cuBLAS or BLAS call failed */
} tlm_status;

/* Short name of a status, e.g. "invalid argument". Never NULL. */
const char *tlm_status_string(tlm_status s);

/* The message of the last failure on this thread ("" if none). Valid until the next tlm_fail. */
const char *tlm_last_error(void);

/* Sets this thread's message (printf format) and returns s, so a failing function can
 * `return tlm_fail(TLM_ERR_FORMAT, "%s: header length %llu exceeds file size", path, n);`
 * An argument may be tlm_last_error() itself, to prefix the reason: tlm_fail(s, "%s: %s", path,
 * tlm_last_error()) (the message is formatted apart, then copied). */
tlm_status tlm_fail(tlm_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "tlm: fatal: <message>" to stderr and exits with status 1. For failures that
 * cannot be returned (a CUDA kernel launch that failed inside an op). */
void tlm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define TLM_ASSERT(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) tlm_fatal("assertion failed at %s:%d: %s", __FILE__, __LINE__, #cond); \
    } while (0)

/* Propagate a failure: TLM_TRY(tlm_npy_read(...)); */
#define TLM_TRY(expr)                         \
    do {                                      \
        tlm_status tlm_try_s_ = (expr);       \
        if (tlm_try_s_ != TLM_OK) return tlm_try_s_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
