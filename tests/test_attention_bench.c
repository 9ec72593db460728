/* test_attention_bench.c — the attention benchmark's library part (attention_bench.h): FLOP
 * counts in FlashAttention's convention, the memory accounting of a naive and a flash case (the
 * flash backward's workspace included), the rows that must not run (naive non-causal), invalid
 * cases; and how flash runs: through the dispatch to the backend's flash ops in the case's
 * precision mode (checked with an op table whose flash ops count their calls, record the mode and
 * wrap the CPU reference: tf32 reaches them as tf32, with fp32 tensors; and a device that refuses
 * bf16 through `supports`, whose message becomes the row's note), and not at all where the device
 * supports no flash kernel.
 * The CPU ops' scratch is tracked memory (memory.h) that each case makes anew (the case frees the
 * backend's workspaces first: tlm_backend_release_workspaces), so a case's peak counts it: the fp32
 * cases' peaks are exactly their tensors, the bf16/fp16 flash cases' their tensors plus the widened
 * copies, the same from one run to the next. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_check.h"
#include "tlm/attention_bench.h"
#include "tlm/flash_attention.h"

/* ---- an op table whose flash ops count their calls and wrap the fp32 CPU reference ---------- */

static int fwd_calls, bwd_calls, null_workspace;
static tlm_precision fwd_mode, bwd_mode; /* the mode of the last call */

static void counting_forward(tlm_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                             int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D, bool causal,
                             tlm_precision p) {
    fwd_calls++;
    fwd_mode = p;
    tlm_flash_attention_forward_cpu(out, lse, q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, causal, 64, 64);
}

static void counting_backward(tlm_backend *be, void *dq, void *dk, void *dv, float *workspace, const void *dout,
                              const void *q, const void *k, const void *v, const void *out, const float *lse,
                              int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D, bool causal,
                              tlm_precision p) {
    bwd_calls++;
    bwd_mode = p;
    null_workspace += workspace == NULL;
    tlm_flash_attention_backward_cpu(dq, dk, dv, dout, q, k, v, out, lse, ld_qkv, ld_out, B, Tq, Tk, H, D, causal,
                                     64, 64);
}

static tlm_support fp32_only_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int D) {
    if (dt != TLM_DTYPE_F32) {
        tlm_fail(TLM_ERR_UNSUPPORTED, "test flash ops: %s not supported (d_head %d)", tlm_dtype_name(dt), D);
        return TLM_SUPPORT_NONE;
    }
    return TLM_SUPPORT_FAST;
}

static tlm_support no_flash_supports(tlm_backend *be, tlm_op_id op, tlm_dtype dt, int D) {
    if (op == TLM_OP_FLASH_ATTENTION_FORWARD || op == TLM_OP_FLASH_ATTENTION_BACKWARD) {
        tlm_fail(TLM_ERR_UNSUPPORTED, "test device: no FlashAttention-2 kernels");
        return TLM_SUPPORT_NONE;
    }
    return TLM_SUPPORT_FAST;
}


int main(void) {
    /* forward 4*b*h*s^2*d, halved when causal; backward 2.5x */
    check(tlm_attn_flops_forward(1, 1, 128, 64, false) == 4194304.0, "fwd FLOPs b1 h1 s128 d64 = 4194304 (%.0f)",
          tlm_attn_flops_forward(1, 1, 128, 64, false));
    check(tlm_attn_flops_forward(1, 1, 128, 64, true) == 2097152.0, "causal halves the forward");
    check(tlm_attn_flops_backward(1, 1, 128, 64, false) == 2.5 * 4194304.0, "bwd = 2.5x fwd");
    check(tlm_attn_flops_forward(1, 16, 16384, 64, true) == 2.0 * 16 * 16384.0 * 16384.0 * 64,
          "leaderboard forward FLOPs (%.4g)", tlm_attn_flops_forward(1, 16, 16384, 64, true));

    tlm_backend *be;
    die_on(tlm_backend_cpu_create(&be, 2), "cpu backend");
    const int B = 2, H = 3, T = 40, D = 16;
    const size_t act = (size_t)B * T * H * D * 4;
    tlm_attn_case c = {.impl = TLM_ATTENTION_NAIVE, .batch = B, .heads = H, .seq = T, .d_head = D,
                       .precision = TLM_PRECISION_FP32, .causal = true, .warmup = 1, .iters = 2, .seed = 0};
    tlm_attn_result r;
    die_on(tlm_attention_bench_run(be, &c, &r), "naive (scratch)");
    die_on(tlm_attention_bench_run(be, &c, &r), "naive");
    check(r.status == TLM_ATTN_OK && r.fwd_ms > 0 && r.bwd_ms > 0 && fabs(r.fwdbwd_ms - r.fwd_ms - r.bwd_ms) < 1e-9,
          "naive ran: fwd %.4f ms, bwd %.4f ms", r.fwd_ms, r.bwd_ms);
    const size_t probs = (size_t)B * H * T * T * 4;
    check(r.mem_before_bwd == 5 * act + probs, "naive memory before backward = q,k,v,dout,out + P (%zu)",
          r.mem_before_bwd);
    check(r.peak_bytes == 8 * act + 2 * probs, "naive peak = + dq,dk,dv + dP (%zu)", r.peak_bytes);
    check(test_bytes_held(be) == 0, "naive case freed everything");
    check(fabs(r.tflops_fwd - tlm_attn_flops_forward(B, H, T, D, true) / (r.fwd_ms * 1e9)) < 1e-12,
          "TFLOP/s = FLOPs / mean ms");

    c.impl = TLM_ATTENTION_FLASH;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash (scratch)");
    die_on(tlm_attention_bench_run(be, &c, &r), "flash");
    check(r.status == TLM_ATTN_OK, "flash ran on the CPU (the backend's flash ops: the reference)");
    const size_t lse = (size_t)B * H * T * 4, workspace = tlm_flash_workspace_floats(B, T, H, D) * 4;
    check(r.mem_before_bwd == 5 * act + lse, "flash memory before backward = + L (%zu)", r.mem_before_bwd);
    check(r.peak_bytes == 8 * act + lse + workspace, "flash peak = + dq,dk,dv + the fp32 workspace (%zu, expected %zu)",
          r.peak_bytes, 8 * act + lse + workspace);
    c.causal = false;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash non-causal");
    check(r.status == TLM_ATTN_OK, "flash non-causal ran");

    c.impl = TLM_ATTENTION_NAIVE;
    die_on(tlm_attention_bench_run(be, &c, &r), "naive non-causal");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "naive: causal only"), "naive non-causal: %s", r.note);
    c.causal = true;
    c.impl = TLM_ATTENTION_FLASH;
    /* bf16 and fp16 with the CPU backend's own ops: its flash ops widen them to the reference */
    for (int t = 0; t < 2; t++) {
        c.precision = t ? TLM_PRECISION_FP16 : TLM_PRECISION_BF16;
        tlm_attn_result first;
        die_on(tlm_attention_bench_run(be, &c, &first), "flash bf16/fp16 (first)");
        die_on(tlm_attention_bench_run(be, &c, &r), "flash bf16/fp16");
        /* the widened copies live in the backend's scratch arena, which each case makes anew: the peak
         * counts them, the same in either run */
        check(r.status == TLM_ATTN_OK && r.peak_bytes > 8 * act / 2 + lse + workspace &&
                  r.peak_bytes == first.peak_bytes,
              "flash %s on the CPU: runs through the flash ops (peak %zu, %zu past the tensors, the same twice)",
              tlm_precision_name(c.precision), r.peak_bytes, r.peak_bytes - (8 * act / 2 + lse + workspace));
    }
    /* tf32: fp32 tensors (the CPU computes it as fp32), naive and flash */
    c.precision = TLM_PRECISION_TF32;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash tf32");
    check(r.status == TLM_ATTN_OK && r.peak_bytes == 8 * act + lse + workspace,
          "flash tf32 on the CPU: fp32 tensors (peak %zu)", r.peak_bytes);
    c.impl = TLM_ATTENTION_NAIVE;
    die_on(tlm_attention_bench_run(be, &c, &r), "naive tf32");
    check(r.status == TLM_ATTN_OK && r.peak_bytes == 8 * act + 2 * probs, "naive tf32 on the CPU: fp32 tensors (peak %zu)",
          r.peak_bytes);
    c.impl = TLM_ATTENTION_FLASH;
    c.precision = TLM_PRECISION_FP32;

    /* an op table with counting flash ops: flash goes through them, with a workspace; a device
     * that refuses bf16: its message becomes the row's note */
    const tlm_ops *own = be->ops;
    const tlm_backend_iface *own_iface = be->iface;
    tlm_ops counting = *own;
    counting.flash_attention_forward = counting_forward;
    counting.flash_attention_backward = counting_backward;
    tlm_backend_iface fp32_only = *own_iface;
    fp32_only.supports = fp32_only_supports;
    be->ops = &counting;
    be->iface = &fp32_only;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash through counting ops");
    check(r.status == TLM_ATTN_OK && fwd_calls == c.warmup + c.iters && bwd_calls == c.warmup + c.iters &&
              null_workspace == 0,
          "flash through the op table: %d forward and %d backward calls (expected %d each), workspace given %s",
          fwd_calls, bwd_calls, c.warmup + c.iters, null_workspace ? "NOT always" : "every time");
    check(r.peak_bytes == 8 * act + lse + workspace, "flash through the op table: peak %zu includes the workspace",
          r.peak_bytes);
    check(fwd_mode == TLM_PRECISION_FP32 && bwd_mode == TLM_PRECISION_FP32, "fp32 reaches the flash ops as fp32");
    c.precision = TLM_PRECISION_TF32;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash tf32 through counting ops");
    check(r.status == TLM_ATTN_OK && fwd_mode == TLM_PRECISION_TF32 && bwd_mode == TLM_PRECISION_TF32 &&
              r.peak_bytes == 8 * act + lse + workspace,
          "tf32 reaches the flash ops as tf32 (forward %s, backward %s), with fp32 tensors (peak %zu)",
          tlm_precision_name(fwd_mode), tlm_precision_name(bwd_mode), r.peak_bytes);
    c.precision = TLM_PRECISION_BF16;
    fwd_calls = bwd_calls = 0;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash bf16 refused by the check");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "test flash ops: BF16 not supported (d_head 16)") &&
              fwd_calls == 0,
          "flash refused by the device's supports: unsupported row with its message: %s", r.note);

    /* a device with no flash kernels: an unsupported row, in every dtype, nothing run */
    tlm_backend_iface bare = *own_iface;
    bare.supports = no_flash_supports;
    be->iface = &bare;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash bf16 without kernels");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "no FlashAttention-2 kernels") && fwd_calls == 0,
          "no flash kernels, bf16: %s", r.note);
    c.precision = TLM_PRECISION_FP32;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash fp32 without kernels");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "no FlashAttention-2 kernels") && r.peak_bytes == 0 &&
              fwd_calls == 0,
          "no flash kernels, fp32: %s", r.note);
    be->ops = own;
    be->iface = own_iface;

    c.precision = TLM_PRECISION_COUNT;
    check(tlm_attention_bench_run(be, &c, &r) == TLM_ERR_INVALID_ARGUMENT, "a mode outside the four: %s",
          tlm_last_error());
    c.precision = TLM_PRECISION_FP32;
    c.d_head = 15;
    check(tlm_attention_bench_run(be, &c, &r) == TLM_ERR_INVALID_ARGUMENT, "odd d_head: %s", tlm_last_error());
    c.d_head = 16;
    c.seq = 0;
    check(tlm_attention_bench_run(be, &c, &r) == TLM_ERR_INVALID_ARGUMENT, "seq 0 rejected");
    return test_finish_backend(be);
}
