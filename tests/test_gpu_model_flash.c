/* test_gpu_model_flash.c — FlashAttention-2 in the whole model on the CUDA backend
 * (model_flash_checks.h says what is checked and why):
 * - flash against naive on CUDA in fp32, tf32, bf16 and fp16, CUDA graphs off and on: the tiny
 *   preset (context 32, d_head 16) and a model with d_head 64 at context 256 (d_model 256, 4
 *   heads); tf32 flash runs the TF32 kernels (tf32.cu);
 * - choosing: auto is flash on CUDA for those d_head; for a d_head the kernels do not take
 *   (24) flash is refused with a message naming it and auto falls back to naive.
 * (The tiny model with flash against the PyTorch fixtures: test_gpu_model_fixture.) Exit 77
 * (skipped) without a GPU. */
#define TLM_TEST_DEVICE "cuda"
#include "model_flash_checks.h"

static void test_choice(tlm_backend *be) {
    char what[256];
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    const tlm_attention a = tlm_attention_resolve(be, &cfg, TLM_PRECISION_BF16, TLM_ATTENTION_AUTO);
    snprintf(what, sizeof what, "auto on CUDA, d_head 16, bf16: %s", tlm_attention_name(a));
    check_limit(a == TLM_ATTENTION_FLASH, what, 0, 0);
    cfg.d_model = 96; /* 4 heads: d_head 24 */
    cfg.num_heads = 4;
    const bool has24 = tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_FORWARD, TLM_DTYPE_F32, 24) != TLM_SUPPORT_NONE;
    const tlm_run_config naive = {.precision = TLM_PRECISION_FP32, .attention = TLM_ATTENTION_NAIVE};
    tlm_model *m;
    die_on(tlm_model_create(&m, &cfg, &naive, be), "model");
    tlm_status s = tlm_model_set_attention(m, TLM_ATTENTION_FLASH);
    snprintf(what, sizeof what, "d_head 24: flash %s: %s", has24 ? "accepted (the kernels take it)" : "refused",
             s == TLM_OK ? "ok" : tlm_last_error());
    check_limit(has24 ? s == TLM_OK : s == TLM_ERR_UNSUPPORTED && strstr(tlm_last_error(), "d_head 24"), what, 0, 0);
    const tlm_attention a24 = tlm_attention_resolve(be, &cfg, TLM_PRECISION_FP32, TLM_ATTENTION_AUTO);
    snprintf(what, sizeof what, "d_head 24: auto gives %s", tlm_attention_name(a24));
    check_limit(a24 == (has24 ? TLM_ATTENTION_FLASH : TLM_ATTENTION_NAIVE), what, 0, 0);
    tlm_model_free(m);
}

int main(void) {
    tlm_backend *be = test_backend();
    test_choice(be);

    const mf_shape shapes[2] = {mf_tiny("tiny", 32, 0, 0, 0), mf_tiny("d_head 64 ctx256", 256, 256, 4, 688)};
    for (int i = 0; i < 2; i++) mf_run_shape(be, &shapes[i]);
    tlm_backend_destroy(be);
    return test_finish();
}
