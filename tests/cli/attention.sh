#!/usr/bin/env bash
# attention.sh — `tlm attention` on the CPU: a free sweep (naive and flash, the flash/naive ratio,
# CSV and JSON), the precision modes (tf32 rows; --dtype, the older spelling), the
# pytorch-attention suite cut by --max-seq, and bad input.
source "$(dirname "$0")/lib.bash"
A=("$TLM" attention --device cpu --impl both --context-length 64,100 --d-head 16,64 --iters 2 --warmup 1)
run_ok "sweep exits 0" "${A[@]}" --verbose
check "a naive and a flash row per shape (8)" test "$(grep -cE '^(naive|flash) +1 +1 +(64|100) +(16|64) +fp32 +yes +[0-9]' <<<"$out")" -eq 8
check "every flash row has the speed-up over naive" test "$(grep -cE '^flash .* [0-9.]+$' <<<"$out")" -eq 4
check "header names the device" grep -q '^# device: cpu' <<<"$out"
check "header gives the FLOP convention" grep -q '4\*b\*h\*s^2\*d' <<<"$out"
check "units row (sizes carry their unit in each cell)" grep -qE '^ +ms +ms +ms +fwd +bwd +x$' <<<"$out"
expect_ok "csv to a file" "${A[@]}" --format csv --out "$TMP/a.csv"
check "csv has a field row and 8 rows after its # lines" test "$(grep -vc '^#' "$TMP/a.csv")" -eq 9
expect_ok "json to a file" "${A[@]}" --format json --out "$TMP/a.json"
if command -v python3 >/dev/null; then
  check "json parses, 8 rows, 4 ratios" python3 -c "
import json; d = json.load(open('$TMP/a.json')); rows = d['rows']
assert len(rows) == 8 and all(r['status'] == 'ok' for r in rows)
assert sum(r['speedup_vs_naive'] is not None for r in rows) == 4
assert all(r['fwdbwd_ms_mean'] > 0 and r['mem_before_bwd_bytes'] > 0 and r['causal'] is True for r in rows)"
fi

out=$("$TLM" attention --device cpu --causal off --impl both --context-length 32 --d-head 16 --iters 1 --warmup 0 --verbose 2>&1)
check "non-causal naive says so" grep -qE '^naive .*unsupported: naive: causal only' <<<"$out"
check "non-causal flash runs" grep -qE '^flash +1 +1 +32 +16 +fp32 +no +[0-9]' <<<"$out"
out=$("$TLM" attention --device cpu --impl flash --dtype bf16,fp16 --context-length 32 --d-head 16 --iters 1 --warmup 0 --verbose 2>&1)
echo "$out"
if grep -q 'no flash ops in its op table' <<<"$out"; then # a CPU backend without the flash ops: fp32 only
  check "flash bf16 on the CPU without flash ops: not supported" grep -q 'not supported on this backend yet' <<<"$out"
else
  check "flash bf16 and fp16 on the CPU run (the backend's flash ops)" \
    test "$(grep -cE '^flash +1 +1 +32 +16 +(bf16|fp16) +yes +[0-9]' <<<"$out")" -eq 2
fi

out=$("$TLM" attention --device cpu --impl both --precision tf32,fp32 --context-length 32 --d-head 16 --iters 1 --warmup 0 --verbose 2>&1)
echo "$out"
check "--precision tf32,fp32: naive and flash rows in each mode (4)" \
  test "$(grep -cE '^(naive|flash) +1 +1 +32 +16 +(tf32|fp32) +yes +[0-9]' <<<"$out")" -eq 4
check "the header says what the dtype column holds" grep -q '^# dtype: the dtype column is the precision mode' <<<"$out"

run_ok "suite exits 0" "$TLM" attention --suite pytorch-attention --device cpu --max-seq 256 --iters 1 --warmup 0 --verbose
check "suite: naive+flash at seq 256 for d 16,32,64,128" test "$(grep -cE '^(naive|flash) +8 +1 +256 +(16|32|64|128) +fp32 +yes +[0-9]' <<<"$out")" -eq 8
check "suite: the 32 larger rows skipped" test "$(grep -c 'skipped: seq > --max-seq (256) on cpu' <<<"$out")" -eq 32
check "suite named in the header" grep -q '^# suite: pytorch-attention' <<<"$out"

expect_fail "d_head must be even and >= 2" "$TLM" attention --device cpu --d-head 15
expect_fail "--d-head: 0 is out of range" "$TLM" attention --device cpu --d-head 0
expect_fail "--d-head: -64 is out of range" "$TLM" attention --device cpu --d-head -64
expect_fail "--context-length: 0 is out of range" "$TLM" attention --device cpu --context-length 0
expect_fail "--context-length: -8 is out of range" "$TLM" attention --device cpu --context-length 128,-8
expect_fail "--batch-size: 0 is out of range" "$TLM" attention --device cpu --batch-size 0
expect_fail "--heads: -1 is out of range" "$TLM" attention --device cpu --heads -1
expect_fail "--iters: 0 is out of range" "$TLM" attention --device cpu --iters 0
expect_fail "--suite: unknown value 'foo'" "$TLM" attention --device cpu --suite foo
expect_fail "--impl: unknown value 'fast'" "$TLM" attention --device cpu --impl fast
expect_fail "unknown dtype 'fp8'" "$TLM" attention --device cpu --dtype fp32,fp8
expect_fail "unknown dtype 'tf32' (known: fp32, bf16, fp16; tf32: --precision)" "$TLM" attention --device cpu --dtype tf32
expect_fail "unknown precision 'fp8'" "$TLM" attention --device cpu --precision fp8
expect_fail "--dtype conflicts with --precision" "$TLM" attention --device cpu --dtype fp32 --precision tf32
expect_fail "neither on nor off" "$TLM" attention --device cpu --causal yes
expect_fail "unknown format 'xml'" "$TLM" attention --device cpu --format xml
expect_fail "unexpected argument 'extra'" "$TLM" attention --device cpu extra
for rc_case in "--d-head 15" "--suite foo" "--context-length 0"; do
  "$TLM" attention --device cpu $rc_case >/dev/null 2>&1
  check "exit 2 for $rc_case" test $? -eq 2
done
expect_ok "help" "$TLM" attention --help
help=$("$TLM" attention --help)
for flag in --suite --batch-size --heads --context-length --d-head --precision --dtype --causal --impl --iters --warmup --max-seq \
            --device --threads --seed --format --out; do
  check "help lists $flag" grep -q -- "$flag" <<<"$help"
done
check "help says the suite is causal" grep -q 'causal' <<<"$(grep -A4 'pytorch-attention ' <<<"$help")"
finish
