/* test_model_hardening.c — the model refuses what would give a silent wrong answer:
 * weights with NaN/Inf, on save and on load (naming the tensor, the model unchanged) and in memory (a forward
 * that reads the loss names the tensor instead of returning a NaN loss); gradients with NaN/Inf are
 * not written to a file (the error names the tensor, no file appears); a model whose size overflows
 * is refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_check.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/safetensors.h"

int main(void) {
    tlm_backend *be;
    die_on(tlm_backend_cpu_create(&be, 2), "cpu backend");
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, NULL, be), "model");
    die_on(tlm_model_init_random(m, 1), "init");
    enum { B = 2, T = 8 };
    int32_t x[B * T], y[B * T];
    uint64_t rng = 5;
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)tlm_rng_below(&rng, 512), y[i] = (int32_t)tlm_rng_below(&rng, 512);
    float loss;
    tlm_status s;
    die_on(tlm_model_forward(m, x, y, B, T, &loss), "forward");
    check(isfinite(loss), "finite weights: loss %.6f", loss);

    /* a weights file with one NaN: refused on load, naming the tensor; the model keeps its weights */
    char dir[] = "/tmp/tlm_hardening_XXXXXX";
    TLM_ASSERT(mkdtemp(dir));
    char good[300], bad[300], grads[300];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    snprintf(grads, sizeof grads, "%s/grads.safetensors", dir);
    die_on(tlm_model_save(m, good), "save");
    const int w2 = tlm_model_find_tensor(m, "layers.1.ffn.w2.weight");
    const float nan = NAN;
    float *p = m->params + m->layout.tensors[w2].offset + 7; /* host memory on the CPU backend */
    const float kept = *p;
    *p = nan;
    s = tlm_model_save(m, bad);
    check(s == TLM_ERR_INVALID_ARGUMENT && access(bad, F_OK) != 0,
          "weights with a NaN are not saved: %s", tlm_last_error());
    /* the file written anyway, through the safetensors writer */
    tlm_st_entry *e = calloc((size_t)m->layout.num_tensors, sizeof *e);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        e[i] = (tlm_st_entry){.name = t->name, .dtype = TLM_DTYPE_F32, .ndim = t->ndim, .data = m->params + t->offset};
        e[i].shape[0] = t->shape[0];
        e[i].shape[1] = t->shape[1];
    }
    float *wte = m->params + m->layout.tensors[0].offset; /* and a first tensor that differs */
    const float wte0 = wte[0];
    wte[0] = 123.0f;
    die_on(tlm_safetensors_write(bad, e, m->layout.num_tensors), "write the file with a NaN");
    free(e);
    wte[0] = wte0;
    *p = kept;
    s = tlm_model_load(m, bad);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "layers.1.ffn.w2.weight") &&
              strstr(tlm_last_error(), "element 7"),
          "a weights file with a NaN is refused, naming the tensor and the element: %s", tlm_last_error());
    float loss2;
    die_on(tlm_model_forward(m, x, y, B, T, &loss2), "forward after the refused load");
    check(loss2 == loss && wte[0] == wte0, "after the refused load the model is as it was (loss %.6f; the file's other "
          "tensors, which differ, not loaded)", loss2);

    /* a NaN weight in memory: the forward that reads the loss names it */
    *p = INFINITY;
    s = tlm_model_forward(m, x, y, B, T, &loss2);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "layers.1.ffn.w2.weight"),
          "an Inf weight: the forward reports it instead of a NaN loss: %s", tlm_last_error());

    /* NaN gradients are not written */
    *p = kept;
    die_on(tlm_model_forward(m, x, y, B, T, NULL), "forward");
    die_on(tlm_model_backward(m), "backward");
    m->grads[m->layout.tensors[w2].offset + 3] = nan;
    s = tlm_model_save_grads(m, grads);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "layers.1.ffn.w2.weight") &&
              access(grads, F_OK) != 0,
          "NaN gradients: nothing written, the error names the tensor: %s", tlm_last_error());
    tlm_model_free(m);

    /* a model too large to lay out */
    tlm_config huge = cfg;
    huge.num_layers = 1000000000;
    s = tlm_model_create(&m, &huge, NULL, be);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "1000000000 layers"),
          "num_layers 1e9 is refused with a message: %s", tlm_last_error());

    remove(good);
    remove(bad);
    rmdir(dir);
    return test_finish_backend(be);
}
