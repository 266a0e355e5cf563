"""Where a CUDA-graph replay of the tiny pair's forward + backward (B = 1, N = M = 16) spends its time
(issue 6: <= 20 µs per replay).

Replays graphs holding growing parts of the step, and lists the kernels one eager step launches with
their GPU durations (torch.profiler). Prints one JSON object.

    PYTHONPATH=src python3 scripts/tiny_graph_probe.py
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import softdtw  # noqa: E402
from gpu import cuda_kernels, data, graphed, wall_ms  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402


def main(calls=2000):
    x, y = data(1, 16, 16, 1)
    lengths = torch.full((1,), 16, device="cuda")
    gamma = torch.tensor(1.0, device="cuda")
    grad = torch.ones(1, device="cuda")
    xs = x.clone().requires_grad_()
    args = (x, y, gamma, "sqeuclidean", lengths, lengths, None)

    def fwd():
        return be.forward(*args, "store")

    v, s = fwd()

    def bwd():
        return be.backward(grad, *args, v, s, "store")

    def both():
        v2, s2 = be.forward(*args, "store")
        return be.backward(grad, *args, v2, s2, "store")

    def api():
        value = softdtw.soft_dtw(xs, y, 1.0)
        return torch.autograd.grad(value.sum(), xs)

    def empty():
        pass

    out = {"replay_us": {}}
    for name, fn in (("empty graph", empty), ("backend forward", fwd), ("backend backward", bwd),
                     ("backend forward+backward", both), ("public API forward+grad", api)):
        out["replay_us"][name] = round(wall_ms(graphed(fn), calls) * 1e3, 2)
    from softdtw.backends.cuda import launch
    for K in (1, 2, 4):  # the layout of the pair: K columns per lane on ceil(16 / K) lanes
        with launch.forced_plan(K, 1):
            v, s = fwd()
            for name, fn in (("backend forward+backward", both), ("public API forward+grad", api)):
                out["replay_us"][f"{name}, K={K}"] = round(wall_ms(graphed(fn), calls) * 1e3, 2)
    # Back-to-back replays measure the graph's GPU time plus launch; the GPU time alone, from events
    # around 200 replays of the API graph:
    replay = graphed(api)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        replay()
    end.record()
    end.synchronize()
    out["api_replay_event_us"] = round(start.elapsed_time(end) / 200 * 1e3, 2)

    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        api()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            api()
        torch.cuda.synchronize()
    kernels = cuda_kernels(prof)
    out["eager_kernels_per_step"] = {k: {"count": c / 10, "us_each": round(t / max(c, 1), 2)}
                                     for k, (c, t) in kernels.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
