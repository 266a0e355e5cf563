"""Long sequences and memory="checkpoint" on the GPU (issue 4), through the public API only.

Every test is marked ``cuda`` and skipped without a GPU. Run on a GPU machine with
``PYTHONPATH=src python3 -m pytest -m cuda tests/test_long.py`` (or ``scripts/gpu_run.sh longtests``).

What is compared:

- N = M = 20000 (D = 1) and 3000 x 70000 (B = 2, per-pair lengths, a Sakoe–Chiba band): the cuda backend
  with memory="checkpoint" against the cpu backend in float64 on the same inputs (the float32 data is
  generated first and widened, so both sides see identical numbers). The CPU reference is one long
  Numba run per size, computed once per module (fixtures ``square`` and ``long_pair``). It uses
  memory="checkpoint" when the cpu backend offers it, else "store" (a B·N·M float64 table, 3.2 GB).
- 2^18 steps: two pairs of 2^18 x (2^18 - 100) with per-pair lengths and a Sakoe–Chiba band (radius 128) against
  the float64 cpu backend; unbanded 2^18 x 2^18 and 2^16 x 2^18 by properties the exact answer has (value-only
  = checkpointing value, between hard DTW and its soft lower bound, gradients of a common shift cancel).
- gamma = 1e-3 at N = M = 65536 with checkpointing: value, gradients and d/dgamma finite, gradients not
  all zero, and the value between hard DTW and hard DTW − γ·ln 3·(N + M − 1) (each soft-min is at most
  γ·ln 3 below the min).
- memory="checkpoint" against memory="store" on the GPU (B = 3, N = 5000, M = 4100, lengths, band or
  Itakura, float32 / float64, soft and hard DTW): the same computation with the table recomputed instead
  of read, so equal to rounding.
- memory="auto" picks "checkpoint" when the stored table would not fit in free memory.

Tolerances. Values: |a − b| / |b| per pair; the data are shifted (y + 1) so that every value is
O(10^3–10^4) and far from 0 (asserted). Gradients: ‖a − b‖ / ‖b‖ over the batch. Against the float64
CPU reference, float32 gets the issue's 1e-5 (values) and 1e-3 (gradients): fp32 rounding along a
path of 40000–73000 cells is ~sqrt(steps)·6e-8 ≈ 1e-5 at worst, and the gradients go through
exponentials of R/γ differences. float64 gets 1e-10 / 1e-8 (rounding ~ steps·1e-16). Checkpoint
against store: 1e-5 / 1e-4 in float32 (the issue's "same to rounding"), 1e-12 / 1e-9 in float64.
"""
from __future__ import annotations

import importlib
import math
from typing import NamedTuple

import pytest
import torch

import softdtw
from softdtw import _ops
from softdtw._windows import build_window, window_has_path
from softdtw.backends import get_backend
from tests._helpers import case

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GAMMA = 1.0
SHIFT = 1.0  # y is shifted so that costs are O(1) everywhere and values stay far from 0

#: (value, gradient) tolerances against the float64 CPU reference, by dtype of the GPU run.
TOL_CPU = {torch.float32: (1e-5, 1e-3), torch.float64: (1e-10, 1e-8)}
#: (value, gradient) tolerances between memory="checkpoint" and memory="store" on the GPU.
TOL_MODES = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-12, 1e-9)}

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])

# 3000 x 70000 pairs: lengths (n, m) of the two pairs and the Sakoe–Chiba radius. tslearn's band
# (softdtw/_windows.py) widens by m - n on the side that lets the longer series catch up, so every
# row keeps m - n + 2r + 1 columns: a path always exists, and the cut (~n - 2r cells a row, about 4 %)
# is all a band can cut in a pair this elongated.
LONG_N, LONG_M = 3000, 70000
LONG_XL, LONG_YL = (3000, 2600), (70000, 61000)
LONG_BAND = 100


class Long(NamedTuple):
    """Inputs (CPU, float32), keyword arguments of soft_dtw, and the float64 CPU (value, dx, dy)."""
    x: torch.Tensor
    y: torch.Tensor
    kw: dict
    ref: tuple


def _data(B, N, M, D, seed):
    x, y = case(B, N, M, D, dtype=torch.float32, seed=seed)
    return x, y + SHIFT


def _weights(B, dtype, device):
    """Per-pair weights of the loss (not all ones, so the gradient's scaling per pair is checked)."""
    return (1.0 + 0.25 * torch.arange(B, dtype=torch.float64)).to(device, dtype)


def _value_and_grads(x, y, gamma, **kw):
    """soft_dtw values `(B,)` and the gradients of sum_b w_b · value_b to x and y."""
    x = x.detach().clone().requires_grad_()
    y = y.detach().clone().requires_grad_()
    v = softdtw.soft_dtw(x, y, gamma, **kw)
    (v * _weights(v.shape[0], v.dtype, v.device)).sum().backward()
    return v.detach(), x.grad, y.grad


def _cpu_memory() -> str:
    """memory="checkpoint" on the cpu backend when it has it, else "store" (the same numbers)."""
    modes = getattr(get_backend("cpu"), "MEMORY_MODES", ())
    return "checkpoint" if "checkpoint" in modes else "store"


def _cpu_reference(x, y, kw):
    return _value_and_grads(x.double(), y.double(), backend="cpu", memory=_cpu_memory(), **kw)


def _long_case(B, N, M, seed, min_value, **kw) -> Long:
    """Seeded data and their float64 CPU reference; every value at least min_value (far from 0, asserted)."""
    x, y = _data(B, N, M, 1, seed=seed)
    kw = dict(gamma=GAMMA, **kw)
    ref = _cpu_reference(x, y, kw)
    assert float(ref[0].abs().min()) > min_value, f"values {ref[0].tolist()} should exceed {min_value:g}"
    return Long(x, y, kw, ref)


def _cuda_kw(c: Long) -> dict:
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in c.kw.items()}


def _on_cuda(c: Long, dtype, memory):
    return _value_and_grads(c.x.to("cuda", dtype), c.y.to("cuda", dtype), memory=memory, **_cuda_kw(c))


def _assert_padding_has_no_gradient(dx, dy, xl, yl):
    """Steps past a pair's lengths get exactly zero gradient."""
    for b, (n, m) in enumerate(zip(xl, yl)):
        assert torch.equal(dx[b, n:], torch.zeros_like(dx[b, n:])), f"padded x steps of pair {b} got a gradient"
        assert torch.equal(dy[b, m:], torch.zeros_like(dy[b, m:])), f"padded y steps of pair {b} got a gradient"


def value_err(a, b) -> float:
    """max over pairs of |a_b - b_b| / |b_b|."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float(((a - b).abs() / b.abs()).max())


def norm_err(a, b) -> float:
    """‖a - b‖ / ‖b‖ over the whole batch."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def _assert_close(got, want, tol, label=""):
    """got / want: (value, dx, dy[, dgamma]); values per pair, gradients by norm."""
    assert all(torch.isfinite(t).all() for t in got), f"{label}: non-finite output"
    errs = [value_err(got[0], want[0])] + [norm_err(a, b) for a, b in zip(got[1:], want[1:])]
    names = ["value", "dx", "dy", "dgamma"][: len(errs)]
    msg = f"{label}: " + ", ".join(f"{n}={e:.2e}" for n, e in zip(names, errs))
    assert errs[0] <= tol[0], msg
    assert all(e <= tol[1] for e in errs[1:]), msg


# --- module-scoped CPU references: one long Numba run per size ------------------------------------------

@pytest.fixture(scope="module")
def square():
    return _long_case(1, 20000, 20000, 20000, 1e3)


@pytest.fixture(scope="module")
def long_pair():
    return _long_case(2, LONG_N, LONG_M, 70000, 1e3, bandwidth=LONG_BAND, x_lengths=torch.tensor(LONG_XL),
                      y_lengths=torch.tensor(LONG_YL))


# --- long pairs against the float64 CPU backend ---------------------------------------------------------

@DTYPES
def test_square_20000_checkpoint_matches_cpu_float64(square, dtype):
    got = _on_cuda(square, dtype, "checkpoint")
    _assert_close(got, square.ref, TOL_CPU[dtype], f"N=M=20000 {dtype}")


def test_long_pair_window_is_valid_and_cuts_cells():
    """The band of the 3000 x 70000 case leaves a path for both pairs and removes cells from each."""
    xl, yl = torch.tensor(LONG_XL), torch.tensor(LONG_YL)
    window = build_window(xl, yl, LONG_N, LONG_M, LONG_BAND, None)
    assert bool(window_has_path(window, xl, yl).all())
    kept = (window[..., 1] - window[..., 0]).long().sum(dim=1)
    full = xl * yl
    assert bool((kept < 0.98 * full).all()) and bool((kept > 0.5 * full).all()), (kept / full).tolist()


# float32 at 3000 x 70000: the pair's values reach |R| ~ 6e4 over paths of ~73000 steps. With R absolute in
# float32 every soft-min weight inherited a rounding error of order 1 (H100 at 8611399: value 4.1e-5, dx 2.5e-2,
# dy 7.1e-3 against 1e-5 / 1e-3); the checkpointing and recomputing passes now keep R relative to per-lane
# frames (kernels/forward_pair.cuh, "Frames").
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_long_pair_band_lengths_checkpoint_matches_cpu_float64(long_pair, dtype):
    got = _on_cuda(long_pair, dtype, "checkpoint")
    _assert_close(got, long_pair.ref, TOL_CPU[dtype], f"3000x70000 band={LONG_BAND} {dtype}")
    _assert_padding_has_no_gradient(got[1], got[2], LONG_XL, LONG_YL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_long_pair_value_only_matches_cpu_float64(long_pair, dtype):
    """The value-only forward (no gradient wanted: its own chained kernel, K = 8 here) at the same tolerance: in
    float32 it keeps frames too (a frameless R was 1.5e-4 off at 2^16 x 2^18)."""
    with torch.no_grad():
        v = softdtw.soft_dtw(long_pair.x.to("cuda", dtype), long_pair.y.to("cuda", dtype), **_cuda_kw(long_pair))
    err = value_err(v, long_pair.ref[0])
    assert err <= TOL_CPU[dtype][0], f"value-only 3000x70000 {dtype}: {err:.2e}"


@pytest.mark.parametrize("K, W", [(16, 1), (16, 8)])
@pytest.mark.parametrize("which", ["square", "long_pair"])
def test_sequential_value_only_matches_cpu_float64(which, K, W, request):
    """The value-only pass the planner gives large batches of long pairs (sequential: one warp group per pair
    walking its chunks in turn; forced here on the single-pair fixtures) keeps frames in float32 past
    launch.SEQ_FRAMES_MIN (frameless it was 1.6e-5 off float64 at 256 x 32768^2)."""
    c = request.getfixturevalue(which)
    lm = importlib.import_module("softdtw.backends.cuda.launch")
    B, N, M = c.x.shape[0], c.x.shape[1], c.y.shape[1]
    assert lm.seq_frames(torch.float32, False, N, M)
    with torch.no_grad(), lm.forced_plan(K, W):
        assert not lm.plan_for(B, N, M, 1, torch.float32, 0).chain
        v = softdtw.soft_dtw(c.x.cuda(), c.y.cuda(), **_cuda_kw(c))
    err = value_err(v, c.ref[0])
    assert err <= TOL_CPU[torch.float32][0], f"sequential value-only {which} K={K} W={W}: {err:.2e}"


# --- small gamma at N = M = 65536 -----------------------------------------------------------------------

def test_gamma_1e3_at_65536_is_finite():
    N = 65536
    x, y = _data(1, N, N, 1, seed=65536)
    x, y = x.cuda(), y.cuda()
    gamma = torch.tensor(1e-3, device="cuda", requires_grad=True)
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    value = softdtw.soft_dtw(xr, yr, gamma, memory="checkpoint")
    value.sum().backward()
    for name, t in (("value", value), ("dx", xr.grad), ("dy", yr.grad), ("dgamma", gamma.grad)):
        assert t is not None and bool(torch.isfinite(t).all()), f"{name} is not finite"
    assert float(xr.grad.abs().sum()) > 0 and float(yr.grad.abs().sum()) > 0, "gradients are all zero"
    with torch.no_grad():
        hard = float(softdtw.dtw(x, y)[0])
    v = float(value.detach()[0])
    slack = 1e-5 * abs(hard)  # float32 rounding of both values
    assert v <= hard + slack, (v, hard)
    assert v >= hard - 1e-3 * math.log(3) * (2 * N - 1) - slack, (v, hard)


# --- 2^18 steps (issue 4: "any N, M up to at least 2^18, equal or not, with bands and per-pair lengths") ---

N18 = 1 << 18
#: Two pairs near 2^18 steps, N != M, per-pair lengths and a narrow Sakoe–Chiba band: ~2^18 x 400 cells a pair,
#: so that the float64 CPU reference takes seconds (the unbanded table has 6.9e10 cells).
B18_N, B18_M = N18, N18 - 100
B18_XL, B18_YL = (N18, N18 - 150), (N18 - 100, N18 - 177)
B18_BAND = 128


@pytest.fixture(scope="module")
def banded18():
    return _long_case(2, B18_N, B18_M, 18, 1e4, bandwidth=B18_BAND, x_lengths=torch.tensor(B18_XL),
                      y_lengths=torch.tensor(B18_YL))


@DTYPES
def test_2_18_band_lengths_checkpoint_matches_cpu_float64(banded18, dtype):
    got = _on_cuda(banded18, dtype, "checkpoint")
    print(f"2^18 banded {dtype}: value {value_err(got[0], banded18.ref[0]):.2e}, dx {norm_err(got[1], banded18.ref[1]):.2e}, "
          f"dy {norm_err(got[2], banded18.ref[2]):.2e}")
    _assert_close(got, banded18.ref, TOL_CPU[dtype], f"2^18 x (2^18 - 100) band={B18_BAND} {dtype}")
    _assert_padding_has_no_gradient(got[1], got[2], B18_XL, B18_YL)


@pytest.mark.parametrize("N,M", [(N18, N18), (N18 // 4, N18)], ids=["2^18 x 2^18", "2^16 x 2^18"])
def test_2_18_unbanded_checkpoint_is_consistent(N, M):
    """No reference can afford 6.9e10 cells, so the checks are ones the exact answer must pass: finite value and
    gradients; the value-only pass gives the checkpointing pass's value; the value lies between hard DTW and
    hard DTW - gamma ln 3 (N + M - 1); and the gradients of a shift of both series cancel (the cost depends on
    x - y only): sum(dx) + sum(dy) = 0, here to float32 rounding of the 2^18-term sums."""
    x, y = _data(1, N, M, 1, seed=N + M)
    x, y = x.cuda(), y.cuda()
    v, dx, dy = _value_and_grads(x, y, GAMMA, memory="checkpoint")
    for name, t in (("value", v), ("dx", dx), ("dy", dy)):
        assert bool(torch.isfinite(t).all()), f"{name} is not finite"
    with torch.no_grad():
        v_only = softdtw.soft_dtw(x, y, GAMMA)
        hard = float(softdtw.dtw(x, y)[0])
    val = float(v[0])
    total = float(dx.double().sum() + dy.double().sum())
    scale = float(dx.double().abs().sum() + dy.double().abs().sum())
    print(f"{N} x {M}: value {val:.6g}, value-only {float(v_only[0]):.6g} (rel {value_err(v_only, v):.1e}), hard DTW "
          f"{hard:.6g}, sum(dx) + sum(dy) = {total:.3g} of {scale:.3g}")
    assert value_err(v_only, v) <= 1e-5, (float(v_only[0]), val)
    slack = 1e-5 * abs(hard)
    assert hard - GAMMA * math.log(3) * (N + M - 1) - slack <= val <= hard + slack, (val, hard)
    assert scale > 0 and abs(total) <= 1e-4 * scale, (total, scale)


# --- checkpoint and store agree to rounding -------------------------------------------------------------

MID_XL, MID_YL = (5000, 4321, 2999), (4100, 4100, 3333)
MID_CASES = [
    (torch.float32, 1.0, dict(bandwidth=300)),
    (torch.float64, 1.0, dict(bandwidth=300)),
    (torch.float32, 0.0, dict(bandwidth=300)),
    (torch.float64, 0.0, dict(bandwidth=300)),
    (torch.float32, 0.1, dict(itakura_max_slope=2.0)),
]


@pytest.mark.parametrize("dtype,gamma,constraint", MID_CASES,
                         ids=["f32-band", "f64-band", "f32-hard-band", "f64-hard-band", "f32-g0.1-itakura"])
def test_checkpoint_matches_store(dtype, gamma, constraint):
    x, y = _data(3, 5000, 4100, 2, seed=5000)
    x, y = x.to("cuda", dtype), y.to("cuda", dtype)
    kw = dict(constraint, x_lengths=torch.tensor(MID_XL, device="cuda"), y_lengths=torch.tensor(MID_YL, device="cuda"))
    out = {}
    for memory in ("store", "checkpoint"):
        g = torch.tensor(gamma, dtype=dtype, device="cuda", requires_grad=gamma > 0)
        v, dx, dy = _value_and_grads(x, y, g, memory=memory, **kw)
        out[memory] = (v, dx, dy) if gamma == 0 else (v, dx, dy, g.grad)
    store, ckpt = out["store"], out["checkpoint"]
    if gamma > 0:
        # d value / d gamma = (value - <E, C>) / gamma: two terms of size |value| / gamma nearly cancel,
        # so its rounding is measured against that size.
        scale = max(float(store[3].abs()), float(store[0].abs().sum()) / gamma)
        dg = abs(float(ckpt[3]) - float(store[3])) / scale
        assert dg <= TOL_MODES[dtype][1], f"dgamma differs by {dg:.2e} of {scale:.3g}"
        store, ckpt = store[:3], ckpt[:3]
    _assert_close(ckpt, store, TOL_MODES[dtype], f"checkpoint vs store {dtype} gamma={gamma}")


# --- memory="auto" --------------------------------------------------------------------------------------

def _store_bytes(B, N, M, D, dtype):
    shape, sdtype = get_backend("cuda").saved_spec("fused", B, N, M, D, dtype, "store")
    return math.prod(shape) * sdtype.itemsize


def test_auto_picks_checkpoint_when_the_table_does_not_fit(monkeypatch):
    dev = torch.device("cuda")
    f32 = torch.float32
    # B = 16, N = M = 65536: ~275 GB stored, more than any GPU has free; a small table is stored.
    assert _store_bytes(16, 65536, 65536, 1, f32) > torch.cuda.mem_get_info(dev)[0]
    assert _ops.resolve_memory("auto", True, "cuda", "fused", 16, 65536, 65536, 1, f32, dev) == "checkpoint"
    assert _ops.resolve_memory("auto", True, "cuda", "fused", 4, 128, 128, 1, f32, dev) == "store"

    # End to end: pretend 1 MiB is free. A 268 MB table (B = 1, N = M = 8192) then does not fit, and
    # soft_dtw(memory="auto") must run exactly the checkpointing computation, without the table.
    x, y = _data(1, 8192, 8192, 1, seed=8192)
    x, y = x.cuda(), y.cuda()
    table = _store_bytes(1, 8192, 8192, 1, f32)
    assert table > 2 * _ops._SMALL_TABLE
    monkeypatch.setattr(_ops, "_free_bytes", lambda device: 1 << 20)
    assert _ops.resolve_memory("auto", True, "cuda", "fused", 1, 8192, 8192, 1, f32, dev) == "checkpoint"
    softdtw.soft_dtw(x, y.clone().requires_grad_(), GAMMA, memory="checkpoint").sum().backward()  # compile
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    auto = _value_and_grads(x, y, GAMMA, memory="auto")
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ckpt = _value_and_grads(x, y, GAMMA, memory="checkpoint")
    assert all(torch.equal(a, b) for a, b in zip(auto, ckpt)), "auto did not run the checkpointing path"
    # (the checkpoints and tile buffers: ~70 MB one-ended, ~138 MB from both ends, whose halves' 2B·nch blocks each
    # keep two tiles; backends/cuda/two_ended.py, CKPT_WARPS_PER_SM)
    assert peak < 0.6 * table, f"peak {peak / 1e6:.1f} MB with memory='auto' vs a stored table of {table / 1e6:.1f} MB"
