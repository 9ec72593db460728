#!/usr/bin/env python3
"""gemm_floor.py TUNE_PLANS.txt [--dtype bf16|fp32] — the GEMM floor of one training step: for each
model in the log of `TLM_GEMM_TUNE=2 tlm bench` (lines "tlm: gemm tune: ..."; "## model M round R"
headers as bench/device/run.sh gemm-tune writes them), each plan's time timed alone by cuBLASLt's
candidates (the heuristic's pick and the fastest of the timed ones), times its calls per step, summed
over the forward's and the backward's GEMMs. Calls per step: once for the LM head's plans (a
dimension equal to the vocabulary, 10000 in every CS336 preset), num_layers times for the others.
Timed alone means back to back on the same operands (warm L2, no neighbours): a lower bound of what
those GEMMs take inside the step, not a measurement of the step."""
import re
import sys

LAYERS = {"tiny": 2, "small": 12, "medium": 24, "large": 36, "xl": 48, "2.7B": 32}  # CS336 presets
VOCAB = 10000
TYPES = {"bf16": "14", "fp16": "2", "fp32": "0"}  # cudaDataType_t of A and B
PLAN = re.compile(r"gemm tune: (matmul_\w+) m=(\d+) n=(\d+) k=(\d+) .*types (\d+) \d+ .*"
                  r"heuristic's pick ([\d.]+) ms, kept #\d+ ([\d.]+) ms")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "bf16"
    runs, run = {}, None
    for line in open(argv[1]):
        h = re.match(r"## model (\S+) round (\d+) TLM_GEMM_TUNE=(\d)", line)
        if h:
            run = (h.group(1), int(h.group(2))) if h.group(3) == "2" else None
            continue
        p = PLAN.search(line)
        if run and p and p.group(5) == TYPES[dtype]:
            runs.setdefault(run, []).append(p.groups())
    print(f"| model | round | plans | forward ms (heuristic / fastest) | backward ms (heuristic / fastest) "
          f"| step's GEMMs ms (heuristic / fastest) | TFLOP/s at the fastest |")
    print("|---|---:|---:|---|---|---|---:|")
    for (model, rnd), plans in runs.items():
        t = {"matmul_forward": [0.0, 0.0], "matmul_backward": [0.0, 0.0]}
        flop = 0.0
        for op, m, n, k, _, heur, kept in plans:
            m, n, k = int(m), int(n), int(k)
            calls = 1 if VOCAB in (m, n, k) else LAYERS[model]
            t[op][0] += float(heur) * calls
            t[op][1] += float(kept) * calls
            flop += 2.0 * m * n * k * calls
        f, b = t["matmul_forward"], t["matmul_backward"]
        total = f[1] + b[1]
        print(f"| {model} | {rnd} | {len(plans)} | {f[0]:.2f} / {f[1]:.2f} | {b[0]:.2f} / {b[1]:.2f} "
              f"| {f[0] + b[0]:.2f} / {total:.2f} | {flop / total / 1e9:.0f} |")


if __name__ == "__main__":
    main(sys.argv)
