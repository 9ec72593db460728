/* sample.c — the next token from the logits: greedy, or temperature and nucleus (top-p) sampling
 * (Holtzman et al. 2020, sec. 3.1) from a seeded stream (generate.h). */
#include <math.h>
#include <stdlib.h>

#include "tlm/generate.h"
#include "tlm/rng.h"

tlm_generate_config tlm_generate_defaults(void) {
    return (tlm_generate_config){.max_new_tokens = 64, .temperature = 1.0, .top_p = 1.0, .seed = 0, .eot_id = -1};
}

tlm_status tlm_generate_config_check(const tlm_generate_config *c, int vocab_size) {
    if (c->max_new_tokens < 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "max_new_tokens %d is negative", c->max_new_tokens);
    if (!(c->temperature >= 0) || !isfinite(c->temperature))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "temperature %g must be finite and >= 0 (0: greedy)", c->temperature);
    if (!(c->top_p > 0 && c->top_p <= 1))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "top_p %g is outside (0, 1]", c->top_p);
    if (c->eot_id < -1 || c->eot_id >= vocab_size)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the end-of-text id %d is outside [0, vocab_size %d)", c->eot_id,
                        vocab_size);
    return TLM_OK;
}

/* qsort's order of ids: higher probability first, then the lower id */
static const double *sort_probs;
static int by_prob(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_probs[i] != sort_probs[j]) return sort_probs[i] > sort_probs[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int tlm_nucleus(const double *probs, int V, double top_p, int32_t *order) {
    for (int i = 0; i < V; i++) order[i] = i;
    sort_probs = probs; /* not reentrant across threads: generation is one loop */
    qsort(order, (size_t)V, sizeof *order, by_prob);
    if (top_p >= 1) return V;
    double sum = 0;
    for (int k = 0; k < V; k++) {
        sum += probs[order[k]];
        if (sum >= top_p) return k + 1;
    }
    return V; /* rounding left the total just below top_p */
}

size_t tlm_sample_scratch_bytes(int V) { return (size_t)V * (sizeof(double) + sizeof(int32_t)); }

static int32_t argmax(const float *x, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int32_t tlm_sample(const float *logits, int V, double temperature, double top_p, uint64_t *rng, void *scratch) {
    if (temperature == 0) return argmax(logits, V);
    double *p = scratch;
    int32_t *order = (int32_t *)(p + V);
    const float mx = logits[argmax(logits, V)];
    double total = 0;
    for (int i = 0; i < V; i++) total += p[i] = exp(((double)logits[i] - mx) / temperature);
    for (int i = 0; i < V; i++) p[i] /= total;
    const double u = tlm_rng_uniform(rng);
    if (top_p >= 1) { /* the whole distribution, in id order: no sort */
        double acc = 0;
        for (int i = 0; i < V; i++)
            if ((acc += p[i]) > u) return i;
        return argmax(logits, V); /* u above the rounded total */
    }
    const int k = tlm_nucleus(p, V, top_p, order);
    double kept = 0;
    for (int i = 0; i < k; i++) kept += p[order[i]];
    double acc = 0;
    for (int i = 0; i < k; i++)
        if ((acc += p[order[i]]) > u * kept) return order[i];
    return order[k - 1];
}
