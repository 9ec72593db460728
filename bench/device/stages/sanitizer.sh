# stage sanitizer — compute-sanitizer over the GPU tests: memcheck (out-of-bounds and misaligned
#   accesses, leaks of device memory) over every GPU test binary, racecheck (shared-memory hazards) over the
#   kernels that use shared memory the most (the FlashAttention test in bf16/fp16, the ops at the tiny shape),
#   each run under a time limit; one log a run and the table sanitizer.md (kept).
# env: SAN_TOOLS (memcheck,racecheck) SAN_LIMIT (150: seconds a run) SAN_TESTS (a regex of test names; every
#      test_gpu_*) RACE_SHAPE (tiny)
san_run() { # tool test [args]
  local tool=$1 test=$2 dir=${BIN:+$BIN/tests} log t0 rc errs result cs
  dir=${dir:-$BUILD/tests}
  shift 2
  log=$R/sanitizer/$tool-$test.log t0=$SECONDS
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  x env TLM_FIXTURES="$PWD/tests/fixtures" ${SAN_ENV:-} timeout "${SAN_LIMIT:-150}" "$cs" --tool "$tool" \
    $([ "$tool" = memcheck ] && echo --leak-check full) --error-exitcode 99 "$dir/$test" "$@" > "$log" 2>&1
  rc=$?
  errs=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" 2>/dev/null | tail -1 | show -oE '[0-9]+$')
  case $rc in
    0) result=clean ;; 99) result=ERRORS ;; 124) result="time limit (${SAN_LIMIT:-150} s) reached" ;;
    77) result="skipped (no GPU)" ;; *) result="test failed (exit $rc)" ;;
  esac
  echo "| $tool | $test | $result | ${errs:--} | $((SECONDS - t0)) |" | tee -a "$R/sanitizer.md"
  [ $rc = 0 ] || [ $rc = 77 ] || [ $rc = 124 ]
}
stage_sanitizer() {
  local t n tools=${SAN_TOOLS:-memcheck,racecheck} rc=0 dir=${BIN:+$BIN/tests}
  dir=${dir:-$BUILD/tests}
  mkdir -p "$R/sanitizer"
  keep sanitizer.md
  {
    echo "# compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | tail -1); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
    echo
    echo "| tool | test | result | errors | seconds |"
    echo "|---|---|---|---:|---:|"
  } > "$R/sanitizer.md"
  if [[ ",$tools," == *",memcheck,"* ]]; then
    for t in "$dir"/test_gpu_*; do
      [ -x "$t" ] || continue
      n=$(basename "$t")
      [ -n "${SAN_TESTS:-}" ] && ! [[ $n =~ $SAN_TESTS ]] && continue
      fits 30 "memcheck $n" || break
      san_run memcheck "$n" || rc=1
    done
    dry && san_run memcheck 'test_gpu_*'
  fi
  if [[ ",$tools," == *",racecheck,"* ]]; then
    SAN_ENV=TLM_FA_DTYPES=bf16,fp16 san_run racecheck test_gpu_flash_attention || rc=1
    san_run racecheck test_gpu_ops -s "${RACE_SHAPE:-tiny}" || rc=1
  fi
  return $rc
}
