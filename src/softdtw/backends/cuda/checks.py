"""Input value checks that never stop the host (kernels/check.cu).

A check through PyTorch (``torch.isfinite(x).all()`` read on the host) waits for every kernel queued so
far: the host stops in the middle of the step and the GPU then idles while the host launches the rest.
Here one kernel checks the values behind the call's own kernels, writes a flag into mapped page-locked
host memory and, when a value is bad, NaN into the call's results; the host does not wait for it.
``softdtw._checks.settle`` reads the flag once the check has finished: right away if it already has, else
in the backward of the call's op (after the backward's kernels are queued) or at the end of the next
checked call, whichever comes first (see ``_checks.run_checked`` for the trade).

:func:`start` launches a check and returns a :class:`PendingCheck`; :meth:`~PendingCheck.done` asks
without waiting and :meth:`~PendingCheck.ok` waits and tells whether every value was finite (and gamma
>= 0). Flags and events are pooled per device and shared by all threads: a check started on the calling
thread may be read on the autograd engine's device thread.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import torch

from . import launch as _launch

_THREADS = 256
_lock = threading.Lock()
_free: dict = {}  # device index -> idle slots


def _bindings():
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


class _DriverEvent:
    """A CUevent through the ctypes driver of launch.py (~1 µs a call)."""

    __slots__ = ("drv", "handle")

    def __init__(self, drv):
        self.drv, self.handle = drv, drv.event()

    def record(self, device_index: int) -> None:
        self.drv.check(self.drv.event_record(self.handle, _launch._raw_stream(device_index)), "cuEventRecord")

    def done(self) -> bool:
        err = self.drv.event_query(self.handle)
        if err == self.drv.NOT_READY:
            return False
        self.drv.check(err, "cuEventQuery")
        return True

    def wait(self) -> None:
        self.drv.check(self.drv.event_sync(self.handle), "cuEventSynchronize")


class _TorchEvent:
    """The same through torch.cuda.Event, where the ctypes driver is not available."""

    __slots__ = ("event",)

    def __init__(self):
        self.event = torch.cuda.Event()

    def record(self, device_index: int) -> None:
        self.event.record(torch.cuda.current_stream(device_index))

    def done(self) -> bool:
        return self.event.query()

    def wait(self) -> None:
        self.event.synchronize()


class _Slot:
    """One mapped host int (the flag) and one reusable event, for one device."""

    __slots__ = ("host", "dev", "flag", "event")

    def __init__(self, device_index: int):
        drv = _bindings()
        _launch.ensure_context(device_index)
        self.host = int(_check(drv.cuMemHostAlloc(4, drv.CU_MEMHOSTALLOC_DEVICEMAP)))
        self.dev = int(_check(drv.cuMemHostGetDevicePointer(self.host, 0)))
        self.flag = ctypes.c_int.from_address(self.host)
        direct = _launch.driver() if _launch.DIRECT else None
        self.event = _DriverEvent(direct) if direct is not None else _TorchEvent()


def _take(device_index: int) -> _Slot:
    with _lock:
        free = _free.setdefault(device_index, [])
        if free:
            return free.pop()
    return _Slot(device_index)


def _give(device_index: int, slot: _Slot) -> None:
    with _lock:
        _free[device_index].append(slot)


class PendingCheck:
    """A value check running on the GPU. Call :meth:`ok` exactly once (it returns the slot to the pool).

    ``problem``: what the caller keeps with it for the error message (``softdtw._checks``), else None.
    """

    __slots__ = ("device_index", "slot", "problem")

    def __init__(self, device_index: int, slot: _Slot):
        self.device_index, self.slot, self.problem = device_index, slot, None

    def done(self) -> bool:
        """Whether the check kernel has finished (never waits)."""
        return self.slot.event.done()

    def ok(self) -> bool:
        """Wait for the check kernel (only for it and what was queued before it) and return whether every
        value was finite and gamma a number >= 0."""
        slot = self.slot
        slot.event.wait()
        bad = slot.flag.value
        self.slot = None
        _give(self.device_index, slot)
        return bad == 0


_EXPR = {torch.float32: "sdtw::check_kernel<float>", torch.float64: "sdtw::check_kernel<double>"}


def start(a: torch.Tensor, b: torch.Tensor | None = None, gamma: torch.Tensor | None = None,
          poison: torch.Tensor | None = None) -> PendingCheck:
    """Launch the check of a and b (contiguous, same float32 or float64 dtype, one CUDA device) and of
    gamma (a 0-d tensor of that dtype on that device, or None) on the current stream. poison: a contiguous
    tensor of that dtype (the call's results) that the kernel fills with NaN if a value is bad, or None."""
    dev = a.get_device()
    slot = _take(dev)
    slot.flag.value = 0
    na, nb = a.numel(), (0 if b is None else b.numel())
    blocks = max(1, min(-(-(na + nb) // (4 * _THREADS)), 4 * _launch.sm_count(dev)))
    args = (a.data_ptr(), np.int64(na), _launch.ptr(b), np.int64(nb), _launch.ptr(gamma), slot.dev,
            _launch.ptr(poison), np.int32(0 if poison is None else poison.numel()))
    _launch.launch("check", _EXPR[a.dtype], dev, blocks, _THREADS, args)
    slot.event.record(dev)
    return PendingCheck(dev, slot)
