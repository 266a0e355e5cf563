"""cpu backend: Numba kernels (``_cpu_kernels.py``), float32 and float64, parallel over the batch.

Implements the contract of :mod:`softdtw.backends`. This module only converts tensors to NumPy
views (no copies for contiguous CPU tensors), allocates outputs with torch, picks how the batch
is spread over SIMD lanes and threads (:func:`_plan`: lanes across pairs for batches of more
than ~12-16 pairs per thread, else one pair at a time with lanes across rows) and calls the
kernels; the arithmetic lives in ``_cpu_kernels.py``.

- Fused costs ("sqeuclidean", "l1") are computed inside the kernels one row at a time: no
  `(B, N, M)` cost tensor exists in the forward or the backward.
- memory="none": O(lanes · M · D) scratch per thread, nothing saved.
- memory="store": saves the table R `(B, N, M)` in float64 for both data dtypes (natural units;
  the sentinel 1e300 on cells outside a pair's lengths or window). A float32 table would put
  ~1e-3 relative error into float32 gradients at gamma = 0.1 (the backward's exponents are
  differences of neighbouring R / gamma, which reach ~1e4); see ``_cpu_kernels.py``. Values
  only (no gradient) run entirely in float32 for float32 data.
- memory="checkpoint": not implemented yet (raises NotImplementedError); use "store".
- gamma == 0 is hard DTW; its backward follows the argmin path (ties: diagonal, up, left).

The first call compiles the kernels (measured on a 2-core CI-class machine: ~40 s for float32,
~30 s for float64, forward and backward); Numba caches them on disk (``cache=True``) next to this
file or under ``NUMBA_CACHE_DIR``, so later processes load them in well under a second.

Devices: CPU. Dtypes: float32, float64.
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from . import _cpu_kernels as kernels

_COST_KIND = {"sqeuclidean": kernels.COST_SQEUCLIDEAN, "l1": kernels.COST_L1}

# Pairs per SIMD group (and rows per strip when by pair): two AVX-512 registers' worth, enough
# independent chains to hide the latency of a soft-min (measured: 32 lanes of float32 run at
# 1.6 ns/cell, 8 lanes at 5.4).
_MAX_LANES = {torch.float32: 32, torch.float64: 16}
# Except the float32 forward that stores (float64 state): 32 float64 lanes spill registers
# (measured, one thread, B=64, N=M=128, D=4: 16 lanes 5.5 ns/cell, 32 lanes 7.6).
_MAX_LANES_STORING = {torch.float32: 16, torch.float64: 16}
_VECTOR = 8
# Fewer pairs per thread than this run one pair at a time (see _plan). Measured crossover of
# forward + backward at N = M = 256, D = 2 on 2 threads (ns/cell, pairs vs lanes):
# float32 B=16 11.9 vs 13.7, B=24 11.9 vs 10.0; float64 B=24 9.6 vs 12.0, B=32 9.9 vs 9.0.
_PAIR_LANES_MIN = {torch.float32: 12, torch.float64: 16}
# Bound on a group's packed y and its gradient, `(M, D, lanes)` each: long, wide series get
# fewer lanes instead of a huge per-thread buffer.
_GROUP_BYTES = 64 << 20

#: Memory modes this backend runs (read by ``softdtw._ops.resolve_memory``).
MEMORY_MODES = ("none", "store")
#: dtype of the saved table R, whatever the data dtype.
SAVED_DTYPE = torch.float64

_CHECKPOINT_MESSAGE = (
    "memory='checkpoint' is not implemented by the cpu backend yet; use memory='store', which "
    "keeps the table R (B·N·M float64 values)."
)


def _plan(B: int, M: int, D: int, dtype: torch.dtype, max_lanes: int) -> tuple[bool, int]:
    """(by_pair, lanes): how the kernels spread the batch over SIMD lanes and threads.

    With at least ``_PAIR_LANES_MIN`` pairs per thread, groups of ``lanes`` pairs run in lock
    step (lanes across pairs); below that, lanes would sit empty, so each pair runs alone with
    ``lanes`` rows per wavefront strip (by_pair). Lanes are rounded to full vectors and bounded
    so that a group's packed y and its gradient stay under ``_GROUP_BYTES``.
    """
    threads = numba.get_num_threads()
    per_thread = -(-B // threads)
    if per_thread < _PAIR_LANES_MIN[dtype]:
        return True, _MAX_LANES[dtype]
    lanes = min(max_lanes, -(-per_thread // _VECTOR) * _VECTOR)
    itemsize = torch.empty((), dtype=dtype).element_size()
    while 2 * M * max(D, 1) * lanes * itemsize > _GROUP_BYTES:
        if lanes <= _VECTOR:  # long and wide series: one pair at a time needs only its own y
            return True, _MAX_LANES[dtype]
        lanes //= 2
    return False, lanes


def _view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor (a copy only if it is not contiguous)."""
    return t.detach().contiguous().numpy()


def _placeholder(dtype: torch.dtype, ndim: int = 3) -> np.ndarray:
    """An empty array of the right dtype and rank for a kernel argument that is not used."""
    return np.empty((0,) * ndim, dtype=torch.empty((), dtype=dtype).numpy().dtype)


def _window_args(window: torch.Tensor | None):
    if window is None:
        return np.zeros((0, 0, 2), dtype=np.int32), False
    return _view(window.to(torch.int32)), True


def _gamma(gamma: torch.Tensor) -> float:
    return float(gamma)


def _check_memory(memory: str) -> bool:
    """True if the table R is to be saved."""
    if memory == "checkpoint":
        raise NotImplementedError(_CHECKPOINT_MESSAGE)
    return memory == "store"


def saved_spec(kind, B, N, M, D, dtype, memory):
    """What :func:`forward` / :func:`forward_cost` save: R `(B, N, M)` float64, or nothing."""
    if memory == "none":
        return (0,), dtype
    if memory == "checkpoint":
        raise NotImplementedError(_CHECKPOINT_MESSAGE)
    return (B, N, M), SAVED_DTYPE


def _run_forward(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, store, B, N, M, D, dtype):
    values = torch.empty(B, dtype=dtype)
    if store:
        saved = torch.empty((B, N, M), dtype=SAVED_DTYPE)
        state = saved.numpy()
    else:  # values only: the DP state stays in the data dtype
        saved = torch.empty((0,), dtype=dtype)
        state = _placeholder(dtype)
    win, has_win = _window_args(window)
    by_pair, lanes = _plan(B, M, D, dtype, (_MAX_LANES_STORING if store else _MAX_LANES)[dtype])
    kernels.forward_kernel(
        x, y, C, cost_kind, _gamma(gamma), _view(x_lengths), _view(y_lengths), win, has_win,
        store, by_pair, lanes, state, values.numpy(),
    )
    return values, saved


def forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory):
    """Soft-DTW values `(B,)` of x `(B, N, D)` and y `(B, M, D)` under a fused cost; see module doc."""
    store = _check_memory(memory)
    B, N, D = x.shape
    M = y.shape[1]
    return _run_forward(_view(x), _view(y), _placeholder(x.dtype), _COST_KIND[cost], gamma,
                        x_lengths, y_lengths, window, store, B, N, M, D, x.dtype)


def forward_cost(C, gamma, x_lengths, y_lengths, window, memory):
    """Soft-DTW values `(B,)` from a precomputed cost C `(B, N, M)`."""
    store = _check_memory(memory)
    B, N, M = C.shape
    empty = _placeholder(C.dtype)
    return _run_forward(empty, empty, _view(C), kernels.COST_GIVEN, gamma, x_lengths, y_lengths,
                        window, store, B, N, M, 0, C.dtype)


def _run_backward(grad, x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, value, saved,
                  B, N, M, D, dtype, outputs):
    """Call the backward kernel; recompute R first when the forward saved nothing."""
    if saved.numel() == 0:
        _, saved = _run_forward(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, True,
                                B, N, M, D, dtype)
    dx, dy, dC = outputs
    dgamma = torch.empty(B, dtype=dtype)
    win, has_win = _window_args(window)
    by_pair, lanes = _plan(B, M, D, dtype, _MAX_LANES[dtype])
    kernels.backward_kernel(
        x, y, C, cost_kind, _gamma(gamma), _view(x_lengths), _view(y_lengths), win, has_win,
        by_pair, lanes, _view(grad.to(dtype)), _view(value.to(dtype)), _view(saved),
        dx, dy, dC, dgamma.numpy(),
    )
    return dgamma


def backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory):
    """(dx `(B, N, D)`, dy `(B, M, D)`, dgamma `(B,)`) of sum_b grad[b] * value[b]."""
    _check_memory(memory)
    B, N, D = x.shape
    M = y.shape[1]
    dx = torch.zeros_like(x)
    dy = torch.zeros_like(y)
    empty = _placeholder(x.dtype)
    dgamma = _run_backward(grad, _view(x), _view(y), empty, _COST_KIND[cost], gamma, x_lengths,
                           y_lengths, window, value, saved, B, N, M, D, x.dtype,
                           (dx.numpy(), dy.numpy(), empty))
    return dx, dy, dgamma


def backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory):
    """(dC `(B, N, M)` = grad_b · E_b, dgamma `(B,)`) from a precomputed cost C."""
    _check_memory(memory)
    B, N, M = C.shape
    dC = torch.zeros_like(C)
    empty = _placeholder(C.dtype)
    dgamma = _run_backward(grad, empty, empty, _view(C), kernels.COST_GIVEN, gamma, x_lengths,
                           y_lengths, window, value, saved, B, N, M, 0, C.dtype,
                           (empty, empty, dC.numpy()))
    return dC, dgamma
