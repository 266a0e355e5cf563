"""Run-time compilation of the kernels in ``kernels/`` with NVRTC (through NVIDIA's cuda-core).

Each kernel instantiation (a template with its arguments, e.g.
``sdtw::forward_kernel<float, 0, 1, 16, 1, false, true>``) is compiled on first use for the
architecture of the GPU it runs on — no nvcc or host compiler is needed — and the cubin is cached:

- in memory, per process and device;
- on disk, under ``$SOFTDTW_CACHE_DIR`` (default ``$XDG_CACHE_HOME/softdtw`` or ``~/.cache/softdtw``),
  in a file named by a hash of (kernel sources, architecture, NVRTC version, instantiation, options).
  Files are written to a temporary name and renamed into place (``os.replace``), so processes that
  compile the same kernel at the same time never see a half-written file; an unwritable cache
  directory only means compiling again in the next process.

:data:`STATS` counts compilations and their time, so benchmarks can keep them apart from steady state.
"""
from __future__ import annotations

import hashlib
import re
import json
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

#: Compiler options (part of the cache key).
_STD = "c++17"
_MAGIC = b"SOFTDTW-CUBIN-1\n"

#: Counters for benchmarks and tests: NVRTC runs, seconds spent in them, disk-cache hits.
STATS = {"compiles": 0, "compile_seconds": 0.0, "disk_hits": 0}

_lock = threading.Lock()
_import_lock = threading.Lock()  # cuda_core
_kernels: dict = {}  # (device index, source, name expression) -> cuda.core Kernel
_warned_cache = False


def _install_hint() -> str:
    try:
        import torch

        major = (torch.version.cuda or "13").split(".")[0]
    except Exception:  # pragma: no cover - torch is a hard dependency
        major = "13"
    return f'pip install "softdtw[cuda{major}]"'


def cuda_core():
    """The cuda-core namespace (``cuda.core``, or ``cuda.core.experimental`` on versions before 0.4).

    One thread at a time: threads importing cuda.core for the first time at once saw it half initialised (no
    ``Program`` yet; cuda-core 1.2.2) and reported cuda-core missing (tests/backends/test_cuda_compile.py)."""
    with _import_lock:
        return _cuda_core()


def _cuda_core():
    try:
        import cuda.core as cc

        if hasattr(cc, "Program"):
            return cc
        import cuda.core.experimental as cce  # noqa: F811

        return cce
    except ImportError as err:
        raise ImportError(
            "the softdtw CUDA backend compiles its kernels with NVIDIA's cuda-core (NVRTC), which is not "
            f"installed or cannot load ({err}). Install the extra that matches PyTorch's CUDA: "
            f"{_install_hint()} — or run on the CPU with backend='cpu'."
        ) from err


def nvrtc_version() -> str:
    """"major.minor" of the NVRTC library that cuda-core will use."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:  # older cuda-python layout
        from cuda import nvrtc  # type: ignore[no-redef]
    err, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _read(name: str) -> str:
    return (KERNEL_DIR / name).read_text()


_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"[^\n]*$', re.MULTILINE)


def source(name: str) -> str:
    """Kernel source ``kernels/<name>.cu`` with its ``#include "*.cuh"`` inlined, each header once (no
    include path needed)."""
    seen: set[str] = set()

    def inline(match) -> str:
        header = match.group(1)
        if header in seen:
            return ""
        seen.add(header)
        return _INCLUDE.sub(inline, _read(header))

    return _INCLUDE.sub(inline, _read(f"{name}.cu"))


_SOURCE_HASH: str | None = None


def source_hash() -> str:
    """sha256 of every file in ``kernels/``: any edit invalidates every cached cubin."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        h = hashlib.sha256()
        for path in sorted(KERNEL_DIR.iterdir()):
            if path.suffix in (".cu", ".cuh"):
                h.update(path.name.encode())
                h.update(path.read_bytes())
        _SOURCE_HASH = h.hexdigest()
    return _SOURCE_HASH


def cache_dir() -> Path:
    """Where cubins are cached: ``$SOFTDTW_CACHE_DIR``, else ``$XDG_CACHE_HOME/softdtw``, else ``~/.cache/softdtw``."""
    env = os.environ.get("SOFTDTW_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "softdtw"


def _cache_path(name: str, expr: str, arch: str) -> Path:
    key = "|".join([source_hash(), arch, nvrtc_version(), expr, _STD])
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return cache_dir() / f"{name}-{arch}-{digest}.cubin"


def _load_cached(path: Path):
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if not blob.startswith(_MAGIC):
        return None
    header, _, cubin = blob[len(_MAGIC):].partition(b"\n")
    try:
        mangled = json.loads(header)["mangled"]
    except (ValueError, KeyError):
        return None
    return cubin, mangled


def _store_cached(path: Path, cubin: bytes, mangled: str) -> None:
    """Write atomically (temporary file + os.replace); on any OSError keep the result in memory only."""
    global _warned_cache
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + json.dumps({"mangled": mangled}).encode() + b"\n" + cubin)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as err:
        if not _warned_cache:
            _warned_cache = True
            warnings.warn(
                f"softdtw: cannot write the kernel cache in {path.parent} ({err}); kernels are kept in memory "
                f"only and compiled again in the next process. Set SOFTDTW_CACHE_DIR to a writable folder.",
                RuntimeWarning,
                stacklevel=3,
            )


class _Log:
    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text.decode() if isinstance(text, bytes) else str(text))

    def __str__(self):
        return "".join(self.parts).strip()


def compile_cubin(name: str, expr: str, arch: str) -> tuple[bytes, str]:
    """Compile one instantiation ``expr`` of ``kernels/<name>.cu`` for ``arch`` (e.g. "sm_90").

    Returns (cubin bytes, mangled symbol name). Needs no GPU. Raises RuntimeError with the kernel,
    architecture, template arguments and the compiler log when NVRTC fails.
    """
    cc = cuda_core()
    log = _Log()
    start = time.perf_counter()
    try:
        options = cc.ProgramOptions(arch=arch, std=_STD, name=f"softdtw_{name}.cu")
        program = cc.Program(source(name), code_type="c++", options=options)
        obj = program.compile("cubin", name_expressions=(expr,), logs=log)
        mangled = obj.symbol_mapping[expr]
        if isinstance(mangled, bytes):
            mangled = mangled.decode()
        cubin = bytes(obj.code)
    except Exception as err:
        raise RuntimeError(
            f"NVRTC {nvrtc_version()} failed to compile the softdtw kernel {expr} (kernels/{name}.cu) for "
            f"{arch}: {err}\ncompiler log:\n{log or '(empty)'}"
        ) from err
    with _lock:
        STATS["compiles"] += 1
        STATS["compile_seconds"] += time.perf_counter() - start
    return cubin, mangled


def arch_of(device_index: int) -> str:
    """"sm_XY" of a CUDA device, as NVRTC names it."""
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm_{major}{minor}"


def cubin_for(name: str, expr: str, arch: str) -> tuple[bytes, str]:
    """The cubin of an instantiation, from the disk cache or freshly compiled (and then cached)."""
    path = _cache_path(name, expr, arch)
    hit = _load_cached(path)
    if hit is not None:
        with _lock:
            STATS["disk_hits"] += 1
        return hit
    cubin, mangled = compile_cubin(name, expr, arch)
    _store_cached(path, cubin, mangled)
    return cubin, mangled


def get_kernel(name: str, expr: str, device_index: int):
    """A loaded cuda-core Kernel for instantiation ``expr`` of ``kernels/<name>.cu`` on a device.

    The caller must have made the device's primary context current (see ``launch.ensure_context``).
    """
    key = (device_index, name, expr)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    cc = cuda_core()
    cubin, mangled = cubin_for(name, expr, arch_of(device_index))
    # cuda-core's symbol mapping holds the mangled names as bytes, as NVRTC returns them.
    obj = cc.ObjectCode.from_cubin(cubin, symbol_mapping={expr: mangled.encode()})
    kernel = obj.get_kernel(expr)
    with _lock:
        _kernels.setdefault(key, kernel)
    return _kernels[key]


def _precompile_one(job):
    name, expr, arch = job
    cubin_for(name, expr, arch)
    return expr


def precompile(jobs, workers: int | None = None) -> int:
    """Fill the disk cache for (name, expr, arch) jobs in parallel processes (no GPU needed).

    Used by scripts before timing or testing, so NVRTC time stays out of the measurements.
    Returns the number of jobs.
    """
    import concurrent.futures
    import multiprocessing

    jobs = list(dict.fromkeys(jobs))
    if not jobs:
        return 0
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        list(pool.map(_precompile_one, jobs))
    return len(jobs)
