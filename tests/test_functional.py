"""The public functions on the CPU: agreement between backends and with tslearn, shapes, invariants."""
import pytest
import torch
from tslearn.metrics import dtw as ts_dtw
from tslearn.metrics import soft_dtw as ts_soft_dtw

import softdtw
import softdtw.costs
from tests._helpers import case, rel_err

BACKENDS = ["reference", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("N,M,D", [(1, 1, 1), (1, 7, 2), (7, 1, 2), (9, 13, 1), (16, 16, 3), (31, 20, 5)])
def test_soft_dtw_matches_tslearn_float64(backend, N, M, D):
    x, y = case(3, N, M, D, seed=N * 100 + M)
    for gamma in (0.01, 0.5, 3.0):
        got = softdtw.soft_dtw(x, y, gamma, backend=backend)
        expected = torch.tensor([ts_soft_dtw(x[b].numpy(), y[b].numpy(), gamma=gamma) for b in range(3)], dtype=torch.float64)
        assert rel_err(got, expected) <= 1e-9


@pytest.mark.parametrize("backend", BACKENDS)
def test_bands_match_tslearn(backend):
    x, y = case(2, 14, 23, 2, seed=3)
    for kw, ts_kw in (({"bandwidth": 2}, {"sakoe_chiba_radius": 2}),
                      ({"itakura_max_slope": 2.0}, {"itakura_max_slope": 2.0})):
        got = softdtw.soft_dtw(x, y, 0.7, backend=backend, **kw)
        expected = torch.tensor([ts_soft_dtw(x[b].numpy(), y[b].numpy(), gamma=0.7, **ts_kw) for b in range(2)], dtype=torch.float64)
        assert rel_err(got, expected) <= 1e-9
        hard = softdtw.dtw(x, y, backend=backend, **kw)
        expected = torch.tensor([ts_dtw(x[b].numpy(), y[b].numpy(), **ts_kw) ** 2 for b in range(2)], dtype=torch.float64)
        assert rel_err(hard, expected) <= 1e-9


def test_cpu_equals_reference_everywhere():
    """Values, gradients (x, y, gamma) and alignments of the cpu backend vs the oracle, float64."""
    x, y = case(4, 17, 12, 3, seed=11)
    xl, yl = torch.tensor([17, 9, 1, 13]), torch.tensor([12, 12, 5, 2])
    for cost in ("sqeuclidean", "l1", "cosine"):
        for gamma in (0.0, 0.05, 1.0):
            for band in ({}, {"bandwidth": 1}, {"itakura_max_slope": 3.0}):
                if band.get("itakura_max_slope") and gamma == 0.0:
                    continue
                kw = dict(cost=cost, x_lengths=xl, y_lengths=yl, **band)
                if "itakura_max_slope" in band:
                    kw.update(x_lengths=None, y_lengths=None)
                out = []
                for backend in BACKENDS:
                    xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
                    g = torch.tensor(max(gamma, 1e-300), dtype=torch.float64, requires_grad=True) \
                        if gamma > 0 else 0.0
                    v = softdtw.soft_dtw(xx, yy, g, backend=backend, **kw)
                    (v * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
                    E = softdtw.soft_dtw_alignment(x, y, gamma, backend=backend, **kw)
                    out.append((v.detach(), xx.grad, yy.grad, g.grad if gamma > 0 else None, E))
                (v0, dx0, dy0, dg0, E0), (v1, dx1, dy1, dg1, E1) = out
                where = f"cost={cost} gamma={gamma} band={band}"
                assert rel_err(v1, v0) <= 1e-9, where
                assert rel_err(dx1, dx0) <= 1e-9 and rel_err(dy1, dy0) <= 1e-9, where
                assert rel_err(E1, E0) <= 1e-9, where
                if dg0 is not None:
                    assert abs(dg1 - dg0) <= 1e-9 * max(1.0, abs(dg0)), where


def test_float32_within_1e5_of_float64():
    x, y = case(8, 64, 50, 4, seed=5)
    for gamma in (0.1, 1.0):
        xx, yy = x.float().requires_grad_(), y.float().requires_grad_()
        v32 = softdtw.soft_dtw(xx, yy, gamma)
        v32.sum().backward()
        xd, yd = x.clone().requires_grad_(), y.clone().requires_grad_()
        v64 = softdtw.soft_dtw(xd, yd, gamma)
        v64.sum().backward()
        assert v32.dtype == torch.float32
        assert rel_err(v32, v64) <= 1e-5
        assert rel_err(xx.grad, xd.grad) <= 1e-4 and rel_err(yy.grad, yd.grad) <= 1e-4


def test_unbatched_gives_a_scalar_and_batched_the_same_values():
    x, y = case(2, 8, 6, 2)
    v = softdtw.soft_dtw(x, y)
    assert softdtw.soft_dtw(x[1], y[1]).shape == ()
    assert torch.allclose(softdtw.soft_dtw(x[1], y[1]), v[1], rtol=1e-12)
    assert softdtw.soft_dtw_alignment(x[0], y[0]).shape == (8, 6)
    assert softdtw.dtw_path(x[0], y[0]).shape[1] == 2


def test_padding_with_lengths_leaves_each_value_unchanged():
    x, y = case(3, 20, 25, 2, seed=2)
    xl, yl = [20, 11, 4], [9, 25, 13]
    padded = softdtw.soft_dtw(x, y, 0.3, x_lengths=xl, y_lengths=yl)
    for b in range(3):
        alone = softdtw.soft_dtw(x[b, :xl[b]], y[b, :yl[b]], 0.3)
        assert torch.allclose(padded[b], alone, rtol=1e-12)
    # And the padding's contents do not matter.
    x2 = x.clone()
    x2[1, 11:] = 1e3
    assert torch.allclose(softdtw.soft_dtw(x2, y, 0.3, x_lengths=xl, y_lengths=yl), padded, rtol=1e-12)


def test_padded_steps_get_zero_gradient():
    x, y = case(2, 10, 10, 1, requires_grad=True)
    softdtw.soft_dtw(x, y, x_lengths=[10, 6], y_lengths=[3, 10]).sum().backward()
    assert x.grad[1, 6:].abs().max() == 0 and y.grad[0, 3:].abs().max() == 0
    assert x.grad[1, :6].abs().max() > 0


def test_divergence_zero_at_x_equals_y_and_nonnegative_for_unequal_lengths():
    x, y = case(5, 12, 30, 2, seed=8)
    assert softdtw.soft_dtw_divergence(x, x, 0.5).abs().max() == 0
    d = softdtw.soft_dtw_divergence(x, y, 0.5)
    assert d.shape == (5,) and (d >= 0).all()
    d_band = softdtw.soft_dtw_divergence(x, x, 0.5, bandwidth=3, x_lengths=[12, 8, 5, 12, 1],
                                         y_lengths=[12, 8, 5, 12, 1])
    assert d_band.abs().max() == 0


def test_symmetric_for_a_symmetric_cost():
    x, y = case(3, 9, 14, 2, seed=4)
    assert torch.allclose(softdtw.soft_dtw(x, y, 0.2), softdtw.soft_dtw(y, x, 0.2), rtol=1e-12)


def test_small_gamma_approaches_hard_dtw():
    x, y = case(2, 15, 18, 2, seed=9)
    hard = softdtw.dtw(x, y)
    soft = softdtw.soft_dtw(x, y, 1e-4)
    assert (soft <= hard + 1e-12).all()  # the soft-min is below the min
    assert rel_err(soft, hard) <= 1e-3


def test_tiny_gamma_long_series_is_finite():
    """gamma = 1e-4 at N = M = 1000: finite values and gradients (no NaN, no overflow)."""
    x, y = case(2, 1000, 1000, 1, dtype=torch.float32, seed=1, requires_grad=True)
    v = softdtw.soft_dtw(x, y, 1e-4)
    v.sum().backward()
    assert torch.isfinite(v).all() and torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
    assert x.grad.abs().max() > 0


def test_from_cost_equals_fused_and_is_differentiable_in_C():
    x, y = case(2, 7, 9, 3)
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y).requires_grad_()
    v = softdtw.soft_dtw_from_cost(C, 0.4)
    assert torch.allclose(v, softdtw.soft_dtw(x, y, 0.4), rtol=1e-12)
    v.sum().backward()
    assert torch.allclose(C.grad, softdtw.soft_dtw_alignment(x, y, 0.4), rtol=1e-10, atol=1e-12)


def test_callable_cost_like_dist_func():
    x, y = case(2, 6, 8, 2)

    def dist(a, b):
        return torch.cdist(a, b) ** 2

    assert torch.allclose(softdtw.soft_dtw(x, y, cost=dist), softdtw.soft_dtw(x, y), rtol=1e-10)


def test_dtw_path_is_a_valid_path_and_its_cost_is_dtw():
    x, y = case(3, 11, 7, 2, seed=6)
    paths = softdtw.dtw_path(x, y, x_lengths=[11, 5, 2])
    values = softdtw.dtw(x, y, x_lengths=[11, 5, 2])
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y)
    for b, (path, n) in enumerate(zip(paths, [11, 5, 2])):
        assert path[0].tolist() == [0, 0] and path[-1].tolist() == [n - 1, 6]
        steps = (path[1:] - path[:-1]).tolist()
        assert all(s in ([1, 1], [1, 0], [0, 1]) for s in steps)
        assert torch.isclose(C[b, path[:, 0], path[:, 1]].sum(), values[b], rtol=1e-12)


def test_half_precision_inputs_give_half_outputs():
    x, y = case(2, 10, 8, 2, dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        v = softdtw.soft_dtw(x.to(dtype), y.to(dtype), 1.0)
        assert v.dtype == dtype
        assert rel_err(v.float(), softdtw.soft_dtw(x.to(dtype).float(), y.to(dtype).float(), 1.0)) < 1e-2


def test_dtw_path_overflow_is_the_same_error_on_every_route():
    """A float32 pair whose DTW cost is finite in float64 but not in float32: every route (the lean unbatched one,
    the batched cpu one, the reference and the banded ones) raises the same error (the cpu routes once returned the
    path with a value of inf, the unbatched one with NumPy's overflow warning)."""
    import warnings

    x, y = torch.tensor([[0.0], [1e30]]), torch.tensor([[0.0], [-1e30]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({}, {"backend": "reference"}, {"bandwidth": 5}):
            for xx, yy in ((x, y), (x[None], y[None])):
                with pytest.raises(ValueError, match="no warping path of finite cost"):
                    softdtw.dtw_path(xx, yy, return_value=True, **kw)
