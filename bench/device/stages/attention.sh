# stage attention — `tlm attention` (flash and naive) on the CS336 suites, the leaderboard at d_head 64 and 128
#   with the Hopper kernels and with the mma.sync ones (TLM_FLASH_SM90=0), and the LM's shapes with the
#   selector's choice logged (TLM_FLASH_LOG=1: which kernel ran, and why)
# stage attention-peer — PyTorch's attention on the same suites (bench/peers/pytorch_attention.py)
# stage attention-tf32 — the tf32 mode: TF32 flash against exact fp32 and naive; the LM's tf32 and fp32 steps
# The attention-side-by-side.md of either stage joins every attn-*.json of the call (attention_side_by_side.py
# joins files of several calls too).
# Files: attn-tlm-SUITE.json, attn-tlm-leaderboard-{d128,sm80,d128-sm80}.json, attn-tlm-shapes.json and
#   attn-shapes-kernels.txt (the selector's log), attn-torch-SUITE.json, attn-torch-leaderboard-d128.json,
#   attention-side-by-side.md (kept), attn-tlm-tf32-*.json, lm-tf32.json.
# env: ATTN_SUITES (pytorch-attention,flash-benchmarking,leaderboard) ATTN_ITERS (20) ATTN_WARMUP (5): timed
#      passes and warm-up per row, empty for the suites' own 100 and 10 (CS336's; about 5x the device time)
#      ATTN_MAX_SEQ (empty: every seq) ATTN_PEER_IMPLS (naive,compile,sdpa-flash,sdpa-cudnn; add sdpa-math for
#      PyTorch's reference kernel) LB_ITERS (30) SHAPES (1; 0: not the LM's shapes) MODELS (the tf32 stage's LM
#      sizes: small,medium,large,xl,2.7B)
needs_attention_peer="gpu"
attn_flags() {
  ATTN_FLAGS=()
  [ -n "${ATTN_ITERS-20}" ] && ATTN_FLAGS+=(--iters "${ATTN_ITERS-20}")
  [ -n "${ATTN_WARMUP-5}" ] && ATTN_FLAGS+=(--warmup "${ATTN_WARMUP-5}")
  [ -n "${ATTN_MAX_SEQ:-}" ] && ATTN_FLAGS+=(--max-seq "$ATTN_MAX_SEQ")
  IFS=, read -r -a ATTN_SUITE_LIST <<<"${ATTN_SUITES:-pytorch-attention,flash-benchmarking,leaderboard}"
}
attn_table() {
  x python3 bench/attention_side_by_side.py "$R/attention-side-by-side.md" "$R"/attn-*.json > /dev/null &&
    keep attention-side-by-side.md
}
stage_attention() {
  local suite rc=0 lb=(--device cuda --suite leaderboard --impl flash -n "${LB_ITERS:-30}" -w 5 --format json)
  attn_flags
  for suite in "${ATTN_SUITE_LIST[@]}"; do
    say "tlm attention --suite $suite"
    x "$TLM" attention --device cuda --suite "$suite" --impl both ${ATTN_FLAGS[@]+"${ATTN_FLAGS[@]}"} --format json \
      --out "$R/attn-tlm-$suite.json" > "$R/attn-tlm-$suite.txt" 2>&1 || { tail -3 "$R/attn-tlm-$suite.txt"; rc=1; }
  done
  say "the leaderboard, d_head 128, and both with the mma.sync kernels (TLM_FLASH_SM90=0)"
  x "$TLM" attention "${lb[@]}" -D 128 --out "$R/attn-tlm-leaderboard-d128.json" | show -E '^flash'
  x env TLM_FLASH_SM90=0 "$TLM" attention "${lb[@]}" --out "$R/attn-tlm-leaderboard-sm80.json" | show -E '^flash'
  x env TLM_FLASH_SM90=0 "$TLM" attention "${lb[@]}" -D 128 --out "$R/attn-tlm-leaderboard-d128-sm80.json" | show -E '^flash'
  if [ "${SHAPES:-1}" = 1 ]; then
    # the LM's shapes (batch 4, context 256: small H 12, medium 16, large 20, xl 25 at d_head 64, 2.7B H 32 at
    # d_head 80; small at 512, 1024) and flash-benchmarking's batch 1 x 1 head, with the kernels chosen
    say "tlm attention at the LM's shapes, the selector's choice logged"
    local s shapes=("64|-b 4 -H 12,16,20,25 -c 256" "64|-b 4 -H 12 -c 512,1024" "80|-b 4 -H 32 -c 256"
                    "64|-b 1 -H 1 -c 128,256,1024,4096,16384") n=0
    for s in "${shapes[@]}"; do
      n=$((n + 1))
      # shellcheck disable=SC2086
      x env TLM_FLASH_LOG=1 "$TLM" attention --device cuda --impl flash --dtype bf16 --causal on -D "${s%%|*}" ${s#*|} \
        --iters 50 --warmup 10 --format json --out "$R/attn-shapes-$n.json" > /dev/null 2>> "$R/attn-shapes-kernels.txt" || rc=1
    done
    dry || python3 -c 'import json, sys; rows = [r for f in sys.argv[2:] for r in json.load(open(f))["rows"]]
json.dump({"rows": rows}, open(sys.argv[1], "w"), indent=1)' "$R/attn-tlm-shapes.json" "$R"/attn-shapes-[0-9]*.json &&
      rm -f "$R"/attn-shapes-[0-9]*.json
    sort -u "$R/attn-shapes-kernels.txt" 2>/dev/null | show '^tlm flash' | head -40
  fi
  attn_table
  return $rc
}
stage_attention_peer() {
  local suite impls=${ATTN_PEER_IMPLS:-naive,compile,sdpa-flash,sdpa-cudnn}
  attn_flags
  for suite in "${ATTN_SUITE_LIST[@]}"; do
    say "PyTorch attention --suite $suite ($impls)"
    x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite "$suite" --impl "$impls" \
      ${ATTN_FLAGS[@]+"${ATTN_FLAGS[@]}"} --format json --out "$R/attn-torch-$suite.json" > "$R/attn-torch-$suite.txt" 2>&1 ||
      tail -3 "$R/attn-torch-$suite.txt"
  done
  say "PyTorch SDPA, the leaderboard at d_head 128"
  x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_attention.py --device cuda --suite leaderboard --d-head 128 \
    --impl sdpa-flash,sdpa-cudnn --iters "${LB_ITERS:-30}" --warmup 5 --format json \
    --out "$R/attn-torch-leaderboard-d128.json" > /dev/null
  attn_table
}
stage_attention_tf32() {
  say "tlm attention: tf32 and fp32, the leaderboard shape (d_head 64, 128) and flash-benchmarking"
  x "$TLM" attention --device cuda --impl both --precision tf32,fp32 --heads 16 --context-length 16384 \
    --d-head 64,128 -n 20 -w 3 --format json --out "$R/attn-tlm-tf32-leaderboard.json" | show -E "^(flash|naive)"
  x "$TLM" attention --device cuda --suite flash-benchmarking --precision tf32,fp32 --impl both -n 20 -w 3 \
    --format json --out "$R/attn-tlm-tf32-flash-benchmarking.json" > /dev/null
  say "tlm bench: tf32 and fp32 steps, flash attention"
  x "$TLM" bench --device cuda --model "${MODELS:-small,medium,large,xl,2.7B}" --context-length 256 --batch-size 4 \
    --precision tf32,fp32 --attention flash --pass forward-backward --warmup 3 --steps 5 --format json \
    --out "$R/lm-tf32.json" | show -E "^(small|medium|large|xl|2.7B) "
  keep lm-tf32.json
}
# stage attention-lm — the LM's bf16 steps with the attention as chosen and with the mma.sync kernels only
#   (TLM_FLASH_SM90=0 TLM_FLASH_SPLIT=0): lm-bf16.json, lm-bf16-mma-sync.json
stage_attention_lm() {
  local lm=(bench --device cuda --model "${MODELS:-small,medium,large,xl,2.7B}" --context-length 256 --batch-size 4
            --precision bf16 --pass forward-backward,train --warmup 5 --steps 10 --format json)
  say "mma.sync kernels only"
  x env TLM_FLASH_SM90=0 TLM_FLASH_SPLIT=0 "$TLM" "${lm[@]}" --out "$R/lm-bf16-mma-sync.json" | show -E '^(small|medium|large|xl|2.7B) '
  say "as chosen"
  x "$TLM" "${lm[@]}" --out "$R/lm-bf16.json" | show -E '^(small|medium|large|xl|2.7B) '
}
