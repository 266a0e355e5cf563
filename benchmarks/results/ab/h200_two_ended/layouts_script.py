import json, sys, torch
sys.path.insert(0, "src"); sys.path.insert(0, "benchmarks"); sys.path.insert(0, "benchmarks/probes")
from two_ended_probe import back_to_back_ms
from gpu import median_ms
from softdtw.backends.cuda import launch, two_ended as te
for B, N in [(16, 8192), (1, 65536)]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", generator=gen); y = torch.randn(B, N, 1, device="cuda", generator=gen)
    l = torch.full((B,), N, device="cuda"); g = torch.tensor(1.0, device="cuda")
    for K, W in [(None, None), (4, 4), (4, 8), (8, 4), (4, 2), (8, 8), (2, 8), (8, 2), (4, 1), (8, 1), (2, 4), (16, 2), (16, 4)]:
        ctx = launch.forced_plan(K, W, chain=True) if K else None
        try:
            if ctx: ctx.__enter__()
            plan = launch.plan_for(2 * B, (N + 1) // 2, N, 1, torch.float32, 0)
            f = lambda: te.forward(x, y, g, "sqeuclidean", l, l)
            b2b = back_to_back_ms(f, 10 if N <= 8192 else 2); syn = median_ms(f, 7)
            print(json.dumps({"B": B, "N": N, "forced": K is not None, "plan": [plan.K, plan.W, plan.nch], "b2b_ms": round(b2b, 3), "sync_ms": round(syn, 3), "gcups": round(B * N * N / b2b / 1e6, 1)}), flush=True)
        except Exception as e:
            print(json.dumps({"B": B, "N": N, "K": K, "W": W, "error": str(e)[:200]}), flush=True)
        finally:
            if ctx: ctx.__exit__(None, None, None)
