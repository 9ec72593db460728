#!/usr/bin/env bash
# run-flash90-device.sh — the Hopper FlashAttention run (issue 17), in one or two device calls:
# build for sm_90a, the GPU tests, tlm attention with the wgmma forward (flash_attention_sm90.cu)
# and with the mma.sync kernels (TLM_FLASH_SM90=0) beside PyTorch's SDPA backends, and the LM's
# bf16 steps with each.
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir STAGES=build,test,attn bench/run-flash90-device.sh 2>&1 | tee $OUT/log.txt
# Files under $OUT: tests.txt; attn-tlm-leaderboard.json (wgmma forward), attn-tlm-leaderboard-sm80.json
#   (TLM_FLASH_SM90=0), attn-tlm-leaderboard-d128*.json, attn-tlm-flash-benchmarking.json (bf16 rows),
#   attn-torch-*.json, attention-side-by-side.md; lm-bf16-base.json (.baseline, when carried),
#   lm-bf16-mma-sync.json (TLM_FLASH_SM90=0 TLM_FLASH_SPLIT=0), lm-bf16.json; tf32: attn-tlm-tf32-*.json,
#   lm-tf32.json.
# env: STAGES (build,test,attn,attn-peer,tf32,lm) ITERS (30) WARMUP (5) MODELS (small,medium,large,xl,2.7B)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
STAGES=${STAGES:-build,test,attn,attn-peer,tf32,lm} ITERS=${ITERS:-30} WARMUP=${WARMUP:-5}
MODELS=${MODELS:-small,medium,large,xl,2.7B}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
if stage build || [ ! -x build-gpu/tlm ]; then
  STAGES=build OUT="$OUT" bash bench/run-device.sh > "$OUT/build-stage.txt" 2>&1 || { tail -20 "$OUT/build-stage.txt"; exit 1; }
fi
rc=0
if stage test; then
  echo "== GPU tests"
  ctest --test-dir build-gpu -L gpu --output-on-failure > "$OUT/tests.txt" 2>&1 || rc=1
  grep -E "tests passed|Failed|\*\*\*" "$OUT/tests.txt"
fi
attn() { ./build-gpu/tlm attention --device cuda --impl flash -n "$ITERS" -w "$WARMUP" --format json "$@"; }
if stage attn; then
  echo "== tlm attention: leaderboard (d_head 64 and 128), wgmma forward and mma.sync"
  attn --suite leaderboard --out "$OUT/attn-tlm-leaderboard.json" | grep -E "^flash"
  TLM_FLASH_SM90=0 attn --suite leaderboard --out "$OUT/attn-tlm-leaderboard-sm80.json" | grep -E "^flash"
  attn --suite leaderboard -D 128 --out "$OUT/attn-tlm-leaderboard-d128.json" | grep -E "^flash"
  TLM_FLASH_SM90=0 attn --suite leaderboard -D 128 --out "$OUT/attn-tlm-leaderboard-d128-sm80.json" | grep -E "^flash"
  echo "== tlm attention: flash-benchmarking, bf16 rows, flash and naive"
  ./build-gpu/tlm attention --device cuda --suite flash-benchmarking --dtype bf16 --impl both -n 20 -w 5 \
    --format json --out "$OUT/attn-tlm-flash-benchmarking.json" > /dev/null
fi
if stage attn-peer; then
  echo "== PyTorch SDPA: leaderboard, flash-benchmarking bf16"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite leaderboard \
    --impl sdpa-flash,sdpa-cudnn --iters "$ITERS" --warmup "$WARMUP" --format json --out "$OUT/attn-torch-leaderboard.json"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite leaderboard --d-head 128 \
    --impl sdpa-flash,sdpa-cudnn --iters "$ITERS" --warmup "$WARMUP" --format json \
    --out "$OUT/attn-torch-leaderboard-d128.json"
  PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite flash-benchmarking --dtype bf16 \
    --impl sdpa-flash,sdpa-cudnn --iters 20 --warmup 5 --format json --out "$OUT/attn-torch-flash-benchmarking.json"
fi
if stage attn || stage attn-peer; then
  python3 bench/attention_side_by_side.py "$OUT/attention-side-by-side.md" "$OUT"/attn-*.json > /dev/null \
    && echo "written: $OUT/attention-side-by-side.md"
fi
if stage tf32; then
  # the tf32 mode's attention: TF32 tensor-core flash against the exact-fp32 flash and naive with TF32
  # GEMMs; the LM's tf32 and fp32 steps (no PyTorch peer: SDPA has no TF32 flash kernel)
  echo "== tlm attention: tf32 and fp32, leaderboard shape (d_head 64, 128) and flash-benchmarking"
  ./build-gpu/tlm attention --device cuda --impl both --precision tf32,fp32 --heads 16 --context-length 16384 \
    --d-head 64,128 -n 20 -w 3 --format json --out "$OUT/attn-tlm-tf32-leaderboard.json" | grep -E "^(flash|naive)"
  ./build-gpu/tlm attention --device cuda --suite flash-benchmarking --precision tf32,fp32 --impl both -n 20 -w 3 \
    --format json --out "$OUT/attn-tlm-tf32-flash-benchmarking.json" > /dev/null
  echo "== tlm bench: tf32 and fp32 steps, flash attention"
  ./build-gpu/tlm bench --device cuda --model "$MODELS" --context-length 256 --batch-size 4 --precision tf32,fp32 \
    --attention flash --pass forward-backward --warmup 3 --steps 5 --format json --out "$OUT/lm-tf32.json" \
    | grep -E "^(small|medium|large|xl|2.7B) "
fi
if stage lm; then
  # the step before this work (.baseline: `git archive e418d5b`, carried), the mma.sync kernels
  # only (TLM_FLASH_SM90=0 TLM_FLASH_SPLIT=0), and everything
  lm() { "$1" bench --device cuda --model "$MODELS" --context-length 256 --batch-size 4 --precision bf16 \
           --pass forward-backward,train --warmup 5 --steps 10 --format json --out "$OUT/$2" | grep -E "^(small|medium|large|xl|2.7B) "; }
  if [ -d .baseline ]; then
    echo "== build .baseline"
    (cd .baseline && ln -sfn ../.devdeps .devdeps && STAGES=build OUT=/tmp/tlm-baseline-build bash bench/run-device.sh > /dev/null 2>&1) \
      || echo "baseline build failed"
    [ -x .baseline/build-gpu/tlm ] && { echo "== baseline"; lm .baseline/build-gpu/tlm lm-bf16-base.json; }
  fi
  echo "== mma.sync kernels only"; TLM_FLASH_SM90=0 TLM_FLASH_SPLIT=0 lm ./build-gpu/tlm lm-bf16-mma-sync.json
  echo "== all"; lm ./build-gpu/tlm lm-bf16.json
fi
exit $rc
