"""GPU benchmark of the cuda backend: throughput, the peers' grid side by side, and per-call overhead.

    PYTHONPATH=src python3 benchmarks/gpu.py --out benchmarks/results/h100.json [--quick]

Writes the JSON (format in STYLE.md: {"device", "torch", "git_sha", "rows": [...]}) and a Markdown table
next to it (same name, .md). Sections:

(a) GCUPS (10^9 cells / s, B·N·M / time) for D = 1, N = M in {128, 512, 1024}, a batch that fills the GPU,
    "forward" (value only: nothing stored) and "forward_backward" (forward storing S + backward), timed
    at the backend (the kernels and their allocations) and through the public API with autograd.
(b) The grid of research/peers.md: B in {16, 32}, N = M in {128, 512, 1024, 2048}, D in {1, 64},
    forward + backward of the loss as a user runs it (clone the inputs, soft_dtw, sum, backward), with
    peak memory above what was allocated before the step; pysdtw 0.0.5 in the same run when installed.
    At N = 2048 also memory="checkpoint" (API and backend), for the issue-4 target at B = 32, D = 64.
(c) One tiny pair (B = 1, N = M = 16), forward + backward per call, wall clock (host included).
(d) "long" (issue 4): B in {1, 16}, N = M in {8192, 65536}, D = 1; "forward" (value only, memory "none")
    and "forward_backward" with memory "store" and "checkpoint", at the backend and through the API,
    time and peak memory. A store row whose table cannot fit in free memory (B = 16, N = 65536 needs
    ~275 GB) is reported as skipped, decided from the sizes. Repetitions adapt to the time one call takes
    (at least one timed call after the warm-up) and the section stops timing after ~2 minutes.

NVRTC compilation is kept out of every timing: the first call of each configuration is a warm-up, and
the compile time itself is reported on its own (section "compile").
Timings: CUDA events around the region, median of the repetitions, after warm-up.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import softdtw  # noqa: E402
from softdtw.backends import cuda as backend  # noqa: E402
from softdtw.backends.cuda import compile as nvrtc  # noqa: E402


def median_ms(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def node_name(fn) -> str:
    """An autograd node's name (the Python path's _Fused, applied through Function's base apply, has no name())."""
    try:
        return fn.name()
    except RuntimeError:
        return type(fn).__name__


def peak_mb(fn) -> float:
    """Peak CUDA memory above what was allocated before the call, MB (10^6 bytes)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 1e6


def data(B, N, M, D, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    return x, y


def row(impl, mode, B, N, M, D, memory, ms, peak=None, dtype="float32", gamma=1.0, note=None):
    r = {"impl": impl, "mode": mode, "B": B, "N": N, "M": M, "D": D, "memory": memory, "dtype": dtype,
         "gamma": gamma, "ms": None if ms is None else round(ms, 5),
         "gcups": None if ms is None else round(B * N * M / (ms * 1e-3) / 1e9, 2),
         "peak_mb": None if peak is None else round(peak, 2)}
    if note:
        r["note"] = note
    print(json.dumps(r), flush=True)
    return r


# --- (a) throughput ------------------------------------------------------------------------------------

def backend_calls(x, y, gamma, lengths, cost="sqeuclidean", memory="store"):
    """Closures timing the backend's kernels (and their allocations) without the public API around them.

    memory: what the storing forward keeps for the backward, "store" or "checkpoint"."""
    xl, yl = lengths
    grad = torch.ones(x.shape[0], device="cuda", dtype=x.dtype)
    held = {}

    def forward_none():
        backend.forward(x, y, gamma, cost, xl, yl, None, "none")

    def forward_store():
        held["v"], held["s"] = backend.forward(x, y, gamma, cost, xl, yl, None, memory)

    def backward():
        backend.backward(grad, x, y, gamma, cost, xl, yl, None, held["v"], held["s"], memory)

    def forward_backward():
        held.clear()  # never hold two saved tables
        v, saved = backend.forward(x, y, gamma, cost, xl, yl, None, memory)
        backend.backward(grad, x, y, gamma, cost, xl, yl, None, v, saved, memory)
    return forward_none, forward_store, backward, forward_backward


def backend_step(x, y, gamma, lengths, memory):
    if memory == "none":
        return backend_calls(x, y, gamma, lengths)[0]
    return backend_calls(x, y, gamma, lengths, memory=memory)[3]


def api_step(x, y, mode, gamma=1.0, memory="auto"):
    if mode == "forward":
        def f():
            with torch.no_grad():
                softdtw.soft_dtw(x, y, gamma)
        return f

    def fb():
        xc = x.clone().requires_grad_()
        yc = y.clone().requires_grad_()
        softdtw.soft_dtw(xc, yc, gamma, memory=memory).sum().backward()
    return fb


def full_lengths(B, N, M):
    return torch.full((B,), N, device="cuda"), torch.full((B,), M, device="cuda")


def throughput(quick: bool):
    rows = []
    sizes = {128: 65536, 512: 16384, 1024: 4096}
    if quick:
        sizes = {128: 8192, 512: 2048, 1024: 512}
    for N, B in sizes.items():
        x, y = data(B, N, N, 1)
        gamma = torch.tensor(1.0, device="cuda")
        fnone, fstore, bwd, fb = backend_calls(x, y, gamma, full_lengths(B, N, N))
        for mode, memory, fn in (("forward", "none", fnone), ("forward_store", "store", fstore),
                                 ("forward_backward", "store", fb)):
            fn()  # compile
            ms = median_ms(fn, reps=5)
            rows.append(row("softdtw-backend", mode, B, N, N, 1, memory, ms, peak_mb(fn)))
            if mode == "forward_store":
                ms = median_ms(bwd, reps=5)
                rows.append(row("softdtw-backend", "backward", B, N, N, 1, memory, ms))
        fb()  # leaves nothing held
        torch.cuda.empty_cache()
        for mode, memory in (("forward", "none"), ("forward_backward", "auto")):
            fn = api_step(x, y, mode)
            ms = median_ms(fn, reps=5)
            rows.append(row("softdtw", mode, B, N, N, 1, memory, ms, peak_mb(fn)))
        del x, y, fnone, fstore, bwd, fb
        torch.cuda.empty_cache()
    return rows


def sweep(quick: bool):
    """Backend forward+backward under forced layouts (K, W) for a few shapes: data for the planner."""
    from softdtw.backends.cuda import launch

    rows = []
    shapes = [(16, 128, 1), (16, 512, 1), (32, 1024, 1), (16, 2048, 1), (16, 512, 16), (2048, 512, 1),
              (16384, 512, 1), (4096, 1024, 1), (65536, 128, 1)]
    for B, N, D in shapes:
        x, y = data(B, N, N, D)
        gamma = torch.tensor(1.0, device="cuda")
        calls = backend_calls(x, y, gamma, full_lengths(B, N, N))
        plan = launch.plan_for(B, N, N, D, torch.float32, 0)
        for K in launch.K_CHOICES:
            for W in launch.W_CHOICES:
                if 32 * K * W > 2 * N or K * D > 32 or (B >= 4096 and W > 2) or (B <= 64 and W * K * 32 < N // 4):
                    continue
                with launch.forced_plan(K, W):
                    for mode, fn in (("forward", calls[0]), ("forward_backward", calls[3])):
                        fn()
                        ms = median_ms(fn, reps=3, warmup=1)
                        chosen = (K, W) == (plan.K, plan.W)
                        rows.append(row("softdtw-backend", mode, B, N, N, D, f"K={K},W={W}", ms,
                                        note="planner's choice" if chosen else None))
        del x, y, calls
        torch.cuda.empty_cache()
    return rows


# --- (b) the peers' grid --------------------------------------------------------------------------------

def load_pysdtw():
    try:
        if not hasattr(np, "row_stack"):  # removed in NumPy 2.4; numba-cuda still calls it
            np.row_stack = np.vstack
        import pysdtw

        return pysdtw
    except Exception as err:  # pragma: no cover - optional peer
        print(f"pysdtw unavailable: {err!r}", flush=True)
        return None


def peer_step(pysdtw, x, y):
    loss = pysdtw.SoftDTW(gamma=1.0, use_cuda=True)

    def fb():
        xc = x.clone().requires_grad_()
        yc = y.clone().requires_grad_()
        loss(xc, yc).sum().backward()
    return fb


def grid(quick: bool):
    rows = []
    pysdtw = load_pysdtw()
    for B in (16, 32):
        for N in (128, 512, 1024, 2048):
            for D in (1, 64):
                x, y = data(B, N, N, D, seed=N + D)
                fn = api_step(x, y, "forward_backward")
                fn()
                ms = median_ms(fn, reps=3 if quick else 7)
                rows.append(row("softdtw", "forward_backward", B, N, N, D, "auto", ms, peak_mb(fn)))
                fn = backend_step(x, y, torch.tensor(1.0, device="cuda"), full_lengths(B, N, N), "store")
                fn()
                ms = median_ms(fn, reps=3 if quick else 7)
                rows.append(row("softdtw-backend", "forward_backward", B, N, N, D, "store", ms, peak_mb(fn)))
                if N == 2048 or (D > 1 and N >= 512):  # issue 4's row; large D band by band (issue 3's bound)
                    rows += checkpoint_rows(x, y, B, N, D, reps=3 if quick else 7)
                if pysdtw is not None:
                    fn = peer_step(pysdtw, x, y)
                    try:
                        fn()
                        ms = median_ms(fn, reps=3, warmup=1)
                        rows.append(row("pysdtw-0.0.5", "forward_backward", B, N, N, D, "-", ms, peak_mb(fn)))
                    except Exception as err:
                        msg = str(err).splitlines()[0][:120]
                        rows.append(row("pysdtw-0.0.5", "forward_backward", B, N, N, D, "-", None,
                                        note=f"fails: {type(err).__name__}: {msg}"))
                        torch.cuda.synchronize()
                del x, y
                torch.cuda.empty_cache()
    return rows


def failure_note(err: BaseException) -> str:
    msg = (str(err).splitlines() or [""])[0][:120].replace("|", "/")  # the note lands in a Markdown table
    return f"fails: {type(err).__name__}: {msg}"


def checkpoint_rows(x, y, B, N, D, reps):
    """Forward + backward with memory="checkpoint", through the API and at the backend. A failure (a backend
    that cannot checkpoint yet, out of memory) becomes a row with a note instead of ending the run."""
    out = []
    gamma = torch.tensor(1.0, device="cuda")
    for impl in ("softdtw", "softdtw-backend"):
        if impl == "softdtw":
            fn = api_step(x, y, "forward_backward", memory="checkpoint")
        else:
            fn = backend_step(x, y, gamma, full_lengths(B, N, N), "checkpoint")
        try:
            fn()
            ms = median_ms(fn, reps=reps)
            out.append(row(impl, "forward_backward", B, N, N, D, "checkpoint", ms, peak_mb(fn)))
        except Exception as err:
            out.append(row(impl, "forward_backward", B, N, N, D, "checkpoint", None, note=failure_note(err)))
        del fn
        torch.cuda.empty_cache()
    return out


# --- (c) per-call overhead ------------------------------------------------------------------------------

def wall_ms(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def kernel_us(fn, reps: int, warmup: int = 1) -> dict:
    """{kernel name (first 90 characters): GPU µs per call} of fn's CUDA kernels, from torch.profiler over `reps`
    calls after `warmup` unprofiled ones."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return {name: us / reps for name, (_, us) in cuda_kernels(prof).items()}


def cuda_kernels(prof) -> dict:
    """{kernel name (first 90 characters): [launches, total device µs]} of a torch.profiler run's CUDA events."""
    kernels = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(ev.name[:90], [0, 0.0])
            k[0] += 1
            k[1] += ev.device_time_total
    return kernels


class HostStamps:
    """When calls are made, in µs of host time since :meth:`start`: each (module, name) of `targets` is wrapped so that
    a call appends (name, µs) to :attr:`rows` (a launch's name gets its first argument, the kernel file's name).
    For the host timelines of benchmarks/probes/large_d_host.py and ckpt_probe.py."""

    def __init__(self, targets):
        self.rows, self.t0 = [], time.perf_counter()
        for mod, name in targets:
            self._wrap(mod, name)

    def _wrap(self, mod, name):
        f = getattr(mod, name)

        def stamped(*a, **k):
            self.mark(name + (":" + str(a[0])[:12] if name == "launch" else ""))
            return f(*a, **k)

        setattr(mod, name, stamped)

    def start(self):
        self.rows.clear()
        self.t0 = time.perf_counter()

    def mark(self, what: str):
        self.rows.append((what, (time.perf_counter() - self.t0) * 1e6))

    def line(self) -> str:
        return " | ".join(f"{n} {t:.0f}" for n, t in self.rows)


def graphed(fn):
    """fn captured once in a CUDA graph (after a warm-up on a side stream); returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def graph_replay_ms(x, y, calls: int) -> float:
    """Per-call time of a CUDA graph holding the public API's forward + backward (issue 6 target)."""
    xs = x.clone().requires_grad_()

    def step():
        v = softdtw.soft_dtw(xs, y, 1.0)
        return torch.autograd.grad(v.sum(), xs)

    return wall_ms(graphed(step), calls)


#: The impl name of the tiny section's PyTorch-only row.
AUTOGRAD_FLOOR = "torch autograd floor"


def autograd_floor_step(x):
    """A forward + backward with nothing of softdtw in it: one clone, one multiply, a sum and the backward."""
    def fb():
        xc = x.clone().requires_grad_()
        (xc * 2).sum().backward()
    return fb


def tiny(quick: bool):
    rows = []
    x, y = data(1, 16, 16, 1)
    calls = 200 if quick else 1000
    for label, env, memory in (("softdtw", "1", "auto"), ("softdtw memory=store", "1", "store"),
                               ("softdtw memory=store SOFTDTW_CHECK_VALUES=0", "0", "store")):
        os.environ["SOFTDTW_CHECK_VALUES"] = env
        ms = wall_ms(api_step(x, y, "forward_backward", memory=memory), calls)
        rows.append(row(label, "forward_backward", 1, 16, 16, 1, memory, ms, note="wall clock per call"))
    os.environ["SOFTDTW_CHECK_VALUES"] = "1"
    ms = graph_replay_ms(x, y, calls)
    rows.append(row("softdtw CUDA-graph replay", "forward_backward", 1, 16, 16, 1, "store", ms,
                    note="public API forward + autograd.grad captured once; wall clock per replay"))
    gamma = torch.tensor(1.0, device="cuda")
    ms = wall_ms(backend_step(x, y, gamma, full_lengths(1, 16, 16), "store"), calls)
    rows.append(row("softdtw-backend", "forward_backward", 1, 16, 16, 1, "store", ms, note="wall clock per call"))
    # What PyTorch's autograd alone costs per call on this machine, for the API row to be read against: one
    # multiply forward, its backward through the engine's device thread (results/ab/h100_api_split.json).
    ms = wall_ms(autograd_floor_step(x), calls)
    rows.append(row(AUTOGRAD_FLOOR, "forward_backward", 1, 16, 16, 1, "-", ms,
                    note="wall clock per call: xc = x.clone().requires_grad_(); (xc * 2).sum().backward()"))
    # Pieces of the host overhead, for the notes.
    probes = {
        "torch.cuda.mem_get_info": lambda: torch.cuda.mem_get_info(),
        "x.clone()": lambda: x.clone(),
        "torch.isfinite(x).all() -> bool": lambda: bool(torch.isfinite(x).all()),
        "backend.forward none": lambda: backend.forward(x, y, gamma, "sqeuclidean", *full_lengths(1, 16, 16), None, "none"),
    }
    for name, fn in probes.items():
        print(json.dumps({"probe": name, "us": round(wall_ms(fn, calls) * 1e3, 2)}), flush=True)
    return rows


# --- (d) long sequences: store vs checkpoint (issue 4) ---------------------------------------------------

LONG_BATCHES = (1, 16)
LONG_LENGTHS = (8192, 65536)
#: The section stops starting new timings after this many seconds (rows left are reported as skipped).
LONG_SECTION_S = 120.0
#: Time budget of one row's timed calls after its warm-up (at least one timed call runs), ms.
LONG_ROW_MS = 2500.0
LONG_MAX_REPS = 5
#: A stored table is tried only if it takes at most this fraction of the free memory.
STORE_HEADROOM = 0.9


def store_bytes(B, N, M, D, dtype=torch.float32, spec=None) -> int:
    """Bytes of the table memory="store" keeps for the backward of a fused-cost problem.

    spec: a backend's ``saved_spec`` (default: the cuda backend's, which needs a GPU for its launch plan);
    where it cannot answer, one word of the data dtype per cell (S in the cuda backend's layout)."""
    spec = backend.saved_spec if spec is None else spec
    try:
        shape, sdtype = spec("fused", B, N, M, D, dtype, "store")
        return math.prod(shape) * sdtype.itemsize
    except Exception:  # no GPU to plan for (a dry run): the layout's size without padding
        return B * N * M * dtype.itemsize


def store_fits(need: int, free: int, headroom: float = STORE_HEADROOM) -> bool:
    """Whether a stored table of ``need`` bytes is worth trying with ``free`` bytes of GPU memory free."""
    return need <= headroom * free


def reps_for(one_ms: float, budget_ms: float = LONG_ROW_MS, max_reps: int = LONG_MAX_REPS) -> int:
    """Timed calls for a row whose first timed call took ``one_ms``: as many as fit in budget_ms, 1 to max_reps."""
    if one_ms <= 0:
        return max_reps
    return max(1, min(max_reps, int(budget_ms // one_ms)))


def long_plan(free: int, spec=None, batches=LONG_BATCHES, lengths=LONG_LENGTHS, D=1):
    """The rows of section "long" in the order they run: (B, N, impl, mode, memory, skip).

    skip is None, or why the row is not run: a stored table that cannot fit in ``free`` bytes, decided from
    the sizes (B = 16, N = M = 65536 would store ~275 GB) rather than by trying. The most expensive
    configuration (largest N and B) comes last, so a time limit cuts it first."""
    plan = []
    for N in lengths:
        for B in batches:
            need = store_bytes(B, N, N, D, spec=spec)
            for mode, memory in (("forward", "none"), ("forward_backward", "checkpoint"),
                                 ("forward_backward", "store")):
                for impl in ("softdtw-backend", "softdtw"):
                    skip = None
                    if memory == "store" and not store_fits(need, free):
                        skip = (f"skipped: storing S for B={B}, N=M={N} needs {need / 1e9:.1f} GB, "
                                f"{free / 1e9:.1f} GB free")
                    plan.append((B, N, impl, mode, memory, skip))
    return plan


def event_ms(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def timed_with_peak(fn, budget_ms: float = LONG_ROW_MS, max_reps: int = LONG_MAX_REPS):
    """(median ms, peak MB, timed calls) of a step that keeps nothing between calls.

    One warm-up call (compilation, allocator), then CUDA-event-timed calls, as many as :func:`reps_for`
    allows; the peak is CUDA memory above what was allocated before the timed calls, over all of them
    (one timed call of a seconds-long step serves for both time and memory)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = [event_ms(fn)]
    for _ in range(reps_for(times[0], budget_ms, max_reps) - 1):
        times.append(event_ms(fn))
    peak = (torch.cuda.max_memory_allocated() - base) / 1e6
    return float(np.median(times)), peak, len(times)


def long_section(quick: bool):
    """B in {1, 16}, N = M in {8192, 65536}, D = 1: forward, and forward + backward storing or checkpointing."""
    rows = []
    limit = LONG_SECTION_S / 2 if quick else LONG_SECTION_S
    max_reps = 2 if quick else LONG_MAX_REPS
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    gamma = torch.tensor(1.0, device="cuda")
    start = time.perf_counter()
    current, x, y = None, None, None
    for B, N, impl, mode, memory, skip in long_plan(free):
        if skip is None and time.perf_counter() - start > limit:
            skip = f"skipped: the section's time budget ({limit:.0f} s) was spent"
        if skip is not None:
            rows.append(row(impl, mode, B, N, N, 1, memory, None, note=skip))
            continue
        if current != (B, N):
            x = y = None
            torch.cuda.empty_cache()
            x, y = data(B, N, N, 1, seed=B + N)
            current = (B, N)
        if impl == "softdtw":
            fn = api_step(x, y, mode, memory=memory)
        else:
            fn = backend_step(x, y, gamma, full_lengths(B, N, N), memory)
        try:
            ms, peak, n = timed_with_peak(fn, max_reps=max_reps)
            rows.append(row(impl, mode, B, N, N, 1, memory, ms, peak,
                            note=None if n >= 3 else f"median of {n} timed call(s)"))
        except Exception as err:  # e.g. a backend that cannot checkpoint yet, or out of memory
            rows.append(row(impl, mode, B, N, N, 1, memory, None, note=failure_note(err)))
        del fn
        torch.cuda.empty_cache()
    return rows


# --- compile time ----------------------------------------------------------------------------------------

def compile_time():
    """NVRTC time of the two kernels a first soft_dtw + backward needs (fresh cache folder)."""
    before = dict(nvrtc.STATS)
    x, y = data(4, 100, 90, 2)
    xc = x.clone().requires_grad_()
    start = time.perf_counter()
    softdtw.soft_dtw(xc, y, 0.37).sum().backward()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    n = nvrtc.STATS["compiles"] - before["compiles"]
    secs = nvrtc.STATS["compile_seconds"] - before["compile_seconds"]
    print(json.dumps({"compile": {"first_call_s": round(first, 3), "nvrtc_compiles": n,
                                  "nvrtc_seconds": round(secs, 3)}}), flush=True)
    return {"first_call_s": round(first, 3), "nvrtc_compiles": n, "nvrtc_seconds": round(secs, 3)}


# --- report ------------------------------------------------------------------------------------------------

def git_sha() -> str:
    sha = os.environ.get("SOFTDTW_GIT_SHA")
    if sha:
        return sha
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"


#: Best peer forward+backward time (ms) per grid configuration (B, N, D), from research/peers.md
#: (H100, fp32, gamma = 1); the issue's target is 10x faster for N <= 1024.
PEER_BEST_MS = {
    (16, 128, 1): 1.42, (16, 128, 64): 1.58, (16, 512, 1): 3.19, (16, 512, 64): 3.46,
    (16, 1024, 1): 160.85, (16, 1024, 64): 178.60, (16, 2048, 1): 306.33,
    (16, 2048, 64): 273.84, (32, 128, 1): 1.28, (32, 128, 64): 1.61, (32, 512, 1): 3.44,
    (32, 512, 64): 3.49, (32, 1024, 1): 160.66, (32, 1024, 64): 186.57, (32, 2048, 1): 305.19,
    (32, 2048, 64): 278.01,
}


def _find(rows, impl, mode, B, N, D=1, memory=None, timed=True):
    """The first row of that configuration (memory None: any) with a time, or (timed=False) any such row."""
    for r in rows:
        if r["impl"] == impl and r["mode"] == mode and (r["B"], r["N"], r["D"]) == (B, N, D) \
                and (r["ms"] or not timed) and (memory is None or r["memory"] == memory):
            return r
    return None


def targets(report) -> list[str]:
    """The issue's targets against this run's rows (a short table for the top of the .md)."""
    rows = report["rows"]
    out = ["## Targets (issue 3)", "", "| target | measured | met |", "|---|---|---|"]
    for mode, goal in (("forward", 1000.0), ("forward_backward", 330.0)):
        r = _find(rows, "softdtw-backend", mode, 16384, 512)
        if r:
            api = _find(rows, "softdtw", mode, 16384, 512)
            extra = f" (public API {api['gcups']:.0f})" if api else ""
            out.append(f"| {mode} D=1, N=M=512, B=16384 >= {goal:.0f} GCUPS | {r['gcups']:.0f} GCUPS{extra} | "
                       f"{'yes' if r['gcups'] >= goal else 'no'} |")
    for (B, N, D), peer in sorted(PEER_BEST_MS.items()):
        if N > 1024:
            continue
        goal = peer / 10
        be = _find(rows, "softdtw-backend", "forward_backward", B, N, D, "store")
        api = _find(rows, "softdtw", "forward_backward", B, N, D, "auto")
        if not be:
            continue
        ckpt = [_find(rows, impl, "forward_backward", B, N, D, "checkpoint") for impl in ("softdtw-backend", "softdtw")]
        # 4 bytes per cell, plus input-sized buffers: x, y, their clones in the step and their gradients.
        mem_goal = 4 * B * N * N / 1e6 + 3 * 2 * B * N * D * 4 / 1e6

        def verdict(r):
            fast, small = r["ms"] <= goal, r["peak_mb"] <= mem_goal
            return "yes" if fast and small else "no (" + ", ".join(
                w for w, bad in (("time", not fast), ("memory", not small)) if bad) + ")"
        measured = (f"backend {be['ms']:.4g} ms / {be['peak_mb']:.1f} MB; API {api['ms']:.4g} ms / "
                    f"{api['peak_mb']:.1f} MB")
        met = f"backend {verdict(be)}; API {verdict(api)}"
        if all(ckpt):  # memory="checkpoint" (large D: the cost band by band)
            measured += (f"; checkpoint: backend {ckpt[0]['ms']:.4g} ms / {ckpt[0]['peak_mb']:.1f} MB, "
                         f"API {ckpt[1]['ms']:.4g} ms / {ckpt[1]['peak_mb']:.1f} MB")
            met += f"; checkpoint: backend {verdict(ckpt[0])}, API {verdict(ckpt[1])}"
        out.append(f"| B={B} N={N} D={D} fwd+bwd <= {goal:.3g} ms (best peer {peer} ms), peak <= {mem_goal:.1f} MB "
                   f"| {measured} | {met} |")
    r = _find(rows, "softdtw-backend", "forward_backward", 1, 16)
    a = _find(rows, "softdtw", "forward_backward", 1, 16)
    f = _find(rows, AUTOGRAD_FLOOR, "forward_backward", 1, 16)
    if r and a:
        floor = f"; PyTorch autograd alone (one multiply, sum, backward) {f['ms']:.3f} ms" if f else ""
        out.append(f"| tiny pair B=1 N=M=16 fwd+bwd <= 0.1 ms per call | backend {r['ms']:.3f} ms; API {a['ms']:.3f} ms"
                   f"{floor} | backend {'yes' if r['ms'] <= 0.1 else 'no'}, API {'yes' if a['ms'] <= 0.1 else 'no'} |")
    return out + [""] + targets_long(rows) + targets_graph(rows)


def targets_graph(rows) -> list[str]:
    """Issue 6's CUDA-graph target: a replay of the tiny pair's forward + backward <= 20 µs."""
    r = _find(rows, "softdtw CUDA-graph replay", "forward_backward", 1, 16)
    if not r:
        return []
    us = r["ms"] * 1e3
    return ["## Targets (issue 6)", "", "| target | measured | met |", "|---|---|---|",
            f"| CUDA-graph replay of the tiny pair's forward + backward (B=1, N=M=16, public API + autograd.grad) "
            f"<= 20 µs | {us:.1f} µs per replay | {'yes' if us <= 20 else 'no'} |", ""]


#: Smallest peak memory (MB) of the peers per grid configuration, research/peers.md (issue 4's target).
PEER_MIN_PEAK_MB = {(32, 2048, 64): 2086}
GiB = 2 ** 30


def _verdict(fast: bool, small: bool = True) -> str:
    if fast and small:
        return "yes"
    return "no (" + ", ".join(w for w, bad in (("time", not fast), ("memory", not small)) if bad) + ")"


def _shown(r, label: str, unit: str = "MB") -> str:
    """'label 12.3 ms / 45.6 MB', or the row's note when it has no time."""
    if r["ms"] is None:
        return f"{label}: {r.get('note', 'no time')}"
    peak = f"{r['peak_mb'] * 1e6 / GiB:.2f} GiB" if unit == "GiB" else f"{r['peak_mb']:.1f} MB"
    return f"{label} {r['ms']:.4g} ms / {peak}"


def targets_long(rows) -> list[str]:
    """Issue 4's targets: long pairs with checkpointing, forward throughput at N = 8192, and the B = 32,
    N = 2048, D = 64 grid point against the peers. Lines only for what this run measured."""
    lines = []
    # B = 1, N = M = 65536, D = 1 forward + backward: <= 100 ms and <= 2 GiB peak (storing S needs 16 GiB).
    got, met = [], []
    for label, impl in (("backend", "softdtw-backend"), ("API", "softdtw")):
        r = _find(rows, impl, "forward_backward", 1, 65536, memory="checkpoint", timed=False)
        if r:
            got.append(_shown(r, f"{label} checkpoint", "GiB"))
            ok = r["ms"] is not None
            met.append(f"{label} " + (_verdict(r["ms"] <= 100, r["peak_mb"] * 1e6 <= 2 * GiB) if ok else "no"))
    store = _find(rows, "softdtw", "forward_backward", 1, 65536, memory="store", timed=False)
    if store:
        got.append(_shown(store, "API store", "GiB"))
    if got:
        lines.append("| B=1 N=M=65536 D=1 fwd+bwd <= 100 ms, peak <= 2 GiB (storing S: 16 GiB) | "
                     + "; ".join(got) + " | " + ("; ".join(met) or "-") + " |")
    # B = 16, N = M = 8192, D = 1 forward: >= 500 GCUPS.
    r = _find(rows, "softdtw-backend", "forward", 16, 8192, memory="none", timed=False)
    if r:
        api = _find(rows, "softdtw", "forward", 16, 8192, memory="none")
        extra = f" (public API {api['gcups']:.0f})" if api else ""
        if r["ms"] is None:
            lines.append(f"| forward D=1, N=M=8192, B=16 >= 500 GCUPS | {_shown(r, 'backend')} | no |")
        else:
            lines.append(f"| forward D=1, N=M=8192, B=16 >= 500 GCUPS | {r['gcups']:.0f} GCUPS{extra} | "
                         f"{'yes' if r['gcups'] >= 500 else 'no'} |")
    # B = 32, N = M = 2048, D = 64 forward + backward: >= 100x faster than the best peer, <= 10 % of the
    # peers' smallest peak memory.
    key = (32, 2048, 64)
    goal_ms, goal_mb = PEER_BEST_MS[key] / 100, PEER_MIN_PEAK_MB[key] / 10
    got, met = [], []
    for label, impl, memory in (("API auto", "softdtw", "auto"), ("API checkpoint", "softdtw", "checkpoint"),
                                ("backend store", "softdtw-backend", "store"),
                                ("backend checkpoint", "softdtw-backend", "checkpoint")):
        r = _find(rows, impl, "forward_backward", *key, memory=memory, timed=False)
        if r:
            got.append(_shown(r, label))
            ok = r["ms"] is not None
            met.append(f"{label} " + (_verdict(r["ms"] <= goal_ms, r["peak_mb"] <= goal_mb) if ok else "no"))
    if got:
        lines.append(f"| B=32 N=M=2048 D=64 fwd+bwd <= {goal_ms:.3g} ms (best peer {PEER_BEST_MS[key]} ms / 100), "
                     f"peak <= {goal_mb:.1f} MB (peers' smallest {PEER_MIN_PEAK_MB[key]} MB / 10) | "
                     + "; ".join(got) + " | " + "; ".join(met) + " |")
    if not lines:
        return []
    return ["## Targets (issue 4)", "", "| target | measured | met |", "|---|---|---|"] + lines + [""]


def markdown(report) -> str:
    lines = [f"# softdtw cuda backend on {report['device']}", "",
             f"torch {report['torch']}, git {report['git_sha'][:12]}, fp32, gamma = 1, squared Euclidean. "
             f"GCUPS = B·N·M / time. NVRTC: {report['compile']}. `softdtw-backend` rows time the kernels "
             f"(backend functions), `softdtw` rows the public API with autograd as a user runs it (clone, "
             f"soft_dtw, sum, backward).", ""]
    lines += targets(report)
    lines += ["## All rows", "",
              "| impl | mode | B | N=M | D | memory | ms | GCUPS | peak MB | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        ms = "" if r["ms"] is None else f"{r['ms']:.4g}"
        gc = "" if r["gcups"] is None else f"{r['gcups']:.1f}"
        pk = "" if r["peak_mb"] is None else f"{r['peak_mb']:.1f}"
        lines.append(f"| {r['impl']} | {r['mode']} | {r['B']} | {r['N']} | {r['D']} | {r['memory']} | {ms} | "
                     f"{gc} | {pk} | {r.get('note', '')} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "h100.json"))
    parser.add_argument("--quick", action="store_true", help="smaller batches, fewer repetitions")
    parser.add_argument("--sections", default="compile,throughput,grid,tiny,long",
                        help="comma-separated: compile, throughput, sweep, grid, tiny, long")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from an existing --out JSON")
    args = parser.parse_args()
    if args.render:
        out = Path(args.out)
        out.with_suffix(".md").write_text(markdown(json.loads(out.read_text())))
        return
    sections = args.sections.split(",")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_sha": git_sha(),
              "compile": None, "rows": []}
    if "compile" in sections:
        report["compile"] = compile_time()
    if "throughput" in sections:
        report["rows"] += throughput(args.quick)
    if "sweep" in sections:
        report["rows"] += sweep(args.quick)
    if "grid" in sections:
        report["rows"] += grid(args.quick)
    if "tiny" in sections:
        report["rows"] += tiny(args.quick)
    if "long" in sections:
        report["rows"] += long_section(args.quick)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
