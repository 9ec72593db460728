# stage memory — the memory work's measurements: the GPU tests of the memory work, `tlm memory --suite seeds` (2.7B,
#   context 128/256/512, forward and train, fp32 and bf16) with a timeline and a memory_viz snapshot of each,
#   `tlm bench` of every size at context 256 (fp32, bf16) plain and with --optimizer-in-backward, and 2.7B bf16
#   at context 4096 with --recompute block, with the recompute cost at 1024 (block against none)
# stage memory-peer — PyTorch on the same rows (torch.cuda.max_memory_allocated), its own snapshot of 2.7B
#   context 256 fp32 train, and memory_viz's trace_plot of both snapshots (HTML)
# The 2.7B context 256 timelines are the README's pictures: `tlm plot memory-timeline` where gnuplot is.
# Files: memory/ (every JSON, timeline, snapshot, HTML and log), seeds.json, bench.json, torch.json, and
#   memory-summary.md (kept: the table of both stages' files, bench/memory_table.py).
# env: MODELS (small,medium,large,xl,2.7B) WARMUP (2) STEPS (3)
needs_memory_peer="tree gpu"
mem_summary() {
  local f
  for f in seeds.json bench.json torch.json; do [ -f "$R/memory/$f" ] && cp "$R/memory/$f" "$R/$f"; done
  x python3 bench/memory_table.py "$R/memory" > "$R/memory-summary.md" && cat "$R/memory-summary.md"
  keep memory-summary.md seeds.json bench.json torch.json
}
stage_memory() {
  local W=$R/memory rc=0 r m=${MODELS:-small,medium,large,xl,2.7B}
  mkdir -p "$W"/{timelines,snapshots,viz,logs}
  if [ -z "${BIN:-}" ]; then
    say "GPU tests: memory and the model"
    x timeout 240 ctest --test-dir "$BUILD" -L gpu -R 'test_gpu_(memory|model)' --output-on-failure > "$W/logs/gpu-tests.log" 2>&1 || rc=1
    grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|FAIL|Failed' "$W/logs/gpu-tests.log"
  fi
  say "tlm memory --suite seeds (timelines and snapshots of every configuration)"
  x timeout 420 "$TLM" memory --device cuda --suite seeds --top 12 --format json --out "$W/seeds.json" \
    --timeline "$W/timelines/timeline.json" --snapshot "$W/snapshots/tlm.pickle" > "$W/logs/seeds.txt" 2>&1 || rc=1
  grep -vE '^tlm memory: \[' "$W/logs/seeds.txt" | tail -30
  say "tlm bench, context 256, fp32 and bf16: peaks and step times, plain and --optimizer-in-backward"
  x timeout 240 "$TLM" bench --device cuda --model "$m" --context-length 256 --precision fp32,bf16 \
    --warmup "${WARMUP:-2}" --steps "${STEPS:-3}" --format json --out "$W/bench.json" 2>&1 | show -v '^#'
  x timeout 240 "$TLM" bench --device cuda --model "$m" --context-length 256 --precision fp32,bf16 \
    --warmup "${WARMUP:-2}" --steps "${STEPS:-3}" --optimizer-in-backward --format json --out "$W/bench-oib.json" 2>&1 | show -v '^#'
  say "2.7B bf16 batch 4 context 4096 with --recompute block; the recompute cost at 1024"
  x timeout 200 "$TLM" bench --device cuda --model 2.7B --precision bf16 --batch-size 4 --context-length 4096 \
    --recompute block --warmup 2 --steps 3 --format json --out "$W/long-4096.json" 2>&1 | show -v '^#'
  for r in none block; do
    x timeout 150 "$TLM" bench --device cuda --model 2.7B --precision bf16 --batch-size 4 --context-length 1024 \
      --recompute $r --warmup 2 --steps 3 --format json --out "$W/long-1024-$r.json" 2>&1 | show -v '^#'
  done
  mem_summary
  return $rc
}
stage_memory_peer() {
  local W=$R/memory f b m=${MODELS:-small,medium,large,xl,2.7B}
  local peer=(env PYTHONUNBUFFERED=1 timeout 240 python3 bench/peers/pytorch_lm.py --device cuda)
  mkdir -p "$W"/{snapshots,viz,logs}
  say "PyTorch: the seeds' rows, every size at context 256, 2.7B context 4096 (SDPA)"
  x "${peer[@]}" --model 2.7B --context-length 128,256,512 --pass forward,train --precision fp32,bf16 --warmup 1 \
    --steps 1 --format json --out "$W/torch-seeds.json" > "$W/logs/torch-seeds.txt" 2>&1
  x "${peer[@]}" --model "$m" --context-length 256 --pass train --precision fp32,bf16 --warmup "${WARMUP:-2}" \
    --steps "${STEPS:-3}" --format json --out "$W/torch.json" > "$W/logs/torch.txt" 2>&1
  x "${peer[@]}" --model 2.7B --context-length 4096 --pass train --precision bf16 --attention sdpa --warmup 1 --steps 1 \
    --format json --out "$W/torch-4096.json" > "$W/logs/torch-4096.txt" 2>&1
  say "PyTorch's own snapshot: 2.7B context 256 fp32 train"
  x "${peer[@]}" --model 2.7B --context-length 256 --pass train --precision fp32 --warmup 1 --steps 1 \
    --memory-snapshot "$W/snapshots/torch-2.7B-ctx256-b4-fp32-train.pickle" > "$W/logs/torch-snap.txt" 2>&1
  grep -h '^# OOM' "$W"/logs/torch*.txt 2>/dev/null
  say "python -m torch.cuda._memory_viz trace_plot"
  for f in "$W/snapshots/tlm-2.7B-ctx256-b4-fp32-train.pickle" "$W/snapshots/torch-2.7B-ctx256-b4-fp32-train.pickle"; do
    [ -f "$f" ] || dry || continue
    b=$(basename "$f" .pickle)
    if x timeout 120 python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$W/viz/$b.html" > "$W/logs/viz-$b.txt" 2>&1; then
      echo "   accepted: $b"
    else
      warn "REFUSED: $b"; tail -5 "$W/logs/viz-$b.txt"
    fi
  done
  mem_summary
}
