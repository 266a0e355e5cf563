"""Numba kernel of :func:`softdtw.dtw_search`: one subsequence DP per query over a long series.

The DP is the cpu backend's with ``open_begin`` and ``open_end`` (reference.py derives the
recursion): rows are the query's n steps, columns the series' L steps, and

- R[0, j] = C[0, j] + smin(0, R[0, j-1]): start at column j, or come from the left;
- R[i, j] = C[i, j] + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for i >= 1;
- the value of a match ending at column j is R[n-1, j] (every end column is kept, not only the best).

Soft-DTW (gamma > 0) runs column by column (a column of n cells is the state: O(n) memory per query,
whatever L), so a series of 10^7 steps streams through once. Hard DTW runs as a wavefront over strips
of 16 rows (lanes across rows, one vector loop per step; the strip's last row, `(L + 1,)` values and
starts, is the state between strips): measured on the 2-core machine, one query of 128 steps in 10^5
steps, 2.5x faster than the column order (the same bits). Each cell also carries the start column of its path:
for gamma = 0 the start of the optimal path (the argmin predecessor, ties diagonal, vertical,
horizontal as in the backward; at row 0 a tie between starting and coming from the left starts
here), for gamma > 0 too: the hard values run beside the soft ones and the start is that of the best
hard path ending at the cell, the mode of the soft-min's distribution over paths (the most likely single
path). The CUDA kernel (kernels/search.cu) computes these starts by a prefix scan along the series;
the earlier rule for gamma > 0, the start of the path following each cell's largest-weight soft
predecessor, has no such scan.

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
    """values[j] = R[n-1, j] (for gamma > 0 the soft-min over the paths ending at column j), starts[j] =
    the start column of the best hard path ending there, for one query q `(n, D)`. For gamma > 0 the hard
    values run beside the soft ones (same costs) for the starts."""
    n, D = q.shape
    L = series.shape[0]
    inf = np.inf
    prev = np.full(n, inf)  # column j - 1
    cur = np.empty(n)
    hprev = np.full(n, inf)  # hard values of column j - 1 (== prev for gamma = 0)
    hcur = np.empty(n)
    prev_s = np.zeros(n, np.int64)
    cur_s = np.zeros(n, np.int64)
    for j in range(L):
        for i in range(n):
            c = 0.0
            for d in range(D):
                t = q[i, d] - series[j, d]
                c += t * t if cost_kind == 0 else abs(t)
            if i == 0:
                diag, dh, d_s = 0.0, 0.0, j  # start here
                up, uh, u_s = inf, inf, j
            else:
                diag, dh, d_s = prev[i - 1], hprev[i - 1], prev_s[i - 1]
                up, uh, u_s = cur[i - 1], hcur[i - 1], cur_s[i - 1]
            left, lh, l_s = prev[i], hprev[i], prev_s[i]
            if dh <= uh and dh <= lh:
                h, cur_s[i] = dh, d_s
            elif uh <= lh:
                h, cur_s[i] = uh, u_s
            else:
                h, cur_s[i] = lh, l_s
            hcur[i] = c + h
            cur[i] = c + h if gamma == 0.0 else c + _smin(diag, up, left, gamma)
        values[j] = cur[n - 1]
        starts[j] = cur_s[n - 1]
        prev, cur = cur, prev
        hprev, hcur = hcur, hprev
        prev_s, cur_s = cur_s, prev_s


_WAVE = 16  # rows per strip of the hard wavefront (lanes)


@njit(**_JIT)
def _search_one_hard_wave(q, series, cost_kind, values, starts):
    """:func:`_search_one` for gamma = 0 as a wavefront over strips of _WAVE rows: at step t, lane k
    computes row i0 + k, column t - k; its diagonal, vertical and horizontal predecessors are lane k - 1
    at step t - 2, lane k - 1 at t - 1 and itself at t - 1, so the lanes are independent within a step
    (one vector loop), where a column's chain of cells is sequential. The strip's last row (values and
    starts, `(L + 1,)`) is the next strip's top row. Same tie order (diagonal, vertical, horizontal)."""
    n, D = q.shape
    L = series.shape[0]
    H = _WAVE
    inf = np.inf
    top = np.full(L + 1, inf)  # top[p]: row i0 - 1 at column p - 1 (p = 0: column -1)
    top_s = np.zeros(L + 1, np.int64)
    bottom = np.full(L + 1, inf)
    bottom_s = np.zeros(L + 1, np.int64)
    p0 = np.full(H + 1, inf)
    p1 = np.full(H + 1, inf)
    p2 = np.full(H + 1, inf)
    s0 = np.zeros(H + 1, np.int64)
    s1 = np.zeros(H + 1, np.int64)
    s2 = np.zeros(H + 1, np.int64)
    qs = np.zeros((H, D))
    c = np.zeros(H)
    live = np.zeros(H, np.bool_)
    for i0 in range(0, n, H):
        h = min(H, n - i0)
        for k in range(H):
            for d in range(D):
                qs[k, d] = q[i0 + k, d] if k < h else 0.0
        p1[:] = inf
        p2[:] = inf
        bottom[:] = inf
        for t in range(L + h - 1):
            if i0 == 0:  # row 0: the diagonal predecessor is "start here" (0, start t), the vertical none
                p1[0], s1[0] = inf, t
                p2[0], s2[0] = 0.0, t
            else:
                p1[0], s1[0] = (top[t + 1], top_s[t + 1]) if t < L else (inf, 0)
                p2[0], s2[0] = top[t], top_s[t]
            c[:] = 0.0
            for k in range(H):
                j = t - k
                live[k] = (j >= 0) & (j < L) & (k < h)
            for d in range(D):
                for k in range(H):
                    j = min(max(t - k, 0), L - 1)
                    diff = qs[k, d] - series[j, d]
                    c[k] += diff * diff if cost_kind == 0 else abs(diff)
            for k in range(H):
                best, bs = p2[k], s2[k]
                up, us = p1[k], s1[k]
                lf, ls = p1[k + 1], s1[k + 1]
                take_up = up < best
                best = up if take_up else best
                bs = us if take_up else bs
                take_left = lf < best
                best = lf if take_left else best
                bs = ls if take_left else bs
                p0[k + 1] = c[k] + best if live[k] else inf
                s0[k + 1] = bs
            col = t - (h - 1)
            if col >= 0:
                bottom[col + 1] = p0[h]
                bottom_s[col + 1] = s0[h]
                if i0 + h == n:
                    values[col] = p0[h]
                    starts[col] = s0[h]
            p2, p1, p0 = p1, p0, p2
            s2, s1, s0 = s1, s0, s2
        top, bottom = bottom, top
        top_s, bottom_s = bottom_s, top_s
        top[0] = inf


@njit(parallel=True, **_JIT)
def search_kernel(queries, series, cost_kind, gamma, values, starts):
    """For each query b of queries `(Q, n, D)` (float64) in series `(L, D)`: values[b, j] = the subsequence
    DTW value of the best match ending at column j (soft-DTW: the soft-min over all matches ending there),
    starts[b, j] its start column (`(Q, L)` float64 and int64, filled here)."""
    for b in prange(queries.shape[0]):
        if gamma == 0.0:
            _search_one_hard_wave(queries[b], series, cost_kind, values[b], starts[b])
        else:
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


@njit(**_JIT)
def search_serial(queries, series, cost_kind, gamma, values, starts):
    """:func:`search_kernel` on the calling thread: for one query, where opening a parallel region costs
    more than it gives (measured on the loaded 2-core machine: ~6 ms of waiting for the second thread)."""
    for b in range(queries.shape[0]):
        if gamma == 0.0:
            _search_one_hard_wave(queries[b], series, cost_kind, values[b], starts[b])
        else:
            _search_one(queries[b], series, cost_kind, gamma, values[b], starts[b])
