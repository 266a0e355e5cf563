"""The gram cost's GEMMs by kernels/gram_gemm.cu against torch's (issue 27, the D = 64 / 80 rows; measurement only).

Per shape and dtype, for the forward's inputs (norms_kernel + torch.bmm against gram_xy_kernel) and the backward's
gradients (two mul + baddbmm_ against gram_grads_kernel):

- ``host_us``: the host's time per call, a loop of ``--reps`` calls synchronised only around it;
- ``gpu_us``: the GPU's time per call, the same loop queued behind a ``torch.cuda._sleep`` so that the host's launches
  are all in before the GPU reaches the first (CUDA events around the loop, the sleep outside them);
- ``max_err``: the largest error against float64 torch, over |row| |column| (as test_cuda_gram_gemm.py measures).

The own kernels run whatever own_gram_gemm says of the shape (the rule is what this probe informs).

    PYTHONPATH=src python3 benchmarks/probes/gram_gemm_probe.py [--shape B,N,M,D ...] [--out F.jsonl]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median

import torch
from gram_host_probe import host_us  # (this folder is the script's sys.path[0])


def gpu_us(fn, reps: int, rounds: int = 5) -> float:
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(2e6))  # ~1 ms: the loop below is queued before the GPU reaches it
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / reps)
    return round(median(out), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", default=[], metavar="B,N,M,D")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from softdtw.backends import cuda as cb

    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shape or ["32,128,128,64", "16,400,300,80"])]
    rows = []
    for B, N, M, D in shapes:
        for dtype in (torch.float32, torch.float64):
            g = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(B, N, D, generator=g, device="cuda", dtype=dtype)
            y = torch.randn(B, M, D, generator=g, device="cuda", dtype=dtype)
            E = torch.rand(B, N, M, generator=g, device="cuda", dtype=dtype) * 0.01
            rs, cs = E.sum(-1), E.sum(-2)
            pieces = {
                "xy_torch": lambda: (cb._norms(x, y), torch.bmm(x, y.transpose(1, 2))),
                "xy_own": lambda: cb._gram_own(x, y),
                "grads_torch": lambda: ((x * rs.unsqueeze(-1)).baddbmm_(E, y, beta=2.0, alpha=-2.0),
                                        (y * cs.unsqueeze(-1)).baddbmm_(E.transpose(1, 2), x, beta=2.0, alpha=-2.0)),
                "grads_own": lambda: cb._gram_grads(E, x, y, rs, cs, True, True),
            }
            for f in pieces.values():  # compile, cuBLAS handles, caches
                f()
            xd, yd, Ed = x.double(), y.double(), E.double()
            want_g = torch.bmm(xd, yd.transpose(1, 2))
            want_dx = 2 * (rs.double()[..., None] * xd - torch.bmm(Ed, yd))
            sc_g = torch.linalg.vector_norm(xd, dim=-1)[..., None] * torch.linalg.vector_norm(yd, dim=-1)[..., None, :]
            sc_dx = 2 * (rs.double().abs()[..., None] * xd.abs() + torch.linalg.vector_norm(Ed, dim=-1)[..., None]
                         * torch.linalg.vector_norm(yd, dim=-2)[..., None, :])
            err = {
                "xy_torch": ((pieces["xy_torch"]()[1].double() - want_g).abs() / sc_g).max().item(),
                "xy_own": ((pieces["xy_own"]()[2].double() - want_g).abs() / sc_g).max().item(),
                "grads_torch": ((pieces["grads_torch"]()[0].double() - want_dx).abs() / sc_dx).max().item(),
                "grads_own": ((pieces["grads_own"]()[0].double() - want_dx).abs() / sc_dx).max().item(),
            }
            for name, f in pieces.items():
                row = dict(B=B, N=N, M=M, D=D, dtype=str(dtype).replace("torch.", ""), piece=name,
                           host_us=host_us(f, args.reps), gpu_us=gpu_us(f, args.reps),
                           max_err=float(f"{err[name]:.3g}"), tf32=torch.backends.cuda.matmul.allow_tf32)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
