"""DILATE (softdtw.dilate_loss, softdtw.DILATELoss): against the path oracle at tiny sizes, against pure autograd
through the reference forward, and against the published definition's normalisation (vincent-leguen/DILATE)."""
import pytest
import torch

import softdtw
import softdtw.costs
from softdtw._checks import make_window
from softdtw._windows import valid_cells
from softdtw.backends import get_backend
from softdtw.backends import reference as ref
from tests import _paths
from tests._helpers import case

BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _has_hvp(backend) -> bool:
    return getattr(get_backend(backend), "hvp_cost", None) is not None


@pytest.mark.parametrize("gamma", [0.05, 1.0])
def test_values_match_the_path_oracle_with_lengths_band_and_unequal_lengths(gamma):
    x, y = case(3, 5, 4, 2, seed=1)
    xl, yl = [5, 3, 4], [4, 4, 2]
    loss, shape, temporal = softdtw.dilate_loss(x, y, 0.3, gamma, bandwidth=1, x_lengths=xl, y_lengths=yl,
                                                backend="reference", return_terms=True)
    C = softdtw.costs.sqeuclidean(x, y)
    window = make_window(torch.tensor(xl), torch.tensor(yl), 5, 4, 1, None)
    valid = valid_cells(torch.tensor(xl), torch.tensor(yl), window, 5, 4)
    for b in range(3):
        n, m = xl[b], yl[b]
        v, E, _ = _paths.oracle(C[b, :n, :m], gamma, allowed=valid[b, :n, :m])
        i, j = torch.arange(n, dtype=torch.float64).view(n, 1), torch.arange(m, dtype=torch.float64).view(1, m)
        t = (E * ((i - j) / n) ** 2).sum()  # the default Omega divides by the pair's own x length
        assert torch.isclose(shape[b], v, rtol=1e-10) and torch.isclose(temporal[b], t, rtol=1e-10, atol=1e-14)
        assert torch.isclose(loss[b], 0.3 * v + 0.7 * t, rtol=1e-10)


def _published(outputs, targets, alpha, gamma):
    """The published loss (loss/dilate_loss.py of vincent-leguen/DILATE), written from its definition: the batch
    mean of soft-DTW on D_k = squared distances (targets_k rows, outputs_k columns), and
    sum_ij mean_k(E_k)_ij (i - j)^2 / N^2 with 1-based i, j. Computed by the path oracle, float64."""
    B, N, _ = outputs.shape
    shapes, paths = [], []
    for k in range(B):
        D = softdtw.costs.sqeuclidean(targets[k:k + 1], outputs[k:k + 1])[0]
        v, E, _ = _paths.oracle(D, gamma)
        shapes.append(v)
        paths.append(E)
    path = torch.stack(paths).mean(0)
    idx = torch.arange(1, N + 1, dtype=torch.float64)
    Omega = (idx.view(-1, 1) - idx.view(1, -1)) ** 2
    shape = torch.stack(shapes).mean()
    temporal = (path * Omega).sum() / (N * N)
    return alpha * shape + (1 - alpha) * temporal, shape, temporal


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.8])
def test_reduction_mean_is_the_published_normalisation(alpha):
    outputs, targets = case(3, 5, 5, 1, seed=2)
    want, want_shape, want_temporal = _published(outputs, targets, alpha, 0.1)
    got = softdtw.DILATELoss(alpha, 0.1, reduction="mean", backend="reference")(outputs, targets)
    assert torch.isclose(got, want, rtol=1e-10)
    _, shape, temporal = softdtw.dilate_loss(outputs, targets, alpha, 0.1, backend="reference", return_terms=True)
    assert torch.isclose(shape.mean(), want_shape, rtol=1e-10)
    assert torch.isclose(temporal.mean(), want_temporal, rtol=1e-10)


def _pure_dilate(x, y, alpha, gamma, omega, x_lengths, y_lengths, bandwidth=None, divergence=False):
    """DILATE by double autograd through the reference forward run on tensors that require grad."""
    B, N, _ = x.shape
    M = y.shape[1]
    xl, yl = torch.as_tensor(x_lengths), torch.as_tensor(y_lengths)
    C = softdtw.costs.sqeuclidean(x, y)
    v = ref.forward_cost(C, gamma, xl, yl, make_window(xl, yl, N, M, bandwidth, None), "store")[0]
    (E,) = torch.autograd.grad(v.sum(), C, create_graph=True)
    shape = v
    if divergence:
        sx = ref.forward_cost(softdtw.costs.sqeuclidean(x, x), gamma, xl, xl,
                              make_window(xl, xl, N, N, bandwidth, None), "store")[0]
        sy = ref.forward_cost(softdtw.costs.sqeuclidean(y, y), gamma, yl, yl,
                              make_window(yl, yl, M, M, bandwidth, None), "store")[0]
        shape = v - 0.5 * sx - 0.5 * sy
    return alpha * shape + (1 - alpha) * (E * omega).sum((1, 2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("divergence", [False, True])
def test_gradients_match_pure_autograd(backend, divergence):
    dev = "cuda" if backend == "cuda" else "cpu"
    x, y = case(2, 6, 5, 2, seed=3)
    xl, yl = [6, 4], [5, 3]
    omega = torch.rand(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    gamma = torch.tensor(0.3, dtype=torch.float64)
    xp, yp, gp, op = (t.clone().requires_grad_() for t in (x, y, gamma, omega))
    want = _pure_dilate(xp, yp, 0.4, gp, op, xl, yl, bandwidth=2, divergence=divergence)
    gwant = torch.autograd.grad(want.sum(), (xp, yp, gp, op))
    xo, yo, go, oo = (t.clone().to(dev).requires_grad_() for t in (x, y, gamma, omega))

    def ours():
        return softdtw.dilate_loss(xo, yo, 0.4, go, omega=oo, bandwidth=2, x_lengths=xl, y_lengths=yl,
                                   divergence=divergence, backend=backend)

    if not _has_hvp(backend):
        with pytest.raises(NotImplementedError, match=f"{backend} backend"):
            ours()
        with torch.no_grad():  # values need no second order
            assert torch.allclose(ours().cpu(), want.detach(), rtol=1e-9)
        return
    got = ours()
    assert torch.allclose(got.cpu(), want.detach(), rtol=1e-9)
    for a, b in zip(torch.autograd.grad(got.sum(), (xo, yo, go, oo)), gwant):
        assert torch.allclose(a.cpu(), b, rtol=1e-8, atol=1e-11)


def test_omega_as_a_callable_a_batch_tensor_and_the_default():
    x, y = case(2, 4, 6, 1, seed=4)
    xl = [4, 3]
    E = softdtw.soft_dtw_alignment(x, y, 0.2, x_lengths=xl, backend="reference")
    default = softdtw.dilate_loss(x, y, 0.0, 0.2, x_lengths=xl, backend="reference")
    i, j = torch.arange(4.0, dtype=torch.float64).view(4, 1), torch.arange(6.0, dtype=torch.float64).view(1, 6)
    n = torch.tensor(xl, dtype=torch.float64).view(2, 1, 1)
    assert torch.allclose(default, (E * ((i - j) / n) ** 2).sum((1, 2)), rtol=1e-12)
    absolute = softdtw.dilate_loss(x, y, 0.0, 0.2, x_lengths=xl, backend="reference",
                                   omega=lambda i, j, n, m: (i - j).abs())
    assert torch.allclose(absolute, (E * (i - j).abs()).sum((1, 2)), rtol=1e-12)
    per_pair = torch.rand(2, 4, 6, dtype=torch.float64)
    got = softdtw.dilate_loss(x, y, 0.0, 0.2, x_lengths=xl, omega=per_pair, backend="reference")
    assert torch.allclose(got, (E * per_pair).sum((1, 2)), rtol=1e-12)
    # unbatched
    v = softdtw.dilate_loss(x[0], y[0], 0.5, 0.2, backend="reference")
    assert v.dim() == 0


def test_the_module_reduces_learns_gamma_and_checks_its_arguments():
    x, y = case(3, 5, 5, 1, seed=5)
    gamma = torch.nn.Parameter(torch.tensor(0.2, dtype=torch.float64))
    none = softdtw.DILATELoss(0.5, gamma, backend="reference")(x, y)
    assert none.shape == (3,)
    total = softdtw.DILATELoss(0.5, gamma, reduction="sum", backend="reference")(x, y)
    total.backward()
    assert torch.isclose(total, none.sum()) and gamma.grad is not None and torch.isfinite(gamma.grad)
    with pytest.raises(ValueError, match="alpha must be a number in \\[0, 1\\]"):
        softdtw.DILATELoss(1.5, 0.1)
    with pytest.raises(ValueError, match="reduction"):
        softdtw.DILATELoss(0.5, 0.1, reduction="avg")
    with pytest.raises(ValueError, match="alpha must be a number"):
        softdtw.dilate_loss(x, y, -0.1, 0.1)
    with pytest.raises(ValueError, match="broadcastable to \\(B, N, M\\) = \\(3, 5, 5\\)"):
        softdtw.dilate_loss(x, y, 0.5, 0.1, omega=torch.ones(4, 5), backend="reference")
    with pytest.raises(ValueError, match="omega must be finite"):
        softdtw.dilate_loss(x, y, 0.5, 0.1, omega=torch.full((5, 5), float("nan")), backend="reference")


def test_a_double_backward_through_dilate_raises():
    x, y = case(2, 4, 4, 1, seed=6)
    x.requires_grad_()
    loss = softdtw.dilate_loss(x, y, 0.5, 0.1, backend="reference").sum()
    with pytest.raises(NotImplementedError, match="double backward through dilate_loss"):
        torch.autograd.grad(loss, x, create_graph=True)


def test_temporal_term_has_zero_gradient_at_gamma_zero():
    x, y = case(2, 5, 4, 1, seed=7)
    x.requires_grad_()
    t = softdtw.dilate_loss(x, y, 0.0, 0.0, backend="reference").sum()
    (g,) = torch.autograd.grad(t, x)
    assert g.abs().sum() == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_step_has_no_host_sync_and_keeps_the_checks():
    """On cuda the loss checks its values in a kernel read after its own kernels (as soft_dtw does): a training
    step makes no host synchronisation, NaN-padded targets are read as lengths, and a NaN still raises."""
    g = torch.Generator(device="cuda").manual_seed(0)
    pred = torch.randn(8, 24, 1, device="cuda", generator=g, requires_grad=True)
    target = torch.randn(8, 24, 1, device="cuda", generator=g)
    loss = softdtw.DILATELoss(0.5, 0.1, reduction="mean")
    loss(pred, target).backward()  # warm-up: compiles, caches the validation
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss(pred, target).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    padded = target.clone()
    padded[3, 20:] = float("nan")
    got = softdtw.dilate_loss(pred.detach(), padded, 0.5, 0.1)
    want = softdtw.dilate_loss(pred.detach(), target, 0.5, 0.1, y_lengths=[24, 24, 24, 20, 24, 24, 24, 24])
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    bad = target.clone()
    bad[2, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        softdtw.dilate_loss(pred.detach(), bad, 0.5, 0.1)


def test_alpha_as_numpy_scalar():
    """dilate_loss takes alpha as DILATELoss does: any real number in [0, 1], NumPy scalars included."""
    import numpy as np

    x, y = case(2, 8, 9, 1)
    want = softdtw.dilate_loss(x, y, 0.5)
    for alpha in (np.float32(0.5), np.float64(0.5)):
        assert torch.allclose(softdtw.dilate_loss(x, y, alpha), want, rtol=1e-12)
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
        softdtw.dilate_loss(x, y, np.float32(1.5))
