#!/usr/bin/env bash
# run-profile-device.sh — `tlm profile` on one GPU (issue 11), in device calls of at most 10 minutes:
#   STAGES=build,smoke,test,overhead,sizes,trace   (call 1, the default) then STAGES=peer (call 2) then
#   STAGES=sweep (call 3: the seeds' sweep, timed). On a warm machine one call may take more stages.
# Usage (on the GPU machine, from the repository root; the device tool sets OUT):
#   OUT=/some/dir [STAGES=...] bench/run-profile-device.sh 2>&1 | tee $OUT/log.txt
# Stages and what they write under $OUT (at most 8 files per call, names [A-Za-z0-9._-]):
#   build     cmake + build into build-gpu (bench/run-device.sh's build stage; the carried .devdeps
#             when the plain configure fails: cJSON, OpenBLAS)              -> build.log
#   smoke     CUPTI works at all: activity buffers, one kernel record attributed to its op (first,
#             so that a CUPTI failure shows at once)                       -> (log)
#   test      the GPU tests: test_gpu_profile (phase times within 3% of CUDA events, graphs on and off;
#             kernels per forward = the ops dispatched) and gpu_profile_exec_torch (`--exec` vs
#             torch.profiler per NVTX range within 3%)                      -> tests.txt
#   overhead  profiled vs unprofiled step (--overhead), small and medium, fp32 and bf16, graphs on
#             and off                                                       -> profile-overhead.json
#   sizes     every size at context 256 in fp32 and bf16: tables + findings -> profile-ctx256.json,
#                                                                              profile-ctx256.txt
#   trace     one Perfetto trace of small's training step (bf16)           -> trace-small-bf16.json.gz
#   peer      the PyTorch peer (eager, naive attention, --nvtx) under `tlm profile --exec`, every size at
#             context 256 in fp32 and bf16, tlm profiled with the same (naive) attention, and the
#             side-by-side table of the two                                 -> peer-ctx256.tar.gz (every
#                                                                              JSON and log), profile-side-by-side.md
#   sweep     `tlm profile --suite seeds` (SPEC.md §2.2: every size at 128..1024, naive attention, OOM
#             rows), timed (target: 10 minutes on an H100)                  -> profile-seeds.json,
#                                                                              profile-seeds.txt
# env: MODELS (small,medium,large,xl,2.7B) CTX (256) PRECISIONS (fp32,bf16) WARMUP (3) STEPS (5)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the results}
STAGES=${STAGES:-build,smoke,test,overhead,sizes,trace}
MODELS=${MODELS:-small,medium,large,xl,2.7B} CTX=${CTX:-256} PRECISIONS=${PRECISIONS:-fp32,bf16}
WARMUP=${WARMUP:-3} STEPS=${STEPS:-5}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
TLM=./build-gpu/tlm
summary=()
note() { summary+=("$(printf '%-10s %s' "$1" "$2")"); }
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# gpu: /'
  nvcc --version | tail -1 | sed 's/^/# nvcc: /'
  python3 -c 'import torch; print("# torch:", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null
}

if stage build || [ ! -x "$TLM" ]; then
  echo "== build"
  t0=$SECONDS
  STAGES=build OUT="$OUT" bash bench/run-device.sh > /dev/null || { tail -30 "$OUT/build.log"; exit 1; }
  grep -E 'tlm: (profiler|CUPTI)' "$OUT/build.log"
  [ -f build-gpu/libtlm_inject.so ] || echo "WARNING: no build-gpu/libtlm_inject.so: CUPTI was not found (see build.log)"
  note build "$((SECONDS - t0)) s"
fi
[ -d /tmp/tlm-deps/lib ] && export LD_LIBRARY_PATH=/tmp/tlm-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

rc=0
if stage smoke; then
  echo "== CUPTI smoke test"
  if ./build-gpu/tests/test_gpu_profile smoke; then note smoke ok; else note smoke FAILED; echo "CUPTI smoke test failed: stopping"; exit 1; fi
fi

if stage test; then
  echo "== GPU tests (profiler)"
  ctest --test-dir build-gpu -L gpu -R 'profile' --output-on-failure -V > "$OUT/tests.txt" 2>&1
  trc=$?
  grep -E 'FAIL|[0-9]+ passed, [0-9]+ failed|us/step|%  (ok|FAIL)|within 3%|tests passed' "$OUT/tests.txt" | tail -40
  note tests "$([ $trc -eq 0 ] && echo ok || echo FAILED) ($(grep -c '^[0-9]*: FAIL' "$OUT/tests.txt") failed checks)"
  [ $trc -eq 0 ] || rc=1
fi

common=(--warmup "$WARMUP" --steps "$STEPS" --batch-size 4 --pass train)
if stage overhead; then
  echo "== overhead: profiled vs unprofiled step"
  t0=$SECONDS
  for g in on off; do
    $TLM profile --device cuda --model small,medium --context-length "$CTX" --precision fp32,bf16 "${common[@]}" \
      --cuda-graph $g --overhead --top 1 --format json --out "$OUT/overhead-$g.json" > /dev/null || rc=1
  done
  python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
rows = []
for g in ("on", "off"):
    rows += [dict(r, graphs=g) for r in json.load(open(f"{out}/overhead-{g}.json"))["runs"]]
json.dump({"runs": rows}, open(f"{out}/profile-overhead.json", "w"), indent=1)
for r in rows:
    print(f"{r['run']:30s} graphs {r['graphs']:3s} step unprofiled {r.get('step_ms_unprofiled') or 0:8.3f} ms "
          f"profiled {r.get('step_ms_profiled') or 0:8.3f} ms overhead {r.get('overhead_pct') or 0:6.2f}%")
EOF
  rm -f "$OUT/overhead-on.json" "$OUT/overhead-off.json"
  worst=$(python3 -c "import json; print('%.2f' % max(r.get('overhead_pct') or 0 for r in json.load(open('$OUT/profile-overhead.json'))['runs']))")
  note overhead "worst ${worst}% (target <= 5%), $((SECONDS - t0)) s"
fi

if stage sizes; then
  echo "== tlm profile: every size at context $CTX, $PRECISIONS"
  t0=$SECONDS
  $TLM profile --device cuda --model "$MODELS" --context-length "$CTX" --precision "$PRECISIONS" "${common[@]}" \
    --format json --out "$OUT/profile-ctx$CTX.json" > "$OUT/profile-ctx$CTX.txt" || rc=1
  grep -A200 '^findings:' "$OUT/profile-ctx$CTX.txt" | head -40
  note sizes "$((SECONDS - t0)) s"
fi

if stage trace; then
  echo "== Perfetto trace of small's training step (bf16)"
  $TLM profile --device cuda --model small --context-length "$CTX" --precision bf16 --warmup 2 --steps 1 \
    --trace "$OUT/trace-small-bf16.json" --top 5 > /dev/null || rc=1
  gzip -f "$OUT/trace-small-bf16.json" && note trace "$(du -h "$OUT/trace-small-bf16.json.gz" | cut -f1)"
fi

if stage peer; then
  echo "== PyTorch peer under tlm profile --exec"
  t0=$SECONDS
  mkdir -p /tmp/tlm-peer && rm -f /tmp/tlm-peer/*.json
  IFS=, read -r -a models <<<"$MODELS"
  IFS=, read -r -a precs <<<"$PRECISIONS"
  for m in "${models[@]}"; do
    for p in "${precs[@]}"; do
      PYTHONUNBUFFERED=1 $TLM profile --model "$m" --format json --out "/tmp/tlm-peer/peer-$m-$p.json" --exec -- \
        python3 bench/peers/pytorch_lm.py --device cuda --model "$m" --context-length "$CTX" --precision "$p" \
        "${common[@]}" --nvtx > /dev/null 2> "/tmp/tlm-peer/peer-$m-$p.log" \
        || { echo "peer $m $p failed:"; tail -5 "/tmp/tlm-peer/peer-$m-$p.log"; }
    done
  done
  # tlm with the peer's attention (naive), like for like; tlm's default (flash) is in profile-ctx$CTX.json
  $TLM profile --device cuda --model "$MODELS" --context-length "$CTX" --precision "$PRECISIONS" "${common[@]}" \
    --attention naive --format json --out "/tmp/tlm-peer/tlm-naive-ctx$CTX.json" > /dev/null || rc=1
  tar czf "$OUT/peer-ctx$CTX.tar.gz" -C /tmp/tlm-peer .
  python3 bench/profile_side_by_side.py "$OUT/profile-side-by-side.md" "/tmp/tlm-peer/tlm-naive-ctx$CTX.json" \
    --peers /tmp/tlm-peer/peer-*.json
  note peer "$((SECONDS - t0)) s"
fi

if stage sweep; then
  echo "== tlm profile --suite seeds (timed)"
  t0=$SECONDS
  $TLM profile --device cuda --suite seeds --format json --out "$OUT/profile-seeds.json" > "$OUT/profile-seeds.txt" || rc=1
  took=$((SECONDS - t0))
  grep -E 'OOM|configurations' "$OUT/profile-seeds.txt" | head -30
  note sweep "$took s (target <= 600 s on an H100)"
fi

echo "== summary"
printf '%s\n' "${summary[@]}"
exit $rc
