/* test_attention_bench.c — the attention benchmark's library part (attention_bench.h): FLOP
 * counts in FlashAttention's convention, the memory accounting of a naive and a flash case,
 * the rows that must not run (naive non-causal, flash bf16 on the CPU), invalid cases. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_check.h"
#include "tlm/attention_bench.h"

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
    tlm_attn_case c = {.impl = TLM_ATTN_NAIVE, .batch = B, .heads = H, .seq = T, .d_head = D,
                       .dtype = TLM_DTYPE_F32, .causal = true, .warmup = 1, .iters = 2, .seed = 0};
    tlm_attn_result r;
    die_on(tlm_attention_bench_run(be, &c, &r), "naive");
    check(r.status == TLM_ATTN_OK && r.fwd_ms > 0 && r.bwd_ms > 0 && fabs(r.fwdbwd_ms - r.fwd_ms - r.bwd_ms) < 1e-9,
          "naive ran: fwd %.4f ms, bwd %.4f ms", r.fwd_ms, r.bwd_ms);
    const size_t probs = (size_t)B * H * T * T * 4;
    check(r.mem_before_bwd == 5 * act + probs, "naive memory before backward = q,k,v,dout,out + P (%zu)",
          r.mem_before_bwd);
    check(r.peak_bytes == 8 * act + 2 * probs, "naive peak = + dq,dk,dv + dP (%zu)", r.peak_bytes);
    check(be->mem_current_total == 0, "naive case freed everything");
    check(fabs(r.tflops_fwd - tlm_attn_flops_forward(B, H, T, D, true) / (r.fwd_ms * 1e9)) < 1e-12,
          "TFLOP/s = FLOPs / mean ms");

    c.impl = TLM_ATTN_FLASH;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash");
    check(r.status == TLM_ATTN_OK, "flash ran on the CPU");
    check(r.mem_before_bwd == 5 * act + (size_t)B * H * T * 4, "flash memory before backward = + L (%zu)",
          r.mem_before_bwd);
    c.causal = false;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash non-causal");
    check(r.status == TLM_ATTN_OK, "flash non-causal ran");

    c.impl = TLM_ATTN_NAIVE;
    die_on(tlm_attention_bench_run(be, &c, &r), "naive non-causal");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "naive: causal only"), "naive non-causal: %s", r.note);
    c.causal = true;
    c.impl = TLM_ATTN_FLASH;
    c.dtype = TLM_DTYPE_BF16;
    die_on(tlm_attention_bench_run(be, &c, &r), "flash bf16");
    check(r.status == TLM_ATTN_UNSUPPORTED && strstr(r.note, "not supported on this backend yet"), "flash bf16: %s",
          r.note);

    c.dtype = TLM_DTYPE_F32;
    c.d_head = 15;
    check(tlm_attention_bench_run(be, &c, &r) == TLM_ERR_INVALID_ARGUMENT, "odd d_head: %s", tlm_last_error());
    c.d_head = 16;
    c.seq = 0;
    check(tlm_attention_bench_run(be, &c, &r) == TLM_ERR_INVALID_ARGUMENT, "seq 0 rejected");
    check(be->mem_current_total == 0, "nothing left allocated");
    tlm_backend_destroy(be);
    return test_finish();
}
