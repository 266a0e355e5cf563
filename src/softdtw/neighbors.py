"""Nearest-neighbour classification under soft-DTW, a scikit-learn estimator."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._estimator import SeriesInputMixin, check_int, resolve_gamma, validate_series
from .pairwise import pairwise_soft_dtw

__all__ = ["SoftDTWKNeighborsClassifier"]

_METRICS = ("soft_dtw", "euclidean")


class SoftDTWKNeighborsClassifier(SeriesInputMixin, ClassifierMixin, BaseEstimator):
    r"""k-nearest-neighbour classifier (1-NN by default) under soft-DTW, hard DTW or Euclidean distance.

    Distances come from :func:`softdtw.pairwise_soft_dtw` (batched, chunked, CPU or GPU). By default
    the dissimilarity is the soft-DTW *divergence*

    .. math:: \mathrm{sdtw}_\gamma(x, y) - \tfrac12\mathrm{sdtw}_\gamma(x, x) - \tfrac12\mathrm{sdtw}_\gamma(y, y)

    (Blondel, Mensch & Vert 2021), which is >= 0 and zero at x = y; raw soft-DTW is not minimised at
    y = x and ranks long, smooth neighbours too close. ``gamma=0.0`` gives hard DTW (the classic
    1-NN-DTW baseline), ``metric="euclidean"`` the lock-step Euclidean distance.

    A scikit-learn classifier: takes and returns NumPy (torch tensors are accepted too) and works in
    Pipeline, GridSearchCV and cross_val_score. Input X: `(P, T, D)` series, or `(P, T)` for
    univariate series (each row one series, as in tslearn), as an array, a list (ragged lists are
    NaN-padded) or a tensor; integer values are cast to float64. Trailing all-NaN steps are padding
    and set each series' length (tslearn's ``to_time_series_dataset`` layout); ``x_lengths`` may
    be given instead. Query series may have other lengths than the training series, but the same D.

    Args:
        n_neighbors: k >= 1 (Python or NumPy integer); votes are uniform, ties go to the class of the
            nearest neighbour.
        gamma: soft-DTW smoothing >= 0 (0 = hard DTW), or "auto" for :func:`softdtw.gamma_heuristic`
            of the training series (the value used is ``gamma_``).
        divergence: use the soft-DTW divergence (default True) or raw soft-DTW values.
        metric: "soft_dtw" (default) or "euclidean" (needs equal lengths).
        bandwidth, itakura_max_slope, cost, backend: as :func:`softdtw.soft_dtw`.
        batch_size, progress: as :func:`softdtw.pairwise_soft_dtw`.
        device: where distances are computed ("cpu", "cuda", a torch.device); None: the device of a
            tensor X, else the CPU.

    Attributes:
        classes_: the sorted distinct training labels (ndarray). gamma_: the gamma used (float).
        n_features_in_: D, the features per time step.

    Example:
        >>> from softdtw.datasets import make_cbf
        >>> from softdtw.neighbors import SoftDTWKNeighborsClassifier
        >>> X, y = make_cbf(60, length=64, seed=0)
        >>> X, y = X.numpy(), y.numpy()
        >>> clf = SoftDTWKNeighborsClassifier(gamma=1.0, progress=False).fit(X[:30], y[:30])
        >>> clf.score(X[30:], y[30:]) > 0.8, clf.predict(X[30:33]).dtype
        (True, dtype('int64'))
    """

    def __init__(self, n_neighbors: int = 1, gamma=1.0, *, divergence: bool = True,
                 metric: str = "soft_dtw", bandwidth: Optional[float] = None,
                 itakura_max_slope: Optional[float] = None, cost="sqeuclidean",
                 batch_size: Optional[int] = None, progress: bool = True, backend: Optional[str] = None,
                 device=None):
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.divergence = divergence
        self.metric = metric
        self.bandwidth = bandwidth
        self.itakura_max_slope = itakura_max_slope
        self.cost = cost
        self.batch_size = batch_size
        self.progress = progress
        self.backend = backend
        self.device = device

    def _check_params(self) -> None:
        check_int(self.n_neighbors, "n_neighbors", 1)
        if self.metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}; got {self.metric!r}. For hard DTW use "
                             f"metric='soft_dtw' with gamma=0.0.")

    def fit(self, X, y, x_lengths=None) -> "SoftDTWKNeighborsClassifier":
        """Store the training set.

        Args:
            X: `(P, T, D)` or `(P, T)` series (see the class docstring); NaN padding sets lengths.
            y: `(P,)` labels (ints or strings; array, list or tensor).
            x_lengths: optional `(P,)` int valid lengths (instead of NaN padding).

        Returns:
            self.
        """
        self._check_params()
        X, lengths, y = validate_series(self, X, y, reset=True, x_lengths=x_lengths, device=self.device)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        self.gamma_ = resolve_gamma(self.gamma, X, lengths, cost=self.cost, bandwidth=self.bandwidth,
                                    itakura_max_slope=self.itakura_max_slope, backend=self.backend) \
            if self.metric == "soft_dtw" else None
        self._X_fit = X
        self._lengths_fit = lengths
        self._codes = torch.as_tensor(codes.reshape(-1), dtype=torch.int64)
        return self

    def _distances(self, X, x_lengths) -> torch.Tensor:
        """`(P_query, P_fit)` dissimilarities."""
        check_is_fitted(self, "classes_")
        self._check_params()
        Xf = self._X_fit
        X, lengths, _ = validate_series(self, X, reset=False, x_lengths=x_lengths, device=Xf.device,
                                        dtype=Xf.dtype)
        if self.metric == "euclidean":
            if X.shape[1] != Xf.shape[1] or lengths is not None or self._lengths_fit is not None:
                padded = lengths is not None or self._lengths_fit is not None
                raise ValueError(
                    f"metric='euclidean' compares series step by step and needs equal lengths without "
                    f"padding; got query length {X.shape[1]} and training length {Xf.shape[1]}"
                    f"{' with lengths (x_lengths or NaN padding)' if padded else ''}. "
                    f"Use metric='soft_dtw' (any lengths) or resample the series to one length."
                )
            return torch.cdist(X.reshape(X.shape[0], -1), Xf.reshape(Xf.shape[0], -1))
        return pairwise_soft_dtw(
            X, Xf, self.gamma_, divergence=self.divergence, x_lengths=lengths, y_lengths=self._lengths_fit,
            bandwidth=self.bandwidth, itakura_max_slope=self.itakura_max_slope, cost=self.cost,
            batch_size=self.batch_size, progress=self.progress, backend=self.backend)

    def _kneighbors(self, X, n_neighbors, x_lengths) -> Tuple[torch.Tensor, torch.Tensor]:
        check_is_fitted(self, "classes_")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        n_fit = self._X_fit.shape[0]
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_fit:
            raise ValueError(f"n_neighbors must be an integer in [1, {n_fit}] (the training set size); got {k!r}.")
        with torch.no_grad():
            dist = self._distances(X, x_lengths)
            # stable: among equal distances the earlier training series comes first
            order = torch.sort(dist, dim=1, stable=True)
        return order.values[:, :int(k)], order.indices[:, :int(k)]

    def kneighbors(self, X, n_neighbors: Optional[int] = None, return_distance: bool = True,
                   x_lengths=None):
        """The k nearest training series of each query.

        Args:
            X: `(P, T, D)` or `(P, T)` query series; n_neighbors: k (default: the estimator's).
            return_distance: also return the dissimilarities.
            x_lengths: optional `(P,)` valid lengths of the queries.

        Returns:
            ``(dist, ind)``, both `(P, k)` ndarrays (dist float, ind int64, nearest first), or ``ind``.
        """
        d, ind = self._kneighbors(X, n_neighbors, x_lengths)
        ind = ind.cpu().numpy().astype(np.int64)
        return (d.cpu().numpy(), ind) if return_distance else ind

    def _votes(self, X, x_lengths) -> Tuple[torch.Tensor, torch.Tensor]:
        _, ind = self._kneighbors(X, None, x_lengths)
        codes = self._codes[ind.cpu()]  # (P, k)
        K = len(self.classes_)
        k = codes.shape[1]
        counts = torch.zeros(codes.shape[0], K, dtype=torch.int64)
        counts.scatter_add_(1, codes, torch.ones_like(codes))
        # Tie-break: among the most voted classes, the one with the nearest neighbour.
        first_rank = torch.full((codes.shape[0], K), k, dtype=torch.int64)
        ranks = torch.arange(k, dtype=torch.int64).expand_as(codes)
        first_rank.scatter_reduce_(1, codes, ranks, reduce="amin")
        winner = torch.argmax(counts * (k + 1) - first_rank, dim=1)
        return counts, winner

    def predict(self, X, x_lengths=None) -> np.ndarray:
        """`(P,)` ndarray of predicted labels (of the kind of ``classes_``)."""
        _, winner = self._votes(X, x_lengths)
        return self.classes_[winner.numpy()]

    def predict_proba(self, X, x_lengths=None) -> np.ndarray:
        """`(P, n_classes)` float64 ndarray: the fraction of the k neighbours in each class of ``classes_``."""
        counts, _ = self._votes(X, x_lengths)
        return (counts.double() / counts.sum(1, keepdim=True)).numpy()

    def score(self, X, y, sample_weight=None, x_lengths=None) -> float:
        """Mean accuracy of :meth:`predict` on (X, y) (``sklearn.metrics.accuracy_score``)."""
        from sklearn.metrics import accuracy_score

        if isinstance(y, torch.Tensor):
            y = y.detach().cpu().numpy()
        return float(accuracy_score(y, self.predict(X, x_lengths), sample_weight=sample_weight))
