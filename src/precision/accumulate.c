/* accumulate.c — docs/experiments.md: 0.01 added a thousand times to a running sum, in the four ways of
 * the seed (fp32 into fp32; fp16 into fp16; fp16 into fp32; fp16 converted to fp32 into fp32)
 * and two in bf16, on the CPU with exact software rounding (lowp.h), and the analysis of each
 * trajectory that the "why" lines print. The GPU version is src/cuda/precision_lab.cu. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "precision/lowp.h"
#include "tlm/precision_lab.h"

static const tlm_accumulate_way_info ways[TLM_ACC_NUM_WAYS] = {
    [TLM_ACC_FP32_INTO_FP32] = {"fp32 += fp32", TLM_DTYPE_F32, TLM_DTYPE_F32},
    [TLM_ACC_FP16_INTO_FP16] = {"fp16 += fp16", TLM_DTYPE_F16, TLM_DTYPE_F16},
    [TLM_ACC_FP16_INTO_FP32] = {"fp32 += fp16", TLM_DTYPE_F32, TLM_DTYPE_F16},
    [TLM_ACC_FP16_CAST_INTO_FP32] = {"fp32 += fp32(fp16)", TLM_DTYPE_F32, TLM_DTYPE_F16},
    [TLM_ACC_BF16_INTO_BF16] = {"bf16 += bf16", TLM_DTYPE_BF16, TLM_DTYPE_BF16},
    [TLM_ACC_BF16_INTO_FP32] = {"fp32 += bf16", TLM_DTYPE_F32, TLM_DTYPE_BF16},
};

const tlm_accumulate_way_info *tlm_accumulate_way_get(tlm_accumulate_way w) {
    TLM_ASSERT(w >= 0 && w < TLM_ACC_NUM_WAYS);
    return &ways[w];
}

/* 16-bit values are held as their bit patterns here, as a tensor of that dtype holds them */
static uint16_t narrow16(float v, tlm_dtype dt) {
    return dt == TLM_DTYPE_F16 ? tlm_f32_to_f16(v) : tlm_f32_to_bf16(v);
}

static float widen16(uint16_t h, tlm_dtype dt) {
    return dt == TLM_DTYPE_F16 ? tlm_f16_to_f32(h) : tlm_bf16_to_f32(h);
}

/* One way on the CPU, written as the seed's PyTorch loop. */
static void run_way_cpu(tlm_accumulate_way w, float value, float *addend, float *partial) {
    const tlm_dtype S = ways[w].sum_dtype, A = ways[w].addend_dtype;
    partial[0] = 0.0f;
    if (S == TLM_DTYPE_F32 && A == TLM_DTYPE_F32) {
        const float x = value;
        float s = 0.0f;
        for (int i = 1; i <= TLM_ACCUMULATE_STEPS; i++) partial[i] = s = s + x; /* IEEE fp32 add */
        *addend = x;
    } else if (S == A) {
        /* s and x 16-bit; s + x computed in fp32 and rounded to the format: the correctly
         * rounded 16-bit sum (lowp.h) — what torch does for s += x on two fp16 CPU tensors */
        const uint16_t x = narrow16(value, A);
        uint16_t s = narrow16(0.0f, S);
        for (int i = 1; i <= TLM_ACCUMULATE_STEPS; i++) {
            s = narrow16(widen16(s, S) + widen16(x, A), S);
            partial[i] = widen16(s, S);
        }
        *addend = widen16(x, A);
    } else if (w == TLM_ACC_FP16_CAST_INTO_FP32) {
        /* s += x.type(torch.float32): the conversion written out, then an fp32 add */
        const uint16_t x = narrow16(value, A);
        float s = 0.0f;
        for (int i = 1; i <= TLM_ACCUMULATE_STEPS; i++) {
            const float x32 = widen16(x, A);
            partial[i] = s = s + x32;
        }
        *addend = widen16(x, A);
    } else {
        /* s (fp32) += x (16-bit): type promotion widens x (exactly) and adds in fp32 */
        const uint16_t x = narrow16(value, A);
        float s = 0.0f;
        for (int i = 1; i <= TLM_ACCUMULATE_STEPS; i++) partial[i] = s = s + widen16(x, A);
        *addend = widen16(x, A);
    }
}

tlm_status tlm_accumulate_run(tlm_backend *be, double value, tlm_accumulation *out) {
    if (be->kind == TLM_DEVICE_CUDA) return tlm_accumulate_run_cuda(be, value, out);
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++)
        run_way_cpu((tlm_accumulate_way)w, (float)value, &out->addend[w], out->partial[w]);
    return TLM_OK;
}

void tlm_accumulate_analyze(const tlm_accumulation *acc, tlm_accumulate_way w, double value,
                            tlm_accumulate_analysis *out) {
    const float *p = acc->partial[w];
    const int steps = TLM_ACCUMULATE_STEPS;
    memset(out, 0, sizeof *out);
    out->value = value;
    out->addend = acc->addend[w];
    out->sum = p[steps];
    /* exact in double: addend and sum have at most 24 significant bits and lie within 2^-30..2^4 */
    out->error = out->sum - steps * value;
    out->representation = steps * (out->addend - value);
    out->rounding = out->sum - steps * out->addend;
    out->spacing = tlm_lowp_spacing(p[steps], ways[w].sum_dtype);
    out->last_increment = (double)p[steps] - p[steps - 1];
    out->last_change = 0;
    for (int i = 1; i <= steps; i++) {
        if (p[i] != p[i - 1]) out->last_change = i;
        if ((double)p[i] != (double)p[i - 1] + out->addend) out->inexact_adds++; /* exact in double */
    }
}

/* "2^-7 = 0.0078125" for a power of two (the spacings are), else "%.7g" */
static void power_of_two(double v, char *buf, size_t n) {
    int e;
    double f = frexp(v, &e);
    char exact[64];
    tlm_exact_decimal(v, exact, sizeof exact);
    if (f == 0.5) snprintf(buf, n, "2^%d = %s", e - 1, exact);
    else snprintf(buf, n, "%.7g", v);
}

void tlm_accumulate_why(tlm_accumulate_way w, const tlm_accumulate_analysis *a, char *buf, size_t n) {
    const tlm_dtype S = ways[w].sum_dtype, A = ways[w].addend_dtype;
    const int steps = TLM_ACCUMULATE_STEPS;
    char addend[64], spacing[96];
    tlm_exact_decimal(a->addend, addend, sizeof addend);
    if (a->last_change < steps) {
        /* s stopped: from there every s + x rounds back to s */
        const double stop = a->sum, gap = tlm_lowp_spacing((float)stop, S);
        power_of_two(gap, spacing, sizeof spacing);
        snprintf(buf, n,
                 "s stops at %.9g after add %d of %d: there the %s spacing is %s, and the addend "
                 "%.7g is %s half of it, so every later s + x rounds back to s",
                 stop, a->last_change, steps, tlm_act_dtype_name(S), spacing, a->addend,
                 a->addend < gap / 2 ? "less than" : a->addend == gap / 2 ? "exactly" : "more than");
        return;
    }
    power_of_two(a->spacing, spacing, sizeof spacing);
    char head[200];
    snprintf(head, sizeof head, "%s(0.01) = %s, %+.4e over %d adds", tlm_act_dtype_name(A), addend,
             a->representation, steps);
    if (a->inexact_adds == 0) {
        snprintf(buf, n, "%s; all %d adds are exact in %s, so the error is the rounding of 0.01 alone", head, steps,
                 tlm_act_dtype_name(S));
        return;
    }
    char detail[240];
    const double per = a->addend / a->spacing; /* the addend in spacings of S near the sum */
    if (per < 100)
        snprintf(detail, sizeof detail, "the addend is %.4g spacings there, and the last add grew s by %.9g (%.4g %s)",
                 per, a->last_increment, a->last_increment / a->spacing,
                 a->last_increment == a->spacing ? "spacing" : "spacings");
    else
        snprintf(detail, sizeof detail, "each add rounds s by at most half of it");
    snprintf(buf, n, "%s; %d of the %d adds round, and %s %.4e in all: near the sum the %s spacing is %s; %s", head,
             a->inexact_adds, steps, a->rounding < 0 ? "lose" : "gain", fabs(a->rounding), tlm_act_dtype_name(S),
             spacing, detail);
}

tlm_status tlm_accumulate_run_checked(tlm_backend *be, double value, tlm_accumulation *acc, int *same) {
    static tlm_accumulation cpu_acc;
    TLM_TRY(tlm_accumulate_run(be, value, acc));
    *same = TLM_ACC_NUM_WAYS;
    if (be->kind != TLM_DEVICE_CUDA) return TLM_OK;
    tlm_backend *cpu = NULL;
    tlm_status s = tlm_backend_cpu_create(&cpu, 1);
    if (s == TLM_OK) s = tlm_accumulate_run(cpu, value, &cpu_acc);
    tlm_backend_destroy(cpu);
    *same = 0;
    for (int w = 0; s == TLM_OK && w < TLM_ACC_NUM_WAYS; w++)
        *same += memcmp(acc->partial[w], cpu_acc.partial[w], sizeof acc->partial[w]) == 0 &&
                 acc->addend[w] == cpu_acc.addend[w];
    return s;
}
