/* test_gpu_side_stream.c — the backward's weight-gradient GEMMs on the side stream (backend.h,
 * backward.c): the same model step on two CUDA backends, one with the side stream
 * (TLM_SIDE_STREAM unset) and one without (TLM_SIDE_STREAM=0, every GEMM on the compute stream).
 * Both run the same cuBLASLt plans (a plan is chosen by shape, not by stream; TLM_GEMM_TUNE is left
 * off), so the two differ only where a run differs from itself: the atomic adds (FlashAttention's
 * dQ, the embedding's gradient rows) sum in another order from run to run. A race (a side GEMM
 * reading a buffer the compute stream has already rewritten: a missing or misplaced join; a
 * captured graph without its side branch) makes some weight's gradient O(1) wrong. So: the loss
 * and logits within 1e-6 and every gradient tensor within the graph test's bound
 * (model_flash_checks.h: 1e-5 in fp32, u/2 in bf16 and fp16, u the unit roundoff), normalized
 * error against the run without the side stream. The count of elements that differ at all is
 * printed, beside that of two runs without it.
 * Checked in bf16, fp16 and fp32, with flash and naive attention, CUDA graphs off and on (three
 * passes: eager, captured, replayed), recompute "block" (each block's forward re-run in the
 * backward, into buffers shared by every block), optimizer-in-backward (each layer's AdamW update as
 * soon as its group is announced: the fp32 weights after three steps) and the overlapped optimizer
 * (the same updates on a background stream beside the backward: a missing wait would show as a
 * weight updated from an unfinished gradient, or read by the next forward before its update).
 * Those two run with naive attention: AdamW divides each gradient by its own running scale, so the
 * last bits that FlashAttention's atomic dQ adds leave to chance in the first step's gradients move a
 * small gradient's update by up to the learning rate, and the third step's logits by more than 1e-6
 * (seen on an H200, 2026-11-25, with flash: two runs without the side stream differing in 1.76 M of
 * 1.84 M weights, the logits by 3.6e-3, in some runs and not others, with the side stream or not). The d_head-64
 * shape at context 256 has small GEMMs (512 tokens) that leave most SMs to the side stream.
 * Exit 77 (skipped) without a GPU. */
#define TLM_TEST_DEVICE "cuda"
#include <stdlib.h>

#include "model_flash_checks.h"
#include "tlm/tuning.h"

static size_t differing(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void compare(tlm_backend *on, tlm_backend *off, const mf_shape *s, const tlm_run_config *run,
                    const char *what) {
    mf_out a = mf_run_with(on, s, run, 3), b = mf_run_with(off, s, run, 3), c = mf_run_with(off, s, run, 3);
    const tlm_tensor_info *last = &a.tensors[a.num_tensors - 1];
    const size_t flat = last->offset + last->numel;
    const mf_err e = mf_error(&a, &b);
    const double u = run->precision == TLM_PRECISION_BF16 ? 0x1p-8 : 0x1p-11;
    const double tol = run->precision == TLM_PRECISION_FP32 ? MF_GRAPH_TOL : u / 2;
    const bool updates = run->optimizer_in_backward || run->optimizer_overlap;
    const char *g = updates ? "updated weights" : "gradients";
    printf("       %s: %s differing in bits: %zu of %zu with the side stream, %zu between two runs without\n", what,
           g, differing(a.grads, b.grads, flat), flat, differing(b.grads, c.grads, flat));
    char msg[256];
    snprintf(msg, sizeof msg, "%s: side stream against none: loss and logits", what);
    check_limit(e.loss <= 1e-6 && e.logits <= 1e-6, msg, e.loss > e.logits ? e.loss : e.logits, 1e-6);
    snprintf(msg, sizeof msg, "%s: side stream against none: every tensor's %s (worst %s)", what, g, e.worst);
    check_limit(e.grads <= tol, msg, e.grads, tol);
    mf_free(&a);
    mf_free(&b);
    mf_free(&c);
}

int main(void) {
    tlm_backend *on = test_backend();
    die_on(tlm_knob_set(TLM_KNOB_SIDE_STREAM, "0"), "TLM_SIDE_STREAM");
    tlm_backend *off = NULL;
    die_on(tlm_backend_cuda_create(&off, 0), "the CUDA backend without a side stream");
    die_on(tlm_knob_set(TLM_KNOB_SIDE_STREAM, NULL), "TLM_SIDE_STREAM");
    check_limit(tlm_side_available(on) && !tlm_side_available(off),
                "the side stream: available by default, not with TLM_SIDE_STREAM=0", 0, 0);

    const mf_shape s = mf_tiny("d_head 64 ctx256", 256, 256, 4, 688);
    const tlm_precision modes[] = {TLM_PRECISION_BF16, TLM_PRECISION_FP16, TLM_PRECISION_FP32};
    const tlm_attention atts[] = {TLM_ATTENTION_FLASH, TLM_ATTENTION_NAIVE};
    char what[160];
    for (int mi = 0; mi < 3; mi++)
        for (int ai = 0; ai < 2; ai++)
            for (int graphs = 0; graphs < 2; graphs++) {
                const tlm_run_config run = {.precision = modes[mi], .attention = atts[ai], .cuda_graphs = graphs};
                snprintf(what, sizeof what, "%s %s, graphs %s", tlm_precision_name(modes[mi]),
                         tlm_attention_name(atts[ai]), graphs ? "on" : "off");
                compare(on, off, &s, &run, what);
            }
    const tlm_run_config block = {.precision = TLM_PRECISION_BF16, .attention = TLM_ATTENTION_FLASH,
                                  .cuda_graphs = true, .recompute = TLM_RECOMPUTE_BLOCK};
    compare(on, off, &s, &block, "bf16 flash, recompute block, graphs on");
    const tlm_run_config oib = {.precision = TLM_PRECISION_BF16, .attention = TLM_ATTENTION_NAIVE,
                                .optimizer_in_backward = true};
    compare(on, off, &s, &oib, "bf16 naive, optimizer in backward");
    const tlm_run_config overlap = {.precision = TLM_PRECISION_BF16, .attention = TLM_ATTENTION_NAIVE,
                                    .optimizer_overlap = true};
    compare(on, off, &s, &overlap, "bf16 naive, overlapped optimizer");
    tlm_backend_destroy(off);
    tlm_backend_destroy(on);
    return test_finish();
}
