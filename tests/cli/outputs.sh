#!/usr/bin/env bash
# outputs.sh — every command declares its files before any work (output.h, tlm_io_plan): an output that is
# an input (by name, ./ spelling, symbolic link, hard link), another output, a file inside a checkpoint
# directory being read, or an existing directory is refused by name, exit 2, and the input is unchanged;
# so are an input inside the checkpoint directory a run saves into and a checkpoint directory that is a file.
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$TMP" || exit 1
python3 -c "
import random, array
r = random.Random(5); a = array.array('H'); x = 0
for i in range(6000):
    x = (x + 1) % 200 if r.random() < 0.8 else r.randrange(256); a.append(x)
open('train.bin', 'wb').write(a.tobytes())"
model=(--device cpu --model tiny --vocab-size 256)
step=(step "${model[@]}" --data train.bin --batch-size 2 --context-length 16)
expect_ok "the weights to compare" "$TLM" "${step[@]}" --optimizer-steps 1 --out-weights A.safetensors
cp A.safetensors B.safetensors
sum() { sha256sum "$@" | cut -d' ' -f1 | tr '\n' ' '; }

# expect_refused "what" "message" cmd... : exit 2 with the message, A/B/train.bin unchanged
expect_refused() {
  local what=$1 pattern=$2; shift 2
  local before err rc
  before=$(sum A.safetensors B.safetensors train.bin)
  err=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" <<<"$err" && [ "$(sum A.safetensors B.safetensors train.bin)" = "$before" ]
  then pass=$((pass + 1)); echo "ok     $what: ${err%%$'\n'*}"
  else fail=$((fail + 1)); echo "FAIL   $what [exit $rc]: expected '$pattern', inputs unchanged"; echo "       got: $err"; fi
}

same_input="is the same file as the input"
expect_refused "compare -o A A B" "--out A.safetensors $same_input A A.safetensors" \
  "$TLM" compare -o A.safetensors A.safetensors B.safetensors
expect_refused "compare -o ./A A B" "--out ./A.safetensors $same_input A A.safetensors" \
  "$TLM" compare -o ./A.safetensors A.safetensors B.safetensors
ln -s A.safetensors link.safetensors
expect_refused "compare -o (a symbolic link to A) A B" "--out link.safetensors $same_input A A.safetensors" \
  "$TLM" compare -o link.safetensors A.safetensors B.safetensors
ln B.safetensors hard.safetensors
expect_refused "compare -o (a hard link to B) A B" "--out hard.safetensors $same_input B B.safetensors" \
  "$TLM" compare -o hard.safetensors A.safetensors B.safetensors
mkdir sub
expect_refused "compare -o sub/../A A B" "--out sub/../A.safetensors $same_input A" \
  "$TLM" compare -o sub/../A.safetensors A.safetensors B.safetensors
cp B.safetensors R.meta.json  # safetensors under the name of the sidecar of --out R
expect_refused "compare: the CSV's sidecar over an input" "--out R.meta.json $same_input B R.meta.json" \
  "$TLM" compare -f csv -o R A.safetensors R.meta.json
expect_refused "compare: a later table's CSV over an input" "--out R.<name>.csv may be the same file as the input B R.x.csv" \
  "$TLM" compare -f csv -o R A.safetensors "$(cp B.safetensors R.x.csv; echo R.x.csv)"
expect_refused "step --out-grads X --out-weights X" "--out-weights X is the same file as --out-grads X" \
  "$TLM" "${step[@]}" --out-grads X --out-weights X
expect_refused "step --out-logits X --out-grads X" "--out-grads X is the same file as --out-logits X" \
  "$TLM" "${step[@]}" --out-logits X --out-grads X
expect_refused "step --weights A --out-weights A" "--out-weights A.safetensors $same_input --weights A.safetensors" \
  "$TLM" step "${model[@]}" --weights A.safetensors --data train.bin --batch-size 2 --context-length 16 \
  --out-weights A.safetensors
expect_refused "step --out-logits over --data" "--out-logits ./train.bin $same_input --data train.bin" \
  "$TLM" "${step[@]}" --out-logits ./train.bin
expect_refused "memory -o X --timeline X" "--out X is the same file as --timeline X" \
  "$TLM" memory --device cpu --model tiny -o X --timeline X
expect_refused "memory: two configurations' timelines over --out" "--out X-a.json may be the same file as --timeline X-<name>.json" \
  "$TLM" memory --device cpu --model tiny -c 16,32 --timeline X.json -o X-a.json
expect_refused "bench -o an existing directory" "--out sub exists and is a directory" "$TLM" bench --device cpu -o sub
echo "{}" > r.svg
expect_refused "plot --out over its input" "--out r.svg $same_input FILE r.svg" \
  "$TLM" plot loss-curve r.svg --out r --only svg
check "no file was left by the refusals" test ! -e X -a ! -e X.json -a ! -e R -a ! -e R.meta.json.meta.json

train=(train "${model[@]}" --train-data train.bin --batch-size 2 --context-length 16)
expect_ok "a run with checkpoints" "$TLM" "${train[@]}" --steps 4 --save-every 2 --checkpoint-dir ck
ck_sum=$(sum ck/step-00000004/*)
expect_refused "train --resume ck --log ck/step-N/weights.safetensors" \
  "--log ck/step-00000004/weights.safetensors is inside --resume ck" \
  "$TLM" "${train[@]}" --resume ck --steps 6 --log ck/step-00000004/weights.safetensors
expect_refused "train --resume ck/step-N --log (a symlink into it)" "is inside --resume ck/step-00000004" \
  "$TLM" "${train[@]}" --resume ck/step-00000004 --steps 6 --log "$(ln -s ck/step-00000004 cklink; echo cklink/w.json)"
check "the checkpoint is unchanged" test "$(sum ck/step-00000004/*)" = "$ck_sum" -a "$(cat ck/latest)" = step-00000004
start=$(date +%s)
expect_refused "train --log a directory: refused before the run" "--log sub exists and is a directory" \
  "$TLM" "${train[@]}" --steps 200 --log sub
check "... at once (not after 200 steps)" test $(( $(date +%s) - start )) -lt 5
mkdir -p ck8/step-00000001 && cp A.safetensors ck8/step-00000001/weights.safetensors
expect_refused "train --init-weights inside the --checkpoint-dir it saves into" \
  "--init-weights ck8/step-00000001/weights.safetensors is inside --checkpoint-dir ck8" \
  "$TLM" "${train[@]}" --steps 1 --save-every 1 --checkpoint-dir ck8 --init-weights ck8/step-00000001/weights.safetensors
check "... the weights file is unchanged" cmp A.safetensors ck8/step-00000001/weights.safetensors
start=$(date +%s)
expect_refused "train --checkpoint-dir a regular file: refused before the run" \
  "--checkpoint-dir A.safetensors exists and is a regular file, not a directory" \
  "$TLM" "${train[@]}" --steps 200 --save-every 100 --checkpoint-dir A.safetensors
check "... at once (not after 200 steps)" test $(( $(date +%s) - start )) -lt 5
mkfifo fifo
expect_refused "generate --checkpoint a FIFO" "--checkpoint fifo exists and is a pipe, not a directory" \
  "$TLM" generate --device cpu --checkpoint fifo --prompt hi
expect_refused "train --log over --train-data" "--log train.bin $same_input --train-data train.bin" \
  "$TLM" "${train[@]}" --steps 2 --log train.bin
finish
