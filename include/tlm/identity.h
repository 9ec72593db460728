/* identity.h — what a file is, for comparing it with itself elsewhere or later: the data files of a
 * run (the ranks under a launcher must read the same tokens; a resumed run the tokens its checkpoint
 * was trained on) and the files of a checkpoint's step directory.
 *
 * The hash is XXH3-128 (xxHash, Yann Collet: https://github.com/Cyan4973/xxHash, the header-only
 * build of Debian's libxxhash-dev); not cryptographic: it tells an accident (another file, a file
 * changed, truncated or copied from another step), not a forgery.
 *
 * Cost, measured on this project's build machine (2 cores, a virtual disk reading 970 MB/s with
 * O_DIRECT), a 10 GB file: the full hash took 9.8 s just after the file was written (partly in the
 * page cache) and 2.1 s wholly from the page cache (about 5 GB/s), so about 11 s cold at the disk's
 * speed; the sampled identity (4 MiB read) took 14 ms, then 1 ms cached. A run checks its data at
 * start under a launcher and at each resume, so a file up to TLM_IDENTITY_FULL_MAX bytes (0.3 s at
 * the worst) is hashed whole and a larger one sampled: its size, its first and last
 * 64 KiB and 62 blocks of 64 KiB evenly spaced between them. A change inside a large file that misses
 * every sampled block is not seen (a different size always is). */
#ifndef TLM_IDENTITY_H
#define TLM_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlm/status.h"

/* files up to this size (bytes) are hashed whole by tlm_file_identify */
#define TLM_IDENTITY_FULL_MAX ((uint64_t)256 << 20)
/* the sampled identity: this many blocks of this many bytes */
#define TLM_IDENTITY_BLOCKS 64
#define TLM_IDENTITY_BLOCK_BYTES ((size_t)64 << 10)

/* A file's identity: its size in bytes and XXH3-128 of its bytes (sampled: of the sampled blocks and
 * the size), as 32 lowercase hex digits. */
typedef struct {
    uint64_t bytes;
    bool sampled;  /* false: the hash covers every byte */
    char hash[33]; /* hex, NUL-terminated */
} tlm_file_identity;

/* The identity of the regular file `path` (a FIFO or a device is refused, as every reader does).
 * Cost: the whole file up to TLM_IDENTITY_FULL_MAX bytes, else 4 MiB of reads. Errors: TLM_ERR_IO
 * naming the path (cannot open, not a regular file, a read error or a file cut short). */
tlm_status tlm_file_identify(const char *path, tlm_file_identity *id);

/* XXH3-128 of every byte of the regular file `path`, as 32 lowercase hex digits in hex[33]; *bytes
 * (may be NULL): its size. Cost: one pass over the file in 1 MiB reads (about 5 GB/s from the page
 * cache on the build machine, the disk's speed cold). Errors: as tlm_file_identify. */
tlm_status tlm_file_digest(const char *path, char hex[33], uint64_t *bytes);

/* XXH3-128 of n bytes in memory, as tlm_file_digest writes it for a file of those bytes (for a file a
 * reader already holds whole, checked without reading it again). */
void tlm_bytes_digest(const void *data, size_t n, char hex[33]);

/* Whether two identities are of the same content (size, mode and hash equal). */
bool tlm_file_identity_same(const tlm_file_identity *a, const tlm_file_identity *b);

/* How b differs from a, in words, into buf: "size 8000 bytes vs 8004 bytes" or "the same size, 8000
 * bytes, different content"; "the same" when it does not. */
void tlm_file_identity_diff(const tlm_file_identity *a, const tlm_file_identity *b, char *buf, size_t n);

#endif
