/* mma.cuh — what the bf16/fp16 mma.sync FlashAttention passes (mma_forward.cu, mma_backward.cu) share
 * on the host: the walk over the dtype and d_head instantiations, and the occupancy query the
 * selector's split plan asks of a tiles.def line. Host code; the kernels' helpers are common.cuh's. */
#ifndef TLM_CUDA_ATTENTION_MMA_CUH
#define TLM_CUDA_ATTENTION_MMA_CUH

#include <type_traits>

#include "cuda/attention/attention.cuh"
#include "cuda/cuda_common.cuh"

/* f(tag, dc) for dt's element type (tag: tlm_cuda_dispatch's, bf16 or fp16 only: fp32 has no mma.sync
 * kernel and calls nothing) and d_head d (dc: std::integral_constant<int, d>) */
template <typename F> static void fa_mma_dispatch(tlm_dtype dt, int d, const char *op, F &&f) {
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        if constexpr (!std::is_same<E, float>::value) tlm_cuda_flash_dispatch_d(d, op, [&](auto dc) { f(tag, dc); });
    });
}

/* Resident blocks per SM of line t's kernel for dt, its split-KV instantiation when split (LONG
 * lines only have one), its shared-memory limit raised first; 1 for fp32. P names the pass:
 * P::with<D>(t, f) calls f with line t's configuration type C, and P::kernel<E, D, C, SPLIT> is the
 * kernel of that configuration. */
template <typename P> static int fa_mma_occupancy(tlm_dtype dt, const tlm_attn_tile *t, bool split, const char *op) {
    int occ = 1;
    fa_mma_dispatch(dt, t->d, op, [&](auto tag, auto dc) {
        using E = typename decltype(tag)::type;
        constexpr int DD = decltype(dc)::value;
        P::template with<DD>(t, [&](auto cfg) {
            using C = decltype(cfg);
            constexpr size_t smem = C::template smem<E, DD>();
            constexpr auto plain = P::template kernel<E, DD, C, false>;
            constexpr auto split_kernel = P::template kernel<E, DD, C, C::is_long>; /* plain for a SHORT line */
            if (split && C::is_long) {
                tlm_cuda_set_smem<split_kernel>(op, smem);
                occ = tlm_cuda_occupancy<split_kernel>(op, C::warps * 32, smem);
            } else {
                tlm_cuda_set_smem<plain>(op, smem);
                occ = tlm_cuda_occupancy<plain>(op, C::warps * 32, smem);
            }
        });
    });
    return occ;
}

/* The kernel that runs configuration C of pass P: its split-KV instantiation when split (which only
 * a LONG line has: a split of a SHORT line is fatal), else the plain one; the shared-memory limit
 * of each instantiation the line has is raised to C's size first. */
template <typename P, typename E, int DD, typename C> static auto fa_mma_kernel(bool split, const char *op) {
    constexpr size_t smem = C::template smem<E, DD>();
    constexpr auto plain = P::template kernel<E, DD, C, false>;
    tlm_cuda_set_smem<plain>(op, smem);
    if constexpr (C::is_long) {
        constexpr auto split_kernel = P::template kernel<E, DD, C, true>;
        tlm_cuda_set_smem<split_kernel>(op, smem);
        if (split) return split_kernel;
    } else if (split) {
        tlm_fatal("%s: a split of a line with no split-KV kernel", op);
    }
    return plain;
}

#endif
