#!/usr/bin/env bash
# test_comm_fault.sh — faults in the communication layer (comm.h, "Faults"), under mpirun -np 3 with
# a 5 s timeout: the last rank exits with an error, hangs, or is killed before the 4th all-reduce;
# the run must end with a non-zero status, a message naming rank 2, and within the timeout (plus
# the launcher's start and stop). Each with MPI_Allreduce and with tlm's shm schedule (the others
# then wait on rank 2's counters in shared memory, not in MPI). Usage: test_comm_fault.sh path/to/test_comm
set -uo pipefail
PROG=${1:?usage: $0 path/to/test_comm}
RUN="$(dirname "$0")/test_comm_mpirun.sh"
TIMEOUT=5
pass=0 fail=0
check() {
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok     $what"; else fail=$((fail + 1)); echo "FAIL   $what"; fi
}
for algo in mpi shm; do
for mode in exit hang kill; do
  start=$(date +%s%N)
  out=$(timeout 60 bash "$RUN" 3 "$PROG" --fault "$mode" --timeout "$TIMEOUT" --algo "$algo" 2>&1); rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "--- $algo, $mode: exit $rc after $ms ms"
  grep -E '^tlm:|rank 2' <<<"$out" | head -4
  check "$algo, $mode: non-zero exit, not the 60 s guard ($rc)" test "$rc" -ne 0 -a "$rc" -ne 124
  case $mode in
    exit)
      check "exit: another rank names rank 2 and its error" \
        grep -qE '^tlm: rank [01] \(.*\): rank 2 left the run before its end \(it exited: injected fault' <<<"$out"
      check "exit: stopped at once, before the timeout would (< 4.5 s: $ms ms)" test "$ms" -lt 4500 ;;
    hang)
      check "hang: another rank names rank 2 as not arrived" \
        grep -qE '^tlm: rank [01] \(.*\): all_reduce .* did not complete within 5 s: rank 2 has not reached it' <<<"$out"
      # the two waiting ranks ask each other at once: each must still hear the other's answer
      check "hang: no waiting rank blamed" bash -c '! grep -qE "rank [01] (did not answer|has not reached)" <<<"$1"' _ "$out"
      check "hang: stopped after about the timeout ($ms ms: 4.5 s..5 s + 5 s for the launcher)" \
        test "$ms" -ge 4500 -a "$ms" -lt $(( TIMEOUT * 1000 + 5000 ))
      ;;
    kill)
      # Open MPI's mpirun ends the job at once and names the rank; a launcher that lets the others
      # run would meet the timeout's message instead
      check "kill: the rank is named (by the launcher or the timeout)" \
        grep -qE 'process rank 2 .*(signal 9|Killed)|rank 2 did not answer' <<<"$out"
      check "kill: stopped within the timeout ($ms ms)" test "$ms" -lt $(( TIMEOUT * 1000 + 5000 )) ;;
  esac
done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
