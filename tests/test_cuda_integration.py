"""PyTorch 2 integration on the GPU: custom ops under opcheck, torch.compile(fullgraph=True) and a CUDA
graph of the public API's forward + backward (all marked `cuda`)."""
import pytest
import torch

import softdtw
import softdtw.costs
import softdtw._windows
from softdtw import _ops
from tests._helpers import capture_cuda_graph

pytestmark = pytest.mark.cuda


def _args(dtype=torch.float32, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 2, generator=g, dtype=dtype).cuda().requires_grad_(requires_grad)
    y = torch.randn(3, 33, 2, generator=g, dtype=dtype).cuda().requires_grad_(requires_grad)
    gamma = torch.tensor(0.5, dtype=dtype, device="cuda")
    xl = torch.tensor([40, 17, 3], device="cuda")
    yl = torch.tensor([33, 33, 9], device="cuda")
    window = softdtw._windows.build_window(xl, yl, 40, 33, 4, None)
    return x, y, gamma, xl, yl, window


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_every_op_on_cuda(requires_grad):
    x, y, gamma, xl, yl, window = _args(requires_grad=requires_grad)
    memory = "store" if requires_grad else "none"
    # The stored table has padding slots (columns past M in the last lane group) that the kernels never
    # write — no memset on the hot path — so its bytes differ between two runs and AOT's bitwise output
    # comparison cannot hold for it. Values and gradients under torch.compile (also with dynamic shapes)
    # are compared in the tests below.
    utils = ("test_schema", "test_autograd_registration", "test_faketensor") if requires_grad else \
        torch.library._OPCHECK_DEFAULT_UTILS
    torch.library.opcheck(_ops.forward, (x, y, gamma, "sqeuclidean", xl, yl, window, memory, "cuda"),
                          test_utils=utils)
    C = softdtw.costs.pairwise_cost("sqeuclidean", x.detach(), y.detach()).requires_grad_(requires_grad)
    torch.library.opcheck(_ops.forward_cost, (C, gamma, xl, yl, window, memory, "cuda"), test_utils=utils)
    if not requires_grad:
        value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", "cuda")
        grad = torch.rand(3, device="cuda")
        torch.library.opcheck(_ops.backward, (grad, x, y, gamma, "sqeuclidean", xl, yl, window, value, saved,
                                              "store", "cuda"))
        value, saved = _ops.forward_cost(C, gamma, xl, yl, window, "store", "cuda")
        torch.library.opcheck(_ops.backward_cost, (grad, C, gamma, xl, yl, window, value, saved, "store", "cuda"))


def test_torch_compile_fullgraph_matches_eager_on_cuda():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.Tanh(), torch.nn.Linear(64, 24)).cuda()
    loss_fn = softdtw.SoftDTW(gamma=0.1, normalize=True, reduction="mean")

    def step(past, future):
        return loss_fn(net(past).unsqueeze(-1), future)

    compiled = torch.compile(step, fullgraph=True)
    past, future = torch.randn(16, 24, device="cuda"), torch.randn(16, 30, 1, device="cuda")
    eager_loss = step(past, future)
    eager_grads = torch.autograd.grad(eager_loss, list(net.parameters()))
    comp_loss = compiled(past, future)
    comp_grads = torch.autograd.grad(comp_loss, list(net.parameters()))
    assert torch.allclose(eager_loss, comp_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(eager_grads, comp_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_cuda_graph_of_the_public_api_forward_backward():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 64, 3, generator=g).cuda().requires_grad_()
    y = torch.randn(4, 50, 3, generator=g).cuda()
    xl = torch.tensor([64, 30, 12, 64], device="cuda")

    def step():
        v = softdtw.soft_dtw(x, y, 0.3, x_lengths=xl, bandwidth=8)
        (dx,) = torch.autograd.grad(v.sum(), x)
        return v, dx

    graph, (v_static, dx_static) = capture_cuda_graph(step)
    for seed in (5, 6):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x.copy_(torch.randn(4, 64, 3, generator=g).cuda())
            y.copy_(torch.randn(4, 50, 3, generator=g).cuda())
        graph.replay()
        v, dx = step()
        assert torch.equal(v_static, v.detach()) and torch.equal(dx_static, dx)


def test_torch_compile_dynamic_shapes_on_cuda():
    """With symbolic batch and lengths, the saved buffer's size is planned at run time (an unbacked size)."""
    def loss(x, y):
        return softdtw.soft_dtw(x, y, 0.2).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for B, N, M in ((3, 20, 24), (5, 33, 17), (2, 64, 64)):
        x = torch.randn(B, N, 2, device="cuda", requires_grad=True)
        y = torch.randn(B, M, 2, device="cuda")
        (ge,) = torch.autograd.grad(loss(x, y), x)
        (gc,) = torch.autograd.grad(compiled(x, y), x)
        assert torch.allclose(ge, gc, rtol=1e-5, atol=1e-6)


def test_torch_compile_reduce_overhead_matches_eager_on_cuda():
    """mode="reduce-overhead" (CUDA graphs through cudagraph trees) over a few training steps of a small model with
    fresh inputs: values and gradients equal eager's, and no graph was skipped (the ops run inside the graphs)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).cuda()
    loss_fn = softdtw.SoftDTW(gamma=0.1, reduction="mean")

    def step(x, y):
        return loss_fn(net(x), y)

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(5):  # cudagraph trees warm up, record, then replay
        x = torch.randn(8, 33, 3, device="cuda", generator=g)
        y = torch.randn(8, 40, 3, device="cuda", generator=g)
        torch.compiler.cudagraph_mark_step_begin()
        comp_loss = compiled(x, y)
        comp_grads = torch.autograd.grad(comp_loss, list(net.parameters()))
        eager_loss = step(x, y)
        eager_grads = torch.autograd.grad(eager_loss, list(net.parameters()))
        assert torch.allclose(comp_loss, eager_loss, rtol=1e-5, atol=1e-6)
        for a, b in zip(comp_grads, eager_grads):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert counters["inductor"]["cudagraph_skips"] == 0


def test_opcheck_backward_op_with_gradients_on_cuda():
    """The backward op's own autograd (the double backward, hvp_xy when eager) under opcheck on the GPU, AOT
    dispatch included: traced graphs take the hvp_cost op, as hvp_xy needs real memory (float64: the two paths
    agree to rounding, which opcheck's float32 tolerances would not take)."""
    x, y, gamma, xl, yl, _ = _args(torch.float64)
    value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", "cuda")
    grad = torch.rand(3, device="cuda", dtype=x.dtype)
    xr, yr, gr, gradr = (t.detach().clone().requires_grad_() for t in (x, y, gamma, grad))
    torch.library.opcheck(_ops.backward, (gradr, xr, yr, gr, "sqeuclidean", xl, yl, None, value, saved, "store",
                                          "cuda"))


def test_torch_compile_fullgraph_as_a_first_call_on_cuda():
    """A fresh process's first calls under torch.compile(fullgraph=True) on the GPU: `import softdtw` has loaded the
    cuda backend, so DILATE's autograd.Function and the alignment variants trace without an import."""
    from tests.test_ops import run_fresh

    assert run_fresh("cuda", "dilate") == "equal"
    assert run_fresh("cuda", "open_end") == "equal"
