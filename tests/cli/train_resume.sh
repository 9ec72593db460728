#!/usr/bin/env bash
# train_resume.sh — checkpoints resume bit for bit (CPU). Run A: 40 steps, a checkpoint every 5. Run B:
# the same, killed with SIGKILL right after a checkpoint lands (a temporary directory of a save in
# progress may be left), then resumed with --resume. B's log (loss, val_loss, lr, grad_norm, clipped of
# every step) must equal A's byte for byte, and B's final checkpoint (weights, AdamW moments, state.json
# with the whole loss log) A's; a checkpoint is an ordinary weights file (tlm step --weights reads it).
source "$(dirname "$0")/lib.bash"
# idle OpenMP threads sleep instead of spinning: the same results, and no crawl on a busy machine
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# a token file made here: a noisy counting sequence (bytes), no corpus needed
python3 -c "
import random, array
r = random.Random(5); a = array.array('H'); x = 0
for i in range(20000):
    x = (x + 1) % 200 if r.random() < 0.8 else r.randrange(256); a.append(x)
open('$TMP/train.bin', 'wb').write(a[:18000].tobytes()); open('$TMP/val.bin', 'wb').write(a[18000:].tobytes())"
args=(train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/train.bin" --val-data "$TMP/val.bin"
      --steps 40 --batch-size 8 --context-length 32 --lr-max 5e-3 --warmup-iters 3 --max-grad-norm 0.5
      --eval-every 5 --eval-batches 2 --save-every 5 --log-every 1)
run() { "$TLM" "${args[@]}" "$@"; }
expect_ok "run A: 40 steps, a checkpoint every 5" run --checkpoint-dir "$TMP/A" --log "$TMP/A.csv"
mkdir "$TMP/ref-dir"
check "a step directory has the mode mkdir gives ($(stat -c %a "$TMP/ref-dir"), not mkdtemp's 0700)" \
  test "$(stat -c %a "$TMP/A/step-00000040")" = "$(stat -c %a "$TMP/ref-dir")"
check "A: checkpoints at 5, 10, ..., 40 and latest = step-00000040" \
  test -d "$TMP/A/step-00000005" -a -d "$TMP/A/step-00000035" -a "$(cat "$TMP/A/latest")" = step-00000040

"$TLM" "${args[@]}" --checkpoint-dir "$TMP/B" --log "$TMP/B-first.csv" > /dev/null 2>&1 &
pid=$!  # tlm itself (not a subshell): SIGKILL must reach it
for _ in $(seq 1 3000); do  # until a checkpoint lands (at most 60 s)
  [ -f "$TMP/B/latest" ] && break
  sleep 0.02
done
kill -9 $pid 2>/dev/null
wait $pid; rc=$?
killed_at=$(cat "$TMP/B/latest" 2>/dev/null)
check "B killed by SIGKILL (exit $rc) after checkpoint $killed_at, before the end" test $rc -eq 137 -a -n "$killed_at" -a "$killed_at" != step-00000040
check "B's killed run left no log (the log is written whole or not at all)" test ! -e "$TMP/B-first.csv"
mkdir -p "$TMP/B/.tmp-step-killed"  # what a save killed midway leaves
expect_ok "B resumed from $killed_at to step 40" run --resume "$TMP/B" --log "$TMP/B.csv"
check "the resumed save removed the killed save's temporary directory" test ! -e "$TMP/B/.tmp-step-killed"
curve() { grep -v '^#' "$1" | cut -d, -f1-7; }  # step,tokens,loss,val_loss,lr,grad_norm,clipped
check "A's log: a header and 40 steps" test "$(curve "$TMP/A.csv" | wc -l)" -eq 41
if cmp -s <(curve "$TMP/A.csv") <(curve "$TMP/B.csv"); then check "B's loss log = A's, byte for byte" true
else check "B's loss log = A's, byte for byte" false; diff <(curve "$TMP/A.csv") <(curve "$TMP/B.csv") | head; fi
for f in weights.safetensors optimizer.safetensors state.json; do
  check "B's step-00000040/$f = A's, byte for byte" cmp -s "$TMP/A/step-00000040/$f" "$TMP/B/step-00000040/$f"
done
# a checkpoint is an ordinary weights file: tlm step takes the model from its metadata
out=$("$TLM" step --device cpu --weights "$TMP/A/step-00000040/weights.safetensors" --data "$TMP/val.bin" \
      --batch-size 2 --context-length 32 2>&1); rc=$?
check "tlm step --weights A/step-00000040/weights.safetensors runs (exit $rc: ${out%%$'\n'*})" test $rc -eq 0
# --keep-checkpoints: the newest N step directories stay
expect_ok "resume A to 45 keeping 2 checkpoints" run --resume "$TMP/A" --steps 45 --keep-checkpoints 2 --log "$TMP/A45.json"
check "the resumed run's log names its model as the first run did (tiny*), not 'checkpoint'" python3 -c "
import json; d = json.load(open('$TMP/A45.json')); assert d['model'] == 'tiny*', d['model']"
check "A keeps step-00000040 and step-00000045 only" \
  test "$(ls "$TMP/A" | grep -c '^step-')" -eq 2 -a -d "$TMP/A/step-00000045" -a "$(cat "$TMP/A/latest")" = step-00000045
# a resumed run saves without --save-every: into its DIR at the checkpoint's own cadence (5, recorded in its
# state.json), at its end, and when stopped by SIGTERM
nosave=("${args[@]/--save-every/--log-every}")  # --log-every 5 in place of --save-every 5
expect_ok "C: 10 steps, a checkpoint every 5" run --checkpoint-dir "$TMP/C" --steps 10
check "C's state.json records its cadence" grep -q '"save_every":.*5' "$TMP/C/step-00000010/state.json"
expect_ok "C resumed to 17 without --save-every" "$TLM" "${nosave[@]}" --resume "$TMP/C" --steps 17
check "the resumed run saved at its cadence (15) and at its end (17)" \
  test -d "$TMP/C/step-00000015" -a "$(cat "$TMP/C/latest")" = step-00000017
"$TLM" "${nosave[@]}" --resume "$TMP/C" --steps 100000 > /dev/null 2> "$TMP/C.err" &
pid=$!
for _ in $(seq 1 3000); do  # until a step past 17 is taken (at most 60 s)
  grep -q 'step 1[89]\|step [2-9][0-9]' "$TMP/C.err" 2>/dev/null && break
  sleep 0.02
done
kill -TERM $pid
wait $pid; rc=$?
stopped=$(grep -o 'after step [0-9]*' "$TMP/C.err" | grep -o '[0-9]*$')
check "C resumed again, stopped by SIGTERM (exit $rc) after step $stopped" test $rc -eq 143 -a -n "$stopped"
check "... leaving its checkpoint: latest = step $stopped" \
  test "$(cat "$TMP/C/latest")" = "$(printf 'step-%08d' "${stopped:-0}")"
expect_ok "... which resumes" "$TLM" "${nosave[@]}" --resume "$TMP/C" --steps $((stopped + 1))
finish
