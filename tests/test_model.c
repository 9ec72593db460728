/* test_model.c — the model's bookkeeping: preset parameter counts (docs/experiments.md, the model), config
 * validation, the flat layout, the CS336 initialisation's statistics, and the errors of
 * forward/backward/load on bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/model.h"
#include "tlm/safetensors.h"
#include "test_check.h"

static void test_presets(void) {
    const struct { const char *name; int64_t params; } want[] = {
        {"small", 128625408}, {"medium", 423183360}, {"large", 969411840},
        {"xl", 1998235200},   {"2.7B", 3406809600LL},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tlm_config c;
        tlm_status s = tlm_config_preset(want[i].name, &c);
        int64_t n = s == TLM_OK ? tlm_config_num_params(&c) : -1;
        check(s == TLM_OK && n == want[i].params && tlm_config_validate(&c) == TLM_OK,
              "preset %s has %lld parameters (expected %lld)", want[i].name, (long long)n, (long long)want[i].params);
    }
    tlm_config c;
    tlm_status s = tlm_config_preset("huge", &c);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "unknown model 'huge'"),
          "unknown preset: %s", tlm_last_error());
}

static void test_validate(void) {
    tlm_config base;
    tlm_config_preset("tiny", &base);
    struct { const char *field; int *ptr; int value; const char *expect; } cases[] = {
        {"num_heads 3", &base.num_heads, 3, "not divisible by num_heads"},
        {"odd d_head", &base.num_heads, 64, "is odd"},
        {"d_model 0", &base.d_model, 0, "d_model must be at least 1"},
        {"d_ff -4", &base.d_ff, -4, "d_ff must be at least 1"},
        {"vocab 0", &base.vocab_size, 0, "vocab_size must be at least 1"},
        {"layers 0", &base.num_layers, 0, "num_layers must be at least 1"},
        {"context -1", &base.context_length, -1, "context_length must be at least 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tlm_config c;
        tlm_config_preset("tiny", &c);
        /* same field, in c rather than base */
        int *field = (int *)((char *)&c + ((char *)cases[i].ptr - (char *)&base));
        *field = cases[i].value;
        tlm_status s = tlm_config_validate(&c);
        check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), cases[i].expect),
              "config %s rejected: %s", cases[i].field, tlm_last_error());
    }
}

static void test_layout_and_init(void) {
    tlm_backend *be;
    tlm_backend_cpu_create(&be, 0);
    tlm_config c;
    tlm_config_preset("tiny", &c);
    tlm_model *m;
    tlm_status s = tlm_model_create(&m, &c, NULL, be);
    check(s == TLM_OK, "create tiny");
    if (s != TLM_OK) return;
    check(m->layout.num_params == (size_t)tlm_config_num_params(&c), "flat layout holds %zu parameters", m->layout.num_params);
    int q = tlm_model_find_tensor(m, "layers.1.attn.q_proj.weight");
    int k = tlm_model_find_tensor(m, "layers.1.attn.k_proj.weight");
    int v = tlm_model_find_tensor(m, "layers.1.attn.v_proj.weight");
    int w1 = tlm_model_find_tensor(m, "layers.1.ffn.w1.weight");
    int w3 = tlm_model_find_tensor(m, "layers.1.ffn.w3.weight");
    check(q >= 0 && k >= 0 && v >= 0 && m->layout.tensors[k].offset == m->layout.tensors[q].offset + m->layout.tensors[q].numel &&
              m->layout.tensors[v].offset == m->layout.tensors[k].offset + m->layout.tensors[k].numel,
          "q, k, v are adjacent (one (3C, C) GEMM)");
    check(w1 >= 0 && w3 >= 0 && m->layout.tensors[w3].offset == m->layout.tensors[w1].offset + m->layout.tensors[w1].numel,
          "w1, w3 are adjacent (one (2F, C) GEMM)");
    check(m->w.layers[1].qkv == m->params + m->layout.tensors[q].offset, "layer view qkv points at q_proj");
    check(tlm_model_find_tensor(m, "lm_head.weight") == m->layout.num_tensors - 1, "lm_head is the last tensor");

    tlm_model_init_random(m, 7);
    struct { const char *name; double std; } want[] = {
        {"token_embeddings.weight", 1.0},
        {"layers.0.ffn.w2.weight", sqrt(2.0 / (64 + 172))},
        {"layers.1.attn.output_proj.weight", sqrt(2.0 / (64 + 64))},
    };
    for (size_t i = 0; i < 3; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[tlm_model_find_tensor(m, want[i].name)];
        const float *p = m->params + t->offset;
        double sum = 0, sq = 0, maxabs = 0;
        for (size_t j = 0; j < t->numel; j++) {
            sum += p[j];
            sq += (double)p[j] * p[j];
            if (fabs(p[j]) > maxabs) maxabs = fabs(p[j]);
        }
        double mean = sum / t->numel, sd = sqrt(sq / t->numel - mean * mean);
        /* a normal truncated at +-3 std has std 0.98659 of the untruncated one */
        double expect = 0.98659 * want[i].std;
        check(fabs(sd - expect) < 0.03 * expect && maxabs <= 3 * want[i].std + 1e-6 && fabs(mean) < 0.05 * want[i].std,
              "init %s: std %.4f (expect %.4f), max |x| %.3f <= 3 std", want[i].name, sd, expect, maxabs);
    }
    const float *ln = m->params + m->layout.tensors[tlm_model_find_tensor(m, "layers.0.ln2.weight")].offset;
    int ones = 1;
    for (int j = 0; j < c.d_model; j++) ones &= ln[j] == 1.0f;
    check(ones, "RMSNorm weights start at 1");

    /* bad input to the passes */
    int32_t tok[2 * 8], tgt[2 * 8];
    for (int i = 0; i < 16; i++) tok[i] = tgt[i] = i * 31 % c.vocab_size;
    s = tlm_model_backward(m);
    check(s == TLM_ERR_INVALID_ARGUMENT, "backward before forward: %s", tlm_last_error());
    tok[5] = c.vocab_size;
    s = tlm_model_forward(m, tok, tgt, 2, 8, NULL);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "inputs[5] = 512"), "token >= vocab: %s",
          tlm_last_error());
    tok[5] = -1;
    s = tlm_model_forward(m, tok, tgt, 2, 8, NULL);
    check(s == TLM_ERR_INVALID_ARGUMENT, "negative token: %s", tlm_last_error());
    tok[5] = 3;
    s = tlm_model_forward(m, tok, tgt, 1, 33, NULL);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "exceeds"), "context beyond the RoPE table: %s",
          tlm_last_error());
    float loss;
    s = tlm_model_forward(m, tok, tgt, 2, 8, &loss);
    check(s == TLM_OK && fabsf(loss - logf((float)c.vocab_size)) < 3.0f, "loss at init %.3f near ln(V) = %.3f", loss,
          logf((float)c.vocab_size));
    s = tlm_model_forward(m, tok, NULL, 2, 8, &loss);
    check(s == TLM_OK && isnan(loss), "forward without targets gives logits, no loss");
    s = tlm_model_backward(m);
    check(s == TLM_ERR_INVALID_ARGUMENT, "backward after a forward without targets: %s", tlm_last_error());

    /* loading a checkpoint of another shape names the tensor */
    tlm_config c2 = c;
    c2.d_ff = 100;
    tlm_model *m2;
    tlm_model_create(&m2, &c2, NULL, be);
    tlm_model_init_random(m2, 1);
    char tmp[] = "/tmp/tlm_model_XXXXXX";
    int fd = mkstemp(tmp);
    (void)fd;
    tlm_model_save(m2, tmp);
    s = tlm_model_load(m, tmp);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "layers.0.ffn.w1.weight") &&
              strstr(tlm_last_error(), "[100, 64]"),
          "misshapen tensor: %s", tlm_last_error());
    /* a checkpoint with fewer layers misses tensors; one with more has extra ones */
    tlm_config c3 = c;
    c3.num_layers = 1;
    tlm_model *m3;
    tlm_model_create(&m3, &c3, NULL, be);
    tlm_model_init_random(m3, 1);
    tlm_model_save(m3, tmp);
    s = tlm_model_load(m, tmp);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "missing tensor 'layers.1."), "missing tensor: %s",
          tlm_last_error());
    s = tlm_model_load(m3, "/nonexistent/w.safetensors");
    check(s == TLM_ERR_IO, "nonexistent weights file: %s", tlm_last_error());
    tlm_model_save(m, tmp);
    s = tlm_model_load(m3, tmp);
    check(s == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(), "unexpected tensor 'layers.1."),
          "extra tensor: %s", tlm_last_error());
    remove(tmp);
    tlm_model_free(m3);
    tlm_model_free(m2);
    tlm_model_free(m);
    tlm_backend_destroy(be);
}

int main(void) {
    test_presets();
    test_validate();
    test_layout_and_init();
    return test_finish();
}
