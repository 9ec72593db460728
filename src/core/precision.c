/* precision.c — the one table of precision-mode names (precision.h). */
#include "tlm/precision.h"

#include "tlm/util.h"

static const char *const names[TLM_PRECISION_COUNT] = {"fp32", "tf32", "bf16", "fp16"};

const char *tlm_precision_name(tlm_precision p) { return (unsigned)p < TLM_PRECISION_COUNT ? names[p] : "?"; }

bool tlm_precision_parse(const char *name, tlm_precision *out) {
    const int i = tlm_name_index(names, TLM_PRECISION_COUNT, name);
    if (i >= 0) *out = (tlm_precision)i;
    return i >= 0;
}

const char *tlm_act_dtype_name(tlm_dtype dt) {
    switch (dt) {
    case TLM_DTYPE_F32: return "fp32";
    case TLM_DTYPE_BF16: return "bf16";
    case TLM_DTYPE_F16: return "fp16";
    default: return tlm_dtype_name(dt);
    }
}

bool tlm_act_dtype_parse(const char *name, tlm_dtype *out) {
    static const char *const act_names[] = {"fp32", "bf16", "fp16"};
    static const tlm_dtype act[] = {TLM_DTYPE_F32, TLM_DTYPE_BF16, TLM_DTYPE_F16};
    const int i = tlm_name_index(act_names, 3, name);
    if (i >= 0) *out = act[i];
    return i >= 0;
}
