#!/usr/bin/env bash
# run-train-device.sh — `tlm train` on one H100/H200, in ONE device call (about 6 minutes):
#   1. builds tlm for sm_90a (bench/run-device.sh's build stage: the carried .devdeps when cJSON is missing);
#   2. the train GPU tests: test_gpu_train (clipping, the loop, checkpoint resume on CUDA to the printed
#      digits) and test_gpu_ops' sum_squares case, then a resume check of small through the CLI;
#   3. per model (small, 2.7B; bf16, batch 4, context 256, flash attention, CUDA graphs): `tlm bench --pass
#      train` and `tlm train` of the same shape (the CS336 recipe with clipping at 1.0, and again without
#      clipping: the loop's own overhead), and the PyTorch training loop of the same recipe
#      (bench/peers/pytorch_train.py: eager + SDPA, and torch.compile + SDPA for COMPILE_MODELS);
#   4. with the carried corpus (build-train/data/fortunes-{train,val}.bin from tools/make_tokens.py): small
#      trained on Debian's fortunes (the README's loss curve);
#   5. prints the table last: step ms of each, tlm train's overhead over tlm bench (target <= 3%), tokens/s, MFU.
# Usage (from the repository root; carry: [".devdeps", "build-train/data"]):
#   OUT=/some/dir bench/run-train-device.sh
# Files under $OUT (8): build.log, gpu-tests.txt, tlm-bench.json, train-small.json, train-2.7B.json,
#   torch-train.json, fortunes-small.json, summary.md
# env: MODELS (small,2.7B) BATCH (4) CTX (256) PREC (bf16) TRAIN_STEPS (small: 200, others 30)
#      COMPILE_MODELS (small) DEMO_STEPS (600)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
MODELS=${MODELS:-small,2.7B} BATCH=${BATCH:-4} CTX=${CTX:-256} PREC=${PREC:-bf16}
COMPILE_MODELS=${COMPILE_MODELS-small} DEMO_STEPS=${DEMO_STEPS:-600}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== build"
STAGES=build OUT="$OUT" bash bench/run-device.sh || { echo "build failed"; exit 1; }
[ -x build-gpu/tlm ] || { echo "no build-gpu/tlm"; exit 1; }
export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TLM=./build-gpu/tlm

echo "== GPU tests (train)"
{
  ./build-gpu/tests/test_gpu_train; echo "test_gpu_train exit $?"
  ./build-gpu/tests/test_gpu_ops -o sum_squares; echo "test_gpu_ops -o sum_squares exit $?"
} > "$OUT/gpu-tests.txt" 2>&1
grep -E "FAIL|passed|exit" "$OUT/gpu-tests.txt"

# a token file of the presets' vocabulary (10000): throughput does not depend on the text
python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 10000, 4_000_000, dtype=np.uint16).tofile('$work/tok.bin')"

echo "== resume on CUDA (small, 20 steps, a checkpoint every 10; resumed from 10: the same to the printed digits)"
small=(train --device cuda --model small --train-data "$work/tok.bin" --val-data "$work/tok.bin" --steps 20 -b "$BATCH"
       -c "$CTX" --precision "$PREC" --warmup-iters 2 --cosine-cycle-iters 20 --eval-every 10 --eval-batches 2 --log-every 1)
{
  $TLM "${small[@]}" --save-every 10 --checkpoint-dir "$work/ckA" --log "$work/A.csv" > /dev/null 2>&1
  $TLM "${small[@]}" --steps 10 --save-every 10 --checkpoint-dir "$work/ckB" > /dev/null 2>&1
  $TLM "${small[@]}" --resume "$work/ckB" --save-every 10 --log "$work/B.csv" > /dev/null 2>&1
  curve() { grep -v '^#' "$1" | cut -d, -f1-6 | awk -F, 'NR>1 {printf "%s,%s,%.4f,%s,%s\n", $1, $2, $3, ($4 == "" ? "" : sprintf("%.4f", $4)), $5}'; }
  if [ -s "$work/A.csv" ] && cmp -s <(curve "$work/A.csv") <(curve "$work/B.csv"); then
    echo "ok   small on CUDA: resumed from step 10, losses, val losses, lr of steps 1-20 = the uninterrupted run's (4 decimals)"
  else
    echo "FAIL small on CUDA: the resumed run's log differs"; diff <(curve "$work/A.csv") <(curve "$work/B.csv") | head
  fi
} >> "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"

echo "== tlm bench --pass train ($MODELS, $PREC, batch $BATCH, context $CTX)"
$TLM bench --device cuda --model "$MODELS" --precision "$PREC" -b "$BATCH" -c "$CTX" --pass train --warmup 5 \
  --steps 20 --format json --out "$OUT/tlm-bench.json" | grep -v '^#'

IFS=, read -r -a models <<<"$MODELS"
echo "[" > "$work/torch.json"
sep=""
for m in "${models[@]}"; do
  steps=${TRAIN_STEPS:-$([ "$m" = small ] && echo 200 || echo 30)}
  peer=(--steps 30 --warmup 10); [ "$m" = small ] || peer=(--steps 15 --warmup 5)
  echo "== tlm train $m ($steps steps, clipping at 1.0; then without clipping)"
  common=(--device cuda --model "$m" --train-data "$work/tok.bin" -b "$BATCH" -c "$CTX" --precision "$PREC"
          --log-every 10)
  $TLM train "${common[@]}" --steps "$steps" --log "$OUT/train-$m.json" 2>/dev/null | grep '^# \(step_ms\|tokens_per_s\|mfu\)'
  $TLM train "${common[@]}" --steps "$steps" --max-grad-norm 0 --log "$work/noclip-$m.json" 2>/dev/null |
    grep '^# \(step_ms_mean\|mfu\)'
  echo "== PyTorch training loop $m (eager + SDPA)"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_train.py --model "$m" --precision "$PREC" --train-data "$work/tok.bin" \
    --batch-size "$BATCH" --context-length "$CTX" "${peer[@]}" --attention sdpa --out "$work/torch-$m-eager.json" \
    > /dev/null 2> "$work/torch-$m-eager.err" || tail -3 "$work/torch-$m-eager.err"
  [ -f "$work/torch-$m-eager.json" ] && { printf '%s' "$sep" >> "$work/torch.json"; cat "$work/torch-$m-eager.json" >> "$work/torch.json"; sep=","; }
  if [[ ",$COMPILE_MODELS," == *",$m,"* ]]; then
    echo "== PyTorch training loop $m (torch.compile + SDPA)"
    PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_train.py --model "$m" --precision "$PREC" --train-data "$work/tok.bin" \
      --batch-size "$BATCH" --context-length "$CTX" "${peer[@]}" --attention sdpa --compile \
      --out "$work/torch-$m-compile.json" > /dev/null 2> "$work/torch-$m-compile.err" || tail -3 "$work/torch-$m-compile.err"
    [ -f "$work/torch-$m-compile.json" ] && { printf '%s' "$sep" >> "$work/torch.json"; cat "$work/torch-$m-compile.json" >> "$work/torch.json"; sep=","; }
  fi
done
echo "]" >> "$work/torch.json"
cp "$work/torch.json" "$OUT/torch-train.json"

if [ -f build-train/data/fortunes-train.bin ]; then
  echo "== small on Debian's fortunes (byte-level, vocab 256; $DEMO_STEPS steps)"
  $TLM train --device cuda --model small --vocab-size 256 --train-data build-train/data/fortunes-train.bin \
    --val-data build-train/data/fortunes-val.bin --steps "$DEMO_STEPS" -b 16 -c 256 --precision bf16 --lr-max 1e-3 \
    --eval-every 25 --eval-batches 8 --log-every 5 --log "$OUT/fortunes-small.json" 2>/dev/null | grep '^# \(final\|step_ms\)'
fi

echo "== summary"
python3 - "$OUT" "$work" "$MODELS" > "$OUT/summary.md" <<'PY'
import json, os, sys
out, work, models = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
bench = {r["model"]: r for r in json.load(open(os.path.join(out, "tlm-bench.json")))["rows"] if r.get("status") == "ok"}
torch_rows = json.load(open(os.path.join(out, "torch-train.json")))
def summary(path):
    try:
        return json.load(open(path))["summary"]
    except (OSError, KeyError, ValueError):
        return {}
def f(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else "-"
print("| model | impl | step ms | vs tlm bench | tokens/s | MFU |")
print("|---|---|---:|---:|---:|---:|")
for m in models:
    b = bench.get(m, {})
    bms = b.get("step_ms_mean")
    print(f"| {m} | tlm bench --pass train | {f(bms, '%.2f')} | | {f(b.get('tokens_per_s'), '%.0f')} | |")
    for label, path in (("tlm train (clip 1.0)", os.path.join(out, f"train-{m}.json")),
                        ("tlm train (no clipping)", os.path.join(work, f"noclip-{m}.json"))):
        s = summary(path)
        ms = float(s["step_ms_mean"]) if "step_ms_mean" in s else None
        over = f"{100 * (ms / bms - 1):+.1f}%" if ms and bms else "-"
        mfu = f"{100 * float(s['mfu']):.1f}%" if "mfu" in s else "-"
        print(f"| {m} | {label} | {f(ms, '%.2f')} | {over} | {f(float(s['tokens_per_s']) if 'tokens_per_s' in s else None, '%.0f')} | {mfu} |")
    for r in torch_rows:
        if r["model"] == m:
            over = f"{100 * (r['step_ms_mean'] / bms - 1):+.1f}%" if bms else "-"
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
            print(f"| {m} | PyTorch {r['impl'].split('-')[1]} + SDPA ({r['optimizer']} AdamW) | {r['step_ms_mean']:.2f} | {over} | {r['tokens_per_s']:.0f} | {mfu} |")
print()
print("step ms: tlm bench = device time of forward + backward + AdamW per step (events); tlm train and PyTorch = "
      "wall clock per step (batch, schedule, clipping, loss read back, logging included), warm-up steps left out. "
      "Target: tlm train (no clipping) within 3% of tlm bench; clipping adds a read of the gradients (the norm) and, "
      "when it clips, a read and write (bf16/fp32).")
PY
cat "$OUT/summary.md"
