"""The cuda backend's second order: ``hvp_cost`` (kernels/hvp.cu, SECOND_ORDER.md) on the GPU.

Checked against the brute-force path oracle (tests/_paths.py) on tiny pairs, against the first order (E and
vgamma are cuda backward_cost's dC and dgamma with grad = 1, and the reference backend's in float64), against
central differences of backward_cost in float64 (E-dot, vgamma-dot), the cpu backend's hvp_cost in float64 (all
four outputs, up to N = 1500), float32 against float64 on fresh random data, per-pair lengths, bands, +inf cells, gamma in {1e-3, 0.1, 1, 10} and 0 (hard DTW); every output finite.
M <= 512 (float32) or 256 (float64) runs hvp_warp_kernel (one warp per pair, K = 1..16 columns per lane: the
tiny pairs, 40 x 33, 256 x 256, 1000 x 300 in float32, ...; test_warp_kernel_matches_the_block_kernel crosses
every K and the fallback boundary against the block kernels); wider pairs hvp_fast_kernel for N <= 1024 (N = 700,
1000: each thread owns 4 rows; N = 300, 513: 2 and 4) and the first kernel above (N = 1100, 1500); N != M both
ways; unaligned C (the scalar path of the 16-byte groups) equals aligned C exactly.

Marked ``cuda``, skipped without a GPU:
``PYTHONPATH=src python3 -m pytest -m cuda tests/backends/test_cuda_hvp.py``.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from softdtw._checks import make_window
from softdtw.backends import reference as ref
from tests._helpers import rel_err
from tests._paths import directional, oracle

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

F64 = torch.float64


def cuda_backend():
    return importlib.import_module("softdtw.backends.cuda")


def _problem(B, N, M, seed=0, lengths=False, band=None, scale=1.0, dtype=F64):
    """Fresh data on the GPU: C `(B, N, M)` (squared differences of two random walks' steps, times scale),
    a direction Cdot, gamma_dot `(B,)`, lengths and the window (or None)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, 1, generator=g, dtype=F64)
    y = torch.randn(B, M, 1, generator=g, dtype=F64)
    C = (x - y.transpose(1, 2)).square() * scale
    Cd = torch.randn(B, N, M, generator=g, dtype=F64) * scale
    gd = torch.randn(B, generator=g, dtype=F64) * scale
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    if lengths and B > 1:
        xl[1:] = torch.randint(max(1, N // 2), N + 1, (B - 1,), generator=g)
        yl[1:] = torch.randint(max(1, M // 2), M + 1, (B - 1,), generator=g)
    window = make_window(xl, yl, N, M, band, None)
    dev = "cuda"
    return (C.to(dev, dtype), Cd.to(dev, dtype), gd.to(dev, dtype), xl.to(dev), yl.to(dev),
            None if window is None else window.to(dev))


def _gamma(value, dtype=F64):
    return torch.tensor(value, dtype=dtype, device="cuda")


def hvp(C, gamma, xl, yl, window, Cd, gd):
    """hvp_cost, with the checks every call must pass: finite outputs, zeros outside each pair."""
    out = cuda_backend().hvp_cost(C, gamma, xl, yl, window, Cd, gd)
    E, vg, Ed, vgd = out
    B, N, M = C.shape
    assert E.shape == Ed.shape == C.shape and vg.shape == vgd.shape == (B,)
    assert all(t.dtype == C.dtype for t in out)
    for t in out:
        assert torch.isfinite(t).all(), "non-finite output of hvp_cost"
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        for t in (E, Ed):
            assert (t[b, n:] == 0).all() and (t[b, :, m:] == 0).all(), "nonzero outside the pair"
    return out


def first_order(C, gamma, xl, yl, window, backend=None):
    """(value, dC, dgamma) of the first-order forward_cost + backward_cost with grad = 1 (memory="store")."""
    be = backend or cuda_backend()
    v, saved = be.forward_cost(C, gamma, xl, yl, window, "store")
    dC, dg = be.backward_cost(torch.ones_like(v), C, gamma, xl, yl, window, v, saved, "store")
    return v, dC, dg


def _close(got, want, tol, floor=0.0):
    """max |got - want| <= tol · max(max |want|, floor)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    err = float((got - want).abs().max()) if got.numel() else 0.0
    scale = max(float(want.abs().max()) if want.numel() else 0.0, floor, 1e-300)
    assert err <= tol * scale, f"error {err:.3e} against scale {scale:.3e} (tol {tol:g})"


def _window_mask(window, b, n, m):
    if window is None:
        return torch.ones(n, m, dtype=torch.bool)
    w = window[b, :n].cpu()
    j = torch.arange(m)
    return (j[None, :] >= w[:, :1]) & (j[None, :] < w[:, 1:])


# --- the path oracle (tiny pairs) ---------------------------------------------------------------------

ORACLE_CASES = [
    # B, N, M, lengths, band, +inf cells
    (3, 4, 5, True, None, False),
    (2, 5, 3, False, 1, False),
    (3, 5, 5, True, None, True),
    (2, 1, 6, False, None, False),
    (2, 6, 1, False, None, False),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("B,N,M,lengths,band,inf", ORACLE_CASES)
def test_matches_the_path_oracle(dtype, gamma, B, N, M, lengths, band, inf):
    # gamma = 1e-3 on costs of size 1e-3, so the soft-min is not degenerate.
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=N * 10 + M, lengths=lengths, band=band,
                                         scale=1e-3 if gamma == 1e-3 else 1.0)
    if inf:
        C[0, 1, 2] = float("inf")
        C[-1, 2, 1] = float("inf")
        C[-1, 0, 3] = float("inf")
    E, vg, Ed, vgd = hvp(C.to(dtype), _gamma(gamma, dtype), xl, yl, window, Cd.to(dtype), gd.to(dtype))
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        Cb = C[b, :n, :m].cpu()
        allowed = torch.isfinite(Cb) & _window_mask(window, b, n, m)
        v, Ew, dg = oracle(Cb, gamma, allowed)
        Edw, dgdw = directional(Cb, gamma, Cd[b, :n, :m].cpu(), float(gd[b]), allowed)
        if not torch.isfinite(v):  # no path: all four are zero
            Ew, dg, Edw, dgdw = (torch.zeros_like(t) for t in (Ew, dg, Edw, dgdw))
        _close(E[b, :n, :m], Ew, tol, 1.0)
        _close(vg[b], dg, tol, 1.0)
        _close(Ed[b, :n, :m], Edw, tol, 1.0)
        _close(vgd[b], dgdw, tol, max(1.0, float(Edw.abs().max())))


def test_a_pair_without_a_finite_path_gets_zeros():
    C, Cd, gd, xl, yl, window = _problem(3, 6, 7, seed=3)
    C[1, 2, :] = float("inf")  # no path crosses row 2
    Cd[1, 2, :] = float("nan")  # a direction on forbidden cells is ignored
    for gamma in (0.0, 0.1, 1.0):
        E, vg, Ed, vgd = hvp(C, _gamma(gamma), xl, yl, window, Cd, gd)
        assert (E[1] == 0).all() and (Ed[1] == 0).all() and vg[1] == 0 and vgd[1] == 0
        assert (E[0] != 0).any() and (E[2] != 0).any()


# --- the first order: E and vgamma are backward_cost's ------------------------------------------------

FIRST_ORDER_CASES = [
    # B, N, M, lengths, band, gamma
    (3, 40, 33, True, None, 0.1),
    (3, 40, 33, True, 4, 1.0),
    (3, 33, 40, False, None, 10.0),
    (2, 1500, 1100, True, None, 1.0),
    (2, 1500, 1100, False, 200, 0.1),
    (2, 1100, 1500, True, None, 0.1),
    (2, 1000, 700, True, None, 0.1),
    (2, 700, 1000, False, 150, 1.0),
]


@pytest.mark.parametrize("B,N,M,lengths,band,gamma", FIRST_ORDER_CASES)
def test_first_order_matches_backward_cost(B, N, M, lengths, band, gamma):
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=B + N, lengths=lengths, band=band)
    g = _gamma(gamma)
    E, vg, _, _ = hvp(C, g, xl, yl, window, Cd, gd)
    v, dC, dg = first_order(C, g, xl, yl, window)
    assert rel_err(E, dC) <= 1e-10
    # backward_cost's dgamma is (value - <E, C>) / gamma: two terms of size |value| / gamma nearly cancel.
    _close(vg, dg, 1e-10, float(v.abs().max()) / gamma)
    if N <= 64:  # the reference backend sums w log w as the kernel does
        _, dCr, dgr = first_order(C, g, xl, yl, window, ref)
        assert rel_err(E, dCr) <= 1e-10
        _close(vg, dgr, 1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B,N,M,lengths,band", [(3, 40, 33, True, None), (3, 33, 40, True, 3), (2, 1500, 1100, True, None),
                                                (2, 1000, 700, True, None), (2, 513, 40, False, 5)])
def test_hard_dtw_is_backward_costs_path(dtype, B, N, M, lengths, band):
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=7, lengths=lengths, band=band, dtype=dtype)
    C_ties = torch.randint(0, 3, C.shape, device="cuda").to(dtype)  # integer costs: many ties
    for Cc in (C, C_ties):
        g = _gamma(0.0, dtype)
        E, vg, Ed, vgd = hvp(Cc, g, xl, yl, window, Cd, gd)
        _, dC, _ = first_order(Cc, g, xl, yl, window)
        assert torch.equal(E, dC)  # the same path, tie-breaking included (diagonal, up, left)
        assert (vg == 0).all() and (Ed == 0).all() and (vgd == 0).all()


# --- central differences of backward_cost ---------------------------------------------------------------

@pytest.mark.parametrize("B,N,M,lengths,band,gamma", FIRST_ORDER_CASES + [(3, 40, 33, True, None, 1e-3)])
def test_directional_derivative_matches_central_differences(B, N, M, lengths, band, gamma):
    scale = 1e-3 if gamma == 1e-3 else 1.0
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=B + M, lengths=lengths, band=band, scale=scale)
    gd = torch.full_like(gd, float(gd[0]))  # gamma is one number for the batch: one gamma_dot too
    g = _gamma(gamma)
    _, _, Ed, vgd = hvp(C, g, xl, yl, window, Cd, gd)

    def central(h):  # Cd, gd are of the size of C (scale): a relative step of h in C and gamma
        hg = h * float(gd[0])
        _, dCp, dgp = first_order(C + h * Cd, _gamma(gamma + hg), xl, yl, window)
        _, dCm, dgm = first_order(C - h * Cd, _gamma(gamma - hg), xl, yl, window)
        return (dCp - dCm) / (2 * h), (dgp - dgm) / (2 * h)

    # Richardson: (4 D(h/2) - D(h)) / 3 cancels the h^2 term of the central difference (at gamma = 0.1, N = 1500
    # the plain one is 4e-5 off in vgamma_dot at h = 1e-6: its truncation error, not the kernel's), leaving h^4.
    # h = 1e-4, not smaller: the differences divide the first order's own rounding by h (on the cpu backend,
    # float64, B = 2, 1000 x 700, gamma = 0.1: 5e-9 at h = 1e-4, 8e-7 at h = 1e-6; cuda's dgamma rounds more,
    # and failed 1e-5 at h = 1e-6 for N >= 1000). The decisive check is test_matches_the_cpu_backend.
    h = 1e-4
    (dC1, dg1), (dC2, dg2) = central(h), central(h / 2)
    _close(Ed, (4 * dC2 - dC1) / 3, 1e-5)
    # dgamma's own rounding, |value| / gamma · eps, divided by the step (ten times over).
    v, _, _ = first_order(C, g, xl, yl, window)
    floor = float(v.abs().max()) / gamma * 1e-16 / h * 1e6
    _close(vgd, (4 * dg2 - dg1) / 3, 1e-5, floor)


# --- the cpu backend's hvp_cost (float64): no differences, the decisive check at large sizes -----------------

CPU_CASES = FIRST_ORDER_CASES + [
    (3, 40, 33, True, None, 1e-3),
    (4, 50, 64, True, 6, 10.0),
    (2, 256, 256, False, None, 10.0),
    (2, 1000, 300, True, None, 10.0),
    (2, 300, 1000, True, 40, 1e-3),
    (3, 300, 129, True, None, 0.1),   # hvp_warp_kernel K = 8: 17 lanes, the last with one column
    (3, 20, 256, True, 3, 1.0),       # K = 8, a band
    (2, 600, 32, True, None, 1e-3),   # K = 1
]


@pytest.mark.parametrize("B,N,M,lengths,band,gamma", CPU_CASES)
def test_matches_the_cpu_backend(B, N, M, lengths, band, gamma):
    """All four outputs against softdtw.backends.cpu.hvp_cost on the same float64 inputs moved to the CPU."""
    from softdtw.backends import cpu

    scale = 1e-3 if gamma == 1e-3 else 1.0
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=5 * B + M, lengths=lengths, band=band, scale=scale)
    if N >= 40 and M >= 33:  # a few +inf cells off the pairs' corners
        C[0, N // 3, M // 4] = float("inf")
        C[-1, N // 2, M // 3] = float("inf")
    g = _gamma(gamma)
    got = hvp(C, g, xl, yl, window, Cd, gd)
    want = cpu.hvp_cost(C.cpu(), g.cpu(), xl.cpu(), yl.cpu(), None if window is None else window.cpu(), Cd.cpu(),
                        gd.cpu())
    E, vg, Ed, vgd = got
    Ew, vgw, Edw, vgdw = want
    _close(E, Ew, 1e-9)
    _close(vg, vgw, 1e-9, 1.0)
    _close(Ed, Edw, 1e-9)
    # vgamma_dot sums terms of the size of E-dot (times w log w): relative to that scale where it cancels.
    _close(vgd, vgdw, 1e-9, float(Edw.abs().max()))


@pytest.mark.parametrize("B,N,M,lengths,band,gamma", FIRST_ORDER_CASES)
def test_mixed_second_derivative_is_symmetric(B, N, M, lengths, band, gamma):
    """d2v/dgamma dC: vgamma_dot along (Cdot, 0) equals <E-dot along (0, 1), Cdot>, two different sums of the
    kernel (no finite differences)."""
    C, Cd, _, xl, yl, window = _problem(B, N, M, seed=B + 3 * N, lengths=lengths, band=band)
    g = _gamma(gamma)
    zeros, ones = torch.zeros(B, dtype=F64, device="cuda"), torch.ones(B, dtype=F64, device="cuda")
    _, _, _, vgd = hvp(C, g, xl, yl, window, Cd, zeros)
    _, _, Ed, _ = hvp(C, g, xl, yl, window, torch.zeros_like(Cd), ones)
    _close(vgd, (Ed * Cd).sum((1, 2)), 1e-9, float((Ed.abs() * Cd.abs()).sum((1, 2)).max()))


def test_directional_derivative_through_inf_cells():
    """+inf cells against the reference backend (the cuda first order sends +inf costs to it) and central
    differences of its backward_cost; a NaN direction on forbidden cells is ignored."""
    C, Cd, gd, xl, yl, window = _problem(3, 12, 10, seed=11, lengths=True)
    gen = torch.Generator().manual_seed(5)
    forbid = (torch.rand(C.shape, generator=gen) < 0.1).to("cuda")
    forbid[:, 0, 0] = False
    for b in range(3):
        forbid[b, int(xl[b]) - 1, int(yl[b]) - 1] = False
    C = C.masked_fill(forbid, float("inf"))
    Cd_nan = Cd.masked_fill(forbid, float("nan"))
    Cd0 = Cd.masked_fill(forbid, 0.0)
    gd = torch.full_like(gd, 0.3)
    for gamma in (0.1, 1.0):
        g = _gamma(gamma)
        E, vg, Ed, vgd = hvp(C, g, xl, yl, window, Cd_nan, gd)
        v, dC, dg = first_order(C, g, xl, yl, window, ref)
        finite = torch.isfinite(v)
        assert finite.any()
        assert rel_err(E, dC) <= 1e-10
        _close(vg, dg, 1e-10, 1.0)
        h = 1e-5
        _, dCp, dgp = first_order(C + h * Cd0, _gamma(gamma + h * 0.3), xl, yl, window, ref)
        _, dCm, dgm = first_order(C - h * Cd0, _gamma(gamma - h * 0.3), xl, yl, window, ref)
        _close(Ed, (dCp - dCm) / (2 * h), 1e-5)
        _close(vgd, (dgp - dgm) / (2 * h), 1e-5, 1.0)


# --- float32 against float64 ------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("B,N,M,lengths,band", [(4, 64, 50, True, None), (4, 50, 64, True, 6), (2, 256, 256, False, None),
                                                (2, 1000, 300, True, None)])
def test_float32_matches_float64(gamma, B, N, M, lengths, band):
    """1e-3 for all four outputs: R' and R-dot (and S-dot) are float64 for float32 data too, so w-dot's
    S-dot_s - R-dot_p, a difference of two path sums that grow like the path's length, does not cancel in float32
    (it did at gamma = 10: vgamma_dot 5.4e-3 off at 2 x 1000 x 300 when R-dot was float32)."""
    scale = 1e-3 if gamma == 1e-3 else 1.0
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=N * M + 1, lengths=lengths, band=band, scale=scale)
    want = hvp(C, _gamma(gamma), xl, yl, window, Cd, gd)
    got = hvp(C.float(), _gamma(gamma, torch.float32), xl, yl, window, Cd.float(), gd.float())
    for name, a, b in zip(("E", "vgamma", "Edot", "vgamma_dot"), got, want):
        err = rel_err(a, b)
        assert err <= 1e-3, f"{name}: {err:.2e}"


# --- launch: streams and sizes ----------------------------------------------------------------------------

def test_runs_on_the_current_stream():
    C, Cd, gd, xl, yl, window = _problem(4, 300, 200, seed=2, lengths=True)
    g = _gamma(0.5)
    want = hvp(C, g, xl, yl, window, Cd, gd)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # the kernel must wait for this, not run beside it
        got = cuda_backend().hvp_cost(C, g, xl, yl, window, Cd, gd)
    s.synchronize()
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("N,M", [(1, 1), (1, 300), (300, 1), (257, 3), (3, 257), (513, 511), (1024, 5), (1025, 5)])
def test_edge_shapes_match_backward_cost(N, M):
    C, Cd, gd, xl, yl, window = _problem(2, N, M, seed=N + 2 * M, lengths=True)
    g = _gamma(0.3)
    E, vg, _, _ = hvp(C, g, xl, yl, window, Cd, gd)
    v, dC, dg = first_order(C, g, xl, yl, window)
    assert rel_err(E, dC) <= 1e-10
    _close(vg, dg, 1e-10, float(v.abs().max()) / 0.3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("N,M", [(37, 45), (300, 257), (700, 33), (40, 128), (33, 64)])
def test_unaligned_inputs_match_aligned(dtype, N, M):
    """C and C-dot one element into their storage: not 16-byte aligned, so the kernels take their scalar loads
    (hvp_fast_kernel; hvp_warp_kernel's element-wise cp.async and stores at 40 x 128, 33 x 64, where the aligned
    call moves 16-byte pieces); the results are the aligned ones bit for bit (same arithmetic)."""
    B = 3
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=N + M, lengths=True, dtype=dtype)
    Cd = Cd.to(dtype)
    gd = gd.to(dtype)
    numel = B * N * M
    Cu = torch.empty(numel + 1, dtype=dtype, device="cuda")[1:].view(B, N, M)
    Cdu = torch.empty(numel + 1, dtype=dtype, device="cuda")[1:].view(B, N, M)
    Cu.copy_(C)
    Cdu.copy_(Cd)
    assert Cu.data_ptr() % 16 != 0 and Cu.is_contiguous()
    for gamma in (0.0, 0.5):
        g = _gamma(gamma, dtype)
        want = hvp(C, g, xl, yl, window, Cd, gd)
        got = hvp(Cu, g, xl, yl, window, Cdu, gd)
        for a, b in zip(got, want):
            assert torch.equal(a, b)


# --- hvp_warp_kernel against the block kernels, across its K and the fallback boundary ------------------------

WARP_CASES = [
    # B, N, M, lengths, band, +inf cells
    (3, 17, 1, True, None, False),     # K = 1, one column
    (3, 45, 32, True, None, True),     # K = 1, every lane
    (3, 30, 33, True, 2, False),       # K = 2, lanes past the pair's columns (trimmed passes)
    (3, 64, 64, False, None, True),    # K = 2, full
    (4, 70, 100, True, None, False),   # K = 4, 25 lanes
    (3, 129, 128, True, 9, True),      # K = 4, a band
    (3, 90, 200, True, None, False),   # K = 8
    (2, 256, 256, True, 20, True),     # K = 8, the DILATE size
    (2, 40, 257, True, None, False),   # float32 K = 16; float64 the block kernel (above 256)
    (2, 300, 512, True, None, True),   # float32 K = 16, full; float64 the block kernel
    (2, 60, 513, True, None, False),   # both the block kernel (above 512)
    (2, 600, 7, True, 3, False),       # many rows, few columns
]


def _block_kernel(monkeypatch):
    """A context inside which hvp_cost runs without hvp_warp_kernel (the block kernels at every size)."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        with monkeypatch.context() as m:
            m.setattr(importlib.import_module("softdtw.backends.cuda.hvp"), "_warp_k", lambda M, dtype: None)
            yield

    return ctx()


@pytest.mark.parametrize("gamma", [0.0, 1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("B,N,M,lengths,band,inf", WARP_CASES)
def test_warp_kernel_matches_the_block_kernel(monkeypatch, gamma, B, N, M, lengths, band, inf):
    """float64 on both kernels at 1e-9 (hard DTW: the same path exactly), float32 against the block kernel's float64
    at 1e-3 (the float32 vs float64 test's tolerance); every output finite and zero outside the pairs."""
    scale = 1e-3 if gamma == 1e-3 else 1.0
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=N + 7 * M, lengths=lengths, band=band, scale=scale)
    if inf:
        C[0, N // 3, M // 4] = float("inf")
        C[-1, N // 2, M // 3] = float("inf")
        Cd[0, N // 3, M // 4] = float("nan")  # ignored on a forbidden cell
    g = _gamma(gamma)
    got64 = hvp(C, g, xl, yl, window, Cd, gd)
    got32 = hvp(C.float(), _gamma(gamma, torch.float32), xl, yl, window, Cd.float(), gd.float())
    with _block_kernel(monkeypatch):
        want = hvp(C, g, xl, yl, window, Cd, gd)
    if gamma == 0:
        assert torch.equal(got64[0], want[0]) and torch.equal(got32[0], want[0].float())
        for t in got64[1:] + got32[1:]:
            assert (t == 0).all()
        return
    # Relative to the outputs' scale, at least 1: where every path is forced (M = 1) vgamma, E-dot and vgamma_dot
    # are 0, which the block kernels (and the cpu backend) give as rounding (1e-15, 1e-29), this kernel as 0.
    scale = max(1.0, float(want[2].abs().max()))
    floors = (1.0, 1.0, scale, scale)  # E, vgamma, E-dot, vgamma_dot (which sums terms of E-dot's size)
    for a, b, f in zip(got64, want, floors):
        _close(a, b, 1e-9, f)
    for a, b, f in zip(got32, want, floors):
        _close(a, b, 1e-3, f)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_warp_kernel_in_a_mixed_batch(dtype):
    """Pairs of very different lengths in one call (some one row or one column): each pair equals the same pair
    computed alone."""
    C, Cd, gd, xl, yl, window = _problem(5, 80, 100, seed=3, dtype=dtype)
    Cd, gd = Cd.to(dtype), gd.to(dtype)
    xl = torch.tensor([80, 1, 33, 80, 5], device="cuda")
    yl = torch.tensor([100, 60, 1, 3, 100], device="cuda")
    g = _gamma(0.2, dtype)
    E, vg, Ed, vgd = hvp(C, g, xl, yl, window, Cd, gd)
    for b in range(5):
        n, m = int(xl[b]), int(yl[b])
        one = hvp(C[b:b + 1, :n, :m].contiguous(), g, xl[b:b + 1], yl[b:b + 1], None, Cd[b:b + 1, :n, :m].contiguous(),
                  gd[b:b + 1])
        tol = 1e-12 if dtype == torch.float64 else 1e-6
        _close(E[b, :n, :m], one[0][0], tol)
        _close(Ed[b, :n, :m], one[2][0], tol)
        _close(vg[b], one[1][0], tol, 1.0)
        _close(vgd[b], one[3][0], tol, float(one[2].abs().max()))


def _layouts():
    """Every (dtype, K, W) hvp_warp_kernel is instantiated for (kernels/hvp_warp.cu, hvp.py)."""
    from softdtw.backends.cuda import hvp as mod

    out = []
    for dtype, top in ((torch.float32, mod.HVPW_MAX_M), (torch.float64, mod.HVPW_MAX_M_F64)):
        for W in mod.HVPW_WS:
            for K in mod.HVPW_KS:
                if 32 * K * W <= top:
                    out.append((dtype, K, W))
    return out


@pytest.mark.parametrize("band", [None, 3])
@pytest.mark.parametrize("dtype,K,W", _layouts())
def test_every_warp_layout_matches_the_block_kernel(monkeypatch, dtype, K, W, band):
    """hvp_warp_kernel forced to each (K, W) (the last lane holding part of its columns, pairs of other lengths, a
    band, +inf cells) against the block kernels in float64: 1e-9 (float64), 1e-3 (float32)."""
    mod = importlib.import_module("softdtw.backends.cuda.hvp")
    B, N, M = 3, 37, max(1, 32 * K * W - 5)
    C, Cd, gd, xl, yl, window = _problem(B, N, M, seed=K + 10 * W, lengths=True, band=band)
    C[0, N // 3, M // 4] = float("inf")
    g = _gamma(0.3)
    with _block_kernel(monkeypatch):
        want = hvp(C, g, xl, yl, window, Cd, gd)
    monkeypatch.setattr(mod, "force_plan", (K, W))
    assert mod._warp_plan(B, M, dtype) == (K, W)
    got = hvp(C.to(dtype), _gamma(0.3, dtype), xl, yl, window, Cd.to(dtype), gd.to(dtype))
    tol = 1e-9 if dtype == torch.float64 else 1e-3
    scale = max(1.0, float(want[2].abs().max()))  # as in test_warp_kernel_matches_the_block_kernel
    for a, b, f in zip(got, want, (1.0, 1.0, scale, scale)):
        _close(a, b, tol, f)
    hard = hvp(C.to(dtype), _gamma(0.0, dtype), xl, yl, window, Cd.to(dtype), gd.to(dtype))
    with _block_kernel(monkeypatch):
        hard_want = hvp(C, _gamma(0.0), xl, yl, window, Cd, gd)
    assert torch.equal(hard[0], hard_want[0].to(dtype))


# --- alignment variants (open_begin, open_end, step_penalty; SECOND_ORDER.md, "Variants") ----------------------

# (open_begin, open_end, penalty, penalty_dot): penalty None, "0d" (shared) or "pairs" `(B,)`; penalty_dot None or
# given (one per pair).
VARIANT_COMBOS = [(ob, oe, pen, pd) for ob in (False, True) for oe in (False, True)
                  for pen, pd in ((None, False), ("0d", False), ("0d", True), ("pairs", False), ("pairs", True))
                  if ob or oe or pen is not None]

VARIANT_SIZES = [
    # B, N, M, +inf cells, gamma: hvp_warp_kernel K = 1, 4 (and W > 1 for few pairs), 8; above 256 columns float64
    # runs hvp_fast_kernel (up to 1024 rows), above 512 both
    (3, 7, 9, False, 0.1),
    (3, 40, 70, True, 1.0),
    (2, 90, 200, True, 0.1),
    (2, 30, 300, False, 1.0),
    (2, 20, 530, True, 0.5),
    (2, 1030, 520, True, 0.3),  # hvp_kernel (above hvp_fast_kernel's 1024 rows)
]


def _vid(v):
    ob, oe, pen, pd = v
    return f"b{int(ob)}e{int(oe)}p{pen}{'d' if pd else ''}"


def _variant_problem(B, N, M, pen, pd, seed, dtype=F64, inf=False):
    """_problem with per-pair lengths and the variant's penalty and direction (None or on the GPU)."""
    C, Cd, gd, xl, yl, _ = _problem(B, N, M, seed=seed, lengths=True, dtype=dtype)
    if inf and N >= 7 and M >= 9:
        C[0, N // 3, M // 4] = float("inf")
        C[-1, N // 2, M // 3] = float("inf")
        Cd[0, N // 3, M // 4] = float("nan")  # ignored on a forbidden cell
    g = torch.Generator().manual_seed(seed + 1)
    P = Pd = None
    if pen == "0d":
        P = torch.tensor(0.3, dtype=dtype)
    elif pen == "pairs":
        P = (0.4 * torch.randn(B, generator=g, dtype=F64)).to(dtype)
    if pen is not None and pd:
        Pd = torch.randn(B, generator=g, dtype=F64).to(dtype)
    return C.to(dtype), Cd.to(dtype), gd.to(dtype), xl, yl, (None if P is None else P.cuda()), \
        (None if Pd is None else Pd.cuda())


def vhvp(C, gamma, xl, yl, Cd, gd, ob, oe, P, Pd, window=None):
    """cuda hvp_cost with variants, with the checks every call must pass; always a 6-tuple (vpen, vpen_dot None
    without a penalty)."""
    out = cuda_backend().hvp_cost(C, gamma, xl, yl, window, Cd, gd, open_begin=ob, open_end=oe, step_penalty=P,
                                  penalty_dot=Pd)
    assert len(out) == (4 if P is None else 6)
    B = C.shape[0]
    for t in out:
        assert t.dtype == C.dtype and t.is_cuda and torch.isfinite(t).all(), "non-finite output of hvp_cost"
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        for t in (out[0], out[2]):
            assert (t[b, n:] == 0).all() and (t[b, :, m:] == 0).all(), "nonzero outside the pair"
    return tuple(out) + ((None, None) if P is None else ())


def _cpu_hvp(C, gamma, xl, yl, Cd, gd, ob, oe, P, Pd, window=None):
    from softdtw.backends import cpu

    def c(t):
        return None if t is None else t.cpu()

    out = cpu.hvp_cost(c(C), c(gamma), c(xl), c(yl), c(window), c(Cd), c(gd), open_begin=ob, open_end=oe,
                       step_penalty=c(P), penalty_dot=c(Pd))
    return tuple(out) + ((None, None) if P is None else ())


def _check_six(got, want, tol):
    """E, vgamma, E-dot, vgamma_dot (relative to E-dot's scale where it cancels), vpen, vpen_dot."""
    sd = max(1.0, float(want[2].abs().max()))
    for name, a, b, f in zip(("E", "vgamma", "Edot", "vgamma_dot", "vpen", "vpen_dot"), got, want,
                             (1.0, 1.0, sd, sd, 1.0, sd)):
        if b is None:
            assert a is None, name
            continue
        got_, want_ = a.detach().double().cpu(), b.detach().double().cpu()
        err = float((got_ - want_).abs().max()) if got_.numel() else 0.0
        scale = max(float(want_.abs().max()) if want_.numel() else 0.0, f)
        assert err <= tol * scale, f"{name}: error {err:.3e} against scale {scale:.3e} (tol {tol:g})"


@pytest.mark.parametrize("B,N,M,inf,gamma", VARIANT_SIZES)
@pytest.mark.parametrize("variant", VARIANT_COMBOS, ids=_vid)
def test_variants_match_the_cpu_backend(variant, B, N, M, inf, gamma):
    """All six outputs against softdtw.backends.cpu.hvp_cost in float64 at 1e-9: every combination of the variants,
    a penalty shared or per pair, with and without a penalty direction, per-pair lengths, +inf cells, the warp
    kernel's layouts and hvp_kernel (above its width)."""
    ob, oe, pen, pd = variant
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(B, N, M, pen, pd, seed=N + M + 3 * B, inf=inf)
    g = _gamma(gamma)
    got = vhvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd)
    want = _cpu_hvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd)
    _check_six(got, want, 1e-9)


def _kernel(monkeypatch, which):
    """A context inside which hvp_cost runs hvp_fast_kernel ("fast": the warp kernel hidden) or hvp_kernel ("first":
    hvp_fast_kernel hidden too) at every size."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        mod = importlib.import_module("softdtw.backends.cuda.hvp")
        with monkeypatch.context() as m:
            m.setattr(mod, "_warp_k", lambda M, dtype: None)
            if which == "first":
                m.setattr(mod, "_fast_plan", lambda N: None)
            yield

    return ctx()


@pytest.mark.parametrize("which", ["fast", "first"])
@pytest.mark.parametrize("variant", [(True, True, "pairs", True), (True, False, "0d", True), (False, True, None, False),
                                     (False, False, "pairs", False), (True, False, None, False)], ids=_vid)
@pytest.mark.parametrize("B,N,M", [(3, 40, 70), (2, 64, 256), (2, 30, 300)])
def test_variants_block_kernels_match_the_warp_kernel(monkeypatch, variant, B, N, M, which):
    """hvp_fast_kernel and hvp_kernel (forced by hiding the others) against hvp_warp_kernel at 1e-9 in float64, and
    against the cpu backend; hard DTW (gamma = 0): the same path exactly."""
    ob, oe, pen, pd = variant
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(B, N, M, pen, pd, seed=M, inf=True)
    for gamma in (0.0, 0.3):
        g = _gamma(gamma)
        warp = vhvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd)
        with _kernel(monkeypatch, which):
            block = vhvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd)
        if gamma == 0:
            assert torch.equal(warp[0], block[0])
            if P is not None:
                assert torch.equal(warp[4], block[4])
            continue
        _check_six(block, _cpu_hvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd), 1e-9)
        if M <= 256:  # float64: the warp kernel up to 256 columns
            _check_six(block, warp, 1e-9)


@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("variant", [(True, True, "pairs", True), (False, True, "0d", True), (True, False, None, False),
                                     (False, False, "pairs", True)], ids=_vid)
@pytest.mark.parametrize("B,N,M", [(4, 64, 50), (2, 256, 256), (2, 40, 600)])
def test_variants_float32_matches_float64(variant, B, N, M, gamma):
    """Fresh random data: float32 (every output) within 1e-3 of float64 relative to each output's scale (the plain
    float32 test's tolerance)."""
    ob, oe, pen, pd = variant
    scale = 1e-3 if gamma == 1e-3 else 1.0
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(B, N, M, pen, pd, seed=N * M + 11)
    C, Cd, gd = C * scale, Cd * scale, gd * scale
    if P is not None:
        P = P * scale
    want = vhvp(C, _gamma(gamma), xl, yl, Cd, gd, ob, oe, P, Pd)
    f = (lambda t: None if t is None else t.float())
    got = vhvp(f(C), _gamma(gamma, torch.float32), xl, yl, f(Cd), f(gd), ob, oe, f(P), f(Pd))
    _check_six(got, want, 1e-3)


@pytest.mark.parametrize("dtype,B,N,M", [(torch.float64, 3, 40, 70), (torch.float32, 3, 40, 70),
                                         (torch.float64, 2, 20, 530)])
@pytest.mark.parametrize("variant", VARIANT_COMBOS, ids=_vid)
def test_variants_hard_dtw_is_backward_costs_path(variant, dtype, B, N, M):
    """gamma = 0: E is cuda backward_cost's dC and vpen its dpenalty (the path's number of moves) with the same
    variants, exactly; the derivatives are 0."""
    ob, oe, pen, pd = variant
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(B, N, M, pen, pd, seed=B * N, dtype=dtype)
    C_ties = torch.randint(0, 3, C.shape, device="cuda").to(dtype)  # integer costs: many ties
    be = cuda_backend()
    g = _gamma(0.0, dtype)
    for Cc in (C, C_ties):
        E, vg, Ed, vgd, vp, vpd = vhvp(Cc, g, xl, yl, Cd, gd, ob, oe, P, Pd)
        opts = dict(open_begin=ob, open_end=oe, step_penalty=P)
        v, saved = be.forward_cost(Cc, g, xl, yl, None, "store", **opts)
        first = be.backward_cost(torch.ones_like(v), Cc, g, xl, yl, None, v, saved, "store", **opts)
        assert torch.equal(E, first[0])
        assert (vg == 0).all() and (Ed == 0).all() and (vgd == 0).all()
        if P is not None:  # float32: the first order scales its fixed-point sum by 1 / 65535 in float64
            if dtype == torch.float64:
                assert torch.equal(vp, first[2])
            else:
                _close(vp, first[2], 1e-6, 1.0)
            assert (vpd == 0).all()


@pytest.mark.parametrize("B,N,M", [(3, 40, 70), (2, 20, 530)])
@pytest.mark.parametrize("variant", VARIANT_COMBOS, ids=_vid)
def test_variants_first_order_matches_backward_cost(variant, B, N, M):
    """E, vgamma and vpen are cuda backward_cost's dC, dgamma and dpenalty with grad = 1 (float64)."""
    ob, oe, pen, pd = variant
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(B, N, M, pen, pd, seed=7 * N + M)
    g = _gamma(0.4)
    E, vg, _, _, vp, _ = vhvp(C, g, xl, yl, Cd, gd, ob, oe, P, Pd)
    be = cuda_backend()
    opts = dict(open_begin=ob, open_end=oe, step_penalty=P)
    v, saved = be.forward_cost(C, g, xl, yl, None, "store", **opts)
    first = be.backward_cost(torch.ones_like(v), C, g, xl, yl, None, v, saved, "store", **opts)
    assert rel_err(E, first[0]) <= 1e-10
    _close(vg, first[1], 1e-10, float(v.abs().max()) / 0.4)
    if P is not None:
        _close(vp, first[2], 1e-9, float(vp.abs().max()))


@pytest.mark.parametrize("M", [9, 300, 530])
def test_variants_pair_without_a_finite_path_gets_zeros(M):
    """A pair without a finite path: all six outputs 0 (gamma 0 and > 0, every variant); the others not."""
    for ob, oe in ((True, False), (False, True), (True, True), (False, False)):
        C, Cd, gd, xl, yl, P, Pd = _variant_problem(3, 8, M, "pairs", True, seed=M)
        C[1, 3, :] = float("inf")  # no path crosses row 3 (open ends too: every path visits every row)
        Cd[1, 3, :] = float("nan")
        xl[1] = 8
        for gamma in (0.0, 0.5):
            out = vhvp(C, _gamma(gamma), xl, yl, Cd, gd, ob, oe, P, Pd)
            for t in out:
                assert float(t[1].abs().max()) == 0
            assert (out[0][0] != 0).any() and (out[0][2] != 0).any()


def test_variants_refuse_a_band_with_an_open_end():
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(2, 10, 12, "0d", True, seed=1)
    window = make_window(xl.cpu(), yl.cpu(), 10, 12, 2, None).cuda()
    for ob, oe in ((True, False), (False, True)):
        with pytest.raises(ValueError, match="cannot be combined with a band"):
            cuda_backend().hvp_cost(C, _gamma(0.3), xl, yl, window, Cd, gd, open_begin=ob, open_end=oe)
    # A band with a penalty is fine: against the cpu backend.
    got = vhvp(C, _gamma(0.3), xl, yl, Cd, gd, False, False, P, Pd, window)
    _check_six(got, _cpu_hvp(C, _gamma(0.3), xl, yl, Cd, gd, False, False, P, Pd, window), 1e-9)


def test_variants_take_a_penalty_on_another_device_or_dtype():
    """A penalty (and direction) on the CPU is moved to the data's device; a wrong shape is refused."""
    C, Cd, gd, xl, yl, P, Pd = _variant_problem(3, 12, 20, "pairs", True, seed=2)
    want = vhvp(C, _gamma(0.5), xl, yl, Cd, gd, True, True, P, Pd)
    got = vhvp(C, _gamma(0.5), xl, yl, Cd, gd, True, True, P.cpu(), Pd.cpu())
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="step_penalty"):
        cuda_backend().hvp_cost(C, _gamma(0.5), xl, yl, None, Cd, gd, step_penalty=torch.zeros(2, device="cuda"))


def test_variant_signature_and_flag():
    """cuda's hvp_cost keeps the contract's arity with the variants keyword-only, and says so (HVP_VARIANTS)."""
    import inspect

    be = cuda_backend()
    assert be.HVP_VARIANTS is True
    params = inspect.signature(be.hvp_cost).parameters
    assert [n for n, p in params.items() if p.kind is not p.KEYWORD_ONLY] == [
        "C", "gamma", "x_lengths", "y_lengths", "window", "Cdot", "gamma_dot"]
    assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == [
        "open_begin", "open_end", "step_penalty", "penalty_dot"]


def test_cuda_graph_of_a_variant_gradient_penalty_step():
    """A gradient-penalty step with open ends and a step penalty tensor (create_graph, then the penalty's backward
    through hvp_cost with the variants), captured in a CUDA graph and replayed on new data, gives the eager step's
    values and gradients (no host synchronisation in the variants' path)."""
    from tests._helpers import capture_cuda_graph
    import softdtw

    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 40, 1, generator=g).cuda().requires_grad_()
    y = torch.randn(4, 60, 1, generator=g).cuda()
    p = torch.tensor(0.2, device="cuda", requires_grad=True)

    def step():
        v = softdtw.soft_dtw(x, y, 0.3, open_begin=True, open_end=True, step_penalty=p).sum()
        gx, gp = torch.autograd.grad(v, (x, p), create_graph=True)
        loss = v + gx.pow(2).sum() + gp.pow(2)
        dx, dp = torch.autograd.grad(loss, (x, p))
        return loss.detach(), dx, dp

    graph, static = capture_cuda_graph(step)
    for seed in (5, 6):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x.copy_(torch.randn(4, 40, 1, generator=g).cuda())
            y.copy_(torch.randn(4, 60, 1, generator=g).cuda())
        graph.replay()
        eager = step()
        for a, b in zip(static, eager):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
