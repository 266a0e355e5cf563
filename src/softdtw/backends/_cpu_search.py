"""Numba kernel of :func:`softdtw.dtw_search`: one subsequence DP per query over a long series.

The DP is the cpu backend's with ``open_begin`` and ``open_end`` (reference.py derives the
recursion): rows are the query's n steps, columns the series' L steps, and

- R[0, j] = C[0, j] + smin(0, R[0, j-1]): start at column j, or come from the left;
- R[i, j] = C[i, j] + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for i >= 1;
- the value of a match ending at column j is R[n-1, j] (every end column is kept, not only the best).

It runs column by column (a column of n cells is the state: O(n) memory per query, whatever L), so
a series of 10^7 steps streams through once. Each cell also carries the start column of its path:
for gamma = 0 the start of the optimal path (the argmin predecessor, ties diagonal, vertical,
horizontal as in the backward; at row 0 a tie between starting and coming from the left starts
here), for gamma > 0 that of the path that follows each cell's largest-weight predecessor (the same
argmin), the greedy mode of the soft-min's distribution over paths.

Queries run in parallel (``prange``); within a query the DP is sequential along each column.
Costs: squared Euclidean (cost_kind 0) or L1 (1), computed in the kernel. float64 state, natural
units, +inf as +inf: no sentinel arithmetic is needed since every cell has a finite predecessor.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

_JIT = dict(cache=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn"})


@njit(**_JIT)
def _smin(a, b, c, gamma):
    """-gamma log(e^(-a/gamma) + e^(-b/gamma) + e^(-c/gamma)), shifted by the minimum (+inf counts 0)."""
    lo = min(a, min(b, c))
    if gamma == 0.0 or lo == np.inf:
        return lo
    return lo - gamma * np.log(np.exp((lo - a) / gamma) + np.exp((lo - b) / gamma) + np.exp((lo - c) / gamma))


@njit(**_JIT)
def _search_one(q, series, cost_kind, gamma, values, starts):
    """values[j] = R[n-1, j], starts[j] = its start column, for one query q `(n, D)`."""
    n, D = q.shape
    L = series.shape[0]
    inf = np.inf
    prev = np.full(n, inf)  # column j - 1
    cur = np.empty(n)
    prev_s = np.zeros(n, np.int64)
    cur_s = np.zeros(n, np.int64)
    for j in range(L):
        for i in range(n):
            c = 0.0
            for d in range(D):
                t = q[i, d] - series[j, d]
                c += t * t if cost_kind == 0 else abs(t)
            if i == 0:
                diag, d_s = 0.0, j  # start here
                up, u_s = inf, j
            else:
                diag, d_s = prev[i - 1], prev_s[i - 1]
                up, u_s = cur[i - 1], cur_s[i - 1]
            left, l_s = prev[i], prev_s[i]
            if diag <= up and diag <= left:
                cur_s[i] = d_s
            elif up <= left:
                cur_s[i] = u_s
            else:
                cur_s[i] = l_s
            cur[i] = c + _smin(diag, up, left, gamma)
        values[j] = cur[n - 1]
        starts[j] = cur_s[n - 1]
        prev, cur = cur, prev
        prev_s, cur_s = cur_s, prev_s


@njit(parallel=True, **_JIT)
def search_kernel(queries, series, cost_kind, gamma, values, starts):
    """For each query b of queries `(Q, n, D)` (float64) in series `(L, D)`: values[b, j] = the subsequence
    (soft-)DTW value of the best match ending at column j, starts[b, j] its start column (`(Q, L)` float64
    and int64, filled here)."""
    for b in prange(queries.shape[0]):
        _search_one(queries[b], series, cost_kind, gamma, values[b], starts[b])


@njit(**_JIT)
def select_matches(values, starts, k, exclusion, out_start, out_end, out_value):
    """The k best non-overlapping matches of one query from its end values `(L,)` and starts `(L,)`:
    greedily the smallest remaining end value (first on ties); after taking a match [s, e], every end j
    with |j - e| <= exclusion, or whose match [starts[j], j] intersects [s, e], is excluded. Fewer than
    k matches: the rest of out_start / out_end stay -1 and out_value +inf (filled here)."""
    L = values.shape[0]
    alive = np.ones(L, np.bool_)
    for r in range(k):
        out_start[r], out_end[r], out_value[r] = -1, -1, np.inf
    for r in range(k):
        best, e = np.inf, -1
        for j in range(L):
            if alive[j] and values[j] < best:
                best, e = values[j], j
        if e < 0:
            return
        s = starts[e]
        out_start[r], out_end[r], out_value[r] = s, e, best
        for j in range(L):
            if abs(j - e) <= exclusion or (starts[j] <= e and j >= s):
                alive[j] = False
