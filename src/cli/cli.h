/* cli.h — what the tlm subcommands share: one parser for the shared flags (device, output, model
 * shape, precision, attention, the benchmark's workload), their help lines, the expansion of the
 * workload flags into benchmark cases (bench, and every command that "takes the bench flags"),
 * value parsers, backend creation, and the dispatch to subcommands.
 *
 * A subcommand describes itself (cli_command: its help, which shared flags it takes with its
 * defaults, its own getopt options and a handler for them) and calls cli_parse once. Every shared flag has one
 * spelling, one short letter and one help line in every command that takes it; list flags take
 * comma lists ("8,16"; no empty items, no length limit) where the command sweeps them. */
#ifndef TLM_CLI_H
#define TLM_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tlm/backend.h"
#include "tlm/bench.h"
#include "tlm/config.h"
#include "tlm/ddp.h"
#include "tlm/model.h"
#include "tlm/report.h"

/* Exit codes: 0 success; 1 a runtime failure (bad file, OOM, failed check); 2 bad usage. */
enum { TLM_EXIT_OK = 0, TLM_EXIT_FAILURE = 1, TLM_EXIT_USAGE = 2 };

/* Prints "tlm <cmd>: <message>" to stderr, as one line in one write. Under a launcher, errors every rank finds
 * alike (the default until cli_join; a command turns it on again with cli_errors_alike(true) while it checks its
 * flags) are printed by rank 0 alone; the others exit with the same code, silently. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_errors_alike(bool alike);

/* ---- values ------------------------------------------------------------------------------------
 * Each prints "tlm <cmd>: <flag>: <why>" and returns false on bad input. */

/* A whole decimal integer in [min, max]. */
bool cli_parse_int(const char *cmd, const char *flag, const char *text, long min, long max, long *out);
/* A finite decimal number in [min, max] (pass -INFINITY/INFINITY for no bound). */
bool cli_parse_double(const char *cmd, const char *flag, const char *text, double min, double max, double *out);
/* A byte count with an optional suffix: K, M, G (2^10, 2^20, 2^30) or KB, MB, GB (10^3, 10^6, 10^9),
 * as nccl-tests and the seeds write them ("1MB", "64K", "1G"); in [min, max]. */
bool cli_parse_bytes(const char *cmd, const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out);
/* on|off */
bool cli_parse_on_off(const char *cmd, const char *flag, const char *text, bool *out);
/* A comma list split into items (no empty item, at most max_n): *items points into a copy the
 * caller frees with free(*items_buf). */
bool cli_split_list(const char *cmd, const char *flag, const char *text, int max_n, char ***items, int *n);
/* Comma-separated integers, each in [min, max]; at most max_n. */
bool cli_parse_int_list(const char *cmd, const char *flag, const char *text, long min, long max, int *out,
                        int max_n, int *n);
/* One of names[0..n) (NULL entries skipped): its index in *out; else the error lists the names. */
bool cli_parse_choice(const char *cmd, const char *flag, const char *text, const char *const *names, int n,
                      int *out);

/* The AdamW flags step and train share: --beta1, --beta2, --eps, --weight-decay, four consecutive option
 * ids from `first` in the command's table (CLI_ADAMW_OPTIONS(first)); `which` is opt - first. */
enum { CLI_ADAMW_BETA1, CLI_ADAMW_BETA2, CLI_ADAMW_EPS, CLI_ADAMW_WEIGHT_DECAY, CLI_ADAMW_NUM };
#define CLI_ADAMW_OPTIONS(first)                                                                                \
    {"beta1", required_argument, 0, (first) + CLI_ADAMW_BETA1},                                                \
        {"beta2", required_argument, 0, (first) + CLI_ADAMW_BETA2},                                            \
        {"eps", required_argument, 0, (first) + CLI_ADAMW_EPS},                                                \
        {"weight-decay", required_argument, 0, (first) + CLI_ADAMW_WEIGHT_DECAY}
/* The value of AdamW flag `which` in the domain of tlm_adamw_config_check (betas in [0, 1], eps in (0, 1],
 * weight decay in [0, 1]), so a value is refused with the flag's own text; the open ends (a beta's 1, eps's
 * 1) are left to the command or to that check. */
bool cli_parse_adamw(const char *cmd, int which, const char *text, double *out);

/* ---- the shared flags ---------------------------------------------------------------------------- */

typedef enum {
    CLI_DEVICE = 0,     /* -d, --device cpu|cuda */
    CLI_GPU,            /*     --gpu N (among CUDA_VISIBLE_DEVICES) */
    CLI_THREADS,        /* -t, --threads N */
    CLI_FORMAT,         /* -f, --format table|csv|json */
    CLI_OUT,            /* -o, --out FILE */
    CLI_MODEL,          /* -m, --model LIST, and the model-shape flags (--d-model, ...) */
    CLI_PRECISION,      /* -P, --precision LIST (all = the four) */
    CLI_ATTENTION,      /* -a, --attention flash|naive|auto */
    CLI_BATCH_SIZE,     /* -b, --batch-size LIST */
    CLI_CONTEXT_LENGTH, /* -c, --context-length LIST */
    CLI_WARMUP,         /* -w, --warmup LIST */
    CLI_STEPS,          /* -n, --steps N */
    CLI_PASS,           /* -p, --pass LIST (forward, forward-backward, train) */
    CLI_CUDA_GRAPH,     /* -g, --cuda-graph on|off */
    CLI_SEED,           /* -s, --seed N */
    CLI_RECOMPUTE,      /*     --recompute LIST (none, attention, block: activation checkpointing) */
    CLI_OPTIMIZER_IN_BACKWARD, /* --optimizer-in-backward (no value) */
    CLI_OPTIMIZER_OVERLAP, /*  --optimizer-overlap (no value; model.h's run.optimizer_overlap) */
    CLI_GRAD_ACCUM_STEPS, /*   --grad-accum-steps N (model.h's run.grad_accum_steps) */
    CLI_DDP,            /*     --ddp LIST (naive, flat, overlap, bucketed: data parallelism, ddp.h) */
    CLI_BUCKET_MB,      /*     --bucket-mb LIST (MiB) */
    CLI_ZERO,           /*     --zero LIST (0, 1) */
    CLI_GRAD_REDUCE_DTYPE, /*  --grad-reduce-dtype LIST (fp32, bf16) */
    CLI_TIMEOUT,        /*     --timeout S (the communication layer's watchdog, comm.h) */
    CLI_MAX_CONTEXT,    /*     --max-context BYTES|device (the longest context that fits: bench.h) */
    CLI_WIDE,           /*     --wide: every column in the table (taken wherever --format is) */
    CLI_VERBOSE,        /*     --verbose: every header field above the table (taken wherever --format is) */
    CLI_NUM_FLAGS
} cli_flag;

/* A shared flag as a command takes it: the default its help shows ("5", "fp32"; NULL: none), and
 * how many values it takes (1: one; more: a list of up to that many). */
typedef struct {
    cli_flag flag;
    const char *default_text;
    int max_values;
} cli_use;

/* The device and output flags most commands take, with their usual defaults. A command that takes
 * --format also takes --wide and --verbose (the table's view, report.h). */
#define CLI_USES_DEVICE {CLI_DEVICE, NULL, 1}, {CLI_GPU, "0", 1}, {CLI_THREADS, NULL, 1}
#define CLI_USES_OUTPUT {CLI_FORMAT, "table", 1}, {CLI_OUT, NULL, 1}

/* The memory-saving flags: activation checkpointing and the optimizer step in the backward pass. */
#define CLI_USES_RECOMPUTE {CLI_RECOMPUTE, "none", 3}, {CLI_OPTIMIZER_IN_BACKWARD, "off", 1}

/* The benchmark's workload (bench, profile), every list flag a sweep, with the defaults the commands
 * share (cli_default_workload fills them); the arguments are the defaults that differ, as the help
 * shows them. */
#define CLI_USES_WORKLOAD(models, contexts, attention, warmups, steps)                                          \
    {CLI_MODEL, models, CLI_MAX_LIST}, {CLI_CONTEXT_LENGTH, contexts, CLI_MAX_LIST},                          \
        {CLI_BATCH_SIZE, "4", CLI_MAX_LIST}, {CLI_PRECISION, "fp32", TLM_PRECISION_COUNT},                    \
        {CLI_ATTENTION, attention, 1}, {CLI_PASS, "train", 3}, {CLI_WARMUP, warmups, CLI_MAX_LIST},           \
        {CLI_STEPS, steps, 1}, CLI_USES_RECOMPUTE, {CLI_CUDA_GRAPH, "on", 1}, {CLI_SEED, "0", 1}

/* The model and the batch of one run (step, train): one value each, the defaults that differ by
 * command as the arguments. */
#define CLI_USES_RUN(model, batch_size, context_length)                                                          \
    {CLI_MODEL, model, 1}, {CLI_BATCH_SIZE, batch_size, 1}, {CLI_CONTEXT_LENGTH, context_length, 1},             \
        {CLI_PRECISION, "fp32", 1}, {CLI_ATTENTION, "auto", 1}

/* Data parallelism under a launcher (ddp.h) with the defaults of tlm_ddp_defaults: one value each, or
 * (SWEEP) lists, every combination a run. --timeout is apart: its default differs by command. */
#define CLI_USES_DDP                                                                                             \
    {CLI_DDP, "bucketed", 1}, {CLI_BUCKET_MB, "25", 1}, {CLI_ZERO, "0", 1}, {CLI_GRAD_REDUCE_DTYPE, "fp32", 1}
#define CLI_USES_DDP_SWEEP                                                                                       \
    {CLI_DDP, "bucketed", 4}, {CLI_BUCKET_MB, "25", CLI_MAX_LIST}, {CLI_ZERO, "0", 2},                         \
        {CLI_GRAD_REDUCE_DTYPE, "fp32", 2}

#define CLI_MAX_LIST 64
#define CLI_NOT_GIVEN (-2000000000L)

typedef struct {
    long vocab_size, d_model, d_ff, num_layers, num_heads, max_context; /* CLI_NOT_GIVEN: not given */
    double rope_theta;                                                   /* NaN: not given */
} cli_shape_flags;

/* What the shared flags said. given[f] says whether flag f appeared; values of flags not given
 * are left as cli_parse set them (zero, empty lists) for the command to default. */
typedef struct {
    bool given[CLI_NUM_FLAGS];
    const char *device; /* NULL: not given */
    int gpu, threads;
    tlm_format format;
    const char *out;
    bool wide, verbose; /* --wide, --verbose (report.h: tlm_report_view) */
    char **models;      /* the --model items (free with cli_args_free) */
    int num_models;
    cli_shape_flags shape;
    tlm_precision precisions[TLM_PRECISION_COUNT];
    int num_precisions;
    tlm_attention attention;
    int batch_sizes[CLI_MAX_LIST], num_batch_sizes;
    int contexts[CLI_MAX_LIST], num_contexts;
    int warmups[CLI_MAX_LIST], num_warmups;
    int steps;
    tlm_pass passes[3];
    int num_passes;
    bool cuda_graphs;
    uint64_t seed;
    tlm_recompute recomputes[3];
    int num_recomputes;
    bool optimizer_in_backward;
    bool optimizer_overlap;
    int grad_accum_steps;               /* micro-batches per optimizer step; 0: not given (1) */
    tlm_ddp_mode ddp_modes[4];          /* data parallelism (under a launcher); empty: the defaults */
    int num_ddp_modes;
    double bucket_mbs[CLI_MAX_LIST];
    int num_bucket_mbs;
    int zeros[2], num_zeros;
    tlm_dtype grad_reduce_dtypes[2];
    int num_grad_reduce_dtypes;
    double timeout;                     /* seconds; 0: not given */
    uint64_t max_context_bytes;         /* --max-context BYTES; 0: not given, or "device" */
    bool max_context_device;            /* --max-context device: the device's size (cli_max_context_bytes) */
    /* every option the command accepts, in its table's order (shared, shape, its own): the canonical
     * long name, whether given, the value text as given (the last, when repeated; "on" for a flag
     * without value); cli_agree's fingerprint */
    struct cli_record {
        const char *name, *value;
        bool given;
    } record[CLI_NUM_FLAGS + 8 + 64];
    int num_record;
    int num_positional; /* arguments after the options (compare's files) */
    char **positional;
    char *models_buf_;  /* owned storage */
} cli_args;

/* A subcommand: its help, its name ("bench"), the shared flags it takes, its own options (a
 * getopt_long table ending in a zero entry, and their short letters; neither may reuse a shared
 * flag's), the handler of its own options (gets the opts given to cli_parse; returns false after
 * printing the error), and how many positional arguments it takes. --help prints `help`, the shared
 * flags' lines and `help_after` (NULL: none); or, where the help is computed, calls `usage` (which
 * prints the shared flags' lines with cli_print_shared_help). The help comes first in the commands'
 * definitions: it says what the command is. */
typedef struct cli_command cli_command;
struct cli_command {
    const char *help, *help_after;
    void (*usage)(FILE *f, const cli_command *c);
    const char *name;
    const cli_use *uses;
    int num_uses;
    const struct option *options;
    const char *short_options;
    bool (*handle)(void *opts, int opt, const char *arg);
    int min_positional, max_positional;
    /* a shared flag's help where the command means something else by it (NULL: the flag's own, e.g.
     * "seed of the weights and the batch"): .flag_help = {[CLI_SEED] = "seed of q, k, v"} */
    const char *flag_help[CLI_NUM_FLAGS];
    /* the command declares every file it reads and writes to cli_check_files itself (false: cli_parse
     * checks --out alone, the command reading no file that --out could be) */
    bool checks_own_files;
};

/* A command's shared flags, a cli_use array: .uses and .num_uses of its cli_command. */
#define CLI_USES(array) .uses = (array), .num_uses = (int)(sizeof(array) / sizeof((array)[0]))

/* Parses argv (argv[0] is the subcommand's name): the shared flags into *a, the command's own options
 * through c->handle into *opts. Returns -1 when the command should go on, or the exit code to return
 * now: TLM_EXIT_OK after --help, TLM_EXIT_USAGE after a bad flag (the error printed, naming the flag)
 * or, unless c->checks_own_files, an --out that cli_check_files refuses (an existing folder, say). */
int cli_parse(const cli_command *c, void *opts, int argc, char **argv, cli_args *a);
void cli_args_free(cli_args *a);

/* The help lines of the shared flags the command takes, with its defaults. */
void cli_print_shared_help(FILE *f, const cli_command *c);

/* "--batch-size" for CLI_BATCH_SIZE. */
const char *cli_flag_name(cli_flag f);

/* Refuses two given flags that contradict each other: prints "<a> conflicts with <b>: <why>". */
bool cli_refuse_together(const char *cmd, const cli_args *a, cli_flag f1, bool given2, const char *name2,
                         const char *why);

/* ---- the model and the workload -------------------------------------------------------------------- */

/* The preset `name` with the shape flags over it, validated (the message names the field), and
 * its display name ("small", or "small*" when shape flags changed it). */
bool cli_model_config(const char *cmd, const cli_args *a, const char *name, tlm_config *cfg, char *display,
                      size_t display_n);

/* A size of the model that a shape flag sets, side by side: the flag ("--d-model"), its value
 * (CLI_NOT_GIVEN: not given), the size in a preset and in the model checked against (a file's, a
 * checkpoint's). cli_sizes fills them in this order. */
typedef struct {
    const char *flag;
    long given;
    int preset, model;
} cli_size;
enum { CLI_SIZE_VOCAB, CLI_SIZE_D_MODEL, CLI_SIZE_D_FF, CLI_SIZE_NUM_LAYERS, CLI_SIZE_NUM_HEADS, CLI_NUM_SIZES };
void cli_sizes(const cli_args *a, const tlm_config *preset, const tlm_config *model, cli_size out[CLI_NUM_SIZES]);

/* A weights file as step (--weights), train (--init-weights) and generate (--weights) take it: the file and
 * --strip-prefix (the prefix removed from its tensor names; NULL: none). A command's table takes the two
 * options as CLI_WEIGHTS_OPTIONS("weights") (their ids below the commands' own, 2000 up), and its handler
 * passes each option to cli_weights_option first. */
typedef struct {
    const char *path, *strip_prefix; /* NULL: not given */
} cli_weights_file;
enum { CLI_OPT_WEIGHTS = 1900, CLI_OPT_STRIP_PREFIX };
#define CLI_WEIGHTS_OPTIONS(flag)                                                                                \
    {flag, required_argument, 0, CLI_OPT_WEIGHTS}, {"strip-prefix", required_argument, 0, CLI_OPT_STRIP_PREFIX}

/* Takes opt when it is one of CLI_WEIGHTS_OPTIONS' (its value into *w) and returns true; else false. */
bool cli_weights_option(cli_weights_file *w, int opt, const char *arg);

/* The config of the model whose weights st holds (read from w->path; tensor names after w->strip_prefix):
 * tlm_weights_config's (the file's metadata, or a PyTorch state dict's shapes with --num-heads or the
 * --model that matches), every size given by a flag or by --model checked against it (refused naming the
 * flag, the file and the size it holds), --rope-theta and --max-context-length applied as the file allows.
 * Prints the error and returns false. (src/cli/cli_weights.c) */
bool cli_weights_config(const char *cmd, const cli_args *a, const cli_weights_file *w, const tlm_safetensors *st,
                        tlm_config *cfg);

/* Reads the weights file w->path into *st (the caller frees it with tlm_safetensors_free) and its model's config
 * (cli_weights_config), the model's name (tlm_config_name: a preset's, or "custom: ...") into display (NULL:
 * none). Prints the error and returns false, *st then freed. */
bool cli_weights_open(const char *cmd, const cli_args *a, const cli_weights_file *w, tlm_safetensors *st,
                      tlm_config *cfg, char *display, size_t display_n);

/* The workload flags not given, their defaults (CLI_USES_WORKLOAD's help): context 128 on the CPU and
 * 256 on a GPU, batch size 4, fp32, the train pass, and the warm-up and timed steps given here. */
void cli_default_workload(cli_args *a, const tlm_backend *be, int warmup, int steps);

/* The benchmark cases of the workload flags: every model x pass x batch size x warm-up x recompute x
 * precision x context (defaults filled by the caller; recompute defaults to none), each validated
 * (context within the model's RoPE table, flash attention runnable where asked for by name,
 * --optimizer-in-backward not with fp16; it applies to the train pass). *cases is malloc'ed. Prints
 * the error and returns false on a bad case. */
bool cli_bench_cases(const char *cmd, const cli_args *a, tlm_backend *be, tlm_bench_case **cases, int *n);

/* ---- the backend ------------------------------------------------------------------------------------ */

/* calloc(n, size), or NULL after printing "tlm <cmd>: out of host memory". */
void *cli_calloc(const char *cmd, size_t n, size_t size);

/* Creates the backend of --device / --gpu / --threads (device NULL: cuda when a GPU is present, else
 * cpu). Prints the error and returns NULL on failure. */
tlm_backend *cli_create_backend(const char *cmd, const cli_args *a);

/* The report's standard header fields for this backend: device, threads. */
void cli_report_device(tlm_report *r, const tlm_backend *be);

/* Under a launcher (p->comm), the check that every rank runs the same: the fingerprint is the
 * record of every option the command accepts (a->record: given or not, the value as given), but the
 * per-process ones (--gpu: a rank may pick its GPU; --threads: its share of its host's cores), with
 * the identity of the files of the flags in file_flags ("--train-data"; given or not) compared
 * instead of their paths' text (agreement.h). Collective: every rank calls it right after cli_join,
 * before any other collective, so that a disagreement (a different --eval-every) fails here, not in
 * a hang. Prints the message once (rank 0). Returns -1 to go on (a world of one: always), else
 * TLM_EXIT_USAGE (the ranks disagree; every rank the same) or TLM_EXIT_FAILURE. */
int cli_agree(const char *cmd, const cli_args *a, const tlm_ddp_process *p, const char *const *file_flags,
              int num_file_flags);

/* The data-parallel configuration of a one-run command (train): tlm_ddp_defaults with the first value of
 * each of --ddp, --bucket-mb, --zero, --grad-reduce-dtype that was given. */
tlm_ddp_config cli_ddp_config(const cli_args *a);

/* Joins the data-parallel run a launcher started (ddp.h, tlm_ddp_join: --device, --gpu, --threads, --timeout,
 * default_timeout_s when not given): several ranks: p->comm and p->be set, and ranks other than 0 print
 * nothing on stdout; a world of one: the data-parallel flags (--ddp, --bucket-mb, --zero,
 * --grad-reduce-dtype) are refused. Prints the error; returns the exit code, or -1 to go on. */
int cli_join(const char *cmd, const cli_args *a, double default_timeout_s, tlm_ddp_process *p);

/* --max-context as bytes for `be`: the bytes given, or with "device" the device's size (an error on a
 * backend without one, the CPU); 0 when not given. Prints the error; returns false on one. */
bool cli_max_context_bytes(const char *cmd, const cli_args *a, tlm_backend *be, size_t *out);

/* Opens the report of `tool` in --format to --out (stdout shows the table then), with the view of
 * --wide and --verbose. Prints the error. */
tlm_report *cli_open_report(const char *cmd, const cli_args *a, const char *tool, int argc, char **argv);

/* Checks the command's files before any work (output.h's tlm_io_plan): those `plan` declares (NULL:
 * none) and --out's report with its sidecars (tlm_report_plan, in --format). Prints "tlm <cmd>: <why>",
 * naming the flags and paths, and returns false on a refusal (the command exits TLM_EXIT_USAGE).
 * A command that reads or writes other files (checks_own_files) declares them all here together. */
bool cli_check_files(const char *cmd, const cli_args *a, tlm_io_plan *plan);

/* ---- subcommands -------------------------------------------------------------------------------------- */

/* A subcommand: its name and its entry point (argv[0] is the name; returns the exit code). */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
} cli_subcommand;

/* Runs the subcommand argv[1] names (one of subs[0..n)) on argv[1..] and returns its exit code. `prog`
 * is what the messages call the command ("tlm", "tlm precision") and `noun` what a subcommand is
 * ("command"). No argv[1]: usage to stderr, TLM_EXIT_USAGE; -h, --help or help: usage to stdout,
 * TLM_EXIT_OK; a name not in subs: "<prog>: unknown <noun> 'x' (known: ...; see <prog> --help)",
 * TLM_EXIT_USAGE. */
int cli_run_subcommand(const char *prog, const char *noun, int argc, char **argv, const cli_subcommand *subs, int n,
                       void (*usage)(FILE *f));

/* tlm's subcommands, in the order `tlm --help` lists them: X(name) for each, whose entry point is
 * cmd_<name> (src/cli/cmd_<name>.c). The one list serves the declarations below and main's table. */
#define CLI_SUBCOMMANDS(X)                                                                                      \
    X(bench) X(train) X(step) X(compare) X(precision) X(attention) X(allreduce) X(profile) X(memory) X(plot)   \
    X(knobs) X(generate)

#define CLI_DECLARE_SUBCOMMAND(name) int cmd_##name(int argc, char **argv);
CLI_SUBCOMMANDS(CLI_DECLARE_SUBCOMMAND)
#undef CLI_DECLARE_SUBCOMMAND

#endif
