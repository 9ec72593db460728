#!/usr/bin/env bash
# resume_checks.sh — a resume checks what it resumes (state.json version 2): the data files must be those
# the checkpoint recorded (size and XXH3-128), unless --allow-data-change (then said in the log's header);
# the step directory's files must match their recorded digests (another step's weights, a truncated
# optimizer file refused by name); a version-1 state.json still resumes, with a one-line warning.
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ddp_tokens "$TMP"
python3 -c "
d = bytearray(open('$TMP/train.bin', 'rb').read()); d[5000] ^= 1; open('$TMP/other.bin', 'wb').write(d)"
args=(train --device cpu --model tiny --vocab-size 256 --val-data "$TMP/val.bin" --batch-size 4 --context-length 16
      --eval-every 2 --eval-batches 1 --log-every 1)
expect_ok "A: 4 steps, a checkpoint every 2" "$TLM" "${args[@]}" --train-data "$TMP/train.bin" --steps 4 --save-every 2 \
  --checkpoint-dir "$TMP/A"
check "state.json is version 2 with the data's identity and the files' digests" python3 -c "
import json; d = json.load(open('$TMP/A/step-00000004/state.json'))
assert d['version'] == 2 and len(d['recipe']['train_data']['identity']['xxh3_128']) == 32
assert set(d['files']) == {'weights.safetensors', 'optimizer.safetensors'}"
expect_fail "--allow-data-change needs --resume DIR" "$TLM" "${args[@]}" --train-data "$TMP/train.bin" --steps 1 \
  --allow-data-change
fresh() { rm -rf "$TMP/R"; cp -r "$TMP/A" "$TMP/R"; }
fresh
expect_fail "training data $TMP/other.bin is not the file the checkpoint $TMP/R/step-00000004 was trained on (the same size, 36000 bytes, different content" \
  "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6 --train-data "$TMP/other.bin"
cp "$TMP/train.bin" "$TMP/keep.bin"; cp "$TMP/other.bin" "$TMP/train.bin"  # the file changed in place
expect_fail "training data $TMP/train.bin is not the file the checkpoint" "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6
run_ok "--allow-data-change accepts it" "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6 --allow-data-change \
  --log "$TMP/R.json"
check "... and the log's header says so" grep -q '"data_changed":.*training data .*different content' "$TMP/R.json"
cp "$TMP/keep.bin" "$TMP/train.bin"
fresh
cp "$TMP/R/step-00000002/weights.safetensors" "$TMP/R/step-00000004/weights.safetensors"
expect_fail "step-00000004/weights.safetensors: its content differs from the digest state.json recorded" \
  "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6
fresh
truncate -s -100 "$TMP/R/step-00000004/optimizer.safetensors"
expect_fail "step-00000004/optimizer.safetensors: 1059356 bytes, but state.json recorded 1059456" \
  "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6
fresh  # a version-1 state.json (before the identity and the digests): resumes, warned once
python3 -c "
import json; p = '$TMP/R/step-00000004/state.json'; d = json.load(open(p)); d['version'] = 1; del d['files']
for k in ('train_data', 'val_data'): del d['recipe'][k]['identity']
json.dump(d, open(p, 'w'))"
run_ok "a version-1 checkpoint resumes" "$TLM" "${args[@]}" --resume "$TMP/R" --steps 6
check "... with a one-line warning" test "$(grep -c 'warning: .*state.json is version 1' <<<"$out")" -eq 1
finish
