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


def plot_barycenters(X, labels, barycenters, *, x_lengths=None, barycenter_lengths=None,
                     names: Optional[Sequence[str]] = None,
                     title: Optional[str] = "soft-DTW barycenters", max_members: int = 50,
                     features: Optional[Sequence[int]] = None, max_feature_panels: int = 4, figsize=None):
    """Each barycenter (bold, coloured) over the series it averages (thin, grey), with a legend.

    Layout, by the number of features drawn (``features``, default all D):

    - one feature: one panel per group, up to 4 per row;
    - 2 to ``max_feature_panels`` features: one row per group, one panel per feature;
    - more: a summary, one heatmap per group of its barycenter (features x steps, one colour scale
      for all groups), and a note saying how to draw chosen features (``features=[...]``).

    Args:
        X: `(P, T, D)` (or `(P, T)`) series.
        labels: `(P,)` int group of each series, in [0, K).
        barycenters: `(K, L, D)` (or `(K, L)`) barycenters; trailing all-NaN steps are padding
            (k-means centres of different lengths come NaN-padded), each is drawn over its own steps.
        x_lengths: optional `(P,)` valid lengths of the series of X.
        barycenter_lengths: optional `(K,)` steps of each barycenter (default: read from the NaN
            padding; all L without it), e.g. :class:`softdtw.KMeansResult`'s ``center_lengths``.
        names: optional K group names (default "group k").
        title: figure title.
        max_members: at most this many member series are drawn per panel (the first ones).
        features: optional indices of the features to draw (default: all).
        max_feature_panels: most features drawn one panel each; beyond, the heatmap summary.
        figsize: default from the number of panels.

    Returns:
        matplotlib Figure.
    """
    Figure = require_matplotlib()
    from matplotlib.lines import Line2D

    Xa = _np(X)
    if Xa.ndim == 2:
        Xa = Xa[..., None]
    Za = _np(barycenters)
    if Za.ndim == 2:
        Za = Za[..., None]
    if Xa.ndim != 3 or Za.ndim != 3 or Za.shape[2] != Xa.shape[2]:
        raise ValueError(f"X must be (P, T, D) and barycenters (K, L, D) with the same D; got X.shape="
                         f"{Xa.shape}, barycenters.shape={Za.shape}.")
    lab = _np(labels).astype(np.int64).reshape(-1)
    if len(lab) != Xa.shape[0]:
        raise ValueError(f"labels must have one entry per series ({Xa.shape[0]}); got {len(lab)}.")
    lengths = np.full(Xa.shape[0], Xa.shape[1]) if x_lengths is None else _np(x_lengths).astype(np.int64)
    K, L, D = Za.shape
    if barycenter_lengths is None:  # 1 + the last step with a value
        seen = ~np.isnan(Za).all(-1)
        z_len = np.where(seen.any(1), L - np.argmax(seen[:, ::-1], 1), 0)
    else:
        z_len = _np(barycenter_lengths).astype(np.int64).reshape(-1)
        if z_len.shape != (K,) or (z_len < 1).any() or (z_len > L).any():
            raise ValueError(f"barycenter_lengths must hold one length in [1, {L}] per barycenter ({K}); got "
                             f"{barycenter_lengths!r}.")
    Za = np.where(np.arange(L)[None, :, None] < z_len[:, None, None], Za, np.nan)  # nothing drawn past a length
    feats = list(range(D)) if features is None else [int(f) for f in features]
    if not feats or any(not 0 <= f < D for f in feats):
        raise ValueError(f"features must be indices in [0, {D}) (the series have {D} features); got {features!r}.")
    names = list(names) if names is not None else [f"group {k}" for k in range(K)]
    counts = np.bincount(lab[(lab >= 0) & (lab < K)], minlength=K)
    colors = [f"C{i}" for i in range(10)]

    def panel(ax, k, d):
        for p in np.nonzero(lab == k)[0][:max_members]:
            n = lengths[p]
            ax.plot(np.arange(n), Xa[p, :n, d], color="0.6", lw=0.6, alpha=0.5)
        ax.plot(np.arange(z_len[k]), Za[k, :z_len[k], d], color=colors[k % len(colors)], lw=2.2)

    def legend(fig):
        shown = min(max_members, int(counts.max()) if K else 0)
        members = "member series" + (f" (first {max_members} per group)" if shown >= max_members else "")
        fig.legend(handles=[Line2D([], [], color="k", lw=2.2, label="barycenter (centre)"),
                            Line2D([], [], color="0.6", lw=0.8, label=members)],
                   loc="outside lower center", ncols=2, fontsize="small", frameon=False)

    if len(feats) > max_feature_panels:
        # Summary: the barycenters as heatmaps, features x steps, on one colour scale.
        cols = min(K, 3)
        rows = (K + cols - 1) // cols
        fig = Figure(figsize=figsize or (4.2 * cols + 0.8, 0.8 + (1.0 + 0.18 * len(feats)) * rows),
                     layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False)
        Zf = Za[:, :, feats]
        lo, hi = float(np.nanmin(Zf)), float(np.nanmax(Zf))
        if lo < 0 < hi:
            lim = max(-lo, hi)
            cmap, lo, hi = "RdBu_r", -lim, lim
        else:
            cmap = "viridis"
        im = None
        for k in range(rows * cols):
            ax = axes[k // cols][k % cols]
            if k >= K:
                ax.set_visible(False)
                continue
            im = ax.imshow(Zf[k].T, aspect="auto", origin="lower", cmap=cmap, vmin=lo, vmax=hi,
                           extent=(-0.5, L - 0.5, -0.5, len(feats) - 0.5), interpolation="nearest")
            ax.set_yticks(range(len(feats)), [str(f) for f in feats], fontsize="x-small")
            ax.set_title(f"{names[k]} ({counts[k]} series)", fontsize="medium")
            ax.set_xlabel("step")
            if k % cols == 0:
                ax.set_ylabel("feature")
        fig.colorbar(im, ax=axes, shrink=0.9, label="barycenter value")
        note = (f"{len(feats)} features: each barycenter as a heatmap. To draw up to {max_feature_panels} chosen "
                f"features over their member series: features=[...] (command line: --features 0,1,...)")
        fig.supxlabel(note, fontsize="small", style="italic")
    elif len(feats) == 1:
        d = feats[0]
        cols = min(K, 4)
        rows = (K + cols - 1) // cols
        fig = Figure(figsize=figsize or (3.6 * cols, 2.8 * rows + 0.4), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False)
        for k in range(rows * cols):
            ax = axes[k // cols][k % cols]
            if k >= K:
                ax.set_visible(False)
                continue
            panel(ax, k, d)
            ax.set_title(f"{names[k]} ({counts[k]} series)", fontsize="medium")
            ax.set_xlabel("step")
            if D > 1:
                ax.set_ylabel(f"feature {d}")
        legend(fig)
    else:
        # One row per group, one panel per feature.
        cols = len(feats)
        fig = Figure(figsize=figsize or (3.2 * cols, 2.2 * K + 0.5), layout="constrained")
        axes = fig.subplots(K, cols, squeeze=False, sharex=True)
        for k in range(K):
            for c, d in enumerate(feats):
                ax = axes[k][c]
                panel(ax, k, d)
                if k == 0:
                    ax.set_title(f"feature {d}", fontsize="medium")
                if c == 0:
                    ax.set_ylabel(f"{names[k]}\n({counts[k]} series)", fontsize="small")
                if k == K - 1:
                    ax.set_xlabel("step")
        legend(fig)
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def plot_clusters(X, labels, centers, *, x_lengths=None, center_lengths=None,
                  title: Optional[str] = "soft-DTW k-means", **kwargs):
    """Cluster centres over their members (:func:`plot_barycenters` with "cluster k" names; the same
    layouts and keyword arguments, e.g. ``features=[0, 3]``). Each centre is drawn over its own
    ``center_lengths[k]`` steps (default: read from the NaN padding of ``centers``)."""
    K = _np(centers).shape[0]
    names = kwargs.pop("names", None) or [f"cluster {k}" for k in range(K)]
    return plot_barycenters(X, labels, centers, x_lengths=x_lengths, barycenter_lengths=center_lengths,
                            names=names, title=title, **kwargs)
