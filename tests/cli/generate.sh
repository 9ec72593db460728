#!/usr/bin/env bash
# generate.sh — tlm generate: from a tlm train checkpoint and from its weights file the same greedy text;
# seeded sampling reproducible; --print ids; the report of --out; bad input refused with a message naming
# the problem and exit status 1 or 2: no model, both models, a missing file, a prompt id outside the
# vocabulary, --top-p outside (0, 1], a negative --temperature, a context longer than the model's, --prompt
# for a vocabulary that is not bytes.
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
python3 -c "
import array, random
r = random.Random(2)
open('$TMP/tok.bin', 'wb').write(array.array('H', [r.randrange(256) for _ in range(3000)]).tobytes())"
expect_ok "a 2-step tiny run with a checkpoint" "$TLM" train --device cpu --model tiny --vocab-size 256 --batch-size 2 \
  --context-length 32 --train-data "$TMP/tok.bin" --steps 2 --save-every 2 --checkpoint-dir "$TMP/ck"
gen() { "$TLM" generate --device cpu "$@"; }
a=$(gen --checkpoint "$TMP/ck" --prompt "Hello" --temperature 0 --max-new-tokens 12 2>/dev/null)
b=$(gen --weights "$TMP/ck/step-00000002/weights.safetensors" --prompt "Hello" --temperature 0 --max-new-tokens 12 2>/dev/null)
c=$(gen --checkpoint "$TMP/ck/step-00000002" --prompt-ids 72,101,108,108,111 --temperature 0 --max-new-tokens 12 --print text 2>/dev/null)
check "greedy from the checkpoint, its step directory and its weights file: the same text" \
  test -n "$a" -a "$a" = "$b" -a "$a" = "$c"
ids=$(gen --checkpoint "$TMP/ck" --prompt "Hello" --temperature 0 --max-new-tokens 12 --print ids 2>/dev/null)
check "--print ids: 12 comma-separated ids ($ids)" test "$(tr ',' '\n' <<<"$ids" | grep -c '^[0-9]*$')" -eq 12
s1=$(gen --checkpoint "$TMP/ck" --prompt "Hi" --top-p 0.9 --seed 5 --print ids --max-new-tokens 20 2>/dev/null)
s2=$(gen --checkpoint "$TMP/ck" --prompt "Hi" --top-p 0.9 --seed 5 --print ids --max-new-tokens 20 2>/dev/null)
check "seeded sampling twice: the same ids" test -n "$s1" -a "$s1" = "$s2"
run_ok "the speeds on stderr, the report in --out" gen --checkpoint "$TMP/ck" --prompt "Hi" --max-new-tokens 8 \
  --out "$TMP/r.json" --format json
check "stderr names the time to first token and tokens/s" grep -q "time to first token .* ms, decoding .* tokens/s" <<<"$out"
check "the report holds decode_tokens_per_s" grep -q '"decode_tokens_per_s"' "$TMP/r.json"
# generation reads only the weights: the moments file's content is neither read nor hashed (its size is checked),
# so an edited one does not stop it, while an edited weights file is refused by its digest
cp -r "$TMP/ck" "$TMP/ck-edited"
python3 -c "
import sys
for name, pos in (('optimizer', 4000), ('weights', -4)):
    p = '$TMP/ck-edited/step-00000002/' + name + '.safetensors'
    d = bytearray(open(p, 'rb').read()); d[pos] ^= 1; open(p + ('.bad' if name == 'weights' else ''), 'wb').write(d)"
d=$(gen --checkpoint "$TMP/ck-edited" --prompt "Hello" --temperature 0 --max-new-tokens 12 2>/dev/null)
check "an edited moments file: generation runs, the same greedy text" test -n "$d" -a "$d" = "$a"
mv "$TMP/ck-edited/step-00000002/weights.safetensors.bad" "$TMP/ck-edited/step-00000002/weights.safetensors"
expect_fail "weights.safetensors: its content differs from the digest state.json recorded" \
  gen --checkpoint "$TMP/ck-edited" --prompt "Hello" --max-new-tokens 4
# bad input
expect_fail "give the model: --checkpoint DIR or --weights FILE" gen --prompt "x"
expect_fail "--checkpoint conflicts with --weights" gen --checkpoint "$TMP/ck" --weights "$TMP/w" --prompt "x"
expect_fail "give --prompt TEXT or --prompt-ids IDS" gen --checkpoint "$TMP/ck"
expect_fail "missing.safetensors: cannot open" gen --weights "$TMP/missing.safetensors" --prompt "x"
expect_fail "not a tlm checkpoint" gen --checkpoint "$TMP" --prompt "x"
expect_fail "prompt token 1 is id 300, outside the model's vocabulary [0, 256)" gen --checkpoint "$TMP/ck" --prompt-ids 5,300
expect_fail "--prompt-ids: -1 is out of range" gen --checkpoint "$TMP/ck" --prompt-ids -1,2
expect_fail "--prompt-ids: 99999999999999999999 is out of range" gen --checkpoint "$TMP/ck" --prompt-ids 7,99999999999999999999
expect_fail "--top-p: 0 is out of range" gen --checkpoint "$TMP/ck" --prompt "x" --top-p 0
expect_fail "--top-p: 1.5 is out of range" gen --checkpoint "$TMP/ck" --prompt "x" --top-p 1.5
expect_fail "--temperature: -1 is out of range" gen --checkpoint "$TMP/ck" --prompt "x" --temperature -1
expect_fail "the prompt's 5 tokens and 30 new tokens (35) exceed the model's context_length 32" \
  gen --checkpoint "$TMP/ck" --prompt "Hello" --max-new-tokens 30
expect_fail "--num-heads and --max-context-length are for --weights" gen --checkpoint "$TMP/ck" --prompt "x" --num-heads 4
expect_fail "--eot-id: -3 is out of range" gen --checkpoint "$TMP/ck" --prompt "x" --eot-id -3
"$TLM" step --device cpu --model tiny --data "$TMP/tok.bin" --batch-size 1 --context-length 8 \
  --out-weights "$TMP/v512.safetensors" --optimizer-steps 1 >/dev/null 2>&1
expect_fail "this model's vocabulary is 512: give --prompt-ids" gen --weights "$TMP/v512.safetensors" --prompt "x"
expect_fail "--print text prints bytes (vocab 256), but this model's vocabulary is 512" \
  gen --weights "$TMP/v512.safetensors" --prompt-ids 500,3 --print text
expect_ok "--prompt-ids for a vocabulary of 512" gen --weights "$TMP/v512.safetensors" --prompt-ids 500,3 --max-new-tokens 4
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
