# stage ddp — data-parallel training (docs/experiments.md, data parallelism) on one host of 2 or 4 GPUs, each part only when
#   its estimate fits the budget (the estimates: 4 H100, 2026-11-27), in this order:
#   tests  test_gpu_ddp under mpirun at 2 (and 4) ranks (N-rank training of the tiny model = one process:
#          fp32 within 1e-6, bf16 within one ulp, ZeRO-1 = DDP), test_gpu_comm at every GPU, test_ddp (CPU, MPI)
#   one    1 GPU: batch BATCH and each run's global batch with CUDA graphs off (as every data-parallel row
#          runs), graphs on, and the overlapped optimizer
#   modes  every --ddp mode, buckets 1,10,25,100,1000 MiB, fp32 and bf16 reductions (PRECISIONS each)
#   zero   ZeRO-1 against DDP (bucketed 25 MiB and flat): step time and the memory table; bucketed 25 MiB with
#          the overlapped optimizer (each bucket's AdamW on a background stream once its average lands)
#   torch  PyTorch DDP (bench/peers/pytorch_ddp.py; bucket 25 MiB, fp32 reduction), one run a process count
#   big    2.7B bf16, BATCH rows a rank, at BIG_CTX_2 / BIG_CTX_4 where one GPU runs out of memory and ZeRO-1's
#          rank fits (80 GB: one GPU's longest about 2500, ZeRO-1's about 3400 on 2 ranks, 3850 on 4;
#          `--max-context device` prints the plan's longest beside each row)
#   oib    bucketed 25 MiB with --optimizer-in-backward, then --optimizer-overlap, at 1, 2 (and 4) GPUs
#   ctas   2 GPUs, bucketed 25 MiB, NCCL's thread blocks capped (NCCL_MAX_CTAS=CTAS: 4,8,16)
#   extra  bf16, buckets 100 and 1000 MiB: NCCL_PROTO=Simple and TLM_SIDE_STREAM=0 (2 GPUs), the overlapped
#          optimizer and ZeRO-1, with the same call's 1-GPU rows
#   zl     bf16, buckets 25 and 1000 MiB: ZeRO 0 and 1 with the same call's 1-GPU row
#   table  ddp-side-by-side.md (bench/ddp_table.py; it reads every file above)
# stage ddp-cpu — the same on the host's cores (MPI; what CI tests) beside PyTorch DDP over gloo: small, context
#   128, global batch 8 at 1, 2 and 4 processes, fp32, bucketed 25 MiB and flat (tlm-cpu-N.json, torch-cpu-N.json)
# Pictures, where gnuplot is, from the fetched JSON: tlm plot ddp-buckets tlm-1gpu.json tlm-modes-*.json
#   torch-ddp-*.json --out ddp-buckets; tlm plot ddp-scaling tlm-1gpu.json tlm-scale-*.json torch-ddp-*.json.
# Files: tests-*.txt, tlm-1gpu.json, tlm-1gpu-graphs.json, tlm-overlap-1.json, tlm-modes-N-PREC.json,
#   tlm-zero-N.json, tlm-overlap-N.json, torch-ddp-PREC-N.json, tlm-big-N.json, tlm-oib-N.json, tlm-ctas-C.json,
#   tlm-extra-*.json, tlm-zl-*.json, ddp-side-by-side.md (kept), bench-stderr.txt.
# env: DDP_PARTS (tests,one,modes,zero,torch,big,table; add oib,ctas,extra,zl) MODEL (xl) CTX (256) BATCH (4 rows
#      a rank) PRECISIONS (bf16,fp32) WARMUP (2) STEPS (5) NPROCS (2, and 4 with 4 GPUs) DP_ENV (VAR=value words
#      for every rank) BIG_CTX_2 (3072) BIG_CTX_4 (3584) CTAS (4,8,16) CPU_MODEL (small) CPU_CTX (128) CPU_BATCH (8)
needs_ddp="tree gpu2"
needs_ddp_cpu="tree"
ddp_row() { show -vE '^#|^ *$|^model|^ +(M|ms)'; } # a row's line of tlm bench's table
stage_ddp() {
  local parts=${DDP_PARTS:-tests,one,modes,zero,torch,big,table} n c p kv rc=0 E=$R/bench-stderr.txt
  local B=${BATCH:-4} nprocs=${NPROCS:-}
  [ -n "$nprocs" ] || { nprocs=2; [ "$GPUS" -ge 4 ] && nprocs=2,4; }
  nprocs=${nprocs//,/ }
  local tests=${BIN:+$BIN/tests}
  tests=${tests:-$BUILD/tests}
  local common=(--model "${MODEL:-xl}" --context-length "${CTX:-256}" --warmup "${WARMUP:-2}" --steps "${STEPS:-5}"
                --pass train --timeout 120)
  if part "$parts" tests 60 "GPU tests: test_gpu_ddp at $nprocs ranks, test_gpu_comm, test_ddp"; then
    for n in $nprocs; do
      x timeout 120 bash tests/test_comm_mpirun.sh "$n" "$tests/test_gpu_ddp" > "$R/tests-gpu-ddp-np$n.txt" 2>&1 || rc=1
      echo "test_gpu_ddp np$n: $(grep -E '[0-9]+ passed' "$R/tests-gpu-ddp-np$n.txt" 2>/dev/null | tail -1)"
    done
    x timeout 120 bash tests/test_comm_mpirun.sh "$GPUS" "$tests/test_gpu_comm" > "$R/tests-gpu-comm.txt" 2>&1 || rc=1
    if [ -z "${BIN:-}" ]; then
      for n in 2 4; do
        x timeout 120 bash tests/test_comm_mpirun.sh $n "$BUILD/tests/test_ddp" > "$R/tests-ddp-np$n.txt" 2>&1 || rc=1
      done
    fi
    grep -hE 'FAIL|[0-9]+ passed|skipped' "$R"/tests-*.txt 2>/dev/null
  fi
  if part "$parts" one 100 "1 GPU: batch $B and each run's global batch (graphs off), graphs on, overlapped optimizer"; then
    local batches=$B
    for n in $nprocs; do batches=$batches,$((B * n)); done
    x "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$batches" --cuda-graph off -f json -o "$R/tlm-1gpu.json" 2>> "$E" | ddp_row
    x "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$B" --cuda-graph on -f json -o "$R/tlm-1gpu-graphs.json" 2>> "$E" | ddp_row
    x "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$B" --cuda-graph off --optimizer-overlap -f json \
      -o "$R/tlm-overlap-1.json" 2>> "$E" | ddp_row
    dev_pack
  fi
  for p in $(echo "${PRECISIONS:-bf16,fp32}" | tr , ' '); do
    for n in $nprocs; do
      part "$parts" modes $((100 + 10 * n)) "$n GPUs, $p: every mode, buckets 1,10,25,100,1000 MiB, fp32 and bf16 reductions" || continue
      mpi "$n" "$TLM" bench "${common[@]}" -P "$p" -b $((B * n)) --ddp naive,flat,overlap,bucketed \
        --bucket-mb 1,10,25,100,1000 --grad-reduce-dtype fp32,bf16 -f json -o "$R/tlm-modes-$n-$p.json" 2>> "$E" | ddp_row
      dev_pack
    done
  done
  for n in $nprocs; do
    part "$parts" zero $((110 + 10 * n)) "$n GPUs: ZeRO-1 against DDP (bucketed 25 MiB, flat), the overlapped optimizer" || continue
    mpi "$n" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((B * n)) --ddp bucketed,flat --bucket-mb 25 --zero 0,1 \
      -f json -o "$R/tlm-zero-$n.json" 2>> "$E" | ddp_row
    mpi "$n" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((B * n)) --ddp bucketed --bucket-mb 25 \
      --grad-reduce-dtype fp32,bf16 --optimizer-overlap -f json -o "$R/tlm-overlap-$n.json" 2>> "$E" | ddp_row
    dev_pack
  done
  for p in $(echo "${PRECISIONS:-bf16,fp32}" | tr , ' '); do
    for n in 1 $nprocs; do
      part "$parts" torch 50 "PyTorch DDP, $p, $n processes" || continue
      x env PYTHONUNBUFFERED=1 timeout $((BUDGET - SECONDS > 30 ? BUDGET - SECONDS : 30)) python3 bench/peers/pytorch_ddp.py \
        --model "${MODEL:-xl}" --context-length "${CTX:-256}" --batch-size-per-rank "$B" --precision "$p" --nproc "$n" \
        --bucket-mb 25 --warmup "${WARMUP:-2}" --steps "${STEPS:-5}" --out "$R/torch-ddp-$p-$n.json" 2>&1 |
        grep -vE '^#|^$|^prec'
      dev_pack
    done
  done
  local c2=${BIG_CTX_2:-3072} c4=${BIG_CTX_4:-3584}
  if part "$parts" big 160 "2.7B bf16: 1 GPU at $c2 (and $c4; out of memory expected), then ZeRO 0 and 1"; then
    local big=(--model 2.7B -P bf16 --pass train --warmup 1 --steps 3 --max-context device --timeout 120) ctxs=$c2
    [ "$GPUS" -ge 4 ] && ctxs=$c2,$c4
    x "$TLM" bench "${big[@]}" -c "$ctxs" -b "$B" -f json -o "$R/tlm-big-1.json" 2>> "$E" | ddp_row
    for n in $nprocs; do
      c=$c2; [ "$n" -ge 4 ] && c=$c4
      mpi "$n" "$TLM" bench "${big[@]}" -c "$c" -b $((B * n)) --ddp bucketed --zero 0,1 -f json \
        -o "$R/tlm-big-$n.json" 2>> "$E" | ddp_row
    done
    dev_pack
  fi
  if part "$parts" oib 150 "the optimizer in the backward and beside it, bucketed 25 MiB, 1 and $nprocs GPUs"; then
    x "$TLM" bench "${common[@]}" -P fp32,bf16 -b "$B" --cuda-graph off --optimizer-in-backward -f json \
      -o "$R/tlm-oib-1.json" 2>> "$E" | ddp_row
    for n in $nprocs; do
      mpi "$n" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((B * n)) --ddp bucketed --bucket-mb 25 \
        --grad-reduce-dtype fp32,bf16 --optimizer-in-backward -f json -o "$R/tlm-oib-$n.json" 2>> "$E" | ddp_row
    done
    dev_pack
  fi
  if part "$parts" ctas 90 "2 GPUs, bucketed 25 MiB, NCCL_MAX_CTAS=${CTAS:-4,8,16}"; then
    for c in $(echo "${CTAS:-4,8,16}" | tr , ' '); do
      mpi 2 -x "NCCL_MAX_CTAS=$c" "$TLM" bench "${common[@]}" -P fp32,bf16 -b $((B * 2)) --ddp bucketed --bucket-mb 25 \
        -f json -o "$R/tlm-ctas-$c.json" 2>> "$E" | ddp_row
    done
    dev_pack
  fi
  if part "$parts" extra 200 "bf16, buckets 100, 1000 MiB: NCCL_PROTO=Simple, TLM_SIDE_STREAM=0, overlapped AdamW, ZeRO-1"; then
    x "$TLM" bench "${common[@]}" -P bf16 -b "$B" --cuda-graph off -f json -o "$R/tlm-extra-1.json" 2>> "$E" | ddp_row
    x "$TLM" bench "${common[@]}" -P bf16 -b "$B" --cuda-graph off --optimizer-overlap -f json \
      -o "$R/tlm-extra-overlap-1.json" 2>> "$E" | ddp_row
    for kv in NCCL_PROTO=Simple TLM_SIDE_STREAM=0; do
      mpi 2 -x "$kv" "$TLM" bench "${common[@]}" -P bf16 -b $((B * 2)) --ddp bucketed --bucket-mb 100,1000 -f json \
        -o "$R/tlm-extra-2-${kv%%=*}.json" 2>> "$E" | ddp_row
    done
    for n in $nprocs; do
      mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((B * n)) --ddp bucketed --bucket-mb 100,1000 \
        --grad-reduce-dtype fp32,bf16 --optimizer-overlap -f json -o "$R/tlm-extra-overlap-$n.json" 2>> "$E" | ddp_row
      mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((B * n)) --ddp bucketed --bucket-mb 100,1000 --zero 0,1 \
        -f json -o "$R/tlm-extra-zero-$n.json" 2>> "$E" | ddp_row
    done
    dev_pack
  fi
  if part "$parts" zl 130 "bf16, buckets 25 and 1000 MiB: ZeRO 0 and 1 (the GEMM copy kept by ZeRO-1's update)"; then
    x "$TLM" bench "${common[@]}" -P bf16 -b "$B" --cuda-graph off -f json -o "$R/tlm-zl-1.json" 2>> "$E" | ddp_row
    for n in $nprocs; do
      mpi "$n" "$TLM" bench "${common[@]}" -P bf16 -b $((B * n)) --ddp bucketed --bucket-mb 25,1000 --zero 0,1 \
        -f json -o "$R/tlm-zl-$n.json" 2>> "$E" | ddp_row
    done
  fi
  if part "$parts" table 5 "the tables (bench/ddp_table.py)"; then
    x python3 bench/ddp_table.py "$R" "$B" > /dev/null && keep ddp-side-by-side.md
  fi
  return $rc
}
stage_ddp_cpu() {
  local m=${CPU_MODEL:-small} ctx=${CPU_CTX:-128} b=${CPU_BATCH:-8} n
  # OpenBLAS 0.3.21 does not know the GPU machines' CPU model and falls back to generic kernels (4x slower)
  [ -n "${OPENBLAS_CORETYPE:-}" ] || export OPENBLAS_CORETYPE=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
  local cc=(--device cpu --model "$m" --context-length "$ctx" --warmup 1 --steps 3 --pass train)
  for n in 1 2 4; do
    say "CPU, $n process(es): tlm bench (MPI), then PyTorch DDP (gloo); global batch $b"
    if [ "$n" = 1 ]; then x "$TLM" bench "${cc[@]}" -b "$b" -f json -o "$R/tlm-cpu-1.json" | show -v '^#'
    else mpi "$n" "$TLM" bench "${cc[@]}" -b "$b" --ddp bucketed,flat -f json -o "$R/tlm-cpu-$n.json" | show -v '^#'; fi
    x python3 bench/peers/pytorch_ddp.py --device cpu --model "$m" --context-length "$ctx" --batch-size-per-rank $((b / n)) \
      --precision fp32 --nproc "$n" --bucket-mb 25 --warmup 1 --steps 3 --out "$R/torch-cpu-$n.json" 2>&1 |
      show -vE '^#|^$' | tail -2
  done
}
