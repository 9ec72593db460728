/* precision_lab.h — the mixed-precision experiments of `tlm precision` (CS336 Assignment 2,
 * docs/experiments.md), computed by tlm itself: every figure they print comes from arithmetic done
 * here, never from a table.
 *
 * - accumulate: 0.01 added 1000 times to a running sum, in the four ways of docs/experiments.md plus
 *   two in bf16; on the CPU with exact software rounding (src/precision/lowp.h says why it is
 *   exact), on the GPU with __half / __nv_bfloat16 arithmetic in one thread.
 * - layernorm: LayerNorm computed entirely in fp16, entirely in bf16, and with fp32 statistics,
 *   over input magnitudes x widths, against a float64 reference: which parts overflow or lose
 *   precision, and whether bf16 still needs fp32 statistics.
 * - autocast: the ToyModel through the backend ops under autocast (toymodel.h).
 *
 * "fp16" is IEEE binary16 (11 significant bits, largest value 65504), "bf16" bfloat16 (8
 * significant bits, float32's exponent range). Sources: Micikevicius et al. 2018, "Mixed
 * Precision Training" (fp32 accumulation and master weights); PyTorch's autocast op lists. */
#ifndef TLM_PRECISION_LAB_H
#define TLM_PRECISION_LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlm/backend.h"
#include "tlm/dtype.h"
#include "tlm/precision.h"
#include "tlm/report.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names of fp32, fp16, bf16: tlm_act_dtype_name / tlm_act_dtype_parse (precision.h). */
/* The largest finite value of fp32, fp16 or bf16, from the encoding (fp16: 65504). */
double tlm_lab_dtype_max(tlm_dtype dt);

/* ---- accumulation (docs/experiments.md) ---------------------------------------------------------- */

#define TLM_ACCUMULATE_STEPS 1000 /* adds */
#define TLM_ACCUMULATE_VALUE 0.01 /* the value added, before it is rounded to the addend's dtype */

/* The ways, as the seed writes them in PyTorch (s = torch.tensor(0, dtype=S); 1000 times
 * s += x, x = torch.tensor(0.01, dtype=A)). The value is rounded to A once, through float32 (as
 * c10::Half and c10::BFloat16, whose constructors take a float). */
typedef enum {
    TLM_ACC_FP32_INTO_FP32 = 0,     /* S fp32, A fp32 */
    TLM_ACC_FP16_INTO_FP16 = 1,     /* S fp16, A fp16: every add rounded to fp16 */
    TLM_ACC_FP16_INTO_FP32 = 2,     /* S fp32, A fp16: type promotion widens x, an fp32 add */
    TLM_ACC_FP16_CAST_INTO_FP32 = 3,/* S fp32, s += x.type(torch.float32): the same arithmetic */
    TLM_ACC_BF16_INTO_BF16 = 4,     /* S bf16, A bf16 */
    TLM_ACC_BF16_INTO_FP32 = 5,     /* S fp32, A bf16 */
    TLM_ACC_NUM_WAYS
} tlm_accumulate_way;

typedef struct {
    const char *name;     /* "fp16 += fp16", "fp32 += fp32(fp16)" */
    tlm_dtype sum_dtype;  /* S */
    tlm_dtype addend_dtype; /* A */
} tlm_accumulate_way_info;

const tlm_accumulate_way_info *tlm_accumulate_way_get(tlm_accumulate_way w);

/* The trajectories: the addend as stored in A and the sum after each add, each widened to
 * float32 (exact). partial[w][0] = 0, partial[w][i] = s after i adds. */
typedef struct {
    float addend[TLM_ACC_NUM_WAYS];
    float partial[TLM_ACC_NUM_WAYS][TLM_ACCUMULATE_STEPS + 1];
} tlm_accumulation;

/* Runs every way on be: the CPU backend computes in software (src/precision/lowp.h: fp32 adds
 * of the CPU, fp16/bf16 adds computed in fp32 and rounded, which is exact); the CUDA backend
 * runs tlm_accumulate_run_cuda. value: TLM_ACCUMULATE_VALUE. */
tlm_status tlm_accumulate_run(tlm_backend *be, double value, tlm_accumulation *out);

/* One kernel of one thread on be's stream (src/cuda/precision_lab.cu): fp32 adds (__fadd_rn),
 * __half and __nv_bfloat16 adds (__hadd, one rounding each), conversions __float2half_rn /
 * __float2bfloat16_rn of (float)value, passed at run time so the compiler cannot fold the loop.
 * TLM_ERR_UNSUPPORTED in a build without CUDA (src/cuda/no_cuda.c). */
tlm_status tlm_accumulate_run_cuda(tlm_backend *be, double value, tlm_accumulation *out);

/* tlm_accumulate_run on be, and on a CUDA backend the same on the CPU backend: *same counts the ways
 * whose addend and every partial sum equal the CPU's software rounding bit for bit
 * (TLM_ACC_NUM_WAYS on the CPU, where there is nothing to compare). */
/* The report's table "ways" (a row per way: way, sum_dtype, addend_dtype, addend and addend_exact, sum
 * and sum_exact, error, representation_error, rounding_error, inexact_adds, spacing_at_sum,
 * last_increment, last_change) and the list "why" (tlm_accumulate_why of each way), from acc. */
void tlm_accumulate_report_ways(tlm_report *rep, const tlm_accumulation *acc);

tlm_status tlm_accumulate_run_checked(tlm_backend *be, double value, tlm_accumulation *out, int *same);

/* What a trajectory says, all of it computed from the trajectory and the formats' encodings. */
typedef struct {
    double value;          /* the intended addend, 0.01 */
    double addend;         /* the addend as stored in A */
    double sum;            /* s after the last add */
    double error;          /* sum - steps * value */
    double representation; /* steps * (addend - value): what rounding 0.01 to A costs */
    double rounding;       /* sum - steps * addend: what the rounded adds cost (0: all exact) */
    double spacing;        /* S's spacing at the sum (next value of S up, minus the sum) */
    double last_increment; /* what the last add grew s by */
    int inexact_adds;      /* adds whose result is not s + x exactly (it was rounded) */
    int last_change;       /* the last add that changed s (steps: it grew to the end) */
} tlm_accumulate_analysis;

void tlm_accumulate_analyze(const tlm_accumulation *acc, tlm_accumulate_way w, double value,
                            tlm_accumulate_analysis *out);

/* One line (no newline) on why the sum came out as it did, from the analysis: the rounding of
 * 0.01, the spacing of S near the sum, and what the adds lost or gained (or where s stopped). */
void tlm_accumulate_why(tlm_accumulate_way w, const tlm_accumulate_analysis *a, char *buf, size_t n);

/* The exact decimal expansion of a finite double (every binary fraction has one), e.g.
 * 0.010002136230468750 for fp16(0.01); "inf", "-inf", "nan" otherwise. */
void tlm_exact_decimal(double v, char *buf, size_t n);

/* ---- LayerNorm in low precision (docs/experiments.md) ---------------------------------------------
 * y = (x - mean) * rstd, mean = sum(x)/C, var = sum((x - mean)^2)/C, rstd = 1/sqrt(var + eps),
 * eps 1e-5 (LayerNorm's affine weight 1 and bias 0, their initial values, are exact and left
 * out). Rows x = M (1 + z), z ~ N(0, 1) seeded: mean M, standard deviation M, a row with a
 * nonzero mean like the ReLU output the ToyModel's LayerNorm normalizes. The same z for every
 * magnitude M and scheme, so a grid's columns differ only in M. Sums run left to right as the
 * accumulation experiment does (pairwise: a balanced tree, closer to a GPU block reduction). */

#define TLM_LN_LAB_MAGNITUDES 5 /* M = 1, 10, 100, 1e3, 1e4 */
#define TLM_LN_LAB_WIDTHS 4     /* C = 10, 100, 1000, 10240 */

typedef enum {
    TLM_LN_FP32 = 0,           /* every op in fp32: the method's own error */
    TLM_LN_FP16 = 1,           /* inputs fp16; every add, multiply, divide, sqrt rounded to fp16 */
    TLM_LN_FP16_F32_STATS = 2, /* inputs fp16; mean, sum of squares, var, rstd in fp32;
                                * x - mean and the scaling by rstd rounded to fp16 */
    TLM_LN_BF16 = 3,
    TLM_LN_BF16_F32_STATS = 4,
    TLM_LN_NUM_SCHEMES
} tlm_ln_scheme;

typedef struct {
    const char *name;        /* "fp16", "fp16 + fp32 stats" */
    tlm_dtype input;         /* the inputs are values of this dtype */
    tlm_dtype stats;         /* the reductions and the statistics */
    tlm_dtype elementwise;   /* x - mean, (x - mean) * rstd: the output's dtype */
} tlm_ln_scheme_info;

const tlm_ln_scheme_info *tlm_ln_scheme_get(tlm_ln_scheme s);

typedef struct {
    int rows;       /* rows per cell (default 8) */
    uint64_t seed;  /* the z of the inputs (default 0) */
    bool pairwise;  /* sums as a balanced tree instead of left to right (default false) */
} tlm_ln_lab_config;

tlm_ln_lab_config tlm_ln_lab_defaults(void);

#define TLM_LN_LAB_EPS 1e-5f /* torch.nn.LayerNorm's */

/* The statistics of one row as a scheme computed them (values of its stats dtype). */
typedef struct {
    float sum, mean, sumsq, var, rstd; /* sumsq = sum((x - mean)^2); rstd = 1/sqrt(var + eps) */
} tlm_ln_row_stats;

/* LayerNorm of one row in scheme s, every operation rounded to the scheme's dtypes: x (C) values
 * of its input dtype; y (C) = (x - mean) * rstd, values of its elementwise dtype; work (C) scratch.
 * C must be a value of the stats dtype (bf16 holds every integer up to 256, and the grid's
 * widths). The grid below is this function applied row by row. */
tlm_ln_row_stats tlm_ln_lab_row(tlm_ln_scheme s, const float *x, float *y, float *work, int C, bool pairwise);

typedef struct {
    bool sum_overflow;     /* sum(x) overflowed (inf) in some row */
    bool sumsq_overflow;   /* sum((x - mean)^2) overflowed in some row whose sum(x) did not */
    double max_sum;        /* largest |sum(x)| of a row, as computed (inf when it overflowed) */
    double max_sumsq;      /* largest sum((x - mean)^2) of a row, as computed */
    double mean_err;       /* max over rows |mean - mean64| / std64 (std64 = sqrt(var64)) */
    double var_err;        /* max over rows |var - var64| / var64 */
    double out_err;        /* ||y - y64|| / ||y64|| over the cell's rows; NaN when y has NaN or inf */
    size_t out_nonfinite;  /* elements of y that are NaN or inf */
    size_t input_overflow; /* inputs that overflowed the input dtype (then the cell is not valid) */
} tlm_ln_lab_cell;

typedef struct {
    tlm_ln_lab_config cfg;
    double magnitude[TLM_LN_LAB_MAGNITUDES];
    int width[TLM_LN_LAB_WIDTHS];
    tlm_ln_lab_cell cell[TLM_LN_NUM_SCHEMES][TLM_LN_LAB_WIDTHS][TLM_LN_LAB_MAGNITUDES];
} tlm_ln_lab;

/* Fills the grid. The reference of a row is float64 two-pass LayerNorm of the same inputs (as
 * stored in the scheme's input dtype), so the errors are the computation's, not the inputs'.
 * TLM_ERR_INVALID_ARGUMENT for rows < 1; TLM_ERR_OUT_OF_MEMORY. */
tlm_status tlm_ln_lab_run(const tlm_ln_lab_config *cfg, tlm_ln_lab *out);

/* Up to max_lines findings (each a line of fewer than TLM_LN_LAB_LINE characters, no newline)
 * derived from the grid: where fp16's reductions overflow and what its precision costs, what fp32
 * statistics leave, and whether bf16 needs them. Returns the number written. */
#define TLM_LN_LAB_LINE 1024
int tlm_ln_lab_findings(const tlm_ln_lab *lab, char (*lines)[TLM_LN_LAB_LINE], int max_lines);

/* The inputs that overflowed the input dtype, over every cell of the grid. */
size_t tlm_ln_lab_inputs_overflowed(const tlm_ln_lab *lab);

#ifdef __cplusplus
}
#endif
#endif
