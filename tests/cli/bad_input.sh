#!/usr/bin/env bash
# bad_input.sh — every kind of bad input gives a clear message and exit status 1 or 2, never a
# crash (a signal would show as 128+n) and never a half-written output file.
source "$(dirname "$0")/lib.bash"
W=$FIX/tiny/weights.safetensors
X=$FIX/tiny/inputs.npy
Y=$FIX/tiny/targets.npy
step() { "$TLM" step --device cpu --model tiny "$@"; }
bench() { "$TLM" bench --device cpu --warmup 0 --steps 1 "$@"; }

# unknown names
expect_fail "unknown command 'train2'" "$TLM" train2
expect_fail "unknown model 'huge'" bench --model huge
expect_fail "unknown model 'huge'" step --model huge --inputs "$X" --targets "$Y"
expect_fail "unknown device 'tpu'" bench --model tiny --device tpu
expect_fail "--pass: unknown value 'sideways' (known: forward, forward-backward, train)" bench --model tiny --pass sideways
expect_fail "unknown format 'xml'" bench --model tiny --format xml
expect_fail "unknown precision 'fp8'" bench --model tiny --precision fp32,fp8
expect_fail "--attention: unknown attention 'fast'" bench --model tiny --attention fast
expect_fail "--attention: unknown attention 'FLASH'" step --attention FLASH --inputs "$X" --targets "$Y"
# shapes that cannot work
expect_fail "d_model 64 is not divisible by num_heads 3" bench --model tiny --num-heads 3
expect_fail "is odd" bench --model tiny --d-model 96 --num-heads 32
expect_fail "--d-model: 0 is out of range [1, " bench --model tiny --d-model 0
expect_fail "--d-ff: -3 is out of range [1, " bench --model tiny --d-ff -3
expect_fail "--num-layers: 0 is out of range [1, " step --num-layers 0 --inputs "$X" --targets "$Y"
expect_fail "--vocab-size: 0 is out of range [1, " bench --model tiny --vocab-size 0
expect_fail "--batch-size: 0 is out of range" bench --model tiny --batch-size 0
expect_fail "--context-length: -5 is out of range" bench --model tiny --context-length -5
expect_fail "--steps: 0 is out of range" bench --model tiny --steps 0
expect_fail "--batch-size: 'four' is not an integer" bench --model tiny --batch-size four
expect_fail "the batch's context length 17 conflicts with --max-context-length 8" step --max-context-length 8 --weights "$W" --inputs "$X" --targets "$Y"
# tokens outside the vocabulary
write_npy_i64 "$TMP/big.npy" 1 4 1 2 512 3
write_npy_i64 "$TMP/ok.npy" 1 4 1 2 3 4
write_npy_i64 "$TMP/neg.npy" 1 4 1 -2 3 4
expect_fail "512" step --inputs "$TMP/big.npy" --targets "$TMP/ok.npy"
expect_fail "outside [0, vocab_size" step --inputs "$TMP/ok.npy" --targets "$TMP/big.npy"
expect_fail "-2" step --inputs "$TMP/neg.npy" --targets "$TMP/ok.npy"
write_npy_i64 "$TMP/wide.npy" 1 5 1 2 3 4 5
expect_fail "has shape [1, 5] but inputs" step --inputs "$TMP/ok.npy" --targets "$TMP/wide.npy"
# malformed and truncated files
head -c 200 "$W" > "$TMP/trunc.safetensors"
expect_fail "trunc.safetensors" step --weights "$TMP/trunc.safetensors" --inputs "$X" --targets "$Y"
printf 'not a safetensors file at all' > "$TMP/garbage.safetensors"
expect_fail "garbage.safetensors" step --weights "$TMP/garbage.safetensors" --inputs "$X" --targets "$Y"
: > "$TMP/empty.safetensors"
expect_fail "empty.safetensors" step --weights "$TMP/empty.safetensors" --inputs "$X" --targets "$Y"
head -c 100 "$X" > "$TMP/trunc.npy"
expect_fail "trunc.npy" step --inputs "$TMP/trunc.npy" --targets "$Y"
printf 'NUMPY garbage' > "$TMP/garbage.npy"
expect_fail "garbage.npy" step --inputs "$TMP/garbage.npy" --targets "$Y"
expect_fail "nonexistent.npy" step --inputs "$TMP/nonexistent.npy" --targets "$Y"
expect_fail "nonexistent.safetensors" step --weights "$TMP/nonexistent.safetensors" --inputs "$X" --targets "$Y"
# shape flags that contradict the weights file (its tensor shapes; tests/cli/hardening.sh: its metadata)
expect_fail "--num-layers 3 contradicts $W, whose model has num-layers 2" step --num-layers 3 --weights "$W" --inputs "$X" --targets "$Y"
expect_fail "--num-layers 1 contradicts" step --num-layers 1 --weights "$W" --inputs "$X" --targets "$Y"
expect_fail "--d-ff 100 contradicts $W, whose model has d-ff 172" step --d-ff 100 --weights "$W" --inputs "$X" --targets "$Y"
expect_fail "--model small (vocab-size 10000) contradicts" "$TLM" step --device cpu --model small --weights "$W" --inputs "$X" --targets "$Y"
# conflicting or missing flags
expect_fail "--data conflicts with --inputs" step --data "$X" --inputs "$X" --targets "$Y"
expect_fail "give both --inputs and --targets" step --inputs "$X"
# an output that cannot be written leaves nothing behind
expect_fail "nodir" bench --model tiny --context-length 8 --out "$TMP/nodir/out.json"
check "no file left in a directory that does not exist" test ! -e "$TMP/nodir"
expect_fail "nodir" step --weights "$W" --inputs "$X" --targets "$Y" --out-grads "$TMP/nodir/g.safetensors"
# the help texts: the shared flags' lines wrapped to 106 columns; a flag whose meaning differs says the command's
for c in bench train step profile memory attention "precision layernorm" "precision autocast"; do
  check "tlm $c --help: the flags' lines fit in 106 columns" test -z "$("$TLM" $c --help | sed -n '/^  -/,$p' | \
    grep -v '^Data parallelism\|^  mpirun\|global batch' | awk 'length > 106')"
done
check "tlm attention --help: the seed is of q, k, v" grep -q -- '--seed N  *seed of the random q, k, v and dout' \
  <<<"$("$TLM" attention --help)"
check "tlm attention --help: warm-up passes, not steps" grep -q -- '--warmup N  *untimed warm-up passes' \
  <<<"$("$TLM" attention --help)"
check "tlm attention --help: the precision is the dtype of q, k, v" grep -q -- '--precision LIST  *comma list: the dtype of q' \
  <<<"$("$TLM" attention --help)"
check "tlm precision layernorm --help: the seed is of the inputs" grep -q -- '--seed N  *seed of the random inputs z' \
  <<<"$("$TLM" precision layernorm --help)"
finish
