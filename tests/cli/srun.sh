#!/usr/bin/env bash
# srun.sh — tlm under Slurm's srun instead of mpirun ("mpirun and srun both work"), on a private
# one-node Slurm cluster this script starts and stops itself: slurmctld and slurmd from Debian's slurmctld and
# slurmd packages (tools/install-deps.sh installs them when root), auth/none, its own ports, spool and logs
# under $TMP, the node's CPUs oversubscribed. Open MPI joins srun's tasks through PMIx (srun --mpi=pmix).
# Checks: tlm allreduce over 2 tasks (checked results, the ranks named in the header); tasks started without
# PMIx refused by name; --sweep refused under srun; tlm train over 2 tasks gives one process's weights; a
# killed task and a stopped (hung) task end the run with a message naming them, the last checkpoint intact
# (it resumes with 2 tasks); tlm bench's data-parallel rows. Exits 77 (skipped) without root or Slurm, or where
# the cluster does not come up (the message and its logs say why).
source "$(dirname "$0")/lib.bash"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
for prog in srun slurmctld slurmd; do
  command -v $prog >/dev/null 2>&1 || { echo "skipped: no $prog (Debian's slurm-client, slurmctld, slurmd)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skipped: the private Slurm cluster's slurmd runs as root"; exit 77; }

# ---- the private cluster ----------------------------------------------------------------------------------------
host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$TMP/slurm/ctld" "$TMP/slurm/d"
export SLURM_CONF=$TMP/slurm/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=tlmtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$TMP/slurm/ctld
SlurmdSpoolDir=$TMP/slurm/d
SlurmctldPidFile=$TMP/slurm/ctld.pid
SlurmdPidFile=$TMP/slurm/d.pid
SlurmctldLogFile=$TMP/slurm/ctld.log
SlurmdLogFile=$TMP/slurm/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=tlm Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
stop_cluster() {
  local f
  for f in "$TMP/slurm/d.pid" "$TMP/slurm/ctld.pid"; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  sleep 0.5
  rm -rf "$TMP"
}
trap stop_cluster EXIT
# a cluster that does not come up is this machine's Slurm, not tlm: skipped, saying why
slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || { echo "skipped: the private Slurm cluster did not start"; exit 77; }
for _ in $(seq 1 100); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
if ! sinfo -h -o %T 2>/dev/null | grep -q idle; then
  echo "skipped: the private Slurm cluster's node is not idle after 20 s:"; sinfo; tail -5 "$TMP"/slurm/*.log; exit 77
fi
srun --mpi=list 2>&1 | grep -q pmix || { echo "skipped: this Slurm has no PMIx plugin (srun --mpi=list)"; exit 77; }
SRUN=(timeout 120 srun --mpi=pmix --kill-on-bad-exit=0)
echo "ok     a private Slurm cluster on $host, ports $port-$((port + 1))"

# ---- tlm allreduce ----------------------------------------------------------------------------------------------
for dtype in fp32 bf16; do
  run_ok "srun -n 2 --mpi=pmix tlm allreduce --backend mpi --dtype $dtype: checked sizes" \
    "${SRUN[@]}" -n 2 "$TLM" allreduce --backend mpi --dtype $dtype --sizes 1MB,1000002 --iters 3 --warmup 1 --verbose
  check "allreduce $dtype: 4 rows (2 sizes, in and out of place), none wrong" \
    test "$(grep -cE "^mpi +2 .* $dtype .* 0\$" <<<"$out")" -eq 4
done
check "allreduce: the header names 2 ranks on 1 host" grep -q '^# ranks: 2 ranks on 1 host' <<<"$out"
check "allreduce: OK" grep -q '^# result: OK' <<<"$out"
expect_fail "srun started 2 tasks without a process-management interface for MPI" \
  timeout 60 srun --mpi=none -n 2 "$TLM" allreduce --backend mpi --sizes 1MB
expect_fail "--sweep starts mpirun itself: run it without mpirun, srun or mpiexec" \
  "${SRUN[@]}" -n 2 "$TLM" allreduce --sweep --backend mpi --nproc 2

# ---- tlm train: one process's weights; a task that dies or hangs --------------------------------------------------
ddp_tokens "$TMP"
args=(train --device cpu --model tiny --vocab-size 256 --train-data "$TMP/train.bin" --val-data "$TMP/val.bin"
      --steps 6 --batch-size 12 --context-length 32 --lr-max 5e-3 --warmup-iters 2 --max-grad-norm 0.5
      --eval-every 3 --eval-batches 2 --log-every 1 --save-every 3)
weights() { echo "$TMP/$1/step-0000000$2/weights.safetensors"; }
expect_ok "one process, global batch 12, 6 steps" "$TLM" "${args[@]}" --checkpoint-dir "$TMP/one"
expect_ok "srun -n 2: the same run, bucketed" "${SRUN[@]}" -n 2 "$TLM" "${args[@]}" --checkpoint-dir "$TMP/two"
check "srun -n 2: the same weights as one process (rtol 1e-6)" \
  "$TLM" compare --rtol 1e-6 "$(weights two 6)" "$(weights one 6)"

# task 1's pid (the argument, srun's pid, unused): a tlm whose environment says SLURM_PROCID=1 and names this cluster
task_pid() {
  local p
  for p in $(pgrep -x tlm); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" || continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'SLURM_PROCID=1' && { echo "$p"; return; }
  done
}
long=("${args[@]/--steps/--eval-batches}" --steps 100000 --timeout 3)
ddp_faults task_pid "${SRUN[@]}" -n 2

# ---- tlm bench ------------------------------------------------------------------------------------------------------
run_ok "srun -n 2 tlm bench: bucketed and flat, ZeRO 0 and 1" \
  "${SRUN[@]}" -n 2 "$TLM" bench --device cpu -m tiny -c 32 -b 4 -w 1 -n 2 --ddp bucketed,flat --zero 0,1
check "bench: 4 rows of 2 ranks" test "$(grep -cE '^tiny .* 2 (bucketed|flat) ' <<<"$out")" -eq 4
finish
