"""kernels/gram_gemm.cu: the "gram" cost's small GEMMs (backends/cuda/__init__.py, own_gram_gemm), x·yᵀ with the
norms in one launch and dx, dy in another, against float64 torch; which shapes take them (runs everywhere); and a
large-D loss step of the C++ launcher launching them and no torch GEMM.

Tolerances: float32 GEMM errors are measured against |row| |column| (the products' scale, as cuBLAS's float32 GEMM
is judged), float64 ones at 1e-13 of it.
"""
from __future__ import annotations

import pytest
import torch

import softdtw
from softdtw.backends import cuda as cb

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TOL = {torch.float32: 2e-6, torch.float64: 1e-13}


@pytest.mark.parametrize("B,N,M,D,dtype,want", [
    (32, 128, 128, 64, torch.float32, True),     # issue 27's seed grid at D = 64
    (32, 128, 128, 64, torch.float64, True),
    (16, 400, 300, 80, torch.float32, True),     # speech (mel 80)
    (16, 400, 300, 80, torch.float64, False),    # float64 stops at 2^26: here its dx, dy were 2x cuBLAS's GPU time
    (1, 1024, 1024, 256, torch.float32, True),   # 2^28 multiply-adds, N = M = GRAM_OWN_LEN
    (1, 1025, 8, 17, torch.float32, False),      # a pair longer than GRAM_OWN_LEN
    (2, 1024, 1024, 256, torch.float32, False),  # past GRAM_OWN_MAX
    (32, 2048, 2048, 64, torch.float32, False),  # issue 27's large-D row: cuBLAS (TF32 where allowed)
    (16, 1024, 1024, 64, torch.float32, False),
    (2, 64, 64, 64, torch.float16, False),       # (no gram kernels of half precision)
    (0, 64, 64, 64, torch.float16, False),
])
def test_which_shapes_take_the_own_gemms(B, N, M, D, dtype, want):
    assert cb.own_gram_gemm(B, N, M, D, dtype) is want
    assert cb.own_gram_gemm(B, M, N, D, dtype) is want  # (the launcher may plan (y, x))


def _xy(B, N, M, D, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, device="cuda", dtype=torch.float64) * 2 + 0.5
    y = torch.randn(B, M, D, generator=g, device="cuda", dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def _scaled_err(got, want, a, b):
    """max |got - want| / (|a_r| |b_s|): the error of a product table against the scale of its operands' rows."""
    scale = torch.linalg.vector_norm(a, dim=-1)[..., :, None] * torch.linalg.vector_norm(b, dim=-1)[..., None, :]
    return ((got.double() - want).abs() / scale.clamp_min(1e-300)).max().item()


SHAPES = [(3, 70, 33, 24), (2, 1, 1, 17), (1, 130, 65, 80), (2, 64, 64, 64), (4, 5, 200, 129), (3, 0, 5, 20)]


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,N,M,D", SHAPES)
def test_gram_xy_kernel(dtype, B, N, M, D):
    """G = x·yᵀ within TOL of float64 bmm (tile edges at 64 crossed, a single row, D past one k stage, an empty
    x); the norms are the same bits as norms_kernel's (the path without the own GEMMs)."""
    assert cb.own_gram_gemm(B, N, M, D, dtype)
    x, y = _xy(B, N, M, D, dtype, seed=B * 1000 + N + M + D)
    xn, yn, G = cb._gram(x, y)  # (own_gram_gemm: the shape takes gram_xy_kernel)
    assert G.shape == (B, N, M) and G.dtype == dtype and xn.shape == (B, N) and yn.shape == (B, M)
    xd, yd = x.double(), y.double()
    if G.numel():
        assert _scaled_err(G, torch.bmm(xd, yd.transpose(1, 2)), xd, yd) <= TOL[dtype]
    xn0, yn0 = cb._norms(x, y)
    assert torch.equal(xn, xn0) and torch.equal(yn, yn0)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,N,M,D", SHAPES)
@pytest.mark.parametrize("want_x,want_y", [(True, True), (True, False), (False, True)])
def test_gram_grads_kernel(dtype, B, N, M, D, want_x, want_y):
    """dx = 2 (rs x - E y), dy = 2 (cs y - Eᵀ x) within TOL of float64 (errors against 2 |E row| |y column|), for
    each of the gradients asked for; the other comes back None."""
    x, y = _xy(B, N, M, D, dtype, seed=7 + B + N + M + D)
    g = torch.Generator(device="cuda").manual_seed(3)
    E = torch.rand(B, N, M, generator=g, device="cuda", dtype=torch.float64).to(dtype)
    rs, cs = E.sum(-1), E.sum(-2)
    dx, dy = cb._gram_grads(E, x, y, rs, cs, want_x, want_y)
    Ed, xd, yd = E.double(), x.double(), y.double()
    for got, wanted, sc, base, ops in ((dx, want_x, rs, xd, (Ed, yd)), (dy, want_y, cs, yd, (Ed.transpose(1, 2), xd))):
        if not wanted:
            assert got is None
            continue
        A, Bm = ops
        want = 2 * (sc.double()[..., None] * base - torch.bmm(A, Bm))
        assert got.shape == base.shape and got.dtype == dtype
        if got.numel():
            # the scale of each output: 2 (|sc_r| |base_r| + |A_r| |Bm column|)
            scale = 2 * (sc.double().abs()[..., None] * base.abs()
                         + torch.linalg.vector_norm(A, dim=-1)[..., None]
                         * torch.linalg.vector_norm(Bm, dim=-2)[..., None, :])
            err = ((got.double() - want).abs() / scale.clamp_min(1e-300)).max().item()
            assert err <= TOL[dtype], err


@pytest.mark.cuda
@needs_gpu
def test_a_large_d_step_launches_the_own_gemms_and_no_torch_gemm():
    """A large-D loss step at a small shape through the C++ launcher: check, gram_xy_kernel, the forward, the
    backward and gram_grads_kernel, and no cuBLAS GEMM or elementwise kernel besides them; values and gradients as the
    launcher-off path's, bitwise (test_cuda_fastpath.py checks the same at 32 x 128², D = 64)."""
    from torch.profiler import ProfilerActivity, profile

    from softdtw.backends.cuda import fastpath

    fastpath.build()
    x, y = _xy(4, 40, 30, 24, torch.float32, seed=11)
    x.requires_grad_(True)
    for _ in range(2):
        softdtw.soft_dtw(x, y, 0.5).sum().backward()
    torch.cuda.synchronize()
    x.grad = None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        v = softdtw.soft_dtw(x, y, 0.5)
        v.sum().backward()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ours = [n for n in names if "sdtw" in n]
    assert [k for k in ("check_kernel", "gram_xy_kernel", "forward_kernel", "backward_kernel", "gram_grads_kernel")
            if not any(k in n for n in ours)] == [], names
    assert not any("gemm" in n.lower() and "sdtw" not in n for n in names), names
    assert not any("norms_kernel" in n for n in ours), names
    fast = (v.detach().clone(), x.grad.clone())
    x.grad = None
    fastpath.set_enabled(False)
    try:
        w = softdtw.soft_dtw(x, y, 0.5)
        w.sum().backward()
    finally:
        fastpath.set_enabled(True)
    assert torch.equal(fast[0], w.detach()) and torch.equal(fast[1], x.grad)

