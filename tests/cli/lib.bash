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
