"""Every bad input gets a clear error: what was wrong, what was expected, how to fix it."""
import math

import pytest
import torch

import softdtw
from tests._helpers import case


@pytest.fixture
def xy():
    return case(2, 6, 5, 3, dtype=torch.float32)


def test_wrong_number_of_dimensions(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, D\) or \(T, D\); got x.shape=\(6,\).*unsqueeze"):
        softdtw.soft_dtw(x[0, :, 0], y[0])
    with pytest.raises(ValueError, match=r"y must have shape .* \(4 dimensions\)"):
        softdtw.soft_dtw(x, y[None])
    with pytest.raises(ValueError, match="both be batched .* or both unbatched"):
        softdtw.soft_dtw(x, y[0])


def test_batch_and_feature_sizes_must_match(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"same batch size B; got x.shape=\(2, 6, 3\), y.shape=\(1, 5, 3\)"):
        softdtw.soft_dtw(x, y[:1])
    with pytest.raises(ValueError, match=r"same feature size D; got x.shape=\(2, 6, 3\), y.shape=\(2, 5, 2\)\. Project or slice"):
        softdtw.soft_dtw(x, y[..., :2])


def test_empty_sequences(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"x is empty: x.shape=\(2, 0, 3\)"):
        softdtw.soft_dtw(x[:, :0], y)
    with pytest.raises(ValueError, match="y is empty"):
        softdtw.soft_dtw(x, y[:, :0])
    with pytest.raises(ValueError, match="empty"):
        softdtw.soft_dtw(x[:0], y[:0])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_or_inf_values(xy, bad):
    x, y = xy
    x = x.clone()
    x[1, 2, 0] = bad
    kind = "NaN" if bad != bad else "Inf"
    with pytest.raises(ValueError, match=f"x contains {kind} values.*x_lengths"):
        softdtw.soft_dtw(x, y)
    C = x[..., :1].expand(2, 6, 5).contiguous()
    if bad == float("inf"):  # +inf in a cost is a forbidden cell, not an error; every path crosses row 2
        v = softdtw.soft_dtw_from_cost(C, 1.0)
        assert torch.isfinite(v[0]) and v[1] == float("inf")
    else:
        kind = "NaN" if bad != bad else "-inf"
        with pytest.raises(ValueError, match=rf"C contains {kind} values at 5 of 60 cells \(the first at index "
                                             rf"\(1, 2, 0\)\).*\+inf marks a forbidden cell"):
            softdtw.soft_dtw_from_cost(C, 1.0)


def test_cost_callable_output_is_checked(xy):
    def broken(a, b):
        C = torch.cdist(a, b) ** 2
        return torch.where(C > 2.0, C, torch.full_like(C, float("nan")))

    with pytest.raises(ValueError, match=r"the output of the cost callable 'broken' contains NaN values at \d+ of 60"):
        softdtw.soft_dtw(*xy, cost=broken)
    with pytest.raises(ValueError, match=r"'<lambda>' contains -inf"):
        softdtw.soft_dtw(*xy, cost=lambda a, b: torch.full((2, 6, 5), -float("inf")))
    with pytest.raises(ValueError, match=r"'<lambda>' returned a tensor on meta, but x and y are on cpu"):
        softdtw.soft_dtw(*xy, cost=lambda a, b: torch.empty(2, 6, 5, device="meta"))
    with pytest.raises(TypeError, match=r"'<lambda>' returned a tensor of dtype torch.bool"):
        softdtw.soft_dtw(*xy, cost=lambda a, b: torch.ones(2, 6, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        softdtw.soft_dtw_alignment(*xy, cost=broken)


@pytest.mark.parametrize("gamma", [-0.1, float("nan"), float("inf")])
def test_bad_gamma_value(xy, gamma):
    with pytest.raises(ValueError, match=r"gamma must be a finite number >= 0; got"):
        softdtw.soft_dtw(*xy, gamma=gamma)


def test_bad_gamma_type(xy):
    with pytest.raises(TypeError, match="gamma must be a non-negative float"):
        softdtw.soft_dtw(*xy, gamma="1.0")
    with pytest.raises(TypeError, match="gamma as a tensor must hold one floating-point value"):
        softdtw.soft_dtw(*xy, gamma=torch.ones(2))
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        softdtw.soft_dtw(*xy, gamma=torch.tensor(-1.0))


def test_band_that_leaves_no_path():
    x, y = case(1, 4, 40, 1)
    with pytest.raises(ValueError, match=r"leaves no warping path for pair 0 \(lengths n=4, m=40\).*larger itakura_max_slope"):
        softdtw.soft_dtw(x, y, itakura_max_slope=2.0)
    with pytest.raises(ValueError, match="bandwidth .* must be a finite number >= 0"):
        softdtw.soft_dtw(x, y, bandwidth=-1)
    with pytest.raises(ValueError, match="itakura_max_slope must be a finite number > 0"):
        softdtw.soft_dtw(x, y, itakura_max_slope=0)


def test_lengths_out_of_range_dtype_shape(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"x_lengths must lie in \[1, 6\] \(x has 6 steps\); got values from 0 to 6"):
        softdtw.soft_dtw(x, y, x_lengths=torch.tensor([6, 0]))
    with pytest.raises(ValueError, match=r"y_lengths must lie in \[1, 5\].*from 3 to 9"):
        softdtw.soft_dtw(x, y, y_lengths=[3, 9])
    with pytest.raises(TypeError, match=r"x_lengths must be an integer tensor .* got dtype torch.float32\. Convert with x_lengths.long\(\)"):
        softdtw.soft_dtw(x, y, x_lengths=torch.tensor([6.0, 5.0]))
    with pytest.raises(TypeError, match="y_lengths must hold integers"):
        softdtw.soft_dtw(x, y, y_lengths=[3.0, 2.5])
    with pytest.raises(ValueError, match=r"x_lengths must have shape \(2,\) — one length per pair; got shape \(3,\)|x_lengths must have shape \(2,\)"):
        softdtw.soft_dtw(x, y, x_lengths=torch.tensor([6, 5, 4]))


def test_dtype_and_device_mismatch(xy):
    x, y = xy
    with pytest.raises(TypeError, match=r"same dtype; got torch.float32 and torch.float64.*to\(x.dtype\)"):
        softdtw.soft_dtw(x, y.double())
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor .* got torch.int64\. Convert it with x.float\(\)"):
        softdtw.soft_dtw(x.long(), y)
    with pytest.raises(TypeError, match="y must be a floating-point tensor"):
        softdtw.soft_dtw(x, y.bool())
    with pytest.raises(TypeError, match="x must be a torch.Tensor .* got list"):
        softdtw.soft_dtw(x.tolist(), y)
    meta = torch.empty(2, 5, 3, device="meta")
    with pytest.raises(ValueError, match=r"y is on the meta device \(shape \(2, 5, 3\), no data\); soft-DTW "
                                         r"needs real data"):
        softdtw.soft_dtw(x, meta)
    with pytest.raises(ValueError, match="C is on the meta device"):
        softdtw.soft_dtw_from_cost(torch.empty(2, 5, 3, device="meta"))


def test_ragged_list_suggests_padding_and_lengths(xy):
    series = [torch.randn(5, 2), torch.randn(7, 2), torch.randn(3, 2)]
    with pytest.raises(TypeError, match=r"x is a list of 3 series of different lengths \(5, 7, 3\).*pad_sequence"
                                        r".*x_lengths=\[len\(s\) for s in x\]"):
        softdtw.soft_dtw(series, series)


def test_bad_options(xy):
    with pytest.raises(ValueError, match="cost must be one of .* or a callable"):
        softdtw.soft_dtw(*xy, cost="euclid")
    with pytest.raises(ValueError, match="memory must be one of"):
        softdtw.soft_dtw(*xy, memory="lots")
    with pytest.raises(ValueError, match="unknown backend|backend must be one of"):
        softdtw.soft_dtw(*xy, backend="tpu")
    with pytest.raises(ValueError, match=r"backend='cuda' runs on cuda tensors, but the inputs are on cpu"):
        softdtw.soft_dtw(*xy, backend="cuda")
    with pytest.raises(ValueError, match=r"the cost callable's output must be a tensor of shape \(B, N, M\) = \(2, 6, 5\)"):
        softdtw.soft_dtw(*xy, cost=lambda a, b: a.sum(-1))
    with pytest.raises(ValueError, match="reduction must be one of"):
        softdtw.SoftDTW(reduction="avg")


def test_numpy_inputs_are_accepted_and_callers_tensors_untouched(xy):
    x, y = xy
    x_before, y_before = x.clone(), y.clone()
    xt = x.t() if x.dim() == 2 else x.transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous view
    v1 = softdtw.soft_dtw(xt, y)
    v2 = softdtw.soft_dtw(x.numpy(), y.numpy())
    assert torch.allclose(v1, v2)
    assert torch.equal(x, x_before) and torch.equal(y, y_before)


def test_inputs_past_a_backends_range_run_on_the_reference(monkeypatch):
    """The range guard: a bound on |R'| from the inputs' magnitude picks the exact reference backend when
    the backend's kernels could not hold it (here a tiny limit stands in for the cpu kernels' 2.5e299)."""
    from softdtw import _checks
    from softdtw.backends import reference

    x, y = case(2, 6, 5, 2)
    want = softdtw.soft_dtw(x, y, 0.5, backend="reference")
    calls = []
    forward = reference.forward
    monkeypatch.setattr(reference, "forward", lambda *a: calls.append(1) or forward(*a))
    softdtw.soft_dtw(x, y, 0.5, backend="cpu")
    assert not calls
    monkeypatch.setitem(_checks.REACH_LIMIT, ("cpu", torch.float64), 1.0)
    assert torch.equal(softdtw.soft_dtw(x, y, 0.5, backend="cpu"), want) and calls
    span = _checks.Span("sqeuclidean", 2, 6, 5)
    assert _checks.reach(3.0, 0.5, span) == pytest.approx(11 * (2 * 36 / (0.5 * math.log(2)) + 2))
    assert _checks.reach(1e200, 1.0, span) == float("inf")
    assert _checks.reach(0.0, 1e-320, span) == float("inf")  # 1 / gamma itself past the range


def test_deferred_range_check_reruns_on_the_reference():
    """What the cuda path does after its kernels are queued (simulated on the CPU): a bound past the range
    discards the result and runs the problem again on the reference backend."""
    from softdtw import _checks

    class Done:  # a PendingCheck whose kernel found every value finite, max |v| = vmax, gamma = 1
        vmax, gamma = 0.0, 1.0

        def ok(self):
            return True

    x, y = case(1, 4, 4, 1)
    p = _checks.prepare(x, y, 1.0, cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None,
                        y_lengths=None, memory="auto", backend="cpu")
    check = Done()
    pending = _checks._Pending(check, _checks.Span("sqeuclidean", 1, 4, 4), torch.float64)
    seen = []
    for v, backend in ((1.0, "cpu"), (1e200, "reference")):
        check.vmax = v
        out = _checks.run_checked(p._replace(backend="cuda", pending=pending),
                                  lambda q: seen.append(q.backend) or q.backend)
        assert out == ("cuda" if backend == "cpu" else "reference")
    assert seen == ["cuda", "cuda", "reference"]
