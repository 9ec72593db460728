/* backend_cuda.cu — the CUDA backend: device detection now; the ops come with issue 3
 * (kernels in src/cuda/<op>.cu, GEMMs through cuBLASLt). */
#include <cuda_runtime.h>

extern "C" {
#include "tlm/backend.h"
}

extern "C" bool tlm_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" tlm_status tlm_backend_cuda_create(tlm_backend **out, int device_index) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "no CUDA GPU found (%s); use --device cpu",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (device_index < 0 || device_index >= n)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "GPU %d does not exist (%d visible)", device_index, n);
    return tlm_fail(TLM_ERR_UNSUPPORTED,
                    "the CUDA backend's ops are not implemented yet; use --device cpu");
}
