/* cli_common.c — the shared flags of the tlm subcommands (one parser, one help line each), value
 * parsers, the benchmark cases of the workload flags, and backend and report creation. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/agreement.h"
#include "tlm/util.h"

/* errors every rank of a launch finds alike (the flags: parsing, planning) are printed by rank 0 alone */
static bool errors_alike = true;

/* this process's rank under a launcher (the variables tlm_comm_launched reads), before any joining; 0 alone */
static int launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

void cli_errors_alike(bool alike) { errors_alike = alike; }

void cli_error(const char *cmd, const char *fmt, ...) {
    if (errors_alike && launcher_rank() != 0) return; /* rank 0 says it once */
    char line[4096];
    int n = snprintf(line, sizeof line, "tlm %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2; /* cut: the line still ends */
    line[n++] = '\n';
    /* one write: the lines of ranks sharing a terminal through a launcher do not interleave mid-line */
    fwrite(line, 1, (size_t)n, stderr);
    fflush(stderr);
}

/* ---- values ------------------------------------------------------------------------------------------ */

bool cli_parse_int(const char *cmd, const char *flag, const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (end == text || *end != '\0') {
        cli_error(cmd, "%s: '%s' is not an integer", flag, text);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        cli_error(cmd, "%s: %s is out of range [%ld, %ld]", flag, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *cmd, const char *flag, const char *text, double min, double max, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || *end != '\0' || isnan(v)) {
        cli_error(cmd, "%s: '%s' is not a number", flag, text);
        return false;
    }
    if (isinf(v) || (errno == ERANGE && fabs(v) > 1.0)) {
        cli_error(cmd, "%s: %s is too large", flag, text);
        return false;
    }
    if (v < min || v > max) {
        cli_error(cmd, "%s: %s is out of range [%g, %g]", flag, text, min, max);
        return false;
    }
    *out = v; /* an underflow (1e-320) is a number, kept as parsed: the caller's domain check names it */
    return true;
}

bool cli_parse_adamw(const char *cmd, int which, const char *text, double *out) {
    static const struct {
        const char *flag;
        double lo, hi;
    } adamw[CLI_ADAMW_NUM] = {[CLI_ADAMW_BETA1] = {"--beta1", 0, 1},
                              [CLI_ADAMW_BETA2] = {"--beta2", 0, 1},
                              [CLI_ADAMW_EPS] = {"--eps", FLT_MIN, 1},
                              [CLI_ADAMW_WEIGHT_DECAY] = {"--weight-decay", 0, 1}};
    TLM_ASSERT(which >= 0 && which < CLI_ADAMW_NUM);
    return cli_parse_double(cmd, adamw[which].flag, text, adamw[which].lo, adamw[which].hi, out);
}

bool cli_parse_bytes(const char *cmd, const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out) {
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1}, {"B", 1}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
                 {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}};
    if (end == text || errno || !(v >= 0)) {
        cli_error(cmd, "%s: '%s' is not a size (bytes, or a number with K, M, G (2^10, 2^20, 2^30) or KB, MB, GB "
                       "(10^3, 10^6, 10^9))", flag, text);
        return false;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0 || (end[0] && strcasecmp(end, units[i].suffix) == 0 && i < 2)) {
            const double b = v * units[i].mult;
            if (b != floor(b) || b < (double)min || b > (double)max) {
                cli_error(cmd, "%s: %s is not a whole number of bytes in [%llu, %llu]", flag, text,
                          (unsigned long long)min, (unsigned long long)max);
                return false;
            }
            *out = (uint64_t)b;
            return true;
        }
    cli_error(cmd, "%s: '%s' has an unknown unit '%s' (known: K, M, G, KB, MB, GB, KiB, MiB, GiB)", flag, text, end);
    return false;
}

bool cli_parse_on_off(const char *cmd, const char *flag, const char *text, bool *out) {
    if (strcmp(text, "on") == 0) *out = true;
    else if (strcmp(text, "off") == 0) *out = false;
    else {
        cli_error(cmd, "%s: '%s' is neither on nor off", flag, text);
        return false;
    }
    return true;
}

bool cli_split_list(const char *cmd, const char *flag, const char *text, int max_n, char ***items, int *n) {
    *items = NULL;
    *n = 0;
    const size_t len = strlen(text);
    int count = 1;
    for (const char *p = text; *p; p++) count += *p == ',';
    if (count > max_n) {
        cli_error(cmd, "%s: %d values, at most %d", flag, count, max_n);
        return false;
    }
    /* the pointers, then the text, in one block */
    char **v = malloc((size_t)count * sizeof(char *) + len + 1);
    if (!v) {
        cli_error(cmd, "%s: out of host memory", flag);
        return false;
    }
    char *buf = (char *)(v + count);
    memcpy(buf, text, len + 1);
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!*p) {
            cli_error(cmd, "%s: an empty value in '%s'", flag, text);
            free(v);
            return false;
        }
        v[(*n)++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    *items = v;
    return true;
}

bool cli_parse_int_list(const char *cmd, const char *flag, const char *text, long min, long max, int *out,
                        int max_n, int *n) {
    char **items;
    if (!cli_split_list(cmd, flag, text, max_n, &items, n)) return false;
    bool ok = true;
    for (int i = 0; ok && i < *n; i++) {
        long v = 0;
        ok = cli_parse_int(cmd, flag, items[i], min, max, &v);
        out[i] = (int)v;
    }
    free(items);
    return ok;
}

bool cli_parse_choice(const char *cmd, const char *flag, const char *text, const char *const *names, int n,
                      int *out) {
    const int i = tlm_name_index(names, n, text);
    if (i >= 0) {
        *out = i;
        return true;
    }
    char known[256] = "";
    for (int k = 0; k < n; k++)
        if (names[k]) snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "", names[k]);
    cli_error(cmd, "%s: unknown value '%s' (known: %s)", flag, text, known);
    return false;
}

/* ---- the shared flags -------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int short_opt; /* 0: long only */
    const char *arg_one, *arg_list; /* NULL: the flag takes no value */
    const char *help;
} flag_info;

static const flag_info flags[CLI_NUM_FLAGS] = {
    [CLI_DEVICE] = {"device", 'd', "D", "D", "cpu | cuda (cuda when a GPU is present, else cpu)"},
    [CLI_GPU] = {"gpu", 0, "N", "N", "the GPU, among those CUDA_VISIBLE_DEVICES leaves visible"},
    [CLI_THREADS] = {"threads", 't', "N", "N", "CPU threads (all cores)"},
    [CLI_FORMAT] = {"format", 'f', "F", "F", "table | csv | json"},
    [CLI_OUT] = {"out", 'o', "FILE", "FILE", "write the report, in --format, to FILE; stdout shows the table"},
    [CLI_MODEL] = {"model", 'm', "NAME", "LIST", "model preset"},
    [CLI_PRECISION] = {"precision", 'P', "P", "LIST",
                       "fp32 (strict IEEE GEMMs, PyTorch's default), tf32 (TF32 tensor-core GEMMs; fp32 on the "
                       "CPU), bf16, fp16 (autocast: low-precision GEMMs, fp32 master weights; fp16 with dynamic "
                       "loss scaling)"},
    [CLI_ATTENTION] = {"attention", 'a', "A", "A",
                       "flash | naive | auto. flash: FlashAttention-2, saves the logsumexp (B,H,T) per layer; "
                       "naive: saves the probabilities (B,H,T,T); auto: flash on CUDA where it has kernels for "
                       "the d_head (16, 32, 64, 80, 128), else naive; on the CPU naive (its flash is the slow "
                       "fp32 reference)"},
    [CLI_BATCH_SIZE] = {"batch-size", 'b', "N", "LIST", "sequences per batch"},
    [CLI_CONTEXT_LENGTH] = {"context-length", 'c', "N", "LIST", "tokens per sequence"},
    [CLI_WARMUP] = {"warmup", 'w', "N", "LIST", "untimed warm-up steps"},
    [CLI_STEPS] = {"steps", 'n', "N", "N", "timed steps"},
    [CLI_PASS] = {"pass", 'p', "P", "LIST", "forward | forward-backward | train (= forward, backward, AdamW step)"},
    [CLI_CUDA_GRAPH] = {"cuda-graph", 'g', "on|off", "on|off",
                        "capture forward and backward as CUDA graphs and replay them (no effect on the CPU); "
                        "the capture happens in the second step"},
    [CLI_SEED] = {"seed", 's', "N", "N", "seed of the weights and the batch"},
    [CLI_RECOMPUTE] = {"recompute", 0, "R", "LIST",
                       "none | attention | block: activation checkpointing; attention: naive attention's "
                       "probabilities recomputed in the backward; block: each block keeps its input and runs "
                       "its forward again in the backward"},
    [CLI_OPTIMIZER_IN_BACKWARD] = {"optimizer-in-backward", 0, NULL, NULL,
                                   "each layer's AdamW update runs in the backward pass as soon as its gradients "
                                   "are complete, so the whole gradient buffer never exists (train pass; not with "
                                   "fp16 or gradient clipping)"},
    [CLI_OPTIMIZER_OVERLAP] = {"optimizer-overlap", 0, NULL, NULL,
                               "each layer's AdamW update is issued as soon as its gradients are complete (under a "
                               "launcher: once its bucket is averaged) on a stream of its own, beside the rest of "
                               "the backward; the gradient buffer stays (train pass; not with fp16, ZeRO or "
                               "--optimizer-in-backward)"},
    [CLI_GRAD_ACCUM_STEPS] = {"grad-accum-steps", 0, "N", "N",
                              "gradient accumulation (nanoGPT's gradient_accumulation_steps): an optimizer step is "
                              "N micro-batches of --batch-size rows, their gradients added in place, then one update "
                              "(and under a launcher one reduction, in the last micro-batch's backward); tokens per "
                              "step = N x batch x context (train pass; not with --optimizer-in-backward or "
                              "--optimizer-overlap); tlm train draws a step's N x batch rows as one batch, so (N, B) "
                              "trains as (1, N x B)"},
    [CLI_DDP] = {"ddp", 0, "M", "LIST",
                 "data parallelism under mpirun/srun (one process per GPU; MPI on the CPU): how gradients are "
                 "averaged: naive (an all-reduce per tensor after backward), flat (one of the whole buffer after "
                 "backward), overlap (per tensor, as each layer's gradients are ready), bucketed (buckets of "
                 "--bucket-mb as they are ready)"},
    [CLI_BUCKET_MB] = {"bucket-mb", 0, "X", "LIST", "bucketed: bucket size in MiB of float32 gradients (PyTorch's "
                                                    "bucket_cap_mb)"},
    [CLI_ZERO] = {"zero", 0, "N", "LIST", "1: ZeRO stage 1, the AdamW state sharded over the ranks (reduce-scatter "
                                          "of the gradients, all-gather of the parameters); 0: replicated"},
    [CLI_GRAD_REDUCE_DTYPE] = {"grad-reduce-dtype", 0, "T", "LIST",
                               "fp32 | bf16: the dtype the gradients are averaged in (bf16: PyTorch's bf16 "
                               "compression hook)"},
    [CLI_TIMEOUT] = {"timeout", 0, "S", "S", "under a launcher: the longest any rank waits in one collective before "
                                             "the run stops, naming the ranks that did not arrive"},
    [CLI_MAX_CONTEXT] = {"max-context", 0, "M", "M",
                         "also the longest context (at each batch size) whose planned step fits in M bytes (80G, "
                         "80GB) or in the GPU's memory (device); the model's memory plan, not run; the CUDA context "
                         "and libraries (NCCL's buffers too) not included; tlm bench under a launcher: a rank's rows "
                         "and memory (ZeRO-1: its shard of the moments)"},
    [CLI_WIDE] = {"wide", 0, NULL, NULL, "every column in the table (default: the primary ones, 160 characters)"},
    [CLI_VERBOSE] = {"verbose", 0, NULL, NULL, "every header field above the table: how each figure was measured"},
};

const char *cli_flag_name(cli_flag f) {
    static char names[CLI_NUM_FLAGS][32];
    TLM_ASSERT((unsigned)f < CLI_NUM_FLAGS);
    if (!names[f][0]) snprintf(names[f], sizeof names[f], "--%s", flags[f].name);
    return names[f];
}

/* long option ids: shared flags 1000 + flag, shape flags 1100 + i; commands use other values */
enum { OPT_SHARED = 1000, OPT_SHAPE = 1100 };
enum { SHAPE_VOCAB, SHAPE_D_MODEL, SHAPE_D_FF, SHAPE_NUM_LAYERS, SHAPE_NUM_HEADS, SHAPE_ROPE_THETA, SHAPE_MAX_CONTEXT,
       SHAPE_COUNT };
static const char *const shape_names[SHAPE_COUNT] = {"vocab-size", "d-model", "d-ff", "num-layers", "num-heads",
                                                     "rope-theta", "max-context-length"};

static const cli_use *use_of(const cli_command *c, cli_flag f) {
    for (int i = 0; i < c->num_uses; i++)
        if (c->uses[i].flag == f) return &c->uses[i];
    return NULL;
}

static bool parse_shape(const char *cmd, int which, const char *arg, cli_shape_flags *s) {
    char flag[40];
    snprintf(flag, sizeof flag, "--%s", shape_names[which]);
    if (which == SHAPE_ROPE_THETA) return cli_parse_double(cmd, flag, arg, 1e-300, 1e300, &s->rope_theta);
    long v;
    /* sizes in [1, 2^30]: what the model's index arithmetic is built for; the model's own check names
     * anything else that cannot work (d_model % num_heads, odd d_head, layout over 2^62 bytes) */
    if (!cli_parse_int(cmd, flag, arg, 1, 1L << 30, &v)) return false;
    long *fields[] = {&s->vocab_size, &s->d_model, &s->d_ff, &s->num_layers, &s->num_heads, NULL, &s->max_context};
    *fields[which] = v;
    return true;
}

static bool parse_shared(const cli_command *c, cli_flag f, const char *arg, cli_args *a) {
    const char *cmd = c->name, *flag = cli_flag_name(f);
    const int max_n = use_of(c, f)->max_values > 1 ? use_of(c, f)->max_values : 1;
    long v = 0;
    int n = 0;
    switch (f) {
    case CLI_DEVICE:
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda")) {
            cli_error(cmd, "--device: unknown device '%s' (known: cpu, cuda)", arg);
            return false;
        }
        a->device = arg;
        return true;
    case CLI_GPU: return cli_parse_int(cmd, flag, arg, 0, 1023, &v) && ((a->gpu = (int)v), true);
    case CLI_THREADS: return cli_parse_int(cmd, flag, arg, 1, 4096, &v) && ((a->threads = (int)v), true);
    case CLI_FORMAT:
        if (tlm_format_parse(arg, &a->format)) return true;
        cli_error(cmd, "--format: unknown format '%s' (known: table, csv, json)", arg);
        return false;
    case CLI_OUT: a->out = arg; return true;
    case CLI_MODEL:
        free(a->models_buf_);
        a->models_buf_ = NULL;
        if (!cli_split_list(cmd, flag, arg, max_n, &a->models, &a->num_models)) return false;
        a->models_buf_ = (char *)a->models;
        return true;
    case CLI_PRECISION: {
        char **items;
        if (!cli_split_list(cmd, flag, arg, TLM_PRECISION_COUNT, &items, &n)) return false;
        bool ok = true;
        a->num_precisions = 0;
        if (n == 1 && strcmp(items[0], "all") == 0 && max_n >= TLM_PRECISION_COUNT) {
            for (int p = 0; p < TLM_PRECISION_COUNT; p++) a->precisions[a->num_precisions++] = (tlm_precision)p;
        } else if (n > max_n) {
            cli_error(cmd, "%s takes one value in tlm %s", flag, cmd);
            ok = false;
        } else {
            for (int i = 0; ok && i < n; i++) {
                if (!tlm_precision_parse(items[i], &a->precisions[a->num_precisions])) {
                    cli_error(cmd, "--precision: unknown precision '%s' (known: fp32, tf32, bf16, fp16%s)", items[i],
                              max_n >= TLM_PRECISION_COUNT ? ", all" : "");
                    ok = false;
                }
                for (int k = 0; ok && k < a->num_precisions; k++)
                    if (a->precisions[k] == a->precisions[a->num_precisions]) {
                        cli_error(cmd, "--precision: '%s' given twice", items[i]);
                        ok = false;
                    }
                a->num_precisions++;
            }
        }
        free(items);
        return ok;
    }
    case CLI_ATTENTION:
        if (tlm_attention_parse(arg, &a->attention)) return true;
        cli_error(cmd, "--attention: unknown attention '%s' (known: flash, naive, auto)", arg);
        return false;
    case CLI_BATCH_SIZE: return cli_parse_int_list(cmd, flag, arg, 1, 1 << 20, a->batch_sizes, max_n, &a->num_batch_sizes);
    case CLI_CONTEXT_LENGTH: return cli_parse_int_list(cmd, flag, arg, 1, 1 << 24, a->contexts, max_n, &a->num_contexts);
    case CLI_WARMUP: return cli_parse_int_list(cmd, flag, arg, 0, 1 << 20, a->warmups, max_n, &a->num_warmups);
    case CLI_STEPS: return cli_parse_int(cmd, flag, arg, 1, 1 << 20, &v) && ((a->steps = (int)v), true);
    case CLI_PASS:
    case CLI_RECOMPUTE: {
        static const char *const passes[3] = {"forward", "forward-backward", "train"},
                                 *const recomputes[3] = {"none", "attention", "block"};
        const bool pass = f == CLI_PASS;
        char **items;
        if (!cli_split_list(cmd, flag, arg, max_n < 3 ? max_n : 3, &items, &n)) return false;
        bool ok = true;
        for (int i = 0, k; ok && i < n; i++) {
            ok = cli_parse_choice(cmd, flag, items[i], pass ? passes : recomputes, 3, &k);
            if (ok && pass) a->passes[i] = (tlm_pass)k;
            if (ok && !pass) a->recomputes[i] = (tlm_recompute)k;
        }
        *(pass ? &a->num_passes : &a->num_recomputes) = n;
        free(items);
        return ok;
    }
    case CLI_CUDA_GRAPH: return cli_parse_on_off(cmd, flag, arg, &a->cuda_graphs);
    case CLI_SEED: return cli_parse_int(cmd, flag, arg, 0, 0x7fffffffffffffffL, &v) && ((a->seed = (uint64_t)v), true);
    case CLI_OPTIMIZER_IN_BACKWARD: a->optimizer_in_backward = true; return true;
    case CLI_OPTIMIZER_OVERLAP: a->optimizer_overlap = true; return true;
    case CLI_GRAD_ACCUM_STEPS: return cli_parse_int(cmd, flag, arg, 1, 1 << 16, &v) && ((a->grad_accum_steps = (int)v), true);
    case CLI_DDP:
    case CLI_GRAD_REDUCE_DTYPE: {
        static const char *const dtypes[2] = {"fp32", "bf16"};
        char **items;
        if (!cli_split_list(cmd, flag, arg, max_n, &items, &n)) return false;
        bool ok = true;
        int *count = f == CLI_DDP ? &a->num_ddp_modes : &a->num_grad_reduce_dtypes, k;
        *count = 0;
        for (int i = 0; ok && i < n; i++) {
            if (f == CLI_DDP && !(ok = tlm_ddp_mode_parse(items[i], &a->ddp_modes[i])))
                cli_error(cmd, "%s: unknown mode '%s' (known: naive, flat, overlap, bucketed)", flag, items[i]);
            if (f == CLI_GRAD_REDUCE_DTYPE && (ok = cli_parse_choice(cmd, flag, items[i], dtypes, 2, &k)))
                a->grad_reduce_dtypes[i] = k ? TLM_DTYPE_BF16 : TLM_DTYPE_F32;
            (*count)++;
        }
        free(items);
        return ok;
    }
    case CLI_BUCKET_MB:
    case CLI_ZERO: {
        char **items;
        if (!cli_split_list(cmd, flag, arg, max_n, &items, &n)) return false;
        bool ok = true;
        for (int i = 0; ok && i < n; i++) {
            double x = 0;
            ok = f == CLI_ZERO ? cli_parse_int(cmd, flag, items[i], 0, 1, &v) : cli_parse_double(cmd, flag, items[i],
                                                                                                  1e-6, 1e7, &x);
            if (f == CLI_ZERO) a->zeros[i] = (int)v;
            else a->bucket_mbs[i] = x;
        }
        *(f == CLI_ZERO ? &a->num_zeros : &a->num_bucket_mbs) = n;
        free(items);
        return ok;
    }
    case CLI_TIMEOUT: return cli_parse_double(cmd, flag, arg, 0.5, 86400, &a->timeout);
    case CLI_MAX_CONTEXT:
        if (strcmp(arg, "device") == 0) return (a->max_context_device = true);
        return cli_parse_bytes(cmd, flag, arg, 1, (uint64_t)1 << 50, &a->max_context_bytes);
    case CLI_WIDE:
    case CLI_VERBOSE: /* set by cli_parse: they come with --format */
    case CLI_NUM_FLAGS: break;
    }
    return false;
}

int cli_parse(const cli_command *c, void *opts, int argc, char **argv, cli_args *a) {
    memset(a, 0, sizeof *a);
    a->shape = (cli_shape_flags){CLI_NOT_GIVEN, CLI_NOT_GIVEN, CLI_NOT_GIVEN, CLI_NOT_GIVEN,
                                 CLI_NOT_GIVEN, CLI_NOT_GIVEN, NAN};
    a->attention = TLM_ATTENTION_AUTO;
    a->cuda_graphs = true;
    /* the option table: shared flags, shape flags (with --model), the command's own, --help */
    struct option long_opts[CLI_NUM_FLAGS + SHAPE_COUNT + 64];
    char shorts[160] = ":h";
    int n = 0;
    for (int i = 0; i < c->num_uses; i++) {
        const flag_info *fi = &flags[c->uses[i].flag];
        long_opts[n++] = (struct option){fi->name, fi->arg_one ? required_argument : no_argument, 0,
                                         OPT_SHARED + (int)c->uses[i].flag};
        if (fi->short_opt) {
            TLM_ASSERT(!c->short_options || !strchr(c->short_options, fi->short_opt)); /* one meaning per letter */
            snprintf(shorts + strlen(shorts), sizeof shorts - strlen(shorts), "%c:", fi->short_opt);
        }
        if (c->uses[i].flag == CLI_MODEL)
            for (int k = 0; k < SHAPE_COUNT; k++)
                long_opts[n++] = (struct option){shape_names[k], required_argument, 0, OPT_SHAPE + k};
        if (c->uses[i].flag == CLI_FORMAT) /* the table's view comes with the format */
            for (cli_flag v = CLI_WIDE; v <= CLI_VERBOSE; v++)
                long_opts[n++] = (struct option){flags[v].name, no_argument, 0, OPT_SHARED + (int)v};
    }
    for (const struct option *o = c->options; o && o->name; o++) {
        TLM_ASSERT(n < (int)(sizeof long_opts / sizeof long_opts[0]) - 2);
        long_opts[n++] = *o;
    }
    long_opts[n++] = (struct option){"help", no_argument, 0, 'h'};
    long_opts[n] = (struct option){0, 0, 0, 0};
    if (c->short_options) snprintf(shorts + strlen(shorts), sizeof shorts - strlen(shorts), "%s", c->short_options);
    for (int i = 0; i < n - 1; i++) /* the record: every option but --help, none given yet */
        a->record[a->num_record++] = (struct cli_record){long_opts[i].name, NULL, false};

    optind = 1;
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, shorts, long_opts, NULL)) != -1;) {
        bool ok = true;
        if (opt == 'h') {
            if (c->usage) {
                c->usage(stdout, c);
            } else {
                fputs(c->help, stdout);
                cli_print_shared_help(stdout, c);
                if (c->help_after) fputs(c->help_after, stdout);
            }
            return TLM_EXIT_OK;
        } else if (opt == '?' || opt == ':') {
            const char *word = argv[optind - 1];
            if (opt == ':') cli_error(c->name, "%s needs a value (see tlm %s --help)", word, c->name);
            else if (optopt && !strchr(word, '=') && word[1] != '-')
                cli_error(c->name, "unknown option '-%c' (see tlm %s --help)", optopt, c->name);
            else cli_error(c->name, "unknown option '%s' (see tlm %s --help)", word, c->name);
            return TLM_EXIT_USAGE;
        } else if (opt == OPT_SHARED + CLI_WIDE || opt == OPT_SHARED + CLI_VERBOSE) {
            *(opt == OPT_SHARED + CLI_WIDE ? &a->wide : &a->verbose) = true; /* not in c->uses: no parse_shared */
            a->given[opt - OPT_SHARED] = true;
        } else if (opt >= OPT_SHAPE && opt < OPT_SHAPE + SHAPE_COUNT) {
            ok = parse_shape(c->name, opt - OPT_SHAPE, optarg, &a->shape);
        } else {
            cli_flag f = CLI_NUM_FLAGS;
            for (int i = 0; i < c->num_uses; i++)
                if (opt == OPT_SHARED + (int)c->uses[i].flag || opt == flags[c->uses[i].flag].short_opt) f = c->uses[i].flag;
            if (f != CLI_NUM_FLAGS) {
                ok = parse_shared(c, f, optarg, a);
                a->given[f] = true;
            } else {
                TLM_ASSERT(c->handle);
                ok = c->handle(opts, opt, optarg);
            }
        }
        if (!ok) {
            cli_args_free(a);
            return TLM_EXIT_USAGE;
        }
        for (int i = 0; i < a->num_record; i++) /* the option's long entry, or its short letter's */
            if (long_opts[i].val == opt || (opt < OPT_SHARED && opt == (int)(unsigned char)opt && i < n - 1 &&
                                            long_opts[i].val >= OPT_SHARED && long_opts[i].val < OPT_SHAPE &&
                                            flags[long_opts[i].val - OPT_SHARED].short_opt == opt)) {
                a->record[i].given = true;
                a->record[i].value = long_opts[i].has_arg ? optarg : "on";
                break;
            }
    }
    a->positional = argv + optind;
    a->num_positional = argc - optind;
    if (a->num_positional < c->min_positional || a->num_positional > c->max_positional) {
        if (a->num_positional > c->max_positional)
            cli_error(c->name, "unexpected argument '%s' (see tlm %s --help)", a->positional[c->max_positional], c->name);
        else cli_error(c->name, "missing argument (see tlm %s --help)", c->name);
        cli_args_free(a);
        return TLM_EXIT_USAGE;
    }
    if (!c->checks_own_files && a->out && !cli_check_files(c->name, a, NULL)) { /* --out and its sidecars, before any work */
        cli_args_free(a);
        return TLM_EXIT_USAGE;
    }
    return -1;
}

void cli_args_free(cli_args *a) {
    free(a->models_buf_);
    a->models_buf_ = NULL;
    a->models = NULL;
    a->num_models = 0;
}

/* text from column `start` on, broken at spaces into lines of at most `width` columns, the next lines
 * indented by `indent`; a word longer than a line stays whole */
static void print_wrapped(FILE *f, const char *text, int start, int indent, int width) {
    int col = start;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        const size_t word = strcspn(p, " ");
        if (!word) break;
        if (col > start && col + 1 + (int)word > width) {
            fprintf(f, "\n%*s", indent, "");
            col = start = indent;
        } else if (col > start) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, word, f);
        col += (int)word;
        p += word;
    }
    fputc('\n', f);
}

void cli_print_shared_help(FILE *f, const cli_command *c) {
    for (int i = 0; i < c->num_uses; i++) {
        const cli_use *u = &c->uses[i];
        const flag_info *fi = &flags[u->flag];
        const bool list = u->max_values > 1;
        char left[64];
        snprintf(left, sizeof left, "%c%c%s --%s %s", fi->short_opt ? '-' : ' ', fi->short_opt ? fi->short_opt : ' ',
                 fi->short_opt ? "," : " ", fi->name, !fi->arg_one ? "" : list ? fi->arg_list : fi->arg_one);
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s%s%s%s%s%s", list ? "comma list: " : "", c->flag_help[u->flag] ? c->flag_help[u->flag] : fi->help,
                 u->flag == CLI_MODEL ? " (" : "", u->flag == CLI_MODEL ? tlm_config_preset_names() : "",
                 u->flag == CLI_MODEL ? ")" : "", u->flag == CLI_PRECISION && list ? "; all = the four" : "",
                 u->default_text ? " (default: " : "", u->default_text ? u->default_text : "");
        if (u->default_text) snprintf(text + strlen(text), sizeof text - strlen(text), ")");
        const int start = fprintf(f, "  %-27s ", left);
        print_wrapped(f, text, start, 30, 106);
        for (cli_flag v = CLI_WIDE; u->flag == CLI_FORMAT && v <= CLI_VERBOSE; v++)
            fprintf(f, "      --%-21s %s\n", flags[v].name, flags[v].help);
        if (u->flag == CLI_MODEL)
            fprintf(f, "      --vocab-size N --d-model N --d-ff N --num-layers N --num-heads N --rope-theta X\n"
                       "                              change the preset's shape (d_model must divide by num_heads,\n"
                       "                              d_head even); the model's name then ends in '*'\n"
                       "      --max-context-length N  longest sequence the RoPE table covers (default: the preset's\n"
                       "                              1024, or the longest --context-length when that is longer)\n");
    }
    fprintf(f, "  -h, --help                  this text\n");
}

bool cli_refuse_together(const char *cmd, const cli_args *a, cli_flag f1, bool given2, const char *name2,
                         const char *why) {
    if (!a->given[f1] || !given2) return true;
    cli_error(cmd, "%s conflicts with %s: %s", cli_flag_name(f1), name2, why);
    return false;
}

/* ---- the model and the workload ---------------------------------------------------------------------------- */

bool cli_model_config(const char *cmd, const cli_args *a, const char *name, tlm_config *cfg, char *display,
                      size_t display_n) {
    if (tlm_config_preset(name, cfg) != TLM_OK) {
        cli_error(cmd, "--model: %s", tlm_last_error());
        return false;
    }
    const cli_shape_flags *s = &a->shape;
    bool changed = false;
    const long given[] = {s->vocab_size, s->d_model, s->d_ff, s->num_layers, s->num_heads};
    int *fields[] = {&cfg->vocab_size, &cfg->d_model, &cfg->d_ff, &cfg->num_layers, &cfg->num_heads};
    for (int i = 0; i < 5; i++)
        if (given[i] != CLI_NOT_GIVEN) {
            *fields[i] = (int)given[i];
            changed = true;
        }
    if (!isnan(s->rope_theta)) {
        cfg->rope_theta = s->rope_theta;
        changed = true;
    }
    if (s->max_context != CLI_NOT_GIVEN) cfg->context_length = (int)s->max_context;
    /* the RoPE table covers the longest context asked for, unless its length was given */
    for (int i = 0; i < a->num_contexts; i++) {
        if (a->contexts[i] <= cfg->context_length) continue;
        if (s->max_context != CLI_NOT_GIVEN) {
            cli_error(cmd, "--context-length %d conflicts with --max-context-length %ld: the RoPE table covers %ld "
                           "positions", a->contexts[i], s->max_context, s->max_context);
            return false;
        }
        cfg->context_length = a->contexts[i];
    }
    if (tlm_config_validate(cfg) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return false;
    }
    if (display) snprintf(display, display_n, "%s%s", name, changed ? "*" : "");
    return true;
}

void cli_sizes(const cli_args *a, const tlm_config *preset, const tlm_config *model, cli_size out[CLI_NUM_SIZES]) {
    const cli_shape_flags *s = &a->shape;
    out[CLI_SIZE_VOCAB] = (cli_size){"--vocab-size", s->vocab_size, preset->vocab_size, model->vocab_size};
    out[CLI_SIZE_D_MODEL] = (cli_size){"--d-model", s->d_model, preset->d_model, model->d_model};
    out[CLI_SIZE_D_FF] = (cli_size){"--d-ff", s->d_ff, preset->d_ff, model->d_ff};
    out[CLI_SIZE_NUM_LAYERS] = (cli_size){"--num-layers", s->num_layers, preset->num_layers, model->num_layers};
    out[CLI_SIZE_NUM_HEADS] = (cli_size){"--num-heads", s->num_heads, preset->num_heads, model->num_heads};
}

void cli_default_workload(cli_args *a, const tlm_backend *be, int warmup, int steps) {
    if (!a->num_contexts) a->contexts[a->num_contexts++] = be->kind == TLM_DEVICE_CPU ? 128 : 256;
    if (!a->num_batch_sizes) a->batch_sizes[a->num_batch_sizes++] = 4;
    if (!a->num_precisions) a->precisions[a->num_precisions++] = TLM_PRECISION_FP32;
    if (!a->num_passes) a->passes[a->num_passes++] = TLM_PASS_TRAIN;
    if (!a->num_warmups) a->warmups[a->num_warmups++] = warmup;
    if (!a->steps) a->steps = steps;
}
tlm_ddp_config cli_ddp_config(const cli_args *a) {
    tlm_ddp_config c = tlm_ddp_defaults();
    if (a->num_ddp_modes) c.mode = a->ddp_modes[0];
    if (a->num_bucket_mbs) c.bucket_mb = a->bucket_mbs[0];
    if (a->num_zeros) c.zero = a->zeros[0];
    if (a->num_grad_reduce_dtypes) c.reduce_dtype = a->grad_reduce_dtypes[0];
    return c;
}


bool cli_bench_cases(const char *cmd, const cli_args *a, tlm_backend *be, tlm_bench_case **cases, int *n) {
    TLM_ASSERT(a->num_models > 0 && a->num_contexts > 0 && a->num_precisions > 0 && a->num_batch_sizes > 0 &&
               a->num_passes > 0 && a->num_warmups > 0);
    const tlm_recompute no_recompute = TLM_RECOMPUTE_NONE;
    const tlm_recompute *recomputes = a->num_recomputes ? a->recomputes : &no_recompute;
    const int num_recomputes = a->num_recomputes ? a->num_recomputes : 1;
    /* data parallelism: every mode (bucketed once per --bucket-mb) x --zero x --grad-reduce-dtype */
    tlm_ddp_config ddps[4 * CLI_MAX_LIST * 4];
    int num_ddps = 0;
    const tlm_ddp_config dd = tlm_ddp_defaults();
    for (int mi = 0; mi < (a->num_ddp_modes ? a->num_ddp_modes : 1); mi++) {
        const tlm_ddp_mode mode = a->num_ddp_modes ? a->ddp_modes[mi] : dd.mode;
        const int nb = mode == TLM_DDP_BUCKETED && a->num_bucket_mbs ? a->num_bucket_mbs : 1;
        for (int bi = 0; bi < nb; bi++)
            for (int zi = 0; zi < (a->num_zeros ? a->num_zeros : 1); zi++)
                for (int di = 0; di < (a->num_grad_reduce_dtypes ? a->num_grad_reduce_dtypes : 1); di++)
                    ddps[num_ddps++] = (tlm_ddp_config){
                        .mode = mode, .bucket_mb = a->num_bucket_mbs ? a->bucket_mbs[bi] : dd.bucket_mb,
                        .zero = a->num_zeros ? a->zeros[zi] : 0,
                        .reduce_dtype = a->num_grad_reduce_dtypes ? a->grad_reduce_dtypes[di] : dd.reduce_dtype};
    }
    const long total = (long)a->num_models * a->num_passes * a->num_batch_sizes * a->num_warmups * num_recomputes *
                       a->num_precisions * a->num_contexts * num_ddps;
    const char *early = a->optimizer_in_backward ? "--optimizer-in-backward" : "--optimizer-overlap";
    if (a->optimizer_in_backward && a->optimizer_overlap) {
        cli_error(cmd, "--optimizer-in-backward conflicts with --optimizer-overlap: two ways of updating in the "
                       "backward pass (choose one)");
        return false;
    }
    for (int k = 0; (a->optimizer_in_backward || a->optimizer_overlap) && k < a->num_precisions; k++)
        if (a->precisions[k] == TLM_PRECISION_FP16) {
            cli_error(cmd, "%s conflicts with --precision fp16: dynamic loss scaling needs every gradient before the "
                           "first update (use bf16)", early);
            return false;
        }
    if (a->grad_accum_steps > 1 && (a->optimizer_in_backward || a->optimizer_overlap)) {
        cli_error(cmd, "--grad-accum-steps %d conflicts with %s: its updates run in each backward pass, before the "
                       "last micro-batch's gradients are added (use one or the other)", a->grad_accum_steps, early);
        return false;
    }
    for (int k = 0; a->optimizer_in_backward && k < a->num_zeros; k++)
        if (a->zeros[k]) {
            cli_error(cmd, "--zero 1 conflicts with --optimizer-in-backward: a layer's update would need its shard "
                           "of the averaged gradients before its bucket is complete");
            return false;
        }
    for (int k = 0; a->optimizer_overlap && k < a->num_zeros; k++)
        if (a->zeros[k]) {
            cli_error(cmd, "--zero 1 conflicts with --optimizer-overlap: ZeRO-1's update and all-gather follow the "
                           "backward on the communication stream already");
            return false;
        }
    *cases = NULL;
    *n = 0;
    if (total > 100000) {
        cli_error(cmd, "%ld configurations: more than 100000 (shorten a list)", total);
        return false;
    }
    tlm_bench_case *v = cli_calloc(cmd, (size_t)total, sizeof *v);
    if (!v) return false;
    for (int mi = 0; mi < a->num_models; mi++) {
        tlm_bench_case base = {0};
        if (!cli_model_config(cmd, a, a->models[mi], &base.config, base.model_name, sizeof base.model_name)) {
            free(v);
            return false;
        }
        base.steps = a->steps;
        base.graphs = a->cuda_graphs && tlm_backend_has_graphs(be);
        base.attention = a->attention;
        base.seed = a->seed;
        /* flash asked for by name where the backend cannot run it fails before anything runs */
        for (int k = 0; k < a->num_precisions; k++)
            if (tlm_attention_check(be, &base.config, a->precisions[k], a->attention) != TLM_OK) {
                cli_error(cmd, "--attention flash: %s %s: %s", base.model_name, tlm_precision_name(a->precisions[k]),
                          tlm_last_error());
                free(v);
                return false;
            }
        for (int pi = 0; pi < a->num_passes; pi++)
            for (int bi = 0; bi < a->num_batch_sizes; bi++)
                for (int wi = 0; wi < a->num_warmups; wi++)
                    for (int ri = 0; ri < num_recomputes; ri++)
                        for (int ki = 0; ki < a->num_precisions; ki++)
                            for (int ci = 0; ci < a->num_contexts * num_ddps; ci++) {
                                tlm_bench_case *bc = &v[(*n)++];
                                *bc = base;
                                bc->ddp = ddps[ci % num_ddps];
                                bc->pass = a->passes[pi];
                                bc->batch_size = a->batch_sizes[bi];
                                bc->warmup = a->warmups[wi];
                                bc->recompute = recomputes[ri];
                                bc->optimizer_in_backward = a->optimizer_in_backward && bc->pass == TLM_PASS_TRAIN;
                                bc->optimizer_overlap = a->optimizer_overlap && bc->pass == TLM_PASS_TRAIN;
                                bc->grad_accum_steps = bc->pass == TLM_PASS_TRAIN && a->grad_accum_steps > 1
                                                           ? a->grad_accum_steps : 1;
                                bc->precision = a->precisions[ki];
                                bc->context_length = a->contexts[ci / num_ddps];
                            }
    }
    *cases = v;
    return true;
}

/* ---- the backend and the report ------------------------------------------------------------------------------ */

void *cli_calloc(const char *cmd, size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) cli_error(cmd, "out of host memory");
    return p;
}

bool cli_max_context_bytes(const char *cmd, const cli_args *a, tlm_backend *be, size_t *out) {
    *out = (size_t)a->max_context_bytes;
    if (!a->max_context_device) return true;
    if (!(*out = tlm_device_memory_total(be))) {
        cli_error(cmd, "--max-context device: the %s backend has no device memory to size; give the bytes (e.g. "
                       "--max-context 16G)", be->name);
        return false;
    }
    return true;
}

tlm_backend *cli_create_backend(const char *cmd, const cli_args *a) {
    if (a->given[CLI_GPU] && a->device && strcmp(a->device, "cpu") == 0) {
        cli_error(cmd, "--gpu conflicts with --device cpu: a GPU is chosen only for the CUDA backend");
        return NULL;
    }
    tlm_backend *be = NULL;
    tlm_backends_register_builtin();
    if (tlm_backend_create(&be, a->device, a->gpu, a->threads) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return NULL;
    }
    return be;
}

void cli_report_device(tlm_report *r, const tlm_backend *be) {
    tlm_report_meta_str(r, "device", be->description);
    tlm_report_meta_int(r, "threads", omp_get_max_threads());
}

int cli_join(const char *cmd, const cli_args *a, double default_timeout_s, tlm_ddp_process *p) {
    cli_errors_alike(false); /* from here a rank's failure may be its own */
    if (tlm_ddp_join(p, a->device, a->gpu, a->threads, a->timeout > 0 ? a->timeout : default_timeout_s) != TLM_OK) {
        cli_error(cmd, "joining the run (rank %d): %s", p->world.rank, tlm_last_error());
        return TLM_EXIT_FAILURE; /* alone: the communication layer tells the others */
    }
    if (p->comm && p->world.rank != 0 && !freopen("/dev/null", "w", stdout)) { /* rank 0 prints */
        cli_error(cmd, "rank %d: cannot silence stdout", p->world.rank);
        return TLM_EXIT_FAILURE;
    }
    const cli_flag ddp_flags[] = {CLI_DDP, CLI_BUCKET_MB, CLI_ZERO, CLI_GRAD_REDUCE_DTYPE};
    for (size_t i = 0; !p->comm && i < sizeof ddp_flags / sizeof ddp_flags[0]; i++)
        if (a->given[ddp_flags[i]]) {
            cli_error(cmd, "%s needs several processes: start tlm %s with a launcher (mpirun -np 2 tlm %s ...; srun); "
                           "this is a world of one", cli_flag_name(ddp_flags[i]), cmd, cmd);
            return TLM_EXIT_USAGE;
        }
    return -1;
}

int cli_agree(const char *cmd, const cli_args *a, const tlm_ddp_process *p, const char *const *file_flags,
              int num_file_flags) {
    /* per-process flags, the only ones left out (a flag forgotten here is compared: stricter, not looser):
     * --gpu, a rank may choose its own GPU; --threads, its share of its host's cores */
    static const char *const per_process[] = {"gpu", "threads"};
    if (!p->comm) return -1;
    tlm_agreement fp = {0};
    char name[TLM_AGREEMENT_NAME];
    tlm_status s = tlm_agreement_add(&fp, "the command", true, cmd);
    for (int i = 0; s == TLM_OK && i < a->num_record; i++) {
        bool skip = false;
        for (size_t k = 0; k < sizeof per_process / sizeof per_process[0]; k++)
            skip |= strcmp(a->record[i].name, per_process[k]) == 0;
        snprintf(name, sizeof name, "--%s", a->record[i].name);
        if (!skip) s = tlm_agreement_add(&fp, name, a->record[i].given, a->record[i].value);
    }
    for (int f = 0; s == TLM_OK && f < num_file_flags; f++)
        for (int i = 0; s == TLM_OK && i < a->num_record; i++) {
            snprintf(name, sizeof name, "--%s", a->record[i].name);
            if (a->record[i].given && strcmp(name, file_flags[f]) == 0)
                s = tlm_agreement_add_file(&fp, name, a->record[i].value);
        }
    /* every rank gathers, even one that failed above (its list is then shorter: named as such) */
    const tlm_status all = tlm_agreement_check(p->comm, &fp);
    tlm_agreement_free(&fp);
    if (s == TLM_OK) s = all;
    if (s == TLM_OK) return -1;
    if (p->world.rank == 0) cli_error(cmd, "%s", tlm_last_error());
    return s == TLM_ERR_INVALID_ARGUMENT ? TLM_EXIT_USAGE : TLM_EXIT_FAILURE;
}

bool cli_check_files(const char *cmd, const cli_args *a, tlm_io_plan *plan) {
    tlm_io_plan own;
    if (!plan) tlm_io_plan_init(plan = &own);
    tlm_report_plan(plan, "--out", a->format, a->out);
    if (tlm_io_plan_check(plan) == TLM_OK) return true;
    cli_error(cmd, "%s", tlm_last_error());
    return false;
}

tlm_report *cli_open_report(const char *cmd, const cli_args *a, const char *tool, int argc, char **argv) {
    tlm_report *r = NULL;
    if (tlm_report_open(&r, tool, a->format, a->out, argc, argv) != TLM_OK) {
        cli_error(cmd, "--out: %s", tlm_last_error());
        return NULL;
    }
    tlm_report_view(r, a->wide, a->verbose);
    return r;
}

/* ---- subcommands ------------------------------------------------------------------------------------------- */

int cli_run_subcommand(const char *prog, const char *noun, int argc, char **argv, const cli_subcommand *subs, int n,
                       void (*usage)(FILE *f)) {
    if (argc < 2) {
        usage(stderr);
        return TLM_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return TLM_EXIT_OK;
    }
    char known[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(name, subs[i].name) == 0) return subs[i].run(argc - 1, argv + 1);
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", subs[i].name);
    }
    fprintf(stderr, "%s: unknown %s '%s' (known: %s; see %s --help)\n", prog, noun, name, known, prog);
    return TLM_EXIT_USAGE;
}
