/* toymodel.h — the ToyModel of CS336 Assignment 2's mixed-precision question (docs/experiments.md), run
 * forward and backward through the backend ops (backend.h) under PyTorch's autocast policy, so
 * that `tlm precision autocast` can report the dtype every tensor was actually computed in.
 *
 *   x (B,in) fp32 -> fc1: Linear(in, 10, no bias) -> ReLU -> LayerNorm(10) -> fc2: Linear(10, out,
 *   no bias) -> logits (B,out);  loss = sum((logits - y)^2) [TLM_TOY_LOSS_SUM] or that / (B*out)
 *   [TLM_TOY_LOSS_MSE], y (B,out) fp32.
 *
 * The policy (torch.autocast(dtype=dt), dt = bf16 or fp16; precision fp32 means no autocast and
 * every tensor fp32). Each tensor's dtype is decided from it once, when the model is created, and
 * the ops are called with the dtypes of the tensors they read and write:
 *   parameters fc1.weight, ln.weight, ln.bias, fc2.weight: fp32 (master weights), also inside
 *     the autocast region;
 *   fc1, fc2 (Linear: autocast's lower-precision list): their operands are cast to dt (the input,
 *     the weight: the backend's cast op) and the GEMM (matmul_forward with dt) writes dt, from an
 *     fp32 accumulation;
 *   ReLU: not on any list: keeps its input's dtype (dt);
 *   LayerNorm (layer_norm: autocast's fp32 list): its input is widened, the statistics (mean,
 *     rstd) and the output are fp32 (layernorm_forward); fc2 then casts that output to dt;
 *   loss (mse_loss: fp32 list): fp32, computed on the host from the logits widened exactly
 *     (summed in double, stored as float: a few numbers);
 *   gradients: fp32, like the parameters they belong to. They come out of the GEMMs in fp32
 *     (matmul_backward), where autocast rounds a weight gradient to dt and then widens it: the
 *     one place this is more precise than PyTorch (backend.h says the same for the LM).
 *   Backward: dlogits = d loss / d logits computed in fp32 and rounded to dt (the gradient of the
 *     autocast cast of the logits); dx of fc2 in dt; LayerNorm's backward reads it as dt (exact,
 *     backend.h) and writes the gradient of its input in dt; ReLU's backward in dt; fc1's weight
 *     gradient in fp32. No loss scaling (the question here is the dtypes; the LM's fp16 mode has
 *     GradScaler's, model.h).
 * Init: Linear weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (nn.Linear's default), LayerNorm weight
 * 1 and bias 0, x and y ~ N(0, 1); seeded (tlm/rng.h), the same numbers on every backend. */
#ifndef TLM_TOYMODEL_H
#define TLM_TOYMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tlm/backend.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_TOY_LOSS_MSE = 0, TLM_TOY_LOSS_SUM = 1 } tlm_toy_loss;

const char *tlm_toy_loss_name(tlm_toy_loss l); /* "mse", "sum" */

typedef struct {
    int batch_size;          /* B (default 8) */
    int in_features;         /* in (default 16) */
    int hidden;              /* fc1's width, LayerNorm's C: 10 in the ToyModel */
    int out_features;        /* out (default 4) */
    tlm_toy_loss loss;       /* default TLM_TOY_LOSS_MSE */
    tlm_precision precision; /* fp32 (no autocast), tf32 (fp32 tensors, TF32 GEMMs), bf16, fp16 */
    float ln_eps;            /* 1e-5, torch.nn.LayerNorm's */
    uint64_t seed;           /* weights and data (default 0) */
} tlm_toymodel_config;

tlm_toymodel_config tlm_toymodel_defaults(void);

/* A tensor of the model as the ops saw it: its dtype is the one the ops were called with. */
typedef struct {
    const char *name; /* "fc1 output", "fc1.weight.grad" */
    void *data;       /* backend memory (the loss: host memory, `loss_value`) */
    tlm_dtype dtype;
    int ndim;         /* 2: (rows, cols); 1: a vector of cols; 0: a scalar */
    int rows, cols;
} tlm_toy_tensor;

typedef struct tlm_toymodel {
    tlm_backend *be;
    tlm_toymodel_config cfg;
    tlm_dtype dt;        /* the GEMM dtype of the mode (tlm_precision_act_dtype) */
    size_t num_params;   /* in*10 + 10 + 10 + 10*out */
    float *params;       /* (num_params) fp32: fc1.weight (10,in), ln.weight (10), ln.bias (10),
                          * fc2.weight (out,10), in that order */
    float *grads;        /* (num_params) fp32, the same layout */
    tlm_toy_tensor fc1_weight, ln_weight, ln_bias, fc2_weight;                     /* views of params */
    tlm_toy_tensor fc1_weight_grad, ln_weight_grad, ln_bias_grad, fc2_weight_grad; /* views of grads */
    tlm_toy_tensor x;    /* (B,in) fp32 input */
    float *y_host;       /* (B,out) fp32 target, on the host (the loss is computed there) */
    /* forward, in order */
    tlm_toy_tensor x_gemm;          /* (B,in) x cast for fc1 */
    tlm_toy_tensor fc1_weight_gemm; /* (10,in) fc1.weight cast for fc1 */
    tlm_toy_tensor fc1_out;         /* (B,10) */
    tlm_toy_tensor relu_out;        /* (B,10) */
    tlm_toy_tensor ln_mean, ln_rstd;/* (B) */
    tlm_toy_tensor ln_out;          /* (B,10) */
    tlm_toy_tensor ln_out_gemm;     /* (B,10) ln_out cast for fc2 */
    tlm_toy_tensor fc2_weight_gemm; /* (out,10) fc2.weight cast for fc2 */
    tlm_toy_tensor logits;          /* (B,out) */
    tlm_toy_tensor loss;            /* scalar, host: &loss_value */
    float loss_value;
    /* backward */
    tlm_toy_tensor dlogits;     /* (B,out) */
    tlm_toy_tensor dln_out;     /* (B,10) d loss / d ln_out_gemm, from fc2's backward */
    tlm_toy_tensor drelu_out;   /* (B,10) from LayerNorm's backward */
    tlm_toy_tensor dfc1_out;    /* (B,10) from ReLU's backward */
    float *host_scratch;        /* (3 B out) the logits, dlogits and its 16-bit copy on the host */
} tlm_toymodel;

/* Allocates and initializes the model on be (tlm_alloc: parameters, gradients, activations).
 * TLM_ERR_INVALID_ARGUMENT for a size < 1; TLM_ERR_OUT_OF_MEMORY. The GEMMs take cfg->precision (TF32). */
tlm_status tlm_toymodel_create(tlm_toymodel **out, tlm_backend *be, const tlm_toymodel_config *cfg);
void tlm_toymodel_free(tlm_toymodel *m);

/* Forward to the loss (also in m->loss_value); synchronizes (the loss is read on the host). */
tlm_status tlm_toymodel_forward(tlm_toymodel *m, float *loss);
/* Backward from the last forward: every gradient (overwritten). */
tlm_status tlm_toymodel_backward(tlm_toymodel *m);

/* A tensor's elements widened to float32 on the host (tlm_toy_numel of them). */
size_t tlm_toy_numel(const tlm_toy_tensor *t);
void tlm_toymodel_read(const tlm_toymodel *m, const tlm_toy_tensor *t, float *host);
/* Replaces the parameters (num_params floats from the host). */
void tlm_toymodel_set_params(tlm_toymodel *m, const float *host);

/* The tensors a report lists, in forward-then-backward order: n of them into list. */
int tlm_toymodel_tensors(const tlm_toymodel *m, const tlm_toy_tensor **list, int max);

/* "fc1: Linear(in, 10, no bias) -> ReLU -> LayerNorm(10) -> fc2: Linear(10, out, no bias); loss mse
 * (mean of squared errors against a random target); batch B, seed S" into buf (n bytes). */
void tlm_toymodel_describe(const tlm_toymodel_config *cfg, char *buf, size_t n);
/* The dtypes the run gave (the autocast question): "parameters fp32, fc1 output fp16, ReLU output fp16,
 * LayerNorm output fp32, logits fp16, loss fp32, gradients fp32" (mixed: not all fp32) into buf. */
void tlm_toymodel_dtypes(const tlm_toymodel *m, char *buf, size_t n);

/* The model of cfg and the same model (same seed) in fp32, each run forward and backward: *m and *ref
 * (free both, also after an error; NULL where not created) and their losses. */
tlm_status tlm_toymodel_run_pair(tlm_backend *be, const tlm_toymodel_config *cfg, tlm_toymodel **m,
                                 tlm_toymodel **ref, float *loss, float *ref_loss);

/* A gradient of m against the fp32 model ref's: its name, both L2 norms (float64 sums) and
 * tlm_rel_error_f32 of the two. */
typedef struct {
    const char *name;
    double norm, ref_norm, rel_diff;
} tlm_toy_grad_compare;
#define TLM_TOY_NUM_GRADS 4 /* fc1.weight, ln.weight, ln.bias, fc2.weight */
tlm_status tlm_toymodel_compare_grads(const tlm_toymodel *m, const tlm_toymodel *ref,
                                      tlm_toy_grad_compare out[TLM_TOY_NUM_GRADS]);

#ifdef __cplusplus
}
#endif
#endif
