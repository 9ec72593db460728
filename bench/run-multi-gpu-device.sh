#!/usr/bin/env bash
# run-multi-gpu-device.sh — issues 13 and 15 on one host of 2-4 GPUs in ONE device call, for a session
# with one machine start left: the NCCL all-reduce sweep beside nccl-tests' all_reduce_perf and
# torch.distributed; the GPU equality tests; data-parallel xl (1 GPU, every --ddp mode and bucket size,
# ZeRO-1, the overlapped optimizer) beside PyTorch DDP. Stages run in the order of what the issues lack
# most, each only when its estimate fits the time left (BUDGET s from the start), so a short lease still
# returns whole files. The results go to one tarball, $OUT/results.tgz, rewritten after every stage (the
# device tool brings back 8 files; a call cut off keeps what was tarred).
# The tables and pictures are made afterwards on the development machine, from the tarball:
#   bench/run-ddp-device.sh's table stage (OUT=the unpacked folder STAGES=table) and tlm plot.
# Usage (device tool, repository root; carry [".devdeps"]):
#   bash bench/run-multi-gpu-device.sh
# .devdeps (tools/pack-device-deps.sh --bin --nccl-tests DIR): deps.tar.xz, and bin.tar.xz: bin/ (tlm,
#   libtlm_inject.so, test_gpu_comm, test_gpu_ddp, built on the development machine with -DTLM_NATIVE=OFF, so the
#   call spends no time building; where they do not run, the script builds with bench/run-device.sh) and
#   all_reduce_perf (nccl-tests built from its public source with MPI=0 for sm_90; without it, no nccl-tests).
# env: BUDGET (470 s) WARMUP (2) STEPS (5) MODEL (xl) CTX (256) BATCH (4 rows a rank)
#      STAGES (allreduce,tests,one,carve,modes-bf16,zero,torch-bf16,big,modes-fp32,torch-fp32,extra,zl: a subset
#      runs part)
#      CARVE, CARVE_OVERLAP (the carve stage's NCCL_MAX_CTAS/TLM_SM_CARVEOUT pairs) BIG_CTX_2, BIG_CTX_4 (big's)
# What the stages took on 4 H100 (2026-11-27, bench/results/h100x4-2026-11-27-multi and -ddp), the estimates
# below: allreduce 80 s (tlm 28, nccl-tests 7, torch 45); tests 14 s. With a sweep's initial weights drawn once
# (a412ff0), the data-parallel rows take 2-3 s each after their run's first: modes 39 s (2 GPUs) and 48 s (4) a
# precision; PyTorch DDP 18-23 s a process count; the calls of bench/results/h100x4-2026-11-27-ddp ran
# tests,one,carve,modes-bf16,torch-bf16 in 377 s and zero,big,modes-fp32,torch-fp32 in 410 s.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?run through the device tool, which sets OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 # the lent machines' rule
BUDGET=${BUDGET:-470} WARMUP=${WARMUP:-2} STEPS=${STEPS:-5} MODEL=${MODEL:-xl} CTX=${CTX:-256} BATCH=${BATCH:-4}
STAGES=${STAGES:-allreduce,tests,one,carve,modes-bf16,zero,torch-bf16,big,modes-fp32,torch-fp32,extra,zl}
R=/tmp/tlm-results
mkdir -p "$R"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$GPUS" -ge 4 ] && dp_counts="2 4" || dp_counts="2"   # the issues' 2 and 4 GPUs
counts=${dp_counts// /,}
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
# DP_ENV: VAR=value words every mpirun passes on (NCCL_MAX_CTAS=16 TLM_SM_CARVEOUT=16, say)
mpi() {
  local n=$1 kv extra=(); shift
  for kv in ${DP_ENV:-}; do extra+=(-x "$kv"); done
  mpirun "${root[@]}" --bind-to none -np "$n" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "${extra[@]}" "$@"
}
pack() { # the folder as $OUT/results.tgz, whole or not at all
  tar czf "$OUT/results.tgz.tmp" -C "$(dirname "$R")" "$(basename "$R")" && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"
}
# fits STAGE SECONDS NAME: whether STAGE is asked for and its estimate, SECONDS, fits the time left (says when
# it does not)
fits() {
  [[ ",$STAGES," == *",$1,"* ]] || return 1
  shift
  local left=$((BUDGET - SECONDS))
  if [ "$1" -le "$left" ]; then echo "== [$SECONDS s] $2"; return 0; fi
  echo "== [$SECONDS s] $2: skipped (needs about $1 s, $left left)" | tee -a "$R/skipped.txt"; return 1
}
log() { tee -a "$R/log.txt"; }

{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "# host: $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $GPUS GPUs"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/# gpu: /'
  nvidia-smi topo -m 2>/dev/null | sed 's/^/# topo: /'
  mpirun --version 2>/dev/null | head -1 | sed 's/^/# /'
  python3 -c 'import torch; print("# torch:", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | sed 's/^/# /'
  echo "# tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
       "$(git status --porcelain 2>/dev/null | wc -l) changed files"
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; budget $BUDGET s; warm-up $WARMUP, steps $STEPS;" \
       "$MODEL ctx $CTX, $BATCH rows a rank; DP_ENV '${DP_ENV:-}'"
} > "$R/info.txt" 2>&1
cat "$R/info.txt"

# ---- the binaries: carried, else built here --------------------------------------------------------------------
mkdir -p /tmp/tlm-deps && tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
[ -f .devdeps/bin.tar.xz ] && tar xJf .devdeps/bin.tar.xz -C .devdeps
cuda_libs=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
export LD_LIBRARY_PATH=/tmp/tlm-deps/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=.devdeps/bin
if ! "$B/tlm" --version > "$R/version.txt" 2>&1; then
  echo "== the carried tlm does not run here ($(tail -1 "$R/version.txt")): building"
  STAGES=build OUT="$R" bash bench/run-device.sh > /dev/null || { tail -30 "$R/build.log"; pack; exit 1; }
  cmake --build build-gpu -j "$(nproc)" --target test_gpu_comm test_gpu_ddp >> "$R/build.log" 2>&1
  B=build-gpu
  for t in test_gpu_comm test_gpu_ddp; do ln -sf "$PWD/build-gpu/tests/$t" "$B/$t"; done
fi
TLM=$PWD/$B/tlm
echo "# tlm: $TLM: $(head -1 "$R/version.txt")" | tee -a "$R/info.txt"
pack

# ---- issue 13: NCCL all-reduce, the seeds' sizes, beside nccl-tests and torch.distributed -----------------------
sizes=(--sizes 1MB,10MB,100MB,1GB --iters 20 --warmup 5 --dtype fp32)
if fits allreduce 30 "tlm allreduce, NCCL, $counts ranks"; then
  "$TLM" allreduce --sweep --backend nccl --nproc "$counts" "${sizes[@]}" -f json -o "$R/tlm-nccl.json" 2>&1 \
    | grep -E '^nccl|^# (links|result)' | log
fi
if [ -x .devdeps/all_reduce_perf ] && fits allreduce 10 "nccl-tests all_reduce_perf (one process, -g N)"; then
  for n in ${counts//,/ }; do  # 10^6 .. 10^9 bytes, the seeds' sizes; -c 1 checks the results
    .devdeps/all_reduce_perf -b 1000000 -e 1000000000 -f 10 -g "$n" -n 20 -w 5 -c 1 > "$R/nccl-tests-$n.txt" 2>&1
    grep -E '^ +[0-9]|Avg bus|nccl-tests|NCCL version' "$R/nccl-tests-$n.txt" | sed "s/^/[$n] /" | log
  done
fi
if fits allreduce 45 "torch.distributed NCCL, $counts ranks"; then
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_allreduce.py --backend nccl --nproc "$counts" "${sizes[@]}" \
    -f json -o "$R/torch-nccl.json" 2>&1 | grep -E '^nccl|Error' | log
fi
pack

# ---- the GPU tests: the NCCL communicator and N-GPU training = one process ----------------------------------------
if fits tests 30 "GPU tests"; then
  for n in $dp_counts; do
    timeout 120 bash tests/test_comm_mpirun.sh "$n" "$B/test_gpu_ddp" > "$R/test-gpu-ddp-np$n.txt" 2>&1
    echo "test_gpu_ddp np$n: rc $? $(grep -E '[0-9]+ passed' "$R/test-gpu-ddp-np$n.txt" | tail -1)" | log
  done
  timeout 120 bash tests/test_comm_mpirun.sh "$GPUS" "$B/test_gpu_comm" > "$R/test-gpu-comm-np$GPUS.txt" 2>&1
  echo "test_gpu_comm np$GPUS: rc $? $(grep -E '[0-9]+ passed' "$R/test-gpu-comm-np$GPUS.txt" | tail -1)" | log
  pack
fi

# ---- issue 15: data-parallel xl ---------------------------------------------------------------------------------
common=(--model "$MODEL" --context-length "$CTX" --warmup "$WARMUP" --steps "$STEPS" --pass train --timeout 120)
E=$R/bench-stderr.txt                               # tlm bench's progress and errors
row() { grep -vE '^#|^ *$|^model|^ +(M|ms)' | log; } # a row's line of the table
if fits one 100 "1 GPU: batch 4 and each run's global batch (graphs off), graphs on, overlapped optimizer"; then
  batches=$BATCH; for n in $dp_counts; do batches=$batches,$((BATCH * n)); done
  "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$batches" --cuda-graph off -f json -o "$R/tlm-1gpu.json" \
    2>> "$E" | row
  "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$BATCH" --cuda-graph on -f json -o "$R/tlm-1gpu-graphs.json" \
    2>> "$E" | row
  "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$BATCH" --cuda-graph off --optimizer-overlap -f json \
    -o "$R/tlm-overlap-1.json" 2>> "$E" | row
  pack
fi
# every mode and bucket size, fp32 and bf16 gradient reduction (16 rows a precision and GPU count)
modes() {
  local n=$1 prec=$2
  fits "modes-$prec" "$3" "$n GPUs, $prec: every mode, buckets 1,10,25,100,1000 MiB, fp32 and bf16 reductions" \
    || return 0
  mpi "$n" "$TLM" bench "${common[@]}" -P "$prec" -b $((BATCH * n)) --ddp naive,flat,overlap,bucketed \
    --bucket-mb 1,10,25,100,1000 --grad-reduce-dtype fp32,bf16 -f json -o "$R/tlm-modes-$n-$prec.json" \
    2>> "$E" | row
  pack
}
# NCCL's thread blocks against the backward's GEMMs (2 GPUs, bf16, fp32 reductions): NCCL_MAX_CTAS caps NCCL's,
# TLM_SM_CARVEOUT (matmul.cu) plans every GEMM for that many SMs fewer; CARVE lists CTAS/CARVEOUT pairs (- unset)
# carve_rows FILE BUCKETS PAIRS [FLAGS]: one 2-GPU bf16 run a CTAS/CARVEOUT pair, to $R/FILE-CTAS-CARVEOUT.json
carve_rows() {
  local file=$1 buckets=$2 pairs=$3 cfg ctas carve env; shift 3
  for cfg in $pairs; do
    ctas=${cfg%/*} carve=${cfg#*/} env=(-x "TLM_SM_CARVEOUT=$carve")
    [ "$ctas" != - ] && env+=(-x "NCCL_MAX_CTAS=$ctas")
    fits carve 25 "2 GPUs, bf16 $*: NCCL_MAX_CTAS=$ctas TLM_SM_CARVEOUT=$carve" || return 0
    mpi 2 "${env[@]}" "$TLM" bench "${common[@]}" -P bf16 -b $((BATCH * 2)) --ddp bucketed --bucket-mb "$buckets" \
      "$@" -f json -o "$R/$file-${ctas/#-/default}-$carve.json" 2>> "$E" | row
  done
}
if fits carve 150 "2 GPUs, bf16: NCCL's thread blocks and the GEMMs' SM target (CARVE)"; then
  mpi 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT -x NCCL_DEBUG_FILE="$R/nccl-init-%p.txt" "$TLM" bench \
    "${common[@]}" -P bf16 -b $((BATCH * 2)) --ddp bucketed --bucket-mb 25,100,1000 -f json \
    -o "$R/tlm-carve-2-default.json" 2>> "$E" | row
  cat "$R"/nccl-init-*.txt > "$R/nccl-init.txt" 2>/dev/null; rm -f "$R"/nccl-init-*.txt
  grep -m4 -iE 'coll channels|channels per peer' "$R/nccl-init.txt" | log
  carve_rows tlm-carve-2 25,100,1000 "${CARVE:-16/16 8/8 -/32 -/16}"
  carve_rows tlm-carve-overlap-2 100,1000 "${CARVE_OVERLAP:-16/16 -/0}" --optimizer-overlap
  if fits carve 20 "1 GPU, bf16: TLM_SM_CARVEOUT=16 (what the target costs without NCCL beside)"; then
    TLM_SM_CARVEOUT=16 "$TLM" bench "${common[@]}" -P bf16 -b "$BATCH" --cuda-graph off -f json \
      -o "$R/tlm-carve-1-16.json" 2>> "$E" | row
  fi
  pack
fi
for n in $dp_counts; do modes "$n" bf16 $((100 + 10 * n)); done
for n in $dp_counts; do
  if fits zero $((110 + 10 * n)) "$n GPUs: ZeRO-1 against DDP (bucketed 25 MiB), the overlapped optimizer"; then
    mpi "$n" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((BATCH * n)) --ddp bucketed --bucket-mb 25 --zero 0,1 \
      -f json -o "$R/tlm-zero-$n.json" 2>> "$E" | row
    mpi "$n" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((BATCH * n)) --ddp bucketed --bucket-mb 25 \
      --grad-reduce-dtype fp32,bf16 --optimizer-overlap -f json -o "$R/tlm-overlap-$n.json" 2>> "$E" \
      | row
    pack
  fi
done
# PyTorch DDP (bucket 25 MiB, fp32 reduction): one invocation a process count, so a cut-off call keeps the rest
torch_ddp() {
  local prec=$1 est=$2 n
  for n in 1 $dp_counts; do
    fits "torch-$prec" "$est" "PyTorch DDP, $prec, $n processes" || return 0
    PYTHONUNBUFFERED=1 timeout $((BUDGET - SECONDS)) python3 bench/peers/pytorch_ddp.py --model "$MODEL" \
      --context-length "$CTX" --batch-size-per-rank "$BATCH" --precision "$prec" --nproc "$n" --bucket-mb 25 \
      --warmup "$WARMUP" --steps "$STEPS" --out "$R/torch-ddp-$prec-$n.json" 2>&1 | grep -vE '^#|^$|^prec' | log
    pack
  done
}
torch_ddp bf16 45
# 2.7B, bf16, 4 rows a rank, at a context where one H100 runs out of memory and ZeRO-1's rank fits (the plan of
# bench/results/h200-2026-11-25-zero-plan scaled to 80 GB: one GPU's longest about 2500, ZeRO-1's about 3400 on
# 2 ranks and 3850 on 4); --max-context device prints the plan's longest beside each row
BIG_CTX_2=${BIG_CTX_2:-3072} BIG_CTX_4=${BIG_CTX_4:-3584}
if fits big 160 "2.7B bf16: 1 GPU at $BIG_CTX_2 and $BIG_CTX_4 (out of memory expected), then ZeRO 0 and 1"; then
  big=(--model 2.7B -P bf16 --pass train --warmup 1 --steps 3 --max-context device --timeout 120)
  ctxs=$BIG_CTX_2; [ "$GPUS" -ge 4 ] && ctxs=$BIG_CTX_2,$BIG_CTX_4
  "$TLM" bench "${big[@]}" -c "$ctxs" -b "$BATCH" -f json -o "$R/tlm-big-1.json" 2>> "$E" | row
  for n in $dp_counts; do
    c=$BIG_CTX_2; [ "$n" -ge 4 ] && c=$BIG_CTX_4
    mpi "$n" "$TLM" bench "${big[@]}" -c "$c" -b $((BATCH * n)) --ddp bucketed --zero 0,1 -f json \
      -o "$R/tlm-big-$n.json" 2>> "$E" | row
    pack
  done
fi
for n in $dp_counts; do modes "$n" fp32 $((120 + 10 * n)); done
torch_ddp fp32 50
# the large buckets beside what else could hide the reductions (bf16): the 1-GPU rows again (a fresh machine), NCCL's
# Simple protocol and no side stream for the weight gradients (2 GPUs), the overlapped optimizer and ZeRO-1 (4 GPUs)
if fits extra 200 "bf16, buckets 100, 1000 MiB: NCCL_PROTO=Simple, TLM_SIDE_STREAM=0, overlapped AdamW, ZeRO-1"; then
  "$TLM" bench "${common[@]}" -P bf16 -b "$BATCH" --cuda-graph off -f json -o "$R/tlm-extra-1.json" 2>> "$E" | row
  "$TLM" bench "${common[@]}" -P bf16 -b "$BATCH" --cuda-graph off --optimizer-overlap -f json \
    -o "$R/tlm-extra-overlap-1.json" 2>> "$E" | row
  for kv in NCCL_PROTO=Simple TLM_SIDE_STREAM=0; do
    mpi 2 -x "$kv" "$TLM" bench "${common[@]}" -P bf16 -b $((BATCH * 2)) --ddp bucketed --bucket-mb 100,1000 -f json \
      -o "$R/tlm-extra-2-${kv%%=*}.json" 2>> "$E" | row
  done
  for n in $dp_counts; do
    mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((BATCH * n)) --ddp bucketed --bucket-mb 100,1000 \
      --grad-reduce-dtype fp32,bf16 --optimizer-overlap -f json -o "$R/tlm-extra-overlap-$n.json" 2>> "$E" | row
    mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((BATCH * n)) --ddp bucketed --bucket-mb 100,1000 --zero 0,1 \
      -f json -o "$R/tlm-extra-zero-$n.json" 2>> "$E" | row
    pack
  done
fi
# ZeRO-1 with its pieces' GEMM copy written by the update and the gathered ones cast on the communication stream
# (ddp.c's zero_update), beside ZeRO 0 and the 1-GPU row of the same call (bf16, buckets 25 and 1000 MiB)
if fits zl 130 "bf16, buckets 25 and 1000 MiB: ZeRO 0 and 1 (the GEMM copy kept by ZeRO-1's update)"; then
  "$TLM" bench "${common[@]}" -P bf16 -b "$BATCH" --cuda-graph off -f json -o "$R/tlm-zl-1.json" 2>> "$E" | row
  for n in $dp_counts; do
    mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((BATCH * n)) --ddp bucketed --bucket-mb 25,1000 --zero 0,1 \
      -f json -o "$R/tlm-zl-$n.json" 2>> "$E" | row
    pack
  done
fi
echo "== [$SECONDS s] done" | log
pack
