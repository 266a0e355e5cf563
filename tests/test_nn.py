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
    # Maghoumi's positional SoftDTW(use_cuda, ...) is not softdtw's: it raises and names the adapter.
    with pytest.raises(TypeError, match=r"softdtw\.compat\.maghoumi import SoftDTW"):
        softdtw.SoftDTW(True)

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


@pytest.mark.parametrize("cls", [softdtw.SoftDTW, softdtw.SoftDTWDivergence])
def test_only_gamma_is_positional(cls):
    x, y = case(2, 6, 7, 2)
    assert torch.equal(cls(0.3)(x, y), cls(gamma=0.3)(x, y))
    with pytest.raises(TypeError, match=r"takes only gamma positionally .* by keyword"):
        cls(0.3, 2)
    with pytest.raises(TypeError, match="gamma is a number, not a bool"):
        cls(gamma=False)
    # The keyword-only arguments still work as keywords.
    v = cls(0.3, bandwidth=1, reduction="sum", cost="l1")(x, y)
    ref = softdtw.soft_dtw_divergence if cls is softdtw.SoftDTWDivergence else softdtw.soft_dtw
    assert torch.allclose(v, ref(x, y, 0.3, bandwidth=1, cost="l1").sum())


def test_help_shows_the_real_signature():
    import inspect

    params = inspect.signature(softdtw.SoftDTW.__init__).parameters
    assert params["gamma"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in params.items() if n not in ("self", "gamma"))


def test_packed_sequence_input():
    from torch.nn.utils.rnn import pack_sequence

    torch.manual_seed(0)
    xs = [torch.randn(n, 2, dtype=torch.float64) for n in (5, 9, 3)]
    y = torch.randn(3, 7, 2, dtype=torch.float64)
    packed = pack_sequence(xs, enforce_sorted=False)
    padded = torch.nn.utils.rnn.pad_sequence(xs, batch_first=True)
    loss = softdtw.SoftDTW(gamma=0.5, normalize=True)
    assert torch.allclose(loss(packed, y), loss(padded, y, x_lengths=[5, 9, 3]), rtol=1e-12)


def test_bandwidth_zero_is_refused_by_the_module():
    # bandwidth <= 0 is "no band" for Maghoumi, pysdtw and sdtw-cuda-torch, the diagonal for tslearn.
    for bw in (0, 0.0, -1):
        with pytest.raises(ValueError, match=r"bandwidth=None for no band.*soft_dtw\(x, y, gamma, bandwidth=0\)"):
            softdtw.SoftDTW(gamma=0.1, bandwidth=bw)
    x, y = case(2, 6, 6, 1)
    # A fractional radius is tslearn's (ceil on one side, floor on the other: issue 26 item 7), as in soft_dtw.
    assert torch.allclose(softdtw.SoftDTW(gamma=0.1, bandwidth=0.5)(x, y), softdtw.soft_dtw(x, y, 0.1, bandwidth=0.5))
