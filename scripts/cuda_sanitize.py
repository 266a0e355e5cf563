"""A small run of every kernel variant family, for compute-sanitizer (memcheck, racecheck).

    compute-sanitizer --tool memcheck python3 scripts/cuda_sanitize.py
    compute-sanitizer --tool racecheck python3 scripts/cuda_sanitize.py

Covers: fused sqeuclidean / l1, the precomputed cost and the large-D "gram" cost, float32 / float64, soft
and hard, per-pair lengths, a band, one warp and several warps per pair, several column chunks, value-only
(a long pair's framed pass too) and store; chained plans (store, checkpoint with several tiles); a large-D
cost band by band (checkpoint and value-only, several bands); the public API's deferred value check
(kernels/check.cu).
Prints one line per case and "sanitize run: OK" at the end.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from softdtw._windows import build_window  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402


def case(B, N, M, D, dtype, gamma, band, layout, cost="sqeuclidean", chain=False, TH=None):
    g = torch.Generator().manual_seed(B * N + M)
    x = torch.randn(B, N, D, generator=g).to("cuda", dtype)
    y = torch.randn(B, M, D, generator=g).to("cuda", dtype)
    xl = torch.randint(max(1, N // 2), N + 1, (B,), generator=g)
    yl = torch.randint(max(1, M // 2), M + 1, (B,), generator=g)
    xl[0], yl[0] = N, M
    w = build_window(xl, yl, N, M, band, None)
    xl, yl = xl.cuda(), yl.cuda()
    w = None if w is None else w.cuda()
    gm = torch.tensor(gamma, dtype=dtype, device="cuda")
    grad = torch.ones(B, dtype=dtype, device="cuda")
    K, W = layout
    memory = "checkpoint" if TH else "store"
    with launch.forced_plan(K, W, chain=chain, TH=TH):
        if cost == "precomputed":
            C = torch.cdist(x, y) ** 2
            be.forward_cost(C, gm, xl, yl, w, "none")
            v, s = be.forward_cost(C, gm, xl, yl, w, memory)
            out = be.backward_cost(grad, C, gm, xl, yl, w, v, s, memory)
        else:
            be.forward(x, y, gm, cost, xl, yl, w, "none")
            v, s = be.forward(x, y, gm, cost, xl, yl, w, memory)
            out = be.backward(grad, x, y, gm, cost, xl, yl, w, v, s, memory)
    torch.cuda.synchronize()
    ok = all(bool(torch.isfinite(t).all()) for t in (v,) + tuple(out))
    print(f"B={B} N={N} M={M} D={D} {dtype} gamma={gamma} band={band} K,W={layout} {cost}: "
          f"chain={chain} TH={TH}: {'finite' if ok else 'NON-FINITE'}", flush=True)
    return ok


def api_checks() -> bool:
    """The public API's deferred value check (kernels/check.cu, several blocks): a clean call, a NaN input."""
    import softdtw

    x = torch.randn(8, 300, 4, device="cuda")
    y = torch.randn(8, 200, 4, device="cuda")
    v = softdtw.soft_dtw(x.requires_grad_(), y, 0.5)
    v.sum().backward()
    bad = x.detach().clone()
    bad[7, 299, 3] = float("nan")
    try:
        softdtw.soft_dtw(bad, y, 0.5)
    except ValueError:
        torch.cuda.synchronize()
        return bool(torch.isfinite(v).all())
    print("api_checks: no error for a NaN input")
    return False


def main():
    ok = True
    for dtype in (torch.float32, torch.float64):
        ok &= case(3, 20, 75, 2, dtype, 0.5, None, (1, 2))       # 2 warps per pair, 2 chunks
        ok &= case(5, 33, 40, 1, dtype, 0.0, 4, (2, 1))          # hard, band, 1 warp, chunks
        ok &= case(2, 17, 50, 3, dtype, 1.0, None, (4, 1), "l1")
        ok &= case(3, 25, 30, 1, dtype, 0.3, 6, (1, 4), "precomputed")
        ok &= case(3, 30, 75, 20, dtype, 0.5, 8, (1, 2))          # large D, store: the "gram" cost, 2 chunks
    ok &= case(2, 40, 70, 1, torch.float32, 0.1, None, (16, 1))
    ok &= case(2, 40, 8200, 1, torch.float32, 0.5, None, (4, 2))  # N + M > 8192: the framed value-only pass (LONG)
    for dtype in (torch.float32, torch.float64):  # chained plans; checkpoint with 3 tiles and a partial one
        ok &= case(3, 50, 150, 2, dtype, 0.5, 10, (1, 1), chain=True)
        ok &= case(3, 250, 150, 1, dtype, 0.5, None, (2, 1), chain=True, TH=96)
        ok &= case(2, 200, 300, 1, dtype, 0.0, 30, (1, 2), chain=True, TH=160)
        ok &= case(2, 250, 100, 1, dtype, 0.3, None, (1, 1), "precomputed", chain=True, TH=96)
        ok &= case(3, 40, 150, 20, dtype, 0.0, None, (1, 1), chain=True)  # "gram", chained, hard
    be.COST_BAND_BYTES, be.COST_BANDS, be.COST_WHOLE_MAX = 1, 1000, 1  # large D band by band, value-only too
    for dtype in (torch.float32, torch.float64):
        ok &= case(2, 150, 200, 20, dtype, 0.5, 40, (2, 1), TH=96)
        ok &= case(2, 130, 150, 17, dtype, 0.0, None, (1, 2), "l1", TH=160)
    be.COST_BAND_BYTES, be.COST_BANDS, be.COST_WHOLE_MAX = 16 << 20, 8, 1 << 30
    ok &= api_checks()
    print("sanitize run:", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
