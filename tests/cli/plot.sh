#!/usr/bin/env bash
# plot.sh — `tlm plot` end to end: the memory timeline and the peak-against-context pictures rendered
# as PNG and SVG when gnuplot is present (skipped with a message when not); without gnuplot a clear
# error naming the Debian package; bad input (an unknown kind, a file that is not JSON, the wrong
# JSON for the kind) gives a clear error and no picture.
source "$(dirname "$0")/lib.bash"
M=("$TLM" memory --device cpu --model tiny --batch-size 2 --top 0)
expect_ok "a timeline and a report to draw" "${M[@]}" --context-length 16,32 --timeline "$TMP/t.json" \
  --format json --out "$TMP/r.json"
T="$TMP/t-tiny-ctx16-b2-fp32-train.json"
check "one timeline per configuration" test -s "$T" -a -s "$TMP/t-tiny-ctx32-b2-fp32-train.json"

# without gnuplot: the message names the package, nothing is written (PATH without gnuplot)
err=$(env PATH=/nonexistent TLM_GNUPLOT= "$TLM" plot memory-timeline "$T" --out "$TMP/none" 2>&1); rc=$?
check "no gnuplot: exit 1" test $rc -eq 1
check "no gnuplot: the message names gnuplot-nox" grep -q 'gnuplot-nox' <<<"$err"
check "no gnuplot: no picture" test ! -e "$TMP/none.png" -a ! -e "$TMP/none.svg"

expect_fail "unknown kind 'memory-pie'" "$TLM" plot memory-pie "$T"
expect_fail "give a kind and its JSON file" "$TLM" plot memory-timeline
echo 'not json' > "$TMP/bad.json"
if command -v gnuplot >/dev/null || [ -n "${TLM_GNUPLOT:-}" ]; then
  expect_ok "memory-timeline: PNG and SVG" "$TLM" plot memory-timeline "$T" --out "$TMP/tl"
  check "PNG written (PNG signature)" test "$(head -c 8 "$TMP/tl.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a
  check "SVG written" grep -q '<svg' "$TMP/tl.svg"
  check "SVG: the categories in the key" grep -q 'activations' "$TMP/tl.svg"
  check "SVG: the phases shaded and named" grep -q 'backward' "$TMP/tl.svg"
  expect_ok "memory-context: PNG and SVG from the report" "$TLM" plot memory-context "$TMP/r.json" --out "$TMP/ctx"
  check "memory-context: both files" test -s "$TMP/ctx.png" -a -s "$TMP/ctx.svg"
  expect_ok "--only svg" "$TLM" plot memory-timeline "$T" --out "$TMP/only" --only svg
  check "--only svg writes no PNG" test -s "$TMP/only.svg" -a ! -e "$TMP/only.png"
  expect_fail "is not JSON" "$TLM" plot memory-timeline "$TMP/bad.json" --out "$TMP/bad"
  expect_fail "is not a memory timeline" "$TLM" plot memory-timeline "$TMP/r.json" --out "$TMP/bad"
  check "no picture after bad input" test -z "$(ls "$TMP" | grep '^bad\.\(png\|svg\)')"
  check "no temporary file left behind" test -z "$(find "$TMP" -name '.*' -type f)"
else
  echo "skip   the pictures: gnuplot is not installed (Debian: apt-get install gnuplot-nox)"
fi
finish
