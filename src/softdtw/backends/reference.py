"""Reference backend: plain PyTorch, written to be obviously right. The oracle of every other backend.

Any float dtype and any device. The forward is an anti-diagonal loop of ordinary differentiable
torch ops, so calling :func:`forward` / :func:`forward_cost` directly on tensors that require grad
gives gradients by autograd. Behind the custom ops (where autograd cannot run inside an op), the
analytic backward (Cuturi & Blondel 2017, Algorithm 2) in :func:`_alignment` is used instead; the
tests check the two against each other.

Slow: O(N + M) Python steps of O(B·N) work each. Use it for checking, not for training.
"""
from __future__ import annotations

import torch

from .. import costs
from .._windows import valid_cells


def sentinel(dtype: torch.dtype) -> float:
    """A large finite stand-in for +inf: no inf - inf can appear, and exp(-(big - a)/gamma) == 0."""
    return 1e200 if dtype == torch.float64 else 1e30


def _softmin3(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """smin_gamma(a, b, c) = -gamma log sum exp(-a_k / gamma), shifted by the min (no positive exponent).

    gamma == 0 gives the hard min; torch.min over (a, b, c) returns the first minimum, so ties go to
    the diagonal, then up, then left, as in the backward.
    """
    stacked = torch.stack([a, b, c])
    if float(gamma.detach()) == 0.0:
        return stacked.min(dim=0).values
    low = stacked.min(dim=0).values
    return low - gamma * torch.log(torch.exp(-(stacked - low) / gamma).sum(dim=0))


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


def _table(C: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The accumulated table R `(B, N, M)`; invalid cells hold the sentinel. Differentiable."""
    B, N, M = C.shape
    big = sentinel(C.dtype)
    _, inside = _skew_index(N, M, C.device)
    Cd = _to_diagonals(torch.where(valid, C, torch.zeros_like(C)))
    Vd = _to_diagonals(valid) & inside.unsqueeze(0)
    wall = C.new_full((B, 1), big)
    prev2 = None  # diagonal d - 2
    prev1 = C.new_full((B, N), big)  # diagonal d - 1 (d = -1: all border)
    diagonals = []
    for d in range(N + M - 1):
        up = torch.cat([wall, prev1[:, :-1]], dim=1)  # R[i-1, j]
        left = prev1  # R[i, j-1] (j - 1 < 0 is off the diagonal, so the sentinel)
        if d == 0:
            corner = torch.cat([torch.zeros_like(wall), prev1[:, :-1]], dim=1)  # R[-1, -1] = 0
        else:
            corner = torch.cat([wall, prev2[:, :-1]], dim=1)  # R[i-1, j-1]
        r = Cd[:, d] + _softmin3(corner, up, left, gamma)
        r = torch.where(Vd[:, d], r, torch.full_like(r, big))
        diagonals.append(r)
        prev2, prev1 = prev1, r
    return _from_diagonals(torch.stack(diagonals, dim=1), M)


def _end_values(R: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> torch.Tensor:
    b = torch.arange(R.shape[0], device=R.device)
    return R[b, x_lengths - 1, y_lengths - 1]


def _alignment(
    R: torch.Tensor, C: torch.Tensor, gamma: torch.Tensor, valid: torch.Tensor,
    x_lengths: torch.Tensor, y_lengths: torch.Tensor,
) -> torch.Tensor:
    """E = dR[n-1, m-1] / dC `(B, N, M)` by the reverse recursion, in normalised-weights form.

    E[p] = sum over successors s of E[s] * w(p -> s), where w is p's weight inside s's soft-min:
    exp(-(R[p] - (R[s] - C[s])) / gamma) <= 1 (for gamma == 0: 1 for the argmin, else 0).
    """
    B, N, M = R.shape
    R = R.detach()
    C = torch.where(valid, C.detach(), torch.zeros_like(C))
    big = sentinel(R.dtype)
    hard = float(gamma.detach()) == 0.0
    _, inside = _skew_index(N, M, R.device)
    off = ~inside.unsqueeze(0)
    Rd = _to_diagonals(R).masked_fill(off, big)  # off-table positions are borders
    Sd = _to_diagonals(R - C).masked_fill(off, big)  # soft-min value of each cell
    Vd = _to_diagonals(valid) & inside.unsqueeze(0)
    rows = torch.arange(N, device=R.device).unsqueeze(0)
    end_d = (x_lengths + y_lengths - 2).unsqueeze(1)
    end_i = (x_lengths - 1).unsqueeze(1)
    wall = R.new_full((B, 1), big)

    def weight(p: torch.Tensor, s_min: torch.Tensor, s_valid: torch.Tensor, rank: int,
               others: list[torch.Tensor]) -> torch.Tensor:
        if hard:
            # p is s's chosen predecessor: the minimum, earlier candidates winning ties.
            chosen = torch.ones_like(s_valid)
            for k, o in enumerate(others):
                chosen &= (p < o) if k < rank else (p <= o)
            return (s_valid & chosen).to(R.dtype)
        arg = torch.where(s_valid, -(p - s_min) / gamma, torch.full_like(p, -torch.inf))
        return torch.exp(arg.clamp_max(0.0))

    E_next2 = R.new_zeros(B, N)  # diagonal d + 2
    E_next1 = R.new_zeros(B, N)  # diagonal d + 1
    out = []
    for d in range(N + M - 2, -1, -1):
        p = Rd[:, d]
        # Successor s = (i+1, j+1) on d+2 (row i+1), (i+1, j) on d+1 (row i+1), (i, j+1) on d+1 (row i).
        def shift(t, fill):  # t[:, i + 1]
            return torch.cat([t[:, 1:], fill], dim=1)

        has2, has1 = d + 2 <= N + M - 2, d + 1 <= N + M - 2
        zeros_b = torch.zeros_like(Vd[:, 0])
        s_diag_valid = shift(Vd[:, d + 2], zeros_b[:, :1]) if has2 else zeros_b
        s_down_valid = shift(Vd[:, d + 1], zeros_b[:, :1]) if has1 else zeros_b
        s_right_valid = Vd[:, d + 1] if has1 else zeros_b
        s_diag_min = shift(Sd[:, d + 2], wall) if has2 else p
        s_down_min = shift(Sd[:, d + 1], wall) if has1 else p
        s_right_min = Sd[:, d + 1] if has1 else p
        # The other predecessors of each successor, in priority order (diag, up, left), for hard ties.
        if hard:
            nxt = Rd[:, d + 1] if has1 else torch.full_like(p, big)
            prv = Rd[:, d - 1] if d >= 1 else torch.full_like(p, big)
            # s = (i+1, j+1): preds (i, j)=p [diag], (i, j+1) [up, d+1 row i], (i+1, j) [left, d+1 row i+1]
            w_diag = weight(p, None, s_diag_valid, 0, [nxt, shift(nxt, wall)])
            # s = (i+1, j): preds (i, j-1) [diag, d-1 row i], (i, j)=p [up], (i+1, j-1) [left, d row i+1]
            w_down = weight(p, None, s_down_valid, 1, [prv, shift(p, wall)])
            # s = (i, j+1): preds (i-1, j) [diag, d-1 row i-1], (i-1, j+1) [up, d row i-1], (i, j)=p [left]
            w_right = weight(p, None, s_right_valid, 2, [torch.cat([wall, prv[:, :-1]], dim=1),
                                                         torch.cat([wall, p[:, :-1]], dim=1)])
        else:
            w_diag = weight(p, s_diag_min, s_diag_valid, 0, [])
            w_down = weight(p, s_down_min, s_down_valid, 0, [])
            w_right = weight(p, s_right_min, s_right_valid, 0, [])
        e = shift(E_next2, zeros_b[:, :1].to(R.dtype)) * w_diag \
            + shift(E_next1, zeros_b[:, :1].to(R.dtype)) * w_down \
            + E_next1 * w_right
        e = e + ((end_d == d) & (rows == end_i)).to(R.dtype)
        e = torch.where(Vd[:, d], e, torch.zeros_like(e))
        out.append(e)
        E_next2, E_next1 = E_next1, e
    Ed = torch.stack(out[::-1], dim=1)
    return _from_diagonals(Ed, M)


def _dgamma(grad, value, E, C, gamma):
    if float(gamma.detach()) == 0.0:
        return torch.zeros_like(value)
    return grad * (value - (E * C).sum(dim=(1, 2))) / gamma


def saved_spec(kind, B, N, M, D, dtype, memory):
    """The reference saves the table R `(B, N, M)` in the data dtype."""
    if memory == "none":
        return (0,), dtype
    return (B, N, M), dtype


def forward_cost(C, gamma, x_lengths, y_lengths, window, memory):
    B, N, M = C.shape
    valid = valid_cells(x_lengths, y_lengths, window, N, M)
    R = _table(C, gamma, valid)
    value = _end_values(R, x_lengths, y_lengths)
    saved = R if memory != "none" else C.new_empty((0,))
    return value, saved


def backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory):
    B, N, M = C.shape
    valid = valid_cells(x_lengths, y_lengths, window, N, M)
    R = saved if saved.numel() else _table(C, gamma, valid)
    E = _alignment(R, C, gamma, valid, x_lengths, y_lengths)
    Cv = torch.where(valid, C, torch.zeros_like(C))
    return grad.view(-1, 1, 1) * E, _dgamma(grad, value, E, Cv, gamma)


def forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory):
    return forward_cost(costs.pairwise_cost(cost, x, y), gamma, x_lengths, y_lengths, window, memory)


def backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory):
    C = costs.pairwise_cost(cost, x, y)
    dC, dgamma = backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory)
    dx, dy = costs.cost_vjp(cost, x, y, dC)
    return dx, dy, dgamma
