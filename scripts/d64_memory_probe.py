import json, sys, torch
sys.path.insert(0, "src")
from softdtw.backends import cuda as be
def peak(fn):
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    out = fn(); torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - base) / 1e6, 1), out
B, N, D = 16, 1024, 64
x = torch.randn(B, N, D, device="cuda"); y = torch.randn(B, N, D, device="cuda")
g = torch.tensor(1.0, device="cuda"); L = torch.full((B,), N, device="cuda"); grad = torch.ones(B, device="cuda")
table = B * N * N * 4 / 1e6
def alt_cost(x, y):
    C = torch.bmm(x, y.transpose(1, 2)).mul_(-2.0)
    return C.add_(x.square().sum(-1, keepdim=True)).add_(y.square().sum(-1).unsqueeze(1)).clamp_min_(0.0)
r = {"table_MB": table}
r["gemm_cost"], _ = peak(lambda: be._gemm_cost("sqeuclidean", x, y))
r["alt_cost"], _ = peak(lambda: alt_cost(x, y))
r["forward_store"], (v, s) = peak(lambda: be.forward(x, y, g, "sqeuclidean", L, L, None, "store"))
r["saved_MB"] = s.numel() * s.element_size() / 1e6
r["backward"], _ = peak(lambda: be.backward(grad, x, y, g, "sqeuclidean", L, L, None, v, s, "store"))
C = be._gemm_cost("sqeuclidean", x, y)
r["cost_vjp"], _ = peak(lambda: be._cost_vjp("sqeuclidean", x, y, C))
print(json.dumps(r))

# Alternatives for the vector-Jacobian product: dy without transposing the (B, N, M) matrix.
def vjp_b(x, y, dC):
    dx = torch.baddbmm(dC.sum(2, keepdim=True) * x, dC, y, alpha=-1.0).mul_(2.0)
    dy = torch.baddbmm(dC.sum(1).unsqueeze(-1) * y, dC.transpose(1, 2), x, alpha=-1.0).mul_(2.0)
    return dx, dy
def vjp_c(x, y, dC):
    dx = torch.bmm(dC, y).mul_(-2.0).add_(dC.sum(2, keepdim=True) * x, alpha=2.0)
    dy = torch.bmm(x.transpose(1, 2), dC).transpose(1, 2).mul(-2.0).add_(dC.sum(1).unsqueeze(-1) * y, alpha=2.0)
    return dx, dy
r2 = {}
ref = be._cost_vjp("sqeuclidean", x, y, C)
for name, f in (("vjp_b", vjp_b), ("vjp_c", vjp_c)):
    r2[name], out = peak(lambda: f(x, y, C))
    r2[name + "_err"] = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(out, ref))
r2["sum2"], _ = peak(lambda: C.sum(2))
r2["sum1"], _ = peak(lambda: C.sum(1))
r2["bmmT"], _ = peak(lambda: torch.bmm(C.transpose(1, 2), x))
print(json.dumps(r2))
