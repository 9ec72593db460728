/* cli.h — what the tlm subcommands share: argument parsing helpers, model flags, device choice. */
#ifndef TLM_CLI_H
#define TLM_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tlm/backend.h"
#include "tlm/config.h"
#include "tlm/model.h"

/* Exit codes: 0 success; 1 a runtime failure (bad file, OOM, failed check); 2 bad usage. */
enum { TLM_EXIT_OK = 0, TLM_EXIT_FAILURE = 1, TLM_EXIT_USAGE = 2 };

/* Prints "tlm <cmd>: <message>" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a whole decimal integer in [min, max]; on failure prints which flag and why. */
bool cli_parse_int(const char *cmd, const char *flag, const char *text, long min, long max, long *out);
bool cli_parse_double(const char *cmd, const char *flag, const char *text, double *out);
/* Comma-separated integers, each in [min, max]; at most max_n. */
bool cli_parse_int_list(const char *cmd, const char *flag, const char *text, long min, long max, int *out,
                        int max_n, int *n);

/* The model-shape flags shared by `bench` and `step`. CLI_NOT_GIVEN / NaN: not given. */
#define CLI_NOT_GIVEN (-2000000000L)
typedef struct {
    long vocab_size, d_model, d_ff, num_layers, num_heads, max_context;
    double rope_theta;
} cli_shape_flags;

void cli_shape_flags_init(cli_shape_flags *f);
bool cli_shape_flags_any(const cli_shape_flags *f);
/* Applies the given flags over *cfg (a preset) and validates; prints the error and returns false. */
bool cli_apply_shape_flags(const char *cmd, const cli_shape_flags *f, tlm_config *cfg);
/* Help text lines for the shape flags. */
void cli_print_shape_flags_help(FILE *f);

/* long option ids for the shape flags (getopt_long 'val' >= 1000) */
enum {
    OPT_VOCAB_SIZE = 1000, OPT_D_MODEL, OPT_D_FF, OPT_NUM_LAYERS, OPT_NUM_HEADS, OPT_ROPE_THETA,
    OPT_MAX_CONTEXT, OPT_FIRST_FREE
};
/* Handles a shape option; returns 1 handled, 0 not a shape option, -1 invalid value (printed). */
int cli_handle_shape_option(const char *cmd, int opt, const char *arg, cli_shape_flags *f);
#define CLI_SHAPE_LONG_OPTIONS                                           \
    {"vocab-size", required_argument, 0, OPT_VOCAB_SIZE},                \
    {"d-model", required_argument, 0, OPT_D_MODEL},                      \
    {"d-ff", required_argument, 0, OPT_D_FF},                            \
    {"num-layers", required_argument, 0, OPT_NUM_LAYERS},                \
    {"num-heads", required_argument, 0, OPT_NUM_HEADS},                  \
    {"rope-theta", required_argument, 0, OPT_ROPE_THETA},                \
    {"max-context-length", required_argument, 0, OPT_MAX_CONTEXT}

/* --attention flash|naive|auto (model.h, tlm_attention); false, the error printed, otherwise. */
bool cli_parse_attention(const char *cmd, const char *text, tlm_attention *out);
/* The help lines of --attention, shared by `bench` and `step`. */
void cli_print_attention_help(FILE *f);

/* True for NULL, "cpu" or "cuda"; otherwise prints the error (the caller exits with usage). */
bool cli_check_device(const char *cmd, const char *device);

/* Creates the backend named "cpu", "cuda" or NULL (= cuda when a GPU is present, else cpu).
 * Prints the error and returns NULL on failure. `desc` receives a one-line description. */
tlm_backend *cli_create_backend(const char *cmd, const char *device, int threads, char *desc, size_t desc_n);

/* Opens path.tmp for writing; cli_commit_file closes it and renames it over path (or removes
 * it when ok is false). Never leaves a half-written `path`. */
FILE *cli_open_tmp(const char *cmd, const char *path, char *tmp_path, size_t n);
bool cli_commit_file(const char *cmd, FILE *f, const char *tmp_path, const char *path, bool ok);

int cmd_bench(int argc, char **argv);
int cmd_step(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_precision(int argc, char **argv);
int cmd_attention(int argc, char **argv);

#endif
