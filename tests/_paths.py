"""Brute-force oracle: soft-DTW as the soft-min over an explicit list of warping paths.

For tiny pairs (n, m <= ~6) every warping path is enumerated, and the value is

    v(C, gamma) = -gamma log sum_A exp(-(<A, C> + penalty * moves(A)) / gamma)     (gamma > 0)
    v(C, 0)     = min_A <A, C> + penalty * moves(A)

with each path counted once. Everything after the enumeration is plain float64 autograd through a
logsumexp of finite numbers, so E = dv/dC, dv/dgamma, the Hessian and any directional derivative
come out exact (to rounding): this is the definition the DP backends are tested against, including
their second order (E-dot, the Hessian-vector product) and open-ended variants.

A path is a list of cells (i, j) with steps (1, 1), (1, 0) or (0, 1). The default set runs from (0, 0)
to (n - 1, m - 1); ``open_begin`` lets it start at any (0, j0), ``open_end`` end at any (n - 1, j1).
``allowed`` (an (n, m) bool array) removes paths through forbidden cells (a band, +inf costs).
"""
from __future__ import annotations

from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def _paths_from(i: int, j: int, n: int, m: int, open_end: bool, allowed: tuple) -> tuple:
    """Every path (a tuple of cells) from (i, j) to an end cell, through allowed cells only."""
    if not allowed[i][j]:
        return ()
    here = ((i, j),)
    out = []
    if i == n - 1 and (open_end or j == m - 1):
        out.append(here)
    for di, dj in ((1, 1), (1, 0), (0, 1)):
        a, b = i + di, j + dj
        if a < n and b < m:
            out.extend(here + rest for rest in _paths_from(a, b, n, m, open_end, allowed))
    return tuple(out)


def paths(n: int, m: int, allowed=None, open_begin: bool = False, open_end: bool = False) -> list:
    """All warping paths of an n x m pair (each once), as tuples of (i, j) cells."""
    if allowed is None:
        allowed = [[True] * m for _ in range(n)]
    key = tuple(tuple(bool(v) for v in row) for row in allowed)
    starts = range(m) if open_begin else (0,)
    out = []
    for j0 in starts:
        out.extend(_paths_from(0, j0, n, m, open_end, key))
    return out


def alignment_matrices(path_list: list, N: int, M: int, dtype=torch.float64) -> torch.Tensor:
    """`(P, N, M)`: A[p, i, j] = 1 where path p visits (i, j)."""
    A = torch.zeros(len(path_list), N, M, dtype=dtype)
    for p, path in enumerate(path_list):
        for i, j in path:
            A[p, i, j] = 1.0
    return A


def moves(path_list: list, dtype=torch.float64) -> torch.Tensor:
    """`(P,)`: how many vertical or horizontal (non-diagonal) steps each path takes."""
    out = []
    for path in path_list:
        out.append(sum(1 for (a, b), (c, d) in zip(path, path[1:]) if (c - a) + (d - b) == 1))
    return torch.tensor(out, dtype=dtype)


def soft_value(C: torch.Tensor, gamma, A: torch.Tensor, penalty=0.0, n_moves=None) -> torch.Tensor:
    """Soft-min over the paths A `(P, N, M)` of <A, C> (+ penalty * moves): a 0-d tensor.

    C `(N, M)` (any finite values on the paths' cells; other cells are not read), gamma a float or a
    0-d tensor (0 = hard min). Differentiable in C, gamma and penalty by autograd."""
    Cz = torch.where(A.sum(0) > 0, C, torch.zeros_like(C))  # cells no path visits (e.g. +inf) never read
    scores = (A * Cz).sum((1, 2))
    if n_moves is not None:
        scores = scores + penalty * n_moves
    gamma = torch.as_tensor(gamma, dtype=scores.dtype)
    if float(gamma.detach()) == 0.0:
        return scores.min()
    return -gamma * torch.logsumexp(-scores / gamma, dim=0)


def _leaves(C: torch.Tensor, gamma, allowed, open_begin: bool, open_end: bool):
    """(paths, their alignment matrices, C and gamma as float64 leaves that require grad) of one pair."""
    n, m = C.shape
    if allowed is None:
        allowed = torch.isfinite(C)
    ps = paths(n, m, allowed.tolist(), open_begin, open_end)
    Cg = C.detach().double().clone().requires_grad_()
    g = torch.tensor(float(gamma), dtype=torch.float64, requires_grad=True)
    return ps, alignment_matrices(ps, n, m), Cg, g


def oracle(C: torch.Tensor, gamma, allowed=None, open_begin=False, open_end=False, penalty=0.0):
    """(value, E, dvalue/dgamma) of one pair `(n, m)` by enumeration, float64."""
    ps, A, Cg, g = _leaves(C, gamma, allowed, open_begin, open_end)
    v = soft_value(Cg, g, A, penalty, moves(ps) if penalty else None)
    E, dg = torch.autograd.grad(v, (Cg, g), allow_unused=True)
    return v.detach(), E, (dg if dg is not None else torch.zeros((), dtype=torch.float64))


def directional(C: torch.Tensor, gamma, Cdot: torch.Tensor, gamma_dot: float = 0.0, allowed=None,
                open_begin=False, open_end=False):
    """(E-dot, dvalue/dgamma-dot): the derivative of (E, dv/dgamma) along (Cdot, gamma_dot), i.e. the
    Hessian of v(C, gamma) times the direction. One pair, float64, by double autograd."""
    _, A, Cg, g = _leaves(C, gamma, allowed, open_begin, open_end)
    v = soft_value(Cg, g, A)
    E, dg = torch.autograd.grad(v, (Cg, g), create_graph=True)
    Cdot = torch.where(A.sum(0) > 0, Cdot.double(), torch.zeros_like(Cdot, dtype=torch.float64))
    inner = (E * Cdot).sum() + dg * gamma_dot
    Edot, dgdot = torch.autograd.grad(inner, (Cg, g), allow_unused=True)
    zero = torch.zeros((), dtype=torch.float64)
    return (Edot if Edot is not None else torch.zeros_like(Cg)), (dgdot if dgdot is not None else zero)
