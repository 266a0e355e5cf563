"""Nearest-neighbour classification under soft-DTW, with the scikit-learn estimator API."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from ._estimator import BaseEstimator, LabelEncoder
from .pairwise import as_series_set, as_set_lengths, pairwise_soft_dtw

__all__ = ["SoftDTWKNeighborsClassifier"]

_METRICS = ("soft_dtw", "euclidean")


class SoftDTWKNeighborsClassifier(BaseEstimator):
    r"""k-nearest-neighbour classifier (1-NN by default) under soft-DTW, hard DTW or Euclidean distance.

    Distances come from :func:`softdtw.pairwise_soft_dtw` (batched, chunked, CPU or GPU). By default
    the dissimilarity is the soft-DTW *divergence*

    .. math:: \mathrm{sdtw}_\gamma(x, y) - \tfrac12\mathrm{sdtw}_\gamma(x, x) - \tfrac12\mathrm{sdtw}_\gamma(y, y)

    (Blondel, Mensch & Vert 2021), which is >= 0 and zero at x = y; raw soft-DTW is not minimised at
    y = x and ranks long, smooth neighbours too close. ``gamma=0.0`` gives hard DTW (the classic
    1-NN-DTW baseline), ``metric="euclidean"`` the lock-step Euclidean distance.

    Args:
        n_neighbors: k >= 1; votes are uniform, ties go to the class of the nearest neighbour.
        gamma: soft-DTW smoothing >= 0 (0 = hard DTW).
        divergence: use the soft-DTW divergence (default True) or raw soft-DTW values.
        metric: "soft_dtw" (default) or "euclidean" (needs equal lengths).
        bandwidth, itakura_max_slope, cost, backend: as :func:`softdtw.soft_dtw`.
        batch_size, progress: as :func:`softdtw.pairwise_soft_dtw`.
        device: where distances are computed ("cpu", "cuda", a torch.device); None keeps the data's device.

    Attributes:
        classes_: the sorted distinct training labels (NumPy array).
        X_fit_: `(P, T, D)` training series on the compute device; lengths_fit_ `(P,)` int64.

    Example:
        >>> from softdtw.datasets import make_cbf
        >>> from softdtw.neighbors import SoftDTWKNeighborsClassifier
        >>> X, y = make_cbf(60, length=64, seed=0)
        >>> clf = SoftDTWKNeighborsClassifier(gamma=1.0, progress=False).fit(X[:30], y[:30])
        >>> clf.score(X[30:], y[30:]) > 0.8
        True
    """

    def __init__(self, n_neighbors: int = 1, gamma: float = 1.0, *, divergence: bool = True,
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
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, int) or self.n_neighbors < 1:
            raise ValueError(f"n_neighbors must be an integer >= 1; got {self.n_neighbors!r}.")
        if self.metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}; got {self.metric!r}. For hard DTW use "
                             f"metric='soft_dtw' with gamma=0.0.")

    def _to_device(self, X: torch.Tensor) -> torch.Tensor:
        return X if self.device is None else X.to(self.device)

    def fit(self, X, y, x_lengths=None) -> "SoftDTWKNeighborsClassifier":
        """Store the training set.

        Args:
            X: `(P, T, D)` float tensor / array of series (`(P, T)` means univariate).
            y: `(P,)` labels (ints or strings; tensor, array or list).
            x_lengths: optional `(P,)` int valid lengths of the padded series.

        Returns:
            self.
        """
        self._check_params()
        X = as_series_set(X, "X")
        enc = LabelEncoder(y)
        if len(enc.codes) != X.shape[0]:
            raise ValueError(f"X and y must have the same number of series; got {X.shape[0]} series and "
                             f"{len(enc.codes)} labels.")
        user_lengths, lengths = as_set_lengths(x_lengths, "x_lengths", X.shape[0], X.shape[1])
        self.X_fit_ = self._to_device(X)
        self.lengths_fit_ = lengths
        self._has_lengths = user_lengths is not None
        self._encoder = enc
        self.classes_ = enc.classes_
        self.y_fit_codes_ = enc.codes
        return self

    def _distances(self, X, x_lengths) -> torch.Tensor:
        """`(P_query, P_fit)` dissimilarities."""
        self._check_fitted("X_fit_")
        self._check_params()
        X = self._to_device(as_series_set(X, "X"))
        user_lengths, lengths = as_set_lengths(x_lengths, "x_lengths", X.shape[0], X.shape[1])
        if X.shape[-1] != self.X_fit_.shape[-1]:
            raise ValueError(f"X has D={X.shape[-1]} features but the classifier was fitted on "
                             f"D={self.X_fit_.shape[-1]}; pass series with the same feature size.")
        if self.metric == "euclidean":
            if X.shape[1] != self.X_fit_.shape[1] or user_lengths is not None or self._has_lengths:
                raise ValueError(
                    f"metric='euclidean' compares series step by step and needs equal lengths without "
                    f"padding; got query length {X.shape[1]} and training length {self.X_fit_.shape[1]}"
                    f"{' with x_lengths' if (user_lengths is not None or self._has_lengths) else ''}. "
                    f"Use metric='soft_dtw' (any lengths) or resample the series to one length."
                )
            A = X.reshape(X.shape[0], -1).to(self.X_fit_.dtype)
            Bm = self.X_fit_.reshape(self.X_fit_.shape[0], -1)
            return torch.cdist(A, Bm)
        return pairwise_soft_dtw(
            X.to(self.X_fit_.dtype), self.X_fit_, self.gamma, divergence=self.divergence,
            x_lengths=lengths if user_lengths is not None else None,
            y_lengths=self.lengths_fit_ if self._has_lengths else None,
            bandwidth=self.bandwidth, itakura_max_slope=self.itakura_max_slope, cost=self.cost,
            batch_size=self.batch_size, progress=self.progress, backend=self.backend)

    def kneighbors(self, X, n_neighbors: Optional[int] = None, return_distance: bool = True,
                   x_lengths=None):
        """The k nearest training series of each query.

        Args:
            X: `(P, T, D)` query series; n_neighbors: k (default: the estimator's).
            return_distance: also return the dissimilarities.
            x_lengths: optional `(P,)` valid lengths of the queries.

        Returns:
            ``(dist, ind)``, both `(P, k)` (dist float, ind int64, sorted nearest first), or ``ind`` only.
        """
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        self._check_fitted("X_fit_")
        n_fit = self.X_fit_.shape[0]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_fit:
            raise ValueError(f"n_neighbors must be an integer in [1, {n_fit}] (the training set size); got {k!r}.")
        with torch.no_grad():
            dist = self._distances(X, x_lengths)
            d, ind = torch.topk(dist, k, dim=1, largest=False, sorted=True)
        return (d, ind) if return_distance else ind

    def _votes(self, X, x_lengths) -> Tuple[torch.Tensor, torch.Tensor]:
        _, ind = self.kneighbors(X, x_lengths=x_lengths)
        ind = ind.cpu()
        codes = self.y_fit_codes_[ind]  # (P, k)
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

    def predict(self, X, x_lengths=None):
        """Predicted labels `(P,)` of the query series X (same kind as the training labels)."""
        _, winner = self._votes(X, x_lengths)
        return self._encoder.decode(winner)

    def predict_proba(self, X, x_lengths=None) -> torch.Tensor:
        """`(P, n_classes)` float tensor: the fraction of the k neighbours in each class of ``classes_``."""
        counts, _ = self._votes(X, x_lengths)
        return counts.double() / counts.sum(1, keepdim=True)

    def score(self, X, y, x_lengths=None) -> float:
        """Mean accuracy of :meth:`predict` on (X, y)."""
        pred = self.predict(X, x_lengths)
        truth = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        pred = pred.numpy() if isinstance(pred, torch.Tensor) else pred
        if len(truth) != len(pred):
            raise ValueError(f"y must have one label per series of X ({len(pred)}); got {len(truth)}.")
        return float((pred == truth).mean())
