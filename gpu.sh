#!/bin/bash
# GPU round for the `gsearch` helper: dtw_search on CUDA (tests, sanitizer, benchmark). Runs from the worktree root.
cd "$(dirname "$0")"
export PYTHONPATH=$PWD/src:${PYTHONPATH}
OUT=${OUT:-/tmp/gsearch_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
T0=$(date +%s)
echo "== precompile (NVRTC, parallel)"
timeout 40 python benchmarks/bench_search_gpu.py --precompile 2>&1 | tail -3
echo "== numba warm-up"
timeout 50 python - <<'PY' 2>&1 | tail -3
import torch
from softdtw.search import dtw_search
q, s = torch.randn(2, 4, 1, dtype=torch.float64), torch.randn(50, 1, dtype=torch.float64)
for g in (0.0, 0.5):
    dtw_search(q, s, k=2, gamma=g); dtw_search(q[0], s, k=2, gamma=g)
print("numba ready")
PY
echo "== t=$(( $(date +%s) - T0 ))s  tests"
timeout 80 python -m pytest -q -p no:cacheprovider -n 4 -rA tests/test_search_cuda.py tests/test_search.py 2>&1 \
  | grep -E "max rel err|passed|failed|Error|error|assert|FAILED|^E " | head -80
echo "== t=$(( $(date +%s) - T0 ))s  memcheck + racecheck (small)"
cat > "$OUT/small.py" <<'PY'
import torch
from softdtw.backends.cuda import search as cs
from softdtw.search import dtw_search
torch.manual_seed(0)
q, s = torch.randn(2, 7, 2, device="cuda", dtype=torch.float64), torch.randn(333, 2, device="cuda", dtype=torch.float64)
cs.forced_tile = (32, 2)
for g in (0.0, 0.5):
    cs.end_rows(q, s, "sqeuclidean", g)
cs.SLOT_BYTES = 2 * 6 * 3 * 12 * 8
for g in (0.0, 0.5):
    cs.end_rows(q, s, "sqeuclidean", g)
cs.forced_tile = None
r = dtw_search(q.float(), s.float(), k=20, gamma=0.0)
torch.cuda.synchronize(); print("small ok", r.end.tolist())
PY
timeout 30 compute-sanitizer --tool memcheck --print-limit 3 python "$OUT/small.py" > "$OUT/memcheck.txt" 2>&1
grep -E "Invalid|out of bounds|misaligned|ERROR SUMMARY|Program hit|small ok" "$OUT/memcheck.txt" | cut -c1-160 | sort | uniq -c
timeout 30 compute-sanitizer --tool racecheck --print-limit 5 python "$OUT/small.py" 2>&1 | tail -4
echo "== t=$(( $(date +%s) - T0 ))s  benchmark"
timeout 80 python benchmarks/bench_search_gpu.py --out "$OUT/h100_search.json" --reps 5 2>&1 | grep -v "^{" | tail -60
echo "== t=$(( $(date +%s) - T0 ))s  done"
