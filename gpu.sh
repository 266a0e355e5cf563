#!/bin/bash
# GPU round 5 for helper hvpw: the full correctness run (tests with room to finish), memcheck, DILATE.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/hvpw_out}; mkdir -p "$OUT"
echo "== tests"
timeout 85 python -m pytest -m cuda tests/backends/test_cuda_hvp.py tests/test_dilate.py tests/test_second_order.py \
  -n 4 -q -p no:cacheprovider -rf -W ignore::UserWarning > $OUT/tests.txt 2>&1
echo "pytest rc=$?"; tail -2 $OUT/tests.txt | cut -c1-300
grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -12 | cut -c1-250
echo "== bench_dilate"
timeout 25 python benchmarks/bench_dilate.py --reps 20 --out $OUT/h100_dilate.json > $OUT/dilate.txt 2>&1
grep -E "^\| cuda" $OUT/dilate.txt | grep -v mse | head -12
