#!/usr/bin/env python3
"""side_by_side.py — one markdown table of tlm bench and PyTorch peer results (JSON files of
`tlm bench --format json` and `bench/peers/pytorch_lm.py --format json`), matched by model,
context length and batch size, with PyTorch/tlm ratios (> 1: tlm is faster or leaner).

Usage: side_by_side.py OUT.md TLM.json [TLM2.json ...] --peers PEER.json [PEER2.json ...]
"""
import json
import os
import sys


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        for r in d["rows"]:
            if r.get("status", "ok") != "ok":
                r["_failed"] = True
            if "impl" not in r:
                r["impl"] = "tlm"
            if r.get("peak_bytes") is None and r.get("peak_mib"):  # peer files written before 2026-11-24
                r["peak_bytes"] = r["peak_mib"] * 2**20
            rows.append(r)
    return rows


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv):
    out = argv[1]
    i = argv.index("--peers")
    tlm_rows, peer_rows = load(argv[2:i]), load(argv[i + 1:])
    lines = ["| model | ctx | impl | precision | fwd ms | bwd ms | AdamW ms | peak GiB | "
             "fwd+bwd PyTorch-eager-same-precision / this |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    keys = []
    for r in tlm_rows + peer_rows:
        k = (r["model"], r["context_length"], r["batch_size"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        group = [r for r in tlm_rows + peer_rows if (r["model"], r["context_length"], r["batch_size"]) == k]
        eager = {r["precision"]: r for r in group if r["impl"] == "pytorch-eager" and not r.get("_failed")}
        for r in group:
            if r.get("_failed"):
                lines.append(f"| {k[0]} | {k[1]} | {r['impl']} | {r['precision']} | OOM or failed | | | | |")
                continue
            fb = (r.get("fwd_ms_mean") or 0) + (r.get("bwd_ms_mean") or 0)
            ref_prec = "fp32" if r["precision"] in ("fp32", "tf32") else r["precision"]
            ref = eager.get(r["precision"]) or eager.get(ref_prec)
            ratio = "-"
            if ref and fb > 0 and r is not ref:
                ratio = f"{((ref.get('fwd_ms_mean') or 0) + (ref.get('bwd_ms_mean') or 0)) / fb:.2f}x vs {ref['precision']}"
            peak = r.get("peak_bytes")
            lines.append(f"| {k[0]} | {k[1]} | {r['impl']} | {r['precision']} | {fmt(r.get('fwd_ms_mean'))} | "
                         f"{fmt(r.get('bwd_ms_mean'))} | {fmt(r.get('opt_ms_mean'))} | "
                         f"{fmt(peak / 2**30 if peak else None, 2)} | {ratio} |")
    text = "\n".join(lines) + "\n"
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    print(text)


if __name__ == "__main__":
    main(sys.argv)
