"""soft_dtw_hvp (functional.py): value, gradient and one Hessian-vector product per pair, for a direction given up
front. Every backend against the double backward of soft_dtw (the reference backend's, float64) and against finite
differences of the gradient; the cuda fused kernel (hvp_vgh_xy_kernel) against the float64 cpu backend; shapes,
lengths, bands, hard DTW, and the errors for bad directions."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import softdtw
from softdtw.backends.cuda import hvp as cuda_hvp
from tests._helpers import rel_err

BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _dev(backend):
    return "cuda" if backend == "cuda" else "cpu"


def _data(B, N, M, D, seed, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(*s, generator=g, dtype=torch.float64) for s in ((B, N, D), (B, M, D), (B, N, D), (B, M, D))]
    return [a.to(device=device, dtype=dtype) for a in t]


def _oracle(x, y, xd, yd, gamma, cost="sqeuclidean", **kw):
    """(v, gx, gy, hx, hy) by autograd's double backward on the reference backend (float64, CPU)."""
    x, y = (t.detach().cpu().double().requires_grad_(True) for t in (x, y))
    xd, yd = xd.detach().cpu().double(), yd.detach().cpu().double()
    v = softdtw.soft_dtw(x, y, gamma, cost=cost, backend="reference", **kw)
    gx, gy = torch.autograd.grad(v.sum(), (x, y), create_graph=True)
    hx, hy = torch.autograd.grad((gx * xd).sum() + (gy * yd).sum(), (x, y))
    return v.detach(), gx.detach(), gy.detach(), hx, hy


def _lengths(kw, device):
    return {k: (torch.tensor(v, device=device) if isinstance(v, list) else v) for k, v in kw.items()}


CASES = {  # B, N, M, D, gamma, cost, options
    "square": (3, 9, 9, 1, 1.0, "sqeuclidean", {}),
    "n_ne_m": (2, 11, 6, 2, 0.1, "sqeuclidean", {}),
    "lengths": (3, 10, 8, 3, 0.5, "sqeuclidean", {"x_lengths": [10, 4, 7], "y_lengths": [8, 8, 3]}),
    "band": (2, 12, 10, 1, 0.3, "sqeuclidean", {"bandwidth": 3}),
    "small_gamma": (2, 8, 7, 1, 1e-3, "sqeuclidean", {}),
    "large_gamma": (2, 8, 7, 2, 10.0, "sqeuclidean", {}),
    "l1": (2, 9, 7, 2, 0.5, "l1", {}),
    "hard": (2, 7, 6, 1, 0.0, "sqeuclidean", {}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_double_backward(backend, name):
    B, N, M, D, gamma, cost, kw = CASES[name]
    x, y, xd, yd = _data(B, N, M, D, seed=len(name), device=_dev(backend))
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, gamma, cost=cost, backend=backend, **_lengths(kw, _dev(backend)))
    want = _oracle(x, y, xd, yd, gamma, cost, **_lengths(kw, "cpu"))
    for got, ref, what in zip(r, want, ("value", "grad_x", "grad_y", "hvp_x", "hvp_y")):
        assert got.shape == ref.shape, what
        assert got.dtype == torch.float64, what
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-9, atol=1e-9, msg=what)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hvp_is_the_derivative_of_the_gradient(backend):
    """Central differences of the gradient along (x_dot, y_dot) give the HVP (float64)."""
    x, y, xd, yd = _data(2, 8, 6, 2, seed=3, device=_dev(backend))
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5, backend=backend)
    eps = 1e-5
    hi = softdtw.soft_dtw_hvp(x + eps * xd, y + eps * yd, xd, yd, 0.5, backend=backend)
    lo = softdtw.soft_dtw_hvp(x - eps * xd, y - eps * yd, xd, yd, 0.5, backend=backend)
    torch.testing.assert_close(r.hvp_x, (hi.grad_x - lo.grad_x) / (2 * eps), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(r.hvp_y, (hi.grad_y - lo.grad_y) / (2 * eps), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_and_gradient_are_soft_dtws(backend):
    x, y, xd, _ = _data(4, 10, 7, 3, seed=5, device=_dev(backend))
    r = softdtw.soft_dtw_hvp(x, y, xd, None, 0.2, backend=backend)
    xr, yr = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    v = softdtw.soft_dtw(xr, yr, 0.2, backend=backend)
    gx, gy = torch.autograd.grad(v.sum(), (xr, yr))
    torch.testing.assert_close(r.value, v.detach())
    torch.testing.assert_close(r.grad_x, gx)
    torch.testing.assert_close(r.grad_y, gy)


def test_fused_costs_run_one_hvp_cost_others_the_double_backward(monkeypatch):
    """sqeuclidean and l1 take the backend's hvp_cost on the cost table (no first-order passes, no graph); cosine and
    callables the double backward; both match the reference backend's double backward."""
    from softdtw import functional

    x, y, xd, yd = _data(2, 7, 6, 2, seed=9)
    real = functional._hvp_autograd
    used = []
    monkeypatch.setattr(functional, "_hvp_autograd", lambda *a: used.append(a[1]) or real(*a))
    for cost in ("sqeuclidean", "l1", "cosine", lambda a, b: 0.5 * ((a.unsqueeze(2) - b.unsqueeze(1)) ** 2).sum(-1)):
        r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.3, cost=cost, backend="cpu")
        want = _oracle(x, y, xd, yd, 0.3, cost)
        for got, ref in zip(r, want):
            torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    assert used[0] == "cosine" and callable(used[1]) and len(used) == 2


def test_unbatched_and_y_dot_none():
    x, y, xd, _ = _data(1, 6, 5, 2, seed=7)
    r = softdtw.soft_dtw_hvp(x[0], y[0], xd[0], gamma=0.4)
    b = softdtw.soft_dtw_hvp(x, y, xd, torch.zeros_like(y), gamma=0.4)
    assert r.value.shape == () and r.grad_x.shape == (6, 2) and r.hvp_y.shape == (5, 2)
    for u, v in zip(r, b):
        torch.testing.assert_close(u, v[0])


def test_lengths_zero_past_them():
    x, y, xd, yd = _data(2, 9, 8, 1, seed=11)
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.3, x_lengths=[9, 5], y_lengths=[4, 8])
    assert (r.grad_x[1, 5:] == 0).all() and (r.hvp_x[1, 5:] == 0).all()
    assert (r.grad_y[0, 4:] == 0).all() and (r.hvp_y[0, 4:] == 0).all()


def test_float32_inputs_give_float32():
    x, y, xd, yd = _data(2, 8, 8, 1, seed=2, dtype=torch.float32)
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5, backend="cpu")
    assert all(t.dtype == torch.float32 for t in r)
    want = _oracle(x, y, xd, yd, 0.5)
    assert rel_err(r.hvp_x.double(), want[3]) < 1e-4


def test_no_graph_and_gamma_tensor():
    x, y, xd, yd = _data(2, 6, 6, 1, seed=4)
    g = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    r = softdtw.soft_dtw_hvp(x.requires_grad_(True), y, xd, yd, g)
    assert all(not t.requires_grad for t in r)
    torch.testing.assert_close(r.hvp_x, softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5).hvp_x)


def test_bad_directions_raise():
    x, y, xd, yd = _data(2, 6, 5, 2, seed=1)
    with pytest.raises(ValueError, match="x_dot must have x's shape"):
        softdtw.soft_dtw_hvp(x, y, xd[:, :4], yd)
    with pytest.raises(ValueError, match="y_dot must have y's shape"):
        softdtw.soft_dtw_hvp(x, y, xd, yd[..., :1])
    with pytest.raises(ValueError, match=r"x_dot must have x's shape \(6, 2\).*got \(2, 6, 2\)"):
        softdtw.soft_dtw_hvp(x[0], y[0], xd)  # unbatched x, batched direction
    bad = xd.clone()
    bad[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="x_dot contains NaN"):
        softdtw.soft_dtw_hvp(x, y, bad, yd)
    with pytest.raises(ValueError, match="x contains NaN|x .*NaN"):
        softdtw.soft_dtw_hvp(torch.full_like(x, float("nan")), y, xd, yd)


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), N=st.integers(1, 7), M=st.integers(1, 7), D=st.integers(1, 3),
       gamma=st.sampled_from([0.01, 0.3, 2.0]), seed=st.integers(0, 10_000))
def test_hvp_is_linear_and_symmetric(B, N, M, D, gamma, seed):
    """H is symmetric (<u, H w> = <w, H u>) and the product linear in the direction (cpu, float64)."""
    x, y, u, uy = _data(B, N, M, D, seed)
    _, _, w, wy = _data(B, N, M, D, seed + 1)
    ru = softdtw.soft_dtw_hvp(x, y, u, uy, gamma, backend="cpu")
    rw = softdtw.soft_dtw_hvp(x, y, w, wy, gamma, backend="cpu")
    left = (w * ru.hvp_x).sum((1, 2)) + (wy * ru.hvp_y).sum((1, 2))
    right = (u * rw.hvp_x).sum((1, 2)) + (uy * rw.hvp_y).sum((1, 2))
    torch.testing.assert_close(left, right, rtol=1e-8, atol=1e-8)
    rs = softdtw.soft_dtw_hvp(x, y, 2 * u - w, 2 * uy - wy, gamma, backend="cpu")
    torch.testing.assert_close(rs.hvp_x, 2 * ru.hvp_x - rw.hvp_x, rtol=1e-8, atol=1e-8)


# --- the cuda fused kernel ----------------------------------------------------------------------------

FUSED = {  # B, N, M, D, gamma, cost, dtype, options
    "f32_256": (64, 256, 256, 1, 1.0, "sqeuclidean", torch.float32, {}),
    "f32_k8_w1": (300, 256, 256, 1, 1.0, "sqeuclidean", torch.float32, {}),  # the benchmark's layout
    "f32_k_halved": (300, 64, 400, 1, 0.5, "sqeuclidean", torch.float32, {}),  # K = 16 -> K = 8, W = 2
    "f32_small_gamma": (8, 100, 90, 1, 0.01, "sqeuclidean", torch.float32, {}),
    "f32_lengths": (6, 120, 130, 2, 0.5, "sqeuclidean", torch.float32,
                    {"x_lengths": [120, 7, 64, 1, 90, 33], "y_lengths": [130, 130, 5, 40, 1, 77]}),
    "f32_band": (4, 80, 70, 1, 0.3, "sqeuclidean", torch.float32, {"bandwidth": 9}),
    "f32_l1": (5, 60, 50, 3, 0.5, "l1", torch.float32, {}),
    "f32_wide_w": (2, 64, 500, 1, 1.0, "sqeuclidean", torch.float32, {}),
    "f32_d8": (3, 40, 33, 8, 1.0, "sqeuclidean", torch.float32, {}),
    "f64": (5, 70, 60, 1, 0.2, "sqeuclidean", torch.float64, {}),
    "f64_d4": (3, 50, 40, 4, 0.7, "sqeuclidean", torch.float64, {"x_lengths": [50, 20, 9]}),
    "f32_hard": (4, 40, 40, 1, 0.0, "sqeuclidean", torch.float32, {}),
}


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(FUSED))
def test_cuda_fused_kernel_matches_float64(name, monkeypatch):
    """float64 cases against the cpu backend; float32 ones (whose forward runs on local differences in float32,
    hvp_warp.cu's DIFF) against the float64 cuda kernel, which the float64 cases hold to the cpu backend."""
    B, N, M, D, gamma, cost, dtype, kw = FUSED[name]
    x, y, xd, yd = _data(B, N, M, D, seed=len(name), dtype=dtype, device="cuda")
    calls = []
    real = cuda_hvp.value_grad_hvp_xy
    monkeypatch.setattr(cuda_hvp, "value_grad_hvp_xy", lambda *a, **k: calls.append(1) or real(*a, **k))
    import softdtw.backends.cuda as cuda_backend
    monkeypatch.setattr(cuda_backend, "_value_grad_hvp_xy", cuda_hvp.value_grad_hvp_xy)
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, gamma, cost=cost, backend="cuda", **_lengths(kw, "cuda"))
    plan = cuda_hvp.vgh_plan(B, N, M, D, dtype)
    assert (plan is not None) == bool(calls), (plan, calls)
    ref = "cpu" if dtype == torch.float64 else "cuda"
    want = softdtw.soft_dtw_hvp(*(t.double().to(_dev(ref)) for t in (x, y, xd, yd)), gamma, cost=cost, backend=ref,
                                **_lengths(kw, _dev(ref)))
    want = [t.cpu() for t in want]
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for got, ref, what in zip(r, want, ("value", "grad_x", "grad_y", "hvp_x", "hvp_y")):
        assert got.dtype == dtype and got.shape == ref.shape, what
        assert rel_err(got.double().cpu(), ref) < tol, (what, rel_err(got.double().cpu(), ref))


@pytest.mark.cuda
def test_cuda_falls_back_past_the_kernel():
    """Pairs wider than the kernel and D past its registers take the double backward: same numbers."""
    for B, N, M, D in ((2, 30, 700, 1), (2, 20, 24, 16)):
        x, y, xd, yd = _data(B, N, M, D, seed=M, device="cuda")
        assert cuda_hvp.vgh_plan(B, N, M, D, torch.float64) is None
        r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5, backend="cuda")
        want = softdtw.soft_dtw_hvp(x.cpu(), y.cpu(), xd.cpu(), yd.cpu(), 0.5, backend="cpu")
        for got, ref in zip(r, want):
            torch.testing.assert_close(got.cpu(), ref, rtol=1e-9, atol=1e-9)


@pytest.mark.cuda
def test_cuda_checks_after_the_kernel():
    """On cuda the values are checked by a kernel read after the call's own: bad directions and inputs still
    raise, and NaN padding of x reruns with the lengths it gives."""
    x, y, xd, yd = _data(3, 12, 9, 1, seed=8, dtype=torch.float32, device="cuda")
    bad = xd.clone()
    bad[1, 3, 0] = float("inf")
    with pytest.raises(ValueError, match="x_dot contains Inf"):
        softdtw.soft_dtw_hvp(x, y, bad, yd, 0.5)
    bad = yd.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="y_dot contains NaN"):
        softdtw.soft_dtw_hvp(x, y, xd, bad, 0.5)
    with pytest.raises(ValueError, match="x contains NaN"):
        xb = x.clone()
        xb[2, 4, 0] = float("nan")
        softdtw.soft_dtw_hvp(xb, y, xd, yd, 0.5)
    padded = x.clone()
    padded[1, 7:] = float("nan")
    r = softdtw.soft_dtw_hvp(padded, y, xd, yd, 0.5)
    want = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5, x_lengths=torch.tensor([12, 7, 12], device="cuda"))
    for got, ref in zip(r, want):
        torch.testing.assert_close(got, ref)


@pytest.mark.cuda
@pytest.mark.parametrize("gamma", [1.0, 0.1, 1e-3])
def test_cuda_float32_differences_on_large_costs(gamma):
    """Random walks (costs up to ~1e3, the precision model's hardest case: benchmarks/probes/hvp_diff_model.py gives
    dx within 2.1e-4 of float64 at gamma = 1) through the float32 kernels on local differences, against the float64
    kernel: within hvp_xy's float32 tolerance (2e-3), through soft_dtw_hvp and the double backward (hvp_xy). 256
    columns: the widest pair of the float64 kernel (HVPW_MAX_M_F64), so both sides run it."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 200, 1, generator=g, dtype=torch.float64).cumsum(1)
    y = torch.randn(4, 256, 1, generator=g, dtype=torch.float64).cumsum(1)
    xd = torch.randn(4, 200, 1, generator=g, dtype=torch.float64)
    yd = torch.randn(4, 256, 1, generator=g, dtype=torch.float64)
    args = [t.cuda() for t in (x, y, xd, yd)]
    want = softdtw.soft_dtw_hvp(*args, gamma)
    got = softdtw.soft_dtw_hvp(*(t.float() for t in args), gamma)
    for a, b, what in zip(got, want, ("value", "grad_x", "grad_y", "hvp_x", "hvp_y")):
        assert rel_err(a, b) < 2e-3, (what, rel_err(a, b))
    import softdtw.backends.cuda as cuda_backend
    gt = torch.tensor(gamma, device="cuda")
    xl = torch.full((4,), 200, device="cuda")
    yl = torch.full((4,), 256, device="cuda")
    ref = cuda_backend.hvp_xy("sqeuclidean", *args[:2], gt.double(), xl, yl, None, *args[2:],
                              torch.zeros(4, device="cuda", dtype=torch.float64), gamma_terms=False)
    out = cuda_backend.hvp_xy("sqeuclidean", *(t.float() for t in args[:2]), gt, xl, yl, None,
                              *(t.float() for t in args[2:]), torch.zeros(4, device="cuda"), gamma_terms=False)
    assert ref is not None and out is not None  # both take the kernel
    for i in (0, 3, 4):  # s1, dx, dy
        assert rel_err(out[i], ref[i]) < 2e-3, (i, rel_err(out[i], ref[i]))



@pytest.mark.cuda
@pytest.mark.parametrize("B, N, M, kw", [
    (5, 40, 33, {"x_lengths": [40, 1, 17, 40, 1], "y_lengths": [33, 20, 1, 1, 1]}),
    (3, 30, 400, {"x_lengths": [30, 1, 12], "y_lengths": [400, 250, 1]}),  # two warps a pair
])
def test_cuda_fused_value_per_pair(B, N, M, kw):
    """The fused kernel's value pair by pair (float32: the costs down column 0 and h along the last row, summed in
    float64) against soft_dtw's first-order forward, with one-step pairs, one-column pairs and both."""
    x, y, xd, yd = _data(B, N, M, 2, seed=7, dtype=torch.float32, device="cuda")
    kw = _lengths(kw, "cuda")
    assert cuda_hvp.vgh_plan(B, N, M, 2, torch.float32) is not None
    r = softdtw.soft_dtw_hvp(x, y, xd, yd, 0.5, **kw)
    want = softdtw.soft_dtw(x.double(), y.double(), 0.5, **kw)
    assert (r.value.double() - want).abs().max() <= 1e-5 * want.abs().max(), (r.value, want)
