#!/bin/bash
# GPU round 4 for helper hvpw: tests, layout sweep, bench_hvp, bench_dilate (results for benchmarks/results/).
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/hvpw_out}; mkdir -p "$OUT"
echo "== tests"
timeout 60 python -m pytest -m cuda tests/backends/test_cuda_hvp.py tests/test_dilate.py tests/test_second_order.py \
  -n 4 -q -p no:cacheprovider -rf > $OUT/tests.txt 2>&1
tail -2 $OUT/tests.txt | cut -c1-300
grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -12 | cut -c1-250
echo "== sweep"
timeout 25 python benchmarks/probes/hvp_warp_sweep.py --reps 7 --out $OUT/sweep.json 2>&1 | tail -6
echo "== bench_hvp"
timeout 20 python benchmarks/bench_hvp.py --quick --out $OUT/h100_hvp > $OUT/bench_hvp.txt 2>&1; grep -E "hvp_cost|value_grad_hvp" $OUT/bench_hvp.txt | cut -c1-100
echo "== bench_dilate"
timeout 25 python benchmarks/bench_dilate.py --reps 20 --out $OUT/h100_dilate.json > $OUT/dilate.txt 2>&1
grep -E "^\| cuda" $OUT/dilate.txt | grep -v mse | head -12
