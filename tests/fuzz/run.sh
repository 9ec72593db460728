#!/usr/bin/env bash
# run.sh — builds the fuzz harnesses of tlm's file readers (tests/fuzz, clang + libFuzzer) and runs
# them; see tests/fuzz/README.md.
#   tests/fuzz/run.sh [--build DIR] [--seconds N] [--if-clang] [HARNESS...]
#       runs each harness N seconds (default 600) from its seed corpus, tests/fuzz/corpus/<harness>/,
#       under ASan + UBSan with libFuzzer's limits: an input taking over 10 s, a single allocation
#       over 1 GiB (-malloc_limit_mb=1024) or a resident size over 2 GiB fails it, as does a crash, a
#       leak or a violated property of the harness. New inputs go to DIR/corpus-<harness>/ (kept
#       between runs), a failing input to DIR/artifacts/. Prints executions and coverage per
#       harness; exits 1 when a harness failed. --if-clang: without clang, say so and exit 0 (CI).
#   tests/fuzz/run.sh --coverage [--build DIR] [--fuzzed FUZZDIR] [HARNESS...]
#       builds the harnesses with clang's source-based coverage, runs each once over its seed corpus
#       (and FUZZDIR/corpus-<harness>/, the corpus a fuzzing run grew, when given) and prints the
#       line coverage of every src/io file and of the checkpoint, plot and profile readers (llvm-profdata,
#       llvm-cov).
# Environment: JOBS (build parallelism, default nproc), FUZZ_MAX_LEN (largest input, default 65536).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

build=build-fuzz seconds=600 if_clang=0 coverage=0 fuzzed=""
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --if-clang) if_clang=1; shift ;;
    --coverage) coverage=1; shift ;;
    --fuzzed) fuzzed=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    fuzz_*) harnesses+=("$1"); shift ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_safetensors fuzz_npy fuzz_tokens fuzz_checkpoint fuzz_plot fuzz_profile)

if ! command -v clang >/dev/null 2>&1; then
  if [ $if_clang = 1 ]; then
    echo "tlm: clang not found: fuzz harnesses skipped (make deps as root installs it)"
    exit 0
  fi
  echo "tlm: the fuzz harnesses need clang and libFuzzer: apt-get install clang libclang-rt-dev" >&2
  exit 1
fi

if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' |
     clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then
  if [ $if_clang = 1 ]; then
    echo "tlm: clang has no libFuzzer runtime: fuzz harnesses skipped (apt-get install libclang-rt-dev)"
    exit 0
  fi
  echo "tlm: clang cannot link a libFuzzer harness: apt-get install libclang-rt-dev" >&2
  exit 1
fi

cov_flag=OFF
[ $coverage = 1 ] && cov_flag=ON
cmake -S tests/fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE= -DTLM_FUZZ_COVERAGE=$cov_flag \
  > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" > "$build/build.log" 2>&1 || { cat "$build/build.log"; exit 1; }

# ---- coverage of src/io over the corpus -----------------------------------------------------------
if [ $coverage = 1 ]; then
  major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  tool() { command -v "$1-$major" 2>/dev/null || command -v "$1" 2>/dev/null || { echo "tlm: $1 not found (apt-get install llvm)" >&2; exit 1; }; }
  profdata=$(tool llvm-profdata) llvmcov=$(tool llvm-cov)
  rm -rf "$build/prof" && mkdir -p "$build/prof"
  objects=()
  for h in "${harnesses[@]}"; do
    dirs=("tests/fuzz/corpus/${h#fuzz_}")
    [ -n "$fuzzed" ] && [ -d "$fuzzed/corpus-$h" ] && dirs+=("$fuzzed/corpus-$h")
    n=$(find "${dirs[@]}" -type f | wc -l)
    LLVM_PROFILE_FILE="$build/prof/$h.profraw" "$build/$h" -runs=0 "${dirs[@]}" > "$build/prof/$h.log" 2>&1 ||
      { tail -20 "$build/prof/$h.log"; exit 1; }
    echo "$h: $n inputs from ${dirs[*]}"
    objects+=(-object "$build/$h")
  done
  "$profdata" merge -sparse "$build"/prof/*.profraw -o "$build/prof/all.profdata"
  "$llvmcov" report "${objects[@]:1}" -instr-profile="$build/prof/all.profdata" "$root"/src/io/*.c \
    "$root"/src/train/checkpoint.c "$root"/src/plot/*.c "$root"/src/profile/{profile_io,profile,summary,trace}.c |
    sed "s|$root/||"
  exit 0
fi

# ---- fuzzing --------------------------------------------------------------------------------------
# The harnesses load LLVM's libomp, whose start-up maps /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>: an empty one,
# left by a libomp process killed while it started, kills with SIGBUS a new process given the same pid. Those of
# processes no longer running go first.
for f in /dev/shm/__KMP_REGISTERED_LIB_*_"$(id -u)"; do
  [ -f "$f" ] && [ ! -s "$f" ] || continue
  pid=${f#/dev/shm/__KMP_REGISTERED_LIB_} && pid=${pid%_*}
  kill -0 "$pid" 2>/dev/null || rm -f "$f"
done
mkdir -p "$build/artifacts"
# each input is written to a file before it is read (fuzz_common.h): on tmpfs that is 7x faster
tmp=/dev/shm
[ -d "$tmp" ] && [ -w "$tmp" ] || tmp=$build
status=0
summary=()
for h in "${harnesses[@]}"; do
  mkdir -p "$build/corpus-$h"
  log="$build/$h.log"
  dict=tests/fuzz/${h#fuzz_}.dict
  [ $h = fuzz_tokens ] && dict=tests/fuzz/npy.dict
  dict_flag=()
  [ -f "$dict" ] && dict_flag=(-dict="$dict")
  echo "tlm: fuzzing $h for $seconds s (log: $log)"
  rc=0
  TMPDIR="$tmp" UBSAN_OPTIONS=print_stacktrace=1 "$build/$h" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len="${FUZZ_MAX_LEN:-65536}" -print_final_stats=1 \
    "${dict_flag[@]}" -artifact_prefix="$build/artifacts/$h-" "$build/corpus-$h" "tests/fuzz/corpus/${h#fuzz_}" > "$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true) # none when an input of the corpus fails
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<< "$last")
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc)"
    status=1
    echo "---- $h failed; the end of $log:"
    tail -40 "$log"
    ls -1 "$build/artifacts/$h-"* 2>/dev/null | sed 's/^/failing input: /' || true
  fi
  summary+=("$(printf '%-18s %6s %12s %9s %7s %7s %12s  %s' "$h" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result")")
done
printf '%-18s %6s %12s %9s %7s %7s %12s  %s\n' harness seconds executions exec/s cov ft corpus result
printf '%s\n' "${summary[@]}"
echo "(cov: code edges reached, ft: libFuzzer features; corpus: inputs/bytes)"
exit $status
