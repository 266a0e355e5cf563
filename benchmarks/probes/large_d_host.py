"""Host time of the large-D call (B = 32, N = M = 2048, D = 64, store, TF32): when each launch is queued after
the step starts (perf_counter stamps at the GEMMs and our kernel launches), and a cProfile of 30 steps.

    PYTHONPATH=src python3 benchmarks/probes/large_d_host.py
"""
import cProfile, pstats, sys, io
import torch
sys.path.insert(0, "src"); sys.path.insert(0, "benchmarks")
import softdtw
from softdtw.backends import cuda as be
from softdtw.backends.cuda import launch as L
from gpu import HostStamps

torch.backends.cuda.matmul.allow_tf32 = True
B, N, D = 32, 2048, 64
x0 = torch.randn(B, N, D, device="cuda"); y0 = torch.randn(B, N, D, device="cuda")
stamps = HostStamps(((L, "launch"), (be, "_gram_table"), (be, "_norms"), (torch, "baddbmm")))
def step():
    x = x0.clone().requires_grad_(True)
    v = softdtw.soft_dtw(x, y0, 1.0, memory="store")
    stamps.mark("forward returned")
    v.mean().backward()
for _ in range(5):
    step()
torch.cuda.synchronize()
for r in range(3):
    stamps.start(); step()
    stamps.mark("backward returned")
    torch.cuda.synchronize(); stamps.mark("synced")
    print("run", r, stamps.line())
pr = cProfile.Profile()
pr.enable()
for _ in range(30):
    step()
torch.cuda.synchronize()
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35); print(s.getvalue()[:9000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45); print(s.getvalue()[:9000])
