/* nvtx.cu — NVTX ranges for Nsight Systems and any NVTX-aware tool, written once, as a dispatch hook
 * (tlm/ops.h): one range per step ("step 3", "warmup step 0": a profile can leave warm-up out by
 * name), phase ("forward", "backward", "optimizer"), layer ("layer 7"), op ("matmul_forward") and
 * stage inside an op (the naive attention's "computing attention scores", "computing softmax",
 * "final matmul", the names the CS336 seeds annotate). Installed on every CUDA backend. */
#include <nvtx3/nvToolsExt.h>

#include "cuda/cuda_common.cuh"

static void nvtx_op_begin(void *user, const tlm_op_event *e) { nvtxRangePushA(tlm_op_name(e->op)); }
static void nvtx_op_end(void *user, const tlm_op_event *e) { nvtxRangePop(); }
static void nvtx_range_begin(void *user, const tlm_range_event *e) { nvtxRangePushA(e->name); }
static void nvtx_range_end(void *user, const tlm_range_event *e) { nvtxRangePop(); }

tlm_status tlm_cuda_nvtx_hook_install(tlm_backend *be) {
    const tlm_hook h = {NULL, nvtx_op_begin, nvtx_op_end, nvtx_range_begin, nvtx_range_end};
    return tlm_hook_add(be, &h);
}
