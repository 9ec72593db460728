/* test_model_fixture.c — the whole model against PyTorch: tools/make_fixtures.py builds the
 * CS336 model in PyTorch for the tiny preset and writes weights, a batch, logits, loss, every
 * gradient and the weights after 3 AdamW steps (tests/fixtures/tiny/, and the same computed in
 * float64 under f64/). tlm must match the float32 run to a relative error of 1e-5 per tensor
 * (||tlm - torch|| / ||torch||), and the float64 run likewise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/safetensors.h"

static int passed, failed;
static char fixtures[512]; /* tests/fixtures/tiny: weights and batch */
static char refs[600];     /* the reference outputs: fixtures, or fixtures/f64 */

static void check(int ok, const char *what, double value, double limit) {
    printf("%-6s %-52s %.3e (limit %.1e)\n", ok ? "ok" : "FAIL", what, value, limit);
    if (ok) passed++;
    else failed++;
}

static void die_on(tlm_status s, const char *what) {
    if (s != TLM_OK) {
        fprintf(stderr, "%s: %s\n", what, tlm_last_error());
        exit(1);
    }
}

static const char *path(const char *dir, const char *name) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static double rel_err_f32(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* a reference array or tensor as float32 (from F32 or F64 files) */
static float *npy_as_f32(const char *file, int64_t *numel) {
    tlm_array a;
    die_on(tlm_npy_read(path(refs, file), &a), file);
    float *out = malloc((size_t)a.numel * sizeof(float));
    for (int64_t i = 0; i < a.numel; i++)
        out[i] = a.dtype == TLM_DTYPE_F64 ? (float)((double *)a.data)[i] : ((float *)a.data)[i];
    *numel = a.numel;
    tlm_array_free(&a);
    return out;
}

static int32_t *read_tokens(const char *file, int vocab, int *B, int *T) {
    tlm_array a;
    die_on(tlm_npy_read(path(fixtures, file), &a), file);
    int32_t *ids = malloc((size_t)a.numel * sizeof(int32_t));
    die_on(tlm_array_to_tokens(&a, ids, vocab, file), file);
    *B = (int)a.shape[0];
    *T = (int)a.shape[1];
    tlm_array_free(&a);
    return ids;
}

/* every tensor of a flat buffer (params or grads) against a safetensors reference */
static void compare_flat(const tlm_model *m, const float *flat_backend, const char *file, const char *label,
                         double limit) {
    tlm_safetensors st;
    die_on(tlm_safetensors_read(path(refs, file), &st), file);
    float *host = malloc(m->flat_numel * sizeof(float));
    m->backend->copy_to_host(m->backend, host, flat_backend, m->flat_numel * sizeof(float));
    m->backend->synchronize(m->backend);
    double worst = 0;
    const char *worst_name = "";
    int missing = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const tlm_tensor_info *t = &m->tensors[i];
        const tlm_st_tensor *ref = tlm_safetensors_find(&st, t->name);
        if (!ref || (size_t)ref->numel != t->numel) {
            missing++;
            continue;
        }
        float *r = malloc(t->numel * sizeof(float));
        die_on(tlm_st_tensor_to_f32(ref, r), t->name);
        double e = rel_err_f32(host + t->offset, r, t->numel);
        if (!(e <= worst)) { /* NaN propagates as the worst */
            worst = e;
            worst_name = t->name;
        }
        free(r);
    }
    char what[256];
    snprintf(what, sizeof what, "%s: all %d tensors (worst %s)", label, m->num_tensors, worst_name);
    check(missing == 0 && worst <= limit, what, worst, limit);
    free(host);
    tlm_safetensors_free(&st);
}

static void run(const char *sub, double limit) {
    snprintf(refs, sizeof refs, "%s%s%s", fixtures, sub[0] ? "/" : "", sub);
    const char *tag = sub[0] ? "vs float64 PyTorch" : "vs float32 PyTorch";

    tlm_backend *be;
    die_on(tlm_backend_cpu_create(&be, 0), "cpu backend");
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, be), "model");
    die_on(tlm_model_load(m, path(fixtures, "weights.safetensors")), "weights");
    int B, T, Bt, Tt;
    int32_t *inputs = read_tokens("inputs.npy", cfg.vocab_size, &B, &T);
    int32_t *targets = read_tokens("targets.npy", cfg.vocab_size, &Bt, &Tt);
    TLM_ASSERT(B == Bt && T == Tt);

    float loss;
    die_on(tlm_model_forward(m, inputs, targets, B, T, &loss), "forward");
    int64_t n;
    float *ref_loss = npy_as_f32("loss.npy", &n);
    char what[256];
    snprintf(what, sizeof what, "loss %.7f %s %.7f", loss, tag, ref_loss[0]);
    check(fabs(loss - ref_loss[0]) <= limit * fabs(ref_loss[0]), what, fabs(loss - ref_loss[0]) / fabs(ref_loss[0]), limit);

    float *ref_logits = npy_as_f32("logits.npy", &n);
    float *logits = malloc((size_t)n * sizeof(float));
    check(n == (int64_t)B * T * cfg.vocab_size, "logits.npy has B*T*V elements", (double)n, (double)n);
    die_on(tlm_model_copy_logits(m, logits), "logits");
    snprintf(what, sizeof what, "logits %s", tag);
    check(rel_err_f32(logits, ref_logits, (size_t)n) <= limit, what, rel_err_f32(logits, ref_logits, (size_t)n), limit);

    die_on(tlm_model_backward(m), "backward");
    snprintf(what, sizeof what, "gradients %s", tag);
    compare_flat(m, m->grads, "grads.safetensors", what, limit);

    /* 3 AdamW steps on the same batch: the first uses the gradient just computed */
    tlm_adamw_config opt = tlm_adamw_defaults();
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
            die_on(tlm_model_backward(m), "backward");
        }
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    snprintf(what, sizeof what, "weights after 3 AdamW steps %s", tag);
    compare_flat(m, m->params, "weights_after_3_steps.safetensors", what, limit);

    free(ref_loss);
    free(ref_logits);
    free(logits);
    free(inputs);
    free(targets);
    tlm_model_free(m);
    tlm_backend_destroy(be);
}

/* save -> load gives back the same bits; the file loads under its state-dict names */
static void roundtrip(void) {
    tlm_backend *be;
    die_on(tlm_backend_cpu_create(&be, 0), "cpu backend");
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *a, *b;
    die_on(tlm_model_create(&a, &cfg, be), "model");
    die_on(tlm_model_create(&b, &cfg, be), "model");
    die_on(tlm_model_init_random(a, 42), "init");
    char tmp[] = "/tmp/tlm_fixture_XXXXXX";
    int fd = mkstemp(tmp);
    TLM_ASSERT(fd >= 0);
    die_on(tlm_model_save(a, tmp), "save");
    die_on(tlm_model_load(b, tmp), "load");
    remove(tmp);
    int same = memcmp(a->params, b->params, a->flat_numel * sizeof(float)) == 0;
    check(same, "save then load gives identical parameters", same ? 0.0 : 1.0, 0.0);
    tlm_model_free(a);
    tlm_model_free(b);
    tlm_backend_destroy(be);
}

int main(void) {
    const char *env = getenv("TLM_FIXTURES");
    snprintf(fixtures, sizeof fixtures, "%s/tiny", env ? env : "tests/fixtures");
    run("", 1e-5);
    run("f64", 1e-5);
    roundtrip();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
