/* fixture_checks.h — the whole model against PyTorch, shared by the CPU test
 * (test_model_fixture.c, in CI) and the GPU test (test_gpu_ops.c): tools/make_fixtures.py built
 * the CS336 model in PyTorch for the tiny preset and wrote weights, a batch, logits, loss, every
 * gradient and the weights after 3 AdamW steps (tests/fixtures/tiny/, and the same computed in
 * float64 under f64/). fx_run checks a backend's fp32 run against one set: per tensor
 * ||tlm - torch|| / ||torch|| within `limit`, every value finite, no tensor missing;
 * fx_run_attention the same with the model's attention chosen (naive or flash). */
#ifndef TLM_TESTS_FIXTURE_CHECKS_H
#define TLM_TESTS_FIXTURE_CHECKS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_check.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/safetensors.h"
#include "tlm/util.h"

static inline const char *fx_path(const char *dir, const char *name) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

/* a reference array as float32 (from F32 or F64 files) */
static inline float *fx_npy_f32(const char *dir, const char *file, int64_t *numel) {
    tlm_array a;
    die_on(tlm_npy_read(fx_path(dir, file), &a), file);
    float *out = malloc((size_t)a.numel * sizeof(float));
    for (int64_t i = 0; i < a.numel; i++)
        out[i] = a.dtype == TLM_DTYPE_F64 ? (float)((double *)a.data)[i] : ((float *)a.data)[i];
    *numel = a.numel;
    tlm_array_free(&a);
    return out;
}

static inline int32_t *fx_tokens(const char *dir, const char *file, int vocab, int *B, int *T) {
    tlm_array a;
    die_on(tlm_npy_read(fx_path(dir, file), &a), file);
    int32_t *ids = malloc((size_t)a.numel * sizeof(int32_t));
    die_on(tlm_array_to_tokens(&a, ids, vocab, file), file);
    *B = (int)a.shape[0];
    *T = (int)a.shape[1];
    tlm_array_free(&a);
    return ids;
}

/* every tensor of a flat backend buffer (params or grads) against a safetensors reference */
static inline void fx_compare_flat(const tlm_model *m, const float *flat, const char *dir, const char *file,
                            const char *label, double limit) {
    tlm_safetensors st;
    die_on(tlm_safetensors_read(fx_path(dir, file), &st), file);
    float *host = malloc(m->layout.flat_numel * sizeof(float));
    tlm_copy_to_host(m->backend, host, flat, m->layout.flat_numel * sizeof(float));
    tlm_synchronize(m->backend);
    double worst = 0;
    const char *worst_name = "";
    int missing = 0;
    size_t not_finite = 0;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        const tlm_st_tensor *ref = tlm_safetensors_find(&st, t->name);
        if (!ref || (size_t)ref->numel != t->numel) {
            missing++;
            continue;
        }
        for (size_t j = 0; j < t->numel; j++) not_finite += !isfinite(host[t->offset + j]);
        float *r = malloc(t->numel * sizeof(float));
        die_on(tlm_st_tensor_to_f32(ref, r), t->name);
        double e = tlm_rel_error_f32(host + t->offset, r, t->numel);
        if (!(e <= worst)) { /* NaN propagates as the worst */
            worst = e;
            worst_name = t->name;
        }
        free(r);
    }
    char what[256];
    snprintf(what, sizeof what, "%s: all %d tensors (worst %s)%s", label, m->layout.num_tensors, worst_name,
             missing || not_finite ? " MISSING/NOT FINITE" : "");
    check_limit(missing == 0 && not_finite == 0 && worst <= limit, what, worst, limit);
    free(host);
    tlm_safetensors_free(&st);
}

/* The tiny model on `be` in fp32 with attention `att` from the fixture weights and batch in
 * `fixtures`, against the references in fixtures/<sub> ("" float32 PyTorch, "f64" float64
 * PyTorch): loss, logits, every gradient, and the weights after 3 AdamW steps on the same batch. */
static inline void fx_run_attention(tlm_backend *be, const char *fixtures, const char *sub, double limit,
                                    tlm_attention att) {
    char refs[600];
    snprintf(refs, sizeof refs, "%s%s%s", fixtures, sub[0] ? "/" : "", sub);
    char tag[64];
    snprintf(tag, sizeof tag, "%s %s attention vs %s PyTorch", be->name, tlm_attention_name(att),
             sub[0] ? "float64" : "float32");
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_run_config run = {.precision = TLM_PRECISION_FP32, .attention = att, .cuda_graphs = false};
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    die_on(tlm_model_load(m, fx_path(fixtures, "weights.safetensors")), "weights");
    int B, T, Bt, Tt;
    int32_t *inputs = fx_tokens(fixtures, "inputs.npy", cfg.vocab_size, &B, &T);
    int32_t *targets = fx_tokens(fixtures, "targets.npy", cfg.vocab_size, &Bt, &Tt);
    TLM_ASSERT(B == Bt && T == Tt);
    char what[256];

    float loss;
    die_on(tlm_model_forward(m, inputs, targets, B, T, &loss), "forward");
    int64_t n;
    float *ref_loss = fx_npy_f32(refs, "loss.npy", &n);
    double e = fabs((double)loss - ref_loss[0]) / fabs((double)ref_loss[0]);
    snprintf(what, sizeof what, "loss %.7f, %s %.7f", loss, tag, ref_loss[0]);
    check_limit(e <= limit, what, e, limit);

    float *ref_logits = fx_npy_f32(refs, "logits.npy", &n);
    TLM_ASSERT(n == (int64_t)B * T * cfg.vocab_size);
    float *logits = malloc((size_t)n * sizeof(float));
    die_on(tlm_model_copy_logits(m, logits), "logits");
    e = tlm_rel_error_f32(logits, ref_logits, (size_t)n);
    snprintf(what, sizeof what, "logits, %s", tag);
    check_limit(e <= limit, what, e, limit);

    die_on(tlm_model_backward(m), "backward");
    snprintf(what, sizeof what, "gradients, %s", tag);
    fx_compare_flat(m, m->grads, refs, "grads.safetensors", what, limit);

    /* 3 AdamW steps on the same batch: the first uses the gradient just computed */
    tlm_adamw_config opt = tlm_adamw_defaults();
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            die_on(tlm_model_forward(m, inputs, targets, B, T, NULL), "forward");
            die_on(tlm_model_backward(m), "backward");
        }
        die_on(tlm_model_adamw_step(m, &opt), "adamw");
    }
    snprintf(what, sizeof what, "weights after 3 AdamW steps, %s", tag);
    fx_compare_flat(m, m->params, refs, "weights_after_3_steps.safetensors", what, limit);

    free(ref_loss);
    free(ref_logits);
    free(logits);
    free(inputs);
    free(targets);
    tlm_model_free(m);
}

/* fx_run_attention with the naive attention */
static inline void fx_run(tlm_backend *be, const char *fixtures, const char *sub, double limit) {
    fx_run_attention(be, fixtures, sub, limit, TLM_ATTENTION_NAIVE);
}

#endif
