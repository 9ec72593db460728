/* test_model_precision.c — the precision modes of the whole model (precision_checks.h says what is
 * checked), on the CPU backend (test_model_precision, in CI) and, built with TLM_TEST_DEVICE="cuda",
 * on the CUDA backend (test_gpu_model_precision; skipped without a GPU). */
#include "precision_checks.h"

int main(void) {
    tlm_backend *be = test_backend();
    pc_run_all(be, test_fixtures());
    tlm_backend_destroy(be);
    return test_finish();
}
