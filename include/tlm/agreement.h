/* agreement.h — the check that the ranks of a launch run the same thing: every process of an
 * mpirun/srun launch is started with its own command line (the same one, unless the launcher's app
 * contexts or a wrapper script give them different ones), and ranks that disagree on a flag that
 * changes the numerics, the data, the cadence of collectives or the outputs train different replicas,
 * hang in a collective one rank never reaches, or ignore a flag silently.
 *
 * A fingerprint is a list of items, each a flag's canonical name ("--beta2"), whether it was given and
 * its value as given (text; a flag without a value: "on"); the caller derives it from its parser's
 * record of every option the command accepts (tlm's cli_agree), so that a new flag is in it without
 * anyone listing it. An item may carry a file's identity (identity.h): then the file, not the path
 * text, is compared (two hosts may mount the same data at different paths). */
#ifndef TLM_AGREEMENT_H
#define TLM_AGREEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "tlm/comm.h"
#include "tlm/identity.h"

#define TLM_AGREEMENT_NAME 48   /* bytes of an item's name, NUL included */
#define TLM_AGREEMENT_VALUE 160 /* bytes of an item's value kept for the message (the hash covers it all) */

typedef struct {
    char name[TLM_AGREEMENT_NAME];   /* "--beta2", or "the command" */
    bool given;
    char value[TLM_AGREEMENT_VALUE]; /* as given, cut to fit ("on" for a flag without value; "" not given) */
    uint64_t value_hash;             /* XXH3-64 of the whole value */
    bool is_file;                    /* compare `file`, not the value */
    tlm_file_identity file;
} tlm_agreement_item;

typedef struct {
    tlm_agreement_item *items; /* (n) in the command's order */
    int n, cap;
} tlm_agreement;

/* Appends an item (value NULL: not given). Errors: OUT_OF_MEMORY. */
tlm_status tlm_agreement_add(tlm_agreement *a, const char *name, bool given, const char *value);

/* Makes the item `name` (appended when missing) compare the identity of the file `path` (identity.h's
 * cost: the whole file up to 256 MiB, else 4 MiB sampled). A file that cannot be read keeps the path
 * text compared (its reader names the problem later). Errors: OUT_OF_MEMORY. */
tlm_status tlm_agreement_add_file(tlm_agreement *a, const char *name, const char *path);

/* Collective over the ranks of c (host all-gathers): the ranks' fingerprints compared item by item
 * with rank 0's. Every rank returns the same status and message, naming the first item that differs:
 * INVALID_ARGUMENT "the ranks disagree on --beta2: rank 0 has 0.95, rank 1 has 0.99", "--save-every
 * is given to rank 1 only" (2 ranks; else "given to rank 0 but not to rank 2"), "--train-data: rank
 * 1's file differs from rank 0's (size ... / the same size, ..., different content)"; or "the ranks
 * run different commands" when the lists themselves differ. Errors of the communicator: theirs. */
tlm_status tlm_agreement_check(tlm_comm *c, const tlm_agreement *a);

void tlm_agreement_free(tlm_agreement *a);

#endif
