/* test_train.c — the training loop's parts (train.h) on the test's backend (CPU; built again as
 * test_gpu_train for CUDA):
 * - the learning-rate schedule against CS336's test values (get_lr_cosine_schedule: max 1, min 0.1,
 *   warm-up 7, cycle 21, iterations 0..24) and its edges;
 * - the global gradient norm and clipping on the tiny model's real gradients: the norm against a
 *   float64 sum on the host; clipping to half the norm records the factor (float)(max / (norm +
 *   1e-6)) for the AdamW pass to apply (the gradients untouched; the op test checks that the pass's
 *   multiply gives the bits of a multiply beforehand) and the norm measured after is the max; a
 *   threshold above the norm records nothing; a hand-made gradient (3 and 4 elsewhere 0: norm 5,
 *   clipped to 1: factor 1 / (5 + 1e-6)); a NaN named by its tensor; fp16's scaled gradients
 *   measured unscaled;
 * - the loop: 6 steps, a checkpoint after 3, a fresh model restored from it and run to 6: the same
 *   losses, gradient norms, weights and AdamW moments as the uninterrupted run, bit for bit on the CPU
 *   (on CUDA within 1e-4 relative: "the same to the printed digits"); validation leaves the weights alone;
 * - checkpoint files damaged in each way (state.json not JSON, a field missing, `latest` naming
 *   nothing, weights truncated, a moment missing or NaN): refused with FORMAT/IO naming the file, and the
 *   model left as it was;
 * - tlm_train_init's refusals (a token file shorter than context + 1, a bad recipe). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_check.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/safetensors.h"
#include "tlm/train.h"

static tlm_backend *be;
static const bool on_cpu = TLM_TEST_DEVICE[1] == 'p'; /* "cpu" */

/* ---- the schedule ------------------------------------------------------------------------------- */

static void test_schedule(void) {
    /* CS336 Assignment 1's test_get_lr_cosine_schedule: max 1, min 0.1, warm-up 7, cosine cycle 21 */
    static const double want[25] = {
        0.0, 0.14285714285714285, 0.2857142857142857, 0.42857142857142855, 0.5714285714285714,
        0.7142857142857143, 0.8571428571428571, 1.0, 0.9887175604818206, 0.9554359905560885, 0.9018241671106134,
        0.8305704108364301, 0.7452476826029011, 0.6501344202803414, 0.55, 0.44986557971965857, 0.3547523173970989,
        0.26942958916356996, 0.19817583288938662, 0.14456400944391146, 0.11128243951817937, 0.1, 0.1, 0.1, 0.1};
    double worst = 0;
    for (int it = 0; it < 25; it++) worst = fmax(worst, fabs(tlm_lr_cosine_schedule(it, 1.0, 0.1, 7, 21) - want[it]));
    check(worst <= 1e-12, "lr schedule (max 1, min 0.1, warm-up 7, cycle 21) = CS336's 25 test values (worst %.1e)",
          worst);
    check(tlm_lr_cosine_schedule(0, 1e-3, 1e-4, 0, 10) == 1e-3 && tlm_lr_cosine_schedule(10, 1e-3, 1e-4, 0, 10) == 1e-4 &&
              tlm_lr_cosine_schedule(5, 2.0, 0.0, 5, 5) == 2.0 && tlm_lr_cosine_schedule(6, 2.0, 0.5, 5, 5) == 0.5 &&
              fabs(tlm_lr_cosine_schedule(5, 2.0, 0.0, 0, 10) - 1.0) < 1e-15,
          "lr schedule edges: no warm-up starts at lr_max, the cycle's end is lr_min, a cycle of no length gives "
          "lr_max then lr_min, the cycle's middle is the mean");
    tlm_train_config c = tlm_train_defaults(200);
    check(c.warmup_iters == 10 && c.cosine_cycle_iters == 200 && tlm_train_config_check(&c) == TLM_OK,
          "defaults for 200 steps: warm-up 10 (5%%), cycle 200, valid");
    c.lr_min = 1.0;
    check_status(tlm_train_config_check(&c), TLM_ERR_INVALID_ARGUMENT, "lr_min", "lr_min above lr_max");
    c = tlm_train_defaults(200);
    c.cosine_cycle_iters = 5;
    check_status(tlm_train_config_check(&c), TLM_ERR_INVALID_ARGUMENT, "cosine_cycle_iters", "cycle before warm-up end");
    c = tlm_train_defaults(200);
    c.adamw.beta2 = 1.0f;
    check_status(tlm_train_config_check(&c), TLM_ERR_INVALID_ARGUMENT, "beta2", "beta2 = 1");
}

/* ---- a tiny model with gradients ------------------------------------------------------------------- */

static tlm_model *tiny_model(tlm_precision p) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_run_config run = {.precision = p, .attention = TLM_ATTENTION_NAIVE, .cuda_graphs = false};
    tlm_model *m = NULL;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    die_on(tlm_model_init_random(m, 7), "init");
    return m;
}

static void forward_backward(tlm_model *m) {
    enum { B = 2, T = 16 };
    int32_t x[B * T], y[B * T];
    uint64_t r = 11;
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)tlm_rng_below(&r, 512), y[i] = (int32_t)tlm_rng_below(&r, 512);
    float loss;
    die_on(tlm_model_forward(m, x, y, B, T, &loss), "forward");
    die_on(tlm_model_backward(m), "backward");
}

static float *host_grads(tlm_model *m) {
    float *g = malloc(m->layout.flat_numel * sizeof(float));
    TLM_ASSERT(g);
    tlm_copy_to_host(be, g, m->grads, m->layout.flat_numel * sizeof(float));
    return g;
}

/* the factors the gradients carry (model.h, tlm_model_grad_factors) */
static float grads_scale(const tlm_model *m) {
    float f;
    tlm_model_grad_factors(m, &f, NULL);
    return f;
}
static float grads_clip(const tlm_model *m) {
    float f;
    tlm_model_grad_factors(m, NULL, &f);
    return f;
}

static void test_clipping(void) {
    tlm_model *m = tiny_model(TLM_PRECISION_FP32);
    void *scratch = tlm_alloc(be, TLM_CLIP_SCRATCH_BYTES, TLM_MEM_WORKSPACE, "test");
    double norm = 0;
    bool clipped = true;
    check_status(tlm_grad_norm(m, scratch, &norm), TLM_ERR_INVALID_ARGUMENT, "backward", "norm before any backward");
    forward_backward(m);
    const size_t n = m->layout.flat_numel;
    float *g0 = host_grads(m);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)g0[i] * g0[i];
    die_on(tlm_grad_norm(m, scratch, &norm), "norm");
    check(fabs(norm - sqrt(sum)) <= 1e-12 * sqrt(sum), "gradient norm %.17g = sqrt(float64 sum on the host) %.17g",
          norm, sqrt(sum));

    die_on(tlm_clip_grad_norm(m, 2 * norm, scratch, &norm, &clipped), "clip");
    float *g1 = host_grads(m);
    check(!clipped && grads_clip(m) == 1.0f && memcmp(g0, g1, n * sizeof(float)) == 0,
          "max_grad_norm 2x the norm: not clipped, nothing recorded, unchanged");
    const double max = norm / 2;
    die_on(tlm_clip_grad_norm(m, max, scratch, &norm, &clipped), "clip");
    free(g1);
    g1 = host_grads(m);
    const float coef = (float)(max / (norm + 1e-6));
    double after = 0;
    die_on(tlm_grad_norm(m, scratch, &after), "norm");
    check(clipped && grads_clip(m) == coef && memcmp(g0, g1, n * sizeof(float)) == 0 && fabs(after - max) < 1e-5 * max,
          "max_grad_norm half the norm: the factor (float)(max/(norm + 1e-6)) = %.9g recorded for the AdamW pass, "
          "the gradients untouched; norm after %.9g (want %.9g)", (double)coef, after, max);

    /* by hand: 3 and 4, all else 0: norm 5; clipped to 1: coef 1 / (5 + 1e-6) */
    memset(g1, 0, n * sizeof(float));
    g1[3] = 3.0f;
    g1[n - 1] = 4.0f;
    tlm_copy_to_backend(be, m->grads, g1, n * sizeof(float));
    tlm_model_grads_replaced(m); /* new gradients, as a backward leaves them */
    die_on(tlm_clip_grad_norm(m, 1.0, scratch, &norm, &clipped), "clip");
    free(g1);
    g1 = host_grads(m);
    const float e3 = g1[3] * grads_clip(m), e4 = g1[n - 1] * grads_clip(m); /* what the AdamW pass reads */
    check(norm == 5.0 && clipped && grads_clip(m) == (float)(1.0 / 5.000001) && fabsf(e3 - 0.6f) < 1e-6f &&
              fabsf(e4 - 0.8f) < 1e-6f,
          "gradients 3 and 4: norm %g (5), clipped to 1: %.9g %.9g (0.6, 0.8 less 2e-7 relative)", norm,
          (double)e3, (double)e4);

    /* a NaN: the norm is not finite, nothing is clipped, the tensor is named */
    const int k = tlm_model_find_tensor(m, "layers.1.ffn.w2.weight");
    g1[m->layout.tensors[k].offset + 5] = NAN;
    tlm_copy_to_backend(be, m->grads, g1, n * sizeof(float));
    die_on(tlm_clip_grad_norm(m, 1.0, scratch, &norm, &clipped), "clip");
    const char *where = tlm_grad_nonfinite_tensor(m, scratch);
    check(isnan(norm) && !clipped && where && strcmp(where, "layers.1.ffn.w2.weight") == 0,
          "a NaN in layers.1.ffn.w2.weight: norm %g, not clipped, named '%s'", norm, where ? where : "(none)");
    free(g0);
    free(g1);
    tlm_model_free(m);

    /* fp16: the gradients carry the loss scale; the norm is the unscaled one */
    m = tiny_model(TLM_PRECISION_FP16);
    forward_backward(m);
    g0 = host_grads(m);
    sum = 0;
    for (size_t i = 0; i < m->layout.flat_numel; i++) sum += ((double)g0[i] / grads_scale(m)) * ((double)g0[i] / grads_scale(m));
    die_on(tlm_grad_norm(m, scratch, &norm), "norm");
    check(grads_scale(m) == 65536.0f && fabs(norm - sqrt(sum)) <= 1e-12 * sqrt(sum),
          "fp16: gradients scaled by %g, norm %.9g = the unscaled gradients' %.9g", (double)grads_scale(m), norm,
          sqrt(sum));
    die_on(tlm_clip_grad_norm(m, norm / 4, scratch, &norm, &clipped), "clip");
    g1 = host_grads(m);
    const double want_scale = 65536.0 / ((norm / 4) / (norm + 1e-6));
    check(clipped && memcmp(g0, g1, m->layout.flat_numel * sizeof(float)) == 0 &&
              fabs(grads_scale(m) - want_scale) <= 1e-6 * want_scale,
          "fp16 clipped to a quarter: gradients untouched, their scale %.1f = 65536 / coef (the unscale clips)",
          (double)grads_scale(m));
    free(g1);
    free(g0);
    tlm_model_free(m);
    tlm_free(be, scratch);
}

/* ---- the loop and its checkpoints ---------------------------------------------------------------------- */

static tlm_tokens make_tokens(int64_t n, uint64_t seed) {
    tlm_tokens t = {malloc((size_t)n * sizeof(int32_t)), n};
    TLM_ASSERT(t.ids);
    uint64_t r = seed;
    /* a learnable sequence: mostly i+1 mod 97, sometimes random */
    t.ids[0] = 1;
    for (int64_t i = 1; i < n; i++)
        t.ids[i] = tlm_rng_below(&r, 8) ? (t.ids[i - 1] + 1) % 97 : (int32_t)tlm_rng_below(&r, 512);
    return t;
}

static tlm_train_config recipe(void) {
    tlm_train_config c = tlm_train_defaults(6);
    c.batch_size = 3;
    c.context_length = 16;
    c.lr_max = 3e-3;
    c.eval_every = 3;
    c.eval_batches = 2;
    c.max_grad_norm = 0.5; /* some steps clip */
    c.seed = 42;
    return c;
}

/* the flat parameters and moments of m on the host */
static float *snapshot(const tlm_model *m) {
    const size_t n = m->layout.flat_numel;
    float *h = malloc(3 * n * sizeof(float));
    TLM_ASSERT(h && m->optimizer.m);
    tlm_copy_to_host(be, h, m->params, n * sizeof(float));
    tlm_copy_to_host(be, h + n, m->optimizer.m, n * sizeof(float));
    tlm_copy_to_host(be, h + 2 * n, m->optimizer.v, n * sizeof(float));
    return h;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static char dir[256];

static void run_until(tlm_train *t, int64_t steps) {
    while (t->step < steps) {
        die_on(tlm_train_step(t, NULL), "step");
        double v;
        if (tlm_train_eval_due(t)) die_on(tlm_train_eval(t, &v), "eval");
    }
}

static void test_resume(const tlm_tokens *train, const tlm_tokens *val) {
    const tlm_train_config c = recipe();
    const tlm_train_sources src = {"train.bin", "val.bin", "tiny*", 3, false};
    /* uninterrupted: 6 steps; a checkpoint after 3 */
    tlm_model *a = tiny_model(TLM_PRECISION_FP32);
    tlm_train ta;
    die_on(tlm_train_init(&ta, a, &c, train, val, 0, 1), "train init");
    run_until(&ta, 3);
    char *written = NULL;
    die_on(tlm_checkpoint_save(&ta, &src, dir, 0, &written), "save");
    char want_dir[320];
    snprintf(want_dir, sizeof want_dir, "%s/step-00000003", dir);
    check(written && strcmp(written, want_dir) == 0, "checkpoint written to %s", written ? written : "(none)");
    free(written);
    /* validation touches nothing */
    float *before = snapshot(a);
    double v1, v2;
    die_on(tlm_train_eval(&ta, &v1), "eval");
    die_on(tlm_train_eval(&ta, &v2), "eval");
    float *after = snapshot(a);
    check(v1 == v2 && memcmp(before, after, 3 * a->layout.flat_numel * sizeof(float)) == 0 &&
              ta.log[2].val_loss == v2,
          "validation twice: the same loss %.6f, weights and moments unchanged, recorded at step 3", v1);
    free(before);
    free(after);
    run_until(&ta, 6);
    int clipped = 0;
    for (int i = 0; i < 6; i++) clipped += ta.log[i].clipped;
    check(ta.step == 6 && ta.tokens == 6 * 3 * 16 && ta.log_len == 6 && !isnan(ta.log[5].val_loss) &&
              isnan(ta.log[3].val_loss) && ta.log[0].lr == 0.0 && clipped > 0 && ta.log[5].loss < ta.log[0].loss,
          "6 steps: 288 tokens, 6 records, validation at 3 and 6, lr 0 at step 1 (warm-up), %d clipped, loss "
          "%.4f -> %.4f", clipped, (double)ta.log[0].loss, (double)ta.log[5].loss);

    /* resumed: a fresh model from the checkpoint, to 6 */
    tlm_checkpoint ck;
    die_on(tlm_checkpoint_open(dir, &ck), "open");
    check(ck.step == 3 && ck.log_len == 3 && ck.adamw_t == 3 && ck.config.seed == 42 && ck.model.d_model == 64 &&
              ck.precision == TLM_PRECISION_FP32 && ck.attention == TLM_ATTENTION_NAIVE &&
              strcmp(ck.train_data_path, "train.bin") == 0 && ck.val_data_tokens == val->n &&
              ck.model_name && strcmp(ck.model_name, "tiny*") == 0 && ck.save_every == 3 &&
              ck.config.max_grad_norm == 0.5 && ck.config.lr_max == 3e-3,
          "checkpoint read back: step 3, 3 log records, AdamW t 3, the recipe, the model config, the sources and the "
          "cadence (save_every 3)");
    tlm_model *b = tiny_model(TLM_PRECISION_FP32);
    tlm_train tb;
    die_on(tlm_train_init(&tb, b, &ck.config, train, val, 0, 1), "train init");
    die_on(tlm_checkpoint_restore(&tb, &ck), "restore");
    tlm_checkpoint_close(&ck);
    run_until(&tb, 6);
    double worst = 0;
    bool same = tb.log_len == 6;
    for (int i = 0; same && i < 6; i++) {
        worst = fmax(worst, rel(tb.log[i].loss, ta.log[i].loss));
        worst = fmax(worst, rel(tb.log[i].grad_norm, ta.log[i].grad_norm));
        if (!isnan(ta.log[i].val_loss)) worst = fmax(worst, rel(tb.log[i].val_loss, ta.log[i].val_loss));
        same &= tb.log[i].lr == ta.log[i].lr && tb.log[i].clipped == ta.log[i].clipped;
    }
    float *sa = snapshot(a), *sb = snapshot(b);
    const size_t n3 = 3 * a->layout.flat_numel;
    double wdiff = 0;
    for (size_t i = 0; i < n3; i++) wdiff = fmax(wdiff, fabs((double)sa[i] - sb[i]));
    if (on_cpu)
        check(same && worst == 0 && memcmp(sa, sb, n3 * sizeof(float)) == 0,
              "resumed at 3 and run to 6 = the uninterrupted run bit for bit: losses, norms, val losses, weights, "
              "moments");
    else
        check(same && worst <= 1e-4 && wdiff <= 1e-4,
              "resumed at 3 and run to 6 = the uninterrupted run to the printed digits (worst rel %.1e, weights %.1e)",
              worst, wdiff);
    free(sa);
    free(sb);
    tlm_train_free(&tb);
    tlm_model_free(b);
    tlm_train_free(&ta);
    tlm_model_free(a);
}

/* ---- damaged checkpoints --------------------------------------------------------------------------------- */

static void sh(const char *fmt, const char *arg) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, arg, arg, arg);
    if (system(cmd) != 0) die_on(TLM_ERR_IO, cmd);
}

/* opening (and restoring) the damaged copy fails with `want` naming `needle`; the model is untouched */
static void expect_damaged(const char *what, const char *damage, tlm_status want, const char *needle,
                           const tlm_tokens *train, const tlm_tokens *val) {
    char copy[300], cmd[1200];
    snprintf(copy, sizeof copy, "%s-bad", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && cd %s/step-00000003 && %s", copy, dir, copy, copy, damage);
    if (system(cmd) != 0) die_on(TLM_ERR_IO, cmd);
    tlm_checkpoint ck;
    tlm_status s = tlm_checkpoint_open(copy, &ck);
    if (s == TLM_OK) { /* the damage is in what restore reads */
        tlm_model *m = tiny_model(TLM_PRECISION_FP32);
        float *w0 = malloc(m->layout.flat_numel * sizeof(float)), *w1 = malloc(m->layout.flat_numel * sizeof(float));
        tlm_copy_to_host(be, w0, m->params, m->layout.flat_numel * sizeof(float));
        tlm_train t;
        die_on(tlm_train_init(&t, m, &ck.config, train, val, 0, 1), "init");
        s = tlm_checkpoint_restore(&t, &ck);
        tlm_copy_to_host(be, w1, m->params, m->layout.flat_numel * sizeof(float));
        if (memcmp(w0, w1, m->layout.flat_numel * sizeof(float)) != 0 || t.step != 0) {
            check(false, "%s: the refused restore changed the model", what);
        }
        free(w0);
        free(w1);
        tlm_train_free(&t);
        tlm_model_free(m);
        tlm_checkpoint_close(&ck);
    }
    check_status(s, want, needle, what);
}

static void test_damaged(const tlm_tokens *train, const tlm_tokens *val) {
    expect_damaged("state.json not JSON", "printf '{\"format\": ' > state.json", TLM_ERR_FORMAT, "not valid JSON", train,
                   val);
    expect_damaged("state.json without its log",
                   "sed -i 's/\"log\"/\"gol\"/' state.json", TLM_ERR_FORMAT, "field 'log' is missing", train, val);
    expect_damaged("state.json from another tool", "sed -i 's/tlm-checkpoint/other/' state.json", TLM_ERR_FORMAT,
                   "format 'other'", train, val);
    expect_damaged("latest names a missing step", "echo step-00000099 > ../latest", TLM_ERR_IO, "step-00000099", train,
                   val);
    expect_damaged("latest holds garbage", "echo ../../etc > ../latest", TLM_ERR_FORMAT, "does not name a step", train,
                   val);
    /* found by tests/fuzz/fuzz_checkpoint.c: the name up to the NUL was opened, another step's directory */
    expect_damaged("latest holds a NUL byte", "printf 'step-0000\\0000003\\n' > ../latest", TLM_ERR_FORMAT,
                   "holds a NUL byte", train, val);
    expect_damaged("weights truncated", "head -c 3000 weights.safetensors > w && mv w weights.safetensors",
                   TLM_ERR_FORMAT, "weights.safetensors", train, val);
    expect_damaged("optimizer truncated", "head -c 3000 optimizer.safetensors > w && mv w optimizer.safetensors",
                   TLM_ERR_FORMAT, "optimizer.safetensors", train, val);
    /* a version-2 state.json's digests catch a file changed, cut short or another's first */
    expect_damaged("optimizer replaced by the weights (the digest)", "cp weights.safetensors optimizer.safetensors",
                   TLM_ERR_FORMAT, "optimizer.safetensors: 660792 bytes, but state.json recorded", train, val);
    expect_damaged("optimizer.safetensors edited (the digest)",
                   "sed -i 's/\"step\":\"3\"/\"step\":\"2\"/' optimizer.safetensors", TLM_ERR_FORMAT,
                   "its content differs from the digest state.json recorded", train, val);
    /* the checks behind them, as a version-1 state.json (no digests) meets them */
#define V1 "python3 -c \"import json;d=json.load(open('state.json'));d['version']=1;del d['files'];" \
           "json.dump(d,open('state.json','w'))\" && "
    expect_damaged("optimizer replaced by the weights", V1 "cp weights.safetensors optimizer.safetensors",
                   TLM_ERR_FORMAT, "metadata step", train, val);
    expect_damaged("optimizer.safetensors's step disagrees with state.json",
                   V1 "sed -i 's/\"step\":\"3\"/\"step\":\"2\"/' optimizer.safetensors", TLM_ERR_FORMAT,
                   "metadata step is '2', state.json says AdamW took 3", train, val);
    expect_damaged("a moment holds NaN", V1
                   "python3 -c \"import struct,json;b=bytearray(open('optimizer.safetensors','rb').read());"
                   "n=struct.unpack('<Q',b[:8])[0];h=json.loads(b[8:8+n]);o=8+n+h['exp_avg.lm_head.weight']['data_offsets'][0];"
                   "b[o:o+4]=struct.pack('<f',float('nan'));open('optimizer.safetensors','wb').write(b)\"",
                   TLM_ERR_FORMAT, "exp_avg.lm_head.weight' element 0 is nan", train, val);
    char bad[300], cmd[1600];
    snprintf(bad, sizeof bad, "%s-bad", dir);
    /* a checkpoint written before runs recorded their model's name: named from its sizes (tiny's) */
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && cd %s/step-00000003 && python3 -c \"import json; "
             "d = json.load(open('state.json')); del d['recipe']['model']; json.dump(d, open('state.json', 'w'))\"",
             bad, dir, bad, bad);
    tlm_checkpoint old;
    if (system(cmd) != 0) die_on(TLM_ERR_IO, cmd);
    die_on(tlm_checkpoint_open(bad, &old), "open the checkpoint without a model name");
    check(old.model_name && strcmp(old.model_name, "tiny") == 0, "a checkpoint without its model's name: named from "
          "its sizes (%s)", old.model_name ? old.model_name : "none");
    check(old.version == 2 && old.warning[0] == '\0', "a version-2 checkpoint: no warning ('%s')", old.warning);
    tlm_checkpoint_close(&old);
    /* a version-1 state.json opens; what it leaves unchecked is the caller's to print (once, under a launcher) */
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && cd %s/step-00000003 && " V1 "true", bad, dir, bad, bad);
    if (system(cmd) != 0) die_on(TLM_ERR_IO, cmd);
    die_on(tlm_checkpoint_open(bad, &old), "open a version-1 checkpoint");
    check(old.version == 1 && strstr(old.warning, "step-00000003/state.json is version 1: it recorded neither"),
          "a version-1 checkpoint: its warning for the caller ('%s')", old.warning);
    tlm_checkpoint_close(&old);
    sh("rm -rf %s", bad);
    tlm_checkpoint ck;
    check_status(tlm_checkpoint_open("/nonexistent-tlm-dir", &ck), TLM_ERR_IO, "not a tlm checkpoint",
                 "a directory that is no checkpoint");
}

static void test_init_refusals(const tlm_tokens *train) {
    tlm_model *m = tiny_model(TLM_PRECISION_FP32);
    tlm_tokens shorty = {train->ids, 16}; /* context 16 needs 17 */
    tlm_train t;
    tlm_train_config c = recipe();
    check_status(tlm_train_init(&t, m, &c, &shorty, NULL, 0, 1), TLM_ERR_INVALID_ARGUMENT,
                 "the training data holds 16 tokens: a row of context length 16 needs at least 17", "16 tokens");
    check_status(tlm_train_init(&t, m, &c, train, &shorty, 0, 1), TLM_ERR_INVALID_ARGUMENT, "validation data",
                 "validation data of 16 tokens");
    c.context_length = 64; /* tiny's context_length is 32 */
    check_status(tlm_train_init(&t, m, &c, train, NULL, 0, 1), TLM_ERR_INVALID_ARGUMENT, "exceeds the model's",
                 "context 64 > the model's 32");
    c = recipe();
    c.eval_batches = 0;
    check_status(tlm_train_init(&t, m, &c, train, NULL, 0, 1), TLM_ERR_INVALID_ARGUMENT, "eval_batches",
                 "0 eval batches");
    check_status(tlm_train_init(&t, m, &(tlm_train_config){0}, train, NULL, 0, 1), TLM_ERR_INVALID_ARGUMENT,
                 "batch_size", "an empty recipe");
    tlm_model_free(m);
}

/* the name of a resumed run's model when its checkpoint recorded none: the preset of its sizes, or the sizes */
static void test_model_name(void) {
    tlm_config c;
    char name[64];
    die_on(tlm_config_preset("small", &c), "small");
    c.context_length = 256; /* not a size that names a preset */
    tlm_config_name(&c, name, sizeof name);
    check(strcmp(name, "small") == 0, "a model of small's sizes is named small (%s)", name);
    c.vocab_size = 256;
    tlm_config_name(&c, name, sizeof name);
    check(strcmp(name, "custom: d_model 768, d_ff 3072, 12 layers, 12 heads") == 0, "another is named by its sizes (%s)",
          name);
}

/* the ETA from the measured times: the steps left at the step's time, the evaluations still due at the last one's */
static void test_eta(void) {
    tlm_tokens val = {0};
    tlm_train t = {.step = 10, .val_data = &val};
    t.config.steps = 100;
    t.config.eval_every = 25; /* due at 25, 50, 75, 100 */
    check(fabs(tlm_train_eta(&t, 0.5, 3.0) - (90 * 0.5 + 4 * 3.0)) < 1e-9, "ETA: 90 steps of 0.5 s + 4 evaluations of 3 s "
          "(%.3f s)", tlm_train_eta(&t, 0.5, 3.0));
    t.config.eval_every = 30; /* 30, 60, 90 and the last step's */
    check(fabs(tlm_train_eta(&t, 0.5, 3.0) - (45 + 4 * 3.0)) < 1e-9, "ETA: every 30 steps and the last (%.3f s)",
          tlm_train_eta(&t, 0.5, 3.0));
    t.val_data = NULL;
    check(fabs(tlm_train_eta(&t, 0.5, 3.0) - 45) < 1e-9, "ETA without validation data: the steps only");
    t.step = 100;
    check(tlm_train_eta(&t, 0.5, 3.0) == 0, "ETA at the last step: 0");
}

int main(void) {
    be = test_backend();
    test_model_name();
    test_eta();
    snprintf(dir, sizeof dir, "/tmp/tlm_test_train.%d", (int)getpid());
    sh("rm -rf %s", dir);
    test_schedule();
    test_clipping();
    tlm_tokens train = make_tokens(4000, 1), val = make_tokens(500, 2);
    test_resume(&train, &val);
    test_damaged(&train, &val);
    test_init_refusals(&train);
    sh("rm -rf %s", dir);
    free(train.ids);
    free(val.ids);
    return test_finish_backend(be);
}
