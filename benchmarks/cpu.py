"""CPU benchmark: the cpu (Numba) backend against tslearn 0.10, side by side in one run.

    PYTHONPATH=src python benchmarks/cpu.py [--out benchmarks/results/cpu.json] [--quick]

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

import tslearn  # noqa: E402
from tslearn.metrics import SoftDTWLossPyTorch, cdist_soft_dtw  # noqa: E402

GAMMA = 1.0


def _row(impl, mode, B, N, M, D, dtype, ms, threads, note=None):
    r = {"impl": impl, "mode": mode, "B": B, "N": N, "M": M, "D": D, "dtype": dtype, "gamma": GAMMA,
         "threads": threads, "ms": round(ms, 4), "ns_per_cell": round(ms * 1e6 / (B * N * M), 3)}
    if note:
        r["note"] = note
    return r


def _with_ratios(rows):
    """ratio_vs_tslearn against the fastest tslearn row of the same section (mode)."""
    best = {}
    for r in rows:
        if r["impl"].startswith("tslearn"):
            best[r["mode"]] = min(best.get(r["mode"], float("inf")), r["ms"])
    for r in rows:
        r["ratio_vs_tslearn"] = round(best[r["mode"]] / r["ms"], 2) if r["mode"] in best else None
    return rows


def loss_section(reps, threads):
    """(a): forward + backward of the per-pair loss, summed."""
    B, N, M, D = 64, 128, 128, 4
    mode = "loss_forward_backward"
    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(B, N, D, dtype=torch.float64, generator=g)
    y64 = torch.randn(B, M, D, dtype=torch.float64, generator=g)
    ts_loss = SoftDTWLossPyTorch(gamma=GAMMA)

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
        fns[f"tslearn {name}"] = user_step(ts_loss, x, y)
        meta[f"tslearn {name}"] = ("tslearn SoftDTWLossPyTorch", name)
        fns[f"api {name}"] = user_step(lambda a, b: softdtw.soft_dtw(a, b, GAMMA), x, y)
        meta[f"api {name}"] = ("softdtw.soft_dtw (cpu backend)", name)
        fns[f"backend {name}"] = backend_step(x, y)
        meta[f"backend {name}"] = ("softdtw backends.cpu forward+backward", name)
    times = _harness.interleaved_median_ms(fns, reps)
    rows = [_row(meta[k][0], mode, B, N, M, D, meta[k][1], ms, threads) for k, ms in times.items()]
    numba.set_num_threads(1)
    try:
        single = {k: fns[k] for k in fns if k.startswith("backend")}
        for k, ms in _harness.interleaved_median_ms(single, reps).items():
            rows.append(_row(meta[k][0], mode, B, N, M, D, meta[k][1], ms, 1))
    finally:
        numba.set_num_threads(threads)
    return rows


def matrix_section(reps, threads):
    """(b): the 100 x 100 matrix between two sets of 100 series."""
    P = Q = 100
    N = M = 128
    D = 1
    mode = "matrix_100x100"
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

    # Same matrix from both libraries (checked once, outside the timings).
    expected = cdist_soft_dtw(X, Y, gamma=GAMMA)
    got = ours(torch.float64)().numpy()
    assert np.abs(got - expected).max() <= 1e-9 * np.abs(expected).max(), "matrices differ"

    fns = {
        "tslearn": lambda: cdist_soft_dtw(X, Y, gamma=GAMMA),
        "tslearn n_jobs=-1": lambda: cdist_soft_dtw(X, Y, gamma=GAMMA, n_jobs=-1),
        "float32": ours(torch.float32),
        "float64": ours(torch.float64),
    }
    meta = {
        "tslearn": ("tslearn cdist_soft_dtw", "float64", "n_jobs=None (one process)"),
        "tslearn n_jobs=-1": ("tslearn cdist_soft_dtw", "float64", "n_jobs=-1 (joblib, all cores)"),
        "float32": ("softdtw backends.cpu forward(memory='none')", "float32", None),
        "float64": ("softdtw backends.cpu forward(memory='none')", "float64", None),
    }
    times = _harness.interleaved_median_ms(fns, reps)
    rows = [_row(meta[k][0], mode, P * Q, N, M, D, meta[k][1], ms, threads, meta[k][2])
            for k, ms in times.items()]
    numba.set_num_threads(1)
    try:
        single = {k: fns[k] for k in ("float32", "float64")}
        for k, ms in _harness.interleaved_median_ms(single, reps).items():
            rows.append(_row(meta[k][0], mode, P * Q, N, M, D, meta[k][1], ms, 1))
    finally:
        numba.set_num_threads(threads)
    return rows


def markdown(meta, rows):
    columns = ["impl", "mode", "dtype", "threads", "B", "N", "D", "ms", "ns_per_cell", "ratio_vs_tslearn",
               "note"]
    return "\n".join([
        "# CPU benchmark: softdtw cpu backend vs tslearn",
        "",
        f"{meta['device']}; torch {meta['torch']}, numba {meta['numba']}, tslearn {meta['tslearn']}, "
        f"git {meta['git_sha']}. gamma = {GAMMA}, squared Euclidean. Median of {meta['reps']} "
        "alternated repetitions after warm-up (compilation excluded). ns_per_cell = time / (B·N·M); "
        "ratio_vs_tslearn = fastest tslearn time of the section / time (higher is better).",
        "",
        "- loss_forward_backward: B = 64 pairs, N = M = 128, D = 4; value per pair, `.sum().backward()`.",
        "- matrix_100x100: 100 x 100 series of length 128, D = 1 (10,000 pairs, B = pairs).",
        "",
        _harness.markdown_table(rows, columns),
        "",
        meta.get("comment", ""),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(_harness.ROOT / "benchmarks" / "results" / "cpu.json"),
                        help="JSON file to write (a .md table is written next to it)")
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 9")
    parser.add_argument("--comment", default="", help="a note for the .md (e.g. about machine load)")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the .md from the JSON at --out (no measurement)")
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads(Path(args.out).read_text())
        rows = data.pop("rows")
        Path(args.out).with_suffix(".md").write_text(markdown(data, rows).rstrip() + "\n")
        return
    reps = 3 if args.quick else 9
    threads = numba.get_num_threads()
    meta = {"device": _harness.cpu_name(), "torch": torch.__version__, "numba": numba.__version__,
            "tslearn": tslearn.__version__, "git_sha": _harness.git_sha(), "threads": threads,
            "reps": reps, "comment": args.comment}
    rows = _with_ratios(loss_section(reps, threads) + matrix_section(reps, threads))
    md = markdown(meta, rows)
    print(md)
    _harness.write_results(Path(args.out), meta, rows, md)
    print(f"\nwrote {args.out} and {Path(args.out).with_suffix('.md')}")


if __name__ == "__main__":
    main()
