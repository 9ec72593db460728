# stage profile — `tlm profile`: the CUPTI smoke test, the profiler's GPU tests, the overhead of
#   profiling (small and medium, fp32 and bf16, graphs on and off), every size at context CTX, and a Perfetto
#   trace of small's bf16 step
# stage profile-peer — the PyTorch peer (eager, naive attention, --nvtx) under `tlm profile --exec` beside tlm
#   profiled with the same attention: profile-side-by-side.md
# stage profile-sweep — `tlm profile --suite seeds`, timed (target: 10 minutes on an H100)
# Files: tests.txt, profile-overhead.json (kept), profile-ctxCTX.json and .txt (kept), trace-small-bf16.json.gz,
#   peer/ (every JSON and log), profile-side-by-side.md (kept), profile-seeds.json and .txt.
# env: MODELS (small,medium,large,xl,2.7B) CTX (256) PRECISIONS (fp32,bf16) WARMUP (3) STEPS (5)
needs_profile_sweep="tree gpu"
profile_common() {
  PROFILE_COMMON=(--warmup "${WARMUP:-3}" --steps "${STEPS:-5}" --batch-size 4 --pass train)
  P_MODELS=${MODELS:-small,medium,large,xl,2.7B} P_CTX=${CTX:-256} P_PREC=${PRECISIONS:-fp32,bf16}
}
stage_profile() {
  local rc=0 g
  profile_common
  [ -f "$BUILD/libtlm_inject.so" ] || [ -f "${BIN:-.}/libtlm_inject.so" ] || dry ||
    warn "no libtlm_inject.so: CUPTI was not found at the build (build.log)"
  say "CUPTI smoke test"
  if [ -z "${BIN:-}" ]; then
    x "$BUILD/tests/test_gpu_profile" smoke || { warn "CUPTI smoke test failed: stopping the stage"; return 1; }
    say "GPU tests (profiler)"
    x ctest --test-dir "$BUILD" -L gpu -R profile --output-on-failure -V > "$R/tests.txt" 2>&1 || rc=1
    grep -E 'FAIL|[0-9]+ passed, [0-9]+ failed|us/step|%  (ok|FAIL)|within 3%|tests passed' "$R/tests.txt" | tail -40
  fi
  say "overhead: profiled against unprofiled steps"
  for g in on off; do
    x "$TLM" profile --device cuda --model small,medium --context-length "$P_CTX" --precision fp32,bf16 \
      "${PROFILE_COMMON[@]}" --cuda-graph $g --overhead --top 1 --format json --out "$R/overhead-$g.json" > /dev/null || rc=1
  done
  x python3 bench/profile_overhead.py "$R" && rm -f "$R/overhead-on.json" "$R/overhead-off.json"
  say "tlm profile: $P_MODELS at context $P_CTX, $P_PREC"
  x "$TLM" profile --device cuda --model "$P_MODELS" --context-length "$P_CTX" --precision "$P_PREC" \
    "${PROFILE_COMMON[@]}" --format json --out "$R/profile-ctx$P_CTX.json" > "$R/profile-ctx$P_CTX.txt" || rc=1
  grep -A200 '^findings:' "$R/profile-ctx$P_CTX.txt" 2>/dev/null | head -40
  say "a Perfetto trace of small's training step (bf16)"
  x "$TLM" profile --device cuda --model small --context-length "$P_CTX" --precision bf16 --warmup 2 --steps 1 \
    --trace "$R/trace-small-bf16.json" --top 5 > /dev/null || rc=1
  [ -f "$R/trace-small-bf16.json" ] && gzip -f "$R/trace-small-bf16.json"
  keep profile-overhead.json "profile-ctx$P_CTX.json" "profile-ctx$P_CTX.txt"
  return $rc
}
stage_profile_peer() {
  local m p models precs
  profile_common
  mkdir -p "$R/peer"
  IFS=, read -r -a models <<<"$P_MODELS"
  IFS=, read -r -a precs <<<"$P_PREC"
  for m in "${models[@]}"; do
    for p in "${precs[@]}"; do
      x env PYTHONUNBUFFERED=1 "$TLM" profile --model "$m" --format json --out "$R/peer/peer-$m-$p.json" --exec -- \
        python3 bench/peers/pytorch_lm.py --device cuda --model "$m" --context-length "$P_CTX" --precision "$p" \
        "${PROFILE_COMMON[@]}" --nvtx > /dev/null 2> "$R/peer/peer-$m-$p.log" ||
        { warn "peer $m $p failed:"; tail -5 "$R/peer/peer-$m-$p.log"; }
    done
  done
  # tlm with the peer's attention (naive), like for like; tlm's default (flash) is the profile stage's
  x "$TLM" profile --device cuda --model "$P_MODELS" --context-length "$P_CTX" --precision "$P_PREC" \
    "${PROFILE_COMMON[@]}" --attention naive --format json --out "$R/peer/tlm-naive-ctx$P_CTX.json" > /dev/null
  x python3 bench/profile_side_by_side.py "$R/profile-side-by-side.md" "$R/peer/tlm-naive-ctx$P_CTX.json" \
    --peers "$R"/peer/peer-*.json
  keep profile-side-by-side.md
}
stage_profile_sweep() {
  local t0=$SECONDS rc=0
  x "$TLM" profile --device cuda --suite seeds --format json --out "$R/profile-seeds.json" > "$R/profile-seeds.txt" || rc=1
  grep -E 'OOM|configurations' "$R/profile-seeds.txt" | head -30
  say "the sweep took $((SECONDS - t0)) s (target <= 600 s on an H100)"
  keep profile-seeds.json
  return $rc
}
