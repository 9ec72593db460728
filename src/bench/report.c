/* report.c — writes benchmark results as a fixed-width table, CSV or JSON. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tlm/bench.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

void tlm_utc_now(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* the header's line on attention, for the one asked for (naive, flash or auto) */
static const char *attention_note(tlm_attention a) {
    switch (a) {
    case TLM_ATTENTION_NAIVE: return "naive (the backend's attention op; saves the probabilities (B,H,T,T) per layer)";
    case TLM_ATTENTION_FLASH: return "flash (FlashAttention-2; saves only the logsumexp (B,H,T) per layer)";
    case TLM_ATTENTION_AUTO: break;
    }
    return "auto (flash on CUDA where it has kernels for the d_head and dtype, else naive; naive on the CPU)";
}

static const char *flops_note =
    "matmul FLOPs, 2 per multiply-add (projections, SwiGLU, lm_head; attention's two T x T "
    "products in full), backward counted as 2x forward, over forward+backward time";

void tlm_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) {
            fprintf(f, "\\u%04x", (unsigned char)*s);
            continue;
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

bool tlm_format_parse(const char *name, bool allow_csv, tlm_format *out) {
    if (strcmp(name, "table") == 0) *out = TLM_FORMAT_TABLE;
    else if (allow_csv && strcmp(name, "csv") == 0) *out = TLM_FORMAT_CSV;
    else if (strcmp(name, "json") == 0) *out = TLM_FORMAT_JSON;
    else return false;
    return true;
}

void tlm_bench_print_header(FILE *f, tlm_format fmt, const char *device_desc, const tlm_bench_case *c) {
    char date[64];
    tlm_utc_now(date, sizeof date);
    switch (fmt) {
    case TLM_FORMAT_TABLE:
        fprintf(f, "# tlm bench: CS336 Transformer LM, end to end (tlm %s)\n", TLM_VERSION);
        fprintf(f, "# device: %s\n# date: %s\n", device_desc, date);
        fprintf(f, "# pass %s, batch %d, %d warm-up + %d timed steps, seed %llu; ms = mean and population "
                   "std of synchronized steps\n",
                tlm_pass_name(c->pass), c->batch_size, c->warmup, c->steps, (unsigned long long)c->seed);
        fprintf(f, "# CUDA graphs: %s\n", c->graphs ? "on (forward and backward captured after one eager run)" : "off");
        fprintf(f, "# attention: %s; column attn: the one each row ran\n", attention_note(c->attention));
        fprintf(f, "# TFLOP/s: %s\n", flops_note);
        fprintf(f, "# peak: tracked allocator peak (parameters, gradients, optimizer state, activations, "
                   "workspace), GiB = 2^30 bytes\n");
        fprintf(f, "%-8s %5s %5s %-5s %-5s %8s %10s %8s %10s %8s %10s %8s %11s %8s %8s %8s\n", "model", "ctx",
                "batch", "prec", "attn", "params", "forward", "std", "backward", "std", "optimizer", "std", "tokens/s",
                "TFLOP/s", "peak", "loss");
        fprintf(f, "%-8s %5s %5s %-5s %-5s %8s %10s %8s %10s %8s %10s %8s %11s %8s %8s %8s\n", "", "", "", "", "",
                "M", "ms", "ms", "ms", "ms", "ms", "ms", "", "", "GiB", "");
        break;
    case TLM_FORMAT_CSV:
        fprintf(f, "impl,model,context_length,batch_size,precision,attention,pass,params,fwd_ms_mean,fwd_ms_std,bwd_ms_mean,"
                   "bwd_ms_std,opt_ms_mean,opt_ms_std,step_ms_mean,step_ms_std,tokens_per_s,tflops,peak_bytes,"
                   "loss_first,loss_last,loss_scale,skipped_steps,status\n");
        break;
    case TLM_FORMAT_JSON:
        fprintf(f, "{\"tool\": \"tlm bench\", \"version\": \"%s\", \"device\": ", TLM_VERSION);
        tlm_json_string(f, device_desc);
        fprintf(f, ", \"date\": \"%s\", \"warmup\": %d, \"steps\": %d, \"std\": \"population\", "
                   "\"cuda_graphs\": %s, \"attention\": \"%s\",\n \"flops\": ",
                date, c->warmup, c->steps, c->graphs ? "true" : "false", tlm_attention_name(c->attention));
        tlm_json_string(f, flops_note);
        fprintf(f, ",\n \"rows\": [");
        break;
    }
    fflush(f);
}

static double ms_or_nan(const tlm_timing *t, int ran) { return ran ? t->mean_ms : 0.0; }

void tlm_bench_print_row(FILE *f, tlm_format fmt, const tlm_bench_case *c, const tlm_bench_result *r,
                         int index) {
    const int bwd = c->pass >= TLM_PASS_FORWARD_BACKWARD, opt = c->pass == TLM_PASS_TRAIN;
    const int ok = r->status == TLM_OK;
    const int oom = r->status == TLM_ERR_OUT_OF_MEMORY;
    switch (fmt) {
    case TLM_FORMAT_TABLE:
        fprintf(f, "%-8s %5d %5d %-5s %-5s %8.1f ", c->model_name, c->context_length, c->batch_size,
                tlm_precision_name(c->precision), tlm_attention_name(r->attention), r->params / 1e6);
        if (!ok) {
            fprintf(f, "%s: %s\n", oom ? "OOM" : "FAILED", r->error);
            break;
        }
        fprintf(f, "%10.2f %8.2f ", r->forward.mean_ms, r->forward.std_ms);
        if (bwd) fprintf(f, "%10.2f %8.2f ", r->backward.mean_ms, r->backward.std_ms);
        else fprintf(f, "%10s %8s ", "-", "-");
        if (opt) fprintf(f, "%10.2f %8.2f ", r->optimizer.mean_ms, r->optimizer.std_ms);
        else fprintf(f, "%10s %8s ", "-", "-");
        fprintf(f, "%11.0f %8.3f %8.3f %8.4f", r->tokens_per_s, r->tflops, r->peak_bytes / GIB, r->loss_last);
        if (r->speedup_vs_fp32 > 0) fprintf(f, "  %.2fx fp32", r->speedup_vs_fp32);
        if (r->device_peak_bytes) fprintf(f, "  device peak %.3f GiB", r->device_peak_bytes / GIB);
        if (c->precision == TLM_PRECISION_FP16)
            fprintf(f, "  loss scale %g, %lld steps skipped", r->loss_scale, (long long)r->skipped_steps);
        fputc('\n', f);
        break;
    case TLM_FORMAT_CSV:
        fprintf(f, "tlm,%s,%d,%d,%s,%s,%s,%lld,", c->model_name, c->context_length, c->batch_size,
                tlm_precision_name(c->precision), tlm_attention_name(r->attention), tlm_pass_name(c->pass),
                (long long)r->params);
        if (ok)
            fprintf(f, "%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.4f,%zu,%.6f,%.6f,%g,%lld,ok\n",
                    r->forward.mean_ms, r->forward.std_ms, ms_or_nan(&r->backward, bwd), r->backward.std_ms,
                    ms_or_nan(&r->optimizer, opt), r->optimizer.std_ms, r->step.mean_ms, r->step.std_ms,
                    r->tokens_per_s, r->tflops, r->peak_bytes, r->loss_first, r->loss_last, r->loss_scale,
                    (long long)r->skipped_steps);
        else
            fprintf(f, ",,,,,,,,,,%zu,,,,,%s\n", r->peak_bytes, oom ? "OOM" : "FAILED");
        break;
    case TLM_FORMAT_JSON:
        fprintf(f, "%s\n  {\"impl\": \"tlm\", \"model\": \"%s\", \"context_length\": %d, \"batch_size\": %d, "
                   "\"precision\": \"%s\", \"attention\": \"%s\", \"pass\": \"%s\", \"params\": %lld, "
                   "\"status\": \"%s\"",
                index ? "," : "", c->model_name, c->context_length, c->batch_size, tlm_precision_name(c->precision),
                tlm_attention_name(r->attention), tlm_pass_name(c->pass),
                (long long)r->params, ok ? "ok" : oom ? "OOM" : "failed");
        if (!ok) {
            fprintf(f, ", \"error\": ");
            tlm_json_string(f, r->error);
        } else {
            fprintf(f, ", \"fwd_ms_mean\": %.4f, \"fwd_ms_std\": %.4f", r->forward.mean_ms, r->forward.std_ms);
            if (bwd) fprintf(f, ", \"bwd_ms_mean\": %.4f, \"bwd_ms_std\": %.4f", r->backward.mean_ms, r->backward.std_ms);
            if (opt)
                fprintf(f, ", \"opt_ms_mean\": %.4f, \"opt_ms_std\": %.4f", r->optimizer.mean_ms, r->optimizer.std_ms);
            if (r->speedup_vs_fp32 > 0) fprintf(f, ", \"speedup_vs_fp32\": %.4f", r->speedup_vs_fp32);
            fprintf(f, ", \"step_ms_mean\": %.4f, \"step_ms_std\": %.4f, \"tokens_per_s\": %.1f, \"tflops\": %.4f, "
                       "\"loss_first\": %.6f, \"loss_last\": %.6f, \"loss_scale\": %g, \"skipped_steps\": %lld",
                    r->step.mean_ms, r->step.std_ms, r->tokens_per_s, r->tflops, r->loss_first, r->loss_last,
                    r->loss_scale, (long long)r->skipped_steps);
        }
        fprintf(f, ", \"peak_bytes\": %zu, \"device_peak_bytes\": %zu, \"peak_bytes_by_tag\": {", r->peak_bytes,
                r->device_peak_bytes);
        for (int t = 0; t < TLM_MEM_NUM_TAGS; t++)
            fprintf(f, "%s\"%s\": %zu", t ? ", " : "", tlm_mem_tag_name((tlm_mem_tag)t), r->peak_bytes_by_tag[t]);
        fprintf(f, "}}");
        break;
    }
    fflush(f);
}

void tlm_bench_print_footer(FILE *f, tlm_format fmt, int num_rows, int num_failed) {
    switch (fmt) {
    case TLM_FORMAT_TABLE:
        fprintf(f, "# %d configurations, %d ran, %d out of memory or failed\n", num_rows, num_rows - num_failed,
                num_failed);
        break;
    case TLM_FORMAT_CSV: break;
    case TLM_FORMAT_JSON: fprintf(f, "\n ]}\n"); break;
    }
    fflush(f);
}
