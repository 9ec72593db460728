#!/usr/bin/env bash
# train_bad_input.sh — tlm train refuses bad input with a message naming the problem and exit status 1
# or 2, never a crash, and writes no log then: contradicting flags, a missing budget or data, a token
# file shorter than context + 1, token ids outside the vocabulary, a corrupt checkpoint (each file),
# and a resume whose flags contradict the checkpoint's model, recipe or data.
source "$(dirname "$0")/lib.bash"
# idle OpenMP threads sleep instead of spinning: the same results, and no crawl on a busy machine
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
python3 -c "
import array, random
r = random.Random(1)
open('$TMP/tok.bin', 'wb').write(array.array('H', [r.randrange(200) for _ in range(3000)]).tobytes())
open('$TMP/other.bin', 'wb').write(array.array('H', [r.randrange(200) for _ in range(2999)]).tobytes())
open('$TMP/short.bin', 'wb').write(array.array('H', range(20)).tobytes())
open('$TMP/big.bin', 'wb').write(array.array('H', [1, 2, 300] * 100).tobytes())"
train() { "$TLM" train --device cpu --model tiny --vocab-size 256 --batch-size 2 --context-length 32 "$@"; }
# flags
expect_fail "--steps conflicts with --tokens" train --train-data "$TMP/tok.bin" --steps 5 --tokens 1000
expect_fail "give the budget: --steps N or --tokens N" train --train-data "$TMP/tok.bin"
expect_fail "give --train-data FILE (or --resume DIR)" train --steps 5
expect_fail "--save-every needs --checkpoint-dir DIR" train --train-data "$TMP/tok.bin" --steps 5 --save-every 2
expect_fail "--checkpoint-dir needs --save-every N" train --train-data "$TMP/tok.bin" --steps 5 --checkpoint-dir "$TMP/c"
expect_fail "--eval-every/--eval-batches need --val-data FILE" train --train-data "$TMP/tok.bin" --steps 5 --eval-every 2
expect_fail "--lr-max: 20 is out of range" train --train-data "$TMP/tok.bin" --steps 5 --lr-max 20
expect_fail "--steps: '2.5' is not a whole number" train --train-data "$TMP/tok.bin" --steps 2.5
expect_fail "cosine_cycle_iters = 3 is outside [4, " train --train-data "$TMP/tok.bin" --steps 5 --warmup-iters 4 --cosine-cycle-iters 3
# data
expect_fail "the training data holds 20 tokens: a row of context length 32 needs at least 33" \
  train --train-data "$TMP/short.bin" --steps 5 --log "$TMP/no.json"
check "no log written after a refused run" test ! -e "$TMP/no.json"
expect_fail "the validation data holds 20 tokens" train --train-data "$TMP/tok.bin" --val-data "$TMP/short.bin" --steps 5
expect_fail "300" train --train-data "$TMP/big.bin" --steps 5
expect_fail "vocab" train --train-data "$TMP/big.bin" --steps 5
expect_fail "missing.bin: cannot open" train --train-data "$TMP/missing.bin" --steps 5
# a checkpoint to damage and to contradict
expect_ok "a 2-step run with a checkpoint" train --train-data "$TMP/tok.bin" --val-data "$TMP/tok.bin" --steps 2 \
  --eval-batches 1 --save-every 2 --checkpoint-dir "$TMP/ck"
expect_fail "already holds a run's checkpoints" train --train-data "$TMP/tok.bin" --steps 2 --save-every 2 --checkpoint-dir "$TMP/ck"
expect_fail "contradicts the checkpoint" train --resume "$TMP/ck" --steps 4 --d-model 128
expect_fail "--lr-max 0.01 contradicts the checkpoint" train --resume "$TMP/ck" --steps 4 --lr-max 0.01
expect_fail "--batch-size 4 contradicts the checkpoint" "$TLM" train --device cpu --resume "$TMP/ck" --steps 4 --batch-size 4
expect_fail "--precision bf16 contradicts the checkpoint" train --resume "$TMP/ck" --steps 4 --precision bf16
expect_fail "--model small (vocab-size 10000) contradicts the checkpoint" "$TLM" train --device cpu --resume "$TMP/ck" --steps 4 --model small
expect_fail "holds 2999 tokens, but the checkpoint" train --resume "$TMP/ck" --steps 4 --train-data "$TMP/other.bin"
expect_fail "the budget of 2 steps is already reached" train --resume "$TMP/ck" --log "$TMP/no2.json"
check "no log written after a refused resume" test ! -e "$TMP/no2.json"
damage() { rm -rf "$TMP/bad"; cp -r "$TMP/ck" "$TMP/bad"; (cd "$TMP/bad/step-00000002" && eval "$1"); }
damage "printf garbage > state.json"
expect_fail "state.json: not valid JSON" train --resume "$TMP/bad" --steps 4
damage "head -c 100 weights.safetensors > w && mv w weights.safetensors"
expect_fail "weights.safetensors" train --resume "$TMP/bad" --steps 4
damage "rm optimizer.safetensors"
expect_fail "optimizer.safetensors: cannot open" train --resume "$TMP/bad" --steps 4
damage "echo step-00000007 > ../latest"
expect_fail "step-00000007" train --resume "$TMP/bad" --steps 4
expect_fail "not a tlm checkpoint" train --resume "$TMP" --steps 4
finish
