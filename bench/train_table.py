#!/usr/bin/env python3
"""train_table.py OUT WORK MODELS — the summary of bench/device/run.sh train (markdown on stdout): tlm bench's step,
tlm train with and without clipping, the PyTorch training loop; tokens/s and MFU."""
import json, os, sys
out, work, models = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
bench = {r["model"]: r for r in json.load(open(os.path.join(out, "tlm-bench.json")))["rows"] if r.get("status") == "ok"}
torch_rows = json.load(open(os.path.join(out, "torch-train.json")))
def summary(path):
    try:
        return json.load(open(path))["summary"]
    except (OSError, KeyError, ValueError):
        return {}
def f(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else "-"
print("| model | impl | step ms | vs tlm bench | tokens/s | MFU |")
print("|---|---|---:|---:|---:|---:|")
for m in models:
    b = bench.get(m, {})
    bms = b.get("step_ms_mean")
    print(f"| {m} | tlm bench --pass train | {f(bms, '%.2f')} | | {f(b.get('tokens_per_s'), '%.0f')} | |")
    for label, path in (("tlm train (clip 1.0)", os.path.join(out, f"train-{m}.json")),
                        ("tlm train (no clipping)", os.path.join(work, f"noclip-{m}.json"))):
        s = summary(path)
        ms = float(s["step_ms_mean"]) if "step_ms_mean" in s else None
        over = f"{100 * (ms / bms - 1):+.1f}%" if ms and bms else "-"
        mfu = f"{100 * float(s['mfu']):.1f}%" if "mfu" in s else "-"
        print(f"| {m} | {label} | {f(ms, '%.2f')} | {over} | {f(float(s['tokens_per_s']) if 'tokens_per_s' in s else None, '%.0f')} | {mfu} |")
    for r in torch_rows:
        if r["model"] == m:
            over = f"{100 * (r['step_ms_mean'] / bms - 1):+.1f}%" if bms else "-"
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
            print(f"| {m} | PyTorch {r['impl'].split('-')[1]} + SDPA ({r['optimizer']} AdamW) | {r['step_ms_mean']:.2f} | {over} | {r['tokens_per_s']:.0f} | {mfu} |")
print()
print("step ms: tlm bench = device time of forward + backward + AdamW per step (events); tlm train and PyTorch = "
      "wall clock per step (batch, schedule, clipping, loss read back, logging included), warm-up steps left out. "
      "Target: tlm train (no clipping) within 3% of tlm bench; clipping adds a read of the gradients (the norm) and, "
      "when it clips, a read and write (bf16/fp32).")
