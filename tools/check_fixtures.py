#!/usr/bin/env python3
"""check_fixtures.py — by-hand self-consistency check of tests/fixtures/tiny/: reloads
weights.safetensors into a fresh model, recomputes logits, loss, gradients and the 3 AdamW steps
(float32 and float64) and compares them with the saved files; then prints the relative error
||a - b|| / ||b|| of every float32 fixture a against its float64 twin b (the tolerance a correct
fp32 implementation can meet). Exit status 1 if the recomputation differs from the saved files.

Usage: python3 tools/check_fixtures.py [--dir tests/fixtures/tiny] [--all]
"""

import argparse
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_fixtures as mf  # noqa: E402
from pytorch_lm import PRESETS, TransformerLM  # noqa: E402  (path set by make_fixtures)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / nb if nb > 0 else np.linalg.norm(a - b)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.path.join(ROOT, "tests", "fixtures", "tiny"))
    p.add_argument("--all", action="store_true", help="print every tensor, not only the worst")
    args = p.parse_args()
    d, d64 = args.dir, os.path.join(args.dir, "f64")
    torch.set_num_threads(1)

    # 1. recompute from the saved weights and batch
    w = load_file(os.path.join(d, "weights.safetensors"))
    inputs = torch.from_numpy(np.load(os.path.join(d, "inputs.npy")))
    targets = torch.from_numpy(np.load(os.path.join(d, "targets.npy")))
    worst = 0.0
    print("recomputed vs saved (max |diff|):")
    for dtype, dd in ((torch.float32, d), (torch.float64, d64)):
        model = TransformerLM(PRESETS[mf.PRESET]).to(dtype)
        model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in w.items()}, strict=True)
        logits, loss, grads, after, losses = mf.run(model, inputs, targets)
        checks = [("logits", logits.numpy(), np.load(os.path.join(dd, "logits.npy"))),
                  ("loss", [loss.item()], np.load(os.path.join(dd, "loss.npy"))),
                  ("losses_3_steps", losses, np.load(os.path.join(dd, "losses_3_steps.npy")))]
        sg = load_file(os.path.join(dd, "grads.safetensors"))
        sa = load_file(os.path.join(dd, "weights_after_3_steps.safetensors"))
        checks += [("grads", np.concatenate([grads[k].numpy().ravel() for k in sg]),
                    np.concatenate([sg[k].ravel() for k in sg]))]
        checks += [("weights_after_3_steps", np.concatenate([after[k].numpy().ravel() for k in sa]),
                    np.concatenate([sa[k].ravel() for k in sa]))]
        for name, a, b in checks:
            diff = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
            worst = max(worst, diff)
            print(f"  {str(dtype)[6:]:8s} {name:24s} {diff:.3e}")

    # 2. float32 fixtures against their float64 twins
    print("\nfloat32 vs float64 fixtures, ||f32 - f64|| / ||f64||:")
    summary = {}

    def report(group, name, a, b):
        r = rel(a, b)
        summary[group] = max(summary.get(group, 0.0), r)
        if args.all or group in ("logits", "loss", "losses_3_steps"):
            print(f"  {group:22s} {name:32s} {r:.3e}")
        return r

    report("logits", "", np.load(os.path.join(d, "logits.npy")), np.load(os.path.join(d64, "logits.npy")))
    report("loss", "", np.load(os.path.join(d, "loss.npy")), np.load(os.path.join(d64, "loss.npy")))
    l32, l64 = np.load(os.path.join(d, "losses_3_steps.npy")), np.load(os.path.join(d64, "losses_3_steps.npy"))
    for i in range(len(l64)):
        report("losses_3_steps", f"[{i}]", l32[i:i + 1], l64[i:i + 1])
    for group, fname in (("grads", "grads.safetensors"),
                         ("weights_after_3_steps", "weights_after_3_steps.safetensors")):
        a, b = load_file(os.path.join(d, fname)), load_file(os.path.join(d64, fname))
        worst_name = max(b, key=lambda k: rel(a[k], b[k]))
        for k in b:
            report(group, k, a[k], b[k])
        if not args.all:
            print(f"  {group:22s} worst: {worst_name:32s} {rel(a[worst_name], b[worst_name]):.3e}")
    # the AdamW update itself (after - before), a stricter view of the same data
    a = load_file(os.path.join(d, "weights_after_3_steps.safetensors"))
    b = load_file(os.path.join(d64, "weights_after_3_steps.safetensors"))
    upd = {k: rel(a[k] - w[k], b[k] - w[k].astype(np.float64)) for k in b}
    k = max(upd, key=upd.get)
    print(f"  {'update (after-before)':22s} worst: {k:32s} {upd[k]:.3e}")

    print("\nsummary, max over tensors of ||f32 - f64|| / ||f64||:")
    for group in ("logits", "loss", "losses_3_steps", "grads", "weights_after_3_steps"):
        print(f"  {group:22s} {summary[group]:.3e}")
    print(f"  {'AdamW update':22s} {upd[k]:.3e}")
    ok = worst == 0.0
    print(f"\nrecomputation {'matches the saved files exactly' if ok else f'differs (max {worst:.3e})'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
