#!/usr/bin/env python3
"""cpu_table.py DIR ROUNDS OUT.md THREADS — the table of bench/device/run.sh cpu: tlm against PyTorch on the
CPU from DIR/tlm.N.json and DIR/torch.N.json (N = 1..ROUNDS): the median over rounds of each phase, each round,
the peaks; written to OUT.md and printed."""
import json, os, statistics, sys, datetime
tmp, rounds, out, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tlms = [json.load(open(f"{tmp}/tlm.{r}.json")) for r in range(1, rounds + 1)]
torches = [json.load(open(f"{tmp}/torch.{r}.json")) for r in range(1, rounds + 1)]
tlm = tlms[0]
def med(rows, key):
    return statistics.median(r["rows"][0][key] for r in rows)
t = {k: med(tlms, k) for k in ("fwd_ms_mean", "bwd_ms_mean", "opt_ms_mean", "peak_bytes")}
p = {k: med(torches, k) for k in ("fwd_ms_mean", "bwd_ms_mean", "opt_ms_mean", "peak_bytes")}
t.update({k: tlm["rows"][0][k] for k in ("model", "context_length", "batch_size")})
cpu = "unknown CPU"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip(); break
except OSError:
    pass
import torch
lines = [f"# tlm vs PyTorch on the CPU: {t['model']}, context {t['context_length']}, batch {t['batch_size']}",
         "",
         f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
         f"- machine: {cpu}, {threads} threads ({os.cpu_count()} visible)",
         f"- tlm {tlm['version']} (OpenBLAS, OpenMP); PyTorch {torch.__version__} eager, fp32",
         f"- {tlm['warmup']} warm-up + {tlm['steps']} timed steps per round, each phase synchronized; "
         f"{rounds} rounds, tlm and PyTorch alternating; the table gives the median over rounds of each round's mean",
         f"- command: `bench/device/run.sh cpu` (MODEL={t['model']} CTX={t['context_length']} BATCH={t['batch_size']})",
         "",
         "| phase | tlm ms | PyTorch ms | PyTorch / tlm |",
         "|---|---:|---:|---:|"]
for key, name in (("fwd", "forward"), ("bwd", "backward"), ("opt", "AdamW step")):
    a, b = t[f"{key}_ms_mean"], p[f"{key}_ms_mean"]
    lines.append(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
fb_t, fb_p = t["fwd_ms_mean"] + t["bwd_ms_mean"], p["fwd_ms_mean"] + p["bwd_ms_mean"]
lines.append(f"| forward+backward | {fb_t:.1f} | {fb_p:.1f} | {fb_p / fb_t:.2f}x |")
lines += ["", "Each round (mean ± population std over its timed steps, ms):", "",
          "| round | tlm forward | tlm backward | tlm AdamW | PyTorch forward | PyTorch backward | PyTorch AdamW |",
          "|---|---:|---:|---:|---:|---:|---:|"]
for r in range(rounds):
    a, b = tlms[r]["rows"][0], torches[r]["rows"][0]
    cells = [f"{x[k + '_ms_mean']:.1f} ± {x[k + '_ms_std']:.1f}" for x in (a, b) for k in ("fwd", "bwd", "opt")]
    lines.append(f"| {r + 1} | " + " | ".join(cells) + " |")
lines += ["", f"Peak memory: tlm {t['peak_bytes'] / 2**30:.2f} GiB (tracked allocator); "
          f"PyTorch {p['peak_bytes'] / 2**30:.2f} GiB (process max RSS).", ""]
tmp = out + ".tmp"
with open(tmp, "w") as f:
    f.write("\n".join(lines))
os.replace(tmp, out)
print("\n".join(lines))
