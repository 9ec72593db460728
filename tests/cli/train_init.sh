#!/usr/bin/env bash
# train_init.sh — `tlm train --init-weights`: a fresh run from a PyTorch state dict (the tiny fixture, CS336
# names, no config in its metadata: --model tiny gives num_heads) or a tlm weights file takes the step
# `tlm step --weights` takes on the same batch (the first batch of seed 0 is tlm step --data's): the same loss
# and, after one AdamW step at the same learning rate, the same weights bit for bit (tlm compare --rtol 0);
# torch.compile's prefix with --strip-prefix; --model with a size flag that overrides it; a size that contradicts the file, --resume and a lone
# --strip-prefix refused by name.
source "$(dirname "$0")/lib.bash"
F=$FIX/tiny
ddp_tokens "$TMP"
batch=(--device cpu --model tiny -b 4 -c 32)
train=(train --train-data "$TMP/train.bin" --batch-size 4 --context-length 32 --steps 1 --lr-max 1e-3
       --warmup-iters 0 --max-grad-norm 0 --save-every 1)
loss0() { python3 -c "import json, sys; print('%.7f' % json.load(open(sys.argv[1]))['log'][0]['loss'])" "$1"; }

out=$("$TLM" step "${batch[@]}" --weights "$F/weights.safetensors" --data "$TMP/train.bin" --optimizer-steps 1 \
      --lr 1e-3 --out-weights "$TMP/step1.safetensors" 2>&1); rc=$?
check "tlm step: one AdamW step from the PyTorch state dict (exit $rc)" test $rc -eq 0
step_loss=$(grep -oP '^loss \K[0-9.]+' <<<"$out")
expect_ok "tlm train --init-weights (the PyTorch state dict), one step" \
  "$TLM" "${train[@]}" --device cpu --model tiny --init-weights "$F/weights.safetensors" --checkpoint-dir "$TMP/pt"
check "the first loss is tlm step's ($step_loss)" test "$(loss0 "$TMP/pt/step-00000001/state.json")" = "$step_loss"
check "after one step: tlm step's weights, bit for bit" \
  "$TLM" compare --rtol 0 "$TMP/step1.safetensors" "$TMP/pt/step-00000001/weights.safetensors"
# torch.compile's names: every tensor under _orig_mod.
python3 - "$F/weights.safetensors" "$TMP/compiled.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h = {k if k == '__metadata__' else '_orig_mod.' + k: v for k, v in h.items()}
t = json.dumps(h).encode(); t += b' ' * (-len(t) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(t)) + t + b[8 + n:])
PY
expect_ok "--init-weights with --strip-prefix _orig_mod." "$TLM" "${train[@]}" --device cpu --model tiny \
  --init-weights "$TMP/compiled.safetensors" --strip-prefix _orig_mod. --checkpoint-dir "$TMP/compiled"
check "--strip-prefix: the same weights after one step" \
  "$TLM" compare --rtol 0 "$TMP/step1.safetensors" "$TMP/compiled/step-00000001/weights.safetensors"
# a tlm weights file (its config in the metadata: no --model needed)
expect_ok "--init-weights a tlm weights file (tlm step --out-weights'), no --model" \
  "$TLM" "${train[@]}" --device cpu --init-weights "$TMP/step1.safetensors" --checkpoint-dir "$TMP/tlm"
out=$("$TLM" step "${batch[@]}" --weights "$TMP/step1.safetensors" --data "$TMP/train.bin" 2>&1)
check "from the tlm file: the first loss is tlm step's" \
  test "$(loss0 "$TMP/tlm/step-00000001/state.json")" = "$(grep -oP '^loss \K[0-9.]+' <<<"$out")"
# --model with a size flag that overrides it: the file's model when the flag matches the file
"$TLM" step "${batch[@]}" --d-model 32 --data "$TMP/train.bin" --optimizer-steps 1 \
  --out-weights "$TMP/d32.safetensors" >/dev/null 2>&1
expect_ok "--model tiny --d-model 32 and a file of d-model 32" "$TLM" "${train[@]}" --device cpu --model tiny \
  --d-model 32 --init-weights "$TMP/d32.safetensors" --checkpoint-dir "$TMP/d32"
# refusals
expect_fail "--d-model 32 contradicts $F/weights.safetensors, whose model has d-model 64" \
  "$TLM" "${train[@]}" --device cpu --init-weights "$F/weights.safetensors" --model tiny --d-model 32 \
  --checkpoint-dir "$TMP/x"
expect_fail "--model small (vocab-size 10000) contradicts $TMP/step1.safetensors, whose model has vocab-size 512" \
  "$TLM" "${train[@]}" --device cpu --init-weights "$TMP/step1.safetensors" --model small --checkpoint-dir "$TMP/x"
expect_fail "--init-weights conflicts with --resume" \
  "$TLM" train --device cpu --resume "$TMP/tlm" --init-weights "$TMP/step1.safetensors"
expect_fail "--strip-prefix needs --init-weights FILE" \
  "$TLM" "${train[@]}" --device cpu --model tiny --strip-prefix module. --checkpoint-dir "$TMP/x"
expect_fail "torch.compile" "$TLM" "${train[@]}" --device cpu --model tiny --init-weights "$TMP/compiled.safetensors" \
  --checkpoint-dir "$TMP/x"
finish
