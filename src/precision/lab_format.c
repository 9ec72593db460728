/* lab_format.c — what the precision experiments share for printing: the dtype names the CLI
 * takes, and the exact decimal expansion of a binary floating-point value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "precision/lowp.h"
#include "tlm/precision_lab.h"

double tlm_lab_dtype_max(tlm_dtype dt) { return tlm_lowp_max(dt); }

/* A double is m 2^e with m < 2^53 an integer. For e < 0 its value is m 5^-e / 10^-e: the digits
 * of the integer m 5^-e with the decimal point -e places from the right, exactly; for e >= 0 the
 * integer m 2^e. Both integers are built in decimal, one small multiplication at a time (at most
 * 1126 of them, under 810 digits: the extremes of double). */
#define EXACT_MAX_DIGITS 1200

static void times_small(uint8_t *digits, int *len, int k) { /* digits little-endian */
    int carry = 0;
    for (int i = 0; i < *len; i++) {
        int d = digits[i] * k + carry;
        digits[i] = (uint8_t)(d % 10);
        carry = d / 10;
    }
    while (carry) {
        digits[(*len)++] = (uint8_t)(carry % 10);
        carry /= 10;
    }
}

void tlm_exact_decimal(double v, char *buf, size_t n) {
    if (n == 0) return;
    if (isnan(v)) { snprintf(buf, n, "nan"); return; }
    if (isinf(v)) { snprintf(buf, n, "%sinf", v < 0 ? "-" : ""); return; }
    int exp2;
    double f = frexp(fabs(v), &exp2); /* |v| = f 2^exp2, f in [0.5, 1) or 0 */
    uint64_t m = (uint64_t)ldexp(f, 53);
    int e = exp2 - 53;
    while (m && !(m & 1) && e < 0) {
        m >>= 1;
        e++;
    }
    uint8_t digits[EXACT_MAX_DIGITS];
    int len = 0;
    do {
        digits[len++] = (uint8_t)(m % 10);
        m /= 10;
    } while (m);
    for (int i = 0; i < (e < 0 ? -e : e); i++) times_small(digits, &len, e < 0 ? 5 : 2);
    const int frac = e < 0 ? -e : 0; /* digits after the point */
    char text[EXACT_MAX_DIGITS + 4];
    int t = 0;
    if (v < 0 || signbit(v)) text[t++] = '-';
    if (len <= frac) { /* 0.000ddd */
        text[t++] = '0';
        text[t++] = '.';
        for (int i = 0; i < frac - len; i++) text[t++] = '0';
        for (int i = len - 1; i >= 0; i--) text[t++] = (char)('0' + digits[i]);
    } else {
        for (int i = len - 1; i >= 0; i--) {
            text[t++] = (char)('0' + digits[i]);
            if (i == frac && frac > 0) text[t++] = '.';
        }
    }
    text[t] = '\0';
    snprintf(buf, n, "%s", text);
}
