#!/usr/bin/env python3
"""before_after.py DIR — the table of bench/device/run.sh's before-after stage: for each row (a model and
precision of `tlm bench`, or a shape of `tlm attention`) and phase, the median over the rounds of the ms
before and after, after/before of the medians, and the range of the rounds' own after/before (the noise).
Reads DIR/before-*N.json and DIR/after-*N.json (any name between: before-lm-2.json, before-attn-2.json, or
the older before-2.json), `tlm bench` or `tlm attention` --format json, field names of either schema."""
import glob
import json
import os
import re
import statistics
import sys


def field(row, *names):
    for n in names:
        if row.get(n) is not None:
            return row[n]
    return None


def bench_row(r):
    f = field(r, "forward_ms", "fwd_ms_mean")
    b = field(r, "backward_ms", "bwd_ms_mean")
    o = field(r, "optimizer_ms", "opt_ms_mean")
    key = (r["model"], r["precision"])
    phases = {"forward": f, "backward": b, "optimizer": o}
    if f is not None and b is not None:
        phases["forward+backward"] = f + b
        if o is not None:
            phases["step"] = f + b + o
    return key, phases


def attention_row(r):
    key = ("attention %s b%s h%s s%s d%s%s" % (r["impl"], r["batch_size"], r["num_heads"], r["context_length"],
                                              r["d_head"], " causal" if r.get("causal") else ""), r["dtype"])
    return key, {"forward": r.get("fwd_ms_mean"), "backward": r.get("bwd_ms_mean"),
                 "forward+backward": r.get("fwdbwd_ms_mean")}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    out, peaks = {}, {}
    for r in doc.get("rows", []):
        if r.get("status") != "ok":
            continue
        key, phases = attention_row(r) if "d_head" in r and "model" not in r else bench_row(r)
        out[key] = {p: v for p, v in phases.items() if v is not None}
        if r.get("peak_bytes"):
            peaks[key] = r["peak_bytes"]
    return out, peaks, doc.get("device", "?"), doc.get("tuning") or doc.get("knobs")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: before_after.py DIR (with before-*N.json and after-*N.json)")
    d = sys.argv[1]
    runs = {"before": {}, "after": {}}  # version -> round -> {key: phases}
    peaks = {"before": {}, "after": {}}  # version -> key -> [peak bytes of each round]
    device, knobs = "?", set()
    for v in runs:
        for p in sorted(glob.glob(os.path.join(d, f"{v}-*.json"))):
            m = re.search(r"-(\d+)\.json$", p)
            if not m:
                continue
            try:
                rows, pk, device, kn = load(p)
            except (OSError, ValueError, KeyError) as e:
                print(f"skipped {p}: {e}", file=sys.stderr)
                continue
            runs[v].setdefault(int(m.group(1)), {}).update(rows)
            for k, b in pk.items():
                peaks[v].setdefault(k, []).append(b)
            if kn:
                knobs.add(f"{v}: {kn}")
    rounds = sorted(set(runs["before"]) & set(runs["after"]))
    keys = sorted({k for v in runs for rows in runs[v].values() for k in rows})
    print(f"device: {device}; medians over {len(rounds)} rounds, before and after alternating")
    if knobs:
        print("knobs not at their default: " + "; ".join(sorted(knobs)))
    print()
    print("| row | prec | phase | before ms | after ms | after/before | rounds' after/before |")
    print("|---|---|---|---:|---:|---:|---|")
    worst, worst_at = 0.0, ""
    for k in keys:
        phases = []
        for v in runs:
            for rows in runs[v].values():
                phases += [p for p in rows.get(k, {}) if p not in phases]
        for phase in phases:
            med, per = {}, []
            for v in runs:
                vals = [rows[k][phase] for rows in runs[v].values() if phase in rows.get(k, {})]
                med[v] = statistics.median(vals) if vals else None
            for r in rounds:
                a, b = runs["after"][r].get(k, {}).get(phase), runs["before"][r].get(k, {}).get(phase)
                if a and b:
                    per.append(a / b)
            if med["before"] and med["after"]:
                ratio = med["after"] / med["before"]
                if ratio > worst:
                    worst, worst_at = ratio, f"{k[0]} {k[1]} {phase}"
                spread = f"{min(per):.3f}-{max(per):.3f}" if per else "-"
                print(f"| {k[0]} | {k[1]} | {phase} | {med['before']:.3f} | {med['after']:.3f} | {ratio:.3f} | {spread} |")
    if worst:
        print(f"\nworst after/before: {worst:.3f} ({worst_at})")
    both = sorted(set(peaks["before"]) & set(peaks["after"]))
    if both:  # the allocator's peak (tlm bench's peak_bytes): the same every round unless the plan changed
        print("\n| row | prec | before peak GiB | after peak GiB | after - before GiB |")
        print("|---|---|---:|---:|---:|")
        for k in both:
            b, a = (max(peaks[v][k]) / 2**30 for v in ("before", "after"))
            print(f"| {k[0]} | {k[1]} | {b:.2f} | {a:.2f} | {a - b:+.2f} |")


if __name__ == "__main__":
    main()
