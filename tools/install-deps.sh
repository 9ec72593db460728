#!/usr/bin/env bash
# install-deps.sh — makes sure the Debian packages tlm builds with are present.
# As root it installs what is missing with apt-get; otherwise it names the packages and fails.
set -euo pipefail

need=()
have_header() { [ -n "$(find /usr/include "$@" -name "$1" -print -quit 2>/dev/null)" ]; }
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
[ -n "$(find /usr/include -path '*openblas*' -name cblas.h -print -quit 2>/dev/null)" ] || need+=(libopenblas-openmp-dev)
[ -f /usr/include/cjson/cJSON.h ] || need+=(libcjson-dev)
# xxHash's header (header-only use): the hash of the data files' and checkpoint files' identities
[ -f /usr/include/xxhash.h ] || need+=(libxxhash-dev)
# Open MPI: mpirun starts the ranks of `tlm allreduce` and its tests; mpicc's headers and libmpi build
# the communication layer (src/comm)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
# the small English corpus `tlm train`'s CI test trains on (tools/make_tokens.py reads it): Debian's
# fortunes-min (fortune-mod's fortunes, literature and riddles; about 100 KB of text, in bookworm)
[ -f /usr/share/games/fortunes/literature ] || need+=(fortunes-min)
# optional: clang and libFuzzer for the fuzz harnesses (tests/fuzz; make test skips them without)
want=()
command -v clang >/dev/null 2>&1 || want+=(clang)
[ -n "$(find /usr/lib/llvm-* -name 'libclang_rt.fuzzer-*.a' -print -quit 2>/dev/null)" ] || want+=(libclang-rt-dev)
# optional: LLVM's OpenMP runtime, for the fuzz harnesses' clang build of the library
[ -n "$(find /usr/lib/llvm-* /usr/lib/x86_64-linux-gnu -maxdepth 2 -name 'libomp.so' -print -quit 2>/dev/null)" ] ||
  want+=(libomp-dev)
# optional: gnuplot draws `tlm plot`'s pictures (PNG, SVG); without it tlm plot says so and its tests skip
command -v gnuplot >/dev/null 2>&1 || want+=(gnuplot-nox)
# optional: Slurm's daemons and srun, for the test that runs tlm under srun on a private one-node cluster
# (tests/cli/srun.sh; skipped without them)
command -v slurmctld >/dev/null 2>&1 || want+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || want+=(slurmd)

# CUTLASS (NVIDIA's header-only CUDA GEMM library) for the fused SwiGLU GEMMs (src/cuda/gemm_swiglu.cu): the
# C++ headers that PyPI's nvidia-cutlass wheel ships (cutlass_library/source/include), this pinned version,
# unpacked into .cutlass/include, where CMake looks (TLM_CUTLASS_INCLUDE_DIR; tools/pack-device-deps.sh packs it
# for the GPU machine). Optional: without it the ops run unfused. Only with nvcc (nothing uses it otherwise);
# TLM_NO_CUTLASS=1 skips it.
CUTLASS_VERSION=4.2.0.0
cutlass_dir="$(cd "$(dirname "$0")/.." && pwd)/.cutlass"
if command -v nvcc >/dev/null 2>&1 && [ "${TLM_NO_CUTLASS:-0}" != 1 ] &&
   [ "$(cat "$cutlass_dir/VERSION" 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
  whl=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --dest "$whl" "nvidia-cutlass==$CUTLASS_VERSION" &&
     rm -rf "$cutlass_dir" && mkdir -p "$cutlass_dir" &&
     python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1]); pre = "cutlass_library/source/include/"
for n in z.namelist():
    if n.startswith(pre) and not n.endswith("/"):
        z.extract(n, sys.argv[2])' "$whl"/nvidia_cutlass-*.whl "$cutlass_dir/wheel" &&
     mv "$cutlass_dir/wheel/cutlass_library/source/include" "$cutlass_dir/include" && rm -rf "$cutlass_dir/wheel"; then
    echo "$CUTLASS_VERSION" > "$cutlass_dir/VERSION"
    echo "tlm: CUTLASS $CUTLASS_VERSION headers in $cutlass_dir/include"
  else
    echo "tlm: could not fetch nvidia-cutlass==$CUTLASS_VERSION from PyPI: the SwiGLU GEMMs will run unfused"
  fi
  rm -rf "$whl"
fi

if [ ${#need[@]} -eq 0 ] && [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tlm: installing missing Debian packages: ${need[*]} ${want[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  [ ${#need[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${need[@]}"
  for pkg in "${want[@]}"; do # one at a time: a package that fails to install takes no other with it
    apt-get install -y -qq --no-install-recommends "$pkg" ||
      echo "tlm: could not install $pkg: the fuzz harnesses (clang), tlm plot (gnuplot-nox) or the srun test are skipped"
  done
elif [ ${#need[@]} -gt 0 ]; then
  echo "tlm: missing Debian packages: ${need[*]}" >&2
  echo "tlm: install them with: sudo apt-get install ${need[*]}" >&2
  exit 1
else
  echo "tlm: optional Debian packages missing (without them the fuzz harnesses, tlm plot or the srun test are skipped): sudo apt-get install ${want[*]}"
fi
