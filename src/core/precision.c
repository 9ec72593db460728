/* precision.c — the one table of precision-mode names (precision.h). */
#include "tlm/precision.h"

#include <string.h>

static const char *const names[TLM_PRECISION_COUNT] = {"fp32", "tf32", "bf16", "fp16"};

const char *tlm_precision_name(tlm_precision p) { return (unsigned)p < TLM_PRECISION_COUNT ? names[p] : "?"; }

bool tlm_precision_parse(const char *name, tlm_precision *out) {
    for (int p = 0; p < TLM_PRECISION_COUNT; p++)
        if (strcmp(name, names[p]) == 0) {
            *out = (tlm_precision)p;
            return true;
        }
    return false;
}

const char *tlm_act_dtype_name(tlm_dtype dt) {
    switch (dt) {
    case TLM_DTYPE_F32: return "fp32";
    case TLM_DTYPE_BF16: return "bf16";
    case TLM_DTYPE_F16: return "fp16";
    default: return tlm_dtype_name(dt);
    }
}
