"""CPU benchmark: the cpu (Numba) backend against tslearn 0.10, side by side in one run.

    PYTHONPATH=src python benchmarks/cpu.py [--out FILE.json] [--quick | --smoke]
    softdtw bench [--out FILE.json] [--quick | --smoke]           (the same, from an installed checkout)

(a) Loss, forward + backward: B = 64, N = M = 128, D = 4, gamma = 1, squared Euclidean.
    tslearn: ``SoftDTWLossPyTorch(gamma)(x, y).sum().backward()`` (it returns one value per pair).
    softdtw: the same step through the public API (``softdtw.soft_dtw(x, y, gamma).sum().backward()``)
    and, apart, the backend's own forward(memory="store") + backward.
(b) A 100 x 100 soft-DTW matrix of length-128 series, D = 1, gamma = 1.
    tslearn: ``cdist_soft_dtw(X, Y, gamma)``, by default (one process) and with n_jobs=-1.
    softdtw: ``backends.cpu.forward(memory="none")`` on the 10,000 pairs at once (X and Y expanded
    into pairs, the expansion included in the time).
Each section is also run on one thread (numba.set_num_threads(1)) for the softdtw kernels.

Timing: every implementation is warmed up (Numba compiles outside the timings), then the
implementations of a section run in alternation, ``reps`` times, and the median is kept; the
alternation makes load from other processes hit all of them alike. ns_per_cell = time / (B N M)
with B the number of pairs; ratio_vs_tslearn = (fastest tslearn time of the section) / time.

Output: a progress bar per section (stderr) and each row as it is measured, then the table. The
results go to ``--out`` (JSON, and a .md table next to it); by default a new
``softdtw-bench-cpu-<time>.json`` in the working directory. ``benchmarks/results/cpu.json`` (the
README's figures) is rewritten only when asked for by name. tslearn is optional: without it, its
rows are skipped (one line says so) and the matrix is checked against the reference backend.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _harness  # noqa: E402
import softdtw  # noqa: E402
from softdtw.backends import cpu as backend  # noqa: E402

try:
    import tslearn
    from tslearn.metrics import SoftDTWLossPyTorch, cdist_soft_dtw
except ImportError as e:  # optional: the comparison rows need it
    tslearn = None
    TSLEARN_MISSING = (f"tslearn is not available ({e}); its rows are skipped. Install it to compare: "
                       f"pip install tslearn")

GAMMA = 1.0
#: Section sizes: the published benchmark, and a tiny smoke run (a test / CI check of the script).
SIZES = {"full": dict(loss=(64, 128, 128, 4), matrix=(100, 100, 128, 1)),
         "smoke": dict(loss=(8, 16, 16, 2), matrix=(6, 5, 16, 1))}


def _row(impl, mode, B, N, M, D, dtype, ms, threads, note=None):
    r = {"impl": impl, "mode": mode, "B": B, "N": N, "M": M, "D": D, "dtype": dtype, "gamma": GAMMA,
         "threads": threads, "ms": round(ms, 4), "ns_per_cell": round(ms * 1e6 / (B * N * M), 3)}
    if note:
        r["note"] = note
    return r


def _show(row):
    """One line per measured row, as it comes."""
    print(f"  {row['impl']:<45} {row['dtype']:<8} {row['threads']} thr  {row['ms']:10.3f} ms  "
          f"{row['ns_per_cell']:8.3f} ns/cell", flush=True)
    return row


def _with_ratios(rows):
    """ratio_vs_tslearn against the fastest tslearn row of the same section (mode)."""
    best = {}
    for r in rows:
        if r["impl"].startswith("tslearn"):
            best[r["mode"]] = min(best.get(r["mode"], float("inf")), r["ms"])
    for r in rows:
        r["ratio_vs_tslearn"] = round(best[r["mode"]] / r["ms"], 2) if r["mode"] in best else None
    return rows


def _single_thread(fns, reps, threads, desc):
    numba.set_num_threads(1)
    try:
        return _harness.interleaved_median_ms(fns, reps, desc=desc)
    finally:
        numba.set_num_threads(threads)


def loss_section(reps, threads, sizes=SIZES["full"]):
    """(a): forward + backward of the per-pair loss, summed."""
    B, N, M, D = sizes["loss"]
    mode = "loss_forward_backward"
    print(f"(a) loss forward + backward, B = {B}, N = M = {N}, D = {D}", flush=True)
    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(B, N, D, dtype=torch.float64, generator=g)
    y64 = torch.randn(B, M, D, dtype=torch.float64, generator=g)

    def user_step(loss_fn, x, y):
        def step():
            xx = x.clone().requires_grad_()
            loss_fn(xx, y).sum().backward()
        return step

    def backend_step(x, y):
        gamma = torch.tensor(GAMMA, dtype=x.dtype)
        xl, yl = torch.full((B,), N), torch.full((B,), M)
        grad = torch.ones(B, dtype=x.dtype)

        def step():
            value, saved = backend.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store")
            backend.backward(grad, x, y, gamma, "sqeuclidean", xl, yl, None, value, saved, "store")
        return step

    fns, meta = {}, {}
    for dtype in (torch.float32, torch.float64):
        x, y = x64.to(dtype), y64.to(dtype)
        name = str(dtype).replace("torch.", "")
        if tslearn is not None:
            fns[f"tslearn {name}"] = user_step(SoftDTWLossPyTorch(gamma=GAMMA), x, y)
            meta[f"tslearn {name}"] = ("tslearn SoftDTWLossPyTorch", name)
        fns[f"api {name}"] = user_step(lambda a, b: softdtw.soft_dtw(a, b, GAMMA), x, y)
        meta[f"api {name}"] = ("softdtw.soft_dtw (cpu backend)", name)
        fns[f"backend {name}"] = backend_step(x, y)
        meta[f"backend {name}"] = ("softdtw backends.cpu forward+backward", name)
    times = _harness.interleaved_median_ms(fns, reps, desc="(a) loss")
    rows = [_show(_row(meta[k][0], mode, B, N, M, D, meta[k][1], ms, threads)) for k, ms in times.items()]
    single = {k: fns[k] for k in fns if k.startswith("backend")}
    for k, ms in _single_thread(single, reps, threads, "(a) loss, 1 thread").items():
        rows.append(_show(_row(meta[k][0], mode, B, N, M, D, meta[k][1], ms, 1)))
    return rows


def matrix_section(reps, threads, sizes=SIZES["full"]):
    """(b): the P x Q matrix between two sets of series."""
    P, Q, N, D = sizes["matrix"]
    M = N
    mode = f"matrix_{P}x{Q}"
    print(f"(b) soft-DTW matrix, {P} x {Q} series of length {N}, D = {D}", flush=True)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((P, N, D))
    Y = rng.standard_normal((Q, M, D))

    def ours(dtype):
        Xt, Yt = torch.from_numpy(X).to(dtype), torch.from_numpy(Y).to(dtype)
        gamma = torch.tensor(GAMMA, dtype=dtype)
        xl, yl = torch.full((P * Q,), N), torch.full((P * Q,), M)

        def run():
            x = Xt.repeat_interleave(Q, dim=0)  # pair (p, q) at p * Q + q
            y = Yt.repeat(P, 1, 1)
            value, _ = backend.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "none")
            return value.view(P, Q)
        return run

    # The matrix is checked once, outside the timings: against tslearn's, else (first rows) against
    # the float64 reference backend.
    got = ours(torch.float64)().numpy()
    if tslearn is not None:
        expected = cdist_soft_dtw(X, Y, gamma=GAMMA)
    else:
        rows_checked = min(P, 3)
        got = got[:rows_checked]
        xs = torch.from_numpy(X[:rows_checked]).repeat_interleave(Q, dim=0)
        ys = torch.from_numpy(Y).repeat(rows_checked, 1, 1)
        expected = softdtw.soft_dtw(xs, ys, GAMMA, backend="reference").view(rows_checked, Q).numpy()
    assert np.abs(got - expected).max() <= 1e-9 * np.abs(expected).max(), "matrices differ"

    fns = {"float32": ours(torch.float32), "float64": ours(torch.float64)}
    meta = {
        "float32": ("softdtw backends.cpu forward(memory='none')", "float32", None),
        "float64": ("softdtw backends.cpu forward(memory='none')", "float64", None),
    }
    if tslearn is not None:
        fns = {"tslearn": lambda: cdist_soft_dtw(X, Y, gamma=GAMMA),
               "tslearn n_jobs=-1": lambda: cdist_soft_dtw(X, Y, gamma=GAMMA, n_jobs=-1), **fns}
        meta["tslearn"] = ("tslearn cdist_soft_dtw", "float64", "n_jobs=None (one process)")
        meta["tslearn n_jobs=-1"] = ("tslearn cdist_soft_dtw", "float64", "n_jobs=-1 (joblib, all cores)")
    times = _harness.interleaved_median_ms(fns, reps, desc="(b) matrix")
    rows = [_show(_row(meta[k][0], mode, P * Q, N, M, D, meta[k][1], ms, threads, meta[k][2]))
            for k, ms in times.items()]
    single = {k: fns[k] for k in ("float32", "float64")}
    for k, ms in _single_thread(single, reps, threads, "(b) matrix, 1 thread").items():
        rows.append(_show(_row(meta[k][0], mode, P * Q, N, M, D, meta[k][1], ms, 1)))
    return rows


def markdown(meta, rows):
    columns = ["impl", "mode", "dtype", "threads", "B", "N", "D", "ms", "ns_per_cell", "ratio_vs_tslearn",
               "note"]
    loss, matrix = meta.get("sizes", SIZES["full"])["loss"], meta.get("sizes", SIZES["full"])["matrix"]
    return "\n".join([
        "# CPU benchmark: softdtw cpu backend vs tslearn",
        "",
        f"{meta['device']}; torch {meta['torch']}, numba {meta['numba']}, tslearn {meta['tslearn']}, "
        f"git {meta['git_sha']}. gamma = {GAMMA}, squared Euclidean. Median of {meta['reps']} "
        "alternated repetitions after warm-up (compilation excluded). ns_per_cell = time / (B·N·M); "
        "ratio_vs_tslearn = fastest tslearn time of the section / time (higher is better).",
        "",
        f"- loss_forward_backward: B = {loss[0]} pairs, N = M = {loss[1]}, D = {loss[3]}; value per pair, "
        "`.sum().backward()`.",
        f"- matrix_{matrix[0]}x{matrix[1]}: {matrix[0]} x {matrix[1]} series of length {matrix[2]}, D = "
        f"{matrix[3]} ({matrix[0] * matrix[1]:,} pairs, B = pairs).",
        "",
        _harness.markdown_table(rows, columns),
        "",
        meta.get("comment", ""),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None,
                        help="JSON file to write, a .md table next to it (default: a new "
                             "softdtw-bench-cpu-YYYYmmdd-HHMMSS.json in the working directory)")
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 9")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repetition: checks the script runs")
    parser.add_argument("--comment", default="", help="a note for the .md (e.g. about machine load)")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the .md from the JSON at --out (no measurement)")
    args = parser.parse_args(argv)
    if args.render:
        if args.out is None:
            parser.error("--render needs --out FILE.json (the results to render)")
        data = json.loads(Path(args.out).read_text())
        rows = data.pop("rows")
        Path(args.out).with_suffix(".md").write_text(markdown(data, rows).rstrip() + "\n")
        return
    out = Path(args.out) if args.out else _harness.default_out("cpu")
    sizes = SIZES["smoke" if args.smoke else "full"]
    reps = 1 if args.smoke else 3 if args.quick else 9
    threads = numba.get_num_threads()
    print(f"softdtw CPU benchmark on {_harness.cpu_name()}, {threads} Numba threads, {reps} repetitions; "
          f"results to {out}", flush=True)
    if tslearn is None:
        print(TSLEARN_MISSING, flush=True)
    meta = {"device": _harness.cpu_name(), "torch": torch.__version__, "numba": numba.__version__,
            "tslearn": tslearn.__version__ if tslearn is not None else "not installed",
            "git_sha": _harness.git_sha(), "threads": threads, "reps": reps, "comment": args.comment}
    if args.smoke:
        meta["sizes"] = sizes
    rows = _with_ratios(loss_section(reps, threads, sizes) + matrix_section(reps, threads, sizes))
    md = markdown(meta, rows)
    print()
    print(md)
    _harness.write_results(out, meta, rows, md)
    print(f"\nwrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
