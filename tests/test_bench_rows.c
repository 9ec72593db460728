/* test_bench_rows.c — every row of a benchmark sweep is measured on its own.
 * 1. The peak of a row does not depend on the rows before it: an fp32 forward row after a bf16 row
 *    (whose GEMMs fill the backend's scratch arena with fp32 copies of their operands) has the peak of
 *    the same row run alone, within 1%, for the forward pass and for a training step; the bf16 row's
 *    workspace is large enough that keeping it would break that bound; after a row the backend holds
 *    none of its workspaces (the GPU twin: none but those made at the backend's creation).
 * 2. The "vs fp32" figure finds its fp32 twin before or after a row in the list, and is the twin's
 *    time over the row's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_check.h"
#include "tlm/bench.h"
#include "tlm/memory.h"

static tlm_bench_case make_case(tlm_precision p, tlm_pass pass) {
    tlm_bench_case c = {.batch_size = 2, .context_length = 64, .warmup = 0, .steps = 1, .pass = pass,
                        .precision = p, .attention = TLM_ATTENTION_NAIVE, .seed = 1};
    snprintf(c.model_name, sizeof c.model_name, "custom");
    c.config = (tlm_config){.vocab_size = 2048, .context_length = 64, .d_model = 128, .num_layers = 2,
                            .num_heads = 4, .d_ff = 344, .rope_theta = 10000, .rmsnorm_eps = 1e-5f};
    return c;
}

static void add_held(void *user, const void *ptr, size_t bytes, tlm_mem_tag tag, const char *name) {
    *(size_t *)user += bytes;
}

static size_t run_row(tlm_backend *be, const tlm_bench_case *c, tlm_bench_result *r) {
    die_on(tlm_bench_run(be, c, r), "bench");
    die_on(r->status, "bench case");
    return r->peak_bytes;
}

static size_t bytes_held(tlm_backend *be) {
    size_t held = 0;
    tlm_mem_for_each(be, add_held, &held);
    return held;
}

/* base: what the backend holds from its creation (CUDA's cuBLASLt workspace and column-sum scratch) */
static void test_row_order(tlm_backend *be, tlm_pass pass, size_t base) {
    const tlm_bench_case fp32 = make_case(TLM_PRECISION_FP32, pass), bf16 = make_case(TLM_PRECISION_BF16, pass);
    tlm_bench_result r;
    const size_t alone = run_row(be, &fp32, &r);
    run_row(be, &bf16, &r);
    const size_t bf16_workspace = r.peak_bytes_by_tag[TLM_MEM_WORKSPACE];
    const size_t held = bytes_held(be);
    check(held == base, "%s: after the bf16 row the backend holds only what it made at creation (%zu bytes, %zu "
          "then)", tlm_pass_name(pass), held, base);
    const size_t after = run_row(be, &fp32, &r);
    const double rel = fabs((double)after - (double)alone) / (double)alone;
    check(rel <= 0.01, "%s: fp32 peak after a bf16 row %zu bytes, alone %zu (%.2f%% apart, at most 1%%)",
          tlm_pass_name(pass), after, alone, 100 * rel);
    if (strcmp(TLM_TEST_DEVICE, "cpu") == 0) /* CUDA's bf16 GEMMs take no on-demand workspace */
        check((double)bf16_workspace > 0.01 * (double)alone + (double)r.peak_bytes_by_tag[TLM_MEM_WORKSPACE],
              "%s: the bf16 row's workspace (%zu bytes) would break the bound if it stayed", tlm_pass_name(pass),
              bf16_workspace);
}

static void test_twins(void) {
    tlm_bench_case cases[4] = {make_case(TLM_PRECISION_BF16, TLM_PASS_FORWARD),
                               make_case(TLM_PRECISION_FP32, TLM_PASS_FORWARD),
                               make_case(TLM_PRECISION_FP16, TLM_PASS_TRAIN),
                               make_case(TLM_PRECISION_BF16, TLM_PASS_FORWARD)};
    check(tlm_bench_fp32_twin(cases, 4, 0) == 1, "a bf16 row's fp32 twin later in the list is found");
    check(tlm_bench_fp32_twin(cases, 4, 3) == 1, "a bf16 row's fp32 twin earlier in the list is found");
    check(tlm_bench_fp32_twin(cases, 4, 1) == -1, "an fp32 row has no twin");
    check(tlm_bench_fp32_twin(cases, 4, 2) == -1, "a row of another pass has none");
    tlm_bench_result twin = {.status = TLM_OK, .forward = {.mean_ms = 30}, .backward = {.mean_ms = 60}};
    tlm_bench_result r = {.status = TLM_OK, .forward = {.mean_ms = 10}, .backward = {.mean_ms = 20}};
    tlm_bench_set_speedup(&r, &twin);
    check(fabs(r.speedup_vs_fp32 - 3.0) < 1e-12, "vs fp32: the twin's time over the row's (%.3f, want 3)",
          r.speedup_vs_fp32);
    tlm_bench_result failed = {.status = TLM_ERR_OUT_OF_MEMORY};
    tlm_bench_result none = r;
    none.speedup_vs_fp32 = 0;
    tlm_bench_set_speedup(&none, &failed);
    check(none.speedup_vs_fp32 == 0, "vs fp32: none when the twin did not run");
}

int main(void) {
    tlm_backend *be = test_backend();
    const size_t base = bytes_held(be);
    test_row_order(be, TLM_PASS_FORWARD, base);
    test_row_order(be, TLM_PASS_TRAIN, base);
    test_twins();
    return test_finish_backend(be);
}
