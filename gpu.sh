#!/bin/bash
# GPU round 6 (final) for helper hvpw: the benchmarks committed under benchmarks/results/, the layout sweep, the
# DILATE profile. The code is round 5's (268 cuda tests passed there).
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/hvpw_out}; mkdir -p "$OUT"
echo "== bench_hvp"
timeout 30 python benchmarks/bench_hvp.py --quick --out $OUT/h100_hvp > $OUT/bench_hvp.txt 2>&1; grep -E "hvp_cost|value_grad" $OUT/bench_hvp.txt | cut -c1-100
echo "== bench_dilate"
timeout 35 python benchmarks/bench_dilate.py --reps 30 --out $OUT/h100_dilate.json > $OUT/dilate.txt 2>&1
grep -E "^\| cuda" $OUT/dilate.txt | head -15
echo "== sweep"
timeout 25 python benchmarks/probes/hvp_warp_sweep.py --reps 7 --out $OUT/sweep.json 2>&1 | tail -6
echo "== dilate profile"
timeout 18 python benchmarks/probes/dilate_profile.py --out $OUT/dilate_profile.txt 2>&1 | grep "^==" | cut -c1-400
