/* cmd_knobs.c — tlm knobs: the TLM_* environment variables tlm reads (the registry: tlm/knobs.def, tuning.h), their
 * kinds, defaults and current values; --markdown prints docs/tuning.md's table. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/tuning.h"

int cmd_knobs(int argc, char **argv) {
    bool markdown = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--markdown") == 0) {
            markdown = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("Usage: tlm knobs [--markdown]\n"
                   "The TLM_* environment variables tlm reads: kind (user, test, dev, internal), default, value now\n"
                   "and what each does. Reports name those not at their default in their header (\"# knobs:\").\n"
                   "  --markdown   the table of docs/tuning.md\n");
            return TLM_EXIT_OK;
        } else {
            fprintf(stderr, "tlm knobs: unknown argument '%s' (--markdown; see tlm knobs --help)\n", argv[i]);
            return TLM_EXIT_USAGE;
        }
    }
    tlm_tuning_print_doc(stdout, markdown);
    return TLM_EXIT_OK;
}
