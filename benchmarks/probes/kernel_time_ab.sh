#!/usr/bin/env bash
# A/B of kernel times (kernel_time_ab.py): this tree's src/ against the same src/ with PATCH... applied.
#   [SHAPES=extra|hvp] benchmarks/probes/kernel_time_ab.sh PATCH [PATCH ...]
# On the GPU machine; results in $OUT/ab.jsonl.
# A warm-up process per tree first (cold NVRTC compiles take 60-80 s per tree), then two rounds base, new.
set -u
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
export SOFTDTW_CACHE_DIR=${SOFTDTW_CACHE_DIR:-/tmp/softdtw-cache}
T0=$(date +%s)
rm -rf /tmp/ab_base /tmp/ab_new && mkdir -p /tmp/ab_base /tmp/ab_new
cp -r src /tmp/ab_base/ && cp -r src /tmp/ab_new/
for p in "$@"; do patch -s -d /tmp/ab_new -p1 < "$p" || { echo "patch failed: $p"; exit 1; }; done
P=benchmarks/probes/kernel_time_ab.py
for t in base new; do
  timeout 170 python3 $P /tmp/ab_$t/src warm$t "$OUT/warm.jsonl" > "$OUT/warm_$t.log" 2>&1
  echo "warm $t rc=$? at $(( $(date +%s) - T0 )) s"
done
for r in 1 2; do for t in base new; do
  timeout 60 python3 $P /tmp/ab_$t/src $t "$OUT/ab.jsonl" > "$OUT/ab_$t$r.log" 2>&1
  echo "$t$r rc=$? at $(( $(date +%s) - T0 )) s"
done; done
python3 - "$OUT/ab.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loss = [r for r in rows if r["kind"] == "loss"]
for k in (k for k in (loss[0] if loss else {}) if k.endswith(("fwd", "bwd"))):
    print(f"{k:14s}", " ".join(f"{r['tag']}:{r.get(k, 0):8.1f}" for r in loss))
for r in rows:
    if r["kind"] == "hvp":
        print(r["tag"], r["B"], r["N"], r["gamma"], "hvp_xy", r.get("hx_hvp"), "dilate", r.get("dil_other"))
PY
