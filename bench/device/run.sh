#!/usr/bin/env bash
# bench/device/run.sh — the device runner: the named stages, in order, in one device call.
# Usage (on the GPU machine, from the repository root; carry [".devdeps"], and ".baseline" for before-after):
#   bench/device/run.sh STAGE[,STAGE...]        e.g. bench/device/run.sh tests,before-after
#   DRY=1 bench/device/run.sh STAGE[,STAGE...]  prints what each stage would run (any machine)
#   bench/device/run.sh list                    the stages and their one-line descriptions
# Each stage is a function stage_NAME in bench/device/stages/NAME.sh (or, for NAME-PART, in NAME.sh): its
# header says what it runs, the files it writes and its environment. Before the first stage the runner
# builds what the stages need (bench/device/lib.sh: the working tree into build-gpu, and .baseline into
# build-before beside it for before-after), unless .devdeps/bin.tar.xz carries binaries that run here.
# Every file goes to R (/tmp/tlm-run); $OUT gets log.txt, results.tar.xz (all of R) and the stages' main
# tables (at most 6), rewritten after every stage.
# env: BUDGET (560 s: the call's time; stages and rounds that would overrun it are skipped and said)
#      DRY (1: print, run nothing) R (/tmp/tlm-run) BUILD (build-gpu) TREE_COMMIT (the commit to name in
#      info.txt when the copy has no .git) JOBS, and each stage's own (its header).
# Exit status: 0 when every stage passed; 1 when one failed; 2 when one was skipped for want of a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGES=${1:-}
if [ -z "$STAGES" ] || [ "$STAGES" = list ] || [ "$STAGES" = -h ] || [ "$STAGES" = --help ]; then
  sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
  echo; echo "stages:"
  for f in bench/device/stages/*.sh; do grep -E '^# stage ' "$f" | sed 's/^# stage /  /'; done
  [ -n "$STAGES" ]; exit $?
fi
source bench/device/lib.sh

# each stage's file, function and needs ("tree": tlm of the working tree, "base": the baseline's,
# "gpu" / "gpu2": one / two GPUs); a stage file sets needs_NAME, default "tree gpu"
IFS=, read -r -a stages <<<"$STAGES"
need_tree=0 need_base=0
for s in "${stages[@]}"; do
  f=bench/device/stages/$s.sh
  [ -f "$f" ] || f=bench/device/stages/${s%%-*}.sh
  [ -f "$f" ] || f=bench/device/stages/${s%-*}.sh
  [ -f "$f" ] || { echo "run.sh: no stage '$s' (bench/device/run.sh list)" >&2; exit 2; }
  source "$f"
  fn=stage_${s//-/_}
  declare -F "$fn" > /dev/null || { echo "run.sh: $f has no $fn" >&2; exit 2; }
  nv=needs_${s//-/_}
  needs=${!nv-tree gpu}
  [[ " $needs " == *" tree "* ]] && need_tree=1
  [[ " $needs " == *" base "* ]] && need_base=1
done

dev_init
status=0
dev_prepare "$need_tree" "$need_base" || { warn "build failed: see build*.log in results.tar.xz"; dev_pack; exit 1; }
for s in "${stages[@]}"; do
  nv=needs_${s//-/_}
  needs=${!nv-tree gpu}
  want=0
  [[ " $needs " == *" gpu "* ]] && want=1
  [[ " $needs " == *" gpu2 "* ]] && want=2
  if [ "$GPUS" -lt "$want" ]; then
    if dry; then say "stage $s (needs $want GPU(s), $GPUS here: a real run would skip it):"
    else say "stage $s: SKIPPED: needs $want GPU(s), $GPUS here"; echo "$s skipped (GPUs)" >> "$R/stages.txt"
      [ "$status" = 0 ] && status=2; continue; fi
  else
    say "stage $s"
  fi
  t0=$SECONDS
  "stage_${s//-/_}"
  rc=$?
  echo "$s rc $rc $((SECONDS - t0)) s" >> "$R/stages.txt"
  [ "$rc" = 0 ] || status=1
  dev_pack
done
say "done"
cat "$R/stages.txt" 2>/dev/null
[ -f "$R/skipped.txt" ] && { echo "skipped:"; cat "$R/skipped.txt"; }
sleep 0.2
dev_pack
exit "$status"
