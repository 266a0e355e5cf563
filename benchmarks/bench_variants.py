"""GPU benchmark of the alignment variants (issue 25): plain soft-DTW against open ends and step penalties.

    PYTHONPATH=src python3 benchmarks/bench_variants.py --out benchmarks/results/h100_variants [--quick]

Rows, float32, D = 1 (squared Euclidean), gamma = 1, the cuda backend's forward (storing) + backward from x, y
(backend calls: the kernels and their allocations, what a training step of the loss runs), for each variant:
- "plain": no option (the plain kernels);
- "open_ends": open_begin + open_end (subsequence soft-DTW; the issue's target: <= 1.1x plain at the same B, N, M);
- "open_end": open_end only; "penalty": step_penalty = 0.1 (a tensor that requires grad: d/dpenalty computed);
- "all": both open ends and the penalty.
Sizes: training batches (B = 64, N = M = 256; B = 16, N = M = 1024; B = 512, N = M = 256) and one long pair
(B = 1, N = 128, M = 10^6, chained over column chunks). Timings: CUDA events around the closure, median of the
repetitions after two warm-up calls (the first compiles with NVRTC), the variants of one size timed in
alternating rounds so that drift hits them alike; ratio = time / plain time. "ms" synchronises after each call (the
host's time before the first launch counts); "queued_ms" queues the calls back to back, as a training loop does.
--split also times the forward and the backward alone. Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import git_sha, markdown_table, write_results  # noqa: E402
from gpu import median_ms, peak_mb  # noqa: E402  (benchmarks/gpu.py: CUDA-event timing, peak memory)
from softdtw.backends import cuda as backend  # noqa: E402

SIZES = [  # B, N, M
    (64, 256, 256),
    (16, 1024, 1024),
    (512, 256, 256),
    (1, 128, 1_000_000),
]
QUICK_SIZES = [(64, 256, 256), (16, 1024, 1024), (1, 128, 1_000_000)]
VARIANTS = {
    "plain": dict(),
    "open_ends": dict(open_begin=True, open_end=True),
    "open_end": dict(open_end=True),
    "penalty": dict(step_penalty=0.1),
    "all": dict(open_begin=True, open_end=True, step_penalty=0.1),
}


def _problem(B, N, M, dtype, gamma):
    """One size's inputs on the GPU: x `(B, N, 1)`, y `(B, M, 1)`, gamma, full lengths, an upstream gradient of ones."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, 1, device="cuda", dtype=dtype, generator=g)
    gam = torch.tensor(gamma, device="cuda", dtype=dtype)
    xl = torch.full((B,), N, device="cuda", dtype=torch.int64)
    yl = torch.full((B,), M, device="cuda", dtype=torch.int64)
    return x, y, gam, xl, yl, torch.ones(B, device="cuda", dtype=dtype)


def _device_options(opts, dtype):
    """A variant's options, its step penalty as a 0-d tensor of the data dtype on the GPU."""
    opts = dict(opts)
    if "step_penalty" in opts:
        opts["step_penalty"] = torch.tensor(opts["step_penalty"], device="cuda", dtype=dtype)
    return opts


def closures(B, N, M, dtype, gamma):
    x, y, gam, xl, yl, grad = _problem(B, N, M, dtype, gamma)
    fns = {}
    for name, opts in VARIANTS.items():
        opts = _device_options(opts, dtype)

        def step(opts=opts):
            v, saved = backend.forward(x, y, gam, "sqeuclidean", xl, yl, None, "store", **opts)
            return backend.backward(grad, x, y, gam, "sqeuclidean", xl, yl, None, v, saved, "store", **opts)
        fns[name] = step
    return fns


def queued_ms(fn, calls: int) -> float:
    """ms per call of `calls` calls queued back to back (one synchronisation at the end), as a training loop runs
    them: the host's work for a call overlaps the GPU's work for the previous one."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def halves(B, N, M, dtype, gamma, opts):
    """(forward storing, backward alone from one saved forward) of one variant."""
    x, y, gam, xl, yl, grad = _problem(B, N, M, dtype, gamma)
    opts = _device_options(opts, dtype)
    v, saved = backend.forward(x, y, gam, "sqeuclidean", xl, yl, None, "store", **opts)

    def fwd():
        return backend.forward(x, y, gam, "sqeuclidean", xl, yl, None, "store", **opts)

    def bwd():
        return backend.backward(grad, x, y, gam, "sqeuclidean", xl, yl, None, v, saved, "store", **opts)
    return fwd, bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "h100_variants")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--split", action="store_true", help="also time the forward and the backward alone")
    args = ap.parse_args()
    dtype, gamma = torch.float32, 1.0
    rows = []
    t0 = time.time()
    for B, N, M in QUICK_SIZES if args.quick else SIZES:
        fns = closures(B, N, M, dtype, gamma)
        for fn in fns.values():  # compile and warm up every variant first
            fn()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        fns["plain"]()
        torch.cuda.synchronize()
        one = time.perf_counter() - t1
        reps = max(2, min(50, int(0.3 / max(one, 1e-5))))
        times = {k: [] for k in fns}
        queued = {k: [] for k in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(median_ms(fn, reps, warmup=1))
                queued[name].append(queued_ms(fn, reps))
        plain = sorted(times["plain"])[len(times["plain"]) // 2]
        qplain = sorted(queued["plain"])[len(queued["plain"]) // 2]
        if args.split and B * N <= 65536:  # the forward (storing) and the backward alone, plain against two variants
            for name in ("plain", "open_ends", "penalty"):
                fwd, bwd = halves(B, N, M, dtype, gamma, VARIANTS[name])
                for mode, f in (("forward_store", fwd), ("backward", bwd)):
                    ms = median_ms(f, reps, warmup=2)
                    rows.append(dict(mode=mode, variant=name, B=B, N=N, M=M, dtype="float32", gamma=gamma,
                                     memory="store", ms=ms, gcups=B * N * M / (ms * 1e6)))
                    print(f"B={B} N={N} M={M} {name:10s} {mode:14s} {ms:9.4f} ms", flush=True)
        for name, fn in fns.items():
            ms = sorted(times[name])[len(times[name]) // 2]
            qms = sorted(queued[name])[len(queued[name]) // 2]
            rows.append(dict(mode="forward_backward", variant=name, B=B, N=N, M=M, dtype="float32", gamma=gamma,
                             memory="store", ms=ms, ratio=ms / plain, gcups=B * N * M / (ms * 1e6),
                             queued_ms=qms, queued_ratio=qms / qplain,
                             rounds_ms=[round(t, 4) for t in times[name]], peak_mb=peak_mb(fn)))
            print(f"B={B} N={N} M={M} {name:10s} {ms:9.4f} ms  x{ms / plain:.3f}  queued {qms:9.4f} ms "
                  f"x{qms / qplain:.3f}  rounds {[round(t, 4) for t in times[name]]}", flush=True)
        write(args.out, rows, t0)
    print(write(args.out, rows, t0))


def write(out: Path, rows: list, t0: float) -> str:
    """Write <out>.json and <out>.md from the rows so far (after every size: a cut-short run keeps its rows)."""
    props = torch.cuda.get_device_properties(0)
    meta = dict(device=props.name, torch=torch.__version__, git_sha=git_sha(), seconds=round(time.time() - t0, 1))
    target = [r for r in rows if r["variant"] == "open_ends" and r["mode"] == "forward_backward"]
    md = (f"# Alignment variants on {props.name}\n\ntorch {torch.__version__}, git {meta['git_sha']}, float32, "
          f"gamma = 1, D = 1, squared Euclidean, memory = store; backend forward + backward, median ms; ratio = "
          f"time / plain at the same B, N, M (target for open_ends: <= 1.1). ms: synchronised after each call; "
          f"queued_ms: calls queued back to back.\n\n"
          + markdown_table(target, ["B", "N", "M", "ms", "ratio", "queued_ms", "queued_ratio"]) + "\n\n## All rows\n\n"
          + markdown_table(rows, ["mode", "variant", "B", "N", "M", "ms", "ratio", "queued_ms", "queued_ratio",
                                  "gcups", "peak_mb"]))
    write_results(out.with_suffix(".json"), meta, rows, md)
    return md


if __name__ == "__main__":
    main()
