"""Global constraints (Sakoe–Chiba band, Itakura parallelogram) as per-row column ranges.

Every backend receives a window as an int32 tensor `(B, N, 2)`: row i of pair b may use columns
[lo, hi). Both constraints are built from each pair's *own* lengths with tslearn's definitions
(``tslearn.metrics.sakoe_chiba_mask`` / ``itakura_mask``), so a pair of unequal lengths always keeps
the band's shape instead of becoming infinite. Ranges are monotone in i, which is what makes the
path-existence check below exact.
"""
from __future__ import annotations

import math

import torch


def _sakoe_chiba_rows(n: torch.Tensor, m: torch.Tensor, rows: torch.Tensor, radius: float, longest: int):
    """Column range [lo, hi) of each row for tslearn's Sakoe–Chiba mask of an (n, m) pair.

    n, m: `(B, 1)` int64; rows: `(1, N)` int64; radius: float >= 0; longest: a bound on n and m
    (the padded N + M: no device read). tslearn widens the band by
    |n - m| on the side that lets the longer series catch up, which keeps a path for any lengths.
    A fractional radius is used as tslearn uses it: its mask slices with the float bounds
    i - radius and i + width (truncated), so the band reaches ceil(radius) steps on one side and
    floor(radius) on the other (for m >= n a row reaches ceil(radius) columns left of its band
    and floor(radius) right of it; for n > m the other way round). A radius past both lengths is no band at all (and is clamped, so
    that 1e30 never reaches integer arithmetic).
    """
    r = min(float(radius), float(longest))
    r_lo, r_hi = math.ceil(r), math.floor(r)
    wide = m >= n
    lo = torch.where(wide, rows - r_lo, rows - (n - m) - r_hi).clamp_min(0)
    hi = torch.where(wide, rows + (m - n) + r_hi, rows + r_lo)
    hi = torch.minimum(hi, m - 1) + 1
    return lo, hi


def _itakura_columns(n: torch.Tensor, m: torch.Tensor, M: int, max_slope: float):
    """Row range [lo, hi) of each column for tslearn's Itakura mask, `(B, M)` each (float64 maths).

    Mirrors tslearn (including its rounding to 2 decimals, which absorbs float noise at integer
    crossings) so masks agree exactly.
    """
    nf, mf = n.double(), m.double()
    cols = torch.arange(M, device=n.device, dtype=torch.float64).unsqueeze(0)
    max_s = max_slope * nf / mf
    min_s = (1.0 / max_slope) * nf / mf
    lower = torch.maximum(
        torch.round(min_s * cols, decimals=2),
        torch.round((nf - 1) - max_s * (mf - 1) + max_s * cols, decimals=2),
    ).ceil()
    upper = torch.floor(
        torch.minimum(
            torch.round(max_s * cols, decimals=2),
            torch.round((nf - 1) - min_s * (mf - 1) + min_s * cols, decimals=2),
        )
        + 1
    )
    lo = lower.clamp(0, None).long()
    hi = torch.minimum(upper.long(), n)
    # Columns past this pair's length never admit a row.
    pad = cols.long() >= m
    big = torch.iinfo(torch.int64).max // 4
    return lo.masked_fill(pad, big), hi.masked_fill(pad, big)


def build_window(
    x_lengths: torch.Tensor,
    y_lengths: torch.Tensor,
    N: int,
    M: int,
    bandwidth: float | None,
    itakura_max_slope: float | None,
) -> torch.Tensor | None:
    """Per-row column ranges `(B, N, 2)` int32 for the requested constraints, or None if none.

    x_lengths, y_lengths: int64 `(B,)` on the data's device; N, M: padded lengths of x and y. Rows past a pair's length get (0, 0).
    Both constraints may be given; the window is then their intersection.
    """
    if bandwidth is None and itakura_max_slope is None:
        return None
    n = x_lengths.long().unsqueeze(1)
    m = y_lengths.long().unsqueeze(1)
    rows = torch.arange(N, device=n.device, dtype=torch.int64).unsqueeze(0)
    lo = torch.zeros_like(rows).expand(n.shape[0], N)
    hi = m.expand(n.shape[0], N)
    if bandwidth is not None:
        s_lo, s_hi = _sakoe_chiba_rows(n, m, rows, bandwidth, N + M)
        lo, hi = torch.maximum(lo, s_lo), torch.minimum(hi, s_hi)
    if itakura_max_slope is not None:
        c_lo, c_hi = _itakura_columns(n, m, M, float(itakura_max_slope))
        # Row i uses the columns j with c_lo[j] <= i < c_hi[j]; both bounds are nondecreasing in j,
        # so that set is the interval [#{j: c_hi[j] <= i}, #{j: c_lo[j] <= i}).
        r = rows.expand(n.shape[0], N).contiguous()
        i_lo = torch.searchsorted(c_hi.contiguous(), r, right=True)
        i_hi = torch.searchsorted(c_lo.contiguous(), r, right=True)
        lo, hi = torch.maximum(lo, i_lo), torch.minimum(hi, i_hi)
    live = rows < n
    lo = torch.where(live, lo, 0)
    hi = torch.where(live, torch.maximum(hi, lo), 0)
    return torch.stack([lo, hi], dim=-1).to(torch.int32).contiguous()


def window_has_path(window: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> torch.Tensor:
    """`(B,)` bool: does the window leave a warping path from (0, 0) to (n_b - 1, m_b - 1)?

    With monotone row ranges a path exists iff every live row is non-empty, row 0 starts at
    column 0, the last row ends at column m_b, and each row starts no later than one past the
    previous row's last column (a diagonal or vertical step reaches it; the rest of the row is
    reached by horizontal steps).
    """
    lo = window[..., 0].long()
    hi = window[..., 1].long()
    n = x_lengths.long()
    m = y_lengths.long()
    N = window.shape[1]
    rows = torch.arange(N, device=window.device).unsqueeze(0)
    live = rows < n.unsqueeze(1)
    nonempty = torch.where(live, lo < hi, True).all(dim=1)
    starts = lo[:, 0] == 0
    last = hi.gather(1, (n - 1).clamp_min(0).unsqueeze(1)).squeeze(1) == m
    linked = torch.ones_like(starts)
    if N > 1:
        linked = torch.where(live[:, 1:], lo[:, 1:] <= hi[:, :-1], True).all(dim=1)
    return nonempty & starts & last & linked


def valid_cells(
    x_lengths: torch.Tensor, y_lengths: torch.Tensor, window: torch.Tensor | None, N: int, M: int
) -> torch.Tensor:
    """`(B, N, M)` bool mask of the cells each pair may use (lengths and window)."""
    rows = torch.arange(N, device=x_lengths.device).view(1, N, 1)
    cols = torch.arange(M, device=x_lengths.device).view(1, 1, M)
    mask = (rows < x_lengths.view(-1, 1, 1)) & (cols < y_lengths.view(-1, 1, 1))
    if window is not None:
        lo = window[..., 0:1].long()
        hi = window[..., 1:2].long()
        mask &= (cols >= lo) & (cols < hi)
    return mask
