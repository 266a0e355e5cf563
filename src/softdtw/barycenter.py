r"""Soft-DTW barycenters (Cuturi & Blondel 2017, section 4): several at once, any lengths, weights.

The barycenter z of series x_1..x_P with weights w minimises

.. math:: F(z) = \sum_p w_p \, \mathrm{sdtw}_\gamma(z, x_p)

(or the same sum of soft-DTW divergences with ``divergence=True``, Blondel, Mensch & Vert 2021,
which does not shrink towards flat series as gamma grows). Every evaluation of F and its gradient is
one batched :func:`softdtw.soft_dtw` call over all the series, whichever barycenter they belong to,
so K class barycenters cost about as much as one.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional, Union

import numpy as np
import torch

from .functional import soft_dtw
from .pairwise import as_padded_set, as_set_lengths

__all__ = ["soft_dtw_barycenter", "BarycenterResult"]

_METHODS = ("lbfgs", "adam")


class BarycenterResult(NamedTuple):
    """What :func:`soft_dtw_barycenter` returns.

    Attributes:
        barycenter: `(L, D)` barycenter, or `(K, L, D)` when ``groups`` was given; dtype of X.
        losses: objective at the start (the initialisation, or its annealed refinement) and after
            each iteration: `(n_iter + 1,)`, or
            `(n_iter + 1, K)` per barycenter when ``groups`` was given (float64, on the CPU).
        converged: True if the run stopped before ``max_iter`` iterations by the ``tol`` rule (the
            relative decrease of the objective or the largest gradient entry at most ``tol``), or because
            the line search found no lower point.
        n_iter: iterations run.
    """

    barycenter: torch.Tensor
    losses: torch.Tensor
    converged: bool
    n_iter: int


def _resample(X: torch.Tensor, lengths: torch.Tensor, L: int,
              out_lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Each series X[p, :n_p] linearly resampled to L steps: `(P, L, D)`.

    With ``out_lengths`` `(P,)` (each <= L), series p is resampled to ``out_lengths[p]`` steps and
    padded to L by repeating its last step (finite padding, for the callers to mask or overwrite).
    """
    P, T, D = X.shape
    n = lengths.to(X.device, X.dtype if X.is_floating_point() else torch.float64).unsqueeze(1)  # (P, 1)
    if out_lengths is not None:
        m = out_lengths.to(X.device, n.dtype).unsqueeze(1)  # (P, 1)
        i = torch.arange(L, device=X.device, dtype=n.dtype).unsqueeze(0)
        pos = torch.where(m > 1, torch.minimum(i, m - 1) * (n - 1) / (m - 1).clamp_min(1), (n - 1) / 2)
    elif L == 1:
        pos = (n - 1) / 2 * torch.ones(1, 1, device=X.device, dtype=n.dtype)
    else:
        pos = torch.arange(L, device=X.device, dtype=n.dtype).unsqueeze(0) * (n - 1) / (L - 1)
    lo = pos.floor().long().clamp(0, T - 1)
    hi = torch.minimum(lo + 1, lengths.to(X.device).unsqueeze(1) - 1).clamp(min=0)
    frac = (pos - lo.to(pos.dtype)).unsqueeze(-1).to(X.dtype)
    a = torch.gather(X, 1, lo.unsqueeze(-1).expand(P, L, D))
    b = torch.gather(X, 1, hi.unsqueeze(-1).expand(P, L, D))
    return a + frac * (b - a)


def _group_sum(values: torch.Tensor, groups: torch.Tensor, K: int) -> torch.Tensor:
    return torch.zeros(K, dtype=values.dtype, device=values.device).index_add(0, groups, values)


def soft_dtw_barycenter(X, gamma: float = 1.0, *, weights=None, groups=None, n_groups: Optional[int] = None,
                        init: Union[None, str, torch.Tensor] = None, length=None,
                        x_lengths=None, max_iter: int = 100, tol: float = 1e-4, method: str = "lbfgs",
                        lr: Optional[float] = None, divergence: bool = False, bandwidth: Optional[float] = None,
                        itakura_max_slope: Optional[float] = None, cost="sqeuclidean", batch_size: Optional[int] = None,
                        anneal: Optional[bool] = None, memory: str = "auto", backend: Optional[str] = None,
                        progress: bool = False) -> BarycenterResult:
    r"""Soft-DTW barycenter(s) of a set of series, by L-BFGS (default) or Adam.

    .. math:: z_k = \arg\min_z \sum_{p:\,g_p = k} w_p\,\mathrm{sdtw}_\gamma(z, x_p)

    Args:
        X: `(P, T, D)` float tensor / array of series (`(P, T)` means univariate), padded past
            ``x_lengths``.
        gamma: smoothing > 0 (0 works but the objective is then piecewise and L-BFGS stalls).
        weights: optional `(P,)` non-negative weights w_p (default: all 1, as tslearn).
        groups: optional `(P,)` int tensor in [0, K): series p goes into barycenter ``groups[p]``;
            all K barycenters are fitted in one batched problem. None: one barycenter of all series.
        n_groups: K (default: ``groups.max() + 1``); a group with no series keeps its initialisation.
        init: "mean" / None (default: the weighted mean of each group's series, each resampled to
            ``length`` steps) or a tensor `(L, D)` (one barycenter) / `(K, L, D)` (groups).
        length: L, steps of the barycenter (default: the init's, else the longest series); or, with
            ``groups``, a `(K,)` int tensor / sequence of per-barycenter lengths: barycenter k then has
            ``length[k]`` steps, the result is padded to the longest with NaN (the library's padding
            convention), and an init tensor needs at least that many steps (its steps past
            ``length[k]`` are ignored).
        x_lengths: optional `(P,)` int valid lengths of the series of X (or NaN padding: trailing
            all-NaN steps end a series).
        max_iter: iterations (L-BFGS iterations, each with a strong-Wolfe line search; or Adam steps).
        tol: stopping rule, scipy's L-BFGS-B's with ``ftol = gtol = tol`` (tslearn's ``tol`` sets both):
            stop after the iteration k -> k + 1 for which (F_k - F_{k+1}) / max(|F_k|, |F_{k+1}|, 1) <= tol
            (relative decrease of the objective), or for which max_i |dF/dz_i| <= tol at z_{k+1} (largest
            gradient entry; already at the start, which then returns the init after 0 iterations).
            Default 1e-4, ten times tighter than tslearn's 1e-3: from the same start our L-BFGS takes the
            same iterates as scipy's (same first step, history and curvature updates), so with the same
            value both would stop at the same point; 1e-4 goes on a few iterations (GunPoint- and
            OSULeaf-shaped data at gamma 0.1 and 1: 1-11 more evaluations, objectives 0.004-0.9 % lower
            than tslearn's, benchmarks/results/cpu_barycenter.md). 0 runs all ``max_iter`` iterations (or until the line
            search stalls). Adam uses the same rule on its (not monotone) objective.
        method: "lbfgs" (default) or "adam".
        lr: step size (default 1 for L-BFGS; 0.05 x the standard deviation of X for Adam).
        divergence: minimise the soft-DTW divergence instead of soft-DTW (sharper barycenters).
        bandwidth, itakura_max_slope, cost, memory, backend: as :func:`softdtw.soft_dtw`.
        batch_size: series per batched call (default: all of them); gradients are accumulated over
            chunks, so any number of series fits in memory.
        anneal: first optimise at 10 x gamma (up to 30 iterations) and start from there if that is
            better at gamma: soft-DTW is non-convex in z and the smoother problem avoids many poor
            local minima (on CBF it beats tslearn's objective by a few to 25 %). Default (None): on
            for the "mean" initialisation, off for a given init tensor (e.g. k-means' current centres,
            whose objective is then guaranteed not to increase).
        progress: show a tqdm bar over the iterations.

    Returns:
        :class:`BarycenterResult` (barycenter, losses, converged, n_iter). The barycenter is the best
        iterate seen, so ``losses`` never ends above its first value. It is detached: the optimisation is not
        differentiated (X or init requiring grad give no gradient through it).

    Devices: CPU, CUDA (the barycenter lives on X's device).

    Example:
        >>> import torch
        >>> from softdtw.barycenter import soft_dtw_barycenter
        >>> from softdtw.datasets import make_cbf
        >>> X, y = make_cbf(30, length=64)
        >>> res = soft_dtw_barycenter(X, gamma=1.0, groups=y, max_iter=20)   # one per class
        >>> res.barycenter.shape, bool(res.losses[-1].sum() <= res.losses[0].sum())
        (torch.Size([3, 64, 1]), True)
    """
    X, x_lengths = as_padded_set(X, "X", x_lengths, "x_lengths")  # NaN padding -> lengths
    # The minimiser is not differentiated: without this, an X (or init) that requires grad left the mean
    # initialisation's graph on the result, a gradient of 1/P that is not the barycenter's.
    X = X.detach()
    if isinstance(init, torch.Tensor):
        init = init.detach()
    P, T, D = X.shape
    device = X.device
    dtype = torch.float32 if X.dtype in (torch.float16, torch.bfloat16) else X.dtype
    X = X.to(dtype)
    user_lengths, lengths = as_set_lengths(x_lengths, "x_lengths", P, T)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}; got {method!r}.")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 0:
        raise ValueError(f"max_iter must be an integer >= 0; got {max_iter!r}.")
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not tol >= 0:
        raise ValueError(f"tol must be a number >= 0; got {tol!r}.")
    if lr is not None and (not isinstance(lr, numbers.Real) or isinstance(lr, bool) or not lr > 0):
        raise ValueError(f"lr must be a positive number or None; got {lr!r}.")
    if isinstance(gamma, torch.Tensor):
        gamma = float(gamma.detach())
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not math.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0 (a float; learnable gamma is not supported here); "
                         f"got {gamma!r}.")
    gamma = float(gamma)

    # Groups and weights ----------------------------------------------------------------------
    batched = groups is not None
    if batched:
        if isinstance(groups, np.ndarray):
            groups = torch.from_numpy(groups)
        if isinstance(groups, (list, tuple)):
            groups = torch.as_tensor(groups)
        if not isinstance(groups, torch.Tensor) or groups.is_floating_point() or groups.dtype == torch.bool \
                or groups.shape != (P,):
            raise ValueError(
                f"groups must be an integer tensor of shape ({P},) giving the barycenter of each series; got "
                f"{type(groups).__name__}{tuple(groups.shape) if isinstance(groups, torch.Tensor) else ''}"
                f"{' of dtype ' + str(groups.dtype) if isinstance(groups, torch.Tensor) else ''}."
            )
        groups = groups.to(device=device, dtype=torch.int64)
        gmin, gmax = int(groups.min()), int(groups.max())
        K = gmax + 1 if n_groups is None else int(n_groups)
        if gmin < 0 or gmax >= K:
            raise ValueError(f"groups must lie in [0, {K}) (n_groups={K}); got values from {gmin} to {gmax}.")
    else:
        if n_groups not in (None, 1):
            raise ValueError(f"n_groups={n_groups} needs groups (the barycenter index of each series).")
        K = 1
        groups = torch.zeros(P, dtype=torch.int64, device=device)
    if weights is None:
        w = torch.ones(P, dtype=dtype, device=device)
    else:
        w = torch.as_tensor(weights.cpu() if isinstance(weights, torch.Tensor) else np.asarray(weights))
        if w.shape != (P,) or not (w.is_floating_point() or w.dtype in (torch.int32, torch.int64)):
            raise ValueError(f"weights must be a numeric tensor of shape ({P},), one per series; got shape "
                             f"{tuple(w.shape)} and dtype {w.dtype}.")
        w = w.to(device=device, dtype=dtype)
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError("weights must be finite and >= 0; got negative, NaN or Inf values.")
    counts = torch.bincount(groups, minlength=K)
    glen = None  # per-barycenter lengths `(K,)` (CPU int64), or None: all L
    if length is not None and not isinstance(length, numbers.Integral):
        glen = torch.as_tensor(length.cpu() if isinstance(length, torch.Tensor) else np.asarray(length))
        if glen.shape != (K,) or glen.is_floating_point() or glen.dtype == torch.bool or not batched \
                or bool((glen < 1).any()):
            raise ValueError(f"length must be an int >= 1, or with groups a ({K},) integer tensor of lengths >= 1 "
                             f"(one per barycenter); got {length!r}.")
        glen = glen.to(torch.int64)
        if isinstance(init, (torch.Tensor, np.ndarray)) and int(glen.max()) > torch.as_tensor(init).shape[1]:
            raise ValueError(f"length asks for barycenters of up to {int(glen.max())} steps but init has only "
                             f"{torch.as_tensor(init).shape[1]}; pass a longer init or shorter lengths.")
        length = int(glen.max())
        if isinstance(init, (torch.Tensor, np.ndarray)):
            init = torch.as_tensor(init)[:, :length]
        if bool((glen == length).all()):
            glen = None  # all equal: the plain single-length problem

    # Initialisation ---------------------------------------------------------------------------
    if isinstance(init, torch.Tensor) or isinstance(init, np.ndarray):
        Z0 = torch.as_tensor(init).to(device=device, dtype=dtype)
        if Z0.dim() == 2 and not batched:
            Z0 = Z0.unsqueeze(0)
        if Z0.dim() != 3 or Z0.shape[0] != K or Z0.shape[2] != D or Z0.shape[1] < 1:
            want = f"({K}, L, {D})" if batched else f"(L, {D})"
            raise ValueError(f"init must have shape {want}; got init.shape={tuple(torch.as_tensor(init).shape)}.")
        if length is not None and int(length) != Z0.shape[1]:
            raise ValueError(f"length={length} disagrees with init's length {Z0.shape[1]}; drop one of them.")
        L = Z0.shape[1]
        if glen is not None:  # steps past length[k] are ignored: a NaN-padded result of an earlier call is an init
            past = torch.arange(L, device=device).view(1, L, 1) >= glen.to(device).view(K, 1, 1)
            Z0 = torch.where(past, torch.zeros((), dtype=dtype, device=device), Z0)
        if not bool(torch.isfinite(Z0).all()):
            raise ValueError("init contains NaN or Inf values; pass a finite initial barycenter (barycenters of "
                             "different lengths, NaN-padded as this function returns them, need length=, one per "
                             "barycenter).")
    elif init is None or (isinstance(init, str) and init == "mean"):
        L = int(length) if length is not None else int(lengths.max())
        if L < 1:
            raise ValueError(f"length must be >= 1; got {length!r}.")
        empty = (counts == 0).nonzero().flatten()
        if len(empty):
            raise ValueError(
                f"group {int(empty[0])} has no series, so init='mean' has nothing to average; pass an init "
                f"tensor of shape ({K}, L, {D}) (empty groups keep it) or drop the empty group."
            )
        R = _resample(X, lengths.to(device), L, None if glen is None else glen.to(device)[groups])  # (P, L, D)
        wsum = _group_sum(w, groups, K).clamp_min(torch.finfo(dtype).tiny)
        Z0 = torch.zeros(K, L, D, dtype=dtype, device=device).index_add(0, groups, R * w.view(P, 1, 1))
        Z0 = Z0 / wsum.view(K, 1, 1)
    else:
        raise ValueError(f"init must be None, 'mean' or a tensor; got {init!r}.")

    if anneal is None:
        anneal = not isinstance(init, (torch.Tensor, np.ndarray))

    # Objective --------------------------------------------------------------------------------
    xl = lengths.to(device)
    chunk = P if batch_size is None else max(1, int(batch_size))
    kw = dict(cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, memory=memory, backend=backend)
    zl = torch.full((P,), L, dtype=torch.int64, device=device) if glen is None else glen.to(device)[groups]
    zk = {} if glen is None else dict(x_lengths=glen.to(device), y_lengths=glen.to(device))
    W = _group_sum(w, groups, K)
    const = torch.zeros(K, dtype=torch.float64, device=device)
    if divergence:
        with torch.no_grad():
            for s in range(0, P, chunk):
                e = min(s + chunk, P)
                n = int(lengths[s:e].max())
                sx = soft_dtw(X[s:e, :n], X[s:e, :n], gamma, x_lengths=xl[s:e], y_lengths=xl[s:e], **kw)
                const += 0.5 * _group_sum((w[s:e] * sx).double(), groups[s:e], K)

    def objective(Z: torch.Tensor, backward: bool, g_run: float, with_const: bool = True) -> torch.Tensor:
        """Per-group objective `(K,)` float64 (detached) at smoothing g_run; accumulates Z.grad."""
        per_group = torch.zeros(K, dtype=torch.float64, device=device)
        for s in range(0, P, chunk):
            e = min(s + chunk, P)
            n = int(lengths[s:e].max())
            v = soft_dtw(Z.index_select(0, groups[s:e]), X[s:e, :n], g_run, x_lengths=zl[s:e],
                         y_lengths=xl[s:e], **kw)
            g = _group_sum(w[s:e] * v, groups[s:e], K)
            if backward:
                g.sum().backward()
            per_group += g.detach().double()
        if divergence:
            szz = soft_dtw(Z, Z, g_run, **zk, **kw)
            g = -0.5 * W * szz
            if backward:
                g.sum().backward()
            per_group += g.detach().double() - (const if with_const else 0.0)
        return per_group

    direct = _direct_cpu(X, Z0, groups, w, lengths, zl, xl, K, chunk, cost, bandwidth, itakura_max_slope,
                         memory, backend)

    def make_evaluate(g_run: float, with_const: bool = True):
        def evaluate(Zv: torch.Tensor):
            """(total float, flat gradient, per-group objective) at barycenters Zv `(K, L, D)`."""
            if direct is not None:
                per_group, grad = direct(Zv.detach(), g_run)
                if divergence:
                    Zr = Zv.detach().clone().requires_grad_(True)
                    with torch.enable_grad():
                        gz = -0.5 * W * soft_dtw(Zr, Zr, g_run, **zk, **kw)
                        gz.sum().backward()
                    per_group += gz.detach().double() - (const if with_const else 0.0)
                    grad += Zr.grad
                return float(per_group.sum()), grad.reshape(-1), per_group.cpu()
            Zr = Zv.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                per_group = objective(Zr, True, g_run, with_const)
            grad = Zr.grad if Zr.grad is not None else torch.zeros_like(Zr)
            return float(per_group.sum()), grad.reshape(-1), per_group.cpu()
        return evaluate

    shape = Z0.shape

    def minimize(evaluate, Z_start, n_max, tolerance, bar=None):
        """Run the optimiser from Z_start; returns (best flat x, losses list, converged, n_iter)."""
        f, g, pg = evaluate(Z_start)
        losses = [pg]
        x = Z_start.reshape(-1).clone()
        best = (f, x.clone(), pg)
        converged, n_done = False, 0
        if method == "lbfgs":
            iterate = _lbfgs_iterations(lambda v: evaluate(v.view(shape)), x, f, g, pg,
                                        1.0 if lr is None else float(lr))
        else:
            step = float(lr) if lr is not None else max(0.05 * float(X.std()), 1e-8) if P * T > 1 else 0.05
            iterate = _adam_iterations(lambda v: evaluate(v.view(shape)), x, g, step)
        if float(g.abs().max()) <= tolerance:  # scipy's gtol test at the start: nothing to do
            return x.view(shape), losses, True, 0
        for it in range(n_max):
            x, f_new, pg, stalled, g_max = next(iterate)
            n_done = it + 1
            losses.append(pg)
            f_prev, f = f, f_new
            if not math.isfinite(f):
                break
            if f < best[0]:
                best = (f, x.clone(), pg)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{f:.4g}")
            # The tol rule (see the docstring): scipy L-BFGS-B's ftol and gtol tests with ftol = gtol = tol.
            if stalled or abs(f_prev - f) <= tolerance * max(abs(f_prev), abs(f), 1.0) or g_max <= tolerance:
                converged = True
                break
        if float(losses[-1].sum()) > best[0]:  # the result is the best iterate; report its objective last
            losses[-1] = best[2]
        return best[1].view(shape), losses, converged, n_done

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=max_iter, desc="soft-DTW barycenter", unit="it", leave=False, dynamic_ncols=True)
    try:
        evaluate = make_evaluate(gamma)
        Z_start = Z0
        if anneal and gamma > 0 and max_iter > 0:
            # Warm start at 10x the smoothing: a smoother objective with fewer poor local minima.
            Z_warm, _, _, _ = minimize(make_evaluate(10.0 * gamma, with_const=False), Z0, min(max_iter, 30), 1e-5)
            with torch.no_grad():
                f0 = float(objective(Z0, False, gamma).sum())
                f1 = float(objective(Z_warm, False, gamma).sum())
            if f1 < f0:
                Z_start = Z_warm
        best_Z, losses, converged, n_iter = minimize(evaluate, Z_start, max_iter, tol, bar)
    finally:
        if bar is not None:
            bar.close()
    loss_t = torch.stack(losses)
    bary = best_Z.to(X.dtype)
    if glen is not None:
        pad = torch.arange(L, device=device).unsqueeze(0) >= glen.to(device).unsqueeze(1)  # (K, L)
        bary = bary.masked_fill(pad.unsqueeze(-1), math.nan)
    if not batched:
        return BarycenterResult(bary[0], loss_t[:, 0], converged, n_iter)
    return BarycenterResult(bary, loss_t, converged, n_iter)


def _direct_cpu(X, Z0, groups, w, lengths, zl, xl, K, chunk, cost, bandwidth, itakura_max_slope, memory,
                backend):
    """The objective's cross term and its gradient by the cpu backend's forward and backward, or None.

    On the cpu backend with a fused cost, an evaluation of sum_p w_p sdtw(z_{g_p}, x_p) and its
    gradient is one forward(memory="store" or "checkpoint") and one backward per chunk, called
    directly: the arguments (lengths, window, memory mode) are validated once by
    :func:`softdtw._checks.prepare` here, not on every evaluation, and no autograd graph is built.
    Returns ``direct(Z, gamma) -> (per-group objective (K,) float64, gradient (K, L, D))``; +inf
    and a zero gradient when Z is not finite (the line search then steps back).
    """
    from . import _ops
    from ._checks import prepare
    from .backends import FUSED_COSTS

    if X.device.type != "cpu" or not isinstance(cost, str) or cost not in FUSED_COSTS \
            or X.dtype not in (torch.float32, torch.float64):
        return None
    P, T, D = X.shape
    L = Z0.shape[1]
    parts = []
    for s in range(0, P, chunk):
        e = min(s + chunk, P)
        n = int(lengths[s:e].max())
        p = prepare(Z0.index_select(0, groups[s:e]), X[s:e, :n], 1.0, cost=cost, bandwidth=bandwidth,
                    itakura_max_slope=itakura_max_slope, x_lengths=zl[s:e], y_lengths=xl[s:e], memory=memory,
                    backend=backend)
        if p.backend != "cpu" or p.x.dtype != X.dtype:
            return None
        mem = _ops.resolve_memory(memory, True, "cpu", "fused", e - s, L, n, D, X.dtype, X.device)
        # Series -> barycenter sums as products with the one-hot `(K, e - s)` membership matrix: exact
        # (one term per column), and a GEMM, where index_add_ into few rows is serial (measured: 55 ms
        # of a 100 ms evaluation at P = 50, L = 150, K = 1).
        onehot = torch.zeros(K, e - s, dtype=X.dtype)
        onehot[groups[s:e], torch.arange(e - s)] = 1
        parts.append((groups[s:e], onehot, p.y, p.x_lengths, p.y_lengths, p.window, w[s:e], mem))
    from .backends import cpu
    tables = {}

    def direct(Z: torch.Tensor, gamma: float):
        per_group = torch.zeros(K, dtype=torch.float64)
        grad = torch.zeros_like(Z)
        if not bool(torch.isfinite(Z).all()):
            return per_group + math.inf, grad
        g = torch.tensor(gamma, dtype=Z.dtype)
        for gi, onehot, y, zlen, ylen, window, wi, mem in parts:
            z = Z[0].expand(len(gi), *Z.shape[1:]).contiguous() if K == 1 else Z.index_select(0, gi)
            # The stored table is reused by the next chunk of the same shape and the next evaluation (each
            # chunk's backward is done before the next forward): a fresh table is a fresh mapping whose page
            # faults cost as much as the kernels at P = 200, L = 427 (see cpu.forward's saved_out).
            shape = (len(gi), z.shape[1], y.shape[1])
            value, saved = cpu.forward(z, y, g, cost, zlen, ylen, window, mem, saved_out=tables.get(shape))
            if mem == "store":
                tables[shape] = saved
            dz = cpu.backward(wi, z, y, g, cost, zlen, ylen, window, value, saved, mem, needs=(True, False, False))[0]
            grad += (onehot @ dz.reshape(len(gi), -1)).view_as(grad)
            per_group += onehot.double() @ (wi * value).double()
        return per_group, grad
    return direct


def _cubic_minimizer(a: float, fa: float, ga: float, b: float, fb: float, gb: float, lo: float, hi: float) -> float:
    """Minimiser of the cubic through (a, fa) and (b, fb) with slopes ga and gb, clipped to [lo, hi]
    (Nocedal & Wright, eq. 3.59); the middle of [lo, hi] when the cubic has no finite minimiser."""
    if a != b and all(math.isfinite(v) for v in (fa, ga, fb, gb)):
        d1 = ga + gb - 3.0 * (fa - fb) / (a - b)
        disc = d1 * d1 - ga * gb
        if disc >= 0.0:
            d2 = math.copysign(math.sqrt(disc), b - a)
            den = gb - ga + 2.0 * d2
            if den != 0.0:
                t = b - (b - a) * (gb + d2 - d1) / den
                if math.isfinite(t):
                    return min(max(t, lo), hi)
    return 0.5 * (lo + hi)


def _strong_wolfe(phi, f0: float, g0: float, t: float, xtol: float, c1: float = 1e-4, c2: float = 0.9,
                  max_evals: int = 25):
    """A step t > 0 satisfying the strong Wolfe conditions along a descent direction:

        phi(t) <= f0 + c1 t g0   and   |phi'(t)| <= c2 |g0|

    Nocedal & Wright, Numerical Optimization (2006), Algorithms 3.5 (bracketing, with extrapolation by
    cubic interpolation into [t + 0.01 (t - t_prev), 10 t]) and 3.6 (zoom by cubic interpolation; a
    trial within 0.1 of the bracket's width from an end is taken once in a row, then moved 0.1 inside,
    so the bracket keeps shrinking). The constants are those of scipy's and PyTorch's L-BFGS.

    Args:
        phi: t -> (value, slope phi'(t), payload) along the direction.
        f0, g0: value and slope (< 0) at t = 0.
        t: first trial step.
        xtol: the zoom stops when the bracket is narrower than this (in units of t).
        max_evals: evaluations of phi at most.

    Returns:
        (t, value, payload) of the accepted step. When the evaluations run out, the lowest point found
        that satisfies the first (sufficient decrease) condition; (0.0, f0, None) if there is none.
    """
    n_evals = 0

    def evaluate(t):
        nonlocal n_evals
        n_evals += 1
        f, g, payload = phi(t)
        if not math.isfinite(f):  # too far (overflow): treated as a failed sufficient decrease
            f, g = math.inf, math.nan
        return f, g, payload

    def decrease(t, f):
        return f <= f0 + c1 * t * g0

    def zoom(lo, f_lo, g_lo, p_lo, hi, f_hi, g_hi):
        # Invariants: lo satisfies sufficient decrease with the lowest value seen in the bracket, and
        # g_lo * (hi - lo) < 0, so a strong-Wolfe point lies between lo and hi.
        near_end = False
        while n_evals < max_evals and abs(hi - lo) > xtol:
            a, b = min(lo, hi), max(lo, hi)
            margin = 0.1 * (b - a)
            t = _cubic_minimizer(lo, f_lo, g_lo, hi, f_hi, g_hi, a, b)
            if min(b - t, t - a) < margin:
                # Near an end of the bracket: allowed once in a row (the cubic is often right there),
                # then moved 0.1 of the bracket inside, so the bracket keeps shrinking.
                if near_end or t in (a, b):
                    t = b - margin if b - t < t - a else a + margin
                    near_end = False
                else:
                    near_end = True
            else:
                near_end = False
            f, g, payload = evaluate(t)
            if not decrease(t, f) or f >= f_lo:
                hi, f_hi, g_hi = t, f, g
                continue
            if abs(g) <= -c2 * g0:
                return t, f, payload
            if g * (hi - lo) >= 0:
                hi, f_hi, g_hi = lo, f_lo, g_lo
            lo, f_lo, g_lo, p_lo = t, f, g, payload
        return (lo, f_lo, p_lo) if lo > 0 else (0.0, f0, None)

    t_prev, f_prev, g_prev, p_prev = 0.0, f0, g0, None
    while n_evals < max_evals:
        f, g, payload = evaluate(t)
        if not decrease(t, f) or (n_evals > 1 and f >= f_prev):
            return zoom(t_prev, f_prev, g_prev, p_prev, t, f, g)
        if abs(g) <= -c2 * g0:
            return t, f, payload
        if g >= 0:
            return zoom(t, f, g, payload, t_prev, f_prev, g_prev)
        t_next = _cubic_minimizer(t_prev, f_prev, g_prev, t, f, g, t + 0.01 * (t - t_prev), 10.0 * t)
        t_prev, f_prev, g_prev, p_prev = t, f, g, payload
        t = t_next
    # Still descending after max_evals extrapolations: the last point (it satisfies sufficient decrease).
    return (t_prev, f_prev, p_prev) if t_prev > 0 else (0.0, f0, None)


def _lbfgs_iterations(evaluate, x, f, g, pg, lr, history_size: int = 10):
    """L-BFGS with a strong-Wolfe line search; yields (x, f, per_group, stalled, max |grad|) after each
    iteration.

    ``evaluate(x) -> (f, grad, per_group)``. The two-loop recursion of Nocedal & Wright (Alg. 7.4)
    and the line search of :func:`_strong_wolfe` (Alg. 3.5 and 3.6, with the constants of scipy's
    and PyTorch's L-BFGS: c1 = 1e-4, c2 = 0.9, at most 25 evaluations). History of 10 pairs (scipy's
    m = 10; with 20, OSULeaf-shaped data at gamma = 0.1 ended 0.13 % above scipy's objective after 50
    iterations, with 10 0.9 % below).
    """
    s_hist, y_hist, rho_hist = [], [], []
    x = x.clone()
    while True:
        if float(g.abs().max()) <= 1e-12:
            yield x, f, pg, True, 0.0
            continue
        # Search direction d = -H g.
        q = -g.clone()
        alphas = []
        for s_k, y_k, rho in zip(reversed(s_hist), reversed(y_hist), reversed(rho_hist)):
            a = rho * s_k.dot(q)
            alphas.append(a)
            q -= a * y_k
        if s_hist:
            q *= s_hist[-1].dot(y_hist[-1]) / y_hist[-1].dot(y_hist[-1])
        for (s_k, y_k, rho), a in zip(zip(s_hist, y_hist, rho_hist), reversed(alphas)):
            b = rho * y_k.dot(q)
            q += (a - b) * s_k
        d = q
        gtd = float(g.dot(d))
        if not gtd < 0:  # not a descent direction: restart from steepest descent
            s_hist, y_hist, rho_hist = [], [], []
            d = -g
            gtd = float(g.dot(d))
        # First step along steepest descent: 1 / ||g||_2, scipy's L-BFGS-B (a unit step moves by ||g||).
        t0 = lr if s_hist else lr / max(float(g.norm()), 1e-300)

        def phi(t, x=x, d=d):
            fv, gv, pgv = evaluate(x + t * d)
            return fv, float(gv.dot(d)), (gv, pgv)

        t, f_new, payload = _strong_wolfe(phi, f, gtd, t0, xtol=1e-9 / max(float(d.abs().max()), 1e-300))
        if payload is None or not f_new < f:
            if s_hist:
                # As L-BFGS-B: a failed line search along the quasi-Newton direction drops the memory
                # and retries along steepest descent within the same iteration; only a failure there
                # ends the run. (Stopping at the first failure left gamma = 0.1 barycenters short.)
                s_hist, y_hist, rho_hist = [], [], []
                continue
            yield x, f, pg, True, float(g.abs().max())  # the line search found no decrease: converged or stuck
            continue
        g_new, pg = payload
        step = t * d
        y_k = g_new - g
        ys = float(y_k.dot(step))
        if ys > 1e-10:
            if len(s_hist) == history_size:
                s_hist.pop(0), y_hist.pop(0), rho_hist.pop(0)
            s_hist.append(step)
            y_hist.append(y_k)
            rho_hist.append(1.0 / ys)
        x = x + step
        f, g = float(f_new), g_new
        yield x, f, pg, False, float(g.abs().max())


def _adam_iterations(evaluate, x, g, lr, betas=(0.9, 0.999), eps: float = 1e-8):
    """Adam on the barycenter; yields (x, f, per_group, stalled, max |grad|) after each step."""
    x = x.clone()
    m = torch.zeros_like(x)
    v = torch.zeros_like(x)
    k = 0
    while True:
        k += 1
        m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        mhat = m / (1 - betas[0] ** k)
        vhat = v / (1 - betas[1] ** k)
        x = x - lr * mhat / (vhat.sqrt() + eps)
        f, g, pg = evaluate(x)
        yield x, f, pg, False, float(g.abs().max())
