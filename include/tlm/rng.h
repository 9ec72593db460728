/* rng.h — the seeded random numbers tlm uses (initialisation, random batches):
 * splitmix64 (Steele, Lea & Flood 2014) for 64-bit streams, uniforms from its top 53 bits,
 * normals by Box–Muller, truncated normals by rejection (as torch.nn.init.trunc_normal_
 * defines the distribution; the numbers differ from PyTorch's). Deterministic for a seed. */
#ifndef TLM_RNG_H
#define TLM_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t tlm_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double tlm_rng_uniform(uint64_t *state) {
    return (double)(tlm_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* standard normal, Box–Muller (one of the pair) */
static inline double tlm_rng_normal(uint64_t *state) {
    double u1 = tlm_rng_uniform(state), u2 = tlm_rng_uniform(state);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* normal(0, std) truncated to [-cut*std, cut*std] by rejection */
static inline double tlm_rng_trunc_normal(uint64_t *state, double std, double cut) {
    for (;;) {
        double z = tlm_rng_normal(state);
        if (z >= -cut && z <= cut) return z * std;
    }
}

/* uniform integer in [0, n), n >= 1 (modulo bias below 2^-40 for n < 2^24) */
static inline uint64_t tlm_rng_below(uint64_t *state, uint64_t n) {
    return tlm_rng_next(state) % n;
}

/* An independent stream for (seed, stream id): use one per tensor or per chunk so results
 * do not depend on the number of threads. */
static inline uint64_t tlm_rng_stream(uint64_t seed, uint64_t id) {
    uint64_t s = seed ^ (id * 0xD1B54A32D192ED03ull);
    return tlm_rng_next(&s);
}

#endif
