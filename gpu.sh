#!/bin/bash
# GPU round 3 for helper hvpw: hvp_warp_kernel tests, layout sweep, bench_hvp, DILATE bench + profile, memcheck.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/hvpw_out}; mkdir -p "$OUT"
echo "== tests"
timeout 65 python -m pytest -m cuda tests/backends/test_cuda_hvp.py tests/test_dilate.py tests/test_second_order.py \
  -n 4 -q -p no:cacheprovider -rf > $OUT/tests.txt 2>&1
tail -3 $OUT/tests.txt | cut -c1-300
grep -E "^FAILED|^ERROR|Error|assert" $OUT/tests.txt | head -12 | cut -c1-250
echo "== sweep"
timeout 25 python benchmarks/probes/hvp_warp_sweep.py --reps 5 --out $OUT/sweep.json 2>&1 | tail -6
echo "== bench_hvp"
timeout 20 python benchmarks/bench_hvp.py --quick --out $OUT/h100_hvp > $OUT/bench_hvp.txt 2>&1; grep -E "hvp_cost |value_grad_hvp" $OUT/bench_hvp.txt | cut -c1-120
echo "== dilate profile"
timeout 20 python benchmarks/probes/dilate_profile.py --out $OUT/dilate_profile.txt 2>&1 | tail -3 | cut -c1-400
echo "== bench_dilate"
timeout 20 python benchmarks/bench_dilate.py --reps 15 --out $OUT/h100_dilate.json > $OUT/dilate.txt 2>&1
grep -E "^\| cuda" $OUT/dilate.txt | grep -v mse | head -12
echo "== memcheck (kernels only)"
cat > /tmp/hvpw_small.py <<'PY'
import torch
from softdtw.backends import cuda as be
from softdtw._checks import make_window
torch.manual_seed(0)
for dtype in (torch.float32, torch.float64):
    for (B, N, M, band) in ((3, 5, 1, None), (3, 20, 33, 2), (2, 9, 64, None), (2, 17, 130, 4), (2, 6, 256, None), (2, 5, 300, None)):
        if dtype == torch.float64 and M > 256: continue
        C = torch.rand(B, N, M, dtype=dtype, device="cuda"); Cd = torch.randn_like(C)
        xl = torch.tensor([N] + [max(1, N // 2)] * (B - 1)); yl = torch.tensor([M] + [max(1, M - 3)] * (B - 1))
        w = make_window(xl, yl, N, M, band, None)
        for g in (0.0, 0.5):
            out = be.hvp_cost(C, torch.tensor(g, dtype=dtype, device="cuda"), xl.cuda(), yl.cuda(), None if w is None else w.cuda(), Cd, torch.ones(B, dtype=dtype, device="cuda"))
            torch.cuda.synchronize()
            assert all(torch.isfinite(t).all() for t in out)
print("small shapes ok")
PY
timeout 40 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 3 python /tmp/hvpw_small.py > $OUT/memcheck_full.txt 2>&1
head -40 $OUT/memcheck_full.txt | cut -c1-250 > $OUT/memcheck.txt; tail -3 $OUT/memcheck_full.txt | cut -c1-200; rm -f $OUT/memcheck_full.txt
