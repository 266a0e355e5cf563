"""DILATE forward + backward against the soft-DTW loss's forward + backward, at training sizes (issue 24).

    PYTHONPATH=src python benchmarks/bench_dilate.py [--device cuda|cpu] [--out FILE.json] [--reps 30] [--smoke]

One step, as a user runs it: ``loss(pred, target).mean().backward()`` with pred `(B, N, 1)` requiring grad,
timed from the call to the end of the backward (synchronised on CUDA), median of ``reps`` alternated runs
(benchmarks/_harness.py). Rows per size:

- ``sdtw``: ``softdtw.soft_dtw(pred, target, gamma)``, the soft-DTW loss (fused cost, store);
- ``dilate``: ``softdtw.dilate_loss(pred, target, alpha=0.5, gamma)``: on cuda one kernel (dilate_xy_kernel: the
  cost and Omega formed in its cells, the terms and the gradient reduced there; through the C++ launcher once it
  is built), elsewhere a value-only forward and one ``hvp_cost`` along Omega, whose E and E-dot give the temporal
  term and both gradients (softdtw/dilate.py);
- ``mse``: ``F.mse_loss`` on the same tensors (N = M only), the floor of any loss step;
- with ``--variants`` (cuda): ``dilate_python`` (the C++ launcher off), ``dilate_lengths`` (x_lengths given, all
  full, on the GPU: through the launcher where dilate_xy_kernel runs, else DILATE's Python path, whose forward_cost
  and hvp_cost run their C++ op kernels), ``dilate_lengths_cpu`` (the same lengths on the CPU) and
  ``dilate_lengths_python`` (the launcher off).

x_sdtw = dilate over sdtw (issue 24's target on the H100: <= 3 at B = 64, N = M = 256, D = 1). Mcells_per_s =
B·N·M / time, cells counted once (issue 24's CPU target: DILATE forward + backward >= 60 M cells/s on 2 cores,
against ~2.7 M for the published Numba code's value + gradient + HVP, one pair at a time).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _harness  # noqa: E402
import softdtw  # noqa: E402

GAMMA = 0.01
fastpath = None  # softdtw.backends.cuda.fastpath on cuda (main)
SIZES = [(64, 256, 256), (64, 96, 96), (32, 512, 512), (256, 128, 128), (64, 100, 120)]


def _data(B, N, M, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(B, max(N, M), 1, generator=g, dtype=torch.float64).cumsum(1) * 0.1
    target = t[:, :M].to(device, dtype)
    pred = (t[:, :N] + 0.3 * torch.randn(B, N, 1, generator=g, dtype=torch.float64)).to(device, dtype)
    return pred, target


def _steps(pred, target, sync, variants=False):
    def step(loss_fn, fast=True):
        def run():
            if fastpath is not None:
                fastpath.set_enabled(fast)
            p = pred.detach().requires_grad_()
            loss_fn(p, target).mean().backward()
            sync()
            return p.grad
        return run

    def dilate(**kw):
        return lambda p, t: softdtw.dilate_loss(p, t, alpha=0.5, gamma=GAMMA, **kw)

    steps = {
        "sdtw": step(lambda p, t: softdtw.soft_dtw(p, t, GAMMA)),
        "dilate": step(dilate()),
    }
    if pred.shape == target.shape:
        steps["mse"] = step(F.mse_loss)
    if variants and fastpath is not None:
        full = torch.full((pred.shape[0],), pred.shape[1], device=pred.device)
        steps["dilate_python"] = step(dilate(), fast=False)
        steps["dilate_lengths"] = step(dilate(x_lengths=full))
        steps["dilate_lengths_cpu"] = step(dilate(x_lengths=full.cpu()))
        steps["dilate_lengths_python"] = step(dilate(x_lengths=full), fast=False)
    return steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="one tiny size, 2 reps (a check of the script)")
    parser.add_argument("--variants", action="store_true",
                        help="cuda: also DILATE with the launcher off (dilate_python) and with lengths given "
                             "(dilate_lengths, dilate_lengths_cpu; dilate_lengths_python with the launcher off)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    sizes = [(4, 16, 16)] if args.smoke else SIZES
    reps = 2 if args.smoke else args.reps
    global fastpath
    launcher = None
    if device.type == "cuda":  # the soft-DTW step as a training loop has it after its first minute: through the
        from softdtw.backends.cuda import fastpath  # C++ launcher (built in the background otherwise)

        try:
            fastpath.build()
        except RuntimeError:
            pass
        launcher = fastpath.status()
    rows = []
    for B, N, M in sizes:
        pred, target = _data(B, N, M, device, torch.float32)
        fns = _steps(pred, target, sync, args.variants)
        ms = _harness.interleaved_median_ms(fns, reps, warmup=2, desc=f"{device.type} B={B} N={N} M={M}")
        for name, t in ms.items():
            rows.append(dict(device=device.type, B=B, N=N, M=M, D=1, gamma=GAMMA, loss=name, ms=t,
                             x_sdtw=t / ms["sdtw"], Mcells_per_s=B * N * M / (t * 1e-3) / 1e6))
            print(rows[-1], flush=True)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _harness.cpu_name()
    meta = dict(device=name, torch=torch.__version__, git_sha=_harness.git_sha(), gamma=GAMMA, dtype="float32",
                load_average=os.getloadavg() if device.type == "cpu" else None, fastpath=launcher,
                targets=dict(h100="dilate <= 3 x sdtw at B=64, N=M=256, D=1",
                             cpu="dilate >= 60 M cells/s on 2 cores"))
    cols = ["device", "B", "N", "M", "loss", "ms", "x_sdtw", "Mcells_per_s"]
    md = (f"# DILATE forward + backward against the soft-DTW loss ({name}, torch {torch.__version__}, "
          f"{meta['git_sha']})\n\nfloat32, D = 1, gamma = {GAMMA}, alpha = 0.5; one step = loss, .mean(), "
          f".backward(), synchronise; median of {reps} alternated runs.\n\n"
          + _harness.markdown_table(rows, cols) + "\n")
    out = args.out or _harness.default_out(f"dilate-{device.type}")
    _harness.write_results(out, meta, rows, md)
    print(md)
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
