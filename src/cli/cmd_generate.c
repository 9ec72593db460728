/* cmd_generate.c — `tlm generate`: text from a trained model (generate.h). Parses the flags, turns
 * the prompt into ids (--prompt: UTF-8 bytes, the byte-level tokens of tools/make_tokens.py;
 * --prompt-ids: ids of any vocabulary), loads the model (tlm_generate_load), calls tlm_generate
 * (streaming the text to stdout), and reports the time to first token and the decoding speed on
 * stderr (and, with --out, in the report). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tlm/generate.h"
#include "tlm/output.h"

enum { OPT_CHECKPOINT = 2000, OPT_NUM_HEADS, OPT_MAX_CONTEXT, OPT_PROMPT, OPT_PROMPT_IDS,
       OPT_MAX_NEW, OPT_TEMPERATURE, OPT_TOP_P, OPT_EOT, OPT_PRINT };

typedef enum { PRINT_AUTO = 0, PRINT_TEXT, PRINT_IDS } print_mode;

typedef struct {
    tlm_generate_source src; /* its weights and strip_prefix: those of `weights` */
    cli_weights_file weights; /* --weights, --strip-prefix */
    const char *prompt, *prompt_ids;
    tlm_generate_config gen;
    int print; /* print_mode */
} generate_opts;

static const cli_use generate_uses[] = {
    {CLI_PRECISION, "fp32", 1},
    {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};

static const struct option generate_options[] = {
    {"checkpoint", required_argument, 0, OPT_CHECKPOINT}, CLI_WEIGHTS_OPTIONS("weights"),
    {"num-heads", required_argument, 0, OPT_NUM_HEADS},
    {"max-context-length", required_argument, 0, OPT_MAX_CONTEXT}, {"prompt", required_argument, 0, OPT_PROMPT},
    {"prompt-ids", required_argument, 0, OPT_PROMPT_IDS},   {"max-new-tokens", required_argument, 0, OPT_MAX_NEW},
    {"temperature", required_argument, 0, OPT_TEMPERATURE}, {"top-p", required_argument, 0, OPT_TOP_P},
    {"eot-id", required_argument, 0, OPT_EOT},              {"print", required_argument, 0, OPT_PRINT},
    {0, 0, 0, 0}};

static bool generate_handle(void *user, int opt, const char *arg) {
    generate_opts *o = user;
    const char *cmd = "generate";
    static const char *const prints[] = {"auto", "text", "ids"};
    long v = 0;
    bool ok = true;
    if (cli_weights_option(&o->weights, opt, arg)) {
        o->src.weights = o->weights.path;
        o->src.strip_prefix = o->weights.strip_prefix;
        return true;
    }
    switch (opt) {
    case OPT_CHECKPOINT: o->src.checkpoint = arg; break;
    case OPT_NUM_HEADS:
        ok = cli_parse_int(cmd, "--num-heads", arg, 1, 1 << 16, &v) && ((o->src.num_heads = (int)v), true);
        break;
    case OPT_MAX_CONTEXT:
        ok = cli_parse_int(cmd, "--max-context-length", arg, 1, 1 << 24, &v) &&
             ((o->src.context_length = (int)v), true);
        break;
    case OPT_PROMPT: o->prompt = arg; break;
    case OPT_PROMPT_IDS: o->prompt_ids = arg; break;
    case OPT_MAX_NEW:
        ok = cli_parse_int(cmd, "--max-new-tokens", arg, 0, 1 << 24, &v) && ((o->gen.max_new_tokens = (int)v), true);
        break;
    /* the domains of tlm_generate_config_check, so a value is refused with the flag's own text */
    case OPT_TEMPERATURE: ok = cli_parse_double(cmd, "--temperature", arg, 0, 1e6, &o->gen.temperature); break;
    case OPT_TOP_P:
        ok = cli_parse_double(cmd, "--top-p", arg, 0, 1, &o->gen.top_p);
        if (ok && o->gen.top_p == 0) {
            cli_error(cmd, "--top-p: 0 is out of range: the nucleus is (0, 1] (a small value samples greedily)");
            ok = false;
        }
        break;
    case OPT_EOT: ok = cli_parse_int(cmd, "--eot-id", arg, 0, 1 << 30, &v) && ((o->gen.eot_id = (int)v), true); break;
    case OPT_PRINT: ok = cli_parse_choice(cmd, "--print", arg, prints, 3, &o->print); break;
    default: return false;
    }
    return ok;
}

static const cli_command generate_cmd = {
    .help =
        "Usage: tlm generate (--checkpoint DIR | --weights FILE) (--prompt TEXT | --prompt-ids IDS) [options]\n"
        "Text from a trained model: the prompt's forward fills a KV cache (prefill), then each new token is\n"
        "drawn from the logits (greedy, or temperature and top-p sampling) and run through a forward of one\n"
        "position. The generated text goes to stdout as it is drawn; the time to first token and the decoding\n"
        "speed (tokens/s) to stderr, and with --out to the report (its table then shows on stderr).\n"
        "\n"
        "      --checkpoint DIR      a tlm train --checkpoint-dir (the step its `latest` names) or one step-N dir\n"
        "      --weights FILE        or a safetensors file with the CS336 state-dict names (tlm's, or a PyTorch\n"
        "                            state dict), read as tlm step reads it\n"
        "      --strip-prefix P      remove P from the file's tensor names (torch.compile's: _orig_mod.)\n"
        "      --num-heads N         a state dict's num_heads (its file does not record it)\n"
        "      --max-context-length N  the RoPE table's length for a state dict (default: 1024, CS336's)\n"
        "      --prompt TEXT         the prompt as UTF-8 bytes, one id each (tools/make_tokens.py's default byte\n"
        "                            tokenizer, vocab 256)\n"
        "      --prompt-ids IDS      or the prompt as token ids, comma list (any vocabulary)\n"
        "      --max-new-tokens N    the most tokens generated (default: 64); the prompt and these must fit the\n"
        "                            model's context_length, else it is refused\n"
        "      --temperature T       softmax(logits / T); 0: greedy, the argmax (default: 1)\n"
        "      --top-p P             sample from the nucleus: the fewest most-probable tokens whose probabilities\n"
        "                            sum to at least P, in (0, 1] (Holtzman et al. 2020; default: 1, all)\n"
        "      --eot-id ID           stop after generating this id (default: none; the byte tokenizer has none)\n"
        "      --print auto|text|ids what stdout shows: text (the bytes), ids (a comma list); auto: text when\n"
        "                            the vocabulary is 256 (bytes), else ids (default: auto)\n",
    .name = "generate",
    CLI_USES(generate_uses),
    .options = generate_options,
    .handle = generate_handle,
    .flag_help = {[CLI_SEED] = "seed of the sampling",
                  [CLI_OUT] = "write the report (tokens, time to first token, tokens/s), in --format, to FILE"},
    .checks_own_files = true};

/* The prompt's ids: the bytes of --prompt, or --prompt-ids. *ids is malloc'ed. Prints the error. */
static bool prompt_ids(const generate_opts *o, int32_t **ids, int *n) {
    const char *cmd = "generate";
    if (o->prompt) {
        const size_t len = strlen(o->prompt);
        if (len == 0 || len > (1u << 24)) {
            cli_error(cmd, "--prompt: give 1 to 2^24 bytes of text");
            return false;
        }
        if (!(*ids = cli_calloc(cmd, len, sizeof(int32_t)))) return false;
        for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)o->prompt[i];
        *n = (int)len;
        return true;
    }
    char **items = NULL;
    int k = 0;
    if (!cli_split_list(cmd, "--prompt-ids", o->prompt_ids, 1 << 24, &items, &k)) return false;
    bool ok = (*ids = cli_calloc(cmd, (size_t)k, sizeof(int32_t))) != NULL;
    for (int i = 0; ok && i < k; i++) {
        long v = 0;
        ok = cli_parse_int(cmd, "--prompt-ids", items[i], 0, 2147483647L, &v);
        if (ok) (*ids)[i] = (int32_t)v;
    }
    free(items);
    if (!ok) {
        free(*ids); /* the caller frees *ids too: leave it NULL */
        *ids = NULL;
    }
    *n = k;
    return ok;
}

/* The flags checked together; false after printing the error. */
static bool check_flags(const generate_opts *o) {
    const char *cmd = "generate";
    if (!o->src.checkpoint == !o->src.weights) {
        cli_error(cmd, o->src.checkpoint ? "--checkpoint conflicts with --weights: give one"
                                         : "give the model: --checkpoint DIR or --weights FILE");
        return false;
    }
    if (!o->prompt == !o->prompt_ids) {
        cli_error(cmd, o->prompt ? "--prompt conflicts with --prompt-ids: give one"
                                 : "give --prompt TEXT or --prompt-ids IDS");
        return false;
    }
    if (o->src.checkpoint && (o->src.strip_prefix || o->src.num_heads || o->src.context_length)) {
        cli_error(cmd, "--strip-prefix, --num-heads and --max-context-length are for --weights: a checkpoint "
                       "records its model");
        return false;
    }
    return true;
}

typedef struct {
    bool ids;  /* print ids, else bytes */
    int count; /* printed so far */
} printer;

static void print_token(void *user, int32_t id) {
    printer *p = user;
    if (p->ids) printf("%s%d", p->count ? "," : "", (int)id);
    else putchar((unsigned char)id);
    p->count++;
    fflush(stdout);
}

/* the report of --out: the run's fields and one row of figures */
static int write_report(const cli_args *a, int argc, char **argv, const tlm_backend *be, const tlm_config *cfg,
                        const generate_opts *o, const tlm_generate_stats *st) {
    static const tlm_column cols[] = {
        {"prompt_tokens", TLM_FIELD_INT, "prompt", "tokens", 8, 0, 0, 0},
        {"new_tokens", TLM_FIELD_INT, "new", "tokens", 8, 0, 0, 0},
        {"stopped_at_eot", TLM_FIELD_BOOL, "eot", "", 5, 0, 0, 0},
        TLM_COL_MS("first_token_ms", "first token", 11, 3),
        {"decode_tokens_per_s", TLM_FIELD_NUM, "decode", "tokens/s", 10, 1, 0, 0},
    };
    const double row[] = {st->prompt_tokens, st->new_tokens, st->stopped_at_eot, st->first_token_ms,
                          st->decode_tokens_per_s};
    tlm_report *r = cli_open_report("generate", a, "tlm generate", argc, argv);
    if (!r) return TLM_EXIT_FAILURE;
    cli_report_device(r, be);
    tlm_report_meta_str(r, "precision", tlm_precision_name(a->num_precisions ? a->precisions[0] : TLM_PRECISION_FP32));
    tlm_report_meta_str(r, "model", o->src.checkpoint ? o->src.checkpoint : o->src.weights);
    const char *const keys[] = {"vocab_size", "context_length", "seed", "temperature", "top_p"};
    const double meta[] = {cfg->vocab_size, cfg->context_length, (double)o->gen.seed, o->gen.temperature, o->gen.top_p};
    for (int i = 0; i < 5; i++) /* three whole numbers, then two reals */
        if (i < 3) tlm_report_meta_int(r, keys[i], (int64_t)meta[i]);
        else tlm_report_meta_num(r, keys[i], meta[i]);
    tlm_report_table(r, "generate", cols, (int)(sizeof cols / sizeof cols[0]));
    tlm_report_row_begin(r);
    for (int i = 0; i < (int)(sizeof cols / sizeof cols[0]); i++)
        if (cols[i].type == TLM_FIELD_INT) tlm_report_int(r, cols[i].key, (int64_t)row[i]);
        else if (cols[i].type == TLM_FIELD_BOOL) tlm_report_bool(r, cols[i].key, row[i] != 0);
        else tlm_report_num(r, cols[i].key, row[i]);
    tlm_report_row_end(r);
    if (tlm_report_close(r, true) != TLM_OK) {
        cli_error("generate", "--out: %s", tlm_last_error());
        return TLM_EXIT_FAILURE;
    }
    return TLM_EXIT_OK;
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate";
    generate_opts given = {.gen = tlm_generate_defaults()}, *o = &given;
    cli_args a;
    int rc = cli_parse(&generate_cmd, o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    int32_t *prompt = NULL, *out = NULL;
    int n_prompt = 0;
    tlm_backend *be = NULL;
    tlm_model *m = NULL;
    if (!check_flags(o)) goto done;
    o->gen.seed = a.seed;
    tlm_io_plan files; /* --out may not replace the weights nor land in the checkpoint */
    tlm_io_plan_init(&files);
    tlm_io_plan_input(&files, "--weights", o->src.weights);
    tlm_io_plan_inside(&files, "--checkpoint", o->src.checkpoint);
    if (!cli_check_files(cmd, &a, &files) || !prompt_ids(o, &prompt, &n_prompt)) goto done;

    rc = TLM_EXIT_FAILURE;
    if (!(be = cli_create_backend(cmd, &a))) goto done;
    tlm_run_config run = tlm_run_defaults();
    run.precision = a.num_precisions ? a.precisions[0] : TLM_PRECISION_FP32;
    tlm_config cfg;
    if (tlm_generate_load(&o->src, &run, be, &m, &cfg) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto done;
    }
    if ((o->prompt || o->print == PRINT_TEXT) && cfg.vocab_size != 256) {
        cli_error(cmd, "%s bytes (vocab 256), but this model's vocabulary is %d: %s",
                  o->prompt ? "--prompt encodes" : "--print text prints", cfg.vocab_size,
                  o->prompt ? "give --prompt-ids" : "print its ids (--print ids) and decode them with its tokenizer");
        rc = TLM_EXIT_USAGE;
        goto done;
    }
    if (tlm_generate_check(&cfg, &o->gen, prompt, n_prompt) != TLM_OK) { /* usage: named before any work */
        cli_error(cmd, "%s", tlm_last_error());
        rc = TLM_EXIT_USAGE;
        goto done;
    }
    if (!(out = cli_calloc(cmd, (size_t)o->gen.max_new_tokens + 1, sizeof(int32_t)))) goto done;
    printer p = {.ids = o->print == PRINT_IDS || (o->print == PRINT_AUTO && cfg.vocab_size != 256)};
    tlm_generate_stats st;
    const tlm_status s = tlm_generate(m, &o->gen, prompt, n_prompt, out, print_token, &p, &st);
    putchar('\n');
    fflush(stdout);
    if (s != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        goto done;
    }
    fprintf(stderr, "tlm generate: %d prompt tokens, %d new%s; time to first token %.2f ms, decoding %.1f tokens/s "
                    "(%s, %s)\n",
            st.prompt_tokens, st.new_tokens, st.stopped_at_eot ? " (stopped at the end-of-text id)" : "",
            st.first_token_ms, st.decode_tokens_per_s, be->name, tlm_precision_name(run.precision));
    if (a.out) { /* the report's table shows on stderr: stdout holds the text alone */
        const int saved = dup(STDOUT_FILENO);
        if (saved >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
        rc = write_report(&a, argc, argv, be, &cfg, o, &st);
        fflush(stdout);
        if (saved >= 0) {
            dup2(saved, STDOUT_FILENO);
            close(saved);
        }
    } else {
        rc = TLM_EXIT_OK;
    }
done:
    free(prompt);
    free(out);
    tlm_model_free(m);
    tlm_backend_destroy(be);
    cli_args_free(&a);
    return rc;
}
