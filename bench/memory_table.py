#!/usr/bin/env python3
"""memory_table.py DIR — the summary of bench/device/run.sh memory (markdown on stdout) from the JSON files in DIR:
tlm memory --suite seeds beside PyTorch, every size at context 256, the long context with recompute."""
import glob, json, os, sys
w = sys.argv[1]
G = 2**30
def rows(name):
    p = os.path.join(w, name)
    return json.load(open(p))["rows"] if os.path.exists(p) else []
def gib(v):
    return "-" if v is None else f"{v / G:.2f}"
def key(r):
    return (r.get("model"), r.get("context_length"), r.get("precision"), r.get("pass"))
torch = {key(r): r for f in ("torch-seeds.json", "torch.json", "torch-4096.json") for r in rows(f)}
def peer(r):
    t = torch.get(key(r))
    if not t: return "-"
    return "OOM" if t.get("status") == "OOM" else gib(t.get("peak_bytes"))
print("## tlm memory --suite seeds (GiB; PyTorch: max_memory_allocated)\n")
print("| model | ctx | prec | pass | tlm peak | at | reserved | device | PyTorch |")
print("|---|---:|---|---|---:|---|---:|---:|---:|")
for r in rows("seeds.json"):
    if r["status"] != "ok":
        print(f"| {r['model']} | {r['context_length']} | {r['precision']} | {r['pass']} | {r['status']} | | | | {peer(r)} |")
        continue
    print(f"| {r['model']} | {r['context_length']} | {r['precision']} | {r['pass']} | {gib(r['peak_bytes'])} | "
          f"{r['peak_phase']} | {gib(r['reserved_bytes'])} | {gib(r.get('device_peak_bytes'))} | {peer(r)} |")
oib = {key(r): r for r in rows("bench-oib.json") + rows("memory-oib.json")}
print("\n## every size at context 256, train (GiB; ms = forward + backward + optimizer)\n")
print("| model | prec | tlm peak | device | step ms | opt-in-bwd peak | opt-in-bwd ms | PyTorch peak | PyTorch ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
def ms(r):
    if not r or r.get("status") != "ok": return "-"
    v = sum(r.get(k) or 0 for k in ("fwd_ms_mean", "bwd_ms_mean", "opt_ms_mean"))
    return f"{v:.1f}" if v else "-"
for r in rows("bench.json"):
    o, t = oib.get(key(r)), torch.get(key(r))
    print(f"| {r['model']} | {r['precision']} | {gib(r.get('peak_bytes'))} | {gib(r.get('device_peak_bytes'))} | {ms(r)} | "
          f"{gib(o.get('peak_bytes')) if o else '-'} | {ms(o)} | {peer(r)} | {ms(t)} |")
long_rows = rows("long-4096.json")
for r in long_rows:
    print(f"\n2.7B bf16 batch 4 context 4096, recompute block: {r['status']}, peak {gib(r.get('peak_bytes'))} GiB, "
          f"device {gib(r.get('device_peak_bytes'))} GiB, step {ms(r)} ms; PyTorch (SDPA) {peer(r)} GiB")
a, b = rows("long-1024-none.json"), rows("long-1024-block.json")
if a and b and ms(a[0]) != "-" and ms(b[0]) != "-":
    print(f"recompute cost at context 1024: block {ms(b[0])} ms / none {ms(a[0])} ms = "
          f"{float(ms(b[0])) / float(ms(a[0])):.2f}x (target <= 1.35x); peaks {gib(b[0]['peak_bytes'])} / {gib(a[0]['peak_bytes'])} GiB")
