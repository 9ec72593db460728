/* lowp.h — fp16 and bf16 arithmetic in software, for the precision experiments (internal to
 * src/precision): a value of a 16-bit format is held as the float32 it widens to (exactly), and
 * every operation computes in float32 and rounds its result to the format (round to nearest
 * even, core/convert.h). fp32 "rounding" is the identity, so one code path runs all three.
 *
 * Why this is the correctly rounded fp16/bf16 result, not an approximation of it:
 * - Often the float32 operation is itself exact and there is only the one rounding: the product
 *   of two fp16 values has at most 2 x 11 = 22 significant bits, that of two bf16 values 16, and
 *   float32 has 24; the sum of two fp16 values is exact in float32 when their exponents are within
 *   12 of each other (bf16: 15), as in every add of the accumulation experiment (both terms lie
 *   in [2^-7, 2^4), or the sum is still 0).
 * - In general float32 does NOT hold the exact result (2^15 + 2^-24, both fp16 values, needs 40
 *   bits), and two roundings happen: to float32, then to the format. Rounding twice to nearest
 *   gives the correctly rounded result of +, -, *, / and sqrt whenever the intermediate format
 *   has p' >= 2p + 2 significant bits, p those of the target (S. A. Figueroa, "When is double
 *   rounding innocuous?", SIGNUM Newsletter 30(3), 1995): p' = 24 against p = 11 (fp16: 2p + 2 =
 *   24) and p = 8 (bf16: 18).
 * - Range: every fp16 value and every fp16 result's neighbourhood lies inside float32's normal
 *   range; bf16 shares float32's exponent range, and the experiments stay far from its ends.
 * GPUs compute __half and __nv_bfloat16 adds in one rounding; src/cuda/precision_lab.cu runs the
 * accumulation that way, and `tlm precision accumulate --device cuda` compares the two. */
#ifndef TLM_PRECISION_LOWP_H
#define TLM_PRECISION_LOWP_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "core/convert.h"
#include "tlm/dtype.h"

/* v rounded to dt (F32: v itself), as the float32 it widens to */
static inline float tlm_lowp_round(float v, tlm_dtype dt) {
    if (dt == TLM_DTYPE_F16) return tlm_f16_to_f32(tlm_f32_to_f16(v));
    if (dt == TLM_DTYPE_BF16) return tlm_bf16_to_f32(tlm_f32_to_bf16(v));
    return v;
}

/* a op b, a and b values of dt: computed in float32, rounded to dt (see above: exact) */
static inline float tlm_lowp_add(float a, float b, tlm_dtype dt) { return tlm_lowp_round(a + b, dt); }
static inline float tlm_lowp_sub(float a, float b, tlm_dtype dt) { return tlm_lowp_round(a - b, dt); }
static inline float tlm_lowp_mul(float a, float b, tlm_dtype dt) { return tlm_lowp_round(a * b, dt); }
static inline float tlm_lowp_div(float a, float b, tlm_dtype dt) { return tlm_lowp_round(a / b, dt); }
static inline float tlm_lowp_sqrt(float a, tlm_dtype dt) { return tlm_lowp_round(sqrtf(a), dt); }

/* The spacing of dt at |v|: the next larger value of dt minus |v| rounded to dt, computed from
 * the encoding (the bit pattern plus one), not from a table. inf and NaN give NaN. */
static inline double tlm_lowp_spacing(float v, tlm_dtype dt) {
    const float a = fabsf(tlm_lowp_round(v, dt));
    if (!isfinite(a)) return NAN;
    if (dt == TLM_DTYPE_F16) {
        const uint16_t h = tlm_f32_to_f16(a);
        return (double)tlm_f16_to_f32((uint16_t)(h + 1)) - a;
    }
    if (dt == TLM_DTYPE_BF16) {
        const uint16_t h = tlm_f32_to_bf16(a);
        return (double)tlm_bf16_to_f32((uint16_t)(h + 1)) - a;
    }
    return (double)nextafterf(a, INFINITY) - a;
}

/* The largest finite value of dt: the bit pattern just below +inf's (fp16 65504). */
static inline double tlm_lowp_max(tlm_dtype dt) {
    if (dt == TLM_DTYPE_F16) return tlm_f16_to_f32((uint16_t)(tlm_f32_to_f16(INFINITY) - 1));
    if (dt == TLM_DTYPE_BF16) return tlm_bf16_to_f32((uint16_t)(tlm_f32_to_bf16(INFINITY) - 1));
    return nextafterf(INFINITY, 0.0f);
}

#endif
