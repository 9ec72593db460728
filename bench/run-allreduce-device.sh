#!/usr/bin/env bash
# run-allreduce-device.sh — `tlm allreduce` on a GPU machine in ONE device call (SPEC.md §2.9): build
# tlm with CUDA and NCCL, run the communication tests (the NCCL communicator on the GPUs present, the
# MPI one under mpirun), NCCL through tlm (world size 1 on a one-GPU machine: a sanity run; every
# process count up to the GPUs otherwise), the MPI communicator on the CPU cores at --nproc processes
# beside torch.distributed's gloo (the issue's target: MPI >= 2x gloo at 100 MB and 1 GB for 2 and 4
# processes), Open MPI's all-reduce algorithms side by side, torch.distributed NCCL, and nccl-tests'
# all_reduce_perf when a binary of it is carried (NCCL_TESTS_BIN; tlm does not build it); then a short
# table, last.
# Usage (on the GPU machine, from the repository root; carry [".devdeps"]):
#   OUT=/some/dir bench/run-allreduce-device.sh
# The device tool brings back at most 8 files of its $OUT: give OUT=/tmp/some/dir and tar that folder
# into the tool's $OUT.
# Files under $OUT: info.txt, build.log, tests.log, tlm-nccl-1.json (world size 1), tlm-nccl.json (2+
#   GPUs), tlm-nccl-net.json (2+ GPUs, NCCL's network transport), tlm-mpi.json, torch-gloo.json,
#   torch-nccl.json, tlm-mpi-alg-*.json, nccl-tests.txt, allreduce-side-by-side.md (the table; it has
#   nccl-tests' column where nccl-tests.json is there: bench/peers/nccl_tests_json.py nccl-tests.txt)
# env: SIZES (1MB,10MB,100MB,1GB: the seeds') NPROC (2,4,6) ITERS (10) WARMUP (5) DTYPE (fp32)
#      ALGS (4,6,3: Open MPI's coll_tuned_allreduce_algorithm numbers: ring, rabenseifner, recursive
#        doubling; at ALG_SIZES 100MB,1GB and ALG_NPROC 2,4; empty: none)
#      BUILD (build-gpu) TLM (the binary; default $BUILD/tlm) NCCL_TESTS_BIN (an all_reduce_perf binary, if carried)
#      STAGES (build,test,nccl,mpi,mpi-plain,gloo,algs,torch-nccl,nccl-tests,table: a subset runs part of it, e.g.
#        STAGES=build,test,nccl then STAGES=mpi,gloo,algs,table if one call's 10 minutes are short;
#        the table joins whatever JSON files are in $OUT)
# On a machine without a GPU (the CPU figures): BUILD=build-comm STAGES=mpi,gloo,table NPROC=2.
# .devdeps (tools/pack-device-deps.sh; the GPU machine has no network): deps.tar.xz (cJSON, OpenBLAS),
#   openmpi/include (Open MPI 4.1's mpi.h, used when the machine has Open MPI's runtime without its
#   headers).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
export NCCL_NVLS_ENABLE=0 # NVLink multicast is off on the lent machines (their README)
SIZES=${SIZES:-1MB,10MB,100MB,1GB} NPROC=${NPROC:-2,4,6} ITERS=${ITERS:-10} WARMUP=${WARMUP:-5} DTYPE=${DTYPE:-fp32}
ALGS=${ALGS-4,6,3} ALG_SIZES=${ALG_SIZES:-100MB,1GB} ALG_NPROC=${ALG_NPROC:-2,4}
BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-build,test,nccl,mpi,mpi-plain,gloo,algs,torch-nccl,nccl-tests,table}
TLM=${TLM:-$BUILD/tlm}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
CORES=$(nproc)
common=(--sizes "$SIZES" --iters "$ITERS" --warmup "$WARMUP" --dtype "$DTYPE")
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# host: $(hostname), $CORES cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "# memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
  nvidia-smi topo -m 2>/dev/null | sed 's/^/# topo: /'
  command -v nvcc >/dev/null && nvcc --version | tail -1 | sed 's/^/# nvcc: /'
  command -v mpirun >/dev/null && mpirun --version 2>/dev/null | head -1 | sed 's/^/# /'
  python3 -c 'import torch; print("# torch:", torch.__version__, "cuda", torch.version.cuda, "nccl",
    ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")' 2>/dev/null
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; sizes $SIZES; nproc $NPROC; iters $ITERS; warmup $WARMUP; dtype $DTYPE"
} | tee "$OUT/info.txt"

# ---- an MPI for the build: the system's (libopenmpi-dev), else the carried headers over the runtime's libmpi --------
mpi_flags=()
mpi_home=""
if command -v mpicc >/dev/null 2>&1; then
  mpi_home=$(dirname "$(mpicc --showme:incdirs | tr ' ' '\n' | grep -m1 .)")
elif [ -f .devdeps/openmpi/include/mpi.h ]; then
  libmpi=$(find /usr/lib /usr/lib64 /usr/local/lib /opt -name 'libmpi.so*' 2>/dev/null | sort | head -1)
  if [ -n "$libmpi" ]; then
    mkdir -p /tmp/tlm-mpi/lib && ln -sf "$libmpi" /tmp/tlm-mpi/lib/libmpi.so
    ln -sfn "$PWD/.devdeps/openmpi/include" /tmp/tlm-mpi/include
    mpi_home=/tmp/tlm-mpi
    mpi_flags=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_HEADER_DIR=/tmp/tlm-mpi/include -DMPI_C_LIB_NAMES=mpi
               -DMPI_mpi_LIBRARY=/tmp/tlm-mpi/lib/libmpi.so)
    echo "no mpicc: building against the carried Open MPI headers and $libmpi"
  fi
fi

if stage build; then
  echo "== build ($BUILD)"
  if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON ${mpi_flags[@]+"${mpi_flags[@]}"} > "$OUT/build.log" 2>&1; then
    # the GPU machine lacks cJSON: use the libraries packed by tools/pack-device-deps.sh (as bench/run-device.sh)
    [ -f .devdeps/deps.tar.xz ] || { tail -20 "$OUT/build.log"; echo "no .devdeps/deps.tar.xz carried"; exit 1; }
    echo "plain configure failed: using the carried .devdeps"
    rm -rf "$BUILD" /tmp/tlm-deps && mkdir -p /tmp/tlm-deps && tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON ${mpi_flags[@]+"${mpi_flags[@]}"} \
      -DCBLAS_INCLUDE_DIR=/tmp/tlm-deps/include -DOPENBLAS_LIBRARY=/tmp/tlm-deps/lib/libopenblas.so \
      -DCJSON_INCLUDE_DIR=/tmp/tlm-deps/include -DCJSON_LIBRARY=/tmp/tlm-deps/lib/libcjson.so \
      "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/tlm-deps/lib -Wl,-rpath,/tmp/tlm-deps/lib" >> "$OUT/build.log" 2>&1 \
      || { tail -30 "$OUT/build.log"; which mpirun mpicc; ls .devdeps; exit 1; }
  fi
  grep 'tlm:' "$OUT/build.log"
  cmake --build "$BUILD" -j "$CORES" --target tlm test_comm test_gpu_comm >> "$OUT/build.log" 2>&1 \
    || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
[ -x "$TLM" ] || { echo "no $TLM: run the build stage"; exit 1; }

tests_rc=0
if stage test; then
  echo "== tests: NCCL on the GPUs present, MPI under mpirun" | tee "$OUT/tests.log"
  run_test() { echo "-- $*" >> "$OUT/tests.log"; "$@" >> "$OUT/tests.log" 2>&1 || tests_rc=1; }
  run_test ctest --test-dir "$BUILD" -R 'test_gpu_comm' --output-on-failure
  [ "$GPUS" -gt 1 ] && run_test bash tests/test_comm_mpirun.sh "$GPUS" "$BUILD/tests/test_gpu_comm"
  run_test bash tests/test_comm_mpirun.sh 4 "$BUILD/tests/test_comm"
  run_test bash tests/test_comm_fault.sh "$BUILD/tests/test_comm"
  grep -E '^-- |[0-9]+ passed|tests passed|Failed|Skipped|skipped' "$OUT/tests.log"
fi

if stage nccl; then
  if [ "$GPUS" -ge 1 ]; then
    echo "== tlm allreduce, NCCL: world size 1 (sanity: busbw is 0 by definition) and up to $GPUS GPUs"
    mpirun "${root[@]}" -np 1 "$TLM" allreduce --backend nccl "${common[@]}" -f json -o "$OUT/tlm-nccl-1.json" 2>&1 \
      | grep -E '^nccl|^# (devices|links|result)'
    if [ "$GPUS" -ge 2 ]; then
      counts=$(seq -s, 2 "$GPUS")
      "$TLM" allreduce --sweep --backend nccl --nproc "$counts" "${common[@]}" -f json -o "$OUT/tlm-nccl.json" 2>&1 \
        | grep -E '^nccl|^# result'
      echo "== tlm allreduce, NCCL's network transport, as between machines (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"
      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$TLM" allreduce --sweep --backend nccl --nproc "$counts" "${common[@]}" \
        -f json -o "$OUT/tlm-nccl-net.json" 2>&1 | grep -E '^nccl|^# result'
    fi
  else
    echo "== no GPU: NCCL skipped"
  fi
fi

if stage mpi; then
  echo "== tlm allreduce, MPI on $CORES cores at $NPROC processes (--mpi-algorithm auto: shm from 256 KiB)"
  "$TLM" allreduce --sweep --backend mpi --nproc "$NPROC" "${common[@]}" -f json -o "$OUT/tlm-mpi.json" 2>&1 \
    | grep -E '^mpi|^# result|skipped|failed'
fi

if stage mpi-plain; then
  echo "== tlm allreduce, MPI on $CORES cores at $NPROC processes, MPI_Allreduce only (--mpi-algorithm mpi)"
  "$TLM" allreduce --sweep --backend mpi --mpi-algorithm mpi --nproc "$NPROC" "${common[@]}" -f json \
    -o "$OUT/tlm-mpi-plain.json" 2>&1 | grep -E '^mpi|^# result|skipped|failed'
fi

if stage gloo; then
  echo "== torch.distributed gloo at $NPROC processes"
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_allreduce.py --backend gloo --nproc "$NPROC" "${common[@]}" \
    -f json -o "$OUT/torch-gloo.json" 2>&1 | grep -E '^gloo|Error|error' | head -40
fi

if stage algs && [ -n "$ALGS" ]; then
  IFS=, read -r -a algs <<<"$ALGS"
  for alg in "${algs[@]}"; do
    echo "== tlm allreduce, MPI, Open MPI's all-reduce algorithm $alg (coll_tuned_allreduce_algorithm)"
    TLM_MPIRUN_FLAGS="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm $alg" \
      "$TLM" allreduce --sweep --backend mpi --nproc "$ALG_NPROC" --sizes "$ALG_SIZES" --iters "$ITERS" \
      --warmup "$WARMUP" --dtype "$DTYPE" -f json -o "$OUT/tlm-mpi-alg-$alg.json" 2>&1 | grep -E '^mpi|^# result'
  done
fi

if stage torch-nccl && [ "$GPUS" -ge 1 ]; then
  counts=$(seq -s, 1 "$GPUS")
  echo "== torch.distributed NCCL at $counts processes"
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_allreduce.py --backend nccl --nproc "$counts" "${common[@]}" \
    -f json -o "$OUT/torch-nccl.json" 2>&1 | grep -E '^nccl|Error|error' | head -20
fi

if stage nccl-tests && [ "$GPUS" -ge 1 ]; then
  # nccl-tests' all_reduce_perf, if a binary built from its public source is carried (NCCL_TESTS_BIN);
  # tlm neither ships nor builds it
  if [ -x "${NCCL_TESTS_BIN:-}" ]; then
    echo "== nccl-tests all_reduce_perf ($NCCL_TESTS_BIN)"
    for n in $(seq 1 "$GPUS"); do # the seeds' sizes exactly: 10^6 .. 10^9 bytes
      mpirun "${root[@]}" -np "$n" "$NCCL_TESTS_BIN" -b 1000000 -e 1000000000 -f 10 -g 1 \
        -n "$ITERS" -w "$WARMUP" -c 1 2>&1 | tee -a "$OUT/nccl-tests.txt" | grep -E '^ +[0-9]|Avg bus'
    done
  else
    echo "== nccl-tests: no all_reduce_perf binary given (NCCL_TESTS_BIN): skipped"
  fi
fi

if stage table; then
  echo "== side by side (in-place busbw, GB/s; torch.distributed all-reduces in place)"
  python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
runs = {}  # (who, backend, nranks, bytes) -> busbw of the in-place row
def load(path, who):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return
    for r in d.get("rows", []):
        if r.get("in_place") and r.get("status") == "ok" and r.get("busbw_gb_per_s") is not None:
            runs[(who, r["backend"], r["nranks"], r["bytes"])] = (r["busbw_gb_per_s"], r["time_us_mean"])
for f, who in (("tlm-mpi.json", "tlm"), ("tlm-nccl-1.json", "tlm"), ("tlm-nccl.json", "tlm"),
               ("torch-gloo.json", "torch"), ("torch-nccl.json", "torch")):
    load(os.path.join(out, f), who)
load(os.path.join(out, "tlm-nccl-net.json"), "net")
load(os.path.join(out, "nccl-tests.json"), "nt")  # bench/peers/nccl_tests_json.py of nccl-tests.txt
load(os.path.join(out, "tlm-mpi-plain.json"), "plain")
for f in sorted(glob.glob(os.path.join(out, "tlm-mpi-alg-*.json"))):
    load(f, "alg" + f.rsplit("-", 1)[1].split(".")[0])
keys = sorted({(k[2], k[3]) for k in runs})
lines = ["| ranks | size (bytes) | tlm MPI busbw | gloo busbw | MPI / gloo | MPI_Allreduce only | MPI ring (4) | MPI rabenseifner (6) "
         "| MPI rec. doubling (3) | tlm NCCL busbw | torch NCCL busbw | nccl-tests busbw | tlm / nccl-tests "
         "| tlm NCCL net busbw |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
def cell(key):
    v = runs.get(key)
    return f"{v[0]:.2f}" if v else "-"
for n, b in keys:
    mpi, gloo = runs.get(("tlm", "mpi", n, b)), runs.get(("torch", "gloo", n, b))
    ratio = f"{mpi[0] / gloo[0]:.2f}x" if mpi and gloo and gloo[0] > 0 else "-"
    nccl, nt = runs.get(("tlm", "nccl", n, b)), runs.get(("nt", "nccl", n, b))
    nt_ratio = f"{nccl[0] / nt[0]:.3f}x" if nccl and nt and nt[0] > 0 else "-"
    lines.append(f"| {n} | {b} | {cell(('tlm', 'mpi', n, b))} | {cell(('torch', 'gloo', n, b))} | {ratio} | "
                 f"{cell(('plain', 'mpi', n, b))} | {cell(('alg4', 'mpi', n, b))} | {cell(('alg6', 'mpi', n, b))} | {cell(('alg3', 'mpi', n, b))} | "
                 f"{cell(('tlm', 'nccl', n, b))} | {cell(('torch', 'nccl', n, b))} | {cell(('nt', 'nccl', n, b))} | {nt_ratio} | "
                 f"{cell(('net', 'nccl', n, b))} |")
text = "\n".join(lines) + "\n"
path = os.path.join(out, "allreduce-side-by-side.md")
with open(path + ".tmp", "w") as f:
    f.write("busbw = algbw x 2(n-1)/n, GB/s = 10^9 bytes/s; the in-place rows (torch.distributed all-reduces in "
            "place); tlm MPI = --mpi-algorithm auto (tlm's shared-memory schedule from 256 KiB a rank, MPI_Allreduce below); "
            "MPI_Allreduce only = --mpi-algorithm mpi; MPI / gloo = tlm's MPI busbw over gloo's; the target is >= 2x at 100 MB and 1 GB for 2 and 4 "
            "processes. At 1 rank busbw is 0 by definition.\n\n" + text)
os.replace(path + ".tmp", path)
print(text, end="")
EOF
fi
exit "$tests_rc"
