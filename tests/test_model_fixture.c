/* test_model_fixture.c — the whole model against PyTorch (fixture_checks.h says what is checked):
 * within 1e-5 relative error per tensor of PyTorch's float32 run and of its float64 run, with the
 * naive attention and with FlashAttention-2 (PyTorch's run is naive attention: the same
 * function); and a save -> load round trip. On the CPU backend (test_model_fixture, in CI) and,
 * built with TLM_TEST_DEVICE="cuda", on the CUDA backend (test_gpu_model_fixture). */
#include <unistd.h>

#include "fixture_checks.h"

/* save -> load gives back the same bits; the file loads under its state-dict names */
static void roundtrip(tlm_backend *be) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *a, *b;
    die_on(tlm_model_create(&a, &cfg, NULL, be), "model");
    die_on(tlm_model_create(&b, &cfg, NULL, be), "model");
    die_on(tlm_model_init_random(a, 42), "init");
    char tmp[] = "/tmp/tlm_fixture_XXXXXX";
    int fd = mkstemp(tmp);
    TLM_ASSERT(fd >= 0);
    close(fd);
    die_on(tlm_model_save(a, tmp), "save");
    die_on(tlm_model_load(b, tmp), "load");
    remove(tmp);
    const size_t bytes = a->layout.flat_numel * sizeof(float);
    float *pa = malloc(bytes), *pb = malloc(bytes);
    tlm_copy_to_host(be, pa, a->params, bytes);
    tlm_copy_to_host(be, pb, b->params, bytes);
    const int same = memcmp(pa, pb, bytes) == 0;
    check_limit(same, "save then load gives identical parameters", same ? 0.0 : 1.0, 0.0);
    free(pa);
    free(pb);
    tlm_model_free(a);
    tlm_model_free(b);
}

int main(void) {
    tlm_backend *be = test_backend();
    const char *fixtures = test_fixtures();
    fx_run(be, fixtures, "", 1e-5);
    fx_run(be, fixtures, "f64", 1e-5);
    fx_run_attention(be, fixtures, "", 1e-5, TLM_ATTENTION_FLASH);
    fx_run_attention(be, fixtures, "f64", 1e-5, TLM_ATTENTION_FLASH);
    roundtrip(be);
    return test_finish_backend(be);
}
