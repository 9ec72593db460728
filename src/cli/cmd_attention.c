/* cmd_attention.c — `tlm attention`: the attention benchmark (SPEC.md §2.7-2.8), naive
 * attention against FlashAttention-2 over batch x heads x seq x d_head x dtype, with the CS336
 * suites as presets. One case per row: attention_bench.h runs it. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/attention_bench.h"
#include "tlm/bench.h"

#define MAX_LIST 32
#define MIB (1024.0 * 1024.0)

static const char *flops_note = "FlashAttention's convention: forward 4*b*h*s^2*d (halved when causal), "
                                "backward 2.5x forward, over the mean time of that pass";
static const char *mem_note = "tracked allocator bytes in use before the backward pass: q, k, v, dout, out and "
                              "what the forward saves (naive: P (b,h,s,s); flash: L (b,h,s) fp32); "
                              "MiB = 2^20 bytes; peak = the row's allocator peak (adds dq, dk, dv and the "
                              "backward's scratch: naive dP (b,h,s,s), flash its fp32 workspace (b,h,s,d+1))";
static const char *ratio_note = "flash/naive = naive time / flash time for the same shape (forward+backward)";

static void attention_usage(FILE *f) {
    fprintf(f,
            "Usage: tlm attention [options]\n"
            "Attention benchmark (SPEC.md §2.7-2.8): naive attention (softmax(QK^T/sqrt(d)) V, the\n"
            "probabilities saved) against FlashAttention-2 (tiled, online softmax, only the logsumexp\n"
            "saved). Random normal q, k, v, dout (seeded); warm-up passes, then --iters timed forward and\n"
            "--iters timed backward passes, each synchronized (the backward reuses the last forward's\n"
            "saved outputs). Reports ms (forward, backward, forward+backward), TFLOP/s (FlashAttention's\n"
            "convention: forward 4*b*h*s^2*d, halved when causal; backward 2.5x forward), memory in use\n"
            "before the backward pass, and flash/naive (naive time / flash time) for each shape.\n"
            "\n"
            "Suites (the flags below override a suite's values):\n"
            "  pytorch-attention   CS336 pytorch_attention: batch 8, 1 head, d 16,32,64,128 x seq\n"
            "                      256,1024,4096,8192,16384, fp32, 100 forward + 100 backward after 10\n"
            "                      warm-up; causal (the seeds do not say whether their benchmark masked;\n"
            "                      tlm runs it causal, the LM's attention and what naive supports)\n"
            "  flash-benchmarking  CS336 flash_benchmarking: batch 1, 1 head, causal, seq 128..65536\n"
            "                      (powers of 2), d 16,32,64,128, bf16 and fp32, 100 + 100 after 10 warm-up\n"
            "  leaderboard         CS336 leaderboard: batch 1, 16 heads, seq 16384, d 64, bf16, causal,\n"
            "                      100 + 100 after 10 warm-up\n"
            "\n"
            "  -S, --suite NAME      pytorch-attention | flash-benchmarking | leaderboard (default: none)\n"
            "  -b, --batch-size N    batch (default: 1)\n"
            "  -H, --heads N         heads (default: 1)\n"
            "  -s, --seq LIST        comma list of sequence lengths, Tq = Tk (default: 256,1024)\n"
            "  -D, --d-head LIST     comma list of head sizes, even and >= 2 (default: 64; flash on CUDA:\n"
            "                        16, 32, 64, 80, 128)\n"
            "  -T, --dtype LIST      comma list of fp32, bf16, fp16 (default: fp32)\n"
            "  -c, --causal on|off   causal mask (default: on; naive is causal only: off gives naive rows\n"
            "                        that say so)\n"
            "  -i, --impl I          naive | flash | both (default: both)\n"
            "  -n, --iters N         timed forward passes, and as many timed backward passes (default: 10)\n"
            "  -w, --warmup N        untimed forward+backward passes first (default: 2)\n"
            "  -M, --max-seq N       skip rows with seq > N (default: 1024 on the CPU with a --suite, else none)\n"
            "  -d, --device D        cpu | cuda (default: cuda when a GPU is present, else cpu)\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "      --seed N          input seed (default: 0)\n"
            "  -f, --format F        table | csv | json (default: table)\n"
            "  -o, --out FILE        write the results, in --format, to FILE (stdout then shows the table)\n"
            "  -h, --help            this text\n"
            "\n"
            "Both run through the backend's ops. Flash on CUDA: tensor-core kernels in bf16/fp16, exact-fp32\n"
            "kernels in fp32, d_head 16, 32, 64, 80, 128; on the CPU: the FlashAttention-2 reference, any\n"
            "d_head. A (d_head, dtype) the backend has no kernel for is a row saying \"unsupported\" and why.\n"
            "An out-of-memory case is a row saying OOM with the bytes asked for, and the sweep goes on.\n");
}

typedef struct {
    tlm_attn_case c;
    tlm_attn_result r;
    double ratio; /* flash rows: naive fwd+bwd ms / flash fwd+bwd ms; 0: none */
} row;

static const char *dtype_short(tlm_dtype t) {
    return t == TLM_DTYPE_BF16 ? "bf16" : t == TLM_DTYPE_F16 ? "fp16" : "fp32";
}

static void print_header(FILE *f, tlm_format fmt, const char *desc, const char *suite, int warmup, int iters,
                         long seed) {
    char date[64];
    tlm_utc_now(date, sizeof date);
    switch (fmt) {
    case TLM_FORMAT_TABLE:
        fprintf(f, "# tlm attention: naive vs FlashAttention-2 (tlm %s)%s%s\n", TLM_VERSION, suite ? ", suite " : "",
                suite ? suite : "");
        fprintf(f, "# device: %s\n# date: %s\n", desc, date);
        fprintf(f, "# %d warm-up forward+backward, then %d timed forward and %d timed backward passes, each "
                   "synchronized; ms = mean; seed %ld\n", warmup, iters, iters, seed);
        fprintf(f, "# TFLOP/s: %s\n# memory: %s\n# %s\n", flops_note, mem_note, ratio_note);
        fprintf(f, "%-5s %5s %5s %6s %5s %-5s %-6s %10s %10s %10s %8s %8s %10s %10s %11s\n", "impl", "batch",
                "heads", "seq", "d", "dtype", "causal", "fwd", "bwd", "fwd+bwd", "TFLOP/s", "TFLOP/s", "mem", "peak",
                "flash/naive");
        fprintf(f, "%-5s %5s %5s %6s %5s %-5s %-6s %10s %10s %10s %8s %8s %10s %10s %11s\n", "", "", "", "", "", "",
                "", "ms", "ms", "ms", "fwd", "bwd", "MiB", "MiB", "");
        break;
    case TLM_FORMAT_CSV:
        fprintf(f, "tool,impl,batch,heads,seq,d_head,dtype,causal,fwd_ms,bwd_ms,fwdbwd_ms,tflops_fwd,tflops_bwd,"
                   "mem_before_bwd_mib,peak_mib,flash_over_naive,status,note\n");
        break;
    case TLM_FORMAT_JSON:
        fprintf(f, "{\"tool\": \"tlm attention\", \"version\": \"%s\", \"device\": ", TLM_VERSION);
        tlm_json_string(f, desc);
        fprintf(f, ", \"date\": \"%s\", \"suite\": ", date);
        if (suite) tlm_json_string(f, suite);
        else fprintf(f, "null");
        fprintf(f, ", \"warmup\": %d, \"iters\": %d, \"seed\": %ld,\n \"flops\": ", warmup, iters, seed);
        tlm_json_string(f, flops_note);
        fprintf(f, ",\n \"memory\": ");
        tlm_json_string(f, mem_note);
        fprintf(f, ",\n \"ratio\": ");
        tlm_json_string(f, ratio_note);
        fprintf(f, ",\n \"rows\": [");
        break;
    }
    fflush(f);
}

static void print_row(FILE *f, tlm_format fmt, const row *w, int index) {
    const tlm_attn_case *c = &w->c;
    const tlm_attn_result *r = &w->r;
    const bool ok = r->status == TLM_ATTN_OK;
    switch (fmt) {
    case TLM_FORMAT_TABLE:
        fprintf(f, "%-5s %5d %5d %6d %5d %-5s %-6s ", tlm_attention_name(c->impl), c->batch, c->heads, c->seq,
                c->d_head, dtype_short(c->dtype), c->causal ? "yes" : "no");
        if (r->status == TLM_ATTN_SKIPPED) { /* the note says "skipped ..." */
            fprintf(f, "%s\n", r->note);
            break;
        }
        if (!ok) {
            fprintf(f, "%s: %s\n", tlm_attn_status_name(r->status), r->note);
            break;
        }
        fprintf(f, "%10.3f %10.3f %10.3f %8.3f %8.3f %10.1f %10.1f", r->fwd_ms, r->bwd_ms, r->fwdbwd_ms,
                r->tflops_fwd, r->tflops_bwd, r->mem_before_bwd / MIB, r->peak_bytes / MIB);
        if (w->ratio > 0) fprintf(f, " %10.2fx", w->ratio);
        fputc('\n', f);
        break;
    case TLM_FORMAT_CSV:
        fprintf(f, "tlm,%s,%d,%d,%d,%d,%s,%d,", tlm_attention_name(c->impl), c->batch, c->heads, c->seq, c->d_head,
                dtype_short(c->dtype), c->causal ? 1 : 0);
        if (ok)
            fprintf(f, "%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f,", r->fwd_ms, r->bwd_ms, r->fwdbwd_ms, r->tflops_fwd,
                    r->tflops_bwd, r->mem_before_bwd / MIB, r->peak_bytes / MIB);
        else
            fprintf(f, ",,,,,,,");
        if (w->ratio > 0) fprintf(f, "%.4f", w->ratio);
        fprintf(f, ",%s,\"", tlm_attn_status_name(r->status));
        for (const char *s = r->note; *s; s++) { /* CSV: double the quotes inside a quoted field */
            if (*s == '"') fputc('"', f);
            fputc(*s, f);
        }
        fprintf(f, "\"\n");
        break;
    case TLM_FORMAT_JSON:
        fprintf(f, "%s\n  {\"tool\": \"tlm\", \"impl\": \"%s\", \"batch\": %d, \"heads\": %d, \"seq\": %d, "
                   "\"d_head\": %d, \"dtype\": \"%s\", \"causal\": %s, \"status\": \"%s\"",
                index ? "," : "", tlm_attention_name(c->impl), c->batch, c->heads, c->seq, c->d_head,
                dtype_short(c->dtype), c->causal ? "true" : "false", tlm_attn_status_name(r->status));
        if (ok) {
            fprintf(f, ", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, \"tflops_fwd\": %.4f, "
                       "\"tflops_bwd\": %.4f, \"mem_before_bwd_mib\": %.3f, \"peak_mib\": %.3f",
                    r->fwd_ms, r->bwd_ms, r->fwdbwd_ms, r->tflops_fwd, r->tflops_bwd, r->mem_before_bwd / MIB,
                    r->peak_bytes / MIB);
            if (w->ratio > 0) fprintf(f, ", \"flash_over_naive\": %.4f", w->ratio);
        } else {
            if (r->status == TLM_ATTN_OOM) fprintf(f, ", \"oom_bytes\": %zu", r->oom_bytes);
            fprintf(f, ", \"note\": ");
            tlm_json_string(f, r->note);
        }
        fputc('}', f);
        break;
    }
    fflush(f);
}

static void print_footer(FILE *f, tlm_format fmt, const int counts[4]) {
    if (fmt == TLM_FORMAT_TABLE)
        fprintf(f, "# %d rows: %d ran, %d out of memory, %d unsupported, %d skipped\n",
                counts[0] + counts[1] + counts[2] + counts[3], counts[TLM_ATTN_OK], counts[TLM_ATTN_OOM],
                counts[TLM_ATTN_UNSUPPORTED], counts[TLM_ATTN_SKIPPED]);
    else if (fmt == TLM_FORMAT_JSON)
        fprintf(f, "\n ]}\n");
    fflush(f);
}

static bool parse_dtypes(const char *cmd, const char *text, tlm_dtype *out, int *n) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == 3) { cli_error(cmd, "--dtype: more than 3 values"); return false; }
        if (strcmp(tok, "fp32") == 0) out[(*n)++] = TLM_DTYPE_F32;
        else if (strcmp(tok, "bf16") == 0) out[(*n)++] = TLM_DTYPE_BF16;
        else if (strcmp(tok, "fp16") == 0) out[(*n)++] = TLM_DTYPE_F16;
        else { cli_error(cmd, "--dtype: unknown dtype '%s' (known: fp32, bf16, fp16)", tok); return false; }
    }
    if (*n == 0) { cli_error(cmd, "--dtype: no values in '%s'", text); return false; }
    return true;
}

enum { OPT_SEED = OPT_FIRST_FREE };

int cmd_attention(int argc, char **argv) {
    const char *cmd = "attention";
    static const struct option opts[] = {
        {"suite", required_argument, 0, 'S'},   {"batch-size", required_argument, 0, 'b'},
        {"heads", required_argument, 0, 'H'},   {"seq", required_argument, 0, 's'},
        {"d-head", required_argument, 0, 'D'},  {"dtype", required_argument, 0, 'T'},
        {"causal", required_argument, 0, 'c'},  {"impl", required_argument, 0, 'i'},
        {"iters", required_argument, 0, 'n'},   {"warmup", required_argument, 0, 'w'},
        {"max-seq", required_argument, 0, 'M'}, {"device", required_argument, 0, 'd'},
        {"threads", required_argument, 0, 't'}, {"seed", required_argument, 0, OPT_SEED},
        {"format", required_argument, 0, 'f'},  {"out", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *suite = NULL, *device = NULL, *out_path = NULL;
    /* given flags; < 0 or n == 0: not given */
    long batch = -1, heads = -1, iters = -1, warmup = -1, max_seq = -1, threads = 0, seed = 0;
    int causal = -1, impl_mask = 0; /* bit 0 naive, bit 1 flash */
    int seqs[MAX_LIST], n_seqs = 0, ds[MAX_LIST], n_ds = 0, n_dtypes = 0;
    tlm_dtype dtypes[3];
    tlm_format fmt = TLM_FORMAT_TABLE;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "S:b:H:s:D:T:c:i:n:w:M:d:t:f:o:h", opts, NULL)) != -1;) {
        bool ok = true;
        switch (c) {
        case 'S':
            if (strcmp(optarg, "pytorch-attention") && strcmp(optarg, "flash-benchmarking") &&
                strcmp(optarg, "leaderboard")) {
                cli_error(cmd, "--suite: unknown suite '%s' (known: pytorch-attention, flash-benchmarking, "
                               "leaderboard)", optarg);
                ok = false;
            }
            suite = optarg;
            break;
        case 'b': ok = cli_parse_int(cmd, "--batch-size", optarg, 1, 1 << 20, &batch); break;
        case 'H': ok = cli_parse_int(cmd, "--heads", optarg, 1, 4096, &heads); break;
        case 's': ok = cli_parse_int_list(cmd, "--seq", optarg, 1, 1 << 20, seqs, MAX_LIST, &n_seqs); break;
        case 'D':
            ok = cli_parse_int_list(cmd, "--d-head", optarg, -(1L << 20), 1L << 20, ds, MAX_LIST, &n_ds);
            for (int i = 0; ok && i < n_ds; i++)
                if (ds[i] < 2 || ds[i] % 2) {
                    cli_error(cmd, "--d-head: %d is not supported: d_head must be even and >= 2 (flash on "
                                   "CUDA takes 16, 32, 64, 80, 128)", ds[i]);
                    ok = false;
                }
            break;
        case 'T': ok = parse_dtypes(cmd, optarg, dtypes, &n_dtypes); break;
        case 'c':
            if (strcmp(optarg, "on") == 0) causal = 1;
            else if (strcmp(optarg, "off") == 0) causal = 0;
            else { cli_error(cmd, "--causal: '%s' is neither on nor off", optarg); ok = false; }
            break;
        case 'i':
            if (strcmp(optarg, "naive") == 0) impl_mask = 1;
            else if (strcmp(optarg, "flash") == 0) impl_mask = 2;
            else if (strcmp(optarg, "both") == 0) impl_mask = 3;
            else { cli_error(cmd, "--impl: unknown implementation '%s' (known: naive, flash, both)", optarg); ok = false; }
            break;
        case 'n': ok = cli_parse_int(cmd, "--iters", optarg, 1, 1 << 20, &iters); break;
        case 'w': ok = cli_parse_int(cmd, "--warmup", optarg, 0, 1 << 20, &warmup); break;
        case 'M': ok = cli_parse_int(cmd, "--max-seq", optarg, 1, 1 << 20, &max_seq); break;
        case 't': ok = cli_parse_int(cmd, "--threads", optarg, 1, 4096, &threads); break;
        case OPT_SEED: ok = cli_parse_int(cmd, "--seed", optarg, 0, 0x7fffffffL, &seed); break;
        case 'd': device = optarg; break;
        case 'o': out_path = optarg; break;
        case 'f':
            if (!tlm_format_parse(optarg, true, &fmt)) {
                cli_error(cmd, "--format: unknown format '%s' (known: table, csv, json)", optarg);
                ok = false;
            }
            break;
        case 'h': attention_usage(stdout); return TLM_EXIT_OK;
        default: attention_usage(stderr); return TLM_EXIT_USAGE;
        }
        if (!ok) return TLM_EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error(cmd, "unexpected argument '%s' (see tlm attention --help)", argv[optind]);
        return TLM_EXIT_USAGE;
    }

    /* the suite's values, then the flags over them */
    long s_batch = 1, s_heads = 1, s_iters = 10, s_warmup = 2;
    int s_causal = 1;
    int s_seqs[MAX_LIST] = {256, 1024}, s_n_seqs = 2, s_ds[MAX_LIST] = {64}, s_n_ds = 1;
    tlm_dtype s_dtypes[3] = {TLM_DTYPE_F32};
    int s_n_dtypes = 1;
    if (suite && strcmp(suite, "pytorch-attention") == 0) {
        static const int sq[] = {256, 1024, 4096, 8192, 16384}, dd[] = {16, 32, 64, 128};
        s_batch = 8; s_iters = 100; s_warmup = 10;
        s_n_seqs = 5; memcpy(s_seqs, sq, sizeof sq);
        s_n_ds = 4; memcpy(s_ds, dd, sizeof dd);
    } else if (suite && strcmp(suite, "flash-benchmarking") == 0) {
        static const int dd[] = {16, 32, 64, 128};
        s_batch = 1; s_iters = 100; s_warmup = 10;
        s_n_seqs = 0;
        for (int s = 128; s <= 65536; s *= 2) s_seqs[s_n_seqs++] = s;
        s_n_ds = 4; memcpy(s_ds, dd, sizeof dd);
        s_n_dtypes = 2; s_dtypes[0] = TLM_DTYPE_BF16; s_dtypes[1] = TLM_DTYPE_F32;
    } else if (suite && strcmp(suite, "leaderboard") == 0) {
        s_batch = 1; s_heads = 16; s_iters = 100; s_warmup = 10;
        s_n_seqs = 1; s_seqs[0] = 16384;
        s_n_ds = 1; s_ds[0] = 64;
        s_dtypes[0] = TLM_DTYPE_BF16;
    }
    if (batch < 0) batch = s_batch;
    if (heads < 0) heads = s_heads;
    if (iters < 0) iters = s_iters;
    if (warmup < 0) warmup = s_warmup;
    if (causal < 0) causal = s_causal;
    if (!impl_mask) impl_mask = 3;
    if (!n_seqs) { n_seqs = s_n_seqs; memcpy(seqs, s_seqs, sizeof seqs); }
    if (!n_ds) { n_ds = s_n_ds; memcpy(ds, s_ds, sizeof ds); }
    if (!n_dtypes) { n_dtypes = s_n_dtypes; memcpy(dtypes, s_dtypes, sizeof dtypes); }

    if (!cli_check_device(cmd, device)) return TLM_EXIT_USAGE;
    char desc[256];
    tlm_backend *be = cli_create_backend(cmd, device, (int)threads, desc, sizeof desc);
    if (!be) return TLM_EXIT_FAILURE;
    const bool on_cpu = be->kind == TLM_DEVICE_CPU;
    if (max_seq < 0 && on_cpu && suite) max_seq = 1024;

    FILE *out = NULL;
    char tmp_path[4096];
    if (out_path && !(out = cli_open_tmp(cmd, out_path, tmp_path, sizeof tmp_path))) {
        tlm_backend_destroy(be);
        return TLM_EXIT_FAILURE;
    }
    const tlm_format stdout_fmt = out ? TLM_FORMAT_TABLE : fmt;
    print_header(stdout, stdout_fmt, desc, suite, (int)warmup, (int)iters, seed);
    if (out) print_header(out, fmt, desc, suite, (int)warmup, (int)iters, seed);
    int counts[4] = {0}, index = 0, hard_failures = 0;
    for (int ti = 0; ti < n_dtypes; ti++)
    for (int di = 0; di < n_ds; di++)
    for (int si = 0; si < n_seqs; si++) {
        double naive_ms = 0;
        for (int impl = 0; impl < 2; impl++) {
            if (!(impl_mask & (1 << impl))) continue;
            row w;
            memset(&w, 0, sizeof w);
            w.c = (tlm_attn_case){.impl = (tlm_attention)impl, .batch = (int)batch, .heads = (int)heads,
                                  .seq = seqs[si], .d_head = ds[di], .dtype = dtypes[ti], .causal = causal != 0,
                                  .warmup = (int)warmup, .iters = (int)iters, .seed = (uint64_t)seed};
            if (max_seq > 0 && seqs[si] > max_seq) {
                w.r.status = TLM_ATTN_SKIPPED;
                snprintf(w.r.note, sizeof w.r.note, "skipped on %s: seq > max-seq (%ld)", be->name, max_seq);
            } else if (tlm_attention_bench_run(be, &w.c, &w.r) != TLM_OK) {
                cli_error(cmd, "%s", tlm_last_error());
                hard_failures++;
                continue;
            }
            if (w.r.status == TLM_ATTN_OK) {
                if (impl == TLM_ATTENTION_NAIVE) naive_ms = w.r.fwdbwd_ms;
                else if (naive_ms > 0 && w.r.fwdbwd_ms > 0) w.ratio = naive_ms / w.r.fwdbwd_ms;
            }
            counts[w.r.status]++;
            print_row(stdout, stdout_fmt, &w, index);
            if (out) print_row(out, fmt, &w, index);
            index++;
        }
    }
    print_footer(stdout, stdout_fmt, counts);
    if (out) {
        print_footer(out, fmt, counts);
        if (!cli_commit_file(cmd, out, tmp_path, out_path, true)) hard_failures++;
    }
    tlm_backend_destroy(be);
    return hard_failures ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
}
