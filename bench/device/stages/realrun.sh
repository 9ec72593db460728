# stage realrun — a real run on one host of 2 GPUs, each part only when its estimate fits the budget:
#   scale     2.7B (RR_MODEL) in bf16 at RR_TOKENS tokens an optimizer step by gradient accumulation: one GPU
#             (RR_BATCH rows a micro-batch) against 2 GPUs with the same global batch and micro-batch rows a
#             rank, replicated (bucketed 25 MiB) and ZeRO-1: tokens/s and MFU per optimizer step
#   torch     PyTorch's DDP peer (bench/peers/pytorch_ddp.py) with the same accumulation (no_sync), 1 and 2 GPUs
#   fortunes  small on Debian's fortunes (bytes, vocab 256, bf16, global batch 32 x 256): 2 GPUs with ZeRO-1 to
#             RR_STEPS steps, a checkpoint at half and at the end (the uninterrupted run); then the half-way
#             checkpoint resumed on ONE GPU to RR_STEPS (the same global batch of 32 rows on one rank); the two
#             logs side by side (bench/realrun_table.py), and 200-byte samples from the resumed run's checkpoint
# Files: rr-1gpu.json, rr-2gpu.json, rr-torch.json, rr-zero2.json (the 2-GPU run's log), rr-resume1.json (the
#   resumed run's), rr-samples.txt, realrun.md (kept).
# env: RR_PARTS (scale,fortunes,torch: in this order) RR_MODEL (2.7B) RR_BATCH (8) RR_TOKENS (524288) RR_STEPS (600)
needs_realrun="tree gpu2"
stage_realrun() {
  local parts=${RR_PARTS:-scale,fortunes,torch} m=${RR_MODEL:-2.7B} b=${RR_BATCH:-8} rc=0 E=$R/bench-stderr.txt
  local n1=$(( ${RR_TOKENS:-524288} / (b * 256) )) steps=${RR_STEPS:-600} w=$R/realrun-work
  local n2=$((n1 / 2)) common=(--device cuda --model "$m" -P bf16 -c 256 --pass train --warmup 1 --steps 1)
  mkdir -p "$w"
  if part "$parts" scale 150 "$m bf16, $((n1 * b * 256)) tokens a step: 1 GPU ($n1 x $b rows) and 2 GPUs ($n2 x $b a rank)"; then
    x "$TLM" bench "${common[@]}" -b "$b" --grad-accum-steps "$n1" -f json -o "$R/rr-1gpu.json" 2>> "$E" | show -v '^#'
    mpi 2 "$TLM" bench "${common[@]}" -b $((2 * b)) --grad-accum-steps "$n2" --ddp bucketed --bucket-mb 25 --zero 0,1 \
      --timeout 300 -f json -o "$R/rr-2gpu.json" 2>> "$E" | show -v '^#'
    dev_pack
  fi
  if part "$parts" fortunes 150 "small on fortunes: 2 GPUs ZeRO-1 to $steps, resumed at $((steps / 2)) on 1 GPU"; then
    local data
    read -r -a data <<<"$(gen_corpus "$w")"
    if [ ${#data[@]} -ne 2 ]; then warn "no fortunes corpus"; return 1; fi
    local run=(train --device cuda --model small --vocab-size 256 --train-data "${data[0]}" --val-data "${data[1]}"
               --steps "$steps" -b 32 -c 256 --precision bf16 --lr-max 1e-3 --eval-every 50 --eval-batches 8
               --log-every 10)
    mpi 2 "$TLM" "${run[@]}" --zero 1 --save-every $((steps / 2)) --checkpoint-dir "$w/ck2" --timeout 300 \
      --log "$R/rr-zero2.json" 2>> "$E" | show '^# \(final\|step_ms\|tokens\)'
    x "$TLM" train --device cuda --resume "$w/ck2/step-$(printf %08d $((steps / 2)))" --checkpoint-dir "$w/ck1" \
      --log "$R/rr-resume1.json" 2>> "$E" | show '^# \(final\|step_ms\|tokens\)'
    for p in "The " "Q: " "You will "; do
      for seed in 0 1; do
        local how=(--temperature 0); [ "$seed" = 0 ] || how=(--temperature 0.8 --top-p 0.9 --seed "$seed")
        { printf '\n## prompt "%s", %s\n[%s]' "$p" "${how[*]}" "$p"
          x "$TLM" generate --device cuda --checkpoint "$w/ck1" --precision bf16 --prompt "$p" "${how[@]}" \
            --max-new-tokens 200 2>> "$R/rr-samples-speed.txt"; echo; } >> "$R/rr-samples.txt"
      done
    done
    dev_pack
  fi
  if part "$parts" torch 200 "PyTorch DDP, the same accumulation, 1 and 2 GPUs"; then
    x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_ddp.py --model "$m" --context-length 256 \
      --batch-size-per-rank "$b" --precision bf16 --nproc 1 --grad-accum-steps "$n1" --warmup 1 --steps 1 \
      --out "$w/torch-1.json" 2>> "$E" | show -v '^prec'
    x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_ddp.py --model "$m" --context-length 256 \
      --batch-size-per-rank "$b" --precision bf16 --nproc 2 --grad-accum-steps "$n2" --warmup 1 --steps 1 \
      --out "$w/torch-2.json" 2>> "$E" | show -v '^prec'
    dry || python3 -c 'import json, sys; d = [json.load(open(f)) for f in sys.argv[2:]]; d[0]["rows"] += d[1]["rows"]; json.dump(d[0], open(sys.argv[1], "w"), indent=1)' \
      "$R/rr-torch.json" "$w/torch-1.json" "$w/torch-2.json" || true
    dev_pack
  fi
  x python3 bench/realrun_table.py "$R" > "$R/realrun.md" || rc=1
  dry || cat "$R/realrun.md"
  keep realrun.md rr-samples.txt
  return $rc
}
