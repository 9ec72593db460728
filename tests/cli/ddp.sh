#!/usr/bin/env bash
# ddp.sh — `tlm train` and `tlm bench` over several processes (MPI on the CPU, under mpirun through
# tests/test_comm_mpirun.sh): N-rank training of the tiny model gives the weights of one process on the
# same global batch (tlm compare, rtol 1e-6) for 2 ranks bucketed and 3 ranks flat + ZeRO-1, rank 0
# alone prints and writes (one table, the log and checkpoints), a 2-rank checkpoint resumes with 2 ranks
# bit for bit and in one process (zero_ckpt.sh: ZeRO-1's checkpoints); a killed rank and a stopped (hung)
# rank end the run with a message naming them, the last checkpoint intact (it resumes); tlm bench's
# data-parallel rows (the overlapped optimizer's too) and their pictures (tlm plot ddp-buckets,
# ddp-scaling); bad input refused by name with exit 1 or 2 (a global batch that does not divide, data-parallel
# flags alone, ZeRO-1 with optimizer-in-backward or --optimizer-overlap, ranks given different flags).
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
RUN=(bash "$(dirname "$0")/../test_comm_mpirun.sh")
ddp_tokens "$TMP"
args=(train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/train.bin" --val-data "$TMP/val.bin"
      --steps 6 --batch-size 12 --context-length 32 --lr-max 5e-3 --warmup-iters 2 --max-grad-norm 0.5
      --eval-every 3 --eval-batches 2 --log-every 1 --save-every 3)
weights() { echo "$TMP/$1/step-0000000$2/weights.safetensors"; }

# ---- the same weights as one process -------------------------------------------------------------------------
val_loss() { grep -oP '"final_val_loss":\t"[0-9.]{7}' "$TMP/$1.csv.meta.json"; }  # the log's summary, 6 digits
expect_ok "one process, global batch 12, 6 steps" "$TLM" "${args[@]}" --checkpoint-dir "$TMP/one" --log "$TMP/one.csv"
out=$("${RUN[@]}" 2 "$TLM" "${args[@]}" --checkpoint-dir "$TMP/two" --log "$TMP/two.csv" 2>&1); rc=$?
check "2 ranks (bucketed, the default): exit 0 ($rc)" test $rc -eq 0
echo "$out" | grep -E '^ +[0-9]+ ' | tail -2
check "2 ranks: one log table (rank 0 alone prints), 6 rows with comm columns" \
  test "$(grep -c '^   step ' <<<"$out")" -eq 1 -a "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ ' <<<"$out")" -eq 6
check "2 ranks: the log counts every rank's tokens (6 x 12 x 32 = 2304) and names the ranks" \
  grep -qE '^6,2304,.*' "$TMP/two.csv"
M2="$TMP/two.csv.meta.json"  # the CSV log's provenance (report.h)
check "2 ranks: the log's sidecar: ranks 2, ddp bucketed, batch 12 (6 a rank)" \
  bash -c "grep -qP '^\t\"ranks\":\t2,' '$M2' && grep -qP '^\t\"ddp\":\t\"bucketed\",' '$M2' &&
           grep -qP '^\t\"batch_size\":\t12,' '$M2' && grep -qP '^\t\"batch_size_per_rank\":\t6,' '$M2'"
check "2 ranks: the same weights as one process (rtol 1e-6)" \
  "$TLM" compare --rtol 1e-6 "$(weights two 6)" "$(weights one 6)"
check "2 ranks: the same validation loss to 6 digits" \
  test "$(val_loss two)" = "$(val_loss one)" -a -n "$(val_loss one)"
out=$("${RUN[@]}" 3 "$TLM" "${args[@]/--save-every/--eval-every}" --ddp flat --zero 1 --log "$TMP/three.csv" 2>&1); rc=$?
check "3 ranks, flat, ZeRO-1: exit 0 ($rc), the validation loss of one process to 6 digits" \
  test $rc -eq 0 -a "$(val_loss three)" = "$(val_loss one)"

# ---- resume: with as many ranks, bit for bit ----------------------------------------------------------------------
expect_ok "2 ranks resume from step 3 to 6" "${RUN[@]}" 2 "$TLM" train --resume "$TMP/two/step-00000003" \
  --save-every 3 --checkpoint-dir "$TMP/two-resumed"
check "the resumed run's weights are the uninterrupted run's, bit for bit" \
  cmp -s "$(weights two 6)" "$(weights two-resumed 6)"
expect_ok "a 2-rank checkpoint resumes in one process (its global batch: zero_ckpt.sh compares the runs)" \
  "$TLM" train --resume "$TMP/two/step-00000003" --checkpoint-dir "$TMP/two-one"

# ---- a rank that dies or hangs ---------------------------------------------------------------------------------------
# rank 1's pid: a child of mpirun whose environment says OMPI_COMM_WORLD_RANK=1
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && { echo "$p"; return; }
  done
}
long=("${args[@]/--steps/--eval-batches}" --steps 100000 --timeout 3)
ddp_faults rank_pid "${RUN[@]}" 2

# ---- tlm bench ---------------------------------------------------------------------------------------------------------
out=$("${RUN[@]}" 2 "$TLM" bench --device cpu -m tiny -c 32 -b 4 -w 1 -n 2 --ddp naive,flat,overlap,bucketed \
      --bucket-mb 0.05,25 --zero 0,1 --max-context 64M -f json -o "$TMP/bench.json" 2>&1); rc=$?
check "bench, 2 ranks, 4 modes x (2 bucket sizes) x ZeRO 0/1: exit 0 ($rc)" test $rc -eq 0
if command -v python3 >/dev/null; then
  check "bench JSON: 10 rows of 2 ranks, the phases add up to the step, ZeRO-1's optimizer state about half" python3 -c "
import json; d = json.load(open('$TMP/bench.json')); rows = d['rows']
assert len(rows) == 10 and all(r['status'] == 'ok' and r['ranks'] == 2 for r in rows), rows
assert sorted({r['ddp'] for r in rows}) == ['bucketed', 'flat', 'naive', 'overlap']
for r in rows:
    parts = r['fwd_ms_mean'] + r['bwd_ms_mean'] + r['opt_ms_mean'] + r['comm_ms_mean']
    assert abs(parts - r['step_ms_mean']) <= 1e-3 * r['step_ms_mean'] + 1e-3, r
    assert 0 < r['comm_share'] < 1 and r['mem_before_opt_bytes'] > 0
z = {r['zero']: r['peak_bytes_optimizer'] for r in rows if r['ddp'] == 'flat'}
assert abs(z[1] - z[0] / 2) <= 64 * 8, z"
  check "bench --max-context 64M, 2 ranks: the plan gives ZeRO-1 (half the moments a rank) a longer context" \
    python3 -c "
import json; rows = json.load(open('$TMP/bench.json'))['rows']
mc = {(r['ddp'], r['bucket_mb'], r['zero']): r['max_context'] for r in rows}
assert all(v > 0 for v in mc.values()), mc
assert all(mc[k] > mc[(k[0], k[1], 0)] for k in mc if k[2] == 1), mc"
fi

# the data-parallel pictures from these rows and a one-process row: step against bucket size, speed-up against ranks
expect_ok "one process at a rank's rows (2) and at the global batch (4): the rows the pictures compare with" \
  "$TLM" bench --device cpu -m tiny -c 32 -b 2,4 -w 1 -n 2 -f json -o "$TMP/bench-one.json"
# rank 1 draws no weights of its own (rank 0's are broadcast): every 2-rank row's first loss is one process's
if command -v python3 >/dev/null; then
  check "bench, 2 ranks: each row's first loss is one process's at the global batch (rtol 1e-5)" python3 -c "
import json; rows = json.load(open('$TMP/bench.json'))['rows']
one = [r for r in json.load(open('$TMP/bench-one.json'))['rows'] if r['batch_size'] == 4][0]['loss_first']
assert all(abs(r['loss_first'] - one) <= 1e-5 * one for r in rows), ([r['loss_first'] for r in rows], one)"
fi
if command -v gnuplot >/dev/null || [ -n "${TLM_GNUPLOT:-}" ]; then
  expect_ok "tlm plot ddp-buckets" "$TLM" plot ddp-buckets "$TMP/bench.json" "$TMP/bench-one.json" --out "$TMP/buckets"
  check "ddp-buckets: PNG and SVG, the 2-rank line and the 1-process step named" \
    bash -c "test -s '$TMP/buckets.png' && grep -q '>tlm, 2 processes, fp32 reduction<' '$TMP/buckets.svg' &&
             grep -q '>tlm, 1 process, 2 rows: [0-9.]* ms<' '$TMP/buckets.svg'"
  expect_ok "tlm plot ddp-scaling" "$TLM" plot ddp-scaling "$TMP/bench.json" "$TMP/bench-one.json" --out "$TMP/scaling"
  check "ddp-scaling: PNG and SVG, against a rank's rows and the whole batch on one process, and the ideal line" \
    bash -c "test -s '$TMP/scaling.png' && grep -q '>tlm, fp32, against 1 process with a rank.s rows<' '$TMP/scaling.svg' &&
             grep -q '>tlm, fp32, against 1 process with the whole batch<' '$TMP/scaling.svg' &&
             grep -q 'ideal (N-fold)' '$TMP/scaling.svg'"
  expect_fail "no bucketed rows of 25 MiB (float32 reduction) of 2 or more ranks" \
    "$TLM" plot ddp-scaling "$TMP/bench-one.json" --out "$TMP/bad-scaling"
  echo '{"tool": "tlm train", "log": []}' > "$TMP/not-bench.json"
  expect_fail "is not a benchmark result" "$TLM" plot ddp-buckets "$TMP/not-bench.json" --out "$TMP/bad-buckets"
  check "no picture after bad input" test ! -e "$TMP/bad-scaling.png" -a ! -e "$TMP/bad-buckets.png"
else
  echo "skip   the data-parallel pictures: gnuplot is not installed (Debian: apt-get install gnuplot-nox)"
fi

# the overlapped optimizer: each bucket's update after its average; the same loss as the plain step
out=$("${RUN[@]}" 2 "$TLM" bench --device cpu -m tiny -c 32 -b 4 -w 1 -n 2 --ddp bucketed --bucket-mb 0.05 \
      --optimizer-overlap -f json -o "$TMP/bench-overlap.json" 2>&1); rc=$?
check "bench, 2 ranks, bucketed 0.05 MiB, --optimizer-overlap: exit 0 ($rc)" test $rc -eq 0
if command -v python3 >/dev/null; then
  check "bench --optimizer-overlap: the row says so, and its last loss is the plain bucketed row's" python3 -c "
import json
o = json.load(open('$TMP/bench-overlap.json'))['rows']
p = [r for r in json.load(open('$TMP/bench.json'))['rows'] if r['ddp'] == 'bucketed' and r['bucket_mb'] == 0.05
     and r['zero'] == 0]
assert len(o) == 1 and o[0]['status'] == 'ok' and o[0]['optimizer_overlap'] and len(p) == 1, (o, p)
lo, lp = o[0]['loss_last'], p[0]['loss_last']
assert abs(lo - lp) <= 1e-6 * abs(lp), (lo, lp)"
fi

# ---- bad input ------------------------------------------------------------------------------------------------------------
expect_fail "--batch-size 5 is the global batch: it does not divide over 2 ranks" \
  "${RUN[@]}" 2 "$TLM" train --device cpu --model tiny --train-data "$TMP/train.bin" --vocab-size 256 --steps 2 -b 5
expect_fail "--batch-size 3 is the global batch: it does not divide over 2 ranks" \
  "${RUN[@]}" 2 "$TLM" bench --device cpu -m tiny -c 16 -b 3 -n 1 -w 0
expect_fail "--ddp needs several processes: start tlm train with a launcher" \
  "$TLM" train --device cpu --model tiny --train-data "$TMP/train.bin" --vocab-size 256 --steps 2 --ddp flat
expect_fail "--zero needs several processes" "$TLM" bench --device cpu -m tiny -c 16 -n 1 --zero 1
expect_fail "--zero 1 conflicts with --optimizer-in-backward" \
  "${RUN[@]}" 2 "$TLM" bench --device cpu -m tiny -c 16 -n 1 --zero 1 --optimizer-in-backward
expect_fail "--zero 1 conflicts with --optimizer-overlap" \
  "${RUN[@]}" 2 "$TLM" bench --device cpu -m tiny -c 16 -n 1 --zero 1 --optimizer-overlap
expect_fail "--optimizer-in-backward conflicts with --optimizer-overlap" \
  "$TLM" bench --device cpu -m tiny -c 16 -n 1 --optimizer-in-backward --optimizer-overlap
expect_fail "--optimizer-overlap conflicts with --precision fp16" \
  "$TLM" bench --device cpu -m tiny -c 16 -n 1 --optimizer-overlap -P fp16
expect_fail "--zero: 2 is out of range [0, 1]" "$TLM" bench --device cpu -m tiny --zero 2
expect_fail "--bucket-mb: 0 is out of range" "$TLM" bench --device cpu -m tiny --bucket-mb 0
expect_fail "--ddp: unknown mode 'ring'" "$TLM" train --ddp ring
flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
t1=("$TLM" train --device cpu --model tiny --train-data "$TMP/train.bin" --vocab-size 256 --steps 2 -b 4)
expect_fail "the ranks disagree on --seed: rank 0 has 1, rank 1 has 2" \
  ${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${t1[@]}" --seed 1 : -np 1 "${t1[@]}" --seed 2
expect_fail "the ranks disagree on --bucket-mb: rank 0 has 1, rank 1 has 2" \
  ${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${t1[@]}" --bucket-mb 1 : -np 1 "${t1[@]}" --bucket-mb 2
# the same flags, but --resume ck names another checkpoint on each rank (their working directories differ, as
# node-local disks would): the flags' fingerprint agrees, tlm_train_session_join's check of the run refuses
mkdir -p "$TMP/w0" "$TMP/w1"
expect_ok "a checkpoint at lr-max 1e-3" "${t1[@]}" --lr-max 1e-3 --save-every 2 --checkpoint-dir "$TMP/w0/ck"
expect_ok "one at lr-max 2e-3" "${t1[@]}" --lr-max 2e-3 --save-every 2 --checkpoint-dir "$TMP/w1/ck"
expect_fail "the ranks disagree on the run's configuration: rank 0 has 'model 256 64 172 2 4 32; recipe batch 2 ctx" \
  ${MPIRUN:-mpirun} "${flags[@]}" -np 1 -wdir "$TMP/w0" "$TLM" train --resume ck --steps 4 \
  : -np 1 -wdir "$TMP/w1" "$TLM" train --resume ck --steps 4
finish
