#!/usr/bin/env python3
"""ddp_bf16_table.py DIR — the table of bench/device/run.sh's ddp-bf16 stage: for each version (before, after) the
median over the rounds of the 1-GPU and N-GPU step (forward + backward + optimizer, ms), their ratio (the N-GPU
step over the 1-GPU step of the same version and round: 1.00 is perfect scaling at a fixed batch a rank), the
backward on 1 and N GPUs (its slowdown beside the reduction), the exposed communication, and tokens/s of N GPUs
over one. Reads DIR/{before,after}-{1,N}-R.json (`tlm bench --format json`)."""
import glob
import json
import os
import re
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ddp_bf16_table.py DIR")
    runs = {}
    for p in glob.glob(os.path.join(sys.argv[1], "*-*-*.json")):
        m = re.match(r"(before|after)-(\d+)-(\d+)\.json$", os.path.basename(p))
        if not m:
            continue
        with open(p) as f:
            rows = [r for r in json.load(f).get("rows", []) if r.get("status") == "ok"]
        if rows:
            runs[(m.group(1), int(m.group(2)), int(m.group(3)))] = rows[0]
    print("| version | rounds | 1-GPU step ms | N-GPU step ms | N | step ratio (rounds) | backward 1 -> N ms |"
          " exposed comm ms | tokens/s N / 1 |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|")
    for v in ("before", "after"):
        ns = sorted({n for (vv, n, _) in runs if vv == v and n > 1})
        for n in ns:
            rounds = sorted(r for (vv, nn, r) in runs if vv == v and nn == n and (v, 1, r) in runs)
            if not rounds:
                continue
            one = [runs[(v, 1, r)] for r in rounds]
            many = [runs[(v, n, r)] for r in rounds]
            med = lambda rows, k: statistics.median(x[k] for x in rows)
            ratios = [b["step_ms_mean"] / a["step_ms_mean"] for a, b in zip(one, many)]
            print(f"| {v} | {len(rounds)} | {med(one, 'step_ms_mean'):.2f} | {med(many, 'step_ms_mean'):.2f} | {n} | "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
                  f"{med(one, 'bwd_ms_mean'):.2f} -> {med(many, 'bwd_ms_mean'):.2f} | "
                  f"{med(many, 'comm_ms_mean') or 0:.2f} | "
                  f"{statistics.median(b['tokens_per_s'] / a['tokens_per_s'] for a, b in zip(one, many)):.3f} |")
    one = [r for (v, n, _), r in sorted(runs.items()) if n == 1]
    if one:
        r = one[0]
        print(f"\nrows: {r['model']} {r['precision']}, {r['batch_size']} rows a GPU, context {r['context_length']},"
              f" CUDA graphs {'on' if r.get('cuda_graphs') else 'off'}")


if __name__ == "__main__":
    main()
