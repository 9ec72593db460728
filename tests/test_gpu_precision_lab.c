/* test_gpu_precision_lab.c — `tlm precision` on the GPU against the CPU: the accumulation kernel
 * (src/cuda/precision_lab.cu, __half/__nv_bfloat16 adds of one rounding each) gives the CPU's
 * software rounding bit for bit, every partial sum of every way; and the ToyModel on CUDA has the
 * same autocast dtypes as on the CPU, with its loss and gradients within the ops' tolerances of the
 * CPU run (fp32: the GEMMs' 2e-5 of test_gpu_ops.c; bf16/fp16: 1e-2, the same reasoning).
 * Prints one line per check and "N passed, M failed"; exits 1 on any failure, 77 (skipped) when
 * no CUDA GPU is usable. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm/util.h"
#include "tlm/backend.h"
#include "tlm/precision_lab.h"
#include "tlm/toymodel.h"
#include "test_check.h"

static tlm_backend *cpu, *gpu;

static void test_accumulate(void) {
    static tlm_accumulation g, c;
    die_on(tlm_accumulate_run(gpu, TLM_ACCUMULATE_VALUE, &g), "accumulate on cuda");
    die_on(tlm_accumulate_run(cpu, TLM_ACCUMULATE_VALUE, &c), "accumulate on cpu");
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        int differ = 0;
        for (int i = 0; i <= TLM_ACCUMULATE_STEPS; i++) differ += g.partial[w][i] != c.partial[w][i];
        check(differ == 0 && g.addend[w] == c.addend[w],
              "accumulate %-19s cuda = cpu: addend %.10g, all %d partial sums (%d differ), sum %.7f",
              tlm_accumulate_way_get((tlm_accumulate_way)w)->name, (double)g.addend[w], TLM_ACCUMULATE_STEPS, differ,
              (double)g.partial[w][TLM_ACCUMULATE_STEPS]);
    }
}

static void test_toymodel(tlm_precision p, double limit) {
    tlm_toymodel_config cfg = tlm_toymodel_defaults();
    cfg.precision = p;
    tlm_toymodel *mg, *mc;
    die_on(tlm_toymodel_create(&mg, gpu, &cfg), "ToyModel on cuda");
    die_on(tlm_toymodel_create(&mc, cpu, &cfg), "ToyModel on cpu");
    float lg, lc;
    die_on(tlm_toymodel_forward(mg, &lg), "forward");
    die_on(tlm_toymodel_backward(mg), "backward");
    die_on(tlm_toymodel_forward(mc, &lc), "forward");
    die_on(tlm_toymodel_backward(mc), "backward");
    const char *name = tlm_act_dtype_name(mg->dt);
    const tlm_toy_tensor *tg[32], *tc[32];
    const int n = tlm_toymodel_tensors(mg, tg, 32);
    tlm_toymodel_tensors(mc, tc, 32);
    int differ = 0;
    for (int i = 0; i < n; i++) differ += tg[i]->dtype != tc[i]->dtype;
    check(differ == 0 && mg->ln_out.dtype == TLM_DTYPE_F32 && mg->fc1_out.dtype == mg->dt,
          "%s ToyModel on cuda: the same dtypes as on the cpu for all %d tensors (fc1 output %s, LayerNorm output "
          "%s)", name, n, tlm_act_dtype_name(mg->fc1_out.dtype), tlm_act_dtype_name(mg->ln_out.dtype));
    const double el = fabs((double)lg - lc) / fabs((double)lc);
    float *gg = malloc(mg->num_params * sizeof(float)), *gc = malloc(mc->num_params * sizeof(float));
    tlm_copy_to_host(gpu, gg, mg->grads, mg->num_params * sizeof(float));
    tlm_copy_to_host(cpu, gc, mc->grads, mc->num_params * sizeof(float));
    const double eg = tlm_rel_error_f32(gg, gc, mg->num_params);
    check(el <= limit && eg <= limit, "%s ToyModel cuda vs cpu: loss %.7f vs %.7f (rel err %.2e), gradients rel err "
          "%.2e (limit %.0e)", name, (double)lg, (double)lc, el, eg, limit);
    free(gg);
    free(gc);
    tlm_toymodel_free(mg);
    tlm_toymodel_free(mc);
}

int main(void) {
    if (!tlm_cuda_available() || tlm_backend_cuda_create(&gpu, 0) != TLM_OK) {
        printf("no GPU: skipped (%s)\n", tlm_cuda_available() ? tlm_last_error() : "no CUDA device");
        return 77;
    }
    die_on(tlm_backend_cpu_create(&cpu, 0), "cpu backend");
    printf("# cuda: %s\n", gpu->description);
    test_accumulate();
    test_toymodel(TLM_PRECISION_FP32, 2e-5);
    test_toymodel(TLM_PRECISION_FP16, 1e-2);
    test_toymodel(TLM_PRECISION_BF16, 1e-2);
    tlm_backend_destroy(gpu);
    tlm_backend_destroy(cpu);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
