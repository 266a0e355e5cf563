"""softdtw.compat: each library's entry points, called as that library's README, examples and tests call
them, against the native API; the positional patterns of the four libraries on the native API and the
adapters (each works as it does there, or raises: none is misread); PackedSequence inputs."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_sequence

import softdtw
from softdtw import functional as F
from softdtw.compat import maghoumi, pysdtw, sdtw_cuda_torch, tslearn
from tests._helpers import case, rel_err

TOL = {torch.float32: 1e-5, torch.float64: 1e-9}


def close(a, b, dtype=torch.float64):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    assert rel_err(a, b) <= TOL[dtype], rel_err(a, b)


def l1_dist(x, y):
    """A user cost function, as the libraries' dist_func: (B, N, D), (B, M, D) -> (B, N, M)."""
    return (x.unsqueeze(2) - y.unsqueeze(1)).abs().sum(-1)


def _recursion_reference(D: np.ndarray, gamma: float, bandwidth: float = 0.0) -> np.ndarray:
    """Soft-DTW of each cost matrix D[b] `(N, M)` with an absolute band |i - j| <= bandwidth (0: none),
    the recursion of Maghoumi's and sdtw-cuda-torch's kernels, written here in float64 for the test."""
    B, N, M = D.shape
    out = np.empty(B)
    for b in range(B):
        R = np.full((N + 1, M + 1), np.inf)
        R[0, 0] = 0.0
        for i in range(1, N + 1):
            for j in range(1, M + 1):
                if 0 < bandwidth < abs(i - j):
                    continue
                r = -np.array([R[i - 1, j - 1], R[i - 1, j], R[i, j - 1]]) / gamma
                rmax = r.max()
                if not np.isfinite(rmax):
                    continue
                R[i, j] = D[b, i - 1, j - 1] - gamma * (np.log(np.exp(r - rmax).sum()) + rmax)
        out[b] = R[N, M]
    return out


def _sqdist(x, y):
    return ((x.unsqueeze(2) - y.unsqueeze(1)) ** 2).sum(-1)


# Maghoumi's pytorch-softdtw-cuda ----------------------------------------------------------------------

def test_maghoumi_readme_example():
    torch.manual_seed(0)
    batch_size, len_x, len_y, dims = 8, 15, 12, 5
    x = torch.rand((batch_size, len_x, dims), requires_grad=True)
    y = torch.rand((batch_size, len_y, dims))
    sdtw = maghoumi.SoftDTW(use_cuda=True, gamma=0.1)  # README; the inputs here are on the CPU
    with pytest.warns(UserWarning, match=r"use_cuda=True, but the inputs are on cpu.*runs on the CPU"):
        loss = sdtw(x, y)
    loss.mean().backward()
    x2 = x.detach().clone().requires_grad_()
    ref = F.soft_dtw(x2, y, 0.1)
    ref.mean().backward()
    close(loss, ref, torch.float32)
    close(x.grad, x2.grad, torch.float32)
    # The recursion as Maghoumi's code runs it (float64 from the float32 costs).
    expected = _recursion_reference(_sqdist(x, y).detach().double().numpy(), 0.1)
    assert np.allclose(loss.detach().double().numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("shape,dtype", [((128, 17, 15, 2), torch.float32), ((16, 64, 64, 2), torch.float64)])
def test_maghoumi_profile_inputs(shape, dtype):
    """soft_dtw_cuda.py's __main__: SoftDTW(False, gamma=1.0, normalize=False) on torch.rand inputs."""
    torch.manual_seed(1234)
    batch_size, seq_len_a, seq_len_b, dims = shape
    a = torch.rand((batch_size, seq_len_a, dims), requires_grad=True, dtype=dtype)
    b = torch.rand((batch_size, seq_len_b, dims), dtype=dtype)
    sdtw = maghoumi.SoftDTW(False, gamma=1.0, normalize=False)
    forward = sdtw(a, b)
    grads = torch.autograd.grad(forward, a, grad_outputs=torch.ones_like(forward))[0]
    a2 = a.detach().clone().requires_grad_()
    ref = F.soft_dtw(a2, b, 1.0)
    close(forward, ref, dtype)
    close(grads, torch.autograd.grad(ref.sum(), a2)[0], dtype)
    if dtype == torch.float64:
        expected = _recursion_reference(_sqdist(a, b).detach().numpy(), 1.0)
        assert np.allclose(forward.detach().numpy(), expected, rtol=1e-12)


def test_maghoumi_bandwidth_convention_and_fix():
    x, y = case(3, 12, 12, 2)
    D = _sqdist(x, y).numpy()
    for bw in (None, 0, -1.0):  # Maghoumi: None and <= 0 disable the band
        close(maghoumi.SoftDTW(False, 0.5, bandwidth=bw)(x, y), F.soft_dtw(x, y, 0.5))
    for bw in (1, 2.5, 4):  # |i - j| <= bandwidth, as Maghoumi's kernels
        got = maghoumi.SoftDTW(False, 0.5, bandwidth=bw)(x, y)
        assert np.allclose(got.numpy(), _recursion_reference(D, 0.5, bw), rtol=1e-12)
        close(got, F.soft_dtw(x, y, 0.5, bandwidth=math.floor(bw)))  # native fractional radii are tslearn's
    # N != M: Maghoumi's absolute band makes the pair infinite; the adapter uses tslearn's band per pair.
    x, y = case(2, 12, 6, 2)
    assert np.isinf(_recursion_reference(_sqdist(x, y).numpy(), 0.5, 2)).all()
    got = maghoumi.SoftDTW(False, 0.5, bandwidth=2)(x, y)
    assert torch.isfinite(got).all()
    close(got, F.soft_dtw(x, y, 0.5, bandwidth=2))


def test_maghoumi_normalize_any_lengths_and_dist_func():
    x, y = case(3, 9, 9, 3)
    close(maghoumi.SoftDTW(False, 0.2, True)(x, y), F.soft_dtw_divergence(x, y, 0.2))
    x, y = case(3, 9, 14, 3)  # Maghoumi's torch.cat([X, X, Y]) raises here
    close(maghoumi.SoftDTW(False, 0.2, True)(x, y), F.soft_dtw_divergence(x, y, 0.2))
    close(maghoumi.SoftDTW(False, 0.2, False, None, l1_dist)(x, y), F.soft_dtw(x, y, 0.2, cost="l1"))
    sdtw = maghoumi.SoftDTW(False)
    assert sdtw.dist_func is maghoumi.SoftDTW._euclidean_dist_func and sdtw.bandwidth == 0
    close(sdtw.dist_func(x, y), _sqdist(x, y))
    sdtw.gamma, sdtw.normalize = 0.3, True  # attributes are read at each call, as there
    close(sdtw(x, y), F.soft_dtw_divergence(x, y, 0.3))


def test_maghoumi_checks_what_it_would_misread():
    with pytest.raises(TypeError, match=r"use_cuda must be True or False; got 0\.1"):
        maghoumi.SoftDTW(0.1)  # Maghoumi runs this on CUDA with gamma = 1
    with pytest.raises(TypeError, match="normalize must be True or False; got l1_dist"):
        maghoumi.SoftDTW(True, 0.1, l1_dist)
    with pytest.raises(TypeError, match="dist_func must be a callable"):
        maghoumi.SoftDTW(False, 0.1, False, None, "l1")
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        maghoumi.SoftDTW(False, -1.0)


def test_use_cuda_warns_once_per_module():
    x, y = case(2, 5, 5, 1)
    sdtw = maghoumi.SoftDTW(True)
    with pytest.warns(UserWarning, match="use_cuda=True"):
        sdtw(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sdtw(x, y)
        maghoumi.SoftDTW(False)(x, y)
        pysdtw.SoftDTW(use_cuda=False)(x, y)


# pysdtw -----------------------------------------------------------------------------------------------

def test_pysdtw_readme_example():
    torch.manual_seed(0)
    device = torch.device("cpu")  # README: cuda
    X = torch.rand((10, 5, 7), device=device, requires_grad=True)
    Y = torch.rand((10, 9, 7), device=device)
    fun = pysdtw.distance.pairwise_l2_squared
    sdtw = pysdtw.SoftDTW(gamma=1.0, dist_func=fun, use_cuda=True)
    with pytest.warns(UserWarning, match="use_cuda=True"):
        res = sdtw(X, Y)
    loss = res.sum()
    loss.backward()
    X2 = X.detach().clone().requires_grad_()
    ref = F.soft_dtw(X2, Y, 1.0)
    ref.sum().backward()
    close(res, ref, torch.float32)
    close(X.grad, X2.grad, torch.float32)


def test_pysdtw_legacy_tests_inputs():
    """pysdtw's tests/tests_legacy.py: pysdtw against Maghoumi's module, (10, 5, 3, 12) and (10, 513, 259, 15)."""
    torch.manual_seed(0)
    A = torch.rand((10, 5, 12), requires_grad=True)
    Ac = A.detach().clone().requires_grad_(True)
    B = torch.rand((10, 3, 12))
    res_leg = maghoumi.SoftDTW(False, gamma=1.0)(A, B)
    res = pysdtw.SoftDTW(gamma=1.0, use_cuda=False)(Ac, B)
    close(res, res_leg, torch.float32)
    res_leg.sum().backward()
    res.sum().backward()
    close(Ac.grad, A.grad, torch.float32)

    A = torch.rand((10, 513, 15), requires_grad=True)
    B = torch.rand((10, 259, 15))

    def pairwise_l2_squared(x, y):  # the user-written cost of test_equal_legacy_distance
        x_norm = (x ** 2).sum(-1).unsqueeze(-1)
        y_norm = (y ** 2).sum(-1).unsqueeze(-2)
        return torch.clamp(x_norm + y_norm - 2.0 * torch.bmm(x, y.mT), 0.0, torch.inf)

    res = pysdtw.SoftDTW(gamma=1.0, dist_func=pairwise_l2_squared, use_cuda=False)(A, B)
    close(res, F.soft_dtw(A, B, 1.0, cost=pairwise_l2_squared), torch.float32)
    close(res, F.soft_dtw(A, B, 1.0), torch.float32)  # the GEMM-form cost agrees with the fused one


def _packed_lists(seed, lens_a, lens_b, dims=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a = [torch.rand((int(n), dims), generator=g, dtype=dtype) for n in lens_a]
    b = [torch.rand((int(n), dims), generator=g, dtype=dtype) for n in lens_b]
    return a, b


def test_pysdtw_packed_inputs_as_its_tests():
    """pysdtw's tests_compute.py test_packed_a..e, on the CPU, against per-pair calls and padded + lengths."""
    sdtw = pysdtw.SoftDTW(use_cuda=False)
    g = torch.Generator().manual_seed(3)
    len_a = torch.randint(10, 100, (10,), generator=g)
    a, _ = _packed_lists(0, len_a, [])
    a_packed = pack_sequence(a, enforce_sorted=False)
    b = torch.rand((10, 25, 5), dtype=torch.float64, generator=g)
    padded, lens = pad_sequence(a, batch_first=True), len_a
    close(sdtw(a_packed, b), F.soft_dtw(padded, b, x_lengths=lens))
    close(sdtw(b, a_packed), F.soft_dtw(b, padded, y_lengths=lens))
    close(sdtw(a_packed, a_packed), F.soft_dtw(padded, padded, x_lengths=lens, y_lengths=lens))
    per_pair = torch.cat([F.soft_dtw(ai.unsqueeze(0), b[i:i + 1]) for i, ai in enumerate(a)])
    close(sdtw(a_packed, b), per_pair)

    # test_packed_b / c: equal lengths, packed or not, same values and gradients.
    A = torch.rand((10, 35, 5), generator=g, requires_grad=True)
    Ac = A.detach().clone().requires_grad_(True)
    B = torch.rand((10, 25, 5), generator=g)
    f0 = sdtw(A, B)
    f1 = sdtw(pack_sequence(list(Ac), enforce_sorted=False), B)
    close(f1, f0, torch.float32)
    f0.sum().backward()
    f1.sum().backward()
    close(Ac.grad, A.grad, torch.float32)

    # test_packed_d / e: both packed with their own lengths, against one call per pair; gradients too.
    len_a = torch.randint(20, 50, (20,), generator=g)
    len_b = torch.randint(30, 50, (20,), generator=g)
    a, b = _packed_lists(1, len_a, len_b)
    a0 = [ai.clone().requires_grad_(True) for ai in a]
    res0 = torch.cat([sdtw(ai.unsqueeze(0), bi.unsqueeze(0)) for ai, bi in zip(a0, b)])
    res0.sum().backward()
    a1 = [ai.clone().requires_grad_(True) for ai in a]
    res1 = sdtw(pack_sequence(a1, enforce_sorted=False), pack_sequence(b, enforce_sorted=False))
    close(res1, res0)
    res1.sum().backward()
    close(torch.cat([ai.grad for ai in a1]), torch.cat([ai.grad for ai in a0]))


def test_pysdtw_band_and_autograd_functions():
    x, y = case(3, 10, 10, 2)
    close(pysdtw.SoftDTW(0.4, None, False, 2)(x, y), F.soft_dtw(x, y, 0.4, bandwidth=2))
    close(pysdtw.SoftDTW(0.4, None, False, 0)(x, y), F.soft_dtw(x, y, 0.4))
    # N != M: pysdtw's scaled band (|i m / n - j| <= bandwidth) leaves no path for this pair: here
    # tslearn's band per pair, always finite.
    x, y = case(2, 2, 10, 1)
    got = pysdtw.SoftDTW(0.4, None, False, 1)(x, y)
    assert torch.isfinite(got).all()
    close(got, F.soft_dtw(x, y, 0.4, bandwidth=1))
    x, y = case(3, 8, 6, 2)
    D = _sqdist(x, y).requires_grad_()
    lengths = torch.tensor([[8, 6], [5, 6], [3, 2]])
    for fn in (pysdtw.SoftDTWcpu, pysdtw.SoftDTWcuda):
        close(fn.apply(D, lengths, 0.7, None), F.soft_dtw_from_cost(D, 0.7, x_lengths=lengths[:, 0],
                                                                    y_lengths=lengths[:, 1]))
    assert pysdtw.distance.pairwise_l2_squared_exact(x, y).shape == (3, 8, 6)


def test_pysdtw_checks_what_it_would_misread():
    with pytest.raises(TypeError, match="gamma must be a number"):
        pysdtw.SoftDTW(True, 0.1)  # Maghoumi's order
    with pytest.raises(TypeError, match="dist_func must be a callable .* got False"):
        pysdtw.SoftDTW(0.1, False, l1_dist)  # tslearn's order
    with pytest.raises(TypeError, match="use_cuda must be True or False; got 2"):
        pysdtw.SoftDTW(0.1, None, 2)


def test_flags_and_bandwidths_as_the_libraries_read_them():
    """The libraries read their flags by truth value and take float(bandwidth): 0 / 1 and None (tslearn's
    normalize) pass as flags, a one-element tensor as a bandwidth; a float in a flag's place stays an error (a
    misplaced gamma)."""
    x, y = case(2, 7, 7, 2)
    close(maghoumi.SoftDTW(0, 0.5, 1)(x, y), F.soft_dtw_divergence(x, y, 0.5))
    close(pysdtw.SoftDTW(0.5, None, 0)(x, y), F.soft_dtw(x, y, 0.5))
    assert pysdtw.SoftDTW(0.5, None, 0).dtw_func == pysdtw.SoftDTWcpu.apply  # the attribute pysdtw sets
    close(sdtw_cuda_torch.SoftDTW(gamma=0.5, normalize=1)(x, y), F.soft_dtw_divergence(x, y, 0.5))
    close(tslearn.SoftDTWLossPyTorch(gamma=0.5, normalize=None)(x, y), F.soft_dtw(x, y, 0.5))
    close(maghoumi.SoftDTW(False, 0.5, bandwidth=torch.tensor(2))(x, y), F.soft_dtw(x, y, 0.5, bandwidth=2))
    close(sdtw_cuda_torch.softdtw(x, y, gamma=0.5, bandwidth=torch.tensor(2.0)), F.soft_dtw(x, y, 0.5, bandwidth=2))
    with pytest.raises(TypeError, match=r"normalize must be True or False; got 1\.0"):
        maghoumi.SoftDTW(False, 0.5, 1.0)


# sdtw-cuda-torch --------------------------------------------------------------------------------------

def test_sdtw_cuda_torch_readme_basic_and_fused():
    torch.manual_seed(0)
    B, N, M, D = 4, 30, 27, 3
    x = torch.randn(B, N, D, requires_grad=True)  # README: device="cuda"
    y = torch.randn(B, M, D, requires_grad=True)
    for loss_fn in (sdtw_cuda_torch.SoftDTW(gamma=1.0),
                    sdtw_cuda_torch.SoftDTW(gamma=1.0, dist="sqeuclidean", fused=True),  # raises on CPU there
                    sdtw_cuda_torch.SoftDTW(gamma=1, normalize=False, fused=True)):  # forecasting example
        x.grad = y.grad = None
        loss = loss_fn(x, y).mean()
        loss.backward()
        x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        ref = F.soft_dtw(x2, y2, 1.0).mean()
        ref.backward()
        close(loss, ref, torch.float32)
        close(x.grad, x2.grad, torch.float32)
        close(y.grad, y2.grad, torch.float32)


def test_sdtw_cuda_torch_examples_and_tests_inputs():
    torch.manual_seed(0)  # examples/toy_example.py
    x = torch.randn(2, 50, 3, requires_grad=True)
    y = torch.randn(2, 47, 3)
    out = sdtw_cuda_torch.SoftDTW(gamma=0.1)(x, y)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    close(out, F.soft_dtw(x, y, 0.1), torch.float32)
    expected = _recursion_reference(_sqdist(x, y).detach().double().numpy(), 0.1)
    assert np.allclose(out.detach().double().numpy(), expected, rtol=1e-5)

    torch.manual_seed(0)  # tests/test_softdtw_small.py
    x = torch.randn(2, 10, 4, requires_grad=True)
    y = torch.randn(2, 11, 4)
    out = sdtw_cuda_torch.SoftDTW(gamma=1.0, dist="sqeuclidean")(x, y)
    close(out, F.soft_dtw(x, y, 1.0), torch.float32)
    torch.manual_seed(0)
    x = torch.randn(1, 6, 2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(1, 5, 2, dtype=torch.float64)
    sdtw = sdtw_cuda_torch.SoftDTW(gamma=1.0, dist="sqeuclidean")
    close(sdtw(x, y), F.soft_dtw(x, y, 1.0))
    assert np.allclose(sdtw(x, y).detach().numpy(), _recursion_reference(_sqdist(x, y).detach().numpy(), 1.0),
                       rtol=1e-12)
    assert torch.autograd.gradcheck(lambda a: sdtw(a, y), (x,))
    close(sdtw_cuda_torch.softdtw(x, y, gamma=1.0, dist="sqeuclidean"), sdtw(x, y))


def test_sdtw_cuda_torch_conventions_and_fixes():
    x, y = case(3, 8, 8, 2)
    for bw in (None, 0, -3):
        close(sdtw_cuda_torch.SoftDTW(gamma=0.5, bandwidth=bw)(x, y), F.soft_dtw(x, y, 0.5))
    close(sdtw_cuda_torch.SoftDTW(gamma=0.5, bandwidth=2)(x, y), F.soft_dtw(x, y, 0.5, bandwidth=2))
    # A radius in (0, 1) keeps the diagonal only (there: a cell is skipped when 0 < bandwidth < |i - j|); the module
    # keeps the value given, as there. (It once stored floor(0.5) = 0 and then read 0 as no band.)
    D = _sqdist(x, y).numpy()
    for bw in (0.5, 2.5):
        module = sdtw_cuda_torch.SoftDTW(gamma=0.5, bandwidth=bw)
        assert module.bandwidth == bw
        assert np.allclose(module(x, y).numpy(), _recursion_reference(D, 0.5, bw), rtol=1e-12)
        close(sdtw_cuda_torch.softdtw(x, y, gamma=0.5, bandwidth=bw), F.soft_dtw(x, y, 0.5, bandwidth=math.floor(bw)))
        close(sdtw_cuda_torch.softdtw(x, y, gamma=0.5, bandwidth=bw, normalize=True),
              F.soft_dtw_divergence(x, y, 0.5, bandwidth=math.floor(bw)))
    for alias in ("sqeuclidean", "SQ_EUCLIDEAN", "squared_euclidean"):
        close(sdtw_cuda_torch.SoftDTW(dist=alias)(x, y), F.soft_dtw(x, y, 1.0))
    close(sdtw_cuda_torch.SoftDTW(normalize=True)(x, y), F.soft_dtw_divergence(x, y, 1.0))
    x, y = case(3, 8, 13, 2)  # normalize with N != M: refused there
    close(sdtw_cuda_torch.softdtw(x, y, gamma=0.3, normalize=True), F.soft_dtw_divergence(x, y, 0.3))
    close(sdtw_cuda_torch.softdtw(x, y, gamma=0.3, bandwidth=1), F.soft_dtw(x, y, 0.3, bandwidth=1))
    close(sdtw_cuda_torch.softdtw(x, y, gamma=0.0), F.dtw(x, y))
    out = sdtw_cuda_torch.SoftDTW(gamma=0.3)(x[0], y[0])  # unbatched: (1,), as there
    assert out.shape == (1,)
    close(out, F.soft_dtw(x[:1], y[:1], 0.3))
    with pytest.warns(UserWarning, match="fused=False changes nothing"):
        sdtw = sdtw_cuda_torch.SoftDTW(fused=False)
    close(sdtw(x, y), F.soft_dtw(x, y, 1.0))
    with pytest.raises(ValueError, match="fused=True needs a cost computed inside the kernel"):
        sdtw_cuda_torch.SoftDTW(dist="cosine", fused=True)
    with pytest.raises(ValueError, match="Unknown dist='dtw'"):
        sdtw_cuda_torch.SoftDTW(dist="dtw")
    with pytest.raises(ValueError, match="gamma must be a finite number"):
        sdtw_cuda_torch.SoftDTW(gamma=math.nan)
    with pytest.raises(TypeError):
        sdtw_cuda_torch.SoftDTW(0.1)  # keyword-only, as there
    with pytest.raises(TypeError):
        sdtw_cuda_torch.softdtw(x, y, 0.1)


def test_sdtw_cuda_torch_barycenter_readme():
    torch.manual_seed(0)
    sequences = torch.randn(10, 40, 3)  # README: (10, 100, 3) on cuda
    bary = sdtw_cuda_torch.softdtw_barycenter(sequences, gamma=1.0, max_iter=30, lr=0.1)
    assert isinstance(bary, torch.Tensor) and bary.shape == (40, 3) and not bary.requires_grad
    w = torch.full((10,), 0.1)
    ref = softdtw.soft_dtw_barycenter(sequences, 1.0, weights=w, max_iter=30, tol=1e-5).barycenter
    close(bary, ref, torch.float32)

    def objective(z):
        return float(F.soft_dtw(z.expand(10, -1, -1), sequences, 1.0).mean())

    assert objective(bary) < objective(sequences.mean(0))  # better than the start (the weighted mean)
    # BARYCENTERS.md: weights and init.
    seq5 = sequences[:5]
    weights = torch.tensor([2.0, 1.0, 1.0, 1.0, 1.0])
    got = sdtw_cuda_torch.softdtw_barycenter(seq5, gamma=1.0, weights=weights, max_iter=20)
    ref = softdtw.soft_dtw_barycenter(seq5, 1.0, weights=weights / weights.sum(), max_iter=20, tol=1e-5).barycenter
    close(got, ref, torch.float32)
    init = seq5.mean(0)
    got = sdtw_cuda_torch.softdtw_barycenter_cpu(seq5, gamma=1.0, init=init, max_iter=20)
    ref = softdtw.soft_dtw_barycenter(seq5, 1.0, weights=torch.full((5,), 0.2), init=init, max_iter=20, tol=1e-5)
    close(got, ref.barycenter, torch.float32)
    # examples/barycenter_example.py: block waves, gamma=1 (an int), fused=True.
    torch.manual_seed(0)
    waves = torch.zeros(4, 60)
    for i in range(4):
        waves[i, 20 + 3 * i:40 + 2 * i] = 1.0 + 0.2 * i
    X = (waves + 0.1 * torch.randn_like(waves)).unsqueeze(-1)
    got = sdtw_cuda_torch.softdtw_barycenter(X, gamma=1, max_iter=15, lr=0.1, fused=True, verbose=False)
    ref = softdtw.soft_dtw_barycenter(X, 1.0, weights=torch.full((4,), 0.25), max_iter=15).barycenter
    close(got, ref, torch.float32)
    with pytest.warns(UserWarning, match=r"lr=0\.05 changes nothing"):
        sdtw_cuda_torch.softdtw_barycenter(seq5, gamma=1.0, max_iter=2, lr=0.05)


# tslearn ----------------------------------------------------------------------------------------------

def test_tslearn_docstring_example():
    soft_dtw_loss = tslearn.SoftDTWLossPyTorch(gamma=0.1)
    x = torch.zeros((4, 3, 2), requires_grad=True)
    y = torch.arange(0, 24).reshape(4, 3, 2)
    soft_dtw_loss_mean_value = soft_dtw_loss(x, y).mean()
    assert soft_dtw_loss_mean_value.item() == pytest.approx(1081.0, rel=1e-6)
    soft_dtw_loss_mean_value.backward()
    expected = -torch.arange(24, dtype=torch.float32).reshape(4, 3, 2) / 2  # tslearn's printed x.grad
    assert torch.allclose(x.grad, expected, atol=1e-4)


def _tslearn_reference():
    metrics = pytest.importorskip("tslearn.metrics")
    return metrics.SoftDTWLossPyTorch


@pytest.mark.parametrize("kwargs,N,M", [
    ({"gamma": 0.1}, 12, 12),
    ({"gamma": 1.0}, 12, 17),
    ({"gamma": 0.5, "normalize": True}, 12, 17),
    ({"gamma": 0.5, "dist_func": l1_dist}, 9, 14),
    ({"gamma": 0.5, "global_constraint": "sakoe_chiba", "sakoe_chiba_radius": 2}, 12, 17),
    ({"gamma": 0.5, "global_constraint": "sakoe_chiba"}, 10, 10),
    ({"gamma": 0.5, "sakoe_chiba_radius": 0}, 10, 13),
    ({"gamma": 0.5, "global_constraint": "itakura"}, 12, 15),
    ({"gamma": 0.5, "itakura_max_slope": 3.0, "normalize": True}, 12, 15),
])
def test_tslearn_against_tslearn(kwargs, N, M):
    Ref = _tslearn_reference()
    x, y = case(4, N, M, 3, dtype=torch.float32, seed=N + M)
    x.requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    got = tslearn.SoftDTWLossPyTorch(**kwargs)(x, y)
    ref = Ref(**kwargs)(x_ref, y.clone())
    close(got, ref.detach(), torch.float32)
    got.sum().backward()
    ref.sum().backward()
    # Gradients against the float64 gradient: tslearn's backward reads R rounded to float32, which costs
    # it up to ~3e-5 at gamma = 0.1; the adapter's float32 gradient stays within 1e-5.
    x64 = x.detach().double().requires_grad_()
    y64 = y.double()
    options = dict(tslearn._native_options(**kwargs))
    fn = F.soft_dtw_divergence if options.pop("normalize", False) else F.soft_dtw
    native = fn(x64, y64, options.pop("gamma"), **options)
    native.sum().backward()
    close(x.grad.double(), x64.grad, torch.float32)
    assert rel_err(x_ref.grad, x64.grad) < 1e-4
    # float64 (tslearn rounds it through float32): against the native API.
    close(tslearn.SoftDTWLossPyTorch(**kwargs)(x64.detach(), y64), native.detach())


def test_tslearn_positional_order_and_checks():
    x, y = case(2, 7, 9, 2)
    close(tslearn.SoftDTWLossPyTorch(0.2, True, l1_dist)(x, y), F.soft_dtw_divergence(x, y, 0.2, cost="l1"))
    close(tslearn.SoftDTWLossPyTorch(0.2, False, None, "itakura", None, 3.0)(x, y),
          F.soft_dtw(x, y, 0.2, itakura_max_slope=3.0))
    with pytest.raises(ValueError, match="global_constraint is None, so the constraint to use is ambiguous"):
        tslearn.SoftDTWLossPyTorch(sakoe_chiba_radius=2, itakura_max_slope=2.0)
    with pytest.raises(ValueError, match="global_constraint must be"):
        tslearn.SoftDTWLossPyTorch(global_constraint="band")
    with pytest.raises(TypeError, match="normalize must be True or False; got l1_dist"):
        tslearn.SoftDTWLossPyTorch(0.1, l1_dist)  # pysdtw's order
    with pytest.raises(TypeError, match="gamma must be a number"):
        tslearn.SoftDTWLossPyTorch(True, 0.1)  # Maghoumi's order


# Every positional pattern of the four libraries --------------------------------------------------------

def _meaning(**options):
    """The native call a pattern means: options of softdtw.SoftDTW, written out by hand per pattern."""
    return options


# (library, positional args, keyword args, what the call means in that library as native options).
# Bands are checked on N = M, where the libraries' bands and softdtw's coincide.
PATTERNS = [
    # Maghoumi: SoftDTW(use_cuda, gamma=1.0, normalize=False, bandwidth=None, dist_func=None)
    ("maghoumi", (False,), {}, _meaning(gamma=1.0)),
    ("maghoumi", (True,), {}, _meaning(gamma=1.0)),
    ("maghoumi", (False, 0.3), {}, _meaning(gamma=0.3)),
    ("maghoumi", (True, 0.3), {}, _meaning(gamma=0.3)),
    ("maghoumi", (False, 0.3, True), {}, _meaning(gamma=0.3, normalize=True)),
    ("maghoumi", (False, 0.3, True, 2), {}, _meaning(gamma=0.3, normalize=True, bandwidth=2)),
    ("maghoumi", (False, 0.3, False, 0), {}, _meaning(gamma=0.3)),
    ("maghoumi", (False, 0.3, True, None, l1_dist), {}, _meaning(gamma=0.3, normalize=True, cost="l1")),
    ("maghoumi", (True,), {"gamma": 0.3}, _meaning(gamma=0.3)),
    ("maghoumi", (), {"use_cuda": False, "gamma": 0.3, "normalize": True, "bandwidth": 2},
     _meaning(gamma=0.3, normalize=True, bandwidth=2)),
    # pysdtw: SoftDTW(gamma=1.0, dist_func=None, use_cuda=True, bandwidth=None)
    ("pysdtw", (), {}, _meaning(gamma=1.0)),
    ("pysdtw", (0.3,), {}, _meaning(gamma=0.3)),
    ("pysdtw", (0.3, l1_dist), {}, _meaning(gamma=0.3, cost="l1")),
    ("pysdtw", (0.3, None), {}, _meaning(gamma=0.3)),
    ("pysdtw", (0.3, l1_dist, False), {}, _meaning(gamma=0.3, cost="l1")),
    ("pysdtw", (0.3, None, True), {}, _meaning(gamma=0.3)),
    ("pysdtw", (0.3, None, False, 2), {}, _meaning(gamma=0.3, bandwidth=2)),
    ("pysdtw", (0.3, l1_dist, False, 2), {}, _meaning(gamma=0.3, cost="l1", bandwidth=2)),
    ("pysdtw", (), {"gamma": 0.3, "dist_func": l1_dist, "use_cuda": False}, _meaning(gamma=0.3, cost="l1")),
    # tslearn: SoftDTWLossPyTorch(gamma=1.0, normalize=False, dist_func=None, global_constraint=None,
    #                              sakoe_chiba_radius=None, itakura_max_slope=None)
    ("tslearn", (0.3,), {}, _meaning(gamma=0.3)),
    ("tslearn", (0.3, True), {}, _meaning(gamma=0.3, normalize=True)),
    ("tslearn", (0.3, False), {}, _meaning(gamma=0.3)),
    ("tslearn", (0.3, False, l1_dist), {}, _meaning(gamma=0.3, cost="l1")),
    ("tslearn", (0.3, True, None), {}, _meaning(gamma=0.3, normalize=True)),
    ("tslearn", (0.3, True, l1_dist, "sakoe_chiba"), {}, _meaning(gamma=0.3, normalize=True, cost="l1", bandwidth=1)),
    ("tslearn", (0.3, False, None, "sakoe_chiba", 2), {}, _meaning(gamma=0.3, bandwidth=2)),
    ("tslearn", (0.3, False, None, None, 2), {}, _meaning(gamma=0.3, bandwidth=2)),
    ("tslearn", (0.3, False, None, "itakura"), {}, _meaning(gamma=0.3, itakura_max_slope=2.0)),
    ("tslearn", (0.3, False, None, None, None, 3.0), {}, _meaning(gamma=0.3, itakura_max_slope=3.0)),
    ("tslearn", (), {"gamma": 0.3, "normalize": True, "dist_func": l1_dist},
     _meaning(gamma=0.3, normalize=True, cost="l1")),
    ("tslearn", (), {"gamma": 0.3, "sakoe_chiba_radius": 2}, _meaning(gamma=0.3, bandwidth=2)),
    # sdtw-cuda-torch: SoftDTW(*, gamma=1.0, bandwidth=None, normalize=False, dist="sqeuclidean", fused=None)
    ("sdtw_cuda_torch", (), {"gamma": 0.3}, _meaning(gamma=0.3)),
    ("sdtw_cuda_torch", (), {"gamma": 0.3, "bandwidth": 2, "normalize": True},
     _meaning(gamma=0.3, bandwidth=2, normalize=True)),
    ("sdtw_cuda_torch", (), {"gamma": 0.3, "bandwidth": 0}, _meaning(gamma=0.3)),
    ("sdtw_cuda_torch", (), {"gamma": 0.3, "dist": "sqeuclidean", "fused": True}, _meaning(gamma=0.3)),
    ("sdtw_cuda_torch", (), {"gamma": 0.3, "fused": None, "normalize": True}, _meaning(gamma=0.3, normalize=True)),
    # Keyword-only there, so these raise in sdtw-cuda-torch; elsewhere gamma = 0.3 is their only reading.
    ("sdtw_cuda_torch", (0.3,), {}, _meaning(gamma=0.3)),
    ("sdtw_cuda_torch", (0.3,), {"fused": True}, _meaning(gamma=0.3)),
    # bandwidth=0 by keyword: "no band" in the three libraries that call it bandwidth.
    ("maghoumi", (), {"use_cuda": False, "gamma": 0.3, "bandwidth": 0}, _meaning(gamma=0.3)),
    ("pysdtw", (), {"gamma": 0.3, "use_cuda": False, "bandwidth": 0}, _meaning(gamma=0.3)),
]
RAISES_THERE = {("sdtw_cuda_torch", (0.3,))}

ENTRY_POINTS = {
    "native": softdtw.SoftDTW,
    "maghoumi": maghoumi.SoftDTW,
    "pysdtw": pysdtw.SoftDTW,
    "tslearn": tslearn.SoftDTWLossPyTorch,
    "sdtw_cuda_torch": sdtw_cuda_torch.SoftDTW,
}


def _expected(meaning, x, y):
    meaning = dict(meaning)
    if meaning.get("cost") == "l1":
        meaning["cost"] = l1_dist
    return softdtw.SoftDTW(**meaning)(x, y)


@pytest.mark.parametrize("lib,args,kwargs,meaning", PATTERNS,
                         ids=[f"{p[0]}{p[1]}{sorted(p[2])}" for p in PATTERNS])
def test_every_positional_pattern_works_as_there_or_raises(lib, args, kwargs, meaning):
    x, y = case(2, 7, 7, 2, seed=5)
    for where, entry in ENTRY_POINTS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # use_cuda / fused notes
            try:
                value = entry(*args, **kwargs)(x, y)
            except (TypeError, ValueError) as err:
                if where == lib:
                    assert (lib, args) in RAISES_THERE, f"{lib}'s own adapter refused its own call: {err}"
                if where == "native" and isinstance(err, TypeError) and (len(args) > 1 or any(
                        k in kwargs for k in ("dist", "fused", "global_constraint", "sakoe_chiba_radius"))
                        or (args and isinstance(args[0], bool))):
                    assert f"softdtw.compat.{lib} import" in str(err), str(err)
                continue
        # It ran: it must mean what the call means in its library.
        assert not (where == lib and (lib, args) in RAISES_THERE), f"{where} accepted {args}, which raises there"
        close(value, _expected(meaning, x, y))
        if where == "native":  # the native module reads only gamma positionally
            assert len(args) <= 1 and not any(isinstance(a, bool) for a in args)


@pytest.mark.parametrize("lib,args,kwargs,meaning", [p for p in PATTERNS if len(p[1]) > 1 or (
    p[1] and isinstance(p[1][0], bool))])
def test_native_divergence_names_the_adapter_too(lib, args, kwargs, meaning):
    with pytest.raises(TypeError, match=rf"softdtw\.SoftDTWDivergence.* softdtw\.compat\.{lib} import"):
        softdtw.SoftDTWDivergence(*args, **kwargs)


@pytest.mark.parametrize("call,lib", [
    (lambda: softdtw.SoftDTW(True, 0.1), "maghoumi"),
    (lambda: softdtw.SoftDTW(False, 0.1), "maghoumi"),
    (lambda: softdtw.SoftDTW(True), "maghoumi"),
    (lambda: softdtw.SoftDTW(gamma=True), "maghoumi"),
    (lambda: softdtw.SoftDTW(0.1, l1_dist), "pysdtw"),
    (lambda: softdtw.SoftDTW(0.1, None, False), "pysdtw"),
    (lambda: softdtw.SoftDTW(0.1, False, l1_dist), "tslearn"),
    (lambda: softdtw.SoftDTW(0.1, True), "tslearn"),
    (lambda: softdtw.SoftDTW(gamma=0.1, global_constraint="itakura"), "tslearn"),
    (lambda: softdtw.SoftDTW(gamma=0.1, dist="sqeuclidean", fused=True), "sdtw_cuda_torch"),
    (lambda: softdtw.SoftDTW(gamma=0.1, fused=False), "sdtw_cuda_torch"),
])
def test_native_message_names_the_right_adapter(call, lib):
    with pytest.raises(TypeError) as err:
        call()
    msg = str(err.value)
    assert f"softdtw.compat.{lib} import" in msg
    assert all(f"softdtw.compat.{other} import" not in msg for other in ENTRY_POINTS if other != lib)


def test_native_message_gives_the_native_call():
    with pytest.raises(TypeError, match=r"write it for softdtw as softdtw\.SoftDTW\(gamma=0\.1, normalize=True, "
                                        r"bandwidth=2\.0\)"):
        softdtw.SoftDTW(True, 0.1, True, 2)
    with pytest.raises(TypeError, match=r"softdtw\.SoftDTW\(gamma=0\.1, dist_func=l1_dist\)"):
        softdtw.SoftDTW(0.1, l1_dist)


# Gradients through every adapter ----------------------------------------------------------------------

@pytest.mark.parametrize("make,native", [
    (lambda: maghoumi.SoftDTW(False, 0.4, True), lambda x, y: F.soft_dtw_divergence(x, y, 0.4)),
    (lambda: pysdtw.SoftDTW(0.4, l1_dist, False), lambda x, y: F.soft_dtw(x, y, 0.4, cost="l1")),
    (lambda: tslearn.SoftDTWLossPyTorch(0.4, True, None, "sakoe_chiba", 1),
     lambda x, y: F.soft_dtw_divergence(x, y, 0.4, bandwidth=1)),
    (lambda: sdtw_cuda_torch.SoftDTW(gamma=0.4, normalize=True, bandwidth=2),
     lambda x, y: F.soft_dtw_divergence(x, y, 0.4, bandwidth=2)),
])
def test_gradients_flow_through_the_adapters(make, native):
    x, y = case(3, 8, 11, 2, requires_grad=True)
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    make()(x, y).sum().backward()
    native(x2, y2).sum().backward()
    close(x.grad, x2.grad)
    close(y.grad, y2.grad)


def test_learnable_gamma_through_an_adapter():
    x, y = case(2, 6, 6, 1)
    gamma = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
    loss = tslearn.SoftDTWLossPyTorch(gamma)
    assert [n for n, _ in loss.named_parameters()] == ["gamma"]
    loss(x, y).sum().backward()
    g2 = gamma.detach().clone().requires_grad_()
    F.soft_dtw(x, y, g2).sum().backward()
    close(gamma.grad, g2.grad)


# PackedSequence in the native API ---------------------------------------------------------------------

def _packs(enforce_sorted):
    lens_x, lens_y = [5, 9, 3, 7], [6, 4, 8, 8]
    if enforce_sorted:  # pack_sequence(enforce_sorted=True) needs decreasing lengths
        lens_x, lens_y = sorted(lens_x, reverse=True), sorted(lens_y, reverse=True)
    xs, ys = _packed_lists(7, lens_x, lens_y, dims=2)
    return xs, ys, torch.tensor(lens_x), torch.tensor(lens_y)


@pytest.mark.parametrize("enforce_sorted", [False, True])
def test_packed_inputs_in_every_native_function(enforce_sorted):
    xs, ys, lx, ly = _packs(enforce_sorted)
    px, py = pack_sequence(xs, enforce_sorted=enforce_sorted), pack_sequence(ys, enforce_sorted=enforce_sorted)
    X, Y = pad_sequence(xs, batch_first=True), pad_sequence(ys, batch_first=True)
    for fn in (F.soft_dtw, F.soft_dtw_divergence, F.soft_dtw_alignment):
        close(fn(px, py, 0.3), fn(X, Y, 0.3, x_lengths=lx, y_lengths=ly))
        close(fn(px, Y, 0.3, bandwidth=1), fn(X, Y, 0.3, bandwidth=1, x_lengths=lx))
        close(fn(X, py, 0.3), fn(X, Y, 0.3, y_lengths=ly))
    close(F.dtw(px, py), F.dtw(X, Y, x_lengths=lx, y_lengths=ly))
    for a, b in zip(F.dtw_path(px, py), F.dtw_path(X, Y, x_lengths=lx, y_lengths=ly)):
        assert torch.equal(a, b)
    close(softdtw.SoftDTW(gamma=0.3, reduction="sum")(px, py),
          F.soft_dtw(X, Y, 0.3, x_lengths=lx, y_lengths=ly).sum())
    # Pair b stays pair b: one call per pair.
    per_pair = torch.stack([F.soft_dtw(a, b, 0.3) for a, b in zip(xs, ys)])
    close(F.soft_dtw(px, py, 0.3), per_pair)


def test_packed_from_pack_padded_sequence_unsorted_and_gradients():
    xs, ys, lx, ly = _packs(False)
    X = pad_sequence(xs, batch_first=True).requires_grad_()
    Y = pad_sequence(ys, batch_first=True)
    px = pack_padded_sequence(X, lx, batch_first=True, enforce_sorted=False)
    v = F.soft_dtw(px, Y, 0.5, y_lengths=ly)
    X2 = X.detach().clone().requires_grad_()
    ref = F.soft_dtw(X2, Y, 0.5, x_lengths=lx, y_lengths=ly)
    close(v, ref)
    v.sum().backward()
    ref.sum().backward()
    close(X.grad, X2.grad)


def test_packed_univariate_series_and_errors():
    xs = [torch.randn(n, dtype=torch.float64) for n in (4, 6)]
    ys = torch.randn(2, 5, 1, dtype=torch.float64)
    X = pad_sequence(xs, batch_first=True).unsqueeze(-1)
    close(F.soft_dtw(pack_sequence(xs, enforce_sorted=False), ys, 0.2), F.soft_dtw(X, ys, 0.2, x_lengths=[4, 6]))
    px = pack_sequence([x.unsqueeze(-1) for x in xs], enforce_sorted=False)
    with pytest.raises(ValueError, match="x is a PackedSequence, which carries its own lengths, and x_lengths"):
        F.soft_dtw(px, ys, 0.2, x_lengths=[4, 6])
    with pytest.raises(ValueError, match="y is a PackedSequence, .* y_lengths was given too"):
        softdtw.SoftDTW(gamma=0.2)(ys, px, None, [4, 6])


# On the GPU (run with `pytest -m cuda`) -----------------------------------------------------------------

@pytest.mark.cuda
def test_adapters_and_packs_on_cuda():
    x, y = case(3, 20, 17, 2, device="cuda", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # use_cuda=True on CUDA tensors: nothing to warn about
        got = [maghoumi.SoftDTW(True, 0.3, True)(x, y), pysdtw.SoftDTW(0.3, None, True, 2)(x, y),
               tslearn.SoftDTWLossPyTorch(0.3, False, None, "itakura")(x, y),
               sdtw_cuda_torch.softdtw(x, y, gamma=0.3, fused=True)]
    xc, yc = x.detach().cpu(), y.detach().cpu()
    want = [F.soft_dtw_divergence(xc, yc, 0.3), F.soft_dtw(xc, yc, 0.3, bandwidth=2),
            F.soft_dtw(xc, yc, 0.3, itakura_max_slope=2.0), F.soft_dtw(xc, yc, 0.3)]
    for g, w in zip(got, want):
        assert g.device.type == "cuda"
        assert rel_err(g, w) <= 1e-9
    with pytest.warns(UserWarning, match="use_cuda=False, but the inputs are on cuda"):
        maghoumi.SoftDTW(False)(x, y)
    xs, ys, lx, ly = _packs(False)
    px = pack_sequence([t.cuda() for t in xs], enforce_sorted=False)
    py = pack_sequence([t.cuda() for t in ys], enforce_sorted=False)
    X, Y = pad_sequence(xs, batch_first=True), pad_sequence(ys, batch_first=True)
    v = pysdtw.SoftDTW(0.3)(px, py)
    assert v.device.type == "cuda"
    assert rel_err(v, F.soft_dtw(X, Y, 0.3, x_lengths=lx, y_lengths=ly)) <= 1e-9
