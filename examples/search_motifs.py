"""Finding a time-warped motif in a long series: subsequence DTW search against a sliding Euclidean window.

A heartbeat-like motif (64 steps) is planted 6 times in a noisy random walk, each copy stretched or squeezed
in time (0.7x to 1.8x its length) and scaled in amplitude. `softdtw.dtw_search` finds each copy with one
subsequence DP per query (open begin and open end: no window of fixed length is assumed) and z-normalised
steps; a sliding window of the query's length under the Euclidean distance, the usual baseline, misses the
copies whose speed differs. The script prints both lists of matches against the planted positions, with the
recall of each method, and saves a figure.

    python examples/search_motifs.py                      # a few seconds on a CPU (Numba compile included)
    python examples/search_motifs.py --length 200000 --out /tmp/motifs.png
    python examples/search_motifs.py --device cuda        # where the cuda backend has a search kernel
"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch

import softdtw

MOTIF = 64


def motif(n: int) -> np.ndarray:
    """The motif resampled to n steps: a small bump, a sharp spike, a dip and a slow wave (a heartbeat's
    P, QRS, S and T), so that its shape survives z-normalisation."""
    t = np.linspace(0.0, 1.0, n)
    bump = lambda c, w, a: a * np.exp(-0.5 * ((t - c) / w) ** 2)  # noqa: E731
    return bump(0.15, 0.04, 0.3) + bump(0.35, 0.015, 1.6) + bump(0.40, 0.02, -0.6) + bump(0.7, 0.07, 0.5)


def make_series(length: int, seed: int):
    """A random walk with noise and 6 planted copies of the motif: (series (length,), spans [(start, end)])."""
    rng = np.random.default_rng(seed)
    series = np.cumsum(0.03 * rng.normal(size=length)) + 0.05 * rng.normal(size=length)
    speeds = [0.7, 1.0, 1.8, 0.75, 1.5, 1.0]
    slots = np.linspace(0, length, len(speeds) + 1)[:-1].astype(int)
    spans = []
    for slot, speed in zip(slots, speeds):
        n = int(round(MOTIF * speed))
        start = int(slot + rng.integers(MOTIF, (length // len(speeds)) - 2 * MOTIF))
        series[start:start + n] += rng.uniform(0.8, 1.5) * motif(n)
        spans.append((start, start + n - 1))
    return series, spans


def euclidean_search(query: np.ndarray, series: np.ndarray, k: int, exclusion: int):
    """The k best non-overlapping windows of the query's length under the z-normalised Euclidean distance."""
    n = len(query)
    windows = np.lib.stride_tricks.sliding_window_view(series, n)
    z = (windows - windows.mean(1, keepdims=True)) / np.maximum(windows.std(1, keepdims=True), 1e-8)
    q = (query - query.mean()) / query.std()
    dist = ((z - q) ** 2).sum(1)
    found = []
    for _ in range(k):
        s = int(np.argmin(dist))
        if not np.isfinite(dist[s]):
            break
        found.append((s, s + n - 1))
        dist[max(0, s - n + 1 - exclusion):s + n + exclusion] = np.inf
    return found


def recall(found, spans, iou: float = 0.6) -> int:
    """How many planted copies a found match covers with intersection over union >= iou (a window much
    longer or shorter than the copy does not count)."""
    hit = 0
    for a, b in spans:
        for s, e in found:
            inter = min(b, e) - max(a, s) + 1
            if inter > 0 and inter / (max(b, e) - min(a, s) + 1) >= iou:
                hit += 1
                break
    return hit


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "search_motifs.png"),
                    help="path of the figure, or a folder for search_motifs.png (default: the temp directory)")
    ap.add_argument("--length", type=int, default=20000, help="series length (default 20000)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    series, spans = make_series(args.length, args.seed)
    query = motif(MOTIF)
    k = len(spans)
    start = time.perf_counter()
    result = softdtw.dtw_search(torch.tensor(query, device=args.device), torch.tensor(series, device=args.device),
                                k=k, znormalize=True)
    took = time.perf_counter() - start
    dtw_found = [(s, e) for s, e in zip(result.start.tolist(), result.end.tolist()) if e >= 0]
    euc_found = euclidean_search(query, series, k, exclusion=MOTIF // 2)

    print(f"{len(spans)} planted copies of a {MOTIF}-step motif in {args.length} steps; "
          f"dtw_search took {took:.2f} s on {args.device}")
    print(f"{'planted':>14s} {'DTW match':>14s} {'Euclidean':>14s}")
    by_start = lambda m: sorted(m)  # noqa: E731
    for p, d, e in zip(spans, by_start(dtw_found) + [None] * k, by_start(euc_found) + [None] * k):
        fmt = lambda s: "-" if s is None else f"{s[0]}-{s[1]}"  # noqa: E731
        print(f"{fmt(p):>14s} {fmt(d):>14s} {fmt(e):>14s}")
    print(f"recall (IoU >= 0.6): DTW {recall(dtw_found, spans)}/{len(spans)}, Euclidean {recall(euc_found, spans)}/{len(spans)}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure (pip install matplotlib)")
        return
    fig = plt.figure(figsize=(13, 5.6))
    grid = fig.add_gridspec(2, len(spans) + 1)
    ax = fig.add_subplot(grid[0, :len(spans)])
    ax.plot(series, lw=0.5, color="0.3")
    for (a, b) in spans:
        ax.axvspan(a, b, color="tab:green", alpha=0.4, lw=0)
    ax.set_title("the series; below, each planted copy (black bar) with the DTW match (green) and the "
                 "Euclidean window (red)", loc="left", fontsize=10)
    axq = fig.add_subplot(grid[0, len(spans)])
    axq.plot(query, color="k")
    axq.set_title("query", fontsize=10)
    for c, (a, b) in enumerate(spans):
        z = fig.add_subplot(grid[1, c])
        lo, hi = a - MOTIF, b + MOTIF
        z.plot(range(lo, hi), series[lo:hi], lw=0.8, color="0.3")
        z.axvspan(a, b, ymin=0.0, ymax=0.05, color="k")
        for found, color, y0 in ((dtw_found, "tab:green", 0.0), (euc_found, "tab:red", 0.92)):
            for s, e in found:
                if e >= lo and s <= hi:
                    z.axvspan(max(s, lo), min(e, hi), ymin=y0, ymax=y0 + 0.08 if y0 else 1.0,
                              color=color, alpha=0.25 if not y0 else 0.7, lw=0)
        z.set_title(f"{b - a + 1} steps", fontsize=9)
        z.set_yticks([])
    fig.tight_layout()
    out = os.path.join(args.out, "search_motifs.png") if os.path.isdir(args.out) else args.out
    fig.savefig(out, dpi=110)
    print(f"figure: {out}")


if __name__ == "__main__":
    main()
