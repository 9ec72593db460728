#!/usr/bin/env bash
# plot.sh — `tlm plot` end to end: the memory timeline and the peak-against-context pictures, and the
# all-reduce pictures (time against size, against the process count, busbw by backend) of a
# `tlm allreduce` sweep's JSON, torch_allreduce.py's (written here in their field names; the real
# sweep is drawn by allreduce.sh) and nccl-tests' (its text through bench/peers/nccl_tests_json.py),
# rendered as PNG and SVG when gnuplot is present (skipped with a message when not); without gnuplot a
# clear error naming the Debian package; bad input (an unknown kind, a file that is not JSON, the wrong
# JSON for the kind) gives a clear error and no picture. Last, every kind of the registry (each named by
# tlm --help) drawn from sample data: its PNG at the kind's default size, each data series in its key.
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

# ---- the all-reduce pictures -------------------------------------------------------------------------------
row() { # backend nranks bytes in_place time_us busbw [status]
  printf '{"backend": "%s", "nranks": %s, "bytes": %s, "count": %s, "dtype": "fp32", "op": "sum", "in_place": %s, ' \
    "$1" "$2" "$3" $(( $3 / 4 )) "$4"
  printf '"time_us_mean": %s, "time_us_min": %s, "time_us_max": %s, "busbw_gb_per_s": %s, "wrong": 0, ' "$5" "$5" "$5" "$6"
  printf '"status": "%s", "error": null}' "${7:-ok}"
}
{
  echo '{"tool": "tlm allreduce", "mpi_algorithm": "auto", "nccl_env": "(none set)", "rows": ['
  echo "$(row mpi 2 1000000 true 120 8.3), $(row mpi 2 1000000 false 130 7.7), $(row mpi 2 100000000 true 25000 4.0),"
  echo "$(row mpi 3 1000000 true 200 6.6), $(row mpi 3 100000000 true 40000 3.3),"
  echo '{"backend": "nccl", "nranks": 2, "status": "skipped", "error": "2 processes need 2 GPUs"}]}'
} > "$TMP/ar-tlm.json"
{
  echo '{"tool": "torch_allreduce.py", "backend": "gloo", "rows": ['
  echo "$(row gloo 2 1000000 true 600 1.6), $(row gloo 2 100000000 true 43000 2.3), $(row gloo 3 1000000 true 900 1.4),"
  echo "$(row gloo 3 100000000 true 70000 1.9)]}"
} > "$TMP/ar-gloo.json"
{
  echo '{"tool": "tlm allreduce", "rows": ['
  echo "$(row nccl 1 1000000 true 7 0), $(row mpi 2 1000000 true 1 1 skipped)]}"
} > "$TMP/ar-one.json"
# nccl-tests' all_reduce_perf output (the shape nccl-tests 2.19 prints) as JSON: bench/peers/nccl_tests_json.py
cat > "$TMP/nt.txt" <<'EOF'
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22803
# Using devices
#  Rank  0 Group  0 Pid   1340 on         vm device  0 [0000:00:06] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1340 on         vm device  1 [0000:00:07] NVIDIA H100 80GB HBM3
     1000000        250000     float     sum      -1    25.75   38.84   38.84       0    26.13   38.28   38.28       0
   100000000      25000000     float     sum      -1   373.26  267.91  267.91       0   372.47  268.48  268.48       0
# Avg bus bandwidth    : 153.39
EOF
NT="$(dirname "$0")/../../bench/peers/nccl_tests_json.py"
if command -v python3 >/dev/null; then
  expect_ok "nccl-tests' output as JSON" python3 "$NT" "$TMP/nt.txt" --out "$TMP/ar-nt.json"
  check "nccl-tests: 2 ranks, 2 sizes, in and out of place, NCCL 2.28.3" python3 -c "
import json, sys; d = json.load(open(sys.argv[1])); r = d['rows']
sys.exit(not (len(r) == 4 and {x['nranks'] for x in r} == {2} and d['nccl_version'] == '2.28.3' and
              [x['busbw_gb_per_s'] for x in r if x['in_place']] == [38.28, 268.48]))" "$TMP/ar-nt.json"
  expect_fail "no all_reduce_perf rows" python3 "$NT" "$TMP/bad.json"
fi
err=$(env PATH=/nonexistent TLM_GNUPLOT= "$TLM" plot allreduce-size "$TMP/ar-tlm.json" --out "$TMP/none" 2>&1)
check "allreduce-size without gnuplot: the message names gnuplot-nox" grep -q 'gnuplot-nox' <<<"$err"
if command -v gnuplot >/dev/null || [ -n "${TLM_GNUPLOT:-}" ]; then
  expect_ok "allreduce-size: tlm and gloo" "$TLM" plot allreduce-size "$TMP/ar-tlm.json" "$TMP/ar-gloo.json" --out "$TMP/ars"
  check "allreduce-size: PNG written (PNG signature)" \
    test "$(head -c 8 "$TMP/ars.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a
  check "allreduce-size: tlm's line at 2 ranks" grep -q '>tlm mpi (auto), 2 ranks<' "$TMP/ars.svg"
  check "allreduce-size: gloo's line at 3 ranks" grep -q '>torch gloo, 3 ranks<' "$TMP/ars.svg"
  check "allreduce-size: 2 lines of tlm's, 2 of gloo's, no more (out-of-place and skipped rows left out)" \
    test "$(grep -oE '>[^<]*, [0-9]+ ranks?<' "$TMP/ars.svg" | sort -u | wc -l)" -eq 4
  check "allreduce-size: the sizes as tics" grep -q '>100 MB<' "$TMP/ars.svg"
  expect_ok "allreduce-nproc" "$TLM" plot allreduce-nproc "$TMP/ar-tlm.json" "$TMP/ar-gloo.json" --out "$TMP/arn"
  check "allreduce-nproc: a line per size and implementation" \
    test "$(grep -oE '>(tlm mpi \(auto\)|torch gloo), 1(00)? MB<' "$TMP/arn.svg" | sort -u | wc -l)" -eq 4
  expect_ok "allreduce-backends" "$TLM" plot allreduce-backends "$TMP/ar-tlm.json" "$TMP/ar-gloo.json" --out "$TMP/arb"
  check "allreduce-backends: a panel per process count" test "$(grep -oE '>[23] ranks<' "$TMP/arb.svg" | sort -u | wc -l)" -eq 2
  check "allreduce-backends: the busbw axis named" grep -q 'busbw (GB/s)' "$TMP/arb.svg"
  if [ -s "$TMP/ar-nt.json" ]; then
    expect_ok "allreduce-size: tlm and nccl-tests" "$TLM" plot allreduce-size "$TMP/ar-tlm.json" "$TMP/ar-nt.json" \
      --out "$TMP/arnt" --only svg
    check "allreduce-size: nccl-tests' line at 2 ranks" grep -q '>nccl-tests, 2 ranks<' "$TMP/arnt.svg"
  fi
  cp "$TMP/ar-tlm.json" "$TMP/ar-tlm2.json"
  expect_ok "the same implementation from two files" "$TLM" plot allreduce-size "$TMP/ar-tlm.json" "$TMP/ar-tlm2.json" \
    --out "$TMP/ar2" --only svg
  check "the same implementation from two files: the second named by its file" \
    grep -q 'tlm mpi (auto) \[ar-tlm2.json\], 2 ranks' "$TMP/ar2.svg"
  expect_fail "is not an all-reduce result" "$TLM" plot allreduce-size "$T" --out "$TMP/bad"
  expect_fail "is not an all-reduce result" "$TLM" plot allreduce-backends "$TMP/r.json" --out "$TMP/bad"
  expect_fail "no row of 2 or more ranks" "$TLM" plot allreduce-backends "$TMP/ar-one.json" --out "$TMP/bad"
  sed 's/"ok"/"failed"/g' "$TMP/ar-gloo.json" > "$TMP/ar-failed.json"
  expect_fail "no in-place row that ran" "$TLM" plot allreduce-nproc "$TMP/ar-failed.json" --out "$TMP/bad"
  check "no all-reduce picture after bad input" test -z "$(ls "$TMP" | grep '^bad\.\(png\|svg\)')"
else
  echo "skip   the all-reduce pictures: gnuplot is not installed (Debian: apt-get install gnuplot-nox)"
fi

# ---- every kind of the registry, drawn at its default size from sample data ----------------------------------------
# tlm --help lists them all; each kind's PNG has the kind's size and each data series is named in its SVG
KINDS="memory-timeline memory-context loss-curve allreduce-size allreduce-nproc allreduce-backends ddp-buckets ddp-scaling"
for k in $KINDS; do check "tlm --help lists plot kind $k" grep -q -- "$k" <<<"$("$TLM" --help)"; done
check "tlm --help names 8 plot kinds" test "$("$TLM" --help | grep -oE '(memory|loss|allreduce|ddp)-[a-z]+' | sort -u | wc -l)" -eq 8
printf '%s\n' 'import array, random' 'r = random.Random(5); a = array.array("H"); x = 0' \
  'for i in range(6000):' '    x = (x + 1) % 200 if r.random() < 0.8 else r.randrange(256); a.append(x)' \
  'open("'"$TMP"'/tr.bin", "wb").write(a[:5000].tobytes()); open("'"$TMP"'/va.bin", "wb").write(a[5000:].tobytes())' |
  python3 -
expect_ok "a 4-step training log" "$TLM" train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/tr.bin" \
  --val-data "$TMP/va.bin" --steps 4 --batch-size 2 --context-length 16 --eval-every 2 --eval-batches 1 --log "$TMP/loss.json"
brow() { # ranks batch ddp bucket_mb step_ms: a tlm bench row of the train pass
  printf '{"model": "tiny", "context_length": 32, "batch_size": %s, "precision": "fp32", "pass": "train", "ranks": %s, ' "$2" "$1"
  printf '"ddp": "%s", "bucket_mb": %s, "grad_reduce_dtype": "fp32", "zero": 0, "cuda_graphs": false, "step_ms_mean": %s, ' \
    "$3" "$4" "$5"
  printf '"tokens_per_s": %s, "status": "ok"}' "$(( $2 * 32 * 1000 / $5 ))"
}
echo "{\"tool\": \"tlm bench\", \"device\": \"cpu\", \"rows\": [$(brow 2 4 bucketed 1 52), $(brow 2 4 bucketed 25 45),
  $(brow 2 4 bucketed 100 49), $(brow 3 6 bucketed 25 47)]}" > "$TMP/ddp.json"
echo "{\"tool\": \"tlm bench\", \"device\": \"cpu\", \"rows\": [$(brow 1 2 none null 40), $(brow 1 4 none null 75),
  $(brow 1 6 none null 110)]}" > "$TMP/ddp-one.json"
# kind | inputs | PNG width x height | what each series' key says
cases=(
  "memory-timeline|$T|1200x700|parameters;activations;held from the device"
  "memory-context|$TMP/r.json|1200x700|tlm tiny fp32 train"
  "loss-curve|$TMP/loss.json|1400x600|tiny* fp32 train;tiny* fp32 validation"
  "allreduce-size|$TMP/ar-tlm.json $TMP/ar-gloo.json|1200x700|tlm mpi (auto), 2 ranks;torch gloo, 3 ranks"
  "allreduce-nproc|$TMP/ar-tlm.json $TMP/ar-gloo.json|1200x700|tlm mpi (auto), 1 MB;torch gloo, 100 MB"
  "allreduce-backends|$TMP/ar-tlm.json $TMP/ar-gloo.json|1380x580|tlm mpi (auto);torch gloo"
  "ddp-buckets|$TMP/ddp.json $TMP/ddp-one.json|920x640|tlm, 2 processes, fp32 reduction;tlm, 3 processes, fp32 reduction;tlm, 1 process, 2 rows: 40.0 ms"
  "ddp-scaling|$TMP/ddp.json $TMP/ddp-one.json|1200x700|against 1 process with a rank's rows;against 1 process with the whole batch;ideal (N-fold)"
)
png_size() { python3 -c "import struct, sys; d = open(sys.argv[1], 'rb').read(24)
assert d[:8] == b'\x89PNG\r\n\x1a\n' and d[12:16] == b'IHDR'; print('%dx%d' % struct.unpack('>II', d[16:24]))" "$1"; }
if command -v gnuplot >/dev/null || [ -n "${TLM_GNUPLOT:-}" ]; then
  for c in "${cases[@]}"; do
    IFS='|' read -r kind inputs size series <<<"$c"
    # shellcheck disable=SC2086 # the inputs are words
    expect_ok "$kind: drawn" "$TLM" plot "$kind" $inputs --out "$TMP/k-$kind"
    check "$kind: the PNG is ${size} (got $(png_size "$TMP/k-$kind.png" 2>&1)) and not blank ($(stat -c %s "$TMP/k-$kind.png") bytes)" \
      test "$(png_size "$TMP/k-$kind.png" 2>&1)" = "$size" -a "$(stat -c %s "$TMP/k-$kind.png")" -gt 5000
    IFS=';' read -ra names <<<"$series"
    for name in "${names[@]}"; do
      check "$kind: the series '$name' is drawn" grep -qF -- "$name" "$TMP/k-$kind.svg"
    done
  done
  check "every kind drawn" test "$(ls "$TMP"/k-*.png | wc -l)" -eq 8
else
  echo "skip   every kind: gnuplot is not installed (Debian: apt-get install gnuplot-nox)"
fi
finish
