"""Reference backend: plain PyTorch, written to be obviously right. The oracle of every other backend.

Any float dtype and any device. The forward is an anti-diagonal loop of ordinary differentiable
torch ops, so calling :func:`forward` / :func:`forward_cost` directly on tensors that require grad
gives gradients by autograd. Behind the custom ops (where autograd cannot run inside an op), the
analytic backward (Cuturi & Blondel 2017, Algorithm 2) in :func:`_alignment` is used instead; the
tests check the two against each other.

Numerics, kept simple on purpose:

- The DP runs in float64 for every data dtype where the device has float64 (all but MPS), and the
  results are cast back: a float32 table loses ulp(|R|) per cell, and the backward's weights
  exp(-(R_p - S) / gamma) then carry ulp(|R|) / gamma relative error (d/dgamma was 52.6 instead of
  ~0 at gamma = 1e-3 on float32 data). Natural units (no 1 / gamma scaling), so costs up to the
  dtype's largest value are fine.
- +inf is +inf: borders and cells outside a pair's lengths or window hold +inf, and so does a cell
  whose cost is +inf (a forbidden cell: no path may use it). The soft-min of three +inf is +inf,
  never inf - inf. A pair with no finite path, or whose exact value overflows the data dtype, gets
  the value +inf and a zero gradient (its alignment matrix E is all zeros).
- The backward takes each cell's soft-min weights from the table R alone: w_p = exp(-(R_p - S_s) /
  gamma) with S_s the soft-min of the cell's predecessors (never R_s - C_s, which cancels when the
  cost dwarfs the soft-min), and d value / d gamma = sum_s E_s sum_p w_p log w_p, a sum of terms of
  one sign (never (value - <E, C>) / gamma, which cancels at small gamma).

Alignment variants (keyword-only options of the four DP functions; issue 25)
-------------------------------------------------------------------------
``open_begin``, ``open_end`` and ``step_penalty`` are defined over warping paths, each path counted
once: with open_begin a path may start at any (0, j0), with open_end end at any (n-1, j1), and the
step penalty p is added once for each vertical (i-1, j) -> (i, j) and each horizontal (i, j-1) ->
(i, j) move (never for a diagonal one). The value is the soft-min over that set of paths of
<A, C> + p · moves(A) (the min for gamma = 0). The recursion that counts each path once:

- rows i >= 1: R[i, j] = C[i, j] + smin(R[i-1, j-1], R[i-1, j] + p, R[i, j-1] + p);
- row 0, closed begin: R[0, 0] = C[0, 0], R[0, j] = C[0, j] + R[0, j-1] + p (the usual border
  R[-1, -1] = 0, others +inf);
- row 0, open begin: R[0, j] = C[0, j] + smin(0, R[0, j-1] + p): start here, or come from the left.
  A virtual row of zeros R[-1, j] = 0 used as both the diagonal and the vertical predecessor would
  give smin(0, 0, R[0, j-1] + p) = smin(-gamma log 2, R[0, j-1] + p): each start counted twice in the
  soft case (right only for gamma = 0). Row 0's vertical predecessor stays +inf and its diagonal one
  is 0;
- closed end: value = R[n-1, m-1]; open end: value = smin_{j < m} R[n-1, j] over the pair's columns.

E = d value / dC follows by the same reverse recursion, with the last row seeded by the end's
soft-min weights w_j = exp(-(R[n-1, j] - value) / gamma) (one-hot on the first argmin for gamma = 0)
instead of a 1 at (n-1, m-1); d value / d gamma adds the end soft-min's own sum_j w_j log w_j; and
d value / d p = sum_s E_s (w_up(s) + w_left(s)), the expected number of non-diagonal moves. Bands
(``window``) with an open end are refused (ValueError): a band is drawn between the pair's corners,
which an open end removes. Step penalties work with bands.

Slow: O(N + M) Python steps of O(B·N) work each, and O(B·N·M) memory. Use it for checking, not for
training.
"""
from __future__ import annotations

import torch

from .. import costs
from .._windows import valid_cells

_INF = float("inf")

#: hvp_cost takes the alignment variants (read by softdtw._ops: a backend without it refuses their second order).
HVP_VARIANTS = True


def work_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the DP runs in: float64, except on devices without float64 (MPS), which keep ``dtype``
    (float32 for half-precision data)."""
    if device.type == "mps":
        return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return torch.float64


def _softmin3(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """smin_gamma(a, b, c) = -gamma log sum exp(-a_k / gamma), shifted by the min (no positive exponent).

    +inf entries count for nothing, and three +inf give +inf. gamma == 0 gives the hard min;
    torch.min over (a, b, c) returns the first minimum, so ties go to the diagonal, then up, then
    left, as in the backward. No inf - inf and no 0 * inf is formed, in the value or in its
    autograd graph.
    """
    return _softmin_stack(torch.stack([a, b, c]), gamma)


def _softmin_stack(stacked: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """smin_gamma over dim 0 of ``stacked``, with :func:`_softmin3`'s +inf rules."""
    low = stacked.min(dim=0).values
    if float(gamma.detach()) == 0.0:
        return low
    reachable = torch.isfinite(low)
    shift = torch.where(reachable, low, torch.zeros_like(low))
    diff = stacked - shift
    alive = torch.isfinite(diff)
    terms = torch.where(alive, torch.exp(-torch.where(alive, diff, torch.zeros_like(diff)) / gamma),
                        torch.zeros_like(diff))
    z = torch.where(reachable, terms.sum(dim=0), torch.ones_like(low))
    return torch.where(reachable, shift - gamma * torch.log(z), low)


def _skew_index(N: int, M: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """For anti-diagonal d and row i: column j = d - i, clamped, and whether it is inside [0, M)."""
    d = torch.arange(N + M - 1, device=device).unsqueeze(1)
    i = torch.arange(N, device=device).unsqueeze(0)
    j = d - i
    return j.clamp(0, M - 1), (j >= 0) & (j < M)


def _to_diagonals(T: torch.Tensor) -> torch.Tensor:
    """`(B, N, M)` -> `(B, N + M - 1, N)`: element [b, d, i] is T[b, i, d - i] (garbage off range)."""
    B, N, M = T.shape
    jc, _ = _skew_index(N, M, T.device)
    return T.gather(2, jc.t().unsqueeze(0).expand(B, N, N + M - 1)).transpose(1, 2)


def _from_diagonals(Td: torch.Tensor, M: int) -> torch.Tensor:
    """Inverse of :func:`_to_diagonals`: `(B, N + M - 1, N)` -> `(B, N, M)`."""
    B, _, N = Td.shape
    d = torch.arange(N, device=Td.device).view(N, 1) + torch.arange(M, device=Td.device).view(1, M)
    return Td.transpose(1, 2).gather(2, d.unsqueeze(0).expand(B, N, M))


def _table(C: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor, ends=None, *,
           open_begin: bool = False, penalty: torch.Tensor | None = None) -> torch.Tensor:
    """The accumulated table R `(B, N, M)` in C's dtype; invalid cells hold +inf. Differentiable
    (in C, gamma and ``penalty``).

    ends: (x_lengths, y_lengths) to keep only each pair's end value R[n-1, m-1] `(B,)` (memory O(B·N)
    besides C instead of a table). open_begin: row 0's diagonal predecessor is 0 at every column (its
    vertical one stays +inf; see the module docstring). penalty: 0-d tensor added to the vertical and
    horizontal predecessors.
    """
    B, N, M = C.shape
    _, inside = _skew_index(N, M, C.device)
    Cd = _to_diagonals(torch.where(valid, C, torch.zeros_like(C)))
    Vd = _to_diagonals(valid) & inside.unsqueeze(0)
    wall = C.new_full((B, 1), _INF)
    prev2 = None  # diagonal d - 2
    prev1 = C.new_full((B, N), _INF)  # diagonal d - 1 (d = -1: all border)
    diagonals = []
    if ends is not None:
        end_d = ends[0] + ends[1] - 2
        end_i = (ends[0] - 1).unsqueeze(1)
        value = C.new_full((B,), _INF)
    for d in range(N + M - 1):
        up = torch.cat([wall, prev1[:, :-1]], dim=1)  # R[i-1, j]
        left = prev1  # R[i, j-1] (j - 1 < 0 is off the diagonal, so +inf)
        if d == 0 or open_begin:  # R[-1, -1] = 0; open begin: R[-1, j - 1] = 0 as a diagonal only
            corner = torch.cat([torch.zeros_like(wall), (prev1 if d == 0 else prev2)[:, :-1]], dim=1)
        else:
            corner = torch.cat([wall, prev2[:, :-1]], dim=1)  # R[i-1, j-1]
        if penalty is not None:
            up, left = up + penalty, left + penalty
        r = Cd[:, d] + _softmin3(corner, up, left, gamma)
        r = torch.where(Vd[:, d], r, torch.full_like(r, _INF))
        if ends is None:
            diagonals.append(r)
        else:
            value = torch.where(end_d == d, r.gather(1, end_i).squeeze(1), value)
        prev2, prev1 = prev1, r
    if ends is not None:
        return value
    return _from_diagonals(torch.stack(diagonals, dim=1), M)


def _end_values(R: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> torch.Tensor:
    b = torch.arange(R.shape[0], device=R.device)
    return R[b, x_lengths - 1, y_lengths - 1]


def _predecessors(R: torch.Tensor, *, open_begin: bool = False, penalty: torch.Tensor | None = None):
    """(R[i-1, j-1], R[i-1, j], R[i, j-1]) of every cell, `(B, N, M)` each, with the borders (+inf,
    and R[-1, -1] = 0; open_begin: row 0's diagonal predecessor is 0 everywhere, its vertical one
    +inf). penalty: added to the vertical and horizontal predecessors."""
    B, N, M = R.shape
    Rp = R.new_full((B, N + 1, M + 1), _INF)
    Rp[:, 1:, 1:] = R
    Rp[:, 0, 0] = 0.0
    diag, up, left = Rp[:, :-1, :-1], Rp[:, :-1, 1:], Rp[:, 1:, :-1]
    if open_begin:
        diag = diag.clone()
        diag[:, 0, :] = 0.0
    if penalty is not None:
        up, left = up + penalty, left + penalty
    return diag, up, left


def _cell_weights(R: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor, *, open_begin: bool = False,
                  penalty: torch.Tensor | None = None):
    """Each cell's weights of its three predecessors (diag, up, left) in its soft-min, and its
    entropy sum_p w_p log w_p (the soft-min's derivative in gamma), `(B, N, M)` each.

    Zero for invalid cells and cells without a finite predecessor. gamma == 0: one-hot weights of
    the argmin (ties: diagonal, then up, then left), entropy 0. open_begin, penalty: as in
    :func:`_predecessors`.
    """
    w_diag, w_up, w_left, _, entropy = _cell_weights_log(R, gamma, valid, open_begin=open_begin, penalty=penalty)
    return w_diag, w_up, w_left, entropy


def _cell_weights_log(R: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor, *, open_begin: bool = False,
                      penalty: torch.Tensor | None = None):
    """As :func:`_cell_weights`, with the weights' logarithms `(3, B, N, M)` too (finite: 0 where the
    weight is 0, and never computed as log of an underflowed weight), for the second order."""
    preds = _predecessors(R, open_begin=open_begin, penalty=penalty)
    stacked = torch.stack(preds)  # (3, B, N, M)
    low = stacked.min(dim=0).values
    live = valid & torch.isfinite(low)
    if float(gamma.detach()) == 0.0:
        d, u, l = preds
        is_d = (d <= u) & (d <= l)
        is_u = ~is_d & (u <= l)
        is_l = ~is_d & ~is_u
        w = torch.stack([is_d, is_u, is_l]).to(R.dtype) * live
        return w[0], w[1], w[2], torch.zeros_like(w), torch.zeros_like(R)
    shift = torch.where(live, low, torch.zeros_like(low))
    gap = stacked - shift  # >= 0; +inf for a border or an unreachable predecessor
    alive = torch.isfinite(gap) & live
    gap = torch.where(alive, gap, torch.zeros_like(gap))
    terms = torch.where(alive, torch.exp(-gap / gamma), torch.zeros_like(gap))
    z = torch.where(live, terms.sum(dim=0), torch.ones_like(low))  # in [1, 3]
    w = terms / z
    log_w = torch.where(alive, -gap / gamma - torch.log(z), torch.zeros_like(gap))
    entropy = (w * log_w).sum(dim=0)
    return w[0], w[1], w[2], log_w, entropy


def _end_weights(R: torch.Tensor, gamma: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor):
    """Open end: (value `(B,)`, weights `(B, M)`, entropy `(B,)`) of smin_{j < m} R[n-1, j].

    Differentiable in R (the value). The weights sum to 1 over the pair's columns (0 elsewhere, and all
    0 when no end cell is finite); gamma == 0: one-hot on the first argmin, entropy 0.
    """
    value, w, _, entropy = _end_weights_log(R, gamma, x_lengths, y_lengths)
    return value, w, entropy


def _end_weights_log(R: torch.Tensor, gamma: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor):
    """As :func:`_end_weights`, with the weights' logarithms `(B, M)` too (0 where the weight is 0)."""
    B, N, M = R.shape
    b = torch.arange(B, device=R.device)
    row = R[b, x_lengths - 1]  # (B, M)
    cols = torch.arange(M, device=R.device).unsqueeze(0)
    row = torch.where(cols < y_lengths.unsqueeze(1), row, torch.full_like(row, _INF))
    value = _softmin_stack(row.t(), gamma)
    rd = row.detach()
    low = rd.min(dim=1, keepdim=True).values
    live = torch.isfinite(low)
    if float(gamma.detach()) == 0.0:
        first = rd.argmin(dim=1, keepdim=True)
        w = torch.zeros_like(rd).scatter_(1, first, 1.0) * live
        return value, w, torch.zeros_like(w), torch.zeros_like(value)
    gap = rd - torch.where(live, low, torch.zeros_like(low))
    alive = torch.isfinite(gap) & live
    gap = torch.where(alive, gap, torch.zeros_like(gap))
    terms = torch.where(alive, torch.exp(-gap / gamma), torch.zeros_like(gap))
    z = torch.where(live, terms.sum(dim=1, keepdim=True), torch.ones_like(low))
    w = terms / z
    log_w = torch.where(alive, -gap / gamma - torch.log(z), torch.zeros_like(gap))
    return value, w, log_w, (w * log_w).sum(dim=1)


def _alignment(
    R: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor, x_lengths: torch.Tensor,
    y_lengths: torch.Tensor, *, open_begin: bool = False, open_end: bool = False,
    penalty: torch.Tensor | None = None,
):
    """(E = dR[n-1, m-1] / dC `(B, N, M)`, d value / d gamma `(B,)`) by the reverse recursion, and
    d value / d penalty `(B,)` as a third output when ``penalty`` is given.

    E[p] = sum over successors s of E[s] * w(p -> s), where w is p's weight inside s's soft-min,
    and d value / d gamma = sum_s E[s] sum_p w_p log w_p. Pairs whose value is +inf get E = 0.
    Variants (module docstring): open_begin changes row 0's weights, open_end seeds the last row with
    the end soft-min's weights (and adds its entropy to d value / d gamma), and d value / d penalty =
    sum_s E[s] (w_up(s) + w_left(s)).
    """
    B, N, M = R.shape
    R = R.detach()
    pen = None if penalty is None else penalty.detach().to(R.dtype)
    w_diag, w_up, w_left, entropy = _cell_weights(R, gamma.detach(), valid, open_begin=open_begin, penalty=pen)
    _, inside = _skew_index(N, M, R.device)
    on = _to_diagonals(valid) & inside.unsqueeze(0)

    def diagonals(t):  # garbage off the table's range is zeroed
        td = _to_diagonals(t)
        return torch.where(on, td, torch.zeros_like(td))

    Wd, Wu, Wl = diagonals(w_diag), diagonals(w_up), diagonals(w_left)
    rows = torch.arange(N, device=R.device).unsqueeze(0)
    end_d = (x_lengths + y_lengths - 2).unsqueeze(1)
    end_i = (x_lengths - 1).unsqueeze(1)
    if open_end:
        _, w_end, end_entropy = _end_weights(R, gamma.detach(), x_lengths, y_lengths)
        seed = R.new_zeros(B, N, M)
        seed[torch.arange(B, device=R.device), x_lengths - 1] = w_end
        seed_d = diagonals(seed)
    else:
        finite = torch.isfinite(_end_values(R, x_lengths, y_lengths)).unsqueeze(1)
    zero_col = R.new_zeros(B, 1)

    def below(t):  # t[:, i + 1]: the same diagonal's entry one row down
        return torch.cat([t[:, 1:], zero_col], dim=1)

    E_next2 = R.new_zeros(B, N)  # diagonal d + 2
    E_next1 = R.new_zeros(B, N)  # diagonal d + 1
    out = []
    for d in range(N + M - 2, -1, -1):
        # Successors of (i, j): (i+1, j+1) on d+2 (row i+1), (i+1, j) on d+1 (row i+1), (i, j+1) on d+1 (row i).
        if open_end:
            e = seed_d[:, d]
        else:
            e = ((end_d == d) & (rows == end_i) & finite).to(R.dtype)
        if d + 2 <= N + M - 2:
            e = e + below(E_next2 * Wd[:, d + 2])
        if d + 1 <= N + M - 2:
            e = e + below(E_next1 * Wu[:, d + 1]) + E_next1 * Wl[:, d + 1]
        e = torch.where(on[:, d], e, torch.zeros_like(e))
        out.append(e)
        E_next2, E_next1 = E_next1, e
    E = _from_diagonals(torch.stack(out[::-1], dim=1), M)
    dgamma = (E * entropy).sum(dim=(1, 2))
    if open_end:
        dgamma = dgamma + end_entropy
    if penalty is None:
        return E, dgamma
    return E, dgamma, (E * (w_up + w_left)).sum(dim=(1, 2))


def check_variant(window, open_begin: bool, open_end: bool) -> None:
    """Refuse a band (window) with an open end: ValueError naming the option."""
    if window is not None and (open_begin or open_end):
        name = "open_begin" if open_begin else "open_end"
        raise ValueError(
            f"{name}=True cannot be combined with a band (bandwidth / window): a band is drawn between the "
            f"pair's corners, which an open end removes. Drop the band, or set {name}=False.")


def _predecessors_dot(T: torch.Tensor):
    """(T[i-1, j-1], T[i-1, j], T[i, j-1]) of every cell with 0 on the borders (derivative tables:
    the virtual start R[-1, -1] = 0 is a constant)."""
    B, N, M = T.shape
    Tp = T.new_zeros((B, N + 1, M + 1))
    Tp[:, 1:, 1:] = T
    return Tp[:, :-1, :-1], Tp[:, :-1, 1:], Tp[:, 1:, :-1]


def _second_order(R, gamma, valid, x_lengths, y_lengths, Cdot, gamma_dot, *, open_begin=False, open_end=False,
                  penalty=None, penalty_dot=None):
    """(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot) of a float64 table R (see :func:`hvp_cost`), gamma > 0;
    vpen and vpen_dot are None without a penalty. penalty: `(B, 1, 1)` (or 0-d), penalty_dot `(B,)`.

    Pass 1, along the anti-diagonals: Rdot_s = Cdot_s + sum_p w_{p->s} (Rdot_p + adot_{p->s}) + gamma_dot H_s,
    with adot = penalty_dot on the vertical and horizontal in-edges (0 on the diagonal one; the start, a
    constant, has Rdot 0, with or without an open begin). Then for every cell at once:
    wdot_{p->s} = w_{p->s} (-(Rdot_p + adot_{p->s} - Sdot_s) - gamma_dot log w_{p->s}) / gamma with
    Sdot_s = Rdot_s - Cdot_s, Hdot_s = sum_p wdot_{p->s} log w_{p->s}. An open end is one more node T (cost 0)
    whose predecessors are the last row's cells: Rdot_T = sum_j w_j Rdot[n-1, j] + gamma_dot H_T, and its
    wdot_j seed Edot on the last row as its w_j seed E.
    Pass 2, from the end back: Edot_p = sum_s (Edot_s w_{p->s} + E_s wdot_{p->s}), Edot_T = 0.
    vpen = sum_s E_s (w_up + w_left), vpen_dot = sum_s Edot_s (w_up + w_left) + E_s (wdot_up + wdot_left).
    """
    B, N, M = R.shape
    w_diag, w_up, w_left, log_w, entropy = _cell_weights_log(R, gamma, valid, open_begin=open_begin,
                                                              penalty=penalty)
    first = _alignment(R, gamma, valid, x_lengths, y_lengths, open_begin=open_begin, open_end=open_end,
                       penalty=penalty)
    E, vgamma = first[0], first[1]
    _, inside = _skew_index(N, M, R.device)
    on = _to_diagonals(valid) & inside.unsqueeze(0)
    reach = torch.isfinite(R)

    def diagonals(t):  # garbage off the table's range is zeroed
        td = _to_diagonals(t)
        return torch.where(on, td, torch.zeros_like(td))

    gdot = gamma_dot.view(B, 1)
    pdot = None if penalty_dot is None else penalty_dot.view(B, 1)
    Wd, Wu, Wl = diagonals(w_diag), diagonals(w_up), diagonals(w_left)
    Cd, Hd = diagonals(Cdot), diagonals(entropy)
    Fd = diagonals(reach)
    zero_col = R.new_zeros(B, 1)

    # Pass 1: Rdot. Same neighbours as _table: up = row i - 1 of diagonal d - 1, left = row i of d - 1,
    # corner = row i - 1 of d - 2; the borders (and the virtual start, open begin's too) contribute 0.
    prev2 = R.new_zeros(B, N)
    prev1 = R.new_zeros(B, N)
    rdots = []
    for d in range(N + M - 1):
        up = torch.cat([zero_col, prev1[:, :-1]], dim=1)
        corner = torch.cat([zero_col, prev2[:, :-1]], dim=1)
        r = Cd[:, d] + Wd[:, d] * corner + Wu[:, d] * up + Wl[:, d] * prev1 + gdot * Hd[:, d]
        if pdot is not None:
            r = r + (Wu[:, d] + Wl[:, d]) * pdot
        r = torch.where(Fd[:, d] > 0, r, torch.zeros_like(r))  # unreachable cells: no derivative
        rdots.append(r)
        prev2, prev1 = prev1, r
    Rdot = _from_diagonals(torch.stack(rdots, dim=1), M)
    Sdot = torch.where(reach & valid, Rdot - Cdot, torch.zeros_like(Rdot))
    w = torch.stack([w_diag, w_up, w_left])
    pred_dot = torch.stack(_predecessors_dot(Rdot))
    if pdot is not None:
        edge = torch.stack([torch.zeros_like(pdot), pdot, pdot]).view(3, B, 1, 1)
        pred_dot = pred_dot + edge
    wdot = w * (-(pred_dot - Sdot) - gamma_dot.view(1, B, 1, 1) * log_w) / gamma
    Hdot = (wdot * log_w).sum(dim=0)

    # The open end's node T: its weights over the last row, and their derivatives.
    if open_end:
        _, w_end, log_end, ent_end = _end_weights_log(R, gamma, x_lengths, y_lengths)
        bi = torch.arange(B, device=R.device)
        rdot_last = Rdot[bi, x_lengths - 1]  # (B, M); 0 off the pair's columns and on unreachable cells
        rdot_T = (w_end * rdot_last).sum(1, keepdim=True) + gdot * ent_end.view(B, 1)
        wdot_end = w_end * (-(rdot_last - rdot_T) - gdot * log_end) / gamma
        seed = R.new_zeros(B, N, M)
        seed[bi, x_lengths - 1] = wdot_end
        seed_d = diagonals(seed)

    # Pass 2: Edot, successors as in _alignment.
    Ed = _to_diagonals(E)
    Vd, Vu, Vl = diagonals(wdot[0]), diagonals(wdot[1]), diagonals(wdot[2])

    def below(t):  # t[:, i + 1]
        return torch.cat([t[:, 1:], zero_col], dim=1)

    next2 = R.new_zeros(B, N)  # Edot on diagonal d + 2
    next1 = R.new_zeros(B, N)  # and d + 1
    out = []
    for d in range(N + M - 2, -1, -1):
        e = seed_d[:, d] if open_end else R.new_zeros(B, N)
        if d + 2 <= N + M - 2:
            e = e + below(next2 * Wd[:, d + 2] + Ed[:, d + 2] * Vd[:, d + 2])
        if d + 1 <= N + M - 2:
            e = e + below(next1 * Wu[:, d + 1] + Ed[:, d + 1] * Vu[:, d + 1])
            e = e + next1 * Wl[:, d + 1] + Ed[:, d + 1] * Vl[:, d + 1]
        e = torch.where(on[:, d], e, torch.zeros_like(e))
        out.append(e)
        next2, next1 = next1, e
    Edot = _from_diagonals(torch.stack(out[::-1], dim=1), M)
    vgamma_dot = (Edot * entropy + E * Hdot).sum(dim=(1, 2))
    if open_end:
        vgamma_dot = vgamma_dot + (wdot_end * log_end).sum(1)
    if penalty is None:
        return E, vgamma, Edot, vgamma_dot, None, None
    moves = w_up + w_left
    vpen_dot = (Edot * moves + E * (wdot[1] + wdot[2])).sum(dim=(1, 2))
    return E, vgamma, Edot, vgamma_dot, first[2], vpen_dot


def _per_pair(t, B: int, dtype, what: str):
    """A 0-d or `(B,)` tensor as `(B,)` of ``dtype`` (detached); a ValueError naming ``what`` otherwise."""
    t = t.detach().to(dtype)
    if t.dim() == 0:
        return t.expand(B).clone()
    if t.shape != (B,):
        raise ValueError(f"{what} must be a 0-d tensor or one value per pair `(B,)` = ({B},); got shape "
                         f"{tuple(t.shape)}.")
    return t


def hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, *, open_begin=False, open_end=False,
             step_penalty=None, penalty_dot=None):
    """Second order of soft-DTW in a precomputed cost: (E, vgamma, Edot, vgamma_dot), and (vpen, vpen_dot)
    after them when ``step_penalty`` is not None.

    Per pair b with value v_b = R_b[n_b - 1, m_b - 1] (Mensch & Blondel 2018, the directional
    derivative of the DP):

    - E `(B, N, M)` = dv_b / dC_b (as :func:`backward_cost` with grad = 1), vgamma `(B,)` = dv_b / dgamma;
    - Edot `(B, N, M)` = the derivative of E along (Cdot, gamma_dot): H_CC Cdot + H_Cgamma gamma_dot;
    - vgamma_dot `(B,)` = H_gammaC Cdot + H_gammagamma gamma_dot.

    Cdot `(B, N, M)` (its values outside the lengths, the window and on +inf cells are read as 0) and
    gamma_dot `(B,)` are in C's dtype, and so are the outputs. gamma == 0: E is the hard path, the rest 0
    (the derivatives almost everywhere). A pair whose value is +inf gets zeros. The forward is recomputed
    from C (nothing saved is read); working memory: the float64 tables R and Rdot and the weights, a few
    `(B, N, M)` float64 tensors.

    Alignment variants (the module docstring; SECOND_ORDER.md, "Variants"): open_begin, open_end, and
    step_penalty (None, a 0-d tensor, or one penalty per pair `(B,)`). With a penalty p, the direction gains
    penalty_dot (None = 0, 0-d or `(B,)`), every derivative above is along (Cdot, gamma_dot, penalty_dot), and
    two outputs follow: vpen `(B,)` = dv_b / dp_b (the expected number of non-diagonal moves; at gamma == 0
    the hard path's) and vpen_dot `(B,)` = H_pC Cdot + H_pgamma gamma_dot + H_pp penalty_dot (0 at gamma == 0).
    """
    check_variant(window, open_begin, open_end)
    B = C.shape[0]
    Cw, valid = _prepare(C, x_lengths, y_lengths, window)
    g = gamma.detach().to(Cw.dtype)
    valid = valid & torch.isfinite(Cw)
    pen = pdot = None
    if step_penalty is not None:
        pen = _per_pair(step_penalty, B, Cw.dtype, "step_penalty")
        pdot = (torch.zeros_like(pen) if penalty_dot is None
                else _per_pair(penalty_dot, B, Cw.dtype, "penalty_dot"))
    pen3 = None if pen is None else pen.view(B, 1, 1)
    R = _table(Cw.detach(), g, valid, open_begin=open_begin, penalty=None if pen is None else pen.view(B, 1))
    value = _values(R, g, x_lengths, y_lengths, open_end)
    keep = torch.isfinite(value.to(C.dtype)).to(Cw.dtype)
    k3 = keep.view(-1, 1, 1)
    if float(g) == 0.0:
        first = _alignment(R, g, valid, x_lengths, y_lengths, open_begin=open_begin, open_end=open_end,
                           penalty=pen3)
        zeros = C.new_zeros(B)
        out = ((first[0] * k3).to(C.dtype), zeros, torch.zeros_like(C), zeros.clone())
        if pen is None:
            return out
        return out + ((first[2] * keep).to(C.dtype), zeros.clone())
    Cdot = torch.where(valid, Cdot.detach().to(Cw.dtype), torch.zeros_like(Cw))
    gdot = gamma_dot.detach().to(Cw.dtype)
    E, vgamma, Edot, vgamma_dot, vpen, vpen_dot = _second_order(
        R, g, valid, x_lengths, y_lengths, Cdot, gdot, open_begin=open_begin, open_end=open_end, penalty=pen3,
        penalty_dot=pdot)
    out = ((E * k3).to(C.dtype), (vgamma * keep).to(C.dtype), (Edot * k3).to(C.dtype),
           (vgamma_dot * keep).to(C.dtype))
    if pen is None:
        return out
    return out + ((vpen * keep).to(C.dtype), (vpen_dot * keep).to(C.dtype))


def saved_spec(kind, B, N, M, D, dtype, memory):
    """The reference saves the table R `(B, N, M)` in float64 (see :func:`work_dtype`; on MPS, in the
    data dtype)."""
    if memory == "none":
        return (0,), dtype
    return (B, N, M), torch.float64


def _prepare(C, x_lengths, y_lengths, window):
    B, N, M = C.shape
    return C.to(work_dtype(C.dtype, C.device)), valid_cells(x_lengths, y_lengths, window, N, M)


def _values(R, gamma, x_lengths, y_lengths, open_end):
    if open_end:
        return _end_weights(R, gamma, x_lengths, y_lengths)[0]
    return _end_values(R, x_lengths, y_lengths)


def forward_cost(C, gamma, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
                 step_penalty=None):
    """Values `(B,)` and the saved table R `(B, N, M)` float64 (empty for memory="none").

    open_begin, open_end, step_penalty (None or a 0-d tensor): the alignment variants of the module
    docstring; with an open end the table is built even for memory="none" (its last row is needed).
    """
    check_variant(window, open_begin, open_end)
    Cw, valid = _prepare(C, x_lengths, y_lengths, window)
    g = gamma.to(Cw.dtype)
    pen = None if step_penalty is None else step_penalty.to(Cw.dtype)
    if memory == "none" and not open_end:  # values only: no table
        value = _table(Cw, g, valid, (x_lengths, y_lengths), open_begin=open_begin, penalty=pen)
        return value.to(C.dtype), C.new_empty((0,))
    R = _table(Cw, g, valid, open_begin=open_begin, penalty=pen)
    value = _values(R, g, x_lengths, y_lengths, open_end).to(C.dtype)  # +inf where it overflows C's dtype
    return value, (C.new_empty((0,)) if memory == "none" else R)


def backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, *, open_begin=False,
                  open_end=False, step_penalty=None):
    """(dC `(B, N, M)` = grad_b E_b, dgamma `(B,)`), and dpenalty `(B,)` = grad_b d value_b / d p as a third
    output when ``step_penalty`` is not None (per pair: sum it for a shared penalty)."""
    check_variant(window, open_begin, open_end)
    Cw, valid = _prepare(C, x_lengths, y_lengths, window)
    g = gamma.detach().to(Cw.dtype)
    pen = None if step_penalty is None else step_penalty.detach().to(Cw.dtype)
    R = saved if saved.numel() else _table(Cw.detach(), g, valid, open_begin=open_begin, penalty=pen)
    out = _alignment(R, g, valid, x_lengths, y_lengths, open_begin=open_begin, open_end=open_end, penalty=pen)
    E, dgamma = out[0], out[1]
    # A pair whose value overflowed C's dtype (finite in float64) has no usable gradient either.
    keep = torch.isfinite(value).to(Cw.dtype)
    gw = grad.to(Cw.dtype) * keep
    result = ((gw.view(-1, 1, 1) * E).to(C.dtype), (gw * dgamma).to(C.dtype))
    if step_penalty is None:
        return result
    return result + ((gw * out[2]).to(C.dtype),)


def forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
            step_penalty=None):
    """Values `(B,)` of x `(B, N, D)`, y `(B, M, D)` under a fused cost; options as :func:`forward_cost`."""
    wd = work_dtype(x.dtype, x.device)
    C = costs.pairwise_cost(cost, x.to(wd), y.to(wd))
    value, saved = forward_cost(C, gamma, x_lengths, y_lengths, window, memory, open_begin=open_begin,
                                open_end=open_end, step_penalty=step_penalty)
    return value.to(x.dtype), saved


def backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, *, open_begin=False,
             open_end=False, step_penalty=None):
    """(dx, dy, dgamma), and dpenalty `(B,)` as a fourth output when ``step_penalty`` is not None."""
    wd = work_dtype(x.dtype, x.device)
    xw, yw = x.to(wd), y.to(wd)
    C = costs.pairwise_cost(cost, xw, yw)
    out = backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory,
                        open_begin=open_begin, open_end=open_end, step_penalty=step_penalty)
    dC, dgamma = out[0], out[1]
    # dC is zero on forbidden (+inf) cells, and so must be their share of the cost's VJP.
    dC = torch.where(torch.isfinite(C), dC, torch.zeros_like(dC))
    dx, dy = costs.cost_vjp(cost, xw, yw, dC)
    result = (dx.to(x.dtype), dy.to(y.dtype), dgamma.to(x.dtype))
    return result if step_penalty is None else result + (out[2].to(x.dtype),)
