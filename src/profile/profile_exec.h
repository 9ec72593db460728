/* profile_exec.h — running another program under tlm's profiler (exec.c), for `tlm profile --exec`.
 * Internal to tlm: the CLI and the tests use it. */
#ifndef TLM_PROFILE_EXEC_H
#define TLM_PROFILE_EXEC_H

#include <stddef.h>
#include "tlm/profile.h"

/* The executable `name` runs as (a path with '/', or the first match on PATH) into path (n bytes).
 * INVALID_ARGUMENT "--exec: 'x' not found in PATH" / "is not an executable file" otherwise. */
tlm_status tlm_profile_find_program(const char *name, char *path, size_t n);

/* The injection library: libtlm_inject.so beside the running tlm binary.
 * UNSUPPORTED when it cannot be read (a build without CUPTI has none). */
tlm_status tlm_profile_inject_library(char *path, size_t n);

/* Runs argv (argv[0] found as above; NULL-terminated) with inject_lib injected, waits for it, and
 * gives the profiles its CUDA processes wrote (*out, *n_out >= 1; free each and the array) and its
 * exit status (128 + signal when killed). The program's standard output goes to tlm's standard
 * error (stdout carries the report). SIGINT/SIGTERM are ignored by tlm while it waits (they reach
 * the program). Errors: INVALID_ARGUMENT (no such program; no profile written), IO, FORMAT. */
tlm_status tlm_profile_exec(char *const argv[], const char *inject_lib, tlm_profile ***out, int *n_out,
                            int *exit_status);

#endif
