#!/usr/bin/env bash
# pack-device-deps.sh — the GPU machine has OpenBLAS but neither cJSON nor a network; this packs
# this machine's OpenBLAS (OpenMP) and cJSON headers and libraries and xxHash's header (Debian packages
# libopenblas-openmp-dev, libcjson-dev, libxxhash-dev) and CUTLASS's headers (.cutlass/include from
# tools/install-deps.sh, for the fused SwiGLU GEMMs: as cutlass/include) into .devdeps/deps.tar.xz, which a
# device call carries (carry: [".devdeps"]) and bench/device/run.sh unpacks (bench/device/lib.sh: dev_deps)
# for its builds.
#   --bin             also build tlm and every GPU test here (build-dev: Release, CUDA on, -DTLM_NATIVE=OFF so the
#                     other machine's CPU runs them) into .devdeps/bin.tar.xz (bin/tlm, bin/libtlm_inject.so,
#                     bin/tests/test_gpu_*), which bench/device/run.sh unpacks and uses instead of building when
#                     they run there (lib.sh: dev_bin): a device call that builds nothing
#   --base DIR        with --bin: also the tlm of the source tree DIR (the before-after stage's BASE, e.g.
#                     .baseline), built the same way into build-dev-base, as base/tlm
#   --nccl-tests DIR  with --bin: also nccl-tests' all_reduce_perf, built from its source in DIR (a checkout of
#                     github.com/NVIDIA/nccl-tests) with MPI=0 for sm_90: one process driving N GPUs (-g N)
# .devdeps/ is kept out of git by .gitignore.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=0 nccl_tests="" base=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=1 ;;
    --nccl-tests) nccl_tests=${2:?--nccl-tests needs the nccl-tests source folder}; shift ;;
    --base) base=${2:?--base needs a source tree (e.g. .baseline)}; shift ;;
    *) echo "pack-device-deps.sh: unknown argument '$1' (--bin, --base DIR, --nccl-tests DIR)" >&2; exit 2 ;;
  esac
  shift
done
if { [ -n "$nccl_tests" ] || [ -n "$base" ]; } && [ "$bin" = 0 ]; then
  echo "pack-device-deps.sh: --nccl-tests and --base go with --bin (they pack into .devdeps/bin.tar.xz)" >&2; exit 2
fi
[ -z "$base" ] || [ -f "$base/CMakeLists.txt" ] || { echo "pack-device-deps.sh: --base $base: no CMakeLists.txt there" >&2; exit 2; }
bash tools/install-deps.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/cjson" "$tmp/lib" .devdeps
inc=$(dirname "$(find /usr/include -path '*openblas-openmp*' -name cblas.h | head -1)")
cp "$inc/cblas.h" "$inc/openblas_config.h" "$tmp/include/"
cp /usr/include/cjson/cJSON.h "$tmp/include/cjson/"
cp /usr/include/xxhash.h "$tmp/include/"  # header-only: found beside cJSON's (CMakeLists.txt, XXHASH_INCLUDE_DIR)
lib=/usr/lib/x86_64-linux-gnu
cp -L "$lib"/openblas-openmp/libopenblas.so.0 "$tmp/lib/"
ln -s libopenblas.so.0 "$tmp/lib/libopenblas.so"
cp -L "$lib"/libcjson.so.1 "$tmp/lib/"
ln -s libcjson.so.1 "$tmp/lib/libcjson.so"
cp -L "$lib"/libgfortran.so.5 "$lib"/libquadmath.so.0 "$tmp/lib/"
packed=(include lib)
if [ -f .cutlass/include/cutlass/cutlass.h ]; then  # lib.sh's dev_deps passes it to CMake (TLM_CUTLASS_INCLUDE_DIR)
  mkdir -p "$tmp/cutlass" && cp -r .cutlass/include "$tmp/cutlass/" && packed+=(cutlass)
else
  echo "pack-device-deps.sh: no CUTLASS headers in .cutlass (tools/install-deps.sh):" \
       "the GPU build runs the SwiGLU GEMMs unfused"
fi
tar cJf .devdeps/deps.tar.xz -C "$tmp" "${packed[@]}"
echo "wrote .devdeps/deps.tar.xz ($(du -h .devdeps/deps.tar.xz | cut -f1))"

[ "$bin" = 1 ] || exit 0
rm -rf "$tmp"/* && mkdir -p "$tmp/bin/tests"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON -DTLM_NATIVE=OFF > build-dev.configure.log
cmake --build build-dev -j "$(nproc)"
cp build-dev/tlm "$tmp/bin/"
[ -f build-dev/libtlm_inject.so ] && cp build-dev/libtlm_inject.so "$tmp/bin/"
cp build-dev/tests/test_gpu_* "$tmp/bin/tests/"
what=(bin)
if [ -n "$base" ]; then
  mkdir -p "$tmp/base"
  cmake -S "$base" -B build-dev-base -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON -DTLM_NATIVE=OFF > build-dev-base.configure.log
  cmake --build build-dev-base -j "$(nproc)" --target tlm
  cp build-dev-base/tlm "$tmp/base/" && what+=(base)
  [ -f "$base/.commit" ] && cp "$base/.commit" "$tmp/base/"
fi
if [ -n "$nccl_tests" ]; then
  make -C "$nccl_tests/src" "$tmp/nccl-tests/all_reduce_perf" BUILDDIR="$tmp/nccl-tests" MPI=0 \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" NCCL_HOME="$(dirname "$(dirname "$(command -v nvcc)")")"
  cp "$tmp/nccl-tests/all_reduce_perf" "$tmp/" && what+=(all_reduce_perf)
fi
tar cJf .devdeps/bin.tar.xz -C "$tmp" "${what[@]}"
echo "wrote .devdeps/bin.tar.xz ($(du -h .devdeps/bin.tar.xz | cut -f1)): ${what[*]}"
