/* config.h — the hyperparameters of the CS336 BasicsTransformerLM and its presets.
 * Source: Stanford CS336 (Spring 2025) Assignment 2, §1.1.2, table of model sizes;
 * docs/experiments.md. */
#ifndef TLM_CONFIG_H
#define TLM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int vocab_size;      /* tokens in the vocabulary (default 10000) */
    int context_length;  /* longest sequence the RoPE table covers */
    int d_model;         /* width of the residual stream */
    int num_layers;      /* Transformer blocks */
    int num_heads;       /* attention heads; d_head = d_model / num_heads, even (RoPE pairs) */
    int d_ff;            /* inner width of the SwiGLU feed-forward */
    double rope_theta;   /* RoPE base (default 10000) */
    float rmsnorm_eps;   /* RMSNorm epsilon (1e-5) */
} tlm_config;

/* Presets: "tiny" (tests: vocab 512, d_model 64, d_ff 172, 2 layers, 4 heads, context 32),
 * "small", "medium", "large", "xl", "2.7B" (docs/experiments.md, the model; vocab 10000, context 1024).
 * Unknown name: TLM_ERR_INVALID_ARGUMENT, message listing the known names. */
tlm_status tlm_config_preset(const char *name, tlm_config *out);

/* Comma-separated preset names, for help texts: "tiny, small, medium, large, xl, 2.7B". */
const char *tlm_config_preset_names(void);

/* A model's name from its shape, for a run that knows only the sizes (a resumed run): the preset whose
 * vocab_size, d_model, d_ff, num_layers, num_heads and rope_theta (10000) it has, context_length aside
 * ("small"); else its sizes ("custom: d_model 256, d_ff 688, 4 layers, 8 heads"). Into buf (n bytes,
 * truncated to fit, NUL-terminated). */
void tlm_config_name(const tlm_config *c, char *buf, size_t n);

/* Checks every field: all sizes >= 1, d_model divisible by num_heads, d_head even,
 * rope_theta > 0. TLM_ERR_INVALID_ARGUMENT with a message naming the field otherwise. */
tlm_status tlm_config_validate(const tlm_config *c);

static inline int tlm_config_d_head(const tlm_config *c) { return c->d_model / c->num_heads; }

/* Number of parameters: 2*vocab*d_model + num_layers*(4*d_model^2 + 3*d_model*d_ff + 2*d_model)
 * + d_model. small: 128,625,408. */
int64_t tlm_config_num_params(const tlm_config *c);

/* Matmul FLOPs of one forward pass over batch_size x seq_len tokens: 2 per multiply-add of
 * every projection, SwiGLU and lm_head GEMM (2 * tokens * non-embedding-lookup weights), plus
 * attention's two T x T products computed in full by the naive kernel: 4 * B * T^2 * d_model per
 * layer. Elementwise ops are not counted. Backward is counted as 2x forward. */
double tlm_config_forward_flops(const tlm_config *c, int batch_size, int seq_len);

#ifdef __cplusplus
}
#endif
#endif
