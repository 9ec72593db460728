# stage bench — `tlm bench` of every size (training step), and its context grid
# stage bench-peer — the PyTorch peer on the same sizes (eager; torch.compile + SDPA) and side-by-side.md
# Files: tlm.json, tlm-grid.json (GRID_CTX), torch-eager.json, torch-compile.json, side-by-side.md (kept).
# env: MODELS (small,medium,large,xl,2.7B) CTX (256) BATCH (4) WARMUP (5) STEPS (10)
#      TLM_PRECISIONS (fp32,tf32,bf16,fp16) PEER_PRECISIONS (fp32,bf16) GRID_CTX (empty: none; e.g.
#      128,256,512,1024 for the context grid in fp32 and bf16, docs/experiments.md) EAGER (1)
#      COMPILE_MODELS (small,large,2.7B; empty: none)
needs_bench_peer="tree gpu"
bench_common() {
  BENCH_COMMON=(--model "${MODELS:-small,medium,large,xl,2.7B}" --context-length "${CTX:-256}" --batch-size "${BATCH:-4}"
                --warmup "${WARMUP:-5}" --steps "${STEPS:-10}" --pass train)
}
stage_bench() {
  local rc=0
  bench_common
  x "$TLM" bench --device cuda "${BENCH_COMMON[@]}" --precision "${TLM_PRECISIONS:-fp32,tf32,bf16,fp16}" \
    --format json --out "$R/tlm.json" | show -v '^#' || rc=1
  if [ -n "${GRID_CTX:-}" ]; then
    say "tlm bench, context grid $GRID_CTX"
    x "$TLM" bench --device cuda --model "${MODELS:-small,medium,large,xl,2.7B}" --context-length "$GRID_CTX" \
      --batch-size "${BATCH:-4}" --warmup "${WARMUP:-5}" --steps "${STEPS:-10}" --pass train --precision fp32,bf16 \
      --format json --out "$R/tlm-grid.json" | show -v '^#' || rc=1
  fi
  keep tlm.json
  return $rc
}
stage_bench_peer() {
  local peers=() f
  bench_common
  if [ "${EAGER:-1}" = 1 ]; then
    say "PyTorch eager"
    x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_lm.py --device cuda "${BENCH_COMMON[@]}" \
      --precision "${PEER_PRECISIONS:-fp32,bf16}" --format json --out "$R/torch-eager.json" | show -v '^ *[{}"\[]'
  fi
  if [ -n "${COMPILE_MODELS-small,large,2.7B}" ]; then
    say "PyTorch torch.compile bf16 + SDPA"
    x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_lm.py --device cuda --model "${COMPILE_MODELS-small,large,2.7B}" \
      --context-length "${CTX:-256}" --batch-size "${BATCH:-4}" --warmup "${WARMUP:-5}" --steps "${STEPS:-10}" \
      --pass train --precision bf16 --compile --attention sdpa --format json --out "$R/torch-compile.json" \
      | show -v '^ *[{}"\[]'
  fi
  for f in "$R/torch-eager.json" "$R/torch-compile.json"; do [ -f "$f" ] && peers+=("$f"); done
  if { [ -f "$R/tlm.json" ] && [ ${#peers[@]} -gt 0 ]; } || dry; then
    x python3 bench/side_by_side.py "$R/side-by-side.md" "$R/tlm.json" --peers ${peers[@]+"${peers[@]}"}
    keep side-by-side.md
  else
    warn "no side-by-side.md: it needs the bench stage's tlm.json in the same call and a peer's file"
  fi
}
