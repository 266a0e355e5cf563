"""The cpu backend's hvp_cost (backends/_cpu_hvp.py) against the brute-force oracle, backward_cost and
central differences of backward_cost.

Every comparison is on fresh random data; relative errors are max |a - b| / max |b| (tests/_helpers).
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from softdtw._windows import build_window
from softdtw.backends import cpu
from tests._helpers import rel_err
from tests._paths import directional, oracle

F64 = torch.float64


def _lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


def _g(value, dtype=F64):
    return torch.tensor(value, dtype=dtype)


def _allowed(C, window, b, n, m):
    """The oracle's allowed cells of pair b: its window and finite costs, `(n, m)` bool."""
    ok = torch.isfinite(C[b, :n, :m])
    if window is not None:
        cols = torch.arange(m).unsqueeze(0)
        w = window[b, :n].long()
        ok &= (cols >= w[:, 0:1]) & (cols < w[:, 1:2])
    return ok


def _first_order(C, gamma, xl, yl, w):
    """(E, dgamma) of backward_cost with grad = 1."""
    value, saved = cpu.forward_cost(C, gamma, xl, yl, w, "store")
    return cpu.backward_cost(torch.ones_like(value), C, gamma, xl, yl, w, value, saved, "store")


@pytest.fixture(params=["planned", "lanes3", "one"])
def plan(request, monkeypatch):
    """The plan cpu picks, groups of 3 lanes (a partial last group, several kernel calls of 2 groups),
    and one pair a group."""
    if request.param == "lanes3":
        monkeypatch.setattr(cpu, "_hvp_plan", lambda B, N, M: (3, 2))
    elif request.param == "one":
        monkeypatch.setattr(cpu, "_hvp_plan", lambda B, N, M: (1, 1))
    return request.param


def _check_against_oracle(C, gamma, xl, yl, w, Cdot, gdot, tol):
    E, vg, Ed, vgd = cpu.hvp_cost(C, _g(gamma, C.dtype), xl, yl, w, Cdot, gdot)
    B, N, M = C.shape
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        allowed = _allowed(C, w, b, n, m)
        _, E0, dg0 = oracle(C[b, :n, :m], gamma, allowed=allowed)
        Ed0, vgd0 = directional(C[b, :n, :m], gamma, Cdot[b, :n, :m], float(gdot[b]), allowed=allowed)
        scale_e = max(float(Ed0.abs().max()), 1.0)  # a single path: Edot = 0 (the oracle: 1e-14)
        assert rel_err(E[b, :n, :m], E0) <= tol, (b, "E")
        assert abs(float(vg[b] - dg0)) <= tol * max(abs(float(dg0)), 1.0), (b, "vgamma")
        assert float((Ed[b, :n, :m] - Ed0).abs().max()) <= tol * scale_e, (b, "Edot")
        assert abs(float(vgd[b] - vgd0)) <= tol * max(abs(float(vgd0)), scale_e), (b, "vgamma_dot")
        # Nothing outside the pair, the window or on forbidden cells.
        Eb, Edb = E[b].clone(), Ed[b].clone()
        Eb[:n, :m][allowed] = 0
        Edb[:n, :m][allowed] = 0
        assert (Eb == 0).all() and (Edb == 0).all()


def _direction(B, N, M, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, M, generator=g, dtype=dtype), torch.randn(B, generator=g, dtype=dtype)


# --- against the oracle (tiny pairs, float64) ------------------------------------------------------

@pytest.mark.parametrize("gamma,scale", [(1e-3, 1e-3), (0.1, 1.0), (1.0, 1.0), (10.0, 3.0)])
@pytest.mark.parametrize("band", [None, 1])
def test_matches_oracle_with_lengths_and_bands(plan, gamma, scale, band):
    B, N, M = 4, 5, 6
    g = torch.Generator().manual_seed(7)
    C = torch.rand(B, N, M, generator=g, dtype=F64) * scale
    xl, yl = _lengths(5, 3, 5, 1), _lengths(6, 6, 2, 4)
    w = build_window(xl, yl, N, M, band, None)
    Cdot, gdot = _direction(B, N, M, seed=8)
    _check_against_oracle(C, gamma, xl, yl, w, Cdot, gdot, 1e-9)


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_matches_oracle_with_infinite_cells_and_garbage_direction_there(plan, gamma):
    B, N, M = 3, 5, 4
    g = torch.Generator().manual_seed(11)
    C = torch.rand(B, N, M, generator=g, dtype=F64)
    C[0, 1, 1] = C[0, 2, 2] = math.inf
    C[1, 0, 1:] = math.inf  # a pair that must go down first
    C[2, 3, 0] = math.inf
    xl, yl = _lengths(5, 5, 4), _lengths(4, 3, 4)
    Cdot, gdot = _direction(B, N, M, seed=12)
    _check_against_oracle(C, gamma, xl, yl, None, Cdot, gdot, 1e-9)
    # Cdot on forbidden cells and outside the pairs is never read.
    junk = Cdot.clone()
    junk[torch.isinf(C)] = math.nan
    junk[1, :, 3] = math.inf
    junk[2, 4, :] = -1e300
    want = cpu.hvp_cost(C, _g(gamma), xl, yl, None, Cdot, gdot)
    got = cpu.hvp_cost(C, _g(gamma), xl, yl, None, junk, gdot)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_exact_weights_path_matches_oracle(monkeypatch):
    """float64 data with huge R' takes its backward weights from the predecessors alone (as
    backward_cost does); force that path on small costs."""
    monkeypatch.setattr(cpu, "_weights", lambda *a: "exact")
    B, N, M = 3, 6, 4
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(3), dtype=F64)
    xl, yl = _lengths(6, 4, 2), _lengths(4, 4, 3)
    Cdot, gdot = _direction(B, N, M, seed=4)
    _check_against_oracle(C, 0.3, xl, yl, build_window(xl, yl, N, M, 2, None), Cdot, gdot, 1e-9)


def test_pair_without_finite_path_gets_zeros(plan):
    B, N, M = 2, 4, 4
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(5), dtype=F64)
    C[0, 1, :] = math.inf  # no path gets past row 1
    Cdot, gdot = _direction(B, N, M, seed=6)
    xl, yl = _lengths(4, 4), _lengths(4, 4)
    E, vg, Ed, vgd = cpu.hvp_cost(C, _g(0.5), xl, yl, None, Cdot, gdot)
    assert (E[0] == 0).all() and (Ed[0] == 0).all() and vg[0] == 0 and vgd[0] == 0
    _check_against_oracle(C[1:].contiguous(), 0.5, xl[1:], yl[1:], None, Cdot[1:].contiguous(), gdot[1:], 1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_gamma_zero_is_the_hard_path_and_zeros(dtype):
    B, N, M = 3, 9, 7
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(9), dtype=dtype)
    xl, yl = _lengths(9, 5, 9), _lengths(7, 7, 3)
    w = build_window(xl, yl, N, M, 2, None)
    Cdot, gdot = _direction(B, N, M, dtype, seed=10)
    E, vg, Ed, vgd = cpu.hvp_cost(C, _g(0.0, dtype), xl, yl, w, Cdot, gdot)
    E0, dg0 = _first_order(C, _g(0.0, dtype), xl, yl, w)
    assert torch.equal(E, E0) and set(E.unique().tolist()) <= {0.0, 1.0}
    assert (vg == 0).all() and (Ed == 0).all() and (vgd == 0).all()
    assert all(t.dtype == dtype for t in (E, vg, Ed, vgd))


# --- against the first order and central differences (larger pairs) --------------------------------

@pytest.mark.parametrize("dtype,tol", [(F64, 1e-11), (torch.float32, 2e-5)])
@pytest.mark.parametrize("gamma", [0.01, 0.1, 1.0])
def test_E_and_vgamma_equal_backward_cost(plan, dtype, tol, gamma):
    B, N, M = 5, 23, 17
    g = torch.Generator().manual_seed(13)
    C = (torch.rand(B, N, M, generator=g, dtype=F64) * 2).to(dtype)
    xl, yl = _lengths(23, 11, 23, 4, 20), _lengths(17, 17, 6, 12, 15)
    w = build_window(xl, yl, N, M, 4, None)
    Cdot, gdot = _direction(B, N, M, dtype, seed=14)
    E, vg, _, _ = cpu.hvp_cost(C, _g(gamma, dtype), xl, yl, w, Cdot, gdot)
    E0, dg0 = _first_order(C, _g(gamma, dtype), xl, yl, w)
    assert rel_err(E, E0) <= tol
    assert rel_err(vg, dg0) <= tol


@pytest.mark.parametrize("gamma", [0.05, 0.5, 5.0])
@pytest.mark.parametrize("band", [None, 6])
def test_matches_central_differences_of_backward_cost(gamma, band):
    B, N, M = 3, 40, 33
    g = torch.Generator().manual_seed(17)
    C = torch.rand(B, N, M, generator=g, dtype=F64) * 2
    xl, yl = _lengths(40, 31, 40), _lengths(33, 33, 20)
    w = build_window(xl, yl, N, M, band, None)
    Cdot, gdot = _direction(B, N, M, seed=18)
    gdot = gdot * gamma
    _, _, Ed, vgd = cpu.hvp_cost(C, _g(gamma), xl, yl, w, Cdot, gdot)
    # Central differences along (Cdot, gamma_dot); gamma is shared by the batch, so one pair at a time.
    for b in range(B):
        h = 1e-5 * gamma
        sl = slice(b, b + 1)
        wb = None if w is None else w[sl]
        up = _first_order(C[sl] + h * Cdot[sl], _g(gamma + h * float(gdot[b])), xl[sl], yl[sl], wb)
        down = _first_order(C[sl] - h * Cdot[sl], _g(gamma - h * float(gdot[b])), xl[sl], yl[sl], wb)
        fd_E = (up[0] - down[0]) / (2 * h)
        fd_g = (up[1] - down[1]) / (2 * h)
        assert rel_err(Ed[sl], fd_E) <= 1e-5, b
        assert abs(float(vgd[b] - fd_g[0])) <= 1e-5 * max(abs(float(fd_g[0])), 1.0), b


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_float32_within_tolerance_of_float64(gamma):
    B, N, M = 6, 40, 33
    g = torch.Generator().manual_seed(21)
    C = torch.rand(B, N, M, generator=g, dtype=F64) * 2
    xl, yl = _lengths(40, 40, 17, 40, 25, 3), _lengths(33, 12, 33, 33, 20, 33)
    w = build_window(xl, yl, N, M, 5, None)
    Cdot, gdot = _direction(B, N, M, seed=22)
    out64 = cpu.hvp_cost(C, _g(gamma), xl, yl, w, Cdot, gdot)
    out32 = cpu.hvp_cost(C.float(), _g(gamma, torch.float32), xl, yl, w, Cdot.float(), gdot.float())
    for name, a, b in zip(("E", "vgamma", "Edot", "vgamma_dot"), out32, out64):
        assert a.dtype == torch.float32
        assert rel_err(a, b) <= 1e-5, name


def test_outputs_fresh_inputs_untouched_and_batch_independent():
    B, N, M = 5, 12, 10
    g = torch.Generator().manual_seed(23)
    C = torch.rand(B, N, M, generator=g, dtype=F64)
    Cdot, gdot = _direction(B, N, M, seed=24)
    C0, Cdot0, gdot0 = C.clone(), Cdot.clone(), gdot.clone()
    xl, yl = _lengths(12, 7, 12, 3, 9), _lengths(10, 10, 4, 10, 8)
    out = cpu.hvp_cost(C, _g(0.2), xl, yl, None, Cdot, gdot)
    assert torch.equal(C, C0) and torch.equal(Cdot, Cdot0) and torch.equal(gdot, gdot0)
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        one = cpu.hvp_cost(C[b:b + 1, :n, :m].contiguous(), _g(0.2), xl[b:b + 1], yl[b:b + 1], None,
                           Cdot[b:b + 1, :n, :m].contiguous(), gdot[b:b + 1])
        for full, alone in zip(out, one):
            part = full[b, :n, :m] if full.dim() == 3 else full[b]
            assert rel_err(part, alone[0]) <= 1e-13


# --- never NaN -------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), N=st.integers(1, 9), M=st.integers(1, 9), log_gamma=st.floats(-4, 3),
       log_scale=st.floats(-3, 3), band=st.sampled_from([None, 0, 1, 3]), f32=st.booleans(),
       seed=st.integers(0, 2**16), holes=st.booleans())
def test_never_nan_on_finite_inputs(B, N, M, log_gamma, log_scale, band, f32, seed, holes):
    dtype = torch.float32 if f32 else F64
    g = torch.Generator().manual_seed(seed)
    C = (torch.rand(B, N, M, generator=g, dtype=F64) * 10 ** log_scale).to(dtype)
    if holes:
        C[torch.rand(B, N, M, generator=g) < 0.2] = math.inf
    xl = torch.randint(1, N + 1, (B,), generator=g)
    yl = torch.randint(1, M + 1, (B,), generator=g)
    w = build_window(xl, yl, N, M, band, None)
    Cdot = (torch.randn(B, N, M, generator=g, dtype=F64) * 10 ** log_scale).to(dtype)
    gdot = torch.randn(B, generator=g, dtype=F64).to(dtype)
    for gamma in (10 ** log_gamma, 0.0):
        out = cpu.hvp_cost(C, _g(gamma, dtype), xl, yl, w, Cdot, gdot)
        for t in out:
            assert t.dtype == dtype and torch.isfinite(t).all()


# --- out of the data dtype's comfortable range ------------------------------------------------------

def test_float32_tiny_gamma_runs_the_float64_kernels():
    """float32 data whose wdot would pass the float32 cap (a direction of 1 at gamma = 1e-30: Edot ~1e30)
    is run by the float64 kernels."""
    B, N, M = 2, 6, 5
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(31), dtype=F64) * 1e-30
    Cdot, gdot = _direction(B, N, M, seed=32)
    gdot = gdot * 1e-30
    xl, yl = _lengths(6, 4), _lengths(5, 5)
    assert not cpu._hvp_fits(C.float(), _g(1e-30, torch.float32), xl, yl, None, Cdot.float(), gdot.float())
    out32 = cpu.hvp_cost(C.float(), _g(1e-30, torch.float32), xl, yl, None, Cdot.float(), gdot.float())
    out64 = cpu.hvp_cost(C, _g(1e-30), xl, yl, None, Cdot, gdot)
    for a, b in zip(out32, out64):
        assert a.dtype == torch.float32 and torch.isfinite(a).all()
        assert rel_err(a, b) <= 1e-6


def test_float64_huge_direction_goes_to_the_reference():
    from softdtw.backends import reference
    if not hasattr(reference, "hvp_cost"):
        pytest.skip("reference.hvp_cost is not in this tree yet")
    B, N, M = 2, 5, 4
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(33), dtype=F64)
    Cdot, gdot = _direction(B, N, M, seed=34)
    Cdot = Cdot * 1e288
    xl, yl = _lengths(5, 3), _lengths(4, 4)
    assert not cpu._hvp_fits(C, _g(0.01), xl, yl, None, Cdot, gdot)
    got = cpu.hvp_cost(C, _g(0.01), xl, yl, None, Cdot, gdot)
    want = reference.hvp_cost(C, _g(0.01), xl, yl, None, Cdot, gdot)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# --- compiled and cached kernels ------------------------------------------------------------------

_SCRIPT = """
import sys, torch
from softdtw.backends import cpu
g = torch.Generator().manual_seed(0)
C = torch.rand(20, 60, 45, generator=g, dtype=torch.float64)
Cdot = torch.randn(20, 60, 45, generator=g, dtype=torch.float64)
gdot = torch.randn(20, generator=g, dtype=torch.float64)
n = torch.full((20,), 60)
m = torch.full((20,), 45)
torch.save(cpu.hvp_cost(C, torch.tensor(0.1, dtype=torch.float64), n, m, None, Cdot, gdot), sys.argv[1])
"""


@pytest.mark.slow
def test_compiled_and_cached_hvp_kernels_give_bitwise_equal_results(tmp_path):
    """As tests/backends/test_cpu_loading.py for the first order: cpu.hvp_cost loads the cached helpers
    of _cpu_hvp (callees first) before its kernel, so a process that loads the cache gets the bits of
    one that compiled."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), NUMBA_NUM_THREADS="2")
    outs = []
    for name in ("compiled", "cached"):
        out = tmp_path / f"{name}.pt"
        r = subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], env=env, capture_output=True, text=True,
                           timeout=1200)
        assert r.returncode == 0, r.stderr
        outs.append(torch.load(out))
    for a, b in zip(*outs):
        assert torch.equal(a, b), float((a - b).abs().max())
