#!/usr/bin/env bash
# run-before-after.sh — one device call that measures a change against the code before it on the same
# GPU: builds BASE (a source tree, by default .baseline/, made with `git archive <commit> | tar x -C
# .baseline` and carried) and the working tree, runs the working tree's GPU tests, then runs `tlm bench`
# of both, alternating before/after ROUNDS times so that drift of the machine hits both alike, and
# writes the table of after/before ratios (bench/before_after.py).
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir bench/run-before-after.sh 2>&1 | tee $OUT/log.txt
# env: BASE (.baseline) AFTER (. : the source tree measured against it) MODELS (small,2.7B) PRECISIONS (fp32,bf16) CTX (256) BATCH (4) WARMUP (5) STEPS (10)
#      ROUNDS (3) TESTS (1: run the GPU tests; 0: skip) EXTRA (more commands to run after, e.g. ncu)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
BASE=${BASE:-.baseline} AFTER=${AFTER:-.} MODELS=${MODELS:-small,2.7B} PRECISIONS=${PRECISIONS:-fp32,bf16}
CTX=${CTX:-256} BATCH=${BATCH:-4} WARMUP=${WARMUP:-5} STEPS=${STEPS:-10} ROUNDS=${ROUNDS:-3} TESTS=${TESTS:-1}
mkdir -p "$OUT"
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# gpu: /'
  nvcc --version | tail -1 | sed 's/^/# nvcc: /'
  echo "# before: $BASE ($(cat "$BASE/.commit" 2>/dev/null || echo 'commit not recorded')); after: $AFTER"
}

# the GPU machine lacks cJSON: the libraries packed by tools/pack-device-deps.sh (carried in .devdeps)
deps=()
if [ -f .devdeps/deps.tar.xz ]; then
  mkdir -p /tmp/tlm-deps && tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
  export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  deps=(-DCBLAS_INCLUDE_DIR=/tmp/tlm-deps/include -DOPENBLAS_LIBRARY=/tmp/tlm-deps/lib/libopenblas.so
        -DCJSON_INCLUDE_DIR=/tmp/tlm-deps/include -DCJSON_LIBRARY=/tmp/tlm-deps/lib/libcjson.so
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/tlm-deps/lib -Wl,-rpath,/tmp/tlm-deps/lib")
fi
build() { # source dir, build dir, log
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON ${deps[@]+"${deps[@]}"} > "$3" 2>&1 &&
    cmake --build "$2" -j "$(( $(nproc) / 2 ))" >> "$3" 2>&1
}
echo "== build (before and after, in parallel)"
build "$BASE" build-before "$OUT/build-before.log" & pb=$!
build "$AFTER" build-gpu "$OUT/build-after.log" & pa=$!
wait $pb || { grep -E "error" "$OUT/build-before.log" | head; echo "before: build failed"; exit 1; }
wait $pa || { grep -E "error" "$OUT/build-after.log" | head; echo "after: build failed"; exit 1; }

tests_rc=0
if [ "$TESTS" = 1 ]; then
  echo "== GPU tests (after)"
  ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$OUT/gpu-tests.log"
  tests_rc=${PIPESTATUS[0]}
fi

echo "== tlm bench, before and after alternating, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  for v in before after; do
    bin=build-gpu/tlm
    [ "$v" = before ] && bin=build-before/tlm
    "$bin" bench --device cuda --model "$MODELS" --context-length "$CTX" --batch-size "$BATCH" --warmup "$WARMUP" \
      --steps "$STEPS" --pass train --precision "$PRECISIONS" --format json --out "$OUT/$v-$r.json" \
      > "$OUT/$v-$r.txt" 2>&1 || { cat "$OUT/$v-$r.txt"; echo "$v round $r failed"; }
    grep -vE '^#' "$OUT/$v-$r.txt" | sed "s/^/$v $r: /"
  done
done
python3 bench/before_after.py "$OUT" | tee "$OUT/before-after.md"
[ -n "${EXTRA:-}" ] && bash -c "$EXTRA"
exit "$tests_rc"
