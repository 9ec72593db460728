#!/usr/bin/env bash
# run-device.sh — the GPU run, in ONE device call: build tlm for Hopper, run the GPU tests, run
# `tlm bench` and the PyTorch peer on the same sizes, and write a side-by-side table to $OUT.
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir bench/run-device.sh 2>&1 | tee $OUT/log.txt
# Files under $OUT: build.log, tlm.json, torch-eager.json, torch-compile.json, side-by-side.md;
#   attention (stages attn, attn-peer): attn-tlm-SUITE.json, attn-torch-SUITE.json, attention-side-by-side.md
# env: MODELS (small,medium,large,xl,2.7B) CTX (256) BATCH (4) WARMUP (5) STEPS (10)
#      TLM_PRECISIONS (fp32,tf32,bf16,fp16) PEER_PRECISIONS (fp32,bf16)
#      GRID_CTX (128,256,512,1024: tlm's context sweep in fp32 and bf16; empty: none)
#      EAGER (1: PyTorch eager) COMPILE_MODELS (small,large,2.7B: torch.compile bf16 + SDPA; empty: none)
#      ATTN_SUITES (pytorch-attention,flash-benchmarking,leaderboard: `tlm attention --suite` and the
#        PyTorch peer on each, naive and flash both) ATTN_ITERS (20) ATTN_WARMUP (5): timed passes and
#        warm-up per row, empty for the suites' own 100 and 10 (CS336's; about 5x the device time)
#      ATTN_MAX_SEQ (empty: every seq; N skips rows with seq > N) ATTN_PEER_IMPLS
#        (naive,compile,sdpa-flash,sdpa-cudnn; add sdpa-math for PyTorch's reference kernel)
#      STAGES (build,test,tlm,grid,eager,compile,attn,attn-peer: a subset runs part of it, e.g. in several
#        calls: one call has 10 minutes; the attention stages with the defaults take several minutes each,
#        STAGES=attn then STAGES=attn-peer; each call's attention-side-by-side.md has that call's files only:
#        `bench/attention_side_by_side.py OUT.md attn-*.json` on the fetched files joins them)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
MODELS=${MODELS:-small,medium,large,xl,2.7B} CTX=${CTX:-256} BATCH=${BATCH:-4}
WARMUP=${WARMUP:-5} STEPS=${STEPS:-10}
TLM_PRECISIONS=${TLM_PRECISIONS:-fp32,tf32,bf16,fp16} PEER_PRECISIONS=${PEER_PRECISIONS:-fp32,bf16}
GRID_CTX=${GRID_CTX-128,256,512,1024} COMPILE_MODELS=${COMPILE_MODELS-small,large,2.7B}
ATTN_SUITES=${ATTN_SUITES-pytorch-attention,flash-benchmarking,leaderboard}
ATTN_ITERS=${ATTN_ITERS-20} ATTN_WARMUP=${ATTN_WARMUP-5} ATTN_MAX_SEQ=${ATTN_MAX_SEQ-}
ATTN_PEER_IMPLS=${ATTN_PEER_IMPLS:-naive,compile,sdpa-flash,sdpa-cudnn}
STAGES=${STAGES:-build,test,tlm,grid,eager,compile,attn,attn-peer}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# gpu: /'
  nvcc --version | tail -1 | sed 's/^/# nvcc: /'
  python3 -c 'import torch; print("# torch:", torch.__version__, "cuda", torch.version.cuda)'
}

if stage build || [ ! -x build-gpu/tlm ]; then
echo "== build"
if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON > "$OUT/build.log" 2>&1; then
  # the GPU machine lacks cJSON: use the libraries packed by tools/pack-device-deps.sh
  [ -f .devdeps/deps.tar.xz ] || { tail -20 "$OUT/build.log"; echo "no .devdeps/deps.tar.xz carried"; exit 1; }
  echo "plain configure failed: using the carried .devdeps"
  rm -rf build-gpu /tmp/tlm-deps && mkdir -p /tmp/tlm-deps && tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
  export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTLM_CUDA=ON -DCBLAS_INCLUDE_DIR=/tmp/tlm-deps/include \
    -DOPENBLAS_LIBRARY=/tmp/tlm-deps/lib/libopenblas.so -DCJSON_INCLUDE_DIR=/tmp/tlm-deps/include \
    -DCJSON_LIBRARY=/tmp/tlm-deps/lib/libcjson.so \
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/tlm-deps/lib -Wl,-rpath,/tmp/tlm-deps/lib" >> "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
fi
cmake --build build-gpu -j "$(nproc)" >> "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
tests_rc=0
if stage test; then
  echo "== GPU tests"
  ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1
  tests_rc=$?
fi

common=(--model "$MODELS" --context-length "$CTX" --batch-size "$BATCH" --warmup "$WARMUP" --steps "$STEPS" --pass train)
if stage tlm; then
  echo "== tlm bench"
  ./build-gpu/tlm bench --device cuda "${common[@]}" --precision "$TLM_PRECISIONS" --format json --out "$OUT/tlm.json"
fi
if stage grid && [ -n "$GRID_CTX" ]; then
  echo "== tlm bench, context grid (SPEC.md §2.2, §2.5)"
  ./build-gpu/tlm bench --device cuda --model "$MODELS" --context-length "$GRID_CTX" --batch-size "$BATCH" \
    --warmup "$WARMUP" --steps "$STEPS" --pass train --precision fp32,bf16 --format json --out "$OUT/tlm-grid.json"
fi
peers=()
if stage eager; then
  echo "== PyTorch eager"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_lm.py --device cuda "${common[@]}" --precision "$PEER_PRECISIONS" \
    --format json --out "$OUT/torch-eager.json" | grep -v '^ *[{}"\[]'
fi
if stage compile && [ -n "$COMPILE_MODELS" ]; then
  echo "== PyTorch torch.compile bf16 + SDPA"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_lm.py --device cuda --model "$COMPILE_MODELS" --context-length "$CTX" \
    --batch-size "$BATCH" --warmup "$WARMUP" --steps "$STEPS" --pass train --precision bf16 --compile \
    --attention sdpa --format json --out "$OUT/torch-compile.json" | grep -v '^ *[{}"\[]'
fi
for f in "$OUT/torch-eager.json" "$OUT/torch-compile.json"; do [ -f "$f" ] && peers+=("$f"); done
if [ -f "$OUT/tlm.json" ] && [ ${#peers[@]} -gt 0 ]; then
  echo "== side by side"
  python3 bench/side_by_side.py "$OUT/side-by-side.md" "$OUT/tlm.json" --peers "${peers[@]}"
fi

# ---- attention: `tlm attention` and its PyTorch peer on the CS336 suites (SPEC.md §2.7-2.8) -----------
attn_flags=()
[ -n "$ATTN_ITERS" ] && attn_flags+=(--iters "$ATTN_ITERS")
[ -n "$ATTN_WARMUP" ] && attn_flags+=(--warmup "$ATTN_WARMUP")
[ -n "$ATTN_MAX_SEQ" ] && attn_flags+=(--max-seq "$ATTN_MAX_SEQ")
IFS=, read -r -a attn_suites <<<"$ATTN_SUITES"
if stage attn; then
  for suite in "${attn_suites[@]}"; do
    echo "== tlm attention --suite $suite"
    ./build-gpu/tlm attention --device cuda --suite "$suite" --impl both ${attn_flags[@]+"${attn_flags[@]}"} --format json \
      --out "$OUT/attn-tlm-$suite.json"
  done
fi
if stage attn-peer; then
  for suite in "${attn_suites[@]}"; do
    echo "== PyTorch attention --suite $suite ($ATTN_PEER_IMPLS)"
    PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite "$suite" --impl "$ATTN_PEER_IMPLS" \
      ${attn_flags[@]+"${attn_flags[@]}"} --format json --out "$OUT/attn-torch-$suite.json"
  done
fi
attn_files=()
for suite in "${attn_suites[@]}"; do
  for f in "$OUT/attn-tlm-$suite.json" "$OUT/attn-torch-$suite.json"; do [ -f "$f" ] && attn_files+=("$f"); done
done
if { stage attn || stage attn-peer; } && [ ${#attn_files[@]} -gt 0 ]; then
  echo "== attention side by side"
  python3 bench/attention_side_by_side.py "$OUT/attention-side-by-side.md" "${attn_files[@]}" > /dev/null \
    && echo "written: $OUT/attention-side-by-side.md"
fi
exit "$tests_rc"
