#!/usr/bin/env bash
# inputs.sh — what tlm reads and how it reports a failed write: a FIFO or a device as an input is
# refused by name at once (never waited on: each case runs under `timeout 10`, so a hang fails it), a
# JSON input over its size limit is refused naming the limit, a JSON number that is no integer in its
# range (1e300, 2.5) is refused naming the field, a message that adds a path to the reason keeps the
# reason, and a full disk is named "No space left on device".
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
t10() { timeout 10 "$TLM" "$@"; }   # exit 124 (a hang) is not an expected failure: expect_fail says so
mkfifo "$TMP/fifo"

# ---- plot inputs: every kind, a FIFO and /dev/zero (it once read /dev/zero until it was killed) ----
for kind in $("$TLM" plot --list | awk '{print $1}'); do
  expect_fail "$TMP/fifo: a FIFO, not a regular file" t10 plot "$kind" "$TMP/fifo" --out "$TMP/p"
  expect_fail "/dev/zero: a character device, not a regular file" t10 plot "$kind" /dev/zero --out "$TMP/p"
done
check "no picture written" test ! -e "$TMP/p.png" -a ! -e "$TMP/p.svg"
truncate -s 1100M "$TMP/huge.json"  # sparse: no disk used
expect_fail "huge.json: 1153433600 bytes, over the limit of 1 GiB" t10 plot loss-curve "$TMP/huge.json" --out "$TMP/p"

# ---- JSON numbers cast to integers: range-checked, named ----
tl() { echo "{\"kind\": \"tlm.memory_timeline\", \"categories\": [\"params\"], \"start\": [0], \"events\": [],
        \"marks\": [{\"kind\": \"step\", \"begin\": true, \"event\": $1, \"step\": $2}]}"; }
tl 1e300 1 > "$TMP/t1.json"; tl 3 2.5 > "$TMP/t2.json"; tl -1 1 > "$TMP/t3.json"
expect_fail "t1.json: \"event\": 1e+300 is not a whole number in [0, 2147483647]" t10 plot memory-timeline "$TMP/t1.json" --out "$TMP/p"
expect_fail "t2.json: \"step\": 2.5 is not a whole number" t10 plot memory-timeline "$TMP/t2.json" --out "$TMP/p"
expect_fail "t3.json: \"event\": -1 is not a whole number in [0, 2147483647]" t10 plot memory-timeline "$TMP/t3.json" --out "$TMP/p"
echo '{"tool": "tlm bench", "rows": [{"ranks": 1e300, "step_ms_mean": 1, "tokens_per_s": 1}]}' > "$TMP/b.json"
expect_fail "b.json: \"ranks\": 1e+300 is not a whole number in [1, 1048576]" t10 plot ddp-scaling "$TMP/b.json" --out "$TMP/p"
echo '{"tool": "tlm allreduce", "rows": [{"in_place": true, "nranks": -1e300, "bytes": 8, "time_us_mean": 1,
       "busbw_gb_per_s": 1}]}' > "$TMP/a.json"
expect_fail "a.json: \"nranks\": -1e+300 is not a whole number in [1, 1048576]" t10 plot allreduce-size "$TMP/a.json" --out "$TMP/p"

# ---- a checkpoint's `latest` and state.json ----
mkdir "$TMP/ck1" "$TMP/ck2" "$TMP/ck3"
mkfifo "$TMP/ck1/latest" "$TMP/ck2/state.json"
expect_fail "ck1/latest: a FIFO, not a regular file" t10 train --device cpu --resume "$TMP/ck1" --steps 2
expect_fail "ck2/state.json: a FIFO, not a regular file" t10 train --device cpu --resume "$TMP/ck2" --steps 2
truncate -s 300M "$TMP/ck3/state.json"
expect_fail "state.json: 314572800 bytes, over the limit of 256 MiB" t10 train --device cpu --resume "$TMP/ck3" --steps 2
# a real checkpoint, then its state.json edited: the field and the reason are named
head -c 4000 /dev/zero > "$TMP/train.bin"  # 2000 tokens of id 0
expect_ok "a checkpoint of 2 steps" "$TLM" train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/train.bin" \
  --steps 2 --batch-size 2 --context-length 16 --save-every 2 --checkpoint-dir "$TMP/ck"
S=$TMP/ck/step-00000002/state.json
cp "$S" "$TMP/state.orig"
if command -v python3 >/dev/null; then
  edit() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(d, open(sys.argv[1],'w'))" "$S" "$1"; }
  edit "d['step'] = 1e300"
  expect_fail "state.json: field 'step' = 1e+300 is not an integer in [0, 9000000000000000]" t10 train --device cpu --resume "$TMP/ck" --steps 4
  cp "$TMP/state.orig" "$S"; edit "d['recipe']['lr_max'] = 1e30"
  # the recipe's own check, prefixed with the file: the reason survives (it once read "state.json: state.json")
  out=$(t10 train --device cpu --resume "$TMP/ck" --steps 4 2>&1); rc=$?
  check "a bad recipe in state.json: exit 1, the file named once, then the reason ($out)" \
    test $rc -eq 1 -a "$(grep -o 'state.json' <<<"$out" | wc -l)" -eq 1 -a -n "$(grep 'training recipe: lr_max' <<<"$out")"
else
  echo "skip   the edited state.json cases: python3 is not installed"
fi

# ---- a full disk: "No space left on device", not "Input/output error" ----
out=$("$TLM" plot --list 2>&1 > /dev/full); rc=$?
check "stdout on /dev/full: exit 1, 'No space left on device' ($out)" test $rc -eq 1 -a -n "$(grep -F 'No space left on device' <<<"$out")"
mkdir "$TMP/small"
if mount -t tmpfs -o size=64k tmpfs "$TMP/small" 2>/dev/null; then
  out=$("$TLM" step --device cpu --model tiny --weights "$FIX/tiny/weights.safetensors" --inputs "$FIX/tiny/inputs.npy" \
        --targets "$FIX/tiny/targets.npy" --out-weights "$TMP/small/w.safetensors" 2>&1); rc=$?
  check "weights into a full 64 KiB tmpfs: exit 1, 'No space left on device' ($out)" \
    test $rc -eq 1 -a -n "$(grep -F 'w.safetensors: No space left on device' <<<"$out")"
  check "  nothing left in it" test -z "$(ls -A "$TMP/small")"
  umount "$TMP/small"
else
  echo "skip   a full file system: mounting a 64 KiB tmpfs needs root"
fi

echo "inputs: $pass passed, $fail failed"
[ $fail -eq 0 ]
