#!/usr/bin/env bash
# run-sanitizer.sh — compute-sanitizer over the GPU tests of a build (issue 10): memcheck (out-of-bounds
# and misaligned accesses, leaks of device memory) over every GPU test, racecheck (shared-memory hazards)
# over the kernels that use shared memory the most (the FlashAttention and op tests), each under a time
# limit; writes one log per run and a summary table to $OUT/sanitizer.md.
# Usage (on the GPU machine, after a build): OUT=dir BUILD=build-gpu bench/run-sanitizer.sh
# env: RACE_SHAPE (tiny: test_gpu_ops' shape under racecheck) BUILD (build-gpu) SRC (.: the source tree it was built from) LIMIT (seconds per run: 150) TOOLS (memcheck,racecheck)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
BUILD=$(realpath "${BUILD:-build-gpu}") SRC=$(realpath "${SRC:-.}") LIMIT=${LIMIT:-150} TOOLS=${TOOLS:-memcheck,racecheck}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
mkdir -p "$OUT/sanitizer"
{
  echo "# compute-sanitizer: $("$CS" --version | tail -1); $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo
  echo "| tool | test | result | errors | seconds |"
  echo "|---|---|---|---:|---:|"
} > "$OUT/sanitizer.md"
run() { # tool test [args]
  local tool=$1 test=$2; shift 2
  local log="$OUT/sanitizer/$tool-$test.log" t0 rc errs result
  t0=$(date +%s)
  (cd "$SRC" && TLM_FIXTURES="$SRC/tests/fixtures" timeout "$LIMIT" "$CS" --tool "$tool" \
     $([ "$tool" = memcheck ] && echo --leak-check full) --error-exitcode 99 "$BUILD/tests/$test" "$@") > "$log" 2>&1
  rc=$?
  errs=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  case $rc in
    0) result=clean ;; 99) result="ERRORS" ;; 124) result="time limit ($LIMIT s) reached" ;;
    77) result="skipped (no GPU)" ;; *) result="test failed (exit $rc)" ;;
  esac
  echo "| $tool | $test | $result | ${errs:--} | $(( $(date +%s) - t0 )) |" | tee -a "$OUT/sanitizer.md"
}
for t in "$BUILD"/tests/test_gpu_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  [[ ",$TOOLS," == *",memcheck,"* ]] && run memcheck "$n"
done
if [[ ",$TOOLS," == *",racecheck,"* ]]; then
  # the tensor-core FlashAttention kernels (shared-memory tiles, cp.async), without the fp32 cases and
  # the large one; the ops on the smallest shape
  TLM_FA_DTYPES=bf16,fp16 run racecheck test_gpu_flash_attention
  run racecheck test_gpu_ops -s "${RACE_SHAPE:-tiny}"
fi
echo; cat "$OUT/sanitizer.md"
