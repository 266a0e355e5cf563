"""A/B of a kernel change by the backend's own times (cuda events, median of repetitions), one tree per process:

    python benchmarks/probes/frame_init_ab.py SRC_DIR LABEL >> ab.jsonl

Rows: value-only forward (chained long pair, many-pair SEQ), store forward + backward, checkpoint forward +
backward, float32, D = 1, gamma = 1. Written for the chunk frame initialisation in forward_pair.cuh (the
short-x precision fix); any tree with the same backend API works."""
import json
import sys
import time

SRC, LABEL = sys.argv[1], sys.argv[2]
sys.path.insert(0, SRC)
import torch  # noqa: E402

from softdtw.backends import cuda as be  # noqa: E402

SIZES = [("value", 16, 8192, 8192), ("value", 16384, 512, 512), ("store", 1024, 512, 512),
         ("store", 8192, 128, 128), ("store", 32, 512, 512), ("store", 4, 4096, 4096),
         ("checkpoint", 1, 32768, 32768), ("checkpoint", 16, 4096, 4096), ("store", 64, 24, 4000)]


def median_ms(fn, reps):  # not benchmarks/gpu.py's: that one imports softdtw from this checkout, not SRC
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


for mode, B, N, M in SIZES:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", generator=g)
    y = torch.randn(B, M, 1, device="cuda", generator=g)
    gm = torch.tensor(1.0, device="cuda")
    xl = torch.full((B,), N, device="cuda")
    yl = torch.full((B,), M, device="cuda")
    grad = torch.ones(B, device="cuda")
    memory = "none" if mode == "value" else mode

    def step():
        v, saved = be.forward(x, y, gm, "sqeuclidean", xl, yl, None, memory)
        if mode != "value":
            be.backward(grad, x, y, gm, "sqeuclidean", xl, yl, None, v, saved, memory)

    reps = 5 if B * N * M > 5e8 else 30
    ms = median_ms(step, reps)
    print(json.dumps(dict(label=LABEL, mode=mode, B=B, N=N, M=M, ms=round(ms, 4),
                          gcups=round(B * N * M / ms / 1e6, 1), t=time.time())), flush=True)
