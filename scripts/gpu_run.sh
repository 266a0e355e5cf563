#!/usr/bin/env bash
# The one script the GPU machine runs: environment, cuda tests, compute-sanitizer, benchmark.
#
#   scripts/gpu_run.sh [env] [tests] [longtests] [alltests] [sanitize] [bench|bench-quick] [ncu]
#                      (default: env tests sanitize bench)
#
# Logs and results go to $OUT (default ./gpu_out): env.txt, pytest.log, pytest_long.log, memcheck.log,
# racecheck.log, bench.log, h100.json, h100.md. Wheels in .whl/ (pysdtw; tslearn, which six test modules import at the
# top: without it their cuda tests are not collected) are installed to /tmp/site when present. The whole cuda suite in
# one call: PYTEST_ARGS="-n 15" scripts/gpu_run.sh alltests (carry [".whl"]; `pip download --no-deps -d .whl tslearn`).
# Each stage has its own time limit so one slow stage cannot eat the others' output.
set -u
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STAGES=${*:-env tests sanitize bench}
export PYTHONUNBUFFERED=1
export SOFTDTW_CACHE_DIR=${SOFTDTW_CACHE_DIR:-/tmp/softdtw-cache}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has env; then
  {
    nvidia-smi
    python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, torch.cuda.get_device_name())"
    python3 -m pip list 2>/dev/null | grep -i -E "cuda|nvrtc|numba|pytest|hypothesis|pysdtw"
    which compute-sanitizer nvcc
  } >"$OUT/env.txt" 2>&1
  cat "$OUT/env.txt" | head -40
fi

if has tests; then
  timeout 420 python3 -m pytest -m cuda tests/backends/test_cuda.py -q -rfE --tb=short -p no:cacheprovider \
    ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -60
fi

if has longtests; then  # issue 4: long pairs vs the CPU float64 backend, checkpoint vs store, gamma = 1e-3 at 65536
  # Most of the time is the CPU reference (two long single-pair Numba runs, plus Numba's first compile).
  timeout 400 python3 -m pytest -m cuda tests/test_long.py -q -rfE --tb=short -p no:cacheprovider \
    ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_long.log" | tail -40
fi

if has alltests; then  # every `cuda`-marked test of the repository (toolkit, integration, mixed precision, backend)
  timeout 540 python3 -m pytest -m cuda tests -q -rfE --tb=short -p no:cacheprovider \
    ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_all.log" | tail -40
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/cuda_sanitize.py \
      >"$OUT/$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/$tool.log") clean summaries)"
    tail -3 "$OUT/$tool.log"
  done
fi

if has bench || has bench-quick; then
  quick=""
  has bench-quick && quick="--quick"
  # A fresh kernel cache, so the "compile" section measures NVRTC rather than a disk hit.
  SOFTDTW_CACHE_DIR=/tmp/softdtw-cache-bench timeout 540 python3 benchmarks/gpu.py --out "$OUT/h100.json" $quick \
    ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  echo "benchmark: exit $?"
  tail -45 "$OUT/bench.log"
fi

if has sass; then  # SASS of the kernels one step uses (PROFILE_ARGS="B N D")
  python3 scripts/cuda_profile.py ${PROFILE_ARGS:-4096 512 1} /tmp/cubins >/dev/null 2>&1
  for f in /tmp/cubins/k*.cubin; do echo "== $(cat ${f%.cubin}.txt)"; cuobjdump -sass "$f"; done >"$OUT/sass.txt" 2>&1
  echo "sass: $(grep -c '==' "$OUT/sass.txt") kernels dumped"
fi

if has stalls; then  # warp stall reasons of the backward in latency mode (PROFILE_ARGS="B N D")
  timeout 200 ncu --clock-control none --kernel-name regex:"forward_kernel|backward_kernel" --launch-count 3 \
    --metrics regex:smsp__pcsamp_warps_issue_stalled_.*,smsp__inst_executed.sum,sm__cycles_elapsed.avg \
    python3 scripts/cuda_profile.py ${PROFILE_ARGS:-16 512 1} >"$OUT/stalls.log" 2>&1
  echo "stalls: exit $?"
  grep -E "forward_kernel|backward_kernel|stalled|inst_executed|cycles_elapsed" "$OUT/stalls.log" | awk '$NF != "0" || /kernel/' | head -90
fi

if has ncu; then  # Nsight Compute on the three kernels of one step (PROFILE_ARGS="B N [D]")
  timeout 240 ncu --clock-control none --kernel-name regex:"forward_kernel|backward_kernel" --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats python3 scripts/cuda_profile.py ${PROFILE_ARGS:-4096 512} >"$OUT/ncu.log" 2>&1
  echo "ncu: exit $?"
  grep -E "forward_kernel|backward_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Stall|L1/TEX Hit|L2 Hit|Executed Ipc|Theoretical Occ" "$OUT/ncu.log" | head -80
fi
