"""GPU benchmark of the l1 cost at large D (D > FUSED_D_MAX): its cost table and gradients by the kernels of
backends/cuda/l1.py against the elementwise torch forms they replaced, and the training call that uses them.

    PYTHONPATH=src python3 benchmarks/bench_l1_large_d.py --out benchmarks/results/h100_l1_large_d

Rows, float32 unless noted, gamma = 1:
- "cost_kernel" / "cost_elementwise": C = sum_d |x_i - y_j| `(B, N, M)` by l1.cost, and one feature at a time by
  torch ops (the form used before, sum in the same order: the two are equal to the bit);
- "vjp_kernel" / "vjp_elementwise": dx, dy from G `(B, N, M)` by l1.vjp, and by torch's sign and sums four
  features at a time (the form used before);
- "call_store" / "call_checkpoint": the training call through the public API, x.grad = None;
  soft_dtw(x, y, cost="l1", memory=...).mean().backward() (x needs a gradient, y does not).
Timings: CUDA events, median of the repetitions after two warm-up calls (NVRTC compiles in the first).
peak_mb: memory above what was allocated before the timed closure.
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
from gpu import median_ms, peak_mb  # noqa: E402

import softdtw  # noqa: E402
from softdtw.backends.cuda import l1  # noqa: E402

SHAPES = [(32, 1024, 1024, 32), (16, 400, 300, 80), (8, 2048, 2048, 64)]


def cost_elementwise(x, y):
    C = (x[:, :, None, 0] - y[:, None, :, 0]).abs_()
    t = torch.empty_like(C)
    for d in range(1, x.shape[2]):
        C.add_(torch.sub(x[:, :, None, d], y[:, None, :, d], out=t).abs_())
    return C


def vjp_elementwise(x, y, G):
    dx, dy = torch.empty_like(x), torch.empty_like(y)
    for d0 in range(0, x.shape[2], 4):
        d1 = min(d0 + 4, x.shape[2])
        s = torch.sign(x[:, :, None, d0:d1] - y[:, None, :, d0:d1]).mul_(G.unsqueeze(-1))
        dx[:, :, d0:d1] = s.sum(2)
        dy[:, :, d0:d1] = -s.sum(1)
    return dx, dy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "h100_l1_large_d"))
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    out = Path(args.out)
    rows = []
    for B, N, M, D in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, N, D, device="cuda", generator=g)
        y = torch.randn(B, M, D, device="cuda", generator=g)
        G = torch.rand(B, N, M, device="cuda", generator=g)
        xg = x.clone().requires_grad_()

        def call(memory):
            def step():
                xg.grad = None
                softdtw.soft_dtw(xg, y, gamma=1.0, cost="l1", memory=memory).mean().backward()
            return step

        fns = {"cost_kernel": lambda: l1.cost(x, y), "cost_elementwise": lambda: cost_elementwise(x, y),
               "vjp_kernel": lambda: l1.vjp(x, y, G), "vjp_elementwise": lambda: vjp_elementwise(x, y, G),
               "call_store": call("store"), "call_checkpoint": call("checkpoint")}
        assert torch.equal(l1.cost(x, y), cost_elementwise(x, y))
        for name, fn in fns.items():
            ms = median_ms(fn, args.reps)
            peak = peak_mb(fn)
            r = {"mode": name, "B": B, "N": N, "M": M, "D": D, "dtype": "float32", "ms": round(ms, 4),
                 "peak_mb": round(peak, 1)}
            rows.append(r)
            print(f"{name:>17} B={B:3d} N={N:5d} M={M:5d} D={D:3d} {ms:9.3f} ms  peak {peak:9.1f} MB", flush=True)
        del x, y, G, xg, fns
        torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_sha": git_sha(),
            "script": "benchmarks/bench_l1_large_d.py"}
    md = ("# The l1 cost at large D: kernels against the elementwise forms (issue 27)\n\n"
          f"{meta['device']}, torch {meta['torch']}, commit {meta['git_sha']}. cost / vjp: the table "
          "sum_d |x_i - y_j| and dx, dy from G by backends/cuda/l1.py (kernel) or by torch ops one or four features "
          "at a time (elementwise, the form used before); call_*: soft_dtw(x, y, cost='l1').mean().backward() through "
          "the public API (benchmarks/bench_l1_large_d.py).\n\n"
          + markdown_table(rows, ["mode", "B", "N", "M", "D", "ms", "peak_mb"]))
    write_results(out.with_suffix(".json"), meta, rows, md)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
