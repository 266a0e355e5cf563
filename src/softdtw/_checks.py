"""Input validation and normalisation for the public functions.

Every message says what was wrong, what was expected and how to fix it. Nothing here writes into
the caller's tensors. Checks that need the data's values (NaN/Inf, length ranges, band feasibility)
read them from the device; they are skipped while a CUDA graph is being captured or torch.compile
is tracing, where a read would break the capture or the graph. On the cuda backend, soft_dtw,
soft_dtw_divergence and soft_dtw_from_cost check NaN/Inf (and a gamma tensor) in a kernel behind their
own kernels that sets their results to NaN when a value is bad; the host never waits for it, and reads
its flag later (prepare(defer=True), run_checked, settle; backends/cuda/checks.py).
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
import threading
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import backends
from ._windows import build_window, window_has_path
from .costs import NAMED_COSTS

MEMORY_MODES = ("auto", "store", "checkpoint")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Problem(NamedTuple):
    """Validated inputs, ready for the ops. x `(B, N, D)`, y `(B, M, D)` in the compute dtype."""

    x: torch.Tensor
    y: torch.Tensor
    gamma: torch.Tensor  # 0-d, compute dtype, on the data's device; keeps the caller's autograd graph
    x_lengths: torch.Tensor  # int64 (B,)
    y_lengths: torch.Tensor  # int64 (B,)
    window: Optional[torch.Tensor]  # int32 (B, N, 2) or None
    backend: str
    unbatched: bool
    out_dtype: torch.dtype
    # prepare(defer=True): the value check to run behind the call's kernels (_Deferred), else None. The
    # caller runs its ops through run_checked(problem, run) (or calls finish_check(problem)).
    pending: object = None


_trusted_depth = 0


@contextlib.contextmanager
def values_checked():
    """Inside this block the per-call value checks are skipped: the caller checked the data already.

    Used by loops over chunks of a set validated once (pairwise matrices), so that no chunk waits on
    a host read of the GPU.
    """
    global _trusted_depth
    _trusted_depth += 1
    try:
        yield
    finally:
        _trusted_depth -= 1


def _value_checks_enabled() -> bool:
    if _trusted_depth or os.environ.get("SOFTDTW_CHECK_VALUES", "1") == "0":
        return False
    if torch.compiler.is_compiling():
        return False
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    return True


# Constant tensors a call needs but the user did not pass (full lengths, a float gamma), kept per
# (value, shape, dtype, device): on a GPU each creation is a launch, ~10 us of host time per call.
# Backends never write into their inputs, so sharing them is safe.
_CONSTANTS: dict = {}
_CONSTANTS_MAX = 256


def _constant(shape: tuple, value, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if torch.compiler.is_compiling():
        return torch.full(shape, value, dtype=dtype, device=device)
    key = (shape, value, dtype, device)
    t = _CONSTANTS.get(key)
    if t is None:
        t = torch.full(shape, value, dtype=dtype, device=device)
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not capturing:  # memory from a graph's private pool must not outlive the graph's use
            if len(_CONSTANTS) >= _CONSTANTS_MAX:
                _CONSTANTS.clear()
            _CONSTANTS[key] = t
    return t


def _shape(t) -> tuple:
    return tuple(t.shape)


def as_tensor(t, name: str) -> torch.Tensor:
    """Accept tensors and NumPy arrays; reject everything else with the fix."""
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if not isinstance(t, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (B, T, D) or (T, D); got {type(t).__name__}. "
            f"Wrap it with torch.as_tensor({name}, dtype=torch.float32)."
        )
    if t.is_complex() or t.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64); got "
            f"{t.dtype}. Convert it with {name}.float() (or .double() for float64 precision)."
        )
    return t


def check_finite(t: torch.Tensor, name: str) -> None:
    if _value_checks_enabled() and not bool(torch.isfinite(t).all()):
        bad = "NaN" if bool(torch.isnan(t).any()) else "Inf"
        raise ValueError(
            f"{name} contains {bad} values; soft-DTW needs finite inputs. Remove or impute them "
            f"(for padded series pass x_lengths / y_lengths and fill the padding with any finite value)."
        )


def check_pair(x: torch.Tensor, y: torch.Tensor, xname: str = "x", yname: str = "y") -> bool:
    """Shapes, devices and dtypes of a pair of batches. Returns True if the inputs were unbatched."""
    for t, name in ((x, xname), (y, yname)):
        if t.dim() not in (2, 3):
            raise ValueError(
                f"{name} must have shape (B, T, D) or (T, D); got {name}.shape={_shape(t)} "
                f"({t.dim()} dimensions). For a univariate series of shape (T,) use {name}.unsqueeze(-1)."
            )
    if x.dim() != y.dim():
        raise ValueError(
            f"{xname} and {yname} must both be batched (B, T, D) or both unbatched (T, D); got "
            f"{xname}.shape={_shape(x)}, {yname}.shape={_shape(y)}. Add a batch dimension with .unsqueeze(0)."
        )
    if x.dim() == 3 and x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{xname} and {yname} must have the same batch size B; got {xname}.shape={_shape(x)}, "
            f"{yname}.shape={_shape(y)}. Pair them up (e.g. {yname}.expand({x.shape[0]}, -1, -1)) or use "
            f"softdtw.pairwise_soft_dtw for all pairs."
        )
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(
            f"{xname} and {yname} must have the same feature size D; got {xname}.shape={_shape(x)}, "
            f"{yname}.shape={_shape(y)}. Project or slice one so the last dimensions match."
        )
    for t, name in ((x, xname), (y, yname)):
        if t.shape[-2] == 0 or t.shape[-1] == 0 or (t.dim() == 3 and t.shape[0] == 0):
            raise ValueError(
                f"{name} is empty: {name}.shape={_shape(t)}. Every series needs at least one step "
                f"with at least one feature, and a batch at least one pair."
            )
    if x.device != y.device:
        raise ValueError(
            f"{xname} and {yname} must be on the same device; got {xname} on {x.device} and {yname} on "
            f"{y.device}. Move one with .to({xname}.device)."
        )
    if x.dtype != y.dtype:
        raise TypeError(
            f"{xname} and {yname} must have the same dtype; got {x.dtype} and {y.dtype}. Cast one, "
            f"e.g. {yname}.to({xname}.dtype)."
        )
    return x.dim() == 2


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The DP runs in float32 for half-precision inputs, else in the input dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def as_gamma(gamma, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """gamma (float or tensor, >= 0) as a 0-d tensor on the data's device, keeping its graph."""
    if isinstance(gamma, bool) or not isinstance(gamma, (numbers.Real, torch.Tensor, np.ndarray)):
        raise TypeError(
            f"gamma must be a non-negative float or a 0-d float tensor; got {type(gamma).__name__} "
            f"{gamma!r}. Typical values are 0.01 to 10 in the units of the cost (0 gives hard DTW)."
        )
    if isinstance(gamma, np.ndarray):
        gamma = torch.from_numpy(gamma)
    if isinstance(gamma, torch.Tensor):
        if gamma.numel() != 1 or not gamma.is_floating_point():
            raise TypeError(
                f"gamma as a tensor must hold one floating-point value; got shape {_shape(gamma)} "
                f"and dtype {gamma.dtype}. Use e.g. torch.tensor(1.0, requires_grad=True)."
            )
        if gamma.device.type == "cpu" and _value_checks_enabled():
            _check_gamma_value(float(gamma.detach()))
        # A gamma tensor on the GPU is checked with the data (check_values or the deferred check).
        return gamma.reshape(()).to(device=device, dtype=dtype)
    g = float(gamma)
    _check_gamma_value(g)
    return _constant((), g, dtype, device)


def _check_gamma_value(g: float) -> None:
    if not math.isfinite(g) or g < 0:
        raise ValueError(
            f"gamma must be a finite number >= 0; got {g}. gamma > 0 smooths the minimum "
            f"(try 0.1 to 1 for standardised series); gamma = 0 is hard DTW."
        )


def as_lengths(lengths, name: str, B: int, T: int, device: torch.device, series: str) -> torch.Tensor:
    """Per-pair lengths as int64 `(B,)` on ``device``; None means every series is full length T."""
    if lengths is None:
        return _constant((B,), T, torch.int64, device)
    if isinstance(lengths, (list, tuple, np.ndarray)):
        arr = np.asarray(lengths)
        if arr.dtype.kind not in "iu":
            raise TypeError(
                f"{name} must hold integers (number of valid steps per series); got values of dtype "
                f"{arr.dtype}. Use e.g. torch.tensor([...], dtype=torch.long)."
            )
        lengths = torch.as_tensor(arr, dtype=torch.int64)
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(f"{name} must be a tensor or list of ints of shape ({B},); got {type(lengths).__name__}.")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(
            f"{name} must be an integer tensor (number of valid steps per series); got dtype "
            f"{lengths.dtype}. Convert with {name}.long()."
        )
    if lengths.shape != (B,):
        raise ValueError(
            f"{name} must have shape ({B},) — one length per pair of the batch; got shape "
            f"{_shape(lengths)}."
        )
    return lengths.to(device=device, dtype=torch.int64)


def check_length_range(lengths: torch.Tensor, name: str, T: int, series: str) -> None:
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo < 1 or hi > T:
        raise ValueError(
            f"{name} must lie in [1, {T}] ({series} has {T} steps); got values from {lo} to {hi}. "
            f"Lengths count valid steps from the start of each series; padding goes at the end."
        )


def check_values(data, lengths, gamma) -> None:
    """Every check that needs the data's values, with one host read (one GPU sync) when all is well.

    data: [(tensor, name)] that must be finite; lengths: [(tensor or None, name, T, series)];
    gamma: the gamma tensor, or None when it was a Python number (checked on the host already).
    Only when the combined flag is false are the checks repeated one by one for the message.
    """
    if not _value_checks_enabled():
        return
    # One reduction per tensor: a NaN or Inf anywhere makes the sum non-finite. (A sum that overflows
    # although every value is finite only sends us to the exact checks below, which then pass.)
    total = None
    for t, _ in data:
        s = t.sum(dtype=torch.float64)
        total = s if total is None else total + s
    ok = torch.isfinite(total)
    for l, _, T, _ in lengths:
        if l is not None:
            ok = ok & (l.min() >= 1) & (l.max() <= T)
    if gamma is not None:
        ok = ok & torch.isfinite(gamma) & (gamma >= 0)
    if bool(ok):
        return
    for t, name in data:
        check_finite(t, name)
    for l, name, T, series in lengths:
        if l is not None:
            check_length_range(l, name, T, series)
    if gamma is not None:
        _check_gamma_value(float(gamma.detach()))


def check_band(bandwidth, itakura_max_slope) -> None:
    if bandwidth is not None:
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real) \
                or not math.isfinite(bandwidth) or bandwidth < 0:
            raise ValueError(
                f"bandwidth (the Sakoe–Chiba radius, as tslearn's sakoe_chiba_radius) must be a finite "
                f"number >= 0 or None for no band; got {bandwidth!r}."
            )
    if itakura_max_slope is not None:
        if isinstance(itakura_max_slope, bool) or not isinstance(itakura_max_slope, numbers.Real) \
                or not math.isfinite(itakura_max_slope) or itakura_max_slope <= 0:
            raise ValueError(
                f"itakura_max_slope must be a finite number > 0 (usually >= 1, e.g. 2.0) or None; got "
                f"{itakura_max_slope!r}."
            )


def make_window(x_lengths, y_lengths, N, M, bandwidth, itakura_max_slope) -> Optional[torch.Tensor]:
    """The constraint window, after checking it leaves a path for every pair."""
    window = build_window(x_lengths, y_lengths, N, M, bandwidth, itakura_max_slope)
    if window is not None and (window.device.type == "cpu" or _value_checks_enabled()):
        ok = window_has_path(window, x_lengths, y_lengths)
        if not bool(ok.all()):
            b = int((~ok).nonzero()[0, 0])
            n, m = int(x_lengths[b]), int(y_lengths[b])
            raise ValueError(
                f"the constraint (bandwidth={bandwidth!r}, itakura_max_slope={itakura_max_slope!r}) leaves "
                f"no warping path for pair {b} (lengths n={n}, m={m}). Itakura slopes must allow "
                f"max(n, m) / min(n, m) = {max(n, m) / min(n, m):.3g}: use a larger itakura_max_slope, a "
                f"bandwidth, or None."
            )
    return window


def check_cost(cost) -> None:
    if callable(cost):
        return
    if cost not in NAMED_COSTS:
        raise ValueError(
            f"cost must be one of {NAMED_COSTS} or a callable (x (B, N, D), y (B, M, D)) -> (B, N, M); "
            f"got {cost!r}."
        )


def check_cost_matrix(C, B: int, N: int, M: int, name: str = "the cost callable's output") -> torch.Tensor:
    if not isinstance(C, torch.Tensor) or C.shape != (B, N, M):
        got = _shape(C) if isinstance(C, torch.Tensor) else type(C).__name__
        raise ValueError(f"{name} must be a tensor of shape (B, N, M) = ({B}, {N}, {M}); got {got}.")
    return C


def check_memory(memory) -> None:
    if memory not in MEMORY_MODES:
        raise ValueError(
            f"memory must be one of {MEMORY_MODES}; got {memory!r}. 'auto' stores the backward table "
            f"when it fits and checkpoints otherwise."
        )


def resolve_backend(backend, device: torch.device) -> str:
    if backend is None:
        return backends.default_backend(device)
    if backend not in backends.BACKENDS:
        raise ValueError(f"backend must be one of {backends.BACKENDS} or None (pick by device); got {backend!r}.")
    wanted = {"cpu": "cpu", "cuda": "cuda"}.get(backend)
    if wanted is not None and device.type != wanted:
        raise ValueError(
            f"backend={backend!r} runs on {wanted} tensors, but the inputs are on {device}. Move them with "
            f".to('{wanted}') or leave backend=None to pick the backend from the device."
        )
    return backend


class _Deferred(NamedTuple):
    """The value check of a cuda call, not launched yet: run_checked launches it behind the call's kernels."""

    a: torch.Tensor
    b: Optional[torch.Tensor]
    gamma: Optional[torch.Tensor]

    def ok(self) -> bool:
        """Check now and wait for the answer (the synchronous path, :func:`finish_check`)."""
        return _cuda_checks().start(self.a, self.b, self.gamma).ok()


class _Failed:
    """A pending check known to have failed: finish_check then finds the culprit and raises its error."""

    @staticmethod
    def ok() -> bool:
        return False


_cuda_checks_module = []


def _cuda_checks():
    if not _cuda_checks_module:
        from .backends.cuda import checks

        _cuda_checks_module.append(checks)
    return _cuda_checks_module[0]


def _check_or_defer(data, lengths, gamma: Optional[torch.Tensor], backend: str, defer: bool):
    """The value checks of prepare / prepare_cost (arguments as :func:`check_values`): left to run_checked
    (returned as a :class:`_Deferred`) when deferring is possible, else run now (returning None). Deferring
    needs the cuda backend, value checks enabled and default lengths: a kernel must never see lengths out
    of range, so user lengths are checked before any launch."""
    if defer and backend == "cuda" and all(l is None for l, *_ in lengths) and _value_checks_enabled():
        return _Deferred(data[0][0], data[1][0] if len(data) > 1 else None, gamma)
    check_values(data, lengths, gamma)
    return None


def finish_check(p: Problem) -> None:
    """Wait for the value check of a prepared problem and raise its error, if any (the same messages as
    the synchronous checks: they run again, one by one, only when the flag is set)."""
    if p.pending is None or p.pending.ok():
        return
    same = p.y is p.x  # prepare_cost keeps C in both
    for t, name in ((p.x, "C" if same else "x"), (None if same else p.y, "y")):
        if t is not None:
            check_finite(t, name)
    _check_gamma_value(float(p.gamma.detach()))


def run_checked(p: Problem, run):
    """run() (the ops of a prepared problem), then its deferred value check.

    On the cuda backend the check is one kernel queued behind run()'s kernels: it reads x and y (or C) and
    gamma, and writes NaN into run()'s result when a value is NaN or Inf (or gamma < 0). The host does not
    wait for it. Its flag is read by :func:`settle`: at the end of this call if the GPU has finished it
    already, else in the backward of the call's ops (after their kernels are queued: no gradient comes back
    from bad inputs) or at the end of the next checked call, whichever comes first, and the error names this
    call. The trade: a value-only call on bad inputs returns NaN values and its error may come at the next
    call; a call whose check is still running at its backward makes that backward wait for the GPU (which
    has the backward queued by then). Until the check is read, the problem (x, y, gamma) stays referenced.

    If run() raises, the check runs synchronously first: a bad input's error wins over run()'s.
    """
    if p.pending is None:
        return run()
    try:
        out = run()
    except BaseException:
        finish_check(p)
        raise
    d = p.pending
    check = _cuda_checks().start(d.a, d.b, d.gamma, poison=out)
    check.problem = p
    settle(check)
    return out


#: Value checks launched behind their calls whose flags have not been read yet, oldest first.
_PENDING: list = []
_pending_lock = threading.Lock()


def settle(current=None) -> None:
    """Read the value checks still running on the GPU; raise the first bad one's error.

    The earlier checks are waited for: they ran behind earlier calls, and the caller has queued its own
    kernels already, so the wait leaves the GPU busy. ``current`` (the check of the call that is ending)
    is read only if it has finished, else kept for later. Called at the end of every checked call and by
    the backward of every soft-DTW op. Inside a CUDA-graph capture nothing is waited for.
    """
    older = ()
    if _PENDING and not torch.cuda.is_current_stream_capturing():  # (pending checks imply CUDA)
        with _pending_lock:
            older = _PENDING[:]
            del _PENDING[:]
    err = None
    for check in older:
        if not check.ok() and err is None:
            err = _bad_values_error(check.problem, late=True)
    if current is not None:
        if current.done():
            if not current.ok() and err is None:
                err = _bad_values_error(current.problem, late=False)
        else:
            with _pending_lock:
                _PENDING.append(current)
    if err is not None:
        raise err


def _bad_values_error(p: Problem, late: bool) -> ValueError:
    """The error of a problem whose value check failed: the synchronous checks' message (they run again
    to find the culprit), and when raised after the call had returned, which call it was."""
    try:
        finish_check(p._replace(pending=_Failed))
        msg = ("the inputs held NaN or Inf (or gamma a bad value) when soft-DTW ran, but hold none now: they "
               "were changed in place since. Check them before the call.")
    except ValueError as err:
        msg = str(err)
    if late:
        x, y = p.x, p.y
        what = f"C {_shape(x)}" if y is x else f"x {_shape(x)} and y {_shape(y)}"
        msg += (f" (Found by the value check of an earlier soft-DTW call on {what}, {x.dtype}, on {x.device}: "
                f"CUDA calls check their inputs on the GPU without stopping the host, set their results to NaN "
                f"when a value is bad, and raise at the latest in their backward or at the end of the next call.)")
    return ValueError(msg)


def prepare(x, y, gamma, *, cost, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory,
            backend, defer: bool = False) -> Problem:
    """Validate the arguments of the public functions and normalise them into a :class:`Problem`.

    defer: on the cuda backend with default lengths, check the values (NaN, Inf, gamma >= 0) in a kernel
    whose result is read after the caller's kernels are launched: the caller must pass the problem to
    :func:`run_checked` (or call :func:`finish_check`).
    """
    key = None
    if defer and x_lengths is None and y_lengths is None and type(x) is torch.Tensor and type(y) is torch.Tensor \
            and x.is_cuda and not torch.compiler.is_compiling():
        key = (x.shape, y.shape, x.dtype, y.dtype, x.get_device(), y.get_device(), cost, bandwidth,
               itakura_max_slope, memory, backend, gamma if type(gamma) is float else None)
        try:
            hit = _PREPARED.get(key)
        except TypeError:  # an unhashable argument: the checks below say what is wrong with it
            hit = key = None
        if hit is not None:
            return _prepared(hit, x, y, gamma)
    x = as_tensor(x, "x")
    y = as_tensor(y, "y")
    unbatched = check_pair(x, y)
    if unbatched:
        x, y = x.unsqueeze(0), y.unsqueeze(0)
        if x_lengths is not None or y_lengths is not None:
            raise ValueError("x_lengths / y_lengths need batched inputs (B, T, D); add a batch dimension.")
    check_cost(cost)
    check_band(bandwidth, itakura_max_slope)
    check_memory(memory)
    backend = resolve_backend(backend, x.device)
    dtype = compute_dtype(x.dtype)
    out_dtype = x.dtype
    B, N, _ = x.shape
    M = y.shape[1]
    xl = as_lengths(x_lengths, "x_lengths", B, N, x.device, "x")
    yl = as_lengths(y_lengths, "y_lengths", B, M, x.device, "y")
    g = as_gamma(gamma, x.device, dtype)
    g_tensor = g if isinstance(gamma, torch.Tensor) else None
    x, y = x.to(dtype).contiguous(), y.to(dtype).contiguous()
    pending = _check_or_defer([(x, "x"), (y, "y")],
                              [(xl if x_lengths is not None else None, "x_lengths", N, "x"),
                               (yl if y_lengths is not None else None, "y_lengths", M, "y")],
                              g_tensor, backend, defer)
    window = make_window(xl, yl, N, M, bandwidth, itakura_max_slope)
    p = Problem(x, y, g, xl, yl, window, backend, unbatched, out_dtype, pending)
    if key is not None and backend == "cuda" and g_tensor is None and not torch.cuda.is_current_stream_capturing() \
            and (window is None or _value_checks_enabled()):
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = (dtype, unbatched, g, xl, yl, window, backend, out_dtype)
    return p


# prepare's validation of a cuda call with default lengths, kept per (shapes, dtypes, devices, options,
# float gamma): a training step calls with the same arguments every time, and validating them again costs
# more than the step's kernels (issue 27). What it caches is a pure function of the key: the backend, the
# compute dtype, the constant lengths and gamma, the window (built and checked for a path once).
_PREPARED: dict = {}
_PREPARED_MAX = 256


def _prepared(hit: tuple, x, y, gamma) -> Problem:
    """The Problem of a call whose arguments prepare has validated before (`hit`, from _PREPARED)."""
    dtype, unbatched, g, xl, yl, window, backend, out_dtype = hit
    if unbatched:
        x, y = x.unsqueeze(0), y.unsqueeze(0)
    if x.dtype is not dtype:
        x, y = x.to(dtype), y.to(dtype)
    if not x.is_contiguous():
        x = x.contiguous()
    if not y.is_contiguous():
        y = y.contiguous()
    g_tensor = None
    if type(gamma) is not float:
        g = as_gamma(gamma, x.device, dtype)
        g_tensor = g if isinstance(gamma, torch.Tensor) else None
    checks = not (_trusted_depth or os.environ.get("SOFTDTW_CHECK_VALUES", "1") == "0"
                  or torch.cuda.is_current_stream_capturing())  # _value_checks_enabled on a cuda call
    return Problem(x, y, g, xl, yl, window, backend, unbatched, out_dtype,
                   _Deferred(x, y, g_tensor) if checks else None)


def prepare_cost(C, gamma, *, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory, backend,
                 defer: bool = False) -> Problem:
    """Like :func:`prepare` for a precomputed cost `(B, N, M)` (or `(N, M)`); x and y hold C and C."""
    C = as_tensor(C, "C")
    if C.dim() not in (2, 3) or 0 in C.shape:
        raise ValueError(
            f"C must be a non-empty cost matrix of shape (B, N, M) or (N, M); got C.shape={_shape(C)}."
        )
    unbatched = C.dim() == 2
    if unbatched:
        C = C.unsqueeze(0)
        if x_lengths is not None or y_lengths is not None:
            raise ValueError("x_lengths / y_lengths need a batched cost (B, N, M); add a batch dimension.")
    check_band(bandwidth, itakura_max_slope)
    check_memory(memory)
    backend = resolve_backend(backend, C.device)
    dtype = compute_dtype(C.dtype)
    B, N, M = C.shape
    xl = as_lengths(x_lengths, "x_lengths", B, N, C.device, "C's rows")
    yl = as_lengths(y_lengths, "y_lengths", B, M, C.device, "C's columns")
    g = as_gamma(gamma, C.device, dtype)
    g_tensor = g if isinstance(gamma, torch.Tensor) else None
    out_dtype = C.dtype
    C = C.to(dtype).contiguous()
    pending = _check_or_defer([(C, "C")],
                              [(xl if x_lengths is not None else None, "x_lengths", N, "C's rows"),
                               (yl if y_lengths is not None else None, "y_lengths", M, "C's columns")],
                              g_tensor, backend, defer)
    window = make_window(xl, yl, N, M, bandwidth, itakura_max_slope)
    return Problem(C, C, g, xl, yl, window, backend, unbatched, out_dtype, pending)
