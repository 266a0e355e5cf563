"""SoftDTW / SoftDTWDivergence modules: the keyword arguments users bring from other libraries."""
import pytest
import torch

import softdtw
from tests._helpers import case


def test_returns_one_value_per_pair_by_default_and_reduces_on_request():
    x, y = case(4, 10, 12, 3)
    per_pair = softdtw.SoftDTW(gamma=0.5)(x, y)
    assert per_pair.shape == (4,)
    assert torch.allclose(softdtw.SoftDTW(gamma=0.5, reduction="mean")(x, y), per_pair.mean())
    assert torch.allclose(softdtw.SoftDTW(gamma=0.5, reduction="sum")(x, y), per_pair.sum())
    assert torch.allclose(per_pair, softdtw.soft_dtw(x, y, 0.5))


def test_maghoumi_and_pysdtw_keywords():
    x, y = case(2, 8, 8, 1)
    with pytest.warns(UserWarning, match=r"use_cuda=\.\.\.\) is ignored"):
        loss = softdtw.SoftDTW(use_cuda=False, gamma=0.1, normalize=True, bandwidth=2)
    assert torch.allclose(loss(x, y), softdtw.soft_dtw_divergence(x, y, 0.1, bandwidth=2))
    with pytest.warns(UserWarning, match="ignored"):
        positional = softdtw.SoftDTW(True)  # Maghoumi's SoftDTW(use_cuda, ...)
    assert positional.gamma == 1.0

    def dist_func(a, b):
        return (a.unsqueeze(2) - b.unsqueeze(1)).abs().sum(-1)

    assert torch.allclose(softdtw.SoftDTW(gamma=1.0, dist_func=dist_func)(x, y),
                          softdtw.soft_dtw(x, y, 1.0, cost="l1"))


def test_divergence_module_and_lengths():
    x, y = case(3, 9, 6, 2)
    loss = softdtw.SoftDTWDivergence(gamma=0.3)
    assert loss(x, x).abs().max() == 0
    v = loss(x, y, x_lengths=[9, 4, 2], y_lengths=[6, 6, 1])
    assert v.shape == (3,) and (v >= 0).all()


def test_learnable_gamma_parameter():
    x, y = case(2, 7, 7, 1)
    loss = softdtw.SoftDTW(gamma=torch.nn.Parameter(torch.tensor(1.0, dtype=torch.float64)), reduction="sum")
    assert [n for n, _ in loss.named_parameters()] == ["gamma"]
    loss(x, y).backward()
    assert loss.gamma.grad is not None and torch.isfinite(loss.gamma.grad)


def test_training_step_reduces_the_loss():
    torch.manual_seed(0)
    target = torch.sin(torch.linspace(0, 6, 30)).view(1, 30, 1).repeat(4, 1, 1)
    pred = torch.zeros(4, 30, 1, requires_grad=True)
    opt = torch.optim.Adam([pred], lr=0.1)
    loss_fn = softdtw.SoftDTW(gamma=0.1, normalize=True, reduction="mean")
    first = loss_fn(pred, target).item()
    for _ in range(30):
        opt.zero_grad()
        loss = loss_fn(pred, target)
        loss.backward()
        opt.step()
    assert loss.item() < 0.2 * first
