#!/usr/bin/env python3
"""profile_overhead.py DIR — joins DIR/overhead-on.json and overhead-off.json (tlm profile --overhead with CUDA
graphs on and off) into DIR/profile-overhead.json and prints each run's overhead."""
import json, sys
out = sys.argv[1]
rows = []
for g in ("on", "off"):
    rows += [dict(r, graphs=g) for r in json.load(open(f"{out}/overhead-{g}.json"))["runs"]]
json.dump({"runs": rows}, open(f"{out}/profile-overhead.json", "w"), indent=1)
for r in rows:
    print(f"{r['run']:30s} graphs {r['graphs']:3s} step unprofiled {r.get('step_ms_unprofiled') or 0:8.3f} ms "
          f"profiled {r.get('step_ms_profiled') or 0:8.3f} ms overhead {r.get('overhead_pct') or 0:6.2f}%")
print("worst overhead: %.2f%% (target <= 5%%)" % max((r.get("overhead_pct") or 0) for r in rows))
