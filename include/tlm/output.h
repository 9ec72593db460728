/* output.h — the one way tlm writes a file (every --out, every .npy and safetensors file): a
 * reader never sees a half-written file, an existing file is never lost or replaced by accident.
 *
 * - The data goes to a fresh temporary file in the destination's directory (mkstemp:
 *   ".<name>.XXXXXX"), which is written, flushed and fsync'ed, then renamed over the destination,
 *   and the directory fsync'ed: the destination is either the old file or the whole new one.
 * - Refused before anything is written, with a message naming the path: a destination that exists
 *   and is not a regular file (a symlink, a directory, a device node), and a destination that is an
 *   input of the same command (declared with tlm_output_input: same device and inode).
 * - A write error (a full disk) is reported when the file is committed (TLM_ERR_IO, the message
 *   says which file and why); the temporary file is removed.
 * - SIGINT, SIGTERM, SIGHUP and SIGPIPE (a closed pipe on stdout, `tlm ... --out F | head`) remove
 *   every temporary file still open before the process dies of the signal.
 * - A command with several outputs commits them together: between tlm_output_batch_begin and
 *   tlm_output_batch_end, a commit only stages the file; batch_end(true) renames them all, batch_end
 *   (false) removes them all, so that a failure leaves every destination as it was.
 *
 *   tlm_output *o;
 *   TLM_TRY(tlm_output_open(&o, path));
 *   fprintf(tlm_output_file(o), ...);              write as often as needed
 *   return tlm_output_commit(o);                   (or tlm_output_abort(o) to give up)
 */
#ifndef TLM_OUTPUT_H
#define TLM_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlm_output tlm_output;

/* Declares `path` an input of this command: opening it as an output is then refused. A path that
 * does not exist is ignored. */
void tlm_output_input(const char *path);

/* Opens a temporary file for `path`. Errors: INVALID_ARGUMENT (an input, not a regular file, a
 * path too long), IO (the directory cannot take a file), OUT_OF_MEMORY. */
tlm_status tlm_output_open(tlm_output **out, const char *path);

/* The stream to write to (binary). */
FILE *tlm_output_file(tlm_output *o);

/* Flushes, fsyncs and closes the temporary file and renames it over the destination (in a batch:
 * stages it). On any failure the temporary file is removed and the destination left alone (IO,
 * naming the file and the reason). Frees o either way. */
tlm_status tlm_output_commit(tlm_output *o);

/* Gives up: closes and removes the temporary file, frees o. NULL is a no-op. */
void tlm_output_abort(tlm_output *o);

/* The outputs committed between these two calls are renamed together by batch_end(true), or all
 * removed by batch_end(false); batch_end returns the first rename failure (IO). Not nested. */
void tlm_output_batch_begin(void);
tlm_status tlm_output_batch_end(bool commit);
/* Whether a batch is open (a writer of several files joins the caller's batch, else opens its own). */
bool tlm_output_in_batch(void);

/* Writes the whole of `data` (n bytes) as the file `path` (open, write, commit). */
tlm_status tlm_output_write_file(const char *path, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
