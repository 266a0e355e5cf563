"""soft_dtw_barycenter: objective vs tslearn, batching, lengths, weights, methods, errors."""
import math

import pytest
import torch

from softdtw import soft_dtw
from softdtw.barycenter import BarycenterResult, soft_dtw_barycenter
from softdtw.datasets import make_cbf


def _objective(Z, X, gamma, weights=None, lengths=None, divergence=False):
    """sum_p w_p sdtw(Z, X_p) (or the divergence), evaluated pair by pair in float64."""
    total = 0.0
    for p in range(len(X)):
        x = X[p, : (len(X[p]) if lengths is None else int(lengths[p]))].double()
        w = 1.0 if weights is None else float(weights[p])
        v = soft_dtw(Z.double(), x, gamma)
        if divergence:
            v = v - 0.5 * soft_dtw(Z.double(), Z.double(), gamma) - 0.5 * soft_dtw(x, x, gamma)
        total += w * float(v)
    return total


@pytest.fixture(scope="module")
def data():
    X, y = make_cbf(12, length=32, seed=1, dtype=torch.float64)
    return X, y


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_objective_no_worse_than_tslearn(seed, gamma):
    ts = pytest.importorskip("tslearn.barycenters")
    X, y = make_cbf(12, length=32, seed=seed, dtype=torch.float64)
    if seed == 3:
        X = X[y == 0]  # one class
    z_ts = ts.softdtw_barycenter(X.numpy(), gamma=gamma, max_iter=100, tol=1e-5)
    res = soft_dtw_barycenter(X, gamma, max_iter=100, tol=1e-5)
    ours = _objective(res.barycenter, X, gamma)
    theirs = _objective(torch.from_numpy(z_ts), X, gamma)
    assert ours <= theirs + 1e-6 * abs(theirs)
    assert res.losses[-1].item() == pytest.approx(ours, rel=1e-9)


def test_result_fields_and_monotone_objective(data):
    X, _ = data
    res = soft_dtw_barycenter(X, 1.0, max_iter=15)
    assert isinstance(res, BarycenterResult)
    assert res.barycenter.shape == (32, 1) and res.barycenter.dtype == torch.float64
    assert res.losses.shape == (res.n_iter + 1,)
    assert (res.losses[1:] <= res.losses[:-1] + 1e-9).all()
    assert isinstance(res.converged, bool)


def test_batched_groups_equal_separate_problems(data):
    X, y = data
    # Adam is coordinate-wise, so on this separable objective one batched run is exactly K separate runs.
    res = soft_dtw_barycenter(X, 1.0, groups=y, max_iter=15, tol=0, method="adam", lr=0.1, anneal=False)
    assert res.barycenter.shape == (3, 32, 1) and res.losses.shape == (16, 3)
    for k in range(3):
        single = soft_dtw_barycenter(X[y == k], 1.0, max_iter=15, tol=0, method="adam", lr=0.1, anneal=False)
        torch.testing.assert_close(res.barycenter[k], single.barycenter, rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(res.losses[:, k], single.losses, rtol=1e-9, atol=1e-9)
        assert res.losses[-1, k].item() == pytest.approx(_objective(res.barycenter[k], X[y == k], 1.0), rel=1e-8)


def test_batched_lbfgs_improves_every_group(data):
    X, y = data
    res = soft_dtw_barycenter(X, 1.0, groups=y, max_iter=30)
    start = soft_dtw_barycenter(X, 1.0, groups=y, max_iter=0)
    assert (res.losses[-1] < start.losses[0]).all()


def test_unequal_lengths_ignore_the_padding(data):
    X, _ = data
    lengths = torch.tensor([32, 20, 25, 32, 18, 30, 32, 22, 27, 32, 19, 31])
    Xp = X.clone()
    for p, n in enumerate(lengths):
        Xp[p, n:] = 1e3  # garbage past the lengths
    res = soft_dtw_barycenter(Xp, 1.0, x_lengths=lengths, max_iter=30, length=28)
    assert res.barycenter.shape == (28, 1)
    assert torch.isfinite(res.barycenter).all()
    assert res.barycenter.abs().max() < 50
    assert res.losses[-1].item() == pytest.approx(_objective(res.barycenter, X, 1.0, lengths=lengths), rel=1e-8)
    assert res.losses[-1] < res.losses[0]


def test_zero_weight_is_the_same_as_leaving_the_series_out(data):
    X, _ = data
    w = torch.ones(12, dtype=torch.float64)
    w[[2, 5]] = 0
    keep = w > 0
    a = soft_dtw_barycenter(X, 1.0, weights=w, max_iter=40, tol=0)
    b = soft_dtw_barycenter(X[keep], 1.0, max_iter=40, tol=0)
    assert _objective(a.barycenter, X[keep], 1.0) == pytest.approx(_objective(b.barycenter, X[keep], 1.0), rel=1e-4)
    # Weights scale the objective.
    c = soft_dtw_barycenter(X, 1.0, weights=2 * torch.ones(12), max_iter=0)
    d = soft_dtw_barycenter(X, 1.0, max_iter=0)
    assert c.losses[0].item() == pytest.approx(2 * d.losses[0].item())


def test_adam_divergence_and_init(data):
    X, _ = data
    res = soft_dtw_barycenter(X, 1.0, method="adam", lr=0.1, max_iter=30)
    assert res.losses[-1] < res.losses[0] and res.n_iter <= 30
    init = X[0].clone()
    div = soft_dtw_barycenter(X, 1.0, init=init, divergence=True, max_iter=20)
    assert torch.equal(init, X[0])  # the caller's tensor is untouched
    assert div.losses[0].item() == pytest.approx(_objective(X[0], X, 1.0, divergence=True), rel=1e-8)
    assert 0 <= div.losses[-1] < div.losses[0]


def test_float32_and_max_iter_zero_returns_the_init(data):
    X, _ = data
    res = soft_dtw_barycenter(X.float(), 1.0, max_iter=0)
    assert res.n_iter == 0 and res.barycenter.dtype == torch.float32
    torch.testing.assert_close(res.barycenter, X.float().mean(0))


@pytest.mark.parametrize("kw, match", [
    (dict(method="sgd"), "method must be one of"),
    (dict(max_iter=-1), "max_iter must be an integer >= 0"),
    (dict(weights=torch.ones(3)), r"weights must be a numeric tensor of shape \(12,\)"),
    (dict(weights=-torch.ones(12)), "weights must be finite and >= 0"),
    (dict(groups=torch.zeros(12)), "groups must be an integer tensor"),
    (dict(groups=torch.zeros(12, dtype=torch.long), n_groups=2), "group 1 has no series"),
    (dict(groups=torch.full((12,), 3), n_groups=2), r"groups must lie in \[0, 2\)"),
    (dict(init=torch.zeros(5, 2)), r"init must have shape \(L, 1\)"),
    (dict(init=torch.zeros(5, 1), length=6), "length=6 disagrees with init's length 5"),
    (dict(init="medoid"), "init must be None, 'mean' or a tensor"),
    (dict(n_groups=3), "n_groups=3 needs groups"),
    (dict(groups=torch.arange(12) % 2, length=[5, 0]), r"length must be an int >= 1, or with groups a \(2,\)"),
    (dict(groups=torch.arange(12) % 2, length=[5, 6, 7]), r"length must be an int >= 1, or with groups a \(2,\)"),
    (dict(groups=torch.arange(12) % 2, length=[5, 9], init=torch.zeros(2, 8, 1)), "up to 9 steps but init has only 8"),
])
def test_errors(data, kw, match):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        soft_dtw_barycenter(X, 1.0, **kw)


@pytest.mark.cuda
def test_cuda_batched_barycenters_match_cpu():
    X, y = make_cbf(40, length=48, seed=2)
    lengths = torch.randint(30, 49, (40,), generator=torch.Generator().manual_seed(0))
    # Without the annealing warm start, losses[0] is the objective at the same initialisation on both
    # devices; with it, 30 float-sensitive optimiser steps come first and the starts differ.
    cpu = soft_dtw_barycenter(X, 1.0, groups=y, x_lengths=lengths, max_iter=10, anneal=False)
    gpu = soft_dtw_barycenter(X.cuda(), 1.0, groups=y.cuda(), x_lengths=lengths.cuda(), max_iter=10, anneal=False)
    assert gpu.barycenter.device.type == "cuda"
    torch.testing.assert_close(gpu.losses[0], cpu.losses[0], rtol=1e-4, atol=1e-3)
    assert float(gpu.losses[-1].sum()) <= float(cpu.losses[0].sum())
    assert float(gpu.losses[-1].sum()) == pytest.approx(float(cpu.losses[-1].sum()), rel=2e-2)


@pytest.mark.parametrize("phi, t0", [
    (lambda t: ((t - 2.0) ** 2, 2.0 * (t - 2.0)), 1e-3),        # extrapolates to the minimum at 2
    (lambda t: ((t - 2.0) ** 2, 2.0 * (t - 2.0)), 50.0),        # zooms back from far beyond it
    (lambda t: (math.cos(3 * t) - t, -3 * math.sin(3 * t) - 1) if t < 1.5 else (math.inf, math.nan), 1.0),
    (lambda t: ((t - 1.0) ** 4, 4 * (t - 1.0) ** 3) if t < 5 else (math.inf, math.nan), 100.0),  # inf past 5
])
def test_line_search_returns_a_strong_wolfe_step(phi, t0):
    from softdtw.barycenter import _strong_wolfe
    f0, g0 = phi(0.0)
    t, f, payload = _strong_wolfe(lambda t: (*phi(t), t), f0, g0, t0, xtol=1e-12)
    assert t > 0 and payload == t and f == phi(t)[0]
    assert f <= f0 + 1e-4 * t * g0                     # sufficient decrease
    assert abs(phi(t)[1]) <= 0.9 * abs(g0)             # curvature (strong)


def test_line_search_on_an_ascent_direction_gives_up_without_a_step():
    from softdtw.barycenter import _strong_wolfe
    assert _strong_wolfe(lambda t: (t, 1.0, None), 0.0, -1.0, 1.0, xtol=1e-9) == (0.0, 0.0, None)


def test_no_private_torch_optimizer_api():
    import softdtw.barycenter as mod
    source = open(mod.__file__).read()
    assert "torch.optim" not in source and "_strong_wolfe(" in source


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_same_start_as_tslearn_objective_no_worse(seed, gamma):
    """From tslearn's own start (the Euclidean mean), with each library's defaults and 50 iterations
    at most, ours ends at an objective <= tslearn's (scipy's L-BFGS-B on the flattened barycenter)."""
    ts = pytest.importorskip("tslearn.barycenters")
    X, y = make_cbf(12, length=32, seed=seed, dtype=torch.float64)
    if seed == 3:
        X = X[y == 0]
    init = X.mean(0)
    z_ts = ts.softdtw_barycenter(X.numpy(), gamma=gamma, max_iter=50, init=init.numpy())
    res = soft_dtw_barycenter(X, gamma, init=init, max_iter=50)
    ours = _objective(res.barycenter, X, gamma)
    theirs = _objective(torch.from_numpy(z_ts), X, gamma)
    assert ours <= theirs + 1e-9 * abs(theirs)
    assert ours < _objective(init, X, gamma)


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_first_iteration_is_scipys(gamma):
    """The first L-BFGS iteration (steepest descent, first trial step 1 / ||g||_2) lands where scipy's
    L-BFGS-B does (tslearn, max_iter=1): a much shorter first step sent an OSULeaf-shaped problem into
    a basin 36 % above tslearn's objective (issue 27)."""
    ts = pytest.importorskip("tslearn.barycenters")
    X, _ = make_cbf(10, length=24, seed=2, dtype=torch.float64)
    init = X.mean(0)
    z_ts = torch.from_numpy(ts.softdtw_barycenter(X.numpy(), gamma=gamma, max_iter=1, init=init.numpy()))
    res = soft_dtw_barycenter(X, gamma, init=init, max_iter=1)
    assert _objective(res.barycenter, X, gamma) == pytest.approx(_objective(z_ts, X, gamma), rel=1e-6)


def _scipy_lbfgsb(X, gamma, init, tol, max_iter):
    """scipy's L-BFGS-B (as tslearn runs it: ``tol`` sets ftol and gtol) on sum_p sdtw(z, x_p)."""
    so = pytest.importorskip("scipy.optimize")

    def fun(z):
        Z = torch.from_numpy(z).view_as(init).clone().requires_grad_()
        v = soft_dtw(Z.expand(len(X), -1, -1), X, gamma).sum()
        v.backward()
        return float(v.detach()), Z.grad.numpy().ravel().copy()
    return so.minimize(fun, init.numpy().ravel(), jac=True, method="L-BFGS-B", tol=tol,
                       options=dict(maxiter=max_iter))


@pytest.mark.parametrize("seed, gamma", [(0, 0.1), (0, 1.0), (2, 0.1)])
@pytest.mark.parametrize("tol", [None, 1e-3])
def test_tol_stops_where_scipys_rule_does(seed, gamma, tol):
    """``tol`` is scipy L-BFGS-B's ftol = gtol (tslearn's tol): on small CBF problems whose iterates are
    scipy's (same start), ours stops after the same iteration, at the same objective, with the default
    tol (1e-4) and with tslearn's 1e-3."""
    X, _ = make_cbf(12, length=32, seed=seed, dtype=torch.float64)
    init = X.mean(0)
    kw = {} if tol is None else {"tol": tol}
    res = soft_dtw_barycenter(X, gamma, init=init, max_iter=50, **kw)
    ref = _scipy_lbfgsb(X, gamma, init, 1e-4 if tol is None else tol, 50)
    assert res.converged and ref.success
    assert res.n_iter == ref.nit
    assert float(res.losses[-1]) == pytest.approx(ref.fun, rel=1e-9)


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_default_tol_rule_on_the_losses(gamma):
    """The default run stops at the first iteration whose relative decrease (F_k - F_k+1) /
    max(|F_k|, |F_k+1|, 1) or largest gradient entry is <= 1e-4, and not before."""
    X, _ = make_cbf(16, length=40, seed=4, dtype=torch.float64)
    init = X.mean(0)
    res = soft_dtw_barycenter(X, gamma, init=init, max_iter=100)
    f = res.losses.tolist()
    rel = [(a - b) / max(abs(a), abs(b), 1.0) for a, b in zip(f[:-1], f[1:])]
    assert res.converged and 1 <= res.n_iter < 100
    assert all(r > 1e-4 for r in rel[:-1])
    Z = res.barycenter.clone().requires_grad_()
    soft_dtw(Z.expand(len(X), -1, -1), X, gamma).sum().backward()
    assert rel[-1] <= 1e-4 or float(Z.grad.abs().max()) <= 1e-4


def test_tol_gradient_test_at_the_start_returns_the_init(data):
    """scipy's gtol test also runs at the start: a gradient already within tol returns the init."""
    X, _ = data
    init = X.mean(0)
    res = soft_dtw_barycenter(X, 1.0, init=init, max_iter=10, tol=1e9)
    assert res.converged and res.n_iter == 0 and res.losses.shape == (1,)
    torch.testing.assert_close(res.barycenter, init, rtol=0, atol=0)


@pytest.mark.parametrize("kw", [
    {},
    {"weights": torch.tensor([1.0, 0.5, 2.0, 0.0, 1.0, 3.0]), "groups": torch.tensor([0, 1, 0, 1, 1, 0])},
    {"x_lengths": torch.tensor([20, 16, 13, 20, 18, 9]), "bandwidth": 6.0, "batch_size": 4},
])
def test_cpu_direct_evaluation_matches_autograd(kw):
    """The cpu fast path (backend forward + backward, no autograd) gives the objective and gradient of
    the soft_dtw + autograd path."""
    import softdtw.barycenter as B

    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 20, 2, generator=g, dtype=torch.float64)
    kw = dict(kw)
    P = X.shape[0]
    groups = kw.pop("groups", torch.zeros(P, dtype=torch.int64))
    K = int(groups.max()) + 1
    w = kw.pop("weights", torch.ones(P, dtype=torch.float64))
    lengths = kw.pop("x_lengths", torch.full((P,), 20))
    chunk = kw.pop("batch_size", P)
    Z = torch.randn(K, 15, 2, generator=g, dtype=torch.float64)
    zl = torch.full((P,), 15)
    direct = B._direct_cpu(X, Z, groups, w, lengths, zl, lengths, K, chunk, "sqeuclidean",
                           kw.get("bandwidth"), None, "auto", None)
    per_group, grad = direct(Z, 0.3)
    Zr = Z.clone().requires_grad_(True)
    v = soft_dtw(Zr.index_select(0, groups), X, 0.3, x_lengths=zl, y_lengths=lengths, bandwidth=kw.get("bandwidth"))
    want = torch.zeros(K, dtype=torch.float64).index_add(0, groups, w * v)
    want.sum().backward()
    torch.testing.assert_close(per_group, want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, Zr.grad, rtol=1e-12, atol=1e-12)
    inf_group, zero = direct(torch.full_like(Z, math.inf), 0.3)
    assert bool(torch.isinf(inf_group).all()) and not bool(zero.any())


@pytest.mark.parametrize("divergence", [False, True])
def test_per_group_lengths(data, divergence):
    """length=(K,) fits barycenter k at length[k] steps, NaN-padded to the longest, each with the
    objective of that barycenter alone at its own length (the padded steps play no part)."""
    X, _ = data
    lengths = torch.tensor([32, 20, 25, 32, 18, 30, 32, 22, 27, 32, 19, 31])
    groups = torch.arange(12) % 3
    res = soft_dtw_barycenter(X, 1.0, groups=groups, x_lengths=lengths, length=torch.tensor([20, 9, 14]),
                              max_iter=15, divergence=divergence)
    Z = res.barycenter
    assert Z.shape == (3, 20, 1)
    assert torch.isnan(Z[:, :, 0]).sum(1).tolist() == [0, 11, 6] and torch.isfinite(Z[0]).all()
    assert torch.isfinite(Z[1, :9]).all() and torch.isfinite(Z[2, :14]).all()
    for k, n in enumerate([20, 9, 14]):
        m = groups == k
        ref = _objective(Z[k, :n], X[m], 1.0, lengths=lengths[m], divergence=divergence)
        assert float(res.losses[-1, k]) == pytest.approx(ref, rel=1e-7, abs=1e-7)
    assert (res.losses[-1] <= res.losses[0] + 1e-9).all()
    # All lengths equal: the same as the int length.
    a = soft_dtw_barycenter(X, 1.0, groups=groups, length=[16, 16, 16], max_iter=5)
    b = soft_dtw_barycenter(X, 1.0, groups=groups, length=16, max_iter=5)
    assert torch.equal(a.barycenter, b.barycenter)


def test_barycenter_is_detached_from_inputs_that_require_grad():
    """The minimiser is not differentiated: X or init requiring grad give a result without a graph (it once carried
    the mean initialisation's, a gradient of 1/P that finite differences contradict)."""
    X = torch.randn(4, 6, 1, dtype=torch.float64, requires_grad=True)
    res = soft_dtw_barycenter(X, 0.1, max_iter=5)
    assert res.barycenter.grad_fn is None and not res.barycenter.requires_grad
    init = X[0].detach().clone().requires_grad_()
    assert soft_dtw_barycenter(X, 0.1, init=init, max_iter=5).barycenter.grad_fn is None


def test_nan_padded_result_warm_starts_a_per_length_call():
    """Barycenters of different lengths come back NaN-padded; passed back as init with the same lengths they start
    where the first call ended (the steps past length[k] are ignored, as the docstring says)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 10, 2, generator=g, dtype=torch.float64)
    groups, length = [0, 1, 0, 1, 2, 2], [3, 5, 10]
    first = soft_dtw_barycenter(X, 0.1, groups=groups, length=length, max_iter=5)
    assert torch.isnan(first.barycenter[0, 3:]).all()
    again = soft_dtw_barycenter(X, 0.1, groups=groups, length=length, init=first.barycenter, max_iter=5)
    assert torch.allclose(again.losses[0], first.losses[-1], rtol=1e-12)
    assert float(again.losses[-1].sum()) <= float(first.losses[-1].sum())
    with pytest.raises(ValueError, match="need length="):  # NaN-padded, but no lengths to say where
        soft_dtw_barycenter(X, 0.1, groups=groups, init=first.barycenter)
