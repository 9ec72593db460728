"""common.py — what the PyTorch peers (pytorch_attention.py, torch_allreduce.py) share: the comma
list argument type, and how they write their results: one JSON object (the header's fields and
"rows"), or a table (a "# key: value" line per header field, then a line per row); to --out whole
(a temporary file, then a rename), else JSON to stdout (a table's rows were printed as they ran)."""

import argparse
import json
import os
import sys


def int_list(text):
    """argparse type: '1,2,4' -> [1, 2, 4], each at least 1."""
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma list of integers")
    if any(x < 1 for x in vals):
        raise argparse.ArgumentTypeError(f"'{text}': each must be >= 1")
    return vals


def write_results(header, rows, fmt_row, fmt, out):
    """header: dict; rows: list of dicts; fmt_row: a row -> its table line; fmt: "table" or "json";
    out: the file to write, or None."""
    if fmt == "json":
        text = json.dumps(dict(header, rows=rows), indent=1) + "\n"
    else:
        text = "".join(f"# {k}: {v}\n" for k, v in header.items()) + "\n".join(fmt_row(r) for r in rows) + "\n"
    if out:
        with open(out + ".tmp", "w") as f:
            f.write(text)
        os.replace(out + ".tmp", out)
    elif fmt == "json":
        sys.stdout.write(text)
