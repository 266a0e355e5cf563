"""The ``softdtw`` command line (also ``python -m softdtw``): demo, align, search, cluster, bench.

Run ``softdtw COMMAND --help`` for the options of each command.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import torch

__all__ = ["main"]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

class CLIError(Exception):
    """An error to print as one line (no traceback) with exit status 2."""


def _gamma_arg(text: str):
    """--gamma: a number >= 0, or "auto" (softdtw.gamma_heuristic of the data)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        g = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or 'auto'; got {text!r}") from None
    if not np.isfinite(g) or g < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 or 'auto'; got {text!r}")
    return g


def _gamma_text(g: float, requested) -> str:
    return f"γ={g:.4g}{' (auto)' if requested == 'auto' else ''}"


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device {name}: CUDA is not available to this PyTorch "
                       f"(torch {torch.__version__}); use --device cpu or auto.")
    return dev


def _device_text(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)} (CUDA)"
    try:
        import numba
        threads = numba.get_num_threads()
    except ImportError:  # pragma: no cover
        threads = torch.get_num_threads()
    return f"CPU, {threads} thread{'s' if threads != 1 else ''}"


def _figures_available() -> Optional[str]:
    """None if matplotlib can be imported, else the message saying how to get it."""
    try:
        from .plotting import require_matplotlib
        require_matplotlib()
        return None
    except ImportError as e:
        return str(e)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


class _Table:
    """Rows printed as they complete, and once more aligned at the end."""

    def __init__(self, header: Sequence[str], stream=sys.stdout):
        self.header = list(header)
        self.rows: List[List[str]] = []
        self.stream = stream

    def add(self, *row: str) -> None:
        self.rows.append([str(c) for c in row])
        print("  " + " | ".join(self.rows[-1]), file=self.stream, flush=True)

    def render(self) -> str:
        widths = [max(len(r[i]) for r in [self.header] + self.rows) for i in range(len(self.header))]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
        sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(self.header), sep] + [line(r) for r in self.rows])


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------

def _cmd_demo(args) -> int:
    from sklearn.metrics import adjusted_rand_score
    from sklearn.model_selection import train_test_split

    from ._gamma import gamma_heuristic
    from .barycenter import soft_dtw_barycenter
    from .clustering import soft_dtw_kmeans
    from .datasets import CBF_CLASSES, make_cbf
    from .neighbors import SoftDTWKNeighborsClassifier

    dev = _device(args.device)
    progress = not args.no_progress
    n = args.n_train + args.n_test
    if args.n_train < 3 or args.n_test < 3:
        raise CLIError("--n-train and --n-test must each be at least 3 (one series per class).")
    X, y = make_cbf(n, args.length, seed=args.seed)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=args.n_test, random_state=args.seed,
                                              stratify=y.numpy())
    X_tr, X_te = X_tr.to(dev), X_te.to(dev)
    g = gamma_heuristic(X_tr) if args.gamma == "auto" else args.gamma
    print(f"softdtw demo: Cylinder-Bell-Funnel (embedded, seed {args.seed}), {len(X_tr)} train / {len(X_te)} "
          f"test series of length {args.length}, on {_device_text(dev)}, {_gamma_text(g, args.gamma)}")
    table = _Table(["task", "method", "result", "time"])
    t_all = time.perf_counter()

    # 1-NN classification under three dissimilarities.
    for label, kw in ((f"soft-DTW divergence, γ={g:.4g}", dict(gamma=g)),
                      ("DTW (γ=0)", dict(gamma=0.0)),
                      ("Euclidean", dict(metric="euclidean"))):
        t = time.perf_counter()
        clf = SoftDTWKNeighborsClassifier(1, progress=progress, device=dev, **kw).fit(X_tr, y_tr)
        acc = clf.score(X_te, y_te)
        _sync(dev)
        table.add("1-NN classification", label, f"accuracy {acc:.1%}", _fmt_time(time.perf_counter() - t))

    # Class barycenters: all classes in one batched problem.
    t = time.perf_counter()
    bary = soft_dtw_barycenter(X_tr, g, groups=y_tr.to(dev), n_groups=3, max_iter=args.barycenter_iter)
    _sync(dev)
    table.add("class barycenters", f"soft-DTW, γ={g:.4g}, L-BFGS",
              f"3 in one batch, {bary.n_iter} it, objective {float(bary.losses[0].sum()):.4g} -> "
              f"{float(bary.losses[-1].sum()):.4g}", _fmt_time(time.perf_counter() - t))

    # k-means on the test series.
    t = time.perf_counter()
    km = soft_dtw_kmeans(X_te, 3, g, random_state=args.seed, max_iter=args.kmeans_iter,
                         barycenter_max_iter=args.barycenter_iter // 2 or 1, progress=progress)
    _sync(dev)
    ari = adjusted_rand_score(y_te.numpy(), km.labels.numpy())
    table.add(f"k-means (K=3, {len(X_te)} series)", f"soft-DTW divergence, γ={g:.4g}, k-means++",
              f"ARI {ari:.3f}, {km.n_iter} rounds", _fmt_time(time.perf_counter() - t))
    total = time.perf_counter() - t_all

    print()
    print(table.render())
    print(f"\ntotal {_fmt_time(total)}")

    if args.no_figures:
        return 0
    missing = _figures_available()
    if missing is not None:
        print(f"figures skipped: {missing}")
        return 0
    from . import functional as F
    from .plotting import plot_alignment, plot_barycenters, plot_clusters

    out = Path(args.out)
    written = [
        _save(plot_barycenters(X_tr, y_tr, bary.barycenter, names=list(CBF_CLASSES),
                               title=f"soft-DTW barycenters of the CBF classes (γ={g:.4g})"), out / "barycenters.png"),
        _save(plot_clusters(X_te, km.labels, km.centers,
                            title=f"soft-DTW k-means on the test series (ARI {ari:.2f})"), out / "kmeans.png"),
    ]
    # An alignment between two series of the same class, for the picture.
    cls = int(y_te[0])
    same = (y_te == cls).nonzero().flatten()
    a, b = X_te[int(same[0])].cpu(), X_te[int(same[1 if len(same) > 1 else 0])].cpu()
    written.append(_save(plot_alignment(a, b, gamma=g, E=F.soft_dtw_alignment(a, b, g)), out / "alignment.png"))
    print("figures: " + ", ".join(str(p) for p in written))
    return 0


# ---------------------------------------------------------------------------------------------
# align
# ---------------------------------------------------------------------------------------------

def _split_index(spec: str):
    """'file.ts:3' -> ('file.ts', 3) when file.ts exists and 3 is an integer; else (spec, None)."""
    if ":" in spec:
        path, _, idx = spec.rpartition(":")
        if idx.lstrip("-").isdigit() and os.path.isfile(path):
            return path, int(idx)
    return spec, None


def _check_file(spec: str, path: str, what: str) -> None:
    """A clear error for a missing path or a directory (``what`` says which files are read)."""
    if os.path.isdir(path):
        raise CLIError(f"{spec}: is a directory; give one file: {what}.")
    if not os.path.isfile(path):
        raise CLIError(f"{spec}: no such file. Give {what}.")


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise CLIError(f"{path}: not a readable .npy array of numbers ({e}). Save one with numpy.save(path, "
                       f"array) from a float array.") from None


def _read_csv(path: str) -> np.ndarray:
    for skip in (0, 1):
        try:
            arr = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2)
            return arr
        except UnicodeDecodeError:
            raise CLIError(f"{path}: not a text file (not UTF-8); expected a CSV of numbers, a .npy array or a "
                           f"UCR .ts/.tsv file.") from None
        except ValueError:
            continue
    raise CLIError(f"{path}: could not read numbers from this CSV (comma-separated values, at most one header "
                   f"line expected).")


def _as_float(arr: np.ndarray, spec: str, dtype) -> np.ndarray:
    try:
        return np.asarray(arr, dtype=dtype)
    except (TypeError, ValueError):
        raise CLIError(f"{spec}: expected an array of numbers; got dtype {arr.dtype}.") from None


def _read_series(spec: str) -> np.ndarray:
    """One series `(T, D)` from a CSV / NPY file or one line of a UCR file (FILE:INDEX)."""
    from .datasets import load_ucr

    path, index = _split_index(spec)
    _check_file(spec, path, "a .csv or .npy series, or FILE:INDEX for series INDEX (0-based) of a UCR .ts/.tsv file")
    ext = os.path.splitext(path)[1].lower()
    if index is not None or ext in (".ts", ".tsv"):
        if index is None:
            raise CLIError(f"{path} holds many series; pick one with {path}:INDEX (0-based), e.g. {path}:0.")
        X, _, lengths = load_ucr(path)
        if not -len(X) <= index < len(X):
            raise CLIError(f"{spec}: index {index} out of range; the file has {len(X)} series (0 to {len(X) - 1}).")
        return X[index, : int(lengths[index])].double().numpy()
    if ext == ".npy":
        arr = _load_npy(path)
    else:
        arr = _read_csv(path)
        if arr.shape[0] == 1:  # a single row is one univariate series
            arr = arr.T
    arr = _as_float(arr, spec, np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.size == 0:
        raise CLIError(f"{spec}: expected one series of shape (T,) or (T, D) (rows = time steps); got shape "
                       f"{arr.shape}.")
    if not np.isfinite(arr).all():
        raise CLIError(f"{spec}: the series contains NaN or Inf values; remove or impute them first.")
    return arr


def _cmd_align(args) -> int:
    from . import functional as F
    from ._gamma import gamma_heuristic

    xa, ya = _read_series(args.a), _read_series(args.b)
    if xa.shape[1] != ya.shape[1]:
        raise CLIError(f"the series have different numbers of features: {args.a} has {xa.shape[1]}, {args.b} has "
                       f"{ya.shape[1]}; they must match.")
    if args.standardize:
        xa = (xa - xa.mean(0)) / np.where(xa.std(0) > 0, xa.std(0), 1)
        ya = (ya - ya.mean(0)) / np.where(ya.std(0) > 0, ya.std(0), 1)
    x, y = torch.from_numpy(xa), torch.from_numpy(ya)
    g = gamma_heuristic(x[None], y[None]) if args.gamma == "auto" else args.gamma
    sd = float(F.soft_dtw(x, y, g))
    div = float(F.soft_dtw_divergence(x, y, g))
    hd = float(F.dtw(x, y))
    path = F.dtw_path(x, y)
    print(f"x: {args.a} ({xa.shape[0]} steps, {xa.shape[1]} feature(s));  y: {args.b} ({ya.shape[0]} steps)")
    print(f"soft-DTW ({_gamma_text(g, args.gamma)}) = {sd:.6g}   divergence = {div:.6g}   DTW = {hd:.6g}   "
          f"DTW path length = {len(path)}")
    if args.path_csv:
        Path(args.path_csv).parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(args.path_csv, path.numpy(), fmt="%d", delimiter=",", header="i,j", comments="")
        print(f"path: {args.path_csv}")
    if args.no_figure:
        return 0
    missing = _figures_available()
    if missing is not None:
        print(f"figure skipped: {missing}")
        return 0
    from .plotting import plot_alignment

    E = F.soft_dtw_alignment(x, y, g)
    out = _save(plot_alignment(x, y, gamma=g, E=E, path=path), Path(args.out))
    print(f"figure: {out}")
    return 0


# ---------------------------------------------------------------------------------------------
# search
# ---------------------------------------------------------------------------------------------

def _plot_matches(series: np.ndarray, query: np.ndarray, result, path: Path) -> Path:
    """The series (one line per feature) with each match's span shaded and numbered, and the query."""
    from .plotting import require_matplotlib

    Figure = require_matplotlib()
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax, axq = fig.subplots(1, 2, width_ratios=[5, 1])
    ax.plot(series, lw=0.8)
    for r, (a, e) in enumerate(zip(result.start.tolist(), result.end.tolist())):
        if e < 0:
            continue
        ax.axvspan(a - 0.5, e + 0.5, color="C3", alpha=0.25, lw=0)
        ax.annotate(str(r + 1), (0.5 * (a + e), 1.0), xycoords=("data", "axes fraction"), ha="center",
                    va="bottom", fontsize=8, color="C3")
    ax.set_xlabel("series step")
    ax.set_title("matches, numbered best first", loc="left", fontsize=10, pad=14)
    axq.plot(query, lw=1.0)
    axq.set_title("query", fontsize=10)
    return _save(fig, path)


def _cmd_search(args) -> int:
    from .search import dtw_search

    qa, sa = _read_series(args.query), _read_series(args.series)
    if qa.shape[1] != sa.shape[1]:
        raise CLIError(f"the series have different numbers of features: {args.query} has {qa.shape[1]}, "
                       f"{args.series} has {sa.shape[1]}; they must match.")
    if args.plot:  # say so before the search, not after
        missing = _figures_available()
        if missing is not None:
            raise CLIError(f"--plot needs matplotlib: {missing}")
    dev = _device(args.device)
    t0 = time.perf_counter()
    result = dtw_search(torch.from_numpy(qa).to(dev), torch.from_numpy(sa).to(dev), k=args.k, gamma=args.gamma,
                        exclusion=args.exclusion, znormalize=args.znormalize, progress=False)
    result = type(result)(*(t.cpu() for t in result))
    took = time.perf_counter() - t0
    excl = qa.shape[0] // 2 if args.exclusion is None else args.exclusion
    kind = "DTW" if args.gamma == 0 else f"soft-DTW (γ={args.gamma:.4g})"
    print(f"query: {args.query} ({qa.shape[0]} steps, {qa.shape[1]} feature(s));  series: {args.series} "
          f"({sa.shape[0]} steps);  {kind}, exclusion {excl}{', z-normalised' if args.znormalize else ''};  "
          f"{_device_text(dev)}, {_fmt_time(took)}")
    import io
    table = _Table(["rank", "start", "end", "length", "value"], stream=io.StringIO())  # printed once, aligned
    found = 0
    for r, (a, e, v) in enumerate(zip(result.start.tolist(), result.end.tolist(), result.value.tolist())):
        if e < 0:
            continue
        found += 1
        table.add(str(r + 1), str(a), str(e), str(e - a + 1), f"{v:.6g}")
    print(table.render())
    if found < args.k:
        print(f"only {found} non-overlapping match(es) fit (asked for {args.k}).")
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        rows = [(a, e, v) for a, e, v in zip(result.start.tolist(), result.end.tolist(), result.value.tolist())
                if e >= 0]
        with open(args.csv, "w") as f:
            f.write("start,end,value\n")
            f.writelines(f"{a},{e},{v!r}\n" for a, e, v in rows)
        print(f"matches: {args.csv}")
    if args.plot:
        print(f"figure: {_plot_matches(sa, qa, result, Path(args.plot))}")
    return 0


# ---------------------------------------------------------------------------------------------
# cluster
# ---------------------------------------------------------------------------------------------

def _read_set(path: str):
    """(X (P, T, D), labels or None, lengths or None) from a UCR file, .npy or CSV (one series per row)."""
    from .datasets import load_ucr

    _check_file(path, path, "a UCR .ts/.tsv file, a .npy array (P, T) or (P, T, D), or a CSV with one "
                            "univariate series per row")
    ext = os.path.splitext(path)[1].lower()
    if ext in (".ts", ".tsv"):
        X, y, lengths = load_ucr(path)
        labels = None if bool((y < 0).all()) else y
        has_lengths = bool((lengths != X.shape[1]).any())
        return X, labels, lengths if has_lengths else None
    arr = _load_npy(path) if ext == ".npy" else _read_csv(path)
    arr = _as_float(arr, path, np.float32)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3:
        raise CLIError(f"{path}: expected an array of series (P, T) or (P, T, D); got shape {arr.shape}.")
    if np.isinf(arr).any():
        raise CLIError(f"{path}: contains Inf; soft-DTW needs finite values.")
    from ._checks import nan_padding

    try:  # trailing all-NaN steps are padding (tslearn's to_time_series_dataset): they give the lengths
        X, lengths = nan_padding(torch.from_numpy(arr), path, None, "lengths")
    except ValueError as e:
        raise CLIError(str(e)) from None
    return X, None, lengths


def _feature_list(spec: Optional[str], D: int) -> Optional[List[int]]:
    """--features "0,3,5" -> [0, 3, 5] (checked against D); None -> None (the figure picks)."""
    if spec is None:
        return None
    try:
        feats = [int(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        feats = []
    if not feats or any(not 0 <= f < D for f in feats):
        raise CLIError(f"--features {spec}: expected comma-separated feature indices in [0, {D}) (the series have "
                       f"{D} features), e.g. --features 0,1.")
    return feats


def _cmd_cluster(args) -> int:
    from sklearn.metrics import adjusted_rand_score

    from ._gamma import gamma_heuristic
    from .clustering import soft_dtw_kmeans

    X, labels, lengths = _read_set(args.file)
    P = X.shape[0]
    feats = _feature_list(args.features, X.shape[2])  # checked before the clustering runs
    if not 1 <= args.k <= P:
        raise CLIError(f"-k {args.k}: the number of clusters must be between 1 and the number of series ({P}).")
    dev = _device(args.device)
    Xd = X.to(dev)
    if args.standardize:
        mask = torch.ones(X.shape[:2], dtype=torch.bool) if lengths is None else \
            torch.arange(X.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        m = mask.to(dev).unsqueeze(-1).to(Xd.dtype)
        cnt = m.sum(1, keepdim=True)
        mean = (Xd * m).sum(1, keepdim=True) / cnt
        std = (((Xd - mean) * m) ** 2).sum(1, keepdim=True).div(cnt).sqrt().clamp_min(1e-12)
        Xd = (Xd - mean) / std * m
    print(f"clustering {P} series of up to {X.shape[1]} steps, {X.shape[2]} feature(s) from {args.file} into "
          f"{args.k} clusters on {_device_text(dev)}")
    t = time.perf_counter()
    g = gamma_heuristic(Xd, x_lengths=lengths) if args.gamma == "auto" else args.gamma
    if args.gamma == "auto":
        print(f"gamma auto: {g:.4g}")
    res = soft_dtw_kmeans(Xd, args.k, g, x_lengths=lengths, max_iter=args.max_iter, n_init=args.n_init,
                          random_state=args.seed, barycenter_max_iter=args.barycenter_iter,
                          progress=not args.no_progress)
    _sync(dev)
    took = time.perf_counter() - t
    sizes = torch.bincount(res.labels, minlength=args.k).tolist()
    print(f"inertia {res.inertia:.6g} after {res.n_iter} rounds ({'converged' if res.converged else 'max_iter reached'}), "
          f"cluster sizes {sizes}, centre lengths {res.center_lengths.tolist()}, {_fmt_time(took)}")
    if labels is not None:
        ari = adjusted_rand_score(labels.numpy(), res.labels.numpy())
        print(f"adjusted Rand index against the file's class labels: {ari:.4f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = [np.arange(P), res.labels.numpy()]
    header = "index,cluster"
    if labels is not None:
        cols.append(labels.numpy())
        header += ",label"
    np.savetxt(out / "labels.csv", np.stack(cols, 1), fmt="%d", delimiter=",", header=header, comments="")
    np.save(out / "centers.npy", res.centers.cpu().numpy())
    written = [out / "labels.csv", out / "centers.npy"]
    if not args.no_figure:
        missing = _figures_available()
        if missing is not None:
            print(f"figure skipped: {missing}")
        else:
            from .plotting import plot_clusters
            written.append(_save(plot_clusters(Xd, res.labels, res.centers, x_lengths=lengths,
                                               center_lengths=res.center_lengths, features=feats,
                                               title=f"soft-DTW k-means, K={args.k}, {_gamma_text(g, args.gamma)}"),
                                 out / "centers.png"))
    print("wrote: " + ", ".join(str(p) for p in written))
    return 0


# ---------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------

def _checkout_root() -> Optional[Path]:
    root = Path(__file__).resolve().parents[2]
    if (root / "benchmarks").is_dir() and (root / "pyproject.toml").is_file():
        return root
    return None


def _cmd_bench(args) -> int:
    root = _checkout_root()
    script_name = "gpu.py" if torch.cuda.is_available() else "cpu.py"
    if root is None:
        print("softdtw bench runs the scripts in benchmarks/ of a source checkout, and this softdtw is installed "
              "without them. Clone the repository, `pip install -e .` it, and run `softdtw bench` (or "
              f"`python benchmarks/{script_name}`) there.")
        return 1
    script = root / "benchmarks" / script_name
    if not script.is_file():
        print(f"{script} does not exist in this checkout yet; the benchmarks present are: "
              f"{', '.join(sorted(p.name for p in (root / 'benchmarks').glob('*.py'))) or 'none'}.")
        return 1
    extra = [a for a in args.args if a != "--"]
    kind = "gpu" if script_name == "gpu.py" else "cpu"
    # Results go where the user says, else to a new file in the working directory: never over the
    # tracked headline results in benchmarks/results/.
    out = Path(args.out) if args.out else Path(f"softdtw-bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out = out.resolve()
    print(f"running {script.relative_to(root)} ({kind.upper()}) {' '.join(extra)}".rstrip() +
          f"; results to {out} (and .md)", flush=True)
    env = dict(os.environ)
    src = str(root / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")  # rows appear as they are measured
    return subprocess.call([sys.executable, str(script), "--out", str(out), *extra], cwd=os.getcwd(), env=env)


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="softdtw",
        description="Soft dynamic time warping for PyTorch: demo, alignments, clustering and benchmarks.",
        epilog="Run 'softdtw COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"softdtw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="1-NN accuracy, barycenters and k-means on the embedded CBF data",
                       description="The main job on the embedded Cylinder-Bell-Funnel data: 1-NN accuracy with "
                                   "soft-DTW, hard DTW and Euclidean distance, class barycenters, k-means with its "
                                   "adjusted Rand index; prints a table and writes PNG figures (with matplotlib). "
                                   "Uses a GPU when present.")
    p.add_argument("--n-train", type=int, default=60, help="training series (default 60)")
    p.add_argument("--n-test", type=int, default=240, help="test series (default 240)")
    p.add_argument("--length", type=int, default=128, help="steps per series (default 128)")
    p.add_argument("--gamma", type=_gamma_arg, default=1.0,
                   help="soft-DTW smoothing, or 'auto' for softdtw.gamma_heuristic of the training series "
                        "(default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="data and k-means seed (default 0)")
    p.add_argument("--barycenter-iter", type=int, default=30, help="L-BFGS iterations for barycenters (default 30)")
    p.add_argument("--kmeans-iter", type=int, default=10, help="k-means rounds (default 10)")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda or cuda:N")
    p.add_argument("--out", default="softdtw-demo", help="directory for the figures (default ./softdtw-demo)")
    p.add_argument("--no-figures", action="store_true", help="do not write figures")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("align", help="align two series: values, DTW path and an alignment heatmap",
                       description="Soft-DTW, divergence and DTW between two series, their DTW path, and a PNG of the "
                                   "expected alignment matrix with the path. A series is a CSV file (rows = time "
                                   "steps, columns = features; a single row is a univariate series), a .npy array "
                                   "(T,) or (T, D), or FILE:INDEX for series INDEX (0-based) of a UCR .ts/.tsv file.")
    p.add_argument("a", help="first series (rows of the matrix)")
    p.add_argument("b", help="second series (columns)")
    p.add_argument("--gamma", type=_gamma_arg, default="auto",
                   help="soft-DTW smoothing, or 'auto' (default): a tenth of the pair's DTW cost per step "
                        "(softdtw.gamma_heuristic), so soft-DTW stays within 11%% of DTW")
    p.add_argument("--standardize", action="store_true", help="z-normalise each series (per feature) first")
    p.add_argument("--out", default="alignment.png", help="PNG to write (default alignment.png)")
    p.add_argument("--path-csv", default=None, help="also write the DTW path as CSV (i,j)")
    p.add_argument("--no-figure", action="store_true", help="do not write the PNG")
    p.set_defaults(func=_cmd_align)

    p = sub.add_parser("search", help="the k best DTW matches of a query inside a long series (subsequence DTW)",
                       description="Find the k best non-overlapping matches of QUERY inside SERIES by subsequence "
                                   "(soft-)DTW: one DP over the whole series, any start and end. Files: .csv, .npy, "
                                   "or FILE:INDEX for one series of a UCR .ts/.tsv file.")
    p.add_argument("query", help="the short series to look for")
    p.add_argument("series", help="the long series to search")
    p.add_argument("-k", "--k", type=int, default=3, help="matches to report (default 3)")
    p.add_argument("--gamma", type=float, default=0.0, help="0 for DTW (default), > 0 for soft-DTW")
    p.add_argument("--exclusion", type=int, default=None,
                   help="exclusion zone in steps around each match's end (default: half the query's length)")
    p.add_argument("--znormalize", action="store_true",
                   help="z-normalise the query, and the series with running statistics over the query's length")
    p.add_argument("--csv", default=None, help="also write the matches as CSV (start,end,value)")
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of the series with the matches shaded")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda or cuda:N")
    p.set_defaults(func=_cmd_search)

    p = sub.add_parser("cluster", help="soft-DTW k-means of a file of series: labels CSV and a PNG of the centres",
                       description="k-means under the soft-DTW divergence (k-means++ seeding, batched barycenter "
                                   "updates). FILE is a UCR/UEA .ts or .tsv file (unequal lengths allowed; the ARI "
                                   "against its labels is printed), a .npy array (P, T) or (P, T, D) (NaN-padded "
                                   "for unequal lengths), or a CSV with one univariate series per row. Writes "
                                   "labels.csv, centers.npy (each centre has its cluster's median member length, "
                                   "NaN-padded to the longest centre) and centers.png.")
    p.add_argument("file", help="the series to cluster")
    p.add_argument("-k", "--k", type=int, required=True, help="number of clusters")
    p.add_argument("--gamma", type=_gamma_arg, default=1.0,
                   help="soft-DTW smoothing, or 'auto' for softdtw.gamma_heuristic of the series (default 1.0)")
    p.add_argument("--max-iter", type=int, default=20, help="k-means rounds (default 20)")
    p.add_argument("--barycenter-iter", type=int, default=20, help="L-BFGS iterations per update (default 20)")
    p.add_argument("--n-init", type=int, default=1, help="restarts; the lowest inertia wins (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--standardize", action="store_true", help="z-normalise each series (per feature) first")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda or cuda:N")
    p.add_argument("--out", default="softdtw-cluster", help="output directory (default ./softdtw-cluster)")
    p.add_argument("--no-figure", action="store_true", help="do not write centers.png")
    p.add_argument("--features", default=None, metavar="I,J,...",
                   help="features to draw in centers.png, one panel each (default: all up to 4, else a heatmap "
                        "of each centre)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_cluster)

    p = sub.add_parser("bench", help="run the benchmark for this device (benchmarks/gpu.py or cpu.py)",
                       description="Runs benchmarks/gpu.py when CUDA is available, else benchmarks/cpu.py, from the "
                                   "source checkout this softdtw was installed from, printing each row as it is "
                                   "measured; further arguments (e.g. --quick, or --smoke on the CPU) are passed "
                                   "to the script.")
    p.add_argument("--out", default=None,
                   help="JSON file for the results, a .md table next to it (default: a new "
                        "softdtw-bench-cpu|gpu-YYYYmmdd-HHMMSS.json in the working directory)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark script")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``softdtw`` console script; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if getattr(args, "command", None) != "bench":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.args = list(extra) + list(args.args)  # options for the benchmark script pass through
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CLIError as e:
        print(f"softdtw {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, ImportError) as e:
        print(f"softdtw {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
