# stage before-after — the working tree against BASE on the same GPU, alternating, into before-after.md
# The runner builds BASE (.baseline: `git archive COMMIT | tar x -C .baseline`, the commit in .baseline/.commit;
# or the carried .devdeps/base/tlm) into build-before beside the working tree. Then ROUNDS rounds, the order of
# before and after swapped every round (the machine's drift hits both alike), each version in its own
# processes: the leaderboard attention (`tlm attention --suite leaderboard --impl flash`: 16 heads, seq 16384,
# d_head 64, bf16, causal), `tlm bench --pass train` of BA_MODELS in BA_PREC and of BA_XL in fp32 (batch 4,
# context 256). A round starts only while the last round's time fits the budget. bench/before_after.py
# writes the table of medians and after/before.
# Files: before-after.md (kept), ba/{before,after}-{attn,lm,xl}-N.json.
# env: BASE (.baseline) ROUNDS (3) BA_MODELS (small,2.7B) BA_PREC (bf16) BA_XL (xl; empty: none) CTX (256)
#      BATCH (4) WARMUP (3) STEPS (10) ATTN_ITERS (20) ATTN_WARMUP (5) ATTN_D (64; 64,128 adds d_head 128)
#      BA_ATTN (1; 0: no attention) ROUND_S (90: the first round's estimate, seconds)
# stage before-after-knob — the same rounds and rows with the working tree's tlm on both sides, a knob's value
#   the only difference: before runs with KNOB_BEFORE (VAR=value words, e.g. TLM_PDL=0), after with KNOB_AFTER
#   (default: none, every knob at its default); a change kept behind a dev knob measured in one build.
#   Files: knob-ab.md (kept), ba-knob/{before,after}-*-N.json. env: as before-after, and KNOB_BEFORE, KNOB_AFTER
needs_before_after="tree base gpu"
needs_before_after_knob="tree gpu"
ba_run() { # version round [dir]
  local v=$1 r=$2 bin=$TLM out=${3:-$R/ba}
  [ "$v" = before ] && [ -z "${3:-}" ] && bin=$BASE_TLM
  [ -n "${3:-}" ] && bin="env ${KNOB_BEFORE:-} $TLM"
  [ -n "${3:-}" ] && [ "$v" = after ] && bin="env ${KNOB_AFTER:-} $TLM"
  if [ "${BA_ATTN:-1}" = 1 ]; then
    x $bin attention --device cuda --suite leaderboard --impl flash -D "${ATTN_D:-64}" -n "${ATTN_ITERS:-20}" \
      -w "${ATTN_WARMUP:-5}" --format json --out "$out/$v-attn-$r.json" > "$out/$v-attn-$r.txt" 2>&1 ||
      { tail -3 "$out/$v-attn-$r.txt"; warn "$v attention round $r failed"; }
  fi
  local lm=(--device cuda --context-length "${CTX:-256}" --batch-size "${BATCH:-4}" --warmup "${WARMUP:-3}"
            --steps "${STEPS:-10}" --pass train --format json)
  x $bin bench "${lm[@]}" --model "${BA_MODELS:-small,2.7B}" --precision "${BA_PREC:-bf16}" \
    --out "$out/$v-lm-$r.json" > "$out/$v-lm-$r.txt" 2>&1 || { tail -3 "$out/$v-lm-$r.txt"; warn "$v lm round $r failed"; }
  if [ -n "${BA_XL-xl}" ]; then
    x $bin bench "${lm[@]}" --model "${BA_XL-xl}" --precision fp32 --out "$out/$v-xl-$r.json" \
      > "$out/$v-xl-$r.txt" 2>&1 || { tail -3 "$out/$v-xl-$r.txt"; warn "$v xl round $r failed"; }
  fi
  grep -hvE '^#|^ *$' "$out/$v"-*-"$r".txt 2>/dev/null | sed "s/^/$v $r: /"
}
ba_rounds() { # [dir]: ROUNDS rounds of ba_run, the order of before and after swapped every round
  local r t0 est=${ROUND_S:-90} first second
  for r in $(seq 1 "${ROUNDS:-3}"); do
    fits "$est" "round $r of ${ROUNDS:-3}" || break
    t0=$SECONDS
    first=before second=after
    [ $((r % 2)) = 0 ] && first=after second=before
    ba_run $first "$r" ${1:+"$1"}
    ba_run $second "$r" ${1:+"$1"}
    est=$((SECONDS - t0 + 5))
  done
}
stage_before_after() {
  [ -n "${BASE_TLM:-}" ] || { warn "no baseline tlm (BASE=${BASE:-.baseline})"; return 1; }
  mkdir -p "$R/ba"
  keep before-after.md
  ba_rounds
  {
    echo "before: ${BASE:-.baseline} ($(cat "${BASE:-.baseline}/.commit" 2>/dev/null || cat .devdeps/base/.commit 2>/dev/null || echo 'commit not recorded'));" \
         "after: the working tree ($(grep '^# tree' "$R/info.txt" | cut -d' ' -f3-))"
    x python3 bench/before_after.py "$R/ba"
  } > "$R/before-after.md"
  cat "$R/before-after.md"
}
stage_before_after_knob() {
  [ -n "${KNOB_BEFORE:-}${KNOB_AFTER:-}" ] || { warn "before-after-knob: set KNOB_BEFORE or KNOB_AFTER"; return 1; }
  mkdir -p "$R/ba-knob"
  keep knob-ab.md
  ba_rounds "$R/ba-knob"
  {
    echo "before: the working tree with ${KNOB_BEFORE:-every knob at its default}; after: the same binary with" \
         "${KNOB_AFTER:-every knob at its default} ($(grep '^# tree' "$R/info.txt" | cut -d' ' -f3-))"
    x python3 bench/before_after.py "$R/ba-knob"
  } > "$R/knob-ab.md"
  cat "$R/knob-ab.md"
}
