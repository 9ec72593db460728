/* gemm_swiglu.cu — SwiGLU's backward fused into the epilogue of the GEMM before it, bf16 on
 * Hopper (sm_90a), with CUTLASS's warp-specialized TMA + wgmma GEMM (NVIDIA CUTLASS 4.x,
 * include/cutlass/gemm/collective/collective_builder.hpp) and an epilogue visitor tree
 * (cutlass/epilogue/fusion/sm90_visitor_*.hpp). Built only when CMake finds CUTLASS's headers
 * (TLM_HAVE_CUTLASS); the op matmul_swiglu_backward in swiglu.cu calls it and falls back to
 * cuBLASLt + the elementwise kernel when it declines a call. (The forward's counterpart, b = x W3^T
 * with the product in the epilogue, lost on one H100 and was removed: swiglu.cu says why.)
 *
 * d_g = dy W2 with SwiGLU's backward in the epilogue:
 *   acc (N,F) fp32 = dy (N,C) . W2 (W2 (C,F) row-major: the B operand N-major);
 *   d = bf16(acc) (the unfused path's bf16 d_g); a, b loaded from ab (two aux loads, stride 2F);
 *   da = bf16(d b silu'(a)) into dab[:, 0:F) (D, stride 2F), db = bf16(d silu(a)) into
 *   dab[:, F:2F) (aux store, stride 2F), as swiglu_backward computes them from bf16 d, a, b.
 *   The epilogue is a DAG (Sm90TopologicalVisitor): d and a are computed/loaded once and feed
 *   both outputs.
 *
 * Tiles: 128 x 128 x 64 CTA tile, 2 x 1 cluster, cooperative schedule (two consumer warpgroups),
 * persistent tile scheduler; epilogue subtiles of 128 x 16 so that the aux buffers (4 stages of
 * each load, 2 of each store) leave shared memory for a deep mainloop pipeline.
 * TMA's requirements, checked by the caller (swiglu.cu): every pointer 16-byte aligned, C and F
 * multiples of 8 elements; any N (TMA clips the ragged tile). One kernel, bf16 only (compile time:
 * CI builds CUDA on 2 cores). */
#include "cuda/cuda_common.cuh"
#include "cuda/gemm_swiglu.h"
#include "cuda/swiglu.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

namespace {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
namespace epi_detail = cutlass::epilogue::collective::detail;

using Elem = cutlass::bfloat16_t;
using Acc = float;
using RowMajor = cutlass::layout::RowMajor;
constexpr int kAlign = 8; /* elements per 16 bytes */
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

using TileShape = Shape<_128, _128, _64>;
using ClusterShape = Shape<_2, _1, _1>;
using EpilogueTile = Shape<_128, _16>;
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

/* the epilogue's stage counts and subtile, as the collective builder derives them (no C: void) */
using EpiDesc = epi_detail::EpilogueDescriptor<TileShape, EpilogueTile, void, Elem, EpilogueSchedule>;
using LoadDesc = epi_detail::AuxLoadDescriptor<EpiDesc, RowMajor, Elem>;
using StoreDesc = epi_detail::AuxStoreDescriptor<EpiDesc, RowMajor, Elem>;
using AuxLoad = fusion::Sm90AuxLoad<LoadDesc::Stages, typename EpiDesc::EpilogueTile, Elem, typename LoadDesc::Stride,
                                    typename LoadDesc::SmemLayoutAtom, typename LoadDesc::CopyOpS2R>;
using AuxStore = fusion::Sm90AuxStore<StoreDesc::Stages, typename EpiDesc::EpilogueTile, Elem, kRound,
                                      typename StoreDesc::Stride, typename StoreDesc::SmemLayoutAtom,
                                      typename StoreDesc::CopyOpR2S>;
using AuxStride = typename LoadDesc::Stride; /* (row stride, _1, batch stride) */

/* The compute nodes' functors: applied to fragments (cutlass::Array<float, n>); the node rounds
 * what they return to its output element. */
template <class T> struct RoundIdentity { /* the node's output conversion does the rounding */
    CUTLASS_HOST_DEVICE T operator()(T const &v) const { return v; }
};
template <class T> struct SwigluDa { /* (d, a, b) -> d b silu'(a) */
    CUTLASS_DEVICE T operator()(T const &d, T const &a, T const &b) const {
        T o;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < T::kElements; i++) o[i] = tlm_swiglu_da(d[i], a[i], b[i]);
        return o;
    }
};
template <class T> struct SwigluDb { /* (d, a) -> d silu(a) */
    CUTLASS_DEVICE T operator()(T const &d, T const &a) const {
        T o;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < T::kElements; i++) o[i] = tlm_swiglu_db(d[i], a[i]);
        return o;
    }
};

using RoundAcc = fusion::Sm90Compute<RoundIdentity, Elem, Acc, kRound>; /* bf16(acc) */

/* backward, in topological order: 0 acc, 1 a, 2 b, 3 d = bf16(acc), 4 db = bf16(d silu(a)),
 * 5 store db, 6 da = d b silu'(a) (the output D). Every node runs once per fragment. */
using BackwardEVT = fusion::Sm90TopologicalVisitor<
    Acc,
    cute::tuple<cute::seq<>, cute::seq<>, cute::seq<>, cute::seq<0>, cute::seq<3, 1>, cute::seq<4>,
                cute::seq<3, 1, 2>>,
    fusion::Sm90AccFetch, AuxLoad, AuxLoad, RoundAcc, fusion::Sm90Compute<SwigluDb, Elem, Acc, kRound>, AuxStore,
    fusion::Sm90Compute<SwigluDa, Elem, Acc, kRound>>;

template <class LayoutB, class EVT> struct FusedGemm {
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, EpilogueTile, Acc, Acc, void,
        RowMajor, kAlign, Elem, RowMajor, kAlign, EpilogueSchedule, EVT>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Elem, RowMajor, kAlign, Elem, LayoutB, kAlign, Acc,
        TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        MainloopSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideD = typename Gemm::GemmKernel::StrideD;
};
using Backward = FusedGemm<RowMajor, BackwardEVT>; /* B = W2: (C,F) row-major is N-major */

AuxStride aux_stride(int64_t ld) { return AuxStride{ld, _1{}, 0}; }

/* Runs one fused GEMM on the backend's stream: false (nothing launched) when CUTLASS refuses the
 * arguments or wants more workspace than cuBLASLt's, which the call then borrows. */
template <class G>
bool run(tlm_backend *be, const char *op, typename G::Gemm::Arguments &args) {
    tlm_cuda *cu = tlm_cuda_of(be);
    args.hw_info.device_id = cu->device;
    args.hw_info.sm_count = cu->num_sms;
    typename G::Gemm gemm;
    if (G::Gemm::can_implement(args) != cutlass::Status::kSuccess) return false;
    if (G::Gemm::get_workspace_size(args) > cu->workspace_bytes) return false;
    const cutlass::Status st = gemm.run(args, cu->workspace, cu->stream);
    if (st != cutlass::Status::kSuccess)
        tlm_fatal("%s: the CUTLASS GEMM failed to launch: %s", op, cutlassGetStatusString(st));
    TLM_CUDA_CHECK_OP(op, cudaGetLastError());
    return true;
}

/* The arguments of a fused GEMM (N,F) = x (N,C) . B, K = C: its operands, D (row stride ldd), no C;
 * the epilogue's nodes are the caller's to fill. */
template <class G>
typename G::Gemm::Arguments gemm_arguments(const void *x, const void *w, typename G::StrideB dB, void *d, int64_t ldd,
                                           int N, int C, int F) {
    typename G::Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {N, F, C, 1};
    args.mainloop.ptr_A = static_cast<const Elem *>(x);
    args.mainloop.dA = typename G::StrideA{(int64_t)C, _1{}, 0};
    args.mainloop.ptr_B = static_cast<const Elem *>(w);
    args.mainloop.dB = dB;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<Elem *>(d);
    args.epilogue.dD = typename G::StrideD{ldd, _1{}, 0};
    args.epilogue.dC = args.epilogue.dD;
    return args;
}

} // namespace

bool tlm_cuda_cutlass_swiglu_backward(tlm_backend *be, void *dab, const void *dy, const void *w2, const void *ab, int N,
                                      int C, int F) {
    using G = Backward;
    const Elem *a = static_cast<const Elem *>(ab);
    const AuxStride ld = aux_stride(2 * (int64_t)F);
    /* B (F,C) read from W2 (C,F): N contiguous; D = da at dab's row stride 2F */
    typename G::Gemm::Arguments args =
        gemm_arguments<G>(dy, w2, typename G::StrideB{_1{}, (int64_t)F, 0}, dab, 2 * (int64_t)F, N, C, F);
    auto &t = args.epilogue.thread; /* the DAG's nodes' arguments, in its order */
    cute::get<1>(t) = {a, Elem(0), ld};
    cute::get<2>(t) = {a + F, Elem(0), ld};
    cute::get<5>(t) = {static_cast<Elem *>(dab) + F, ld}; /* db */
    return run<G>(be, "matmul_swiglu_backward", args);
}
