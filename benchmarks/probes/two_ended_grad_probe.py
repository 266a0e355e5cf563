"""Would a gradient from both ends pay? A prototype of forward + backward of few pairs as the two halves of their rows
(backends/cuda/two_ended.py's inputs), measured against the one-ended forward + backward by GPU time (CUDA-graph
replays, so the prototype's torch calls cost no host time), after checking its value and gradients against the
one-ended ones.

The halves run the storing (or checkpointing) forward with the open end; a fold in torch rewrites their end values so
that the open end's backward seeds exactly d value / d R[h - 1, j] (top) and d value / d S[h, j] (bottom):
    top:    t_j = R[h-1, j] + smin(S[h, j], S[h, j+1]),  seed 2^(v - t_j)
    bottom: u_j = S[h, j] + smin(R[h-1, j], R[h-1, j-1]), seed 2^(v - u_j)
(v = smin_j t_j = smin_j u_j, log2 units), and the halves' dx, dy and dgamma map back (bottom rows and y reversed;
dgamma from values (v, 0), soft-DTW being homogeneous of degree 1 in (C, gamma)). Soft-DTW only (gamma > 0), full
lengths.

    PYTHONPATH=src python3 benchmarks/probes/two_ended_grad_probe.py
"""
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu import graphed  # noqa: E402  (a CUDA graph of fn after a warm-up on a side stream)
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402
from softdtw.backends.cuda import two_ended as te  # noqa: E402

LN2 = math.log(2.0)


def end_views(saved, B2, H, M, D, dtype, memory):
    plan = launch.plan_for(B2, H, M, D, dtype, 0, memory == "checkpoint")
    off = be._end_offset(be._table_numel(plan, B2, H, dtype, memory), saved.dtype)
    end = saved[off:].view(torch.float64)
    return end[:B2 * M].view(B2, M), end[B2 * M:B2 * M + 2 * B2].view(B2, 2)


def fold(endr, endv, B, M):
    """Rewrite the halves' end values (full lengths) for the seeds above; the value in log2 units `(B,)`."""
    inf = torch.full((B, 1), math.inf, dtype=torch.float64, device=endr.device)
    top, S = endr[:B], endr[B:].flip(1)
    S_next = torch.cat([S[:, 1:], inf], dim=1)
    top_prev = torch.cat([inf, top[:, :-1]], dim=1)
    t = top - torch.logaddexp2(-S, -S_next)
    u = S - torch.logaddexp2(-top, -top_prev)
    v = -torch.logsumexp(-t * LN2, dim=1) / LN2
    endr[:B] = t
    endr[B:] = u.flip(1)
    endv[:, 0] = torch.cat([v, v])
    return v


def two_ended_fb(x, y, gamma, xl, yl, grad, memory):
    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    x2, y2, xl2, yl2 = te.inputs(x, y, xl, yl)
    _, saved = be.forward(x2, y2, gamma, "sqeuclidean", xl2, yl2, None, memory, open_end=True)
    endr, endv = end_views(saved, 2 * B, H, M, D, x.dtype, memory)
    v = fold(endr, endv, B, M)
    value = (v * (gamma.double() * LN2)).to(x.dtype)
    dx2, dy2, dg2 = be.backward(torch.cat([grad, grad]), x2, y2, gamma, "sqeuclidean", xl2, yl2, None,
                                torch.cat([value, torch.zeros_like(value)]), saved, memory, open_end=True)
    dx = torch.cat([dx2[:B], dx2[B:, :N - H].flip(1)], dim=1)
    dy = dy2[:B] + dy2[B:].flip(1)
    return value, dx, dy, dg2[:B] + dg2[B:]


def one_ended_fb(x, y, gamma, xl, yl, grad, memory):
    v, saved = be.forward(x, y, gamma, "sqeuclidean", xl, yl, None, memory)
    dx, dy, dg = be.backward(grad, x, y, gamma, "sqeuclidean", xl, yl, None, v, saved, memory)
    return v, dx, dy, dg


def graph_ms(fn, reps=20):
    """GPU time per call of fn, captured once in a CUDA graph (gpu.graphed) and replayed: median of five runs of
    `reps` replays."""
    replay = graphed(fn)
    replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        e0.record()
        for _ in range(reps):
            replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return sorted(times)[2]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30))


def problem(B, N, M, D, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, N, D, device="cuda", generator=gen, dtype=torch.float64).to(dtype)
    y = torch.randn(B, M, D, device="cuda", generator=gen, dtype=torch.float64).to(dtype)
    xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
    yl = torch.full((B,), M, dtype=torch.int64, device="cuda")
    grad = torch.rand(B, device="cuda", generator=gen, dtype=torch.float64).to(dtype) + 0.5
    return x, y, xl, yl, grad


def main():
    for dtype, memory, (B, N, M, D) in [(torch.float64, "store", (3, 301, 257, 2)), (torch.float64, "store", (2, 300, 700, 1)),
                                        (torch.float64, "checkpoint", (2, 600, 900, 1)),
                                        (torch.float32, "store", (4, 512, 512, 1))]:
        x, y, xl, yl, grad = problem(B, N, M, D, dtype, seed=N)
        g = torch.tensor(0.3, device="cuda", dtype=dtype)
        one = one_ended_fb(x, y, g, xl, yl, grad, memory)
        two = two_ended_fb(x, y, g, xl, yl, grad, memory)
        print(json.dumps({"check": [B, N, M, D], "dtype": str(dtype), "memory": memory,
                          "rel": {k: rel(a, b) for k, a, b in zip(("value", "dx", "dy", "dgamma"), two, one)}}),
              flush=True)
    for memory, (B, N, M, D) in [("store", (32, 512, 512, 1)), ("store", (16, 128, 128, 1)), ("store", (64, 96, 96, 7)),
                                 ("store", (128, 64, 64, 3)), ("store", (1, 16, 16, 1)), ("store", (16, 1024, 1024, 1)),
                                 ("store", (16, 2048, 2048, 1)), ("store", (1, 8192, 8192, 1)),
                                 ("checkpoint", (1, 16384, 16384, 1)), ("checkpoint", (1, 65536, 65536, 1))]:
        x, y, xl, yl, grad = problem(B, N, M, D, torch.float32, seed=1)
        g = torch.tensor(0.1, device="cuda")
        reps = 3 if N >= 16384 else 20
        t1 = graph_ms(lambda: one_ended_fb(x, y, g, xl, yl, grad, memory), reps)
        t2 = graph_ms(lambda: two_ended_fb(x, y, g, xl, yl, grad, memory), reps)
        one = one_ended_fb(x, y, g, xl, yl, grad, memory)
        two = two_ended_fb(x, y, g, xl, yl, grad, memory)
        print(json.dumps({"B": B, "N": N, "M": M, "D": D, "memory": memory, "one_gpu_ms": round(t1, 4),
                          "two_gpu_ms": round(t2, 4), "ratio": round(t2 / t1, 3),
                          "plans": [str(launch.plan_for(B, N, M, D, torch.float32, 0, memory == "checkpoint")),
                                    str(launch.plan_for(2 * B, (N + 1) // 2, M, D, torch.float32, 0,
                                                        memory == "checkpoint"))],
                          "rel": {k: rel(a, b) for k, a, b in zip(("value", "dx", "dy", "dgamma"), two, one)}}),
              flush=True)


if __name__ == "__main__":
    main()
