/* test_model_fixture.c — the whole model on the CPU backend against PyTorch (fixture_checks.h
 * says what is checked): within 1e-5 relative error per tensor of PyTorch's float32 run and of
 * its float64 run, with the naive attention and with FlashAttention-2 (PyTorch's run is naive
 * attention: the same function); and a save -> load round trip. */
#include "fixture_checks.h"

/* save -> load gives back the same bits; the file loads under its state-dict names */
static void roundtrip(void) {
    tlm_backend *be;
    fx_die(tlm_backend_cpu_create(&be, 0), "cpu backend");
    tlm_config cfg;
    fx_die(tlm_config_preset("tiny", &cfg), "tiny");
    tlm_model *a, *b;
    fx_die(tlm_model_create(&a, &cfg, NULL, be), "model");
    fx_die(tlm_model_create(&b, &cfg, NULL, be), "model");
    fx_die(tlm_model_init_random(a, 42), "init");
    char tmp[] = "/tmp/tlm_fixture_XXXXXX";
    int fd = mkstemp(tmp);
    TLM_ASSERT(fd >= 0);
    fx_die(tlm_model_save(a, tmp), "save");
    fx_die(tlm_model_load(b, tmp), "load");
    remove(tmp);
    int same = memcmp(a->params, b->params, a->layout.flat_numel * sizeof(float)) == 0;
    fx_check(same, "save then load gives identical parameters", same ? 0.0 : 1.0, 0.0);
    tlm_model_free(a);
    tlm_model_free(b);
    tlm_backend_destroy(be);
}

int main(void) {
    const char *env = getenv("TLM_FIXTURES");
    char fixtures[512];
    snprintf(fixtures, sizeof fixtures, "%s/tiny", env ? env : "tests/fixtures");
    tlm_backend *be;
    fx_die(tlm_backend_cpu_create(&be, 0), "cpu backend");
    fx_run(be, fixtures, "", 1e-5);
    fx_run(be, fixtures, "f64", 1e-5);
    fx_run_attention(be, fixtures, "", 1e-5, TLM_ATTENTION_FLASH);
    fx_run_attention(be, fixtures, "f64", 1e-5, TLM_ATTENTION_FLASH);
    tlm_backend_destroy(be);
    roundtrip();
    printf("%d passed, %d failed\n", fx_passed, fx_failed);
    return fx_failed ? 1 : 0;
}
