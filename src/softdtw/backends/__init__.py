"""Backend registry and the contract every backend implements.

A backend is a module with the functions below. The ops layer (``softdtw/_ops.py``) is the only
caller; it hands over tensors that ``softdtw/_checks.py`` has already validated, so a backend does
no argument checking of its own.

Inputs every function receives
------------------------------
- ``x`` `(B, N, D)`, ``y`` `(B, M, D)`: contiguous, same dtype (float32 or float64; the reference
  takes any float dtype) and device.
- ``C`` `(B, N, M)`: a precomputed cost, contiguous (the ``*_cost`` functions).
- ``gamma``: 0-d tensor, same dtype and device as the data. ``gamma == 0`` means hard DTW
  (min-plus); the backward then follows the single optimal path chosen by argmin with the
  priority diagonal (i-1, j-1), then up (i-1, j), then left (i, j-1) (tslearn's tie-breaking).
- ``cost``: one of :data:`FUSED_COSTS` — "sqeuclidean" = sum_d (x_id - y_jd)^2,
  "l1" = sum_d |x_id - y_jd|. Other costs reach a backend only as ``C``.
- ``x_lengths``, ``y_lengths``: int64 `(B,)`, 1 <= n_b <= N, 1 <= m_b <= M. Pair b uses rows
  [0, n_b) and columns [0, m_b); its value is R[b, n_b - 1, m_b - 1].
- ``window``: None (every cell of the pair allowed) or int32 `(B, N, 2)`: row i of pair b may use
  columns [window[b, i, 0], window[b, i, 1]). Already clipped to [0, m_b), empty (0, 0) for rows
  i >= n_b, nondecreasing bounds, and guaranteed to leave a path from (0, 0) to (n_b-1, m_b-1).
  Cells outside are +inf (use a large finite sentinel internally) and get zero gradient.
- ``memory``: "none" (value only: nothing saved, return an empty ``saved``), "store" (save what
  the backward needs), "checkpoint" (save less and recompute in the backward).

Recursion (DESIGN.md): R[i, j] = C[i, j] + smin_gamma(R[i-1, j-1], R[i-1, j], R[i, j-1]),
R[-1, -1] = 0, other borders +inf, smin_gamma(a) = -gamma log sum_k exp(-a_k / gamma).
E = dR[n-1, m-1] / dC (expected alignment).

Functions
---------
``forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory) -> (value, saved)``
    value `(B,)` in the data dtype; saved: a tensor whose shape/dtype is ``saved_spec("fused", ...)``.
``backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory)
        -> (dx, dy, dgamma)``
    grad `(B,)`; dx, dy like x, y (zero on padded steps); dgamma `(B,)`, per pair:
    grad_b * (value_b - <E_b, C_b>) / gamma, and 0 when gamma == 0.
``forward_cost(C, gamma, x_lengths, y_lengths, window, memory) -> (value, saved)``
``backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory) -> (dC, dgamma)``
    dC `(B, N, M)` = grad_b * E_b, zero outside the pair's lengths and window.
``saved_spec(kind, B, N, M, D, dtype, memory) -> (shape, dtype)``
    kind is "fused" or "cost"; must agree with what forward / forward_cost return, so that
    fake tensors (torch.compile, opcheck) have the right metadata. memory == "none" -> ((0,), dtype).
    A backend whose saved size depends on the sizes' values (a launch plan) returns a flat buffer and,
    for symbolic sizes, shape None: the fake kernel then gives it a size symbol of its own.
"""
from __future__ import annotations

import importlib
import sys

import torch

#: Costs a backend computes inside its kernels (no (B, N, M) cost tensor).
FUSED_COSTS = ("sqeuclidean", "l1")

#: Backend names a user may ask for.
BACKENDS = ("reference", "cpu", "cuda")

_MODULES = {
    "reference": "softdtw.backends.reference",
    "cpu": "softdtw.backends.cpu",
    "cuda": "softdtw.backends.cuda",
}


def default_backend(device: torch.device) -> str:
    """The backend used for tensors on ``device`` when none is requested."""
    if device.type == "cuda":
        return "cuda"
    if device.type == "cpu":
        return "cpu"
    return "reference"


def get_backend(name: str):
    """Import and return the backend module ``name`` (lazily: Numba and cuda-core load on first use)."""
    loaded = _LOADED.get(name)
    if loaded is not None:  # every op asks: a dict lookup instead of an import_module call (~2 us)
        return loaded
    try:
        module = _MODULES[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; expected one of {BACKENDS} or None (pick by device)."
        ) from None
    if torch.compiler.is_dynamo_compiling():
        # Dynamo cannot trace an import (AOT tracing, which runs the ops' fake kernels, can). Only the cpu backend
        # gets here (softdtw's import loads the others, see adopt_imported), from code Dynamo traces (DILATE's
        # autograd.Function).
        raise RuntimeError(
            f"softdtw's {name} backend is not loaded yet, and torch.compile cannot trace its import"
            f"{' (it loads Numba)' if name == 'cpu' else ''}. "
            f"Load it before compiling: call softdtw.backends.get_backend({name!r}) once, or run the loss once "
            f"outside torch.compile.")
    loaded = _LOADED[name] = importlib.import_module(module)
    return loaded


def adopt_imported() -> None:
    """Record the backend modules already imported (softdtw's import loads reference and cuda; cuda-core itself
    loads on first use), so that get_backend finds them without an import, which torch.compile cannot trace."""
    for name, module in _MODULES.items():
        if name not in _LOADED and module in sys.modules:
            _LOADED[name] = sys.modules[module]


_LOADED: dict = {}
