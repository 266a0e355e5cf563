"""Numba kernel of :func:`softdtw.dtw_search`: one subsequence DP per query over a long series.

The DP is the cpu backend's with ``open_begin`` and ``open_end`` (reference.py derives the
recursion): rows are the query's n steps, columns the series' L steps, and

- R[0, j] = C[0, j] + smin(0, R[0, j-1]): start at column j, or come from the left;
- R[i, j] = C[i, j] + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for i >= 1;
- the value of a match ending at column j is R[n-1, j] (every end column is kept, not only the best).

Soft-DTW (gamma > 0) runs column by column (a column of n cells is the state: O(n) memory per query,
whatever L), so a series of 10^7 steps streams through once. Hard DTW runs as a wavefront over column
blocks (:func:`_col_wave`: H lanes of up to 64 columns each, lane k a row behind lane k - 1, one vector
loop over the lanes per column; chunks of H x 64 columns, the chunk's last column the state between
chunks): measured on the 2-core machine, one query of 128 steps in 10^5 steps, 6.7 ms against
tslearn's ~115 ms for ``dtw_subsequence_path`` (the same bits as the column order).
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

import threading

import numpy as np
from numba import njit, prange

#: the kernels called from outside (softdtw.search, functional.dtw_path), for _cpu_loading.prepare
ENTRY_POINTS = ("search_kernel", "search_serial", "select_matches", "hard_path", "hard_path_into",
                "hard_path_checked", "search_one")

_JIT = dict(cache=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn"})
#: the hard wavefront: no contraction, so a cost is rounded before it is added, as in :func:`_search_one` with D = 1
_JIT_EXACT = dict(cache=True, error_model="numpy", fastmath={"nsz", "arcp", "afn"})


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


# Hard DTW (gamma = 0) as a wavefront over column blocks: the series is cut into chunks of H lanes x W columns
# (lane k holds columns c0 + k Wc .. c0 + (k + 1) Wc - 1 of the chunk, Wc <= W), and at step t lane k computes
# row t - k + 1 of its columns, left to right. A cell's up and diagonal predecessors are in the lane's previous
# row, its left one is the cell just computed; a lane's first column reads the lane to its left (its last
# column, one step earlier: the same row), the chunk's lane 0 the previous chunk's last column. Every step is
# one loop over j < Wc of a vector loop over the H lanes, whose state lives in one array at offsets known at
# compile time (H, W constants, the two row buffers swapped by the step's parity), so the vector loop needs no
# alias checks. Row 0 is written before the steps: with an open begin R[0, j] = C[0, j] (the costs are >= 0,
# so starting, value 0, wins against coming from the left), else the running sum.
# Measured (2-core EPYC, one thread, D = 1, values and starts, against the former strips of up to 64 lanes with
# the series reversed): n = 32, L = 2000: 0.050 ms (0.104); 128 x 10^4: 0.69 ms (1.6); 128 x 10^5: 6.9 ms (18);
# with the predecessor codes instead of the starts (dtw_path): 0.048 / 0.56 / 5.8 ms. H in {16, 32, 64} x W in
# {32, 64, 128}: W = 64 was best or within 10 % at every size (benchmarks/OPTIMIZATION_LOG.md).
_COLS = 64  # W: columns per lane and chunk


@njit(inline="always", **_JIT_EXACT)
def _col_step(st, oR, oS, nR, nS, sO, qO, H, Wc, t, masked, cost_kind, record, dirs, ch):
    """One step of :func:`_col_wave`: rows t - k + 1 of every lane k, read from planes oR (values) / oS (starts),
    written to nR / nS; position p of a plane is column p - 1 of the lane's block at offset p H + k (position 0:
    the column left of the block). The cost is (st[qO + k] - st[sO + j H + k])^2 (cost_kind 0) or its absolute
    value (1): for D = 1 the query's lane values and the chunk's series; for D > 1 zeros and the costs computed
    before the step, with cost_kind 1 (|0 - c| = c exactly), so one loop serves both. masked: lanes k > t have not started (they keep their row 0). record:
    write each cell's predecessor code into dirs and leave the starts (the path needs only the codes: 25 % faster
    at 32 x 2000). Inlined with constant offsets, H and flags."""
    for j in range(Wc):
        a = j * H
        for k in range(H):
            tt = st[qO + k] - st[sO + a + k]
            c = tt * tt if cost_kind == 0 else abs(tt)
            if record:  # the path needs the predecessors, not the starts
                u = st[oR + a + H + k]
                dd = st[oR + a + k]
                take_u = u < dd
                m = u if take_u else dd
                lf = st[nR + a + k]
                take_l = lf < m
                best = lf if take_l else m
                r = c + best
                if masked:
                    r = r if k <= t else u
                st[nR + a + H + k] = r
                dirs[ch, t, j, k] = 2 if take_l else (1 if take_u else 0)
            else:
                u = st[oR + a + H + k]
                us = st[oS + a + H + k]
                dd = st[oR + a + k]
                ds = st[oS + a + k]
                take_u = u < dd
                m = u if take_u else dd
                ms = us if take_u else ds
                lf = st[nR + a + k]
                take_l = lf < m
                best = lf if take_l else m
                bs = st[nS + a + k] if take_l else ms
                r = c + best
                if masked:
                    live = k <= t
                    r = r if live else u
                    bs = bs if live else us
                st[nR + a + H + k] = r
                st[nS + a + H + k] = bs


@njit(inline="always", **_JIT_EXACT)
def _col_wave(q, series, cost_kind, open_begin, values, starts, dirs, H):
    """values[j] = R[n-1, j] and starts[j] the start column of its path, for every column j (hard DTW; open
    begin or a start at (0, 0); ties diagonal, vertical, horizontal, at row 0 starting before coming from the
    left: the column order's bits, :func:`_search_one`). H lanes (a constant: inlined into a wrapper per H).
    dirs `(K, n + H - 2, W, H)` uint8 (else `(0, 0, 0, 0)`): each cell's predecessor, for row i >= 1 of column
    c0 + k Wc + j of chunk ch at dirs[ch, i - 1 + k, j, k]: 0 diagonal, 1 vertical, 2 horizontal (row 0 is
    not recorded: a start with an open begin, else a move left); starts are then not computed."""
    n, D = q.shape
    L = series.shape[0]
    inf = np.inf
    W = _COLS
    P = (W + 1) * H  # one plane
    CW = H * W
    K = (L + CW - 1) // CW
    sO = 4 * P  # planes: values, starts (even steps read), values, starts (odd steps read)
    qO = sO + W * H
    st = np.zeros(qO + H)
    qrv = np.zeros((D, n + 2 * H))  # the query reversed: lane k at step t reads row t - k + 1 at base + k
    for i in range(n):
        for d in range(D):
            qrv[d, H + n - 1 - i] = q[i, d]
    fused = D == 1
    sT = np.zeros((W, D, H)) if not fused else np.zeros((0, 0, 0))
    bcol = np.full(n, inf)  # the previous chunk's last column (values, starts)
    bcol_s = np.zeros(n)
    ncol = np.empty(n)
    ncol_s = np.empty(n)
    lin = np.full(H, inf)
    lin_s = np.zeros(H)
    din = np.empty(H)
    din_s = np.empty(H)
    record = dirs.shape[0] > 0
    T = n + H - 2
    carry = 0.0
    for ch in range(K):
        c0 = ch * CW
        Wc = min(W, (L - c0 + H - 1) // H)
        for k in range(H):  # the chunk's series (zeros past L), and row 0
            for j in range(Wc):
                col = c0 + k * Wc + j
                cc = 0.0
                for d in range(D):
                    v = series[col, d] if col < L else 0.0
                    if fused:
                        st[sO + j * H + k] = v
                    else:
                        sT[j, d, k] = v
                    tt = q[0, d] - v
                    cc += tt * tt if cost_kind == 0 else abs(tt)
                if open_begin:
                    st[(j + 1) * H + k] = cc
                    st[P + (j + 1) * H + k] = col
                else:
                    carry = carry + cc if col > 0 else cc
                    st[(j + 1) * H + k] = carry
                    st[P + (j + 1) * H + k] = 0.0
        if n == 1:
            for k in range(H):
                for j in range(Wc):
                    col = c0 + k * Wc + j
                    if col < L:
                        values[col] = st[(j + 1) * H + k]
                        starts[col] = int(st[P + (j + 1) * H + k])
            continue
        ncol[0] = st[Wc * H + H - 1]
        ncol_s[0] = st[P + Wc * H + H - 1]
        din[0] = bcol[0]
        din_s[0] = bcol_s[0]
        for k in range(1, H):
            din[k] = st[Wc * H + k - 1]
            din_s[k] = st[P + Wc * H + k - 1]
        for t in range(T):
            par = t & 1
            oR = 2 * P * par
            nR = 2 * P - oR
            base = H + n - 2 - t
            if fused:
                for k in range(H):
                    st[qO + k] = qrv[0, base + k]
            else:
                for j in range(Wc):
                    for k in range(H):
                        st[sO + j * H + k] = 0.0
                    for d in range(D):
                        for k in range(H):
                            tt = qrv[d, base + k] - sT[j, d, k]
                            st[sO + j * H + k] += tt * tt if cost_kind == 0 else abs(tt)
            if t + 1 < n:
                lin[0] = bcol[t + 1]
                lin_s[0] = bcol_s[t + 1]
            for k in range(1, H):
                lin[k] = st[oR + Wc * H + k - 1]
                lin_s[k] = st[oR + P + Wc * H + k - 1]
            for k in range(H):
                st[nR + k] = lin[k]
                st[nR + P + k] = lin_s[k]
                st[oR + k] = din[k]
                st[oR + P + k] = din_s[k]
            masked = t < H - 1
            ck = cost_kind if fused else 1  # D > 1: the costs are at sO, the lanes' query values 0
            if record:
                if par == 0:
                    if masked:
                        _col_step(st, 0, P, 2 * P, 3 * P, sO, qO, H, Wc, t, True, ck, True, dirs, ch)
                    else:
                        _col_step(st, 0, P, 2 * P, 3 * P, sO, qO, H, Wc, t, False, ck, True, dirs, ch)
                elif masked:
                    _col_step(st, 2 * P, 3 * P, 0, P, sO, qO, H, Wc, t, True, ck, True, dirs, ch)
                else:
                    _col_step(st, 2 * P, 3 * P, 0, P, sO, qO, H, Wc, t, False, ck, True, dirs, ch)
            elif par == 0:
                if masked:
                    _col_step(st, 0, P, 2 * P, 3 * P, sO, qO, H, Wc, t, True, ck, False, dirs, ch)
                else:
                    _col_step(st, 0, P, 2 * P, 3 * P, sO, qO, H, Wc, t, False, ck, False, dirs, ch)
            elif masked:
                _col_step(st, 2 * P, 3 * P, 0, P, sO, qO, H, Wc, t, True, ck, False, dirs, ch)
            else:
                _col_step(st, 2 * P, 3 * P, 0, P, sO, qO, H, Wc, t, False, ck, False, dirs, ch)
            for k in range(H):
                din[k] = lin[k]
                din_s[k] = lin_s[k]
            ih = t - H + 2  # lane H - 1's row this step: its last column is the next chunk's left column
            if ih >= 1 and ih < n:
                ncol[ih] = st[nR + Wc * H + H - 1]
                ncol_s[ih] = st[nR + P + Wc * H + H - 1]
            kl = t - (n - 2)  # the lane that computed row n - 1 this step
            if kl >= 0 and kl < H:
                for j in range(Wc):
                    col = c0 + kl * Wc + j
                    if col < L:
                        values[col] = st[nR + (j + 1) * H + kl]
                        starts[col] = int(st[nR + P + (j + 1) * H + kl])
        bcol, ncol, bcol_s, ncol_s = ncol, bcol, ncol_s, bcol_s


@njit(**_JIT_EXACT)
def _col_wave16(q, series, cost_kind, open_begin, values, starts, dirs):
    """:func:`_col_wave` with 16 lanes (chunks of 16 x 64 columns)."""
    _col_wave(q, series, cost_kind, open_begin, values, starts, dirs, 16)


@njit(**_JIT_EXACT)
def _col_wave32(q, series, cost_kind, open_begin, values, starts, dirs):
    """:func:`_col_wave` with 32 lanes (chunks of 32 x 64 columns)."""
    _col_wave(q, series, cost_kind, open_begin, values, starts, dirs, 32)


@njit(**_JIT)
def _lanes(n):
    """Lanes of :func:`_col_wave` for an n-row query: each chunk's ramp costs H - 2 steps more than its n - 1,
    a wider vector loop does more per step. Measured (D = 1, L = 2 10^4, ms for 16 / 32 lanes): n = 8 0.31 /
    0.41, 32 0.56 / 0.60, 48 0.73 / 0.72, 128 1.58 / 1.35; 8 lanes ran 3-8x slower than 16 at every n (a vector
    loop of 8 doubles is left to its scalar remainder), so there is no 8."""
    return 32 if n >= 48 else 16


@njit(**_JIT)
def _hard_wave(q, series, cost_kind, open_begin, values, starts, dirs):
    """:func:`_col_wave` with :func:`_lanes` (q.shape[0]) lanes (dirs sized for them)."""
    H = _lanes(q.shape[0])
    if H == 32:
        _col_wave32(q, series, cost_kind, open_begin, values, starts, dirs)
    else:
        _col_wave16(q, series, cost_kind, open_begin, values, starts, dirs)


@njit(**_JIT)
def _search_one_hard_wave(q, series, cost_kind, values, starts):
    """:func:`_search_one` for gamma = 0 (open begin), by :func:`_hard_wave`."""
    open_begin = series.shape[0] >= 0  # True, as a runtime bool: a literal True would compile the wavefront again
    _hard_wave(q, series, cost_kind, open_begin, values, starts, np.zeros((0, 0, 0, 0), np.uint8))


@njit(**_JIT)
def dirs_size(n, L):
    """Entries of the predecessor bytes :func:`hard_path_into` needs for an n-row query and L columns."""
    H = _lanes(n)
    return 0 if n == 1 else ((L + H * _COLS - 1) // (H * _COLS)) * (n + H - 2) * _COLS * H


_SCRATCH = threading.local()
_SCRATCH_MAX = 1 << 26  # bytes kept per thread and name


def scratch(name, size, dtype):
    """A 1-D array of at least `size` entries of dtype, kept per thread and name between calls (up to 64 MiB:
    a larger one is new each time). A fresh large array costs its page faults on first touch, ~0.25 ms per MiB
    here, and between calls of other code (tslearn's 10 MB table) the allocator returns it to the system: measured
    in the alternated benchmark, dtw_path at 128 x 10^4 took 1.54 ms with a new 1.6 MB of predecessor bytes per
    call against 0.79 ms for the search without them. Only for buffers a call fills and reads before returning."""
    arrays = getattr(_SCRATCH, "arrays", None)
    if arrays is None:
        arrays = _SCRATCH.arrays = {}
    a = arrays.get(name)
    if a is None or a.shape[0] < size or a.dtype != dtype:
        a = np.empty(max(size, 1), dtype)
        if a.nbytes <= _SCRATCH_MAX:
            arrays[name] = a
    return a


@njit(**_JIT)
def hard_path(q, series, cost_kind, open_begin, open_end):
    """The optimal warping path of q `(n, D)` against series `(L, D)` (float64) under hard DTW, with open
    begin (start at any (0, j0)) and / or open end (end at the first argmin of the last row; else at
    (n - 1, L - 1)): (path `(P, 2)` int64 (i, j) from start to end, value). Ties as the backward's one-hot E
    (diagonal, vertical, horizontal; row 0: starting before coming from the left), so it is the path that
    ``dtw_path`` reads from E, found by a backtrack over one predecessor byte per cell instead."""
    L = series.shape[0]
    return hard_path_into(q, series, cost_kind, open_begin, open_end, np.empty(L), np.empty(L, np.int64),
                          np.empty(dirs_size(q.shape[0], L), np.uint8))


@njit(**_JIT)
def hard_path_into(q, series, cost_kind, open_begin, open_end, values, starts, dirs_flat):
    """:func:`hard_path` with its buffers passed in: values, starts `(>= L,)`, dirs_flat `(>= dirs_size(n, L),)`
    (overwritten; :func:`scratch` keeps them between calls)."""
    n, D = q.shape
    L = series.shape[0]
    H = _lanes(n)
    W = _COLS
    CW = H * W
    K = (L + CW - 1) // CW
    values = values[:L]
    starts = starts[:L]
    if n > 1:
        dirs = dirs_flat[:K * (n + H - 2) * W * H].reshape((K, n + H - 2, W, H))
    else:
        dirs = dirs_flat[:0].reshape((0, 0, 0, 0))
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
        if i == 0:
            if open_begin or j == 0:
                break
            j -= 1
            continue
        ch = j // CW
        c0 = ch * CW
        Wc = min(W, (L - c0 + H - 1) // H)
        k = (j - c0) // Wc
        code = dirs[ch, i - 1 + k, j - c0 - k * Wc, k]
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


@njit(**_JIT)
def _all_finite(a):
    """True when every entry of a 2-D array is finite."""
    for i in range(a.shape[0]):
        for d in range(a.shape[1]):
            if not np.isfinite(a[i, d]):
                return False
    return True


@njit(**_JIT)
def hard_path_checked(q, series, cost_kind, open_begin, open_end, values, starts, dirs_flat, value):
    """:func:`hard_path_into` for ``dtw_path``'s fast path: the path, its value in value[0], when q and series are
    finite and the value too; else an empty path `(0, 2)`, and the caller takes the validating route (NaN padding,
    the errors)."""
    if not (_all_finite(q) and _all_finite(series)):
        return np.empty((0, 2), np.int64)
    path, value[0] = hard_path_into(q, series, cost_kind, open_begin, open_end, values, starts, dirs_flat)
    if not np.isfinite(value[0]):
        return np.empty((0, 2), np.int64)
    return path


@njit(**_JIT)
def search_one(q, series, cost_kind, gamma, k, exclusion, out_start, out_end, out_value, values, starts):
    """One query q `(n, D)` in series `(L, D)` (float64): :func:`search_serial` then :func:`select_matches`
    into out_start / out_end / out_value `(k,)`, in one call (``dtw_search``'s path for one query); values,
    starts `(>= L,)`: its buffers (overwritten)."""
    L = series.shape[0]
    values = values[:L]
    starts = starts[:L]
    if gamma == 0.0:
        _search_one_hard_wave(q, series, cost_kind, values, starts)
    else:
        _search_one(q, series, cost_kind, gamma, values, starts)
    select_matches(values, starts, k, exclusion, out_start, out_end, out_value)
