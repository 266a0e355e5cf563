"""What the compat adapters share: each library's signature, argument checks whose messages quote it,
the one-time device warning for ``use_cuda``, the call into the native API, and the message of the
native modules when they are called with another library's positional order.

No maths here: everything ends in :func:`softdtw.soft_dtw` or :func:`softdtw.soft_dtw_divergence`.
"""
from __future__ import annotations

import importlib
import math
import numbers
import warnings
from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from .. import functional as F


class Library(NamedTuple):
    """How a library spells its soft-DTW entry point: for messages and for the enumeration in tests."""

    title: str  # the name users know
    module: str  # softdtw.compat.<module>
    entry: str  # the class they construct
    signature: str  # as the library writes it
    positional: Tuple[str, ...]  # parameter names in positional order (empty: keyword-only)


LIBRARIES = {
    "maghoumi": Library(
        "Maghoumi's pytorch-softdtw-cuda", "maghoumi", "SoftDTW",
        "SoftDTW(use_cuda, gamma=1.0, normalize=False, bandwidth=None, dist_func=None)",
        ("use_cuda", "gamma", "normalize", "bandwidth", "dist_func")),
    "pysdtw": Library(
        "pysdtw", "pysdtw", "SoftDTW",
        "SoftDTW(gamma=1.0, dist_func=None, use_cuda=True, bandwidth=None)",
        ("gamma", "dist_func", "use_cuda", "bandwidth")),
    "tslearn": Library(
        "tslearn", "tslearn", "SoftDTWLossPyTorch",
        "SoftDTWLossPyTorch(gamma=1.0, normalize=False, dist_func=None, global_constraint=None, "
        "sakoe_chiba_radius=None, itakura_max_slope=None)",
        ("gamma", "normalize", "dist_func", "global_constraint", "sakoe_chiba_radius", "itakura_max_slope")),
    "sdtw_cuda_torch": Library(
        "sdtw-cuda-torch (softdtw_cuda)", "sdtw_cuda_torch", "SoftDTW",
        "SoftDTW(*, gamma=1.0, bandwidth=None, normalize=False, dist='sqeuclidean', fused=None)",
        ()),
}

# Keyword arguments that only one other library has (softdtw spells them differently).
_FOREIGN_KEYWORDS = {"dist": "sdtw_cuda_torch", "fused": "sdtw_cuda_torch",
                     "global_constraint": "tslearn", "sakoe_chiba_radius": "tslearn"}


def is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_function(value) -> bool:
    return callable(value) and not is_bool(value) and not isinstance(value, type)


def show(value) -> str:
    """A short repr for messages: functions by name."""
    if _is_function(value):
        return getattr(value, "__name__", type(value).__name__)
    if isinstance(value, torch.Tensor) and value.numel() > 1:
        return f"tensor(shape={tuple(value.shape)})"
    return repr(value)


def call_repr(name: str, args=(), kwargs=None) -> str:
    parts = [show(a) for a in args] + [f"{k}={show(v)}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"


# Argument checks ---------------------------------------------------------------------------------------

def _order_hint(lib: str) -> str:
    L = LIBRARIES[lib]
    return f"{L.title}'s signature is {L.signature}"


def check_bool(value, name: str, lib: str) -> bool:
    """A flag as the libraries read it (by truth value): True / False, the integers 0 / 1 and None (False) pass;
    anything else (a float above all: a gamma in the wrong place) is a misread call."""
    if value is None:
        return False
    if not is_bool(value) and not (isinstance(value, numbers.Integral) and value in (0, 1)):
        raise TypeError(
            f"{name} must be True or False; got {show(value)}. {_order_hint(lib)}: check the positional "
            f"order of the call, or pass the arguments by keyword."
        )
    return bool(value)


def check_gamma(value, lib: str):
    """gamma as the libraries take it: a number >= 0 (or a 0-d float tensor, e.g. a learnable one)."""
    if is_bool(value) or not isinstance(value, (numbers.Real, torch.Tensor)):
        raise TypeError(
            f"gamma must be a number > 0 (typically 0.01 to 10); got {show(value)}. {_order_hint(lib)}: "
            f"check the positional order of the call, or pass the arguments by keyword."
        )
    if isinstance(value, numbers.Real) and (not math.isfinite(value) or value < 0):
        raise ValueError(f"gamma must be a finite number >= 0 (0 gives hard DTW); got {value!r}.")
    return value


def check_dist_func(value, lib: str):
    if value is not None and not _is_function(value):
        raise TypeError(
            f"dist_func must be a callable (x (B, N, D), y (B, M, D)) -> (B, N, M) or None; got {show(value)}. "
            f"{_order_hint(lib)}: check the positional order of the call, or pass the arguments by keyword."
        )
    return value


def check_bandwidth(value, lib: str) -> Optional[float]:
    """The libraries' convention: None or a number <= 0 means no band; otherwise the Sakoe–Chiba radius,
    the cells |i - j| <= bandwidth: floor(bandwidth) as a native radius (a native fractional radius is
    tslearn's, which reaches ceil(radius) on one side)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
            and value.dtype != torch.bool:
        value = value.item()  # the libraries take float(bandwidth)
    if isinstance(value, numbers.Real) and not is_bool(value) and math.isnan(value):
        raise ValueError(f"bandwidth must be a number or None; got {value!r}.")
    if is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"bandwidth must be a number (the Sakoe–Chiba radius; None or <= 0 for no band); got {show(value)}. "
            f"{_order_hint(lib)}."
        )
    return None if value <= 0 or math.isinf(value) else float(math.floor(value))


# Running ------------------------------------------------------------------------------------------------

def soft_dtw(x, y, options: dict) -> torch.Tensor:
    """The native call a library's call stands for: options are native SoftDTW keyword arguments."""
    fn = F.soft_dtw_divergence if options.get("normalize", False) else F.soft_dtw
    return fn(x, y, options.get("gamma", 1.0), cost=options.get("cost", "sqeuclidean"),
              bandwidth=options.get("bandwidth"), itakura_max_slope=options.get("itakura_max_slope"))


def device_of(t) -> Optional[torch.device]:
    if isinstance(t, PackedSequence):
        return t.data.device
    return t.device if isinstance(t, torch.Tensor) else None


def warn_use_cuda(module, use_cuda, x, lib: str) -> None:
    """Once per module: use_cuda disagrees with where the inputs are (softdtw runs where they are)."""
    device = device_of(x)
    if device is None or getattr(module, "_device_warned", False) or bool(use_cuda) == (device.type == "cuda"):
        return
    module._device_warned = True
    title = LIBRARIES[lib].title
    if use_cuda:
        msg = (f"use_cuda=True, but the inputs are on {device}: softdtw runs on the device of its inputs, so "
               f"this runs on the CPU ({title} itself fails here). Move the inputs with .cuda() to use the "
               f"GPU, or pass use_cuda=False.")
    else:
        msg = (f"use_cuda=False, but the inputs are on {device}: softdtw runs on the device of its inputs, so "
               f"this runs on the GPU (same values as on the CPU, result on {device} as with {title}). Pass "
               f"use_cuda=True to say so.")
    warnings.warn(msg, UserWarning, stacklevel=3)


# The native modules' message for a call written for another library -----------------------------------

def guess_library(args, kwargs) -> Optional[str]:
    """Which library's positional order (or keywords) a call seems written for; None if none fits."""
    for k in kwargs:
        if k in _FOREIGN_KEYWORDS:
            return _FOREIGN_KEYWORDS[k]
    first = args[0] if args else kwargs.get("gamma")
    if is_bool(first):
        return "maghoumi"
    if len(args) >= 2:
        second = args[1]
        if is_bool(second):
            return "tslearn"
        if second is None and len(args) >= 3 and _is_function(args[2]):
            return "tslearn"
        if second is None or _is_function(second):
            return "pysdtw"
    return None


def _native_call(lib: str, args, kwargs, cls: str) -> Optional[str]:
    """The native equivalent of a library call, or None where it cannot be bound or is invalid there."""
    L = LIBRARIES[lib]
    positional = L.positional or ("gamma",)  # keyword-only there; softdtw's gamma is positional
    if len(args) > len(positional):
        return None
    bound = dict(zip(positional, args))
    for k, v in kwargs.items():
        if k in bound:
            return None
        bound[k] = v
    if lib == "maghoumi" and "use_cuda" not in bound:
        return None
    module = importlib.import_module(f"softdtw.compat.{L.module}")
    try:
        options = module._native_options(**bound)
    except (TypeError, ValueError):
        return None
    if cls.endswith("SoftDTWDivergence"):
        if not options.pop("normalize", False):
            cls = cls.replace("SoftDTWDivergence", "SoftDTW")
    shown = {}
    for k, v in options.items():
        shown["dist_func" if k == "cost" and _is_function(v) else k] = v
    return call_repr(cls, (), shown)


def misuse_message(cls: str, args, kwargs) -> str:
    """The TypeError message of softdtw.SoftDTW / SoftDTWDivergence for a call meant for another library."""
    short = cls.split(".")[-1]
    call = call_repr(short, args, kwargs)
    foreign = [k for k in kwargs if k in _FOREIGN_KEYWORDS]
    if foreign:
        what = f"{cls} has no argument {foreign[0]!r}"
    elif len(args) > 1:
        what = f"{cls} takes only gamma positionally (every other argument is keyword-only)"
    else:
        what = f"{cls}'s gamma is a number, not a bool"
    head = f"{what}, so {call} is not read as softdtw's arguments."
    lib = guess_library(args, kwargs)
    if lib is None:
        example = "bandwidth=2" if short == "SoftDTWDivergence" else "normalize=True, bandwidth=2"
        return (f"{head} Pass the others by keyword, e.g. {cls}(0.1, {example}). A call written for another "
                f"library keeps its order through softdtw.compat: "
                f"softdtw.compat.maghoumi.{LIBRARIES['maghoumi'].signature}, "
                f"softdtw.compat.pysdtw.{LIBRARIES['pysdtw'].signature}, "
                f"softdtw.compat.tslearn.SoftDTWLossPyTorch(gamma, normalize, dist_func, ...), "
                f"softdtw.compat.sdtw_cuda_torch.SoftDTW(*, gamma, bandwidth, normalize, dist, fused).")
    L = LIBRARIES[lib]
    text = f"{head} It is written for {L.title}, {L.signature}"
    if args and not (lib == "maghoumi" and not is_bool(args[0])):
        bound = dict(zip(L.positional or ("gamma",), args))
        bound.update(kwargs)
        text += f", where it means {call_repr(L.entry, (), bound)}"
    text += f". Keep the call as it is with `from softdtw.compat.{L.module} import {L.entry}`"
    native = _native_call(lib, args, kwargs, cls)
    if native is not None:
        text += f", or write it for softdtw as {native}"
    return text + "."
