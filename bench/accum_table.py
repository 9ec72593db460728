#!/usr/bin/env python3
"""accum_table.py — the accumulation stage's table (bench/device/stages/accum.sh): per model, tlm and the
PyTorch peer without accumulation and with N micro-batches a step: tokens per optimizer step, step time,
tokens/s and MFU per optimizer step.

Usage: accum_table.py OUT.md TLM1.json TLMN.json [TORCH1.json [TORCHN.json]]
  TLM*.json: `tlm bench --format json` (its rows: grad_accum_steps, step_ms_mean, tokens_per_s, mfu,
  tflop_per_s); TORCH*.json: bench/peers/pytorch_lm.py --format json. A file that is missing (a stage part
  skipped) leaves its rows out.

MFU: tlm's own (3 x forward matmul FLOPs of the step over the step's time and the device's dense peak);
PyTorch's from the same count: the FLOPs per token of tlm's row of that model (tflop_per_s x the forward and
backward time / the step's tokens) and the peak tlm's row implies (those FLOPs / step time / mfu)."""
import json
import os
import sys


def rows(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in json.load(f).get("rows", []) if r.get("status", "ok") == "ok"]


def step_tokens(r):
    return (r.get("grad_accum_steps") or 1) * r["batch_size"] * r["context_length"]


def step_ms(r):  # tlm: step_ms_mean; the peer: the sum of its phases
    if r.get("step_ms_mean") is not None:
        return r["step_ms_mean"]
    return sum(r.get(k) or 0.0 for k in ("fwd_ms_mean", "bwd_ms_mean", "opt_ms_mean"))


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    out, t1, tn = argv[1], argv[2], argv[3]
    p1, pn = (argv[4] if len(argv) > 4 else None), (argv[5] if len(argv) > 5 else None)
    tlm = rows(t1) + rows(tn)
    peer = rows(p1) + rows(pn)
    flops_tok, peak = {}, {}  # per model, from tlm's rows
    for r in tlm:
        if r.get("mfu") and r.get("tflop_per_s"):
            f = r["tflop_per_s"] * 1e12 * (r["fwd_ms_mean"] + r["bwd_ms_mean"]) / 1e3
            flops_tok[r["model"]] = f / step_tokens(r)
            peak[r["model"]] = f / (r["step_ms_mean"] / 1e3) / r["mfu"]
    lines = ["| impl | model | batch x ctx | micro-batches | tokens/step | step ms | tokens/s | MFU |",
             "|---|---|---|---|---|---|---|---|"]
    for impl, rs in (("tlm", tlm), ("pytorch eager", peer)):
        for r in rs:
            ms = step_ms(r)
            tps = r.get("tokens_per_s") or step_tokens(r) / (ms / 1e3)
            if impl == "tlm":
                mfu = r.get("mfu")
            else:
                m = r["model"]
                mfu = tps * flops_tok[m] / peak[m] if m in flops_tok else None
            lines.append(f"| {impl} | {r['model']} | {r['batch_size']} x {r['context_length']} | "
                         f"{r.get('grad_accum_steps') or 1} | {step_tokens(r)} | {ms:.1f} | {tps:.0f} | "
                         + (f"{100 * mfu:.1f}%" if mfu else "n/a") + " |")
    lines.append("")
    lines.append("MFU per optimizer step: 3 x forward matmul FLOPs (tlm bench's count) over the whole step "
                 "(the micro-batches, the update) and the dense peak; PyTorch's from the same count.")
    text = "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
