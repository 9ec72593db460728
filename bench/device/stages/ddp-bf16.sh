# stage ddp-bf16 — the bf16 data-parallel step before and after a change (such as the weight-gradient
#   GEMMs writing bf16 into the reduction's staging buffer), the working tree against BASE on the same GPUs,
#   alternating: ROUNDS rounds, the order of before and after swapped every round, each version in its own
#   processes: `tlm bench --pass train` of MODEL in bf16, BATCH rows a rank, context CTX, CUDA graphs off (as every
#   data-parallel row runs) on 1 GPU, then under mpirun on NPROC GPUs with --ddp bucketed --bucket-mb BUCKET
#   --grad-reduce-dtype bf16 (the 1-GPU row is the ratio's denominator of the same version and round).
# Files: ddpbf16/{before,after}-{1,N}-R.json and .txt (each version, GPU count and round), ddp-bf16.txt (kept:
#   every row, in the order run).
# env: BASE (.baseline) ROUNDS (3) MODEL (xl) BATCH (4 rows a rank) CTX (256) NPROC (2) BUCKET (25) WARMUP (2)
#      STEPS (5) ROUND_S (120: the first round's estimate, seconds)
needs_ddp_bf16="tree base gpu2"
ddpbf16_run() { # version round
  local v=$1 r=$2 bin=$TLM out=$R/ddpbf16 n=${NPROC:-2} B=${BATCH:-4}
  [ "$v" = before ] && bin=$BASE_TLM
  local c=(--model "${MODEL:-xl}" -P bf16 --context-length "${CTX:-256}" --warmup "${WARMUP:-2}" --steps "${STEPS:-5}"
           --pass train --cuda-graph off --timeout 120 -f json)
  x "$bin" bench "${c[@]}" -b "$B" -o "$out/$v-1-$r.json" > "$out/$v-1-$r.txt" 2>&1 ||
    { tail -3 "$out/$v-1-$r.txt"; warn "$v 1 GPU round $r failed"; }
  mpi "$n" "$bin" bench "${c[@]}" -b $((B * n)) --ddp bucketed --bucket-mb "${BUCKET:-25}" --grad-reduce-dtype bf16 \
    -o "$out/$v-$n-$r.json" > "$out/$v-$n-$r.txt" 2>&1 || { tail -3 "$out/$v-$n-$r.txt"; warn "$v $n GPUs round $r failed"; }
  grep -hvE '^#|^ *$' "$out/$v-1-$r.txt" "$out/$v-$n-$r.txt" 2>/dev/null | sed "s/^/$v $r: /" | tee -a "$R/ddp-bf16.txt"
}
stage_ddp_bf16() {
  local r v t0 est=${ROUND_S:-120} order=(before after)
  [ -n "${BASE_TLM:-}" ] || { warn "no baseline tlm (BASE=${BASE:-.baseline})"; return 1; }
  mkdir -p "$R/ddpbf16"
  keep ddp-bf16.txt
  echo "before: ${BASE:-.baseline} ($(cat "${BASE:-.baseline}/.commit" 2>/dev/null || echo 'commit not recorded'));" \
       "after: the working tree" > "$R/ddp-bf16.txt"
  for r in $(seq 1 "${ROUNDS:-3}"); do # the order swapped every round: the machine's drift hits both alike
    fits "$est" "round $r of ${ROUNDS:-3}" || break
    t0=$SECONDS
    for v in "${order[@]}"; do ddpbf16_run "$v" "$r"; done
    order=("${order[1]}" "${order[0]}")
    est=$((SECONDS - t0 + 5)) && dev_pack
  done
}
