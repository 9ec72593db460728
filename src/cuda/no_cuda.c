/* no_cuda.c — stands in for the CUDA backend when tlm is built without nvcc. */
#include "tlm/backend.h"
#include "tlm/precision_lab.h"

tlm_status tlm_backend_cuda_create(tlm_backend **out, int gpu) {
    *out = NULL;
    return tlm_fail(TLM_ERR_UNSUPPORTED,
                    "this tlm was built without CUDA (nvcc was not found at build time); "
                    "use --device cpu, or rebuild with the CUDA toolkit on PATH");
}

bool tlm_cuda_available(void) { return false; }

int tlm_cuda_device_count(void) { return 0; }

static tlm_status cuda_create(tlm_backend **out, int gpu, int cpu_threads) { return tlm_backend_cuda_create(out, gpu); }
const tlm_backend_entry tlm_backend_cuda_entry = {"cuda", cuda_create, tlm_cuda_device_count};

/* src/cuda/precision_lab.cu's accumulation kernel */
tlm_status tlm_accumulate_run_cuda(tlm_backend *be, double value, tlm_accumulation *out) {
    return tlm_fail(TLM_ERR_UNSUPPORTED, "this tlm was built without CUDA: the GPU accumulation needs nvcc at "
                                         "build time; use --device cpu");
}
