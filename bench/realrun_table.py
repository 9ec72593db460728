#!/usr/bin/env python3
"""realrun_table.py — the realrun stage's table (bench/device/stages/realrun.sh), in Markdown on stdout.

Usage: realrun_table.py DIR
  DIR/rr-1gpu.json, rr-2gpu.json: `tlm bench --format json` (rows: ranks, zero, grad_accum_steps, batch_size
  (global), context_length, step_ms_mean, tokens_per_s, mfu); rr-torch.json: bench/peers/pytorch_ddp.py's
  (rows: ranks, grad_accum_steps, batch_size, step_ms_mean, tokens_per_s); rr-zero2.json and rr-resume1.json:
  `tlm train --log` (JSON: its "log" rows: step, loss, val_loss). A missing file leaves its part out.

Part 1: tokens per optimizer step, step time, tokens/s, MFU (tlm's), and tokens/s against the same
implementation's one GPU (PyTorch's MFU from tlm's FLOP count: tlm's MFU per token/s). Part 2: the 2-GPU ZeRO-1 run and its half-way checkpoint resumed on one GPU: the
validation losses at the same steps, and the largest difference of the training losses after the resume."""
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def bench_rows(doc):
    return [r for r in (doc or {}).get("rows", []) if r.get("status", "ok") == "ok"]


def accum_of(r):  # a peer row written before it recorded grad_accum_steps: from its tokens/s and step time
    if r.get("grad_accum_steps"):
        return r["grad_accum_steps"]
    if r.get("tokens_per_s") and r.get("step_ms_mean"):
        return max(1, round(r["tokens_per_s"] * r["step_ms_mean"] / 1e3 / (r["batch_size"] * r["context_length"])))
    return 1


def scaling(d):
    out = ["| impl | GPUs | ZeRO | micro-batches | tokens/step | step ms | tokens/s | vs 1 GPU | MFU |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    per_tps = None  # MFU per token/s, from tlm's rows (the same model and FLOP count): the peer's MFU
    for impl, rows in (("tlm", bench_rows(load(f"{d}/rr-1gpu.json")) + bench_rows(load(f"{d}/rr-2gpu.json"))),
                       ("pytorch DDP", bench_rows(load(f"{d}/rr-torch.json")))):
        one = None
        for r in rows:
            n = r.get("ranks") or 1
            tok = accum_of(r) * r["batch_size"] * r["context_length"]
            tps = r.get("tokens_per_s") or tok / (r["step_ms_mean"] / 1e3)
            if n == 1 and one is None:
                one = tps
            mfu = r.get("mfu")
            if impl == "tlm" and mfu and per_tps is None and n == 1:
                per_tps = mfu / tps
            elif impl != "tlm" and per_tps:
                mfu = tps * per_tps / n  # per GPU, as tlm reports it
            out.append(f"| {impl} | {n} | {r.get('zero') or 0} | {accum_of(r)} | {tok} | "
                       f"{r['step_ms_mean']:.0f} | {tps:,.0f} | {tps / one:.2f}x | "
                       f"{'' if mfu is None else f'{100 * mfu:.1f}%'} |" if one else "")
    return [line for line in out if line]


def log_rows(doc):
    rows = (doc or {}).get("log", [])
    return {r["step"]: r for r in rows if "step" in r}


def resume(d):
    a, b = log_rows(load(f"{d}/rr-zero2.json")), log_rows(load(f"{d}/rr-resume1.json"))
    if not a or not b:
        return []
    out = ["| step | val loss, 2 GPUs ZeRO-1 (uninterrupted) | val loss, resumed on 1 GPU |", "|---:|---:|---:|"]
    for s in sorted(set(a) & set(b)):
        va, vb = a[s].get("val_loss"), b[s].get("val_loss")
        if va is not None and vb is not None:
            out.append(f"| {s} | {va:.4f} | {vb:.4f} |")
    common = [s for s in sorted(set(a) & set(b)) if a[s].get("loss") is not None and b[s].get("loss") is not None]
    if common:
        worst = max(abs(a[s]["loss"] - b[s]["loss"]) for s in common)
        out.append("")
        out.append(f"Training loss, logged steps {common[0]}-{common[-1]} of both logs (the resumed run's log "
                   f"carries its checkpoint's rows before the resume): largest difference {worst:.4f}.")
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    lines = ["# A real run: accumulation on 1 and 2 GPUs, a ZeRO-1 checkpoint resumed on one", ""]
    s = scaling(argv[1])
    lines += s + [""] if len(s) > 2 else []
    lines += resume(argv[1])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
