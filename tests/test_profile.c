/* test_profile.c — the profiler (profile.h) on the CPU, everything but CUPTI itself:
 * 1. the profile as data: strings interned once, the file the injection library writes read back
 *    exactly, a truncated or foreign file refused;
 * 2. kernel names: demangled and shortened (templates kept, namespaces, return type, parameters
 *    and CUTLASS's wrapper dropped; cut with "..."); classes from ops, stages and names;
 * 3. attribution: tlm's launches and graph nodes (a replayed kernel gets its op from the node and
 *    its step from the graph launch), a foreign program's NVTX ranges by time and thread (a launch
 *    from a thread without ranges falls in another thread's range, as PyTorch's backward does);
 * 4. the tables and findings of a synthetic profile with a known leader: warm-up left out, calls
 *    per step, shares, cuBLASLt's two kernels per GEMM counted per call, graph replays counted as
 *    calls, the GEMM shares, the attention stages against their FLOP ratio; a second profile
 *    where another kernel leads forward + backward;
 * 5. a real CPU run (tlm_bench_run with the profiler attached): per phase the ops' time adds up to
 *    the phase measured by the bench (and the layers to the phase), the op counts per pass follow
 *    the model, the attention op's FLOPs are ops.def's, the memory counter's peak is the bench's;
 * 6. the trace: valid JSON in the trace-event format (every event has ph, ts, pid, tid; B/E pairs
 *    nest per track in order and in time), kernels on stream tracks, a counter track; an
 *    unwritable path gives an error and no file. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_check.h"
#include "tlm/bench.h"
#include "tlm/profile.h"

/* ---- helpers to build profiles by hand ------------------------------------------------------------ */

static int32_t add_range(tlm_profile *p, const char *name, int kind, int64_t b, int64_t e, uint32_t thread,
                         int32_t parent, tlm_scope scope) {
    const tlm_prof_range r = {tlm_profile_intern(p, name), kind, b, e, thread, parent, scope};
    return (int32_t)tlm_profile_add_range(p, &r);
}

static tlm_scope scope(tlm_phase ph, int layer, int step, bool warmup) {
    return (tlm_scope){.phase = ph, .layer = layer, .step = step, .warmup = warmup};
}

/* an activity already attributed (as the CPU recorder makes them) */
static void add_act(tlm_profile *p, const char *name, tlm_prof_kind kind, int64_t b, int64_t us, int32_t op,
                    int32_t range, tlm_phase ph, int layer, int step, bool warmup, uint32_t corr, uint64_t node) {
    const tlm_prof_activity a = {.kind = kind, .name = tlm_profile_intern(p, name), .start_ns = b,
                                 .end_ns = b + us * 1000, .correlation = corr, .graph_node = node, .op = op,
                                 .range = range, .phase = ph, .layer = layer, .step = step, .warmup = warmup};
    tlm_profile_add_activity(p, &a);
}

static int32_t add_op(tlm_profile *p, tlm_op_id id, tlm_scope sc, double flops, double bytes) {
    const tlm_prof_op o = {.op = id, .scope = sc, .flops = flops, .bytes = bytes};
    return (int32_t)tlm_profile_add_op(p, &o);
}

/* ---- 1. data and files ------------------------------------------------------------------------------- */

static void test_data_and_file(void) {
    tlm_profile *p;
    die_on(tlm_profile_create(&p), "profile");
    const int32_t a = tlm_profile_intern(p, "matmul_forward"), b = tlm_profile_intern(p, "softmax");
    check(a >= 0 && b >= 0 && a != b && tlm_profile_intern(p, "matmul_forward") == a,
          "a string is interned once: ids %d, %d, again %d", a, b, tlm_profile_intern(p, "matmul_forward"));
    check(strcmp(tlm_profile_str(p, b), "softmax") == 0 && strcmp(tlm_profile_str(p, 999), "?") == 0,
          "ids give their strings back; an unknown id gives \"?\"");
    for (int i = 0; i < 3000; i++) { /* enough to rehash the table several times */
        char s[32];
        snprintf(s, sizeof s, "kernel_%d", i);
        tlm_profile_intern(p, s);
    }
    check(tlm_profile_intern(p, "kernel_1234") == tlm_profile_intern(p, "kernel_1234") && p->n_strings == 3002,
          "3000 more strings: %zu in the table, lookups stable after rehashing", p->n_strings);
    snprintf(p->title, sizeof p->title, "python3 peer.py");
    p->foreign = true;
    p->end_ns = 123456789;
    const int32_t r = add_range(p, "forward", TLM_PROF_RANGE_NVTX, 10, 5000, 77, -1, scope(0, -1, -1, false));
    add_act(p, "gemm_a", TLM_PROF_KERNEL, 100, 5, -1, r, TLM_PHASE_SETUP, -1, -1, false, 42, 0);
    const tlm_prof_launch l = {42, -1, -1, 90, 77};
    tlm_profile_add_launch(p, &l);
    const tlm_prof_mem_sample m = {50, 4096};
    tlm_profile_add_mem(p, &m);

    FILE *f = tmpfile();
    die_on(f ? TLM_OK : TLM_ERR_IO, "tmpfile");
    check_status(tlm_profile_write(p, f), TLM_OK, NULL, "the profile written");
    tlm_profile *q = NULL;
    check_status(tlm_profile_read(&q, f, "tmp"), TLM_OK, NULL, "and read back");
    if (q) {
        check(q->n_acts == 1 && q->n_ranges == 1 && q->n_launches == 1 && q->n_mem == 1 && q->n_strings == p->n_strings &&
                  q->foreign && q->end_ns == 123456789 && strcmp(q->title, p->title) == 0,
              "same counts, flags, title and end (%zu strings)", q->n_strings);
        check(memcmp(q->acts, p->acts, sizeof *q->acts) == 0 && memcmp(q->ranges, p->ranges, sizeof *q->ranges) == 0 &&
                  strcmp(tlm_profile_str(q, q->acts[0].name), "gemm_a") == 0 &&
                  strcmp(tlm_profile_str(q, 3001), tlm_profile_str(p, 3001)) == 0,
              "records and strings identical");
        tlm_profile_free(q);
        q = NULL;
    }
    /* truncated: every prefix shorter than the file is refused */
    fflush(f);
    const long size = ftell(f);
    char *bytes = malloc((size_t)size);
    rewind(f);
    const bool got = fread(bytes, 1, (size_t)size, f) == (size_t)size;
    int refused = 0, tried = 0;
    for (long cut = 0; got && cut < size; cut += size / 37 + 1) {
        FILE *g = tmpfile();
        fwrite(bytes, 1, (size_t)cut, g);
        tried++;
        if (tlm_profile_read(&q, g, "cut") == TLM_ERR_FORMAT && !q) refused++;
        tlm_profile_free(q);
        q = NULL;
        fclose(g);
    }
    check(got && tried > 30 && refused == tried, "truncated files refused as malformed: %d of %d", refused, tried);
    FILE *g = tmpfile();
    fputs("{\"traceEvents\": []}                                                                      ", g);
    check_status(tlm_profile_read(&q, g, "other.json"), TLM_ERR_FORMAT, "not a tlm profile", "a JSON file");
    fclose(g);
    /* a parent after its child would loop: refused */
    p->ranges[0].parent = 0;
    rewind(f);
    FILE *h = tmpfile();
    tlm_profile_write(p, h);
    check_status(tlm_profile_read(&q, h, "loop"), TLM_ERR_FORMAT, "range 0", "a range that encloses itself");
    fclose(h);
    p->ranges[0].parent = -1;
    /* a record whose index, enum, bool or time is out of range is refused, never used (an index
     * into the summary's tables: found by tests/fuzz/fuzz_profile.c) */
    const tlm_prof_activity good = p->acts[0];
    const char *what[] = {"phase 65536", "layer 2^31-1", "op 5 of 0", "range -2", "warmup byte 2", "kind 9",
                          "end before start"};
    for (int k = 0; k < 7; k++) {
        tlm_prof_activity *x = &p->acts[0];
        *x = good;
        if (k == 0) x->phase = (tlm_phase)65536;
        if (k == 1) x->layer = INT32_MAX;
        if (k == 2) x->op = 5;
        if (k == 3) x->range = -2;
        if (k == 4) memset(&x->warmup, 2, 1);
        if (k == 5) x->kind = (tlm_prof_kind)9;
        if (k == 6) x->end_ns = x->start_ns - 1;
        FILE *c = tmpfile();
        tlm_profile_write(p, c);
        char label[64];
        snprintf(label, sizeof label, "an activity's %s", what[k]);
        check_status(tlm_profile_read(&q, c, "bad"), TLM_ERR_FORMAT, "bad: activity 0 is malformed", label);
        check(q == NULL, "%s: no profile", label);
        fclose(c);
    }
    p->acts[0] = good;
    free(bytes);
    fclose(f);
    tlm_profile_free(p);
}

/* ---- 2. names and classes ------------------------------------------------------------------------------ */

static void test_names_and_classes(void) {
    static const struct {
        const char *raw, *want;
    } cases[] = {
        {"_Z22rmsnorm_forward_kernelIfLi4EEvPT_PfPKfi", "rmsnorm_forward_kernel<float, 4>"},
        {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_",
         "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, array<char*, 3ul> >"},
        {"void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 8, false>(float*, "
         "float const*, int, int, int)", "softmax_warp_forward<float, float, float, 8, false>"},
        {"void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>("
         "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)", "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4"},
        {"nvjet_tst_128x192_64x4_2x1_v_bz_coopB_TNT", "nvjet_tst_128x192_64x4_2x1_v_bz_coopB_TNT"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[256];
        tlm_kernel_name_short(cases[i].raw, out, sizeof out, 96);
        check(strcmp(out, cases[i].want) == 0, "name %zu: %.50s... -> %s", i, cases[i].raw, out);
    }
    char out[64];
    tlm_kernel_name_short("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", out,
                          sizeof out, 40);
    check(strlen(out) == 40 && strcmp(out + 37, "...") == 0, "a long name cut to 40 characters: %s", out);

    tlm_profile *p;
    die_on(tlm_profile_create(&p), "profile");
    const int32_t op_norm = add_op(p, TLM_OP_RMSNORM_FORWARD, scope(TLM_PHASE_FORWARD, 0, 0, false), 1, 1);
    const int32_t op_attn = add_op(p, TLM_OP_ATTENTION_FORWARD, scope(TLM_PHASE_FORWARD, 0, 0, false), 1, 1);
    const int32_t stage = add_range(p, "computing attention scores", TLM_RANGE_STAGE, 0, 10, 0, -1, scope(1, 0, 0, 0));
    struct {
        const char *name;
        tlm_prof_kind kind;
        int32_t op, range;
        tlm_kernel_class want;
    } k[] = {
        {"memcpy HtoD", TLM_PROF_MEMCPY, -1, -1, TLM_KCLASS_MEMORY},
        {"memset", TLM_PROF_MEMSET, op_norm, -1, TLM_KCLASS_MEMORY},
        {"nvjet_tst_128x192", TLM_PROF_KERNEL, op_attn, -1, TLM_KCLASS_GEMM},     /* a GEMM inside attention */
        {"attention_forward: computing attention scores", TLM_PROF_KERNEL, op_attn, stage, TLM_KCLASS_GEMM},
        {"softmax_kernel<float>", TLM_PROF_KERNEL, op_attn, -1, TLM_KCLASS_ATTENTION},
        {"rmsnorm_forward_kernel<float, 4>", TLM_PROF_KERNEL, op_norm, -1, TLM_KCLASS_NORMALIZATION},
        {"softmax_warp_forward<float>", TLM_PROF_KERNEL, -1, -1, TLM_KCLASS_ATTENTION}, /* foreign: by name */
        {"vectorized_layer_norm_kernel<float>", TLM_PROF_KERNEL, -1, -1, TLM_KCLASS_NORMALIZATION},
        {"multi_tensor_apply_kernel<AdamFunctor>", TLM_PROF_KERNEL, -1, -1, TLM_KCLASS_OPTIMIZER},
        {"vectorized_elementwise_kernel<4, CUDAFunctor_add<float> >", TLM_PROF_KERNEL, -1, -1, TLM_KCLASS_ELEMENTWISE},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        tlm_prof_activity a = tlm_prof_activity_blank(k[i].kind, tlm_profile_intern(p, k[i].name), 0, 1);
        a.op = k[i].op;
        a.range = k[i].range;
        const tlm_kernel_class c = tlm_profile_classify(p, &a);
        check(c == k[i].want, "class of %-55s %s (want %s)", k[i].name, tlm_kernel_class_name(c),
              tlm_kernel_class_name(k[i].want));
    }
    tlm_profile_free(p);
}

/* ---- 3. attribution -------------------------------------------------------------------------------------- */

static void test_resolve_tlm(void) {
    tlm_profile *p;
    die_on(tlm_profile_create(&p), "profile");
    /* warm-up step 1 (the capture), then step 0 whose forward launches the graph */
    const int32_t warm = add_range(p, "warmup step 1", TLM_RANGE_STEP, 0, 100, 0, -1, scope(0, -1, 1, true));
    const int32_t wfwd = add_range(p, "forward", TLM_RANGE_PHASE, 1, 99, 0, warm, scope(1, -1, 1, true));
    const int32_t wl3 = add_range(p, "layer 3", TLM_RANGE_LAYER, 2, 98, 0, wfwd, scope(1, 3, 1, true));
    const int32_t step = add_range(p, "step 0", TLM_RANGE_STEP, 200, 300, 0, -1, scope(0, -1, 0, false));
    const int32_t fwd = add_range(p, "forward", TLM_RANGE_PHASE, 201, 299, 0, step, scope(1, -1, 0, false));
    const int32_t op = add_op(p, TLM_OP_SWIGLU_FORWARD, scope(TLM_PHASE_FORWARD, 3, 1, true), 10, 20);
    const int32_t eager = add_op(p, TLM_OP_RMSNORM_FORWARD, scope(TLM_PHASE_FORWARD, 5, 0, false), 10, 20);
    const tlm_prof_graph_node created = {7, op, wl3}, cloned = {9, op, wl3};
    tlm_profile_add_node(p, &created);
    tlm_profile_add_node(p, &cloned);
    const tlm_prof_launch graph_launch = {500, -1, fwd, 0, 0}, eager_launch = {501, eager, fwd, 0, 0};
    tlm_profile_add_launch(p, &graph_launch);
    tlm_profile_add_launch(p, &eager_launch);
    tlm_prof_activity a = tlm_prof_activity_blank(TLM_PROF_KERNEL, tlm_profile_intern(p, "swiglu"), 210, 220);
    a.correlation = 500;
    a.graph_node = 9;
    tlm_profile_add_activity(p, &a);
    a.correlation = 501;
    a.graph_node = 0;
    tlm_profile_add_activity(p, &a);
    a.correlation = 999; /* no launch known */
    tlm_profile_add_activity(p, &a);
    tlm_profile_resolve(p);
    const tlm_prof_activity *r = p->acts;
    check(r[0].op == op && r[0].layer == 3 && r[0].phase == TLM_PHASE_FORWARD && r[0].step == 0 && !r[0].warmup &&
              r[0].range == wl3,
          "a replayed kernel: op and layer from its graph node (captured in warm-up step 1), step 0 from the graph "
          "launch (op %d layer %d step %d warmup %d)", r[0].op, r[0].layer, r[0].step, r[0].warmup);
    check(r[1].op == eager && r[1].layer == 5 && r[1].step == 0 && r[1].range == fwd,
          "an eager kernel: op, layer and step from its launch");
    check(r[2].op == -1 && r[2].range == -1 && r[2].step == 0 && !r[2].warmup && r[2].phase == TLM_PHASE_SETUP,
          "a kernel with no launch: no op, no phase, in the step begun last before it started (step %d)", r[2].step);
    check(p->ops[op].captured && !p->ops[eager].captured, "the op behind a graph node is marked captured");
    tlm_profile_free(p);
}

/* "layer N" past TLM_PROF_MAX_LAYER names no layer (the layer table is dense in the number) */
static void test_resolve_layer_bound(void) {
    const int layers[2] = {TLM_PROF_MAX_LAYER, 99999999};
    for (int k = 0; k < 2; k++) {
        tlm_profile *p;
        die_on(tlm_profile_create(&p), "profile");
        p->foreign = true;
        char name[32];
        snprintf(name, sizeof name, "layer %d", layers[k]);
        add_range(p, name, TLM_PROF_RANGE_NVTX, 0, 100, 1, -1, scope(0, -1, -1, false));
        const tlm_prof_launch l = {1, -1, -1, 50, 1};
        tlm_profile_add_launch(p, &l);
        tlm_prof_activity a = tlm_prof_activity_blank(TLM_PROF_KERNEL, tlm_profile_intern(p, "k"), 60, 70);
        a.correlation = 1;
        tlm_profile_add_activity(p, &a);
        tlm_profile_resolve(p);
        const int want = k ? -1 : TLM_PROF_MAX_LAYER;
        check(p->acts[0].range == 0 && p->acts[0].layer == want, "an NVTX range \"%s\": layer %d (want %d)", name,
              p->acts[0].layer, want);
        tlm_profile_free(p);
    }
}

static void test_resolve_foreign(void) {
    tlm_profile *p;
    die_on(tlm_profile_create(&p), "profile");
    p->foreign = true;
    const tlm_scope none = scope(0, -1, -1, false);
    const uint32_t main_t = 100, autograd = 101;
    const int32_t w = add_range(p, "warmup step 0", TLM_PROF_RANGE_NVTX, 0, 1000, main_t, -1, none);
    const int32_t wf = add_range(p, "forward", TLM_PROF_RANGE_NVTX, 10, 500, main_t, w, none);
    const int32_t s = add_range(p, "step 4", TLM_PROF_RANGE_NVTX, 2000, 3000, main_t, -1, none);
    const int32_t f = add_range(p, "forward", TLM_PROF_RANGE_NVTX, 2010, 2500, main_t, s, none);
    const int32_t sm = add_range(p, "computing softmax", TLM_PROF_RANGE_NVTX, 2100, 2200, main_t, f, none);
    const int32_t l2 = add_range(p, "layer 2", TLM_PROF_RANGE_NVTX, 2300, 2400, main_t, f, none);
    const int32_t b = add_range(p, "backward", TLM_PROF_RANGE_NVTX, 2600, 2900, main_t, s, none);
    (void)wf;
    const struct {
        uint32_t corr;
        int64_t t;
        uint32_t thread;
    } launches[] = {{1, 50, main_t}, {2, 2150, main_t}, {3, 2700, autograd}, {4, 2350, main_t}, {5, 2550, main_t},
                    {6, 5000, main_t}};
    for (size_t i = 0; i < sizeof launches / sizeof launches[0]; i++) {
        const tlm_prof_launch l = {launches[i].corr, -1, -1, launches[i].t, launches[i].thread};
        tlm_profile_add_launch(p, &l);
        tlm_prof_activity a = tlm_prof_activity_blank(TLM_PROF_KERNEL, tlm_profile_intern(p, "k"), 9000, 9001);
        a.correlation = launches[i].corr;
        tlm_profile_add_activity(p, &a);
    }
    tlm_profile_resolve(p);
    const tlm_prof_activity *a = p->acts;
    check(a[0].warmup && a[0].phase == TLM_PHASE_FORWARD && a[0].step == 0, "a launch in \"warmup step 0\": warm-up");
    check(a[1].range == sm && a[1].phase == TLM_PHASE_FORWARD && a[1].step == 4 && !a[1].warmup,
          "a launch inside \"computing softmax\": that range, phase forward, step 4");
    check(a[2].range == b && a[2].phase == TLM_PHASE_BACKWARD && a[2].step == 4,
          "a launch from a thread with no ranges (PyTorch's autograd thread) falls in the main thread's \"backward\"");
    check(a[3].layer == 2 && a[3].range == l2, "\"layer 2\" gives the layer");
    check(a[4].range == s && a[4].phase == TLM_PHASE_SETUP, "between forward and backward: the step, no phase");
    check(a[5].range == -1 && a[5].step == -1, "after every range: none");
    tlm_profile_free(p);
}

/* ---- 4. tables and findings of a synthetic profile ---------------------------------------------------------- */

/* Two profiled steps and a warm-up step. Per profiled step, forward: a GEMM op whose 2 cuBLASLt
 * kernels ("gemm_big" 100 us + "gemm_tail" 10 us) run 3 times (replayed from a graph: 3 calls, 6
 * kernels), the naive attention (scores 20 us, softmax 50 us, final 20 us), an rmsnorm (30 us);
 * backward: gemm_big 6 x 100 us and `bwd_other` us of elementwise work; optimizer: adamw 200 us.
 * The warm-up step has a 1 s kernel that would lead everything if it were counted. */
static bool synthetic_overlap; /* bwd_other runs beside the backward's GEMMs (a side stream) */
static tlm_profile *synthetic(int64_t bwd_other) {
    tlm_profile *p;
    die_on(tlm_profile_create(&p), "profile");
    p->resolved = true;
    add_act(p, "warmup_giant", TLM_PROF_KERNEL, 0, 1000000, -1, -1, TLM_PHASE_FORWARD, -1, 0, true, 0, 0);
    for (int st = 0; st < 2; st++) {
        const int64_t t0 = 2000000000LL + st * 100000000LL;
        const int32_t gemm = add_op(p, TLM_OP_MATMUL_FORWARD, scope(TLM_PHASE_FORWARD, 0, st, false), 2e9, 1e6);
        const int32_t attn = add_op(p, TLM_OP_ATTENTION_FORWARD, scope(TLM_PHASE_FORWARD, 0, st, false), 1e8, 1e6);
        const int32_t norm = add_op(p, TLM_OP_RMSNORM_FORWARD, scope(TLM_PHASE_FORWARD, -1, st, false), 1e5, 3e6);
        const int32_t bwd = add_op(p, TLM_OP_MATMUL_BACKWARD, scope(TLM_PHASE_BACKWARD, 1, st, false), 4e9, 1e6);
        const int32_t upd = add_op(p, TLM_OP_ADAMW_STEP, scope(TLM_PHASE_OPTIMIZER, -1, st, false), 1e6, 6e6);
        int64_t t = t0;
        for (int replay = 0; replay < 3; replay++) {
            const uint32_t launch = 70 + 10 * st + replay; /* each graph launch has its own correlation */
            add_act(p, "gemm_big", TLM_PROF_KERNEL, t, 100, gemm, -1, TLM_PHASE_FORWARD, 0, st, false, launch, 5);
            add_act(p, "gemm_tail", TLM_PROF_KERNEL, t + 100000, 10, gemm, -1, TLM_PHASE_FORWARD, 0, st, false, launch,
                    6);
            t += 200000;
        }
        const int32_t sc = add_range(p, "computing attention scores", TLM_RANGE_STAGE, t, t + 20000, 0, -1,
                                     scope(1, 0, st, false));
        add_act(p, "attn_scores_gemm", TLM_PROF_KERNEL, t, 20, attn, sc, TLM_PHASE_FORWARD, 0, st, false, 0, 0);
        const int32_t sm = add_range(p, "computing softmax", TLM_RANGE_STAGE, t + 30000, t + 80000, 0, -1,
                                     scope(1, 0, st, false));
        add_act(p, "softmax_k", TLM_PROF_KERNEL, t + 30000, 50, attn, sm, TLM_PHASE_FORWARD, 0, st, false, 0, 0);
        const int32_t fm = add_range(p, "final matmul", TLM_RANGE_STAGE, t + 90000, t + 110000, 0, -1,
                                     scope(1, 0, st, false));
        add_act(p, "attn_final_gemm", TLM_PROF_KERNEL, t + 90000, 20, attn, fm, TLM_PHASE_FORWARD, 0, st, false, 0, 0);
        add_act(p, "rmsnorm_k", TLM_PROF_KERNEL, t + 120000, 30, norm, -1, TLM_PHASE_FORWARD, -1, st, false, 0, 0);
        t += 1000000;
        const int64_t bwd_start = t;
        for (int k = 0; k < 6; k++, t += 200000)
            add_act(p, "gemm_big", TLM_PROF_KERNEL, t, 100, bwd, -1, TLM_PHASE_BACKWARD, 1, st, false, 0, 0);
        add_act(p, "bwd_other", TLM_PROF_KERNEL, synthetic_overlap ? bwd_start : t, bwd_other, -1, -1,
                TLM_PHASE_BACKWARD, 1, st, false, 0, 0);
        t += bwd_other * 1000 + 1000;
        add_act(p, "adamw", TLM_PROF_KERNEL, t, 200, upd, -1, TLM_PHASE_OPTIMIZER, -1, st, false, 0, 0);
    }
    return p;
}

static const tlm_prof_kernel_row *krow(const tlm_prof_summary *s, tlm_phase ph, const char *name) {
    for (size_t i = 0; i < s->n_kernels; i++)
        if (s->kernels[i].phase == ph && strcmp(s->kernels[i].name, name) == 0) return &s->kernels[i];
    return NULL;
}

static const tlm_prof_op_row *orow(const tlm_prof_summary *s, tlm_phase ph, tlm_op_id op) {
    for (size_t i = 0; i < s->n_ops; i++)
        if (s->ops[i].phase == ph && s->ops[i].op == op) return &s->ops[i];
    return NULL;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

static bool says(const tlm_prof_findings *f, const char *needle) {
    for (int i = 0; i < f->n_text; i++)
        if (strstr(f->text[i], needle)) return true;
    return false;
}

static void test_synthetic_findings(void) {
    tlm_profile *p = synthetic(400);
    const tlm_ceilings ceil = {.gemm_tflops = {50, 400, 800, 800}, .copy_gbps = 3000};
    tlm_prof_context ctx = {.precision = TLM_PRECISION_FP32, .d_head = 64, .ceilings = &ceil};
    for (int i = 0; i < TLM_PHASE_COUNT; i++) ctx.wall_ms[i] = NAN;
    ctx.wall_ms[TLM_PHASE_FORWARD] = 0.8;
    tlm_prof_summary s;
    die_on(tlm_profile_summarize(p, &ctx, &s), "summarize");
    const double fwd_us = 3 * 110 + 20 + 50 + 20 + 30;
    check(s.steps == 2 && near(s.phase[TLM_PHASE_FORWARD].busy_us, fwd_us) &&
              near(s.phase[TLM_PHASE_BACKWARD].busy_us, 1000) && near(s.phase[TLM_PHASE_OPTIMIZER].busy_us, 200),
          "2 profiled steps; forward %.0f us, backward %.0f, optimizer %.0f per step (warm-up left out)",
          s.phase[TLM_PHASE_FORWARD].busy_us, s.phase[TLM_PHASE_BACKWARD].busy_us, s.phase[TLM_PHASE_OPTIMIZER].busy_us);
    const tlm_prof_kernel_row *g = krow(&s, TLM_PHASE_FORWARD, "gemm_big");
    check(g && near(g->calls_per_step, 3) && near(g->per_step_us, 300) && near(g->mean_us, 100) &&
              near(g->pct_of_phase, 100.0 * 300 / fwd_us) && g->cls == TLM_KCLASS_GEMM && !krow(&s, 0, "warmup_giant") &&
              !krow(&s, TLM_PHASE_FORWARD, "warmup_giant"),
          "gemm_big in forward: 3 calls per step, 300 us, %.1f%% of the forward, a GEMM", g ? g->pct_of_phase : -1);
    double pct = 0;
    for (size_t i = 0; i < s.n_kernels; i++)
        if (s.kernels[i].phase == TLM_PHASE_FORWARD) pct += s.kernels[i].pct_of_phase;
    check(fabs(pct - 100) < 1e-9, "the forward's kernel shares add up to 100%% (%.12f)", pct);
    const tlm_prof_op_row *mm = orow(&s, TLM_PHASE_FORWARD, TLM_OP_MATMUL_FORWARD);
    check(mm && near(mm->calls_per_step, 3) && near(mm->kernels_per_call, 2) && near(mm->flops_per_step, 3 * 2e9) &&
              near(mm->per_step_us, 330),
          "matmul_forward replayed 3 times per step: 3 calls of 2 kernels (cuBLASLt), 3 x 2 GFLOP, 330 us");
    if (mm)
        check(near(mm->tflops, 6e9 / 330e-6 / 1e12) && near(mm->pct_of_peak_flops, 100 * mm->tflops / 50) &&
                  near(mm->pct_of_roofline, fmax(mm->pct_of_peak_flops, mm->pct_of_peak_bw)) && !mm->memory_bound,
              "its roofline: %.2f TFLOP/s = %.1f%% of the fp32 ceiling, compute-bound", mm->tflops,
              mm->pct_of_peak_flops);
    const tlm_prof_op_row *nm = orow(&s, TLM_PHASE_FORWARD, TLM_OP_RMSNORM_FORWARD);
    check(nm && nm->memory_bound && near(nm->gbps, 3e6 / 30e-6 / 1e9) && near(nm->pct_of_roofline, nm->pct_of_peak_bw),
          "rmsnorm: memory-bound, %.0f GB/s, its roofline fraction is the bandwidth's", nm ? nm->gbps : -1);
    double layers = 0;
    for (size_t i = 0; i < s.n_layers; i++)
        if (s.layers[i].phase == TLM_PHASE_FORWARD) layers += s.layers[i].per_step_us;
    check(near(layers, fwd_us), "the forward's layers (and outside them) add up to the phase: %.0f us", layers);

    const tlm_prof_findings *f = &s.findings;
    check(f->fwd_leader && strcmp(f->fwd_leader, "gemm_big") == 0 && near(f->fwd_leader_calls_per_step, 3) &&
              near(f->fwd_leader_pct, 100.0 * 300 / fwd_us),
          "finding: the forward's leader is gemm_big, 3 calls per forward, %.1f%%", f->fwd_leader_pct);
    check(f->same_leader && near(f->fb_leader_pct, 100.0 * 900 / (fwd_us + 1000)),
          "finding: the same kernel leads forward + backward (%.1f%%)", f->fb_leader_pct);
    const double total = fwd_us + 1000 + 200, gemm = 3 * 110 + 20 + 20 + 600;
    check(near(f->gemm_pct_forward, 100.0 * (330 + 40) / fwd_us) && near(f->gemm_pct_step, 100 * gemm / total) &&
              f->step_has_optimizer,
          "finding: GEMM share %.1f%% of the forward, %.1f%% of the step with AdamW", f->gemm_pct_forward,
          f->gemm_pct_step);
    check(f->n_non_gemm == 4 && strcmp(f->non_gemm[0], "bwd_other") == 0 && strcmp(f->non_gemm[1], "adamw") == 0 &&
              near(f->non_gemm_share[0], 100.0 * 400 / total),
          "finding: the non-GEMM kernels that matter, largest first: %s, %s, ...", f->non_gemm[0], f->non_gemm[1]);
    check(near(f->attn_softmax_ms, 0.05) && near(f->attn_scores_ms, 0.02) && near(f->attn_final_ms, 0.02) &&
              near(f->attn_matmul_flops_per_softmax_flop, 4 * 64 / 5.0),
          "finding: softmax 0.05 ms against the matmuls' 0.04 ms, FLOP ratio 51.2");
    check(says(f, "gemm_big") && says(f, "0.800 ms wall-clock") && says(f, "1.25x their time") && says(f, "1/51.2"),
          "the sentences say the leader, the wall-clock, the time ratio and the FLOP ratio");
    tlm_prof_summary_free(&s);
    tlm_profile_free(p);

    /* a backward with 2 ms of elementwise work: another kernel leads forward + backward */
    p = synthetic(2000);
    die_on(tlm_profile_summarize(p, &ctx, &s), "summarize");
    check(!s.findings.same_leader && s.findings.fb_leader && strcmp(s.findings.fb_leader, "bwd_other") == 0 &&
              says(&s.findings, "another kernel leads forward + backward: bwd_other"),
          "finding: with 2 ms of backward elementwise work, bwd_other leads forward + backward");
    check(!says(&s.findings, "overlap"), "finding: no overlap said where the backward's kernels run one after another");
    tlm_prof_summary_free(&s);
    tlm_profile_free(p);

    /* the same 1 ms beside the backward's GEMMs (a side stream): 1.6 ms of kernels in a 1.1 ms span */
    synthetic_overlap = true;
    p = synthetic(1000);
    synthetic_overlap = false;
    die_on(tlm_profile_summarize(p, &ctx, &s), "summarize");
    check(near(s.phase[TLM_PHASE_BACKWARD].busy_us, 1600) && near(s.phase[TLM_PHASE_BACKWARD].span_us, 1100) &&
              says(&s.findings, "backward: kernels overlap on more than one stream: 1.600 ms of kernel time per step "
                                "within 1.100 ms") &&
              !says(&s.findings, "forward: kernels overlap"),
          "finding: overlapping backward kernels (%.0f us in a %.0f us span) are said to overlap, the forward not",
          s.phase[TLM_PHASE_BACKWARD].busy_us, s.phase[TLM_PHASE_BACKWARD].span_us);
    tlm_prof_summary_free(&s);
    tlm_profile_free(p);
}

/* ---- 5. a real run on the CPU ------------------------------------------------------------------------------ */

static void test_cpu_run(tlm_backend *be, const char *trace_path) {
    tlm_bench_case c = {.batch_size = 2, .context_length = 64, .warmup = 1, .steps = 2, .pass = TLM_PASS_TRAIN,
                        .precision = TLM_PRECISION_FP32, .graphs = true, .attention = TLM_ATTENTION_NAIVE, .seed = 1};
    snprintf(c.model_name, sizeof c.model_name, "custom");
    c.config = (tlm_config){.vocab_size = 1024, .context_length = 64, .d_model = 256, .num_layers = 2,
                            .num_heads = 4, .d_ff = 768, .rope_theta = 10000, .rmsnorm_eps = 1e-5f};
    tlm_profiler *pr;
    die_on(tlm_profiler_start(&pr, be, "custom ctx 64"), "profiler");
    tlm_bench_result r;
    die_on(tlm_bench_run(be, &c, &r), "bench");
    die_on(r.status, "bench case");
    tlm_profile *p;
    die_on(tlm_profiler_stop(pr, &p), "profiler stop");
    tlm_prof_context ctx = {.precision = c.precision, .d_head = 64};
    ctx.wall_ms[TLM_PHASE_FORWARD] = r.forward.mean_ms;
    ctx.wall_ms[TLM_PHASE_BACKWARD] = r.backward.mean_ms;
    ctx.wall_ms[TLM_PHASE_OPTIMIZER] = r.optimizer.mean_ms;
    tlm_prof_summary s;
    die_on(tlm_profile_summarize(p, &ctx, &s), "summarize");
    const double wall[3] = {r.forward.mean_ms, r.backward.mean_ms, r.optimizer.mean_ms};
    double ops_sum = 0;
    for (int ph = TLM_PHASE_FORWARD; ph <= TLM_PHASE_OPTIMIZER; ph++) {
        const double busy_ms = s.phase[ph].busy_us * 1e-3, w = wall[ph - 1];
        ops_sum += busy_ms;
        check(busy_ms <= w * 1.001 && busy_ms >= 0.9 * w, "%-9s the ops' time %.3f ms per step is 90-100%% of the "
              "phase the bench measured, %.3f ms (%.1f%%)", tlm_phase_name((tlm_phase)ph), busy_ms, w, 100 * busy_ms / w);
        double layers = 0, ops = 0;
        int n_layers = 0;
        for (size_t i = 0; i < s.n_layers; i++)
            if (s.layers[i].phase == (tlm_phase)ph) {
                layers += s.layers[i].per_step_us;
                n_layers++;
            }
        for (size_t i = 0; i < s.n_ops; i++)
            if (s.ops[i].phase == (tlm_phase)ph) ops += s.ops[i].per_step_us;
        check(fabs(layers - s.phase[ph].busy_us) <= 1e-6 * s.phase[ph].busy_us &&
                  fabs(ops - s.phase[ph].busy_us) <= 1e-6 * s.phase[ph].busy_us &&
                  n_layers == (ph == TLM_PHASE_OPTIMIZER ? 1 : c.config.num_layers + 1),
              "%-9s its %d layer rows and its op rows add up to it", tlm_phase_name((tlm_phase)ph), n_layers);
    }
    check(ops_sum <= r.step.mean_ms * 1.001 && ops_sum >= 0.9 * r.step.mean_ms,
          "the three phases' ops add up to %.1f%% of the measured step (%.3f of %.3f ms)", 100 * ops_sum / r.step.mean_ms,
          ops_sum, r.step.mean_ms);
    double calls[TLM_PHASE_COUNT] = {0};
    for (size_t i = 0; i < s.n_ops; i++) calls[s.ops[i].phase] += s.ops[i].calls_per_step;
    const int L = c.config.num_layers;
    check(near(calls[TLM_PHASE_FORWARD], 1 + 9 * L + 4) && near(calls[TLM_PHASE_BACKWARD], 3 + 9 * L + 1) &&
              near(calls[TLM_PHASE_OPTIMIZER], 1),
          "ops per step: forward %g (%d), backward %g (%d), optimizer %g", calls[TLM_PHASE_FORWARD], 1 + 9 * L + 4,
          calls[TLM_PHASE_BACKWARD], 3 + 9 * L + 1, calls[TLM_PHASE_OPTIMIZER]);
    /* the CPU's naive attention announces its three stages (src/cpu/attention.c): one row each */
    const tlm_prof_op_row *at = orow(&s, TLM_PHASE_FORWARD, TLM_OP_ATTENTION_FORWARD);
    const tlm_prof_kernel_row *ak[3] = {krow(&s, TLM_PHASE_FORWARD, "attention_forward: computing attention scores"),
                                        krow(&s, TLM_PHASE_FORWARD, "attention_forward: computing softmax"),
                                        krow(&s, TLM_PHASE_FORWARD, "attention_forward: final matmul")};
    check(at && ak[0] && ak[1] && ak[2] && near(at->calls_per_step, L) && near(ak[0]->calls_per_step, L) &&
              near(ak[1]->calls_per_step, L) && near(ak[2]->calls_per_step, L) &&
              near(at->flops_per_step, L * (4.0 * 2 * 4 * 64.0 * 64 * 64 + 5.0 * 2 * 4 * 64.0 * 64)),
          "attention_forward: %d calls per step, its three stages timed apart, ops.def's FLOPs", L);
    check(s.unattributed == 0 && s.findings.fwd_leader && says(&s.findings, "wall-clock"),
          "every op attributed; forward's leading op %s", s.findings.fwd_leader);
    uint64_t peak = 0;
    for (size_t i = 0; i < p->n_mem; i++)
        if (p->mem[i].in_use > peak) peak = p->mem[i].in_use;
    check(p->n_mem > 10 && peak == r.peak_bytes, "the memory counter: %zu samples, peak %llu = the bench's %zu", p->n_mem,
          (unsigned long long)peak, r.peak_bytes);
    for (int i = 0; i < s.findings.n_text; i++) printf("#   finding: %s\n", s.findings.text[i]);
    tlm_prof_summary_free(&s);

    /* the trace of this run and of the synthetic profile, in one file */
    tlm_profile *syn = synthetic(400);
    tlm_profile *both[2] = {p, syn};
    check_status(tlm_profile_write_trace(trace_path, both, 2), TLM_OK, NULL, "the trace written");
    tlm_profile_free(syn);
    tlm_profile_free(p);
}

/* ---- 6. the trace ------------------------------------------------------------------------------------------- */

static void test_trace_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && (text = malloc((size_t)n + 1))) {
        rewind(f);
        n = (long)fread(text, 1, (size_t)n, f);
        text[n] = '\0';
    }
    if (f) fclose(f);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
    check(cJSON_IsArray(events) && cJSON_GetArraySize(events) > 100, "the trace is JSON with %d traceEvents",
          events ? cJSON_GetArraySize(events) : -1);
    int missing = 0, bad_nesting = 0, backwards = 0, b_count = 0, x_count = 0, c_count = 0, m_count = 0, neg = 0;
    /* B/E per (pid, tid): a stack of names and the last timestamp */
    enum { TRACKS = 64, DEPTH = 64 };
    struct {
        int pid;
        double tid, last_ts;
        const char *stack[DEPTH];
        int depth;
    } tracks[TRACKS];
    int n_tracks = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *ts = cJSON_GetObjectItem(e, "ts"),
                    *pid = cJSON_GetObjectItem(e, "pid"), *tid = cJSON_GetObjectItem(e, "tid"),
                    *name = cJSON_GetObjectItem(e, "name");
        if (!cJSON_IsString(ph) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(pid) || !cJSON_IsNumber(tid) ||
            !cJSON_IsString(name)) {
            missing++;
            continue;
        }
        const char k = ph->valuestring[0];
        if (k == 'X') {
            x_count++;
            const cJSON *dur = cJSON_GetObjectItem(e, "dur");
            if (!cJSON_IsNumber(dur) || dur->valuedouble < 0) neg++;
        }
        if (k == 'C') c_count += cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "bytes"));
        if (k == 'M') m_count++;
        if (k != 'B' && k != 'E') continue;
        int t = 0;
        while (t < n_tracks && (tracks[t].pid != pid->valueint || tracks[t].tid != tid->valuedouble)) t++;
        if (t == n_tracks && n_tracks < TRACKS) {
            tracks[n_tracks].pid = pid->valueint;
            tracks[n_tracks].tid = tid->valuedouble;
            tracks[n_tracks].last_ts = -1e300;
            tracks[n_tracks++].depth = 0;
        }
        if (t == TRACKS) continue;
        if (ts->valuedouble < tracks[t].last_ts) backwards++;
        tracks[t].last_ts = ts->valuedouble;
        if (k == 'B') {
            b_count++;
            if (tracks[t].depth < DEPTH) tracks[t].stack[tracks[t].depth++] = name->valuestring;
        } else if (tracks[t].depth == 0 || strcmp(tracks[t].stack[--tracks[t].depth], name->valuestring) != 0) {
            bad_nesting++;
        }
    }
    for (int t = 0; t < n_tracks; t++) bad_nesting += tracks[t].depth;
    check(missing == 0, "every event has ph, name, ts, pid and tid (%d without)", missing);
    check(b_count > 50 && bad_nesting == 0 && backwards == 0,
          "%d B/E ranges on %d host tracks nest (each E closes the innermost open B of its name), in time order",
          b_count, n_tracks);
    check(x_count > 50 && neg == 0 && c_count > 10 && m_count >= 4,
          "%d kernels/ops as X events with durations, %d counter samples, %d metadata events", x_count, c_count,
          m_count);
    cJSON_Delete(root);
    free(text);
}

static void test_trace_errors(void) {
    tlm_profile *p = synthetic(400);
    check_status(tlm_profile_write_trace("/nonexistent-dir/trace.json", &p, 1), TLM_ERR_IO, "nonexistent-dir",
                 "a trace into a missing directory");
    check(access("/nonexistent-dir/trace.json", F_OK) != 0, "and no file");
    char dir[] = "/tmp/tlm_profile_test_XXXXXX";
    if (mkdtemp(dir)) {
        check_status(tlm_profile_write_trace(dir, &p, 1), TLM_ERR_INVALID_ARGUMENT, NULL, "a trace onto a directory");
        rmdir(dir);
    }
    tlm_profile_free(p);
}

int main(void) {
    test_data_and_file();
    test_names_and_classes();
    test_resolve_tlm();
    test_resolve_foreign();
    test_resolve_layer_bound();
    test_synthetic_findings();
    tlm_backend *be = test_backend();
    char trace[] = "/tmp/tlm_profile_trace_XXXXXX";
    const int fd = mkstemp(trace);
    if (fd >= 0) close(fd);
    test_cpu_run(be, trace);
    test_trace_file(trace);
    unlink(trace);
    test_trace_errors();
    tlm_backend_destroy(be);
    return test_finish();
}
