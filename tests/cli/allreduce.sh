#!/usr/bin/env bash
# allreduce.sh — `tlm allreduce` with the MPI communicator under mpirun (2 and 3 processes,
# oversubscribed): the table (one heading: only rank 0 writes), nccl-tests' columns and busbw
# formula, CSV and JSON through the report writer, bf16 and avg checked element by element, the sweep
# (mpirun started by tlm, NCCL counts beyond the GPUs skipped) and its pictures, ranks given
# different flags refused before the first all-reduce, and bad flags refused with exit 2. The MPI
# backend's all-reduce: auto (MPI_Allreduce below 256K per rank, tlm's shm schedule from it: the
# algo column), --mpi-algorithm mpi|shm and --shm-chunk, odd sizes through shm at 3 ranks.
source "$(dirname "$0")/lib.bash"
RUN=(bash "$(dirname "$0")/../test_comm_mpirun.sh")
MPI=("$TLM" allreduce --backend mpi --iters 3 --warmup 1)

run_ok "2 ranks, 2 sizes: exit 0" "${RUN[@]}" 2 "${MPI[@]}" --sizes 4K,1MB --verbose
check "4 rows: out-of-place and in-place per size, 0 wrong" \
  test "$(grep -cE '^mpi +2 +(4096|1000000) +(1024|250000) +fp32 +sum +(mpi|shm) +(no|yes) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' <<<"$out")" -eq 4
check "auto: MPI_Allreduce at 4K, tlm's shm schedule at 1MB" \
  test "$(grep -cE '^mpi +2 +4096 .* mpi +(no|yes) ' <<<"$out")" -eq 2 -a "$(grep -cE '^mpi +2 +1000000 .* shm +(no|yes) ' <<<"$out")" -eq 2
check "header: the algorithm's meaning and the shared segment" \
  grep -qE "^# links: host processes: tlm's shared-memory segment for the shm rows" <<<"$out"
check "one table heading (rank 0 alone writes)" test "$(grep -c '^backend ranks' <<<"$out")" -eq 1
check "header: ranks and hosts" grep -qE '^# ranks: 2 ranks on 1 host: .* \(ranks 0-1\)' <<<"$out"
check "header: the busbw formula and its source" grep -qF 'busbw = algbw x 2(n-1)/n for n ranks; GB/s = 10^9 bytes/s (nccl-tests' <<<"$out"
check "header: MPI's version" grep -qE '^# mpi_version: .*MPI' <<<"$out"
check "header: every rank's device" grep -qE '^# devices: ranks 0-1: host memory' <<<"$out"
check "footer: average busbw and OK" grep -qE '^# busbw_gb_per_s_avg: [0-9.]+$' <<<"$out"
check "footer: result OK" grep -qE '^# result: OK' <<<"$out"

out=$("${RUN[@]}" 3 "${MPI[@]}" -T bf16 --op avg -b 1K -e 64K -F 4 2>&1)
check "3 ranks, bf16 avg, -b 1K -e 64K -F 4: exit 0" test $? -eq 0
echo "$out" | grep -E '^mpi'
check "8 rows of 1K, 4K, 16K, 64K bf16 avg, 0 wrong" \
  test "$(grep -cE '^mpi +3 +(1024|4096|16384|65536) +[0-9]+ +bf16 +avg +mpi +(no|yes) .* 0$' <<<"$out")" -eq 8

# the shm schedule forced, odd sizes (3 elements; chunk tails; 6 chunks of 4K per rank at 3 ranks), bf16 and fp32
for dt in bf16 fp32; do
  out=$("${RUN[@]}" 3 "${MPI[@]}" --mpi-algorithm shm --shm-chunk 4K -T $dt --op avg --sizes 6,4K,24574,2MB 2>&1)
  check "3 ranks, shm, 4K chunks, $dt avg at 6 B, 4K, 24574 B, 2MB: exit 0" test $? -eq 0
  echo "$out" | grep -E '^mpi'
  check "shm: 8 rows, 0 wrong, algo shm" test "$(grep -cE "^mpi +3 +[0-9]+ +[0-9]+ +$dt +avg +shm +(no|yes) .* 0$" <<<"$out")" -eq 8
done
out=$("${RUN[@]}" 2 "${MPI[@]}" --mpi-algorithm mpi --sizes 1MB -f json 2>&1)
check "--mpi-algorithm mpi: MPI_Allreduce at 1MB" test "$(grep -cE '"algorithm":[[:space:]]+"mpi"' <<<"$out")" -eq 2
check "--mpi-algorithm mpi: recorded" grep -qE '"mpi_algorithm":[[:space:]]+"mpi"' <<<"$out"

expect_ok "CSV to a file" "${RUN[@]}" 2 "${MPI[@]}" --sizes 64K,100KB -f csv -o "$TMP/a.csv"
check "CSV: field names and 4 rows" \
  test "$(grep -c '^backend,nranks,bytes,count,dtype,op,algorithm,in_place,time_us_mean,time_us_min,time_us_max,algbw_gb_per_s,busbw_gb_per_s,wrong,status,error$' "$TMP/a.csv")" -eq 1 -a \
  "$(grep -c '^mpi,2,' "$TMP/a.csv")" -eq 4
expect_ok "JSON to a file, 3 ranks" "${RUN[@]}" 3 "${MPI[@]}" --sizes 1MB -f json -o "$TMP/a.json"
if command -v python3 >/dev/null; then
  check "JSON: the fields, busbw = algbw x 2(n-1)/n, min <= mean <= max, 0 wrong" python3 -c "
import json; d = json.load(open('$TMP/a.json')); rows = d['rows']
assert d['tool'] == 'tlm allreduce' and d['nranks'] == 3 and d['backend'] == 'mpi', d
assert d['mpi_algorithm'] == 'auto' and d['shm_chunk_bytes'] == 262144 and all(r['algorithm'] == 'shm' for r in rows)
assert len(rows) == 2 and {r['in_place'] for r in rows} == {False, True}
for r in rows:
    assert r['status'] == 'ok' and r['wrong'] == 0 and r['nranks'] == 3 and r['dtype'] == 'fp32'
    assert r['bytes'] == 1000000 and r['count'] == 250000
    assert r['time_us_min'] <= r['time_us_mean'] <= r['time_us_max']
    assert abs(r['algbw_gb_per_s'] - r['bytes'] / (r['time_us_mean'] * 1e3)) <= 1e-5 * r['algbw_gb_per_s']
    assert abs(r['busbw_gb_per_s'] - r['algbw_gb_per_s'] * 2 * 2 / 3) <= 1e-5 * r['busbw_gb_per_s']
assert d['summary']['wrong'] == 0 and d['summary']['result'].startswith('OK')"
fi

# the sweep: tlm starts mpirun itself; NCCL at more processes than GPUs is a skipped row
out=$("$TLM" allreduce --sweep --nproc 2,3 --backend mpi,nccl --sizes 64K,1MB --iters 2 --warmup 1 --mpi-algorithm shm \
  -f json -o "$TMP/s.json" 2>&1)
check "sweep: exit 0" test $? -eq 0
echo "$out" | grep -E '^(mpi|nccl)|sweep'
if command -v python3 >/dev/null; then
  check "sweep JSON: mpi at 2 and 3 ranks ran (shm passed on), nccl rows skipped with the reason" python3 -c "
import json; d = json.load(open('$TMP/s.json')); rows = d['rows']
mpi = [r for r in rows if r['backend'] == 'mpi']; nccl = [r for r in rows if r['backend'] == 'nccl']
assert sorted(r['nranks'] for r in mpi) == [2, 2, 2, 2, 3, 3, 3, 3] and all(r['status'] == 'ok' and r['wrong'] == 0 for r in mpi)
assert all(r['algorithm'] == 'shm' for r in mpi) and d['mpi_algorithm'] == 'shm'
assert len(nccl) == 2 and all(r['status'] in ('skipped', 'ok') for r in nccl)
assert all('GPU' in r['error'] or 'NCCL' in r['error'] for r in nccl if r['status'] == 'skipped')
assert len(d['runs']) == 4 and d['sweep'] == 'backends mpi,nccl x processes 2,3'"
fi
expect_fail "--sweep starts mpirun itself" "${RUN[@]}" 1 "$TLM" allreduce --sweep --backend mpi --sizes 1K
if command -v gnuplot >/dev/null || [ -n "${TLM_GNUPLOT:-}" ]; then
  for k in size nproc backends; do
    expect_ok "the sweep's picture allreduce-$k" "$TLM" plot allreduce-$k "$TMP/s.json" --out "$TMP/p-$k"
    check "allreduce-$k: the PNG" test -s "$TMP/p-$k.png"
    check "allreduce-$k: the SVG names tlm's shm line" grep -q '>tlm mpi (shm)' "$TMP/p-$k.svg"
  done
fi

# ranks that were given different flags stop before the first all-reduce, every one of them
flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${MPI[@]}" --sizes 1MB : -np 1 "${MPI[@]}" --sizes 2MB 2>&1); rc=$?
check "ranks that disagree: non-zero exit ($rc)" test $rc -ne 0
check "ranks that disagree: named, with both configurations" \
  grep -qE "ranks disagree on the benchmark's configuration .*rank 0 has '.*sizes 1000000', rank 1 has '.*sizes 2000000'" <<<"$out"

expect_fail "--sizes conflicts with --minbytes" "$TLM" allreduce --backend mpi --sizes 1MB -b 1K
expect_fail "--minbytes 1048576 is larger than --maxbytes 1024" "$TLM" allreduce --backend mpi -b 1M -e 1K
expect_fail "--stepfactor: 1 is out of range" "$TLM" allreduce --backend mpi -F 1
expect_fail "unknown dtype 'fp8'" "$TLM" allreduce --backend mpi -T fp8
expect_fail "unknown reduction 'max'" "$TLM" allreduce --backend mpi --op max
expect_fail "unknown backend 'gloo'" "$TLM" allreduce --backend gloo
if ! "$TLM" --version | grep -q 'GPU present'; then # without a GPU NCCL cannot run: the MPI backend is the way
  expect_fail "on CPU processes use --backend mpi" "$TLM" allreduce --backend nccl
fi
expect_fail "--backend takes one value without --sweep" "$TLM" allreduce --backend mpi,nccl
expect_fail "--nproc goes with --sweep" "$TLM" allreduce --backend mpi --nproc 2
expect_fail "--device cpu conflicts with --backend nccl" "$TLM" allreduce --device cpu --backend nccl
expect_fail "--gpu conflicts with --backend mpi" "$TLM" allreduce --backend mpi --gpu 1
expect_fail "less than one fp32 element" "$TLM" allreduce --backend mpi --sizes 2
expect_fail "--iters: 0 is out of range" "$TLM" allreduce --backend mpi --iters 0
expect_fail "--check: " "$TLM" allreduce --backend mpi --check maybe
expect_fail "--timeout: 0 is out of range" "$TLM" allreduce --backend mpi --timeout 0
expect_fail "--sizes: " "$TLM" allreduce --backend mpi --sizes 1MB,,2MB
expect_fail "MPI counts are int" "$TLM" allreduce --backend mpi --sizes 16G
expect_fail "unknown format 'xml'" "$TLM" allreduce --backend mpi -f xml
expect_fail "--mpi-algorithm: unknown algorithm 'ring'" "$TLM" allreduce --backend mpi --mpi-algorithm ring
expect_fail "--shm-chunk: " "$TLM" allreduce --backend mpi --shm-chunk 1K
expect_fail "--mpi-algorithm conflicts with --backend nccl" "$TLM" allreduce --backend nccl --mpi-algorithm shm
expect_fail "--shm-chunk conflicts with --mpi-algorithm mpi" "$TLM" allreduce --backend mpi --mpi-algorithm mpi --shm-chunk 64K
expect_fail "the shm all-reduce needs a shared-memory segment: one rank" "$TLM" allreduce --backend mpi --mpi-algorithm shm --sizes 1K
for bad in "-F 1" "--op max" "--sizes 2" "--mpi-algorithm ring"; do
  "$TLM" allreduce --backend mpi $bad >/dev/null 2>&1
  check "exit 2 for $bad" test $? -eq 2
done
finish
