"""The custom ops are first-class: opcheck per op and torch.compile(fullgraph=True) of a training step."""
import pytest
import torch

import softdtw
import softdtw.costs
import softdtw._windows
from softdtw import _ops
from tests._helpers import case

BACKENDS = ["reference", "cpu"]


def _args(dtype=torch.float64, requires_grad=False):
    x, y = case(2, 5, 6, 2, dtype=dtype, requires_grad=requires_grad)
    gamma = torch.tensor(0.5, dtype=dtype)
    xl, yl = torch.tensor([5, 3]), torch.tensor([6, 4])
    window = softdtw._windows.build_window(xl, yl, 5, 6, 2, None)
    return x, y, gamma, xl, yl, window


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward_ops(backend, requires_grad):
    x, y, gamma, xl, yl, window = _args(requires_grad=requires_grad)
    memory = "store" if requires_grad else "none"
    torch.library.opcheck(_ops.forward, (x, y, gamma, "sqeuclidean", xl, yl, window, memory, backend))
    torch.library.opcheck(_ops.forward, (x, y, gamma, "l1", xl, yl, None, memory, backend))
    C = softdtw.costs.pairwise_cost("sqeuclidean", x.detach(), y.detach()).requires_grad_(requires_grad)
    torch.library.opcheck(_ops.forward_cost, (C, gamma, xl, yl, window, memory, backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck_backward_ops(backend):
    x, y, gamma, xl, yl, window = _args()
    value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", backend)
    grad = torch.rand(2, dtype=torch.float64)
    torch.library.opcheck(_ops.backward,
                          (grad, x, y, gamma, "sqeuclidean", xl, yl, window, value, saved, "store", backend))
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y)
    value, saved = _ops.forward_cost(C, gamma, xl, yl, window, "store", backend)
    torch.library.opcheck(_ops.backward_cost, (grad, C, gamma, xl, yl, window, value, saved, "store", backend))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("needs", [1, 2, 4, 5, 6])
def test_backward_op_computes_only_the_gradients_it_is_asked_for(backend, needs):
    """needs (bits: 1 dx, 2 dy, 4 dgamma; the autograd formula sets them from needs_input_grad): each output asked
    for equals the full call's, the others come back empty (0,), and opcheck (fake shapes included) holds. Bitwise
    on the reference backend; the cpu one takes its exact weights without dgamma (backends/cpu.py, backward), the
    same gradient to rounding."""
    x, y, gamma, xl, yl, window = _args()
    value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", backend)
    grad = torch.rand(2, dtype=torch.float64)
    args = (grad, x, y, gamma, "sqeuclidean", xl, yl, window, value, saved, "store", backend)
    full = _ops.backward(*args)
    part = _ops.backward(*args, False, False, None, needs)
    for k in range(3):
        if needs >> k & 1:
            tol = 0 if backend == "reference" else 1e-12
            torch.testing.assert_close(part[k], full[k], rtol=tol, atol=tol)
        else:
            assert part[k].shape == (0,)
    assert part[3].shape == (0,)
    torch.library.opcheck(_ops.backward, args + (False, False, None, needs))


def test_autograd_asks_the_backward_op_for_what_it_needs(monkeypatch):
    """The forward op's autograd formula asks for dx alone when only x requires grad (a target y, a constant
    gamma), and for all three with create_graph=True (the backward op's own autograd reads them)."""
    x, y, gamma, xl, yl, window = _args()
    x.requires_grad_()
    seen = []
    real = _ops.backward

    def spy(*a):
        seen.append(a[15] if len(a) > 15 else 7)
        return real(*a)

    monkeypatch.setattr(_ops, "backward", spy)
    value, _ = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", "cpu")
    (dx,) = torch.autograd.grad(value.sum(), x)
    value2, _ = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", "cpu")
    (dx2,) = torch.autograd.grad(value2.sum(), x, create_graph=True)
    assert seen == [1, 7]
    torch.testing.assert_close(dx, dx2.detach(), rtol=1e-12, atol=1e-12)  # cpu: exact weights without dgamma


class _Forecaster(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 12))
        self.loss = softdtw.SoftDTW(gamma=0.1, reduction="mean")

    def forward(self, past, future):
        pred = self.net(past.squeeze(-1)).unsqueeze(-1)
        return self.loss(pred, future)


def test_torch_compile_fullgraph_training_matches_eager():
    torch.manual_seed(0)
    past, future = torch.randn(8, 12, 1), torch.randn(8, 12, 1)
    eager = _Forecaster()
    compiled_model = _Forecaster()
    compiled_model.load_state_dict(eager.state_dict())
    step = torch.compile(compiled_model, fullgraph=True)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.01)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.01)
    for _ in range(3):
        for model, opt, fn in ((eager, opt_e, eager), (compiled_model, opt_c, step)):
            opt.zero_grad()
            loss = fn(past, future)
            loss.backward()
            opt.step()
        assert torch.allclose(eager(past, future), compiled_model(past, future), rtol=1e-5, atol=1e-6)
    for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
        assert torch.allclose(pe, pc, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_path_equals_the_custom_ops(backend):
    """Eager calls use autograd.Functions over the same backend code; the ops must agree bitwise."""
    x, y, gamma, xl, yl, window = _args(requires_grad=True)
    gamma = gamma.clone().requires_grad_()
    grad = torch.rand(2, dtype=torch.float64)
    eager = _ops.fused_value(x, y, gamma, "l1", xl, yl, window, "store", backend)
    ge = torch.autograd.grad((eager * grad).sum(), (x, y, gamma))
    op, _ = _ops.forward(x, y, gamma, "l1", xl, yl, window, "store", backend)
    go = torch.autograd.grad((op * grad).sum(), (x, y, gamma))
    assert torch.equal(eager, op) and all(torch.equal(a, b) for a, b in zip(ge, go))
    C = softdtw.costs.pairwise_cost("sqeuclidean", x.detach(), y.detach()).requires_grad_()
    eager = _ops.cost_value(C, gamma, xl, yl, window, "store", backend)
    ge = torch.autograd.grad((eager * grad).sum(), (C, gamma))
    op, _ = _ops.forward_cost(C, gamma, xl, yl, window, "store", backend)
    go = torch.autograd.grad((op * grad).sum(), (C, gamma))
    assert torch.equal(eager, op) and all(torch.equal(a, b) for a, b in zip(ge, go))


def test_torch_compile_dynamic_shapes_on_cpu():
    def loss(x, y):
        return softdtw.soft_dtw(x, y, 0.2).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for B, N, M in ((3, 20, 24), (5, 33, 17)):
        x = torch.randn(B, N, 2, requires_grad=True)
        y = torch.randn(B, M, 2)
        (ge,) = torch.autograd.grad(loss(x, y), x)
        (gc,) = torch.autograd.grad(compiled(x, y), x)
        assert torch.allclose(ge, gc, rtol=1e-5, atol=1e-6)


def test_torch_compile_takes_gamma_as_a_changing_float_argument():
    """A gamma schedule under torch.compile(fullgraph=True): the second value makes gamma a SymFloat (automatic
    dynamic), which float() and math.isfinite cannot trace. Each value gives eager's loss and gradient, hard DTW
    (gamma = 0) included; a negative, NaN or infinite gamma raises instead of running."""
    import torch._dynamo

    def loss(x, y, gamma):
        return softdtw.soft_dtw(x, y, gamma).mean()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True)
    g = torch.Generator().manual_seed(3)
    for gamma in (0.5, 0.1, 0.0, 1.3):
        x = torch.randn(4, 20, 2, generator=g, requires_grad=True)
        y = torch.randn(4, 23, 2, generator=g)
        (gc,) = torch.autograd.grad(vc := compiled(x, y, gamma), x)
        (ge,) = torch.autograd.grad(ve := loss(x, y, gamma), x)
        torch.testing.assert_close(vc, ve, rtol=1e-6, atol=0)
        torch.testing.assert_close(gc, ge, rtol=1e-6, atol=1e-7)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(Exception):
            compiled(x.detach(), y, bad)


def test_torch_compile_gamma_schedule_compiles_twice():
    """A float gamma that changes every call costs one recompile, not one per value (the gamma tensor is built by an
    add, which Dynamo keeps symbolic; torch.full of a symbolic float specialised on every value)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x, y, gamma: softdtw.soft_dtw(x, y, gamma).mean(), fullgraph=True)
    x, y = torch.randn(4, 20, 2, requires_grad=True), torch.randn(4, 23, 2)
    for gamma in (1.0, 0.8, 0.6, 0.4, 0.2, 0.1):
        compiled(x, y, gamma).backward()
    assert counters["stats"]["unique_graphs"] == 2


_FRESH = """
import sys, torch, softdtw
dev = sys.argv[1]
g = torch.Generator().manual_seed(0)
x = torch.randn(4, 20, 2, generator=g).to(dev).requires_grad_()
y = torch.randn(4, 23, 2, generator=g).to(dev)
losses = {
    "open_end": lambda: softdtw.soft_dtw(x, y, 0.3, open_end=True, step_penalty=0.2).mean(),
    "dilate": lambda: softdtw.dilate_loss(x, y[:, :20], alpha=0.5, gamma=0.3).mean(),
}
fn = losses[sys.argv[2]]
if len(sys.argv) > 3:
    softdtw.backends.get_backend(sys.argv[3])
try:
    (gc,) = torch.autograd.grad(vc := torch.compile(fn, fullgraph=True)(), x)
except Exception as e:
    print("raised, naming the fix" if "softdtw.backends.get_backend('cpu')" in str(e) else f"raised {e!r}")
    raise SystemExit(0)
(ge,) = torch.autograd.grad(ve := fn(), x)
torch.testing.assert_close(vc, ve, rtol=1e-6, atol=0)
torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-6)
print("equal")
"""


def run_fresh(*args) -> str:
    """_FRESH in a new interpreter (nothing loaded but what `import softdtw` loads): its last line of output."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", _FRESH, *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_torch_compile_fullgraph_as_a_first_call():
    """The first softdtw call of a process under torch.compile(fullgraph=True): nothing traced imports a backend
    (Dynamo cannot trace an import). An alignment variant compiles and equals eager; DILATE on the CPU needs the
    Numba backend loaded first and says so (it compiles once it is)."""
    assert run_fresh("cpu", "open_end") == "equal"
    assert run_fresh("cpu", "dilate") == "raised, naming the fix"
    assert run_fresh("cpu", "dilate", "cpu") == "equal"


@pytest.mark.parametrize("band", [{"bandwidth": 5}, {"itakura_max_slope": 2.0}])
def test_torch_compile_fullgraph_with_a_band(band):
    """A band under torch.compile(fullgraph=True): the has-a-path check (a branch on the window's values) is left out
    there, as the value checks are; a band with a path gives eager's values and gradients, one without gives +inf
    and a zero gradient (no admissible path) where eager raises."""
    import torch._dynamo

    def loss(x, y):
        return softdtw.soft_dtw(x, y, 0.3, **band)

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 20, 2, generator=g, requires_grad=True)
    y = torch.randn(3, 23, 2, generator=g)
    (gc,) = torch.autograd.grad((vc := compiled(x, y)).sum(), x)
    (ge,) = torch.autograd.grad((ve := loss(x, y)).sum(), x)
    torch.testing.assert_close(vc, ve, rtol=1e-6, atol=0)
    torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-6)
    if "itakura_max_slope" in band:
        short = y[:, :6]  # 20 against 6 steps: slope 2 allows at most 3
        with pytest.raises(ValueError, match="no warping path"):
            loss(x, short)
        (gc,) = torch.autograd.grad((vc := compiled(x, short)).sum(), x)
        assert torch.isinf(vc).all() and (vc > 0).all() and torch.equal(gc, torch.zeros_like(gc))


def test_torch_compile_fullgraph_soft_dtw_hvp():
    """soft_dtw_hvp under torch.compile(fullgraph=True): the table path takes softdtw::hvp_cost (the one-kernel
    value_grad_hvp, launched from Python, is left out under compile); value, gradient and HVP equal eager's."""
    import torch._dynamo

    def hvp(x, y, xd):
        return softdtw.soft_dtw_hvp(x, y, xd, gamma=0.3)

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(3, 20, 2, generator=g), torch.randn(3, 23, 2, generator=g)
    xd = torch.randn(3, 20, 2, generator=g)
    for a, b in zip(torch.compile(hvp, fullgraph=True)(x, y, xd), hvp(x, y, xd)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
