#!/usr/bin/env bash
# run-memory-device.sh — issue 12's GPU run (tlm memory, the memory plan's targets, PyTorch beside) in
# one device call on one H100 or H200 (about 8 minutes with the build; STAGES splits it over calls,
# which keep build-gpu/):
#   build    tlm for Hopper, as bench/run-device.sh builds it (carry .devdeps: tools/pack-device-deps.sh)
#   test     the GPU tests of the memory work: test_gpu_memory_step (recompute, optimizer-in-backward =
#            the plain step; the device's count within 0.5 GiB of tlm's), test_gpu_memory_timeline, and
#            the model's GPU tests (the step's arena under CUDA graphs: fixtures, flash, precision)
#   seeds    tlm memory --suite seeds (2.7B, context 128/256/512, forward and train, fp32 and bf16) with a
#            timeline JSON and a memory_viz snapshot per configuration (the 2.7B context 256 ones are the
#            issue's pictures: draw them with `tlm plot memory-timeline` where gnuplot is)
#   bench    tlm bench, every size at context 256, fp32 and bf16: peaks and step times, then the same
#            with --optimizer-in-backward (tlm memory's peaks when tlm bench lacks the flag)
#   long     2.7B bf16 batch 4 context 4096 with --recompute block; the recompute cost at context 1024
#            (block against none, where both fit)
#   peer     PyTorch (bench/peers/pytorch_lm.py) on the same rows: torch.cuda.max_memory_allocated, and
#            its own snapshot of 2.7B context 256 fp32 train for memory_viz
#   viz      python -m torch.cuda._memory_viz trace_plot on tlm's snapshot (and PyTorch's): HTML
# Usage (on the GPU machine, from the repository root):  OUT=/some/dir bench/run-memory-device.sh
#   When one call's 10 minutes are too few (the build takes 2-4 of them), split it over two calls on the
#   same machine: STAGES=build,test,seeds, then STAGES=bench,long,peer,viz (each call's files are its own).
# Files under $OUT (8 at most): log.txt, summary.md (the table printed last), memory.tar.xz (every JSON,
# timeline, snapshot, HTML and log of the run, in memory/), and seeds.json, bench.json, torch.json (the
# main reports, also in the tarball).
# env: STAGES (build,test,seeds,bench,long,peer,viz)  MODELS (small,medium,large,xl,2.7B)  WARMUP (2) STEPS (3)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
STAGES=${STAGES:-build,test,seeds,bench,long,peer,viz}
MODELS=${MODELS:-small,medium,large,xl,2.7B} WARMUP=${WARMUP:-2} STEPS=${STEPS:-3}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
W=/tmp/tlm-memory-run/memory # everything goes here, then into $OUT/memory.tar.xz
mkdir -p "$W"/{timelines,snapshots,viz,logs}
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$SECONDS
took() { echo "   ($(( SECONDS - T0 )) s so far)"; }
TLM=build-gpu/tlm
PEER=(python3 bench/peers/pytorch_lm.py --device cuda)

if stage build || [ ! -x "$TLM" ]; then
  echo "== build (bench/run-device.sh STAGES=build)"
  STAGES=build OUT="$W/logs" bash bench/run-device.sh || { echo "build failed: $W/logs/build.log"; tail -30 "$W/logs/build.log"; }
  took
fi
[ -f .devdeps/deps.tar.xz ] && [ -d /tmp/tlm-deps/lib ] && export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x "$TLM" ] || { echo "no $TLM: build first (STAGES=build)"; exit 1; }

tests_rc=0
if stage test; then
  echo "== GPU tests: memory and the model"
  timeout 240 ctest --test-dir build-gpu -L gpu -R 'test_gpu_(memory|model)' --output-on-failure 2>&1 |
    tee "$W/logs/gpu-tests.log" | grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|FAIL|Failed'
  tests_rc=${PIPESTATUS[0]}
  took
fi

if stage seeds; then
  echo "== tlm memory --suite seeds (timelines and snapshots of every configuration)"
  timeout 420 "$TLM" memory --device cuda --suite seeds --top 12 --format json --out "$W/seeds.json" \
    --timeline "$W/timelines/timeline.json" --snapshot "$W/snapshots/tlm.pickle" 2>&1 |
    tee "$W/logs/seeds.txt" | grep -vE '^tlm memory: \['
  took
fi

have_flag() { "$TLM" bench --help 2>/dev/null | grep -q -- "$1"; }
if stage bench; then
  echo "== tlm bench, context 256, fp32 and bf16: peaks and step times"
  timeout 240 "$TLM" bench --device cuda --model "$MODELS" --context-length 256 --precision fp32,bf16 \
    --warmup "$WARMUP" --steps "$STEPS" --format json --out "$W/bench.json" 2>&1 | tee "$W/logs/bench.txt" | grep -v '^#'
  took
  if have_flag --optimizer-in-backward; then
    echo "== tlm bench --optimizer-in-backward"
    timeout 240 "$TLM" bench --device cuda --model "$MODELS" --context-length 256 --precision fp32,bf16 \
      --warmup "$WARMUP" --steps "$STEPS" --optimizer-in-backward --format json --out "$W/bench-oib.json" 2>&1 |
      tee "$W/logs/bench-oib.txt" | grep -v '^#'
  else
    echo "== tlm memory --optimizer-in-backward (tlm bench has no such flag yet: peaks without times)"
    timeout 240 "$TLM" memory --device cuda --model "$MODELS" --context-length 256 --precision fp32,bf16 \
      --optimizer-in-backward --top 0 --format json --out "$W/memory-oib.json" 2>&1 |
      tee "$W/logs/memory-oib.txt" | grep -vE '^#|^tlm memory: \['
  fi
  took
fi

if stage long; then
  echo "== 2.7B bf16 batch 4 context 4096, --recompute block"
  if have_flag --recompute; then
    timeout 200 "$TLM" bench --device cuda --model 2.7B --precision bf16 --batch-size 4 --context-length 4096 \
      --recompute block --warmup 2 --steps 3 --format json --out "$W/long-4096.json" 2>&1 | tee "$W/logs/long.txt" | grep -v '^#'
    echo "== the recompute cost where both fit: 2.7B bf16 context 1024, block against none"
    for rc in none block; do
      timeout 150 "$TLM" bench --device cuda --model 2.7B --precision bf16 --batch-size 4 --context-length 1024 \
        --recompute $rc --warmup 2 --steps 3 --format json --out "$W/long-1024-$rc.json" 2>&1 | grep -v '^#'
    done
  else
    echo "   (tlm bench has no --recompute yet: tlm memory's peak, no step time)"
    timeout 200 "$TLM" memory --device cuda --model 2.7B --precision bf16 --batch-size 4 --context-length 4096 \
      --recompute block --top 5 --format json --out "$W/long-4096.json" --timeline "$W/timelines/long-4096.json" 2>&1 |
      tee "$W/logs/long.txt" | grep -vE '^tlm memory: \['
  fi
  took
fi

if stage peer; then
  echo "== PyTorch: the seeds' rows, every size at context 256, 2.7B context 4096 (SDPA)"
  PYTHONUNBUFFERED=1 timeout 240 "${PEER[@]}" --model 2.7B --context-length 128,256,512 --pass forward,train \
    --precision fp32,bf16 --warmup 1 --steps 1 --format json --out "$W/torch-seeds.json" > "$W/logs/torch-seeds.txt" 2>&1
  PYTHONUNBUFFERED=1 timeout 200 "${PEER[@]}" --model "$MODELS" --context-length 256 --pass train --precision fp32,bf16 \
    --warmup "$WARMUP" --steps "$STEPS" --format json --out "$W/torch.json" > "$W/logs/torch.txt" 2>&1
  PYTHONUNBUFFERED=1 timeout 120 "${PEER[@]}" --model 2.7B --context-length 4096 --pass train --precision bf16 \
    --attention sdpa --warmup 1 --steps 1 --format json --out "$W/torch-4096.json" > "$W/logs/torch-4096.txt" 2>&1
  echo "== PyTorch's own snapshot: 2.7B context 256 fp32 train"
  PYTHONUNBUFFERED=1 timeout 120 "${PEER[@]}" --model 2.7B --context-length 256 --pass train --precision fp32 \
    --warmup 1 --steps 1 --memory-snapshot "$W/snapshots/torch-2.7B-ctx256-b4-fp32-train.pickle" > "$W/logs/torch-snap.txt" 2>&1
  grep -h '^# OOM' "$W"/logs/torch*.txt
  took
fi

if stage viz; then
  echo "== python -m torch.cuda._memory_viz trace_plot"
  for f in "$W/snapshots/tlm-2.7B-ctx256-b4-fp32-train.pickle" "$W/snapshots/torch-2.7B-ctx256-b4-fp32-train.pickle"; do
    [ -f "$f" ] || continue
    b=$(basename "$f" .pickle)
    if timeout 120 python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$W/viz/$b.html" > "$W/logs/viz-$b.txt" 2>&1; then
      echo "   accepted: $b ($(du -h "$W/viz/$b.html" | cut -f1) of HTML)"
    else
      echo "   REFUSED: $b"; tail -5 "$W/logs/viz-$b.txt"
    fi
  done
  took
fi

# ---- the files, and the short table last ---------------------------------------------------------------
for f in seeds.json bench.json torch.json; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/$f"; done
python3 - "$W" > "$OUT/summary.md" <<'PY'
import glob, json, os, sys
w = sys.argv[1]
G = 2**30
def rows(name):
    p = os.path.join(w, name)
    return json.load(open(p))["rows"] if os.path.exists(p) else []
def gib(v):
    return "-" if v is None else f"{v / G:.2f}"
def key(r):
    return (r.get("model"), r.get("context_length"), r.get("precision"), r.get("pass"))
torch = {key(r): r for f in ("torch-seeds.json", "torch.json", "torch-4096.json") for r in rows(f)}
def peer(r):
    t = torch.get(key(r))
    if not t: return "-"
    return "OOM" if t.get("status") == "OOM" else gib(t.get("peak_bytes"))
print("## tlm memory --suite seeds (GiB; PyTorch: max_memory_allocated)\n")
print("| model | ctx | prec | pass | tlm peak | at | reserved | device | PyTorch |")
print("|---|---:|---|---|---:|---|---:|---:|---:|")
for r in rows("seeds.json"):
    if r["status"] != "ok":
        print(f"| {r['model']} | {r['context_length']} | {r['precision']} | {r['pass']} | {r['status']} | | | | {peer(r)} |")
        continue
    print(f"| {r['model']} | {r['context_length']} | {r['precision']} | {r['pass']} | {gib(r['peak_bytes'])} | "
          f"{r['peak_phase']} | {gib(r['reserved_bytes'])} | {gib(r.get('device_peak_bytes'))} | {peer(r)} |")
oib = {key(r): r for r in rows("bench-oib.json") + rows("memory-oib.json")}
print("\n## every size at context 256, train (GiB; ms = forward + backward + optimizer)\n")
print("| model | prec | tlm peak | device | step ms | opt-in-bwd peak | opt-in-bwd ms | PyTorch peak | PyTorch ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
def ms(r):
    if not r or r.get("status") != "ok": return "-"
    v = sum(r.get(k) or 0 for k in ("fwd_ms_mean", "bwd_ms_mean", "opt_ms_mean"))
    return f"{v:.1f}" if v else "-"
for r in rows("bench.json"):
    o, t = oib.get(key(r)), torch.get(key(r))
    print(f"| {r['model']} | {r['precision']} | {gib(r.get('peak_bytes'))} | {gib(r.get('device_peak_bytes'))} | {ms(r)} | "
          f"{gib(o.get('peak_bytes')) if o else '-'} | {ms(o)} | {peer(r)} | {ms(t)} |")
long_rows = rows("long-4096.json")
for r in long_rows:
    print(f"\n2.7B bf16 batch 4 context 4096, recompute block: {r['status']}, peak {gib(r.get('peak_bytes'))} GiB, "
          f"device {gib(r.get('device_peak_bytes'))} GiB, step {ms(r)} ms; PyTorch (SDPA) {peer(r)} GiB")
a, b = rows("long-1024-none.json"), rows("long-1024-block.json")
if a and b and ms(a[0]) != "-" and ms(b[0]) != "-":
    print(f"recompute cost at context 1024: block {ms(b[0])} ms / none {ms(a[0])} ms = "
          f"{float(ms(b[0])) / float(ms(a[0])):.2f}x (target <= 1.35x); peaks {gib(b[0]['peak_bytes'])} / {gib(a[0]['peak_bytes'])} GiB")
PY
tar cJf "$OUT/memory.tar.xz" -C "$(dirname "$W")" memory
echo "== files: $(ls "$OUT" | tr '\n' ' ')"
echo "== $(( SECONDS - T0 )) s"
cat "$OUT/summary.md"
exit "$tests_rc"
