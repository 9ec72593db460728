/* test_gpu_model_precision.c — the precision modes of the whole model on the CUDA backend
 * (precision_checks.h says what is checked). Exit 77 (skipped) without a GPU. */
#include "precision_checks.h"

int main(void) {
    if (!tlm_cuda_available()) {
        printf("no GPU: skipped\n");
        return 77;
    }
    const char *env = getenv("TLM_FIXTURES");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny", env ? env : "tests/fixtures");
    tlm_backend *be;
    fx_die(tlm_backend_cuda_create(&be, 0), "cuda backend");
    pc_run_all(be, dir);
    tlm_backend_destroy(be);
    printf("%d passed, %d failed\n", pc_passed, pc_failed);
    return pc_failed ? 1 : 0;
}
