# stage tests — the working tree's GPU tests (ctest -L gpu), into gpu-tests.log
# Runs `ctest --test-dir $BUILD -L gpu`; with the carried binaries (no build tree) each carried
# tests/test_gpu_* binary directly, and test_gpu_flash_attention again with TLM_FLASH_SM90=2, 3 and 0 (ctest's
# variants). Files: gpu-tests.log (kept).
# env: TESTS_R (a ctest -R regex: a subset, e.g. 'flash|profile') TESTS_ENV (VAR=value words for every test,
#      e.g. TLM_GEMM_TUNE=1) TESTS_TIMEOUT (300: seconds for all of them) TESTS_J (ctest -j: tests at once on
#      the GPU; empty: one at a time)
stage_tests() {
  local rc=0 t v
  local envs=(${TESTS_ENV:-}) limit=${TESTS_TIMEOUT:-300}
  keep gpu-tests.log
  if [ -z "${BIN:-}" ]; then
    x env ${envs[@]+"${envs[@]}"} timeout "$limit" ctest --test-dir "$BUILD" -L gpu ${TESTS_R:+-R "$TESTS_R"} ${TESTS_J:+-j "$TESTS_J"} \
      --output-on-failure > "$R/gpu-tests.log" 2>&1 || rc=1
  else
    : > "$R/gpu-tests.log"
    for t in "$BIN"/tests/test_gpu_*; do
      [ -x "$t" ] || dry || continue
      [ -n "${TESTS_R:-}" ] && ! [[ $(basename "$t") =~ $TESTS_R ]] && continue
      echo "-- $(basename "$t")" >> "$R/gpu-tests.log"
      x env TLM_FIXTURES="$PWD/tests/fixtures" ${envs[@]+"${envs[@]}"} timeout "$limit" "$t" >> "$R/gpu-tests.log" 2>&1
      v=$?; [ $v = 0 ] || [ $v = 77 ] || { rc=1; echo "-- FAILED: $(basename "$t") exit $v" >> "$R/gpu-tests.log"; }
    done
    for v in 2 3 0; do
      [ -x "$BIN/tests/test_gpu_flash_attention" ] || dry || break
      echo "-- test_gpu_flash_attention TLM_FLASH_SM90=$v" >> "$R/gpu-tests.log"
      x env TLM_FIXTURES="$PWD/tests/fixtures" TLM_FLASH_SM90=$v ${envs[@]+"${envs[@]}"} timeout "$limit" \
        "$BIN/tests/test_gpu_flash_attention" >> "$R/gpu-tests.log" 2>&1 || rc=1
    done
  fi
  grep -E 'tests passed|Failed|FAILED|\*\*\*|^FAIL' "$R/gpu-tests.log" | head -30
  return $rc
}
