"""Numba kernels of the ``cpu`` backend: soft-DTW forward and backward, SIMD across pairs.

Layout of the work
------------------
The DP has a serial dependency along every row (R[i, j] needs R[i, j - 1]), so a single pair runs at
the latency of one soft-min per cell (~27 ns measured for a scalar row loop with libm exp/log).
Independent *pairs* have no such dependency, so the kernels process a group of ``lanes`` pairs in
lock step: every row buffer is `(M + 2, lanes)` and the innermost loop runs over the lanes, which
LLVM vectorises (AVX2 / AVX-512). ``prange`` spreads the groups over the threads.

Per-pair lengths and windows are handled by masking: a group walks the union of its lanes' column
ranges, and a lane's cells outside its own range are set to the sentinel (forward) or get E = 0
(backward). Batches too small to fill the lanes run one pair at a time instead (last section):
the forward as a wavefront over strips of rows, the backward vectorised along each row.

Numerics
--------
The DP runs in log2 units: R' = R / (gamma ln 2), so smin becomes -log2 sum 2^-a. The soft-min is
shifted by its minimum ("median trick"): smin(a, b, c) = lo - log2(1 + 2^(lo - mid) + 2^(lo - hi)),
two exp2 and one log2, every exponent <= 0. exp2 and log2 are polynomials written here (Numba has
no vector libm without Intel SVML, and a call to libm stops the vectoriser); their relative error
is ~2.5e-7 in float32 and ~1e-15 in float64. +inf is replaced by a large finite sentinel, so no
inf - inf or NaN appears: every cell's R' saturates at it (a +inf cost, a forbidden cell, or a
cell cut off from every finite path holds the sentinel), and an end value from half of it on is
+inf (_end_value). cpu.py runs only problems whose finite R' stay within a quarter of the
sentinel (_state: a float64 state otherwise, and float64 data past it goes to the reference
backend). The backward uses the normalised weights of Cuturi & Blondel's
Algorithm 2: each cell s stores the weights of its three predecessors inside its own soft-min,
w = 2^(S'[s] - R'[p]) <= 1 with S' = R' - C' the soft-min value of s, and E[p] = sum_s E[s] w(p->s);
or, from the predecessors alone, w = 2^(lo - R'[p]) / Z (_cell_weights_exact: float32 data, and
R' too large for S' = R' - C' to keep the soft-min).

Two dtypes
----------
The *data* dtype T (that of x, y or C) is used for costs, exp2/log2, E and the gradients. The
*state* dtype S (that of the R buffers and of the saved table) holds the accumulated costs R'.
S = T, except for float32 data whose backward is needed: then S = float64. R' grows like the path
cost over gamma (~1e4 for N = 64, gamma = 0.1), where a float32 ulp is ~1e-3, and the backward's
exponents are differences of such neighbours: a float32 R' put 6e-4 relative error into the
gradients (measured), a float64 R' with float32 exp2/log2 of the (small) differences puts ~1e-7.

All kernels use ``error_model="numpy"``: Python's error model inserts a zero-division check in
every division, which stops vectorisation. Likewise, a loop ``for j in range(lo, hi)`` indexing
``a[j]`` keeps Numba's negative-index wraparound select on every access (lo might be negative),
which also stops it (measured 0.69 vs 0.16 ns per element); vectorised loops therefore run over
``range(n)`` on slices.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

# Cost kinds understood by the kernels: fused costs read x and y, COST_GIVEN reads C.
COST_SQEUCLIDEAN = 0
COST_L1 = 1
COST_GIVEN = 2

# nnan/ninf stay off: NaN in the data propagates as NaN instead of being undefined behaviour.
# The rest (reassociation, contraction into FMA, approximate functions) is what vectorises.
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}
_OPTIONS = dict(fastmath=FASTMATH, error_model="numpy")
_JIT = dict(_OPTIONS, cache=True)
_INLINE = dict(_JIT, inline="always")

#: Large finite stand-ins for +inf, per dtype; finite arithmetic on them never makes inf or NaN.
SENTINEL_F32 = 1e30
SENTINEL_F64 = 1e300

LN2 = 0.6931471805599453

# Polynomial coefficients (lowest order first), fitted at Chebyshev nodes with numpy.polynomial:
# 2^f on f in [-1/2, 1/2] (relative error 2.5e-7 in float32 / 1e-15 in float64), and
# log2((1 + s) / (1 - s)) / s as a polynomial in u = s^2 for s in [-0.172, 0.2].
_EXP2_F32 = (1.0000000754953482, 0.6931472067106201, 0.24022107355830766, 0.055503272142091,
             0.009676037097864413, 0.0013400432165358218)
_EXP2_F64 = (1.0000000000000007, 0.6931471805599448, 0.24022650695905343, 0.055504108664846064,
             0.009618129108077314, 0.0013333558144833942, 0.00015403530185086747,
             1.5252733615007464e-05, 1.3215534381076433e-06, 1.017840295158629e-07,
             7.058698327984167e-09, 4.39434625572878e-10)
_LOG2_F32 = (2.885390074868239, 0.9618021960043827, 0.5763955610828772, 0.4390777126309035)
_LOG2_F64 = (2.8853900817779468, 0.9617966939024074, 0.5770780232103155, 0.4121977238491469,
             0.32065336612179973, 0.2604845743042572, 0.2524495735842052)


# ---------------------------------------------------------------------------------------------
# Scalar maths, one version per dtype (selected by Numba's overload machinery).
# ---------------------------------------------------------------------------------------------

@intrinsic
def _pow2_of_int(typingctx, n):
    """2^n for an integer-valued float n in the normal range, by writing the exponent bits.

    Done in LLVM IR (float -> int, add the bias, shift into the exponent field, bitcast) because
    Numba cannot reinterpret bits otherwise; every step vectorises.
    """
    if n not in (types.float32, types.float64):
        return None
    width, bias, mantissa = (32, 127, 23) if n == types.float32 else (64, 1023, 52)

    def codegen(context, builder, sig, args):
        int_t = ir.IntType(width)
        k = builder.fptosi(args[0], int_t)
        k = builder.add(k, ir.Constant(int_t, bias))
        k = builder.shl(k, ir.Constant(int_t, mantissa))
        return builder.bitcast(k, ir.FloatType() if width == 32 else ir.DoubleType())

    return n(n), codegen


@intrinsic
def _horner(typingctx, f, coeffs):
    """coeffs[0] + f (coeffs[1] + f (coeffs[2] + ...)) as straight-line IR.

    An intrinsic is emitted inside its caller, so the polynomial is always inlined into the lane
    loop (a call there, or a loop that Numba-IR inlining trips over, stops the vectoriser).
    """
    if not (isinstance(coeffs, types.UniTuple) and coeffs.dtype == f):
        return None
    flags = sorted(FASTMATH)

    def codegen(context, builder, sig, args):
        x, c = args
        p = builder.extract_value(c, coeffs.count - 1)
        for k in range(coeffs.count - 2, -1, -1):
            prod = builder.fmul(p, x)
            prod.flags.extend(flags)
            p = builder.fadd(prod, builder.extract_value(c, k))
            p.flags.extend(flags)
        return p

    return f(f, coeffs), codegen


def exp2_neg(x):
    """2^x for x <= 0; below the dtype's exponent floor the result stays at ~2^floor (normal)."""
    raise NotImplementedError("exp2_neg is a Numba kernel helper")


def log2_1to3(z):
    """log2(z) for z in [1, 3] (the argument of the soft-min's log: 1 plus two terms <= 1)."""
    raise NotImplementedError("log2_1to3 is a Numba kernel helper")


def sentinel(like):
    """The sentinel in the dtype of the float ``like``."""
    raise NotImplementedError("sentinel is a Numba kernel helper")


def exp_floor(like):
    """Smallest argument exp2_neg distinguishes (dtype of ``like``); smaller ones are clamped to it."""
    raise NotImplementedError("exp_floor is a Numba kernel helper")


def flush_exponent(like):
    """Weights below 2^flush count as 0 and |E| below it is flushed (dtype of ``like``).

    Denormal operands cost ~100 cycles each on x86 (a microcode assist; measured: a backward at
    17 ns/cell instead of 4), and Numba cannot switch on flush-to-zero. With both factors of
    every product >= 2^flush and 2 flush above the smallest normal exponent, no denormal arises.
    """
    raise NotImplementedError("flush_exponent is a Numba kernel helper")


# Per dtype: sentinel; floor of exp2's argument (2^floor times the polynomial, >= 0.7, is still
# a normal number); flush exponent (see flush_exponent).
_CONSTANTS = {
    types.float32: (np.float32(SENTINEL_F32), np.float32(-125.0), np.float32(-60.0)),
    types.float64: (np.float64(SENTINEL_F64), np.float64(-1021.0), np.float64(-500.0)),
}


def _make_exp2(t, coeffs, floor):
    c = tuple(t(v) for v in coeffs)
    half = t(0.5)

    def impl(x):
        x = max(x, floor)
        n = np.floor(x + half)
        f = x - n  # in [-1/2, 1/2]
        return _horner(f, c) * _pow2_of_int(n)

    return impl


def _make_log2(t, coeffs):
    c = tuple(t(v) for v in coeffs)
    one, half, sqrt2 = t(1.0), t(0.5), t(1.4142135623730951)

    def impl(z):
        # z = 2^e m with m in (0.707, 1.5]; log2 m = s P(s^2) with s = (m - 1) / (m + 1).
        e = t(z > sqrt2)
        m = z * (one - half * e)
        s = (m - one) / (m + one)
        return e + s * _horner(s * s, c)

    return impl


_EXP2_IMPL = {
    types.float32: _make_exp2(np.float32, _EXP2_F32, _CONSTANTS[types.float32][1]),
    types.float64: _make_exp2(np.float64, _EXP2_F64, _CONSTANTS[types.float64][1]),
}
_LOG2_IMPL = {
    types.float32: _make_log2(np.float32, _LOG2_F32),
    types.float64: _make_log2(np.float64, _LOG2_F64),
}


# Inlined at the Numba-IR level: LLVM's inliner declines the float64 versions (too big), and a
# call inside the lane loop stops the vectoriser.
@overload(exp2_neg, jit_options=_OPTIONS, inline="always")
def _ov_exp2_neg(x):
    return _EXP2_IMPL.get(x)


@overload(log2_1to3, jit_options=_OPTIONS, inline="always")
def _ov_log2_1to3(z):
    return _LOG2_IMPL.get(z)


def _constant_overload(index):
    def typer(like):
        if like not in _CONSTANTS:
            return None
        value = _CONSTANTS[like][index]
        return lambda like: value

    return typer


overload(sentinel, jit_options=_OPTIONS)(_constant_overload(0))
overload(exp_floor, jit_options=_OPTIONS)(_constant_overload(1))
overload(flush_exponent, jit_options=_OPTIONS)(_constant_overload(2))


@njit(**_INLINE)
def softmin3(a, b, c, like):
    """-log2(2^-a + 2^-b + 2^-c), shifted by the minimum so that every exponent is <= 0.

    a, b, c in the state dtype; the exponentials run in the dtype of ``like`` (the data dtype) on
    differences already clamped to exp2's range, so a float64 sentinel never becomes a float32 inf.
    """
    lo = min(a, min(b, c))
    hi = max(a, max(b, c))
    mid = max(min(a, b), min(max(a, b), c))
    t = type(like)
    floor = type(lo)(exp_floor(like))
    e_mid = exp2_neg(t(max(lo - mid, floor)))
    e_hi = exp2_neg(t(max(lo - hi, floor)))
    return lo - type(lo)(log2_1to3(t(1.0) + e_mid + e_hi))


# ---------------------------------------------------------------------------------------------
# Pieces shared by the forward and backward of one group of pairs.
# ---------------------------------------------------------------------------------------------

@njit(**_INLINE)
def _state_constants(gamma, like):
    """(sentinel, hard, inv, out_scale) in the state dtype of ``like``.

    Costs are scaled into log2 units by inv = 1 / (gamma ln 2) once per cell and values back by
    out_scale = gamma ln 2 once per pair; hard DTW (gamma == 0) keeps natural units.
    """
    t = type(like)
    hard = gamma == 0
    inv = t(1.0) if hard else t(1.0 / (gamma * LN2))
    out_scale = t(1.0) if hard else t(gamma * LN2)
    return sentinel(like), hard, inv, out_scale


@njit(**_JIT)
def _row_bounds(i, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi):
    """Fill lo[k], hi[k] with the columns lane k uses in row i; return the group's (a, b) union.

    Lanes past the batch or past their own length get the empty range (0, 0).
    """
    a = 1 << 62
    b = 0
    for k in range(lo.shape[0]):
        l, h = 0, 0
        if k < nl and i < x_lengths[b0 + k]:
            if has_window:
                l, h = window[b0 + k, i, 0], window[b0 + k, i, 1]
            else:
                l, h = 0, y_lengths[b0 + k]
        lo[k], hi[k] = l, h
        if l < h:
            a = min(a, l)
            b = max(b, h)
    if b == 0:
        a = 0
    return a, b


@njit(**_JIT)
def _reset_outside(buf, written_lo, written_hi, keep_lo, keep_hi, value):
    """Set rows [written_lo, written_hi) of ``buf`` outside [keep_lo, keep_hi) to ``value``.

    A row buffer holds the sentinel (forward) or 0 (backward) everywhere except where it was last
    written; reusing it for a new range only needs the old range's leftovers cleared.
    """
    for p in range(written_lo, min(written_hi, keep_lo)):
        buf[p, :] = value
    for p in range(max(written_lo, keep_hi), written_hi):
        buf[p, :] = value


@njit(**_JIT)
def _pack_y(y, b0, nl, ys):
    """ys[j, d, k] = y[b0 + k, j, d]: the group's y, lanes innermost (zeros for padding lanes)."""
    ys[:] = 0
    for k in range(nl):
        for j in range(y.shape[1]):
            for d in range(y.shape[2]):
                ys[j, d, k] = y[b0 + k, j, d]


@njit(**_JIT)
def _cost_row(i, b0, nl, a, b, x, ys, C, cost_kind, lo, hi, xrow, crow, need_cost=True):
    """crow[j, k] = cost of row i of lane k, column j, for j in [a, b); 0 outside the lane's range.

    Fused costs also leave the row of x in xrow[d, k] for the gradient. need_cost=False: only that (a
    backward whose weights do not read the costs: exact or hard).
    """
    L = crow.shape[1]
    if cost_kind == COST_GIVEN:
        if not need_cost:
            return
        crow[a:b, :] = 0
        for k in range(nl):
            src = C[b0 + k, i, lo[k]:hi[k]]
            dst = crow[lo[k]:hi[k], k]
            for q in range(hi[k] - lo[k]):
                dst[q] = src[q]
        return
    D = xrow.shape[0]
    zero = crow.dtype.type(0.0)  # typed: a literal int would promote float32 to float64
    for d in range(D):
        for k in range(L):
            xrow[d, k] = x[b0 + k, i, d] if (k < nl and lo[k] < hi[k]) else zero
    if not need_cost:
        return
    for j in range(a, b):
        for k in range(L):
            crow[j, k] = 0
        if cost_kind == COST_L1:
            for d in range(D):
                for k in range(L):
                    crow[j, k] += abs(xrow[d, k] - ys[j, d, k])
        else:
            for d in range(D):
                for k in range(L):
                    t = xrow[d, k] - ys[j, d, k]
                    crow[j, k] += t * t
    # Cells outside a lane's own range get cost 0 (their value is masked anyway; a finite 0 keeps
    # <E, C> free of garbage from padded steps).
    for j in range(a, b):
        for k in range(L):
            inside = (j >= lo[k]) & (j < hi[k])
            crow[j, k] = crow[j, k] if inside else zero


# ---------------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------------

@njit(**_JIT)
def _dp_row_soft(a, b, pdiag, prev, cur, crow, lo, hi, left, inv, big, pen):
    """cur[j + 1] = C'[i, j] + smin(pdiag[j], prev[j + 1] + pen, cur[j] + pen) for j in [a, b), in log2
    units.

    pdiag is prev (the row above) but for row 0 with open_begin (zeros); pen: the step penalty in log2
    units (0: none). prev, cur, left, inv, big, pen: state dtype; crow: data dtype.
    """
    L = crow.shape[1]
    for k in range(L):
        left[k] = big
    for j in range(a, b):
        for k in range(L):
            c = crow[j, k]
            r = min(c * inv + softmin3(pdiag[j, k], prev[j + 1, k] + pen, left[k] + pen, c), big)
            r = r if ((j >= lo[k]) & (j < hi[k])) else big
            left[k] = r
            cur[j + 1, k] = r


@njit(**_JIT)
def _dp_row_hard(a, b, pdiag, prev, cur, crow, lo, hi, left, big, pen):
    """Hard DTW (gamma == 0): cur[j + 1] = C[i, j] + min(pdiag[j], min(prev[j + 1], cur[j]) + pen)."""
    L = crow.shape[1]
    for k in range(L):
        left[k] = big
    for j in range(a, b):
        for k in range(L):
            r = min(crow[j, k] + min(pdiag[j, k], min(prev[j + 1, k], left[k]) + pen), big)
            r = r if ((j >= lo[k]) & (j < hi[k])) else big
            left[k] = r
            cur[j + 1, k] = r


@njit(**_JIT)
def _store_row(slot, b0, nl, a, b, cur, scale, big, R_out):
    """R_out[b0 + k, slot, :] = the row in ``cur`` times ``scale``; the sentinel outside [a, b)
    and on masked cells."""
    for k in range(nl):
        row = R_out[b0 + k, slot]
        row[:a] = big
        src = cur[a + 1:b + 1, k]
        dst = row[a:b]
        for q in range(b - a):
            v = src[q]
            dst[q] = big if v >= big else v * scale
        row[b:] = big


@njit(**_INLINE)
def _end_value(r, out_scale, big):
    """A pair's value from its end cell R' (state dtype): +inf when the cell holds the sentinel (no
    finite path) or R' times out_scale overflows the values' dtype (the exact value does too).

    The sentinel test is R' >= big / 2: the cpu backend only runs problems whose finite R' stay
    below big / 4 in magnitude (cpu.py, _state), and a cell cut off from every finite path is
    within that of big (the forward saturates R' at big).
    """
    return np.inf if r >= big * 0.5 else r * out_scale


@njit(**_JIT)
def _row_softmin(row, hard, big):
    """Open end: smin_j row[j] (log2 units; the min for hard DTW) in row's dtype; big's half or more
    when no cell is finite. Scalar float64 sums (once per pair)."""
    lo = row[0]
    for q in range(1, row.shape[0]):
        lo = min(lo, row[q])
    if hard or lo >= big * 0.5:
        return lo
    z = 0.0
    for q in range(row.shape[0]):
        z += np.exp2(np.float64(lo) - np.float64(row[q]))
    return type(lo)(np.float64(lo) - np.log2(z))


@njit(**_JIT)
def _end_seed(row, hard, big, out):
    """Open end: out[q] = the weight of row[q] (log2 units) in smin_q row[q] (one-hot on the first argmin
    for hard DTW; all 0 when no cell is finite); returns sum_q w_q log2 w_q (float64)."""
    m = row.shape[0]
    zero = out.dtype.type(0.0)
    lo = row[0]
    first = 0
    for q in range(1, m):
        if row[q] < lo:
            lo, first = row[q], q
    for q in range(m):
        out[q] = zero
    if lo >= big * 0.5:
        return 0.0
    if hard:
        out[first] = out.dtype.type(1.0)
        return 0.0
    tiny = np.exp2(np.float64(flush_exponent(zero)))
    z = 0.0
    for q in range(m):
        z += np.exp2(np.float64(lo) - np.float64(row[q]))
    ent = -np.log2(z)
    for q in range(m):
        t = np.float64(lo) - np.float64(row[q])
        w = np.exp2(t) / z
        if w >= tiny:
            out[q] = out.dtype.type(w)
            ent += w * t
    return ent


@njit(**_INLINE)
def _slot(i, first, every, n_slots):
    """Where row i goes in a saved buffer of rows first, first + every, ... (n_slots of them); -1
    if it is not saved (every == 0: nothing is)."""
    if every <= 0 or i < first:
        return -1
    d = i - first
    s = d // every
    return s if (d - s * every == 0 and s < n_slots) else -1


@njit(**_JIT)
def _forward_group(g, lanes, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                   has_window, r0, r1, R_top, top_slot, every, first, natural, R_out,
                   values, open_begin, open_end, pen):
    """Forward of rows [r0, r1) of pairs [g * lanes, g * lanes + lanes); see forward_kernel.

    The state dtype is R_out's (a placeholder's when nothing is saved), the data dtype values'.
    """
    B = x_lengths.shape[0]
    b0 = g * lanes
    nl = min(lanes, B - b0)
    dt = values.dtype
    st = R_out.dtype
    big, hard, inv, out_scale = _state_constants(gamma, st.type(0.0))
    scale = out_scale if natural else st.type(1.0)
    n_slots = R_out.shape[1]
    pen_s = st.type(pen) * inv

    D = x.shape[2]
    fused = cost_kind != COST_GIVEN
    ys = np.empty((M if fused else 0, D, lanes), dt)
    if fused:
        _pack_y(y, b0, nl, ys)
    xrow = np.zeros((D, lanes), dt)
    crow = np.zeros((M + 2, lanes), dt)
    prev = np.full((M + 2, lanes), big, st)
    cur = np.full((M + 2, lanes), big, st)
    # Buffer position p holds column p - 1; prev_lo..cur_hi: written position ranges.
    if top_slot < 0:
        prev[0, :] = 0  # R[-1, -1] = 0
        prev_lo, prev_hi = 0, 1
    else:  # start below a checkpoint (log2 units, as the forward had it)
        for k in range(nl):
            src = R_top[b0 + k, top_slot]
            dst = prev[1:M + 1, k]
            for q in range(M):
                dst[q] = src[q]
        prev_lo, prev_hi = 0, M + 2
    cur_lo, cur_hi = 0, 0
    lo = np.zeros(lanes, np.int64)
    hi = np.zeros(lanes, np.int64)
    left = np.empty(lanes, st)
    zdiag = np.zeros((M + 2 if open_begin else 0, lanes), st)  # row 0's diagonal predecessors (open begin)

    # Rows no lane reaches (empty ranges) are cheap, and give saved rows the sentinel.
    n_rows = 0
    for k in range(nl):
        n_rows = max(n_rows, x_lengths[b0 + k])
    r_end = min(r1, N if every > 0 else n_rows)
    for i in range(r0, r_end):
        a, b = _row_bounds(i, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi)
        _cost_row(i, b0, nl, a, b, x, ys, C, cost_kind, lo, hi, xrow, crow)
        _reset_outside(cur, cur_lo, cur_hi, a + 1, b + 1, big)
        cur_lo, cur_hi = a + 1, b + 1
        pdiag = zdiag if (open_begin and i == 0) else prev
        if hard:
            _dp_row_hard(a, b, pdiag, prev, cur, crow, lo, hi, left, big, pen_s)
        else:
            _dp_row_soft(a, b, pdiag, prev, cur, crow, lo, hi, left, inv, big, pen_s)
        for k in range(nl):
            if i == x_lengths[b0 + k] - 1:
                if open_end:
                    r = _row_softmin(cur[1:y_lengths[b0 + k] + 1, k], hard, big)
                else:
                    r = cur[y_lengths[b0 + k], k]
                values[b0 + k] = _end_value(r, out_scale, big)
        s = _slot(i, first, every, n_slots)
        if s >= 0:
            _store_row(s, b0, nl, a, b, cur, scale, big, R_out)
        prev, cur = cur, prev
        prev_lo, prev_hi, cur_lo, cur_hi = cur_lo, cur_hi, prev_lo, prev_hi


@njit(parallel=True, **_JIT)
def forward_kernel(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, has_window, r0, r1,
                   R_top, top_slot, every, first, natural, by_pair, lanes, R_out, values, narrow,
                   open_begin, open_end, pen):
    """Rows [r0, r1) of the forward: soft-DTW values into ``values`` (pairs that end there), and
    the rows ``first``, ``first + every``, ... into R_out.

    The rows start from the border (top_slot < 0; r0 = 0) or from row r0 - 1 of every pair read
    from R_top[b, top_slot] in log2 units (a checkpoint). Row i is written to R_out[b, s] with
    s = (i - first) / every where that is an integer below R_out.shape[1], in natural units if
    ``natural`` else in log2 units; saved cells past a pair's lengths or outside its window get
    the sentinel. Uses (as cpu.py calls it):

    - value only: every = 0 (R_out a `(0, 0, 0)` placeholder of the state dtype);
    - the table R `(B, N, M)`: every = 1, first = 0, natural;
    - checkpoints `(B, K, M)`: every = TH, first = TH - 1 (rows TH - 1, 2 TH - 1, ...), log2
      units, so that a band recomputed from one repeats the forward's arithmetic exactly;
    - a band recomputed for the backward: r0 = k TH, r1 = r0 + TH, top_slot = k - 1, every = 1,
      first = r0 - 1, natural: R_out `(B, TH + 1, M)` gets rows r0 .. r0 + TH - 1 in slots
      1 .. TH as the table holds them (slot 0, row r0 - 1, is the caller's). ``values`` is then
      scratch.

    values has the data dtype, R_out and R_top the state dtype. x `(B, N, D)`, y `(B, M, D)` for
    fused costs (``cost_kind`` 0 or 1); C `(B, N, M)` for COST_GIVEN (then x, y are `(0, 0, 0)`
    placeholders and only their dtype matters). gamma: float (0 = hard DTW). window: int32
    `(B, N, 2)` if has_window. by_pair: one pair at a time with ``lanes`` rows per strip (small
    batches), else groups of ``lanes`` pairs. narrow (by_pair only): a saved row gets only the columns a
    by-pair backward reads of it (its own and the next row's [lo - 1, hi)), not all M; the rest of R_out
    keeps what it held. For the bands of a checkpointed backward: a banded pair then costs its band, not
    N·M, per recomputed band (cpu.py, _backward_bands).

    Alignment variants (see reference.py's docstring for the recursion): open_begin (row 0's diagonal
    predecessor is 0 at every column, its vertical one the sentinel), open_end (a pair's value is the
    soft-min of its last row over its columns), pen (float, natural units; 0 for none: the step penalty
    added to the vertical and horizontal predecessors). No window with an open end (cpu.py refuses it).
    """
    B = x_lengths.shape[0]
    if cost_kind == COST_GIVEN:
        N, M = C.shape[1], C.shape[2]
    else:
        N, M = x.shape[1], y.shape[1]
    if by_pair:
        for b in prange(B):
            _forward_pair(b, lanes, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                          has_window, r0, r1, R_top, top_slot, every, first, natural, R_out,
                          values, narrow, open_begin, open_end, pen)
        return
    groups = (B + lanes - 1) // lanes
    for g in prange(groups):
        _forward_group(g, lanes, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                       has_window, r0, r1, R_top, top_slot, every, first, natural, R_out,
                       values, open_begin, open_end, pen)


# ---------------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------------

@njit(**_JIT)
def _load_R_row(i, first, b0, nl, a, b, R_rows, inv, big, out):
    """out[j + 1, k] = R[b0 + k, i, j] in log2 units for j in [a - 1, b), read from
    R_rows[b0 + k, i - first] (natural units); row -1 is the border."""
    start = max(a - 1, 0)
    if i < 0:
        for p in range(start, b + 1):
            out[p, :] = big
        out[0, :] = 0  # R[-1, -1] = 0
        return
    out[start + 1:b + 1, nl:] = big  # lanes past the batch
    for k in range(nl):
        src = R_rows[b0 + k, i - first, start:b]
        dst = out[start + 1:b + 1, k]
        for q in range(b - start):
            v = src[q]
            dst[q] = big if v >= big else v * inv
    if a == 0:
        out[0, :] = big


@njit(**_INLINE)
def _weight(t, like):
    """(w, w t) for w = 2^t, t <= 0 (state dtype; clamped at 0 against rounding), in the data dtype.

    0 below 2^flush: no denormals, and a sentinel difference gives exactly 0.
    """
    flush = flush_exponent(like)
    t = type(like)(max(min(t, type(t)(0.0)), type(t)(flush)))
    w = exp2_neg(t) if t > flush else type(like)(0.0)
    return w, w * t


@njit(**_INLINE)
def _cell_weights_soft(r, c, inv, d, u, l):
    """(w_diag, w_up, w_left, ent) of a cell with R' = r, cost c and predecessors' R' d, u, l.

    The cell's soft-min value is S' = r - c inv; predecessor p gets w = 2^t with
    t = S' - R'[p] <= 0 (clamped at 0 against rounding). ent = sum_p w t (= sum w log2 w) is
    ln-scaled into dR/dgamma with the predecessors held fixed: its terms all have one sign, so
    the gradient to gamma built from it has no cancellation, unlike (value - <E, C>) / gamma.
    """
    s = r - c * inv
    w_d, h_d = _weight(s - d, c)
    w_u, h_u = _weight(s - u, c)
    w_l, h_l = _weight(s - l, c)
    return w_d, w_u, w_l, h_d + h_u + h_l


@njit(**_INLINE)
def _cell_weights_exact(d, u, l, like):
    """(w_diag, w_up, w_left, ent) as :func:`_cell_weights_soft`, from the predecessors alone:
    w_p = 2^(lo - R'[p]) / Z with lo = min(d, u, l), Z = sum_p 2^(lo - R'[p]) in [1, 3], and
    ent = sum_p w_p (lo - R'[p]) - log2 Z (two sums of one sign).

    For problems whose R' is so large that S' = r - c inv loses the soft-min to rounding (|R'| past
    ~1e8 in float64: costs of 1e22 at gamma = 1e-8 gave E = 0 on all but the last row). Only
    differences of neighbours, never of R' and C'; the fast form (no division, no log2) serves
    wherever that loss cannot happen.
    """
    wd, wu, wl, ed, eu, el, lz = exact_weights_log(d, u, l, like)
    return wd, wu, wl, wd * ed + wu * eu + wl * el - lz


@njit(**_INLINE)
def exact_weights_log(d, u, l, like):
    """(w_diag, w_up, w_left, e_diag, e_up, e_left, log2 Z) of :func:`_cell_weights_exact`: the weights, the
    exponents e_p = lo - R'[p] (clamped to [flush, 0]) and log2 Z, so log2 w_p = e_p - log2 Z (the second
    order, _cpu_hvp.py, needs those logs too)."""
    t = type(like)
    flush = flush_exponent(like)
    zero = t(0.0)
    lo = min(d, min(u, l))
    ed = t(max(min(lo - d, type(d)(0.0)), type(d)(flush)))
    eu = t(max(min(lo - u, type(d)(0.0)), type(d)(flush)))
    el = t(max(min(lo - l, type(d)(0.0)), type(d)(flush)))
    ad = exp2_neg(ed) if ed > flush else zero
    au = exp2_neg(eu) if eu > flush else zero
    al = exp2_neg(el) if el > flush else zero
    z = ad + au + al
    iz = t(1.0) / z
    return ad * iz, au * iz, al * iz, ed, eu, el, log2_1to3(z)


@njit(**_INLINE)
def _cell_weights_hard(d, u, l, like):
    """One-hot weights of the argmin of (d, u, l); ties go to diagonal, then up, then left."""
    zero, one = type(like)(0.0), type(like)(1.0)
    is_d = (d <= u) & (d <= l)
    is_u = (u < d) & (u <= l)
    return one if is_d else zero, one if is_u else zero, zero if (is_d | is_u) else one


@njit(**_JIT)
def _weights_soft(a, b, rdiag, rup, rcur, crow, inv, wd, wu, wl, ent, exact, pen, want_ent):
    """Soft weights (see _cell_weights_soft; _cell_weights_exact if ``exact``) of the cells of row i,
    j in [a, b), all lanes. rdiag: the row above as a diagonal predecessor (rup, but zeros for row 0
    with open_begin); pen: step penalty in log2 units (state dtype), added to up and left. ent is
    written only if ``want_ent`` (dgamma is wanted); without it the loops skip its arithmetic (a log2
    for the exact weights)."""
    L = crow.shape[1]
    like = wd.dtype.type(0.0)
    if not want_ent:
        if exact:
            for j in range(a, b):
                for k in range(L):
                    wd[j + 1, k], wu[j + 1, k], wl[j + 1, k], _ = _cell_weights_exact(
                        rdiag[j, k], rup[j + 1, k] + pen, rcur[j, k] + pen, like)
            return
        for j in range(a, b):
            for k in range(L):
                wd[j + 1, k], wu[j + 1, k], wl[j + 1, k], _ = _cell_weights_soft(
                    rcur[j + 1, k], crow[j, k], inv, rdiag[j, k], rup[j + 1, k] + pen, rcur[j, k] + pen)
        return
    if exact:
        for j in range(a, b):
            for k in range(L):
                wd[j + 1, k], wu[j + 1, k], wl[j + 1, k], ent[j + 1, k] = _cell_weights_exact(
                    rdiag[j, k], rup[j + 1, k] + pen, rcur[j, k] + pen, like)
        return
    for j in range(a, b):
        for k in range(L):
            wd[j + 1, k], wu[j + 1, k], wl[j + 1, k], ent[j + 1, k] = _cell_weights_soft(
                rcur[j + 1, k], crow[j, k], inv, rdiag[j, k], rup[j + 1, k] + pen, rcur[j, k] + pen)


@njit(**_JIT)
def _weights_hard(a, b, rdiag, rup, rcur, wd, wu, wl, pen):
    """Hard weights (see _cell_weights_hard) of the cells of row i, j in [a, b), all lanes (rdiag, pen
    as in _weights_soft)."""
    L = wd.shape[1]
    like = wd.dtype.type(0.0)
    for j in range(a, b):
        for k in range(L):
            wd[j + 1, k], wu[j + 1, k], wl[j + 1, k] = _cell_weights_hard(
                rdiag[j, k], rup[j + 1, k] + pen, rcur[j, k] + pen, like)


@njit(**_JIT)
def _alignment_row(a, b, lo, hi, end_col, e_next, wd_next, wu_next, e_cur, wl_cur):
    """E[i, j] for j = b - 1 .. a: the successors' E times this cell's weight in their soft-min.

    Successors: (i + 1, j + 1) by its diagonal weight, (i + 1, j) by its up weight, (i, j + 1) by
    its left weight. The end cell (n - 1, m - 1) adds 1 (dR_end / dR_end). Buffer position j + 1.
    """
    L = e_cur.shape[1]
    zero = e_cur.dtype.type(0.0)  # typed constants: a literal int would promote float32 to float64
    one = e_cur.dtype.type(1.0)
    tiny = exp2_neg(flush_exponent(zero))  # E below this is flushed to 0 (see flush_exponent)
    for j in range(b - 1, a - 1, -1):
        for k in range(L):
            e = (e_next[j + 2, k] * wd_next[j + 2, k] + e_next[j + 1, k] * wu_next[j + 1, k]
                 + e_cur[j + 2, k] * wl_cur[j + 2, k])
            e += one if j == end_col[k] else zero
            keep = (j >= lo[k]) & (j < hi[k]) & (e >= tiny)
            e_cur[j + 1, k] = e if keep else zero


@njit(**_JIT)
def _alignment_row_seeded(a, b, lo, hi, seed, e_next, wd_next, wu_next, e_cur, wl_cur):
    """:func:`_alignment_row` with the end given as a row of seeds (open end: the last row's soft-min
    weights, seed[j + 1, k]; zero on lanes whose last row this is not)."""
    L = e_cur.shape[1]
    zero = e_cur.dtype.type(0.0)
    tiny = exp2_neg(flush_exponent(zero))
    for j in range(b - 1, a - 1, -1):
        for k in range(L):
            e = (e_next[j + 2, k] * wd_next[j + 2, k] + e_next[j + 1, k] * wu_next[j + 1, k]
                 + e_cur[j + 2, k] * wl_cur[j + 2, k])
            e += seed[j + 1, k]
            keep = (j >= lo[k]) & (j < hi[k]) & (e >= tiny)
            e_cur[j + 1, k] = e if keep else zero


@njit(**_JIT)
def _moves_row(a, b, e_cur, wu, wl, acc):
    """acc[k] += sum_j E[i, j] (w_up + w_left): the row's share of d value / d step_penalty."""
    L = e_cur.shape[1]
    for j in range(a, b):
        for k in range(L):
            acc[k] += e_cur[j + 1, k] * (wu[j + 1, k] + wl[j + 1, k])


@njit(**_JIT)
def _grad_row(a, b, cost_kind, e_cur, xrow, ys, ent, dxrow, dys, e_ent, want_dy, want_ent):
    """Accumulate the cost VJP of row i (without the factor 2 of sqeuclidean) and <E, ent>.

    sqeuclidean: dX_i += E_ij (x_i - y_j), dY_j -= E_ij (x_i - y_j); l1: the same with the sign. dY only
    if ``want_dy``, <E, ent> only if ``want_ent``.
    """
    L = e_cur.shape[1]
    D = xrow.shape[0]
    if want_ent:
        for j in range(a, b):
            for k in range(L):
                e_ent[k] += e_cur[j + 1, k] * ent[j + 1, k]
    if cost_kind == COST_GIVEN:
        return
    l1 = cost_kind == COST_L1
    zero = e_cur.dtype.type(0.0)
    if not want_dy:
        for j in range(a, b):
            for d in range(D):
                if l1:
                    for k in range(L):
                        dxrow[d, k] += e_cur[j + 1, k] * np.sign(xrow[d, k] - ys[j, d, k])
                else:
                    for k in range(L):
                        e = e_cur[j + 1, k]
                        g = e * (xrow[d, k] - ys[j, d, k])
                        dxrow[d, k] += g if e > 0 else zero
        return
    for j in range(a, b):
        for d in range(D):
            if l1:
                for k in range(L):
                    t = xrow[d, k] - ys[j, d, k]
                    g = e_cur[j + 1, k] * np.sign(t)
                    dxrow[d, k] += g
                    dys[j, d, k] -= g
            else:
                for k in range(L):
                    e = e_cur[j + 1, k]
                    g = e * (xrow[d, k] - ys[j, d, k])
                    g = g if e > 0 else zero  # never 0 * inf (a difference past the dtype's range)
                    dxrow[d, k] += g
                    dys[j, d, k] -= g


@njit(**_JIT)
def _backward_group(g, lanes, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                    has_window, r0, r1, first, grad, values, R_rows, carry, carry_i, carry_y,
                    e_ent, dx, dy, dC, dgamma, exact, open_begin, open_end, pen, e_mov, dpen, want_dy,
                    want_dgamma):
    """Rows [r0, r1) (bottom-up) of the backward of pairs [g * lanes, g * lanes + lanes); see
    backward_kernel. State dtype R_rows', data dtype values'."""
    B = x_lengths.shape[0]
    b0 = g * lanes
    nl = min(lanes, B - b0)
    dt = values.dtype
    st = R_rows.dtype
    big, hard, inv, _ = _state_constants(gamma, st.type(0.0))
    pen_s = st.type(pen) * inv
    want_pen = dpen.shape[0] > 0
    D = x.shape[2]
    fused = cost_kind != COST_GIVEN
    # sqeuclidean's derivative carries a factor 2; applied once per pair with grad.
    factor = dt.type(2.0) if cost_kind == COST_SQEUCLIDEAN else dt.type(1.0)

    # State handed between calls (see backward_kernel), or kept here for a one-call backward.
    handed = carry.shape[0] > 0
    if handed:
        cg, ci, dys = carry[g], carry_i[g], carry_y[g]
    else:
        cg = np.zeros((6, M + 2, lanes), dt)
        ci = np.zeros(5, np.int64)
        dys = np.zeros((M if fused else 0, D, lanes), dt)
    # dys: the sum over the rows done so far of -E (x_i - y_j), lanes innermost.
    ys = np.empty((M if fused else 0, D, lanes), dt)
    if fused:
        _pack_y(y, b0, nl, ys)
    xrow = np.zeros((D, lanes), dt)
    dxrow = np.zeros((D, lanes), dt)
    crow = np.zeros((M + 2, lanes), dt)
    rup = np.full((M + 2, lanes), big, st)
    rcur = np.full((M + 2, lanes), big, st)
    # Weights of rows i (cur) and i + 1 (next); finite everywhere, exact only inside the ranges.
    # E of rows i and i + 1: zero outside the written range (successors outside are not cells).
    # Both rows' buffers are in cg, which of them is "next" in ci (no copies: an array assignment
    # costs seconds of compilation), so the call for the rows above goes on from here.
    p = ci[4]
    e_next, e_cur = cg[p], cg[1 - p]
    wd_next, wd_cur = cg[2 + p], cg[3 - p]
    wu_next, wu_cur = cg[4 + p], cg[5 - p]
    wl_cur = np.zeros((M + 2, lanes), dt)
    wl_next = np.zeros((M + 2, lanes), dt)
    next_lo, next_hi, cur_lo, cur_hi = ci[0], ci[1], ci[2], ci[3]
    lo = np.zeros(lanes, np.int64)
    hi = np.zeros(lanes, np.int64)
    end_col = np.full(lanes, -1, np.int64)
    ent = np.zeros((M + 2, lanes), dt)  # per cell: sum_p w log2 w over its predecessors
    ent_acc = np.zeros(lanes, np.float64)  # <E, ent> per pair (float64: a sum of N·M terms)
    mov_acc = np.zeros(lanes, np.float64)  # <E, w_up + w_left> per pair (d value / d step_penalty)
    if handed:
        for k in range(nl):
            ent_acc[k] = e_ent[b0 + k]
            if want_pen:
                mov_acc[k] = e_mov[b0 + k]
    zdiag = np.zeros((M + 2 if open_begin else 0, lanes), st)  # row 0's diagonal predecessors (open begin)
    seed = np.zeros((M + 2 if open_end else 0, lanes), dt)  # open end: the last row's soft-min weights

    n_rows = 0
    for k in range(nl):
        n_rows = max(n_rows, x_lengths[b0 + k])
    r_end = min(r1, n_rows)
    up_a, up_b = 0, 0  # the columns [up_a, up_b) of the row whose row above rup holds
    for i in range(r_end - 1, r0 - 1, -1):
        a, b = _row_bounds(i, b0, nl, x_lengths, y_lengths, window, has_window, lo, hi)
        for k in range(lanes):
            end_col[k] = y_lengths[b0 + k] - 1 if (k < nl and i == x_lengths[b0 + k] - 1) else -1
        # The exact and hard weights take no costs (only the fast weights do): then x's row alone.
        _cost_row(i, b0, nl, a, b, x, ys, C, cost_kind, lo, hi, xrow, crow, not (exact or hard))
        if i < r_end - 1 and a >= up_a and b <= up_b:
            # Row i is in rup already (the row above row i + 1, loaded over columns that cover row i's):
            # the buffers swap, and only row i - 1 is read from the table.
            rcur, rup = rup, rcur
        else:
            _load_R_row(i, first, b0, nl, a, b, R_rows, inv, big, rcur)
        _load_R_row(i - 1, first, b0, nl, a, b, R_rows, inv, big, rup)
        up_a, up_b = a, b
        rdiag = zdiag if (open_begin and i == 0) else rup
        if hard:
            _weights_hard(a, b, rdiag, rup, rcur, wd_cur, wu_cur, wl_cur, pen_s)
        else:
            _weights_soft(a, b, rdiag, rup, rcur, crow, inv, wd_cur, wu_cur, wl_cur, ent, exact, pen_s, want_dgamma)
        _reset_outside(e_cur, cur_lo, cur_hi, a + 1, b + 1, 0)
        cur_lo, cur_hi = a + 1, b + 1
        if open_end:
            ends_here = False
            for k in range(nl):
                if end_col[k] >= 0:
                    ends_here = True
                    m_k = end_col[k] + 1
                    ent_acc[k] += _end_seed(rcur[1:m_k + 1, k], hard, big, seed[1:m_k + 1, k])
            _alignment_row_seeded(a, b, lo, hi, seed, e_next, wd_next, wu_next, e_cur, wl_cur)
            if ends_here:
                seed[:] = 0
        else:
            _alignment_row(a, b, lo, hi, end_col, e_next, wd_next, wu_next, e_cur, wl_cur)
        _grad_row(a, b, cost_kind, e_cur, xrow, ys, ent, dxrow, dys, ent_acc, want_dy, want_dgamma)
        if want_pen:
            _moves_row(a, b, e_cur, wu_cur, wl_cur, mov_acc)
        for k in range(nl):
            gk = grad[b0 + k]
            if fused:
                for d in range(D):
                    dx[b0 + k, i, d] = factor * gk * dxrow[d, k]
            else:
                src = e_cur[a + 1:b + 1, k]
                dst = dC[b0 + k, i, a:b]
                for q in range(b - a):
                    dst[q] = gk * src[q]
        dxrow[:] = 0
        e_cur, e_next = e_next, e_cur
        cur_lo, cur_hi, next_lo, next_hi = next_lo, next_hi, cur_lo, cur_hi
        wd_cur, wd_next = wd_next, wd_cur
        wu_cur, wu_next = wu_next, wu_cur
        wl_cur, wl_next = wl_next, wl_cur
    if handed:
        ci[0], ci[1], ci[2], ci[3] = next_lo, next_hi, cur_lo, cur_hi
        ci[4] = (p + max(r_end - r0, 0)) % 2  # one swap per row
        for k in range(nl):
            e_ent[b0 + k] = ent_acc[k]
            if want_pen:
                e_mov[b0 + k] = mov_acc[k]
    if r0 > 0:
        return
    for k in range(nl):
        gk = grad[b0 + k]
        if want_pen:
            dpen[b0 + k] = gk * mov_acc[k]
        if fused:
            for j in range(M):
                for d in range(D):
                    dy[b0 + k, j, d] = factor * gk * dys[j, d, k]
        # d value / d gamma = sum_s E[s] sum_p w ln w = (value - <E, C>) / gamma, without cancellation.
        dgamma[b0 + k] = 0 if (hard or not want_dgamma) else gk * LN2 * ent_acc[k]


@njit(parallel=True, **_JIT)
def backward_kernel(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, has_window, r0, r1,
                    first, by_pair, lanes, grad, values, R_rows, carry, carry_i, carry_y, e_ent,
                    dx, dy, dC, dgamma, exact, open_begin, open_end, pen, e_mov, dpen, want_dy,
                    want_dgamma):
    """Rows [r0, r1) of the backward of sum_b grad[b] * value[b], bottom-up.

    R_rows[b, i - first] holds row i of R in natural units (state dtype; float64 for float32
    data, see the module docstring) for i in [r0 - 1, r1): the table (r0 = first = 0, r1 = N,
    one call) or a band that forward_kernel recomputed (first = r0 - 1; calls for bands from the
    bottom up). Between calls, the row below r0 travels in the carry arrays, zero-filled by the
    caller before the first call (or all four `(0, ...)`-shaped for a single call over all rows:
    the state then stays inside); their layout depends on the plan (by_pair, lanes), fixed for
    the calls of one backward:

    - carry `(units, 6, M + 2, lanes)` (groups) or `(units, 6, 1, M + 2)` (by pair): E, the
      diagonal and the up weights (2 buffers each) of the rows below and being done, position
      j + 1 = column j;
    - carry_i `(units, 5)` int64: the written position ranges of the two E buffers, and which
      of each pair of buffers holds the row below;
    - carry_y `(units, M, D, lanes)` or `(units, 1, D, M)`: the partial sums of dy;
    - e_ent `(B,)` float64: the partial sums of <E, entropy> for dgamma.

    The call with r0 == 0 writes dy and dgamma. Fused costs write dx `(B, N, D)` and dy
    `(B, M, D)`; COST_GIVEN writes dC `(B, N, M)`. All three must be zero-filled by the caller
    (padded steps and cells are not written). dgamma `(B,)`. by_pair: one pair at a time,
    vectorised along each row (small batches), else groups of ``lanes`` pairs. exact: take each
    cell's weights from its predecessors alone (_cell_weights_exact), for R' too large for
    S' = R' - C' (cpu.py decides from a bound on R').

    Alignment variants as in forward_kernel (open_begin, open_end, pen). dpen `(B,)`: grad_b d value_b /
    d pen, written when it is not empty (`(0,)`: no penalty gradient wanted); e_mov `(B,)` float64 carries
    its partial sums between calls like e_ent (`(0,)` for a single call).

    want_dy, want_dgamma: False skips the work of dy (fused costs; dy stays zero) or of dgamma (the
    per-cell entropies; dgamma is written as 0): the gradients nobody asked for (cpu.py's ``needs``).
    """
    B = x_lengths.shape[0]
    if cost_kind == COST_GIVEN:
        N, M = C.shape[1], C.shape[2]
    else:
        N, M = x.shape[1], y.shape[1]
    if by_pair:
        for b in prange(B):
            _backward_pair(b, x, y, C, cost_kind, M, gamma, x_lengths, y_lengths, window,
                           has_window, r0, r1, first, grad, values, R_rows, carry, carry_i,
                           carry_y, e_ent, dx, dy, dC, dgamma, exact, open_begin, open_end, pen,
                           e_mov, dpen, want_dy, want_dgamma)
        return
    groups = (B + lanes - 1) // lanes
    for g in prange(groups):
        _backward_group(g, lanes, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                        has_window, r0, r1, first, grad, values, R_rows, carry, carry_i, carry_y,
                        e_ent, dx, dy, dC, dgamma, exact, open_begin, open_end, pen, e_mov, dpen, want_dy,
                        want_dgamma)


# ---------------------------------------------------------------------------------------------
# One pair at a time (small batches): the forward in strips of rows, the backward along rows.
# ---------------------------------------------------------------------------------------------
#
# With fewer pairs than SIMD lanes times threads, lanes across pairs sit empty. The forward then
# processes a strip of H consecutive rows of one pair as a wavefront: at step t, lane k computes
# row i0 + k, column t - k. Its left neighbour is its own value from step t - 1, its upper and
# diagonal neighbours are lane k - 1's values from steps t - 1 and t - 2, and lane 0 reads the
# last row of the strip above. The lanes are independent within a step, so the vector loop is
# the same as across pairs. The backward's exponentials depend on R only, so it runs row by row
# with every loop along the row vectorised, except the short multiply-add recurrence of E.


_BLOCK = 64  # steps (columns) per block of the strided cT / out accesses of _forward_pair


@njit(**_JIT)
def _pair_bounds(b, i, x_lengths, y_lengths, window, has_window):
    """Columns [lo, hi) of row i of pair b ((0, 0) past its length)."""
    if i < 0 or i >= x_lengths[b]:
        return 0, 0
    if has_window:
        return window[b, i, 0], window[b, i, 1]
    return 0, y_lengths[b]


@njit(**_JIT)
def _transpose_y(y, b, yT):
    """yT[d, j] = y[b, j, d]: columns contiguous along j for the row-vectorised loops."""
    for j in range(y.shape[1]):
        for d in range(y.shape[2]):
            yT[d, j] = y[b, j, d]


@njit(**_JIT)
def _pair_cost_row(b, i, lo, hi, x, yT, C, cost_kind, crow):
    """crow[j] = cost of (row i, column j) of pair b for j in [lo, hi)."""
    n = hi - lo
    out = crow[lo:hi]
    if cost_kind == COST_GIVEN:
        src = C[b, i, lo:hi]
        for q in range(n):
            out[q] = src[q]
        return
    out[:] = 0
    for d in range(yT.shape[0]):
        xd = x[b, i, d]
        yd = yT[d, lo:hi]
        if cost_kind == COST_L1:
            for q in range(n):
                out[q] += abs(xd - yd[q])
        else:
            for q in range(n):
                t = xd - yd[q]
                out[q] += t * t


@njit(**_JIT)
def _forward_pair(b, H, x, y, C, cost_kind, N, M, gamma, x_lengths, y_lengths, window,
                  has_window, r0, r1, R_top, top_slot, every, first, natural, R_out, values, narrow,
                  open_begin, open_end, pen):
    """Forward of rows [r0, r1) of pair b in strips of H rows (wavefront across the strip; see the
    section note); the arguments as in forward_kernel."""
    dt = values.dtype
    st = R_out.dtype
    big, hard, inv, out_scale = _state_constants(gamma, st.type(0.0))
    scale = out_scale if natural else st.type(1.0)
    n_slots = R_out.shape[1]
    pen_s = st.type(pen) * inv
    zero_s = st.type(0.0)
    n, m = x_lengths[b], y_lengths[b]
    last = np.full(m if open_end else 0, big, st)  # open end: the pair's last row
    # Rows past the pair's length (empty strips) are cheap, and give saved rows the sentinel.
    r_end = min(r1, N if every > 0 else n)
    D = x.shape[2]
    fused = cost_kind != COST_GIVEN
    yT = np.empty((D, M if fused else 0), dt)
    if fused:
        _transpose_y(y, b, yT)
    crow = np.zeros(M, dt)
    cT = np.zeros((M + H, H), dt)  # cT[t, k]: cost of lane k at step t (column t - k)
    # top[p] = R[i0 - 1, p - 1]; positions past M stay at the sentinel.
    top = np.full(M + H + 1, big, st)
    if top_slot < 0:
        top[0] = 0  # R[-1, -1]
    else:  # start below a checkpoint (log2 units, as the forward had it)
        src = R_top[b, top_slot]
        for q in range(M):
            top[q + 1] = src[q]
    bottom = np.full(M + H + 1, big, st)
    p1 = np.empty(H + 1, st)  # lane k's value at step t - 1 in p1[k + 1]; p1[0]: top row's
    p2 = np.empty(H + 1, st)  # the same at step t - 2
    p0 = np.empty(H + 1, st)  # the step being computed
    lo = np.zeros(H, np.int64)
    hi = np.zeros(H, np.int64)
    out = np.empty((M + H, H) if every > 0 else (0, H), st)  # out[t, k]: R' of lane k at step t
    slot = np.empty(H, np.int64)  # where the strip's rows are saved (-1: not saved)
    wlo = np.zeros(H, np.int64)  # the columns [wlo, whi) of each saved row that get written
    whi = np.zeros(H, np.int64)

    for i0 in range(r0, r_end, H):
        t_start, t_end = M + H, 0
        for k in range(H):
            lo[k], hi[k] = 0, 0
            if i0 + k < r_end:
                lo[k], hi[k] = _pair_bounds(b, i0 + k, x_lengths, y_lengths, window, has_window)
            if lo[k] < hi[k]:
                t_start = min(t_start, lo[k] + k)
                t_end = max(t_end, hi[k] + k)
        p1[:] = big
        p2[:] = big
        bottom[:] = big
        open_top = open_begin and i0 == 0 and top_slot < 0  # row 0's diagonal predecessors are 0
        k_end = n - 1 - i0 if (i0 <= n - 1 < min(i0 + H, r1)) else -1
        for t in range(t_start, t_end):
            if (t - t_start) % _BLOCK == 0:
                # The costs of the next _BLOCK steps: written one lane (cache line) apart, so
                # by blocks that stay in L1 (a whole strip's, (M + H) x H, leaves L2 at M ~ 16k).
                t1 = min(t + _BLOCK, t_end)
                for k in range(H):
                    c0, c1 = max(lo[k], t - k), min(hi[k], t1 - k)
                    if c0 < c1:
                        _pair_cost_row(b, i0 + k, c0, c1, x, yT, C, cost_kind, crow)
                        src = crow[c0:c1]
                        dst = cT[c0 + k:c1 + k, k]
                        for q in range(c1 - c0):
                            dst[q] = src[q]
            p1[0] = top[t + 1]
            p2[0] = zero_s if open_top else top[t]
            if hard:
                for k in range(H):
                    r = min(cT[t, k] + min(p2[k], min(p1[k], p1[k + 1]) + pen_s), big)
                    p0[k + 1] = r if ((t - k >= lo[k]) & (t - k < hi[k])) else big
            else:
                for k in range(H):
                    c = cT[t, k]
                    r = min(c * inv + softmin3(p2[k], p1[k] + pen_s, p1[k + 1] + pen_s, c), big)
                    p0[k + 1] = r if ((t - k >= lo[k]) & (t - k < hi[k])) else big
            if t >= H - 1:
                bottom[t - H + 2] = p0[H]  # row i0 + H - 1, column t - H + 1
            if every > 0:
                for k in range(H):
                    out[t, k] = p0[k + 1]
            if open_end:
                if k_end >= 0 and 0 <= t - k_end < m:
                    last[t - k_end] = p0[k_end + 1]
            elif k_end >= 0 and t == m - 1 + k_end:
                values[b] = _end_value(p0[n - i0], out_scale, big)
            p2, p1, p0 = p1, p0, p2
        if open_end and k_end >= 0:
            values[b] = _end_value(_row_softmin(last, hard, big), out_scale, big)
        # Saved rows, by blocks of columns: the strided reads of out stay in L1.
        qa, qb = M, 0
        for k in range(H):
            slot[k] = _slot(i0 + k, first, every, n_slots) if i0 + k < r_end else -1
            if slot[k] < 0:
                continue
            wlo[k], whi[k] = 0, M
            if narrow:
                # A by-pair backward reads row i at columns [lo - 1, hi) of row i, and (as the row above
                # row i + 1) at those of row i + 1.
                l, h = lo[k], hi[k]
                ln, hn = _pair_bounds(b, i0 + k + 1, x_lengths, y_lengths, window, has_window)
                if ln < hn:
                    if l < h:
                        l, h = min(l, ln), max(h, hn)
                    else:
                        l, h = ln, hn
                wlo[k], whi[k] = max(l - 1, 0), min(h, M)
            qa, qb = min(qa, wlo[k]), max(qb, whi[k])
        for q0 in range(qa, qb, _BLOCK):
            q1 = min(q0 + _BLOCK, qb)
            for k in range(H):
                s = slot[k]
                c0, c1 = max(q0, wlo[k]), min(q1, whi[k])
                if s >= 0 and c0 < c1:
                    src = out[c0 + k:c1 + k, k]
                    dst = R_out[b, s, c0:c1]
                    for q in range(c1 - c0):
                        inside = (c0 + q >= lo[k]) & (c0 + q < hi[k])
                        dst[q] = src[q] * scale if inside else big
        # The strip's last row is the next strip's top row (column -1: the sentinel).
        top, bottom = bottom, top
        top[0] = big
        # cT keeps this strip's costs: cells outside a lane's range only ever meet the mask, and
        # are finite (zeros at first, then costs), so they need no clearing.


@njit(**_JIT)
def _pair_load_R_row(b, i, first, lo, hi, R_rows, inv, big, out):
    """out[j + 1] = R[b, i, j] in log2 units for j in [lo - 1, hi), read from
    R_rows[b, i - first] (natural units); row -1 is the border."""
    start = max(lo - 1, 0)
    if i < 0:
        out[start:hi + 1] = big
        out[0] = 0  # R[-1, -1] = 0
        return
    src = R_rows[b, i - first, start:hi]
    dst = out[start + 1:hi + 1]
    for q in range(hi - start):
        v = src[q]
        dst[q] = big if v >= big else v * inv
    if lo == 0:
        out[0] = big


@njit(**_JIT)
def _backward_pair(b, x, y, C, cost_kind, M, gamma, x_lengths, y_lengths, window, has_window,
                   r0, r1, first, grad, values, R_rows, carry, carry_i, carry_y, e_ent, dx, dy,
                   dC, dgamma, exact, open_begin, open_end, pen, e_mov, dpen, want_dy, want_dgamma):
    """Rows [r0, r1) of the backward of pair b, one row at a time (the lanes version's steps,
    vectorised along j); the arguments as in backward_kernel."""
    dt = values.dtype
    st = R_rows.dtype
    big, hard, inv, _ = _state_constants(gamma, st.type(0.0))
    pen_s = st.type(pen) * inv
    want_pen = dpen.shape[0] > 0
    zero, one = dt.type(0.0), dt.type(1.0)
    tiny = exp2_neg(flush_exponent(zero))
    n, m = x_lengths[b], y_lengths[b]
    zdiag = np.zeros(M + 2 if open_begin else 0, st)  # row 0's diagonal predecessors (open begin)
    seed = np.zeros(m if open_end else 0, dt)
    D = x.shape[2]
    fused = cost_kind != COST_GIVEN
    factor = dt.type(2.0) if cost_kind == COST_SQEUCLIDEAN else one
    gb = grad[b]
    # State handed between calls (see backward_kernel), or kept here for a one-call backward.
    handed = carry.shape[0] > 0
    m_sum = 0.0
    if handed:
        cb, ci, dyT, e_sum = carry[b], carry_i[b], carry_y[b, 0], e_ent[b]
        if want_pen:
            m_sum = e_mov[b]
    else:
        cb = np.zeros((6, 1, M + 2), dt)
        ci = np.zeros(5, np.int64)
        dyT = np.zeros((D, M if fused else 0), dt)
        e_sum = 0.0
    # dyT: the sum over the rows done so far of -E (x_i - y_j), `(D, M)`.
    yT = np.empty((D, M if fused else 0), dt)
    if fused:
        _transpose_y(y, b, yT)
    crow = np.zeros(M + 2, dt)
    rup = np.full(M + 2, big, st)
    rcur = np.full(M + 2, big, st)
    # Positions j + 1 hold column j, as in the lanes version; rows i and i + 1 in cb, as there.
    p = ci[4]
    e_next, e_cur = cb[p, 0], cb[1 - p, 0]
    wd_next, wd_cur = cb[2 + p, 0], cb[3 - p, 0]
    wu_next, wu_cur = cb[4 + p, 0], cb[5 - p, 0]
    wl_cur, wl_next = np.zeros(M + 2, dt), np.zeros(M + 2, dt)
    ent = np.zeros(M + 2, dt)
    acc = np.zeros(M + 2, dt)
    next_lo, next_hi, cur_lo, cur_hi = ci[0], ci[1], ci[2], ci[3]

    r_end = min(r1, n)
    for i in range(r_end - 1, r0 - 1, -1):
        lo, hi = _pair_bounds(b, i, x_lengths, y_lengths, window, has_window)
        w = hi - lo
        if not (exact or hard):  # only the fast weights take the costs
            _pair_cost_row(b, i, lo, hi, x, yT, C, cost_kind, crow)
        _pair_load_R_row(b, i, first, lo, hi, R_rows, inv, big, rcur)
        _pair_load_R_row(b, i - 1, first, lo, hi, R_rows, inv, big, rup)
        # Views of row i's columns [lo, hi): "_l" = column j - 1, "_r" = column j + 1.
        c_v = crow[lo:hi]
        r_v, r_l = rcur[lo + 1:hi + 1], rcur[lo:hi]
        u_v, u_l = rup[lo + 1:hi + 1], rup[lo:hi]
        if open_begin and i == 0:
            u_l = zdiag[lo:hi]
        wd_v, wu_v, wl_v = wd_cur[lo + 1:hi + 1], wu_cur[lo + 1:hi + 1], wl_cur[lo + 1:hi + 1]
        ent_v = ent[lo + 1:hi + 1]
        if hard:
            for q in range(w):
                wd_v[q], wu_v[q], wl_v[q] = _cell_weights_hard(u_l[q], u_v[q] + pen_s, r_l[q] + pen_s, zero)
        elif exact:
            for q in range(w):
                wd_v[q], wu_v[q], wl_v[q], ent_v[q] = _cell_weights_exact(
                    u_l[q], u_v[q] + pen_s, r_l[q] + pen_s, zero)
        else:
            for q in range(w):
                wd_v[q], wu_v[q], wl_v[q], ent_v[q] = _cell_weights_soft(
                    r_v[q], c_v[q], inv, u_l[q], u_v[q] + pen_s, r_l[q] + pen_s)
        # E[i, j] = (E[i+1, j+1] wd + E[i+1, j] wu) + E[i, j+1] wl: the bracket is vectorised, the
        # last term is a recurrence along the row.
        e_cur[cur_lo:cur_hi] = 0
        cur_lo, cur_hi = lo + 1, hi + 1
        acc_v = acc[lo:hi]
        en_r, wdn_r = e_next[lo + 2:hi + 2], wd_next[lo + 2:hi + 2]
        en_v, wun_v = e_next[lo + 1:hi + 1], wu_next[lo + 1:hi + 1]
        for q in range(w):
            acc_v[q] = en_r[q] * wdn_r[q] + en_v[q] * wun_v[q]
        if i == n - 1:
            if open_end:
                e_sum += _end_seed(rcur[1:m + 1], hard, big, seed)
                for q in range(m):
                    acc[q] += seed[q]
            else:
                acc[m - 1] += one
        e = zero
        for j in range(hi - 1, lo - 1, -1):
            e = acc[j] + e * wl_cur[j + 2]
            e = e if e >= tiny else zero
            e_cur[j + 1] = e
        e_v = e_cur[lo + 1:hi + 1]
        if want_dgamma:
            for q in range(w):
                e_sum += e_v[q] * ent_v[q]
        if want_pen:
            for q in range(w):
                m_sum += e_v[q] * (wu_v[q] + wl_v[q])
        if fused:
            for d in range(D):
                xd = x[b, i, d]
                y_v, dy_v = yT[d, lo:hi], dyT[d, lo:hi]
                total = zero
                if cost_kind == COST_L1:
                    for q in range(w):
                        g = e_v[q] * np.sign(xd - y_v[q])
                        total += g
                        if want_dy:
                            dy_v[q] -= g
                elif want_dy:
                    for q in range(w):
                        e = e_v[q]
                        g = e * (xd - y_v[q])
                        g = g if e > 0 else zero  # never 0 * inf (a difference past the dtype's range)
                        total += g
                        dy_v[q] -= g
                else:
                    for q in range(w):
                        e = e_v[q]
                        g = e * (xd - y_v[q])
                        total += g if e > 0 else zero
                dx[b, i, d] = factor * gb * total
        else:
            dC_v = dC[b, i, lo:hi]
            for q in range(w):
                dC_v[q] = gb * e_v[q]
        e_cur, e_next = e_next, e_cur
        cur_lo, cur_hi, next_lo, next_hi = next_lo, next_hi, cur_lo, cur_hi
        wd_cur, wd_next = wd_next, wd_cur
        wu_cur, wu_next = wu_next, wu_cur
        wl_cur, wl_next = wl_next, wl_cur
    if handed:
        ci[0], ci[1], ci[2], ci[3] = next_lo, next_hi, cur_lo, cur_hi
        ci[4] = (p + max(r_end - r0, 0)) % 2  # one swap per row
        e_ent[b] = e_sum
        if want_pen:
            e_mov[b] = m_sum
    if r0 > 0:
        return
    if want_pen:
        dpen[b] = gb * m_sum
    if fused:
        for j in range(M):
            for d in range(D):
                dy[b, j, d] = factor * gb * dyT[d, j]
    dgamma[b] = 0 if (hard or not want_dgamma) else gb * LN2 * e_sum
