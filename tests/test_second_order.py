"""Second derivatives: until the double backward exists, create_graph=True must raise, never return a
gradient without its graph (a gradient penalty would then silently train on the wrong loss)."""
import pytest
import torch

import softdtw
from tests._helpers import case

BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _entry_points(backend):
    """(name, fn(x, y) -> scalar) for every differentiable public entry point."""
    kw = dict(backend=backend)
    return [
        ("soft_dtw", lambda x, y: softdtw.soft_dtw(x, y, 0.7, **kw).sum()),
        ("soft_dtw l1", lambda x, y: softdtw.soft_dtw(x, y, 0.7, cost="l1", **kw).sum()),
        ("soft_dtw cosine", lambda x, y: softdtw.soft_dtw(x, y, 0.7, cost="cosine", **kw).sum()),
        ("soft_dtw band, lengths", lambda x, y: softdtw.soft_dtw(
            x, y, 0.7, bandwidth=2, x_lengths=[6, 4], y_lengths=[5, 5], **kw).sum()),
        ("soft_dtw_divergence", lambda x, y: softdtw.soft_dtw_divergence(x, y, 0.7, **kw).sum()),
        ("soft_dtw_from_cost", lambda x, y: softdtw.soft_dtw_from_cost(
            softdtw.costs.pairwise_cost("sqeuclidean", x, y), 0.7, **kw).sum()),
        ("dtw", lambda x, y: softdtw.dtw(x, y, **kw).sum()),
        ("SoftDTW", lambda x, y: softdtw.SoftDTW(gamma=0.7, backend=backend, reduction="mean")(x, y)),
        ("SoftDTW normalize", lambda x, y: softdtw.SoftDTW(
            gamma=0.7, normalize=True, backend=backend, reduction="sum")(x, y)),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_graph_raises_on_every_entry_point(backend):
    device = "cuda" if backend == "cuda" else "cpu"
    for name, fn in _entry_points(backend):
        x, y = (t.to(device) for t in case(2, 6, 5, 2, seed=7))
        x.requires_grad_(True)
        with pytest.raises(NotImplementedError, match="create_graph=True"):
            torch.autograd.grad(fn(x, y), x, create_graph=True)
        # the first order still works
        (g,) = torch.autograd.grad(fn(x, y), x)
        assert torch.isfinite(g).all() and g.abs().sum() > 0, name


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_create_graph_raises_for_a_learnable_gamma_and_a_cost(backend):
    x, y = case(2, 6, 5, 2, seed=8)
    gamma = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="second-order"):
        torch.autograd.grad(softdtw.soft_dtw(x, y, gamma, backend=backend).sum(), gamma, create_graph=True)
    C = torch.rand(2, 6, 5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="second-order"):
        torch.autograd.grad(softdtw.soft_dtw_from_cost(C, 0.5, backend=backend).sum(), C, create_graph=True)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_create_graph_raises_under_backward_too():
    """loss.backward(create_graph=True), the gradient-penalty idiom, is refused the same way."""
    x, y = case(2, 6, 5, 2, seed=9)
    x.requires_grad_(True)
    with pytest.raises(NotImplementedError, match="create_graph"):
        softdtw.soft_dtw(x, y, 0.3).sum().backward(create_graph=True)
