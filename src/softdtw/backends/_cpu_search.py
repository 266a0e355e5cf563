"""Numba kernel of :func:`softdtw.dtw_search`: one subsequence DP per query over a long series.

The DP is the cpu backend's with ``open_begin`` and ``open_end`` (reference.py derives the
recursion): rows are the query's n steps, columns the series' L steps, and

- R[0, j] = C[0, j] + smin(0, R[0, j-1]): start at column j, or come from the left;
- R[i, j] = C[i, j] + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for i >= 1;
- the value of a match ending at column j is R[n-1, j] (every end column is kept, not only the best).

Soft-DTW (gamma > 0) runs column by column (a column of n cells is the state: O(n) memory per query,
whatever L), so a series of 10^7 steps streams through once. Hard DTW runs as a wavefront over strips
of up to 64 rows (lanes across rows, one vector loop per step, the series read reversed so that a
step's lanes load contiguous values; the strip's last row, `(L + 1,)` values and starts, is the state
between strips): measured on the 2-core machine, one query of 128 steps in 10^5 steps, 16 ms against
tslearn's 120 ms for ``dtw_subsequence_path`` (the same bits as the column order, 90 ms).
Each cell also carries the start column of its path:
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

#: the kernels called from outside (softdtw.search, functional.dtw_path), for _cpu_loading.prepare
ENTRY_POINTS = ("search_kernel", "search_serial", "select_matches", "hard_path")

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


_WAVE = 64  # the most lanes per strip (measured on the 2-core EPYC, n = 128, L = 1e5: 8 / 16 / 32 / 64 / 128
# lanes 65 / 23.5 / 18.4 / 15.5 / 14.5 ms; fewer are used for short queries, see _lanes)


@njit(**_JIT)
def _lanes(n):
    """Lanes per strip for an n-row query: n rounded up to a multiple of 8, at most _WAVE (lanes past the
    query's last row compute nothing useful)."""
    return min(_WAVE, ((n + 7) // 8) * 8)


@njit(**_JIT)
def _reversed_padded(series):
    """rv `(D, L + 2 _WAVE)`: rv[d, _WAVE + L - 1 - j] = series[j, d], zeros around. Lane k of a strip at step
    tau reads column c0 + tau - k, i.e. rv[d, base - tau + k]: contiguous in k, so the costs of a step are
    one vector load per feature, not a gather."""
    L, D = series.shape
    H = _WAVE
    rv = np.zeros((D, L + 2 * H))
    for j in range(L):
        for d in range(D):
            rv[d, H + L - 1 - j] = series[j, d]
    return rv


@njit(**_JIT)
def _hard_strip(qs, h, rv, L, cost_kind, first, open_begin, top, top_s, bot, bot_s, last, values, starts, dirs,
                st):
    """One strip of h <= H query rows (qs `(H, D)`, H = _lanes(n) <= _WAVE) over the whole series, hard DTW, as
    a wavefront: at step tau lane k computes its row at column tau - k; its diagonal, vertical and horizontal
    predecessors are lane k - 1 at step tau - 2, lane k - 1 at tau - 1 and itself at tau - 1, so the lanes of a
    step are independent (vector loops). Lane -1 is the row above (top / top_s, `(L + 1,)`, index p = column
    p - 1), or for the first strip row 0's start: open_begin, start at any column (value 0, no vertical);
    else only at column 0. A lane outside [0, L) keeps its value (+inf before column 0), which is then what
    its neighbour reads.

    Writes the strip's last row into bot / bot_s (index p = column p - 1) and, for the last strip, values /
    starts. With dirs `(S, L + H, H)` uint8 (else `(0, 0, 0)`), each cell's predecessor, step-major:
    dirs[st, j + k, k] for row st H + k, column j: 0 diagonal (row 0: the start), 1 vertical, 2 horizontal.
    Tie order: diagonal, vertical, horizontal (the backward's); at row 0 starting wins a tie with coming from
    the left."""
    H = qs.shape[0]
    D = qs.shape[1]
    inf = np.inf
    record = dirs.shape[0] > 0
    base = _WAVE + L - 1
    p0 = np.full(H + 1, inf)
    p1 = np.full(H + 1, inf)
    p2 = np.full(H + 1, inf)
    s0 = np.zeros(H + 1, np.int64)
    s1 = np.zeros(H + 1, np.int64)
    s2 = np.zeros(H + 1, np.int64)
    code = np.zeros(H, np.uint8)
    c = np.empty(H)
    for tau in range(L + h - 1):
        if first:
            p1[0], s1[0] = inf, tau
            p2[0], s2[0] = (0.0 if open_begin or tau == 0 else inf), tau
        elif tau < L:
            p1[0], s1[0] = top[tau + 1], top_s[tau + 1]
            p2[0], s2[0] = top[tau], top_s[tau]
        for k in range(H):
            c[k] = 0.0
        off = base - tau
        for d in range(D):
            for k in range(H):
                t = qs[k, d] - rv[d, off + k]
                c[k] += t * t if cost_kind == 0 else abs(t)
        for k in range(H):
            best, bs = p2[k], s2[k]
            up, us = p1[k], s1[k]
            lf, lfs = p1[k + 1], s1[k + 1]
            take_up = up < best
            best = up if take_up else best
            bs = us if take_up else bs
            take_left = lf < best
            best = lf if take_left else best
            bs = lfs if take_left else bs
            live = (tau - k >= 0) & (tau - k < L)
            p0[k + 1] = c[k] + best if live else lf
            s0[k + 1] = bs if live else lfs
            code[k] = 2 if take_left else (1 if take_up else 0)
        if record:
            for k in range(H):
                dirs[st, tau, k] = code[k]
        j = tau - (h - 1)  # the strip's last row, this step
        if j >= 0:
            bot[j + 1] = p0[h]
            bot_s[j + 1] = s0[h]
            if last:
                values[j] = p0[h]
                starts[j] = s0[h]
        p2, p1, p0 = p1, p0, p2
        s2, s1, s0 = s1, s0, s2


@njit(**_JIT)
def _strip_queries(q):
    """The query's rows in strips of _lanes(n) rows: `(S, H, D)`, zeros past the last row."""
    n, D = q.shape
    H = _lanes(n)
    S = (n + H - 1) // H
    qs = np.zeros((S, H, D))
    for i in range(n):
        for d in range(D):
            qs[i // H, i % H, d] = q[i, d]
    return qs


@njit(**_JIT)
def _hard_wave(q, series, cost_kind, open_begin, values, starts, dirs):
    """values[j] = R[n-1, j] and starts[j] its path's start column for every column j (hard DTW, open end
    read from the last row; open_begin or a start at (0, 0)), strip after strip of H = _lanes(n) rows over the
    whole series (:func:`_hard_strip`); the strip's last row `(L + 1,)` is the next strip's top row. The same
    bits as the column order: only the order of the cells differs. dirs: as :func:`_hard_strip`."""
    n, D = q.shape
    L = series.shape[0]
    rv = _reversed_padded(series)
    qs = _strip_queries(q)
    S = qs.shape[0]
    H = qs.shape[1]
    rows = np.full((2, L + 1), np.inf)
    rows_s = np.zeros((2, L + 1), np.int64)
    for st in range(S):
        _hard_strip(qs[st], min(H, n - st * H), rv, L, cost_kind, st == 0, open_begin, rows[(st + 1) % 2],
                    rows_s[(st + 1) % 2], rows[st % 2], rows_s[st % 2], st == S - 1, values, starts, dirs, st)


@njit(**_JIT)
def _search_one_hard_wave(q, series, cost_kind, values, starts):
    """:func:`_search_one` for gamma = 0 (open begin), by :func:`_hard_wave`."""
    _hard_wave(q, series, cost_kind, True, values, starts, np.zeros((0, 0, 0), np.uint8))


@njit(**_JIT)
def hard_path(q, series, cost_kind, open_begin, open_end):
    """The optimal warping path of q `(n, D)` against series `(L, D)` (float64) under hard DTW, with open
    begin (start at any (0, j0)) and / or open end (end at the first argmin of the last row; else at
    (n - 1, L - 1)): (path `(P, 2)` int64 (i, j) from start to end, value). Ties as the backward's one-hot E
    (diagonal, vertical, horizontal; row 0: starting before coming from the left), so it is the path that
    ``dtw_path`` reads from E, found by a backtrack over one predecessor byte per cell instead."""
    n, D = q.shape
    L = series.shape[0]
    H = _lanes(n)
    S = (n + H - 1) // H
    values = np.empty(L)
    starts = np.empty(L, np.int64)
    dirs = np.empty((S, L + H, H), np.uint8)
    _hard_wave(q, series, cost_kind, open_begin, values, starts, dirs)
    j = L - 1
    if open_end:
        for t in range(L):
            if values[t] < values[j] or (values[t] == values[j] and t < j):
                j = t
    value = values[j]
    out = np.empty((n + L, 2), np.int64)
    i = n - 1
    m = 0
    while True:
        out[m, 0], out[m, 1] = i, j
        m += 1
        k = i % H
        code = dirs[i // H, j + k, k]
        if i == 0 and (code == 0 or j == 0):
            break
        if code == 0:
            i, j = i - 1, j - 1
        elif code == 1:
            i -= 1
        else:
            j -= 1
    return out[:m][::-1].copy(), value


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
