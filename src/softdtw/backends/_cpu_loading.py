"""How the cpu backend's Numba kernels get into a process: a notice before a real compile, and the
same machine code whether they were compiled here or loaded from Numba's on-disk cache.

Compile notice
    The first compile of the kernels takes ~40 s (float32) / ~30 s (float64) on a 2-core machine;
    later processes load them from Numba's cache (``cache=True``: ``__pycache__`` next to
    ``_cpu_kernels.py``, or ``NUMBA_CACHE_DIR``) in well under a second. A listener on Numba's
    ``"numba:compile"`` event, which fires only on a cache miss, prints :data:`COMPILE_NOTICE` on
    stderr once per process, just before the first real compile of a function of ``_cpu_kernels``.

Same code, compiled or cached
    The kernels call helper functions (``_forward_pair``, ``_cost_row``, ...) that Numba compiles as
    libraries of their own; each caller also links in a copy of them (``linkonce_odr``) and optimises
    it with its own code. When a process compiles, the helpers' own libraries are in the JIT before
    their callers, and the callers' calls resolve to them; a process that loads a kernel from the
    cache has only the kernel's object, so its calls go to the copies inside, which LLVM optimised
    differently (fast-math contraction and reassociation). The two processes then differ in the last
    bits: measured, float64, B = 2, N = 200, M = 170, gamma = 0.1: values 1.7e-16 and gradients
    1.4e-12 relative (``tests/backends/test_cpu_loading.py``). :func:`load_cached_helpers` loads the
    helpers' cached libraries first, callees before callers, as a compiling process has them; the
    loaded kernels' calls then resolve to the same code, and the results are bitwise equal.
"""
from __future__ import annotations

import sys
import threading
from types import ModuleType

from numba.core import event, sigutils
from numba.core.registry import CPUDispatcher

COMPILE_NOTICE = ("softdtw: compiling CPU kernels, once: ~40 s (Numba caches them on disk; later runs "
                  "load them in under a second)")


class _CompileNotice(event.Listener):
    """Prints COMPILE_NOTICE once, at the start of the first compile of a function of ``module``."""

    def __init__(self, module: str):
        self.module = module
        self.printed = False

    def on_start(self, ev):
        if self.printed:
            return
        dispatcher = (ev.data or {}).get("dispatcher")
        if getattr(getattr(dispatcher, "py_func", None), "__module__", None) != self.module:
            return
        self.printed = True
        print(COMPILE_NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev):
        pass


_notices: dict = {}


def install_compile_notice(module: ModuleType) -> _CompileNotice:
    """Register (once per module) the listener that announces the first compile of ``module``."""
    if module.__name__ not in _notices:
        listener = _CompileNotice(module.__name__)
        event.register("numba:compile", listener)
        _notices[module.__name__] = listener
    return _notices[module.__name__]


def _callees_first(module: ModuleType, skip) -> list:
    """The module's Numba dispatchers (but ``skip``), each after the dispatchers it calls."""
    dispatchers = {n: d for n, d in vars(module).items() if isinstance(d, CPUDispatcher)}
    order, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for callee in dispatchers[name].py_func.__code__.co_names:
            if callee in dispatchers:
                visit(callee)
        order.append(name)

    for name in dispatchers:
        visit(name)
    return [dispatchers[n] for n in order if n not in skip]


def load_cached_helpers(module: ModuleType, entry_points) -> int:
    """Load every cached overload of the module's helpers (not ``entry_points``), callees first.

    Call it before the first call of an entry point in the process (see the module docstring);
    returns the number of overloads loaded. Only signatures cached for this machine are loaded
    (nothing is compiled); a cache that cannot be read is skipped, which costs nothing but the
    last-bit agreement described above.
    """
    loaded = 0
    for dispatcher in _callees_first(module, set(entry_points)):
        try:  # Numba's cache index (internal): {(signature, machine, code hashes): data file}
            magic = dispatcher.targetctx.codegen().magic_tuple()
            signatures = [key[0] for key in dispatcher._cache._cache_file._load_index() if key[1] == magic]
            for sig in signatures:
                args, _ = sigutils.normalize_signature(sig)
                if tuple(args) not in dispatcher.overloads:
                    dispatcher.compile(sig)
                    loaded += 1
        except Exception:  # noqa: BLE001 - an unreadable or unfamiliar cache: compile as usual
            continue
    return loaded


_ready: set = set()
_lock = threading.Lock()


def prepare(module: ModuleType, entry_points) -> None:
    """Once per process and module, before its first kernel call: install the compile notice and
    load the cached helpers (:func:`load_cached_helpers`). Later calls return at once."""
    if module.__name__ in _ready:
        return
    with _lock:
        if module.__name__ not in _ready:
            install_compile_notice(module)
            load_cached_helpers(module, entry_points)
            _ready.add(module.__name__)
