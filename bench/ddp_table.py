#!/usr/bin/env python3
"""ddp_table.py DIR BATCH — the data-parallel tables of bench/device/run.sh ddp (ddp-side-by-side.md in DIR) from
its JSON files: each mode and bucket size against the 1-GPU step, PyTorch DDP beside, ZeRO-1's memory, scaling,
NCCL_MAX_CTAS, the optimizer in or beside the backward, 2.7B where one GPU runs out of memory, experiments.
BATCH = a rank's rows."""
import glob, json, os, sys
out = sys.argv[1]
def rows(pattern):
    r = []
    for f in sorted(glob.glob(os.path.join(out, pattern))):
        try:
            r += json.load(open(f)).get("rows", [])
        except (OSError, ValueError):
            pass
    return [x for x in r if x.get("status") == "ok"]
batch = int(sys.argv[2])  # a rank's rows
one_all = rows("tlm-1gpu.json")
one = {r["precision"]: r for r in one_all if r["batch_size"] == batch}
one_g = {r["precision"]: r for r in rows("tlm-1gpu-graphs.json") if r["batch_size"] == batch}
torch_rows = rows("torch-ddp*.json")  # torch-ddp.json, or one file a precision and process count: torch-ddp-PREC-N.json
t_one = {r["precision"]: r for r in torch_rows if r["ranks"] == 1}
def torch_match(prec, n, bucket, rdt, zero):
    for r in torch_rows:
        if (r["precision"], r["ranks"], r["grad_reduce_dtype"], r["zero"]) == (prec, n, rdt, zero) and \
           (bucket is None or abs(r["bucket_mb"] - bucket) < 1e-9):
            return r
def ratio(a, b):
    return f"{a / b:.3f}x" if a and b else "-"
gib = 2.0 ** 30
L = ["Step = forward + backward + exposed communication + optimizer, ms (mean of the timed steps, the slowest rank); "
     "x1 = this step / the 1-GPU step of the same precision (tlm: CUDA graphs off, as the data-parallel rows run; "
     "PyTorch: its own 1-process step). Targets: bucketed <= 1.10x on 2 GPUs, <= 1.15x on 4; ZeRO-1 <= 1.10x bucketed.",
     ""]
for prec, r in sorted(one.items()):
    g = one_g.get(prec)
    L.append(f"1 GPU {prec}: tlm {r['step_ms_mean']:.1f} ms (graphs on: {g['step_ms_mean']:.1f} ms)" if g else
             f"1 GPU {prec}: tlm {r['step_ms_mean']:.1f} ms")
    if prec in t_one:
        L.append(f"1 GPU {prec}: PyTorch {t_one[prec]['step_ms_mean']:.1f} ms")
L += ["", "| GPUs | prec | mode | bucket MiB | reduce | tlm step ms | comm ms | comm % | tlm x1 | PyTorch DDP step ms | PyTorch x1 |",
      "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
for r in sorted(rows("tlm-modes-*.json"), key=lambda r: (r["ranks"], r["precision"], r["grad_reduce_dtype"], r["ddp"],
                                                        r.get("bucket_mb") or 0)):
    b = r.get("bucket_mb")
    t = torch_match(r["precision"], r["ranks"], b if r["ddp"] == "bucketed" else None, r["grad_reduce_dtype"], 0) \
        if r["ddp"] == "bucketed" else None
    base = one.get(r["precision"], {}).get("step_ms_mean")
    tb = t_one.get(r["precision"], {}).get("step_ms_mean")
    L.append(f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {b if b else '-'} | {r['grad_reduce_dtype']} | "
             f"{r['step_ms_mean']:.1f} | {r['comm_ms_mean']:.2f} | {100 * r['comm_share']:.1f} | "
             f"{ratio(r['step_ms_mean'], base)} | {t['step_ms_mean']:.1f} | {ratio(t['step_ms_mean'], tb)} |" if t else
             f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {b if b else '-'} | {r['grad_reduce_dtype']} | "
             f"{r['step_ms_mean']:.1f} | {r['comm_ms_mean']:.2f} | {100 * r['comm_share']:.1f} | "
             f"{ratio(r['step_ms_mean'], base)} | - | - |")
L += ["", "ZeRO-1 (memory: the largest rank's, GiB = 2^30 bytes; optimizer = AdamW's moments held by a rank)", "",
      "| GPUs | prec | mode | zero | step ms | vs zero 0 | after set-up | before opt | after opt | peak | optimizer | "
      "PyTorch optimizer | PyTorch peak |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
zr = rows("tlm-zero-*.json")
for r in sorted(zr, key=lambda r: (r["ranks"], r["precision"], r["ddp"], r["zero"])):
    z0 = next((q for q in zr if (q["ranks"], q["precision"], q["ddp"], q["zero"]) ==
               (r["ranks"], r["precision"], r["ddp"], 0)), None)
    t = torch_match(r["precision"], r["ranks"], 25.0, "fp32", r["zero"])
    L.append(f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {r['zero']} | {r['step_ms_mean']:.1f} | "
             f"{ratio(r['step_ms_mean'], z0['step_ms_mean'] if z0 else None)} | {r['mem_after_init_bytes'] / gib:.2f} | "
             f"{r['mem_before_opt_bytes'] / gib:.2f} | {r['mem_after_opt_bytes'] / gib:.2f} | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | {t['peak_bytes_optimizer'] / gib:.2f} | {t['peak_bytes'] / gib:.2f} |"
             if t else
             f"| {r['ranks']} | {r['precision']} | {r['ddp']} | {r['zero']} | {r['step_ms_mean']:.1f} | "
             f"{ratio(r['step_ms_mean'], z0['step_ms_mean'] if z0 else None)} | {r['mem_after_init_bytes'] / gib:.2f} | "
             f"{r['mem_before_opt_bytes'] / gib:.2f} | {r['mem_after_opt_bytes'] / gib:.2f} | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | - | - |")
for prec, r in sorted(one.items()):
    L.append(f"| 1 | {prec} | - | - | {r['step_ms_mean']:.1f} | - | - | - | - | {r['peak_bytes'] / gib:.2f} | "
             f"{r['peak_bytes_optimizer'] / gib:.2f} | - | - |")
L += ["", "Scaling (bucketed 25 MiB; the same per-rank batch: tokens/s should grow N-fold). speed-up: over one GPU "
      "with a rank's rows; whole batch: over one GPU running the same global batch", "",
      "| GPUs | prec | tlm step ms | tlm tokens/s | tlm speed-up | whole batch | PyTorch step ms | PyTorch tokens/s | "
      "PyTorch speed-up |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
# the scale stage's rows, else the modes stage's bucketed 25 MiB rows with fp32 reductions (the same runs)
sc = rows("tlm-scale-*.json") or [r for r in rows("tlm-modes-*.json") if r["ddp"] == "bucketed" and
                                   r.get("bucket_mb") == 25 and r["grad_reduce_dtype"] == "fp32"]
sc += [dict(r, ranks=1) for r in one.values()]
for r in sorted(sc, key=lambda r: (r["precision"], r["ranks"])):
    base = one.get(r["precision"])
    t = torch_match(r["precision"], r["ranks"], 25.0 if r["ranks"] > 1 else 0.0, "fp32", 0)
    tb = t_one.get(r["precision"])
    su = r["tokens_per_s"] / base["tokens_per_s"] if base else 0
    tsu = t["tokens_per_s"] / tb["tokens_per_s"] if t and tb else 0
    whole = next((q for q in one_all if q["precision"] == r["precision"] and q["batch_size"] == r["batch_size"]), None)
    wsu = f"{r['tokens_per_s'] / whole['tokens_per_s']:.2f}x" if whole else "-"
    L.append(f"| {r['ranks']} | {r['precision']} | {r['step_ms_mean']:.1f} | {r['tokens_per_s']:.0f} | {su:.2f}x | "
             f"{wsu} | "
             + (f"{t['step_ms_mean']:.1f} | {t['tokens_per_s']:.0f} | {tsu:.2f}x |" if t else "- | - | - |"))
ct = []
for f in sorted(glob.glob(os.path.join(out, "tlm-ctas-*.json"))):
    ct += [dict(r, ctas=f.rsplit("-", 1)[1][:-5]) for r in rows(os.path.basename(f))]
if ct:
    L += ["", "NCCL's thread blocks capped (NCCL_MAX_CTAS), 2 GPUs, bucketed 25 MiB, fp32 reduction", "",
          "| NCCL_MAX_CTAS | prec | step ms | fwd | bwd | comm | opt | x1 |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(ct, key=lambda r: (r["precision"], int(r["ctas"]))):
        base = one.get(r["precision"], {}).get("step_ms_mean")
        L.append(f"| {r['ctas']} | {r['precision']} | {r['step_ms_mean']:.1f} | {r['fwd_ms_mean']:.1f} | "
                 f"{r['bwd_ms_mean']:.1f} | {(r.get('comm_ms_mean') or 0):.1f} | {r['opt_ms_mean']:.1f} | "
                 f"{ratio(r['step_ms_mean'], base)} |")
ob = rows("tlm-oib-*.json") + rows("tlm-overlap-*.json")
if ob:
    L += ["", "The AdamW update in the backward (optimizer-in-backward: each group reduced, then updated, on the "
          "compute stream) or beside it (overlapped: each bucket's update on a background stream once averaged); "
          "x1 = this step / the 1-GPU plain step", "",
          "| GPUs | prec | update | reduce | step ms | fwd | bwd | comm | opt | x1 |",
          "|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(ob, key=lambda r: (r.get("ranks") or 1, r["precision"], bool(r.get("optimizer_overlap")),
                                      r.get("grad_reduce_dtype") or "")):
        base = one.get(r["precision"], {}).get("step_ms_mean")
        how = "overlapped" if r.get("optimizer_overlap") else "in backward"
        L.append(f"| {r.get('ranks') or 1} | {r['precision']} | {how} | {r.get('grad_reduce_dtype') or '-'} | "
                 f"{r['step_ms_mean']:.1f} | {r['fwd_ms_mean']:.1f} | {r['bwd_ms_mean']:.1f} | "
                 f"{(r.get('comm_ms_mean') or 0):.1f} | {r['opt_ms_mean']:.1f} | {ratio(r['step_ms_mean'], base)} |")
big = []
for f in sorted(glob.glob(os.path.join(out, "tlm-big-*.json"))):
    try:
        big += json.load(open(f)).get("rows", [])
    except (OSError, ValueError):
        pass
if big:
    L += ["", "2.7B, bf16, a rank's batch the same at every GPU count: where one GPU runs out of memory and ZeRO-1 "
          "fits (plan = the memory plan's longest context for the row, --max-context device)", "",
          "| GPUs | context | rows a rank | zero | result | step ms | peak GiB | optimizer GiB | plan's max context |",
          "|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in sorted(big, key=lambda r: (r.get("ranks") or 1, r["context_length"], r.get("zero") or 0)):
        n = r.get("ranks") or 1
        res = "ran" if r["status"] == "ok" else (r.get("error") or r["status"]).replace("|", "/")
        step = f"{r['step_ms_mean']:.0f}" if r.get("step_ms_mean") else "-"
        L.append(f"| {n} | {r['context_length']} | {r['batch_size'] // n} | {r.get('zero') or 0} | {res} | {step} | "
                 f"{r['peak_bytes'] / gib:.2f} | {r['peak_bytes_optimizer'] / gib:.2f} | {r.get('max_context')} |")
# the ddp stage's experiments, tlm-GROUP-*.json (extra, zl), each with its own 1-GPU rows (tlm-GROUP-1.json,
# tlm-GROUP-overlap-1.json)
exp = []
for group in ("extra", "zl"):
    for f in sorted(glob.glob(os.path.join(out, f"tlm-{group}-*.json"))):
        try:
            exp += [(group, os.path.basename(f)[4:-5], r) for r in json.load(open(f)).get("rows", [])
                    if r.get("status") == "ok"]
        except (OSError, ValueError):
            pass
if exp:
    ones = {}
    for group, name, r in exp:
        if (r.get("ranks") or 1) == 1:
            ones.setdefault(group, {})[(r["precision"], bool(r.get("optimizer_overlap")))] = r["step_ms_mean"]
    L += ["", "Experiments (file tlm-NAME.json; extra-2-VAR: "
          "that variable set): x1 = this step / the 1-GPU step of the same call, plain AdamW; x1 same update = over "
          "the 1-GPU step with the same (overlapped or plain) update", "",
          "| file | GPUs | prec | bucket MiB | reduce | zero | opt overlap | fwd | bwd | comm | opt | step ms | x1 | "
          "x1 same update |", "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for group, name, r in exp:
        base = ones.get(group, {})
        ov = bool(r.get("optimizer_overlap"))
        L.append(f"| {name} | {r.get('ranks') or 1} | {r['precision']} | {r.get('bucket_mb') or '-'} | "
                 f"{r.get('grad_reduce_dtype') or '-'} | {r.get('zero') or 0} | {'yes' if ov else 'no'} | "
                 f"{r['fwd_ms_mean']:.2f} | {r['bwd_ms_mean']:.2f} | {(r.get('comm_ms_mean') or 0):.2f} | "
                 f"{r['opt_ms_mean']:.2f} | {r['step_ms_mean']:.1f} | "
                 f"{ratio(r['step_ms_mean'], base.get((r['precision'], False)))} | "
                 f"{ratio(r['step_ms_mean'], base.get((r['precision'], ov)))} |")
def write(path, text):
    """text to path through a temporary file: a reader never sees half of it"""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


write(os.path.join(out, "ddp-side-by-side.md"), "\n".join(L) + "\n")
print("\n".join(L))
