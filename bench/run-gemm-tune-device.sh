#!/usr/bin/env bash
# run-gemm-tune-device.sh — one device call that measures cuBLASLt algorithm selection by timing
# (src/cuda/matmul.cu, TLM_GEMM_TUNE) against the heuristic's first pick, in one process run each, on
# the same GPU: builds tlm for Hopper (STAGES=build bench/run-device.sh), runs the GPU tests with the
# timing on, then `tlm bench` of each model with TLM_GEMM_TUNE=0 and TLM_GEMM_TUNE=2 (timed, each new
# plan's candidates printed to stderr) back to back, the order swapped every round, and writes the
# table of tuned/heuristic ratios (bench/gemm_tune_table.py) to $OUT/gemm-tune.md.
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir bench/run-gemm-tune-device.sh 2>&1 | tee $OUT/log.txt
# Files under $OUT: build.log, gpu-tests.log, heuristic.json and tuned.json (every round's rows, each with
#   "tlm_gemm_tune" and "round" added), tune-plans.txt (TLM_GEMM_TUNE=2's lines, per model and round),
#   gemm-tune.md
# env: MODELS (small,medium,large,xl,2.7B) PRECISIONS (bf16,fp32) PASSES (forward-backward,train)
#      CTX (256) BATCH (4) WARMUP (5) STEPS (10) ROUNDS (1) FIRST_ROUND (1: the first round's number, to
#      continue an earlier call's rounds) TESTS (1: run the GPU tests; 0: skip)
#      TIME_LIMIT_S (570): a model's pair starts only if the seconds so far plus its expected time
#      (PAIR_S: the measured H100 seconds of the pair with the defaults; a model not named there, 60)
#      stay under it; a skipped pair is said. The table is rewritten after every run, so a call cut
#      short still returns one.
# Time on one H100 with the defaults (2026-11-24): build 41 s, GPU tests 97 s, the pairs 10 (small),
#   23 (medium), 49 (large), 97-108 (xl), 145-171 s (2.7B: creating and initializing the model is most
#   of it): about 500 s, so give the call 600 s (timeout_s), or split it (TESTS=0, MODELS=...,
#   FIRST_ROUND=2 in the second call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
MODELS=${MODELS:-small,medium,large,xl,2.7B} PRECISIONS=${PRECISIONS:-bf16,fp32}
PASSES=${PASSES:-forward-backward,train} CTX=${CTX:-256} BATCH=${BATCH:-4} WARMUP=${WARMUP:-5} STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-1} FIRST_ROUND=${FIRST_ROUND:-1} TESTS=${TESTS:-1} TIME_LIMIT_S=${TIME_LIMIT_S:-570}
PAIR_S=${PAIR_S:-small:10,medium:23,large:49,xl:108,2.7B:171}
mkdir -p "$OUT"
echo "# models $MODELS; precisions $PRECISIONS; passes $PASSES; context $CTX; batch $BATCH; warmup $WARMUP; steps $STEPS"

STAGES=build OUT="$OUT" bash bench/run-device.sh || { echo "build failed"; exit 1; }
[ -d /tmp/tlm-deps/lib ] && export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "# built at ${SECONDS}s"

tests_rc=0
if [ "$TESTS" = 1 ]; then
  echo "== GPU tests (TLM_GEMM_TUNE=1)"
  TLM_GEMM_TUNE=1 ctest --test-dir build-gpu -L gpu --timeout 200 --output-on-failure > "$OUT/gpu-tests.log" 2>&1
  tests_rc=$?
  grep -E "Test +#|tests passed|Total Test time" "$OUT/gpu-tests.log"
  echo "# tests done at ${SECONDS}s"
fi

runs=/tmp/gemm-tune-runs
rm -rf "$runs" && mkdir -p "$runs"
: > "$OUT/tune-plans.txt"
IFS=, read -r -a models <<<"$MODELS"
bench() { # model, TLM_GEMM_TUNE value, round
  local f="$runs/tune$2-$1-r$3"
  echo "## model $1 round $3 TLM_GEMM_TUNE=$2" >> "$OUT/tune-plans.txt"
  TLM_GEMM_TUNE=$2 ./build-gpu/tlm bench --device cuda --model "$1" --context-length "$CTX" --batch-size "$BATCH" \
    --warmup "$WARMUP" --steps "$STEPS" --pass "$PASSES" --precision "$PRECISIONS" --format json --out "$f.json" \
    > "$f.txt" 2> "$f.err" || { cat "$f.txt" "$f.err"; echo "$1 TLM_GEMM_TUNE=$2 round $3 failed"; }
  grep "gemm tune" "$f.err" >> "$OUT/tune-plans.txt"
  grep -v "gemm tune" "$f.err"
  echo "# $1 TLM_GEMM_TUNE=$2 round $3 done at ${SECONDS}s"
  python3 bench/gemm_tune_table.py "$runs" "$OUT" || echo "table failed"
}
for r in $(seq "$FIRST_ROUND" $((FIRST_ROUND + ROUNDS - 1))); do
  echo "== tlm bench, round $r"
  for m in "${models[@]}"; do
    est=60
    for p in ${PAIR_S//,/ }; do [ "${p%%:*}" = "$m" ] && est=${p#*:}; done
    if [ $((SECONDS + est)) -gt "$TIME_LIMIT_S" ]; then
      echo "# round $r: $m skipped (${SECONDS}s + about ${est}s > TIME_LIMIT_S ${TIME_LIMIT_S}s)"; continue
    fi
    if [ $((r % 2)) = 1 ]; then bench "$m" 0 "$r"; bench "$m" 2 "$r"; else bench "$m" 2 "$r"; bench "$m" 0 "$r"; fi
  done
done

echo "== table"
cat "$OUT/gemm-tune.md"
exit "$tests_rc"
