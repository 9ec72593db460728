#!/usr/bin/env bash
# train_accum.sh — gradient accumulation through the command (CPU): `tlm train --grad-accum-steps 3
# --batch-size 2` trains as --batch-size 6 does (the losses within 1e-5: the same rows, another order of
# the gradients' sums); a run stopped after a checkpoint in the middle (step 4 of 12) and resumed gives
# the uninterrupted run's loss log and final weights and AdamW moments byte for byte; state.json records
# grad_accum_steps; the log counts N x batch x context tokens a step; a resume with another N is refused;
# tlm bench times N micro-batches and the update as one step and refuses --optimizer-in-backward with it.
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# a token file made here: counting mod 200 with a fifth of the ids random (bytes)
python3 -c "import array, random; r = random.Random(7)
a = array.array('H', [i % 200 if r.random() < 0.8 else r.randrange(256) for i in range(12000)])
a[:11000].tofile(open('$TMP/train.bin', 'wb')); a[11000:].tofile(open('$TMP/val.bin', 'wb'))"
# the schedule fixed by its flags, so that a run of 4 steps takes the first 4 steps of a run of 12
base=(train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/train.bin" --val-data "$TMP/val.bin"
      --context-length 32 --lr-max 5e-3 --warmup-iters 2 --cosine-cycle-iters 12 --max-grad-norm 0.5
      --eval-every 4 --eval-batches 2 --log-every 1)
acc=("${base[@]}" --batch-size 2 --grad-accum-steps 3)
expect_ok "A: 12 steps of 3 micro-batches of 2 rows, a checkpoint every 4" \
  "$TLM" "${acc[@]}" --steps 12 --save-every 4 --checkpoint-dir "$TMP/A" --log "$TMP/A.csv"
expect_ok "one batch: 12 steps of 6 rows" "$TLM" "${base[@]}" --batch-size 6 --steps 12 --log "$TMP/one.csv"
check "A's log: 3 x 2 x 32 = 192 tokens a step (2304 after 12)" \
  test "$(grep -v '^#' "$TMP/A.csv" | awk -F, 'NR == 13 { print $2 }')" = 2304
check "A's losses and gradient norms = the one batch's within 1e-5" python3 -c "
import csv
def rows(p): return [r for r in csv.DictReader(l for l in open(p) if not l.startswith('#'))]
a, b = rows('$TMP/A.csv'), rows('$TMP/one.csv')
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    for k in ('loss', 'grad_norm'):  # not val_loss: the validation batches are --batch-size rows each
        if x[k] or y[k]: assert abs(float(x[k]) - float(y[k])) <= 1e-5 * abs(float(y[k])), (k, x, y)"
check "state.json records grad_accum_steps 3" grep -q '"grad_accum_steps":[[:space:]]*3' "$TMP/A/step-00000012/state.json"
# B: the same run stopped after its checkpoint at step 4 (a budget of 4 steps), then resumed to 12
expect_ok "B: the first 4 steps" "$TLM" "${acc[@]}" --steps 4 --save-every 4 --checkpoint-dir "$TMP/B" --log "$TMP/B1.csv"
expect_ok "B resumed at step 4, to 12" "$TLM" "${acc[@]}" --resume "$TMP/B" --steps 12 --log "$TMP/B.csv"
curve() { grep -v '^#' "$1" | cut -d, -f1-7; }  # step,tokens,loss,val_loss,lr,grad_norm,clipped
if cmp -s <(curve "$TMP/A.csv") <(curve "$TMP/B.csv"); then check "B's loss log = A's, byte for byte" true
else check "B's loss log = A's, byte for byte" false; diff <(curve "$TMP/A.csv") <(curve "$TMP/B.csv") | head; fi
for f in weights.safetensors optimizer.safetensors; do
  check "B's step-00000012/$f = A's, byte for byte" cmp -s "$TMP/A/step-00000012/$f" "$TMP/B/step-00000012/$f"
done
expect_fail "--grad-accum-steps 2 contradicts the checkpoint" \
  "$TLM" "${base[@]}" --batch-size 2 --grad-accum-steps 2 --resume "$TMP/A" --steps 14
expect_fail "--grad-accum-steps: 0 is out of range [1, 65536]" "$TLM" "${acc[@]}" --steps 2 --grad-accum-steps 0
# tlm bench: the optimizer step of 2 micro-batches
run_ok "tlm bench --grad-accum-steps 2 (tiny, CPU)" "$TLM" bench --device cpu -m tiny -c 32 -b 2 -w 0 -n 1 \
  --grad-accum-steps 2 -f json -o "$TMP/bench.json"
check "bench's row: grad_accum_steps 2, tokens/s counted over 2 x 2 x 32 tokens" python3 -c "
import json; d = json.load(open('$TMP/bench.json')); r = d['rows'][0]
assert r['grad_accum_steps'] == 2, r
assert abs(r['tokens_per_s'] * r['step_ms_mean'] / 1e3 - 128) < 1e-6 * 128, r"
expect_fail "--grad-accum-steps 2 conflicts with --optimizer-in-backward" \
  "$TLM" bench --device cpu -m tiny -c 32 -b 2 -w 0 -n 1 --grad-accum-steps 2 --optimizer-in-backward
finish
