/* test_generate.c — generation on the CPU (decode.h, generate.h): the attention_kv_cache op against
 * the naive attention op and against itself one position at a time; the decoder's logits against the
 * full forward's at every position (fp32, tight), greedy generation equal to the full forward's argmax
 * token by token, a prompt longer than one chunk; the nucleus cut on known distributions, the sampler's
 * frequencies, seeded runs reproducible, a small top-p greedy; a model loaded from a weights file
 * generating the same tokens; PyTorch's tiny model (its state dict) decoding to PyTorch's logits; bad
 * input refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlm/decode.h"
#include "tlm/generate.h"
#include "tlm/memory.h"
#include "tlm/model.h"
#include "tlm/npy.h"
#include "tlm/ops.h"
#include "test_check.h"

static tlm_backend *be;

static float *buf(size_t n) {
    float *p = tlm_alloc(be, n * sizeof(float), TLM_MEM_WORKSPACE, "test");
    if (!p) die_on(TLM_ERR_OUT_OF_MEMORY, "test buffer");
    return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* ---- the op -------------------------------------------------------------------------------------- */

/* T positions in one call (pos0 0) and one at a time against attention_forward on the same q, k, v */
static void test_op(int T, int H, int D) {
    const int C = H * D;
    float *qkv = buf((size_t)T * 3 * C), *want = buf((size_t)T * C), *probs = buf((size_t)H * T * T);
    float *out = buf((size_t)T * C), *out1 = buf((size_t)T * C);
    const int S = T + 3; /* a cache longer than needed: its rows past the positions are never read */
    float *kc = buf((size_t)2 * S * C), *vc = buf((size_t)2 * S * C);
    uint64_t rng = 11;
    for (size_t i = 0; i < (size_t)T * 3 * C; i++) qkv[i] = (float)tlm_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)2 * S * C; i++) kc[i] = vc[i] = NAN; /* poison */
    tlm_attention_forward(be, want, probs, qkv, qkv + C, qkv + 2 * C, 3 * C, 1, T, H, D, TLM_PRECISION_FP32);
    /* sequence 1 of a batch of 2 (B = 2: sequence 0 gets the same rows) */
    float *qkv2 = buf((size_t)2 * T * 3 * C), *out2 = buf((size_t)2 * T * C);
    memcpy(qkv2, qkv, (size_t)T * 3 * C * sizeof(float));
    memcpy(qkv2 + (size_t)T * 3 * C, qkv, (size_t)T * 3 * C * sizeof(float));
    tlm_attention_kv_cache(be, out2, qkv2, kc, vc, 2, T, 0, S, H, D, TLM_DTYPE_F32);
    memcpy(out, out2 + (size_t)T * C, (size_t)T * C * sizeof(float));
    char what[120];
    snprintf(what, sizeof what, "attention_kv_cache T=%d H=%d D=%d (prefill, B=2) vs attention_forward", T, H, D);
    const double d = max_abs_diff(out, want, (size_t)T * C);
    check_limit(d <= 1e-5, what, d, 1e-5);
    bool cached = true;
    for (int j = 0; j < T; j++)
        cached &= memcmp(kc + ((size_t)S + j) * C, qkv + (size_t)j * 3 * C + C, C * sizeof(float)) == 0 &&
                  memcmp(vc + ((size_t)S + j) * C, qkv + (size_t)j * 3 * C + 2 * C, C * sizeof(float)) == 0;
    check(cached && isnan(kc[(size_t)S * C + (size_t)T * C]), "the op appends k and v to the cache, nothing past them");
    for (int i = 0; i < T; i++) /* one position per call: the decoding steps */
        tlm_attention_kv_cache(be, out1 + (size_t)i * C, qkv + (size_t)i * 3 * C, kc, vc, 1, 1, i, S, H, D,
                               TLM_DTYPE_F32);
    snprintf(what, sizeof what, "attention_kv_cache T=%d one position at a time vs all at once", T);
    check(memcmp(out1, out, (size_t)T * C * sizeof(float)) == 0, "%s: the same bits", what);
    float *bufs[] = {qkv, want, probs, out, out1, kc, vc, qkv2, out2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tlm_free(be, bufs[i]);
}

/* ---- the decoder and greedy generation ----------------------------------------------------------- */

static tlm_model *tiny_model(int context_length, uint64_t seed) {
    tlm_config c;
    die_on(tlm_config_preset("tiny", &c), "tiny");
    c.context_length = context_length;
    tlm_run_config run = tlm_run_defaults();
    run.forward_only = true;
    run.attention = TLM_ATTENTION_NAIVE;
    tlm_model *m = NULL;
    die_on(tlm_model_create(&m, &c, &run, be), "create tiny");
    die_on(tlm_model_init_random(m, seed), "init tiny");
    return m;
}

/* the full forward's logits of seq[0..n) (n x V floats, malloc'ed) */
static float *full_logits(tlm_model *m, const int32_t *seq, int n) {
    float *l = malloc((size_t)n * m->config.vocab_size * sizeof(float));
    die_on(tlm_model_forward(m, seq, seq, 1, n, NULL), "full forward");
    die_on(tlm_model_copy_logits(m, l), "logits");
    return l;
}

static void test_greedy(void) {
    tlm_model *m = tiny_model(32, 5);
    const int V = m->config.vocab_size, P = 6, K = 26;
    int32_t seq[32];
    test_random_ids(seq, P, (uint64_t)V, 3);
    tlm_generate_config gc = tlm_generate_defaults();
    gc.temperature = 0;
    gc.max_new_tokens = K;
    tlm_generate_stats st;
    check_status(tlm_generate(m, &gc, seq, P, seq + P, NULL, NULL, &st), TLM_OK, NULL, "greedy: 26 tokens after 6");
    check(st.new_tokens == K && st.prompt_tokens == P && !st.stopped_at_eot, "stats: %d new tokens after %d",
          st.new_tokens, st.prompt_tokens);
    float *full = full_logits(m, seq, P + K);
    int same = 0;
    for (int i = 0; i < K; i++) same += argmax(full + (size_t)(P - 1 + i) * V, V) == seq[P + i];
    check(same == K, "greedy ids equal the full forward's argmax at every generated position (%d of %d)", same, K);
    /* the decoder's logits at each position against the full forward's */
    tlm_decoder *d = NULL;
    die_on(tlm_decoder_create(&d, m, P + K), "decoder");
    float *got = malloc((size_t)V * sizeof(float));
    double worst = 0, scale = 0;
    die_on(tlm_decoder_forward(d, seq, P, got), "prefill");
    worst = max_abs_diff(got, full + (size_t)(P - 1) * V, (size_t)V);
    for (int i = P; i < P + K; i++) {
        die_on(tlm_decoder_forward(d, seq + i, 1, got), "decode step");
        worst = fmax(worst, max_abs_diff(got, full + (size_t)i * V, (size_t)V));
    }
    for (size_t i = 0; i < (size_t)(P + K) * V; i++) scale = fmax(scale, fabs(full[i]));
    check_limit(worst <= 1e-5 * fmax(scale, 1), "decoder logits vs full forward, every position (max abs diff)", worst,
                1e-5 * fmax(scale, 1));
    check(tlm_decoder_length(d) == P + K, "the cache holds %d positions", tlm_decoder_length(d));
    check_status(tlm_decoder_forward(d, seq, 1, got), TLM_ERR_INVALID_ARGUMENT, "exceed the KV cache's 32",
                 "a forward past the cache");
    tlm_decoder_reset(d);
    int32_t bad = V;
    check_status(tlm_decoder_forward(d, &bad, 1, got), TLM_ERR_INVALID_ARGUMENT, "outside [0, vocab_size 512)",
                 "a token outside the vocabulary");
    tlm_decoder_free(d);
    check_status(tlm_decoder_create(&d, m, 33), TLM_ERR_INVALID_ARGUMENT, "context_length is 32",
                 "a cache longer than the context");
    free(got);
    free(full);
    tlm_model_free(m);
}

/* a prompt longer than one chunk (TLM_DECODE_CHUNK) runs in two */
static void test_long_prompt(void) {
    const int P = TLM_DECODE_CHUNK + 40;
    tlm_model *m = tiny_model(P + 1, 9);
    const int V = m->config.vocab_size;
    int32_t *seq = malloc((size_t)P * sizeof(int32_t));
    test_random_ids(seq, (size_t)P, (uint64_t)V, 4);
    float *full = full_logits(m, seq, P), *got = malloc((size_t)V * sizeof(float));
    tlm_decoder *d = NULL;
    die_on(tlm_decoder_create(&d, m, P + 1), "decoder");
    die_on(tlm_decoder_forward(d, seq, P, got), "prefill of two chunks");
    const double diff = max_abs_diff(got, full + (size_t)(P - 1) * V, (size_t)V);
    check_limit(diff <= 1e-4, "a prompt of 552 tokens (2 chunks): last logits vs full forward", diff, 1e-4);
    tlm_decoder_free(d);
    free(seq);
    free(full);
    free(got);
    tlm_model_free(m);
}

/* ---- sampling ------------------------------------------------------------------------------------ */

static void test_nucleus(void) {
    const double p[4] = {0.1, 0.4, 0.2, 0.3}, flat[4] = {0.25, 0.25, 0.25, 0.25};
    int32_t order[4];
    int k = tlm_nucleus(p, 4, 0.5, order);
    check(k == 2 && order[0] == 1 && order[1] == 3 && order[2] == 2 && order[3] == 0,
          "nucleus of {.1,.4,.2,.3} at p=0.5: ids 1, 3 (k %d; order %d %d %d %d)", k, order[0], order[1], order[2],
          order[3]);
    check(tlm_nucleus(p, 4, 0.75, order) == 3, "at p=0.75: 3 ids");
    check(tlm_nucleus(p, 4, 0.3, order) == 1, "at p=0.3: the top id alone");
    check(tlm_nucleus(p, 4, 1.0, order) == 4, "at p=1: all 4");
    k = tlm_nucleus(flat, 4, 0.5, order);
    check(k == 2 && order[0] == 0 && order[1] == 1, "ties: the lower ids first (k %d: %d %d)", k, order[0], order[1]);
    /* the sampler's frequencies: the full distribution, and its nucleus renormalised */
    float logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (float)log(p[i]);
    void *scratch = malloc(tlm_sample_scratch_bytes(4));
    const int n = 40000;
    int count[4] = {0}, cut[4] = {0};
    uint64_t rng = tlm_rng_stream(1, 0);
    for (int i = 0; i < n; i++) count[tlm_sample(logits, 4, 1.0, 1.0, &rng, scratch)]++;
    for (int i = 0; i < n; i++) cut[tlm_sample(logits, 4, 1.0, 0.5, &rng, scratch)]++;
    double worst = 0;
    for (int i = 0; i < 4; i++) worst = fmax(worst, fabs((double)count[i] / n - p[i]));
    check_limit(worst < 0.01, "temperature 1, top-p 1: frequencies vs {.1,.4,.2,.3}", worst, 0.01);
    check(cut[0] == 0 && cut[2] == 0 && fabs((double)cut[1] / n - 4.0 / 7) < 0.01,
          "top-p 0.5: only ids 1 and 3, at 4/7 and 3/7 (%d %d %d %d)", cut[0], cut[1], cut[2], cut[3]);
    int hot = 0; /* temperature 0.01 sharpens to the argmax */
    for (int i = 0; i < 1000; i++) hot += tlm_sample(logits, 4, 0.01, 1.0, &rng, scratch) == 1;
    check(hot == 1000, "temperature 0.01 draws the argmax (%d of 1000)", hot);
    free(scratch);
}

static void test_seeded(void) {
    tlm_model *m = tiny_model(32, 6);
    const int P = 4, K = 24;
    int32_t prompt[4] = {1, 2, 3, 4}, a[24], b[24], c[24], g[24];
    tlm_generate_config gc = tlm_generate_defaults();
    gc.max_new_tokens = K;
    gc.temperature = 1.0;
    gc.top_p = 0.95;
    gc.seed = 7;
    die_on(tlm_generate(m, &gc, prompt, P, a, NULL, NULL, NULL), "sample a");
    die_on(tlm_generate(m, &gc, prompt, P, b, NULL, NULL, NULL), "sample b");
    check(memcmp(a, b, sizeof a) == 0, "seed 7 twice: the same %d tokens", K);
    gc.seed = 8;
    die_on(tlm_generate(m, &gc, prompt, P, c, NULL, NULL, NULL), "sample c");
    check(memcmp(a, c, sizeof a) != 0, "seed 8: other tokens");
    gc.top_p = 1e-6;
    die_on(tlm_generate(m, &gc, prompt, P, c, NULL, NULL, NULL), "top-p tiny");
    gc.temperature = 0;
    die_on(tlm_generate(m, &gc, prompt, P, g, NULL, NULL, NULL), "greedy");
    check(memcmp(c, g, sizeof c) == 0, "top-p 1e-6 at temperature 1 is greedy");
    /* the end-of-text id stops it, and is the last token */
    gc.eot_id = g[5];
    int first = 0;
    while (g[first] != gc.eot_id) first++;
    tlm_generate_stats st;
    die_on(tlm_generate(m, &gc, prompt, P, c, NULL, NULL, &st), "greedy to eot");
    check(st.stopped_at_eot && st.new_tokens == first + 1 && c[first] == gc.eot_id,
          "stops at the end-of-text id %d after %d tokens (%d)", gc.eot_id, first + 1, st.new_tokens);
    /* bad input */
    gc = tlm_generate_defaults();
    gc.top_p = 0;
    check_status(tlm_generate(m, &gc, prompt, P, c, NULL, NULL, NULL), TLM_ERR_INVALID_ARGUMENT,
                 "top_p 0 is outside (0, 1]", "top-p 0");
    gc.top_p = 1.5;
    check_status(tlm_generate_config_check(&gc, 512), TLM_ERR_INVALID_ARGUMENT, "top_p 1.5", "top-p 1.5");
    gc = tlm_generate_defaults();
    gc.temperature = -1;
    check_status(tlm_generate_config_check(&gc, 512), TLM_ERR_INVALID_ARGUMENT, "temperature -1", "temperature -1");
    gc = tlm_generate_defaults();
    gc.eot_id = 512;
    check_status(tlm_generate_config_check(&gc, 512), TLM_ERR_INVALID_ARGUMENT, "end-of-text id 512", "eot 512");
    gc = tlm_generate_defaults();
    gc.max_new_tokens = 29;
    check_status(tlm_generate(m, &gc, prompt, P, c, NULL, NULL, NULL), TLM_ERR_INVALID_ARGUMENT,
                 "the prompt's 4 tokens and 29 new tokens (33) exceed the model's context_length 32", "too long");
    int32_t badp[2] = {3, 600};
    check_status(tlm_generate(m, &gc, badp, 2, c, NULL, NULL, NULL), TLM_ERR_INVALID_ARGUMENT,
                 "prompt token 1 is id 600, outside the model's vocabulary [0, 512)", "prompt id >= vocab");
    check_status(tlm_generate(m, &gc, prompt, 0, c, NULL, NULL, NULL), TLM_ERR_INVALID_ARGUMENT, "empty",
                 "empty prompt");
    tlm_model_free(m);
}

/* a model saved to a weights file and loaded back (tlm_generate_load) generates the same tokens */
static void test_load(void) {
    tlm_model *m = tiny_model(32, 12);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tlm_test_generate_%d.safetensors", (int)getpid());
    die_on(tlm_model_save(m, path), "save");
    int32_t prompt[3] = {7, 8, 9}, a[16], b[16];
    tlm_generate_config gc = tlm_generate_defaults();
    gc.max_new_tokens = 16;
    gc.seed = 3;
    die_on(tlm_generate(m, &gc, prompt, 3, a, NULL, NULL, NULL), "generate");
    tlm_model *m2 = NULL;
    tlm_config cfg;
    const tlm_run_config run = tlm_run_defaults();
    tlm_generate_source src = {.weights = path};
    check_status(tlm_generate_load(&src, &run, be, &m2, &cfg), TLM_OK, NULL, "load the weights file");
    if (m2) {
        die_on(tlm_generate(m2, &gc, prompt, 3, b, NULL, NULL, NULL), "generate from the file");
        check(memcmp(a, b, sizeof a) == 0 && cfg.num_heads == 4, "the loaded model generates the same 16 tokens");
    }
    tlm_model_free(m2);
    m2 = NULL;
    tlm_generate_source none = {0};
    check_status(tlm_generate_load(&none, &run, be, &m2, &cfg), TLM_ERR_INVALID_ARGUMENT, "a checkpoint directory or a "
                 "weights file", "no source");
    tlm_generate_source missing = {.weights = "/nonexistent/w.safetensors"};
    check(tlm_generate_load(&missing, &run, be, &m2, &cfg) != TLM_OK && strstr(tlm_last_error(), "/nonexistent"),
          "a missing weights file is named (%s)", tlm_last_error());
    remove(path);
    tlm_model_free(m);
}

/* PyTorch's tiny model (tests/fixtures/tiny: a state dict, its batch and its float32 logits): for every
 * prefix of the batch's first row, the decoder's last logits are PyTorch's at that position, and the
 * first greedy token is their argmax */
static void test_pytorch_fixture(void) {
    char w[600], in[600], lg[600];
    snprintf(w, sizeof w, "%s/weights.safetensors", test_fixtures());
    snprintf(in, sizeof in, "%s/inputs.npy", test_fixtures());
    snprintf(lg, sizeof lg, "%s/logits.npy", test_fixtures());
    tlm_model *m = NULL;
    tlm_config cfg;
    const tlm_run_config run = tlm_run_defaults();
    const tlm_generate_source src = {.weights = w, .num_heads = 4};
    tlm_array inputs, logits;
    die_on(tlm_generate_load(&src, &run, be, &m, &cfg), "the fixture's state dict");
    die_on(tlm_npy_read(in, &inputs), "inputs.npy");
    die_on(tlm_npy_read(lg, &logits), "logits.npy");
    const int T = (int)inputs.shape[1], V = cfg.vocab_size;
    int32_t *row = malloc((size_t)inputs.numel * sizeof(int32_t)), next;
    die_on(tlm_array_to_tokens(&inputs, row, V, "inputs"), "inputs as ids"); /* row 0: the first T ids */
    float *got = malloc((size_t)V * sizeof(float));
    if (logits.dtype != TLM_DTYPE_F32 || logits.shape[2] != V) die_on(TLM_ERR_FORMAT, "logits.npy: (B, T, V) float32");
    const float *want = logits.data; /* (B, T, V) float32 */
    double worst = 0;
    int same = 0;
    tlm_generate_config gc = tlm_generate_defaults();
    gc.temperature = 0;
    gc.max_new_tokens = 1;
    for (int t = 0; t < T; t++) {
        tlm_decoder *d = NULL;
        die_on(tlm_decoder_create(&d, m, t + 1), "decoder");
        die_on(tlm_decoder_forward(d, row, t + 1, got), "prefill");
        worst = fmax(worst, max_abs_diff(got, want + (size_t)t * V, (size_t)V));
        tlm_decoder_free(d);
        die_on(tlm_generate(m, &gc, row, t + 1, &next, NULL, NULL, NULL), "greedy");
        same += next == argmax(want + (size_t)t * V, V);
    }
    check_limit(worst <= 1e-5, "PyTorch's tiny: decoder logits of every prefix vs PyTorch's (max abs diff)", worst,
                1e-5);
    check(same == T, "PyTorch's tiny: the greedy token after each prefix is the argmax of PyTorch's logits (%d of %d)",
          same, T);
    free(row);
    free(got);
    tlm_array_free(&inputs);
    tlm_array_free(&logits);
    tlm_model_free(m);
}

int main(void) {
    be = test_backend();
    test_op(9, 3, 8);
    test_op(33, 2, 16);
    test_greedy();
    test_long_prompt();
    test_nucleus();
    test_seeded();
    test_load();
    test_pytorch_fixture();
    return test_finish_backend(be);
}
