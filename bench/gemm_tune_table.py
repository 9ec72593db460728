#!/usr/bin/env python3
"""gemm_tune_table.py RUNS OUT — the table of bench/device/run.sh gemm-tune. RUNS holds tuneV-MODEL-rR.json
(tlm bench --format json; V = the TLM_GEMM_TUNE value: 0 the heuristic's pick, 2 timed) and the
tune-plans.txt lines are read from OUT. Writes OUT/heuristic.json and OUT/tuned.json (every round's rows,
each with "tlm_gemm_tune" and "round" added; the header of the first file) and OUT/gemm-tune.md: per
(model, precision, pass) the median over rounds of the step time (forward + backward [+ AdamW]) and of
the forward and backward times, tuned/heuristic, the round-to-round spread of each setting, the peaks
and last losses compared; then per (model, precision) what the timing chose, from tune-plans.txt."""
import glob
import json
import os
import re
import statistics
import sys

SETTINGS = {"0": "heuristic", "2": "tuned"}
TYPES = {"0": "fp32", "14": "bf16", "2": "fp16"}  # cudaDataType_t of A and B


def load(runs):
    docs = {v: [] for v in SETTINGS.values()}
    header = {}
    for path in sorted(glob.glob(os.path.join(runs, "tune*-*-r*.json"))):
        m = re.match(r"tune(\d)-(.+)-r(\d+)\.json$", os.path.basename(path))
        if not m or m.group(1) not in SETTINGS:
            continue
        with open(path) as f:
            doc = json.load(f)
        setting = SETTINGS[m.group(1)]
        header.setdefault(setting, {k: v for k, v in doc.items() if k != "rows"})
        for r in doc["rows"]:
            r["tlm_gemm_tune"] = int(m.group(1))
            r["round"] = int(m.group(3))
            docs[setting].append(r)
    return header, docs


def write_json(path, header, rows):
    doc = dict(header)
    doc["rows"] = rows
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def spread(vals):  # (max - min) / min over the rounds, percent
    vals = [v for v in vals if v is not None]
    return 100 * (max(vals) - min(vals)) / min(vals) if len(vals) > 1 else None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def plans(path):
    """per (model, precision): [heuristic ms, kept ms, kept index] of each timed plan, from the model's
    first run with TLM_GEMM_TUNE=2 that printed any (a run cut short prints none)"""
    runs = []  # [model, tune value, {precision: [...]}] in the file's order
    if not os.path.exists(path):
        return {}
    line_re = re.compile(r"types (\d+) (\d+) .*heuristic's pick ([\d.]+) ms, kept #(\d+) ([\d.]+) ms")
    for line in open(path):
        h = re.match(r"## model (\S+) round (\d+) TLM_GEMM_TUNE=(\d)", line)
        if h:
            runs.append((h.group(1), h.group(3), {}))
            continue
        m = line_re.search(line)
        if m and runs:
            runs[-1][2].setdefault(TYPES.get(m.group(1), m.group(1)), []).append(
                (float(m.group(3)), float(m.group(5)), int(m.group(4))))
    out = {}
    for model, tune, by_prec in runs:
        if tune == "2" and by_prec and not any(k[0] == model for k in out):
            for prec, v in by_prec.items():
                out[(model, prec)] = v
    return out


def main():
    runs, out = sys.argv[1], sys.argv[2]
    header, docs = load(runs)
    for setting, rows in docs.items():
        if rows:
            write_json(os.path.join(out, setting + ".json"), header[setting], rows)
    device = header.get("heuristic", header.get("tuned", {})).get("device", "?")
    by = {}
    for setting, rows in docs.items():
        for r in rows:
            if r.get("status") != "ok":
                continue
            by.setdefault((r["model"], r["precision"], r["pass"]), {}).setdefault(setting, []).append(r)
    order = {m: i for i, m in enumerate(["tiny", "small", "medium", "large", "xl", "2.7B"])}
    keys = sorted(by, key=lambda k: (order.get(k[0], 99), k[1], k[2]))
    rounds = max((r["round"] for rows in docs.values() for r in rows), default=0)
    lines = [f"device: {device}. Medians over the rounds (n: rounds with both runs; {rounds} at most; each round "
             "runs a model's two settings back to back, the order swapped every round). heuristic = TLM_GEMM_TUNE=0 (cuBLASLt's first pick), tuned = "
             "TLM_GEMM_TUNE=2 (the fastest of up to 8 candidates, timed once per plan). Step = forward + backward "
             "(+ AdamW for train); spread = (max - min) / min of a setting's step over the rounds.", ""]
    lines.append("| model | prec | pass | n | heuristic ms | tuned ms | tuned/heur | fwd t/h | bwd t/h | spread heur % | spread tuned % |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    peak_diff, loss_rel = [], {}
    for k in keys:
        h, t = by[k].get("heuristic", []), by[k].get("tuned", [])
        hs, ts = med([r.get("step_ms_mean") for r in h]), med([r.get("step_ms_mean") for r in t])
        hf, tf = med([r.get("fwd_ms_mean") for r in h]), med([r.get("fwd_ms_mean") for r in t])
        hb, tb = med([r.get("bwd_ms_mean") for r in h]), med([r.get("bwd_ms_mean") for r in t])
        ratio = ts / hs if hs and ts else None
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {min(len(h), len(t))} | {fmt(hs, '.3f')} | {fmt(ts, '.3f')} | "
                     f"{fmt(ratio, '.3f')} | {fmt(tf / hf if hf and tf else None, '.3f')} | "
                     f"{fmt(tb / hb if hb and tb else None, '.3f')} | "
                     f"{fmt(spread([r.get('step_ms_mean') for r in h]), '.1f')} | "
                     f"{fmt(spread([r.get('step_ms_mean') for r in t]), '.1f')} |")
        for a in h:
            for b in t:
                if a["round"] == b["round"]:
                    if a.get("peak_bytes") != b.get("peak_bytes"):
                        peak_diff.append(f"{k} round {a['round']}: {a.get('peak_bytes')} vs {b.get('peak_bytes')}")
                    if a.get("loss_last") and b.get("loss_last"):
                        d = abs(b["loss_last"] - a["loss_last"]) / abs(a["loss_last"])
                        if d >= loss_rel.get(k[2], (0.0, None))[0]:
                            loss_rel[k[2]] = (d, k)
    lines.append("")
    lines.append("peak_bytes (tlm's allocator), tuned against heuristic in the same round: "
                 + ("equal in every row" if not peak_diff else "differs: " + "; ".join(peak_diff)))
    dev = []
    for k in keys:
        h, t = by[k].get("heuristic", []), by[k].get("tuned", [])
        hd, td = med([r.get("device_peak_bytes") for r in h]), med([r.get("device_peak_bytes") for r in t])
        if hd and td:
            dev.append((td - hd) / 2**20)
    if dev:
        lines.append(f"device_peak_bytes (the driver's count), tuned - heuristic: {min(dev):+.0f} to {max(dev):+.0f} MiB")
    for pss, (d, k) in sorted(loss_rel.items()):
        if d == 0:
            lines.append(f"last loss of {pss}, tuned against heuristic in the same round: equal in every row")
            continue
        lines.append(f"last loss of {pss}, tuned against heuristic in the same round: at most {d:.2e} relative apart "
                     f"({k[0]} {k[1]}; other algorithms may round differently"
                     + (", and the bench's training steps on one batch amplify that" if pss == "train" else "") + ")")
    p = plans(os.path.join(out, "tune-plans.txt"))
    if p:
        lines += ["", "What the timing chose (each model's first tuned run; per plan, one call's time; not weighted "
                  "by calls per step):", "",
                  "| model | prec | plans timed | kept another | sum heuristic ms | sum kept ms | kept/heur | best plan |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for (model, prec), v in sorted(p.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
            sh, sk = sum(x[0] for x in v), sum(x[1] for x in v)
            best = min(x[1] / x[0] for x in v if x[0] > 0)
            lines.append(f"| {model} | {prec} | {len(v)} | {sum(1 for x in v if x[2] != 0)} | {sh:.4f} | {sk:.4f} | "
                         f"{sk / sh:.3f} | {best:.3f} |")
    text = "\n".join(lines) + "\n"
    tmp = os.path.join(out, "gemm-tune.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out, "gemm-tune.md"))


if __name__ == "__main__":
    main()
