#!/usr/bin/env python3
"""make_fixtures.py — writes the PyTorch reference state for the "tiny" model into
tests/fixtures/tiny/ (float32, CPU) and tests/fixtures/tiny/f64/ (the same in float64: the
'true answer'), for tlm's C tests. Deterministic: two runs give byte-identical files.

Usage: python3 tools/make_fixtures.py [--out tests/fixtures/tiny]
"""

import argparse
import copy
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
from pytorch_lm import PRESETS, AdamW, RMSNorm, TransformerLM, cross_entropy  # noqa: E402

SEED, B, T, STEPS = 0, 3, 17, 3
PRESET = "tiny"


def build():
    """The tiny model (float32) with perturbed RMSNorm weights, and one batch (inputs, targets)."""
    torch.manual_seed(SEED)
    model = TransformerLM(PRESETS[PRESET])
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, RMSNorm):
                mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
    cfg = model.cfg
    inputs = torch.randint(0, cfg.vocab_size, (B, T), dtype=torch.int64)
    targets = torch.randint(0, cfg.vocab_size, (B, T), dtype=torch.int64)
    return model, inputs, targets


def run(model, inputs, targets):
    """logits, loss, grads of the mean loss; then the weights after STEPS AdamW steps on the same
    batch and the loss before each step. The model is modified (trained) in place."""
    model.zero_grad(set_to_none=True)
    logits = model(inputs)
    loss = cross_entropy(logits, targets)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    opt = AdamW(model.parameters())
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = cross_entropy(model(inputs), targets)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return logits.detach(), loss.detach(), grads, after, losses


def _tmp(path):
    return path + ".tmp"


def save_npy(path, array):
    with open(_tmp(path), "wb") as f:
        np.save(f, array)
    os.replace(_tmp(path), path)


def save_st(path, tensors):
    save_file({k: v.contiguous() for k, v in tensors.items()}, _tmp(path))
    os.replace(_tmp(path), path)


def save_json(path, obj):
    with open(_tmp(path), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(_tmp(path), path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", PRESET))
    args = p.parse_args()
    torch.set_num_threads(1)  # the same reduction order on every run
    torch.use_deterministic_algorithms(True)

    model, inputs, targets = build()
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model64 = copy.deepcopy(model).double()

    out64 = os.path.join(args.out, "f64")
    os.makedirs(out64, exist_ok=True)
    for dtype, d, m in ((np.float32, args.out, model), (np.float64, out64, model64)):
        logits, loss, grads, after, losses = run(m, inputs, targets)
        save_npy(os.path.join(d, "logits.npy"), logits.numpy().astype(dtype))
        save_npy(os.path.join(d, "loss.npy"), np.array([loss.item()], dtype=dtype))
        save_npy(os.path.join(d, "losses_3_steps.npy"), np.array(losses, dtype=dtype))
        save_st(os.path.join(d, "grads.safetensors"), grads)
        save_st(os.path.join(d, "weights_after_3_steps.safetensors"), after)
    save_st(os.path.join(args.out, "weights.safetensors"), weights)
    save_npy(os.path.join(args.out, "inputs.npy"), inputs.numpy().astype(np.int64))
    save_npy(os.path.join(args.out, "targets.npy"), targets.numpy().astype(np.int64))

    cfg = PRESETS[PRESET]
    meta = {
        "seed": SEED, "preset": PRESET, "B": B, "T": T,
        "config": {"vocab_size": cfg.vocab_size, "context_length": cfg.context_length,
                   "d_model": cfg.d_model, "num_layers": cfg.num_layers, "num_heads": cfg.num_heads,
                   "d_ff": cfg.d_ff, "rope_theta": cfg.rope_theta, "rmsnorm_eps": cfg.rmsnorm_eps},
        "adamw": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
                  "steps": STEPS},
        "torch_version": torch.__version__,
        "generator": "tools/make_fixtures.py (model: bench/peers/pytorch_lm.py)",
        "notes": "torch.manual_seed(seed); model init (trunc_normal); every RMSNorm weight set to "
                 "1 + 0.1*randn; inputs, targets = randint(0, vocab, (B, T)) each (targets not "
                 "shifted). Run on CPU, 1 thread. f64/ = the same model cast to float64 (RoPE "
                 "table in float64 too).",
        "files": {
            "weights.safetensors": "initial parameters, state-dict names, F32",
            "inputs.npy": "int64 (B, T) token ids",
            "targets.npy": "int64 (B, T) target ids",
            "logits.npy": "float32 (B, T, vocab) model(inputs)",
            "loss.npy": "float32 (1,) mean cross-entropy over all B*T positions",
            "grads.safetensors": "F32 gradient of the mean loss w.r.t. every parameter (same names)",
            "weights_after_3_steps.safetensors": "F32 parameters after 3 CS336-AdamW steps (defaults) "
                                                 "on the same batch; each step: zero_grad, forward+loss, "
                                                 "backward, step",
            "losses_3_steps.npy": "float32 (3,) loss before each of the 3 steps",
            "f64/logits.npy": "float64 logits of the float64 model",
            "f64/loss.npy": "float64 (1,) loss",
            "f64/losses_3_steps.npy": "float64 (3,) loss before each step",
            "f64/grads.safetensors": "F64 gradients",
            "f64/weights_after_3_steps.safetensors": "F64 parameters after 3 AdamW steps",
        },
    }
    save_json(os.path.join(args.out, "meta.json"), meta)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
