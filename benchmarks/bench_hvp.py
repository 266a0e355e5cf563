"""GPU benchmark of the second order (issue 24): the cuda backend's hvp_cost, alone and after value + gradient.

    PYTHONPATH=src python3 benchmarks/bench_hvp.py --out benchmarks/results/h100_hvp [--quick]

Rows, float32 unless noted, D = 1 (squared Euclidean), gamma = 1, cells counted once (GCUPS = B·N·M / time):
- "value_grad": the fused first-order forward (storing) + backward from x, y (backend calls), what a
  training step of the soft-DTW loss runs;
- "hvp_cost": hvp_cost alone (C and the direction Cdot given, its scratch allocation included);
- "hvp_cost_block": the same without hvp_warp_kernel (the block-per-pair kernels hvp.cu, the A/B of the
  warp-per-pair kernel; only where M is within hvp_warp_kernel's range);
- "value_grad_hvp": value + gradient + one HVP as the double backward runs them: the fused forward and
  backward, then C and Cdot = dC/dx · xdot built by elementwise torch ops (D = 1), then hvp_cost (the issue's
  target: >= 150 GCUPS at B = 1024, N = M = 256 on an H100);
- "value_grad_hvp_xy": value + gradient + one HVP with the cost formed in the HVP kernel (backend hvp_xy: x, y and
  the direction x-dot in, the double backward's contractions dx, dy, <C-dot, E> out; no (B, N, M) tensor besides
  the kernel's record), what the double backward of soft_dtw(x, y) runs for the squared Euclidean cost, D <= 16;
- "value_grad_hvp_xy_const": the same with gamma a constant (hvp_xy(gamma_terms=False): no d/dgamma terms in the
  kernel), what the double backward runs when gamma is not in the graph (a float, the usual case);
- "value_grad_hvp_fused": value + gradient + one HVP in one kernel for a direction known up front (backend
  value_grad_hvp: hvp_vgh_xy_kernel, the HVP's two passes with the value and a second channel of row sums for the
  gradient; gamma a constant), what softdtw.soft_dtw_hvp runs; "soft_dtw_hvp": the same through the public function
  (its argument and value checks included);
- "penalty_step" / "penalty_step_general": a gradient-penalty step through the public API as a user writes it
  (soft_dtw, autograd.grad with create_graph=True, loss = value + |grad|², backward), with hvp_xy and with the
  general path (C, C-dot by torch ops, hvp_cost, the contractions by torch ops);
- peak_mb: memory above what was allocated before the timed closure.
Timings: CUDA events around the closure, median of the repetitions after two warm-up calls (the first compiles
with NVRTC; compile time is kept out). Writes <out>.json and <out>.md (default
benchmarks/results/<gpu>_hvp.{json,md}).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import git_sha, markdown_table, write_results  # noqa: E402
from gpu import median_ms, peak_mb  # noqa: E402  (benchmarks/gpu.py: CUDA-event timing, peak memory)
from softdtw.backends import cuda as backend  # noqa: E402
from softdtw.backends.cuda import hvp as _hvp  # noqa: E402

SIZES = [  # B, N, M
    (1024, 256, 256),
    (4096, 128, 128),
    (256, 512, 512),
    (64, 1024, 1024),
    (16, 2048, 2048),
]
QUICK_SIZES = [(1024, 256, 256), (64, 256, 256), (64, 512, 512)]


def closures(B, N, M, dtype, gamma):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, 1, device="cuda", dtype=dtype, generator=g)
    xdot = torch.randn(B, N, 1, device="cuda", dtype=dtype, generator=g)
    gam = torch.tensor(gamma, device="cuda", dtype=dtype)
    gdot = torch.zeros(B, device="cuda", dtype=dtype)
    xl = torch.full((B,), N, device="cuda", dtype=torch.int64)
    yl = torch.full((B,), M, device="cuda", dtype=torch.int64)
    grad = torch.ones(B, device="cuda", dtype=dtype)

    def cost_and_direction():
        diff = x - y.transpose(1, 2)  # (B, N, M), D = 1
        return diff.square(), (2 * diff).mul_(xdot)  # C, Cdot = dC/dx · xdot

    C, Cdot = cost_and_direction()

    def value_grad():
        v, saved = backend.forward(x, y, gam, "sqeuclidean", xl, yl, None, "store")
        return backend.backward(grad, x, y, gam, "sqeuclidean", xl, yl, None, v, saved, "store")

    def hvp():
        return backend.hvp_cost(C, gam, xl, yl, None, Cdot, gdot)

    def value_grad_hvp():
        value_grad()
        Cc, Cd = cost_and_direction()
        return backend.hvp_cost(Cc, gam, xl, yl, None, Cd, gdot)

    ydot = torch.zeros_like(y)

    def value_grad_hvp_xy():
        value_grad()
        return backend.hvp_xy("sqeuclidean", x, y, gam, xl, yl, None, xdot, ydot, gdot)

    import softdtw

    def penalty_step():
        xr = x.detach().requires_grad_(True)
        v = softdtw.soft_dtw(xr, y, gamma=gamma, backend="cuda")
        (gx,) = torch.autograd.grad(v.sum(), xr, create_graph=True)
        (v.sum() + gx.square().sum()).backward()
        return xr.grad

    def penalty_step_general():
        saved, backend.HVP_XY = backend.HVP_XY, False
        try:
            return penalty_step()
        finally:
            backend.HVP_XY = saved

    def value_grad_hvp_xy_const():
        value_grad()
        return backend.hvp_xy("sqeuclidean", x, y, gam, xl, yl, None, xdot, ydot, gdot, gamma_terms=False)

    def value_grad_hvp_fused():
        return backend.value_grad_hvp("sqeuclidean", x, y, gam, xl, yl, None, xdot, ydot)

    def soft_dtw_hvp():
        return softdtw.soft_dtw_hvp(x, y, xdot, None, gamma, backend="cuda")

    fns = {"value_grad": value_grad, "hvp_cost": hvp, "value_grad_hvp": value_grad_hvp}
    if backend.value_grad_hvp("sqeuclidean", x, y, gam, xl, yl, None, xdot, ydot) is not None:
        fns["value_grad_hvp_fused"] = value_grad_hvp_fused
    fns["soft_dtw_hvp"] = soft_dtw_hvp
    if backend.hvp_xy("sqeuclidean", x, y, gam, xl, yl, None, xdot, ydot, gdot) is not None:
        fns["value_grad_hvp_xy"] = value_grad_hvp_xy
        fns["value_grad_hvp_xy_const"] = value_grad_hvp_xy_const
        fns["penalty_step"] = penalty_step
    fns["penalty_step_general"] = penalty_step_general
    if _hvp._warp_k(M, dtype) is not None:
        def hvp_block():
            saved, _hvp._warp_k = _hvp._warp_k, lambda M, dtype: None
            try:
                return backend.hvp_cost(C, gam, xl, yl, None, Cdot, gdot)
            finally:
                _hvp._warp_k = saved

        fns["hvp_cost_block"] = hvp_block
    return fns


def main():
    parser = argparse.ArgumentParser()
    gpu = torch.cuda.get_device_name().split()[1].lower() if torch.cuda.is_available() else "gpu"
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"{gpu}_hvp"),
                        help="path of the results without suffix (.json and .md are written)")
    parser.add_argument("--quick", action="store_true", help="two sizes, fewer repetitions")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    out = Path(args.out)
    if out.suffix in (".json", ".md"):
        out = out.with_suffix("")
    reps = args.reps or (3 if args.quick else 10)
    rows = []
    cases = [(s, torch.float32, 1.0) for s in (QUICK_SIZES if args.quick else SIZES)]
    cases += [((1024, 256, 256), torch.float32, 0.1), ((256, 256, 256), torch.float64, 1.0)]
    for (B, N, M), dtype, gamma in cases:
        fns = closures(B, N, M, dtype, gamma)
        for name, fn in fns.items():
            ms = median_ms(fn, reps)
            peak = peak_mb(fn)
            r = {"mode": name, "B": B, "N": N, "M": M, "D": 1, "dtype": str(dtype).replace("torch.", ""),
                 "gamma": gamma, "ms": round(ms, 4), "gcups": round(B * N * M / (ms * 1e-3) / 1e9, 2),
                 "peak_mb": round(peak, 1)}
            rows.append(r)
            print(f"{name:>15} B={B:5d} N={N:5d} M={M:5d} {r['dtype']:>7} gamma={gamma:<4} "
                  f"{ms:9.3f} ms {r['gcups']:8.2f} GCUPS  peak {peak:9.1f} MB", flush=True)
        del fns
        torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_sha": git_sha(),
            "script": "benchmarks/bench_hvp.py"}
    md = ("# Second order on the GPU: hvp_cost (issue 24)\n\n"
          f"{meta['device']}, torch {meta['torch']}, commit {meta['git_sha']}. GCUPS = B·N·M / time, cells "
          "counted once; value_grad_hvp = fused forward + backward, C and Cdot, hvp_cost; value_grad_hvp_xy = "
          "fused forward + backward, then hvp_xy (the cost in the HVP kernel's cells, dx / dy reduced there); "
          "value_grad_hvp_xy_const = the same with gamma a constant (no d/dgamma terms in the kernel); "
          "value_grad_hvp_fused = all three in one kernel for a direction given up front (softdtw.soft_dtw_hvp's "
          "kernel; soft_dtw_hvp = through the public function); "
          "penalty_step(_general) = a gradient-penalty step through the public API with hvp_xy (with the "
          "general path) (benchmarks/bench_hvp.py).\n\n"
          + markdown_table(rows, ["mode", "B", "N", "M", "dtype", "gamma", "ms", "gcups", "peak_mb"]))
    write_results(out.with_suffix(".json"), meta, rows, md)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
