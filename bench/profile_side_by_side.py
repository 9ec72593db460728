#!/usr/bin/env python3
"""profile_side_by_side.py — tlm's profile and PyTorch's (through `tlm profile --exec`) side by side,
per model and precision: the forward's leading kernel (share, calls per forward pass), the kernel that
leads forward + backward, the GEMM share of the forward and of the whole training step, the non-GEMM
share, kernels (launches) per step and per forward, and kernel time per phase.

Usage: python3 bench/profile_side_by_side.py OUT.md TLM.json [TLM2.json ...] --peers PEER.json [...]
  TLM*.json: `tlm profile --format json` (rows of the "runs" table: model, precision, ...)
  PEER*.json: `tlm profile --exec --format json -- python3 bench/peers/pytorch_lm.py --nvtx --model M
              --precision P ...` (one configuration per file: model and precision are read from the
              command line recorded in the "runs" table)
"""
import argparse
import json
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def flag(command, name):
    m = re.search(r"--%s[ =](\S+)" % re.escape(name), command or "")
    return m.group(1) if m else None


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def leader(r, key):
    name, pct = r.get(key), r.get(key + "_pct")
    if not name:
        return "-"
    short = name if len(name) <= 48 else name[:45] + "..."
    extra = f", {r['fwd_leader_calls_per_step']:g}/fwd" if key == "fwd_leader" and r.get("fwd_leader_calls_per_step") else ""
    return f"`{short}` ({fmt(pct, '.1f')}%{extra})"


def row(who, r):
    return (f"| {who} | {fmt(r.get('fwd_kernel_ms'), '.3f')} | {fmt(r.get('bwd_kernel_ms'), '.3f')} | "
            f"{fmt(r.get('opt_kernel_ms'), '.3f')} | {leader(r, 'fwd_leader')} | {leader(r, 'fb_leader')} | "
            f"{fmt(r.get('gemm_pct_forward'), '.1f')} | {fmt(r.get('gemm_pct_step'), '.1f')} | "
            f"{fmt(r.get('non_gemm_pct'), '.1f')} | {fmt(r.get('kernels_per_forward'), '.0f')} | "
            f"{fmt(r.get('kernels_per_step'), '.0f')} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("tlm", nargs="+")
    p.add_argument("--peers", nargs="*", default=[])
    a = p.parse_args()
    ours = {}
    device = None
    for path in a.tlm:
        d = load(path)
        device = device or d.get("device")
        for r in d.get("runs", []):
            if r.get("status") == "ok":
                ours[(r["model"], r["precision"])] = r
    theirs = {}
    for path in a.peers:
        d = load(path)
        for r in d.get("runs", []):
            cmd = r.get("command", "")
            key = (flag(cmd, "model"), flag(cmd, "precision") or "fp32")
            if r.get("status") == "ok":
                theirs[key] = r
    keys = sorted(set(ours) | set(theirs), key=lambda k: (["small", "medium", "large", "xl", "2.7B"].index(k[0])
                                                          if k[0] in ["small", "medium", "large", "xl", "2.7B"]
                                                          else 9, k[0] or "", k[1]))
    lines = [f"# tlm and PyTorch, profiled the same way ({device or 'device not recorded'})", "",
             "Kernel time per step (ms) by phase, the forward's leading kernel (share of the forward, calls per "
             "forward pass), the kernel leading forward + backward (share), GEMM shares (% of the forward; % of "
             "the whole step with AdamW), non-GEMM share of the step, kernels launched per forward and per step. "
             "tlm: `tlm profile`; PyTorch eager: `tlm profile --exec -- python3 bench/peers/pytorch_lm.py "
             "--nvtx`.", "",
             "| model | prec | run | fwd ms | bwd ms | opt ms | leading forward kernel | leads fwd+bwd | GEMM % fwd "
             "| GEMM % step | non-GEMM % | kernels/fwd | kernels/step |",
             "|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for k in keys:
        for who, src in (("tlm", ours), ("PyTorch", theirs)):
            if k in src:
                lines.append(f"| {k[0]} | {k[1]} " + row(who, src[k]))
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
