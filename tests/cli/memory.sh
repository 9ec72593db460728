#!/usr/bin/env bash
# memory.sh — `tlm memory` end to end on the CPU (tiny model): the peaks and largest-allocation
# tables, --suite seeds, recompute and optimizer-in-backward lowering the peak, the timeline JSON, the
# snapshot loaded by Python's pickle into the structure PyTorch's memory_viz reads (when python3 is
# present; with PyTorch also `python -m torch.cuda._memory_viz trace_plot` on it), and bad input:
# an unknown --recompute, an unwritable --snapshot (clear error, exit status, no file at all).
source "$(dirname "$0")/lib.bash"
M=("$TLM" memory --device cpu --model tiny --context-length 16 --batch-size 2)

expect_ok "train: json report, timeline and snapshot" "${M[@]}" --top 5 --format json --out "$TMP/r.json" \
  --timeline "$TMP/t.json" --snapshot "$TMP/s.pickle"
check "report, timeline and snapshot written" test -s "$TMP/r.json" -a -s "$TMP/t.json" -a -s "$TMP/s.pickle"
out=$("${M[@]}" --top 3 --wide 2>&1)
check "table: the peaks of the measured step" grep -q '^## Peaks of the measured step' <<<"$out"
check "table: a tiny train row, peak in the backward" grep -qE '^tiny +16 +2 fp32 .*train .* backward ' <<<"$out"
check "table: the 3 largest allocations with why and lifetime" \
  test "$(grep -cE '^tiny +16 +2 fp32 +train +[123] ' <<<"$out")" -eq 3
out=$("$TLM" memory --device cpu --model tiny --suite seeds --top 0 2>&1)
check "--suite seeds: 12 rows (ctx 128/256/512 x forward/train x fp32/bf16)" \
  test "$(grep -cE '^tiny +(128|256|512) +4 (fp32|bf16)' <<<"$out")" -eq 12
check "--suite seeds: the residual-stream tensor from the shapes" grep -q 'batch 4 x context 512 x d_model 64 x 4 bytes' <<<"$out"
expect_ok "recompute block, json" "${M[@]}" --recompute block --format json --out "$TMP/rb.json"
expect_ok "optimizer-in-backward, json" "${M[@]}" --optimizer-in-backward --format json --out "$TMP/oib.json"

if command -v python3 >/dev/null; then
  check "report: one ok train row with the peak by category, the largest allocations" python3 - "$TMP/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rows"][0]
assert r["status"] == "ok" and r["pass"] == "train" and r["peak_phase"] == "backward", r
cats = ["parameters_bytes", "weight_copy_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "workspace_bytes"]
assert sum(r[k] for k in cats) == r["peak_bytes"], r
assert r["after_forward_bytes"] <= r["backward_peak_bytes"] <= r["peak_bytes"] <= r["reserved_bytes"]
top = d["largest"]
assert len(top) == 5 and all(a["bytes"] >= b["bytes"] for a, b in zip(top, top[1:]))
assert all(t["why"] and t["from_op"] and t["to_op"] for t in top)
PY
  check "recompute block keeps less after the forward; optimizer-in-backward lowers the peak" python3 - "$TMP/r.json" "$TMP/rb.json" "$TMP/oib.json" <<'PY'
import json, sys
plain, rb, oib = (json.load(open(f))["rows"][0] for f in sys.argv[1:])
assert rb["after_forward_bytes"] < plain["after_forward_bytes"], (rb, plain)  # only block inputs kept
assert oib["peak_bytes"] < plain["peak_bytes"] and oib["optimizer_in_backward"] is True, (oib, plain)
assert rb["recompute"] == "block"
PY
  check "snapshot: Python's pickle loads memory_viz's structure" python3 - "$TMP/s.pickle" "$TMP/t.json" <<'PY'
import json, pickle, pickletools, sys
raw = open(sys.argv[1], "rb").read()
allowed = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS", "BINUNICODE", "BININT1",
           "BININT2", "BININT", "LONG1", "NONE", "NEWTRUE", "NEWFALSE", "STOP"}
used = {op.name for op, _, _ in pickletools.genops(raw)}
assert used <= allowed, used - allowed
assert raw[:2] == b"\x80\x02"
d = pickle.loads(raw)
assert set(d) >= {"segments", "device_traces"}
trace = d["device_traces"][0]
tl = json.load(open(sys.argv[2]))
allocs = sum(e["action"] == "alloc" for e in tl["events"])
frees = len(tl["events"]) - allocs
assert [e["action"] for e in trace].count("alloc") == allocs
assert [e["action"] for e in trace].count("free_requested") == frees == [e["action"] for e in trace].count("free_completed")
live = {}
for e in trace:
    assert set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"}, e
    assert all(set(f) == {"filename", "line", "name"} for f in e["frames"]) and len(e["frames"]) == 3
    if e["action"] == "alloc": live[e["addr"]] = e["size"]
    elif e["action"] == "free_completed": assert live.pop(e["addr"], e["size"]) == e["size"]
for s in d["segments"]:
    assert set(s) >= {"device", "address", "total_size", "allocated_size", "stream", "blocks"}
    assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
    a = s["address"]
    for b in s["blocks"]:
        assert b["address"] == a and b["state"] in ("active_allocated", "inactive"); a += b["size"]
names = {e["frames"][0]["filename"] for e in trace}
assert {"layers.0.ffn.w13_out", "gradients.layers.1", "backward.d_resid"} <= names, names
PY
  if python3 -c 'import torch' 2>/dev/null; then
    expect_ok "python -m torch.cuda._memory_viz trace_plot accepts the snapshot" \
      python3 -m torch.cuda._memory_viz trace_plot "$TMP/s.pickle" -o "$TMP/s.html"
  else
    echo "skip   torch.cuda._memory_viz trace_plot: PyTorch is not installed"
  fi
else
  echo "skip   the report and snapshot checks in Python: python3 is not installed"
fi

# bad input: a clear message, exit 1 or 2, and no file at all
expect_fail "--recompute: unknown value 'sometimes'" "${M[@]}" --recompute sometimes --out "$TMP/bad1.json"
check "no report after a bad --recompute" test ! -e "$TMP/bad1.json"
expect_fail "--snapshot: cannot write $TMP/missing/s.pickle" "${M[@]}" --snapshot "$TMP/missing/s.pickle" \
  --timeline "$TMP/bad2.json" --out "$TMP/bad3.json"
check "no timeline or report after an unwritable --snapshot" test ! -e "$TMP/bad2.json" -a ! -e "$TMP/bad3.json"
expect_fail "--optimizer-in-backward conflicts with --precision fp16" "${M[@]}" --optimizer-in-backward --precision fp16
expect_fail "--context-length conflicts with --suite seeds" "${M[@]}" --suite seeds
expect_fail "--suite: unknown suite 'all'" "$TLM" memory --device cpu --suite all
check "no temporary file left behind" test -z "$(find "$TMP" -name '.*' -type f)"
finish
