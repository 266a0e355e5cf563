r"""A data-driven gamma: the soft-min's temperature in the units of the data's own alignment costs.

gamma is in the units of the cost (squared units of x for the squared Euclidean cost), so a fixed
gamma = 1 means very different things for raw sensor values and for z-normalised series. Soft-DTW
differs from DTW by at most the entropy term,

.. math:: \mathrm{dtw}(x, y) - \gamma\,(n + m - 2)\ln 3 \;\le\; \mathrm{sdtw}_\gamma(x, y)
          \;\le\; \mathrm{dtw}(x, y),

since there are fewer than :math:`3^{n+m-2}` warping paths. :func:`gamma_heuristic` takes gamma as a
fraction of the cost per step that optimal alignments of the data actually pay,

.. math:: \gamma = s \cdot \mathrm{quantile}_q\Big\{ \frac{\mathrm{dtw}(x_i, y_j)}{n_i + m_j} \Big\}

over a seeded sample of pairs. For a pair at that quantile, soft-DTW then lies within
:math:`s \ln 3 \approx 1.1\,s` of its DTW value (11 % at the default s = 0.1): smooth enough for
gradients and barycenters, sharp enough that the alignment is not a smear.

tslearn's ``gamma_soft_dtw`` (from Cuturi's GAK bandwidth) is :math:`2\,T\,(\mathrm{median}\|x_t -
x_s\|)^2` over random time steps; on z-normalised data of length T = 150 that is about 250 (2T times a
median squared distance near 0.9), far above the cost of a good alignment, and soft-DTW is then dominated
by the entropy term.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import numpy as np
import torch

__all__ = ["gamma_heuristic"]


def _check_real(value, name: str, ok, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {expected}; got {value!r}.")
    return float(value)


def gamma_heuristic(X, Y=None, *, scale: float = 0.1, quantile: float = 0.5, n_pairs: int = 100,
                    x_lengths=None, y_lengths=None, cost="sqeuclidean", bandwidth=None,
                    itakura_max_slope=None, random_state=0, backend: Optional[str] = None) -> float:
    r"""A gamma for soft-DTW from the data: ``scale`` times the ``quantile`` of DTW per step.

    Draws up to ``n_pairs`` pairs (i, j) — distinct series of X, or X against Y — with a seeded
    generator, computes hard DTW on each in one batched call, divides by n_i + m_j, and returns
    ``scale`` times the ``quantile`` of these per-step costs (see the module docstring for why). At
    the default scale 0.1, soft-DTW of a pair at that quantile is within 11 % of its DTW value.

    Args:
        X: `(P, T, D)` float tensor / array of series (`(P, T)` means univariate), padded past
            ``x_lengths`` or NaN-padded (trailing all-NaN steps end a series).
        Y: optional `(Q, M, D)` second set; pairs are then drawn from X x Y. With Y None and P = 1
            the single series is paired with itself (DTW 0), so pass Y for one pair.
        scale: s > 0, the fraction of the per-step cost (default 0.1).
        quantile: q in [0, 1] (default 0.5, the median).
        n_pairs: pairs to sample (default 100; all of them when there are fewer).
        x_lengths, y_lengths: optional `(P,)` / `(Q,)` valid lengths.
        cost, bandwidth, itakura_max_slope, backend: as :func:`softdtw.soft_dtw`; use the ones you
            will run soft-DTW with.
        random_state: int seed (default 0: the same gamma on every call), a
            ``numpy.random.RandomState``, or None for fresh entropy.

    Returns:
        float gamma > 0. When every sampled pair has DTW 0 (identical series up to warping) the data
        give no scale and 1.0 is returned.

    Devices: CPU, CUDA (DTW runs on X's device).

    Example:
        >>> import softdtw
        >>> from softdtw.datasets import make_cbf
        >>> X, _ = make_cbf(20, length=64, seed=0)
        >>> g = softdtw.gamma_heuristic(X)
        >>> round(g, 4)
        0.065
        >>> sd, d = softdtw.soft_dtw(X[:1], X[1:2], g), softdtw.dtw(X[:1], X[1:2])
        >>> bool(d - g * (64 + 64 - 2) * 1.0987 <= sd <= d)
        True
    """
    from sklearn.utils import check_random_state

    from .functional import dtw
    from .pairwise import as_padded_set, as_set_lengths

    scale = _check_real(scale, "scale", lambda v: v > 0, "a finite number > 0 (e.g. 0.1)")
    quantile = _check_real(quantile, "quantile", lambda v: 0 <= v <= 1, "a number in [0, 1] (0.5: the median)")
    if isinstance(n_pairs, bool) or not isinstance(n_pairs, numbers.Integral) or n_pairs < 1:
        raise ValueError(f"n_pairs must be an integer >= 1; got {n_pairs!r}.")
    X, x_lengths = as_padded_set(X, "X", x_lengths, "x_lengths")
    if Y is None:
        if y_lengths is not None:
            raise ValueError("y_lengths was given but Y is None; pass Y too or drop y_lengths.")
        Y, y_lengths = X, x_lengths
    else:
        Y, y_lengths = as_padded_set(Y, "Y", y_lengths, "y_lengths")
        if Y.shape[-1] != X.shape[-1]:
            raise ValueError(f"X and Y must have the same feature size D; got X.shape={tuple(X.shape)}, "
                             f"Y.shape={tuple(Y.shape)}.")
        Y = Y.to(device=X.device, dtype=X.dtype)
    P, Q = X.shape[0], Y.shape[0]
    _, xl = as_set_lengths(x_lengths, "x_lengths", P, X.shape[1])
    _, yl = as_set_lengths(y_lengths, "y_lengths", Q, Y.shape[1])
    rng = check_random_state(random_state)
    same = Y is X
    total = P * (P - 1) // 2 if same else P * Q
    if same and P == 1:
        i = j = np.zeros(1, dtype=np.int64)
    else:
        flat = rng.choice(total, size=min(n_pairs, total), replace=False) if total > n_pairs \
            else np.arange(total)
        if same:  # flat index k -> (i, j), i < j, row by row
            starts = np.cumsum(np.arange(P - 1, 0, -1)) - np.arange(P - 1, 0, -1)
            i = np.searchsorted(starts, flat, side="right") - 1
            j = i + 1 + (flat - starts[i])
        else:
            i, j = flat // Q, flat % Q
    i_t, j_t = torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)
    n, m = xl[i_t], yl[j_t]
    dev = X.device
    with torch.no_grad():
        d = dtw(X.index_select(0, i_t.to(dev))[:, :int(n.max())], Y.index_select(0, j_t.to(dev))[:, :int(m.max())],
                cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, x_lengths=n.to(dev),
                y_lengths=m.to(dev), backend=backend)
    per_step = (d.double().cpu() / (n + m).double()).numpy()
    value = float(np.quantile(per_step, quantile))
    if not value > 0:
        positive = per_step[per_step > 0]
        if positive.size == 0:
            return 1.0
        value = float(np.quantile(positive, quantile))
    return scale * value
