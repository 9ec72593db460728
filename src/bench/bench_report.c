/* bench_report.c — a benchmark row in the one report schema (report.h): the case's columns, the
 * result's, and the header notes that say how each figure was measured. */
#include <math.h>
#include <string.h>

#include "tlm/bench.h"

/* a time's mean and population std over the timed steps, in ms (timing() writes them) */
#define MS_MEAN_STD(mean_key, std_key, head, width)                                                               \
    TLM_COL_MS(mean_key, head, width, 2), TLM_COL_MS_W(std_key, "std", 7, 2)

/* The primary columns (the default table, at most TLM_REPORT_WIDTH wide): the case, forward, backward and
 * optimizer ms, tokens/s, TFLOP/s, vs fp32, peak, the last loss; TLM_COL_WIDE ones with --wide.
 *   key                     type            head         unit   width prec scale flags */
const tlm_column tlm_bench_columns[] = {
    {"model", TLM_FIELD_STR, "model", "", -8, 0, 0, TLM_COL_KEY},
    {"context_length", TLM_FIELD_INT, "ctx", "", 5, 0, 0, TLM_COL_KEY},
    {"batch_size", TLM_FIELD_INT, "batch", "", 5, 0, 0, TLM_COL_KEY},
    {"precision", TLM_FIELD_STR, "prec", "", -5, 0, 0, TLM_COL_KEY},
    {"attention", TLM_FIELD_STR, "attn", "", -5, 0, 0, TLM_COL_KEY},
    {"pass", TLM_FIELD_STR, "pass", "", -16, 0, 0, TLM_COL_KEY},
    {"warmup_steps", TLM_FIELD_INT, "warmup", "", 6, 0, 0, TLM_COL_KEY},
    {"recompute", TLM_FIELD_STR, "recompute", "", -9, 0, 0, TLM_COL_KEY},
    {"optimizer_in_backward", TLM_FIELD_BOOL, "opt in bwd", "", -10, 0, 0, TLM_COL_KEY},
    {"optimizer_overlap", TLM_FIELD_BOOL, "opt overlap", "", -11, 0, 0, TLM_COL_KEY},
    {"grad_accum_steps", TLM_FIELD_INT, "accum", "", 5, 0, 0, TLM_COL_KEY},
    TLM_COL_HIDDEN("steps", TLM_FIELD_INT),
    TLM_COL_HIDDEN("cuda_graphs", TLM_FIELD_BOOL),
    TLM_COL_HIDDEN("seed", TLM_FIELD_INT),
    {"params", TLM_FIELD_INT, "params", "M", 8, 1, 1e-6, TLM_COL_KEY | TLM_COL_WIDE},
    {"ranks", TLM_FIELD_INT, "ranks", "", 5, 0, 0, TLM_COL_KEY},
    {"ddp", TLM_FIELD_STR, "ddp", "", -8, 0, 0, TLM_COL_KEY},
    {"bucket_mb", TLM_FIELD_NUM, "bucket", "MiB", 7, 2, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"grad_reduce_dtype", TLM_FIELD_STR, "reduce", "", -6, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    {"zero", TLM_FIELD_INT, "zero", "", 4, 0, 0, TLM_COL_KEY | TLM_COL_WIDE},
    MS_MEAN_STD("fwd_ms_mean", "fwd_ms_std", "forward", 9),
    MS_MEAN_STD("bwd_ms_mean", "bwd_ms_std", "backward", 9),
    MS_MEAN_STD("opt_ms_mean", "opt_ms_std", "optimizer", 9),
    MS_MEAN_STD("comm_ms_mean", "comm_ms_std", "comm", 9),
    {"comm_share", TLM_FIELD_NUM, "comm", "%", 5, 1, 100, TLM_COL_WIDE},
    TLM_COL_HIDDEN("step_ms_mean", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("step_ms_std", TLM_FIELD_NUM),
    {"tokens_per_s", TLM_FIELD_NUM, "tokens/s", "", 9, 0, 0, 0},
    {"tflop_per_s", TLM_FIELD_NUM, "TFLOP/s", "", 7, 3, 0, 0},
    {"mfu", TLM_FIELD_NUM, "MFU", "%", 5, 1, 100, 0},
    {"speedup_vs_fp32", TLM_FIELD_NUM, "vs fp32", "x", 7, 2, 0, 0},
    TLM_COL_SIZE("peak_bytes", "peak", 8),
    TLM_COL_SIZE_W("reserved_peak_bytes", "reserved", 8),
    TLM_COL_SIZE_W("device_peak_bytes", "device", 8),
    {"max_context", TLM_FIELD_INT, "max ctx", "", 7, 0, 0, 0},
    TLM_COL_HIDDEN("peak_bytes_min", TLM_FIELD_INT),
    TLM_COL_SIZE_W("mem_after_init_bytes", "init", 8),
    TLM_COL_SIZE_W("mem_before_opt_bytes", "pre-opt", 8),
    TLM_COL_SIZE_W("mem_after_opt_bytes", "post-opt", 8),
    TLM_COL_HIDDEN("peak_bytes_parameters", TLM_FIELD_INT),
    TLM_COL_HIDDEN("peak_bytes_gradients", TLM_FIELD_INT),
    TLM_COL_HIDDEN("peak_bytes_optimizer", TLM_FIELD_INT),
    TLM_COL_HIDDEN("peak_bytes_activations", TLM_FIELD_INT),
    TLM_COL_HIDDEN("peak_bytes_workspace", TLM_FIELD_INT),
    TLM_COL_HIDDEN("loss_first", TLM_FIELD_NUM),
    {"loss_last", TLM_FIELD_NUM, "last loss", "", 9, 4, 0, 0},
    {"loss_scale", TLM_FIELD_NUM, "loss scale", "", 10, 0, 0, TLM_COL_WIDE},
    {"skipped_steps", TLM_FIELD_INT, "skipped", "", 7, 0, 0, TLM_COL_WIDE},
};
const int tlm_bench_num_columns = (int)(sizeof tlm_bench_columns / sizeof tlm_bench_columns[0]);
const int tlm_bench_case_columns = 15; /* model .. params */

/* the per-tag peak fields, in tlm_mem_tag order */
static const char *const peak_by_tag[TLM_MEM_NUM_TAGS] = {"peak_bytes_parameters", "peak_bytes_gradients",
                                                          "peak_bytes_optimizer", "peak_bytes_activations",
                                                          "peak_bytes_workspace"};

void tlm_bench_report_show_case(tlm_report *rep, const tlm_bench_case *cases, int n) {
    bool several_passes = false, several_warmups = false, recompute = false, oib = false, overlap = false,
         accum = false;
    for (int i = 0; i < n; i++) {
        accum |= cases[i].grad_accum_steps > 1 && cases[i].pass == TLM_PASS_TRAIN;
        several_passes |= cases[i].pass != cases[0].pass;
        several_warmups |= cases[i].warmup != cases[0].warmup;
        recompute |= cases[i].recompute != TLM_RECOMPUTE_NONE;
        oib |= cases[i].optimizer_in_backward;
        overlap |= cases[i].optimizer_overlap;
    }
    tlm_report_show(rep, "pass", several_passes);
    tlm_report_show(rep, "warmup_steps", several_warmups);
    tlm_report_show(rep, "recompute", recompute);
    tlm_report_show(rep, "optimizer_in_backward", oib);
    tlm_report_show(rep, "optimizer_overlap", overlap);
    tlm_report_show(rep, "grad_accum_steps", accum);
}

void tlm_bench_report_begin(tlm_report *rep, const tlm_backend *be, const tlm_bench_case *cases, int n) {
    bool fp16 = false, several_passes = false, fp32_and_other = false, fp32 = false, other = false, ddp = false,
         bucketed = false, train = false;
    size_t max_context_bytes = 0;
    for (int i = 0; i < n; i++) {
        fp16 |= cases[i].precision == TLM_PRECISION_FP16;
        fp32 |= cases[i].precision == TLM_PRECISION_FP32;
        other |= cases[i].precision != TLM_PRECISION_FP32;
        several_passes |= cases[i].pass != cases[0].pass;
        ddp |= cases[i].comm != NULL;
        bucketed |= cases[i].comm && cases[i].ddp.mode == TLM_DDP_BUCKETED;
        train |= cases[i].pass == TLM_PASS_TRAIN;
        if (cases[i].max_context_bytes) max_context_bytes = cases[i].max_context_bytes;
    }
    fp32_and_other = fp32 && other;
    tlm_report_meta_str(rep, "timing", "ms = mean and population std over the timed steps of each phase, timed "
                                       "between events on the compute stream (CUDA events on CUDA, the host "
                                       "clock on the CPU); one synchronization per step");
    tlm_report_meta_str(rep, "tflop_per_s", "matmul FLOPs, 2 per multiply-add (projections, SwiGLU, lm_head; "
                                            "attention's two T x T products in full), backward counted as 2x "
                                            "forward, over forward+backward time");
    tlm_report_meta_str(rep, "peak_bytes", "tlm's tracked allocator peak of live buffers (parameters, gradients, "
                                           "optimizer state, activations, workspace; torch.cuda.max_memory_allocated's "
                                           "counterpart); reserved_peak_bytes: the most held from the device (buffers "
                                           "plus the step's arena; max_memory_reserved's counterpart); "
                                           "device_peak_bytes: the device's own count (cudaMemGetInfo) less what was in "
                                           "use before the case; the table shows each in B, KiB, MiB or GiB (2^10, 2^20, 2^30 "
                                           "bytes)");
    tlm_report_meta_str(rep, "loss_last", "the cross-entropy of the last timed step; every step runs the same "
                                          "random batch, so with --pass train the loss falls as AdamW fits it");
    tlm_report_meta_str(rep, "speedup_vs_fp32", "the fp32 row's forward+backward time over this row's, same "
                                                "model, context, batch and pass");
    tlm_report_meta_str(rep, "attention", "auto resolves per row: flash on CUDA where it has kernels for the "
                                          "d_head and dtype, else naive; naive on the CPU");
    if (max_context_bytes) {
        tlm_report_meta_str(rep, "max_context", "the longest context_length at the row's batch whose planned step "
                            "fits in max_context_memory_bytes: the model's memory plan (the bytes tlm's allocator "
                            "would hold at the step's peak; the CUDA context and libraries not included), not run");
        tlm_report_meta_int(rep, "max_context_memory_bytes", (int64_t)max_context_bytes);
    }
    if (ddp) {
        tlm_report_meta_str(rep, "ddp", "data parallelism (ddp.h): batch_size is the global batch, divided over the "
                            "ranks; tokens_per_s counts every rank's; comm_ms: the communication each step waited "
                            "for (NCCL: events on the compute and communication streams; MPI, synchronous: the time "
                            "inside the collectives), taken out of the phase it fell in, so forward + backward + comm "
                            "+ optimizer = the step; comm_share = comm / step; memory: the largest over the ranks "
                            "(peak_bytes_min the smallest peak); init, pre-opt, post-opt: tracked bytes in use after "
                            "setting up, right before and after the last optimizer step (ZeRO-1's table)");
    }
    const bool mfu = n > 0 && tlm_backend_peak_tflops((tlm_backend *)be, cases[0].precision) > 0;
    bool accum = false;
    for (int i = 0; i < n; i++) accum |= cases[i].grad_accum_steps > 1 && cases[i].pass == TLM_PASS_TRAIN;
    if (accum)
        tlm_report_meta_str(rep, "grad_accum_steps", "gradient accumulation (nanoGPT's convention): a step is "
                            "grad_accum_steps micro-batches of batch_size rows (a forward and a backward each, the "
                            "gradients added in place) and one update; tokens per step = grad_accum_steps x batch x "
                            "context; forward and backward are summed over the micro-batches; tokens_per_s and mfu "
                            "are per optimizer step; with several ranks the reduction runs in the last micro-batch's "
                            "backward only");
    if (mfu)
        tlm_report_meta_str(rep, "mfu", "model FLOPs utilization: 3 x forward matmul FLOPs of the step (every "
                        "micro-batch's) over the whole step's time (update and communication included) / the "
                        "device's dense peak for the precision");
    tlm_report_table(rep, "rows", tlm_bench_columns, tlm_bench_num_columns);
    tlm_report_show(rep, "mfu", mfu);
    const char *ddp_cols[] = {"ranks", "ddp", "grad_reduce_dtype", "zero", "comm_ms_mean", "comm_ms_std", "comm_share"};
    for (size_t i = 0; i < sizeof ddp_cols / sizeof ddp_cols[0]; i++) tlm_report_show(rep, ddp_cols[i], ddp);
    tlm_report_show(rep, "bucket_mb", bucketed);
    tlm_report_show(rep, "mem_after_init_bytes", ddp && train);
    tlm_report_show(rep, "mem_before_opt_bytes", ddp && train);
    tlm_report_show(rep, "mem_after_opt_bytes", ddp && train);
    tlm_bench_report_show_case(rep, cases, n);
    tlm_report_show(rep, "speedup_vs_fp32", fp32_and_other);
    tlm_report_show(rep, "loss_scale", fp16);
    tlm_report_show(rep, "skipped_steps", fp16);
    tlm_report_show(rep, "device_peak_bytes", tlm_device_memory_used((tlm_backend *)be) > 0);
    tlm_report_show(rep, "max_context", max_context_bytes > 0);
    if (n > 0) {
        const bool bwd = cases[0].pass >= TLM_PASS_FORWARD_BACKWARD && !several_passes;
        tlm_report_show(rep, "bwd_ms_mean", bwd || several_passes);
        tlm_report_show(rep, "bwd_ms_std", bwd || several_passes);
        tlm_report_show(rep, "opt_ms_mean", cases[0].pass == TLM_PASS_TRAIN || several_passes);
        tlm_report_show(rep, "opt_ms_std", cases[0].pass == TLM_PASS_TRAIN || several_passes);
    }
}

void tlm_bench_report_case(tlm_report *rep, const tlm_bench_case *c) {
    tlm_report_str(rep, "model", c->model_name);
    tlm_report_int(rep, "context_length", c->context_length);
    tlm_report_int(rep, "batch_size", c->batch_size);
    tlm_report_str(rep, "precision", tlm_precision_name(c->precision));
    tlm_report_str(rep, "pass", tlm_pass_name(c->pass));
    tlm_report_int(rep, "warmup_steps", c->warmup);
    tlm_report_str(rep, "recompute", tlm_recompute_name(c->recompute));
    tlm_report_bool(rep, "optimizer_in_backward", c->optimizer_in_backward);
    tlm_report_bool(rep, "optimizer_overlap", c->optimizer_overlap);
    tlm_report_int(rep, "grad_accum_steps", c->pass == TLM_PASS_TRAIN && c->grad_accum_steps > 1 ? c->grad_accum_steps : 1);
    tlm_report_int(rep, "steps", c->steps);
    tlm_report_bool(rep, "cuda_graphs", c->graphs);
    tlm_report_int(rep, "seed", (int64_t)c->seed);
    tlm_report_int(rep, "params", tlm_config_num_params(&c->config));
}

static void timing(tlm_report *rep, const char *mean, const char *std, const tlm_timing *t, bool ran) {
    if (!ran) return;
    tlm_report_num(rep, mean, t->mean_ms);
    tlm_report_num(rep, std, t->std_ms);
}

void tlm_bench_report_row(tlm_report *rep, const tlm_bench_case *c, const tlm_bench_result *r) {
    tlm_report_row_begin(rep);
    tlm_bench_report_case(rep, c);
    tlm_report_str(rep, "attention", tlm_attention_name(r->attention));
    if (r->status == TLM_OK) {
        timing(rep, "fwd_ms_mean", "fwd_ms_std", &r->forward, true);
        timing(rep, "bwd_ms_mean", "bwd_ms_std", &r->backward, c->pass >= TLM_PASS_FORWARD_BACKWARD);
        timing(rep, "opt_ms_mean", "opt_ms_std", &r->optimizer, c->pass == TLM_PASS_TRAIN);
        timing(rep, "step_ms_mean", "step_ms_std", &r->step, true);
        tlm_report_num(rep, "tokens_per_s", r->tokens_per_s);
        tlm_report_num(rep, "tflop_per_s", r->tflops);
        if (r->mfu > 0) tlm_report_num(rep, "mfu", r->mfu);
        if (r->speedup_vs_fp32 > 0) tlm_report_num(rep, "speedup_vs_fp32", r->speedup_vs_fp32);
        tlm_report_num(rep, "loss_first", r->loss_first);
        tlm_report_num(rep, "loss_last", r->loss_last);
        tlm_report_num(rep, "loss_scale", r->loss_scale);
        tlm_report_int(rep, "skipped_steps", r->skipped_steps);
        if (c->comm) {
            timing(rep, "comm_ms_mean", "comm_ms_std", &r->comm, true);
            tlm_report_num(rep, "comm_share", r->comm_share);
        }
    } else {
        tlm_report_status(rep, r->status == TLM_ERR_OUT_OF_MEMORY ? "OOM" : "failed", r->error);
    }
    tlm_report_int(rep, "peak_bytes", (int64_t)r->peak_bytes);
    tlm_report_int(rep, "reserved_peak_bytes", (int64_t)r->reserved_peak_bytes);
    if (r->device_peak_bytes) tlm_report_int(rep, "device_peak_bytes", (int64_t)r->device_peak_bytes);
    if (r->max_context >= 0) tlm_report_int(rep, "max_context", r->max_context);
    for (int t = 0; t < TLM_MEM_NUM_TAGS; t++) tlm_report_int(rep, peak_by_tag[t], (int64_t)r->peak_bytes_by_tag[t]);
    if (c->comm) {
        tlm_report_int(rep, "ranks", r->world_size);
        tlm_report_str(rep, "ddp", tlm_ddp_mode_name(c->ddp.mode));
        if (c->ddp.mode == TLM_DDP_BUCKETED) tlm_report_num(rep, "bucket_mb", c->ddp.bucket_mb);
        tlm_report_str(rep, "grad_reduce_dtype", c->ddp.reduce_dtype == TLM_DTYPE_BF16 ? "bf16" : "fp32");
        tlm_report_int(rep, "zero", c->ddp.zero);
        tlm_report_int(rep, "peak_bytes_min", (int64_t)r->peak_bytes_min);
        if (c->pass == TLM_PASS_TRAIN && r->status == TLM_OK) {
            tlm_report_int(rep, "mem_after_init_bytes", (int64_t)r->mem_after_init_bytes);
            tlm_report_int(rep, "mem_before_opt_bytes", (int64_t)r->mem_before_opt_bytes);
            tlm_report_int(rep, "mem_after_opt_bytes", (int64_t)r->mem_after_opt_bytes);
        }
    }
    tlm_report_row_end(rep);
}
