"""Large-D costs computed band by band (cuda backend, memory="checkpoint" and big value-only passes).

With D > FUSED_D_MAX the cost comes from GEMMs. Under memory="checkpoint" the backward never holds the whole
(B, N, M) table, and the forward's bands take at most the backward's band and tile buffers (_forward_band_rows):
each band of rows gets its table by a GEMM (x·yᵀ for sqeuclidean, whose cost the kernels form in the
cells; the l1 cost for l1), its chained kernels start from the row checkpoint above it (forward, top to bottom) or
from the (E, link) row below it (backward, bottom up), and its dx rows and share of dy come by GEMMs
(backends/cuda/__init__.py, _forward_rows). Shrinking COST_BAND_BYTES and ROW_BANDS puts many bands into small
problems. Tolerances as in test_cuda.py: float32 values 1e-5, gradients 1e-3; float64 1e-10.
"""
from __future__ import annotations

import pytest
import torch

from tests._helpers import rel_err

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _launch():
    from softdtw.backends.cuda import launch

    return launch


# --- the band planner (pure Python: runs everywhere) ------------------------------------------------

def test_row_band_bytes_scale_with_the_table():
    from softdtw.backends.cuda import COST_BAND_BYTES, COST_BAND_MAX, ROW_BANDS, _row_band_bytes

    assert _row_band_bytes(16, 128, 128, torch.float32) == COST_BAND_BYTES
    assert _row_band_bytes(1, 32768, 32768, torch.float32) == 32768 * 32768 * 4 // ROW_BANDS
    assert _row_band_bytes(1, 1 << 18, 1 << 18, torch.float64) == COST_BAND_MAX


@pytest.mark.parametrize("B,N,M", [(32, 2048, 2048), (1, 65536, 65536), (4, 3000, 70000), (3, 40, 5),
                                   (1, 262144, 262144), (256, 512, 512), (1024, 256, 4096)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_row_band_plan_keeps_bands_within_budget(B, N, M, dtype):
    from softdtw.backends.cuda import _row_band_bytes

    budget = _row_band_bytes(B, N, M, dtype)
    plan, h = _launch().row_band_plan(B, N, M, dtype, 0, budget)
    item = dtype.itemsize
    assert plan.chain and plan.nch * plan.CW >= M and 1 <= h <= N
    assert h == N or h % plan.TH == 0  # every band's top row is a tile boundary (stagger 0)
    assert h == N or h == plan.TH or B * h * M * item <= budget  # a band's cost, unless one tile is more
    assert plan.TH >= N or plan.TH >= 64 * plan.W + 32
    tiles = B * plan.nch * plan.tile_numel() * item
    assert tiles <= budget or plan.TH >= N or plan.TH // 2 < 64 * plan.W + 32  # (halved down to its least)


def test_row_plan_at_the_target_shape():
    """B = 32, N = M = 2048, D = 64 float32: two bands of 1024 rows (half the table, 256 MiB each), tiles of 512,
    chunks of two warps (launch.ROW_BAND_W2_GAIN)."""
    from softdtw.backends.cuda import _row_band_bytes

    plan, h = _launch().row_band_plan(32, 2048, 2048, torch.float32, 0, _row_band_bytes(32, 2048, 2048, torch.float32))
    assert (plan.K, plan.W, plan.nch, plan.TH, h) == (4, 2, 8, 512, 1024)


@pytest.mark.parametrize("B,N,M,W", [(32, 2048, 2048, 2), (32, 1024, 1024, 2), (1, 16384, 16384, 2),
                                     (8, 4096, 1024, 1), (64, 256, 256, 1), (16, 300, 400, 1)])
def test_row_bands_take_two_warps_where_the_lags_dominate(B, N, M, W):
    """Two warps per chunk where they shorten a band's modelled pass by more than ROW_BAND_W2_GAIN and a band has at
    least ROW_BAND_W2_MIN_ROWS rows; one elsewhere (the shapes of ckpt_layout_sweep.py on an H200)."""
    from softdtw.backends.cuda import _row_band_bytes

    for dtype in (torch.float32, torch.float64):
        plan, h = _launch().row_band_plan(B, N, M, dtype, 0, _row_band_bytes(B, N, M, dtype))
        assert (plan.K, plan.W) == (4, W)


@pytest.mark.parametrize("B,N,M", [(32, 2048, 2048), (1, 65536, 65536), (4, 3000, 70000), (3, 700, 500),
                                   (1, 262144, 262144), (1024, 256, 4096)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_checkpointed_forward_bands_fit_the_backward_footprint(B, N, M, dtype):
    """The checkpointed forward's bands (_forward_band_rows) take at most what the backward holds at once, its band
    and its tile buffers, are tile boundaries and never shorter than the backward's; at the target shape (32 x 2048²)
    the forward is one band."""
    from softdtw.backends.cuda import _forward_band_rows, _row_band_bytes

    plan, h = _launch().row_band_plan(B, N, M, dtype, 0, _row_band_bytes(B, N, M, dtype))
    hf = _forward_band_rows(plan, h, B, N, M, dtype)
    row = B * M * dtype.itemsize
    tiles = B * plan.nch * plan.tile_numel() * (4 if dtype == torch.float32 else 8)
    assert h <= hf <= N and (hf == N or hf % plan.TH == 0)
    assert hf == h or hf * row <= h * row + tiles
    if (B, N, M, dtype) == (32, 2048, 2048, torch.float32):
        assert (h, hf) == (1024, 2048)


# --- against the float64 reference (GPU) ------------------------------------------------------------

@pytest.fixture
def many_bands(monkeypatch):
    """Bands of one tile of rows each: the table is cut into as many bands as it has tiles."""
    import softdtw.backends.cuda as be

    monkeypatch.setattr(be, "COST_BAND_BYTES", 1)
    monkeypatch.setattr(be, "ROW_BANDS", 1000)
    monkeypatch.setattr(be, "COST_WHOLE_MAX", 1)  # value-only passes banded too
    return be


def _bands_of(be, B, N, M, dtype, device):
    """How many bands a banded pass makes, and how many there could be at most (the tiles)."""
    plan, h = be._row_plan(B, N, M, dtype, device)
    return -(-N // h), -(-N // plan.TH)


CASES = [
    # B, N, M, D, cost, gamma, lengths, band, K, W, TH
    (3, 70, 300, 20, "sqeuclidean", 0.5, True, 40, 1, 1, 96),
    (3, 70, 300, 20, "sqeuclidean", 0.0, True, None, 2, 1, 96),
    (2, 333, 250, 17, "l1", 1.0, True, None, 1, 2, 160),
    (2, 517, 1, 24, "sqeuclidean", 1.0, True, None, 1, 1, 96),
    (2, 400, 700, 33, "sqeuclidean", 1.0, True, 100, 2, 4, 288),
]
# Not smaller gamma here, for two reasons that banding does not change (measured at 2, 400, 700, 33):
# - float64: the GEMM form of the cost, |x|² + |y|² - 2 x·y, rounds each cost, and 1 / gamma amplifies it.
#   The CPU backend fed the GEMM-form cost differs from the directly computed one by 3.9e-11 at gamma = 0.1
#   and 4.9e-10 at 0.01 (the cuda path: 1.35e-10 at 0.1, against 1e-10).
# - float32: the forward's R in log2 units reaches ~1e5 here at gamma = 0.5, so every R carries an error of
#   ulp(|R| / (gamma ln 2)) into its cell's weights (1.27e-3 at 0.5 against 1e-3). The GEMM's rounding adds
#   ~1.5e-5; benchmarks/probes/f32_precision_model.py reproduces both. Tracked by test_cuda.py's
#   test_float32_gradients_at_large_costs; test_banded_equals_unbanded covers small gamma against the
#   unbanded path.


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("B,N,M,D,cost,gamma,lengths,band,K,W,TH", CASES)
def test_banded_matches_reference(many_bands, dtype, B, N, M, D, cost, gamma, lengths, band, K, W, TH):
    from tests.backends.test_cuda import _check, _gamma, _grad, _problem, cuda_fused, reference_fused, TOL

    x, y, xl, yl, w = _problem(B, N, M, D, seed=N + M + D, lengths=lengths, band=band)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), cost, xl, yl, w, _grad(B, torch.float64))
    xd, yd, g = x.to(dtype), y.to(dtype), _gamma(gamma, dtype)
    with _launch().forced_plan(K, W, TH=TH):
        bands, most = _bands_of(many_bands, B, N, M, dtype, x.device.index)
        assert bands >= min(most, 3)  # several bands where there can be
        got = cuda_fused(xd, yd, g, cost, xl, yl, w, _grad(B, dtype), "checkpoint")
        v_none, _ = many_bands.forward(xd, yd, g, cost, xl, yl, w, "none")
    _check(got, want, dtype, gamma)
    assert rel_err(v_none, want[0]) <= TOL[dtype][0]


@pytest.mark.cuda
@needs_gpu
def test_banded_planner_layouts_match_reference(many_bands):
    """Plans chosen by row_band_plan itself (no forced layout), float64, lengths and a band."""
    from tests.backends.test_cuda import _check, _gamma, _grad, _problem, cuda_fused, reference_fused

    many_bands.COST_BAND_BYTES = 1 << 18  # 256 KB bands: several per problem
    x, y, xl, yl, w = _problem(2, 300, 450, 24, seed=11, lengths=True, band=120)
    want = reference_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(2, torch.float64))
    got = cuda_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(2, torch.float64),
                     "checkpoint")
    _check(got, want, torch.float64, 0.5)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype,gamma,tol", [(torch.float64, 0.01, 1e-10), (torch.float32, 0.3, 1e-4)])
def test_banded_equals_unbanded(many_bands, dtype, gamma, tol):
    """Planner layouts: banded checkpoint and the unbanded store path agree to rounding. Only to rounding:
    each band's GEMM rounds its costs differently from the whole table's (cuBLAS picks kernels by shape),
    and float32 at small gamma turns that into gradient differences of 1e-2 (gamma = 0.01, D = 24), as
    any float32 evaluation of the cost would; float64 shows the bands change nothing else."""
    from tests.backends.test_cuda import _dgamma_err, _gamma, _grad, _problem, cuda_fused

    x, y, xl, yl, w = _problem(2, 600, 900, 24, seed=12, lengths=True, band=200)
    x, y, g, grad = x.to(dtype), y.to(dtype), _gamma(gamma, dtype), _grad(2, dtype)
    many_bands.COST_BAND_BYTES = 1 << 18
    banded = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
    whole = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "store")
    for p, q in zip(banded[:-1], whole[:-1]):
        assert rel_err(p, q) <= tol
    # dgamma = (value - <E, C>) / gamma: two terms of |value| / gamma nearly cancel (test_cuda._dgamma_err).
    assert _dgamma_err(banded[-1], whole[-1], whole[0], gamma) <= tol


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype,gamma,tol", [(torch.float64, 0.1, 1e-10), (torch.float32, 0.3, 1e-4)])
def test_two_warp_row_bands_equal_store(dtype, gamma, tol):
    """The planner's row bands of two warps per chunk (launch.ROW_BAND_W2_GAIN; 2 x 1024 x 2048: 16 chunks of one
    warp would refill most of each band), lengths and a band: the checkpoint equals the store path to rounding."""
    from softdtw.backends.cuda import _row_plan
    from tests.backends.test_cuda import _dgamma_err, _gamma, _grad, _problem, cuda_fused

    B, N, M = 2, 1024, 2048
    x, y, xl, yl, w = _problem(B, N, M, 24, seed=13, lengths=True, band=700)
    x, y, g, grad = x.to(dtype), y.to(dtype), _gamma(gamma, dtype), _grad(B, dtype)
    plan, h = _row_plan(B, N, M, dtype, x.device.index)
    assert plan.W == 2 and h >= 512
    banded = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
    whole = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "store")
    for p, q in zip(banded[:-1], whole[:-1]):
        assert rel_err(p, q) <= tol
    assert _dgamma_err(banded[-1], whole[-1], whole[0], gamma) <= tol


@pytest.mark.cuda
@needs_gpu
def test_banded_checkpoint_agrees_with_store_and_bounds_memory(monkeypatch):
    """B = 8, N = M = 1024, D = 64: gradients equal to the store path's to rounding, the saved buffer's
    shape as saved_spec says, and the checkpointed forward + backward's peak far below one whole table."""
    import softdtw.backends.cuda as be

    monkeypatch.setattr(be, "COST_BAND_BYTES", 4 << 20)  # 1/8 of the 33.5 MB table
    monkeypatch.setattr(be, "ROW_BANDS", 8)  # row bands of 1/8 too (and their tile buffers as much)
    g0 = torch.Generator().manual_seed(3)
    B, N, M, D = 8, 1024, 1024, 64
    x = torch.randn(B, N, D, generator=g0).cuda()
    y = torch.randn(B, M, D, generator=g0).cuda()
    xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
    yl = torch.full((B,), M, dtype=torch.int64, device="cuda")
    g = torch.tensor(1.0, device="cuda")
    grad = torch.rand(B, generator=g0).cuda() + 0.5
    vs, ss = be.forward(x, y, g, "sqeuclidean", xl, yl, None, "store")
    a = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, vs, ss, "store")
    del ss
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    vc, sc = be.forward(x, y, g, "sqeuclidean", xl, yl, None, "checkpoint")
    b = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, vc, sc, "checkpoint")
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    table = B * N * M * 4
    # Band 4.2 MB, tiles, checkpoints, dx, dy and the GEMMs' (B, N, D) temporaries; the unbanded path
    # holds the whole table and the tile buffers.
    assert peak < 0.75 * table, f"checkpointed large-D peak {peak / 1e6:.1f} MB, one table {table / 1e6:.1f} MB"
    shape, sdtype = be.saved_spec("fused", B, N, M, D, torch.float32, "checkpoint")
    assert tuple(sc.shape) == tuple(shape) and sc.dtype == sdtype
    assert rel_err(vc, vs) <= 1e-6
    for p, q in zip(a[:2], b[:2]):
        assert rel_err(q, p) <= 1e-4
    # dgamma = value - <E, C> (gamma = 1): two terms of ~|value| cancel, and the two paths round each cell's
    # float32 cost differently (the store path's "gram" cost in the kernel, the bands' GEMM cost), so its
    # difference is measured against |value| (test_cuda._dgamma_err).
    from tests.backends.test_cuda import _dgamma_err

    assert _dgamma_err(b[2], a[2], vs, 1.0) <= 1e-5


@pytest.mark.cuda
@needs_gpu
def test_auto_counts_the_large_d_cost(monkeypatch):
    """memory="auto" adds the whole (B, N, M) cost of the large-D store path to what storing needs."""
    from softdtw import _ops
    import softdtw.backends.cuda as be

    B, N, M = 4, 4096, 4096
    table = B * N * M * 4
    monkeypatch.setattr(_ops, "_free_bytes", lambda device: 3 * table)  # the links alone fit in half of it
    pick = lambda D: _ops.resolve_memory("auto", True, "cuda", "fused", B, N, M, D, torch.float32,
                                         torch.device("cuda"))
    assert pick(1) == "store"
    assert pick(64) == "checkpoint"
    assert be.working_bytes("fused", B, N, M, 64, torch.float32, "store") == table


@pytest.mark.cuda
@needs_gpu
def test_band_cost_out_of_memory_names_the_sizes(monkeypatch):
    """Running out of memory in a band's own GEMM is a MemoryError naming the sizes (like the saved
    buffers'), not torch's OutOfMemoryError. The GEMM is made to fail: a real out-of-memory at exactly that
    allocation depends on the caching allocator's state."""
    import softdtw.backends.cuda as be

    def no_room(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (test)")

    B, N, M, D = 2, 1024, 1536, 32
    x = torch.randn(B, N, D, device="cuda")
    y = torch.randn(B, M, D, device="cuda")
    xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
    yl = torch.full((B,), M, dtype=torch.int64, device="cuda")
    g = torch.tensor(1.0, device="cuda")
    monkeypatch.setattr(be, "_gemm_cost", no_room)  # the bands' cost (and l1's whole cost)
    monkeypatch.setattr(be, "_gram", no_room)  # the store path's Gram matrix (sqeuclidean)
    monkeypatch.setattr(be, "_gram_table", no_room)  # a row band's x·yᵀ (sqeuclidean)
    with pytest.raises(MemoryError, match=r"B=2 pairs of lengths N=1024, M=1536 needs .* one band of the cost"):
        be.forward(x, y, g, "sqeuclidean", xl, yl, None, "checkpoint")
    for cost in ("sqeuclidean", "l1"):
        with pytest.raises(MemoryError, match=r"needs .* the whole cost \(D=32 features\).*memory='checkpoint'"):
            be.forward(x, y, g, cost, xl, yl, None, "store")


ROW_VARIANTS = [(True, False, None), (False, True, None), (True, True, 0.2), (False, False, -0.3)]


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("variant", ROW_VARIANTS, ids=lambda v: f"b{int(v[0])}e{int(v[1])}p{v[2]}")
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_row_bands_with_variants_match_reference(many_bands, dtype, variant, cost):
    """Row bands of 96 rows with open ends and step penalties: pairs end in different bands (lengths 137..300), so
    the last row's soft-min, the end's seeds and <E, C> come from different launches."""
    from tests.backends.test_cuda_variants import _compare, _fused, _ref_fused

    g = torch.Generator().manual_seed(21)
    B, N, M, D = 4, 300, 200, 24
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    xl, yl = torch.tensor([300, 137, 250, 193]), torch.tensor([200, 180, 77, 129])
    grad = torch.rand(B, generator=g, dtype=torch.float64) + 0.5
    want = _ref_fused(x, y, 0.6, cost, xl, yl, grad, variant)
    with _launch().forced_plan(2, 1, TH=96):
        assert _bands_of(many_bands, B, N, M, dtype, 0)[0] == 4
        got = _fused(many_bands, x.cuda().to(dtype), y.cuda().to(dtype), 0.6, cost, xl.cuda(), yl.cuda(),
                     grad.cuda().to(dtype), "checkpoint", variant)
    _compare(got, want, dtype, 0.6, "row bands")


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_row_bands_equal_one_band(monkeypatch, dtype):
    """Planner layouts, float64: many row bands and a single band (the checkpointed kernels over the whole table)
    agree to the GEMMs' rounding; float32 to its frames' rounding."""
    import softdtw.backends.cuda as be
    from tests.backends.test_cuda import _dgamma_err, _gamma, _grad, _problem, cuda_fused

    x, y, xl, yl, w = _problem(3, 700, 500, 40, seed=13, lengths=True, band=150)
    x, y, g, grad = x.to(dtype), y.to(dtype), _gamma(0.3, dtype), _grad(3, dtype)
    monkeypatch.setattr(be, "COST_BAND_BYTES", 1)
    monkeypatch.setattr(be, "ROW_BANDS", 1)  # one band: the whole table
    one = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
    assert be._row_plan(3, 700, 500, dtype, 0)[1] == 700
    monkeypatch.setattr(be, "ROW_BANDS", 1000)
    many = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
    assert -(-700 // be._row_plan(3, 700, 500, dtype, 0)[1]) >= 4
    # Each band's GEMM rounds its costs its own way (cuBLAS picks kernels by shape); float32 at gamma = 0.3 and
    # D = 40 turns that into gradients 2e-4 apart, within the float32 tolerance against the reference.
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    for p, q in zip(many[:-1], one[:-1]):
        assert rel_err(p, q) <= tol
    # dgamma = (value - <E, C>) / gamma: two terms of |value| / gamma nearly cancel (test_cuda._dgamma_err).
    assert _dgamma_err(many[-1], one[-1], one[0], 0.3) <= tol


@pytest.mark.cuda
@needs_gpu
def test_row_bands_shrink_to_the_memory_available(monkeypatch):
    """With little memory available the bands get shorter (more of them) instead of running out: the one band of
    700 rows becomes bands of one tile, the forward and the backward each cutting its own, and the results stay
    those of the one band (float64, to the bands' GEMM rounding)."""
    import softdtw.backends.cuda as be
    from tests.backends.test_cuda import _dgamma_err, _gamma, _grad, _problem, cuda_fused

    x, y, xl, yl, w = _problem(3, 700, 500, 40, seed=14, lengths=True, band=150)
    g, grad = _gamma(0.3, torch.float64), _grad(3, torch.float64)
    monkeypatch.setattr(be, "ROW_BANDS", 1)  # one band, the whole table
    row = 3 * 500 * 8  # bytes per row of the table
    with _launch().forced_plan(4, 1, TH=96):
        assert be._row_plan(3, 700, 500, torch.float64, 0)[1] == 700
        one = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
        monkeypatch.setattr(be, "_unallocated_bytes", lambda device: 4 * 96 * row)  # the driver gets asked
        monkeypatch.setattr(be, "_available_bytes", lambda device: 2 * 96 * row)  # room for one tile of rows
        assert be._fit_rows(700, 96, row, x.device) == 96
        assert be._fit_rows(700, 96, row // 4, x.device) == 384
        tight = cuda_fused(x, y, g, "sqeuclidean", xl, yl, w, grad, "checkpoint")
    for p, q in zip(tight[:-1], one[:-1]):
        assert rel_err(p, q) <= 1e-10
    assert _dgamma_err(tight[-1], one[-1], one[0], 0.3) <= 1e-10


@pytest.mark.cuda
@needs_gpu
def test_allocator_bytes_are_torch_counters():
    """_allocator_bytes reads the caching allocator's nested statistics (no flattening of the whole dict): the same
    numbers as torch.cuda.memory_allocated and memory_reserved, and _unallocated_bytes the device's total less the
    first."""
    import softdtw.backends.cuda as be

    keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # something allocated
    dev = keep.device
    assert be._allocator_bytes(dev) == (torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev))
    total = torch.cuda.get_device_properties(dev).total_memory
    assert be._unallocated_bytes(dev) == total - torch.cuda.memory_allocated(dev)
    assert be._allocator_bytes(dev)[0] >= keep.numel()


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("memory,cost", [("store", "sqeuclidean"), ("checkpoint", "sqeuclidean"),
                                         ("checkpoint", "l1")])
def test_a_gradient_nobody_uses_is_not_computed(many_bands, memory, cost):
    """backward(needs=...) past FUSED_D_MAX: an unused dx or dy is None (its GEMMs are not run: a target y saves one
    of three GEMMs in a store call), and the one asked for is bitwise what a call asking for both gets. (l1's store
    backward gets both sides from one call of its vjp kernels.)"""
    import softdtw.backends.cuda as be

    B, N, M, D = 2, 300, 260, 24
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(B, N, D, device="cuda", generator=g)
    y = torch.randn(B, M, D, device="cuda", generator=g)
    xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
    yl = torch.full((B,), M, dtype=torch.int64, device="cuda")
    gamma = torch.tensor(0.5, device="cuda")
    grad = torch.rand(B, device="cuda") + 0.5
    value, saved = be.forward(x, y, gamma, cost, xl, yl, None, memory)
    both = be.backward(grad, x, y, gamma, cost, xl, yl, None, value, saved, memory, needs=(True, True, True))
    only_x = be.backward(grad, x, y, gamma, cost, xl, yl, None, value, saved, memory, needs=(True, False, True))
    only_y = be.backward(grad, x, y, gamma, cost, xl, yl, None, value, saved, memory, needs=(False, True, True))
    assert only_x[1] is None and only_y[0] is None
    assert torch.equal(only_x[0], both[0]) and torch.equal(only_y[1], both[1])
    assert torch.equal(only_x[2], both[2])
