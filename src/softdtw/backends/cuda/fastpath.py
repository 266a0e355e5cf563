"""The eager training step's C++ launcher (fastpath.cpp): which calls it takes, how it is built, and its switch.

A small cuda ``soft_dtw`` call in a training step costs host time, not GPU time: on the H100 VMs the Python path
(an autograd.Function applied from Python, its Python backward node, a few torch calls and three ctypes launches)
made the loss step 1.8-2.0x an MSE step (issue 27, benchmarks/OPTIMIZATION_LOG.md). The C++ launcher queues the
same kernels with the same arguments from a C++ autograd Function, so the step's soft-DTW part is one Python
call into C++ forwards and no Python at all backwards. Results are bitwise those of the Python path (the same
launches; tests/backends/test_cuda_fastpath.py). That holds for the gradient from both ends too (two_ended.py): a
storing call with a float gamma > 0 whose shape two_ended.applies_grad takes gets a two-ended plan
(:func:`_add_two_ended_plan`; fastpath.cpp, Fused::forward_two), and the Python path runs the same launches
(softdtw._ops._FusedTwoEnded). Value-only calls that two_ended.applies takes run from both ends here too (the
launches of two_ended.forward), but not through the ops' kernels.

Which calls: :func:`softdtw.soft_dtw` (and :func:`softdtw.soft_dtw_divergence`, its three terms in one C++ call) on
CUDA tensors with a float gamma, the cost "sqeuclidean" (any D; past FUSED_D_MAX its "gram" form) or "l1" (D <=
FUSED_D_MAX), per-pair lengths as integer tensors or none, no band or alignment variant, float32 or float64 x and y
of one dtype, contiguous, on the current device, with the table stored (memory "store", or "auto" where it would
store: a table past 64 MiB asks per call whether it takes at most half the free memory, as _ops._resolve does) or no
gradient (a value-only "gram" cost of at most COST_WHOLE_MAX; larger ones are built band by band). Plain and chained
plans alike: the long-pair kernels (forward_chain_kernel, backward_chain_kernel) run over all rows as the Python
path's _run_forward_chain and _run_backward_chain launch them. Large D at B = 32, N = M = 2048, D = 64 (chained, a
table and an x·yᵀ of 512 MiB each) thus skips ~0.3-0.5 ms of host time before its first DP kernel
(benchmarks/OPTIMIZATION_LOG.md, "The long and large-D calls through the C++ launcher"). Running out of memory there
hands the call (forward or backward) to the Python path, which raises its MemoryError naming the sizes. A large-D
memory="checkpoint" call whose forward is one band of rows runs that forward here (:func:`_checkpoint_plan`) and its
backward on the Python path, called from the C++ node (6.95-7.03 -> 6.68-6.71 ms at 32 x 2048², D = 64; H200). Not
under torch.compile, functorch transforms or a CUDA-graph capture, nor the "gram" form under autocast. Every other
call, and the first call of each shape (a new gamma for a known shape is not a first call), take the Python path; so
does any call whose value check fails (lengths out of range too) or whose inputs are past the kernels' exact range:
the launcher's value is then discarded and the Python path runs the call again and raises its error (or reruns on the
reference backend), so errors and results never depend on the path. A call of N > M steps runs as (y, x) where
launch.transposes says so (gamma > 0), as the Python path does (functional._run), its lengths swapped with it.

DILATE (:func:`softdtw.dilate_loss`, :func:`dilate_call`) takes the same route for its training call: a CUDA x and y
needing a gradient, the squared Euclidean cost, the default Omega, a float gamma, no band, divergence or
return_terms, M within hvp_warp_kernel's reach, and per-pair lengths (integer tensors) only where dilate_xy_kernel
runs; a C++ autograd Function makes the Python path's torch calls and launches in the same order, so its losses and
gradients are bitwise the Python path's too.

A storing call of at most :data:`AHEAD_MAX_CELLS` cells (a fused cost, not chained; two-ended plans too) runs its
backward ahead: the forward queues the backward kernel(s) right behind itself with grad 1 and keeps the unit dx, dy
(and the link table, for a create_graph=True backward), and the node's backward only scales them by the grad
(kernels/scale_grads.cu; a
two-ended plan's two_ended_grads_kernel), bitwise what the Python path's backward gives (backward_kernel multiplies by
the grad last). At 32 x 512² the GPU then no longer idles while the host walks from the loss to ``.backward()``
(H200: 142-154 -> 69-71 µs idle a step, the step -71 to -107 µs; benchmarks/OPTIMIZATION_LOG.md, "The backward run
ahead in the forward").

Per-pair lengths: the call passes the user's tensors as they are, and fastpath.cpp (call_lengths) converts them
(int64, on x's device; lengths on the CPU in one copy) and queues check.cu's lengths_kernel, which writes the copies
clamped into range that the kernels read and flags a length out of range for the value check, as the Python path's
_checks._defer does. Anything else (a list, a float tensor, a wrong shape, another GPU) goes to the Python path.

Under torch.compile the graph holds the custom ops (softdtw::forward, backward, forward_cost, backward_cost,
hvp_cost); once loaded, the launcher also registers their CUDA kernels in C++ (fastpath.cpp, ``register_ops``),
which launch the same kernels as the ops' Python kernel for the calls they take (the plain DP: no band or
alignment variant, memory "store" or "none", int64 lengths of any values, a 0-d gamma tensor, the plans of
:func:`_op_plan`; hvp_cost where hvp_warp_kernel runs) and hand every other call to the Python kernel. So a
compiled step runs no Python of ours but the ops' autograd wrapper, and the eager calls that go through the ops
run their kernels from C++ too: hvp_cost (the double backward of a precomputed cost or of a call hvp_xy does not
take), DILATE's Python path (lengths, an Omega of the user's). A create_graph=True backward of the launcher's node
runs softdtw._ops._FusedGrad, as the Python path's does (``set_grad_fn``). :func:`set_enabled` switches both; a
forced plan (launch.forced_plan, tests and probes) keeps both out.

How it is built: the first cuda call starts ``torch.utils.cpp_extension.load`` of fastpath.cpp in a background
thread (the host compiler and ninja, as for any PyTorch C++ extension: about a minute, once; the build is cached
in PyTorch's extensions directory, keyed by the source and the PyTorch version); until it is loaded, calls take
the Python path. Where it cannot be built (no compiler, no ninja), everything keeps running on the Python path;
:func:`status` says why. ``SOFTDTW_FASTPATH=0`` turns it off, ``SOFTDTW_FASTPATH=sync`` builds it at the first
call instead of in the background; :func:`build` builds it now (benchmarks, tests).

PyTorch guards a build directory with a lock file that a process removes when its build or load is done; a process
that exits inside one (a short script whose first cuda call started the background build) leaves it behind, and
every later ``cpp_extension.load`` of that directory waits for it forever. So the build holds an OS file lock
(``fcntl.flock``, released by the kernel when its holder dies, :func:`_build_lock`) around the load, and a PyTorch
lock file found while holding it is a dead process's, removed.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import NamedTuple, Optional

import torch

from . import hvp as _hvp
from . import launch as _launch
from . import two_ended as _two_ended

_log = logging.getLogger("softdtw")
_SOURCE = Path(__file__).with_name("fastpath.cpp")

_lock = threading.Lock()
_module = None  # the loaded extension, once built
_error: Optional[str] = None  # why it could not be built
_thread: Optional[threading.Thread] = None
_enabled = os.environ.get("SOFTDTW_FASTPATH", "1") != "0"


def set_enabled(on: bool) -> None:
    """Turn the C++ launcher on or off for this process (off: every call takes the Python path)."""
    global _enabled
    _enabled = bool(on)
    _sync_ops()


def _sync_ops() -> None:
    """The ops' C++ kernels run while the launcher is on and no plan is forced (launch.forced_plan calls this)."""
    if _module is not None:
        _module.set_ops_enabled(_enabled and not _launch._forced)


def status() -> str:
    """One line: whether the launcher is on, loaded, being built, or why it could not be built."""
    if not _enabled:
        return "off (SOFTDTW_FASTPATH=0 or set_enabled(False)): every cuda call takes the Python path"
    if _module is not None:
        return f"loaded ({_module.__name__})"
    if _error is not None:
        return f"not available, the Python path runs every call: {_error}"
    if _thread is not None:
        return "being built in the background; calls take the Python path until it is loaded"
    return "not built yet (the first cuda soft_dtw call starts the build)"


def _compile():
    global _module, _error
    try:
        from torch.utils import cpp_extension

        tag = hashlib.sha1(_SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:12]
        name = f"softdtw_fastpath_{tag}"
        with _build_lock(cpp_extension._get_build_directory(name, False)):
            mod = cpp_extension.load(name=name, sources=[str(_SOURCE)], extra_cflags=["-O2"], verbose=False)
        lib = _launch.driver().lib
        mod.set_driver(*(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                         for name in ("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent")))
        mod.register_ops(_op_plan)  # softdtw._ops, imported with softdtw, has defined the ops
        from ... import _ops

        mod.set_grad_fn(_ops.fused_grad_for_launcher)
        _module = mod
        _launch.force_hooks.append(_sync_ops)
        _sync_ops()
        _log.info("softdtw: the C++ launcher is loaded (%s)", mod.__file__)
    except Exception as e:  # no compiler, no ninja, a failed build: the Python path keeps running everything
        _error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        _log.info("softdtw: the C++ launcher could not be built (%s); the Python path runs every call", _error)


@contextlib.contextmanager
def _build_lock(directory: str):
    """Hold an OS lock on ``directory`` (one softdtw build or load of it at a time, across processes) and remove
    PyTorch's lock file there if one is left: while the OS lock is held no other process of ours is inside
    ``cpp_extension.load`` of this directory, so the file is a dead process's, which would make this load wait
    forever. Without fcntl (Windows) PyTorch's own lock is all there is."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(os.path.join(directory, "softdtw.flock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            stale = os.path.join(directory, "lock")
            if os.path.exists(stale):
                _log.info("softdtw: removing %s, left by a process that exited while building the launcher", stale)
                os.remove(stale)
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build():
    """Build (or load the cached build of) the launcher now, in this thread; returns the module, or raises a
    RuntimeError saying why it cannot be built."""
    global _thread
    with _lock:
        thread = _thread
        if thread is None and _module is None and _error is None:
            _thread = threading.current_thread()
            _compile()
    if thread is not None and thread is not threading.current_thread():
        thread.join()
    if _module is None:
        raise RuntimeError(f"softdtw's C++ launcher is not available: {_error}")
    return _module


def _start() -> None:
    """First cuda call: build in the background (or now, with SOFTDTW_FASTPATH=sync)."""
    global _thread
    if os.environ.get("SOFTDTW_FASTPATH") == "sync":
        try:
            build()
        except RuntimeError:
            pass
        return
    with _lock:
        if _thread is not None or _module is not None or _error is not None:
            return
        _thread = threading.Thread(target=_compile, name="softdtw-fastpath-build", daemon=True)
        _thread.start()


class _Entry(NamedTuple):
    """What a call of one (shapes, dtype, device, cost, memory, backend, gamma, gradient) needs."""
    plan: int
    dev: int
    gamma: torch.Tensor
    xl: torch.Tensor
    yl: torch.Tensor
    unbatched: bool
    span: object  # _checks.Span, for the range bound
    gram: bool  # large D: torch GEMMs inside the op, which autocast would lower
    swap: bool  # the plan is for (y, x) (launch.transposes); xl, yl and span follow the plan
    big: int  # bytes storing takes (table and the large-D cost) where past _ops._SMALL_TABLE, else 0
    fit: object  # a checkpointed plan's (h, TH, row bytes, N): its one band of rows must fit now (_lookup); else None


_ENTRIES: dict = {}
_ENTRIES_MAX = 1024
_transforms_active = torch._C._are_functorch_transforms_active


#: The C++ plan of each (shapes, dtypes, devices, cost, memory, backend, gradient): a plan does not depend on gamma,
#: so a gamma that changes every step (annealing) adds entries, not plans. Bounded: past _PLANS_MAX new shapes
#: take the Python path (the C++ side keeps every plan it was given).
_PLANS: dict = {}
_PLANS_MAX = 4096

#: A storing call's backward runs ahead, in its forward (fastpath.cpp, Plan::ahead), for plans of at most this many
#: cells (B N M) whose DP is not chained. A small loss step's backward kernel otherwise waits for the host to return
#: from the loss, take .mean() and reach .backward() (the GPU idles meanwhile, or the kernel comes last after the
#: host's launches); run ahead with grad 1, it is done by then and the node only scales it (scale_grads.cu, bitwise
#: the backward's own result, kernels/backward.cu). A call whose gradient is never asked for pays one backward: the
#: bound keeps that under ~1 ms (32 x 1024²), and the step sizes where the wait matters lie far below it.
AHEAD_MAX_CELLS = 1 << 25
_AHEAD: dict = {}  # plan id -> its (B,) ones (the C++ plan holds the address; None for a two-ended plan's)


def _entry(x, y, gamma: float, cost, memory: str, backend, grad: bool, pkey: tuple):
    """The entry of this call's key, or False when the call is not one the launcher takes (see the module
    docstring). Only the shapes and options are looked at: the values are checked on every call."""
    from ... import _checks

    if not (gamma >= 0 and gamma < float("inf")):
        return False
    p = _PLANS.get(pkey)
    if p is None:
        if len(_PLANS) >= _PLANS_MAX:
            return False
        p = _PLANS[pkey] = _plan(x, y, cost, memory, backend, grad, transposable=pkey[-1])
    if p is False:
        return False
    plan, unbatched, span, gram, swap, big, fit = p
    device, B = x.device, (1 if unbatched else x.shape[0])
    return _Entry(plan, x.get_device(), _checks.as_gamma(gamma, device, x.dtype),
                  _checks.as_lengths(None, "x_lengths", B, span.N, device, "x"),
                  _checks.as_lengths(None, "y_lengths", B, span.M, device, "y"), unbatched, span, gram, swap, big,
                  fit)


def _plan(x, y, cost, memory: str, backend, grad: bool, transposable: bool = False, op: bool = False):
    """(C++ plan id, unbatched, Span, gram, swap, big, fit) for one plan key, or False (see :func:`_entry`).
    transposable: the plan may be for (y, x) (swap True) where launch.transposes says so, as functional._run decides
    for the Python path (a public call; the ops' kernels run the op's own x and y). op: for the ops' kernels
    (:func:`_op_plan`), which run no two-ended plan. big: what storing takes, where it
    is past _ops._SMALL_TABLE (memory "auto" then asks per call whether it fits, :func:`_lookup`). fit: see
    :func:`_checkpoint_plan` (memory "checkpoint" with a gradient, the "gram" form only)."""
    from ... import _checks, _ops
    from .. import FUSED_COSTS
    from . import COST_WHOLE_MAX, FUSED_D_MAX

    if x.dtype != y.dtype or x.dtype not in (torch.float32, torch.float64) or x.dim() != y.dim() \
            or x.dim() not in (2, 3):
        return False
    if cost not in FUSED_COSTS or backend not in (None, "cuda") or memory not in ("auto", "store", "checkpoint"):
        return False
    ckpt = memory == "checkpoint" and grad  # (without a gradient every mode is a value-only pass)
    unbatched = x.dim() == 2
    xs, ys = (x.unsqueeze(0), y.unsqueeze(0)) if unbatched else (x, y)
    B, N, D = xs.shape
    if ys.shape[0] != B or ys.shape[2] != D or 0 in xs.shape or 0 in ys.shape:
        return False
    M = ys.shape[1]
    gram = D > FUSED_D_MAX
    if gram and (cost != "sqeuclidean" or (not grad and B * N * M * x.element_size() > COST_WHOLE_MAX)):
        return False  # large D: l1's cost kernel is the Python path's (l1.py); a value-only pass bands a large x·yᵀ
    if ckpt and not gram:
        return False  # the chained checkpoint of a fused cost stays on the Python path
    dev = x.get_device()
    if y.get_device() != dev:
        return False
    swap = transposable and _launch.transposes(B, N, M, 0 if gram else D, x.dtype, dev)
    if swap:  # sdtw(x, y) = sdtw(y, x): the plan of (y, x)
        xs, ys, N, M = ys, xs, M, N
    two_values = not grad and not gram and _two_ended.applies(B, N, M, D, x.dtype, dev)
    if two_values and op:
        return False  # an op's value-only call from both ends: the ops' Python kernel runs it (two_ended.py)
    big = _ops._mode_bytes(_ops.get_backend("cuda"), "checkpoint" if ckpt else "store", "fused", B, N, M, D,
                           x.dtype) if grad else 0
    if big > _ops._SMALL_TABLE and big > _ops._total_bytes(x.device):
        return False  # it can never fit: the Python path checkpoints ("auto") or raises its MemoryError
    check = _check_kernel(x.dtype, xs.numel() + ys.numel(), dev)
    fit = None
    if ckpt:
        got = _checkpoint_plan(check, B, N, M, x.dtype, dev)
        if got is False:
            return False
        plan, fit = got
        big = 0
    elif two_values:  # values from both ends (two_ended.forward's launches)
        plan = _add_two_ended_plan(check, B, N, M, D, x.dtype, dev, cost, False)
    elif grad and not gram and transposable and _two_ended.applies_grad(B, N, M, D, x.dtype, dev):
        plan = _add_two_ended_plan(check, B, N, M, D, x.dtype, dev, cost, True)  # gamma > 0 (transposable): soft-DTW
        # (set_ahead refuses a chained plan, whose backward is not one kernel over the table)
        if not op and 2 * B * ((N + 1) // 2) * M <= AHEAD_MAX_CELLS and _module.set_ahead(plan, [0, 0, 0], 0):
            _AHEAD[plan] = None  # (its seed kernel's ones; two_ended_grads_kernel scales)
    else:
        kind, DK = ("gram", 0) if gram else (cost, D)
        plan = _add_plan(check, kind, DK, B, N, M, x.dtype, dev, grad, grad, cost)
        if grad and not gram and not op and B * N * M <= AHEAD_MAX_CELLS:
            _set_ahead(plan, B, x.dtype, dev)
    _set_lengths(plan, dev)
    if gram:  # |x_i|, |y_j| by kernels/norms.cu, as the Python path's _norms; small and storing (a checkpoint's bands
        # take torch's GEMMs on both paths): kernels/gram_gemm.cu's, as its _gram and _backward_gram
        from . import GRAM_GRADS_EXPR, GRAM_XY_EXPR, NORMS_EXPR, _GG_THREADS, _NORMS_THREADS, own_gram_gemm

        _module.set_norms(plan, [_launch._launcher("norms", NORMS_EXPR[x.dtype], dev).fn, 0, _NORMS_THREADS])
        if own_gram_gemm(B, N, M, D, x.dtype) and not ckpt:
            xy, grads = (_launch._launcher("gram_gemm", e[x.dtype], dev).fn for e in (GRAM_XY_EXPR, GRAM_GRADS_EXPR))
            _module.set_gram_gemm(plan, [xy, 0, _GG_THREADS], [grads, 0, _GG_THREADS])
    return plan, unbatched, _checks.Span(cost, D, N, M), gram, swap, (big if big > _ops._SMALL_TABLE else 0), fit


def _set_ahead(plan: int, B: int, dtype, dev: int) -> None:
    """Make a one-ended storing plan run its backward ahead: scale_grads_kernel and the plan's ones (the C++ side
    refuses a chained plan, whose backward is not one kernel over the table)."""
    ones = torch.ones(B, dtype=dtype, device=f"cuda:{dev}")
    fn = _launch._launcher("scale_grads", f"sdtw::scale_grads_kernel<{_launch._CTYPE[dtype]}>", dev).fn
    if _module.set_ahead(plan, [fn, 0, _SCALE_THREADS], ones.data_ptr()):
        _AHEAD[plan] = ones


_SCALE_THREADS = 256  # kernels/scale_grads.cu's __launch_bounds__


def _checkpoint_plan(check: list, B: int, N: int, M: int, dtype, dev: int):
    """(plan id, fit) of memory="checkpoint" for the "gram" cost, or False: the Python path's forward
    (backends/cuda/__init__.py, _forward_rows) where it runs in one band of rows (_forward_band_rows: at most the
    backward's band and tile buffers, B = 32, N = M = 2048, D = 64 among them): the norms, x·yᵀ and the checkpointed
    forward_chain_kernel over all N rows. fit = (h, TH, row bytes, N): _lookup asks _fit_rows per call, as the Python
    path does, and leaves the call to it (more, shorter bands) where the band would not fit now. The backward is the
    Python path's (fastpath.cpp runs softdtw._ops.fused_grad_for_launcher with memory "checkpoint")."""
    from . import _chain_sync_numel, _forward_chain_expr, _forward_row_plan

    plan, h = _forward_row_plan(B, N, M, dtype, dev, "checkpoint")
    if h < N:
        return False
    frames = _launch.chain_frames(dtype)
    expr = _forward_chain_expr(dtype, "gram", 0, plan, False, False)
    _launch.ensure_context(dev)
    pid = _module.add_plan(_context(), check, [_launch._launcher("forward", expr, dev).fn, B * plan.nch, plan.block()],
                           [0, 0, 0], B * plan.checkpoint_numel(N, frames), dtype, [], [], B, N, M, plan.nch,
                           "sqeuclidean", True)
    _module.set_chain(pid, 0, _chain_sync_numel(B, plan), 0)
    _module.set_checkpoint(pid, plan.TH, B * plan.column_numel(N, frames))
    return pid, (h, plan.TH, B * M * dtype.itemsize, N)


def _add_plan(check: list, kind: str, DK: int, B: int, N: int, M: int, dtype, dev: int, store: bool, grad: bool,
              cost: str, var=None) -> int:
    """Register one shape's launches with the C++ side; returns the plan id. The forward (storing its table when
    store) and, with grad, the backward of the DP of cost kind `kind` ("gram", "precomputed" or a fused cost of DK
    features), in the Python path's layout: forward_kernel and backward_kernel (_seq), or, for a chained plan,
    forward_chain_kernel and backward_chain_kernel over all rows with their buffers' sizes (_run_forward_chain,
    _run_backward_chain). cost: the call's cost, for the create_graph backward (set_grad_fn). var: the alignment
    variants' _Var (None: the plain DP); with an open end the saved buffer holds the forward's end values after the
    table (as _with_end places them) and the chained forward's sync its done counters (_forward_chain_buffers)."""
    from . import (_backward_chain_expr, _backward_chain_sizes, _carried, _chain_sync_numel, _end_numel, _end_offset,
                   _forward_chain_expr, _saved_dtype, _seq)

    code = var.code if var is not None else 0
    oe = var is not None and var.open_end
    fwd = _seq("forward", B, N, M, DK, dtype, dev, kind, False, store, False, code)
    bwd = _seq("backward", B, N, M, DK, dtype, dev, kind, False, True, False, code) if grad else None
    plan = fwd.plan
    _launch.ensure_context(dev)
    saved_dtype = _saved_dtype(dtype)
    saved_numel = B * plan.saved_numel(N) if store else 0
    if oe:  # (values only: the end values alone, which fastpath.cpp's run_forward allocates for an open end)
        saved_numel = _end_offset(saved_numel, saved_dtype) + _end_numel(B, M, plan.nch) * 8 // saved_dtype.itemsize
    if not plan.chain:
        return _module.add_plan(_context(), check, _kernel("forward", fwd, dev), _kernel("backward", bwd, dev),
                                saved_numel, saved_dtype, list(fwd.bnd), list(bwd.bnd) if bwd is not None else [],
                                B, N, M, plan.nch, cost, kind == "gram")
    grid, block = B * plan.nch, plan.block()
    fk = [_launch._launcher("forward", _forward_chain_expr(dtype, kind, DK, plan, False, store, var), dev).fn,
          grid, block]
    fbnd = B * plan.column_numel(N, _launch.chain_frames(dtype)) if plan.nch > 1 else 0
    bk, bbnd, nws = [0, 0, 0], 0, 0
    if grad:
        bk = [_launch._launcher("backward", _backward_chain_expr(dtype, kind, DK, plan, False, var), dev).fn,
              grid, block]
        bbnd, nws = _backward_chain_sizes(B, N, _carried(kind, DK), plan)
    pid = _module.add_plan(_context(), check, fk, bk, saved_numel, saved_dtype, [fbnd] if fbnd else [],
                           [bbnd] if bbnd else [], B, N, M, plan.nch, cost, kind == "gram")
    _module.set_chain(pid, _launch.tile_stagger(plan.W), _chain_sync_numel(B, plan) + (B if oe else 0), nws)
    return pid


def _add_two_ended_plan(check: list, B: int, N: int, M: int, D: int, dtype, dev: int, cost: str, grad: bool) -> int:
    """Register a two-ended plan (fastpath.cpp, Fused::forward_two; backends/cuda/two_ended.py): the forward of the 2B
    pairs of ceil(N / 2) rows with the open end (:func:`_add_plan`) and two_ended.cu's kernels. grad: the storing
    forward and the backward (forward_saving and backward's launches), the end values after the link table in the
    saved buffer; else the value-only forward, the end values alone in that buffer, folded by two_ended_value_kernel
    in the seed kernel's place (two_ended.forward's launches)."""
    from . import _NO_PENALTY, _Var, _end_offset, _saved_dtype

    B2, H = 2 * B, (N + 1) // 2
    pid = _add_plan(check, cost, D, B2, H, M, dtype, dev, grad, grad, cost, _Var(2, None, _NO_PENALTY))
    saved_dtype = _saved_dtype(dtype)
    table = B2 * _launch.plan_for(B2, H, M, D, dtype, dev).saved_numel(H) if grad else 0  # (_seq's plan of the halves)
    fold = "two_ended_seed_kernel" if grad else "two_ended_value_kernel"
    kernels = [[_launch._launcher("two_ended", _two_ended._kernel(k, dtype), dev).fn, 0, _two_ended._THREADS]
               for k in ("two_ended_inputs_kernel", fold, "two_ended_grads_kernel")]
    _module.set_two_ended(pid, *kernels, B, N, _end_offset(table, saved_dtype) * saved_dtype.itemsize)
    return pid


def _set_lengths(plan: int, dev: int) -> None:
    """Give a public call's plan check.cu's lengths_kernel, for calls with per-pair lengths (call_lengths)."""
    from . import checks as _vchecks

    _module.set_lengths(plan, _launch._launcher("check", "sdtw::lengths_kernel", dev).fn, _vchecks._THREADS)


def _op_plan(x, y, cost: str, store: bool) -> int:
    """The learner of the ops' CUDA kernels (fastpath.cpp, register_ops): the C++ plan id for calls of
    softdtw::forward / backward on x `(B, N, D)`, y `(B, M, D)` with this fused cost, of softdtw::forward_cost /
    backward_cost (cost "precomputed", x = y = C `(B, N, M)`) or of softdtw::hvp_cost (cost "hvp"), storing the
    table (memory "store") or not ("none"); -1 where the Python kernel keeps the call (the cases of :func:`_entry`,
    and a stored table past 64 MiB, whose running out of memory the Python kernel turns into its MemoryError; for
    hvp_cost, pairs wider than hvp_warp_kernel takes); -2 during a
    CUDA-graph capture (NVRTC and module loads are not capturable) or under a forced plan (tests, probes): no plan
    is built and the C++ side asks again next time. It asks once per (B, N, M, D, dtype, device, cost, store)."""
    if torch.cuda.is_current_stream_capturing() or _forced():
        return -2
    if cost in ("precomputed", "hvp"):
        return _cost_plan(x, cost, store)
    # Keyed apart from the public calls' plans (call, _entry): those may be for (y, x), an op's are for its x, y.
    pkey = ("op", x.shape, y.shape, x.dtype, y.dtype, x.get_device(), y.get_device(), cost, store)
    p = _PLANS.get(pkey)
    if p is None:
        if len(_PLANS) >= _PLANS_MAX:
            return -1
        p = _PLANS[pkey] = _plan(x, y, cost, "store" if store else "auto", "cuda", store, op=True)
    return -1 if p is False or p[5] or p[6] is not None else p[0]


def _forced() -> bool:
    """A plan forced for tests or probes (launch.forced_plan, hvp.force_plan): the launcher keeps out, so that the
    forced layout runs and no plan learnt under it is kept for later calls."""
    return bool(_launch._forced) or _hvp.force_plan is not None


def _cost_plan(C, kind: str, store: bool) -> int:
    """The C++ plan of _op_plan's "precomputed" and "hvp" kinds, or -1."""
    from ... import _ops
    from . import _saved_dtype

    B, N, M = C.shape
    dtype, dev = C.dtype, C.get_device()
    if kind == "hvp":
        if _hvp._warp_k(M, dtype) is None or _hvp_rec(B, N, M, dtype, dev) * C.element_size() > _ops._SMALL_TABLE:
            return -1
        _launch.ensure_context(dev)
        plan = _module.add_plan(_context(), [0, 0, 0], [0, 0, 0], [0, 0, 0], 0, _saved_dtype(dtype), [], [], B, N, M,
                                1, "hvp", False)
        _set_hvp(plan, B, N, M, dtype, dev)
        return plan
    if store and B * _launch.plan_for(B, N, M, 0, dtype, dev, False).saved_numel(N) * _saved_dtype(dtype).itemsize \
            > _ops._SMALL_TABLE:
        return -1
    return _add_plan([0, 0, 0], "precomputed", 0, B, N, M, dtype, dev, store, store, "precomputed")


def _kernel(name: str, spec, dev: int) -> list:
    """(CUfunction, grid, block) of a _seq launch spec (forward_kernel or backward_kernel), or zeros for none."""
    return [0, 0, 0] if spec is None else [_launch._launcher(name, spec.expr, dev).fn, spec.grid, spec.block]


def _check_kernel(dtype, numel: int, dev: int) -> list:
    """(CUfunction, grid, block) of the value check (check.cu) over numel values of x and y."""
    from . import checks as _vchecks

    return [_launch._launcher("check", _vchecks._EXPR[dtype], dev).fn, _vchecks.blocks(numel, dev),
            _vchecks._THREADS]


def _hvp_rec(B: int, N: int, M: int, dtype, dev: int) -> int:
    """hvp_warp_kernel's per-cell records (values of the data dtype) in its planned layout, as hvp.hvp_cost."""
    K, W = _hvp._warp_plan(B, M, dtype, dev)
    return B * N * 4 * 32 * W * K


def _set_hvp(plan: int, B: int, N: int, M: int, dtype, dev: int) -> None:
    """Give a C++ plan hvp_warp_kernel (no window or variant, named as hvp.hvp_cost names it) in hvp.hvp_cost's
    layout for B pairs of N x M cells."""
    K, W = _hvp._warp_plan(B, M, dtype, dev)
    fn = _launch._launcher("hvp_warp", f"sdtw::hvp_warp_kernel<{_launch._CTYPE[dtype]}, false, {K}, {W}>", dev).fn
    _module.set_hvp(plan, fn, B, 32 * W, _hvp_rec(B, N, M, dtype, dev), 16 // dtype.itemsize)


def _context() -> int:
    """The current CUcontext (ensure_context made the device's primary context current)."""
    drv = _launch.driver()
    ctx = ctypes.c_void_p()
    drv.check(drv.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    return ctx.value


_get_device = _launch._get_device


def _ready():
    """The loaded launcher, for a call it may take, or None: under torch.compile (first: nothing here is for a
    traced graph) or a functorch transform, when it is off, and until it is built (the first call starts the
    build)."""
    if torch.compiler.is_compiling():
        return None
    mod = _module
    if mod is None:
        if _enabled and _thread is None and _error is None:
            _start()
        return None
    return mod if _enabled and not _transforms_active() and not _forced() else None


def _lookup(x, y, gamma: float, cost, memory, backend, grad: bool):
    """The entry of a call the launcher may take now, or None: a call it does not take, the first call of a shape
    (registered here, run by the Python path), another device current, non-contiguous inputs, a CUDA-graph capture,
    the "gram" form under autocast, a large table that memory "auto" would not store now."""
    key = (x.shape, y.shape, x.dtype, y.dtype, x.get_device(), y.get_device(), cost, memory, backend, gamma, grad)
    e = _ENTRIES.get(key)
    if e is None:
        # without gamma, but whether it is > 0: hard DTW keeps x, y (functional._transposable)
        pkey = key[:9] + key[10:] + (gamma > 0,)
        first = pkey not in _PLANS
        if len(_ENTRIES) >= _ENTRIES_MAX:
            _ENTRIES.clear()
        e = _ENTRIES[key] = _entry(x, y, gamma, cost, memory, backend, grad, pkey)
        if first:  # a shape's first call: the Python path runs it (and validates it); the plan is for the next
            return None
    if e is False or _get_device() != e.dev or not (x.is_contiguous() and y.is_contiguous()) \
            or torch.cuda.is_current_stream_capturing() or (e.gram and torch.is_autocast_enabled("cuda")):
        return None
    if e.big and memory == "auto":
        from ... import _ops  # (here, off the small calls' path)

        if e.big > _ops._free_bytes(x.device) // 2:
            return None  # "auto" checkpoints this call (_ops._resolve asks the same): the Python path runs it
    if e.fit is not None:
        from . import _fit_rows

        h, TH, row_bytes, N = e.fit
        if _fit_rows(h, TH, row_bytes, x.device) < N:
            return None  # the forward's band would not fit now: the Python path cuts shorter ones
    return e


def call(x: torch.Tensor, y, gamma: float, cost, memory, backend, x_lengths=None,
         y_lengths=None) -> Optional[torch.Tensor]:
    """soft_dtw(x, y, gamma, cost=cost, memory=memory, backend=backend, x_lengths=..., y_lengths=...) through the
    launcher, or None: the caller then runs the call on the Python path (a call this launcher does not take, the
    first call of a shape, a failed value check, lengths out of range, inputs past the exact range). x is a CUDA
    tensor and gamma a float (the caller checked). Lengths: integer tensors `(B,)` (others take the Python path,
    which reads or rejects them), checked and clamped into range by the value check's lengths_kernel, as on the
    Python path (_checks._defer)."""
    mod = _ready()
    if mod is None or type(y) is not torch.Tensor or type(cost) is not str:
        return None
    grad = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)
    e = _lookup(x, y, gamma, cost, memory, backend, grad)
    if e is None:
        return None
    if not _takes_lengths(x_lengths, y_lengths, e.unbatched):
        return None
    ux, uy = (y_lengths, x_lengths) if e.swap else (x_lengths, y_lengths)  # in the plan's order
    stream = _launch._raw_stream(e.dev)
    xs, ys = (x.unsqueeze(0), y.unsqueeze(0)) if e.unbatched else (x, y)
    if e.swap:
        xs, ys = ys, xs
    value = _checked(e.dev, stream, (e.span,), x.dtype,
                     lambda *check: mod.fused(xs, ys, e.gamma, e.xl, e.yl, ux, uy, e.plan, stream, grad, *check))
    if value is None:
        return None
    return value[0] if e.unbatched else value


def divergence_call(x: torch.Tensor, y, gamma: float, cost, memory, backend, x_lengths=None,
                    y_lengths=None) -> Optional[torch.Tensor]:
    """soft_dtw_divergence(x, y, gamma, ...) through the launcher (fastpath.cpp's divergence: the three terms as
    :func:`call` runs them, bitwise, with one value check and one lengths_kernel for all three), or None: the caller
    runs the Python path. The launcher takes it where it takes each term (:func:`call`); the first call of a shape
    registers all three terms' plans."""
    mod = _ready()
    if mod is None or type(y) is not torch.Tensor or type(cost) is not str:
        return None
    on = torch.is_grad_enabled()
    gx, gy = on and x.requires_grad, on and y.requires_grad
    exy = _lookup(x, y, gamma, cost, memory, backend, gx or gy)
    exx = _lookup(x, x, gamma, cost, memory, backend, gx)
    eyy = _lookup(y, y, gamma, cost, memory, backend, gy)
    if exy is None or exx is None or eyy is None:
        return None
    if not _takes_lengths(x_lengths, y_lengths, exy.unbatched):
        return None
    stream = _launch._raw_stream(exy.dev)
    xs, ys = (x.unsqueeze(0), y.unsqueeze(0)) if exy.unbatched else (x, y)
    value = _checked(exy.dev, stream, (exy.span, exx.span, eyy.span), x.dtype, lambda *check: mod.divergence(
        xs, ys, exy.gamma, [exy.plan, exx.plan, eyy.plan], exy.swap, exx.xl, eyy.xl, x_lengths, y_lengths, stream,
        [gx or gy, gx, gy], *check))
    if value is None:
        return None
    return value[0] if exy.unbatched else value


def _takes_lengths(x_lengths, y_lengths, unbatched: bool) -> bool:
    """Whether the launcher takes a call's lengths: none given, or tensors for a batched call. fastpath.cpp
    (call_lengths) then converts and clamps them, or hands them back to the Python path, which reads anything else
    with _checks.as_lengths (lists, arrays) and raises its error."""
    if x_lengths is None and y_lengths is None:
        return True
    return not unbatched and all(t is None or type(t) is torch.Tensor for t in (x_lengths, y_lengths))


def _checked(dev: int, stream: int, spans, dtype, run):
    """run(flag, ws, wmax) with the value check queued in front of the call's kernels (three zeros: no check), then
    the check's answer: the value, or None when the inputs hold NaN / Inf or are past the kernels' exact range for
    any of spans (the _checks.Span of each DP the call runs), when a per-pair length is out of range (fastpath.cpp's
    call_lengths flags it in ws), when run returned None, having launched nothing (lengths the launcher leaves to
    the Python path), or when it ran out of memory (a large table: the Python path raises its MemoryError). The
    caller then runs the call on the Python path, which raises its error or reruns."""
    from ... import _checks

    # _checks._value_checks_enabled for this call, whose compile and capture cases the callers excluded
    if _checks._trusted_depth or os.environ.get("SOFTDTW_CHECK_VALUES", "1") == "0":
        try:
            return run(0, 0, 0)
        except torch.OutOfMemoryError:
            return None  # a large table that did not fit: the Python path raises its MemoryError (or fits now)
    from . import checks as _vchecks

    slot = _vchecks._take(dev)
    try:
        value = run(slot.dev, slot.ws.data_ptr(), slot.wmax.data_ptr())
    except torch.OutOfMemoryError:
        # As above. The check kernel may be queued already: it writes the slot's flag before the slot is reused.
        torch.cuda.synchronize(dev)
        value = None
    if value is None:  # nothing was launched (or the call failed): the slot goes back unread
        _vchecks._give(dev, slot)
        return None
    pending = _vchecks.PendingCheck(dev, stream, slot)
    if not pending.ok() or any(_checks._out_of_range(pending.vmax, pending.gamma, s, "cuda", dtype) for s in spans):
        return None
    return value


# --- DILATE ------------------------------------------------------------------------------------------------------

class _DilateEntry(NamedTuple):
    plan: int
    dev: int
    gamma: torch.Tensor
    xl: torch.Tensor
    yl: torch.Tensor
    omega: torch.Tensor  # the default Omega of the shape, (B, N, M)
    gdot: torch.Tensor  # hvp_cost's gamma direction: zeros (B,)
    span: object


def dilate_call(x: torch.Tensor, y, alpha: float, gamma: float, backend, x_lengths=None,
                y_lengths=None) -> Optional[torch.Tensor]:
    """dilate_loss(x, y, alpha, gamma, backend=backend, x_lengths=..., y_lengths=...) with the squared Euclidean
    cost and the default Omega, through the launcher (fastpath.cpp, Dilate: the Python path's torch calls and
    kernels, bitwise its losses and gradients), or None: the caller runs the Python path (a call it does not take: no
    gradient, a first call of the shape, a band, Omega, the divergence, lengths where dilate_xy_kernel does not run
    or that are not integer tensors (B,); a failed value check, lengths out of range; inputs past the exact range).
    x is a CUDA tensor and gamma a float (the caller checked). Lengths as in :func:`call`."""
    mod = _ready()
    if mod is None or type(y) is not torch.Tensor or not (torch.is_grad_enabled() and (x.requires_grad or
                                                                                     y.requires_grad)):
        return None
    key = ("dilate", x.shape, y.shape, x.dtype, y.dtype, x.get_device(), y.get_device(), backend, gamma)
    e = _ENTRIES.get(key)
    if e is None:
        pkey = key[:-1]
        first = pkey not in _PLANS
        if first and len(_PLANS) < _PLANS_MAX:
            _PLANS[pkey] = _dilate_plan(x, y, backend)
        p = _PLANS.get(pkey, False)
        if len(_ENTRIES) >= _ENTRIES_MAX:
            _ENTRIES.clear()
        e = _ENTRIES[key] = False if p is False or not (gamma >= 0 and gamma < float("inf")) else p._replace(
            gamma=_as_gamma(gamma, x))
        if first:
            return None
    if e is False or _get_device() != e.dev or not (x.is_contiguous() and y.is_contiguous()) \
            or torch.cuda.is_current_stream_capturing() or torch.is_autocast_enabled("cuda"):
        return None
    if not _takes_lengths(x_lengths, y_lengths, False):  # a DILATE plan is for batched x, y
        return None
    stream = _launch._raw_stream(e.dev)
    return _checked(e.dev, stream, (e.span,), x.dtype, lambda *check: mod.dilate(
        x, y, e.gamma, e.xl, e.yl, x_lengths, y_lengths, e.omega, e.gdot, e.plan, stream, *check, float(alpha)))


def _as_gamma(gamma: float, x: torch.Tensor) -> torch.Tensor:
    from ... import _checks

    return _checks.as_gamma(gamma, x.device, x.dtype)


def _dilate_plan(x, y, backend):
    """A _DilateEntry without its gamma for one shape, or False where DILATE's launcher does not apply: float32 /
    float64 (B, N, D), (B, M, D) with B·N·M·D within the cost's broadcast form, M within hvp_warp_kernel's reach,
    its value-only forward plain or chained."""
    from ... import _checks, costs
    from ...dilate import _omega_tensor

    if x.dtype != y.dtype or x.dtype not in (torch.float32, torch.float64) or x.dim() != 3 or y.dim() != 3 \
            or backend not in (None, "cuda"):
        return False
    B, N, D = x.shape
    M = y.shape[1]
    dev = x.get_device()
    if y.shape[0] != B or y.shape[2] != D or 0 in x.shape or 0 in y.shape or y.get_device() != dev \
            or B * N * M * D > costs._BROADCAST_LIMIT or _hvp._warp_k(M, x.dtype) is None:
        return False
    plan = _add_plan(_check_kernel(x.dtype, x.numel() + y.numel(), dev), "precomputed", 0, B, N, M, x.dtype, dev,
                     False, False, "precomputed")
    _set_lengths(plan, dev)
    xy = _hvp.hvp_xy_plan(B, N, M, D, x.dtype, dev)  # as dilate._dilate_xy (hvp.dilate_xy) decides
    if xy is not None:
        K, W = xy
        fn = _launch._launcher("hvp_warp", f"sdtw::dilate_xy_kernel<{_launch._CTYPE[x.dtype]}, {K}, {W}, {D}, 0>",
                               dev).fn
        _module.set_dilate_xy(plan, fn, B, 32 * W, B * N * 4 * 32 * W * K)
    else:
        _set_hvp(plan, B, N, M, x.dtype, dev)
    xl = _checks.as_lengths(None, "x_lengths", B, N, x.device, "x")
    yl = _checks.as_lengths(None, "y_lengths", B, M, x.device, "y")
    omega = _omega_tensor(None, B, N, M, xl, yl, x.dtype, x.device)
    return _DilateEntry(plan, dev, None, xl, yl, omega, torch.zeros(B, dtype=x.dtype, device=x.device),
                        _checks.Span("sqeuclidean", D, N, M))
