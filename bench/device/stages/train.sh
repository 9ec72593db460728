# stage train — `tlm train` on one GPU: the train GPU tests (test_gpu_train, test_gpu_ops' sum_squares) and a
#   resume check through the CLI (small, 20 steps, resumed from step 10 = the uninterrupted run to 4 decimals);
#   per model (bf16, batch 4, context 256): `tlm bench --pass train`, `tlm train` with clipping at 1.0 and
#   without (the loop's own overhead: target <= 3%), the PyTorch training loop of the same recipe
#   (bench/peers/pytorch_train.py: eager + SDPA, torch.compile + SDPA for COMPILE_MODELS); with the carried
#   corpus (build-train/data/fortunes-{train,val}.bin, tools/make_tokens.py; carry "build-train/data") small
#   trained on Debian's fortunes (the README's loss curve); the table last (bench/train_table.py)
# Files: gpu-tests.txt, tlm-bench.json, train-MODEL.json, torch-train.json, fortunes-small.json,
#   train-summary.md (kept).
# env: MODELS (small,2.7B) BATCH (4) CTX (256) PREC (bf16) TRAIN_STEPS (small: 200, others 30)
#      COMPILE_MODELS (small) DEMO_STEPS (600)
train_resume_check() { # the CLI's resume on CUDA: the resumed run's log = the uninterrupted one's
  local w=$1 small=(train --device cuda --model small --train-data "$1/tok.bin" --val-data "$1/tok.bin" --steps 20
                    -b "$TR_BATCH" -c "$TR_CTX" --precision "$TR_PREC" --warmup-iters 2 --cosine-cycle-iters 20
                    --eval-every 10 --eval-batches 2 --log-every 1)
  x "$TLM" "${small[@]}" --save-every 10 --checkpoint-dir "$w/ckA" --log "$w/A.csv" > /dev/null 2>&1
  x "$TLM" "${small[@]}" --steps 10 --save-every 10 --checkpoint-dir "$w/ckB" > /dev/null 2>&1
  x "$TLM" "${small[@]}" --resume "$w/ckB" --save-every 10 --log "$w/B.csv" > /dev/null 2>&1
  dry && return 0
  curve() { grep -v '^#' "$1" | cut -d, -f1-6 | awk -F, 'NR>1 {printf "%s,%s,%.4f,%s,%s\n", $1, $2, $3, ($4 == "" ? "" : sprintf("%.4f", $4)), $5}'; }
  if [ -s "$w/A.csv" ] && cmp -s <(curve "$w/A.csv") <(curve "$w/B.csv"); then
    echo "ok   small on CUDA: resumed from step 10, losses, val losses, lr of steps 1-20 = the uninterrupted run's (4 decimals)"
  else
    echo "FAIL small on CUDA: the resumed run's log differs"; diff <(curve "$w/A.csv") <(curve "$w/B.csv") | head
    return 1
  fi
}
stage_train() {
  local w=$R/train-work rc=0 m steps peer models torch_files=()
  TR_BATCH=${BATCH:-4} TR_CTX=${CTX:-256} TR_PREC=${PREC:-bf16}
  local tm=${MODELS:-small,2.7B}
  mkdir -p "$w"
  if [ -z "${BIN:-}" ]; then
    say "GPU tests (train)"
    { x "$BUILD/tests/test_gpu_train"; echo "test_gpu_train exit $?"
      x "$BUILD/tests/test_gpu_ops" -o sum_squares; echo "test_gpu_ops -o sum_squares exit $?"; } > "$R/gpu-tests.txt" 2>&1
  fi
  # a token file of the presets' vocabulary (10000): throughput does not depend on the text
  x python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 10000, 4_000_000, dtype=np.uint16).tofile('$w/tok.bin')"
  say "resume on CUDA (small, 20 steps, a checkpoint every 10)"
  train_resume_check "$w" >> "$R/gpu-tests.txt" 2>&1 || rc=1
  grep -E "FAIL|passed|exit|^ok" "$R/gpu-tests.txt"
  say "tlm bench --pass train ($tm, $TR_PREC, batch $TR_BATCH, context $TR_CTX)"
  x "$TLM" bench --device cuda --model "$tm" --precision "$TR_PREC" -b "$TR_BATCH" -c "$TR_CTX" --pass train --warmup 5 \
    --steps 20 --format json --out "$R/tlm-bench.json" | show -v '^#'
  IFS=, read -r -a models <<<"$tm"
  for m in "${models[@]}"; do
    steps=${TRAIN_STEPS:-$([ "$m" = small ] && echo 200 || echo 30)}
    peer=(--steps 30 --warmup 10); [ "$m" = small ] || peer=(--steps 15 --warmup 5)
    local common=(--device cuda --model "$m" --train-data "$w/tok.bin" -b "$TR_BATCH" -c "$TR_CTX" --precision "$TR_PREC"
                  --log-every 10)
    say "tlm train $m ($steps steps, clipping at 1.0; then without clipping)"
    x "$TLM" train "${common[@]}" --steps "$steps" --log "$R/train-$m.json" 2>/dev/null | show '^# \(step_ms\|tokens_per_s\|mfu\)'
    x "$TLM" train "${common[@]}" --steps "$steps" --max-grad-norm 0 --log "$w/noclip-$m.json" 2>/dev/null |
      grep '^# \(step_ms_mean\|mfu\)'
    for how in eager compile; do
      [ $how = compile ] && [[ ",${COMPILE_MODELS-small}," != *",$m,"* ]] && continue
      say "PyTorch training loop $m ($how + SDPA)"
      x env PYTHONUNBUFFERED=1 python3 bench/peers/pytorch_train.py --model "$m" --precision "$TR_PREC" \
        --train-data "$w/tok.bin" --batch-size "$TR_BATCH" --context-length "$TR_CTX" "${peer[@]}" --attention sdpa \
        $([ $how = compile ] && echo --compile) --out "$w/torch-$m-$how.json" > /dev/null 2> "$w/torch-$m-$how.err" ||
        tail -3 "$w/torch-$m-$how.err"
      [ -f "$w/torch-$m-$how.json" ] && torch_files+=("$w/torch-$m-$how.json")
    done
  done
  dry || python3 -c 'import json, sys; json.dump([json.load(open(f)) for f in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)' \
    "$R/torch-train.json" ${torch_files[@]+"${torch_files[@]}"}
  if [ -f build-train/data/fortunes-train.bin ] || dry; then
    say "small on Debian's fortunes (byte-level, vocab 256; ${DEMO_STEPS:-600} steps)"
    x "$TLM" train --device cuda --model small --vocab-size 256 --train-data build-train/data/fortunes-train.bin \
      --val-data build-train/data/fortunes-val.bin --steps "${DEMO_STEPS:-600}" -b 16 -c 256 --precision bf16 \
      --lr-max 1e-3 --eval-every 25 --eval-batches 8 --log-every 5 --log "$R/fortunes-small.json" 2>/dev/null |
      grep '^# \(final\|step_ms\)'
  fi
  x python3 bench/train_table.py "$R" "$w" "$tm" > "$R/train-summary.md" && cat "$R/train-summary.md"
  keep train-summary.md gpu-tests.txt tlm-bench.json torch-train.json
  return $rc
}
