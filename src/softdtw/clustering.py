r"""k-means under soft-DTW: k-means++ seeding, batched barycenter updates, the scikit-learn API.

Lloyd's algorithm with soft-DTW in place of the squared Euclidean distance (as tslearn's
``TimeSeriesKMeans(metric="softdtw")``): assign every series to its closest centre, then move each
centre to the soft-DTW barycenter of its series. Here all K barycenters are updated in one batched
problem (:func:`softdtw.soft_dtw_barycenter` with ``groups``), and the assignment is one
:func:`softdtw.pairwise_soft_dtw` matrix, so the whole algorithm runs at batched-kernel speed on the
CPU or the GPU.

By default the dissimilarity is the soft-DTW divergence (Blondel, Mensch & Vert 2021), which is
>= 0 and zero at x = y: the inertia is then a sum of non-negative terms and, since both steps
minimise the same objective (the barycenter keeps its best iterate), it never increases (up to
floating-point rounding).
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional, Union

import numpy as np
import torch

from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._estimator import SeriesInputMixin, check_int, resolve_gamma, validate_series
from ._checks import nan_padding
from .barycenter import _resample, soft_dtw_barycenter
from .pairwise import as_padded_set, as_set_lengths, pairwise_soft_dtw

__all__ = ["soft_dtw_kmeans", "SoftDTWKMeans", "KMeansResult"]

_INITS = ("k-means++", "random")
_CENTER_LENGTHS = ("median", "max")


class KMeansResult(NamedTuple):
    """What :func:`soft_dtw_kmeans` returns.

    Attributes:
        centers: `(K, L, D)` cluster centres (dtype of X, on X's device); centre k has
            ``center_lengths[k]`` steps and is NaN-padded past them (the library's and tslearn's
            padding convention, so the centres can be passed back to any softdtw function as they are).
            L is the longest centre; no NaN when all centres have L steps.
        labels: `(P,)` int64 index of the closest centre of each series (CPU).
        inertia: sum over the series of the dissimilarity to their centre (float).
        n_iter: centre updates run.
        converged: True if the labels stopped changing (or the inertia stopped decreasing by more
            than ``tol``) before ``max_iter``.
        losses: `(n_iter + 1,)` float64 inertia after the seeding and after each update.
        center_lengths: `(K,)` int64 steps of each centre (CPU).
    """

    centers: torch.Tensor
    labels: torch.Tensor
    inertia: float
    n_iter: int
    converged: bool
    losses: torch.Tensor
    center_lengths: torch.Tensor


class _Dissimilarity:
    """Dissimilarities between the series of X and centres, with X's self-terms computed once."""

    def __init__(self, X, lengths, user_lengths, gamma, divergence, kw, batch_size, progress):
        self.X, self.lengths, self.user_lengths = X, lengths, user_lengths
        self.gamma, self.divergence, self.kw = gamma, divergence, kw
        self.batch_size, self.progress = batch_size, progress
        self._sx = None

    def self_terms(self) -> torch.Tensor:
        if self._sx is None:
            with torch.no_grad():
                self._sx = _self_soft_dtw(self.X, self.lengths, self.gamma, self.kw, self.batch_size)
        return self._sx

    def raw(self, C, c_lengths=None) -> torch.Tensor:
        with torch.no_grad():
            return pairwise_soft_dtw(self.X, C, self.gamma, x_lengths=self.user_lengths, y_lengths=c_lengths,
                                     batch_size=self.batch_size, progress=self.progress, **self.kw)

    def __call__(self, C, c_lengths=None, divergence=None, c_self=None) -> torch.Tensor:
        """`(P, K)` dissimilarities to centres C `(K, L, D)`."""
        div = self.divergence if divergence is None else divergence
        R = self.raw(C, c_lengths)
        if not div:
            return R
        if c_self is None:
            with torch.no_grad():
                cl = torch.full((C.shape[0],), C.shape[1], dtype=torch.int64) if c_lengths is None else c_lengths
                c_self = _self_soft_dtw(C, cl, self.gamma, self.kw, self.batch_size)
        return R - 0.5 * self.self_terms().unsqueeze(1) - 0.5 * c_self.unsqueeze(0)


def _self_soft_dtw(A, lengths, gamma, kw, batch_size) -> torch.Tensor:
    from .functional import soft_dtw

    P = A.shape[0]
    step = P if batch_size is None else int(batch_size)
    out = []
    for s in range(0, P, step):
        e = min(s + step, P)
        n = int(lengths[s:e].max())
        ln = lengths[s:e].to(A.device)
        out.append(soft_dtw(A[s:e, :n], A[s:e, :n], gamma, x_lengths=ln, y_lengths=ln, **kw).to(A.dtype))
    return torch.cat(out)


def _kmeans_plus_plus(X, lengths, K, L, dissim: _Dissimilarity, gen: torch.Generator) -> torch.Tensor:
    """Greedy k-means++ (Arthur & Vassilvitskii 2007; 2 + log K local trials as scikit-learn) under the
    soft-DTW divergence. Returns the indices `(K,)` of the chosen series."""
    P = X.shape[0]
    n_trials = 2 + int(math.log(K))
    sx = dissim.self_terms()

    def to(idx: torch.Tensor) -> torch.Tensor:  # divergences (P, len(idx)) to the series idx
        idx = idx.to(torch.int64)
        R = dissim.raw(X.index_select(0, idx.to(X.device)), lengths[idx] if dissim.user_lengths is not None
                       else None)
        D = R - 0.5 * sx.unsqueeze(1) - 0.5 * sx[idx.to(sx.device)].unsqueeze(0)
        return D.clamp_min(0).double().cpu()

    first = int(torch.randint(P, (1,), generator=gen))
    chosen = [first]
    closest = to(torch.tensor([first]))[:, 0]
    for _ in range(1, K):
        pot = float(closest.sum())
        if pot <= 0:  # every series coincides with a chosen one: pick any other at random
            rest = [i for i in range(P) if i not in chosen]
            chosen.append(rest[int(torch.randint(len(rest), (1,), generator=gen))])
            continue
        r = torch.rand(n_trials, generator=gen, dtype=torch.float64) * pot
        cands = torch.searchsorted(torch.cumsum(closest, 0), r).clamp(max=P - 1)
        Dc = to(cands)  # (P, trials)
        new = torch.minimum(closest.unsqueeze(1), Dc)
        best = int(torch.argmin(new.sum(0)))
        chosen.append(int(cands[best]))
        closest = new[:, best]
    return torch.tensor(chosen, dtype=torch.int64)


def _generator(random_state) -> torch.Generator:
    """A torch.Generator from an int seed, a torch / NumPy generator or None (fresh entropy)."""
    if isinstance(random_state, torch.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        seed = int(random_state.randint(np.iinfo(np.int32).max))
    elif isinstance(random_state, np.random.Generator):
        seed = int(random_state.integers(2**63 - 1))
    elif random_state is None:
        seed = int(torch.seed() % 2**63)
    elif isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        seed = int(random_state)
    else:
        raise ValueError(f"random_state must be an int, a torch.Generator, a numpy.random.RandomState / "
                         f"Generator or None; got {random_state!r}.")
    return torch.Generator().manual_seed(seed)


def soft_dtw_kmeans(X, n_clusters: int, gamma: float = 1.0, *, x_lengths=None, max_iter: int = 50,
                    n_init: int = 1, init: Union[str, torch.Tensor] = "k-means++", random_state=None,
                    tol: float = 1e-6, divergence: bool = True, barycenter_max_iter: int = 20,
                    barycenter_method: str = "lbfgs", bandwidth: Optional[float] = None,
                    itakura_max_slope: Optional[float] = None, cost="sqeuclidean",
                    batch_size: Optional[int] = None, progress: bool = False,
                    backend: Optional[str] = None, center_length: Union[None, str, int] = None) -> KMeansResult:
    r"""k-means clustering of time series under soft-DTW (functional form of :class:`SoftDTWKMeans`).

    Minimises the inertia :math:`\sum_p d(x_p, c_{\ell(p)})` with d the soft-DTW divergence (default)
    or soft-DTW, by alternating assignment and batched barycenter updates.

    Args:
        X: `(P, T, D)` float tensor / array (`(P, T)` means univariate), padded past ``x_lengths``
            or NaN-padded (trailing all-NaN steps end a series, as tslearn pads).
        n_clusters: K, 1 <= K <= P.
        gamma: soft-DTW smoothing > 0.
        x_lengths: optional `(P,)` int valid lengths.
        max_iter: maximum assignment / update rounds.
        n_init: runs from different seedings; the one of lowest inertia is returned.
        init: "k-means++" (default; greedy k-means++ under the soft-DTW divergence), "random" (K
            distinct series) or a `(K, L, D)` tensor of initial centres (NaN-padded past each centre's
            length for centres of different lengths, as ``centers`` is returned).
        random_state: int seed, torch.Generator, ``numpy.random.RandomState`` / ``Generator`` (a seed
            is drawn from it) for reproducible results; None for fresh entropy.
        tol: stop when the relative decrease of the inertia is <= tol (or when no label changes).
        divergence: use the soft-DTW divergence (default; inertia >= 0 and non-increasing) or raw
            soft-DTW values (tslearn's choice; can be negative). Seeding always uses the divergence.
        barycenter_max_iter, barycenter_method: L-BFGS ("lbfgs") or "adam" iterations per update.
        bandwidth, itakura_max_slope, cost, backend: as :func:`softdtw.soft_dtw`.
        batch_size, progress: as :func:`softdtw.pairwise_soft_dtw` (progress also shows the rounds).
        center_length: the number of steps of each centre.

            - "median": each centre is seeded at its series' length and, at every update, resized
              (linear resampling, then the barycenter at that length) to the median length of its
              members (rounded half up; a cluster left empty keeps its length). With series of
              different lengths each centre then looks like its members, where a centre as long as
              the longest series is a stretched copy of short members.
            - "max": every centre has the length of the longest series (the init tensor's length
              with an init tensor), the behaviour before per-centre lengths; the centres are never resized.
            - an int n >= 1: every centre has n steps.
            - None (default): "median", or the init tensor's lengths, kept fixed, when ``init`` is a
              tensor (as :func:`softdtw.soft_dtw_barycenter` keeps its init's length).

            With series of equal length T, "median" and "max" are the same: every centre has T steps.
            While the lengths change, a resize can raise the inertia, so the inertia is non-increasing
            from the round on which the lengths stop changing; the ``tol`` stop is not taken on a round
            that changed them.

    Returns:
        :class:`KMeansResult` (centers `(K, L, D)` NaN-padded past ``center_lengths``, labels,
        inertia, n_iter, converged, losses, center_lengths `(K,)`).

    Devices: CPU, CUDA.

    Example:
        >>> from softdtw.datasets import make_cbf
        >>> from softdtw.clustering import soft_dtw_kmeans
        >>> X, y = make_cbf(30, length=64, seed=0)
        >>> res = soft_dtw_kmeans(X, 3, gamma=1.0, random_state=0, max_iter=5)
        >>> res.centers.shape, bool((res.losses[1:] <= res.losses[:-1] * (1 + 1e-4)).all())
        (torch.Size([3, 64, 1]), True)
    """
    X, x_lengths = as_padded_set(X, "X", x_lengths, "x_lengths")
    P, T, D = X.shape
    if X.dtype in (torch.float16, torch.bfloat16):
        X = X.float()
    K = check_int(n_clusters, "n_clusters", 1)
    if K > P:
        raise ValueError(f"n_clusters={K} is larger than the number of series P={P}; use at most {P} clusters.")
    max_iter = check_int(max_iter, "max_iter", 0)
    n_init = check_int(n_init, "n_init", 1)
    barycenter_max_iter = check_int(barycenter_max_iter, "barycenter_max_iter", 0)
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not tol >= 0:
        raise ValueError(f"tol must be a number >= 0; got {tol!r}.")
    user_lengths, lengths = as_set_lengths(x_lengths, "x_lengths", P, T)
    L = int(lengths.max())
    X = X[:, :L]
    if center_length is not None and not (isinstance(center_length, str) and center_length in _CENTER_LENGTHS) \
            and not (isinstance(center_length, numbers.Integral) and not isinstance(center_length, bool)
                     and center_length >= 1):
        raise ValueError(f"center_length must be 'median', 'max', an int >= 1 (steps of every centre) or None; "
                         f"got {center_length!r}.")
    init_lengths = None
    if isinstance(init, (torch.Tensor, np.ndarray)):
        C_init = torch.as_tensor(init).to(device=X.device, dtype=X.dtype)
        if C_init.dim() != 3 or C_init.shape[0] != K or C_init.shape[2] != D:
            raise ValueError(f"init as a tensor must have shape ({K}, L, {D}) (n_clusters, length, features); "
                             f"got {tuple(C_init.shape)}.")
        if n_init != 1:
            raise ValueError(f"n_init={n_init} with an explicit init tensor would repeat the same run; use n_init=1.")
        C_init, init_lengths = nan_padding(C_init, "init", None, "the centres' lengths")
        init_lengths = torch.full((K,), C_init.shape[1], dtype=torch.int64) if init_lengths is None \
            else init_lengths.cpu()
        # Padded past its longest centre (tslearn pads to the longest series): the barycenters take the centres
        # up to their own lengths only.
        C_init = C_init[:, :int(init_lengths.max())]
    elif init in _INITS:
        C_init = None
    else:
        raise ValueError(f"init must be one of {_INITS} or a ({K}, L, {D}) tensor of centres; got {init!r}.")
    if center_length is None:
        center_length = "fixed" if C_init is not None else "median"
    gen = _generator(random_state)

    kw = dict(cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, backend=backend)
    dissim = _Dissimilarity(X, lengths, user_lengths, gamma, divergence, kw, batch_size, False)
    best = None
    for _ in range(n_init):
        res = _one_run(X, lengths, user_lengths, K, L, gamma, C_init, init_lengths, init, gen, dissim, max_iter,
                       tol, divergence, barycenter_max_iter, barycenter_method, kw, batch_size, progress,
                       center_length)
        if best is None or res.inertia < best.inertia:
            best = res
    return best


def _resize(S: torch.Tensor, s_len: torch.Tensor, new_len: torch.Tensor) -> torch.Tensor:
    """Series S[k, :s_len[k]] linearly resampled to new_len[k] steps, padded (finitely) to the longest:
    `(K, max(new_len), D)`. Unchanged when the lengths are unchanged."""
    L = int(new_len.max())
    if torch.equal(s_len, new_len) and S.shape[1] == L:
        return S
    if bool((new_len == L).all()):
        return _resample(S, s_len, L)
    return _resample(S, s_len, L, new_len)


def _member_lengths(labels: torch.Tensor, lengths: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """`(K,)` median member length of each cluster, rounded half up; an empty cluster keeps prev[k]."""
    out = prev.clone()
    for k in range(len(prev)):
        m = lengths[labels == k]
        if len(m):
            out[k] = int(math.floor(float(np.median(m.numpy())) + 0.5))
    return out


def _lengths_arg(c_len: torch.Tensor, C: torch.Tensor):
    """The centres' lengths to pass on: None when every centre spans C's steps (the plain problem)."""
    return None if bool((c_len == C.shape[1]).all()) else c_len


def _assign(dissim: _Dissimilarity, C: torch.Tensor, c_len: torch.Tensor, X, lengths, L, mode):
    Dm = dissim(C, _lengths_arg(c_len, C)).double().cpu()
    K = C.shape[0]
    labels = torch.argmin(Dm, dim=1)
    # Empty clusters: give each the series farthest from its centre (among clusters of > 1 series).
    counts = torch.bincount(labels, minlength=K)
    if bool((counts == 0).any()):
        C, c_len = C.clone(), c_len.clone()
        for k in (counts == 0).nonzero().flatten().tolist():
            own = Dm[torch.arange(len(labels)), labels].clone()
            sizes = torch.bincount(labels, minlength=K)
            own[sizes[labels] <= 1] = -math.inf
            p = int(torch.argmax(own))
            n = int(lengths[p]) if mode == "median" else int(c_len[k])  # the series at its own length
            if n > C.shape[1]:
                C = torch.cat([C, C[:, -1:].expand(K, n - C.shape[1], C.shape[2])], 1)
            C[k, :n] = _resample(X[p:p + 1], lengths[p:p + 1], n)[0]
            C[k, n:] = C[k, n - 1]
            c_len[k] = n
            labels[p] = k
        if bool((c_len < C.shape[1]).all()):
            C = C[:, :int(c_len.max())]
        Dm = dissim(C, _lengths_arg(c_len, C)).double().cpu()
        labels = torch.argmin(Dm, dim=1)
    inertia = float(Dm[torch.arange(len(labels)), labels].sum())
    return C, c_len, labels, inertia


def _one_run(X, lengths, user_lengths, K, L, gamma, C_init, init_lengths, init, gen, dissim, max_iter, tol,
             divergence, barycenter_max_iter, barycenter_method, kw, batch_size, progress, mode) -> KMeansResult:
    P = X.shape[0]
    if C_init is not None:
        C, c_len = C_init, init_lengths
        if mode == "max":
            mode = "fixed"  # as before: an init tensor keeps its length
        elif isinstance(mode, numbers.Integral):
            C, c_len = _resize(C, c_len, torch.full((K,), int(mode))), torch.full((K,), int(mode))
    else:
        if init == "random":
            idx = torch.randperm(P, generator=gen)[:K]
        else:
            idx = _kmeans_plus_plus(X, lengths, K, L, dissim, gen)
        seeds = X.index_select(0, idx.to(X.device))
        if mode == "median":  # each seed at its own length
            c_len = lengths[idx].clone()
        else:
            c_len = torch.full((K,), L if mode == "max" else int(mode), dtype=torch.int64)
        C = _resize(seeds, lengths[idx], c_len)
    C, c_len, labels, inertia = _assign(dissim, C, c_len, X, lengths, L, mode)
    losses = [inertia]
    converged = False
    n_iter = 0
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=max_iter, desc="soft-DTW k-means", unit="round", leave=False, dynamic_ncols=True)
    try:
        for it in range(max_iter):
            resized = False
            if mode == "median":
                new_len = _member_lengths(labels, lengths, c_len)
                resized = not torch.equal(new_len, c_len)
                C, c_len = _resize(C, c_len, new_len), new_len
            res = soft_dtw_barycenter(X, gamma, groups=labels.to(X.device), n_groups=K, init=C,
                                      length=_lengths_arg(c_len, C), x_lengths=user_lengths,
                                      max_iter=barycenter_max_iter, method=barycenter_method,
                                      divergence=divergence, batch_size=batch_size, **kw)
            C = res.barycenter if _lengths_arg(c_len, C) is None else torch.where(torch.isnan(res.barycenter),
                                                                                 C, res.barycenter)
            C, c_len, new_labels, new_inertia = _assign(dissim, C, c_len, X, lengths, L, mode)
            n_iter = it + 1
            losses.append(new_inertia)
            changed = bool((new_labels != labels).any())
            labels = new_labels
            prev, inertia = inertia, new_inertia
            if bar is not None:
                bar.update(1)
                bar.set_postfix(inertia=f"{inertia:.4g}")
            if not changed or (not resized and (prev - inertia) <= tol * max(abs(prev), abs(inertia), 1e-300)):
                converged = True
                break
    finally:
        if bar is not None:
            bar.close()
    if not bool((c_len == C.shape[1]).all()):
        pad = torch.arange(C.shape[1], device=C.device).unsqueeze(0) >= c_len.to(C.device).unsqueeze(1)
        C = C.masked_fill(pad.unsqueeze(-1), math.nan)
    return KMeansResult(C, labels, inertia, n_iter, converged, torch.tensor(losses, dtype=torch.float64),
                        c_len.clone())


class SoftDTWKMeans(SeriesInputMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """k-means clustering of time series under soft-DTW, a scikit-learn estimator.

    See :func:`soft_dtw_kmeans` for the algorithm and the arguments. Takes and returns NumPy
    (torch tensors are accepted too); works in Pipeline, GridSearchCV and cross_val_score.

    Input X: `(P, T, D)` series, or `(P, T)` for univariate series (each row one series, as in
    tslearn), as an array, a list (ragged lists are NaN-padded) or a tensor; integer values are
    cast to float64. Trailing all-NaN steps are padding and set each series' length (tslearn's
    ``to_time_series_dataset`` layout); ``x_lengths`` may be given instead. Series passed to
    ``predict`` / ``transform`` may have other lengths than the training series, but the same D.

    Args:
        n_clusters, max_iter, n_init, init, tol, divergence, barycenter_max_iter, barycenter_method,
            bandwidth, itakura_max_slope, cost, batch_size, progress, backend, center_length: as
            :func:`soft_dtw_kmeans` (numpy integers are fine). ``center_length`` (default None: the
            median member length of each cluster, or the init array's lengths) sizes each centre to
            its cluster; "max" gives every centre the longest series' length.
        gamma: soft-DTW smoothing >= 0, or "auto" for :func:`softdtw.gamma_heuristic` of the
            training series (the value used is ``gamma_``).
        random_state: None, an int or a ``numpy.random.RandomState`` (scikit-learn's convention).
        device: where to compute ("cpu", "cuda", a torch.device); None: the device of a tensor X,
            else the CPU.

    Attributes:
        cluster_centers_: `(K, L, D)` float ndarray of centres, NaN-padded past each centre's length
            (tslearn's convention for series of different lengths; no NaN with series of equal length).
        cluster_center_lengths_: `(K,)` int64 ndarray, the steps of each centre.
        labels_: `(P,)` int64 ndarray.
        inertia_: float. n_iter_: int. converged_: bool. losses_: `(n_iter_ + 1,)` float64 ndarray.
        gamma_: the gamma used (float). n_features_in_: D, the features per time step.

    Example:
        >>> from softdtw.datasets import make_cbf
        >>> from softdtw.clustering import SoftDTWKMeans
        >>> X, y = make_cbf(30, length=64, seed=0)
        >>> km = SoftDTWKMeans(3, gamma=1.0, random_state=0, max_iter=5).fit(X.numpy())
        >>> km.cluster_centers_.shape, km.predict(X[:4].numpy()).shape, km.labels_.dtype
        ((3, 64, 1), (4,), dtype('int64'))
    """

    def __init__(self, n_clusters: int = 8, gamma=1.0, *, max_iter: int = 50, n_init: int = 1,
                 init="k-means++", random_state=None, tol: float = 1e-6, divergence: bool = True,
                 barycenter_max_iter: int = 20, barycenter_method: str = "lbfgs",
                 bandwidth: Optional[float] = None, itakura_max_slope: Optional[float] = None,
                 cost="sqeuclidean", batch_size: Optional[int] = None, progress: bool = False,
                 backend: Optional[str] = None, device=None, center_length=None):
        self.n_clusters = n_clusters
        self.gamma = gamma
        self.max_iter = max_iter
        self.n_init = n_init
        self.init = init
        self.random_state = random_state
        self.tol = tol
        self.divergence = divergence
        self.barycenter_max_iter = barycenter_max_iter
        self.barycenter_method = barycenter_method
        self.bandwidth = bandwidth
        self.itakura_max_slope = itakura_max_slope
        self.cost = cost
        self.batch_size = batch_size
        self.progress = progress
        self.backend = backend
        self.device = device
        self.center_length = center_length

    def _kw(self) -> dict:
        return dict(cost=self.cost, bandwidth=self.bandwidth, itakura_max_slope=self.itakura_max_slope,
                    backend=self.backend)

    def fit(self, X, y=None, x_lengths=None) -> "SoftDTWKMeans":
        """Cluster the series X (y is ignored, as in scikit-learn); returns self.

        Args:
            X: `(P, T, D)` or `(P, T)` series (see the class docstring); NaN padding sets lengths.
            y: ignored.
            x_lengths: optional `(P,)` int valid lengths (instead of NaN padding).
        """
        X, lengths, _ = validate_series(self, X, reset=True, x_lengths=x_lengths, device=self.device)
        gamma = resolve_gamma(self.gamma, X, lengths, **self._kw())
        init = self.init
        if not isinstance(init, str):
            init = torch.as_tensor(np.asarray(init.detach().cpu() if isinstance(init, torch.Tensor) else init,
                                              dtype=np.float64))
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        res = soft_dtw_kmeans(
            X, self.n_clusters, gamma, x_lengths=lengths, max_iter=self.max_iter, n_init=self.n_init,
            init=init, random_state=seed, tol=self.tol, divergence=self.divergence,
            barycenter_max_iter=self.barycenter_max_iter, barycenter_method=self.barycenter_method,
            bandwidth=self.bandwidth, itakura_max_slope=self.itakura_max_slope, cost=self.cost,
            batch_size=self.batch_size, progress=self.progress, backend=self.backend,
            center_length=self.center_length)
        self._device = X.device
        self.gamma_ = gamma
        self.cluster_centers_ = res.centers.detach().cpu().numpy()
        self.cluster_center_lengths_ = res.center_lengths.cpu().numpy().astype(np.int64)
        self.labels_ = res.labels.cpu().numpy().astype(np.int64)
        self.inertia_ = float(res.inertia)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.losses_ = res.losses.cpu().numpy()
        return self

    def fit_predict(self, X, y=None, x_lengths=None) -> np.ndarray:
        """Fit and return the `(P,)` int64 labels of X."""
        return self.fit(X, x_lengths=x_lengths).labels_

    def _dissimilarities(self, X, x_lengths) -> torch.Tensor:
        check_is_fitted(self, "cluster_centers_")
        device = self.device if self.device is not None else getattr(self, "_device", None)
        X, lengths, _ = validate_series(self, X, reset=False, x_lengths=x_lengths, device=device)
        C = torch.as_tensor(self.cluster_centers_).to(device=X.device, dtype=X.dtype)
        C, c_len = nan_padding(C, "cluster_centers_", None, "cluster_center_lengths_")  # NaN past each length
        user_lengths, full = as_set_lengths(lengths, "x_lengths", X.shape[0], X.shape[1])
        dissim = _Dissimilarity(X, full, user_lengths, self.gamma_, self.divergence, self._kw(), self.batch_size,
                                self.progress)
        return dissim(C, None if c_len is None else c_len.cpu())

    def transform(self, X, x_lengths=None) -> np.ndarray:
        """`(P, K)` float ndarray: dissimilarities (divergence or soft-DTW, as fitted) of X to the centres."""
        return self._dissimilarities(X, x_lengths).detach().cpu().numpy()

    def predict(self, X, x_lengths=None) -> np.ndarray:
        """`(P,)` int64 ndarray: the index of the closest centre of each series of X."""
        return torch.argmin(self._dissimilarities(X, x_lengths), dim=1).cpu().numpy().astype(np.int64)

    def score(self, X, y=None, x_lengths=None) -> float:
        """Opposite of the inertia of X under the fitted centres (higher is better, as scikit-learn)."""
        Dm = self._dissimilarities(X, x_lengths)
        return -float(Dm.min(dim=1).values.sum())
