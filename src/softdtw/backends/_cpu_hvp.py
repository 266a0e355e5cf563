"""Numba kernels of the ``cpu`` backend's second order: ``hvp_cost``, SIMD across pairs.

What is computed (Mensch & Blondel 2018; the contract is ``SECOND_ORDER.md`` / ``cpu.hvp_cost``): for every
pair, E = dv/dC, vgamma = dv/dgamma, and their derivatives along a direction (Cdot, gamma_dot):
Edot = H_CC Cdot + H_Cgamma gamma_dot and vgamma_dot = H_gammaC Cdot + H_gammagamma gamma_dot. Two passes
per group of pairs, one kernel call:

1. Forward, row by row: R' (log2 units, exactly the first-order forward's arithmetic: ``softmin3``) and
   Rdot_s = Cdot_s + sum_p w_{p->s} Rdot_p + gamma_dot H_s (natural units), both float64 for either data
   dtype, into the group's tables `(N, M + 2, lanes)`. The weights here come from softmin3's own terms
   (``_softmin_weights``: one division per cell, no more exp2).
2. Backward, bottom-up: each cell's weights w_{p->s} again from the table R' (the first-order backward's
   formulas: ``_cell_weights_exact`` for float32 data and huge R', else 2^(S' - R'[p])), their
   derivatives wdot_{p->s} = w (delta_p - gamma_dot ln w) / gamma with delta_p = Sdot_s - Rdot_p, and the
   alignments E_p = sum_s E_s w_{p->s}, Edot_p = sum_s (Edot_s w_{p->s} + E_s wdot_{p->s}) along each row;
   vgamma = sum_s E_s H_s and vgamma_dot = sum_s (Edot_s H_s + E_s Hdot_s), Hdot_s = sum_p wdot ln w.

Numerics as in ``_cpu_kernels`` (log2 units, the large finite sentinel for +inf, weights <= 1 and
nothing exponentiated upwards, flushing below 2^flush against denormals), plus:

- delta_p is never formed as a difference of two large numbers: with lo the predecessor of largest
  weight, Sdot_s - Rdot_lo = sum_q w_q (Rdot_q - Rdot_lo) + gamma_dot H_s (differences of neighbours'
  Rdot, which stay small while Rdot itself grows like the path's length), and delta_p = that minus
  (Rdot_p - Rdot_lo). The forward builds Rdot_s from the same differences, so float32 weights (exp2 to
  2.5e-7) put no error of ~1e-7 |Rdot| into neighbours' differences.
- Rdot is 0 on cells outside a pair's lengths or window and on unreachable cells (R' at the sentinel,
  e.g. a +inf cost): Cdot there is never read into anything (it may hold anything, even inf or NaN).
- wdot and |Edot| below 2^flush are flushed to 0 (E is, as in the first order): every product stays
  normal.

Memory: per group of ``lanes`` pairs, two float64 tables `(N, M + 2, lanes)` (R' and Rdot: 16 bytes a
cell), plus O(M · lanes) row buffers; cpu.py allocates them for the groups of one kernel call.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._cpu_kernels import (
    COST_GIVEN,
    LN2,
    _INLINE,
    _JIT,
    _cost_row,
    _end_value,
    _reset_outside,
    _row_bounds,
    _state_constants,
    exact_weights_log,
    exp2_neg,
    exp_floor,
    flush_exponent,
    log2_1to3,
    sentinel,
)


@njit(**_INLINE)
def _weight_log(t, like):
    """(w, t') with t' = t clamped to [flush, 0] in the data dtype of ``like`` and w = 2^t' (0 at the
    flush: no denormals, and a sentinel difference gives exactly 0)."""
    flush = flush_exponent(like)
    t = type(like)(max(min(t, type(t)(0.0)), type(t)(flush)))
    w = exp2_neg(t) if t > flush else type(like)(0.0)
    return w, t


@njit(**_INLINE)
def _rdot_ref(d, u, l, rd_d, rd_u, rd_l):
    """Rdot of the predecessor of largest weight (smallest R'; ties: diagonal, up, left)."""
    m = min(d, min(u, l))
    return rd_d if d == m else (rd_u if u == m else rd_l)


@njit(**_INLINE)
def _softmin_weights(d, u, l, like):
    """(S', w_d, w_u, w_l, t_d, t_u, t_l, ent): ``softmin3``'s value S' (the same arithmetic), the weights
    w_p = 2^(S' - R'[p]) of the three predecessors, t_p = log2 w_p and ent = sum_p w_p t_p.

    The weights come from softmin3's own terms (1, 2^(lo - mid), 2^(lo - hi)) over their sum Z: one
    division instead of three more exp2. Below 2^flush a weight is 0, as in the backward."""
    t = type(like)
    st = type(d)
    lo = min(d, min(u, l))
    hi = max(d, max(u, l))
    mid = max(min(d, u), min(max(d, u), l))
    floor = st(exp_floor(like))
    flush = st(flush_exponent(like))
    e_mid = exp2_neg(t(max(lo - mid, floor)))
    e_hi = exp2_neg(t(max(lo - hi, floor)))
    z = t(1.0) + e_mid + e_hi
    lg = log2_1to3(z)
    iz = t(1.0) / z
    one, zero = t(1.0), t(0.0)
    x_d, x_u, x_l = lo - d, lo - u, lo - l
    a_d = one if d == lo else (e_mid if d == mid else e_hi)
    a_u = one if u == lo else (e_mid if u == mid else e_hi)
    a_l = one if l == lo else (e_mid if l == mid else e_hi)
    w_d = a_d * iz if x_d > flush else zero
    w_u = a_u * iz if x_u > flush else zero
    w_l = a_l * iz if x_l > flush else zero
    t_d, t_u, t_l = t(max(x_d, flush)) - lg, t(max(x_u, flush)) - lg, t(max(x_l, flush)) - lg
    return lo - st(lg), w_d, w_u, w_l, t_d, t_u, t_l, w_d * t_d + w_u * t_u + w_l * t_l


@njit(**_JIT)
def _forward_row(a, b, prev, cur, dprev, dcur, crow, cdrow, lo, hi, left, dleft, inv, big, gdl):
    """Row i of the forward, j in [a, b), all lanes: cur[j + 1] = R'[i, j] (as ``_dp_row_soft``) and
    dcur[j + 1] = Rdot[i, j]. prev / dprev: row i - 1; gdl[k] = gamma_dot of lane k times ln 2."""
    L = crow.shape[1]
    half = big * 0.5
    for k in range(L):
        left[k] = big
        dleft[k] = 0.0
    for j in range(a, b):
        for k in range(L):
            c = crow[j, k]
            d, u, l = prev[j, k], prev[j + 1, k], left[k]
            s, w_d, w_u, w_l, t_d, t_u, t_l, ent = _softmin_weights(d, u, l, c)
            r = min(c * inv + s, big)
            inside = (j >= lo[k]) & (j < hi[k])
            r = r if inside else big
            rd_d, rd_u, rd_l = dprev[j, k], dprev[j + 1, k], dleft[k]
            ref = _rdot_ref(d, u, l, rd_d, rd_u, rd_l)
            mdot = w_d * (rd_d - ref) + w_u * (rd_u - ref) + w_l * (rd_l - ref)
            rd = cdrow[j, k] + ref + mdot + gdl[k] * ent
            rd = rd if (inside & (r < half)) else 0.0
            left[k] = r
            dleft[k] = rd
            cur[j + 1, k] = r
            dcur[j + 1, k] = rd


@njit(**_JIT)
def _forward_row_variant(a, b, pdiag, prev, cur, dprev, dcur, crow, cdrow, lo, hi, left, dleft, inv, big, gdl,
                         pen, pdot):
    """:func:`_forward_row` with the alignment variants: the diagonal predecessors come from pdiag (``prev``, or
    zeros for row 0 with open_begin), and the step penalty is an edge cost of the vertical and horizontal
    in-edges: pen[k] (log2 units) added to their R', pdot[k] (its direction, natural units) to their Rdot."""
    L = crow.shape[1]
    half = big * 0.5
    for k in range(L):
        left[k] = big
        dleft[k] = 0.0
    for j in range(a, b):
        for k in range(L):
            c = crow[j, k]
            d, u, l = pdiag[j, k], prev[j + 1, k] + pen[k], left[k] + pen[k]
            s, w_d, w_u, w_l, t_d, t_u, t_l, ent = _softmin_weights(d, u, l, c)
            r = min(c * inv + s, big)
            inside = (j >= lo[k]) & (j < hi[k])
            r = r if inside else big
            rd_d, rd_u, rd_l = dprev[j, k], dprev[j + 1, k] + pdot[k], dleft[k] + pdot[k]
            ref = _rdot_ref(d, u, l, rd_d, rd_u, rd_l)
            mdot = w_d * (rd_d - ref) + w_u * (rd_u - ref) + w_l * (rd_l - ref)
            rd = cdrow[j, k] + ref + mdot + gdl[k] * ent
            rd = rd if (inside & (r < half)) else 0.0
            left[k] = r
            dleft[k] = rd
            cur[j + 1, k] = r
            dcur[j + 1, k] = rd


@njit(**_INLINE)
def _weights_fast(r, c, inv, d, u, l):
    """(w, t) of the three predecessors from S' = r - c inv (``_cell_weights_soft``'s weights)."""
    s = r - c * inv
    w_d, t_d = _weight_log(s - d, c)
    w_u, t_u = _weight_log(s - u, c)
    w_l, t_l = _weight_log(s - l, c)
    return w_d, w_u, w_l, t_d, t_u, t_l, w_d * t_d + w_u * t_u + w_l * t_l


@njit(**_INLINE)
def _weights_exact(d, u, l, like):
    """(w, t) of the three predecessors from their R' alone (``_cell_weights_exact``'s weights):
    w_p = 2^(lo - R'[p]) / Z, t_p = log2 w_p = (lo - R'[p]) - log2 Z."""
    wd, wu, wl, ed, eu, el, lz = exact_weights_log(d, u, l, like)
    return wd, wu, wl, ed - lz, eu - lz, el - lz, wd * ed + wu * eu + wl * el - lz


@njit(**_INLINE)
def _cell_dots(w_d, w_u, w_l, t_d, t_u, t_l, ent, rd_d, rd_u, rd_l, ref, g, inv_g, like):
    """(wdot_diag, wdot_up, wdot_left, Hdot) of one cell (see _backward_weights_row) from its weights,
    their log2 and the predecessors' Rdot (ref: that of the largest weight), in the data dtype (g =
    gamma_dot ln 2 and inv_g = 1 / gamma in it too; cpu.py checks that the products stay far below the
    cap, see _hvp_fits). Scalars only: an array argument of an inlined function costs a reference count
    per call, which stops the vectoriser."""
    t = type(like)
    tiny = exp2_neg(flush_exponent(like))
    cap = sentinel(like)
    # Differences of neighbours' Rdot, exact in the state dtype, small enough for the data dtype.
    x_d, x_u, x_l = t(rd_d - ref), t(rd_u - ref), t(rd_l - ref)
    kk = w_d * x_d + w_u * x_u + w_l * x_l + g * ent  # Sdot_s - Rdot_ref
    # wdot = w (delta_p - gamma_dot ln w) / gamma, capped at the sentinel (no inf, so never 0 * inf).
    v_d = max(min(w_d * ((kk - x_d - g * t_d) * inv_g), cap), -cap)
    v_u = max(min(w_u * ((kk - x_u - g * t_u) * inv_g), cap), -cap)
    v_l = max(min(w_l * ((kk - x_l - g * t_l) * inv_g), cap), -cap)
    v_d = v_d if abs(v_d) >= tiny else like
    v_u = v_u if abs(v_u) >= tiny else like
    v_l = v_l if abs(v_l) >= tiny else like
    return v_d, v_u, v_l, t(LN2) * (v_d * t_d + v_u * t_u + v_l * t_l)


@njit(**_JIT)
def _backward_weights_row(a, b, rup, rcur, dup, dcur, crow, inv, inv_g, gdt, exact, W):
    """Row i's weights and their derivatives, j in [a, b), all lanes, into W[q, j + 1, k]:
    q = 0..2 w (diag, up, left), 3..5 wdot, 6 ent = sum_p w log2 w, 7 Hdot = sum_p wdot ln w. gdt[k]:
    gamma_dot of lane k times ln 2, in the data dtype; inv_g = 1 / gamma."""
    L = crow.shape[1]
    like = crow.dtype.type(0.0)
    inv_g = crow.dtype.type(inv_g)
    if exact:
        for j in range(a, b):
            for k in range(L):
                d, u, l = rup[j, k], rup[j + 1, k], rcur[j, k]
                w_d, w_u, w_l, t_d, t_u, t_l, ent = _weights_exact(d, u, l, like)
                rd_d, rd_u, rd_l = dup[j, k], dup[j + 1, k], dcur[j, k]
                ref = _rdot_ref(d, u, l, rd_d, rd_u, rd_l)
                v_d, v_u, v_l, hd = _cell_dots(w_d, w_u, w_l, t_d, t_u, t_l, ent, rd_d, rd_u, rd_l, ref,
                                               gdt[k], inv_g, like)
                W[0, j + 1, k], W[1, j + 1, k], W[2, j + 1, k] = w_d, w_u, w_l
                W[3, j + 1, k], W[4, j + 1, k], W[5, j + 1, k] = v_d, v_u, v_l
                W[6, j + 1, k], W[7, j + 1, k] = ent, hd
        return
    for j in range(a, b):
        for k in range(L):
            d, u, l = rup[j, k], rup[j + 1, k], rcur[j, k]
            w_d, w_u, w_l, t_d, t_u, t_l, ent = _weights_fast(rcur[j + 1, k], crow[j, k], inv, d, u, l)
            rd_d, rd_u, rd_l = dup[j, k], dup[j + 1, k], dcur[j, k]
            ref = _rdot_ref(d, u, l, rd_d, rd_u, rd_l)
            v_d, v_u, v_l, hd = _cell_dots(w_d, w_u, w_l, t_d, t_u, t_l, ent, rd_d, rd_u, rd_l, ref, gdt[k],
                                           inv_g, like)
            W[0, j + 1, k], W[1, j + 1, k], W[2, j + 1, k] = w_d, w_u, w_l
            W[3, j + 1, k], W[4, j + 1, k], W[5, j + 1, k] = v_d, v_u, v_l
            W[6, j + 1, k], W[7, j + 1, k] = ent, hd


@njit(**_JIT)
def _backward_weights_row_variant(a, b, rdiag, rup, rcur, dup, dcur, crow, inv, inv_g, gdt, exact, W, pen, pdot):
    """:func:`_backward_weights_row` with the alignment variants (rdiag, pen, pdot as in
    :func:`_forward_row_variant`)."""
    L = crow.shape[1]
    like = crow.dtype.type(0.0)
    inv_g = crow.dtype.type(inv_g)
    for j in range(a, b):
        for k in range(L):
            d, u, l = rdiag[j, k], rup[j + 1, k] + pen[k], rcur[j, k] + pen[k]
            if exact:
                w_d, w_u, w_l, t_d, t_u, t_l, ent = _weights_exact(d, u, l, like)
            else:
                w_d, w_u, w_l, t_d, t_u, t_l, ent = _weights_fast(rcur[j + 1, k], crow[j, k], inv, d, u, l)
            rd_d, rd_u, rd_l = dup[j, k], dup[j + 1, k] + pdot[k], dcur[j, k] + pdot[k]
            ref = _rdot_ref(d, u, l, rd_d, rd_u, rd_l)
            v_d, v_u, v_l, hd = _cell_dots(w_d, w_u, w_l, t_d, t_u, t_l, ent, rd_d, rd_u, rd_l, ref, gdt[k],
                                           inv_g, like)
            W[0, j + 1, k], W[1, j + 1, k], W[2, j + 1, k] = w_d, w_u, w_l
            W[3, j + 1, k], W[4, j + 1, k], W[5, j + 1, k] = v_d, v_u, v_l
            W[6, j + 1, k], W[7, j + 1, k] = ent, hd


@njit(**_JIT)
def _moves_row(a, b, e_cur, ed_cur, W, acc_m, acc_md):
    """Step penalty: acc_m += sum_j E (w_up + w_left) and acc_md += sum_j Edot (w_up + w_left) + E (wdot_up +
    wdot_left) over row i's cells j in [a, b) (float64 per lane)."""
    L = e_cur.shape[1]
    for j in range(a, b):
        for k in range(L):
            e, ed = e_cur[j + 1, k], ed_cur[j + 1, k]
            acc_m[k] += e * (W[1, j + 1, k] + W[2, j + 1, k])
            acc_md[k] += ed * (W[1, j + 1, k] + W[2, j + 1, k]) + e * (W[4, j + 1, k] + W[5, j + 1, k])


@njit(**_JIT)
def _end_terms(rrow, drow, gdl, inv_g, tiny, se, sed):
    """Open end: the node T after the last row, value smin_j R'[n-1, j] (log2 units) over the pair's columns.

    rrow, drow: the last row's R' and Rdot (float64, `(m,)`); gdl = gamma_dot ln 2; inv_g = 1 / gamma. Writes
    T's weights w_j = 2^(S'_T - R'_j) into se and their derivatives wdot_j = w_j (Sdot_T - Rdot_j -
    gamma_dot ln w_j) / gamma into sed (both 0 below ``tiny``), with Sdot_T = Rdot_T = sum_j w_j Rdot_j +
    gamma_dot H_T. Returns (S'_T, sum_j w_j log2 w_j, Hdot_T = sum_j wdot_j ln w_j); the sentinel's half or
    more (and no weights) when no cell is finite. Scalar float64 (once per pair)."""
    m = rrow.shape[0]
    lo = rrow[0]
    first = 0
    for q in range(1, m):
        if rrow[q] < lo:
            lo, first = rrow[q], q
    for q in range(m):
        se[q] = 0.0
        sed[q] = 0.0
    if lo >= sentinel(lo) * 0.5:
        return lo, 0.0, 0.0
    z = 0.0
    for q in range(m):
        z += np.exp2(lo - rrow[q])
    lz = np.log2(z)
    ref = drow[first]
    ent = 0.0
    kk = 0.0
    for q in range(m):
        t = (lo - rrow[q]) - lz
        w = np.exp2(t)
        if w >= tiny:
            se[q] = w
            ent += w * t
            kk += w * (drow[q] - ref)
    kk += gdl * ent  # Sdot_T - Rdot_first
    hdot = 0.0
    for q in range(m):
        w = se[q]
        if w > 0.0:
            t = (lo - rrow[q]) - lz
            v = w * (kk - (drow[q] - ref) - gdl * t) * inv_g
            sed[q] = v if abs(v) >= tiny else 0.0
            hdot += sed[q] * t
    return lo - lz, ent, LN2 * hdot


@njit(**_JIT)
def _alignment_row(a, b, lo, hi, end_col, P_next, W, e_cur, ed_cur, P, acc_e, acc_ed):
    """E[i, j] and Edot[i, j] for j = b - 1 .. a (buffer position j + 1), and what row i hands on.

    P_next[q, j + 1] holds, for the cell (i + 1, j): q = 0 E w_diag, 1 Edot w_diag + E wdot_diag,
    2 E w_up, 3 Edot w_up + E wdot_up (the shares it hands to its diagonal and upper predecessors);
    the left successor (i, j + 1) is read from this row. The end cell adds 1 to E. Row i's own shares
    go to P[q, j + 1], and acc_e += E ent (log2 units), acc_ed += Edot H + E Hdot (natural units),
    float64 per lane.
    """
    L = e_cur.shape[1]
    zero = e_cur.dtype.type(0.0)
    one = e_cur.dtype.type(1.0)
    ln2 = e_cur.dtype.type(LN2)
    tiny = exp2_neg(flush_exponent(zero))
    for j in range(b - 1, a - 1, -1):
        for k in range(L):
            e_r, ed_r = e_cur[j + 2, k], ed_cur[j + 2, k]
            w_l, v_l = W[2, j + 2, k], W[5, j + 2, k]
            e = P_next[0, j + 2, k] + P_next[2, j + 1, k] + e_r * w_l
            ed = P_next[1, j + 2, k] + P_next[3, j + 1, k] + (ed_r * w_l + e_r * v_l)
            e += one if j == end_col[k] else zero
            keep = (j >= lo[k]) & (j < hi[k]) & (e >= tiny)
            e = e if keep else zero
            ed = ed if (keep & (abs(ed) >= tiny)) else zero
            e_cur[j + 1, k] = e
            ed_cur[j + 1, k] = ed
            w_d, w_u = W[0, j + 1, k], W[1, j + 1, k]
            P[0, j + 1, k] = e * w_d
            P[1, j + 1, k] = ed * w_d + e * W[3, j + 1, k]
            P[2, j + 1, k] = e * w_u
            P[3, j + 1, k] = ed * w_u + e * W[4, j + 1, k]
            ent = W[6, j + 1, k]
            acc_e[k] += e * ent
            acc_ed[k] += ed * (ln2 * ent) + e * W[7, j + 1, k]


@njit(**_JIT)
def _hvp_group(g, lanes, C, Cdot, N, M, gamma, gamma_dot, x_lengths, y_lengths, window, has_window,
               Rt, Rdt, exact, values, E, Edot, vgamma, vgamma_dot, open_begin, open_end, pens, pdots, vpen,
               vpen_dot):
    """Both passes for pairs [g * lanes, g * lanes + lanes) with the tables Rt, Rdt `(N, M + 2, lanes)`.

    Alignment variants (see hvp_kernel) run their own row functions (``*_variant``), chosen once per row: the
    plain DP's rows are unchanged."""
    B = x_lengths.shape[0]
    b0 = g * lanes
    nl = min(lanes, B - b0)
    dt = C.dtype
    st = Rt.dtype
    big, _, inv, out_scale = _state_constants(gamma, st.type(0.0))
    inv_g = st.type(1.0 / gamma)
    half = big * 0.5
    gdl = np.zeros(lanes, st)
    gdt = np.zeros(lanes, dt)
    for k in range(nl):
        gdl[k] = st.type(gamma_dot[b0 + k]) * LN2
        gdt[k] = gdl[k]
    want_pen = pens.shape[0] > 0
    variant = open_begin or open_end or want_pen
    pen_s = np.zeros(lanes, st)  # the step penalty in log2 units, and its direction (natural units)
    pdot_s = np.zeros(lanes, st)
    if want_pen:
        for k in range(nl):
            pen_s[k] = st.type(pens[b0 + k]) * inv
            pdot_s[k] = st.type(pdots[b0 + k])
    zdiag = np.zeros((M + 2, lanes), st)  # open begin: row 0's diagonal predecessors, R' = 0 and Rdot = 0
    # _cost_row's arguments for fused costs, unused with COST_GIVEN.
    nox = np.empty((0, 0, 0), dt)
    noxrow = np.empty((0, lanes), dt)
    crow = np.zeros((M + 2, lanes), dt)
    cdrow = np.zeros((M + 2, lanes), dt)
    border = np.full((M + 2, lanes), big, st)  # row -1: R'[-1, -1] = 0, the rest +inf
    border[0, :] = 0
    dborder = np.zeros((M + 2, lanes), st)  # Rdot of row -1: the start is a constant
    lo = np.zeros(lanes, np.int64)
    hi = np.zeros(lanes, np.int64)
    lo2 = np.zeros(lanes, np.int64)
    hi2 = np.zeros(lanes, np.int64)
    left = np.empty(lanes, st)
    dleft = np.empty(lanes, st)
    n_rows = 0
    for k in range(nl):
        n_rows = max(n_rows, x_lengths[b0 + k])

    # Pass 1: R' and Rdot. A table row gets the sentinel (R') and 0 (Rdot) on the positions that this
    # row, the next one and the backward read beyond the columns it computes.
    an, bn = _row_bounds(0, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi)
    for i in range(n_rows):
        a, b = an, bn
        for k in range(lanes):
            lo2[k], hi2[k] = lo[k], hi[k]
        if i + 1 < n_rows:
            an, bn = _row_bounds(i + 1, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi)
        else:
            an, bn = a, b
        _cost_row(i, b0, nl, a, b, nox, nox, C, COST_GIVEN, lo2, hi2, noxrow, crow)
        _cost_row(i, b0, nl, a, b, nox, nox, Cdot, COST_GIVEN, lo2, hi2, noxrow, cdrow)
        cur, dcur = Rt[i], Rdt[i]
        prev, dprev = (Rt[i - 1], Rdt[i - 1]) if i > 0 else (border, dborder)
        p0, p1 = min(a, an), max(b, bn) + 1
        for p in range(p0, a + 1):
            cur[p, :] = big
            dcur[p, :] = 0
        for p in range(b + 1, p1 + 1):
            if p < M + 2:
                cur[p, :] = big
                dcur[p, :] = 0
        if variant:
            pdiag = zdiag if (open_begin and i == 0) else prev
            _forward_row_variant(a, b, pdiag, prev, cur, dprev, dcur, crow, cdrow, lo2, hi2, left, dleft, inv, big,
                                 gdl, pen_s, pdot_s)
        else:
            _forward_row(a, b, prev, cur, dprev, dcur, crow, cdrow, lo2, hi2, left, dleft, inv, big, gdl)
    # The lanes' values; a pair without a finite path gets no alignment at all (end_col -1). Open end: the
    # soft-min of the last row (node T), whose weights seed E and Edot (se, sed: `(M, lanes)`).
    reach = np.zeros(lanes, np.bool_)
    se = np.zeros((M if open_end else 0, lanes), np.float64)
    sed = np.zeros((M if open_end else 0, lanes), np.float64)
    end_ent = np.zeros(lanes, np.float64)
    end_hdot = np.zeros(lanes, np.float64)
    tiny_t = np.float64(exp2_neg(flush_exponent(dt.type(0.0))))
    for k in range(nl):
        if open_end:
            n, m = x_lengths[b0 + k], y_lengths[b0 + k]
            rrow = np.empty(m, np.float64)
            drow = np.empty(m, np.float64)
            for q in range(m):
                rrow[q] = Rt[n - 1, q + 1, k]
                drow[q] = Rdt[n - 1, q + 1, k]
            r, end_ent[k], end_hdot[k] = _end_terms(rrow, drow, gdl[k], inv_g, tiny_t, se[:m, k], sed[:m, k])
            r = st.type(r)
        else:
            r = Rt[x_lengths[b0 + k] - 1, y_lengths[b0 + k], k]
        values[b0 + k] = _end_value(r, out_scale, big)
        reach[k] = r < half

    # Pass 2: E, Edot and the sums, bottom-up.
    W = np.zeros((8, M + 2, lanes), dt)
    P_next = np.zeros((4, M + 2, lanes), dt)
    P_cur = np.zeros((4, M + 2, lanes), dt)
    e_cur = np.zeros((M + 2, lanes), dt)
    ed_cur = np.zeros((M + 2, lanes), dt)
    end_col = np.full(lanes, -1, np.int64)
    acc_e = np.zeros(lanes, np.float64)
    acc_ed = np.zeros(lanes, np.float64)
    acc_m = np.zeros(lanes, np.float64)
    acc_md = np.zeros(lanes, np.float64)
    e_lo, e_hi = 0, 0  # written positions of e_cur / ed_cur
    n_lo, n_hi, c_lo, c_hi = 0, 0, 0, 0  # of P_next, P_cur
    for i in range(n_rows - 1, -1, -1):
        a, b = _row_bounds(i, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi)
        for k in range(lanes):
            last = k < nl and i == x_lengths[b0 + k] - 1 and reach[k]
            end_col[k] = y_lengths[b0 + k] - 1 if (last and not open_end) else -1
            if last and open_end:  # T's shares, handed down as from an upper successor (0 there before)
                for q in range(y_lengths[b0 + k]):
                    P_next[2, q + 1, k] = dt.type(se[q, k])
                    P_next[3, q + 1, k] = dt.type(sed[q, k])
        if not exact:
            _cost_row(i, b0, nl, a, b, nox, nox, C, COST_GIVEN, lo, hi, noxrow, crow)
        rup, dup = (Rt[i - 1], Rdt[i - 1]) if i > 0 else (border, dborder)
        if variant:
            rdiag = zdiag if (open_begin and i == 0) else rup
            _backward_weights_row_variant(a, b, rdiag, rup, Rt[i], dup, Rdt[i], crow, inv, inv_g, gdt, exact, W,
                                          pen_s, pdot_s)
        else:
            _backward_weights_row(a, b, rup, Rt[i], dup, Rdt[i], crow, inv, inv_g, gdt, exact, W)
        _reset_outside(e_cur, e_lo, e_hi, a + 1, b + 1, 0)
        _reset_outside(ed_cur, e_lo, e_hi, a + 1, b + 1, 0)
        e_lo, e_hi = a + 1, b + 1
        for q in range(4):
            _reset_outside(P_cur[q], c_lo, c_hi, a + 1, b + 1, 0)
        c_lo, c_hi = a + 1, b + 1
        _alignment_row(a, b, lo, hi, end_col, P_next, W, e_cur, ed_cur, P_cur, acc_e, acc_ed)
        if want_pen:
            _moves_row(a, b, e_cur, ed_cur, W, acc_m, acc_md)
        if open_end:  # take T's shares back out: the buffer is 0 outside what its row wrote
            for k in range(nl):
                if i == x_lengths[b0 + k] - 1 and reach[k]:
                    for q in range(y_lengths[b0 + k]):
                        P_next[2, q + 1, k] = 0
                        P_next[3, q + 1, k] = 0
        for k in range(nl):
            src, dsrc = e_cur[a + 1:b + 1, k], ed_cur[a + 1:b + 1, k]
            dst, ddst = E[b0 + k, i, a:b], Edot[b0 + k, i, a:b]
            for q in range(b - a):
                dst[q] = src[q]
                ddst[q] = dsrc[q]
        P_cur, P_next = P_next, P_cur
        c_lo, c_hi, n_lo, n_hi = n_lo, n_hi, c_lo, c_hi
    for k in range(nl):
        vgamma[b0 + k] = LN2 * (acc_e[k] + end_ent[k])
        vgamma_dot[b0 + k] = acc_ed[k] + end_hdot[k]
        if want_pen:
            vpen[b0 + k] = acc_m[k]
            vpen_dot[b0 + k] = acc_md[k]


@njit(parallel=True, **_JIT)
def hvp_kernel(C, Cdot, gamma, gamma_dot, x_lengths, y_lengths, window, has_window, lanes, g0, Rt, Rdt,
               exact, values, E, Edot, vgamma, vgamma_dot, open_begin, open_end, pens, pdots, vpen, vpen_dot):
    """Groups g0, g0 + 1, ... of ``lanes`` pairs (one per slot of the tables), in parallel.

    C, Cdot `(B, N, M)` (data dtype); gamma > 0 a float; gamma_dot `(B,)`; window int32 `(B, N, 2)` if
    has_window; Rt, Rdt `(slots, N, M + 2, lanes)` float64 scratch (any contents); exact: weights from
    the predecessors alone in the backward (float32 data; float64 data with huge R'). Outputs: values
    `(B,)` (as the forward's; +inf without a finite path), E and Edot `(B, N, M)` zero-filled by the
    caller (only the groups' rows and windows are written), vgamma and vgamma_dot `(B,)`.

    Alignment variants (reference.py's recursion; SECOND_ORDER.md, "Variants"): open_begin (row 0's diagonal
    predecessors are the constant 0), open_end (the value is the soft-min of the last row: one more node T, whose
    weights and their derivatives seed E and Edot), pens `(B,)` float64 (natural units; `(0,)`: no step
    penalty) with the direction pdots `(B,)`, and then vpen = dv/dp and vpen_dot `(B,)` float64 are written.
    """
    B = x_lengths.shape[0]
    N, M = C.shape[1], C.shape[2]
    groups = (B + lanes - 1) // lanes
    n = min(Rt.shape[0], groups - g0)
    for s in prange(n):
        _hvp_group(g0 + s, lanes, C, Cdot, N, M, gamma, gamma_dot, x_lengths, y_lengths, window,
                   has_window, Rt[s], Rdt[s], exact, values, E, Edot, vgamma, vgamma_dot, open_begin, open_end,
                   pens, pdots, vpen, vpen_dot)
