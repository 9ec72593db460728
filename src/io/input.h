/* input.h — opening a file that tlm reads (internal to src/io): the readers of .npy, token and
 * safetensors files take every size from a file's header on trust only after checking it against
 * the bytes really there, so they first learn the file's size here; and a file of the other
 * format is named as such rather than reported as a malformed one. */
#ifndef TLM_IO_INPUT_H
#define TLM_IO_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tlm/status.h"

/* Opens `path` for reading; *size: its length in bytes (fstat). Only regular files are read (the
 * size of a pipe or a device is not known beforehand): the file is opened with O_NONBLOCK (a FIFO
 * with no writer does not block the open), checked with fstat, then made blocking. Errors:
 * TLM_ERR_IO naming the path: cannot open, or what it is instead ("x: a FIFO, not a regular file";
 * a directory, a character device, a block device, a socket). */
tlm_status tlm_input_open(const char *path, FILE **f, uint64_t *size);

/* Reads all of the regular file `path` into *data (malloc'ed, NUL-terminated; *n: its length without
 * the NUL) when it holds at most `max` bytes: for the JSON and text inputs (plot inputs, a checkpoint's
 * state.json and `latest`). Errors: those of tlm_input_open; FORMAT "x: N bytes, over the limit of
 * 1 GiB for this file"; IO for a read error or a file cut short while read; OUT_OF_MEMORY. */
tlm_status tlm_input_read_text(const char *path, uint64_t max, char **data, size_t *n);

/* Which format the first n bytes of a file are in, judging by their magic: "npy" ("\x93NUMPY"),
 * "safetensors" (a little-endian u64 header length below 10^8, then '{'), or NULL. For messages:
 * "x.npy: this is a .npy file, not safetensors". */
const char *tlm_input_sniff(const unsigned char *head, size_t n);
/* (also "pytorch": a zip archive, "PK\x03\x04", torch.save's format; "pickle": the pickle protocol's
 * opening 0x80 then a protocol 2-5, torch.save's legacy format) */

/* For a file whose kind (tlm_input_sniff) is "pytorch" or "pickle": FORMAT, the message naming what
 * the file is and how to convert it to `wanted` ("safetensors" or ".npy") in Python. TLM_OK for any
 * other kind (NULL included). */
tlm_status tlm_input_refuse_pytorch(const char *path, const char *kind, const char *wanted);

#endif
