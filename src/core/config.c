/* config.c — model presets (docs/experiments.md, the model), validation, parameter and FLOP counts. */
#include "tlm/config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *name;
    int d_model, d_ff, num_layers, num_heads, vocab_size, context_length;
} preset;

static const preset presets[] = {
    {"tiny", 64, 172, 2, 4, 512, 32},  /* for tests: d_ff not a multiple of anything */
    {"small", 768, 3072, 12, 12, 10000, 1024},
    {"medium", 1024, 4096, 24, 16, 10000, 1024},
    {"large", 1280, 5120, 36, 20, 10000, 1024},
    {"xl", 1600, 6400, 48, 25, 10000, 1024},
    {"2.7B", 2560, 10240, 32, 32, 10000, 1024},
};

const char *tlm_config_preset_names(void) { return "tiny, small, medium, large, xl, 2.7B"; }

tlm_status tlm_config_preset(const char *name, tlm_config *out) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcasecmp(name, presets[i].name) == 0) {
            const preset *p = &presets[i];
            *out = (tlm_config){.vocab_size = p->vocab_size,
                                .context_length = p->context_length,
                                .d_model = p->d_model,
                                .num_layers = p->num_layers,
                                .num_heads = p->num_heads,
                                .d_ff = p->d_ff,
                                .rope_theta = 10000.0,
                                .rmsnorm_eps = 1e-5f};
            return TLM_OK;
        }
    }
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown model '%s' (known: %s)", name,
                    tlm_config_preset_names());
}

void tlm_config_name(const tlm_config *c, char *buf, size_t n) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset *p = &presets[i];
        if (c->vocab_size == p->vocab_size && c->d_model == p->d_model && c->d_ff == p->d_ff &&
            c->num_layers == p->num_layers && c->num_heads == p->num_heads && c->rope_theta == 10000.0) {
            snprintf(buf, n, "%s", p->name);
            return;
        }
    }
    snprintf(buf, n, "custom: d_model %d, d_ff %d, %d layers, %d heads", c->d_model, c->d_ff, c->num_layers,
             c->num_heads);
}

tlm_status tlm_config_validate(const tlm_config *c) {
    const struct { const char *name; int value; } sizes[] = {
        {"vocab_size", c->vocab_size}, {"context_length", c->context_length},
        {"d_model", c->d_model},       {"num_layers", c->num_layers},
        {"num_heads", c->num_heads},   {"d_ff", c->d_ff},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value < 1)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s must be at least 1 (got %d)",
                            sizes[i].name, sizes[i].value);
    if (c->d_model % c->num_heads != 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "d_model %d is not divisible by num_heads %d", c->d_model, c->num_heads);
    int d_head = c->d_model / c->num_heads;
    if (d_head % 2 != 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "d_head = d_model/num_heads = %d is odd; RoPE rotates pairs and needs it even",
                        d_head);
    if (!(c->rope_theta > 0))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "rope_theta must be positive (got %g)", c->rope_theta);
    if (!(c->rmsnorm_eps > 0))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "rmsnorm_eps must be positive (got %g)",
                        (double)c->rmsnorm_eps);
    /* every activation index must fit an int for N*C and B*H*T*T style products up to 2^31 is
     * checked per batch by the model; here only the weights */
    if ((int64_t)c->vocab_size * c->d_model > INT32_MAX || (int64_t)c->d_ff * c->d_model * 2 > INT32_MAX)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a weight matrix has more than 2^31 elements");
    return TLM_OK;
}

int64_t tlm_config_num_params(const tlm_config *c) {
    int64_t C = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->num_layers;
    return 2 * V * C + L * (4 * C * C + 3 * C * F + 2 * C) + C;
}

double tlm_config_forward_flops(const tlm_config *c, int batch_size, int seq_len) {
    double C = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->num_layers;
    double tokens = (double)batch_size * seq_len;
    double gemm = 2.0 * tokens * (L * (4 * C * C + 3 * C * F) + V * C);
    double attention = L * 4.0 * batch_size * (double)seq_len * seq_len * C;
    return gemm + attention;
}
