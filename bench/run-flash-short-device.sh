#!/usr/bin/env bash
# run-flash-short-device.sh — FlashAttention's tile configurations at the LM's short contexts (issue 17),
# in one device call: build (incremental when build-gpu exists), the GPU flash tests, then `tlm attention`
# (flash, bf16, causal, 50 timed passes of each after 10 warm-up) with every line of
# src/cuda/flash_tiles.def forced (TLM_FLASH_TILES; the lines of one run: the r-th of each (pass,
# d_head), so one run times a forward and a backward line of d_head 64 and 80 at once) and with the
# default choice, at the LM's shapes (batch 4, context 256: small H 12, medium H 16, large H 20, xl H 25
# at d_head 64, 2.7B H 32 at d_head 80; small at 512 and 1024) and flash-benchmarking's (batch 1, 1
# head, d_head 64, seq 128..16384); the leaderboard shape (batch 1, 16 heads, seq 16384) with the
# default choice, and with the mma.sync kernels only (TLM_FLASH_SM90=0), and at d_head 128 (its
# backward is the mma.sync kernel): no regression against bench/results/h100-2026-11-24-flash90
# (d_head 64: 1.445 / 5.323 ms, mma.sync only 2.080 / 5.933; d_head 128: 2.380 / 12.479). TLM_FLASH_LOG=1 records
# which kernels each timed pass ran; the table names them.
# Usage (on the GPU machine, from the repository root; carry .devdeps):
#   OUT=/some/dir bash bench/run-flash-short-device.sh 2>&1 | tee $OUT/log.txt
# Files under $OUT: build-stage.txt (when it builds), tests.txt, flash-short.json (every timed row with
#   the configuration each pass ran, the environment it ran under), flash-short.md (the table).
# env: STAGES (build,test,time) ITERS (50) WARMUP (10)
# GPU time on an H100 (estimated, not yet measured): the build 1.5-2.5 min from nothing (the longest
#   file, flash_attention.cu, compiles in about 1 min), seconds with build-gpu built; the tests about
#   60 s (test_gpu_flash_attention three times, 13-20 s each; the plain run adds every tile line, a few
#   s); the timing 30-60 s (29 `tlm attention` processes of about 1 s start-up each, 12 rows of 120
#   passes of 0.01-1 ms each, the leaderboard three times: 120 passes of 7-15 ms). About 2 min with
#   build-gpu built, 4 min from nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
STAGES=${STAGES:-build,test,time} ITERS=${ITERS:-50} WARMUP=${WARMUP:-10}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
if stage build || [ ! -x build-gpu/tlm ]; then
  echo "== build"
  STAGES=build OUT="$OUT" bash bench/run-device.sh > "$OUT/build-stage.txt" 2>&1 || { tail -20 "$OUT/build-stage.txt"; exit 1; }
fi
# a build-gpu made on this machine by an earlier call links the carried libraries from here
if [ -f .devdeps/deps.tar.xz ] && [ ! -d /tmp/tlm-deps ]; then
  mkdir -p /tmp/tlm-deps && tar xJf .devdeps/deps.tar.xz -C /tmp/tlm-deps
fi
[ -d /tmp/tlm-deps/lib ] && export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rc=0
if stage test; then
  echo "== GPU flash tests"
  ctest --test-dir build-gpu -R test_gpu_flash --output-on-failure > "$OUT/tests.txt" 2>&1 || rc=1
  grep -E "tests passed|Failed|\*\*\*" "$OUT/tests.txt"
  grep -E "^FAIL" "$OUT/tests.txt" | head -20
fi
stage time || exit $rc

echo "== tlm attention: every tile line, and the default"
T=$(mktemp -d /tmp/flash-short.XXXXXX)
# the runs: TLM_FLASH_TILES of run r = the r-th line of each (pass, d_head) of 64 and 80 (NAME@D: a
# name may have lines for both), and the d_heads it names lines for
python3 - > "$T/plan" <<'EOF'
import re
text = open("src/cuda/flash_tiles.def").read()
groups = {}
for p, d, o, i, w, minb, role in re.findall(
        r"^TLM_FLASH_(FWD|BWD)\((\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\w+)\)", text, re.M):
    if int(d) in (64, 80):
        groups.setdefault((p, int(d)), []).append(("q%sk%sw%s@%s" if p == "FWD" else "k%sq%sw%s@%s") % (o, i, w, d))
for r in range(max(len(v) for v in groups.values())):
    names = [v[r] for v in groups.values() if len(v) > r]
    ds = sorted({d for (p, d), v in groups.items() if len(v) > r})
    print(",".join(names), ",".join(map(str, ds)))
EOF
# shapes: d_head|tlm attention flags
shapes=("64|-b 4 -H 12,16,20,25 -c 256" "64|-b 4 -H 12 -c 512,1024" "80|-b 4 -H 32 -c 256"
        "64|-b 1 -H 1 -c 128,256,1024,4096,16384")
n=0
attn() { # tiles sm90 d flags...: one process; its rows in $T/n.json, its TLM_FLASH_LOG lines in $T/n.log
  local tiles=$1 sm90=$2 d=$3
  shift 3
  n=$((n + 1))
  env ${tiles:+TLM_FLASH_TILES=$tiles} ${sm90:+TLM_FLASH_SM90=$sm90} TLM_FLASH_LOG=1 ./build-gpu/tlm attention \
    --device cuda --impl flash --dtype bf16 --causal on -D "$d" "$@" --iters "$ITERS" --warmup "$WARMUP" \
    --format json --out "$T/$n.json" > /dev/null 2> "$T/$n.log" \
    || { echo "failed ($tiles $sm90 -D $d $*):"; tail -3 "$T/$n.log"; rc=1; }
  printf '%s|%s|%s\n' "$n" "$tiles" "$sm90" >> "$T/index"
}
t0=$(date +%s)
for s in "${shapes[@]}"; do attn "" "" "${s%%|*}" ${s#*|}; done
attn "" "" 64 -b 1 -H 16 -c 16384
attn "" 0 64 -b 1 -H 16 -c 16384
attn "" "" 128 -b 1 -H 16 -c 16384
while read -r tiles ds; do
  echo "  TLM_FLASH_TILES=$tiles"
  for s in "${shapes[@]}"; do
    [[ ",$ds," == *",${s%%|*},"* ]] && attn "$tiles" "" "${s%%|*}" ${s#*|}
  done
done < "$T/plan"
echo "  $(( $(date +%s) - t0 )) s"

python3 - "$T" "$OUT" "$ITERS" "$WARMUP" <<'EOF'
import json, os, re, sys
T, OUT, ITERS, WARMUP = sys.argv[1:5]
text = open("src/cuda/flash_tiles.def").read()
lines = re.findall(r"^TLM_FLASH_(FWD|BWD)\((\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\w+)\)", text, re.M)
roles, order = {}, {"forward": [], "backward": []}
for p, d, o, i, w, minb, role in lines:
    name = ("q%sk%sw%s" if p == "FWD" else "k%sq%sw%s") % (o, i, w)
    pas = "forward" if p == "FWD" else "backward"
    if int(d) in (64, 80):
        roles.setdefault((pas, name), []).append("d%s %s" % (d, role))
        if name not in order[pas]: order[pas].append(name)
cols = [("small 256", 4, 12, 256, 64), ("small 512", 4, 12, 512, 64), ("small 1024", 4, 12, 1024, 64),
        ("medium 256", 4, 16, 256, 64), ("large 256", 4, 20, 256, 64), ("xl 256", 4, 25, 256, 64),
        ("2.7B 256", 4, 32, 256, 80), ("b1h1 128", 1, 1, 128, 64), ("b1h1 256", 1, 1, 256, 64),
        ("b1h1 1024", 1, 1, 1024, 64), ("b1h1 4096", 1, 1, 4096, 64), ("b1h1 16384", 1, 1, 16384, 64),
        ("leaderboard", 1, 16, 16384, 64), ("leaderboard d128", 1, 16, 16384, 128)]
logre = re.compile(r"^tlm flash (forward|backward): B=(\d+) H=(\d+) Tq=(\d+) Tk=\d+ D=(\d+) \w+: (.+?) \((.+?)\)(, split-KV)?$")
records = []
for line in open(os.path.join(T, "index")):
    n, tiles, sm90 = line.rstrip("\n").split("|")
    ran = {}
    for l in open(os.path.join(T, n + ".log")):
        m = logre.match(l.strip())
        if m:
            pas, B, H, Tq, D, what, why, split = m.groups()
            ran[(pas, int(B), int(H), int(Tq), int(D))] = (what + ("+split" if split else ""), why)
    try:
        rows = json.load(open(os.path.join(T, n + ".json")))["rows"]
    except (OSError, ValueError):
        continue
    for r in rows:
        key = (r["batch_size"], r["num_heads"], r["context_length"], r["d_head"])
        rec = {"TLM_FLASH_TILES": tiles, "TLM_FLASH_SM90": sm90, "row": r}
        for pas in ("forward", "backward"):
            rec[pas] = ran.get((pas,) + key, ("?", "?"))
        records.append(rec)
cells = {}  # (pass, row label) -> {column: text}
for rec in records:
    r = rec["row"]
    col = next((c[0] for c in cols if c[1:] == (r["batch_size"], r["num_heads"], r["context_length"], r["d_head"])), None)
    if col is None or r.get("status") != "ok":
        continue
    for pas, ms in (("forward", r["fwd_ms_mean"]), ("backward", r["bwd_ms_mean"])):
        what, why = rec[pas]
        if rec["TLM_FLASH_TILES"]:
            if why != "TLM_FLASH_TILES":
                continue  # a pass the run names no line for: the default's, timed in the default rows
            label, text = what.replace("+split", ""), "%.4f%s" % (ms, " split" if what.endswith("+split") else "")
        else:
            label = "default" + (", TLM_FLASH_SM90=0" if rec["TLM_FLASH_SM90"] == "0" else "")
            text = "%.4f %s" % (ms, what.replace("sm90 wgmma", "sm90"))
        cells.setdefault((pas, label), {})[col] = (ms, text)
out = ["# FlashAttention tile configurations, bf16, causal: forward / backward ms (tlm attention, %s passes after %s warm-up)"
       % (ITERS, WARMUP), "",
       "Rows: each line of src/cuda/flash_tiles.def forced with TLM_FLASH_TILES (its roles by d_head), and the default "
       "choice with the kernels it ran (sm90: the wgmma kernels; +split: split-KV). Columns: model and context "
       "(batch 4; d_head 64, 2.7B 80), b1h1 = batch 1, 1 head (flash-benchmarking), leaderboard = batch 1, 16 heads, "
       "16384 (d_head 64; d128: 128, whose backward is the mma.sync LONG kernel). best: the fastest forced line of "
       "the column.", "",
       "| pass | configuration | " + " | ".join(c[0] for c in cols) + " |",
       "|---|---|" + "---:|" * len(cols)]
for pas in ("forward", "backward"):
    labels = [l for (p, l) in cells if p == pas and l.startswith("default")]
    labels = sorted(labels) + [n for n in order[pas] if (pas, n) in cells]
    for label in labels:
        c = cells[(pas, label)]
        desc = label if label.startswith("default") else "%s (%s)" % (label, ", ".join(roles.get((pas, label), [])))
        out.append("| %s | %s | %s |" % (pas, desc, " | ".join(c[col[0]][1] if col[0] in c else "" for col in cols)))
    best = []
    for col in cols:
        cand = [(cells[(pas, n)][col[0]][0], n) for n in order[pas] if (pas, n) in cells and col[0] in cells[(pas, n)]]
        best.append("%.4f %s" % min(cand) if cand else "")
    out.append("| %s | best | %s |" % (pas, " | ".join(best)))
md = "\n".join(out) + "\n"
for name, data in (("flash-short.md", md), ("flash-short.json", json.dumps(records, indent=1) + "\n")):
    tmp = os.path.join(OUT, "." + name + ".tmp")
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, os.path.join(OUT, name))
print(md)
EOF
rm -rf "$T"
exit $rc
