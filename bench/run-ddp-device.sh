#!/usr/bin/env bash
# run-ddp-device.sh — data-parallel training (issue 15, SPEC.md §2.10) on one host of 2 or 4 H200, in
# device calls of at most 10 minutes each (STAGES):
#   build   tlm for sm_90a (bench/run-device.sh's build: the carried .devdeps when cJSON is missing);
#   test    the NCCL equality test (test_gpu_ddp under mpirun -np 2, and -np 4 with 4 GPUs: N-rank training of
#           the tiny model = one process in fp32 within 1e-6, bf16 within one ulp, ZeRO-1 = DDP) and
#           the CPU ones under mpirun (test_ddp at 2 and 4 processes);
#   one     the single-GPU baseline: tlm bench, xl, batch 4, context 256, fp32 and bf16, CUDA graphs off
#           (as every data-parallel row runs: ddp.h) and on (tlm's best single-GPU step); graphs off also at
#           batch 4 N, each data-parallel run's global batch (the scaling against the same global batch);
#   modes   2 GPUs (and 4 when present): every --ddp mode, bucketed at --bucket-mb 1,10,100,1000 (and 25,
#           the default), fp32 and bf16 gradient reductions, per-rank batch 4 (global 4 N);
#   zero    ZeRO-1 against DDP (bucketed 25 MiB and flat), fp32 and bf16: step time and the memory table
#           (after set-up, before and after the optimizer step, peak, optimizer state per rank);
#   scale   bucketed 25 MiB at 1, 2 and 4 GPUs (the 1-GPU row is `one`'s);
#   oib     bucketed 25 MiB with --optimizer-in-backward, then with --optimizer-overlap (each bucket's
#           update on a background stream once its average lands), at 1, 2 (and 4) GPUs, fp32 and bf16
#           reductions (not in the default STAGES; tlm-oib-N.json, tlm-overlap-N.json);
#   ctas    bucketed 25 MiB at 2 GPUs with NCCL's thread blocks capped (NCCL_MAX_CTAS=CTAS, default 4,8,16):
#           fewer SMs for the reductions, more for the backward they overlap (not in the default STAGES;
#           tlm-ctas-C.json);
#   big     2.7B (BIG_MODEL), bf16, BATCH rows a rank, at a context where one GPU runs out of memory and
#           ZeRO-1 fits (BIG_CTX_2, BIG_CTX_4: from the memory plan, `--max-context device` beside each row):
#           1 GPU at both contexts, then N GPUs bucketed with ZeRO 0 and 1 (not in the default STAGES;
#           tlm-big-N.json);
#   torch   the PyTorch DDP peer (bench/peers/pytorch_ddp.py) in the same run: 1, 2 (and 4) processes, bucket
#           sizes, bf16_compress_hook, ZeroRedundancyOptimizer;
#   cpu     on the host's CPU cores instead (MPI): tlm bench bucketed and flat against PyTorch DDP over gloo,
#           small, context 128, global batch 8, at 1, 2 and 4 processes (tlm-cpu-N.json, torch-cpu-N.json);
#   table   ddp-side-by-side.md: the mode x bucket table against the 1-GPU step (the issue's targets:
#           bucketed <= 1.10x on 2 GPUs, <= 1.15x on 4; ZeRO-1 <= 1.10x bucketed, its optimizer state 1/N),
#           PyTorch beside, the ZeRO memory table, the scaling table.
# Pictures (issue 15), drawn where gnuplot is (the development machine) from the fetched JSON:
#   tlm plot ddp-buckets tlm-1gpu.json tlm-modes-*.json torch-ddp.json --out ddp-buckets
#   tlm plot ddp-scaling tlm-1gpu.json tlm-scale-*.json torch-ddp.json --out ddp-scaling
# Usage (from the repository root; carry [".devdeps"]):
#   OUT=/some/dir STAGES=build,test,one bench/run-ddp-device.sh      # first call
#   OUT=/some/dir STAGES=modes bench/run-ddp-device.sh               # second call, and so on:
#   OUT=/some/dir STAGES=zero,scale bench/run-ddp-device.sh; STAGES=torch ...; STAGES=table ...
# (the build stays in build-gpu while the machine is held; a fresh machine needs `build` again).
# The device tool brings back at most 8 files of its $OUT: give this script OUT=/tmp/some/dir and tar that
# folder into the tool's $OUT (on 2026-11-24 a call that did not lost every DDP file).
# Files under $OUT: info.txt, build.log, tests.log, tlm-1gpu.json, tlm-1gpu-graphs.json, tlm-modes-N.json,
#   tlm-zero-N.json, tlm-scale-N.json, tlm-oib-N.json, tlm-overlap-N.json, tlm-ctas-C.json, tlm-big-N.json,
#   torch-ddp.json,
#   ddp-side-by-side.md
# env: MODEL (xl) CTX (256) BATCH (4: rows per rank) PRECISIONS (fp32,bf16) BUCKETS (1,10,100,1000,25)
#      WARMUP (3) STEPS (10) TIMEOUT (600: the watchdog's, s) BUILD (build-gpu) NPROCS (2 and 4 when present)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
export NCCL_NVLS_ENABLE=0 # NVLink multicast is off on the lent machines (their README)
MODEL=${MODEL:-xl} CTX=${CTX:-256} BATCH=${BATCH:-4} PRECISIONS=${PRECISIONS:-fp32,bf16}
BUCKETS=${BUCKETS:-1,10,100,1000,25} WARMUP=${WARMUP:-3} STEPS=${STEPS:-10} TIMEOUT=${TIMEOUT:-600}
BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-build,test,one,modes,zero,scale,torch,table}
TLM=$BUILD/tlm
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -z "${NPROCS:-}" ]; then NPROCS=2; [ "$GPUS" -ge 4 ] && NPROCS=2,4; fi
IFS=, read -r -a nprocs <<<"$NPROCS"
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
mpi() { local n=$1; shift; mpirun "${root[@]}" --bind-to none -np "$n" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$@"; }
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# host: $(hostname), $(nproc) cores; $GPUS GPUs"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
  nvidia-smi topo -m 2>/dev/null | sed 's/^/# topo: /'
  mpirun --version 2>/dev/null | head -1 | sed 's/^/# /'
  python3 -c 'import torch; print("# torch:", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; $MODEL ctx $CTX, $BATCH rows a rank; $PRECISIONS; buckets $BUCKETS MiB;" \
       "warm-up $WARMUP, steps $STEPS; processes $NPROCS"
} | tee -a "$OUT/info.txt"

if stage build; then
  echo "== build"
  STAGES=build OUT="$OUT" bash bench/run-device.sh > /dev/null || { tail -30 "$OUT/build.log"; exit 1; }
fi
export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x "$TLM" ] || { echo "no $TLM: run the build stage"; exit 1; }
[ "$GPUS" -ge 2 ] || echo "warning: $GPUS GPU(s): the data-parallel stages need 2 or more"

tests_rc=0
if stage test; then
  echo "== tests" | tee "$OUT/tests.log"
  run_test() { echo "-- $*" >> "$OUT/tests.log"; "$@" >> "$OUT/tests.log" 2>&1 || tests_rc=1; }
  # a build tree made by another script (run-allreduce-device.sh builds only its own targets) may lack them
  run_test cmake --build "$BUILD" -j "$(nproc)" --target test_gpu_ddp test_ddp
  for n in "${nprocs[@]}"; do run_test bash tests/test_comm_mpirun.sh "$n" "$BUILD/tests/test_gpu_ddp"; done
  run_test bash tests/test_comm_mpirun.sh 2 "$BUILD/tests/test_ddp"
  run_test bash tests/test_comm_mpirun.sh 4 "$BUILD/tests/test_ddp"
  grep -E '^-- |FAIL|[0-9]+ passed|skipped' "$OUT/tests.log"
fi

# a row's columns on stdout (tlm bench prints the table; the JSON goes to the file)
common=(--model "$MODEL" --context-length "$CTX" --warmup "$WARMUP" --steps "$STEPS" --pass train
        --precision "$PRECISIONS" --timeout "$TIMEOUT")
if stage one; then
  # a rank's rows (the issue's x1 targets), and each data-parallel run's global batch (strong scaling)
  batches=$BATCH; for n in "${nprocs[@]}"; do batches=$batches,$((BATCH * n)); done
  echo "== 1 GPU: the baseline at batch $batches (CUDA graphs off, as the data-parallel rows; and on)"
  "$TLM" bench "${common[@]}" --batch-size "$batches" --cuda-graph off -f json -o "$OUT/tlm-1gpu.json" | grep -v '^#'
  "$TLM" bench "${common[@]}" --batch-size "$BATCH" --cuda-graph on -f json -o "$OUT/tlm-1gpu-graphs.json" | grep -v '^#'
fi
if stage modes; then
  for n in "${nprocs[@]}"; do
    echo "== $n GPUs: every mode, buckets $BUCKETS MiB, fp32 and bf16 reductions"
    mpi "$n" "$TLM" bench "${common[@]}" --batch-size $((BATCH * n)) --ddp naive,flat,overlap,bucketed \
      --bucket-mb "$BUCKETS" --grad-reduce-dtype fp32,bf16 -f json -o "$OUT/tlm-modes-$n.json" | grep -v '^#'
  done
fi
if stage oib; then
  echo "== 1 GPU: --optimizer-in-backward, CUDA graphs off"
  "$TLM" bench "${common[@]}" --batch-size "$BATCH" --cuda-graph off --optimizer-in-backward \
    -f json -o "$OUT/tlm-oib-1.json" | grep -v '^#'
  for n in "${nprocs[@]}"; do
    echo "== $n GPUs: bucketed 25 MiB with --optimizer-in-backward (each group reduced, then updated, in the backward)"
    mpi "$n" "$TLM" bench "${common[@]}" --batch-size $((BATCH * n)) --ddp bucketed --bucket-mb 25 \
      --grad-reduce-dtype fp32,bf16 --optimizer-in-backward -f json -o "$OUT/tlm-oib-$n.json" | grep -v '^#'
  done
  echo "== 1 GPU: --optimizer-overlap, CUDA graphs off"
  "$TLM" bench "${common[@]}" --batch-size "$BATCH" --cuda-graph off --optimizer-overlap \
    -f json -o "$OUT/tlm-overlap-1.json" | grep -v '^#'
  for n in "${nprocs[@]}"; do
    echo "== $n GPUs: bucketed 25 MiB with --optimizer-overlap (each bucket's AdamW once its average lands)"
    mpi "$n" "$TLM" bench "${common[@]}" --batch-size $((BATCH * n)) --ddp bucketed --bucket-mb 25 \
      --grad-reduce-dtype fp32,bf16 --optimizer-overlap -f json -o "$OUT/tlm-overlap-$n.json" | grep -v '^#'
  done
fi
if stage zero; then
  for n in "${nprocs[@]}"; do
    echo "== $n GPUs: ZeRO-1 against DDP (bucketed 25 MiB, flat)"
    mpi "$n" "$TLM" bench "${common[@]}" --batch-size $((BATCH * n)) --ddp bucketed,flat --bucket-mb 25 --zero 0,1 \
      -f json -o "$OUT/tlm-zero-$n.json" | grep -v '^#'
  done
fi
if stage ctas; then
  # xl bf16's backward: 26.4 ms beside the reductions (2 H200, 2026-11-24), 18.3-18.5 alone (one H200, 2026-11-25)
  CTAS=${CTAS:-4,8,16}
  for c in ${CTAS//,/ }; do
    echo "== 2 GPUs: bucketed 25 MiB, NCCL_MAX_CTAS=$c"
    NCCL_MAX_CTAS=$c mpi 2 -x NCCL_MAX_CTAS "$TLM" bench "${common[@]}" --batch-size $((BATCH * 2)) --ddp bucketed \
      --bucket-mb 25 -f json -o "$OUT/tlm-ctas-$c.json" | grep -v '^#'
  done
fi
if stage scale; then
  for n in "${nprocs[@]}"; do
    echo "== $n GPUs: bucketed 25 MiB (scaling)"
    mpi "$n" "$TLM" bench "${common[@]}" --batch-size $((BATCH * n)) --ddp bucketed --bucket-mb 25 \
      -f json -o "$OUT/tlm-scale-$n.json" | grep -v '^#'
  done
fi
if stage big; then
  # one H200 (143,771 MiB), 2.7B bf16 batch 4 (2026-11-25, bench/results/h200-2026-11-25-zero-plan): context
  # 6656 ran, 6912 ran out of memory; the plan's longest context: 6893 on one GPU, 7803 with ZeRO-1 over 2
  # ranks, 8275 over 4
  BIG_MODEL=${BIG_MODEL:-2.7B} BIG_CTX_2=${BIG_CTX_2:-7168} BIG_CTX_4=${BIG_CTX_4:-7680}
  big=(--model "$BIG_MODEL" --precision bf16 --pass train --warmup 1 --steps 3 --max-context device
       --timeout "$TIMEOUT")
  ctxs=$BIG_CTX_2; [[ ",$NPROCS," == *",4,"* ]] && ctxs=$BIG_CTX_2,$BIG_CTX_4
  echo "== 1 GPU: $BIG_MODEL bf16 at context $ctxs, batch $BATCH (one GPU's memory is expected to run out)"
  "$TLM" bench "${big[@]}" --context-length "$ctxs" --batch-size "$BATCH" -f json -o "$OUT/tlm-big-1.json" \
    | grep -v '^#'
  for n in "${nprocs[@]}"; do
    c=$BIG_CTX_2; [ "$n" -ge 4 ] && c=$BIG_CTX_4
    echo "== $n GPUs: $BIG_MODEL bf16 at context $c, $BATCH rows a rank, bucketed 25 MiB, ZeRO 0 and 1"
    mpi "$n" "$TLM" bench "${big[@]}" --context-length "$c" --batch-size $((BATCH * n)) --ddp bucketed --zero 0,1 \
      -f json -o "$OUT/tlm-big-$n.json" | grep -v '^#'
  done
fi
if stage torch; then
  echo "== PyTorch DDP (bench/peers/pytorch_ddp.py)"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_ddp.py --model "$MODEL" --context-length "$CTX" \
    --batch-size-per-rank "$BATCH" --precision "$PRECISIONS" --nproc "1,$NPROCS" --bucket-mb "$BUCKETS" \
    --grad-reduce-dtype fp32,bf16 --zero 0,1 --warmup "$WARMUP" --steps "$STEPS" --out "$OUT/torch-ddp.json"
fi

if stage cpu; then
  # data parallelism on the host's cores (MPI; what CI tests), beside PyTorch DDP over gloo: the same global
  # batch (CPU_BATCH) at 1, 2 and 4 processes, the cores divided among them; fp32, bucketed 25 MiB
  CPU_MODEL=${CPU_MODEL:-small} CPU_CTX=${CPU_CTX:-128} CPU_BATCH=${CPU_BATCH:-8}
  # OpenBLAS 0.3.21 does not know this machine's CPU model and falls back to generic kernels (4x slower)
  [ -n "${OPENBLAS_CORETYPE:-}" ] || export OPENBLAS_CORETYPE=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
  cpu_common=(--device cpu --model "$CPU_MODEL" --context-length "$CPU_CTX" --warmup 1 --steps 3 --pass train)
  for n in 1 2 4; do
    echo "== CPU, $n process(es): tlm bench (MPI), then PyTorch DDP (gloo); global batch $CPU_BATCH"
    if [ "$n" = 1 ]; then "$TLM" bench "${cpu_common[@]}" -b "$CPU_BATCH" -f json -o "$OUT/tlm-cpu-1.json" | grep -v '^#'
    else mpi "$n" "$TLM" bench "${cpu_common[@]}" -b "$CPU_BATCH" --ddp bucketed,flat -f json -o "$OUT/tlm-cpu-$n.json" \
      | grep -v '^#'; fi
    python3 bench/peers/pytorch_ddp.py --device cpu --model "$CPU_MODEL" --context-length "$CPU_CTX" \
      --batch-size-per-rank $((CPU_BATCH / n)) --precision fp32 --nproc "$n" --bucket-mb 25 --warmup 1 --steps 3 \
      --out "$OUT/torch-cpu-$n.json" 2>&1 | grep -vE '^#|^$' | tail -2
  done
fi
if stage table; then
  echo "== side by side"
  python3 - "$OUT" "$BATCH" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
def rows(pattern):
    r = []
    for f in sorted(glob.glob(os.path.join(out, pattern))):
        try:
            r += json.load(open(f)).get("rows", [])
        except (OSError, ValueError):
            pass
    return [x for x in r if x.get("status") == "ok"]
batch = int(sys.argv[2])  # a rank's rows
one_all = rows("tlm-1gpu.json")
one = {r["precision"]: r for r in one_all if r["batch_size"] == batch}
one_g = {r["precision"]: r for r in rows("tlm-1gpu-graphs.json") if r["batch_size"] == batch}
torch_rows = rows("torch-ddp*.json")  # this script's one file; run-multi-gpu-device.sh's torch-ddp-PREC-N.json
t_one = {r["precision"]: r for r in torch_rows if r["ranks"] == 1}
def torch_match(prec, n, bucket, rdt, zero):
    for r in torch_rows:
        if (r["precision"], r["ranks"], r["grad_reduce_dtype"], r["zero"]) == (prec, n, rdt, zero) and \
           (bucket is None or abs(r["bucket_mb"] - bucket) < 1e-9):
            return r
def ratio(a, b):
    return f"{a / b:.3f}x" if a and b else "-"
gib = 2.0 ** 30
L = ["Step = forward + backward + exposed communication + optimizer, ms (mean of the timed steps, the slowest rank); "
     "x1 = this step / the 1-GPU step of the same precision (tlm: CUDA graphs off, as the data-parallel rows run; "
     "PyTorch: its own 1-process step). Targets: bucketed <= 1.10x on 2 GPUs, <= 1.15x on 4; ZeRO-1 <= 1.10x bucketed.",
     ""]
for prec, r in sorted(one.items()):
    g = one_g.get(prec)
    L.append(f"1 GPU {prec}: tlm {r['step_ms_mean']:.1f} ms (graphs on: {g['step_ms_mean']:.1f} ms)" if g else
             f"1 GPU {prec}: tlm {r['step_ms_mean']:.1f} ms")
    if prec in t_one:
        L.append(f"1 GPU {prec}: PyTorch {t_one[prec]['step_ms_mean']:.1f} ms")
L += ["", "| GPUs | prec | mode | bucket MiB | reduce | tlm step ms | comm ms | comm % | tlm x1 | PyTorch DDP step ms | PyTorch x1 |",
      "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
for r in sorted(rows("tlm-modes-*.json"), key=lambda r: (r["ranks"], r["precision"], r["grad_reduce_dtype"], r["ddp"],
                                                        r.get("bucket_mb") or 0)):
    b = r.get("bucket_mb")
    t = torch_match(r["precision"], r["ranks"], b if r["ddp"] == "bucketed" else None, r["grad_reduce_dtype"], 0) \
        if r["ddp"] == "bucketed" else None
    base = one.get(r["precision"], {}).get("step_ms_mean")
    tb = t_one.get(r["precision"], {}).get("step_ms_mean")
    L.append(f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {b if b else '-'} | {r['grad_reduce_dtype']} | "
             f"{r['step_ms_mean']:.1f} | {r['comm_ms_mean']:.2f} | {100 * r['comm_share']:.1f} | "
             f"{ratio(r['step_ms_mean'], base)} | {t['step_ms_mean']:.1f} | {ratio(t['step_ms_mean'], tb)} |" if t else
             f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {b if b else '-'} | {r['grad_reduce_dtype']} | "
             f"{r['step_ms_mean']:.1f} | {r['comm_ms_mean']:.2f} | {100 * r['comm_share']:.1f} | "
             f"{ratio(r['step_ms_mean'], base)} | - | - |")
L += ["", "ZeRO-1 (memory: the largest rank's, GiB = 2^30 bytes; optimizer = AdamW's moments held by a rank)", "",
      "| GPUs | prec | mode | zero | step ms | vs zero 0 | after set-up | before opt | after opt | peak | optimizer | "
      "PyTorch optimizer | PyTorch peak |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
zr = rows("tlm-zero-*.json")
for r in sorted(zr, key=lambda r: (r["ranks"], r["precision"], r["ddp"], r["zero"])):
    z0 = next((q for q in zr if (q["ranks"], q["precision"], q["ddp"], q["zero"]) ==
               (r["ranks"], r["precision"], r["ddp"], 0)), None)
    t = torch_match(r["precision"], r["ranks"], 25.0, "fp32", r["zero"])
    L.append(f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {r['zero']} | {r['step_ms_mean']:.1f} | "
             f"{ratio(r['step_ms_mean'], z0['step_ms_mean'] if z0 else None)} | {r['mem_after_init_bytes'] / gib:.2f} | "
             f"{r['mem_before_opt_bytes'] / gib:.2f} | {r['mem_after_opt_bytes'] / gib:.2f} | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | {t['peak_bytes_optimizer'] / gib:.2f} | {t['peak_bytes'] / gib:.2f} |"
             if t else
             f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {r['zero']} | {r['step_ms_mean']:.1f} | "
             f"{ratio(r['step_ms_mean'], z0['step_ms_mean'] if z0 else None)} | {r['mem_after_init_bytes'] / gib:.2f} | "
             f"{r['mem_before_opt_bytes'] / gib:.2f} | {r['mem_after_opt_bytes'] / gib:.2f} | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | - | - |")
for prec, r in sorted(one.items()):
    L.append(f"| 1 | {prec} | - | - | {r['step_ms_mean']:.1f} | - | - | - | - | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | - | - |")
L += ["", "Scaling (bucketed 25 MiB; the same per-rank batch: tokens/s should grow N-fold). speed-up: over one GPU "
      "with a rank's rows; whole batch: over one GPU running the same global batch", "",
      "| GPUs | prec | tlm step ms | tlm tokens/s | tlm speed-up | whole batch | PyTorch step ms | PyTorch tokens/s | "
      "PyTorch speed-up |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
# the scale stage's rows, else the modes stage's bucketed 25 MiB rows with fp32 reductions (the same runs)
sc = rows("tlm-scale-*.json") or [r for r in rows("tlm-modes-*.json") if r["ddp"] == "bucketed" and
                                   r.get("bucket_mb") == 25 and r["grad_reduce_dtype"] == "fp32"]
sc += [dict(r, ranks=1) for r in one.values()]
for r in sorted(sc, key=lambda r: (r["precision"], r["ranks"])):
    base = one.get(r["precision"])
    t = torch_match(r["precision"], r["ranks"], 25.0 if r["ranks"] > 1 else 0.0, "fp32", 0)
    tb = t_one.get(r["precision"])
    su = r["tokens_per_s"] / base["tokens_per_s"] if base else 0
    tsu = t["tokens_per_s"] / tb["tokens_per_s"] if t and tb else 0
    whole = next((q for q in one_all if q["precision"] == r["precision"] and q["batch_size"] == r["batch_size"]), None)
    wsu = f"{r['tokens_per_s'] / whole['tokens_per_s']:.2f}x" if whole else "-"
    L.append(f"| {r['ranks']} | {r['precision']} | {r['step_ms_mean']:.1f} | {r['tokens_per_s']:.0f} | {su:.2f}x | "
             f"{wsu} | "
             + (f"{t['step_ms_mean']:.1f} | {t['tokens_per_s']:.0f} | {tsu:.2f}x |" if t else "- | - | - |"))
ct = []
for f in sorted(glob.glob(os.path.join(out, "tlm-ctas-*.json"))):
    ct += [dict(r, ctas=f.rsplit("-", 1)[1][:-5]) for r in rows(os.path.basename(f))]
if ct:
    L += ["", "NCCL's thread blocks capped (NCCL_MAX_CTAS), 2 GPUs, bucketed 25 MiB, fp32 reduction", "",
          "| NCCL_MAX_CTAS | prec | step ms | fwd | bwd | comm | opt | x1 |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(ct, key=lambda r: (r["precision"], int(r["ctas"]))):
        base = one.get(r["precision"], {}).get("step_ms_mean")
        L.append(f"| {r['ctas']} | {r['precision']} | {r['step_ms_mean']:.1f} | {r['fwd_ms_mean']:.1f} | "
                 f"{r['bwd_ms_mean']:.1f} | {(r.get('comm_ms_mean') or 0):.1f} | {r['opt_ms_mean']:.1f} | "
                 f"{ratio(r['step_ms_mean'], base)} |")
ob = rows("tlm-oib-*.json") + rows("tlm-overlap-*.json")
if ob:
    L += ["", "The AdamW update in the backward (optimizer-in-backward: each group reduced, then updated, on the "
          "compute stream) or beside it (overlapped: each bucket's update on a background stream once averaged); "
          "x1 = this step / the 1-GPU plain step", "",
          "| GPUs | prec | update | reduce | step ms | fwd | bwd | comm | opt | x1 |",
          "|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(ob, key=lambda r: (r.get("ranks") or 1, r["precision"], bool(r.get("optimizer_overlap")),
                                      r.get("grad_reduce_dtype") or "")):
        base = one.get(r["precision"], {}).get("step_ms_mean")
        how = "overlapped" if r.get("optimizer_overlap") else "in backward"
        L.append(f"| {r.get('ranks') or 1} | {r['precision']} | {how} | {r.get('grad_reduce_dtype') or '-'} | "
                 f"{r['step_ms_mean']:.1f} | {r['fwd_ms_mean']:.1f} | {r['bwd_ms_mean']:.1f} | "
                 f"{(r.get('comm_ms_mean') or 0):.1f} | {r['opt_ms_mean']:.1f} | {ratio(r['step_ms_mean'], base)} |")
big = []
for f in sorted(glob.glob(os.path.join(out, "tlm-big-*.json"))):
    try:
        big += json.load(open(f)).get("rows", [])
    except (OSError, ValueError):
        pass
if big:
    L += ["", "2.7B, bf16, a rank's batch the same at every GPU count: where one GPU runs out of memory and ZeRO-1 "
          "fits (plan = the memory plan's longest context for the row, --max-context device)", "",
          "| GPUs | context | rows a rank | zero | result | step ms | peak GiB | optimizer GiB | plan's max context |",
          "|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in sorted(big, key=lambda r: (r.get("ranks") or 1, r["context_length"], r.get("zero") or 0)):
        n = r.get("ranks") or 1
        res = "ran" if r["status"] == "ok" else (r.get("error") or r["status"]).replace("|", "/")
        step = f"{r['step_ms_mean']:.0f}" if r.get("step_ms_mean") else "-"
        L.append(f"| {n} | {r['context_length']} | {r['batch_size'] // n} | {r.get('zero') or 0} | {res} | {step} | "
                 f"{r['peak_bytes'] / gib:.2f} | {r['peak_bytes_optimizer'] / gib:.2f} | {r.get('max_context')} |")
# run-multi-gpu-device.sh's experiments, tlm-GROUP-*.json: carve (NCCL_MAX_CTAS, TLM_SM_CARVEOUT; the environment
# is in the file's name; the 1-GPU rows are tlm-1gpu.json's, the same call) and the later calls' groups (extra, zl),
# each with its own 1-GPU rows (tlm-GROUP-1.json, tlm-GROUP-overlap-1.json)
exp = []
for group in ("carve", "extra", "zl"):
    for f in sorted(glob.glob(os.path.join(out, f"tlm-{group}-*.json"))):
        try:
            exp += [(group, os.path.basename(f)[4:-5], r) for r in json.load(open(f)).get("rows", [])
                    if r.get("status") == "ok"]
        except (OSError, ValueError):
            pass
if exp:
    ones = {"carve": {(r["precision"], bool(r.get("optimizer_overlap"))): r["step_ms_mean"]
                      for r in one_all + rows("tlm-overlap-1.json") if r["batch_size"] == batch}}
    for group, name, r in exp:
        if group != "carve" and (r.get("ranks") or 1) == 1:
            ones.setdefault(group, {})[(r["precision"], bool(r.get("optimizer_overlap")))] = r["step_ms_mean"]
    L += ["", "Experiments (file tlm-NAME.json; carve-2-CTAS-CARVEOUT: NCCL_MAX_CTAS, TLM_SM_CARVEOUT; extra-2-VAR: "
          "that variable set): x1 = this step / the 1-GPU step of the same call, plain AdamW; x1 same update = over "
          "the 1-GPU step with the same (overlapped or plain) update", "",
          "| file | GPUs | prec | bucket MiB | reduce | zero | opt overlap | fwd | bwd | comm | opt | step ms | x1 | "
          "x1 same update |", "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for group, name, r in exp:
        base = ones.get(group, {})
        ov = bool(r.get("optimizer_overlap"))
        L.append(f"| {name} | {r.get('ranks') or 1} | {r['precision']} | {r.get('bucket_mb') or '-'} | "
                 f"{r.get('grad_reduce_dtype') or '-'} | {r.get('zero') or 0} | {'yes' if ov else 'no'} | "
                 f"{r['fwd_ms_mean']:.2f} | {r['bwd_ms_mean']:.2f} | {(r.get('comm_ms_mean') or 0):.2f} | "
                 f"{r['opt_ms_mean']:.2f} | {r['step_ms_mean']:.1f} | "
                 f"{ratio(r['step_ms_mean'], base.get((r['precision'], False)))} | "
                 f"{ratio(r['step_ms_mean'], base.get((r['precision'], ov)))} |")
text = "\n".join(L) + "\n"
path = os.path.join(out, "ddp-side-by-side.md")
with open(path + ".tmp", "w") as f:
    f.write(text)
os.replace(path + ".tmp", path)
print(text, end="")
EOF
fi
exit "$tests_rc"
