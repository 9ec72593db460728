#!/usr/bin/env python3
"""gpu_profile_torch.py — `tlm profile --exec` against torch.profiler on the same PyTorch workload
(label gpu; exit 77 without a GPU, PyTorch or tlm's injection library).

Runs bench/peers/pytorch_lm.py --nvtx twice with the same arguments: once under `tlm profile --exec`
(CUPTI through libtlm_inject.so, NVTX ranges through tlm's NVTX handler), once in this process under
torch.profiler (kineto, CUPTI too; the peer's record_function ranges carry the same names). From
torch.profiler's trace, each GPU kernel (and memcpy/memset) is put in the innermost range open at the
launching API call (on the launching thread, else on any thread: PyTorch's backward runs on its own
thread), the rule tlm uses; warm-up steps are left out. The kernel time per range name per step must
agree within 3% for forward, backward, optimizer and the naive attention's three stages.

Usage: python3 tests/gpu_profile_torch.py path/to/tlm [--model small] [--context-length 256]
       [--precision fp32] [--warmup 3] [--steps 5] [--keep DIR] [--tolerance 0.03]
"""
import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(ROOT, "bench", "peers", "pytorch_lm.py")
COMPARED = ["forward", "backward", "optimizer", "computing attention scores", "computing softmax", "final matmul"]


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def peer_args(a):
    return ["--device", "cuda", "--model", a.model, "--context-length", str(a.context_length), "--precision",
            a.precision, "--warmup", str(a.warmup), "--steps", str(a.steps), "--pass", "train", "--nvtx",
            "--format", "json"]


def tlm_ranges(a, tmp):
    out = os.path.join(tmp, "exec.json")
    cmd = [a.tlm, "profile", "--model", a.model, "--format", "json", "--out", out, "--trace",
           os.path.join(tmp, "exec-trace.json"), "--exec", "--", sys.executable, PEER] + peer_args(a)
    print("# " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(f"tlm profile --exec failed (exit {r.returncode})")
    d = json.load(open(out))
    return {row["range"]: row["kernel_us_per_step"] for row in d["ranges"]}, d


def torch_ranges(a, tmp):
    import torch
    sys.path.insert(0, os.path.dirname(PEER))
    import pytorch_lm
    trace = os.path.join(tmp, "torch-trace.json")
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        rc = pytorch_lm.main(peer_args(a))
    if rc:
        raise SystemExit(f"the peer failed under torch.profiler ({rc})")
    prof.export_chrome_trace(trace)
    events = json.load(open(trace))["traceEvents"]
    launches = {}  # correlation -> (ts, tid) of the runtime/driver call
    ranges = {}    # tid -> sorted [(begin, end, name)]
    kernels = []
    for e in events:
        cat, args = e.get("cat", ""), e.get("args", {})
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = (e["ts"], e["tid"])
        elif cat == "user_annotation" and e.get("ph") == "X":
            ranges.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
            kernels.append((args.get("correlation"), e["dur"]))
    for v in ranges.values():
        v.sort(key=lambda r: (r[0], -r[1]))

    def enclosing(tid, t):
        """ranges of one thread open at t, innermost last"""
        return [r for r in ranges.get(tid, []) if r[0] <= t < r[1]]

    totals, steps = {}, set()
    unplaced = 0
    for corr, dur in kernels:
        if corr not in launches:
            unplaced += 1
            continue
        t, tid = launches[corr]
        open_ = enclosing(tid, t)
        if not open_:  # another thread's ranges: the one whose innermost began last
            best = []
            for other in ranges:
                c = enclosing(other, t)
                if c and (not best or c[-1][0] > best[-1][0]):
                    best = c
            open_ = best
        names = [r[2] for r in open_]
        if any(n.startswith("warmup step ") for n in names):
            continue
        for n in names:
            if n.startswith("step "):
                steps.add(n)
        for n in set(names):
            totals[n] = totals.get(n, 0.0) + dur
    n = max(1, len(steps))
    print(f"# torch.profiler: {len(kernels)} device activities, {unplaced} without a launch, {n} profiled steps")
    return {k: v / n for k, v in totals.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tlm")
    p.add_argument("--model", default="small")
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--tolerance", type=float, default=0.03)
    p.add_argument("--keep", help="keep the JSON files and traces in this folder")
    a = p.parse_args()
    try:
        import torch
    except ImportError:
        skip("no PyTorch")
    if not torch.cuda.is_available():
        skip("no CUDA device visible to PyTorch")
    lib = os.path.join(os.path.dirname(os.path.abspath(a.tlm)), "libtlm_inject.so")
    if not os.path.exists(lib):
        skip(f"no {lib} (tlm built without CUPTI)")
    tmp = a.keep or tempfile.mkdtemp(prefix="tlm_profile_torch_")
    os.makedirs(tmp, exist_ok=True)
    ours, report = tlm_ranges(a, tmp)
    theirs = torch_ranges(a, tmp)
    failed = 0
    print(f"{'range':28s} {'tlm us/step':>12s} {'torch us/step':>14s} {'diff':>7s}")
    for name in COMPARED:
        t, k = ours.get(name), theirs.get(name)
        if t is None or k is None or k <= 0:
            print(f"{name:28s} {str(t):>12s} {str(k):>14s}   FAIL (missing)")
            failed += 1
            continue
        rel = abs(t - k) / k
        ok = rel <= a.tolerance
        failed += not ok
        print(f"{name:28s} {t:12.1f} {k:14.1f} {100 * rel:6.2f}%  {'ok' if ok else 'FAIL'}")
    for f in report.get("findings", []):
        print("# finding: " + f)
    print(f"{len(COMPARED) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
