#!/usr/bin/env bash
# zero_ckpt.sh — ZeRO-1 checkpoints (MPI on the CPU, under mpirun through tests/test_comm_mpirun.sh): a ZeRO-1
# run saves the files a replicated run saves (its moments gathered to rank 0: the same bytes at 2 ranks), and
# a checkpoint resumes bit for bit (weights, AdamW's moments and the loss log) with ZeRO-1 at the same rank
# count (2 and 3) and from a replicated checkpoint into ZeRO-1 (2 ranks, where ZeRO-1 and the replicated
# update are the same bits). Across rank counts (ZeRO-1 2 -> 3 ranks, ZeRO-1 3 ranks -> replicated 2 and 1)
# the run goes on from the same weights and moments (the shards re-cut), but not bit for bit: each rank's loss
# is the mean of its own rows, then the ranks' gradients are averaged, so the sums group the rows by rank and
# round differently with another count (ddp.sh: N ranks give one process's weights to rtol 1e-6, not the
# bits); those runs are compared within 1e-5. The re-cut itself is exact: test_ddp's gather/scatter check.
# --init-weights under 2 ranks gives one process's weights. Usage errors under a launcher are printed once, by
# rank 0, and so is a version-1 checkpoint's warning.
source "$(dirname "$0")/lib.bash"
ddp_tokens "$TMP"
RUN=(bash "$(dirname "$0")/../test_comm_mpirun.sh")
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# 6 steps of the tiny model, a global batch of 12 rows (6 or 4 a rank), clipped, a checkpoint at 3 and 6
args=(train --device cpu --model tiny --vocab-size 256 --steps 6 --save-every 3 --batch-size 12
      --train-data "$TMP/train.bin" --val-data "$TMP/val.bin" --eval-every 3 --eval-batches 2
      --context-length 32 --lr-max 5e-3 --warmup-iters 2 --max-grad-norm 0.5)
ck() { echo "$TMP/$1/step-0000000$2"; }
# same DIR_A DIR_B: the step-6 checkpoints hold the same weights, moments and loss log, bit for bit
same() {
  cmp -s "$(ck "$1" 6)/weights.safetensors" "$(ck "$2" 6)/weights.safetensors" &&
    cmp -s "$(ck "$1" 6)/optimizer.safetensors" "$(ck "$2" 6)/optimizer.safetensors" &&
    python3 -c "import json, sys; a, b = (json.load(open(f))['log'] for f in sys.argv[1:]); assert a == b, (a, b)" \
      "$(ck "$1" 6)/state.json" "$(ck "$2" 6)/state.json"
}
# near DIR_A DIR_B: the step-6 weights within rtol 1e-5 and the losses of the log within 1e-5 (relative)
near() {
  "$TLM" compare --rtol 1e-5 "$(ck "$1" 6)/weights.safetensors" "$(ck "$2" 6)/weights.safetensors" >/dev/null &&
    python3 -c "
import json, sys; a, b = (json.load(open(f))['log'] for f in sys.argv[1:])
assert len(a) == len(b) == 6
for x, y in zip(a, b):
    for k in ('loss', 'grad_norm', 'lr'): assert abs(x[k] - y[k]) <= 1e-5 * abs(y[k]), (k, x, y)" \
      "$(ck "$1" 6)/state.json" "$(ck "$2" 6)/state.json"
}

# ---- the uninterrupted runs ----------------------------------------------------------------------------------------
expect_ok "ZeRO-1, 2 ranks, 6 steps, saving every 3" \
  "${RUN[@]}" 2 "$TLM" "${args[@]}" --zero 1 --checkpoint-dir "$TMP/z2"
expect_ok "replicated, 2 ranks" "${RUN[@]}" 2 "$TLM" "${args[@]}" --checkpoint-dir "$TMP/r2"
expect_ok "ZeRO-1, 3 ranks" "${RUN[@]}" 3 "$TLM" "${args[@]}" --zero 1 --checkpoint-dir "$TMP/z3"
check "ZeRO-1 writes a replicated run's files: step 3's weights and moments, the same bytes (2 ranks)" \
  bash -c "cmp '$(ck z2 3)/weights.safetensors' '$(ck r2 3)/weights.safetensors' &&
           cmp '$(ck z2 3)/optimizer.safetensors' '$(ck r2 3)/optimizer.safetensors'"
check "the moments were gathered: exp_avg of every parameter, not zeros, AdamW's step 3" python3 -c "
import json, struct, sys
b = open('$(ck z3 3)/optimizer.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
assert h['__metadata__']['step'] == '3', h['__metadata__']
names = [k for k in h if k.startswith('exp_avg.')]; assert len(names) == 21, names
for k in names:
    lo, hi = h[k]['data_offsets']; x = struct.unpack(f'<{(hi - lo) // 4}f', b[8 + n + lo:8 + n + hi])
    assert any(v != 0 for v in x), k"

# ---- resumed: bit for bit at the same rank count --------------------------------------------------------------------
expect_ok "ZeRO-1 2 ranks -> ZeRO-1 2 ranks, from step 3" \
  "${RUN[@]}" 2 "$TLM" train --resume "$(ck z2 3)" --zero 1 --checkpoint-dir "$TMP/z2z2"
check "ZeRO-1 2 -> 2: the uninterrupted run's weights, moments and loss log, bit for bit" same z2z2 z2
expect_ok "ZeRO-1 3 ranks -> ZeRO-1 3 ranks" \
  "${RUN[@]}" 3 "$TLM" train --resume "$(ck z3 3)" --zero 1 --checkpoint-dir "$TMP/z3z3"
check "ZeRO-1 3 -> 3: bit for bit" same z3z3 z3
expect_ok "replicated 2 ranks -> ZeRO-1 2 ranks" \
  "${RUN[@]}" 2 "$TLM" train --resume "$(ck r2 3)" --zero 1 --checkpoint-dir "$TMP/r2z2"
# (the logged grad_norm of ZeRO-1 adds the pieces' squares in another order than the replicated norm: its float64
# may differ in the last bit; the clip factor, the weights and the moments do not)
check "replicated -> ZeRO-1 (2 ranks): the replicated run's weights, moments and log, bit for bit" same r2z2 r2
check "replicated -> ZeRO-1 (2 ranks): the ZeRO-1 run's weights, bit for bit" \
  cmp -s "$(ck r2z2 6)/weights.safetensors" "$(ck z2 6)/weights.safetensors"

# ---- resumed at another rank count: the shards re-cut ----------------------------------------------------------------
expect_ok "ZeRO-1 2 ranks -> ZeRO-1 3 ranks" \
  "${RUN[@]}" 3 "$TLM" train --resume "$(ck z2 3)" --zero 1 --checkpoint-dir "$TMP/z2z3"
check "ZeRO-1 2 -> 3: the uninterrupted run's weights and losses within 1e-5" near z2z3 z2
expect_ok "ZeRO-1 3 ranks -> replicated 2 ranks" \
  "${RUN[@]}" 2 "$TLM" train --resume "$(ck z3 3)" --checkpoint-dir "$TMP/z3r2"
check "ZeRO-1 3 -> replicated 2: within 1e-5" near z3r2 z3
expect_ok "ZeRO-1 3 ranks -> one process" "$TLM" train --resume "$(ck z3 3)" --checkpoint-dir "$TMP/z3r1"
check "ZeRO-1 3 -> one process: within 1e-5" near z3r1 z3
expect_fail "global batch of 12 rows does not divide over this run's 5 ranks" \
  "${RUN[@]}" 5 "$TLM" train --resume "$(ck z2 3)" --zero 1

# ---- --init-weights under a launcher: every rank starts from the file (train_init.sh checks it alone) ----------------
init=(train --device cpu --init-weights "$(ck z2 3)/weights.safetensors" --train-data "$TMP/train.bin" --steps 2
      --save-every 2 --batch-size 12 --context-length 32 --lr-max 5e-3 --warmup-iters 1)  # the model: the file's
expect_ok "ZeRO-1, 2 ranks, from --init-weights" "${RUN[@]}" 2 "$TLM" "${init[@]}" --zero 1 --checkpoint-dir "$TMP/i2"
expect_ok "one process, from --init-weights" "$TLM" "${init[@]}" --checkpoint-dir "$TMP/i1"
check "2 ranks from --init-weights: one process's weights after 2 steps (rtol 1e-6)" \
  "$TLM" compare --rtol 1e-6 "$TMP/i2/step-00000002/weights.safetensors" "$TMP/i1/step-00000002/weights.safetensors"

# ---- usage errors under a launcher: once, by rank 0 -----------------------------------------------------------------
err=$("${RUN[@]}" 3 "$TLM" "${args[@]}" --tokens 100 --zero 1 2>&1)
check "a usage error under 3 ranks is printed once, whole" \
  test "$(grep -c 'tlm train: --steps conflicts with --tokens' <<<"$err")" -eq 1 \
    -a "$(grep -c 'tlm train: tlm' <<<"$err")" -eq 0
err=$("${RUN[@]}" 2 "$TLM" train --bogus 2>&1)
check "an unknown flag under 2 ranks is printed once" test "$(grep -c "unknown option '--bogus'" <<<"$err")" -eq 1
rm -rf "$TMP/v1"; cp -r "$(ck r2 3)" "$TMP/v1"  # a version-1 state.json (no data identity, no digests)
python3 -c "
import json; p = '$TMP/v1/state.json'; d = json.load(open(p)); d['version'] = 1; del d['files']
for k in ('train_data', 'val_data'): del d['recipe'][k]['identity']
json.dump(d, open(p, 'w'))"
err=$("${RUN[@]}" 2 "$TLM" train --resume "$TMP/v1" --steps 4 --checkpoint-dir "$TMP/v1r" 2>&1); rc=$?
check "a version-1 checkpoint resumes under 2 ranks ($rc), its warning printed once" \
  test $rc -eq 0 -a "$(grep -c 'tlm: warning: .*state.json is version 1' <<<"$err")" -eq 1
finish
