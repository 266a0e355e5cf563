"""A plain-Python transliteration of kernels/search.cu (the tile / prefix-scan search DP), for the CPU tests.

It follows the kernel's structure step by step, with small tiles so that every path of the code runs:
tiles of NT "threads" x CPT columns, processed row by row; per row each thread folds its columns into an
aggregate map (pass 1), the block scans the thread aggregates, the tile publishes its aggregate, a look-back
over windows of LANES tiles (a tree reduction per window, as the warp does) finds the tile's carry-in, and
each thread recomputes its columns from its own carry-in (pass 2). Tiles run in a random interleaving of
their rows (any order in which a tile's row i comes after its left neighbours' aggregates of row i), so
the look-back sees mixtures of aggregates and inclusive values.

A map over a run of columns is (A, S) for soft (r -> smin(A, r + S)) and (H, s, S) for the hard values and
the start of their path (r -> min(H, r + S), preferring H on ties: an entry inside the run is later than the
carry). Soft values use the soft-min; starts come from the hard values (the definition dtw_search uses).
"""
from __future__ import annotations

import math

import numpy as np

INF = math.inf


def _smin(a, b, gamma):
    lo, hi = min(a, b), max(a, b)
    if gamma == 0.0 or hi == INF:
        return lo
    return lo - gamma * math.log1p(math.exp((lo - hi) / gamma))


class Map:
    """r -> (smin(A, r + S), min(H, r + S) with start s when H wins). IDENTITY: A = H = inf, S = 0."""

    __slots__ = ("A", "H", "s", "S")

    def __init__(self, A=INF, H=INF, s=-1, S=0.0):
        self.A, self.H, self.s, self.S = A, H, s, S

    @staticmethod
    def const(A, H, s):
        return Map(A, H, s, INF)


def compose(x: Map, y: Map, gamma) -> Map:
    """x after y (y covers the columns left of x's)."""
    hy = y.H + x.S
    take = x.H <= hy
    return Map(_smin(x.A, y.A + x.S, gamma), x.H if take else hy, x.s if take else y.s, y.S + x.S)


def apply(m: Map, r_soft, r_hard, r_s, gamma):
    hy = r_hard + m.S
    take = m.H <= hy
    return _smin(m.A, r_soft + m.S, gamma), (m.H if take else hy), (m.s if take else r_s)


def _cost(a, b, cost_kind):
    d = a - b
    return float(np.sum(d * d)) if cost_kind == 0 else float(np.sum(np.abs(d)))


def search_scan(q, series, cost_kind, gamma, NT=3, CPT=2, LANES=4, seed=0):
    """(values `(L,)`, starts `(L,)`) of one query q `(n, D)` in series `(L, D)`, as kernels/search.cu computes
    them (float64)."""
    n, _ = q.shape
    L = series.shape[0]
    TW = NT * CPT
    ntiles = -(-L // TW)
    # published[(t, i)] = ("agg", Map) or ("inc", Map.const)
    published = {}
    # per-tile state: previous row (soft, hard, starts) over its TW columns, the tile's carry of the previous row
    state = []
    for t in range(ntiles):
        state.append(dict(prev=[INF] * TW, prevh=[INF] * TW, prevs=[0] * TW, edge=(INF, INF, 0), row=0))
    rng = np.random.default_rng(seed)
    pending = list(range(ntiles))

    def ready(t):
        st = state[t]
        if st["phase"] == 0:  # pass 1 and the aggregate: own data only
            return True
        # the look-back spins until every tile on its left has published row i (aggregate or inclusive)
        return all((u, st["row"]) in published for u in range(t))

    for st in state:
        st["phase"] = 0
    while pending:
        cands = [t for t in pending if ready(t)]
        t = cands[int(rng.integers(len(cands)))]
        st = state[t]
        i = st["row"]
        j0 = t * TW
        if st["phase"] == 0:
            # pass 1: per-thread maps
            per = []
            cells = []
            for th in range(NT):
                m = Map()
                cc = []
                for k in range(CPT):
                    col = th * CPT + k
                    j = j0 + col
                    if j >= L:
                        c, ms, mh, sm = 0.0, INF, INF, 0
                    else:
                        c = _cost(q[i], series[j], cost_kind)
                        if i == 0:
                            ms, mh, sm = 0.0, 0.0, j
                        else:
                            if col == 0:
                                ds, dh, dst = st["edge"]
                            else:
                                ds, dh, dst = st["prev"][col - 1], st["prevh"][col - 1], st["prevs"][col - 1]
                            us, uh, ust = st["prev"][col], st["prevh"][col], st["prevs"][col]
                            ms = _smin(ds, us, gamma)
                            mh, sm = (dh, dst) if dh <= uh else (uh, ust)
                    cc.append((c, ms, mh, sm))
                    # fold: f_k after m
                    take = mh <= m.H
                    m = Map(c + _smin(ms, m.A, gamma), c + (mh if take else m.H), sm if take else m.s, m.S + c)
                per.append(m)
                cells.append(cc)
            # block exclusive scan (sequential here; the kernel's warp scans only regroup it)
            excl = []
            acc = Map()
            for th in range(NT):
                excl.append(acc)
                acc = compose(per[th], acc, gamma)
            st["work"] = (cells, excl, acc)
            if t > 0:
                published[(t, i)] = ("agg", acc)
            st["phase"] = 1
            continue
        cells, excl, total = st["work"]
        # publish, look back
        if t == 0:
            carry = (INF, INF, 0)
        else:
            run = Map()
            base = t - 1
            while True:
                window = []
                hit = False
                for lane in range(LANES):
                    u = base - lane
                    if u < 0:
                        window.append(Map.const(INF, INF, 0))
                        hit = True
                        break
                    kind, mp = published[(u, i)]
                    window.append(mp)
                    if kind == "inc":
                        hit = True
                        break
                window += [Map()] * (LANES - len(window))
                # tree reduction as the warp's shfl_down: lane l <- lane l after lane l + off
                vals = list(window)
                off = 1
                while off < LANES:
                    vals = [compose(vals[l], vals[l + off], gamma) if l + off < LANES else vals[l]
                            for l in range(LANES)]
                    off *= 2
                run = compose(run, vals[0], gamma)
                if hit:
                    break
                base -= LANES
            carry = (run.A, run.H, run.s)  # a constant map's value
        inc = apply(total, *carry, gamma)
        published[(t, i)] = ("inc", Map.const(*inc))
        # pass 2
        for th in range(NT):
            rs, rh, rst = apply(excl[th], *carry, gamma)
            for k, (c, ms, mh, sm) in enumerate(cells[th]):
                col = th * CPT + k
                vs = c + _smin(ms, rs, gamma)
                take = mh <= rh
                vh = c + (mh if take else rh)
                vst = sm if take else rst
                st["prev"][col], st["prevh"][col], st["prevs"][col] = vs, vh, vst
                rs, rh, rst = vs, vh, vst
        st["edge"] = carry
        st["row"] += 1
        st["phase"] = 0
        if st["row"] == n:
            pending.remove(t)
    values = np.empty(L)
    starts = np.empty(L, np.int64)
    for t in range(ntiles):
        for col in range(TW):
            j = t * TW + col
            if j < L:
                values[j] = state[t]["prev"][col]
                starts[j] = state[t]["prevs"][col]
    return values, starts
