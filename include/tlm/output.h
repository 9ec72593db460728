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

/* ---- a command's files, declared before it does any work (src/io/io_plan.c) ---------------------------
 * Every command declares each file it reads and writes, with the flag that named it, then checks the
 * plan once, before anything runs. Refused (INVALID_ARGUMENT, the message naming the flag, the path and
 * the flag it collides with):
 * - an output that is an input (compare -o A A B) or another output (--out-grads X --out-weights X);
 * - an output inside a directory declared with tlm_io_plan_inside (a checkpoint being read or written:
 *   tlm train --resume ck --log ck/step-N/weights.safetensors), and an input inside one (tlm train
 *   --init-weights ck/step-N/weights.safetensors --checkpoint-dir ck: its save would replace it);
 * - an output that exists and is not a regular file: a directory, a symbolic link, a device node;
 * - a directory declared with tlm_io_plan_inside that exists and is not one (--checkpoint-dir FILE).
 * Two paths are the same file when the real path of their directories plus their names agree (so
 * "./a", "d/../a" and a directory reached through a symbolic link are one), or, where both exist, when
 * their device and inode agree (a hard link, a symbolic link to the file). The check also declares the
 * inputs to the writer (tlm_output_input). Paths and flags are copied: the caller's may go.
 *
 *   tlm_io_plan plan;
 *   tlm_io_plan_init(&plan);
 *   tlm_io_plan_input(&plan, "--weights", weights);   a NULL path is skipped (a flag not given)
 *   tlm_io_plan_output(&plan, "--out", out);
 *   TLM_TRY(tlm_io_plan_check(&plan)); */

#define TLM_IO_PLAN_MAX 48
typedef enum { TLM_IO_INPUT, TLM_IO_OUTPUT, TLM_IO_OUTPUTS, TLM_IO_INSIDE } tlm_io_kind;
typedef struct {
    struct {
        tlm_io_kind kind;
        int flag, path, suffix; /* offsets into pool */
    } e[TLM_IO_PLAN_MAX];
    int n;
    bool overflow; /* more than TLM_IO_PLAN_MAX entries or 16 KiB of text: the check fails */
    size_t used;
    char pool[16384];
} tlm_io_plan;

void tlm_io_plan_init(tlm_io_plan *p);
/* A file the command reads (a data file, weights, a checkpoint's file). */
void tlm_io_plan_input(tlm_io_plan *p, const char *flag, const char *path);
/* A file the command writes. */
void tlm_io_plan_output(tlm_io_plan *p, const char *flag, const char *path);
/* Files the command may write whose names are not known yet: every <prefix>*<suffix> in prefix's
 * directory (a CSV report's FILE.<table>.csv). */
void tlm_io_plan_outputs(tlm_io_plan *p, const char *flag, const char *prefix, const char *suffix);
/* A directory whose files belong to the command's reader or another writer (a checkpoint ROOT or step
 * directory): no output may lie in it or below it. */
void tlm_io_plan_inside(tlm_io_plan *p, const char *flag, const char *dir);
/* Checks the plan as above. INVALID_ARGUMENT naming the flags and paths; TLM_OK otherwise. */
tlm_status tlm_io_plan_check(const tlm_io_plan *p);

#ifdef __cplusplus
}
#endif
#endif
