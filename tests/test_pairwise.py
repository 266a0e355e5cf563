"""pairwise_soft_dtw: equal to looping soft_dtw over the pairs, in every mode; chunking; errors."""
import numpy as np
import pytest
import torch

import softdtw
from softdtw.pairwise import pairwise_soft_dtw


def _loop(X, Y, fn, x_lengths=None, y_lengths=None, **kw):
    out = torch.empty(len(X), len(Y), dtype=torch.float64)
    for i in range(len(X)):
        for j in range(len(Y)):
            n = len(X[i]) if x_lengths is None else int(x_lengths[i])
            m = len(Y[j]) if y_lengths is None else int(y_lengths[j])
            out[i, j] = fn(X[i, :n], Y[j, :m], **kw)
    return out


@pytest.fixture
def sets():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(5, 9, 2, generator=g, dtype=torch.float64)
    Y = torch.randn(4, 7, 2, generator=g, dtype=torch.float64)
    return X, Y


def test_equals_loop_x_y(sets):
    X, Y = sets
    K = pairwise_soft_dtw(X, Y, 0.5)
    assert K.shape == (5, 4) and K.dtype == torch.float64
    torch.testing.assert_close(K, _loop(X, Y, softdtw.soft_dtw, gamma=0.5), rtol=1e-12, atol=1e-12)


def test_equals_loop_symmetric_with_lengths_and_small_chunks(sets):
    X, _ = sets
    lengths = torch.tensor([9, 3, 1, 7, 5])
    K = pairwise_soft_dtw(X, gamma=0.3, x_lengths=lengths, batch_size=4)
    ref = _loop(X, X, softdtw.soft_dtw, lengths, lengths, gamma=0.3)
    torch.testing.assert_close(K, ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(K, K.T)


def test_equals_loop_unequal_sets_with_both_lengths(sets):
    X, Y = sets
    xl, yl = torch.tensor([2, 9, 4, 6, 1]), torch.tensor([7, 3, 5, 2])
    K = pairwise_soft_dtw(X, Y, 1.0, x_lengths=xl, y_lengths=yl, batch_size=3)
    torch.testing.assert_close(K, _loop(X, Y, softdtw.soft_dtw, xl, yl, gamma=1.0), rtol=1e-12, atol=1e-12)


def test_divergence_equals_loop(sets):
    X, Y = sets
    K = pairwise_soft_dtw(X, Y, 0.7, divergence=True)
    torch.testing.assert_close(K, _loop(X, Y, softdtw.soft_dtw_divergence, gamma=0.7), rtol=1e-10, atol=1e-10)
    S = pairwise_soft_dtw(X, gamma=0.7, divergence=True)
    assert torch.all(S.diagonal() == 0)
    assert (S >= -1e-10).all()
    torch.testing.assert_close(S, _loop(X, X, softdtw.soft_dtw_divergence, gamma=0.7), rtol=1e-10, atol=1e-10)


def test_gamma_zero_is_the_hard_dtw_matrix(sets):
    X, Y = sets
    K = pairwise_soft_dtw(X, Y, 0.0)
    torch.testing.assert_close(K, _loop(X, Y, softdtw.dtw), rtol=1e-12, atol=1e-12)


def test_band_and_cost_are_passed_through(sets):
    X, Y = sets
    K = pairwise_soft_dtw(X, Y, 0.5, bandwidth=1, cost="l1")
    ref = _loop(X, Y, softdtw.soft_dtw, gamma=0.5, bandwidth=1, cost="l1")
    torch.testing.assert_close(K, ref, rtol=1e-12, atol=1e-12)
    # A non-symmetric constraint (Itakura) is computed on every pair, not mirrored.
    S = pairwise_soft_dtw(X, gamma=0.5, itakura_max_slope=2.0)
    torch.testing.assert_close(S, _loop(X, X, softdtw.soft_dtw, gamma=0.5, itakura_max_slope=2.0),
                               rtol=1e-12, atol=1e-12)


def test_float32_numpy_and_univariate_2d_inputs():
    X = np.random.default_rng(0).normal(size=(3, 6)).astype(np.float32)
    K = pairwise_soft_dtw(X, gamma=1.0)
    assert K.dtype == torch.float32 and K.shape == (3, 3)
    ref = _loop(torch.from_numpy(X).unsqueeze(-1).double(), torch.from_numpy(X).unsqueeze(-1).double(),
                softdtw.soft_dtw, gamma=1.0)
    torch.testing.assert_close(K.double(), ref, rtol=1e-5, atol=1e-4)


def test_differentiable_like_the_loop(sets):
    X, Y = sets
    Xa = X.clone().requires_grad_(True)
    pairwise_soft_dtw(Xa, Y, 0.5, batch_size=7).sum().backward()
    Xb = X.clone().requires_grad_(True)
    sum(softdtw.soft_dtw(Xb[i], Y[j], 0.5) for i in range(5) for j in range(4)).backward()
    torch.testing.assert_close(Xa.grad, Xb.grad, rtol=1e-10, atol=1e-10)


def test_progress_bar_only_for_real_jobs(capsys):
    X = torch.randn(3, 5, 1)
    pairwise_soft_dtw(X, progress=True)
    assert "pairwise" not in capsys.readouterr().err
    Xb = torch.randn(100, 128, 1)  # 5050 pairs x 16384 cells: above the 5e7-cell threshold
    pairwise_soft_dtw(Xb, gamma=0.0, batch_size=200, progress=True)
    assert "pairwise DTW" in capsys.readouterr().err
    pairwise_soft_dtw(Xb, gamma=0.0, batch_size=200, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("X, Y, kw, err, match", [
    (torch.randn(2, 3, 1), torch.randn(2, 3, 2), {}, ValueError, "same feature size D"),
    (torch.randn(2, 3, 1, 1), None, {}, ValueError, r"set of series of shape \(P, T, D\)"),
    (torch.ones(2, 3, 1, dtype=torch.int64), None, {}, TypeError, "floating-point tensor"),
    ([1, 2, 3], None, {}, TypeError, "must be a torch.Tensor"),
    (torch.randn(2, 3, 1), None, dict(x_lengths=torch.tensor([1, 4])), ValueError, r"x_lengths must lie in \[1, 3\]"),
    (torch.randn(2, 3, 1), None, dict(x_lengths=torch.tensor([1.0, 2.0])), TypeError, "integer tensor"),
    (torch.randn(2, 3, 1), None, dict(x_lengths=torch.tensor([1])), ValueError, r"shape \(2,\)"),
    (torch.randn(2, 3, 1), None, dict(y_lengths=torch.tensor([1, 2])), ValueError, "y_lengths was given but Y is None"),
    (torch.randn(2, 3, 1), torch.randn(2, 3, 1).double(), {}, TypeError, "same dtype"),
    (torch.randn(2, 3, 1), None, dict(batch_size=0), ValueError, "batch_size must be a positive integer"),
    (torch.randn(2, 3, 1), None, dict(gamma=-1.0), ValueError, "gamma must be a finite number >= 0"),
])
def test_bad_inputs(X, Y, kw, err, match):
    with pytest.raises(err, match=match):
        pairwise_soft_dtw(X, Y, **kw)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(37, 50, 3, generator=g)
    Y = torch.randn(21, 41, 3, generator=g)
    xl = torch.randint(1, 51, (37,), generator=g)
    cpu = pairwise_soft_dtw(X, Y, 0.5, x_lengths=xl, divergence=True)
    gpu = pairwise_soft_dtw(X.cuda(), Y.cuda(), 0.5, x_lengths=xl.cuda(), divergence=True, batch_size=100)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-3)


def test_fractional_band_is_not_mirrored():
    """A fractional Sakoe-Chiba radius is tslearn's band, one step wider on one side of the diagonal, so
    sdtw(X_p, X_q) != sdtw(X_q, X_p) for pairs of equal length: Y=None computes both halves (it once mirrored the
    upper triangle, 7.3 off at bandwidth 0.5)."""
    import softdtw

    X = torch.randn(4, 6, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    for bw in (0.5, 1.5, 2):
        K = softdtw.pairwise_soft_dtw(X, gamma=0.1, bandwidth=bw, progress=False)
        for p in range(4):
            for q in range(4):
                want = softdtw.soft_dtw(X[p], X[q], 0.1, bandwidth=bw)
                assert torch.allclose(K[p, q], want, rtol=1e-12), (bw, p, q)
