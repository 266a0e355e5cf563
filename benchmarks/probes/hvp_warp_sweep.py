"""hvp_cost's time per layout (K columns per lane, W warps per pair) of hvp_warp_kernel, beside the block kernels.

    PYTHONPATH=src python benchmarks/probes/hvp_warp_sweep.py [--reps 5] [--out FILE.json]

For each size: every (K, W) that covers M (kernels/hvp_warp.cu's instantiations), the plan _warp_plan picks, and
"block" (hvp.cu's kernels). Median of CUDA-event timings after a warm-up (compile kept out).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu import median_ms  # noqa: E402  (benchmarks/gpu.py: CUDA-event timing)
from softdtw.backends import cuda as backend  # noqa: E402
from softdtw.backends.cuda import hvp as mod  # noqa: E402

SIZES = [(64, 256, 256, torch.float32), (1024, 256, 256, torch.float32), (256, 256, 256, torch.float64),
         (32, 512, 512, torch.float32), (64, 96, 96, torch.float32)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default=None)
    p.add_argument("--quick", action="store_true", help="only W*K*32 == the smallest power of two >= M")
    args = p.parse_args()
    rows = []
    for B, N, M, dtype in SIZES:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, N, 1, device="cuda", dtype=dtype, generator=g)
        y = torch.randn(B, M, 1, device="cuda", dtype=dtype, generator=g)
        C = (x - y.transpose(1, 2)).square()
        Cd = torch.randn_like(C)
        gam = torch.tensor(1.0, device="cuda", dtype=dtype)
        gd = torch.zeros(B, device="cuda", dtype=dtype)
        xl = torch.full((B,), N, device="cuda", dtype=torch.int64)
        yl = torch.full((B,), M, device="cuda", dtype=torch.int64)
        top = mod.HVPW_MAX_M if dtype == torch.float32 else mod.HVPW_MAX_M_F64
        plans = [(K, W) for W in mod.HVPW_WS for K in mod.HVPW_KS if M <= 32 * K * W <= top
                 and 32 * K * W < 2 * M]
        auto = mod._warp_plan(B, M, dtype)
        line = f"B={B:5d} N={N:4d} M={M:4d} {str(dtype)[6:]:8s} auto={auto}:"
        for plan in plans + ["block"]:
            saved_k = mod._warp_k
            if plan == "block":
                mod._warp_k = lambda M, dtype: None
            else:
                mod.force_plan = plan
            try:
                ms = median_ms(lambda: backend.hvp_cost(C, gam, xl, yl, None, Cd, gd), args.reps, warmup=1)
            finally:
                mod.force_plan = None
                mod._warp_k = saved_k
            rows.append(dict(B=B, N=N, M=M, dtype=str(dtype)[6:], plan=str(plan), ms=round(ms, 4),
                             gcups=round(B * N * M / ms / 1e6, 2), auto=str(auto)))
            line += f"  {plan}: {ms:.3f} ms"
        print(line, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
