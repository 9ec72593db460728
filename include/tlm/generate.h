/* generate.h — text generation from a trained CS336 model (src/generate): the model from a tlm train
 * checkpoint or a weights file, a prompt of token ids, and autoregressive decoding with a KV cache
 * (decode.h: the prompt in one forward, the prefill; then one position per new token) and sampling:
 * greedy (temperature 0), or softmax(logits / temperature) cut to its nucleus (top-p: Holtzman et al.
 * 2020, "The Curious Case of Neural Text Degeneration", sec. 3.1), from a seeded generator (rng.h),
 * stopping after max_new_tokens or at the end-of-text id. */
#ifndef TLM_GENERATE_H
#define TLM_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include "tlm/model.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model (src/generate/load.c) ------------------------------------------------------------ */

/* Where the weights come from: exactly one of checkpoint and weights. */
typedef struct {
    const char *checkpoint;   /* a tlm train --checkpoint-dir (its `latest`) or one step-N directory */
    const char *weights;      /* a safetensors file with the CS336 names (tlm's, or a PyTorch state dict) */
    const char *strip_prefix; /* removed from the weights file's tensor names (NULL: none) */
    int num_heads;            /* for a weights file without tlm's config metadata (0: not given) */
    int context_length;       /* the RoPE table's length, which no file fixes for a state dict (0: the
                                 checkpoint's or file's, CS336's 1024 for a state dict) */
} tlm_generate_source;

/* Creates the model the source holds on `be` with `run` (forward_only is set) and loads its weights
 * (float32 masters; a weights file's bf16/fp16/fp64 tensors converted). *cfg receives its config. A
 * checkpoint's warning (tlm_checkpoint's `warning`: a version-1 state.json) goes to stderr, "tlm: warning: ...".
 * Errors: IO, FORMAT (the files, named), INVALID_ARGUMENT (a state dict without num_heads: the hint
 * to give it; a checkpoint and a weights file both or neither), the model's. */
tlm_status tlm_generate_load(const tlm_generate_source *src, const tlm_run_config *run, tlm_backend *be,
                             tlm_model **out, tlm_config *cfg);

/* ---- sampling (src/generate/sample.c) ----------------------------------------------------------- */

typedef struct {
    int max_new_tokens;   /* >= 0: the most tokens generated */
    double temperature;   /* >= 0; 0: greedy (argmax, the lowest id on ties) */
    double top_p;         /* (0, 1]: sample from the nucleus, the fewest most-probable ids whose
                             probabilities sum to at least top_p; 1: from the whole distribution */
    uint64_t seed;        /* the sampling's random stream (tlm_rng_stream(seed, 0)) */
    int eot_id;           /* stop after generating this id (it is returned, last); -1: none */
} tlm_generate_config;

/* 64 new tokens, temperature 1, top_p 1, seed 0, no end-of-text id */
tlm_generate_config tlm_generate_defaults(void);

/* INVALID_ARGUMENT naming the field: max_new_tokens < 0, temperature < 0 or not finite, top_p outside
 * (0, 1], eot_id outside [-1, vocab_size). */
tlm_status tlm_generate_config_check(const tlm_generate_config *c, int vocab_size);

/* The nucleus of probs (V values >= 0 summing to 1): order[0..k) receives the ids sorted by
 * probability, highest first (ties: lower id first), and the return value is k, the fewest of them
 * whose probabilities sum to at least top_p (1 <= k <= V; all V when top_p >= 1). */
int tlm_nucleus(const double *probs, int V, double top_p, int32_t *order);

/* The next token from logits (V float32): greedy when temperature is 0, else a draw from
 * softmax(logits / temperature) (in float64, max-subtracted) cut to its nucleus and renormalised,
 * with one uniform from *rng. scratch: V doubles and V int32 (tlm_sample_scratch_bytes). */
size_t tlm_sample_scratch_bytes(int V);
int32_t tlm_sample(const float *logits, int V, double temperature, double top_p, uint64_t *rng, void *scratch);

/* ---- the loop (src/generate/generate.c) --------------------------------------------------------- */

typedef struct {
    int prompt_tokens;
    int new_tokens;          /* generated (the end-of-text id included when it stopped there) */
    bool stopped_at_eot;
    double first_token_ms;   /* time to first token: the prompt's forward (prefill) and the first draw (a
                                cold process: on CUDA it includes cuBLASLt's plan of each GEMM shape's
                                first use; the KV cache's allocation is before it) */
    double decode_ms;        /* the rest: new_tokens - 1 forwards of one position and their draws */
    double decode_tokens_per_s; /* (new_tokens - 1) / decode time; 0 with fewer than 2 new tokens */
} tlm_generate_stats;

/* What tlm_generate checks before any work: the config (tlm_generate_config_check), the prompt
 * (n_prompt >= 1, each id in [0, vocab_size), its index named) and the context it needs
 * (n_prompt + max_new_tokens <= cfg->context_length, both numbers named). INVALID_ARGUMENT. */
tlm_status tlm_generate_check(const tlm_config *cfg, const tlm_generate_config *c, const int32_t *prompt,
                              int n_prompt);

/* Called with each new token as it is drawn (to stream it); NULL: none. */
typedef void (*tlm_token_fn)(void *user, int32_t id);

/* Generates up to c->max_new_tokens after prompt[0..n_prompt) (n_prompt >= 1, each id in
 * [0, vocab_size)) into out (c->max_new_tokens ids), calling on_token for each. The context must fit:
 * n_prompt + max_new_tokens <= the model's context_length, else INVALID_ARGUMENT naming both numbers
 * (nothing runs). Errors: INVALID_ARGUMENT (the config, tlm_generate_config_check; the prompt),
 * OUT_OF_MEMORY (the KV cache), the model's. *stats (may be NULL) receives the counts and timings
 * (wall clock, each forward waited for). */
tlm_status tlm_generate(tlm_model *m, const tlm_generate_config *c, const int32_t *prompt, int n_prompt, int32_t *out,
                        tlm_token_fn on_token, void *user, tlm_generate_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
