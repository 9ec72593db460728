/* fuzz_profile.c — libFuzzer harness of tlm_profile_read (profile.h), the reading back of the
 * profile files that libtlm_inject.so writes for `tlm profile --exec`, and of what --exec then does
 * with a profile: the summary (tlm_profile_summarize, which resolves it), the report's tables (JSON
 * into a file) and the Chrome trace. The input is the file. On failure: a message naming the file.
 * FUZZ_WRITE_SEEDS=DIR: write valid profiles, as the injection library writes them (tlm_profile_write
 * of a foreign profile: NVTX ranges on two threads, kernels, a memcpy, launches), into DIR and exit
 * (make_corpus.py uses it). */
#include <math.h>

#include "fuzz_common.h"
#include "tlm/profile.h"
#include "tlm/profile_run.h"

/* a foreign profile of `steps` steps, as inject.c records one (host_clock: NVTX ranges only) */
static tlm_profile *sample(int steps, bool host_clock) {
    tlm_profile *p;
    if (tlm_profile_create(&p) != TLM_OK) abort();
    snprintf(p->title, sizeof p->title, "python train.py --steps %d", steps);
    snprintf(p->device, sizeof p->device, host_clock ? "no CUDA device: NVTX ranges only (--exec)" : "NVIDIA H100");
    p->foreign = true;
    p->host_clock = host_clock;
    const char *phases[] = {"forward", "backward", "optimizer step"};
    const char *kernels[] = {"ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>()",
                             "softmax_warp_forward"};
    int64_t t = 1000;
    uint32_t corr = 1;
    for (int s = 0; s < steps; s++) {
        char name[32];
        snprintf(name, sizeof name, s == 0 ? "warmup step %d" : "step %d", s);
        const int64_t step_begin = t;
        const int32_t step_range = (int32_t)tlm_profile_add_range(
            p, &(tlm_prof_range){.name = tlm_profile_intern(p, name), .kind = TLM_PROF_RANGE_NVTX, .begin_ns = t,
                                 .end_ns = t + 9000, .thread = 101, .parent = -1});
        for (int ph = 0; ph < 3; ph++) {
            const int64_t b = t + 100 + 3000 * ph;
            const int32_t r = (int32_t)tlm_profile_add_range(
                p, &(tlm_prof_range){.name = tlm_profile_intern(p, phases[ph]), .kind = TLM_PROF_RANGE_NVTX,
                                     .begin_ns = b, .end_ns = b + 2500, .thread = 101, .parent = step_range});
            (void)r;
            for (int k = 0; k < 3 && !host_clock; k++, corr++) {
                tlm_prof_launch l;
                memset(&l, 0, sizeof l); /* its padding too: the seeds are the same bytes every time */
                l.correlation = corr, l.op = l.range = -1, l.api_ns = b + 10 + 200 * k, l.thread = 101;
                tlm_profile_add_launch(p, &l);
                tlm_prof_activity a = tlm_prof_activity_blank(k == 2 && ph == 2 ? TLM_PROF_MEMCPY : TLM_PROF_KERNEL,
                                                              tlm_profile_intern(p, kernels[k]), b + 50 + 200 * k,
                                                              b + 150 + 200 * k + 40 * ph);
                a.stream = 7;
                a.correlation = corr;
                if (a.kind == TLM_PROF_MEMCPY) a.bytes = 4096;
                tlm_profile_add_activity(p, &a);
            }
            tlm_profile_add_mem(p, &(tlm_prof_mem_sample){.t_ns = b, .in_use = (uint64_t)(1 << 20) * (uint64_t)(ph + 1)});
        }
        t = step_begin + 10000;
    }
    /* a second thread's range, holding nothing */
    tlm_profile_add_range(p, &(tlm_prof_range){.name = tlm_profile_intern(p, "data loader"), .kind = TLM_PROF_RANGE_NVTX,
                                                .begin_ns = 500, .end_ns = t, .thread = 202, .parent = -1});
    p->end_ns = t;
    return p;
}

static void write_seed(const char *dir, const char *name, tlm_profile *p) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || tlm_profile_write(p, f) != TLM_OK || fclose(f) != 0) abort();
    tlm_profile_free(p);
}

static char report_path[600], trace_path[600];

static void remove_outputs(void) {
    unlink(report_path);
    unlink(trace_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seeds = fuzz_seed_dir();
    if (seeds) {
        write_seed(seeds, "exec_3_steps.bin", sample(3, false));
        write_seed(seeds, "exec_1_step.bin", sample(1, false));
        write_seed(seeds, "exec_host_clock.bin", sample(2, true));
        exit(0);
    }
    snprintf(report_path, sizeof report_path, "%s/tlm-fuzz-%d.report.json", fuzz_tmpdir(), (int)getpid());
    snprintf(trace_path, sizeof trace_path, "%s/tlm-fuzz-%d.trace.json", fuzz_tmpdir(), (int)getpid());
    atexit(remove_outputs);
    if (!freopen("/dev/null", "w", stdout)) abort(); /* the report's table goes to stdout */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_input(data, size, ".bin");
    FILE *f = fopen(path, "rb");
    fuzz_require(f != NULL);
    tlm_profile *p = NULL;
    const tlm_status s = tlm_profile_read(&p, f, path);
    fclose(f);
    if (s != TLM_OK) {
        fuzz_require_message(path);
        fuzz_require(p == NULL);
        return 0;
    }
    fuzz_require(p != NULL);
    /* what tlm profile --exec does with it (profile_run.c, cmd_profile.c) */
    tlm_prof_context ctx = {.precision = TLM_PRECISION_FP32, .d_head = size % 2 ? 64 : 0};
    for (int ph = 0; ph < TLM_PHASE_COUNT; ph++) ctx.wall_ms[ph] = NAN;
    tlm_prof_run run = {.key = "exec", .p = p, .unprofiled_step_ms = NAN};
    if (tlm_profile_summarize(p, &ctx, &run.s) == TLM_OK) {
        tlm_report *rep = NULL;
        char *argv[] = {"tlm", "profile", "--exec", "--", "fuzz", NULL};
        fuzz_require(tlm_report_open(&rep, "tlm profile", TLM_FORMAT_JSON, report_path, 5, argv) == TLM_OK);
        tlm_report_meta_str(rep, "device", p->device);
        tlm_prof_tables t = {.top = 15, .layers = true};
        for (int ph = 0; ph < TLM_PHASE_COUNT; ph++) t.phase[ph] = true;
        tlm_prof_write_tables(rep, &run, 1, true, &t);
        fuzz_require(tlm_report_close(rep, true) == TLM_OK);
        fuzz_require(tlm_profile_write_trace(trace_path, &p, 1) == TLM_OK);
    }
    tlm_prof_summary_free(&run.s);
    tlm_profile_free(p);
    return 0;
}
