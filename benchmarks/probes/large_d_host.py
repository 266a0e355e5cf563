"""Host time of the large-D call (B = 32, N = M = 2048, D = 64, store, TF32): when each launch is queued after
the step starts (perf_counter stamps at the GEMMs and our kernel launches), and a cProfile of 30 steps.

    PYTHONPATH=src python3 benchmarks/probes/large_d_host.py
"""
import cProfile, pstats, sys, time, io
import torch
sys.path.insert(0, "src")
import softdtw
from softdtw.backends import cuda as be
from softdtw.backends.cuda import launch as L

torch.backends.cuda.matmul.allow_tf32 = True
B, N, D = 32, 2048, 64
x0 = torch.randn(B, N, D, device="cuda"); y0 = torch.randn(B, N, D, device="cuda")
stamps = []
T = [0.0]
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        stamps.append((name + (":" + str(a[0])[:40] if name == "launch" else ""), (time.perf_counter() - T[0]) * 1e6))
        return f(*a, **k)
    setattr(mod, name, g)
for mod, name in ((L, "launch"), (be, "_gram_table"), (be, "_norms"), (torch, "baddbmm")):
    wrap(mod, name)
def step():
    x = x0.clone().requires_grad_(True)
    v = softdtw.soft_dtw(x, y0, 1.0, memory="store")
    stamps.append(("forward returned", (time.perf_counter() - T[0]) * 1e6))
    v.mean().backward()
for _ in range(5):
    step()
torch.cuda.synchronize()
for r in range(3):
    stamps.clear(); T[0] = time.perf_counter(); step()
    stamps.append(("backward returned", (time.perf_counter() - T[0]) * 1e6))
    torch.cuda.synchronize(); stamps.append(("synced", (time.perf_counter() - T[0]) * 1e6))
    print("run", r, " | ".join(f"{n} {t:.0f}" for n, t in stamps))
pr = cProfile.Profile()
pr.enable()
for _ in range(30):
    step()
torch.cuda.synchronize()
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35); print(s.getvalue()[:9000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45); print(s.getvalue()[:9000])
