#!/usr/bin/env python3
"""attention_side_by_side.py — `tlm attention` next to its PyTorch peer, one markdown table per suite.

Reads JSON files of `tlm attention --format json` (tool "tlm attention") and of
`bench/peers/pytorch_attention.py --format json` (tool "pytorch_attention.py"), groups their rows by
the file's suite (pytorch-attention, flash-benchmarking, leaderboard; "custom" without one) and
matches rows by case: batch_size, num_heads, context_length, d_head, dtype, causal (older files'
field names are read too). Rows = cases; columns =
implementations: tlm flash, tlm naive, torch naive, torch compile, SDPA flash, SDPA cuDNN (and SDPA
math when present). Each cell: forward / backward / forward+backward ms (mean of the timed passes),
TFLOP/s forward / backward / forward+backward (FlashAttention's convention, the same in both tools:
forward 4*b*h*s^2*d, halved when causal, backward 2.5x), and MiB in use before the backward (tlm:
its tracked allocator; PyTorch: torch.cuda.memory_allocated); or the row's status (OOM,
unsupported, unavailable, skipped, failed); cases that every tool skipped (--max-seq) are counted
under the table, not listed. The last column: torch's fastest forward+backward
(among the PyTorch columns) over tlm flash's (> 1: tlm flash is faster).

Usage: attention_side_by_side.py OUT.md FILE.json [FILE.json ...]
Writes OUT.md (to a temporary name, then renamed) and prints it.
"""
import json
import os
import sys

# (tool, impl) -> column title, in column order
COLUMNS = [
    (("tlm", "flash"), "tlm flash"),
    (("tlm", "naive"), "tlm naive"),
    (("pytorch", "naive"), "torch naive"),
    (("pytorch", "compile"), "torch compile"),
    (("pytorch", "sdpa-flash"), "SDPA flash"),
    (("pytorch", "sdpa-cudnn"), "SDPA cuDNN"),
    (("pytorch", "sdpa-math"), "SDPA math"),
]
OPTIONAL = {("pytorch", "sdpa-math")}  # a column only when some file has its rows
SUITE_ORDER = ["pytorch-attention", "flash-benchmarking", "leaderboard", "custom"]


def flops_forward(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def load(paths):
    """-> (sources, rows): one source per file (tool, suite, device, date, iters, warmup), rows tagged with it"""
    sources, rows = [], []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        tool = d.get("tool", "")
        if tool not in ("tlm attention", "pytorch_attention.py"):
            raise SystemExit(f"{path}: not a tlm attention or pytorch_attention.py JSON file (tool '{tool}')")
        src = dict(path=os.path.basename(path), tool=tool, suite=d.get("suite") or "custom",
                   device=d.get("device", "?"), date=d.get("date", "?"), iters=d.get("iters"),
                   warmup=d.get("warmup"), version=d.get("version") or d.get("torch"))
        sources.append(src)
        if src["suite"] == "none":
            src["suite"] = "custom"
        if d["rows"] and src["iters"] is None:  # tlm's report keeps them per row
            src["iters"], src["warmup"] = d["rows"][0].get("iters"), d["rows"][0].get("warmup_steps")
        for r in d["rows"]:
            r = normalize(dict(r))
            r["_suite"] = src["suite"]
            r["_tool"] = "tlm" if tool == "tlm attention" else "pytorch"
            rows.append(r)
    return sources, rows


# the field names of the one report schema, from those of results written before it (2026-11-21)
OLD_NAMES = {"batch": "batch_size", "heads": "num_heads", "seq": "context_length", "fwd_ms": "fwd_ms_mean",
             "bwd_ms": "bwd_ms_mean", "fwdbwd_ms": "fwdbwd_ms_mean", "tflops_fwd": "fwd_tflop_per_s",
             "tflops_bwd": "bwd_tflop_per_s", "note": "error"}


def normalize(r):
    for old, new in OLD_NAMES.items():
        if old in r and new not in r:
            r[new] = r.pop(old)
    if r.get("mem_before_bwd_mib") is not None and r.get("mem_before_bwd_bytes") is None:
        r["mem_before_bwd_bytes"] = r.pop("mem_before_bwd_mib") * 2**20
    return r


def case_key(r):
    return (r["batch_size"], r["num_heads"], r["context_length"], r["d_head"], r["dtype"], bool(r["causal"]))


def num(x, digits):
    if x is None:
        return "-"
    if digits == "auto":  # 3 significant figures, no exponent for the usual ranges
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return f"{x:.{digits}f}"


def cell(r):
    if r is None:
        return ""
    status = r.get("status", "ok")
    if status != "ok":
        return status
    b, h, s, d, causal = r["batch_size"], r["num_heads"], r["context_length"], r["d_head"], bool(r["causal"])
    fb = r.get("fwdbwd_ms_mean")
    tf_fb = 3.5 * flops_forward(b, h, s, d, causal) / (fb * 1e9) if fb else None
    text = (f"{num(r.get('fwd_ms_mean'), 'auto')} / {num(r.get('bwd_ms_mean'), 'auto')} / {num(fb, 'auto')} ms"
            f"<br>{num(r.get('fwd_tflop_per_s'), 'auto')} / {num(r.get('bwd_tflop_per_s'), 'auto')} / "
            f"{num(tf_fb, 'auto')} TFLOP/s")
    mem = r.get("mem_before_bwd_bytes")
    if mem is not None:
        text += f"<br>{num(mem / 2**20, 0)} MiB"
    return text


def speedup(group):
    """torch's fastest fwd+bwd over tlm flash's, with the name of that torch implementation"""
    flash = group.get(("tlm", "flash"))
    if not flash or flash.get("status", "ok") != "ok" or not flash.get("fwdbwd_ms_mean"):
        return "-"
    best = None
    for (tool, impl), title in COLUMNS:
        r = group.get((tool, impl))
        if tool != "pytorch" or not r or r.get("status", "ok") != "ok" or not r.get("fwdbwd_ms_mean"):
            continue
        if best is None or r["fwdbwd_ms_mean"] < best[0]:
            best = (r["fwdbwd_ms_mean"], title)
    if best is None:
        return "no torch row ran"
    return f"{best[0] / flash['fwdbwd_ms_mean']:.2f}x vs {best[1]}"


def table(suite, rows, sources):
    present = {(r["_tool"], r["impl"]) for r in rows}
    cols = [(k, t) for k, t in COLUMNS if k not in OPTIONAL or k in present]
    groups = {}  # case -> {(tool, impl): row}, in first-seen order
    for r in rows:
        groups.setdefault(case_key(r), {})[(r["_tool"], r["impl"])] = r
    lines = [f"## {suite}", ""]
    for s in sources:
        if s["suite"] == suite:
            lines.append(f"- `{s['path']}`: {s['tool']} {s['version'] or ''}, {s['device']}, {s['date']}, "
                         f"{s['warmup']} warm-up + {s['iters']} timed forward and backward passes")
    lines += ["- cell: forward / backward / forward+backward ms; TFLOP/s forward / backward / forward+backward "
              "(FlashAttention's convention: forward 4·b·h·s²·d, halved when causal, backward 2.5x); MiB in use "
              "before the backward (tlm: tracked allocator; PyTorch: torch.cuda.memory_allocated)",
              "- last column: the fastest PyTorch forward+backward over tlm flash's (> 1: tlm flash is faster)",
              "",
              "| batch | heads | seq | d | dtype | causal | " + " | ".join(t for _, t in cols) +
              " | torch best / tlm flash |",
              "|---:|---:|---:|---:|---|---|" + "---|" * len(cols) + "---:|"]
    skipped = 0
    for key, g in groups.items():
        if all(r.get("status") == "skipped" for r in g.values()):  # not run by any tool (--max-seq)
            skipped += 1
            continue
        b, h, s, d, dt, causal = key
        lines.append(f"| {b} | {h} | {s} | {d} | {dt} | {'yes' if causal else 'no'} | " +
                     " | ".join(cell(g.get(k)) for k, _ in cols) + f" | {speedup(g)} |")
    if skipped:
        lines += ["", f"{skipped} more case{'s' if skipped != 1 else ''} skipped by every tool (seq > --max-seq)."]
    return lines


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out = argv[1]
    sources, rows = load(argv[2:])
    suites = sorted({r["_suite"] for r in rows},
                    key=lambda s: SUITE_ORDER.index(s) if s in SUITE_ORDER else len(SUITE_ORDER))
    lines = ["# tlm attention vs PyTorch, side by side", ""]
    for suite in suites:
        lines += table(suite, [r for r in rows if r["_suite"] == suite], sources) + [""]
    text = "\n".join(lines)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
