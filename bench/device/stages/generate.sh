# stage generate — `tlm generate` on one GPU: the generation GPU test (test_gpu_generate: the KV-cache op and
#   the decoder on CUDA against the CPU); small trained on Debian's fortunes (byte-level, vocab 256, bf16,
#   batch 16 x context 256, GEN_STEPS steps, a checkpoint at GEN_STEPS/2 and at the end; the corpus as the train
#   stage's: the carried build-train/data/fortunes-{train,val}.bin, else made here by tools/make_tokens.py when
#   /usr/share/games/fortunes exists); then 200-byte samples from the last checkpoint for a few prompts (bf16:
#   greedy, and temperature 0.8 with top-p 0.9 at seeds 1 and 2; fp32: greedy for the first two prompts), and
#   the decoding speed: 1000 tokens after a one-byte prompt, greedy, fp32 and bf16 on CUDA, 200 on the CPU.
# Files: generate/samples.md (the samples, the commands and the speeds, kept), generate/speed.txt (the stderr
#   lines: time to first token, tokens/s), generate/train.json (the run's log), gpu-tests-generate.txt.
# env: GEN_STEPS (300) GEN_PROMPTS ("The |A |Q: |You will ")
stage_generate() {
  local w=$R/generate-work g=$R/generate rc=0 steps=${GEN_STEPS:-300} data p seed prec
  mkdir -p "$w" "$g"
  if [ -z "${BIN:-}" ] || [ -x "$BIN/tests/test_gpu_generate" ]; then
    say "GPU test (generate)"
    local t=$BUILD/tests/test_gpu_generate
    [ -n "${BIN:-}" ] && t=$BIN/tests/test_gpu_generate
    { x "$t"; echo "test_gpu_generate exit $?"; } > "$R/gpu-tests-generate.txt" 2>&1
    grep -E "FAIL|passed|exit" "$R/gpu-tests-generate.txt"
    grep -q "test_gpu_generate exit 0" "$R/gpu-tests-generate.txt" || dry || rc=1
  fi
  read -r -a data <<<"$(gen_corpus "$w")"
  if [ ${#data[@]} -ne 2 ]; then
    warn "no fortunes corpus: carry build-train/data (python3 tools/make_tokens.py --out build-train/data/fortunes)"
    return 1
  fi
  say "small on Debian's fortunes ($steps steps, bf16, batch 16 x 256; checkpoints at $((steps / 2)) and $steps)"
  x "$TLM" train --device cuda --model small --vocab-size 256 --train-data "${data[0]}" --val-data "${data[1]}" \
    --steps "$steps" -b 16 -c 256 --precision bf16 --lr-max 1e-3 --eval-every 50 --eval-batches 8 --log-every 10 \
    --save-every $((steps / 2)) --checkpoint-dir "$w/ck" --log "$g/train.json" 2>/dev/null |
    show '^# \(final\|step_ms\)'
  local gen=(generate --device cuda --checkpoint "$w/ck")
  {
    echo "# Samples: small trained $steps steps on Debian's fortunes (bytes, vocab 256), $(date -u '+%Y-%m-%d')"
    echo
    echo "Each sample is the prompt (in brackets) and what \`tlm ${gen[*]} --prompt P ...\` generated after it."
    IFS='|' read -r -a prompts <<<"${GEN_PROMPTS:-The |A |Q: |You will }"
    for p in "${prompts[@]}"; do # bf16: greedy and two seeds; fp32: greedy, for the first two prompts
      for how in "bf16 0" "bf16 1" "bf16 2" "fp32 0"; do
        read -r prec seed <<<"$how"
        [ "$prec" = fp32 ] && [ "$p" != "${prompts[0]}" ] && [ "$p" != "${prompts[1]}" ] && continue
        local sampling=(--temperature 0) what=greedy
        if [ "$seed" != 0 ]; then
          sampling=(--temperature 0.8 --top-p 0.9 --seed "$seed") what="temperature 0.8, top-p 0.9, seed $seed"
        fi
        echo; echo "## $prec, $what, prompt \"$p\""; echo; echo '```text'
        printf '[%s]' "$p"
        x "$TLM" "${gen[@]}" --precision "$prec" --prompt "$p" "${sampling[@]}" --max-new-tokens 200 2>> "$g/speed.txt"
        echo '```'
      done
    done
  } > "$g/samples.md"
  say "decoding speed (1000 tokens after a one-byte prompt, greedy; the CPU: 200)"
  for prec in fp32 bf16; do
    x "$TLM" "${gen[@]}" --precision "$prec" --prompt "T" --temperature 0 --max-new-tokens 1000 \
      --out "$g/speed-cuda-$prec.json" --format json > /dev/null 2>> "$g/speed.txt" || rc=1
  done
  x "$TLM" generate --device cpu --checkpoint "$w/ck" --prompt "T" --temperature 0 --max-new-tokens 200 \
    --out "$g/speed-cpu-fp32.json" --format json > /dev/null 2>> "$g/speed.txt" || rc=1
  dry || { echo; echo "## Speeds (tlm generate's stderr)"; echo; echo '```text'; grep '^tlm generate:' "$g/speed.txt"
           echo '```'; } >> "$g/samples.md"
  dry || tail -4 "$g/speed.txt"
  keep generate/samples.md gpu-tests-generate.txt
  return $rc
}
