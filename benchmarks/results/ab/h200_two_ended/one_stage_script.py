import json, sys, torch
sys.path.insert(0, "src"); sys.path.insert(0, "benchmarks"); sys.path.insert(0, "benchmarks/probes")
from two_ended_probe import back_to_back_ms
from gpu import median_ms
from softdtw.backends import cuda as be
from softdtw.backends.cuda import launch, two_ended as te
orig = be._variant
def nosplit(*a, **k):
    v = orig(*a, **k)
    return be._Var(v.code | 8, v.pen, v.args)
for B, N in [(16, 8192), (1, 8192), (32, 8192), (16, 16384), (1, 65536)]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", generator=gen); y = torch.randn(B, N, 1, device="cuda", generator=gen)
    l = torch.full((B,), N, device="cuda"); g = torch.tensor(1.0, device="cuda")
    f = lambda: te.forward(x, y, g, "sqeuclidean", l, l)
    calls = 10 if B * N * N <= 2**31 else 2
    for rnd in range(2):
        for mode in ("split", "nosplit"):
            be._variant = nosplit if mode == "nosplit" else orig
            for K, W in [(None, None), (4, 8), (2, 8)] if (B, N) == (16, 8192) else [(None, None)]:
                ctx = launch.forced_plan(K, W, chain=True) if K else None
                if ctx: ctx.__enter__()
                plan = launch.plan_for(2 * B, (N + 1) // 2, N, 1, torch.float32, 0)
                v = f()
                b2b = back_to_back_ms(f, calls)
                if ctx: ctx.__exit__(None, None, None)
                print(json.dumps({"B": B, "N": N, "mode": mode, "round": rnd, "plan": [plan.K, plan.W, plan.nch], "b2b_ms": round(b2b, 3), "gcups": round(B * N * N / b2b / 1e6, 1), "value0": float(v[0])}), flush=True)
    be._variant = orig
