"""Input validation and normalisation for the public functions.

Every message says what was wrong, what was expected and how to fix it. Nothing here writes into
the caller's tensors. Checks that need the data's values (NaN/Inf, length ranges, band feasibility)
read them from the device; they are skipped while a CUDA graph is being captured or torch.compile
is tracing, where a read would break the capture or the graph. On the cuda backend, soft_dtw,
soft_dtw_divergence and soft_dtw_from_cost check NaN/Inf (and a gamma tensor) in a kernel queued in front
of their own kernels and read only after those are queued (prepare(defer=True), run_checked), so the check
does not hold the GPU idle in front of the forward (backends/cuda/checks.py); the range bound (REACH_LIMIT)
is queued and read beside it.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from . import backends
from ._packed import unpack
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
    # prepare(defer=True): the value check (and range bound, _Pending) queued on the GPU in front of the
    # call's kernels, else None. The caller runs its ops through run_checked(problem, run), which reads it.
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


def ragged_hint(t, name: str, lengths_name: str) -> str:
    """For a list or tuple of series of different lengths: how to pass them (padded, with lengths);
    "" for anything else."""
    if isinstance(t, PackedSequence):  # a namedtuple, not a list of series
        return (f"{name} is a PackedSequence, which this function does not read: unpack it, {name}, lengths = "
                f"torch.nn.utils.rnn.pad_packed_sequence({name}, batch_first=True), and pass {lengths_name}=lengths.")
    if not isinstance(t, (list, tuple)) or len(t) < 2:
        return ""
    try:
        sizes = [len(s) for s in t]
    except TypeError:
        return ""
    if len(set(sizes)) < 2:
        return ""
    shown = ", ".join(str(n) for n in sizes[:5]) + (", ..." if len(sizes) > 5 else "")
    return (
        f"{name} is a list of {len(sizes)} series of different lengths ({shown}), which no tensor can "
        f"hold as is. Pad them to the longest and pass the lengths: "
        f"{name} = torch.nn.utils.rnn.pad_sequence([torch.as_tensor(s, dtype=torch.float32) for s in "
        f"{name}], batch_first=True) and {lengths_name}=[len(s) for s in {name}] (padded steps are ignored), "
        f"or pad with NaN: trailing all-NaN steps are read as the lengths."
    )


def as_tensor(t, name: str, shape: str = "(B, T, D) or (T, D)") -> torch.Tensor:
    """Accept tensors and NumPy arrays; reject everything else with the fix."""
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if not isinstance(t, torch.Tensor):
        hint = ragged_hint(t, name, f"{name}_lengths")
        if hint:
            raise TypeError(hint)
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}; got {type(t).__name__}. "
            f"Wrap it with torch.as_tensor({name}, dtype=torch.float32)."
        )
    if t.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device (shape {_shape(t)}, no data); soft-DTW needs real data. "
            f"Create or load it on 'cpu' or 'cuda' (e.g. {name} = torch.randn(..., device='cpu'))."
        )
    if t.is_complex() or t.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64); got "
            f"{t.dtype}. Convert it with {name}.float() (or .double() for float64 precision)."
        )
    return t


def check_cost_values(C: torch.Tensor, name: str) -> None:
    """A cost tensor may hold +inf (a forbidden cell: no path may use it), never NaN or -inf."""
    if not _value_checks_enabled():
        return
    nan = torch.isnan(C)
    bad = nan if bool(nan.any()) else (C == -math.inf)
    if not bool(bad.any()):
        return
    kind = "NaN" if bad is nan else "-inf"
    where = tuple(int(v) for v in bad.nonzero()[0])
    raise ValueError(
        f"{name} contains {kind} values at {int(bad.sum())} of {bad.numel()} cells (the first at index {where}); "
        f"a cost must be a number or +inf (+inf marks a forbidden cell that no warping path may use). "
        f"Find where it comes from (0/0, inf - inf, the log or sqrt of a negative number) and fix it or "
        f"mask the cell with +inf."
    )


def check_finite(t: torch.Tensor, name: str) -> None:
    if _value_checks_enabled() and not bool(torch.isfinite(t).all()):
        bad = "NaN" if bool(torch.isnan(t).any()) else "Inf"
        raise ValueError(
            f"{name} contains {bad} values; soft-DTW needs finite inputs. Remove or impute them "
            f"(for padded series pass x_lengths / y_lengths and fill the padding with any finite value)."
        )


def nan_padding(t: torch.Tensor, name: str, lengths, lengths_name: str):
    """Read NaN padding as lengths: trailing steps whose features are all NaN (tslearn's
    ``to_time_series_dataset`` writes unequal lengths this way) end each series.

    t: `(B, T, D)`. Returns ``(t, lengths)``: unchanged when t has no NaN; otherwise a copy with the
    padding set to 0 (the caller's tensor and autograd graph are kept) and `(B,)` int64 lengths.
    NaN inside a series, a series of NaN only, or NaN padding together with explicit lengths raise.
    """
    a = _host_array(t)
    if a is not None and not np.isnan(a).any():
        return t, lengths
    nan = torch.isnan(t)
    if not bool(nan.any()):
        return t, lengths
    B, T, D = t.shape
    observed = ~nan.all(-1)  # (B, T): steps with at least one value
    steps = torch.arange(1, T + 1, device=t.device)
    n = (observed * steps).amax(-1)  # 1 + the last observed step; 0 for an all-NaN series
    if bool((n == 0).any()):
        b = int((n == 0).nonzero()[0, 0])
        raise ValueError(f"series {b} of {name} is NaN at every step; every series needs at least one "
                         f"observed step. Remove it from the batch.")
    inside = nan & (steps <= n.unsqueeze(1)).unsqueeze(-1)
    if bool(inside.any()):
        b, i, d = (int(v) for v in inside.nonzero()[0])
        where = f"step {i}" + (f", feature {d}" if D > 1 else "")
        raise ValueError(
            f"{name} contains NaN values inside series {b} ({where}, before its last observed step "
            f"{int(n[b]) - 1}). NaN is read only as padding (whole steps at the end of a series, as tslearn's "
            f"to_time_series_dataset writes them), which gives {lengths_name}; impute missing values first "
            f"(e.g. linear interpolation)."
        )
    if lengths is not None:
        raise ValueError(
            f"{name} is NaN-padded (its trailing all-NaN steps give each series its length) and "
            f"{lengths_name} was given too; pass one of them: drop {lengths_name}, or fill the padding "
            f"with any finite value."
        )
    return torch.where(nan, torch.zeros((), dtype=t.dtype, device=t.device), t), n.to(torch.int64)


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
    # Under torch.compile a float argument whose value changed between calls arrives as a SymFloat (automatic
    # dynamic): float() does not trace, the comparisons below do (as guards: later values do not recompile), and the
    # messages cannot format it.
    compiling = torch.compiler.is_compiling()
    g = gamma if compiling else float(gamma)
    _check_gamma_value(g)
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and g > _F32_MAX:  # the DP runs in float32
        raise ValueError(_GAMMA_F32.format(g="gamma" if compiling else f"gamma={g:g}"))
    if compiling:
        # A zero plus gamma: Dynamo keeps a symbolic float a graph input through an add, where torch.full of it
        # specialises (a recompile per value).
        return torch.zeros((), dtype=dtype, device=device) + g
    return _constant((), g, dtype, device)


_F32_MAX = float(torch.finfo(torch.float32).max)
_F64_MAX = float(torch.finfo(torch.float64).max)
_GAMMA_RANGE = ("gamma must be a finite number >= 0; got {got}. gamma > 0 smooths the minimum (try 0.1 to 1 for "
                "standardised series); gamma = 0 is hard DTW.")
_GAMMA_F32 = (f"{{g}} does not fit in float32 (at most {_F32_MAX:.4g}), the precision of this call; pass float64 "
              f"inputs or a smaller gamma (typically 0.01 to 10 in the cost's units).")


def _check_gamma_value(g: float) -> None:
    # Comparisons, not math.isfinite: NaN and inf fail them too, and they trace under torch.compile (see as_gamma).
    if not (g >= 0 and g <= _F64_MAX):
        raise ValueError(_GAMMA_RANGE.format(
            got="a negative, infinite or NaN value" if torch.compiler.is_compiling() else g))


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
    # From the CPU to a GPU without waiting for it: pageable memory is staged before the copy returns.
    return lengths.to(device=device, dtype=torch.int64,
                      non_blocking=lengths.device.type == "cpu" and torch.device(device).type == "cuda")


def check_length_range(lengths: torch.Tensor, name: str, T: int, series: str) -> None:
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo < 1 or hi > T:
        raise ValueError(
            f"{name} must lie in [1, {T}] ({series} has {T} steps); got values from {lo} to {hi}. "
            f"Lengths count valid steps from the start of each series; padding goes at the end."
        )


def _host_array(t: torch.Tensor):
    """A NumPy view of a float32 / float64 CPU tensor (no copy), else None.

    The value checks of CPU calls read their tensors through NumPy: a torch reduction over a few ten
    thousand values opens an intra-op (OpenMP) parallel region whose threads then spin for a while, on
    the same cores the cpu backend's Numba threads are about to use (2 cores: the loss step's kernels ran
    ~25 % slower after the checks' reductions; benchmarks/OPTIMIZATION_LOG.md, "CPU checks through NumPy")."""
    if t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64) or t.is_conj() or t.is_neg():
        return None
    return t.detach().numpy()


def host_views(a: torch.Tensor, b: torch.Tensor):
    """NumPy views (no copy) of two CPU tensors for the lean single-pair routes (dtw_path, dtw_search), or None
    for tensors NumPy cannot view (another device, a negative or conjugate bit). Unlike :func:`_host_array` it
    makes one torch call per tensor when none requires grad: those routes count every torch call."""
    try:
        try:
            return a.numpy(), b.numpy()
        except RuntimeError:  # requires grad
            return a.detach().numpy(), b.detach().numpy()
    except (RuntimeError, TypeError):
        return None


def _host_values_ok(data, lengths, gamma) -> bool:
    """check_values' "all is well" for CPU tensors, read through NumPy (see _host_array); False when some
    tensor is not on the CPU or a value fails (the torch checks below then find and name it)."""
    for t, _, *kind in data:
        a = _host_array(t)
        if a is None:
            return False
        if kind:  # a cost: numbers or +inf
            if np.isnan(a).any() or (a == -np.inf).any():
                return False
        elif not np.isfinite(a).all():
            return False
    for l, _, T, _ in lengths:
        if l is not None:
            if l.device.type != "cpu":
                return False
            v = l.numpy()
            if v.size and (v.min() < 1 or v.max() > T):
                return False
    if gamma is not None:
        if gamma.device.type != "cpu":
            return False
        g = float(gamma.detach())
        if not (math.isfinite(g) and g >= 0):
            return False
    return True


def check_values(data, lengths, gamma) -> None:
    """Every check that needs the data's values, with one host read (one GPU sync) when all is well.

    data: [(tensor, name)] that must be finite, or [(tensor, name, "cost")] for a cost tensor, which
    may also hold +inf (see :func:`check_cost_values`); lengths: [(tensor or None, name, T, series)];
    gamma: the gamma tensor, or None when it was a Python number (checked on the host already).
    Only when the combined flag is false are the checks repeated one by one for the message.
    """
    if not _value_checks_enabled():
        return
    if _host_values_ok(data, lengths, gamma):
        return
    # One reduction per tensor: a NaN or Inf anywhere makes the sum non-finite. (A sum that overflows
    # although every value is finite only sends us to the exact checks below, which then pass.)
    # A cost tensor may hold +inf: its sum is then +inf, and only NaN or -inf (NaN, -inf, or both
    # infinities) sends it to the exact check.
    ok = total = None
    for t, _, *kind in data:
        s = t.sum(dtype=torch.float64)
        if kind:
            ok = ~torch.isnan(s) & (s != -math.inf)
        else:
            total = s if total is None else total + s
    if total is not None:
        ok = torch.isfinite(total) if ok is None else ok & torch.isfinite(total)
    for l, _, T, _ in lengths:
        if l is not None:
            ok = ok & (l.min() >= 1) & (l.max() <= T)
    if gamma is not None:
        ok = ok & torch.isfinite(gamma) & (gamma >= 0)
    if bool(ok):
        return
    for t, name, *kind in data:
        if kind:
            check_cost_values(t, name)
        else:
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


def as_variant(open_begin, open_end, step_penalty, bandwidth, itakura_max_slope, device: torch.device,
               dtype: torch.dtype) -> Optional[tuple]:
    """The alignment-variant options (issue 25) as the ops take them: None when none is set (the plain DP),
    else (open_begin, open_end, step_penalty as a 0-d tensor of ``dtype`` on ``device`` keeping its graph, or
    None)."""
    for name, flag in (("open_begin", open_begin), ("open_end", open_end)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False; got {type(flag).__name__} {flag!r}.")
    if step_penalty is None:
        if not (open_begin or open_end):
            return None
        pen = None
    else:
        if isinstance(step_penalty, bool) or not isinstance(step_penalty, (numbers.Real, torch.Tensor)) or (
                isinstance(step_penalty, torch.Tensor)
                and (step_penalty.numel() != 1 or not step_penalty.is_floating_point())):
            raise TypeError(
                f"step_penalty must be a finite float or a 0-d float tensor (that may require grad), added once "
                f"per vertical or horizontal move of a path; got {type(step_penalty).__name__} "
                f"{_shape(step_penalty) if isinstance(step_penalty, torch.Tensor) else repr(step_penalty)}. "
                f"Use e.g. step_penalty=0.5 or torch.tensor(0.5, requires_grad=True); None for no penalty.")
        if isinstance(step_penalty, torch.Tensor):
            pen = step_penalty.reshape(()).to(device=device, dtype=dtype)
            value = None if torch.compiler.is_compiling() or not _value_checks_enabled() else float(
                step_penalty.detach())
        else:
            value = float(step_penalty)
            pen = _constant((), value, dtype, device)
        if value is not None and not math.isfinite(value):
            raise ValueError(
                f"step_penalty must be a finite number (any sign: > 0 discourages vertical and horizontal "
                f"moves, < 0 favours them); got {value}. Pass None for no penalty.")
    if (open_begin or open_end) and (bandwidth is not None or itakura_max_slope is not None):
        name = "open_begin" if open_begin else "open_end"
        raise ValueError(
            f"{name}=True cannot be combined with a band (bandwidth={bandwidth!r}, itakura_max_slope="
            f"{itakura_max_slope!r}): a band is drawn between the pair's corners, which an open end removes. "
            f"Drop the band (bandwidth=None, itakura_max_slope=None), or set {name}=False.")
    return bool(open_begin), bool(open_end), pen


def make_window(x_lengths, y_lengths, N, M, bandwidth, itakura_max_slope) -> Optional[torch.Tensor]:
    """The constraint window, after checking it leaves a path for every pair."""
    window = build_window(x_lengths, y_lengths, N, M, bandwidth, itakura_max_slope)
    # (Not under torch.compile, which cannot branch on a tensor's value: as the value checks, see README.)
    if window is not None and not torch.compiler.is_compiling() and (
            window.device.type == "cpu" or _value_checks_enabled()):
        ok = window_has_path(window, x_lengths, y_lengths)
        if not bool(ok.all()):
            b = int((~ok).nonzero()[0, 0])
            n, m = int(x_lengths[b]), int(y_lengths[b])
            ratio = max(n, m) / min(n, m)
            if itakura_max_slope is not None and float(itakura_max_slope) >= ratio:
                why = (f"The slope allows max(n, m) / min(n, m) = {ratio:.3g}, but on so few cells the parallelogram "
                       f"(tslearn's itakura_mask, rounded to cells) still has no path from the first cell to the "
                       f"last")
            else:
                why = f"Itakura slopes must allow max(n, m) / min(n, m) = {ratio:.3g}"
            raise ValueError(
                f"the constraint (bandwidth={bandwidth!r}, itakura_max_slope={itakura_max_slope!r}) leaves "
                f"no warping path for pair {b} (lengths n={n}, m={m}). {why}: use a larger itakura_max_slope, a "
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


def cost_name(cost) -> str:
    """How messages name a cost callable: "the cost callable 'my_cost'"."""
    return f"the cost callable {getattr(cost, '__name__', type(cost).__name__)!r}"


def check_cost_matrix(C, B: int, N: int, M: int, name: str = "the cost callable's output", *,
                      device: Optional[torch.device] = None, cost=None) -> torch.Tensor:
    """A cost callable's output: a `(B, N, M)` float tensor on the data's device, with numbers or +inf
    (forbidden cells), never NaN or -inf (checked like a precomputed C). Named costs (cost a str) are
    ours, so only their shape is checked."""
    if not isinstance(C, torch.Tensor) or C.shape != (B, N, M):
        got = _shape(C) if isinstance(C, torch.Tensor) else type(C).__name__
        raise ValueError(f"{name} must be a tensor of shape (B, N, M) = ({B}, {N}, {M}); got {got}.")
    if cost is None or isinstance(cost, str):
        return C
    who = cost_name(cost)
    if not (C.is_floating_point() or C.dtype in (torch.int32, torch.int64, torch.int16, torch.int8,
                                                 torch.uint8)):
        raise TypeError(f"{who} returned a tensor of dtype {C.dtype}; it must return real costs (a float "
                        f"tensor of shape (B, N, M)).")
    if device is not None and C.device != device:
        raise ValueError(f"{who} returned a tensor on {C.device}, but x and y are on {device}; compute the "
                         f"costs on the inputs' device.")
    if C.is_floating_point():
        check_cost_values(C, f"the output of {who}")
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


# --- range: what the sentinel-based kernels hold exactly ------------------------------------------------
# The cpu and cuda kernels run in log2 units, R' = R / (gamma ln 2), with a large finite sentinel for +inf
# (DESIGN.md, "Numerics"). Costs or path sums whose R' comes near the sentinel, and +inf costs on cuda,
# would give wrong values there, so such problems run on the reference backend instead (natural units,
# float64, real +inf: exact, only slower). The bound is cheap: the inputs' largest magnitude, read with the
# value checks (on cuda after the kernels are queued, as the deferred check). The cpu backend does the same
# inside (backends/cpu.py, _state: a float64 DP state for float32 data wherever a float32 one would not
# hold, the reference for float64 data past its range), from host memory it reads anyway.

#: The largest |R'| a backend keeps exact, per (backend, compute dtype); a backend not listed has no limit
#: here (the cpu backend checks its range itself, at no cost: backends/cpu.py, _state).
REACH_LIMIT = {("cuda", torch.float32): 1.25e29, ("cuda", torch.float64): 1.25e199}
_LN2 = 0.6931471805599453


class Span(NamedTuple):
    """What the range bound needs to know of a call: the cost ("C" for a precomputed one; a callable is
    bounded when its output exists), D, N and M."""

    cost: object
    D: int
    N: int
    M: int


def reach(v: float, gamma: float, span: Span) -> float:
    """The largest |R'| (cost / (gamma ln 2) summed along a path, plus the soft-min's log2 3 per cell) that
    inputs (or costs, for "C") of magnitude <= v can reach; 0 for a callable (bounded on its output)."""
    D, N, M = span.D, span.N, span.M
    if span.cost == "sqeuclidean":
        U = D * (2 * v) * (2 * v)
    elif span.cost == "l1":
        U = D * 2 * v
    elif span.cost == "cosine":
        U = 2.0
    elif span.cost == "C":
        U = v
    else:
        return 0.0
    inv = 1.0 if gamma == 0 else 1.0 / (gamma * _LN2)
    scaled = 0.0 if U == 0 else U * inv
    return max((N + M) * (scaled + 2.0), inv)


def _out_of_range(v: float, gamma: float, span: Span, backend: str, dtype: torch.dtype) -> bool:
    limit = REACH_LIMIT.get((backend, dtype))
    return limit is not None and not reach(v, gamma, span) < limit  # NaN counts as out of range


def _needs_range(backend: str, dtype: torch.dtype) -> bool:
    return (backend, dtype) in REACH_LIMIT and _value_checks_enabled()


def _magnitude(tensors) -> torch.Tensor:
    """max |v| over the tensors, a float64 scalar on their device (+inf if any is)."""
    norms = [torch.linalg.vector_norm(t.detach(), math.inf, dtype=torch.float64) for t in tensors]
    return norms[0] if len(norms) == 1 else torch.maximum(norms[0], norms[1])


def route_by_range(tensors, gamma: torch.Tensor, span: Span, backend: str) -> str:
    """The backend to run on: ``backend``, or "reference" when the inputs' magnitude is past what its
    kernels keep exact (see REACH_LIMIT). Reads the device (one sync on a GPU)."""
    dtype = tensors[0].dtype
    if not _needs_range(backend, dtype):
        return backend
    v = float(_magnitude(tensors))
    return "reference" if _out_of_range(v, float(gamma.detach()), span, backend, dtype) else backend


class _Pending:
    """A deferred value check (backends/cuda/checks.py) that also reports the range bound's inputs (the
    largest finite |value| and gamma, from the same kernel): queued before the caller's kernels, read after
    them (ok() first, then out_of_range()). span None: no range bound for this dtype.

    user: the per-pair lengths the caller gave, as check_values takes them ((int64 tensor, name, T, series)), checked
    by the same kernel; the kernels got them clamped into range (:func:`kernel_lengths`), and finish_check raises
    the length error of one out of range."""

    __slots__ = ("check", "span", "dtype", "user")

    def __init__(self, check, span: Optional[Span], dtype: torch.dtype, user: tuple = ()):
        self.check, self.span, self.dtype, self.user = check, span, dtype, user

    def ok(self) -> bool:
        return self.check.ok()

    def out_of_range(self) -> bool:
        return self.span is not None and _out_of_range(self.check.vmax, self.check.gamma, self.span, "cuda",
                                                       self.dtype)


def _defer(a: torch.Tensor, b: Optional[torch.Tensor], gamma: Optional[torch.Tensor], g: torch.Tensor,
           span: Span, user: tuple = ()):
    """Queue the value check of a cuda call (which also measures the range bound's inputs, where the dtype
    has a REACH_LIMIT) on the current stream, before the call's kernels: a PendingCheck or a
    :class:`_Pending`, read by :func:`run_checked` after them. gamma: a gamma tensor to check with the data,
    or None; g: the problem's gamma tensor; user: the caller's lengths (see :class:`_Pending`), checked in the
    same pass and clamped into range for the kernels."""
    from .backends.cuda import checks

    lengths = None
    if user:
        by = {name: (l.contiguous(), T) for l, name, T, _ in user}
        (xl, tx), (yl, ty) = by.get("x_lengths", (None, 0)), by.get("y_lengths", (None, 0))
        lengths = (xl, tx, yl, ty)
    check = checks.start(a, b, gamma, g, lengths=lengths)
    ranged = _needs_range("cuda", a.dtype)
    if not (ranged or user):
        return check
    return _Pending(check, span if ranged else None, a.dtype, tuple(user))


def kernel_lengths(pending, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> tuple:
    """The lengths a prepared call's kernels get: those the deferred check clamped into range (:func:`_defer`)
    where the caller gave lengths, else x_lengths and y_lengths as they are."""
    if not (isinstance(pending, _Pending) and pending.user):
        return x_lengths, y_lengths
    xo, yo = pending.check.lengths
    return (x_lengths if xo is None else xo), (y_lengths if yo is None else yo)


def _check_or_defer(data, lengths, gamma: Optional[torch.Tensor], backend: str, defer: bool,
                    g: torch.Tensor, span: Span, windowed: bool = False):
    """The value checks of prepare / prepare_cost (arguments as :func:`check_values`) and the range
    bound: (pending, backend). Started on the GPU and returned as a pending check when deferring is
    possible (:func:`_defer`; the caller reruns on the reference backend if the bound says so,
    :func:`run_checked`), else run now, with the backend the bound picks. Deferring needs the cuda backend and
    value checks enabled. User lengths are checked by the same kernel, and the call's kernels get them clamped
    into range (:func:`kernel_lengths`: a kernel must never see a length out of range), except with a band
    (windowed): building the window and checking that it leaves a path read the lengths first. g: the gamma
    tensor of the problem."""
    tensors = [t for t, *_ in data]
    user = tuple((l, name, T, series) for l, name, T, series in lengths if l is not None)
    if defer and backend == "cuda" and not (user and windowed) and _value_checks_enabled():
        return _defer(tensors[0], tensors[1] if len(tensors) > 1 else None, gamma, g, span, user), backend
    check_values(data, lengths, gamma)
    return None, route_by_range(tensors, g, span, backend)


class NaNPadded(ValueError):
    """finish_check found NaN padding in x or y of a call whose values were checked after its kernels (cuda,
    no lengths given for that input), so the kernels ran without the lengths the padding gives. The public
    functions catch it and run the call again with them (:func:`rerun_args`); the message is for anyone else.

    filled: {"x": (x with its padding set to 0, `(B,)` lengths), "y": ...} for the NaN-padded inputs; kept:
    {"x_lengths": ..., "y_lengths": ...}, the lengths the caller gave (for the input without NaN)."""

    def __init__(self, message: str, filled: dict, kept: Optional[dict] = None):
        super().__init__(message)
        self.filled = filled
        self.kept = kept or {}


def rerun_args(e: NaNPadded, p: Problem) -> dict:
    """The x, y, x_lengths and y_lengths of the call that :class:`NaNPadded` asks for: the problem's own x and
    y (batched, compute dtype) with the padding filled, and the lengths the padding gives (for an input without
    NaN the lengths its caller gave, or None: it keeps its full length)."""
    x, xl = e.filled.get("x", (p.x, e.kept.get("x_lengths")))
    y, yl = e.filled.get("y", (p.y, e.kept.get("y_lengths")))
    return {"x": x, "y": y, "x_lengths": xl, "y_lengths": yl}


def finish_check(p: Problem) -> None:
    """Wait for the value check of a prepared problem and raise its error, if any (the same messages as
    the synchronous checks: they run again, one by one, only when the flag is set). NaN padding of x or y
    (trailing all-NaN steps) raises :class:`NaNPadded`, which the public functions turn into a rerun."""
    if p.pending is None or p.pending.ok():
        return
    user = {name: (l, T, series) for l, name, T, series in getattr(p.pending, "user", ())}
    if p.y is p.x:  # prepare_cost keeps C in both; +inf is a forbidden cell there, not an error
        check_cost_values(p.x, "C")
    filled = {}
    for t, name in (() if p.y is p.x else ((p.x, "x"), (p.y, "y"))):
        if bool(torch.isnan(t).any()):
            # NaN that is not padding raises here, and so does padding of an input whose lengths were given.
            given = user.get(f"{name}_lengths")
            t, lengths = nan_padding(t, name, None if given is None else given[0], f"{name}_lengths")
            filled[name] = (t, lengths)
        check_finite(t, name)
    for name, (l, T, series) in user.items():
        check_length_range(l, name, T, series)
    _check_gamma_value(float(p.gamma.detach()))
    if filled:
        names = " and ".join(filled)
        raise NaNPadded(f"{names} NaN-padded: the call runs again with the lengths the padding gives "
                        f"(pass {names.replace(' and ', '_lengths and ')}_lengths to skip the first run).", filled,
                        {name: l for name, (l, _, _) in user.items()})


def run_checked(p: Problem, run):
    """run(p) (the ops of a prepared problem), then the deferred value check; a bad input's error wins
    over whatever run() raised on it. If the range bound read with the check puts the inputs past what the
    backend's kernels keep exact, the result is discarded and run again on the reference backend."""
    if p.pending is None:
        return run(p)
    exact = p._replace(backend="reference", pending=None)
    try:
        out = run(p)
    except Exception:
        finish_check(p)
        if isinstance(p.pending, _Pending) and p.pending.out_of_range():
            return run(exact)
        raise
    except BaseException:
        finish_check(p)
        raise
    finish_check(p)
    if isinstance(p.pending, _Pending) and p.pending.out_of_range():
        return run(exact)
    return out


_transforms_active = torch._C._are_functorch_transforms_active
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def check_not_transformed(*tensors) -> None:
    """A clear error for torch.func transforms (their wrapped tensors have no storage: the kernels, which read the
    data, would fail deep inside with 'Cannot access data pointer'). One call when no transform is active."""
    if _transforms_active():
        for t in tensors:
            if isinstance(t, torch.Tensor) and _is_wrapped(t):
                raise RuntimeError(
                    "softdtw does not support torch.func transforms (grad, vjp, jvp, jacrev, hessian, vmap): its "
                    "kernels read the tensors' data. Use torch.autograd.grad for gradients (for a Hessian-vector "
                    "product, torch.autograd.grad of (grad * v).sum() after a first grad with create_graph=True, or "
                    "torch.autograd.functional.vhp), and a batch dimension instead of vmap: every function takes "
                    "(B, N, D) batches.")


def prepare(x, y, gamma, *, cost, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory,
            backend, defer: bool = False) -> Problem:
    """Validate the arguments of the public functions and normalise them into a :class:`Problem`.

    defer: on the cuda backend with default lengths, check the values (NaN, Inf, gamma >= 0) in a kernel
    whose result is read after the caller's kernels are launched: the caller must pass the problem to
    :func:`run_checked` (or call :func:`finish_check`). x and y may be PackedSequences (read as a
    padded batch with its lengths, :mod:`softdtw._packed`).
    """
    check_not_transformed(x, y, gamma)
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
            return _prepared(hit, x, y, gamma, cost)
    x, x_lengths = unpack(x, x_lengths, "x", "x_lengths")
    y, y_lengths = unpack(y, y_lengths, "y", "y_lengths")
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
    if _value_checks_enabled() and not (defer and backend == "cuda"):  # the deferred check cannot look
        x, x_lengths = nan_padding(x, "x", x_lengths, "x_lengths")
        y, y_lengths = nan_padding(y, "y", y_lengths, "y_lengths")
    dtype = compute_dtype(x.dtype)
    out_dtype = x.dtype
    B, N, _ = x.shape
    M = y.shape[1]
    xl = as_lengths(x_lengths, "x_lengths", B, N, x.device, "x")
    yl = as_lengths(y_lengths, "y_lengths", B, M, x.device, "y")
    g = as_gamma(gamma, x.device, dtype)
    g_tensor = g if isinstance(gamma, torch.Tensor) else None
    x, y = x.to(dtype).contiguous(), y.to(dtype).contiguous()
    pending, backend = _check_or_defer([(x, "x"), (y, "y")],
                                       [(xl if x_lengths is not None else None, "x_lengths", N, "x"),
                                        (yl if y_lengths is not None else None, "y_lengths", M, "y")],
                                       g_tensor, backend, defer, g, Span(cost, x.shape[2], N, M),
                                       bandwidth is not None or itakura_max_slope is not None)
    xl, yl = kernel_lengths(pending, xl, yl)
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


def _prepared(hit: tuple, x, y, gamma, cost) -> Problem:
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
    # The values are new on every call: their check and range bound are queued as on a miss (never cached).
    pending = _defer(x, y, g_tensor, g, Span(cost, x.shape[2], x.shape[1], y.shape[1])) if checks else None
    return Problem(x, y, g, xl, yl, window, backend, unbatched, out_dtype, pending)


def prepare_cost(C, gamma, *, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory, backend,
                 defer: bool = False) -> Problem:
    """Like :func:`prepare` for a precomputed cost `(B, N, M)` (or `(N, M)`); x and y hold C and C."""
    check_not_transformed(C, gamma)
    if isinstance(C, PackedSequence):
        raise TypeError("C must be a cost tensor (B, N, M); got a PackedSequence, which holds series, not costs. "
                        "Call soft_dtw(x, y) on the series (it reads PackedSequences), or build the cost tensor "
                        "first.")
    if isinstance(C, (list, tuple)) and len(C) > 1 and all(
            isinstance(c, (torch.Tensor, np.ndarray)) and c.ndim == 2 for c in C):
        raise TypeError(
            f"C must be one cost tensor (B, N, M); got a {type(C).__name__} of {len(C)} cost matrices. Stack them "
            f"with torch.stack(C) when their shapes agree; else pad each to the largest (N, M) (any finite value "
            f"past a pair's lengths) and pass x_lengths / y_lengths, the rows and columns of each.")
    C = as_tensor(C, "C", "(B, N, M) or (N, M)")
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
    pending, backend = _check_or_defer([(C, "C", "cost")],
                                       [(xl if x_lengths is not None else None, "x_lengths", N, "C's rows"),
                                        (yl if y_lengths is not None else None, "y_lengths", M, "C's columns")],
                                       g_tensor, backend, defer, g, Span("C", 0, N, M),
                                       bandwidth is not None or itakura_max_slope is not None)
    xl, yl = kernel_lengths(pending, xl, yl)
    window = make_window(xl, yl, N, M, bandwidth, itakura_max_slope)
    return Problem(C, C, g, xl, yl, window, backend, unbatched, out_dtype, pending)
