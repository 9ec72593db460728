#!/usr/bin/env bash
# pack-device-deps.sh — the GPU machine has OpenBLAS but neither cJSON nor a network; this packs
# this machine's OpenBLAS (OpenMP) and cJSON headers and libraries (Debian packages
# libopenblas-openmp-dev, libcjson-dev) into .devdeps/deps.tar.xz, which a device call carries
# (carry: [".devdeps"]) and bench/run-device.sh unpacks when the plain configure fails.
#   --bin             also build tlm and the GPU tests here (build-dev: Release, CUDA on, -DTLM_NATIVE=OFF so the
#                     other machine's CPU runs them) into .devdeps/bin.tar.xz, which bench/run-multi-gpu-device.sh
#                     unpacks: a device call that builds nothing
#   --nccl-tests DIR  with --bin: also nccl-tests' all_reduce_perf, built from its source in DIR (a checkout of
#                     github.com/NVIDIA/nccl-tests) with MPI=0 for sm_90: one process driving N GPUs (-g N)
# .devdeps/ is kept out of git by .gitignore.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=0 nccl_tests=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=1 ;;
    --nccl-tests) nccl_tests=${2:?--nccl-tests needs the nccl-tests source folder}; shift ;;
    *) echo "pack-device-deps.sh: unknown argument '$1' (--bin, --nccl-tests DIR)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$nccl_tests" ] && [ "$bin" = 0 ]; then
  echo "pack-device-deps.sh: --nccl-tests goes with --bin (it packs into .devdeps/bin.tar.xz)" >&2; exit 2
fi
bash tools/install-deps.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/cjson" "$tmp/lib" .devdeps
inc=$(dirname "$(find /usr/include -path '*openblas-openmp*' -name cblas.h | head -1)")
cp "$inc/cblas.h" "$inc/openblas_config.h" "$tmp/include/"
cp /usr/include/cjson/cJSON.h "$tmp/include/cjson/"
lib=/usr/lib/x86_64-linux-gnu
cp -L "$lib"/openblas-openmp/libopenblas.so.0 "$tmp/lib/"
ln -s libopenblas.so.0 "$tmp/lib/libopenblas.so"
cp -L "$lib"/libcjson.so.1 "$tmp/lib/"
ln -s libcjson.so.1 "$tmp/lib/libcjson.so"
cp -L "$lib"/libgfortran.so.5 "$lib"/libquadmath.so.0 "$tmp/lib/"
tar cJf .devdeps/deps.tar.xz -C "$tmp" include lib
echo "wrote .devdeps/deps.tar.xz ($(du -h .devdeps/deps.tar.xz | cut -f1))"

[ "$bin" = 1 ] || exit 0
rm -rf "$tmp"/* && mkdir -p "$tmp/bin"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON -DTLM_NATIVE=OFF > build-dev.configure.log
cmake --build build-dev -j "$(nproc)" --target tlm test_gpu_comm test_gpu_ddp
cp build-dev/tlm build-dev/libtlm_inject.so build-dev/tests/test_gpu_comm build-dev/tests/test_gpu_ddp "$tmp/bin/"
what=(bin)
if [ -n "$nccl_tests" ]; then
  make -C "$nccl_tests/src" "$tmp/nccl-tests/all_reduce_perf" BUILDDIR="$tmp/nccl-tests" MPI=0 \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" NCCL_HOME="$(dirname "$(dirname "$(command -v nvcc)")")"
  cp "$tmp/nccl-tests/all_reduce_perf" "$tmp/" && what+=(all_reduce_perf)
fi
tar cJf .devdeps/bin.tar.xz -C "$tmp" "${what[@]}"
echo "wrote .devdeps/bin.tar.xz ($(du -h .devdeps/bin.tar.xz | cut -f1)): ${what[*]}"
