/* cmd_bench.c — `tlm bench`: the end-to-end benchmark over model sizes x context lengths. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/bench.h"

#define MAX_MODELS 16
#define MAX_CONTEXTS 16

static void bench_usage(FILE *f) {
    fprintf(f,
            "Usage: tlm bench [options]\n"
            "End-to-end benchmark of the CS336 Transformer LM (SPEC.md §2.1): random weights and batch,\n"
            "warm-up steps, then timed steps; every phase is synchronized and timed separately.\n"
            "\n"
            "  -m, --model LIST          comma list of presets: %s\n"
            "                            (default: small,medium,large,xl,2.7B on a GPU; small on the CPU)\n"
            "  -c, --context-length LIST comma list of sequence lengths (default: 256 on a GPU, 128 on the CPU)\n"
            "  -b, --batch-size N        sequences per batch (default: 4)\n"
            "  -w, --warmup N            untimed warm-up steps (default: 5; CPU default run: 1)\n"
            "  -n, --steps N             timed steps (default: 10; CPU default run: 3)\n"
            "  -p, --pass P              forward | forward-backward | train (default: train =\n"
            "                            forward + backward + AdamW step)\n"
            "  -P, --precision LIST      comma list of fp32 (strict IEEE GEMMs, PyTorch's default),\n"
            "                            tf32 (TF32 tensor-core GEMMs; the CPU computes it as fp32),\n"
            "                            bf16, fp16 (autocast: low-precision GEMMs, fp32 master weights;\n"
            "                            fp16 with dynamic loss scaling); all = the four (default: fp32)\n"
            "  -d, --device D            cpu | cuda (default: cuda when a GPU is present, else cpu)\n"
            "  -g, --cuda-graph on|off   capture forward and backward as CUDA graphs once and replay\n"
            "                            them (cuts launch overhead; default: on; no effect on the CPU);\n"
            "                            the capture happens in the second step: keep --warmup >= 2\n"
            "  -t, --threads N           CPU threads (default: all cores)\n"
            "  -s, --seed N              weights and batch seed (default: 0)\n"
            "  -f, --format F            table | csv | json (default: table)\n"
            "  -o, --out FILE            write the results, in --format, to FILE (stdout then shows the table)\n"
            "  -h, --help                this text\n",
            tlm_config_preset_names());
    cli_print_attention_help(f);
    cli_print_shape_flags_help(f);
    fprintf(f, "\nWith no --model, --context-length, --warmup or --steps on a machine without a GPU, tlm bench\n"
               "runs small at context 128 with 1 warm-up and 3 timed steps on the CPU (about a minute).\n");
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"context-length", required_argument, 0, 'c'},
        {"batch-size", required_argument, 0, 'b'}, {"warmup", required_argument, 0, 'w'},
        {"steps", required_argument, 0, 'n'},   {"pass", required_argument, 0, 'p'},
        {"precision", required_argument, 0, 'P'},
        {"device", required_argument, 0, 'd'},  {"threads", required_argument, 0, 't'},
        {"seed", required_argument, 0, 's'},    {"format", required_argument, 0, 'f'},
        {"out", required_argument, 0, 'o'},     {"help", no_argument, 0, 'h'},
        {"cuda-graph", required_argument, 0, 'g'}, {"attention", required_argument, 0, 'a'},
        CLI_SHAPE_LONG_OPTIONS,                 {0, 0, 0, 0}};
    const char *models_arg = NULL, *device = NULL, *out_path = NULL;
    int contexts[MAX_CONTEXTS], num_contexts = 0;
    long batch = 4, warmup = -1, steps = -1, threads = 0, seed = 0;
    tlm_pass pass = TLM_PASS_TRAIN;
    tlm_precision precisions[4] = {TLM_PRECISION_FP32};
    int num_precisions = 1;
    tlm_format fmt = TLM_FORMAT_TABLE;
    bool graphs = true;
    tlm_attention attention = TLM_ATTENTION_AUTO;
    cli_shape_flags shape;
    cli_shape_flags_init(&shape);
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:c:b:w:n:p:P:d:t:s:f:o:g:a:h", opts, NULL)) != -1;) {
        bool ok = true;
        switch (c) {
        case 'm': models_arg = optarg; break;
        case 'c': ok = cli_parse_int_list(cmd, "--context-length", optarg, 1, 1 << 20, contexts, MAX_CONTEXTS, &num_contexts); break;
        case 'b': ok = cli_parse_int(cmd, "--batch-size", optarg, 1, 1 << 20, &batch); break;
        case 'w': ok = cli_parse_int(cmd, "--warmup", optarg, 0, 1 << 20, &warmup); break;
        case 'n': ok = cli_parse_int(cmd, "--steps", optarg, 1, 1 << 20, &steps); break;
        case 't': ok = cli_parse_int(cmd, "--threads", optarg, 1, 4096, &threads); break;
        case 's': ok = cli_parse_int(cmd, "--seed", optarg, 0, 0x7fffffffL, &seed); break;
        case 'd': device = optarg; break;
        case 'g':
            if (strcmp(optarg, "on") == 0) graphs = true;
            else if (strcmp(optarg, "off") == 0) graphs = false;
            else { cli_error(cmd, "--cuda-graph: '%s' is neither on nor off", optarg); ok = false; }
            break;
        case 'o': out_path = optarg; break;
        case 'a': ok = cli_parse_attention(cmd, optarg, &attention); break;
        case 'p':
            if (strcmp(optarg, "forward") == 0) pass = TLM_PASS_FORWARD;
            else if (strcmp(optarg, "forward-backward") == 0) pass = TLM_PASS_FORWARD_BACKWARD;
            else if (strcmp(optarg, "train") == 0) pass = TLM_PASS_TRAIN;
            else { cli_error(cmd, "--pass: unknown pass '%s' (known: forward, forward-backward, train)", optarg); ok = false; }
            break;
        case 'P': {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", optarg);
            num_precisions = 0;
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && ok; tok = strtok_r(NULL, ",", &save)) {
                if (num_precisions == 4) { cli_error(cmd, "--precision: more than 4 values"); ok = false; }
                else if (strcmp(tok, "all") == 0 && num_precisions == 0) {
                    for (int p = TLM_PRECISION_FP32; p <= TLM_PRECISION_FP16; p++) precisions[num_precisions++] = (tlm_precision)p;
                }
                else if (tlm_precision_parse(tok, &precisions[num_precisions])) num_precisions++;
                else { cli_error(cmd, "--precision: unknown precision '%s' (known: fp32, tf32, bf16, fp16)", tok); ok = false; }
            }
            if (ok && num_precisions == 0) { cli_error(cmd, "--precision: no values"); ok = false; }
            break;
        }
        case 'f':
            if (!tlm_format_parse(optarg, true, &fmt)) {
                cli_error(cmd, "--format: unknown format '%s' (known: table, csv, json)", optarg);
                ok = false;
            }
            break;
        case 'h': bench_usage(stdout); return TLM_EXIT_OK;
        default: {
            int r = cli_handle_shape_option(cmd, c, optarg, &shape);
            if (r == 0) { bench_usage(stderr); return TLM_EXIT_USAGE; }
            ok = r > 0;
        }
        }
        if (!ok) return TLM_EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm bench --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }

    if (!cli_check_device(cmd, device)) return TLM_EXIT_USAGE;
    char desc[256];
    tlm_backend *be = cli_create_backend(cmd, device, (int)threads, desc, sizeof desc);
    if (!be) return TLM_EXIT_FAILURE;
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    const bool cpu_default = on_cpu && device == NULL && !models_arg && num_contexts == 0 && warmup < 0 && steps < 0;
    if (!models_arg) models_arg = on_cpu ? "small" : "small,medium,large,xl,2.7B";
    if (num_contexts == 0) contexts[num_contexts++] = on_cpu ? 128 : 256;
    if (warmup < 0) warmup = cpu_default ? 1 : 5;
    if (steps < 0) steps = cpu_default ? 3 : 10;
    if (cpu_default)
        fprintf(stderr, "tlm bench: no GPU found: running the CPU backend with a short default "
                        "(small, context 128, batch %ld, 1 warm-up + 3 timed steps, pass %s); "
                        "see tlm bench --help to choose\n", batch, tlm_pass_name(pass));

    /* resolve the model list before running anything, so a typo fails at once */
    tlm_bench_case cases[MAX_MODELS];
    int num_models = 0;
    char list[512];
    snprintf(list, sizeof list, "%s", models_arg);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (num_models == MAX_MODELS) { cli_error(cmd, "--model: more than %d models", MAX_MODELS); tlm_backend_destroy(be); return TLM_EXIT_USAGE; }
        tlm_bench_case *bc = &cases[num_models++];
        memset(bc, 0, sizeof *bc);
        if (tlm_config_preset(name, &bc->config) != TLM_OK) {
            cli_error(cmd, "--model: %s", tlm_last_error());
            tlm_backend_destroy(be);
            return TLM_EXIT_USAGE;
        }
        if (!cli_apply_shape_flags(cmd, &shape, &bc->config)) { tlm_backend_destroy(be); return TLM_EXIT_USAGE; }
        snprintf(bc->model_name, sizeof bc->model_name, "%s%s", name, cli_shape_flags_any(&shape) ? "*" : "");
        bc->batch_size = (int)batch;
        bc->warmup = (int)warmup;
        bc->steps = (int)steps;
        bc->pass = pass;
        bc->graphs = graphs && tlm_backend_has_graphs(be);
        bc->seed = (uint64_t)seed;
        bc->attention = attention;
        /* --attention flash where the backend cannot run it fails before anything runs */
        for (int k = 0; k < num_precisions; k++)
            if (tlm_attention_check(be, &bc->config, precisions[k], attention) != TLM_OK) {
                cli_error(cmd, "--attention flash: %s %s: %s", name, tlm_precision_name(precisions[k]), tlm_last_error());
                tlm_backend_destroy(be);
                return TLM_EXIT_FAILURE;
            }
    }

    FILE *out = NULL;
    char tmp_path[4096];
    if (out_path && !(out = cli_open_tmp(cmd, out_path, tmp_path, sizeof tmp_path))) {
        tlm_backend_destroy(be);
        return TLM_EXIT_FAILURE;
    }
    cases[0].context_length = contexts[0];
    const tlm_format stdout_fmt = out ? TLM_FORMAT_TABLE : fmt;
    tlm_bench_print_header(stdout, stdout_fmt, desc, &cases[0]);
    if (out) tlm_bench_print_header(out, fmt, desc, &cases[0]);
    int rows = 0, failed = 0, hard_failures = 0;
    for (int i = 0; i < num_models; i++) {
        double fp32_ms[MAX_CONTEXTS] = {0}; /* forward (+ backward) of this model's fp32 rows */
        for (int k = 0; k < num_precisions; k++)
        for (int j = 0; j < num_contexts; j++) {
            tlm_bench_case bc = cases[i];
            bc.context_length = contexts[j];
            bc.precision = precisions[k];
            tlm_bench_result r;
            if (tlm_bench_run(be, &bc, &r) != TLM_OK) {
                r.status = TLM_ERR_OUT_OF_MEMORY;
                snprintf(r.error, sizeof r.error, "%s", tlm_last_error());
            }
            if (r.status == TLM_OK) { /* the speed-up over fp32 (SPEC.md §2.5) */
                const double ms = r.forward.mean_ms + r.backward.mean_ms;
                if (bc.precision == TLM_PRECISION_FP32) fp32_ms[j] = ms;
                else if (fp32_ms[j] > 0 && ms > 0) r.speedup_vs_fp32 = fp32_ms[j] / ms;
            }
            tlm_bench_print_row(stdout, stdout_fmt, &bc, &r, rows);
            if (out) tlm_bench_print_row(out, fmt, &bc, &r, rows);
            rows++;
            if (r.status != TLM_OK) failed++;
            if (r.status != TLM_OK && r.status != TLM_ERR_OUT_OF_MEMORY) hard_failures++;
        }
    }
    tlm_bench_print_footer(stdout, stdout_fmt, rows, failed);
    if (out) {
        tlm_bench_print_footer(out, fmt, rows, failed);
        if (!cli_commit_file(cmd, out, tmp_path, out_path, true)) hard_failures++;
    }
    tlm_backend_destroy(be);
    return hard_failures ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
}
