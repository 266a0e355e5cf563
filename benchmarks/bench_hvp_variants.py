"""GPU benchmark of the alignment variants' second order (issues 24 and 25): the cuda backend's hvp_cost with
open_begin, open_end and step_penalty against the plain DP's at the same sizes.

    PYTHONPATH=src python3 benchmarks/bench_hvp_variants.py --out benchmarks/results/h100_hvp_variants [--reps 20]

Rows: float32 unless noted, gamma = 1, C and a direction Cdot given (squared differences of random walks, D = 1),
hvp_cost alone with its scratch allocation; cells counted once (GCUPS = B·N·M / time). Variants: "plain", "open_begin",
"open_end", "penalty" (one step penalty with a direction penalty_dot), "penalty_pairs" (one per pair), "all" (open
begin and end with a per-pair penalty and its direction); "ratio" = time / plain's time in the same run. Timings: CUDA
events around each call, after two warm-up calls of each (the first compiles with NVRTC); the variants of a size take
turns call by call (a drift of the GPU's clock hits them alike), median of the repetitions. Writes <out>.json and
<out>.md.
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
from softdtw.backends import cuda as backend  # noqa: E402

SIZES = [  # B, N, M, dtype
    (1024, 256, 256, torch.float32),
    (64, 512, 512, torch.float32),
    (256, 256, 256, torch.float64),
    (64, 1024, 1024, torch.float32),  # hvp_fast_kernel (above the warp kernel's 512 columns)
]


def variants(B: int, dtype, device="cuda") -> dict:
    g = torch.Generator(device=device).manual_seed(1)
    pen = torch.tensor(0.3, device=device, dtype=dtype)
    pdot = torch.randn(B, device=device, dtype=dtype, generator=g)
    pens = 0.3 * torch.rand(B, device=device, dtype=dtype, generator=g)
    return {
        "plain": {},
        "open_begin": dict(open_begin=True),
        "open_end": dict(open_end=True),
        "penalty": dict(step_penalty=pen, penalty_dot=pdot),
        "penalty_pairs": dict(step_penalty=pens, penalty_dot=pdot),
        "all": dict(open_begin=True, open_end=True, step_penalty=pens, penalty_dot=pdot),
    }


def closures(B, N, M, dtype, gamma=1.0):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", dtype=dtype, generator=g).cumsum(1) * 0.1
    y = torch.randn(B, M, 1, device="cuda", dtype=dtype, generator=g).cumsum(1) * 0.1
    C = (x - y.transpose(1, 2)).square()
    Cdot = torch.randn(B, N, M, device="cuda", dtype=dtype, generator=g)
    gam = torch.tensor(gamma, device="cuda", dtype=dtype)
    gdot = torch.randn(B, device="cuda", dtype=dtype, generator=g)
    xl = torch.full((B,), N, device="cuda", dtype=torch.int64)
    yl = torch.full((B,), M, device="cuda", dtype=torch.int64)
    return {name: (lambda kw=kw: backend.hvp_cost(C, gam, xl, yl, None, Cdot, gdot, **kw))
            for name, kw in variants(B, dtype).items()}


def interleaved_ms(fns: dict, reps: int, warmup: int = 2) -> dict:
    """Median CUDA-event time (ms) of each closure, the closures called in turn rep after rep."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser()
    gpu = torch.cuda.get_device_name().split()[1].lower() if torch.cuda.is_available() else "gpu"
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"{gpu}_hvp_variants"),
                        help="path of the results without suffix (.json and .md are written)")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    out = Path(args.out)
    if out.suffix in (".json", ".md"):
        out = out.with_suffix("")
    rows = []
    for B, N, M, dtype in SIZES:
        fns = closures(B, N, M, dtype)
        times = interleaved_ms(fns, args.reps)
        plain = times["plain"]
        for name, ms in times.items():
            r = {"variant": name, "B": B, "N": N, "M": M, "dtype": str(dtype).replace("torch.", ""), "gamma": 1.0,
                 "ms": round(ms, 4), "gcups": round(B * N * M / (ms * 1e-3) / 1e9, 2), "ratio": round(ms / plain, 3)}
            rows.append(r)
            print(f"{name:>14} B={B:5d} N={N:4d} M={M:4d} {r['dtype']:>7} {ms:9.3f} ms {r['gcups']:8.2f} GCUPS "
                  f"x{r['ratio']:.3f}", flush=True)
        del fns
        torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_sha": git_sha(),
            "script": "benchmarks/bench_hvp_variants.py"}
    md = ("# Second order of the alignment variants on the GPU: hvp_cost (issues 24, 25)\n\n"
          f"{meta['device']}, torch {meta['torch']}, commit {meta['git_sha']}. hvp_cost alone (C and the direction "
          "given), GCUPS = B·N·M / time; ratio = time / the plain DP's in the same run "
          "(benchmarks/bench_hvp_variants.py).\n\n"
          + markdown_table(rows, ["variant", "B", "N", "M", "dtype", "ms", "gcups", "ratio"]))
    write_results(out.with_suffix(".json"), meta, rows, md)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
