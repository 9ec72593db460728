# stage ckpt — what one checkpoint save costs on 2 GPUs: `tlm train` of CK_MODEL (bf16, batch 4 x context 128,
#   random tokens of the presets' vocabulary) for 2 steps under mpirun, replicated and with --zero 1, each
#   without saving and with a save after step 1 and 2 (--save-every 1); the difference of the wall times over
#   the two saves is the save's cost (the moments gathered to rank 0 under ZeRO-1, the files written, fsync'ed
#   and hashed); the checkpoint's size beside it. Time: more than 5 minutes for 2.7B (its checkpoint is about
#   32 GB): on 2026-11-28 a call of 300 s on 2 H200 ended before the stage did (no figure); give it a call of
#   its own with BUDGET 560.
# Files: ckpt-time.md (kept), ckpt-*.txt (the runs' stderr).
# env: CK_MODEL (2.7B)
needs_ckpt="tree gpu2"
stage_ckpt() {
  local w=$R/ckpt-work m=${CK_MODEL:-2.7B} z t0 t1 plain saved rc=0
  mkdir -p "$w"
  x python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 10000, 2_000_000, dtype=np.uint16).tofile('$w/tok.bin')"
  local run=(train --device cuda --model "$m" --train-data "$w/tok.bin" --steps 2 -b 8 -c 128 --precision bf16
             --timeout 600 --log-every 1)
  echo "| $m, 2 GPUs | run without saving s | with 2 saves s | per save s | checkpoint size |" > "$R/ckpt-time.md"
  echo "|---|---:|---:|---:|---:|" >> "$R/ckpt-time.md"
  for z in 0 1; do
    t0=$(date +%s.%N)
    mpi 2 "$TLM" "${run[@]}" --zero "$z" > /dev/null 2> "$R/ckpt-plain-$z.txt" || rc=1
    t1=$(date +%s.%N); plain=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    rm -rf "$w/ck$z"
    t0=$(date +%s.%N)
    mpi 2 "$TLM" "${run[@]}" --zero "$z" --save-every 1 --keep-checkpoints 1 --checkpoint-dir "$w/ck$z" > /dev/null 2> "$R/ckpt-save-$z.txt" || rc=1
    t1=$(date +%s.%N); saved=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    dry || echo "| --zero $z | $plain | $saved | $(awk -v a="$plain" -v b="$saved" 'BEGIN { printf "%.1f", (b - a) / 2 }') | $(du -sh "$w/ck$z/step-00000002" | cut -f1) |" >> "$R/ckpt-time.md"
    rm -rf "$w/ck$z"
  done
  dry || cat "$R/ckpt-time.md"
  keep ckpt-time.md
  return $rc
}
