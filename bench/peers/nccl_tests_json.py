#!/usr/bin/env python3
"""nccl_tests_json.py — nccl-tests' all_reduce_perf output (its text table, one or more runs, e.g. one
per GPU count) as one JSON in `tlm allreduce`'s field names, so that `tlm plot allreduce-*` and the
side-by-side tables put nccl-tests beside tlm and torch.distributed.

nccl-tests (github.com/NVIDIA/nccl-tests, built from its public source; tlm neither ships nor builds
it) prints a row per size: size (bytes), count, type, redop, root, then time (us), algbw, busbw (GB/s)
and #wrong out of place, and the same four in place. Its time is the mean over the ranks of each
rank's mean time per all-reduce, busbw = algbw x 2(n-1)/n (its doc/PERFORMANCE.md): the definitions
tlm allreduce uses. Each run's rank count is its "# Using devices" lines; its NCCL and nccl-tests
versions come from its first line. A run that printed no row is refused, naming the file.

  python3 bench/peers/nccl_tests_json.py nccl-tests-2.txt nccl-tests-4.txt --out nccl-tests.json
"""

import argparse
import os
import re
import sys

from common import write_results

TYPES = {"float": "fp32", "bfloat16": "bf16", "half": "fp16", "double": "fp64", "int32": "int32"}


def parse(path):
    """the rows and the header fields of one all_reduce_perf output"""
    rows, ranks, head, devices = [], 0, {}, set()
    with open(path) as f:
        for line in f:
            m = re.match(r"# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", line)
            if m:
                code = int(m.group(3))  # NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (from 2.9)
                head = {"nccl_tests_version": m.group(1),
                        "nccl_version": f"{code // 10000}.{code // 100 % 100}.{code % 100}"}
            m = re.match(r"#\s+Rank\s+\d+ .* device\s+\d+ \[[^]]*\] (.+?)\s*$", line)
            if m:
                ranks += 1
                devices.add(m.group(1))
            f_ = line.split()
            if len(f_) != 13 or not f_[0].isdigit():
                continue
            size, count, dtype, op = int(f_[0]), int(f_[1]), TYPES.get(f_[2], f_[2]), f_[3]
            for in_place, (t, alg, bus, wrong) in ((False, f_[5:9]), (True, f_[9:13])):
                rows.append({"backend": "nccl", "nranks": ranks, "bytes": size, "count": count, "dtype": dtype,
                             "op": op, "in_place": in_place, "time_us_mean": float(t), "time_us_min": None,
                             "time_us_max": None, "algbw_gb_per_s": float(alg), "busbw_gb_per_s": float(bus),
                             "wrong": None if wrong == "N/A" else int(wrong), "status": "ok", "error": None})
    if not rows or not ranks:
        sys.exit(f"nccl_tests_json.py: {path}: no all_reduce_perf rows (a size line of 13 fields after "
                 f"'# Using devices')")
    return rows, head, sorted(devices)


def main(argv=None):
    p = argparse.ArgumentParser(description="nccl-tests' all_reduce_perf text output as tlm allreduce's JSON rows")
    p.add_argument("files", nargs="+", help="all_reduce_perf outputs (one run each)")
    p.add_argument("-o", "--out", help="write the JSON here (through a temporary file); else stdout")
    args = p.parse_args(argv)
    rows, head, devices = [], {}, set()
    for path in args.files:
        r, h, d = parse(path)
        rows += r
        head = head or h
        devices.update(d)
    header = {"tool": "nccl-tests", "program": "all_reduce_perf", **head, "device": ", ".join(sorted(devices)),
              "sources": [os.path.basename(f) for f in args.files],
              "time": "nccl-tests': the mean over the ranks of each rank's mean time per all-reduce (us)",
              "busbw": "algbw = bytes / time, busbw = algbw x 2(n-1)/n for n ranks; GB/s = 10^9 bytes/s"}
    write_results(header, rows, None, "json", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
