#!/usr/bin/env bash
# step_fixture.sh — `tlm step` on weights saved by PyTorch gives PyTorch's logits, loss,
# gradients and weights after 3 AdamW steps (tools/make_fixtures.py wrote the references); with
# --attention flash the same logits and gradients.
source "$(dirname "$0")/lib.bash"
F=$FIX/tiny
out=$("$TLM" step --device cpu --model tiny --weights "$F/weights.safetensors" --inputs "$F/inputs.npy" \
      --targets "$F/targets.npy" --out-logits "$TMP/logits.npy" --out-grads "$TMP/grads.safetensors" \
      --optimizer-steps 3 --out-weights "$TMP/w3.safetensors" 2>&1)
check "tlm step runs (exit 0)" test $? -eq 0
echo "$out"
check "tlm step prints the loss" grep -q '^loss [0-9]' <<<"$out"
expect_ok "logits match PyTorch (rtol 1e-5)" "$TLM" compare --rtol 1e-5 "$TMP/logits.npy" "$F/logits.npy"
expect_ok "every gradient matches PyTorch (rtol 1e-5)" "$TLM" compare --rtol 1e-5 "$TMP/grads.safetensors" "$F/grads.safetensors"
expect_ok "weights after 3 AdamW steps match PyTorch (rtol 1e-5)" "$TLM" compare --rtol 1e-5 "$TMP/w3.safetensors" "$F/weights_after_3_steps.safetensors"
# FlashAttention-2 computes the same function: the same references hold
out=$("$TLM" step --device cpu --model tiny --attention flash --weights "$F/weights.safetensors" --inputs "$F/inputs.npy" \
      --targets "$F/targets.npy" --out-logits "$TMP/logits_flash.npy" --out-grads "$TMP/grads_flash.safetensors" 2>&1)
check "tlm step --attention flash runs (exit 0)" test $? -eq 0
expect_ok "flash: logits match PyTorch (rtol 1e-5)" "$TLM" compare --rtol 1e-5 "$TMP/logits_flash.npy" "$F/logits.npy"
expect_ok "flash: every gradient matches PyTorch (rtol 1e-5)" "$TLM" compare --rtol 1e-5 "$TMP/grads_flash.safetensors" "$F/grads.safetensors"
# the comparison can fail: the initial weights are not the weights after 3 steps
expect_fail "OVER" "$TLM" compare --rtol 1e-5 "$F/weights.safetensors" "$F/weights_after_3_steps.safetensors"
# weights saved by torch.save (a zip archive) are named for what they are, with the conversion to safetensors
printf 'PK\003\004\000\000\010\000archive/data.pkl' > "$TMP/model.pt"
expect_fail "model.pt: this is a PyTorch file" "$TLM" step --device cpu --model tiny --weights "$TMP/model.pt" \
  --inputs "$F/inputs.npy" --targets "$F/targets.npy"
expect_fail "safetensors.torch.save_file(model.state_dict()" "$TLM" compare "$TMP/model.pt" "$F/weights.safetensors"
check "no temporary files left" test -z "$(find "$TMP" -name '*.tmp')"
finish
