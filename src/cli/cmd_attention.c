/* cmd_attention.c — `tlm attention`: the attention benchmark (docs/experiments.md, attention), naive
 * attention against FlashAttention-2 over batch x heads x seq x d_head x precision mode (fp32,
 * tf32, bf16, fp16; --dtype is the older spelling of the three that are dtypes), with the CS336
 * suites as presets. One case per row: attention_bench.h runs it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/attention_bench.h"
#include "tlm/bench.h"

#define MAX_LIST 32

static const char *flops_note = "FlashAttention's convention: forward 4*b*h*s^2*d (halved when causal), "
                                "backward 2.5x forward, over the mean time of that pass";
static const char *mem_note = "tracked allocator bytes in use before the backward pass: q, k, v, dout, out and "
                              "what the forward saves (naive: P (b,h,s,s); flash: L (b,h,s) fp32); "
                              "the table shows each in B, KiB, MiB or GiB (2^10, 2^20, 2^30 bytes); peak = the row's allocator peak (adds dq, dk, dv and the "
                              "backward's scratch: naive dP (b,h,s,s), flash its fp32 workspace (b,h,s,d+1))";
static const char *ratio_note = "naive time / flash time for the same shape (forward+backward), on the flash row";
static const char *mode_note = "the dtype column is the precision mode: fp32 (strict fp32 products), tf32 (fp32 "
                               "tensors, TF32 tensor-core products: naive's GEMMs, flash's CUDA kernels; fp32 on "
                               "the CPU), bf16, fp16";

static const tlm_column attention_columns[] = {
    {"impl", TLM_FIELD_STR, "impl", "", -5, 0, 0, TLM_COL_KEY},
    {"batch_size", TLM_FIELD_INT, "batch", "", 5, 0, 0, TLM_COL_KEY},
    {"num_heads", TLM_FIELD_INT, "heads", "", 5, 0, 0, TLM_COL_KEY},
    {"context_length", TLM_FIELD_INT, "seq", "", 6, 0, 0, TLM_COL_KEY},
    {"d_head", TLM_FIELD_INT, "d", "", 4, 0, 0, TLM_COL_KEY},
    {"dtype", TLM_FIELD_STR, "dtype", "", -5, 0, 0, TLM_COL_KEY},
    {"causal", TLM_FIELD_BOOL, "causal", "", -6, 0, 0, TLM_COL_KEY},
    TLM_COL_HIDDEN("warmup_steps", TLM_FIELD_INT),
    TLM_COL_HIDDEN("iters", TLM_FIELD_INT),
    TLM_COL_HIDDEN("seed", TLM_FIELD_INT),
    TLM_COL_MS("fwd_ms_mean", "fwd", 10, 3),
    TLM_COL_MS("bwd_ms_mean", "bwd", 10, 3),
    TLM_COL_MS("fwdbwd_ms_mean", "fwd+bwd", 10, 3),
    {"fwd_tflop_per_s", TLM_FIELD_NUM, "TFLOP/s", "fwd", 8, 3, 0, 0},
    {"bwd_tflop_per_s", TLM_FIELD_NUM, "TFLOP/s", "bwd", 8, 3, 0, 0},
    TLM_COL_SIZE("mem_before_bwd_bytes", "mem", 9),
    TLM_COL_SIZE("peak_bytes", "peak", 9),
    {"speedup_vs_naive", TLM_FIELD_NUM, "vs naive", "x", 8, 2, 0, 0},
    TLM_COL_HIDDEN("oom_bytes", TLM_FIELD_INT),
};

typedef struct {
    const char *suite;
    int heads[MAX_LIST], n_heads, ds[MAX_LIST], n_ds, n_modes;
    tlm_precision modes[3]; /* --dtype: the modes fp32, bf16, fp16 */
    int causal, impl_mask; /* -1 / 0: not given; impl bit 0 naive, bit 1 flash */
    long iters, max_seq;
} attention_opts;

static bool attention_handle(void *user, int opt, const char *arg) {
    attention_opts *o = user;
    const char *cmd = "attention";
    static const char *const suites[] = {"pytorch-attention", "flash-benchmarking", "leaderboard"};
    static const char *const impls[] = {"naive", "flash", "both"};
    int k;
    bool on = false;
    switch (opt) {
    case 'S': return cli_parse_choice(cmd, "--suite", arg, suites, 3, &k) && ((o->suite = suites[k]), true);
    case 'H': return cli_parse_int_list(cmd, "--heads", arg, 1, 4096, o->heads, MAX_LIST, &o->n_heads);
    case 'D':
        if (!cli_parse_int_list(cmd, "--d-head", arg, 1, 1L << 20, o->ds, MAX_LIST, &o->n_ds)) return false;
        for (int i = 0; i < o->n_ds; i++)
            if (o->ds[i] < 2 || o->ds[i] % 2) {
                cli_error(cmd, "--d-head: %d is not supported: d_head must be even and >= 2 (flash on CUDA takes "
                               "16, 32, 64, 80, 128)", o->ds[i]);
                return false;
            }
        return true;
    case 'T': {
        char **items;
        if (!cli_split_list(cmd, "--dtype", arg, 3, &items, &o->n_modes)) return false;
        bool ok = true;
        for (int i = 0; ok && i < o->n_modes; i++) {
            tlm_dtype dt;
            if (!tlm_act_dtype_parse(items[i], &dt)) {
                cli_error(cmd, "--dtype: unknown dtype '%s' (known: fp32, bf16, fp16; tf32: --precision)", items[i]);
                ok = false;
            }
            o->modes[i] = tlm_precision_of_dtype(dt);
        }
        free(items);
        return ok;
    }
    case 'C': return cli_parse_on_off(cmd, "--causal", arg, &on) && ((o->causal = on), true);
    case 'i': return cli_parse_choice(cmd, "--impl", arg, impls, 3, &k) && ((o->impl_mask = k + 1), true);
    case 'n': return cli_parse_int(cmd, "--iters", arg, 1, 1 << 20, &o->iters);
    case 'M': return cli_parse_int(cmd, "--max-seq", arg, 1, 1 << 24, &o->max_seq);
    }
    return false;
}

static const cli_use attention_uses[] = {
    {CLI_BATCH_SIZE, "1", MAX_LIST},
    {CLI_CONTEXT_LENGTH, "256,1024", MAX_LIST},
    {CLI_PRECISION, "fp32", TLM_PRECISION_COUNT},
    {CLI_WARMUP, "2", 1},
    {CLI_SEED, "0", 1},
    CLI_USES_DEVICE,
    CLI_USES_OUTPUT,
};
static const struct option attention_options[] = {
    {"suite", required_argument, 0, 'S'},  {"heads", required_argument, 0, 'H'},
    {"d-head", required_argument, 0, 'D'}, {"dtype", required_argument, 0, 'T'},
    {"causal", required_argument, 0, 'C'}, {"impl", required_argument, 0, 'i'},
    {"iters", required_argument, 0, 'n'},  {"max-seq", required_argument, 0, 'M'},
    {0, 0, 0, 0}};

static const cli_command attention_cmd = {
    .help =
        "Usage: tlm attention [options]\n"
        "Attention benchmark: naive attention (softmax(QK^T/sqrt(d)) V, the probabilities\n"
        "saved) against FlashAttention-2 (tiled, online softmax, only the logsumexp saved). Random normal q,\n"
        "k, v, dout (seeded); warm-up passes, then --iters timed forward and --iters timed backward passes,\n"
        "each synchronized (the backward reuses the last forward's saved outputs). Reports ms (forward,\n"
        "backward, forward+backward), TFLOP/s (FlashAttention's convention: forward 4*b*h*s^2*d, halved when\n"
        "causal; backward 2.5x forward), memory in use before the backward pass, and the speed-up of flash\n"
        "over naive (naive time / flash time) for each shape.\n"
        "\n"
        "Suites (the flags below override a suite's values):\n"
        "  pytorch-attention   CS336 pytorch_attention: batch 8, 1 head, d 16,32,64,128 x seq 256,1024,4096,\n"
        "                      8192,16384, fp32, 100 forward + 100 backward after 10 warm-up; causal (the\n"
        "                      seeds do not say whether their benchmark masked; tlm runs it causal, the LM's\n"
        "                      attention and what naive supports)\n"
        "  flash-benchmarking  CS336 flash_benchmarking: batch 1, 1 head, causal, seq 128..65536 (powers of\n"
        "                      2), d 16,32,64,128, bf16 and fp32, 100 + 100 after 10 warm-up\n"
        "  leaderboard         CS336 leaderboard: batch 1, 16 heads, seq 16384, d 64, bf16, causal, 100 + 100\n"
        "                      after 10 warm-up\n"
        "\n"
        "  -S, --suite NAME            pytorch-attention | flash-benchmarking | leaderboard (default: none)\n"
        "  -H, --heads LIST            heads (default: 1)\n"
        "  -D, --d-head LIST           head sizes, even and >= 2 (default: 64; flash on CUDA: 16, 32, 64, 80, 128)\n"
        "  -T, --dtype LIST            fp32, bf16, fp16: --precision's older spelling, without tf32\n"
        "  -C, --causal on|off         causal mask (default: on; naive is causal only: off gives naive rows that\n"
        "                              say so)\n"
        "  -i, --impl I                naive | flash | both (default: both)\n"
        "  -n, --iters N               timed forward passes, and as many timed backward passes (default: 10)\n"
        "  -M, --max-seq N             skip rows with seq > N (default: 1024 on the CPU with a --suite, else none)\n",
    .help_after =
        "\n--context-length is the sequence length (Tq = Tk). Both implementations run through the backend's\n"
        "ops, in the precision mode of the row (the dtype column): naive's GEMMs as the model's; flash on\n"
        "CUDA: tensor-core kernels in bf16/fp16, TF32 tensor-core kernels in tf32, exact-fp32 kernels in\n"
        "fp32; on the CPU: the FlashAttention-2 reference (fp32 in fp32 and tf32), any d_head. A (d_head,\n"
        "dtype) the backend has no kernel for is a row saying \"unsupported\" and why; an out-of-memory case\n"
        "is a row saying OOM with the bytes asked for.\n",
    .name = "attention", CLI_USES(attention_uses), .options = attention_options, .short_options = "S:H:D:T:C:i:n:M:",
    .handle = attention_handle,
    .flag_help = {[CLI_PRECISION] = "the dtype of q, k, v, dout and the kernels: fp32 (exact-fp32 kernels), tf32 (fp32 "
                                    "tensors, TF32 tensor-core kernels; fp32 on the CPU), bf16, fp16",
                  [CLI_WARMUP] = "untimed warm-up passes (forward and backward) before the timed ones",
                  [CLI_SEED] = "seed of the random q, k, v and dout"}};

static void report_row(tlm_report *rep, const tlm_attn_case *c, const tlm_attn_result *r, double speedup) {
    tlm_report_row_begin(rep);
    tlm_report_str(rep, "impl", tlm_attention_name(c->impl));
    tlm_report_int(rep, "batch_size", c->batch);
    tlm_report_int(rep, "num_heads", c->heads);
    tlm_report_int(rep, "context_length", c->seq);
    tlm_report_int(rep, "d_head", c->d_head);
    tlm_report_str(rep, "dtype", tlm_precision_name(c->precision));
    tlm_report_bool(rep, "causal", c->causal);
    tlm_report_int(rep, "warmup_steps", c->warmup);
    tlm_report_int(rep, "iters", c->iters);
    tlm_report_int(rep, "seed", (int64_t)c->seed);
    if (r->status == TLM_ATTN_OK) {
        tlm_report_num(rep, "fwd_ms_mean", r->fwd_ms);
        tlm_report_num(rep, "bwd_ms_mean", r->bwd_ms);
        tlm_report_num(rep, "fwdbwd_ms_mean", r->fwdbwd_ms);
        tlm_report_num(rep, "fwd_tflop_per_s", r->tflops_fwd);
        tlm_report_num(rep, "bwd_tflop_per_s", r->tflops_bwd);
        tlm_report_int(rep, "mem_before_bwd_bytes", (int64_t)r->mem_before_bwd);
        tlm_report_int(rep, "peak_bytes", (int64_t)r->peak_bytes);
        if (speedup > 0) tlm_report_num(rep, "speedup_vs_naive", speedup);
    } else {
        if (r->status == TLM_ATTN_OOM) tlm_report_int(rep, "oom_bytes", (int64_t)r->oom_bytes);
        tlm_report_status(rep, tlm_attn_status_name(r->status), r->note);
    }
    tlm_report_row_end(rep);
}

int cmd_attention(int argc, char **argv) {
    const char *cmd = "attention";
    attention_opts given = {.causal = -1, .iters = -1, .max_seq = -1}, *o = &given;
    cli_args a;
    int rc = cli_parse(&attention_cmd, o, argc, argv, &a);
    if (rc >= 0) return rc;

    /* the suite's values, then the flags over them */
    int batch[MAX_LIST] = {1}, n_batch = 1, heads[MAX_LIST] = {1}, n_heads = 1, warmup = 2, iters = 10;
    int seqs[MAX_LIST] = {256, 1024}, n_seqs = 2, ds[MAX_LIST] = {64}, n_ds = 1, n_modes = 1;
    tlm_precision modes[TLM_PRECISION_COUNT] = {TLM_PRECISION_FP32};
    if (o->suite && strcmp(o->suite, "pytorch-attention") == 0) {
        static const int sq[] = {256, 1024, 4096, 8192, 16384}, dd[] = {16, 32, 64, 128};
        batch[0] = 8; iters = 100; warmup = 10;
        n_seqs = 5; memcpy(seqs, sq, sizeof sq);
        n_ds = 4; memcpy(ds, dd, sizeof dd);
    } else if (o->suite && strcmp(o->suite, "flash-benchmarking") == 0) {
        static const int dd[] = {16, 32, 64, 128};
        iters = 100; warmup = 10;
        n_seqs = 0;
        for (int s = 128; s <= 65536; s *= 2) seqs[n_seqs++] = s;
        n_ds = 4; memcpy(ds, dd, sizeof dd);
        n_modes = 2; modes[0] = TLM_PRECISION_BF16; modes[1] = TLM_PRECISION_FP32;
    } else if (o->suite && strcmp(o->suite, "leaderboard") == 0) {
        heads[0] = 16; iters = 100; warmup = 10;
        n_seqs = 1; seqs[0] = 16384;
        ds[0] = 64;
        modes[0] = TLM_PRECISION_BF16;
    }
    if (a.num_batch_sizes) { n_batch = a.num_batch_sizes; memcpy(batch, a.batch_sizes, sizeof batch); }
    if (o->n_heads) { n_heads = o->n_heads; memcpy(heads, o->heads, sizeof heads); }
    if (a.num_contexts) { n_seqs = a.num_contexts; memcpy(seqs, a.contexts, sizeof seqs); }
    if (o->n_ds) { n_ds = o->n_ds; memcpy(ds, o->ds, sizeof ds); }
    if (o->n_modes && a.given[CLI_PRECISION]) {
        cli_error(cmd, "--dtype conflicts with --precision: give the modes once (--dtype is --precision's older "
                       "spelling)");
        cli_args_free(&a);
        return TLM_EXIT_USAGE;
    }
    if (o->n_modes) { n_modes = o->n_modes; memcpy(modes, o->modes, sizeof o->modes); }
    if (a.given[CLI_PRECISION]) { n_modes = a.num_precisions; memcpy(modes, a.precisions, sizeof a.precisions); }
    if (a.num_warmups) warmup = a.warmups[0];
    if (o->iters > 0) iters = (int)o->iters;
    const bool causal = o->causal != 0;
    const int impl_mask = o->impl_mask ? o->impl_mask : 3;

    tlm_backend *be = cli_create_backend(cmd, &a);
    if (!be) return TLM_EXIT_FAILURE;
    long max_seq = o->max_seq;
    if (max_seq < 0 && be->kind == TLM_DEVICE_CPU && o->suite) max_seq = 1024;
    tlm_report *rep = cli_open_report(cmd, &a, "tlm attention", argc, argv);
    if (!rep) {
        tlm_backend_destroy(be);
        return TLM_EXIT_FAILURE;
    }
    cli_report_device(rep, be);
    tlm_report_meta_str(rep, "suite", o->suite ? o->suite : "none");
    tlm_report_meta_str(rep, "timing", "ms = mean of the timed passes, each synchronized");
    tlm_report_meta_str(rep, "tflop_per_s", flops_note);
    tlm_report_meta_str(rep, "memory", mem_note);
    tlm_report_meta_str(rep, "speedup_vs_naive", ratio_note);
    tlm_report_meta_str(rep, "dtype", mode_note);
    tlm_report_table(rep, "rows", attention_columns, (int)(sizeof attention_columns / sizeof attention_columns[0]));
    tlm_report_show(rep, "speedup_vs_naive", impl_mask == 3);
    const int total = n_modes * n_ds * n_batch * n_heads * n_seqs * ((impl_mask & 1) + (impl_mask >> 1));
    double cost = 0;
    for (int si = 0; si < n_seqs; si++) cost += (double)seqs[si] * seqs[si];
    tlm_report_progress_total(rep, total, cost * n_modes * n_ds * n_batch * n_heads);
    int counts[4] = {0}, hard_failures = 0;
    for (int ti = 0; ti < n_modes; ti++)
    for (int di = 0; di < n_ds; di++)
    for (int bi = 0; bi < n_batch; bi++)
    for (int hi = 0; hi < n_heads; hi++)
    for (int si = 0; si < n_seqs; si++) {
        double naive_ms = 0;
        for (int impl = 0; impl < 2; impl++) {
            if (!(impl_mask & (1 << impl))) continue;
            const tlm_attn_case c = {.impl = (tlm_attention)impl, .batch = batch[bi], .heads = heads[hi],
                                     .seq = seqs[si], .d_head = ds[di], .precision = modes[ti], .causal = causal,
                                     .warmup = warmup, .iters = iters, .seed = a.seed};
            tlm_attn_result r;
            memset(&r, 0, sizeof r);
            char label[96];
            snprintf(label, sizeof label, "%s seq %d d %d %s", tlm_attention_name(c.impl), c.seq, c.d_head,
                     tlm_precision_name(c.precision));
            tlm_report_progress(rep, label, (double)c.seq * c.seq / ((impl_mask & 1) + (impl_mask >> 1)));
            if (max_seq > 0 && c.seq > max_seq) {
                r.status = TLM_ATTN_SKIPPED;
                snprintf(r.note, sizeof r.note, "seq > --max-seq (%ld) on %s", max_seq, be->name);
            } else if (tlm_attention_bench_run(be, &c, &r) != TLM_OK) {
                cli_error(cmd, "%s", tlm_last_error());
                hard_failures++;
                continue;
            }
            double speedup = 0;
            if (r.status == TLM_ATTN_OK) {
                if (impl == TLM_ATTENTION_NAIVE) naive_ms = r.fwdbwd_ms;
                else if (naive_ms > 0 && r.fwdbwd_ms > 0) speedup = naive_ms / r.fwdbwd_ms;
            }
            counts[r.status]++;
            report_row(rep, &c, &r, speedup);
        }
    }
    char line[128];
    snprintf(line, sizeof line, "%d rows: %d ran, %d out of memory, %d unsupported, %d skipped",
             counts[0] + counts[1] + counts[2] + counts[3], counts[TLM_ATTN_OK], counts[TLM_ATTN_OOM],
             counts[TLM_ATTN_UNSUPPORTED], counts[TLM_ATTN_SKIPPED]);
    tlm_report_summary_str(rep, "result", line);
    if (tlm_report_close(rep, true) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        hard_failures++;
    }
    tlm_backend_destroy(be);
    return hard_failures ? TLM_EXIT_FAILURE : TLM_EXIT_OK;
}
