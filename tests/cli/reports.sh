#!/usr/bin/env bash
# reports.sh — reports that fit (report.h): every reporting command's default table is at most 160
# characters wide with at most 5 `#` lines above its first table, --wide shows more columns and
# --verbose more header lines; --format csv is a header row and data rows only (Python's csv module
# reads it with no options; pandas too where it is installed), the provenance in FILE.meta.json and each
# further table in FILE.<table>.csv; CSV on stdout is as plain; a tiny model's memory table shows
# non-zero sizes in their units.
source "$(dirname "$0")/lib.bash"
cd "$TMP" || exit 1

python3 - <<'EOF'
import random, array
r = random.Random(5); a = array.array('H'); x = 0
for i in range(6000):
    x = (x + 1) % 200 if r.random() < 0.8 else r.randrange(256); a.append(x)
open('train.bin', 'wb').write(a[:5000].tobytes()); open('val.bin', 'wb').write(a[5000:].tobytes())
EOF

# name, then the command's arguments (each a small run on the CPU)
declare -A CMDS=(
  [bench]="bench --device cpu --model tiny --context-length 16 --batch-size 2 --warmup 0 --steps 1 --pass train,forward"
  [memory]="memory --device cpu --model tiny --context-length 16 --batch-size 2 --top 3"
  [profile]="profile --device cpu --model tiny --context-length 16 --batch-size 2 --warmup 0 --steps 1"
  [attention]="attention --device cpu --context-length 64 --d-head 16 --iters 1 --warmup 0"
  [layernorm]="precision layernorm"
  [accumulate]="precision accumulate --device cpu"
  [autocast]="precision autocast --device cpu"
  [allreduce]="allreduce --backend mpi --sizes 4K --iters 2 --warmup 1"
  [train]="train --device cpu --model tiny --vocab-size 256 --train-data train.bin --val-data val.bin --steps 3
           --batch-size 2 --context-length 16 --eval-every 3 --eval-batches 1 --max-grad-norm 1 --peak-tflops 1"
)

# the widest line of a table report, and the `#` lines above its first table heading (a line that is not a
# `#` line, a "## title" or blank)
widest() { awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }' <<<"$1"; }
header_lines() { awk '/^## / || /^$/ { next } /^#/ { n++; next } { exit } END { print n + 0 }' <<<"$1"; }
# reads FILE with Python's csv module: a header row, no `#` line, every row as long as the header
csv_plain() {
  python3 - "$1" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert rows and rows[0][0] and not rows[0][0].startswith("#"), rows[:1]
assert all(len(r) == len(rows[0]) for r in rows), {len(r) for r in rows}
assert not any(r and r[0].startswith("#") for r in rows)
assert len(rows) >= 2, "no data row"
try:
    import pandas
except ImportError:
    sys.exit(0)
assert len(pandas.read_csv(sys.argv[1])) == len(rows) - 1
EOF
}

for name in "${!CMDS[@]}"; do
  read -r -a args <<<"${CMDS[$name]}"
  out=$("$TLM" "${args[@]}" 2>/dev/null); rc=$?
  if [ "$name" = allreduce ] && [ $rc -ne 0 ]; then echo "skip   allreduce: no MPI here"; continue; fi
  check "$name: exit 0" test $rc -eq 0
  check "$name: the default table is at most 160 wide (widest $(widest "$out"))" test "$(widest "$out")" -le 160
  check "$name: at most 5 # lines above the table ($(header_lines "$out"))" test "$(header_lines "$out")" -le 5
  verbose=$("$TLM" "${args[@]}" --verbose 2>/dev/null)
  check "$name: --verbose shows more header lines" test "$(header_lines "$verbose")" -gt "$(header_lines "$out")"
  to_file=(--format csv --out "$name.csv"); [ "$name" = train ] && to_file=(--log "$name.csv")  # train: --log FILE.csv
  expect_ok "$name: ${to_file[*]}" "$TLM" "${args[@]}" "${to_file[@]}"
  check "$name: the CSV is plain: a header row and data rows (Python's csv module)" csv_plain "$name.csv"
  check "$name: the sidecar holds the provenance" python3 -c "
import json, sys; d = json.load(open('$name.csv.meta.json'))
assert d['tool'].startswith('tlm') and d['command'] and d['tables'], d.keys()
for t, v in d['tables'].items():
    assert v['columns'][-1]['key'] == 'error' and open(v['file']).readline().startswith(v['columns'][0]['key'])"
  for extra in "$name".csv.*.csv; do
    [ -e "$extra" ] && check "$name: the further table $extra is plain too" csv_plain "$extra"
  done
  "$TLM" "${args[@]}" --format csv > "$name-stdout.csv" 2>/dev/null
  check "$name: CSV on stdout is plain too" csv_plain "$name-stdout.csv"
done

# --wide shows the secondary columns; CSV has every column whatever the view
read -r -a args <<<"${CMDS[bench]}"
out=$("$TLM" "${args[@]}" 2>/dev/null); wide=$("$TLM" "${args[@]}" --wide 2>/dev/null)
check "bench: --wide adds the std and params columns" \
  bash -c "grep -q '^model .* std ' <<<'$wide' && ! grep -q ' std ' <<<'$out' && grep -qE '^ +M ' <<<'$wide'"
check "bench: the CSV has the secondary columns" grep -q ',fwd_ms_std,' bench.csv
check "memory: the largest allocations in a file of their own" test -s memory.csv.largest.csv
check "profile: the op table in a file of its own, with above_ceiling" grep -q ',above_ceiling,' profile.csv.ops.csv

# sizes in the unit that shows them: the tiny model's peaks are KiB or MiB, none zero
read -r -a args <<<"${CMDS[memory]}"
out=$("$TLM" "${args[@]}" 2>/dev/null)
row=$(grep -E '^tiny +16 +2 +fp32 ' <<<"$out" | head -1)
echo "$row"
check "memory: a tiny row with its sizes in KiB or MiB" grep -qE ' [0-9.]+ (KiB|MiB) ' <<<"$row"
check "memory: no size reads zero" bash -c "! grep -qE '(^| )0(\\.0+)? (B|KiB|MiB|GiB)' <<<'$row'"
check "memory: no 0.00 GiB anywhere" bash -c "! grep -q '0\\.00 GiB\\|  0\\.00 ' <<<'$out'"

finish
