# lib.sh — helpers for the CLI tests: run tlm, check the exit status and the message.
# Sourced by the tests/cli/*.sh scripts.
TLM=${1:?usage: $0 path/to/tlm fixtures_dir}
FIX=${2:?usage: $0 path/to/tlm fixtures_dir}
TMP=$(mktemp -d /tmp/tlm_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

# expect_fail "pattern" cmd... : must exit 1 or 2 (not a crash, not 0) and print pattern
expect_fail() {
  local pattern=$1; shift
  local err rc
  err=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 3 ] && grep -qF -- "$pattern" <<<"$err"; then
    pass=$((pass + 1)); echo "ok     [exit $rc] ${err%%$'\n'*}"
  else
    fail=$((fail + 1)); echo "FAIL   [exit $rc] expected '$pattern' from: $*"; echo "       got: $err"
  fi
}

# expect_ok "description" cmd... : must exit 0
expect_ok() {
  local what=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "ok     $what"
  else fail=$((fail + 1)); echo "FAIL   $what [exit $rc]"; echo "$out" | tail -20; fi
}

# check "description" test-expression...
check() {
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok     $what"
  else fail=$((fail + 1)); echo "FAIL   $what"; fi
}

# run_ok "description" cmd... : must exit 0; its output (stdout and stderr) is left in $out, and printed
run_ok() {
  local what=$1 rc; shift
  out=$("$@" 2>&1); rc=$?
  check "$what" test $rc -eq 0
  echo "$out"
}

# write_npy_i64 FILE ROWS COLS v1 v2 ... : a little-endian int64 .npy of shape (ROWS, COLS)
write_npy_i64() {
  local file=$1 rows=$2 cols=$3; shift 3
  local dict="{'descr': '<i8', 'fortran_order': False, 'shape': ($rows, $cols), }"
  local pad=$(( 64 - (10 + ${#dict} + 1) % 64 ))
  [ $pad -eq 64 ] && pad=0
  local hlen=$(( ${#dict} + pad + 1 ))
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
    printf '%s' "$dict"; printf "%${pad}s" ''; printf '\n'
    local v b
    for v in "$@"; do
      for b in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( (v >> (8 * b)) & 255 )))"; done
    done
  } > "$file"
}

finish() {
  echo "$pass passed, $fail failed"
  [ $fail -eq 0 ]
}

# ---- data-parallel runs (ddp.sh under mpirun, srun.sh under srun) -------------------------------------------------

# ddp_tokens DIR: DIR/train.bin and DIR/val.bin, a noisy walk over 256 ids (uint16), 18000 to train on, 2000 to
# validate
ddp_tokens() {
  python3 - "$1" <<'EOF'
import random, struct, sys
rng, ids, x = random.Random(11), [], 0
while len(ids) < 20000:
    x = (x + rng.choice((1, 1, 1, 2, 7))) % 256
    ids.append(x)
for name, part in (("train", ids[:18000]), ("val", ids[18000:])):
    open(f"{sys.argv[1]}/{name}.bin", "wb").write(struct.pack(f"<{len(part)}H", *part))
EOF
}

# ddp_faults PIDFN LAUNCH...: a 2-rank `tlm train` (LAUNCH, then $TLM and the caller's array `long`, which sets
# --timeout 3) whose rank 1 is killed, then in a second run stopped (hung), once a checkpoint is written; PIDFN
# LAUNCHER_PID prints rank 1's pid. Checks: the run ends by itself, non-zero, rank 1 named (by the launcher or the
# watchdog; a stopped rank by the watchdog within 15 s), and the last checkpoint resumes for a step with 2 ranks.
ddp_faults() {
  local pidfn=$1 fault lp victim start rc ms last
  shift
  for fault in kill stop; do
    rm -rf "$TMP/f"
    "$@" "$TLM" "${long[@]}" --checkpoint-dir "$TMP/f" > "$TMP/f.out" 2>&1 &
    lp=$!
    for _ in $(seq 1 1500); do [ -f "$TMP/f/latest" ] && break; sleep 0.02; done
    victim=$("$pidfn" $lp)
    start=$(date +%s%N)
    [ "$fault" = kill ] && kill -KILL "$victim" 2>/dev/null
    [ "$fault" = stop ] && kill -STOP "$victim" 2>/dev/null
    for _ in $(seq 1 600); do kill -0 $lp 2>/dev/null || break; sleep 0.05; done
    kill -0 $lp 2>/dev/null && { kill -KILL $lp; check "$fault: the run ended by itself (30 s guard)" false; }
    [ "$fault" = stop ] && kill -KILL "$victim" 2>/dev/null
    wait $lp; rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    grep -E 'rank 1|task 1|^tlm' "$TMP/f.out" | head -3
    check "$fault rank 1 (pid ${victim:-?}) after checkpoint $(cat "$TMP/f/latest"): non-zero exit ($rc) after $ms ms" \
      test -n "$victim" -a $rc -ne 0
    if [ "$fault" = kill ]; then
      check "kill: rank 1 named (by the launcher or the watchdog)" grep -qE \
        'process rank 1 .*(signal 9|Killed)|task 1: Killed|rank 1 (did not answer|left the run|has not reached)' \
        "$TMP/f.out"
    else
      check "stop: the watchdog names rank 1 within the 3 s timeout (+ the launcher)" \
        bash -c "grep -qE 'rank 1 (did not answer|has not reached)' '$TMP/f.out' && test $ms -lt 15000"
    fi
    last=$(cat "$TMP/f/latest")
    "$@" "$TLM" train --resume "$TMP/f" --steps $(( 10#${last#step-} + 1 )) > "$TMP/r.out" 2>&1; rc=$?
    check "$fault: the last checkpoint ($last) is whole: it resumes for 1 more step with 2 ranks (exit $rc)" \
      test $rc -eq 0 -a "$(grep -c '^# steps_run: 1$' "$TMP/r.out")" -eq 1
  done
}
