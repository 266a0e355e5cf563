"""Input value checks that do not hold the GPU idle (kernels/check.cu).

A check through PyTorch (``torch.isfinite(x).all()`` read on the host) waits for every kernel queued so
far and leaves the GPU idle while the host then launches the soft-DTW kernels: on a small problem that
wait costs more than the kernels. Here one kernel checks the values and writes a flag into mapped
page-locked host memory; the host launches the soft-DTW kernels behind it and only then waits, for an
event recorded right after the check, while the GPU already runs the forward.

:func:`start` launches a check and returns a :class:`PendingCheck`; its :meth:`~PendingCheck.ok` waits
and tells whether every value was finite (and gamma >= 0). Flags and events are pooled per thread, so
nested calls (a cost callable that calls soft-DTW itself) each get their own.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import torch

from . import launch as _launch

_THREADS = 256
_local = threading.local()


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # older cuda-python layout
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def _check(result):
    err, *rest = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


class _Slot:
    """One mapped host int (the flag) and one reusable event, for one device."""

    __slots__ = ("host", "dev", "flag", "event")

    def __init__(self, device_index: int):
        drv = _driver()
        _launch.ensure_context(device_index)
        self.host = int(_check(drv.cuMemHostAlloc(4, drv.CU_MEMHOSTALLOC_DEVICEMAP)))
        self.dev = int(_check(drv.cuMemHostGetDevicePointer(self.host, 0)))
        self.flag = ctypes.c_int.from_address(self.host)
        self.event = None


def _take(device_index: int) -> _Slot:
    pools = getattr(_local, "pools", None)
    if pools is None:
        pools = _local.pools = {}
    free = pools.setdefault(device_index, [])
    return free.pop() if free else _Slot(device_index)


def _give(device_index: int, slot: _Slot) -> None:
    _local.pools[device_index].append(slot)


class PendingCheck:
    """A value check running on the GPU. Call :meth:`ok` exactly once."""

    __slots__ = ("device_index", "slot")

    def __init__(self, device_index: int, slot: _Slot):
        self.device_index, self.slot = device_index, slot

    def ok(self) -> bool:
        """Wait for the check kernel (only for it and what was queued before it) and return whether every
        value was finite and gamma a number >= 0."""
        slot = self.slot
        slot.event.sync()
        bad = slot.flag.value
        _give(self.device_index, slot)
        return bad == 0


def start(a: torch.Tensor, b: torch.Tensor | None = None, gamma: torch.Tensor | None = None) -> PendingCheck:
    """Launch the check of a and b (contiguous, same float32 or float64 dtype, one CUDA device) and of
    gamma (a 0-d tensor of that dtype on that device, or None) on the current stream."""
    dev = a.device.index
    slot = _take(dev)
    slot.flag.value = 0
    n = a.numel() + (0 if b is None else b.numel())
    blocks = max(1, min(-(-n // (4 * _THREADS)), 4 * _launch.sm_count(dev)))
    expr = f"sdtw::check_kernel<{_launch._CTYPE[a.dtype]}>"
    args = (a.data_ptr(), np.int64(a.numel()), _launch.ptr(b), np.int64(0 if b is None else b.numel()),
            _launch.ptr(gamma), slot.dev)
    _launch.launch("check", expr, dev, blocks, _THREADS, args)
    stream = _launch.current_stream(dev)
    slot.event = stream.record(slot.event)
    return PendingCheck(dev, slot)
