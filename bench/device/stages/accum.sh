# stage accum — gradient accumulation on one GPU: the accumulation GPU test (test_gpu_accum: N micro-batches =
#   one batch in fp32 and bf16, the backward's two CUDA graphs, fp16's skip), then per model (bf16, context
#   256): `tlm bench --pass train` at batch BATCH without accumulation (N = 1) and at ACCUM micro-batches of
#   BATCH rows a step (ACCUM x BATCH x CTX tokens: 0.5M by default), and the PyTorch peer
#   (bench/peers/pytorch_lm.py, eager, its --grad-accum-steps: nanoGPT's loop) at the same two; the table last:
#   tokens/s and MFU per optimizer step beside PyTorch's (its MFU from tlm's FLOP count of the same step)
# Files: gpu-tests.txt, tlm-accum1.json, tlm-accum.json, torch-accum1.json, torch-accum.json, accum.md (kept).
# env: MODELS (2.7B,xl) BATCH (8: PyTorch's 2.7B bf16 step fits an H100 at 8 rows, not at 16) CTX (256)
#      ACCUM (256: 256 x 8 x 256 = 524288 tokens a step) PREC (bf16) WARMUP (1) STEPS (1: an optimizer step of
#      2.7B at 0.5M tokens takes some 15-25 s) PLAIN_WARMUP (3) PLAIN_STEPS (10) PEER (1: run the PyTorch peer)
stage_accum() {
  local rc=0 m=${MODELS:-2.7B,xl} b=${BATCH:-8} c=${CTX:-256} n=${ACCUM:-256} p=${PREC:-bf16} nm
  nm=$(tr ',' '\n' <<<"$m" | grep -c .)  # models: the estimates below are per model and step
  say "test_gpu_accum"
  local tests=${BIN:+$BIN/tests}
  x "${tests:-$BUILD/tests}/test_gpu_accum" > "$R/gpu-tests.txt" 2>&1 || rc=1
  dry || grep -E '^(FAIL|[0-9]+ passed)' "$R/gpu-tests.txt"
  local common=(--device cuda --model "$m" --context-length "$c" --batch-size "$b" --precision "$p" --pass train)
  say "tlm bench, no accumulation: $m, batch $b x context $c"
  x "$TLM" bench "${common[@]}" --warmup "${PLAIN_WARMUP:-3}" --steps "${PLAIN_STEPS:-10}" \
    --format json --out "$R/tlm-accum1.json" | show -v '^#' || rc=1
  if fits $((25 * nm * (${WARMUP:-1} + ${STEPS:-1}) + 20)) "tlm bench, $n micro-batches of $b x $c a step"; then
    x "$TLM" bench "${common[@]}" --grad-accum-steps "$n" --warmup "${WARMUP:-1}" --steps "${STEPS:-1}" \
      --format json --out "$R/tlm-accum.json" | show -v '^#' || rc=1
  fi
  if [ "${PEER:-1}" = 1 ]; then
    local peer=(python3 bench/peers/pytorch_lm.py --device cuda --model "$m" --context-length "$c" --batch-size "$b"
                --precision "$p" --pass train --format json)
    say "PyTorch eager, no accumulation"
    x env PYTHONUNBUFFERED=1 "${peer[@]}" --warmup "${PLAIN_WARMUP:-3}" --steps "${PLAIN_STEPS:-10}" \
      --out "$R/torch-accum1.json" | show -v '^ *[{}"\[]'
    if fits $((35 * nm * (${WARMUP:-1} + ${STEPS:-1}) + 30)) "PyTorch eager, $n micro-batches a step"; then
      x env PYTHONUNBUFFERED=1 "${peer[@]}" --grad-accum-steps "$n" --warmup "${WARMUP:-1}" --steps "${STEPS:-1}" \
        --out "$R/torch-accum.json" | show -v '^ *[{}"\[]'
    fi
  fi
  x python3 bench/accum_table.py "$R/accum.md" "$R/tlm-accum1.json" "$R/tlm-accum.json" "$R/torch-accum1.json" \
    "$R/torch-accum.json" || rc=1
  dry || cat "$R/accum.md" 2>/dev/null
  keep accum.md
  return $rc
}
