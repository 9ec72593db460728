#!/usr/bin/env bash
# bench_smoke.sh — `tlm bench` runs a tiny sweep on the CPU in each output format, with the
# naive attention (auto on the CPU) and with --attention flash.
source "$(dirname "$0")/lib.bash"
B=("$TLM" bench --device cpu --model tiny --context-length 8,16 --batch-size 2 --warmup 1 --steps 2)
run_ok "table run exits 0" "${B[@]}"
check "table has a row per context length" test "$(grep -cE '^tiny +(8|16) +2 +fp32 ' <<<"$out")" -eq 2
check "table header names the device" grep -q '^# device: cpu' <<<"$out"
check "auto attention is naive on the CPU" test "$(grep -cE '^tiny +(8|16) +2 +fp32 +naive ' <<<"$out")" -eq 2
run_ok "--attention flash runs (exit 0)" "${B[@]}" --attention flash
check "flash rows say flash" test "$(grep -cE '^tiny +(8|16) +2 +fp32 +flash ' <<<"$out")" -eq 2
check "the units row" grep -qE '^ +ms +ms +ms$' <<<"$out"
check "the header gives the command" grep -q '^# command: tlm bench --device cpu --model tiny' <<<"$out"
expect_ok "csv to a file" "${B[@]}" --format csv --out "$TMP/r.csv"
check "csv has a field row and 2 rows after its # lines" test "$(grep -vc '^#' "$TMP/r.csv")" -eq 3
check "csv has the case fields" grep -q '^model,context_length,batch_size,precision,attention,pass,' "$TMP/r.csv"
check "csv's sidecar names the device" grep -qP '^\t"device":\t"cpu' "$TMP/r.csv.meta.json"
expect_ok "json to a file" "${B[@]}" --format json --out "$TMP/r.json" --pass forward
if command -v python3 >/dev/null; then
  check "json parses: 2 rows, the schema's fields" python3 -c "import json,sys; d=json.load(open('$TMP/r.json'))
assert len(d['rows'])==2 and d['tool']=='tlm bench' and d['device'].startswith('cpu')
assert all(r['status']=='ok' and r['fwd_ms_mean']>0 and r['bwd_ms_mean'] is None and r['peak_bytes']>0 for r in d['rows'])"
  expect_ok "json with --attention flash" "${B[@]}" --format json --out "$TMP/f.json" --pass forward --attention flash
  check "json rows say attention flash" python3 -c "import json; d=json.load(open('$TMP/f.json')); \
assert [r['attention'] for r in d['rows']]==['flash','flash']"
fi
expect_ok "help lists every flag" "$TLM" bench --help
check "help names the defaults" grep -q 'default: 5' <<<"$("$TLM" bench --help)"
check "help describes --attention" grep -q -- '--attention A' <<<"$("$TLM" bench --help)"
# --max-context: the longest context whose planned step fits in the bytes given (the plan, not run):
# the same answer as tlm memory's; "device" needs a device with a size
expect_ok "--max-context 256M" "${B[@]}" --max-context 256M -f json -o "$TMP/mc.json"
expect_ok "tlm memory --max-context 256M" "$TLM" memory --device cpu --model tiny --context-length 8 --batch-size 2 \
  --max-context 256M -f json -o "$TMP/mc-memory.json"
check "bench's max_context: one answer for both rows (same batch), > 16, tlm memory's" python3 -c "
import json
rows = json.load(open('$TMP/mc.json'))['rows']; mem = json.load(open('$TMP/mc-memory.json'))['rows']
assert len({r['max_context'] for r in rows}) == 1 and rows[0]['max_context'] > 16, rows
assert rows[0]['max_context'] == mem[0]['max_context'], (rows[0]['max_context'], mem[0]['max_context'])"
# a sweep's rows start from the weights their model and seed give, drawn once and kept (bench.h): the last row
# of a sweep (kept weights) trains to the losses of the same row run alone (weights drawn for it)
S=("$TLM" bench --device cpu --model tiny --context-length 16 --warmup 0 --steps 2 --pass train -f csv)
last_losses() { # the last row's loss_first and loss_last of a CSV report (progress lines have no commas)
  grep -v '^#' | grep , | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "loss_first") a = i
                                                                          if ($i == "loss_last") b = i }
                                           next } { l = $a " " $b } END { print l }'
}
run_ok "a sweep of 4 rows" "${S[@]}" --batch-size 2,4 --precision fp32,bf16
sweep_last=$(last_losses <<<"$out")
run_ok "its last row alone" "${S[@]}" --batch-size 4 --precision bf16
alone=$(last_losses <<<"$out")
check "the sweep's last row has the losses of the row alone ($alone)" test "${#alone}" -gt 4 -a "$sweep_last" = "$alone"
# "vs fp32" is filled whatever the order of the rows: the fp32 row after the bf16 one, the rows in the given order
V=("$TLM" bench --device cpu --model tiny --context-length 16 --batch-size 2 --warmup 0 --steps 1 --pass forward)
expect_ok "bf16 then fp32" "${V[@]}" --precision bf16,fp32 -f csv -o "$TMP/v.csv"
check "the bf16 row, first, has its speed-up over the fp32 row after it" python3 -c "
import csv
rows = list(csv.DictReader(l for l in open('$TMP/v.csv') if not l.startswith('#')))
assert [r['precision'] for r in rows] == ['bf16', 'fp32'], rows
f = lambda r: float(r['fwd_ms_mean'])
assert abs(float(rows[0]['speedup_vs_fp32']) - f(rows[1]) / f(rows[0])) < 1e-3 * f(rows[1]) / f(rows[0]), rows[0]
assert rows[1]['speedup_vs_fp32'] == '', rows[1]"
run_ok "bf16 then fp32, a table" "${V[@]}" --precision bf16,fp32
check "the table's bf16 row comes first" test "$(grep -E '^tiny +16 ' <<<"$out" | awk '{print $4}' | tr '\n' ' ')" = "bf16 fp32 "
expect_fail "--max-context device: the cpu backend has no device memory to size" "${B[@]}" --max-context device
expect_fail "--max-context: " "${B[@]}" --max-context 0
finish
