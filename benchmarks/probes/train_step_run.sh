#!/usr/bin/env bash
# Issue 27's GPU run: the cuda tests of the host path and the train-step benchmark of this tree and, side by
# side on the same machine, of a baseline tree (BASE_SRC, its src/ folder).
#
#   benchmarks/probes/train_step_run.sh [quicktests] [bench] [tests] [base] [ab] [probe]   (default: the first four)
#
# Everything is logged to $OUT/run.log; results: $OUT/h100_train_step.{json,md,profile.txt} and
# $OUT/h100_train_step_base.{json,md,profile.txt}; "ab" alternates this tree and the baseline, two benchmark
# processes each (new, base, new, base: the machine's speed drifts over minutes), into $OUT/ab.tgz; "probe" runs
# benchmarks/probes/launch_probe.py. Env: SHAPES (indices into the benchmark's SHAPES), REPS, T_QUICK / T_BENCH / T_TESTS /
# T_BASE (time limits, s), SOFTDTW_GIT_SHA (the tree's commit), BASE_SRC / BASE_SHA (the baseline).
set -u
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STAGES=${*:-quicktests bench tests base}
export PYTHONUNBUFFERED=1
export SOFTDTW_CACHE_DIR=${SOFTDTW_CACHE_DIR:-/tmp/softdtw-cache}
export PYTHONPATH=$PWD/src
LOG=$OUT/run.log
REPS=${REPS:-200}
has() { [[ " $STAGES " == *" $1 "* ]]; }
PYTEST="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider"

{ nvidia-smi -L
  python3 -c "import torch, cuda.bindings; import cuda.core as cc; print('torch', torch.__version__, 'cuda-core', getattr(cc, '__version__', '?'), 'cuda-bindings', cuda.bindings.__version__)"
} 2>&1 | tee -a "$LOG"
if has quicktests; then
  echo "=== quicktests" | tee -a "$LOG"
  timeout "${T_QUICK:-240}" $PYTEST -x -n 4 tests/backends/test_cuda_launch.py tests/backends/test_cuda_checks.py \
    tests/test_cuda_integration.py tests/test_second_order.py tests/test_mixed_precision.py -m cuda 2>&1 \
    | tee -a "$LOG" | tail -25
fi
if has bench; then
  echo "=== bench" | tee -a "$LOG"
  timeout "${T_BENCH:-300}" python3 benchmarks/bench_train_step.py --out "$OUT/h100_train_step.json" --reps "$REPS" \
    ${SHAPES:+--shapes $SHAPES} 2>&1 | tee -a "$LOG" | tail -45
fi
if has tests; then
  echo "=== tests" | tee -a "$LOG"
  timeout "${T_TESTS:-300}" $PYTEST -n 8 tests/backends/test_cuda.py tests/backends/test_cuda_banded.py \
    tests/backends/test_cuda_chain.py 2>&1 | tee -a "$LOG" | tail -25
fi
if has base && [ -n "${BASE_SRC:-}" ]; then
  echo "=== base ($BASE_SRC)" | tee -a "$LOG"
  SOFTDTW_GIT_SHA=${BASE_SHA:-base} timeout "${T_BASE:-240}" python3 benchmarks/bench_train_step.py --src "$BASE_SRC" \
    --out "$OUT/h100_train_step_base.json" --reps "$REPS" ${SHAPES:+--shapes $SHAPES} 2>&1 | tee -a "$LOG" | tail -40
fi
if has ab && [ -n "${BASE_SRC:-}" ]; then
  W=$OUT/ab
  mkdir -p "$W"
  for pass in 1 2; do
    prof=""
    [ "$pass" = 2 ] && prof=--no-profile
    echo "=== ab: new, pass $pass" | tee -a "$LOG"
    timeout "${T_BENCH:-300}" python3 benchmarks/bench_train_step.py --out "$W/new$pass.json" --reps "$REPS" $prof \
      ${SHAPES:+--shapes $SHAPES} 2>&1 | tee -a "$LOG" | tail -12
    echo "=== ab: base, pass $pass" | tee -a "$LOG"
    SOFTDTW_GIT_SHA=${BASE_SHA:-base} timeout "${T_BASE:-240}" python3 benchmarks/bench_train_step.py --src "$BASE_SRC" \
      --out "$W/base$pass.json" --reps "$REPS" --no-profile ${SHAPES:+--shapes $SHAPES} 2>&1 | tee -a "$LOG" | tail -12
  done
  tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$W"
fi
if has probe; then
  echo "=== launch probe" | tee -a "$LOG"
  timeout 120 python3 benchmarks/probes/launch_probe.py 2>&1 | tee -a "$LOG" | tail -12
fi
