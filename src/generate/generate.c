/* generate.c — the generation loop (generate.h): the prompt's forward fills the KV cache and gives
 * the first token's logits; each new token is drawn, then run through one forward of one position. */
#include <stdlib.h>
#include <time.h>

#include "tlm/decode.h"
#include "tlm/generate.h"
#include "tlm/rng.h"

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

tlm_status tlm_generate_check(const tlm_config *cfg, const tlm_generate_config *c, const int32_t *prompt,
                              int n_prompt) {
    TLM_TRY(tlm_generate_config_check(c, cfg->vocab_size));
    if (n_prompt < 1) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the prompt is empty: give at least one token");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= cfg->vocab_size)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                            "prompt token %d is id %d, outside the model's vocabulary [0, %d)", i, (int)prompt[i],
                            cfg->vocab_size);
    if ((int64_t)n_prompt + c->max_new_tokens > cfg->context_length)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "the prompt's %d tokens and %d new tokens (%lld) exceed the model's context_length %d",
                        n_prompt, c->max_new_tokens, (long long)n_prompt + c->max_new_tokens, cfg->context_length);
    return TLM_OK;
}

tlm_status tlm_generate(tlm_model *m, const tlm_generate_config *c, const int32_t *prompt, int n_prompt, int32_t *out,
                        tlm_token_fn on_token, void *user, tlm_generate_stats *stats) {
    const tlm_config *cfg = &m->config;
    tlm_generate_stats st = {.prompt_tokens = n_prompt};
    if (stats) *stats = st;
    TLM_TRY(tlm_generate_check(cfg, c, prompt, n_prompt));
    if (c->max_new_tokens == 0) return TLM_OK;
    const int V = cfg->vocab_size;
    float *logits = malloc((size_t)V * sizeof(float));
    void *scratch = malloc(tlm_sample_scratch_bytes(V));
    tlm_decoder *d = NULL;
    tlm_status s = logits && scratch ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the logits");
    /* the last new token is never run: the cache needs n_prompt + max_new_tokens - 1 positions */
    if (s == TLM_OK) s = tlm_decoder_create(&d, m, n_prompt + c->max_new_tokens - 1);
    uint64_t rng = tlm_rng_stream(c->seed, 0);
    const double t0 = seconds_now();
    if (s == TLM_OK) s = tlm_decoder_forward(d, prompt, n_prompt, logits); /* prefill */
    double t1 = t0;
    for (int i = 0; s == TLM_OK && i < c->max_new_tokens; i++) {
        if (i > 0) s = tlm_decoder_forward(d, &out[i - 1], 1, logits);
        if (s != TLM_OK) break;
        out[i] = tlm_sample(logits, V, c->temperature, c->top_p, &rng, scratch);
        st.new_tokens = i + 1;
        if (i == 0) t1 = seconds_now();
        if (on_token) on_token(user, out[i]);
        if (out[i] == c->eot_id) {
            st.stopped_at_eot = true;
            break;
        }
    }
    const double t2 = seconds_now();
    st.first_token_ms = 1e3 * (t1 - t0);
    st.decode_ms = st.new_tokens > 1 ? 1e3 * (t2 - t1) : 0;
    st.decode_tokens_per_s = st.new_tokens > 1 && t2 > t1 ? (st.new_tokens - 1) / (t2 - t1) : 0;
    if (stats) *stats = st;
    tlm_decoder_free(d);
    free(logits);
    free(scratch);
    return s;
}
