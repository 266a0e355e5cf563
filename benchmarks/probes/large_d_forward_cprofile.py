"""cProfile of the large-D forward call alone (B = 32, N = M = 2048, D = 64), checkpoint then store, the GPU synced
before each call so that the value check does not wait: where its host time goes, by own time and by cumulative
time within softdtw.

    PYTHONPATH=src python3 benchmarks/probes/large_d_forward_cprofile.py
"""
import cProfile, pstats, io, sys, time
import torch
sys.path.insert(0, "src")
import softdtw
B, N, D = 32, 2048, 64
x0 = torch.randn(B, N, D, device="cuda"); y0 = torch.randn(B, N, D, device="cuda")
x = x0.clone().requires_grad_(True)
for mem in ("checkpoint", "store"):
    for _ in range(3):
        softdtw.soft_dtw(x, y0, 1.0, memory=mem)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    tot = 0.0
    for _ in range(20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        pr.enable(); v = softdtw.soft_dtw(x, y0, 1.0, memory=mem); pr.disable()
        tot += time.perf_counter() - t
    torch.cuda.synchronize()
    print(mem, "forward call (profiled) us", tot / 20 * 1e6)
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue()[300:5000])
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats("softdtw", 40); print(s.getvalue()[300:7000])
