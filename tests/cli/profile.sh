#!/usr/bin/env bash
# profile.sh — `tlm profile` on the CPU backend: the tables (kernels per phase, ops with the roofline
# columns, ranges, runs) and the findings of a tiny run in each format, the trace, --phase, --layers,
# --overhead; and bad input: an unknown phase, an unwritable trace, --exec of a missing program, flags
# that contradict each other, each a clear error and no file written.
source "$(dirname "$0")/lib.bash"
P=("$TLM" profile --device cpu --model tiny --context-length 16 --batch-size 2 --warmup 1 --steps 2)
out=$("${P[@]}" 2>&1)
check "table run exits 0" test $? -eq 0
echo "$out" | head -60
check "the kernel table has forward, backward and optimizer rows" \
  test "$(grep -cE '^tiny ctx16 fp32 naive b2 +(forward|backward|optimizer) ' <<<"$out")" -ge 20
check "matmul_forward leads the forward with 9 calls per step (4 per block x 2 + lm_head)" \
  grep -qE '^tiny ctx16 fp32 naive b2 +forward +matmul_forward +gemm +9\.0 ' <<<"$out"
check "the op table has the roofline columns" grep -qE 'TFLOP/s +GB/s +peak +peak +roofl\. +bound' <<<"$out"
check "the ceilings and their measurement follow the op table" \
  grep -qE '^- ceilings, measured on this device before any row ran .*GEMM fp32 [0-9.e+-]+ TFLOP/s' <<<"$out"
check "findings name the forward's leader" grep -qE 'the op with the most forward time: [a-z_]+ ' <<<"$out"
check "findings compare with the wall clock" grep -q 'wall-clock' <<<"$out"

expect_ok "json with a trace, --layers and --overhead" "${P[@]}" --format json --out "$TMP/p.json" \
  --trace "$TMP/t.json" --layers --overhead
if command -v python3 >/dev/null; then
  check "json: kernels, ops, layers, ranges, runs and findings; the numbers add up" python3 -c "
import json
d = json.load(open('$TMP/p.json'))
assert d['tool'] == 'tlm profile', d['tool']
ks, ops, runs = d['kernels'], d['ops'], d['runs']
fwd = [k for k in ks if k['phase'] == 'forward']
assert fwd and abs(sum(k['pct_of_phase'] for k in fwd) - 100) < 1e-4, 'forward shares add to 100%'  # JSON: 7 digits
run = runs[0]
assert run['status'] == 'ok' and run['steps'] == 2 and run['model'] == 'tiny'
assert abs(sum(k['per_step_us'] for k in fwd) / 1e3 - run['fwd_kernel_ms']) < 1e-5 * run['fwd_kernel_ms']
assert run['fwd_kernel_ms'] <= run['fwd_ms_mean'] * 1.001, 'profiled forward within the wall clock'
assert run['overhead_pct'] is not None and run['step_ms_unprofiled'] > 0
lay = [l for l in d['layers'] if l['phase'] == 'forward']
assert sorted(l['layer'] for l in lay if l['layer'] is not None) == [0, 1] and sum(l['layer'] is None for l in lay) == 1, lay
assert abs(sum(l['per_step_us'] for l in lay) / 1e3 - run['fwd_kernel_ms']) < 1e-5 * run['fwd_kernel_ms']
assert sum(o['calls_per_step'] for o in ops if o['phase'] == 'forward') == 1 + 9 * 2 + 4
assert any('leads forward + backward' in f for f in d['findings'])
lead = max((o for o in ops if o['phase'] == 'forward'), key=lambda o: o['per_step_us'])['op']  # timing decides it
assert any('the op with the most forward time: ' + lead + ' ' in f for f in d['findings']), (lead, d['findings'])
"
  check "the trace is trace-event JSON: every event has ph, ts, pid, tid; B/E nest" python3 -c "
import json
ev = json.load(open('$TMP/t.json'))['traceEvents']
assert all(all(k in e for k in ('ph', 'ts', 'pid', 'tid')) for e in ev)
stacks = {}
for e in ev:
    s = stacks.setdefault((e['pid'], e['tid']), [])
    if e['ph'] == 'B': s.append(e['name'])
    elif e['ph'] == 'E': assert s and s.pop() == e['name'], e
assert all(not s for s in stacks.values())
assert any(e['ph'] == 'C' for e in ev) and any(e['ph'] == 'X' and e['name'] == 'matmul_forward' for e in ev)
"
fi
out=$("${P[@]}" --phase forward 2>&1)
check "--phase forward shows forward rows only" \
  test "$(grep -cE '^tiny ctx16 fp32 naive b2 +(backward|optimizer) ' <<<"$out")" -eq 0 -a \
       "$(grep -cE '^tiny ctx16 fp32 naive b2 +forward +[a-z_]+ ' <<<"$out")" -ge 8
expect_ok "help lists --exec, --trace and --suite" "$TLM" profile --help
check "help names the seeds suite" grep -q 'suite seeds' <<<"$("$TLM" profile --help)"

# --exec end to end without a GPU: a program that writes NVTX ranges only (built with libtlm_inject.so)
NVTX_PROG="$(dirname "$TLM")/tests/profile_nvtx_prog"
if [ -x "$NVTX_PROG" ] && [ -f "$(dirname "$TLM")/libtlm_inject.so" ] && command -v python3 >/dev/null; then
  out=$("$TLM" profile --format json --out "$TMP/e.json" --trace "$TMP/et.json" --exec -- "$NVTX_PROG" 2>&1)
  check "--exec of an NVTX program exits 0; its output goes to stderr" test $? -eq 0 -a -n "$(grep -x done <<<"$out")"
  check "--exec: its ranges per profiled step (warm-up left out), a range of a second thread; the trace has both threads" \
    python3 -c "
import json
d = json.load(open('$TMP/e.json'))
r = {x['range']: x['count_per_step'] for x in d['ranges']}
assert r == {'forward': 1, 'backward': 1, 'computing softmax': 0.5, 'worker': 0.5}, r
assert d['runs'][0]['steps'] == 2 and 'profile_nvtx_prog' in d['runs'][0]['command']
ev = json.load(open('$TMP/et.json'))['traceEvents']
threads = {e['tid'] for e in ev if e['ph'] == 'B'}
names = {e['name'] for e in ev if e['ph'] == 'B'}
assert len(threads) == 2 and {'warmup step 0', 'step 1', 'computing softmax', 'worker'} <= names, (threads, names)
"
else
  echo "skipped: --exec end to end (no libtlm_inject.so in this build)"
fi

# bad input: a clear error, no file
expect_fail "--phase" "${P[@]}" --phase sideways
expect_fail "--trace" "${P[@]}" --trace /nonexistent-dir/t.json --format json --out "$TMP/bad1.json"
check "an unwritable trace: no report file either" test ! -e "$TMP/bad1.json"
expect_fail "not found in PATH" "$TLM" profile --format json --out "$TMP/bad2.json" --exec -- no-such-program-tlm
check "--exec of a missing program: no report file" test ! -e "$TMP/bad2.json"
expect_fail "is not an executable file" "$TLM" profile --exec -- /nonexistent-dir/prog
expect_fail "--exec needs a program" "$TLM" profile --exec
expect_fail "conflicts with --exec" "$TLM" profile --context-length 64 --exec -- true
expect_fail "unexpected argument" "${P[@]}" extra-word
expect_fail "conflicts with --suite seeds" "$TLM" profile --device cpu --suite seeds --model small
expect_fail "--exec" "$TLM" profile --format json --out "$TMP/bad3.json" --exec -- true
check "--exec of a program that writes no profile: no report file" test ! -e "$TMP/bad3.json"
check "no temporary files left beside the outputs" \
  test -z "$(ls -A "$TMP" | grep -v -e '^p\.json$' -e '^t\.json$' -e '^e\.json$' -e '^et\.json$')"
finish
