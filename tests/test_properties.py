"""Hypothesis property tests over shapes, lengths, bands and gamma (cpu backend vs the reference)."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softdtw
from tests._helpers import rel_err


@st.composite
def problems(draw):
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 12))
    M = draw(st.integers(1, 12))
    D = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    xl = draw(st.lists(st.integers(1, N), min_size=B, max_size=B))
    yl = draw(st.lists(st.integers(1, M), min_size=B, max_size=B))
    band = draw(st.one_of(st.none(), st.integers(0, 4)))
    gamma = draw(st.sampled_from([0.0, 1e-3, 0.05, 0.5, 2.0, 30.0]))
    cost = draw(st.sampled_from(["sqeuclidean", "l1"]))
    return x, y, dict(x_lengths=xl, y_lengths=yl, bandwidth=band, cost=cost), gamma


_settings = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(problems())
def test_cpu_agrees_with_reference(problem):
    x, y, kw, gamma = problem
    results = []
    for backend in ("reference", "cpu"):
        xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = softdtw.soft_dtw(xx, yy, gamma, backend=backend, **kw)
        v.sum().backward()
        results.append((v.detach(), xx.grad, yy.grad))
    (v0, dx0, dy0), (v1, dx1, dy1) = results
    assert torch.isfinite(v1).all()
    assert rel_err(v1, v0) <= 1e-9
    if dx0.abs().max() > 0:
        assert rel_err(dx1, dx0) <= 1e-8 and rel_err(dy1, dy0) <= 1e-8


@_settings
@given(problems())
def test_divergence_is_nonnegative_and_zero_on_the_diagonal(problem):
    x, y, kw, gamma = problem
    # Non-negativity (Blondel et al. 2021) holds over all alignments; a band restricts the cross term
    # and the self terms differently, so it is checked without one.
    kw = {k: v for k, v in kw.items() if k not in ("cost", "bandwidth")}
    if gamma == 0.0:
        gamma = 0.1
    d = softdtw.soft_dtw_divergence(x, y, gamma, **kw)
    scale = softdtw.soft_dtw(x, y, gamma, **kw).abs().max().item() + 1.0
    assert (d >= -1e-9 * scale).all()
    kw["y_lengths"] = kw["x_lengths"]
    assert softdtw.soft_dtw_divergence(x, x, gamma, **kw).abs().max() == 0


@_settings
@given(problems())
def test_padding_never_changes_a_value(problem):
    x, y, kw, gamma = problem
    v = softdtw.soft_dtw(x, y, gamma, **kw)
    for b in range(x.shape[0]):
        n, m = kw["x_lengths"][b], kw["y_lengths"][b]
        alone = softdtw.soft_dtw(x[b:b + 1, :n], y[b:b + 1, :m], gamma, bandwidth=kw["bandwidth"], cost=kw["cost"])
        assert rel_err(v[b:b + 1], alone) <= 1e-12
