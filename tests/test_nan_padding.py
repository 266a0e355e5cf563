"""NaN padding read as lengths (tslearn's to_time_series_dataset layout) by every function that takes series:
the same values and gradients as explicit lengths, and clear errors for NaN that is not padding."""
import numpy as np
import pytest
import torch

import softdtw
from softdtw import (dtw, dtw_path, pairwise_soft_dtw, soft_dtw, soft_dtw_alignment, soft_dtw_barycenter,
                     soft_dtw_divergence)

NAN = float("nan")


def _batch(seed=0, B=3, N=9, M=7, D=2):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(B, N, D, generator=g, dtype=torch.float64), torch.randn(B, M, D, generator=g,
                                                                                dtype=torch.float64)
    xl, yl = torch.tensor([9, 5, 7])[:B], torch.tensor([4, 7, 1])[:B]
    xn, yn = x.clone(), y.clone()
    for b in range(B):
        xn[b, xl[b]:] = NAN
        yn[b, yl[b]:] = NAN
    return x, y, xl, yl, xn, yn


@pytest.mark.parametrize("fn", [soft_dtw, soft_dtw_divergence, lambda x, y, g, **k: dtw(x, y, **k)],
                         ids=["soft_dtw", "soft_dtw_divergence", "dtw"])
def test_values_and_gradients_equal_explicit_lengths(fn):
    x, y, xl, yl, xn, yn = _batch()
    ref = fn(x, y, 0.5, x_lengths=xl, y_lengths=yl)
    xn.requires_grad_(True)
    got = fn(xn, yn, 0.5)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    got.sum().backward()
    xr = x.clone().requires_grad_(True)
    fn(xr, y, 0.5, x_lengths=xl, y_lengths=yl).sum().backward()
    torch.testing.assert_close(xn.grad, xr.grad)
    assert torch.isfinite(xn.grad).all() and (xn.grad[1, 5:] == 0).all()
    assert torch.isnan(xn).sum() == 2 * (4 + 2)  # the caller's tensor still holds its NaN


def test_one_side_padded_alignment_path_and_module():
    x, y, xl, _, xn, _ = _batch()
    E = soft_dtw_alignment(xn, y, 0.3)
    torch.testing.assert_close(E, soft_dtw_alignment(x, y, 0.3, x_lengths=xl))
    assert (E[1, 5:] == 0).all()
    paths = dtw_path(xn, y)
    assert [p[-1].tolist() for p in paths] == [[8, 6], [4, 6], [6, 6]]
    loss = softdtw.SoftDTW(gamma=0.3)(xn, y)
    torch.testing.assert_close(loss, soft_dtw(x, y, 0.3, x_lengths=xl))


def test_unbatched_series_with_trailing_nan():
    x, y, *_ = _batch()
    a = torch.cat([x[0, :6], torch.full((3, 2), NAN, dtype=torch.float64)])
    assert float(soft_dtw(a, y[0], 1.0)) == pytest.approx(float(soft_dtw(x[0, :6], y[0], 1.0)), rel=1e-12)
    assert dtw_path(a, y[0])[-1].tolist() == [5, 6]


def test_numpy_arrays_from_tslearn():
    utils = pytest.importorskip("tslearn.utils")
    rng = np.random.default_rng(0)
    ragged = [rng.normal(size=(n, 1)) for n in (5, 8, 3)]
    X = torch.from_numpy(utils.to_time_series_dataset(ragged))
    K = pairwise_soft_dtw(X, gamma=0.2)
    for i in range(3):
        for j in range(3):
            v = soft_dtw(torch.from_numpy(ragged[i]), torch.from_numpy(ragged[j]), 0.2)
            assert float(K[i, j]) == pytest.approx(float(v), rel=1e-12)


def test_pairwise_with_padded_y_and_divergence():
    x, y, xl, yl, xn, yn = _batch()
    ref = pairwise_soft_dtw(x, y, 0.5, x_lengths=xl, y_lengths=yl, divergence=True)
    torch.testing.assert_close(pairwise_soft_dtw(xn, yn, 0.5, divergence=True), ref)
    torch.testing.assert_close(pairwise_soft_dtw(x, yn, 0.5), pairwise_soft_dtw(x, y, 0.5, y_lengths=yl))


def test_barycenter_of_padded_series():
    x, _, xl, _, xn, _ = _batch()
    a = soft_dtw_barycenter(xn, 1.0, max_iter=5, length=6)
    b = soft_dtw_barycenter(x, 1.0, max_iter=5, length=6, x_lengths=xl)
    torch.testing.assert_close(a.barycenter, b.barycenter)
    assert torch.isfinite(a.barycenter).all()


@pytest.mark.parametrize("call", [
    lambda x, y: soft_dtw(x, y),
    lambda x, y: soft_dtw_divergence(x, y),
    lambda x, y: soft_dtw_alignment(x, y),
    lambda x, y: pairwise_soft_dtw(x, y),
    lambda x, y: soft_dtw_barycenter(x, max_iter=1),
    lambda x, y: softdtw.soft_dtw_kmeans(x, 1, max_iter=1),
    lambda x, y: softdtw.gamma_heuristic(x),
], ids=["soft_dtw", "divergence", "alignment", "pairwise", "barycenter", "kmeans", "gamma_heuristic"])
def test_nan_that_is_not_padding_raises(call):
    x, y, *_ = _batch()
    inner = x.clone()
    inner[1, 2, 0] = NAN
    with pytest.raises(ValueError, match=r"contains NaN values inside series 1 \(step 2, feature 0, before its last "
                                         r"observed step 8\)"):
        call(inner, y)
    partial = x.clone()
    partial[2, 8, 1] = NAN  # one feature of the last step: not a whole padded step
    with pytest.raises(ValueError, match=r"NaN values inside series 2 \(step 8, feature 1"):
        call(partial, y)
    empty = x.clone()
    empty[0] = NAN
    with pytest.raises(ValueError, match="series 0 of .* is NaN at every step"):
        call(empty, y)


def test_nan_padding_and_lengths_together_raise():
    x, y, xl, yl, xn, yn = _batch()
    with pytest.raises(ValueError, match="x is NaN-padded .* and x_lengths was given too; pass one of them"):
        soft_dtw(xn, y, x_lengths=xl)
    with pytest.raises(ValueError, match="Y is NaN-padded .* and y_lengths was given too"):
        pairwise_soft_dtw(x, yn, y_lengths=yl)
    with pytest.raises(ValueError, match="X is NaN-padded .* and x_lengths was given too"):
        soft_dtw_barycenter(xn, x_lengths=xl)


def test_precomputed_costs_still_refuse_nan():
    C = torch.rand(2, 4, 5, dtype=torch.float64)
    C[0, 3] = NAN
    with pytest.raises(ValueError, match="C contains NaN values"):
        softdtw.soft_dtw_from_cost(C)


def test_inf_still_raises():
    x, y, *_ = _batch()
    x[0, -1] = float("inf")
    with pytest.raises(ValueError, match="x contains Inf values"):
        soft_dtw(x, y)


@pytest.mark.cuda
def test_cuda_reads_padding_where_values_are_checked_synchronously():
    x, y, xl, yl, xn, yn = _batch()
    xc, yc, xnc, ync = x.cuda(), y.cuda(), xn.cuda(), yn.cuda()
    ref = soft_dtw(x, y, 0.5, x_lengths=xl, y_lengths=yl)
    # pairwise_soft_dtw, alignments, paths, barycenters and the estimators read NaN padding on CUDA too.
    torch.testing.assert_close(pairwise_soft_dtw(xnc, ync, 0.5).diagonal().cpu(), ref)
    torch.testing.assert_close(soft_dtw_alignment(xnc, yc, 0.3).cpu(), soft_dtw_alignment(x, y, 0.3, x_lengths=xl))
    # soft_dtw / soft_dtw_divergence / SoftDTW check CUDA values after launching: NaN padding found there runs
    # the call again with the padding's lengths (values and gradients as with the lengths given).
    for fn, name in ((soft_dtw, "sdtw"), (soft_dtw_divergence, "div"), (softdtw.SoftDTW(gamma=0.5), "module")):
        for a, b, al, bl in ((xnc, yc, xl, None), (xnc, ync, xl, yl), (xc, ync, None, yl)):
            a = a.clone().requires_grad_(True)
            got = fn(a, b) if name == "module" else fn(a, b, 0.5)
            (g,) = torch.autograd.grad(got.sum(), a)
            kw = dict(x_lengths=al, y_lengths=bl)
            want = (soft_dtw_divergence if name == "div" else soft_dtw)(
                torch.nan_to_num(a.detach().cpu()).requires_grad_(True), torch.nan_to_num(b.cpu()), 0.5, **kw)
            torch.testing.assert_close(got.detach().cpu(), want.detach())
            assert torch.isfinite(g).all() and not g[torch.isnan(a.detach())].any()
    inner = xc.clone()
    inner[1, 2, 0] = NAN
    with pytest.raises(ValueError, match=r"x contains NaN values inside series 1 \(step 2"):
        soft_dtw(inner, yc)
    torch.testing.assert_close(soft_dtw(xc, yc, 0.5, x_lengths=xl.cuda(), y_lengths=yl.cuda()).cpu(), ref)
