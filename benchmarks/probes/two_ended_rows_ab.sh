#!/usr/bin/env bash
# Training-step A/B of the gradient from both ends' bound, two_ended.GRAD_MIN_ROWS (OPTIMIZATION_LOG.md, "Pairs of 512
# rows from both ends, again"): this tree against a copy of its src/ whose bound is ROWS, in alternating processes
# (the host's speed drifts over minutes; the first pass with bench_train_step's host time per piece: where does a
# step of fewer GPU µs lose them?), then the kernel times of both (kernel_time_ab.py, SHAPES=$KSHAPES, default grad512).
#
#   ROWS=768 TS_ARGS="--shapes 3 --shape 32,768,768,1 --shape 16,768,768,1" benchmarks/probes/two_ended_rows_ab.sh
#
# On the GPU machine; everything lands in $OUT/rows_ab.tgz (one file: the device tool brings back only a few).
set -u
OUT=${OUT:-$PWD/gpu_out}; R=/tmp/rows_ab; rm -rf $R; mkdir -p $R "$OUT"
save() { tar czf "$OUT/rows_ab.tgz" -C $R . ; }
export SOFTDTW_CACHE_DIR=${SOFTDTW_CACHE_DIR:-/tmp/softdtw-cache} PYTHONUNBUFFERED=1
ROWS=${ROWS:-768}; TS_ARGS=${TS_ARGS:---shapes 3 --shape 32,768,768,1}; PASSES=${PASSES:-3}
T0=$(date +%s); LIMIT=${LIMIT:-560}
rm -rf /tmp/rows_tree && mkdir -p /tmp/rows_tree && cp -r src /tmp/rows_tree/
sed -i "s/^GRAD_MIN_ROWS = .*/GRAD_MIN_ROWS = $ROWS/" /tmp/rows_tree/src/softdtw/backends/cuda/two_ended.py
grep -n "^GRAD_MIN_ROWS" src/softdtw/backends/cuda/two_ended.py /tmp/rows_tree/src/softdtw/backends/cuda/two_ended.py \
  > $R/bounds.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
for p in $(seq 1 "$PASSES"); do for t in rows head; do
  el=$(( $(date +%s) - T0 ))
  if [ $(( el + 60 )) -gt "$LIMIT" ]; then echo "skip $t$p at $el s" >> $R/progress.txt; continue; fi
  src=$PWD/src; [ $t = rows ] && src=/tmp/rows_tree/src
  prof=--no-profile; [ "$p" = 1 ] && prof=""  # the first pass also writes the host time per piece (.profile.txt)
  timeout $(( LIMIT - el )) python3 benchmarks/bench_train_step.py --src "$src" $TS_ARGS --impls mse,eager \
    $prof --reps 300 --out $R/ts_$t$p.json > $R/ts_$t$p.log 2>&1
  echo "train step $t$p rc=$? at $(( $(date +%s) - T0 )) s" >> $R/progress.txt; save
done; done
for t in rows head; do
  el=$(( $(date +%s) - T0 ))
  if [ $(( el + 40 )) -gt "$LIMIT" ]; then echo "skip kernels $t at $el s" >> $R/progress.txt; continue; fi
  src=$PWD/src; [ $t = rows ] && src=/tmp/rows_tree/src
  SHAPES=${KSHAPES:-grad512} timeout 90 python3 benchmarks/probes/kernel_time_ab.py "$src" $t $R/kernels.jsonl \
    > $R/kernels_$t.log 2>&1
  echo "kernels $t rc=$? at $(( $(date +%s) - T0 )) s" >> $R/progress.txt; save
done
cat $R/progress.txt; grep -h "'eager'\|'mse'" $R/ts_*.log
