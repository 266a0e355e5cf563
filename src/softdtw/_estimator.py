"""Input validation shared by the scikit-learn estimators (SoftDTWKMeans, SoftDTWKNeighborsClassifier).

A data set X is read as scikit-learn and tslearn read it:

- `(P, T, D)`: P series of T steps and D features per step;
- `(P, T)`: P univariate series (D = 1), so a plain scikit-learn matrix is a set of series whose
  "features" are time steps;
- a list of series (ragged lists are NaN-padded to the longest, as tslearn's
  ``to_time_series_dataset``), integer arrays (cast to float64), torch tensors.

Trailing all-NaN steps are padding: they set each series' length. NaN elsewhere, and Inf, raise.
``n_features_in_`` is D, the features per step (tslearn's convention): series of any length can be
passed to ``predict`` and ``transform``, and D must match the fit.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import numpy as np
import torch
from sklearn.utils.validation import check_array, validate_data

from ._checks import nan_padding
from .pairwise import as_set_lengths

FLOAT_DTYPES = (np.float64, np.float32)


class SeriesInputMixin:
    """scikit-learn tags of an estimator of time series: X may be 3-d `(P, T, D)` (put it left of BaseEstimator)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        return tags


def _ragged_to_padded(X):
    """A list of series of different lengths, NaN-padded to the longest (else X unchanged)."""
    if isinstance(X, np.ndarray) and X.dtype == object and X.ndim == 1:
        X = list(X)  # a NumPy array of series objects of different lengths
    if not isinstance(X, (list, tuple)) or len(X) == 0:
        return X
    try:
        np.asarray(X, dtype=float)
        return X
    except (ValueError, TypeError):
        pass
    series = []
    for p, s in enumerate(X):
        a = np.asarray(s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else s, dtype=float)
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2 or a.shape[0] == 0:
            raise ValueError(f"series {p} of X must have shape (T,) or (T, D) with T >= 1; got shape {a.shape}.")
        series.append(a)
    D = {a.shape[1] for a in series}
    if len(D) != 1:
        raise ValueError(f"the series of X must all have the same number of features D; got D in {sorted(D)}.")
    out = np.full((len(series), max(a.shape[0] for a in series), D.pop()), np.nan)
    for p, a in enumerate(series):
        out[p, :a.shape[0]] = a
    return out


def validate_series(estimator, X, y=None, *, reset: bool, x_lengths=None, device=None,
                    dtype: Optional[torch.dtype] = None):
    """Validate a set of series for ``estimator``.

    Returns ``(X, lengths, y)``: X a `(P, T, D)` float tensor on ``device`` (default: X's own device
    for a torch tensor, else the CPU) with NaN padding zeroed; lengths `(P,)` int64 (CPU) or None;
    y the validated numpy targets (None when y is None). With ``reset`` the estimator's
    ``n_features_in_`` (D) and, for a DataFrame, ``feature_names_in_`` are set; otherwise D is checked
    against ``n_features_in_``.
    """
    src_device = None
    if isinstance(X, torch.Tensor):
        src_device = X.device
        X = X.detach().cpu()
        if X.dtype in (torch.bfloat16, torch.float16):  # NumPy has no bfloat16; the estimators compute in float32
            X = X.float()
        X = X.numpy()
    X = _ragged_to_padded(X)
    kw = dict(ensure_all_finite="allow-nan", allow_nd=True, dtype=FLOAT_DTYPES)
    if reset:
        if y is None:
            X = validate_data(estimator, X, reset=True, **kw)
        else:
            if isinstance(y, torch.Tensor):
                y = y.detach().cpu().numpy()
            X, y = validate_data(estimator, X, y, reset=True, **kw)
    else:
        X = check_array(X, **kw)
    if X.ndim == 2:
        X = X[:, :, None]
    if X.ndim != 3:
        raise ValueError(
            f"X must be a set of series of shape (P, T, D) or (P, T) for univariate series; got shape "
            f"{X.shape}. For one series (T, D) use X[None]."
        )
    P, T, D = X.shape
    if reset:
        estimator.n_features_in_ = D
    elif D != estimator.n_features_in_:
        raise ValueError(
            f"X has {D} features, but {type(estimator).__name__} is expecting {estimator.n_features_in_} "
            f"features as input (D, the features per time step; the number of steps may differ from the fit)."
        )
    if not X.flags.writeable or not X.flags.c_contiguous:
        X = np.ascontiguousarray(X).copy()
    Xt = torch.from_numpy(X)
    if dtype is not None:
        Xt = Xt.to(dtype)
    target = device if device is not None else src_device
    if target is not None:
        Xt = Xt.to(target)
    Xt, lengths = nan_padding(Xt, "X", x_lengths, "x_lengths")
    lengths, _ = as_set_lengths(lengths, "x_lengths", P, T)
    return Xt, lengths, y


def check_int(value, name: str, low: int) -> int:
    """An integer hyperparameter (Python or NumPy integer) >= low."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")
    return int(value)


def resolve_gamma(gamma, X, lengths, *, cost, bandwidth, itakura_max_slope, backend) -> float:
    """gamma as a float: a number >= 0, or "auto" (:func:`softdtw.gamma_heuristic` on X)."""
    if isinstance(gamma, str):
        if gamma != "auto":
            raise ValueError(f"gamma must be a number >= 0 or 'auto'; got {gamma!r}.")
        from ._gamma import gamma_heuristic

        return gamma_heuristic(X, x_lengths=lengths, cost=cost, bandwidth=bandwidth,
                               itakura_max_slope=itakura_max_slope, backend=backend)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not math.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0 or 'auto'; got {gamma!r}.")
    return float(gamma)


_FEATURES = ("n_features_in_ is D, the features per time step (tslearn's convention): a 2-D X of shape "
             "(P, T) is P univariate series, so fitting on (100, 2) gives n_features_in_ = 1, not 2")
_LENGTHS = ("series of any length are valid input after fit (soft-DTW compares series of different lengths), "
            "so X[:, :-1] or X.T is a valid query and raises nothing")

#: The scikit-learn checks these estimators fail by design, with the reason: pass
#: ``expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS[type(est).__name__]`` to
#: ``sklearn.utils.estimator_checks.parametrize_with_checks`` or ``check_estimator``. All of them
#: follow from reading a 2-D matrix as a set of univariate series. Every other check passes.
EXPECTED_FAILED_CHECKS = {
    "SoftDTWKMeans": {
        "check_n_features_in": _FEATURES,
        "check_n_features_in_after_fitting": f"{_FEATURES}; and {_LENGTHS}",
        "check_transformer_general": f"transform of X[:, :-1] must raise there, but {_LENGTHS}",
    },
    "SoftDTWKNeighborsClassifier": {
        "check_n_features_in": _FEATURES,
        "check_n_features_in_after_fitting": f"{_FEATURES}; and {_LENGTHS}",
        "check_classifiers_train": f"predict(X.T) must raise there, but {_LENGTHS}",
    },
}
