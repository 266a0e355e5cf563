import json, sys, contextlib, torch
sys.path.insert(0, "src")
from softdtw.backends import cuda as be
from softdtw.backends.cuda import launch
def per_call(fn, calls=10, reps=5):
    fn(); torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls): fn()
        e.record(); e.synchronize(); out.append(s.elapsed_time(e) / calls)
    return sorted(out)[len(out)//2]
g = torch.tensor(1.0, device="cuda")
for B, N, M, K, W in [(1,8192,8192,None,None),(1,4096,8192,None,None),(2,4096,8192,None,None),(16,8192,8192,None,None),
                      (32,4096,8192,None,None),(32,4096,8192,4,4),(32,4096,8192,8,4),(32,4096,8192,4,2),(16,4096,8192,None,None),
                      (8,8192,8192,None,None),(1,65536,65536,None,None),(2,32768,65536,None,None)]:
    x = torch.randn(B, N, 1, device="cuda"); y = torch.randn(B, M, 1, device="cuda")
    xl = torch.full((B,), N, device="cuda"); yl = torch.full((B,), M, device="cuda")
    with (launch.forced_plan(K, W, chain=True) if K else contextlib.nullcontext()):
        plan = launch.plan_for(B, N, M, 1, torch.float32, 0)
        t = per_call(lambda: be.forward(x, y, g, "sqeuclidean", xl, yl, None, "none"), calls=3 if N*M > 2**30 else 10)
    print(json.dumps({"B": B, "N": N, "M": M, "plan": [plan.K, plan.W, plan.nch, plan.chain], "forced": K is not None,
                      "ms_per_call": round(t, 3), "gcups": round(B*N*M/t/1e6, 1)}), flush=True)
