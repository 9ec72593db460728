/* toymodel.c — the ToyModel (toymodel.h) on any backend: fc1 -> ReLU -> LayerNorm -> fc2 and a
 * squared-error loss, forward and backward through the backend ops under autocast's policy. The
 * policy is applied in one place, tlm_toymodel_create, which gives every tensor its dtype; the
 * passes call the ops with those dtypes (and assert that an op's operands agree), so the dtypes a
 * report prints are the ones the arithmetic used. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "tlm/precision.h"
#include "tlm/rng.h"
#include "tlm/toymodel.h"
#include "tlm/util.h"

const char *tlm_toy_loss_name(tlm_toy_loss l) { return l == TLM_TOY_LOSS_SUM ? "sum" : "mse"; }

tlm_toymodel_config tlm_toymodel_defaults(void) {
    tlm_toymodel_config c = {.batch_size = 8, .in_features = 16, .hidden = 10, .out_features = 4,
                             .loss = TLM_TOY_LOSS_MSE, .precision = TLM_PRECISION_FP32, .ln_eps = 1e-5f,
                             .seed = 0};
    return c;
}

size_t tlm_toy_numel(const tlm_toy_tensor *t) {
    return t->ndim == 2 ? (size_t)t->rows * t->cols : t->ndim == 1 ? (size_t)t->cols : 1;
}

static size_t numel(const tlm_toy_tensor *t) { return tlm_toy_numel(t); }

/* rows 0: a vector of cols */
static tlm_toy_tensor view(const char *name, float *data, int rows, int cols) {
    tlm_toy_tensor t = {name, data, TLM_DTYPE_F32, rows > 0 ? 2 : 1, rows, cols};
    return t;
}

/* a tensor of its own (rows 0: a vector of cols): allocated on the backend, of the dtype the
 * policy gives it */
static bool make(tlm_toymodel *m, tlm_toy_tensor *t, const char *name, int rows, int cols, tlm_dtype dtype) {
    t->name = name;
    t->ndim = rows > 0 ? 2 : 1;
    t->rows = rows;
    t->cols = cols;
    t->dtype = dtype;
    t->data = tlm_alloc(m->be, numel(t) * tlm_dtype_size(dtype), TLM_MEM_ACTIVATIONS, name);
    return t->data != NULL;
}

tlm_status tlm_toymodel_create(tlm_toymodel **out, tlm_backend *be, const tlm_toymodel_config *cfg) {
    *out = NULL;
    if (cfg->batch_size < 1 || cfg->in_features < 1 || cfg->hidden < 1 || cfg->out_features < 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "ToyModel: batch %d, in %d, hidden %d, out %d: each must be at least 1", cfg->batch_size,
                        cfg->in_features, cfg->hidden, cfg->out_features);
    if (cfg->batch_size > 1 << 20 || cfg->in_features > 1 << 16 || cfg->hidden > 1 << 16 || cfg->out_features > 1 << 16)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "ToyModel: sizes past 2^16 (batch 2^20) are not what this model is for");
    tlm_toymodel *m = calloc(1, sizeof *m);
    if (!m) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the ToyModel");
    m->be = be;
    m->cfg = *cfg;
    const int B = cfg->batch_size, in = cfg->in_features, H = cfg->hidden, out_f = cfg->out_features;
    const tlm_dtype dt = m->dt = tlm_precision_act_dtype(cfg->precision);
    m->num_params = (size_t)H * in + 2 * (size_t)H + (size_t)out_f * H;
    m->params = tlm_alloc(be, m->num_params * sizeof(float), TLM_MEM_PARAMETERS, "toymodel.params");
    m->grads = tlm_alloc(be, m->num_params * sizeof(float), TLM_MEM_GRADIENTS, "toymodel.grads");
    if (!m->params || !m->grads) goto oom; /* tlm_alloc set the message */
    m->y_host = malloc((size_t)B * out_f * sizeof(float));
    m->host_scratch = malloc(3 * (size_t)B * out_f * sizeof(float)); /* logits, dlogits, its 16-bit copy */
    if (!m->y_host || !m->host_scratch) {
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the ToyModel");
        goto oom;
    }

    /* the parameters and their gradients: fp32, inside the autocast region too */
    float *p = m->params, *g = m->grads;
    m->fc1_weight = view("fc1.weight", p, H, in);
    m->fc1_weight_grad = view("fc1.weight.grad", g, H, in);
    p += (size_t)H * in, g += (size_t)H * in;
    m->ln_weight = view("ln.weight", p, 0, H);
    m->ln_weight_grad = view("ln.weight.grad", g, 0, H);
    p += H, g += H;
    m->ln_bias = view("ln.bias", p, 0, H);
    m->ln_bias_grad = view("ln.bias.grad", g, 0, H);
    p += H, g += H;
    m->fc2_weight = view("fc2.weight", p, out_f, H);
    m->fc2_weight_grad = view("fc2.weight.grad", g, out_f, H);

    /* autocast's policy, op by op (toymodel.h) */
    bool ok = make(m, &m->x, "x", B, in, TLM_DTYPE_F32);
    /* fc1: Linear is on the lower-precision list: operands cast to dt, output dt */
    ok = ok && make(m, &m->x_gemm, "x as fc1 reads it", B, in, dt);
    ok = ok && make(m, &m->fc1_weight_gemm, "fc1.weight as fc1 reads it", H, in, dt);
    ok = ok && make(m, &m->fc1_out, "fc1 output", B, H, dt);
    /* ReLU: on no list: the dtype of its input */
    ok = ok && make(m, &m->relu_out, "ReLU output", B, H, m->fc1_out.dtype);
    /* LayerNorm: layer_norm is on the fp32 list: statistics and output fp32 */
    ok = ok && make(m, &m->ln_mean, "LayerNorm mean", 0, B, TLM_DTYPE_F32);
    ok = ok && make(m, &m->ln_rstd, "LayerNorm rstd", 0, B, TLM_DTYPE_F32);
    ok = ok && make(m, &m->ln_out, "LayerNorm output", B, H, TLM_DTYPE_F32);
    /* fc2: Linear again */
    ok = ok && make(m, &m->ln_out_gemm, "LayerNorm output as fc2 reads it", B, H, dt);
    ok = ok && make(m, &m->fc2_weight_gemm, "fc2.weight as fc2 reads it", out_f, H, dt);
    ok = ok && make(m, &m->logits, "logits (fc2 output)", B, out_f, dt);
    /* the loss: mse_loss is on the fp32 list; a host float */
    m->loss = (tlm_toy_tensor){"loss", &m->loss_value, TLM_DTYPE_F32, 0, 0, 0};
    /* backward: each gradient has the dtype of the tensor it belongs to */
    ok = ok && make(m, &m->dlogits, "d loss / d logits", B, out_f, m->logits.dtype);
    ok = ok && make(m, &m->dln_out, "d loss / d (LayerNorm output as fc2 reads it)", B, H, m->ln_out_gemm.dtype);
    ok = ok && make(m, &m->drelu_out, "d loss / d ReLU output", B, H, m->relu_out.dtype);
    ok = ok && make(m, &m->dfc1_out, "d loss / d fc1 output", B, H, m->fc1_out.dtype);
    if (!ok) goto oom; /* tlm_alloc set the message */

    /* init, seeded: one stream per tensor */
    float *host = malloc(m->num_params * sizeof(float) + (size_t)B * in * sizeof(float));
    if (!host) {
        tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory creating the ToyModel");
        goto oom;
    }
    uint64_t r1 = tlm_rng_stream(cfg->seed, 1), r2 = tlm_rng_stream(cfg->seed, 2);
    uint64_t rx = tlm_rng_stream(cfg->seed, 3), ry = tlm_rng_stream(cfg->seed, 4);
    size_t k = 0;
    for (size_t i = 0; i < (size_t)H * in; i++) host[k++] = (float)((2 * tlm_rng_uniform(&r1) - 1) / sqrt(in));
    for (int i = 0; i < H; i++) host[k++] = 1.0f;
    for (int i = 0; i < H; i++) host[k++] = 0.0f;
    for (size_t i = 0; i < (size_t)out_f * H; i++) host[k++] = (float)((2 * tlm_rng_uniform(&r2) - 1) / sqrt(H));
    tlm_copy_to_backend(be, m->params, host, m->num_params * sizeof(float));
    for (size_t i = 0; i < (size_t)B * in; i++) host[k + i] = (float)tlm_rng_normal(&rx);
    tlm_copy_to_backend(be, m->x.data, host + k, (size_t)B * in * sizeof(float));
    for (size_t i = 0; i < (size_t)B * out_f; i++) m->y_host[i] = (float)tlm_rng_normal(&ry);
    tlm_synchronize(be);
    free(host);
    *out = m;
    return TLM_OK;

oom: /* the message is set */
    tlm_toymodel_free(m);
    return TLM_ERR_OUT_OF_MEMORY;
}

void tlm_toymodel_free(tlm_toymodel *m) {
    if (!m) return;
    tlm_toy_tensor *own[] = {&m->x, &m->x_gemm, &m->fc1_weight_gemm, &m->fc1_out, &m->relu_out, &m->ln_mean,
                             &m->ln_rstd, &m->ln_out, &m->ln_out_gemm, &m->fc2_weight_gemm, &m->logits,
                             &m->dlogits, &m->dln_out, &m->drelu_out, &m->dfc1_out};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) tlm_free(m->be, own[i]->data);
    tlm_free(m->be, m->params);
    tlm_free(m->be, m->grads);
    free(m->y_host);
    free(m->host_scratch);
    free(m);
}

/* values of a dt tensor on the host, widened */
static void widen_host(float *dst, const void *src, size_t n, tlm_dtype dt) {
    for (size_t i = 0; i < n; i++)
        dst[i] = dt == TLM_DTYPE_BF16  ? tlm_bf16_to_f32(((const uint16_t *)src)[i])
                 : dt == TLM_DTYPE_F16 ? tlm_f16_to_f32(((const uint16_t *)src)[i])
                                       : ((const float *)src)[i];
}

void tlm_toymodel_read(const tlm_toymodel *m, const tlm_toy_tensor *t, float *host) {
    const size_t n = numel(t);
    if (t->data == (void *)&m->loss_value) { /* the loss lives on the host */
        host[0] = m->loss_value;
        return;
    }
    if (t->dtype == TLM_DTYPE_F32) {
        tlm_copy_to_host(m->be, host, t->data, n * sizeof(float));
        tlm_synchronize(m->be);
        return;
    }
    uint16_t *raw = malloc(n * sizeof(uint16_t));
    TLM_ASSERT(raw);
    tlm_copy_to_host(m->be, raw, t->data, n * sizeof(uint16_t));
    tlm_synchronize(m->be);
    widen_host(host, raw, n, t->dtype);
    free(raw);
}

void tlm_toymodel_set_params(tlm_toymodel *m, const float *host) {
    tlm_copy_to_backend(m->be, m->params, host, m->num_params * sizeof(float));
    tlm_synchronize(m->be);
}

tlm_status tlm_toymodel_forward(tlm_toymodel *m, float *loss) {
    tlm_backend *be = m->be;
    const int B = m->cfg.batch_size, in = m->cfg.in_features, H = m->cfg.hidden, out_f = m->cfg.out_features;

    /* fc1 = Linear(in, H): autocast casts its input and weight to the GEMM dtype */
    TLM_ASSERT(m->x.dtype == TLM_DTYPE_F32 && m->fc1_weight.dtype == TLM_DTYPE_F32);
    tlm_cast(be, m->x_gemm.data, m->x.data, numel(&m->x), m->x_gemm.dtype);
    tlm_cast(be, m->fc1_weight_gemm.data, m->fc1_weight.data, numel(&m->fc1_weight), m->fc1_weight_gemm.dtype);
    TLM_ASSERT(m->x_gemm.dtype == m->fc1_out.dtype && m->fc1_weight_gemm.dtype == m->fc1_out.dtype);
    tlm_matmul_forward(be, m->fc1_out.data, NULL, m->x_gemm.data, m->fc1_weight_gemm.data, B, in, H,
                       m->cfg.precision);

    /* ReLU, in its input's dtype */
    TLM_ASSERT(m->relu_out.dtype == m->fc1_out.dtype);
    tlm_relu_forward(be, m->relu_out.data, m->fc1_out.data, numel(&m->fc1_out), m->relu_out.dtype);

    /* LayerNorm(H): reads its input in its dtype, writes fp32 statistics and output */
    TLM_ASSERT(m->ln_out.dtype == TLM_DTYPE_F32 && m->ln_mean.dtype == TLM_DTYPE_F32 &&
               m->ln_rstd.dtype == TLM_DTYPE_F32 && m->ln_weight.dtype == TLM_DTYPE_F32);
    tlm_layernorm_forward(be, m->ln_out.data, m->ln_mean.data, m->ln_rstd.data, m->relu_out.data, m->ln_weight.data,
                           m->ln_bias.data, B, H, m->cfg.ln_eps, m->relu_out.dtype);

    /* fc2 = Linear(H, out): its input (fp32) and weight cast to the GEMM dtype */
    tlm_cast(be, m->ln_out_gemm.data, m->ln_out.data, numel(&m->ln_out), m->ln_out_gemm.dtype);
    tlm_cast(be, m->fc2_weight_gemm.data, m->fc2_weight.data, numel(&m->fc2_weight), m->fc2_weight_gemm.dtype);
    TLM_ASSERT(m->ln_out_gemm.dtype == m->logits.dtype && m->fc2_weight_gemm.dtype == m->logits.dtype);
    tlm_matmul_forward(be, m->logits.data, NULL, m->ln_out_gemm.data, m->fc2_weight_gemm.data, B, H, out_f,
                       m->cfg.precision);

    /* the loss, fp32 (mse_loss is on the fp32 list): the logits widened exactly, the squared
     * errors summed in double, the result stored as float */
    float *logits = m->host_scratch;
    tlm_toymodel_read(m, &m->logits, logits);
    double sum = 0.0;
    for (int i = 0; i < B * out_f; i++) {
        const double e = (double)logits[i] - m->y_host[i];
        sum += e * e;
    }
    m->loss_value = (float)(m->cfg.loss == TLM_TOY_LOSS_MSE ? sum / (B * out_f) : sum);
    TLM_ASSERT(m->loss.dtype == TLM_DTYPE_F32);
    if (loss) *loss = m->loss_value;
    return TLM_OK;
}

tlm_status tlm_toymodel_backward(tlm_toymodel *m) {
    tlm_backend *be = m->be;
    const int B = m->cfg.batch_size, in = m->cfg.in_features, H = m->cfg.hidden, out_f = m->cfg.out_features;

    /* d loss / d logits = scale * 2 (logits - y) in fp32, rounded to the logits' dtype (the
     * backward of autocast's cast of the logits to fp32); host_scratch still holds the logits */
    const float *logits = m->host_scratch;
    float *dl = m->host_scratch + (size_t)B * out_f;
    const float scale = m->cfg.loss == TLM_TOY_LOSS_MSE ? 2.0f / (float)(B * out_f) : 2.0f;
    const size_t n = (size_t)B * out_f;
    for (size_t i = 0; i < n; i++) dl[i] = scale * (logits[i] - m->y_host[i]);
    if (m->dlogits.dtype == TLM_DTYPE_F32) {
        tlm_copy_to_backend(be, m->dlogits.data, dl, n * sizeof(float));
    } else {
        uint16_t *raw = (uint16_t *)(dl + n);
        for (size_t i = 0; i < n; i++)
            raw[i] = m->dlogits.dtype == TLM_DTYPE_BF16 ? tlm_f32_to_bf16(dl[i]) : tlm_f32_to_f16(dl[i]);
        tlm_copy_to_backend(be, m->dlogits.data, raw, n * sizeof(uint16_t));
    }
    tlm_synchronize(be); /* the host buffer is reused by the next forward */

    /* fc2: dW2 fp32; the gradient of its (cast) input in its dtype */
    TLM_ASSERT(m->dlogits.dtype == m->logits.dtype && m->dln_out.dtype == m->ln_out_gemm.dtype &&
               m->fc2_weight_grad.dtype == TLM_DTYPE_F32);
    tlm_matmul_backward(be, m->dln_out.data, m->fc2_weight_grad.data, TLM_DTYPE_F32, m->dlogits.data,
                        m->ln_out_gemm.data, m->fc2_weight_gemm.data, B, H, out_f, m->cfg.precision);

    /* LayerNorm: the cast's backward widens dln_out exactly, so the op reads it in its dtype;
     * the gradient of the LayerNorm input in the input's dtype, dweight and dbias fp32 */
    TLM_ASSERT(m->dln_out.dtype == m->relu_out.dtype && m->drelu_out.dtype == m->relu_out.dtype);
    tlm_layernorm_backward(be, m->drelu_out.data, m->ln_weight_grad.data, m->ln_bias_grad.data, m->dln_out.data,
                            m->relu_out.data, m->ln_weight.data, m->ln_mean.data, m->ln_rstd.data, B, H,
                            m->relu_out.dtype);

    /* ReLU */
    TLM_ASSERT(m->dfc1_out.dtype == m->fc1_out.dtype);
    tlm_relu_backward(be, m->dfc1_out.data, m->drelu_out.data, m->fc1_out.data, numel(&m->fc1_out),
                       m->fc1_out.dtype);

    /* fc1: dW1 fp32; its input x needs no gradient */
    tlm_matmul_backward(be, NULL, m->fc1_weight_grad.data, TLM_DTYPE_F32, m->dfc1_out.data, m->x_gemm.data,
                        m->fc1_weight_gemm.data, B, in, H, m->cfg.precision);
    tlm_synchronize(be);
    return TLM_OK;
}

int tlm_toymodel_tensors(const tlm_toymodel *m, const tlm_toy_tensor **list, int max) {
    const tlm_toy_tensor *all[] = {
        &m->fc1_weight, &m->ln_weight, &m->ln_bias, &m->fc2_weight, &m->x, &m->x_gemm, &m->fc1_weight_gemm,
        &m->fc1_out, &m->relu_out, &m->ln_mean, &m->ln_rstd, &m->ln_out, &m->ln_out_gemm, &m->fc2_weight_gemm,
        &m->logits, &m->loss, &m->dlogits, &m->dln_out, &m->drelu_out, &m->dfc1_out, &m->fc2_weight_grad,
        &m->ln_weight_grad, &m->ln_bias_grad, &m->fc1_weight_grad};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; i++) list[n++] = all[i];
    return n;
}

tlm_status tlm_toymodel_run_pair(tlm_backend *be, const tlm_toymodel_config *cfg, tlm_toymodel **m,
                                 tlm_toymodel **ref, float *loss, float *ref_loss) {
    *m = *ref = NULL;
    tlm_toymodel_config ref_cfg = *cfg;
    ref_cfg.precision = TLM_PRECISION_FP32;
    TLM_TRY(tlm_toymodel_create(m, be, cfg));
    TLM_TRY(tlm_toymodel_create(ref, be, &ref_cfg));
    TLM_TRY(tlm_toymodel_forward(*m, loss));
    TLM_TRY(tlm_toymodel_backward(*m));
    TLM_TRY(tlm_toymodel_forward(*ref, ref_loss));
    return tlm_toymodel_backward(*ref);
}

static double l2_norm(const float *v, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

tlm_status tlm_toymodel_compare_grads(const tlm_toymodel *m, const tlm_toymodel *ref,
                                      tlm_toy_grad_compare out[TLM_TOY_NUM_GRADS]) {
    const tlm_toy_tensor *grads[] = {&m->fc1_weight_grad, &m->ln_weight_grad, &m->ln_bias_grad, &m->fc2_weight_grad};
    const tlm_toy_tensor *ref_grads[] = {&ref->fc1_weight_grad, &ref->ln_weight_grad, &ref->ln_bias_grad,
                                         &ref->fc2_weight_grad};
    float *g = malloc(m->num_params * sizeof(float)), *g32 = malloc(m->num_params * sizeof(float));
    if (!g || !g32) {
        free(g), free(g32);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    for (int i = 0; i < TLM_TOY_NUM_GRADS; i++) {
        const size_t k = tlm_toy_numel(grads[i]);
        tlm_toymodel_read(m, grads[i], g);
        tlm_toymodel_read(ref, ref_grads[i], g32);
        out[i] = (tlm_toy_grad_compare){.name = grads[i]->name, .norm = l2_norm(g, k), .ref_norm = l2_norm(g32, k),
                                        .rel_diff = tlm_rel_error_f32(g, g32, k)};
    }
    free(g), free(g32);
    return TLM_OK;
}

void tlm_toymodel_describe(const tlm_toymodel_config *cfg, char *buf, size_t n) {
    snprintf(buf, n, "fc1: Linear(%d, %d, no bias) -> ReLU -> LayerNorm(%d) -> fc2: Linear(%d, %d, no bias); "
                     "loss %s (%s of squared errors against a random target); batch %d, seed %llu",
             cfg->in_features, cfg->hidden, cfg->hidden, cfg->hidden, cfg->out_features, tlm_toy_loss_name(cfg->loss),
             cfg->loss == TLM_TOY_LOSS_MSE ? "mean" : "sum", cfg->batch_size, (unsigned long long)cfg->seed);
}

void tlm_toymodel_dtypes(const tlm_toymodel *m, char *buf, size_t n) {
    const bool grads_f32 = m->fc1_weight_grad.dtype == TLM_DTYPE_F32 && m->ln_weight_grad.dtype == TLM_DTYPE_F32 &&
                           m->ln_bias_grad.dtype == TLM_DTYPE_F32 && m->fc2_weight_grad.dtype == TLM_DTYPE_F32;
    const bool params_f32 = m->fc1_weight.dtype == TLM_DTYPE_F32 && m->ln_weight.dtype == TLM_DTYPE_F32 &&
                            m->ln_bias.dtype == TLM_DTYPE_F32 && m->fc2_weight.dtype == TLM_DTYPE_F32;
    snprintf(buf, n, "parameters %s, fc1 output %s, ReLU output %s, LayerNorm output %s, logits %s, loss %s, "
                     "gradients %s", params_f32 ? "fp32" : "mixed", tlm_act_dtype_name(m->fc1_out.dtype),
             tlm_act_dtype_name(m->relu_out.dtype), tlm_act_dtype_name(m->ln_out.dtype),
             tlm_act_dtype_name(m->logits.dtype), tlm_act_dtype_name(m->loss.dtype), grads_f32 ? "fp32" : "mixed");
}
