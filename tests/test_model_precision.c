/* test_model_precision.c — the precision modes of the whole model on the CPU backend
 * (precision_checks.h says what is checked). */
#include "precision_checks.h"

int main(void) {
    const char *env = getenv("TLM_FIXTURES");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny", env ? env : "tests/fixtures");
    tlm_backend *be;
    fx_die(tlm_backend_cpu_create(&be, 0), "cpu backend");
    pc_run_all(be, dir);
    tlm_backend_destroy(be);
    printf("%d passed, %d failed\n", pc_passed, pc_failed);
    return pc_failed ? 1 : 0;
}
