"""A compute-sanitizer workload over the C++ launcher's chained plans: fused (l1 float64, sqeuclidean float32) and
"gram" (float32, float64) pairs, storing training calls and value-only calls, without and with per-pair lengths; prints
whether the launcher took each call.

    compute-sanitizer --tool memcheck python benchmarks/probes/memcheck_launcher.py
"""
import torch, softdtw
from softdtw.backends.cuda import fastpath
fastpath.build()
taken = []
_call = fastpath.call
def rec(*a, **k):
    v = _call(*a, **k); taken.append(v is not None); return v
fastpath.call = rec
cases = [(3, 300, 260, 16, "l1", torch.float64), (2, 1024, 1100, 1, "sqeuclidean", torch.float32),
         (2, 1024, 1024, 24, "sqeuclidean", torch.float32), (2, 700, 900, 20, "sqeuclidean", torch.float64)]
for B, N, M, D, cost, dt in cases:
    x = torch.randn(B, N, D, device="cuda", dtype=dt); y = torch.randn(B, M, D, device="cuda", dtype=dt)
    xl = torch.randint(N // 2, N + 1, (B,), device="cuda"); yl = torch.randint(M // 2, M + 1, (B,), device="cuda")
    for kw in ({}, {"x_lengths": xl, "y_lengths": yl}):
        for _ in range(2):
            xc = x.clone().requires_grad_(); yc = y.clone().requires_grad_()
            softdtw.soft_dtw(xc, yc, 0.5, cost=cost, memory="store", **kw).sum().backward()
        with torch.no_grad():
            softdtw.soft_dtw(x, y, 0.5, cost=cost, **kw); softdtw.soft_dtw(x, y, 0.5, cost=cost, **kw)
        print(B, N, M, D, cost, dt, kw.keys(), "taken:", taken[-3:], flush=True)
torch.cuda.synchronize()
print("done")
