"""CPU benchmark: soft-DTW barycenters, softdtw against tslearn 0.10, from the same start.

    PYTHONPATH=src python benchmarks/bench_barycenter_cpu.py [--out FILE.json] [--reps R] [--ucr DIR]
                                                             [--cases GunPoint,OSULeaf] [--quick | --smoke]

For each data set and gamma in {0.1, 1}, both libraries start from tslearn's own initialisation (the
Euclidean mean of the series) and run at most 50 iterations:

- tslearn: ``tslearn.barycenters.softdtw_barycenter(X, gamma, max_iter=50, init=mean)`` (scipy's
  L-BFGS-B on the flattened barycenter, tslearn's default tol=1e-3, one process);
- softdtw: ``softdtw.soft_dtw_barycenter(X, gamma, init=mean, max_iter=50)`` (its own L-BFGS with a
  strong-Wolfe line search; a given init turns the annealed warm start off), with its default
  stopping rule (scipy L-BFGS-B's with ftol = gtol = tol, default tol=1e-4), and the same with
  ``tol=1e-3``, tslearn's value (from the same start both then stop at the same iterate wherever
  the iterates coincide: equal objectives).

Both barycenters' objectives sum_p sdtw_gamma(z, x_p) are evaluated afterwards by one float64
function (tslearn.metrics.soft_dtw), so "objective" compares like with like. Each run also counts its
objective + gradient evaluations, which do not depend on the machine's load.

Data: the UCR archive's GunPoint (50 train series of length 150) and OSULeaf (200 of length 427),
univariate, read with :func:`softdtw.datasets.load_ucr` from ``--ucr DIR`` (``DIR/GunPoint/
GunPoint_TRAIN.tsv`` or ``.ts``) when given. Without it (the archive is not on the benchmark machine),
series of the same shapes are generated (:func:`ucr_like`): GunPoint-like, a plateau of random
onset and width per class with noise; OSULeaf-like, six classes of smooth random Fourier outlines;
every series time-warped at random and z-normalised, as the archive's. The JSON records which.

Timing: wall clock, tslearn and softdtw alternated ``reps`` times per case (so bursts of load from
other processes hit both alike), median kept; speedup = tslearn median / softdtw median.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _harness  # noqa: E402
import softdtw  # noqa: E402
import softdtw.barycenter as _bary  # noqa: E402

SHAPES = {"GunPoint": (50, 150, 2), "OSULeaf": (200, 427, 6)}
GAMMAS = (0.1, 1.0)
MAX_ITER = 50


def ucr_like(name: str, seed: int = 0, P: int | None = None) -> np.ndarray:
    """`(P, T, 1)` float64 series shaped like the UCR data set ``name``'s training split."""
    P0, T, K = SHAPES[name]
    P = P0 if P is None else P
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, T)
    out = []
    for p in range(P):
        k = p % K
        cls = np.random.default_rng(1000 + k)  # the class's template parameters
        warp = np.clip(t + 0.08 * rng.standard_normal() * np.sin(np.pi * t)
                       + 0.03 * rng.standard_normal() * np.sin(2 * np.pi * t), 0.0, 1.0)
        if name == "GunPoint":
            c = 0.3 + 0.15 * cls.random() + 0.05 * rng.standard_normal()
            width = 0.25 + 0.1 * cls.random()
            s = 1 / (1 + np.exp(-(warp - c) / 0.03)) - 1 / (1 + np.exp(-(warp - c - width) / 0.03))
            s = s * (1 + 0.2 * cls.random()) + (k == 1) * 0.2 * np.exp(-((warp - c) / 0.02) ** 2)
        else:
            freqs = cls.integers(1, 12, 6)
            amps = cls.standard_normal(6) / np.sqrt(freqs)
            phases = cls.random(6) * 2 * np.pi
            s = sum(a * np.sin(2 * np.pi * f * warp + q) for a, f, q in zip(amps, freqs, phases))
        s = s + 0.05 * rng.standard_normal(T)
        out.append((s - s.mean()) / s.std())
    return np.stack(out)[:, :, None]


def load(name: str, ucr: str | None):
    if ucr:
        for ext in ("tsv", "ts"):
            path = Path(ucr) / name / f"{name}_TRAIN.{ext}"
            if path.exists():
                X, _, lengths = softdtw.datasets.load_ucr(str(path), dtype=torch.float64)
                return X.numpy(), f"UCR {path.name}"
    return ucr_like(name), f"synthetic, shaped like UCR {name} (the archive is not on this machine)"


def objective(Z: np.ndarray, X: np.ndarray, gamma: float) -> float:
    from tslearn.metrics import soft_dtw
    return float(sum(soft_dtw(Z, x, gamma=gamma) for x in X))


class _Counter:
    """Counts the objective + gradient evaluations of both libraries (wrapping their inner functions)."""

    def __init__(self):
        import tslearn.barycenters.softdtw as ts
        self.n = 0
        self._ts, self._ts_f = ts, ts._acc_softdtw_func
        self._sd_f = _bary._direct_cpu

        def ts_f(*a, **k):
            self.n += 1
            return self._ts_f(*a, **k)

        def sd_direct(*a, **k):
            direct = self._sd_f(*a, **k)
            if direct is None:
                return None

            def counted(Z, g):
                self.n += 1
                return direct(Z, g)
            return counted
        ts._acc_softdtw_func = ts_f
        _bary._direct_cpu = sd_direct


def run_case(name, X, gamma, reps, counter):
    from tslearn.barycenters import softdtw_barycenter
    init = X.mean(axis=0)
    Xt, init_t = torch.from_numpy(X), torch.from_numpy(init)
    res = {}

    def ts():
        return softdtw_barycenter(X, gamma=gamma, max_iter=MAX_ITER, init=init)

    def ours(tol=None):
        kw = {} if tol is None else {"tol": tol}
        r = softdtw.soft_dtw_barycenter(Xt, gamma, init=init_t, max_iter=MAX_ITER, **kw)
        return r.barycenter.numpy(), r.n_iter

    impls = (("tslearn", ts), ("softdtw", ours), ("softdtw tol=1e-3", lambda: ours(1e-3)))
    times = {impl: [] for impl, _ in impls}
    for _ in range(reps):
        for impl, fn in impls:
            counter.n = 0
            start = time.perf_counter()
            out = fn()
            times[impl].append(time.perf_counter() - start)
            res[impl] = (out, counter.n)
    Zt = res["tslearn"][0]
    f0 = objective(init, X, gamma)
    ft = objective(Zt, X, gamma)
    rows = [{"data": name, "P": X.shape[0], "T": X.shape[1], "gamma": gamma, "impl": "tslearn",
             "s": round(median(times["tslearn"]), 3), "runs_s": [round(v, 3) for v in times["tslearn"]],
             "evals": res["tslearn"][1], "n_iter": None, "objective": round(ft, 4), "init_objective": round(f0, 4)}]
    for impl, _ in impls[1:]:
        (Z, n_iter), evals = res[impl]
        f = objective(Z, X, gamma)
        speed = median(times["tslearn"]) / median(times[impl])
        rows.append({"data": name, "P": X.shape[0], "T": X.shape[1], "gamma": gamma, "impl": impl,
                     "s": round(median(times[impl]), 3), "runs_s": [round(v, 3) for v in times[impl]],
                     "evals": evals, "n_iter": n_iter, "objective": round(f, 4), "init_objective": round(f0, 4),
                     "speedup_vs_tslearn": round(speed, 2), "objective_minus_tslearn": round(f - ft, 4),
                     "relative_gap": round((f - ft) / max(abs(ft), 1e-300), 5)})
    for r in rows:
        print(f"  {r['data']:<9} gamma={gamma:<4} {r['impl']:<17} {r['s']:9.3f} s  evals {r['evals']:3d}  "
              f"objective {r['objective']:.4f}", flush=True)
        if "speedup_vs_tslearn" in r:
            print(f"  -> speedup {r['speedup_vs_tslearn']:.2f}x, objective minus tslearn's "
                  f"{r['objective_minus_tslearn']:+.4f}", flush=True)
    return rows


def markdown(meta, rows):
    cols = ["data", "P", "T", "gamma", "impl", "s", "evals", "n_iter", "objective", "speedup_vs_tslearn",
            "objective_minus_tslearn", "relative_gap"]
    return "\n".join([
        "# CPU benchmark: soft-DTW barycenters, softdtw vs tslearn (same start)",
        "",
        f"{meta['device']}, {meta['threads']} Numba threads; torch {meta['torch']}, numba {meta['numba']}, "
        f"tslearn {meta['tslearn']}, git {meta['git_sha']}. Both start from the Euclidean mean, at most "
        f"{MAX_ITER} iterations (tslearn: scipy L-BFGS-B, its default tol=1e-3; softdtw: the same rule, "
        f"default tol=1e-4). "
        f"Objective: sum_p sdtw(z, x_p), both evaluated by tslearn.metrics.soft_dtw (float64); lower is "
        f"better. s: median wall seconds of {meta['reps']} alternated runs; evals: objective + gradient "
        "evaluations (load-independent).",
        "",
        "Data: " + "; ".join(f"{k}: {v}" for k, v in meta["data"].items()) + ".",
        "",
        _harness.markdown_table(rows, cols),
        "",
        meta.get("comment", ""),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON file (a .md next to it); default: a new file in ./")
    parser.add_argument("--reps", type=int, default=3, help="alternated runs per case (median kept)")
    parser.add_argument("--ucr", default=None, help="folder of the UCR archive (DIR/GunPoint/GunPoint_TRAIN.tsv)")
    parser.add_argument("--cases", default="GunPoint,OSULeaf")
    parser.add_argument("--gammas", default="0.1,1")
    parser.add_argument("--quick", action="store_true", help="1 run per case instead of --reps")
    parser.add_argument("--smoke", action="store_true", help="10 short series, 1 run: checks the script")
    parser.add_argument("--comment", default="")
    args = parser.parse_args(argv)
    import tslearn
    out = Path(args.out) if args.out else _harness.default_out("barycenter-cpu")
    counter = _Counter()
    meta = {"device": _harness.cpu_name(), "torch": torch.__version__, "numba": numba.__version__,
            "tslearn": tslearn.__version__, "git_sha": _harness.git_sha(), "threads": numba.get_num_threads(),
            "reps": 1 if args.smoke or args.quick else args.reps, "data": {}, "comment": args.comment}
    rows = []
    for name in args.cases.split(","):
        if args.smoke:
            X, what = ucr_like(name, P=10)[:, :40], "synthetic smoke"
        else:
            X, what = load(name, args.ucr)
        meta["data"][name] = what
        # warm-up (compilation of both libraries' kernels) outside the timings
        softdtw.soft_dtw_barycenter(torch.from_numpy(X[:2, :20]), 1.0, init=torch.from_numpy(X[0, :20]), max_iter=2)
        from tslearn.barycenters import softdtw_barycenter
        softdtw_barycenter(X[:2, :20], gamma=1.0, max_iter=2)
        for gamma in (float(g) for g in args.gammas.split(",")):
            rows += run_case(name, X, gamma, meta["reps"], counter)
    md = markdown(meta, rows)
    print()
    print(md)
    _harness.write_results(out, meta, rows, md)
    print(f"\nwrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
