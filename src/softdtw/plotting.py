"""Figures for soft-DTW results (matplotlib, the optional ``plot`` extra, imported on first use).

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot, so it works
headless (``fig.savefig("out.png")``) and in notebooks alike; nothing is shown or saved implicitly.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

__all__ = ["plot_alignment", "plot_barycenters", "plot_clusters", "require_matplotlib", "MISSING_MATPLOTLIB"]

MISSING_MATPLOTLIB = (
    "softdtw's figures need matplotlib, which is not installed. Install the plot extra: "
    'pip install "softdtw[plot]"  (or: pip install matplotlib).'
)


def require_matplotlib():
    """Import and return matplotlib's Figure class, or raise ImportError saying how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(MISSING_MATPLOTLIB) from None
    return Figure


def _np(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().to("cpu", torch.float64).numpy()
    return np.asarray(t, dtype=np.float64)


def _as_2d(series, name: str) -> np.ndarray:
    a = _np(series)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"{name} must be one series of shape (T, D) or (T,); got shape {a.shape}.")
    return a


def plot_alignment(x, y, gamma: float = 1.0, *, E=None, path=None, title: Optional[str] = None,
                   cost="sqeuclidean", figsize=(6.4, 6.4)):
    """The soft alignment matrix of two series, with the optimal hard-DTW path on top.

    Args:
        x: `(N, D)` or `(N,)` series (rows of the matrix, drawn on the left).
        y: `(M, D)` or `(M,)` series (columns, drawn on top).
        gamma: smoothing of the expected alignment E (ignored when E is given).
        E: optional precomputed `(N, M)` alignment (default: :func:`softdtw.soft_dtw_alignment`).
        path: optional `(L, 2)` hard path (default: :func:`softdtw.dtw_path`); False to omit it.
        title: figure title (default: the soft-DTW and DTW values).
        cost: ground cost used for E and the path.

    Returns:
        matplotlib Figure.
    """
    Figure = require_matplotlib()
    from . import functional as F

    xa, ya = _as_2d(x, "x"), _as_2d(y, "y")
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"x and y must have the same number of features; got {xa.shape} and {ya.shape}.")
    xt, yt = torch.from_numpy(xa), torch.from_numpy(ya)
    if E is None:
        E = F.soft_dtw_alignment(xt, yt, gamma, cost=cost)
    E = _np(E)
    if path is None:
        path = F.dtw_path(xt, yt, cost=cost)
    if title is None:
        sd = float(F.soft_dtw(xt, yt, gamma, cost=cost))
        hd = float(F.dtw(xt, yt, cost=cost))
        title = f"soft-DTW alignment (γ={gamma:g}): sdtw = {sd:.4g}, DTW = {hd:.4g}"
    fig = Figure(figsize=figsize, layout="constrained")
    gs = fig.add_gridspec(2, 2, width_ratios=(1, 4), height_ratios=(1, 4))
    ax_y = fig.add_subplot(gs[0, 1])
    ax_x = fig.add_subplot(gs[1, 0])
    ax = fig.add_subplot(gs[1, 1], sharex=ax_y, sharey=ax_x)
    N, M = E.shape
    im = ax.imshow(E, origin="upper", aspect="auto", cmap="viridis", vmin=0, vmax=max(float(E.max()), 1e-12),
                   extent=(-0.5, M - 0.5, N - 0.5, -0.5), interpolation="nearest")
    if path is not False and path is not None:
        p = _np(path)
        ax.plot(p[:, 1], p[:, 0], color="white", lw=1.2, ls="--", label="DTW path")
        ax.legend(loc="lower left", fontsize="small", framealpha=0.6)
    ax.set_xlabel("step of y")
    ax.tick_params(labelleft=False)
    fig.colorbar(im, ax=ax, shrink=0.8, label="expected alignment E")
    for d in range(ya.shape[1]):
        ax_y.plot(np.arange(M), ya[:, d], lw=1)
    ax_y.set_ylabel("y")
    ax_y.tick_params(labelbottom=False)
    for d in range(xa.shape[1]):
        ax_x.plot(xa[:, d], np.arange(N), lw=1)
    ax_x.set_ylabel("step of x")
    ax_x.set_xlabel("x")
    ax_x.invert_xaxis()
    fig.suptitle(title, fontsize="medium")
    return fig


def plot_barycenters(X, labels, barycenters, *, x_lengths=None, names: Optional[Sequence[str]] = None,
                     title: Optional[str] = "soft-DTW barycenters", max_members: int = 50,
                     figsize=None):
    """Each barycenter (bold) over the series it averages (thin, grey), one panel per group.

    Args:
        X: `(P, T, D)` (or `(P, T)`) series.
        labels: `(P,)` int group of each series, in [0, K).
        barycenters: `(K, L, D)` (or `(K, L)`) barycenters.
        x_lengths: optional `(P,)` valid lengths of the series of X.
        names: optional K panel titles (default "group k").
        title: figure title.
        max_members: at most this many member series are drawn per panel.

    Returns:
        matplotlib Figure.
    """
    Figure = require_matplotlib()
    Xa = _np(X)
    if Xa.ndim == 2:
        Xa = Xa[..., None]
    Za = _np(barycenters)
    if Za.ndim == 2:
        Za = Za[..., None]
    lab = _np(labels).astype(np.int64).reshape(-1)
    if len(lab) != Xa.shape[0]:
        raise ValueError(f"labels must have one entry per series ({Xa.shape[0]}); got {len(lab)}.")
    lengths = np.full(Xa.shape[0], Xa.shape[1]) if x_lengths is None else _np(x_lengths).astype(np.int64)
    K = Za.shape[0]
    cols = min(K, 4)
    rows = (K + cols - 1) // cols
    fig = Figure(figsize=figsize or (3.6 * cols, 2.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= K:
            ax.set_visible(False)
            continue
        members = np.nonzero(lab == k)[0]
        for p in members[:max_members]:
            n = lengths[p]
            for d in range(Xa.shape[2]):
                ax.plot(np.arange(n), Xa[p, :n, d], color="0.6", lw=0.6, alpha=0.5)
        for d in range(Za.shape[2]):
            ax.plot(np.arange(Za.shape[1]), Za[k, :, d], color=colors[(k + d) % len(colors)], lw=2.2)
        name = names[k] if names is not None else f"group {k}"
        ax.set_title(f"{name} ({len(members)} series)", fontsize="medium")
        ax.set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def plot_clusters(X, labels, centers, *, x_lengths=None, title: Optional[str] = "soft-DTW k-means", **kwargs):
    """Cluster centres over their members (:func:`plot_barycenters` with "cluster k" panels)."""
    K = _np(centers).shape[0]
    names = kwargs.pop("names", None) or [f"cluster {k}" for k in range(K)]
    return plot_barycenters(X, labels, centers, x_lengths=x_lengths, names=names, title=title, **kwargs)
