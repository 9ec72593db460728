#!/usr/bin/env python3
"""allreduce_table.py DIR — the all-reduce side-by-side table (in-place busbw, GB/s) of the JSON files in DIR
(bench/device/run.sh allreduce): tlm MPI and NCCL, gloo, torch NCCL, nccl-tests, Open MPI's algorithms; writes
DIR/allreduce-side-by-side.md and prints the table."""
import glob, json, os, sys
out = sys.argv[1]
runs = {}  # (who, backend, nranks, bytes) -> busbw of the in-place row
def load(path, who):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return
    for r in d.get("rows", []):
        if r.get("in_place") and r.get("status") == "ok" and r.get("busbw_gb_per_s") is not None:
            runs[(who, r["backend"], r["nranks"], r["bytes"])] = (r["busbw_gb_per_s"], r["time_us_mean"])
for f, who in (("tlm-mpi.json", "tlm"), ("tlm-nccl-1.json", "tlm"), ("tlm-nccl.json", "tlm"),
               ("torch-gloo.json", "torch"), ("torch-nccl.json", "torch")):
    load(os.path.join(out, f), who)
load(os.path.join(out, "tlm-nccl-net.json"), "net")
load(os.path.join(out, "nccl-tests.json"), "nt")  # bench/peers/nccl_tests_json.py of nccl-tests.txt
load(os.path.join(out, "tlm-mpi-plain.json"), "plain")
for f in sorted(glob.glob(os.path.join(out, "tlm-mpi-alg-*.json"))):
    load(f, "alg" + f.rsplit("-", 1)[1].split(".")[0])
keys = sorted({(k[2], k[3]) for k in runs})
lines = ["| ranks | size (bytes) | tlm MPI busbw | gloo busbw | MPI / gloo | MPI_Allreduce only | MPI ring (4) | MPI rabenseifner (6) "
         "| MPI rec. doubling (3) | tlm NCCL busbw | torch NCCL busbw | nccl-tests busbw | tlm / nccl-tests "
         "| tlm NCCL net busbw |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
def cell(key):
    v = runs.get(key)
    return f"{v[0]:.2f}" if v else "-"
for n, b in keys:
    mpi, gloo = runs.get(("tlm", "mpi", n, b)), runs.get(("torch", "gloo", n, b))
    ratio = f"{mpi[0] / gloo[0]:.2f}x" if mpi and gloo and gloo[0] > 0 else "-"
    nccl, nt = runs.get(("tlm", "nccl", n, b)), runs.get(("nt", "nccl", n, b))
    nt_ratio = f"{nccl[0] / nt[0]:.3f}x" if nccl and nt and nt[0] > 0 else "-"
    lines.append(f"| {n} | {b} | {cell(('tlm', 'mpi', n, b))} | {cell(('torch', 'gloo', n, b))} | {ratio} | "
                 f"{cell(('plain', 'mpi', n, b))} | {cell(('alg4', 'mpi', n, b))} | {cell(('alg6', 'mpi', n, b))} | {cell(('alg3', 'mpi', n, b))} | "
                 f"{cell(('tlm', 'nccl', n, b))} | {cell(('torch', 'nccl', n, b))} | {cell(('nt', 'nccl', n, b))} | {nt_ratio} | "
                 f"{cell(('net', 'nccl', n, b))} |")
text = "\n".join(lines) + "\n"
path = os.path.join(out, "allreduce-side-by-side.md")
with open(path + ".tmp", "w") as f:
    f.write("busbw = algbw x 2(n-1)/n, GB/s = 10^9 bytes/s; the in-place rows (torch.distributed all-reduces in "
            "place); tlm MPI = --mpi-algorithm auto (tlm's shared-memory schedule from 256 KiB a rank, MPI_Allreduce below); "
            "MPI_Allreduce only = --mpi-algorithm mpi; MPI / gloo = tlm's MPI busbw over gloo's; the target is >= 2x at 100 MB and 1 GB for 2 and 4 "
            "processes. At 1 rank busbw is 0 by definition.\n\n" + text)
os.replace(path + ".tmp", path)
print(text, end="")
