"""Bad and extreme inputs across the public API: each gets its exact outcome (issue 26).

The rule: a finite answer only where the maths has one; +inf where the exact value overflows the dtype or
every warping path crosses a +inf cost (a forbidden cell), with a zero gradient; a clear error naming the
input, the problem and the fix everywhere else; never NaN from finite inputs. Cases marked ``cuda`` repeat
the numerical ones on the GPU (skipped without one). Sizes are tiny: the file runs in seconds once the cpu
kernels are compiled.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError
from tslearn.metrics import dtw as ts_dtw
from tslearn.metrics import soft_dtw as ts_soft_dtw

import softdtw
from softdtw import _ops, cli, datasets
from softdtw.backends import cpu as cpu_backend
from tests._helpers import case, rel_err

BACKENDS = ["reference", "cpu"]
INF = float("inf")


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def _value_and_grad(x, y, gamma=1.0, **kw):
    """(values, dx) of soft_dtw(x, y).sum(), x requiring grad."""
    x = x.detach().clone().requires_grad_()
    v = softdtw.soft_dtw(x, y, gamma, **kw)
    v.sum().backward()
    return v.detach(), x.grad


def _overflowing(v, dtype, N=5, M=4):
    """Issue 26, item 4: x = v everywhere, y = 0 except y[0] = -v."""
    x = torch.full((1, N, 1), v, dtype=dtype)
    y = torch.zeros(1, M, 1, dtype=dtype)
    y[0, 0] = -v
    return x, y


# --- 1. non-finite data and gamma: a ValueError naming the input ----------------------------------------

@pytest.mark.parametrize("where,bad,word", [("x", float("nan"), "NaN"), ("y", INF, "Inf"), ("y", -INF, "Inf")])
def test_non_finite_series_raise_naming_them(backend, where, bad, word):
    x, y = case(2, 6, 5, 2, dtype=torch.float32)
    (x if where == "x" else y)[1, 3, 0] = bad
    with pytest.raises(ValueError, match=f"{where} contains {word} values"):  # NaN: "... inside series 1"
        softdtw.soft_dtw(x, y, backend=backend)
    with pytest.raises(ValueError, match=f"{where} contains {word}"):
        softdtw.soft_dtw_divergence(x, y, backend=backend)
    with pytest.raises(ValueError, match=f"{where} contains {word}"):
        softdtw.dtw(x, y, backend=backend)


@pytest.mark.parametrize("gamma", [-1e-3, float("nan"), INF, torch.tensor(-2.0), torch.tensor(float("nan"))])
def test_bad_gamma_values(gamma):
    x, y = case(2, 6, 5, 2)
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0; got"):
        softdtw.soft_dtw(x, y, gamma)


@pytest.mark.parametrize("gamma,error,fragment", [
    ("1", TypeError, "gamma must be a non-negative float"), (True, TypeError, "gamma must be a non-negative float"),
    (torch.ones(2), TypeError, "gamma as a tensor must hold one floating-point value"),
    (torch.tensor(1), TypeError, "gamma as a tensor must hold one floating-point value"),
])
def test_bad_gamma_types(gamma, error, fragment):
    with pytest.raises(error, match=fragment):
        softdtw.soft_dtw(*case(1, 4, 4, 1), gamma)


# --- 2. shapes, dtypes, devices, containers --------------------------------------------------------------

@pytest.mark.parametrize("x,y,error,fragment", [
    (torch.zeros(5), torch.zeros(5, 1), ValueError, r"x must have shape \(B, T, D\) or \(T, D\); got x.shape=\(5,\)"),
    (torch.zeros(2, 5, 1), torch.zeros(3, 5, 1), ValueError, "same batch size B"),
    (torch.zeros(2, 5, 2), torch.zeros(2, 5, 3), ValueError, "same feature size D"),
    (torch.zeros(2, 0, 1), torch.zeros(2, 5, 1), ValueError, r"x is empty: x.shape=\(2, 0, 1\)"),
    (torch.zeros(2, 5, 1, dtype=torch.int64), torch.zeros(2, 5, 1), TypeError, r"x must be a floating-point tensor"),
    (torch.zeros(2, 5, 1), torch.zeros(2, 5, 1, dtype=torch.float64), TypeError, "same dtype"),
    (torch.zeros(2, 5, 1, dtype=torch.complex64), torch.zeros(2, 5, 1), TypeError, "floating-point tensor"),
    ("abc", torch.zeros(5, 1), TypeError, "x must be a torch.Tensor"),
])
def test_bad_shapes_and_types(x, y, error, fragment):
    with pytest.raises(error, match=fragment):
        softdtw.soft_dtw(x, y)


def test_meta_tensors_say_they_have_no_data():
    meta = torch.empty(2, 5, 3, device="meta")
    with pytest.raises(ValueError, match=r"x is on the meta device \(shape \(2, 5, 3\), no data\); soft-DTW needs "
                                         r"real data. Create or load it on 'cpu' or 'cuda'"):
        softdtw.soft_dtw(meta, meta)
    with pytest.raises(ValueError, match="C is on the meta device"):
        softdtw.soft_dtw_from_cost(torch.empty(3, 4, device="meta"))


@pytest.mark.parametrize("fn", [
    lambda X: softdtw.soft_dtw(X, X),
    lambda X: softdtw.pairwise_soft_dtw(X),
    lambda X: softdtw.soft_dtw_barycenter(X, max_iter=1),
])
def test_ragged_lists_ask_for_padding_and_lengths(fn):
    series = [np.zeros((5, 1)), np.zeros((8, 1)), np.zeros((3, 1))]
    with pytest.raises(TypeError, match=r"a list of 3 series of different lengths \(5, 8, 3\).*pad_sequence.*"
                                        r"_lengths=\[len\(s\) for s in [xX]\].*or pad with NaN"):
        fn(series)
    # The scikit-learn estimators take ragged lists as they are (NaN-padded inside).
    assert softdtw.SoftDTWKMeans(n_clusters=2, max_iter=1).fit(series).labels_.shape == (3,)


def test_lengths_out_of_range_and_of_the_wrong_type():
    x, y = case(2, 6, 5, 1)
    with pytest.raises(ValueError, match=r"x_lengths must lie in \[1, 6\] \(x has 6 steps\); got values from 0 to 6"):
        softdtw.soft_dtw(x, y, x_lengths=[6, 0])
    with pytest.raises(TypeError, match="y_lengths must be an integer tensor"):
        softdtw.soft_dtw(x, y, y_lengths=torch.tensor([5.0, 4.0]))
    with pytest.raises(ValueError, match="x_lengths / y_lengths need batched inputs"):
        softdtw.soft_dtw(x[0], y[0], x_lengths=[6])


# --- 3. options ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,fragment", [
    (dict(cost="euclid"), "cost must be one of"), (dict(memory="lots"), "memory must be one of"),
    (dict(backend="tpu"), "backend must be one of"), (dict(backend="cuda"), "backend='cuda' runs on cuda tensors"),
    (dict(bandwidth=-1), r"bandwidth .* must be a finite number >= 0"),
    (dict(bandwidth=float("nan")), r"bandwidth .* must be a finite number >= 0"),
    (dict(itakura_max_slope=0.0), "itakura_max_slope must be a finite number > 0"),
    (dict(itakura_max_slope=1.0), r"leaves no warping path for pair 0 \(lengths n=6, m=9\)"),
])
def test_bad_options(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        softdtw.soft_dtw(*case(1, 6, 9, 1), **kw)


def test_huge_bandwidth_is_no_band(backend):
    x, y = case(2, 7, 9, 2, seed=3)
    assert torch.equal(softdtw.soft_dtw(x, y, 0.5, bandwidth=1e30, backend=backend),
                       softdtw.soft_dtw(x, y, 0.5, backend=backend))
    assert torch.equal(softdtw.soft_dtw(x, y, 0.5, bandwidth=16, backend=backend),
                       softdtw.soft_dtw(x, y, 0.5, backend=backend))


@pytest.mark.parametrize("N,M,r", [(25, 25, 2.5), (20, 27, 1.5), (27, 20, 3.7), (12, 12, 0.5)])
def test_fractional_bandwidth_follows_tslearn(backend, N, M, r):
    """Item 7: tslearn's mask uses the float radius (ceil(r) on one side, floor(r) on the other)."""
    x, y = case(1, N, M, 1, seed=N + M)
    hard = softdtw.dtw(x, y, bandwidth=r, backend=backend)
    assert hard.item() == pytest.approx(ts_dtw(x[0].numpy(), y[0].numpy(), sakoe_chiba_radius=r) ** 2, rel=1e-12)
    soft = softdtw.soft_dtw(x, y, 0.5, bandwidth=r, backend=backend)
    assert soft.item() == pytest.approx(
        ts_soft_dtw(x[0].numpy(), y[0].numpy(), gamma=0.5, sakoe_chiba_radius=r), rel=1e-10)
    if r != int(r):  # not the truncated radius: the soft value sees every cell of the band
        truncated = softdtw.soft_dtw(x, y, 0.5, bandwidth=int(r), backend=backend)
        assert abs(soft.item() - truncated.item()) > 1e-9 * abs(soft.item())


# --- 4. cost callables and precomputed costs: NaN raises, +inf is a forbidden cell ---------------------

def _sq(a, b):
    return torch.cdist(a, b).square()


def test_cost_callable_returning_nan_raises_naming_it(backend):
    def leaky(a, b):
        C = _sq(a, b)
        return torch.where(C > 1.0, C, torch.full_like(C, float("nan")))

    x, y = case(2, 6, 5, 2, dtype=torch.float32)
    for fn in (softdtw.soft_dtw, softdtw.soft_dtw_divergence, softdtw.soft_dtw_alignment):
        with pytest.raises(ValueError, match=r"the output of the cost callable 'leaky' contains NaN values at \d+ of "
                                             r"60 cells .*a cost must be a number or \+inf"):
            fn(x, y, cost=leaky, backend=backend)


def test_cost_callable_returning_minus_inf_or_the_wrong_shape_raises(backend):
    x, y = case(2, 6, 5, 2)
    with pytest.raises(ValueError, match="'<lambda>' contains -inf"):
        softdtw.soft_dtw(x, y, cost=lambda a, b: -_sq(a, b) / 0.0, backend=backend)
    with pytest.raises(ValueError, match=r"must be a tensor of shape \(B, N, M\) = \(2, 6, 5\); got \(2, 6\)"):
        softdtw.soft_dtw(x, y, cost=lambda a, b: a.sum(-1), backend=backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inf_cost_at_the_start_gives_inf_and_zero_gradient(backend, dtype):
    """Item 2: every path starts at (0, 0); the value was a finite 3.4657e29 (float32)."""
    def blocked(a, b):
        C = _sq(a, b).clone()
        C[:, 0, 0] = INF
        return C

    x, y = case(2, 30, 25, 2, dtype=dtype)
    v, dx = _value_and_grad(x, y, 1.0, cost=blocked, backend=backend)
    assert torch.equal(v, torch.full((2,), INF, dtype=dtype))
    assert torch.equal(dx, torch.zeros_like(dx))
    C = blocked(x, y).requires_grad_()
    value = softdtw.soft_dtw_from_cost(C, 0.1, backend=backend)
    value.sum().backward()
    assert torch.isinf(value).all() and torch.equal(C.grad, torch.zeros_like(C))
    E = softdtw.soft_dtw_alignment(x, y, cost=blocked, backend=backend)
    assert torch.equal(E, torch.zeros(2, 30, 25, dtype=dtype))
    with pytest.raises(ValueError, match="pair 0 has no warping path of finite cost.*'blocked'"):
        softdtw.dtw_path(x, y, cost=blocked, backend=backend)


def test_forbidden_cells_are_avoided_exactly(backend):
    """+inf cells inside the table: the value is the soft-min over the paths that avoid them, the same as a
    large finite cost that no path can afford, and those cells get no alignment mass."""
    g = torch.Generator().manual_seed(4)
    C = torch.rand(3, 7, 6, dtype=torch.float64, generator=g)
    mask = torch.rand(3, 7, 6, generator=g) < 0.25
    mask[:, 0, 0] = mask[:, -1, -1] = False
    mask[2] = False
    mask[2, 3, :] = True  # pair 2: a whole row forbidden, no path
    C_inf = C.masked_fill(mask, INF)
    C_big = C.masked_fill(mask, 1e6)
    v = softdtw.soft_dtw_from_cost(C_inf, 0.3, backend=backend)
    v_big = softdtw.soft_dtw_from_cost(C_big, 0.3, backend=backend)
    assert rel_err(v[:2], v_big[:2]) <= 1e-12 and v[2] == INF
    Cg = C_inf.clone().requires_grad_()
    softdtw.soft_dtw_from_cost(Cg, 0.3, backend=backend).sum().backward()
    assert not torch.isnan(Cg.grad).any() and (Cg.grad[mask] == 0).all() and (Cg.grad[2] == 0).all()


def test_precomputed_cost_nan_and_minus_inf_raise(backend):
    C = torch.rand(2, 4, 5)
    C[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"C contains NaN values at 1 of 40 cells \(the first at index \(1, 2, 3\)\)"):
        softdtw.soft_dtw_from_cost(C, backend=backend)
    C[1, 2, 3] = -INF
    with pytest.raises(ValueError, match="C contains -inf"):
        softdtw.soft_dtw_from_cost(C, backend=backend)
    with pytest.raises(ValueError, match=r"C must be a non-empty cost matrix .* got C.shape=\(4,\)"):
        softdtw.soft_dtw_from_cost(torch.zeros(4), backend=backend)


def test_divergence_with_a_cost_that_blocks_the_self_terms_is_undefined():
    x, y = case(2, 5, 4, 1)
    with pytest.raises(ValueError, match=r"divergence of pair 0 is undefined \(inf - inf\)"):
        softdtw.soft_dtw_divergence(x, y, cost=lambda a, b: torch.full((2, a.shape[1], b.shape[1]), INF))


# --- 5. magnitudes: +inf where the exact value overflows, exact values below -----------------------------

@pytest.mark.parametrize("v,dtype", [(1e19, torch.float32), (1e20, torch.float32), (1e38, torch.float32),
                                     (1e160, torch.float64)])
def test_values_that_overflow_the_dtype_are_inf_with_zero_gradient(backend, v, dtype):
    """Item 4: these gave NaN (with finite or NaN gradients)."""
    x, y = _overflowing(v, dtype)
    value, dx = _value_and_grad(x, y, backend=backend)
    assert torch.equal(value, torch.tensor([INF], dtype=dtype))
    assert torch.equal(dx, torch.zeros_like(dx))
    assert softdtw.dtw(x, y, backend=backend).item() == INF
    assert softdtw.soft_dtw_divergence(x, y, backend=backend).item() == INF


def test_huge_but_representable_float64_value_is_exact(backend):
    """x = 1e150: costs 1e300, value 8e300 (past the cpu kernels' range: the call runs on the reference)."""
    x, y = _overflowing(1e150, torch.float64)
    value, dx = _value_and_grad(x, y, backend=backend)
    assert value.item() == pytest.approx(8e300, rel=1e-12)
    assert dx.flatten().tolist() == pytest.approx([4e150, 2e150, 2e150, 2e150, 2e150], rel=1e-12)


def test_costs_above_the_sentinel_give_the_right_value(backend):
    """Item 5: reference float32 x = 1e16 gave 4.01e32, cpu value-only x = 1e11 at gamma = 1e-8 4.69e22."""
    x, y = torch.full((1, 8, 1), 1e16), torch.zeros(1, 8, 1)
    want = 8 * float(x[0, 0, 0]) ** 2
    assert softdtw.soft_dtw(x, y, backend=backend).item() == pytest.approx(want, rel=1e-6)
    x = torch.full((1, 8, 1), 1e11)
    want = 8 * float(x[0, 0, 0]) ** 2
    assert softdtw.soft_dtw(x, y, 1e-8, backend=backend).item() == pytest.approx(want, rel=1e-6)
    value, dx = _value_and_grad(x, y, 1e-8, backend=backend)
    assert value.item() == pytest.approx(want, rel=1e-6)
    assert torch.isfinite(dx).all() and dx.min() > 0


@pytest.mark.parametrize("gamma", [1e-3, 1e-2, 0.1])
def test_learnable_gamma_in_float32_matches_float64(backend, gamma):
    """Item 3: the reference's float32 d/dgamma was 52.57 at gamma = 1e-3 (correct: ~0)."""
    x, y = case(2, 30, 25, 2, dtype=torch.float64, seed=26)
    grads = []
    for dtype in (torch.float32, torch.float64):
        g = torch.tensor(gamma, dtype=dtype, requires_grad=True)
        softdtw.soft_dtw(x.to(dtype), y.to(dtype), g, backend=backend).sum().backward()
        grads.append(g.grad.item())
    assert abs(grads[0] - grads[1]) <= 1e-4 * max(1.0, abs(grads[1])) + 1e-8


@pytest.mark.parametrize("gamma", [1e-300, 1e300])
def test_extreme_gamma_in_float64_is_finite(backend, gamma):
    x, y = case(2, 6, 5, 2)
    v = softdtw.soft_dtw(x, y, gamma, backend=backend)
    assert torch.isfinite(v).all()
    if gamma < 1:  # gamma -> 0 is hard DTW
        assert rel_err(v, softdtw.dtw(x, y, backend=backend)) <= 1e-12


def test_cosine_cost_is_scale_free(backend):
    """Item 6: float32 steps of size 1e20 overflowed the norm (every cost became 1)."""
    x, y = case(2, 10, 8, 3, dtype=torch.float32, seed=6)
    want = softdtw.soft_dtw(x, y, cost="cosine", backend=backend)
    for scale in (1e20, 1e-30, 3e37):
        assert rel_err(softdtw.soft_dtw(x * scale, y * scale, cost="cosine", backend=backend), want) <= 1e-5
    zeros = torch.zeros(1, 4, 3)
    assert softdtw.soft_dtw(zeros, y[:1], 0.0, cost="cosine", backend=backend).item() == pytest.approx(8.0)


# --- 6. memory: sizes that can never fit raise a MemoryError naming them ---------------------------------

@pytest.mark.parametrize("N,memory,fragment", [
    (10**6, "store", r"storing the backward table needs 7450.6 GiB"),
    (10**7, "auto", r"memory='auto' checkpoints, and checkpointing the backward"),
    (10**7, "checkpoint", r"checkpointing the backward \(the checkpoint rows and one recomputed band\) needs"),
])
def test_huge_problems_raise_memory_error_naming_the_sizes(N, memory, fragment):
    """Item 8: no attempt to allocate 8 TB, no allocator RuntimeError (only x and y are ever allocated)."""
    x = torch.zeros(1, N, 1, requires_grad=True)
    with pytest.raises(MemoryError, match=rf"B=1 pair\(s\) of lengths N={N}, M={N} on the cpu backend: .*{fragment}"):
        softdtw.soft_dtw(x, x.detach(), memory=memory)


def test_checkpoint_that_does_not_fit_this_machine_raises(monkeypatch):
    monkeypatch.setattr(_ops, "_total_bytes", lambda device: 4 << 30)
    x = torch.zeros(1, 10**6, 1, requires_grad=True)
    with pytest.raises(MemoryError,
                       match=r"N=1000000, M=1000000 .* needs 14\.9 GiB, but this machine has 4\.0 GiB in all"):
        softdtw.soft_dtw(x, x.detach(), memory="checkpoint")


def test_cpu_allocation_failure_is_a_memory_error():
    with pytest.raises(MemoryError, match=r"could not allocate 74505.8 GiB for the stored backward table"):
        cpu_backend._allocate((10**13,), torch.float64, "the stored backward table (memory='store')", 1, 10**6, 10**7)


# --- 7. modules, toolkit, datasets, command line ---------------------------------------------------------

def test_soft_dtw_module_checks_like_the_function():
    x, y = case(2, 6, 5, 1)
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        softdtw.SoftDTW(gamma=-1.0)(x, y)
    with pytest.raises(ValueError, match="reduction must be one of"):
        softdtw.SoftDTW(reduction="avg")
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        softdtw.SoftDTW(normalize=True)(bad, y)
    big_x, big_y = _overflowing(1e20, torch.float32)
    assert softdtw.SoftDTW(reduction="sum")(big_x, big_y).item() == INF


def test_pairwise_barycenter_and_estimators_reject_bad_sets():
    X, _ = case(4, 6, 6, 1)
    bad = X.clone()
    bad[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="X contains NaN"):
        softdtw.pairwise_soft_dtw(bad)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        softdtw.pairwise_soft_dtw(X, batch_size=0)
    with pytest.raises(ValueError, match="contains NaN"):
        softdtw.soft_dtw_barycenter(bad, max_iter=1)
    with pytest.raises(ValueError, match="weights must be finite and >= 0"):
        softdtw.soft_dtw_barycenter(X, weights=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="n_clusters=5 is larger than the number of series P=4"):
        softdtw.SoftDTWKMeans(n_clusters=5).fit(X)
    with pytest.raises(NotFittedError, match="This SoftDTWKMeans instance is not fitted yet"):
        softdtw.SoftDTWKMeans(n_clusters=2).predict(X)
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[4, 3\]"):
        softdtw.SoftDTWKNeighborsClassifier().fit(X, [0, 1, 0])
    with pytest.raises(NotFittedError, match="This SoftDTWKNeighborsClassifier instance is not fitted yet"):
        softdtw.SoftDTWKNeighborsClassifier().predict(X)


@pytest.mark.parametrize("kw,error,fragment", [
    (dict(n=0), ValueError, r"n must be an integer >= 1 \(the number of series\); got 0"),
    (dict(n=3, length=4), ValueError, "length must be an integer >= 8"),
    (dict(n=2.5), ValueError, "n must be an integer >= 1"),
    (dict(n=3, dtype=torch.int64), TypeError, "dtype must be a floating torch dtype"),
])
def test_make_cbf_rejects_bad_arguments(kw, error, fragment):
    with pytest.raises(error, match=fragment):
        datasets.make_cbf(**kw)


def test_cli_reports_bad_arguments_in_one_line(tmp_path, capsys):
    series = tmp_path / "set.npy"
    np.save(series, np.random.default_rng(0).normal(size=(6, 10)))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    np.savetxt(a, np.ones((10, 2)), delimiter=",")
    np.savetxt(b, np.ones((8, 3)), delimiter=",")
    cases = [
        (["cluster", str(series), "-k", "0", "--no-figure", "--out", str(tmp_path / "o")],
         "softdtw cluster: error: -k 0: the number of clusters must be between 1 and the number of series (6)."),
        (["align", str(a), str(b), "--no-figure"], "softdtw align: error: the series have different numbers of "
                                                   "features"),
        (["demo", "--n-train", "1"], "--n-train and --n-test must each be at least 3"),
        (["align", str(tmp_path / "missing.csv"), str(a)], "no such file"),
    ]
    for argv, fragment in cases:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_:  # argparse refuses it
        cli.main(["align", str(a), str(a), "--gamma", "nan", "--no-figure"])
    assert exit_.value.code == 2
    assert "argument --gamma: expected a finite number >= 0 or 'auto'; got 'nan'" in capsys.readouterr().err


# --- 8. random bad inputs --------------------------------------------------------------------------------

_FAST = settings(max_examples=25, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FAST
@given(data=st.data(), backend=st.sampled_from(BACKENDS), dtype=st.sampled_from([torch.float32, torch.float64]),
       which=st.sampled_from(["x", "y"]), bad=st.sampled_from([float("nan"), INF, -INF]))
def test_a_non_finite_value_anywhere_names_its_input(data, backend, dtype, which, bad):
    B, N, M, D = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)),
                  data.draw(st.integers(1, 3)))
    x, y = case(B, N, M, D, dtype=dtype)
    t = x if which == "x" else y
    idx = [data.draw(st.integers(0, s - 1)) for s in t.shape]
    if bad != bad and t.shape[1] > 1:  # NaN on a last step of one feature would be padding (read as lengths)
        idx[1] = data.draw(st.integers(0, t.shape[1] - 2))
    t[tuple(idx)] = bad
    word = "NaN" if bad != bad else "Inf"
    with pytest.raises(ValueError, match=rf"{which} contains {word} values|series \d+ of {which} is NaN at every step"):
        softdtw.soft_dtw(x, y, data.draw(st.sampled_from([0.0, 0.1, 1.0])), backend=backend)


@_FAST
@given(data=st.data(), dtype=st.sampled_from([torch.float32, torch.float64]),
       gamma=st.sampled_from([0.0, 1e-3, 1.0, 1e3]), cost=st.sampled_from(["sqeuclidean", "l1"]))
def test_random_huge_magnitudes_give_the_same_finite_or_inf_values_never_nan(data, dtype, gamma, cost):
    """Values of any magnitude: the cpu backend agrees with the float64 reference, +inf where the value
    overflows, and neither gives NaN, in the value or the gradient."""
    N, M = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    top = 38.5 if dtype == torch.float32 else 308.2
    exps = data.draw(st.lists(st.floats(-5, top), min_size=N + M, max_size=N + M))
    signs = data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=N + M, max_size=N + M))
    vals = torch.tensor([s * 10.0 ** min(e, top - 0.3) for s, e in zip(signs, exps)], dtype=torch.float64)
    vals = vals.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)
    x, y = vals[:N].view(1, N, 1), vals[N:].view(1, M, 1)
    results = {}
    for backend in BACKENDS:
        v, dx = _value_and_grad(x, y, gamma, cost=cost, backend=backend)
        assert not torch.isnan(v).any() and not torch.isnan(dx).any()
        results[backend] = v.double().item()
    a, b = results["cpu"], results["reference"]
    fmax = torch.finfo(dtype).max
    if math.isinf(a) or math.isinf(b):  # the same overflow, up to rounding at the dtype's edge
        assert a == b or min(abs(a), abs(b)) > 0.9 * fmax
    else:
        tol = 1e-4 if dtype == torch.float32 else 1e-9
        assert abs(a - b) <= tol * max(abs(b), 1.0) + (N + M) * gamma * 1e-3


@_FAST
@given(data=st.data(), gamma=st.sampled_from([0.0, 0.1, 1.0]))
def test_random_forbidden_cells_agree_between_backends(data, gamma):
    B, N, M = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    seed = data.draw(st.integers(0, 10**6))
    g = torch.Generator().manual_seed(seed)
    C = torch.rand(B, N, M, dtype=torch.float64, generator=g) * 4
    C = C.masked_fill(torch.rand(B, N, M, generator=g) < data.draw(st.floats(0, 0.6)), INF)
    out = {}
    for backend in BACKENDS:
        Cg = C.clone().requires_grad_()
        v = softdtw.soft_dtw_from_cost(Cg, gamma, backend=backend)
        v.sum().backward()
        assert not torch.isnan(v).any() and not torch.isnan(Cg.grad).any()
        assert (Cg.grad[torch.isinf(C)] == 0).all()
        out[backend] = (v.detach(), Cg.grad)
    (v1, g1), (v0, g0) = out["cpu"], out["reference"]
    assert torch.equal(torch.isinf(v1), torch.isinf(v0))
    finite = torch.isfinite(v0)
    if finite.any():
        assert rel_err(v1[finite], v0[finite]) <= 1e-9 and rel_err(g1, g0) <= 1e-8


# --- 9. the same numerics on the GPU ---------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_extremes_match_the_reference():
    """+inf costs, overflow and costs past the sentinel run on the exact reference (the range guard)."""
    for v, dtype in ((1e20, torch.float32), (1e38, torch.float32), (1e160, torch.float64)):
        x, y = _overflowing(v, dtype)
        value, dx = _value_and_grad(x.cuda(), y.cuda())
        assert value.item() == INF and (dx == 0).all()
    x, y = _overflowing(1e150, torch.float64)
    assert softdtw.soft_dtw(x.cuda(), y.cuda()).item() == pytest.approx(8e300, rel=1e-12)
    x, y = torch.full((1, 8, 1), 1e16, device="cuda"), torch.zeros(1, 8, 1, device="cuda")
    assert softdtw.soft_dtw(x, y).item() == pytest.approx(8 * float(x[0, 0, 0]) ** 2, rel=1e-6)
    x = torch.full((1, 8, 1), 1e11, device="cuda")
    assert softdtw.soft_dtw(x, y, 1e-8).item() == pytest.approx(8 * float(x[0, 0, 0]) ** 2, rel=1e-6)
    C = torch.rand(2, 7, 6, device="cuda", dtype=torch.float64)
    C[0, 0, 0] = INF
    C[1, 3, 2] = INF
    want = softdtw.soft_dtw_from_cost(C.cpu(), 0.3, backend="reference")
    got = softdtw.soft_dtw_from_cost(C, 0.3)
    assert got[0].item() == INF and rel_err(got[1:].cpu(), want[1:]) <= 1e-12
    xs, ys = case(2, 10, 8, 3, dtype=torch.float32, seed=6)
    assert rel_err(softdtw.soft_dtw(xs.cuda() * 1e20, ys.cuda() * 1e20, cost="cosine").cpu(),
                   softdtw.soft_dtw(xs, ys, cost="cosine")) <= 1e-5


def test_hints_name_the_right_arguments():
    """Errors for lists of cost matrices, nested lists, PackedSequences where they are not read, and short pairs
    an Itakura parallelogram cannot hold name what was wrong and the arguments that exist (they once suggested
    C_lengths, a (B, T, D) cost, a 'list of 4 series' for a PackedSequence and a slope the call already had)."""
    from torch.nn.utils.rnn import pack_sequence

    packed = pack_sequence([torch.randn(5, 2), torch.randn(3, 2)], enforce_sorted=False)
    with pytest.raises(TypeError, match=r"got a list of 2 cost matrices.*x_lengths / y_lengths"):
        softdtw.soft_dtw_from_cost([torch.rand(3, 3), torch.rand(4, 4)], 0.1)
    with pytest.raises(TypeError, match=r"C must be a torch.Tensor of shape \(B, N, M\) or \(N, M\)"):
        softdtw.soft_dtw_from_cost([[1.0, 2.0], [3.0, 4.0]], 0.1)
    with pytest.raises(TypeError, match="got a PackedSequence, which holds series, not costs"):
        softdtw.soft_dtw_from_cost(packed, 0.1)
    with pytest.raises(TypeError, match=r"X is a PackedSequence.*pad_packed_sequence.*x_lengths=lengths"):
        softdtw.pairwise_soft_dtw(packed)
    with pytest.raises(ValueError, match=r"The slope allows max\(n, m\) / min\(n, m\) = 2, but on so few cells"):
        softdtw.soft_dtw_from_cost(torch.rand(4, 2), 0.1, itakura_max_slope=3.0)
    with pytest.raises(ValueError, match=r"Itakura slopes must allow max\(n, m\) / min\(n, m\) = 4"):
        softdtw.soft_dtw_from_cost(torch.rand(8, 2), 0.1, itakura_max_slope=3.0)


def test_gamma_beyond_float32_is_a_clear_error():
    """A float gamma that float32 cannot hold, on float32 data: a ValueError with the fix (it was torch's 'value
    cannot be converted to type float without overflow'); float64 data takes it."""
    x, y = torch.randn(2, 5, 1), torch.randn(2, 6, 1)
    with pytest.raises(ValueError, match=r"gamma=1e\+39 does not fit in float32.*pass float64 inputs"):
        softdtw.soft_dtw(x, y, 1e39)
    assert torch.isfinite(softdtw.soft_dtw(x.double(), y.double(), 1e39)).all()
