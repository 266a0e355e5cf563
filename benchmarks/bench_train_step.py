"""The loss step as a user trains with it, beside the MSE step on the same tensors (issue 27, "measure first").

    PYTHONPATH=src python3 benchmarks/bench_train_step.py --out benchmarks/results/h100_train_step.json

One step = clone the inputs (requires_grad), the loss, ``.mean()``, ``.backward()``, synchronise: what a
training loop pays per loss call. Rows per shape:

- ``mse``: ``F.mse_loss(x, t)`` with t shaped like x: the floor of any loss step on this machine;
- ``mse_compile``: the same under ``torch.compile(fullgraph=True)``: what compiling costs any loss here;
- ``eager``: ``softdtw.soft_dtw(x, y, gamma).mean()``;
- ``eager_python``: the same with the C++ launcher off (``fastpath.set_enabled(False)``; trees that have it):
  the Python path;
- ``eager_nocheck``: ``eager`` with the value checks off (``SOFTDTW_CHECK_VALUES=0``): what the check costs;
- ``div`` / ``div_python`` (with ``--divergence``): ``softdtw.soft_dtw_divergence(x, y, gamma).mean()``, with the
  C++ launcher on / off;
- ``compile``: the soft-DTW loss under ``torch.compile(fullgraph=True)``;
- ``compile_ro``: ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA graphs);
- ``compile_python``: ``compile`` with the C++ launcher off, so the compiled graph's ops run their Python kernels
  (trees that have the launcher);
- ``mse_compile_ro``: the MSE step under ``mode="reduce-overhead"``: what CUDA graphs cost any loss here;
- ``lengths`` / ``lengths_cpu`` (with ``--lengths``): ``eager`` with per-pair lengths (x in [N/2, N], y in [M/2, M],
  drawn once per shape), given as int64 tensors on the GPU / on the CPU (as a DataLoader's collate gives them);
  ``lengths_python``: ``lengths`` with the C++ launcher off (the Python path); with ``--divergence`` too,
  ``div_lengths`` / ``div_lengths_cpu``: ``div`` with the GPU / CPU lengths (three terms share them).

Each row gives the median wall-clock ms over repetitions that run every row once in a random order (host
included: that is the point),
the ratio to the MSE step, and the CUDA kernels (and memcpy/memset) one step launches, counted with
torch.profiler (their names go to the JSON). ``<out>.profile.txt`` gets, per shape, the host time of each
piece of the eager step (perf_counter timers around the functions the step goes through, median µs per step,
inclusive: a piece's time contains its callees') and a cProfile of the eager and compiled steps (by own time).

``--src DIR`` imports softdtw from another tree (``DIR/softdtw``): the baseline, measured side by side with the
same script on the same machine.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _import_softdtw(src: Path):
    sys.path.insert(0, str(src))
    import softdtw

    return softdtw


from _harness import git_sha, markdown_table, write_results  # noqa: E402

# (name, B, N, M, D): the sizes people train at (issue 27's table).
SHAPES = [
    ("tiny pair", 1, 16, 16, 1),
    ("seed grid", 16, 128, 128, 1),
    ("seed grid", 32, 128, 128, 64),
    ("seed grid", 32, 512, 512, 1),
    ("forecasting", 64, 96, 96, 7),
    ("gestures", 128, 64, 64, 3),
    ("speech (mel 80)", 16, 400, 300, 80),
]
GAMMA = 0.1
softdtw = None  # set in main (--src)


def sdtw_loss(x, y):
    return softdtw.soft_dtw(x, y, GAMMA).mean()


def div_loss(x, y):
    return softdtw.soft_dtw_divergence(x, y, GAMMA).mean()


LENGTHS: dict = {}  # --lengths: this shape's per-pair lengths, "x" / "y" on the GPU, "x_cpu" / "y_cpu"


def lengths_loss(x, y):
    return softdtw.soft_dtw(x, y, GAMMA, x_lengths=LENGTHS["x"], y_lengths=LENGTHS["y"]).mean()


def lengths_cpu_loss(x, y):
    return softdtw.soft_dtw(x, y, GAMMA, x_lengths=LENGTHS["x_cpu"], y_lengths=LENGTHS["y_cpu"]).mean()


def div_lengths_loss(x, y):
    return softdtw.soft_dtw_divergence(x, y, GAMMA, x_lengths=LENGTHS["x"], y_lengths=LENGTHS["y"]).mean()


def div_lengths_cpu_loss(x, y):
    return softdtw.soft_dtw_divergence(x, y, GAMMA, x_lengths=LENGTHS["x_cpu"], y_lengths=LENGTHS["y_cpu"]).mean()


def mse_loss(x, t):
    return F.mse_loss(x, t)


def make_step(loss_fn, x, y, before=None):
    def step():
        if before is not None:
            before()
        xc = x.clone().requires_grad_(True)
        loss_fn(xc, y).backward()
        torch.cuda.synchronize()
    return step


def interleaved_ms(steps: dict, reps: int, warmup: int = 5) -> dict:
    """Median ms of each step, the steps run in a fresh random order every repetition (a fixed order lets
    whatever one row leaves behind, allocator or cache state, bias the row after it)."""
    for s in steps.values():
        for _ in range(warmup):
            s()
    times = {k: [] for k in steps}
    order = list(steps)
    rng = random.Random(0)
    for _ in range(reps):
        rng.shuffle(order)
        for k in order:
            t0 = time.perf_counter()
            steps[k]()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: median(v) for k, v in times.items()}


def kernels_per_step(step) -> list:
    """Names of the CUDA kernels (and memcpy/memset) one step launches."""
    step()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# --- host time per piece ----------------------------------------------------------------------------

_acc: dict = defaultdict(int)


def _wrap(owner, name, label, static=False):
    fn = getattr(owner, name, None)
    if fn is None:
        return

    def timed(*a, **k):
        t = time.perf_counter_ns()
        try:
            return fn(*a, **k)
        finally:
            _acc[label] += time.perf_counter_ns() - t

    setattr(owner, name, staticmethod(timed) if static else timed)


def _install_timers():
    """Timers around the pieces of an eager soft_dtw step (those the imported tree has)."""
    import importlib

    from softdtw import _checks, _ops, functional
    be = importlib.import_module("softdtw.backends.cuda")
    launch = importlib.import_module("softdtw.backends.cuda.launch")
    checks = importlib.import_module("softdtw.backends.cuda.checks")
    try:
        fp = importlib.import_module("softdtw.backends.cuda.fastpath")
    except ImportError:
        fp = None
    for mod, names in ((_checks, ("prepare", "run_checked", "settle", "finish_check")),
                       (functional, ("_run", "_finish")),
                       (_ops, ("resolve_memory", "fused_value")),
                       (be, ("forward", "backward", "saved_spec", "_run_forward", "_run_backward",
                             "_backward_outputs")),
                       (launch, ("launch",)),
                       (checks, ("start",)),
                       *(((fp, ("call",)),) if fp is not None else ())):
        for n in names:
            _wrap(mod, n, f"{mod.__name__.replace('softdtw.', '')}.{n}")
    for n in ("prepare", "run_checked"):  # functional holds its own references
        if hasattr(functional, n):
            setattr(functional, n, getattr(_checks, n))
    _wrap(_ops._Fused, "forward", "_Fused.forward", static=True)
    _wrap(_ops._Fused, "backward", "_Fused.backward", static=True)


def pieces(x, y, calls: int = 400) -> dict:
    """Median µs per eager step of each timed piece, and of the step's own segments."""
    rows = []
    for i in range(calls + 50):
        _acc.clear()
        t0 = time.perf_counter_ns()
        xc = x.clone().requires_grad_(True)
        t1 = time.perf_counter_ns()
        v = softdtw.soft_dtw(xc, y, GAMMA)
        t2 = time.perf_counter_ns()
        loss = v.mean()
        t3 = time.perf_counter_ns()
        loss.backward()
        t4 = time.perf_counter_ns()
        torch.cuda.synchronize()
        t5 = time.perf_counter_ns()
        if i >= 50:
            rows.append({"[step]": t5 - t0, "[clone]": t1 - t0, "[soft_dtw]": t2 - t1, "[mean]": t3 - t2,
                         "[backward]": t4 - t3, "[synchronize]": t5 - t4, **_acc})
    keys = sorted({k for r in rows for k in r})
    med = {k: round(median(r.get(k, 0) for r in rows) / 1e3, 1) for k in keys}
    return dict(sorted(med.items(), key=lambda kv: -kv[1]))


def cprofile(step, n: int = 100, top: int = 30) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        step()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main() -> None:
    global softdtw
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("train_step.json"))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="tree whose softdtw is measured")
    ap.add_argument("--shapes", type=str, default="", help="indices into SHAPES, e.g. 0,2,6 (default: all)")
    ap.add_argument("--shape", action="append", default=[], metavar="B,N,M,D",
                    help="a shape of its own (repeatable); without --shapes, only these run")
    ap.add_argument("--impls", type=str, default="", help="comma-separated subset of the rows")
    ap.add_argument("--no-profile", action="store_true", help="skip the per-piece timers and cProfiles")
    ap.add_argument("--divergence", action="store_true", help="also the soft_dtw_divergence loss (div, div_python)")
    ap.add_argument("--lengths", action="store_true",
                    help="also the loss with per-pair lengths (lengths, lengths_cpu, lengths_python)")
    args = ap.parse_args()
    softdtw = _import_softdtw(args.src.resolve())
    fastpath, built = None, {}
    try:
        from softdtw.backends.cuda import fastpath
    except ImportError:
        pass
    if fastpath is not None:
        t0 = time.perf_counter()
        try:
            fastpath.build()
        except RuntimeError:
            pass
        built = {"fastpath": fastpath.status(), "fastpath_build_s": round(time.perf_counter() - t0, 1)}
        print(built, flush=True)
    torch.manual_seed(0)
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else ([] if args.shape else SHAPES)
    shapes += [("custom", *(int(v) for v in s.split(","))) for s in args.shape]
    rows, profile_text, kernel_names = [], [], {}
    for name, B, N, M, D in shapes:
        x = torch.randn(B, N, D, device="cuda")
        y = torch.randn(B, M, D, device="cuda")
        t = torch.randn(B, N, D, device="cuda")
        torch._dynamo.reset()
        steps = {
            "mse": make_step(mse_loss, x, t),
            "mse_compile": make_step(torch.compile(mse_loss, fullgraph=True), x, t),
            "mse_compile_ro": make_step(torch.compile(mse_loss, mode="reduce-overhead", fullgraph=True), x, t,
                                        torch.compiler.cudagraph_mark_step_begin),
        }
        def config(fast=True, check="1"):
            def f():
                os.environ["SOFTDTW_CHECK_VALUES"] = check
                if fastpath is not None:
                    fastpath.set_enabled(fast)
            return f
        def graph_step(fast=True):
            def f():
                config(fast)()
                torch.compiler.cudagraph_mark_step_begin()
            return f
        compiled = torch.compile(sdtw_loss, fullgraph=True)
        steps["eager"] = make_step(sdtw_loss, x, y, config())
        steps["compile"] = make_step(compiled, x, y, config())
        steps["compile_ro"] = make_step(torch.compile(sdtw_loss, mode="reduce-overhead", fullgraph=True), x, y,
                                        graph_step())
        steps["eager_nocheck"] = make_step(sdtw_loss, x, y, config(check="0"))
        if fastpath is not None:
            steps["eager_python"] = make_step(sdtw_loss, x, y, config(fast=False))
            steps["compile_python"] = make_step(compiled, x, y, config(fast=False))
        if args.divergence:  # soft_dtw_divergence (SoftDTW(normalize=True)): three soft-DTW terms per step
            steps["div"] = make_step(div_loss, x, y, config())
            if fastpath is not None:
                steps["div_python"] = make_step(div_loss, x, y, config(fast=False))
        if args.lengths:
            gen = torch.Generator().manual_seed(B * 7919 + N)
            LENGTHS["x_cpu"] = torch.randint((N + 1) // 2, N + 1, (B,), generator=gen)
            LENGTHS["y_cpu"] = torch.randint((M + 1) // 2, M + 1, (B,), generator=gen)
            LENGTHS["x"], LENGTHS["y"] = LENGTHS["x_cpu"].cuda(), LENGTHS["y_cpu"].cuda()
            steps["lengths"] = make_step(lengths_loss, x, y, config())
            steps["lengths_cpu"] = make_step(lengths_cpu_loss, x, y, config())
            if fastpath is not None:
                steps["lengths_python"] = make_step(lengths_loss, x, y, config(fast=False))
            if args.divergence:
                steps["div_lengths"] = make_step(div_lengths_loss, x, y, config())
                steps["div_lengths_cpu"] = make_step(div_lengths_cpu_loss, x, y, config())
        if args.impls:
            steps = {k: v for k, v in steps.items() if k in args.impls.split(",") or k == "mse"}
        ms = interleaved_ms(steps, args.reps)
        for impl, s in steps.items():
            names = kernels_per_step(s)
            kernel_names[f"{name} B={B} N={N} M={M} D={D} {impl}"] = names
            rows.append({"shape": name, "impl": impl, "B": B, "N": N, "M": M, "D": D, "gamma": GAMMA,
                         "ms": round(ms[impl], 4), "x_mse": round(ms[impl] / ms["mse"], 2),
                         "kernels": len(names)})
            print(rows[-1], flush=True)
        config()()
        if not args.no_profile:
            text = [f"=== {name} B={B} N={N} M={M} D={D}"]
            if "eager" in steps:
                text.append("eager step, cProfile of 100 steps, by own time\n" + cprofile(steps["eager"]))
            if "compile" in steps:
                text.append("compile step, cProfile of 100 steps, by own time\n" + cprofile(steps["compile"]))
            profile_text.append("\n".join(text))
    from torch._dynamo.utils import counters
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "git_sha": git_sha(), "src": str(args.src),
            "what": "loss step (clone, loss, mean, backward, sync), median wall ms", "reps": args.reps,
            "cudagraph_skips": dict(counters["inductor"]).get("cudagraph_skips", 0),
            "kernel_names": kernel_names, **built}
    if not args.no_profile:
        x = torch.randn(1, 16, 1, device="cuda")
        y = torch.randn(1, 16, 1, device="cuda")
        for _ in range(50):
            make_step(sdtw_loss, x, y)()
        _install_timers()
        meta["pieces_tiny_us"] = pieces(x, y)
        B, N, M, D = 16, 128, 128, 1
        meta["pieces_B16_N128_us"] = pieces(torch.randn(B, N, D, device="cuda"), torch.randn(B, M, D, device="cuda"))
        print("pieces (tiny pair), median µs per step:", meta["pieces_tiny_us"], flush=True)
    md = (f"# Loss step vs MSE step ({meta['device']}, torch {meta['torch']}, {meta['git_sha']})\n\n"
          + markdown_table(rows, ["shape", "B", "N", "M", "D", "impl", "ms", "x_mse", "kernels"]))
    write_results(args.out, meta, rows, md)
    if profile_text:
        args.out.with_suffix(".profile.txt").write_text("\n".join(profile_text))
    print(md)


if __name__ == "__main__":
    main()
