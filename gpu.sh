#!/bin/bash
# GPU round 7 (final) for helper hvpw: final tests and the benchmarks committed under benchmarks/results/.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/hvpw_out}; mkdir -p "$OUT"
echo "== tests"
timeout 80 python -m pytest -m cuda tests/backends/test_cuda_hvp.py tests/test_dilate.py tests/test_second_order.py \
  -n 4 -q -p no:cacheprovider -rf -W ignore::UserWarning > $OUT/tests.txt 2>&1
echo "pytest rc=$?"; tail -1 $OUT/tests.txt | cut -c1-300
grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -12 | cut -c1-250
echo "== bench_hvp"
timeout 22 python benchmarks/bench_hvp.py --quick --out $OUT/h100_hvp > $OUT/bench_hvp.txt 2>&1; grep -E "hvp_cost |value_grad_hvp" $OUT/bench_hvp.txt | cut -c1-100
echo "== bench_dilate"
timeout 28 python benchmarks/bench_dilate.py --reps 30 --out $OUT/h100_dilate.json > $OUT/dilate.txt 2>&1
grep -E "^\| cuda" $OUT/dilate.txt | grep -v mse | head -12
