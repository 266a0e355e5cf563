r"""DTW search: the k best non-overlapping matches of short queries inside a long series.

One subsequence DP per query (open begin and open end, see ``backends/reference.py``), not one DTW
per window: the DP's last row holds, for every end column j of the series, the value of the best
match ending there (hard DTW) or the soft-min over all matches ending there (soft-DTW), and each
cell carries the start column of its best hard path. The k matches are then picked greedily from the
end values. CPU: backends/_cpu_search.py (Numba); CUDA: backends/cuda/search.py (a prefix scan along
the series, kernels/search.cu).
"""
from __future__ import annotations

import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch

from ._checks import host_views

__all__ = ["SearchResult", "dtw_search"]

_COSTS = {"sqeuclidean": 0, "l1": 1}


class SearchResult(NamedTuple):
    """Matches of :func:`dtw_search`, best first: tensors `(Q, k)` (`(k,)` for one query).

    start, end: int64 series indices of each match's first and last step (inclusive); value: its
    (soft-)DTW value, in the query's dtype (float32 for float16 / bfloat16 queries). Where fewer than k
    non-overlapping matches exist, the remaining entries are start = end = -1 and value = +inf.
    """
    start: torch.Tensor
    end: torch.Tensor
    value: torch.Tensor


def _as_2d(t, name: str) -> torch.Tensor:
    t = torch.as_tensor(t)
    if t.dim() == 1:
        t = t.unsqueeze(-1)
    if t.dim() != 2:
        raise ValueError(f"{name} must be `(L, D)` or `(L,)`; got shape {tuple(t.shape)}. Pass one series.")
    return t


def _local_znorm(series: torch.Tensor, n: int) -> torch.Tensor:
    """Each step of series `(L, D)` z-normalised (per feature) with the mean and std of the n-step window
    centred on it (clipped to the series; a constant window keeps std 1)."""
    L = series.shape[0]
    s = series.to(torch.float64)
    cs = torch.cat([s.new_zeros(1, s.shape[1]), s.cumsum(0)])
    cs2 = torch.cat([s.new_zeros(1, s.shape[1]), (s * s).cumsum(0)])
    lo = (torch.arange(L, device=s.device) - n // 2).clamp(0, max(L - n, 0))
    hi = (lo + n).clamp(max=L)
    count = (hi - lo).unsqueeze(1).to(torch.float64)
    mean = (cs[hi] - cs[lo]) / count
    var = ((cs2[hi] - cs2[lo]) / count - mean * mean).clamp_min(0.0)
    std = var.sqrt()
    std = torch.where(std > 1e-8 * (mean.abs() + 1.0), std, torch.ones_like(std))
    return (s - mean) / std


def _znorm(q: torch.Tensor) -> torch.Tensor:
    """Query `(Q, n, D)` z-normalised over its steps, per query and feature."""
    q = q.to(torch.float64)
    mean = q.mean(1, keepdim=True)
    std = q.std(1, unbiased=False, keepdim=True)
    return (q - mean) / torch.where(std > 1e-8 * (mean.abs() + 1.0), std, torch.ones_like(std))


def dtw_search(query, series, k: int = 1, gamma: float = 0.0, exclusion: Optional[int] = None,
               znormalize: bool = False, *, cost: str = "sqeuclidean", progress: Optional[bool] = None
               ) -> SearchResult:
    r"""The k best non-overlapping matches of each query in a long series, under DTW or soft-DTW.

    For every end step j of the series, the subsequence DP gives

    .. math::

        v_j = \min_{s \le j} \mathrm{DTW}(q, y_{s..j})  \quad (\gamma = 0), \qquad
        v_j = \operatorname{smin}_\gamma \{\text{paths from } (0, s) \text{ to } (n-1, j), \text{ any } s\}
        \quad (\gamma > 0),

    one DP of n x L cells per query (not one DTW per window). Matches are then taken greedily: the
    smallest remaining v_j (the first on ties), with its start s: the start of the best hard-DTW path
    ending at j, for gamma = 0 and gamma > 0 alike (for soft-DTW the most likely single path of the
    soft-min's distribution over paths ending at j, its mode); after each match [s, e], every end within
    ``exclusion`` steps of e, and every match whose [start, end] intersects [s, e], is excluded.

    Args:
        query: `(Q, n, D)` queries (or `(n, D)` / `(n,)` for one), float.
        series: `(L, D)` (or `(L,)`) long series, same D.
        k: matches per query (>= 1).
        gamma: 0 for DTW (default), > 0 for soft-DTW, in the units of the cost.
        exclusion: exclusion zone in steps around each match's end; default n // 2.
        znormalize: z-normalise the query (over its steps) and the series *locally*: each series step by
            the mean and std of the n-step window centred on it. A DP over windows of every length cannot
            normalise each window by its own statistics, so this running normalisation over the query's
            length is what it does instead (as subsequence-search libraries do); it makes matches
            invariant to the series' offset and scale.
        cost: "sqeuclidean" (default) or "l1".
        progress: a tqdm bar over the queries (CPU); None shows one for more than 64 queries.

    Returns:
        :class:`SearchResult` (start, end, value), each `(Q, k)` (`(k,)` for one query), best first, on
        the device of the inputs.

    Devices: CPU (the cpu backend's Numba kernels, parallel over queries, float64 arithmetic) and CUDA
    (query and series on one GPU: the DP runs as a prefix scan along the series and the matches are
    picked on the device, in float32 when both inputs are float32 or lower precision, else float64).
    Not differentiable.

    Example:
        >>> import torch, softdtw
        >>> series = torch.zeros(40, 1)
        >>> series[10:14, 0] = torch.tensor([1.0, 2.0, 2.0, 1.0])
        >>> series[30:33, 0] = torch.tensor([1.0, 2.0, 1.0])
        >>> query = torch.tensor([[1.0], [2.0], [1.0]])
        >>> softdtw.dtw_search(query, series, k=2)
        SearchResult(start=tensor([10, 30]), end=tensor([13, 32]), value=tensor([0., 0.]))
    """
    if type(query) is torch.Tensor and type(series) is torch.Tensor and not znormalize and not progress:
        found = _search_cpu_one(query, series, k, gamma, exclusion, cost)
        if found is not None:
            return found
    q = torch.as_tensor(query)
    single = q.dim() <= 2
    if q.dim() == 1:
        q = q.unsqueeze(-1)
    if single:
        q = q.unsqueeze(0)
    if q.dim() != 3:
        raise ValueError(f"query must be `(Q, n, D)`, `(n, D)` or `(n,)`; got shape {tuple(q.shape)}.")
    s = _as_2d(series, "series")
    for name, t in (("query", q), ("series", s)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a float tensor; got {t.dtype}.")
    on_cuda = q.device.type == "cuda" or s.device.type == "cuda"
    if on_cuda and q.device != s.device:
        raise ValueError(f"query and series must be on the same device; got query on {q.device}, series on "
                         f"{s.device}. Move both with .to(device).")
    if not on_cuda and q.device.type != "cpu":
        raise NotImplementedError(f"dtw_search runs on the CPU and on CUDA GPUs; the inputs are on {q.device}. "
                                  f"Pass query.cpu() and series.cpu().")
    Q, n, D = q.shape
    L = s.shape[0]
    if s.shape[1] != D:
        raise ValueError(f"query and series must have the same feature size D; got query {tuple(q.shape)}, "
                         f"series {tuple(s.shape)}.")
    if n < 1 or L < 1:
        raise ValueError(f"query and series need at least one step; got n={n}, L={L}.")
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1; got {k!r}.")
    for name, t in (("query", q), ("series", s)):
        bad = ~torch.isfinite(t)
        if bool(bad.any()):  # NaN is no padding here: a step of the series or of a query, and a match would skip it
            where = bad.nonzero()[0].tolist()
            what = "NaN" if bool(torch.isnan(t[tuple(where)])) else "Inf"  # the kind of the one it names
            raise ValueError(
                f"{name} contains {what} values (first at index {tuple(where)}); dtw_search needs finite values. "
                f"Pass each query without its padding, and impute missing steps of the series (e.g. linear "
                f"interpolation) or search its finite stretches one by one.")
    gamma = float(gamma)
    if not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0; got {gamma!r}.")
    exclusion = n // 2 if exclusion is None else int(exclusion)
    if exclusion < 0:
        raise ValueError(f"exclusion must be >= 0 steps; got {exclusion}.")
    if cost not in _COSTS:
        raise ValueError(f"cost must be one of {tuple(_COSTS)} for dtw_search; got {cost!r}.")
    dtype = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32

    if on_cuda:
        return _search_cuda(q, s, znormalize, dtype, single, cost, gamma, int(k), exclusion)
    if znormalize:
        q64, s64 = _znorm(q), _local_znorm(s, n)
    else:
        q64, s64 = q.to(torch.float64), s.to(torch.float64)
    qn = q64.contiguous().numpy()
    sn = s64.contiguous().numpy()

    from .backends import _cpu_search as kern
    from .backends._cpu_loading import prepare

    prepare(kern, kern.ENTRY_POINTS)
    show = (Q > 64) if progress is None else bool(progress)
    if Q == 1 and not show:  # one call: the DP and the pick (at n = 32, L = 2000 the DP takes ~55 us)
        st, en, va = np.empty(int(k), np.int64), np.empty(int(k), np.int64), np.empty(int(k))
        kern.search_one(qn[0], sn, _COSTS[cost], gamma, int(k), exclusion, st, en, va,
                        kern.scratch("values", L, np.float64), kern.scratch("starts", L, np.int64))
        value = torch.from_numpy(va) if dtype == torch.float64 else torch.from_numpy(va).to(dtype)
        if single:
            return SearchResult(torch.from_numpy(st), torch.from_numpy(en), value)
        return SearchResult(torch.from_numpy(st)[None], torch.from_numpy(en)[None], value[None])
    starts = torch.full((Q, k), -1, dtype=torch.int64)
    ends = torch.full((Q, k), -1, dtype=torch.int64)
    values = torch.full((Q, k), float("inf"), dtype=torch.float64)
    import numba
    chunk = max(1, numba.get_num_threads())
    chunk = max(chunk, min(Q, max(1, (1 << 24) // max(L, 1))))  # end rows `(chunk, L)` within ~200 MB
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=Q, desc="DTW search" if gamma == 0 else "soft-DTW search", unit="query")
    try:
        for q0 in range(0, Q, chunk):
            q1 = min(Q, q0 + chunk)
            v = np.empty((q1 - q0, L))
            st = np.empty((q1 - q0, L), np.int64)
            run = kern.search_serial if q1 - q0 == 1 else kern.search_kernel  # one query: no parallel region
            run(qn[q0:q1], sn, _COSTS[cost], gamma, v, st)
            for b in range(q1 - q0):
                kern.select_matches(v[b], st[b], int(k), exclusion, starts[q0 + b].numpy(), ends[q0 + b].numpy(),
                                    values[q0 + b].numpy())
            if bar is not None:
                bar.update(q1 - q0)
    finally:
        if bar is not None:
            bar.close()
    result = SearchResult(starts, ends, values.to(dtype))
    if single:
        return SearchResult(*(t[0] for t in result))
    return result


def _search_cpu_one(query: torch.Tensor, series: torch.Tensor, k, gamma, exclusion, cost) -> Optional[SearchResult]:
    """dtw_search of one query `(n, D)` / `(n,)` in a series on the CPU (float32 / float64, no z-normalisation,
    no progress bar) in one Numba call and few torch calls: its matches, or None for anything else (a batch, other
    dtypes, a bad argument: the caller's validating route answers or raises). At n = 32, L = 2000 the DP takes
    ~55 us and a torch call 2-20 us when it runs cold (between other work); this path makes three."""
    dt = query.dtype
    if (dt is not torch.float64 and dt is not torch.float32) or (
            series.dtype is not torch.float64 and series.dtype is not torch.float32):
        return None
    views = host_views(query, series)  # CPU tensors without a negative bit
    if views is None:
        return None
    qn, sn = views
    if qn.ndim == 1:
        qn = qn[:, None]
    if sn.ndim == 1:
        sn = sn[:, None]
    if qn.ndim != 2 or sn.ndim != 2 or qn.shape[1] != sn.shape[1] or 0 in qn.shape or 0 in sn.shape:
        return None
    if type(k) is not int or k < 1 or cost not in _COSTS or not (exclusion is None or type(exclusion) is int):
        return None
    if type(gamma) is not float and type(gamma) is not int:
        return None
    if not (np.isfinite(qn).all() and np.isfinite(sn).all()):  # ~1 us at L = 2000; the caller's route raises
        return None
    gamma = float(gamma)
    n, L = qn.shape[0], sn.shape[0]
    exclusion = n // 2 if exclusion is None else exclusion
    if not (gamma >= 0.0 and gamma < float("inf")) or exclusion < 0:
        return None
    from .backends import _cpu_search as kern
    from .backends._cpu_loading import prepare

    prepare(kern, kern.ENTRY_POINTS)
    st, en, va = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k)
    kern.search_one(np.ascontiguousarray(qn, np.float64), np.ascontiguousarray(sn, np.float64), _COSTS[cost], gamma,
                    k, exclusion, st, en, va, kern.scratch("values", L, np.float64),
                    kern.scratch("starts", L, np.int64))
    if dt is torch.float32:
        va = va.astype(np.float32)
    return SearchResult(torch.from_numpy(st), torch.from_numpy(en), torch.from_numpy(va))


def _search_cuda(q, s, znormalize, dtype, single, cost, gamma, k, exclusion) -> SearchResult:
    """dtw_search's CUDA path (backends/cuda/search.py) on query `(Q, n, D)` and series `(L, D)`: float64
    arithmetic when either input is float64, float32 otherwise; the normalisations in float64 on the device."""
    from .backends.cuda import search as cuda_search

    L = s.shape[0]
    if L > _CUDA_MAX_L:
        raise ValueError(f"dtw_search on CUDA takes series of at most {_CUDA_MAX_L} steps (int32 columns); got "
                         f"L={L}. Search overlapping pieces of the series, or search on the CPU.")
    work = torch.float64 if torch.float64 in (q.dtype, s.dtype) else torch.float32
    if znormalize:
        q, s = _znorm(q), _local_znorm(s, q.shape[1])
    start, end, value = cuda_search.search(q.to(work).contiguous(), s.to(work).contiguous(), cost, gamma, k,
                                           exclusion)
    result = SearchResult(start, end, value.to(dtype))
    if single:
        return SearchResult(*(t[0] for t in result))
    return result


#: Longest series of the CUDA path: column indices and starts are int32 in the kernels.
_CUDA_MAX_L = 2 ** 31 - 2 ** 20
