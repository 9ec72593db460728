# stage gemm-tune — cuBLASLt's algorithm chosen by timing (TLM_GEMM_TUNE, src/cuda/matmul.cu) against its
#   heuristic's first pick: `tlm bench` of each model with TLM_GEMM_TUNE=0 and =2 (timed, each new plan's
#   candidates printed) back to back, the order swapped every round, a model's pair only while its expected
#   time fits the budget; the table of tuned/heuristic ratios (bench/gemm_tune_table.py) rewritten after every
#   pair. The GPU tests with the timing on: TESTS_ENV=TLM_GEMM_TUNE=1 bench/device/run.sh tests,gemm-tune.
# Files: runs/ (each pair's JSON and stderr), heuristic.json and tuned.json (every round's rows, with
#   "tlm_gemm_tune" and "round"), tune-plans.txt (TLM_GEMM_TUNE=2's lines), gemm-tune.md (kept).
# env: MODELS (small,medium,large,xl,2.7B) PRECISIONS (bf16,fp32) PASSES (forward-backward,train) CTX (256)
#      BATCH (4) WARMUP (5) STEPS (10) ROUNDS (1) FIRST_ROUND (1: to continue an earlier call's rounds)
#      PAIR_S (small:10,medium:23,large:49,xl:108,2.7B:171: a pair's seconds on one H100, 2026-11-24; others 60)
gemm_tune_run() { # model, TLM_GEMM_TUNE value, round
  local f=$R/runs/tune$2-$1-r$3
  echo "## model $1 round $3 TLM_GEMM_TUNE=$2" >> "$R/tune-plans.txt"
  x env TLM_GEMM_TUNE="$2" "$TLM" bench --device cuda --model "$1" --context-length "${CTX:-256}" --batch-size "${BATCH:-4}" \
    --warmup "${WARMUP:-5}" --steps "${STEPS:-10}" --pass "${PASSES:-forward-backward,train}" \
    --precision "${PRECISIONS:-bf16,fp32}" --format json --out "$f.json" > "$f.txt" 2> "$f.err" ||
    { cat "$f.txt" "$f.err"; warn "$1 TLM_GEMM_TUNE=$2 round $3 failed"; GT_RC=1; }
  grep "gemm tune" "$f.err" >> "$R/tune-plans.txt" 2>/dev/null
  grep -v "gemm tune" "$f.err" 2>/dev/null
  x python3 bench/gemm_tune_table.py "$R/runs" "$R" || warn "table failed"
}
stage_gemm_tune() {
  local r m p est first=${FIRST_ROUND:-1} models
  GT_RC=0
  mkdir -p "$R/runs"
  : > "$R/tune-plans.txt"
  keep gemm-tune.md
  IFS=, read -r -a models <<<"${MODELS:-small,medium,large,xl,2.7B}"
  for r in $(seq "$first" $((first + ${ROUNDS:-1} - 1))); do
    for m in "${models[@]}"; do
      est=60
      for p in $(echo "${PAIR_S:-small:10,medium:23,large:49,xl:108,2.7B:171}" | tr , ' '); do [ "${p%%:*}" = "$m" ] && est=${p#*:}; done
      fits "$est" "round $r: $m, TLM_GEMM_TUNE=0 and 2" || continue
      if [ $((r % 2)) = 1 ]; then gemm_tune_run "$m" 0 "$r"; gemm_tune_run "$m" 2 "$r"
      else gemm_tune_run "$m" 2 "$r"; gemm_tune_run "$m" 0 "$r"; fi
    done
  done
  cat "$R/gemm-tune.md" 2>/dev/null
  return $GT_RC
}
