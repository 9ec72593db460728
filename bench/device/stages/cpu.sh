# stage cpu — tlm's CPU backend next to PyTorch on the same CPU (no GPU needed; any machine): same model, batch,
#   context, warm-up and steps, the two alternating for ROUNDS rounds (a shared or virtual CPU drifts by 10-20%
#   over minutes; alternating exposes both to the same drift); cpu.md gives each round and the median over
#   rounds (kept). Builds with `make build` (./build/tlm, CUDA off) unless CPU_TLM names a binary.
# env: MODEL (small) CTX (128) BATCH (4) WARMUP (1) STEPS (3) ROUNDS (3) THREADS (nproc) CPU_TLM (./build/tlm)
needs_cpu=""
stage_cpu() {
  local r threads=${THREADS:-$(nproc)} rounds=${ROUNDS:-3} tlm=${CPU_TLM:-./build/tlm}
  [ -n "${CPU_TLM:-}" ] || x make -s build > "$R/cpu-build.log" 2>&1 || { tail -20 "$R/cpu-build.log"; return 1; }
  mkdir -p "$R/cpu"
  local common=(--model "${MODEL:-small}" --context-length "${CTX:-128}" --batch-size "${BATCH:-4}" --warmup "${WARMUP:-1}"
                --steps "${STEPS:-3}" --pass train --threads "$threads" --format json)
  for r in $(seq 1 "$rounds"); do
    say "round $r: tlm bench, then pytorch_lm.py"
    x env OMP_NUM_THREADS="$threads" "$tlm" bench --device cpu "${common[@]}" --out "$R/cpu/tlm.$r.json" > /dev/null
    x env OMP_NUM_THREADS="$threads" python3 bench/peers/pytorch_lm.py --device cpu "${common[@]}" \
      --out "$R/cpu/torch.$r.json" > /dev/null
  done
  x python3 bench/cpu_table.py "$R/cpu" "$rounds" "$R/cpu.md" "$threads" && keep cpu.md
}
