#!/usr/bin/env bash
# precision.sh — `tlm precision` end to end on the CPU: the three experiments run and print what
# they compute (the accumulation sums, the autocast dtypes, the LayerNorm grids and
# findings), and bad input gives a clear message and exit status 2.
source "$(dirname "$0")/lib.bash"
P=("$TLM" precision)

# expect_usage "pattern" cmd... : must exit exactly 2 (bad usage) and print pattern
expect_usage() {
  local pattern=$1; shift
  local err rc
  err=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" <<<"$err"; then
    pass=$((pass + 1)); echo "ok     [exit 2] ${err%%$'\n'*}"
  else
    fail=$((fail + 1)); echo "FAIL   [exit $rc] expected exit 2 and '$pattern' from: $*"; echo "       got: $err"
  fi
}

# accumulate: the four accumulation sums (to 4 decimals, from the %.6f column), bf16, the why lines
run_ok "accumulate exits 0" "${P[@]}" accumulate --device cpu
sum_of() { awk -v w="$1" 'index($0, w) == 1 { n = split(substr($0, length(w) + 1), f, " "); printf "%.4f", f[2] }' <<<"$out"; }
check "fp32 += fp32 = 10.0001" test "$(sum_of 'fp32 += fp32 ')" = 10.0001
check "fp16 += fp16 = 9.9531" test "$(sum_of 'fp16 += fp16 ')" = 9.9531
check "fp32 += fp16 = 10.0021" test "$(sum_of 'fp32 += fp16 ')" = 10.0021
check "fp32 += fp32(fp16) = 10.0021" test "$(sum_of 'fp32 += fp32(fp16) ')" = 10.0021
check "the addend fp16(0.01) printed exactly" grep -q '0\.01000213623046875' <<<"$out"
check "why: fp16's spacing near 10" grep -q 'fp16 spacing is 2^-7 = 0.0078125' <<<"$out"
check "why: where bf16 += bf16 stops" grep -q 's stops at 4 after add' <<<"$out"
run_ok "accumulate --format json exits 0" "${P[@]}" accumulate --device cpu --format json
if command -v python3 >/dev/null; then
  check "accumulate json parses, 6 ways" python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert len(d['ways'])==6 and len(d['why'])==6" "$out"
fi

# autocast: the autocast dtypes, fp16 and bf16
run_ok "autocast --dtype fp16 exits 0" "${P[@]}" autocast --dtype fp16 --device cpu
check "fp16 summary: parameters fp32, fc1 output fp16, LayerNorm output fp32, logits fp16, loss fp32, gradients fp32" \
  grep -q 'parameters fp32, fc1 output fp16, ReLU output fp16, LayerNorm output fp32, logits fp16, loss fp32, gradients fp32' <<<"$out"
check "fp16: a loss and four gradient norms" test "$(grep -cE '^(loss|fc1\.weight\.grad|ln\.weight\.grad|ln\.bias\.grad|fc2\.weight\.grad) +[0-9]' <<<"$out")" -eq 5
run_ok "autocast --dtype bf16 --loss sum exits 0" "${P[@]}" autocast --dtype bf16 --loss sum --device cpu
check "bf16 summary" grep -q 'fc1 output bf16, ReLU output bf16, LayerNorm output fp32, logits bf16, loss fp32, gradients fp32' <<<"$out"

# layernorm: four grids and three findings
run_ok "layernorm exits 0" "${P[@]}" layernorm
check "layernorm prints 4 grids" test "$(grep -c '^## ' <<<"$out")" -eq 4
check "layernorm grid rows: 5 schemes x 4 widths, 4 times" test "$(grep -cE '^(fp32|fp16|bf16)[a-z0-9 +]* +(10|100|1000|10240) ' <<<"$out")" -eq 80
check "layernorm findings name fp16's largest value" grep -q "fp16's largest value 65504" <<<"$out"
check "layernorm findings answer for bf16" grep -q '^- bf16 never overflows' <<<"$out"
expect_ok "layernorm --sum pairwise" "${P[@]}" layernorm --sum pairwise --rows 2

# help and bad input
expect_ok "precision --help" "${P[@]}" --help
for e in accumulate autocast layernorm; do expect_ok "precision $e --help" "${P[@]}" "$e" --help; done
check "autocast help names the defaults" grep -q 'default: fp16' <<<"$("${P[@]}" autocast --help)"
expect_usage "unknown dtype 'fp8' (known: fp16, bf16, fp32)" "${P[@]}" autocast --dtype fp8
expect_usage "unknown experiment 'overflow' (known: accumulate, autocast, layernorm" "${P[@]}" overflow
expect_usage "Usage: tlm precision <experiment>" "${P[@]}"
expect_usage "--loss: unknown value 'l1'" "${P[@]}" autocast --loss l1
expect_usage "unknown format 'xml'" "${P[@]}" accumulate --format xml
expect_usage "unknown device 'tpu'" "${P[@]}" accumulate --device tpu
expect_usage "--batch-size: 0 is out of range" "${P[@]}" autocast --batch-size 0
expect_usage "--rows: 'many' is not an integer" "${P[@]}" layernorm --rows many
expect_usage "--sum: unknown value 'random'" "${P[@]}" layernorm --sum random
expect_usage "unexpected argument 'extra'" "${P[@]}" layernorm extra
finish
