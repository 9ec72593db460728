#!/usr/bin/env bash
# agree.sh — ranks that disagree are refused before any collective could hang (2 ranks under mpirun, each
# with its own command line through an app context `mpirun -np 1 tlm ... : -np 1 tlm ...`): the fingerprint
# of every flag of the command (cli_agree) names the first differing flag and the ranks' values, once, and
# every rank exits non-zero. One case per class: numerics (--beta2), data (another file of the same
# length; the same path, other content, through per-rank working directories; --init-weights alike), cadence (--eval-every,
# which used to hang until --timeout: --timeout 60 here so a regression fails instead of hanging),
# outputs (--save-every, --log to one rank only), tlm bench; ranks that agree still run, with different
# --threads (a per-process flag) and different paths to the same data.
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
ddp_tokens "$TMP"
mkdir -p "$TMP/a" "$TMP/b"
cp "$TMP/train.bin" "$TMP/a/train.bin"
python3 -c "
import sys; d = bytearray(open('$TMP/train.bin', 'rb').read()); d[1000] ^= 1
open('$TMP/b/train.bin', 'wb').write(d); open('$TMP/other.bin', 'wb').write(d)"
flags=(--oversubscribe); [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
base=(train --device cpu --model tiny --vocab-size 256 --steps 2 -b 4 -c 16 --timeout 60 --log-every 1)
t=("$TLM" "${base[@]}" --train-data "$TMP/train.bin")
# two ranks, each its own flags: pair "rank 0's extra flags" "rank 1's extra flags" (words split on spaces)
pair() { ${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${t[@]}" $1 : -np 1 "${t[@]}" $2; }
# expect_once PATTERN CMD...: exit 1 or 2, PATTERN printed exactly once (rank 0 alone prints it)
expect_once() {
  local pattern=$1 out rc n; shift
  out=$("$@" 2>&1); rc=$?
  n=$(grep -cF -- "$pattern" <<<"$out")
  if [ $rc -ne 0 ] && [ $rc -lt 3 ] && [ "$n" -eq 1 ]; then pass=$((pass + 1)); echo "ok     [exit $rc] $pattern"
  else fail=$((fail + 1)); echo "FAIL   [exit $rc, $n times] expected '$pattern' once from: $*"; echo "$out" | tail -8; fi
}
expect_once "the ranks disagree on --beta2: rank 0 has 0.95, rank 1 has 0.99" pair "--beta2 0.95" "--beta2 0.99"
expect_once "--beta2 is given to rank 1 only" pair "" "--beta2 0.99"
expect_once "the ranks disagree on --eps: rank 0 has 1e-8, rank 1 has 1e-7" pair "--eps 1e-8" "--eps 1e-7"
start=$(date +%s)
expect_once "the ranks disagree on --eval-every: rank 0 has 1, rank 1 has 2" \
  pair "--val-data $TMP/val.bin --eval-every 1" "--val-data $TMP/val.bin --eval-every 2"
check "... within 30 s (no hang until --timeout): $(( $(date +%s) - start )) s" test $(( $(date +%s) - start )) -lt 30
expect_once "--save-every is given to rank 1 only" pair "--checkpoint-dir $TMP/ck" "--checkpoint-dir $TMP/ck --save-every 1"
expect_once "--log is given to rank 0 only" pair "--log $TMP/log.csv" ""
check "... and nothing was trained nor written" test ! -e "$TMP/log.csv" -a ! -e "$TMP/ck"
t=("$TLM" "${base[@]}")
expect_once "--train-data: rank 1's file differs from rank 0's (the same size, 36000 bytes, different content)" \
  pair "--train-data $TMP/train.bin" "--train-data $TMP/other.bin"
expect_once "--train-data: rank 1's file differs from rank 0's (size 36000 bytes vs 4000 bytes)" \
  pair "--train-data $TMP/train.bin" "--train-data $TMP/val.bin"
# the same path, other content: each rank in its own working directory
out=$(${MPIRUN:-mpirun} "${flags[@]}" -np 1 -wdir "$TMP/a" "${t[@]}" --train-data train.bin : \
      -np 1 -wdir "$TMP/b" "${t[@]}" --train-data train.bin 2>&1); rc=$?
check "the same path, other content: exit $rc, named once" test $rc -ne 0 -a \
  "$(grep -c "train-data: rank 1's file differs from rank 0's (the same size" <<<"$out")" -eq 1
# --init-weights: the same path, other content (per-rank working directories), refused; other paths, the
# same content, run (below)
"$TLM" step --device cpu --model tiny --vocab-size 256 --data "$TMP/train.bin" -b 1 -c 8 --optimizer-steps 1 \
  --out-weights "$TMP/a/init.st" >/dev/null 2>&1
"$TLM" step --device cpu --model tiny --vocab-size 256 --data "$TMP/train.bin" -b 1 -c 8 --optimizer-steps 2 \
  --out-weights "$TMP/b/init.st" >/dev/null 2>&1
out=$(${MPIRUN:-mpirun} "${flags[@]}" -np 1 -wdir "$TMP/a" "${t[@]}" --train-data "$TMP/train.bin" --init-weights init.st \
      : -np 1 -wdir "$TMP/b" "${t[@]}" --train-data "$TMP/train.bin" --init-weights init.st 2>&1); rc=$?
check "--init-weights: the same path, other content: exit $rc, named once" test $rc -ne 0 -a \
  "$(grep -c "init-weights: rank 1's file differs from rank 0's (the same size" <<<"$out")" -eq 1
cp "$TMP/a/init.st" "$TMP/init-copy.st"
out=$(${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${t[@]}" --train-data "$TMP/train.bin" --init-weights "$TMP/a/init.st" : \
      -np 1 "${t[@]}" --train-data "$TMP/train.bin" --init-weights "$TMP/init-copy.st" 2>&1); rc=$?
check "--init-weights: other paths, the same content, train: exit $rc" test $rc -eq 0
[ $rc -eq 0 ] || echo "$out" | tail -5
b=("$TLM" bench --device cpu -m tiny -c 16 -b 2 -n 1 -w 0 --timeout 60)
expect_once "the ranks disagree on --steps: rank 0 has 1, rank 1 has 2" \
  ${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${b[@]}" : -np 1 "${b[@]}" -n 2
# ranks that agree run: different --threads (per process) and different paths to the same data
out=$(${MPIRUN:-mpirun} "${flags[@]}" -np 1 "${t[@]}" --threads 1 --train-data "$TMP/train.bin" : \
      -np 1 -wdir "$TMP/a" "${t[@]}" --threads 2 --train-data train.bin 2>&1); rc=$?
check "ranks that agree (--threads and the data's path aside) train: exit $rc" test $rc -eq 0
[ $rc -eq 0 ] || echo "$out" | tail -5
finish
