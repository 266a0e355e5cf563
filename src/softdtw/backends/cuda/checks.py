"""Input value checks that do not hold the GPU idle (kernels/check.cu).

A check through PyTorch (``torch.isfinite(x).all()`` read on the host) waits for every kernel queued so
far and leaves the GPU idle while the host then launches the soft-DTW kernels: on a small problem that
wait costs more than the kernels. Here one kernel checks the values in front of the call's own kernels;
the host launches those behind it and only then reads the answer (``softdtw._checks.run_checked``), while
the GPU already runs the forward. The kernel's last block writes the answer into an int of mapped
page-locked host memory (0 running, 1 all finite, 2 a bad value), which is also how the host learns that
the check has run: no event is recorded or queried (each driver call costs ~10 µs of host time on the
H100 VMs).

:func:`start` launches a check and returns a :class:`PendingCheck`; its :meth:`~PendingCheck.ok` waits
and tells whether every value was finite (and gamma >= 0). Slots (flag and the kernel's two counters) are
pooled per device and shared by all threads, so nested calls (a cost callable that calls soft-DTW itself)
each get their own.
"""
from __future__ import annotations

import ctypes
import threading
import time

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


class _Slot:
    """One mapped host int (the flag) and the kernel's two device counters (zeroed between checks by the
    kernel itself), for one device."""

    __slots__ = ("host", "dev", "flag", "stats", "ws", "wmax")

    def __init__(self, device_index: int):
        drv = _bindings()
        _launch.ensure_context(device_index)
        # The flag (an int at 0), then the range bound's max |v| and gamma (doubles at 8 and 16).
        self.host = int(_check(drv.cuMemHostAlloc(24, drv.CU_MEMHOSTALLOC_DEVICEMAP)))
        self.dev = int(_check(drv.cuMemHostGetDevicePointer(self.host, 0)))
        self.flag = ctypes.c_int.from_address(self.host)
        self.stats = (ctypes.c_double * 2).from_address(self.host + 8)
        self.ws = torch.zeros(2, dtype=torch.int32, device=f"cuda:{device_index}")
        self.wmax = torch.zeros(1, dtype=torch.int64, device=f"cuda:{device_index}")


def _take(device_index: int) -> _Slot:
    """A slot for one check, its flag at 0 (running)."""
    with _lock:
        free = _free.setdefault(device_index, [])
        slot = free.pop() if free else None
    if slot is None:
        slot = _Slot(device_index)
    slot.flag.value = 0
    return slot


def blocks(n: int, device_index: int) -> int:
    """Blocks of check_kernel for n values: four values per thread, at most four blocks per SM."""
    return max(1, min(-(-n // (4 * _THREADS)), 4 * _launch.sm_count(device_index)))


def _give(device_index: int, slot: _Slot) -> None:
    with _lock:
        _free[device_index].append(slot)


class PendingCheck:
    """A value check running on the GPU. Call :meth:`ok` exactly once (it returns the slot to the pool).

    lengths: the per-pair lengths :func:`start` was given, clamped into range for the kernels (None where none was
    given); ok() is False when one of the originals was out of range."""

    __slots__ = ("device_index", "stream", "slot", "vmax", "gamma", "lengths")

    def __init__(self, device_index: int, stream: int, slot: _Slot, lengths=(None, None)):
        self.device_index, self.stream, self.slot, self.lengths = device_index, stream, slot, lengths
        self.vmax = self.gamma = None  # set by ok(): the largest finite |value| of a and b, and gamma

    def ok(self) -> bool:
        """Wait for the check kernel (only for it and what was queued before it) and return whether every
        value was finite and gamma a number >= 0."""
        slot = self.slot
        answer = slot.flag.value or self._wait()
        self.vmax, self.gamma = slot.stats[0], slot.stats[1]  # written before the flag
        self.slot = None
        _give(self.device_index, slot)
        return answer == 1

    def _wait(self) -> int:
        """Poll the flag: a short spin (the usual case: the kernel is about to finish), then sleeps. Never
        hangs on a check that cannot finish: once its stream has nothing left to run, the flag must be set."""
        flag = self.slot.flag
        for _ in range(2000):
            if flag.value:
                return flag.value
        drv = _launch.driver()
        polls = 0
        while not flag.value:
            polls += 1
            if polls % 16 == 0:
                err = drv.stream_query(self.stream)
                if err != drv.NOT_READY:
                    drv.check(err, "cuStreamQuery")
                    break
            time.sleep(2e-5 if polls < 5000 else 1e-3)
        if not flag.value:
            raise RuntimeError("softdtw: the value check kernel finished without writing its answer; this is a "
                               "bug, please report it.")
        return flag.value


_EXPR = {torch.float32: "sdtw::check_kernel<float>", torch.float64: "sdtw::check_kernel<double>"}


def start(a: torch.Tensor, b: torch.Tensor | None = None, gamma: torch.Tensor | None = None,
          gval: torch.Tensor | None = None, lengths=None) -> PendingCheck:
    """Launch the check of a and b (contiguous, same float32 or float64 dtype, one CUDA device) and of
    gamma (a 0-d tensor of that dtype on that device, or None) on the current stream. gval: the call's
    gamma as a 0-d tensor of that dtype (default: gamma, else 0), reported by ok() with the max |value|.
    lengths: None, or (x_lengths, Tx, y_lengths, Ty) with int64 `(B,)` tensors on that device (either may be None)
    that must lie in [1, T]: checked too, and handed back clamped into range in the result's ``lengths``."""
    if gval is None:
        gval = gamma if gamma is not None else torch.zeros((), dtype=a.dtype, device=a.device)
    dev = a.get_device()
    slot = _take(dev)
    clamped = (None, None)
    if lengths is not None:
        clamped = _lengths(lengths, slot, dev)
    na, nb = a.numel(), (0 if b is None else b.numel())
    args = (a.data_ptr(), np.int64(na), _launch.ptr(b), np.int64(nb), _launch.ptr(gamma), gval.data_ptr(),
            slot.dev, slot.ws.data_ptr(), slot.wmax.data_ptr())
    _launch.launch("check", _EXPR[a.dtype], dev, blocks(na + nb, dev), _THREADS, args)
    return PendingCheck(dev, _launch._raw_stream(dev), slot, clamped)


def _lengths(lengths, slot: _Slot, dev: int) -> tuple:
    """Queue lengths_kernel (check.cu) in front of the slot's check_kernel: the clamped copies of x_lengths and
    y_lengths (None where not given), and ws[0] set if one was out of range."""
    xl, tx, yl, ty = lengths
    xo = None if xl is None else torch.empty_like(xl)
    yo = None if yl is None else torch.empty_like(yl)
    B = (xl if xl is not None else yl).numel()
    if B:
        _launch.launch("check", "sdtw::lengths_kernel", dev, -(-B // _THREADS), _THREADS,
                       (_launch.ptr(xl), _launch.ptr(xo), np.int64(tx), _launch.ptr(yl), _launch.ptr(yo),
                        np.int64(ty), B, slot.ws.data_ptr()))
    return xo, yo
