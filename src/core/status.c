/* status.c — status names, the per-thread failure message, fatal exit. */
#include "tlm/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char tlm_error_message[1024];

const char *tlm_status_string(tlm_status s) {
    switch (s) {
    case TLM_OK: return "ok";
    case TLM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case TLM_ERR_IO: return "I/O error";
    case TLM_ERR_FORMAT: return "malformed file";
    case TLM_ERR_OUT_OF_MEMORY: return "out of memory";
    case TLM_ERR_UNSUPPORTED: return "unsupported";
    case TLM_ERR_BACKEND: return "backend failure";
    }
    return "unknown status";
}

const char *tlm_last_error(void) { return tlm_error_message; }

tlm_status tlm_fail(tlm_status s, const char *fmt, ...) {
    /* formatted into a fresh buffer, then copied: an argument may be tlm_last_error() itself
     * (`tlm_fail(s, "%s: %s", path, tlm_last_error())`), and vsnprintf must not write over what it reads */
    char fresh[sizeof tlm_error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fresh, sizeof fresh, fmt, ap);
    va_end(ap);
    memcpy(tlm_error_message, fresh, sizeof fresh);
    return s;
}

void tlm_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tlm: fatal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}
