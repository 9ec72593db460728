# stage allreduce — `tlm allreduce` on the machine's GPUs and CPU cores: the communication tests
#   (NCCL on the GPUs present, MPI under mpirun, the fault test), NCCL through tlm (world size 1 on one GPU:
#   a sanity run; every process count up to the GPUs otherwise, and NCCL's network transport as between
#   machines), the MPI communicator on the cores beside torch.distributed's gloo (target: MPI >= 2x gloo at
#   100 MB and 1 GB for 2 and 4 processes), MPI_Allreduce alone, Open MPI's algorithms, torch.distributed
#   NCCL, nccl-tests' all_reduce_perf when carried (.devdeps/all_reduce_perf from tools/pack-device-deps.sh
#   --bin --nccl-tests DIR, or NCCL_TESTS_BIN), and the table last (bench/allreduce_table.py). Runs without a
#   GPU too (the CPU figures: AR_PARTS=mpi,gloo,table NPROC=2).
# Files: tests.log, tlm-nccl-1.json, tlm-nccl.json, tlm-nccl-net.json, tlm-mpi.json, tlm-mpi-plain.json,
#   torch-gloo.json, torch-nccl.json, tlm-mpi-alg-N.json, nccl-tests.txt, allreduce-side-by-side.md (kept).
# env: AR_PARTS (test,nccl,mpi,mpi-plain,gloo,algs,torch-nccl,nccl-tests,table) SIZES (1MB,10MB,100MB,1GB: the
#      seeds') NPROC (2,4,6) ITERS (10) WARMUP (5) DTYPE (fp32) ALGS (4,6,3: coll_tuned_allreduce_algorithm:
#      ring, rabenseifner, recursive doubling; at ALG_SIZES 100MB,1GB and ALG_NPROC 2,4)
needs_allreduce="tree"
stage_allreduce() {
  local parts=${AR_PARTS:-test,nccl,mpi,mpi-plain,gloo,algs,torch-nccl,nccl-tests,table} rc=0 counts alg n
  local common=(--sizes "${SIZES:-1MB,10MB,100MB,1GB}" --iters "${ITERS:-10}" --warmup "${WARMUP:-5}" --dtype "${DTYPE:-fp32}")
  local np=${NPROC:-2,4,6} tests=${BIN:+$BIN/tests}
  tests=${tests:-$BUILD/tests}
  if part "$parts" test 60 "tests: NCCL on the GPUs present, MPI under mpirun"; then
    ar_test() { echo "-- $*" >> "$R/tests.log"; x "$@" >> "$R/tests.log" 2>&1 || rc=1; }
    [ -z "${BIN:-}" ] && ar_test ctest --test-dir "$BUILD" -R 'test_gpu_comm' --output-on-failure
    [ "$GPUS" -gt 1 ] && ar_test bash tests/test_comm_mpirun.sh "$GPUS" "$tests/test_gpu_comm"
    if [ -z "${BIN:-}" ]; then
      ar_test bash tests/test_comm_mpirun.sh 4 "$BUILD/tests/test_comm"
      ar_test bash tests/test_comm_fault.sh "$BUILD/tests/test_comm"
    fi
    grep -E '^-- |[0-9]+ passed|tests passed|Failed|Skipped|skipped' "$R/tests.log"
  fi
  if [ "$GPUS" -ge 1 ] || dry; then
    if part "$parts" nccl 60 "tlm allreduce, NCCL: world size 1 (busbw 0 by definition) and up to $GPUS GPUs"; then
      mpi 1 "$TLM" allreduce --backend nccl "${common[@]}" -f json -o "$R/tlm-nccl-1.json" 2>&1 |
        grep -E '^nccl|^# (devices|links|result)'
      if [ "$GPUS" -ge 2 ]; then
        counts=$(seq -s, 2 "$GPUS")
        x "$TLM" allreduce --sweep --backend nccl --nproc "$counts" "${common[@]}" -f json -o "$R/tlm-nccl.json" 2>&1 |
          grep -E '^nccl|^# result'
        say "NCCL's network transport, as between machines (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"
        x env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$TLM" allreduce --sweep --backend nccl --nproc "$counts" \
          "${common[@]}" -f json -o "$R/tlm-nccl-net.json" 2>&1 | show -E '^nccl|^# result'
      fi
    fi
  else
    say "no GPU: the NCCL parts are skipped"
  fi
  if part "$parts" mpi 90 "tlm allreduce, MPI on $CORES cores at $np processes (--mpi-algorithm auto)"; then
    x "$TLM" allreduce --sweep --backend mpi --nproc "$np" "${common[@]}" -f json -o "$R/tlm-mpi.json" 2>&1 |
      grep -E '^mpi|^# result|skipped|failed'
  fi
  if part "$parts" mpi-plain 90 "tlm allreduce, MPI_Allreduce only (--mpi-algorithm mpi)"; then
    x "$TLM" allreduce --sweep --backend mpi --mpi-algorithm mpi --nproc "$np" "${common[@]}" -f json \
      -o "$R/tlm-mpi-plain.json" 2>&1 | show -E '^mpi|^# result|skipped|failed'
  fi
  if part "$parts" gloo 90 "torch.distributed gloo at $np processes"; then
    x env PYTHONUNBUFFERED=1 python3 bench/peers/torch_allreduce.py --backend gloo --nproc "$np" "${common[@]}" \
      -f json -o "$R/torch-gloo.json" 2>&1 | show -E '^gloo|Error|error' | head -40
  fi
  if [ -n "${ALGS-4,6,3}" ] && part "$parts" algs 120 "Open MPI's all-reduce algorithms ${ALGS-4,6,3}"; then
    local algs=${ALGS-4,6,3}
    for alg in ${algs//,/ }; do
      x env TLM_MPIRUN_FLAGS="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm $alg" \
        "$TLM" allreduce --sweep --backend mpi --nproc "${ALG_NPROC:-2,4}" --sizes "${ALG_SIZES:-100MB,1GB}" \
        --iters "${ITERS:-10}" --warmup "${WARMUP:-5}" --dtype "${DTYPE:-fp32}" -f json -o "$R/tlm-mpi-alg-$alg.json" 2>&1 |
        grep -E '^mpi|^# result'
    done
  fi
  if { [ "$GPUS" -ge 1 ] || dry; } && part "$parts" torch-nccl 60 "torch.distributed NCCL"; then
    x env PYTHONUNBUFFERED=1 python3 bench/peers/torch_allreduce.py --backend nccl --nproc "$(seq -s, 1 "$((GPUS > 0 ? GPUS : 1))")" \
      "${common[@]}" -f json -o "$R/torch-nccl.json" 2>&1 | show -E '^nccl|Error|error' | head -20
  fi
  local nt=${NCCL_TESTS_BIN:-.devdeps/all_reduce_perf}
  if { [ "$GPUS" -ge 1 ] || dry; } && part "$parts" nccl-tests 30 "nccl-tests all_reduce_perf ($nt)"; then
    if [ -x "$nt" ] || dry; then
      for n in $(seq 1 "$((GPUS > 0 ? GPUS : 1))"); do # the seeds' sizes exactly: 10^6 .. 10^9 bytes; one process, -g N
        x "$nt" -b 1000000 -e 1000000000 -f 10 -g "$n" -n "${ITERS:-10}" -w "${WARMUP:-5}" -c 1 >> "$R/nccl-tests.txt" 2>&1
      done
      grep -E '^ +[0-9]|Avg bus' "$R/nccl-tests.txt" 2>/dev/null
      x python3 bench/peers/nccl_tests_json.py "$R/nccl-tests.txt" -o "$R/nccl-tests.json" ||
        warn "nccl_tests_json.py failed (its usage: bench/peers/nccl_tests_json.py -h)"
    else
      say "no all_reduce_perf carried: nccl-tests skipped"
    fi
  fi
  if part "$parts" table 5 "side by side (in-place busbw, GB/s)"; then
    x python3 bench/allreduce_table.py "$R" && keep allreduce-side-by-side.md
  fi
  return $rc
}
