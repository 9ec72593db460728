#!/usr/bin/env bash
# train_corpus.sh — tlm train on real English: Debian's fortunes-min corpus (tools/install-deps.sh
# installs it) as byte-level tokens (tools/make_tokens.py, vocab 256). The tiny model trained 50 steps
# must reach a validation loss below the unigram entropy of the corpus (computed here from the token
# counts): it has learned more than the letter frequencies. The JSON log holds a row per step with the
# validation loss at the evaluation steps, and `tlm plot loss-curve` draws it (when gnuplot is there).
source "$(dirname "$0")/lib.bash"
# idle OpenMP threads sleep instead of spinning: the same results, and no crawl on a busy machine
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
CORPUS=/usr/share/games/fortunes
if [ ! -d "$CORPUS" ]; then
  echo "FAIL   $CORPUS is missing: install Debian's fortunes-min (tools/install-deps.sh does)"; exit 1
fi
expect_ok "make_tokens.py: fortunes-min -> byte-level tokens" python3 tools/make_tokens.py --out "$TMP/fortunes"
touch "$TMP/ref-file"
check "make_tokens.py's files have the mode any new file gets ($(stat -c %a "$TMP/ref-file"), not mkstemp's 0600)" \
  test "$(stat -c %a "$TMP/fortunes-train.bin")" = "$(stat -c %a "$TMP/ref-file")" \
  -a "$(stat -c %a "$TMP/fortunes-val.bin")" = "$(stat -c %a "$TMP/ref-file")"
# the unigram entropy (nats) of the whole corpus, from the counts of its uint16 ids
entropy=$(cat "$TMP/fortunes-train.bin" "$TMP/fortunes-val.bin" | od -An -v -tu2 | tr -s ' ' '\n' | grep -v '^$' |
          sort -n | uniq -c | awk '{c[NR]=$1; n+=$1} END {for (i in c) h -= c[i]/n * log(c[i]/n); printf "%.6f", h}')
check "unigram entropy of the corpus is a byte-level English figure (3 to 5 nats): $entropy" \
  awk -v h="$entropy" 'BEGIN {exit !(h > 3 && h < 5)}'
expect_ok "tlm train tiny (vocab 256), 50 steps" "$TLM" train --device cpu --model tiny --vocab-size 256 \
  --train-data "$TMP/fortunes-train.bin" --val-data "$TMP/fortunes-val.bin" --steps 50 --batch-size 16 \
  --context-length 32 --lr-max 3e-3 --warmup-iters 5 --eval-every 25 --eval-batches 8 --log-every 1 \
  --log "$TMP/log.json"
# the log: 50 rows, validation at steps 25 and 50, the last validation loss below the entropy
read -r rows evals last_val first_loss last_loss < <(python3 - "$TMP/log.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
log = d["log"]
vals = [r for r in log if r["val_loss"] is not None]
print(len(log), ",".join(str(r["step"]) for r in vals), vals[-1]["val_loss"], log[0]["loss"], log[-1]["loss"])
PY
)
check "the log: 50 rows (got $rows), validation at steps 25,50 (got $evals)" test "$rows" = 50 -a "$evals" = "25,50"
check "final validation loss $last_val < unigram entropy $entropy (training loss $first_loss -> $last_loss)" \
  awk -v v="$last_val" -v h="$entropy" 'BEGIN {exit !(v < h)}'
if command -v gnuplot >/dev/null 2>&1; then
  expect_ok "tlm plot loss-curve draws the log" "$TLM" plot loss-curve "$TMP/log.json" --out "$TMP/loss"
  check "loss.png and loss.svg written" test -s "$TMP/loss.png" -a -s "$TMP/loss.svg"
fi
finish
