# bench/device/lib.sh — the helpers of bench/device/run.sh (sourced, never run): the run's folders and
# header, the time budget, the builds (cmake on the GPU machine with the carried .devdeps, or the carried
# binaries), mpirun, and the packing of the results into $OUT.
#
# Folders: R (/tmp/tlm-run) holds every file a stage writes; $OUT gets at most 8 files back from a device
# call, so after every stage dev_pack writes $OUT/log.txt, $OUT/results.tar.xz (all of R) and the files the
# stages named with `keep` (at most 6; the rest are in the tarball only).
# Globals set here: R, TLM (the working tree's tlm), BUILD (its build folder, build-gpu), BIN (the folder of
# the carried binaries, when they run here), GPUS, CORES, DEPS_FLAGS (cmake flags for the carried libraries),
# MPI_FLAGS (cmake flags for the carried Open MPI headers), MPI_ROOT (mpirun's --allow-run-as-root as root).

say() { echo "== [$SECONDS s] $*"; }
# show PATTERN...: grep as the filter of a command's output, which never fails (the command's status counts)
show() { grep "$@"; return 0; }
warn() { echo "!! $*"; }
dry() { [ "${DRY:-0}" = 1 ]; }

# x CMD...: runs CMD; with DRY=1 prints it (on the runner's stdout, fd 3, whatever CMD's output is
# redirected to) and succeeds. Environment for CMD goes through `x env VAR=value CMD` so that it shows.
x() {
  if dry; then
    { printf '   would run:'; printf ' %q' "$@"; printf '\n'; } >&3
    return 0
  fi
  "$@"
}

# keep FILE...: files of $R (relative) to bring back as separate files in $OUT besides the tarball
KEEP=()
keep() { local f; for f in "$@"; do [[ " ${KEEP[*]} " == *" $f "* ]] || KEEP+=("$f"); done; }

dev_init() {
  R=${R:-/tmp/tlm-run}
  if dry; then OUT=${OUT:-/tmp/tlm-run-dry-out}; else OUT=${OUT:?set OUT to the folder that comes back}; fi
  BUDGET=${BUDGET:-560} BUILD=${BUILD:-build-gpu} TLM=${TLM:-$PWD/${BUILD:-build-gpu}/tlm}
  rm -rf "$R" && mkdir -p "$R" "$OUT"
  exec > >(tee -a "$R/log.txt") 2>&1
  exec 3>&1
  GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)}  # GPUS preset: a test of the runner
  CORES=$(nproc)
  MPI_ROOT=(); [ "$(id -u)" -eq 0 ] && MPI_ROOT=(--allow-run-as-root)
  # NVLink multicast is off on the lent machines (their README): NCCL, torch and NVSHMEM must not ask for it
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  {
    echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "# host: $CORES cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $GPUS GPUs"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
    [ "$GPUS" -gt 1 ] && nvidia-smi topo -m 2>/dev/null | sed 's/^/# topo: /'
    command -v nvcc > /dev/null && nvcc --version | tail -1 | sed 's/^/# nvcc: /'
    command -v mpirun > /dev/null && mpirun --version 2>/dev/null | head -1 | sed 's/^/# /'
    python3 -c 'import torch; print("# torch:", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null
    echo "# tree: ${TREE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo 'commit not recorded')}"
    echo "# knobs: $(env | grep -E '^TLM_' | sort | tr '\n' ' ')"
    echo "# stages: $STAGES; budget $BUDGET s${DRY:+; DRY=$DRY}"
  } > "$R/info.txt"
  cat "$R/info.txt"
  if [ "$GPUS" = 0 ]; then
    if dry; then say "no GPU here: DRY=1 lists what each stage would run; a real run skips the GPU stages"
    else say "no GPU here: the stages that need one are skipped (said below)"; fi
  fi
}

# fits SECONDS WHAT: whether an estimate of SECONDS still fits the budget (BUDGET s from the start); says
# what it skips. DRY=1 always fits.
fits() {
  local left=$((BUDGET - SECONDS))
  if dry || [ "$1" -le "$left" ]; then say "$2"; return 0; fi
  say "$2: skipped (needs about $1 s, $left s left of BUDGET $BUDGET)" | tee -a "$R/skipped.txt"
  return 1
}
# part LIST NAME SECONDS WHAT: NAME is in the comma list LIST and fits
part() {
  [[ ",$1," == *",$2,"* ]] || return 1
  fits "$3" "$4"
}

# ---- builds ------------------------------------------------------------------------------------------------
# the GPU machine has OpenBLAS but no cJSON and no network: tools/pack-device-deps.sh packs both into
# .devdeps/deps.tar.xz (carry [".devdeps"]); Open MPI's headers in .devdeps/openmpi/include when the machine
# has Open MPI's runtime without them
DEPS_FLAGS=() MPI_FLAGS=()
dev_deps() {
  [ -n "${DEPS_DONE:-}" ] && return 0
  DEPS_DONE=1
  if [ -f .devdeps/deps.tar.xz ]; then
    mkdir -p /tmp/tlm-deps && x tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
    export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    DEPS_FLAGS=(-DCBLAS_INCLUDE_DIR=/tmp/tlm-deps/include -DOPENBLAS_LIBRARY=/tmp/tlm-deps/lib/libopenblas.so
                -DCJSON_INCLUDE_DIR=/tmp/tlm-deps/include -DCJSON_LIBRARY=/tmp/tlm-deps/lib/libcjson.so
                "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/tlm-deps/lib -Wl,-rpath,/tmp/tlm-deps/lib")
    # CUTLASS's headers (tools/pack-device-deps.sh): the fused SwiGLU GEMMs; a tree without them ignores the flag
    if dry || [ -f /tmp/tlm-deps/cutlass/include/cutlass/cutlass.h ]; then
      DEPS_FLAGS+=(-DTLM_CUTLASS_INCLUDE_DIR=/tmp/tlm-deps/cutlass/include --no-warn-unused-cli)
    fi
  else
    say "no .devdeps/deps.tar.xz carried: the build relies on this machine's cJSON and OpenBLAS"
  fi
  if ! command -v mpicc > /dev/null 2>&1 && [ -f .devdeps/openmpi/include/mpi.h ]; then
    local libmpi
    libmpi=$(find /usr/lib /usr/lib64 /usr/local/lib /opt -name 'libmpi.so*' 2>/dev/null | sort | head -1)
    if [ -n "$libmpi" ]; then
      mkdir -p /tmp/tlm-mpi/lib && ln -sf "$libmpi" /tmp/tlm-mpi/lib/libmpi.so
      ln -sfn "$PWD/.devdeps/openmpi/include" /tmp/tlm-mpi/include
      MPI_FLAGS=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_HEADER_DIR=/tmp/tlm-mpi/include -DMPI_C_LIB_NAMES=mpi
                 -DMPI_mpi_LIBRARY=/tmp/tlm-mpi/lib/libmpi.so)
      say "no mpicc: building against the carried Open MPI headers and $libmpi"
    fi
  fi
}

# dev_build SRC BUILDDIR LOG JOBS [TARGET...]: Release, CUDA on where nvcc is (sm_90a: CMake's default)
dev_build() {
  local src=$1 dir=$2 log=$3 jobs=${JOBS:-$4} cuda=ON targets=() t
  shift 4
  for t in "$@"; do targets+=(--target "$t"); done
  command -v nvcc > /dev/null || cuda=OFF
  dev_deps
  x cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=$cuda ${DEPS_FLAGS[@]+"${DEPS_FLAGS[@]}"} \
    ${MPI_FLAGS[@]+"${MPI_FLAGS[@]}"} > "$log" 2>&1 &&
    x cmake --build "$dir" -j "$jobs" ${targets[@]+"${targets[@]}"} >> "$log" 2>&1 && return 0
  grep -E 'error|Error' "$log" | head -20
  return 1
}

# dev_bin: the carried binaries (.devdeps/bin.tar.xz from tools/pack-device-deps.sh --bin: bin/ the working
# tree's tlm and GPU tests, base/ the baseline's tlm, all_reduce_perf) when they run on this machine
dev_bin() {
  [ -n "${BIN_DONE:-}" ] && return 0
  BIN_DONE=1 BIN=""
  [ -f .devdeps/bin.tar.xz ] || return 0
  dev_deps
  x tar xJf .devdeps/bin.tar.xz -C .devdeps
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if dry || .devdeps/bin/tlm --version > "$R/bin-version.txt" 2>&1; then
    BIN=.devdeps/bin TLM=$PWD/.devdeps/bin/tlm
    say "using the carried binaries (.devdeps/bin.tar.xz): $(head -1 "$R/bin-version.txt" 2>/dev/null)"
  else
    say "the carried tlm does not run here ($(tail -1 "$R/bin-version.txt")): building instead"
  fi
}

# dev_prepare: builds what the stages need, once, before the first stage: the working tree (BUILD) unless
# the carried binaries run, and BASE (before-after) beside it, in parallel, half the cores each
dev_prepare() {
  local need_tree=$1 need_base=$2 jobs=$CORES pids=() rc=0
  [ "$need_tree" = 1 ] && dev_bin
  [ "$need_tree" = 1 ] && [ -n "${BIN:-}" ] && need_tree=0
  if [ "$need_base" = 1 ] && [ -x .devdeps/base/tlm ] && { dry || .devdeps/base/tlm --version > /dev/null 2>&1; }; then
    BASE_TLM=$PWD/.devdeps/base/tlm need_base=0
    say "before: the carried .devdeps/base/tlm"
  fi
  [ "$need_tree" = 1 ] && [ "$need_base" = 1 ] && jobs=$((CORES / 2))
  [ "$need_tree" = 1 ] || [ "$need_base" = 1 ] && dev_deps
  if [ "$need_base" = 1 ]; then
    BASE=${BASE:-.baseline}
    if [ -f "$BASE/CMakeLists.txt" ] || dry; then
      say "build before: $BASE ($(cat "$BASE/.commit" 2>/dev/null || echo 'commit not recorded')) -> build-before"
      dev_build "$BASE" build-before "$R/build-before.log" "$jobs" & pids+=($!)
      BASE_TLM=$PWD/build-before/tlm
    else
      warn "no $BASE/CMakeLists.txt: make it with \`git archive COMMIT | tar x -C $BASE\` and carry it"
      BASE_TLM=""
    fi
  fi
  if [ "$need_tree" = 1 ]; then
    say "build the working tree -> $BUILD"
    dev_build . "$BUILD" "$R/build.log" "$jobs" & pids+=($!)
  fi
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" || rc=1; done
  [ ${#pids[@]} -gt 0 ] && say "built (rc $rc)"
  return $rc
}

# ---- MPI ---------------------------------------------------------------------------------------------------
# mpi N CMD...: CMD on N processes of this host; DP_ENV holds VAR=value words every rank gets
mpi() {
  local n=$1 kv extra=()
  shift
  for kv in ${DP_ENV:-}; do extra+=(-x "$kv"); done
  x mpirun ${MPI_ROOT[@]+"${MPI_ROOT[@]}"} --bind-to none -np "$n" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
    ${extra[@]+"${extra[@]}"} "$@"
}

# ---- results -----------------------------------------------------------------------------------------------
# dev_pack: $OUT/log.txt, $OUT/results.tar.xz (every file of R; files over PACK_MAX_MB, 12, are left out and
# named), and the kept files (at most 6). Rewritten after every stage: a call cut off keeps what was packed.
dev_pack() {
  local big f n=0
  big=$(find "$R" -type f -size +"${PACK_MAX_MB:-12}"M -printf '%P\n')
  [ -n "$big" ] && { warn "left out of results.tar.xz (over ${PACK_MAX_MB:-12} MiB):"; echo "$big"; }
  (cd "$(dirname "$R")" && XZ_OPT=-T0 tar cJf "$OUT/results.tar.xz.tmp" \
     $(for f in $big; do printf -- '--exclude=%s ' "$(basename "$R")/$f"; done) "$(basename "$R")") &&
    mv "$OUT/results.tar.xz.tmp" "$OUT/results.tar.xz"
  for f in ${KEEP[@]+"${KEEP[@]}"}; do
    [ -f "$R/$f" ] || continue
    n=$((n + 1))
    [ $n -le 6 ] && cp "$R/$f" "$OUT/$(echo "$f" | tr / -)"
  done
  cp "$R/log.txt" "$OUT/log.txt" 2>/dev/null
  local mb; mb=$(( $(stat -c %s "$OUT/results.tar.xz" 2>/dev/null || echo 0) / 1048576 ))
  [ "$mb" -ge 16 ] && warn "results.tar.xz is $mb MiB: over the 16 MiB a file may come back with (PACK_MAX_MB lower)"
  return 0
}
gen_corpus() { # (the generate and realrun stages) prints the train and val token files' paths, making them when needed
  local w=$1
  if [ -f build-train/data/fortunes-train.bin ]; then
    echo "build-train/data/fortunes-train.bin build-train/data/fortunes-val.bin"
  elif [ -d /usr/share/games/fortunes ] || dry; then
    x python3 tools/make_tokens.py --out "$w/fortunes" > "$w/make_tokens.txt" 2>&1
    echo "$w/fortunes-train.bin $w/fortunes-val.bin"
  fi
}
