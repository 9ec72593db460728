/* cli_common.c — argument parsing, model-shape flags, backend choice and safe file output
 * shared by the subcommands. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tlm %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_parse_int(const char *cmd, const char *flag, const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0') {
        cli_error(cmd, "%s: '%s' is not an integer", flag, text);
        return false;
    }
    if (v < min || v > max) {
        cli_error(cmd, "%s: %ld is out of range [%ld, %ld]", flag, v, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *cmd, const char *flag, const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v)) {
        cli_error(cmd, "%s: '%s' is not a number", flag, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int_list(const char *cmd, const char *flag, const char *text, long min, long max, int *out,
                        int max_n, int *n) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (*n == max_n) {
            cli_error(cmd, "%s: more than %d values", flag, max_n);
            return false;
        }
        if (!cli_parse_int(cmd, flag, tok, min, max, &v)) return false;
        out[(*n)++] = (int)v;
    }
    if (*n == 0) {
        cli_error(cmd, "%s: no values in '%s'", flag, text);
        return false;
    }
    return true;
}

void cli_shape_flags_init(cli_shape_flags *f) {
    f->vocab_size = f->d_model = f->d_ff = f->num_layers = f->num_heads = f->max_context = CLI_NOT_GIVEN;
    f->rope_theta = NAN;
}

bool cli_shape_flags_any(const cli_shape_flags *f) {
    return f->vocab_size != CLI_NOT_GIVEN || f->d_model != CLI_NOT_GIVEN || f->d_ff != CLI_NOT_GIVEN ||
           f->num_layers != CLI_NOT_GIVEN || f->num_heads != CLI_NOT_GIVEN || f->max_context != CLI_NOT_GIVEN ||
           !isnan(f->rope_theta);
}

int cli_handle_shape_option(const char *cmd, int opt, const char *arg, cli_shape_flags *f) {
    /* sizes accept any integer here so that 0 and negatives reach the model's own check,
     * which names the field */
    const long lo = -1000000000L, hi = 1000000000L;
    switch (opt) {
    case OPT_VOCAB_SIZE: return cli_parse_int(cmd, "--vocab-size", arg, lo, hi, &f->vocab_size) ? 1 : -1;
    case OPT_D_MODEL: return cli_parse_int(cmd, "--d-model", arg, lo, hi, &f->d_model) ? 1 : -1;
    case OPT_D_FF: return cli_parse_int(cmd, "--d-ff", arg, lo, hi, &f->d_ff) ? 1 : -1;
    case OPT_NUM_LAYERS: return cli_parse_int(cmd, "--num-layers", arg, lo, hi, &f->num_layers) ? 1 : -1;
    case OPT_NUM_HEADS: return cli_parse_int(cmd, "--num-heads", arg, lo, hi, &f->num_heads) ? 1 : -1;
    case OPT_MAX_CONTEXT:
        return cli_parse_int(cmd, "--max-context-length", arg, lo, hi, &f->max_context) ? 1 : -1;
    case OPT_ROPE_THETA: return cli_parse_double(cmd, "--rope-theta", arg, &f->rope_theta) ? 1 : -1;
    }
    return 0;
}

/* values were range-checked by cli_parse_int; zero and negatives are left for
 * tlm_config_validate, whose message names the field */
static bool apply_one(const char *cmd, const char *flag, long v, int *field) {
    if (v != CLI_NOT_GIVEN) *field = (int)v;
    return true;
}

bool cli_apply_shape_flags(const char *cmd, const cli_shape_flags *f, tlm_config *cfg) {
    if (!apply_one(cmd, "--vocab-size", f->vocab_size, &cfg->vocab_size) ||
        !apply_one(cmd, "--d-model", f->d_model, &cfg->d_model) ||
        !apply_one(cmd, "--d-ff", f->d_ff, &cfg->d_ff) ||
        !apply_one(cmd, "--num-layers", f->num_layers, &cfg->num_layers) ||
        !apply_one(cmd, "--num-heads", f->num_heads, &cfg->num_heads) ||
        !apply_one(cmd, "--max-context-length", f->max_context, &cfg->context_length))
        return false;
    if (!isnan(f->rope_theta)) cfg->rope_theta = f->rope_theta;
    if (tlm_config_validate(cfg) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return false;
    }
    return true;
}

void cli_print_shape_flags_help(FILE *f) {
    fprintf(f, "Model shape (override the preset's values):\n"
               "      --vocab-size N          vocabulary size (preset: 10000; tiny 512)\n"
               "      --d-model N             residual width\n"
               "      --d-ff N                SwiGLU inner width\n"
               "      --num-layers N          Transformer blocks\n"
               "      --num-heads N           attention heads (d_model must divide, d_head even)\n"
               "      --rope-theta X          RoPE base (10000)\n"
               "      --max-context-length N  longest sequence the RoPE table covers (preset: 1024)\n");
}

bool cli_parse_attention(const char *cmd, const char *text, tlm_attention *out) {
    if (tlm_attention_parse(text, out)) return true;
    cli_error(cmd, "--attention: unknown attention '%s' (known: flash, naive, auto)", text);
    return false;
}

void cli_print_attention_help(FILE *f) {
    fprintf(f, "  -a, --attention A         flash | naive | auto (default: auto = flash on CUDA, naive on the\n"
               "                            CPU). flash: FlashAttention-2, saves only the logsumexp (B,H,T) per\n"
               "                            layer; naive: saves the probabilities (B,H,T,T). On the CPU flash is\n"
               "                            the slow fp32 reference; CUDA flash needs d_head 16, 32, 64, 80 or\n"
               "                            128 (auto falls back to naive there, flash fails)\n");
}

bool cli_check_device(const char *cmd, const char *device) {
    if (!device || strcmp(device, "cpu") == 0 || strcmp(device, "cuda") == 0) return true;
    cli_error(cmd, "--device: unknown device '%s' (known: cpu, cuda)", device);
    return false;
}

tlm_backend *cli_create_backend(const char *cmd, const char *device, int threads, char *desc, size_t desc_n) {
    tlm_backend *be = NULL;
    if (tlm_backend_create(&be, device, 0, threads) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return NULL;
    }
    snprintf(desc, desc_n, "%s", be->description);
    return be;
}

FILE *cli_open_tmp(const char *cmd, const char *path, char *tmp_path, size_t n) {
    snprintf(tmp_path, n, "%s.tmp", path);
    FILE *f = fopen(tmp_path, "w");
    if (!f) cli_error(cmd, "cannot write %s: %s", tmp_path, strerror(errno));
    return f;
}

bool cli_commit_file(const char *cmd, FILE *f, const char *tmp_path, const char *path, bool ok) {
    if (fflush(f) != 0 || ferror(f)) ok = false;
    if (fclose(f) != 0) ok = false;
    if (ok && rename(tmp_path, path) != 0) {
        cli_error(cmd, "cannot rename %s to %s: %s", tmp_path, path, strerror(errno));
        ok = false;
    }
    if (!ok) remove(tmp_path);
    return ok;
}
