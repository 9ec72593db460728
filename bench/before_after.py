#!/usr/bin/env python3
"""before_after.py DIR — the table of bench/run-before-after.sh: for each (model, precision), the median
over the rounds of forward, backward and optimizer ms before and after, and after/before. Reads
DIR/before-N.json and DIR/after-N.json (tlm bench --format json; field names of either schema)."""
import glob
import json
import statistics
import sys


def field(row, *names):
    for n in names:
        if row.get(n) is not None:
            return row[n]
    return None


def load(path):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for r in doc["rows"]:
        if r.get("status") != "ok":
            continue
        key = (r["model"], r["precision"])
        out[key] = {"forward": field(r, "forward_ms", "fwd_ms_mean"), "backward": field(r, "backward_ms", "bwd_ms_mean"),
                    "optimizer": field(r, "optimizer_ms", "opt_ms_mean"), "peak": field(r, "peak_bytes")}
    return out, doc.get("device", "?")


def main():
    d = sys.argv[1]
    runs = {"before": [], "after": []}
    device = "?"
    for v in runs:
        for p in sorted(glob.glob(f"{d}/{v}-*.json")):
            rows, device = load(p)
            runs[v].append(rows)
    keys = sorted({k for rows in runs["before"] + runs["after"] for k in rows})
    print(f"device: {device}; medians over {len(runs['before'])} rounds, before/after alternating\n")
    print("| model | prec | phase | before ms | after ms | after/before |")
    print("|---|---|---|---:|---:|---:|")
    worst = 1.0
    for k in keys:
        for phase in ("forward", "backward", "optimizer", "forward+backward"):
            med = {}
            for v in runs:
                vals = []
                for rows in runs[v]:
                    if k not in rows:
                        continue
                    r = rows[k]
                    x = r["forward"] + r["backward"] if phase == "forward+backward" else r[phase]
                    if x is not None:
                        vals.append(x)
                med[v] = statistics.median(vals) if vals else None
            if med["before"] and med["after"]:
                ratio = med["after"] / med["before"]
                worst = max(worst, ratio)
                print(f"| {k[0]} | {k[1]} | {phase} | {med['before']:.3f} | {med['after']:.3f} | {ratio:.3f} |")
    print(f"\nworst after/before: {worst:.3f}")


if __name__ == "__main__":
    main()
