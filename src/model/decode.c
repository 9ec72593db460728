/* decode.c — the incremental forward pass with a KV cache (decode.h): the block of forward.c for a
 * chunk of new positions, with attention_kv_cache reading every earlier position's keys and values,
 * and the head on the last position only. */
#include <stdlib.h>

#include "core/convert.h"
#include "model/model_internal.h"
#include "tlm/decode.h"
#include "tlm/memory.h"

struct tlm_decoder {
    tlm_model *m;          /* not owned */
    int max_len;           /* S: positions the cache holds */
    int len;               /* positions run so far */
    int chunk;             /* rows of the work buffers: min(max_len, TLM_DECODE_CHUNK) */
    tlm_dtype dt;          /* the mode's activation dtype */
    void *k_cache, *v_cache; /* (num_layers, S, C) dt each: layer l's position j at row l*S + j */
    float *x, *h;          /* (chunk, C) float32: the residual stream before and after attention */
    float *rstd;           /* (chunk) RMSNorm's, unused after */
    void *ln, *qkv, *att, *ab, *g; /* (chunk, C | 3C | C | 2F | F) dt */
    void *logits;          /* (V) dt: the last position's */
    int32_t *tokens;       /* (chunk) backend memory */
};

static void *decode_alloc(tlm_decoder *d, size_t bytes, const char *name, bool *ok) {
    void *p = tlm_alloc(d->m->backend, bytes, TLM_MEM_ACTIVATIONS, name);
    if (!p) *ok = false;
    return p;
}

tlm_status tlm_decoder_create(tlm_decoder **out, tlm_model *m, int max_len) {
    *out = NULL;
    const tlm_config *c = &m->config;
    if (max_len < 1 || max_len > c->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a KV cache of %d positions: the model's context_length is %d",
                        max_len, c->context_length);
    tlm_decoder *d = calloc(1, sizeof *d);
    if (!d) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the decoder");
    d->m = m;
    d->max_len = max_len;
    d->chunk = max_len < TLM_DECODE_CHUNK ? max_len : TLM_DECODE_CHUNK;
    d->dt = tlm_precision_act_dtype(m->run.precision);
    const size_t es = tlm_dtype_size(d->dt), C = (size_t)c->d_model, F = (size_t)c->d_ff, n = (size_t)d->chunk;
    const size_t cache = (size_t)c->num_layers * max_len * C * es;
    bool ok = true;
    d->k_cache = decode_alloc(d, cache, "kv_cache.k", &ok);
    d->v_cache = decode_alloc(d, cache, "kv_cache.v", &ok);
    d->x = decode_alloc(d, n * C * sizeof(float), "decode.x", &ok);
    d->h = decode_alloc(d, n * C * sizeof(float), "decode.h", &ok);
    d->rstd = decode_alloc(d, n * sizeof(float), "decode.rstd", &ok);
    d->ln = decode_alloc(d, n * C * es, "decode.ln", &ok);
    d->qkv = decode_alloc(d, n * 3 * C * es, "decode.qkv", &ok);
    d->att = decode_alloc(d, n * C * es, "decode.att", &ok);
    d->ab = decode_alloc(d, n * 2 * F * es, "decode.ab", &ok);
    d->g = decode_alloc(d, n * F * es, "decode.g", &ok);
    d->logits = decode_alloc(d, (size_t)c->vocab_size * es, "decode.logits", &ok);
    d->tokens = decode_alloc(d, n * sizeof(int32_t), "decode.tokens", &ok);
    /* the GEMM copy (bf16/fp16) cast now, not in the first forward */
    const tlm_status s =
        ok ? tlm_model_refresh_lowp_weights(m)
           : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of memory for a KV cache of %d positions (%zu bytes)", max_len,
                      2 * cache);
    if (s != TLM_OK) {
        tlm_decoder_free(d);
        return s;
    }
    *out = d;
    return TLM_OK;
}

void tlm_decoder_free(tlm_decoder *d) {
    if (!d) return;
    tlm_backend *be = d->m->backend;
    void *bufs[] = {d->k_cache, d->v_cache, d->x, d->h, d->rstd, d->ln, d->qkv, d->att, d->ab, d->g, d->logits,
                    d->tokens};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
    free(d);
}

int tlm_decoder_length(const tlm_decoder *d) { return d->len; }
void tlm_decoder_reset(tlm_decoder *d) { d->len = 0; }

/* Block l for n new positions at pos0..pos0+n-1: d->x (n, C) in, d->x out (tlm_block_forward's ops,
 * with the attention against the cache). */
static void decode_block(tlm_decoder *d, int l, int pos0, int n) {
    tlm_model *m = d->m;
    tlm_backend *be = m->backend;
    const tlm_config *c = &m->config;
    const tlm_precision pm = m->run.precision;
    const tlm_dtype dt = d->dt;
    const int C = c->d_model, F = c->d_ff, H = c->num_heads, D = C / H;
    const tlm_layer_weights *w = &m->w.layers[l];
    const size_t layer0 = (size_t)l * d->max_len * C; /* layer l's first cached element */
    const size_t rope0 = (size_t)pos0 * (D / 2);      /* the tables' row of position pos0 */
    /* attention branch: h = x + output_proj(attn(RoPE(q), RoPE(k), v) over the cache) */
    tlm_rmsnorm_forward(be, d->ln, d->rstd, d->x, w->ln1, n, C, c->rmsnorm_eps, dt);
    tlm_matmul_forward(be, d->qkv, NULL, d->ln, tlm_gemm_w(m, w->qkv), n, C, 3 * C, pm);
    tlm_rope_forward(be, d->qkv, m->rope_cos + rope0, m->rope_sin + rope0, 1, n, 2 * H, D, 3 * C, dt);
    tlm_attention_kv_cache(be, d->att, d->qkv, tlm_at(d->k_cache, layer0, dt), tlm_at(d->v_cache, layer0, dt), 1, n,
                           pos0, d->max_len, H, D, dt);
    tlm_matmul_forward(be, d->h, d->x, d->att, tlm_gemm_w(m, w->out_proj), n, C, C, pm);
    /* feed-forward branch: x = h + w2(silu(w1 ln2(h)) * w3 ln2(h)) */
    tlm_rmsnorm_forward(be, d->ln, d->rstd, d->h, w->ln2, n, C, c->rmsnorm_eps, dt);
    tlm_matmul_forward(be, d->ab, NULL, d->ln, tlm_gemm_w(m, w->w13), n, C, 2 * F, pm);
    tlm_swiglu_forward(be, d->g, d->ab, n, F, dt);
    tlm_matmul_forward(be, d->x, d->h, d->g, tlm_gemm_w(m, w->w2), n, F, C, pm);
}

tlm_status tlm_decoder_forward(tlm_decoder *d, const int32_t *tokens, int n, float *logits) {
    tlm_model *m = d->m;
    const tlm_config *c = &m->config;
    if (n < 1) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "a decoder forward needs at least one token (got %d)", n);
    if (d->len + (int64_t)n > d->max_len)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%d positions run and %d more exceed the KV cache's %d", d->len, n,
                        d->max_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "token %d (position %d) is outside [0, vocab_size %d)",
                            (int)tokens[i], d->len + i, c->vocab_size);
    TLM_TRY(tlm_model_refresh_lowp_weights(m)); /* the bf16/fp16 GEMM copy, when the weights changed */
    tlm_backend *be = m->backend;
    const int C = c->d_model;
    int rows = 0;
    for (int done = 0; done < n; done += rows) {
        rows = n - done < d->chunk ? n - done : d->chunk;
        tlm_copy_to_backend(be, d->tokens, tokens + done, (size_t)rows * sizeof(int32_t));
        tlm_embedding_forward(be, d->x, d->tokens, m->w.wte, rows, C);
        for (int l = 0; l < c->num_layers; l++) decode_block(d, l, d->len, rows);
        d->len += rows;
    }
    /* the head on the last position: x_final's last row of the last chunk */
    const float *last = d->x + (size_t)(rows - 1) * C;
    tlm_rmsnorm_forward(be, d->ln, d->rstd, last, m->w.ln_final, 1, C, c->rmsnorm_eps, d->dt);
    tlm_matmul_forward(be, d->logits, NULL, d->ln, tlm_gemm_w(m, m->w.lm_head), 1, C, c->vocab_size,
                       m->run.precision);
    if (!logits) return TLM_OK;
    const size_t V = (size_t)c->vocab_size;
    if (d->dt == TLM_DTYPE_F32) {
        tlm_copy_to_host(be, logits, d->logits, V * sizeof(float));
        return TLM_OK;
    }
    uint16_t *raw = malloc(V * sizeof(uint16_t));
    if (!raw) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
    tlm_copy_to_host(be, raw, d->logits, V * sizeof(uint16_t));
    if (d->dt == TLM_DTYPE_BF16) tlm_bf16_to_f32_array(raw, logits, (int64_t)V);
    else tlm_f16_to_f32_array(raw, logits, (int64_t)V);
    free(raw);
    return TLM_OK;
}
