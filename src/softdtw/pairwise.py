r"""All-pairs soft-DTW matrices, chunked to a memory budget, with a progress bar.

Each chunk gathers a batch of (X[i], Y[j]) pairs and makes one batched :func:`softdtw.soft_dtw`
call, so the matrix runs at the speed of the batched kernels on the CPU and the GPU alike.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple, Union

import numpy as np
import torch

from ._checks import (as_lengths, check_length_range, check_not_transformed, check_values, nan_padding,
                      ragged_hint, values_checked)
from .functional import soft_dtw

__all__ = ["pairwise_soft_dtw", "as_series_set", "as_padded_set", "as_set_lengths"]

_NAMED_SYMMETRIC_COSTS = ("sqeuclidean", "l1", "cosine")


def as_series_set(X, name: str = "X") -> torch.Tensor:
    """A set of series as a `(P, T, D)` float tensor (NumPy accepted; `(P, T)` means D = 1)."""
    if isinstance(X, np.ndarray):
        X = torch.from_numpy(X)
    if not isinstance(X, torch.Tensor):
        hint = ragged_hint(X, name, "y_lengths" if name == "Y" else "x_lengths")
        if hint:
            raise TypeError(hint)
        raise TypeError(
            f"{name} must be a torch.Tensor (or NumPy array) of shape (P, T, D) or (P, T); got "
            f"{type(X).__name__}. Wrap it with torch.as_tensor({name}, dtype=torch.float32)."
        )
    if not X.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor; got dtype {X.dtype}. Convert it with {name}.float()."
        )
    if X.dim() == 2:
        X = X.unsqueeze(-1)
    if X.dim() != 3:
        raise ValueError(
            f"{name} must be a set of series of shape (P, T, D) (or (P, T) for univariate series); got "
            f"{name}.shape={tuple(X.shape)}. For a single series (T, D) use {name}.unsqueeze(0)."
        )
    if 0 in X.shape:
        raise ValueError(f"{name} is empty: {name}.shape={tuple(X.shape)}; it needs at least one series of "
                         f"at least one step and one feature.")
    return X


def as_padded_set(X, name: str, lengths, lengths_name: str):
    """:func:`as_series_set`, then NaN padding read as lengths (trailing all-NaN steps end a series,
    as in tslearn's ``to_time_series_dataset``). Returns ``(X, lengths)``: the lengths given, or
    those read from the padding, or None."""
    return nan_padding(as_series_set(X, name), name, lengths, lengths_name)


def as_set_lengths(lengths, name: str, P: int, T: int) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
    """Lengths of a set as a CPU int64 `(P,)` tensor (all T when None), validated against [1, T].

    Returns (the user's lengths or None, the lengths to use).
    """
    if lengths is None:
        return None, torch.full((P,), T, dtype=torch.int64)
    cpu = as_lengths(lengths, name, P, T, torch.device("cpu"), "each series")
    check_length_range(cpu, name, T, "each series")
    return cpu, cpu


def _default_budget(device: torch.device) -> int:
    if device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except RuntimeError:  # pragma: no cover - very old drivers
            free = 4 << 30
        return int(min(4 << 30, 0.25 * free))
    return 256 << 20


def _batch_size(device, N, M, D, itemsize, fused, needs_grad, budget, total_pairs) -> int:
    per_pair = itemsize * (N + M) * D * 2 + 64
    if not fused:
        per_pair += itemsize * N * M * 2  # the cost matrix (and a cast of it)
    if needs_grad:
        per_pair += 4 * N * M + itemsize * (N + M) * D * 2  # backward table + gradient buffers
    b = max(1, budget // per_pair)
    cap = 65536 if device.type == "cuda" else 16384
    b = min(b, cap)
    # Enough chunks for a progress bar that moves; large batches keep the kernels busy.
    floor = 4096
    b = min(b, max(floor, math.ceil(total_pairs / 50)))
    return int(max(1, min(b, total_pairs)))


def _chunk_pairs(start: int, stop: int, P: int, Q: int, triangle: bool, row_offsets: Optional[torch.Tensor],
                 device=None):
    """Row and column indices (int64, on ``device``, default the CPU) of the flat pairs [start, stop)."""
    k = torch.arange(start, stop, dtype=torch.int64, device=device)
    if not triangle:
        return k // Q, k % Q
    i = torch.searchsorted(row_offsets, k, right=True) - 1
    j = i + (k - row_offsets[i])
    return i, j


def pairwise_soft_dtw(X, Y=None, gamma: Union[float, torch.Tensor] = 1.0, *, divergence: bool = False,
                      x_lengths=None, y_lengths=None, bandwidth: Optional[float] = None,
                      itakura_max_slope: Optional[float] = None, cost="sqeuclidean",
                      batch_size: Optional[int] = None, memory_budget: Optional[int] = None,
                      memory: str = "auto", progress: bool = True, backend: Optional[str] = None,
                      distributed: bool = False) -> torch.Tensor:
    r"""Soft-DTW between every series of X and every series of Y: a `(P, Q)` matrix.

    .. math:: K_{pq} = \mathrm{sdtw}_\gamma(X_p, Y_q)
        \quad\text{or, with divergence=True,}\quad
        \mathrm{sdtw}_\gamma(X_p, Y_q) - \tfrac12\mathrm{sdtw}_\gamma(X_p, X_p) - \tfrac12\mathrm{sdtw}_\gamma(Y_q, Y_q)

    The pairs are processed in chunks, each one batched :func:`softdtw.soft_dtw` call, so the memory
    stays within ``memory_budget`` whatever P and Q. With ``Y=None`` and a symmetric setting (named
    cost, no Itakura slope, no fractional band radius) only the upper triangle is computed and mirrored.
    Each chunk is trimmed to the longest series it contains, so sets of very unequal lengths do not pay
    for their padding.

    Args:
        X: `(P, N, D)` float tensor (or NumPy array; `(P, N)` is read as univariate series).
        Y: `(Q, M, D)` float tensor on the same device, or None for Y = X.
        gamma: smoothing >= 0 as in :func:`softdtw.soft_dtw`; 0.0 gives the hard-DTW matrix.
        divergence: if True, the soft-DTW divergence (>= 0, zero on identical series); the
            self-terms are computed once per series (P + Q extra programs), not once per pair.
        x_lengths: `(P,)` int valid lengths of the series of X (default: all N, or read from NaN
            padding: trailing all-NaN steps end a series, as tslearn's ``to_time_series_dataset`` pads).
        y_lengths: `(Q,)` int valid lengths of the series of Y (default: all M, or read from NaN
            padding; with Y=None, x_lengths).
        bandwidth, itakura_max_slope, cost, memory, backend: as :func:`softdtw.soft_dtw`.
        batch_size: pairs per chunk (default: the largest that fits ``memory_budget``).
        memory_budget: bytes a chunk may use (default 256 MiB on the CPU, a quarter of the free GPU
            memory up to 4 GiB on CUDA).
        progress: show a tqdm progress bar (on stderr) for jobs of more than a few chunks;
            tiny jobs never show one. False turns it off.
        distributed: inside an initialised torch.distributed group, each rank computes an equal share
            of the pairs and the matrix is all-gathered, so every rank returns the whole `(P, Q)`
            matrix (NCCL with X on each rank's GPU, gloo with CPU tensors). Every rank must pass the
            same X, Y and options. Values only: call it under ``torch.no_grad()``.

    Returns:
        `(P, Q)` tensor, dtype of X, on X's device. Differentiable in X and Y when they require grad
        (the graph of every chunk is kept, so prefer ``torch.no_grad()`` for large matrices).
        Raw soft-DTW values can be negative; the divergence is >= 0 up to rounding.

    Devices: CPU, CUDA.

    Example:
        >>> import torch
        >>> from softdtw.pairwise import pairwise_soft_dtw
        >>> _ = torch.manual_seed(0)
        >>> X = torch.randn(5, 20, 2)
        >>> K = pairwise_soft_dtw(X, gamma=0.1, divergence=True)
        >>> K.shape, bool(K.diagonal().abs().max() < 1e-4)
        (torch.Size([5, 5]), True)
    """
    check_not_transformed(X, Y, gamma)
    X, x_lengths = as_padded_set(X, "X", x_lengths, "x_lengths")
    symmetric_input = Y is None
    if symmetric_input:
        if y_lengths is not None:
            raise ValueError("y_lengths was given but Y is None (Y = X uses x_lengths); pass Y too or drop y_lengths.")
        Y = X
    else:
        Y, y_lengths = as_padded_set(Y, "Y", y_lengths, "y_lengths")
    if X.shape[-1] != Y.shape[-1]:
        raise ValueError(
            f"X and Y must have the same feature size D; got X.shape={tuple(X.shape)}, Y.shape={tuple(Y.shape)}. "
            f"Project or slice one so the last dimensions match."
        )
    if X.device != Y.device:
        raise ValueError(f"X and Y must be on the same device; got {X.device} and {Y.device}. Move one with .to().")
    if X.dtype != Y.dtype:
        raise TypeError(f"X and Y must have the same dtype; got {X.dtype} and {Y.dtype}. Cast one, e.g. Y.to(X.dtype).")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                   or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer (pairs per chunk) or None; got {batch_size!r}.")
    if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Real)
                                      or memory_budget <= 0):
        raise ValueError(f"memory_budget must be a positive number of bytes or None; got {memory_budget!r}.")

    P, N, D = X.shape
    Q, M = Y.shape[0], Y.shape[1]
    _, xl = as_set_lengths(x_lengths, "x_lengths", P, N)
    yl = xl if symmetric_input else as_set_lengths(y_lengths, "y_lengths", Q, M)[1]
    device = X.device

    # Symmetric settings only: a fractional Sakoe-Chiba radius is tslearn's band, ceil(r) steps on one side of the
    # diagonal and floor(r) on the other for pairs of equal length, so sdtw(X_p, X_q) != sdtw(X_q, X_p) there.
    triangle = symmetric_input and isinstance(cost, str) and cost in _NAMED_SYMMETRIC_COSTS \
        and itakura_max_slope is None \
        and (bandwidth is None or (isinstance(bandwidth, numbers.Real) and float(bandwidth).is_integer()))
    gamma_grad = isinstance(gamma, torch.Tensor) and gamma.requires_grad
    needs_grad = torch.is_grad_enabled() and (X.requires_grad or Y.requires_grad or gamma_grad)
    total = P * (P + 1) // 2 if triangle else P * Q
    # Full-length sets need no per-chunk length lookups, so the chunk indices live on the device and
    # the loop below never waits on the GPU; with lengths, chunks are trimmed using CPU indices.
    uniform = x_lengths is None and (symmetric_input or y_lengths is None)
    index_device = device if uniform else torch.device("cpu")
    rows = torch.arange(P, dtype=torch.int64, device=index_device)
    row_offsets = (torch.cumsum(P - rows, 0) - (P - rows)) if triangle else None  # first flat index per row
    fused = isinstance(cost, str) and cost in ("sqeuclidean", "l1")
    budget = int(memory_budget) if memory_budget is not None else _default_budget(device)
    B = int(batch_size) if batch_size is not None else _batch_size(
        device, N, M, D, X.element_size(), fused, needs_grad, budget, total)

    rank, world = _group(distributed, needs_grad)
    kwargs = dict(cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, memory=memory,
                  backend=backend)
    xl_dev, yl_dev = xl.to(device), yl.to(device)

    def run(A, al, al_dev, Bset, bl, bl_dev, i, j):
        i_dev, j_dev = i.to(device), j.to(device)
        if uniform:
            return soft_dtw(A.index_select(0, i_dev), Bset.index_select(0, j_dev), gamma, **kwargs)
        n, m = int(al[i].max()), int(bl[j].max())
        xa = A.index_select(0, i_dev)[:, :n]
        yb = Bset.index_select(0, j_dev)[:, :m]
        return soft_dtw(xa, yb, gamma, x_lengths=al_dev.index_select(0, i_dev),
                        y_lengths=bl_dev.index_select(0, j_dev), **kwargs)

    # This rank's share of the flat pair indices (all of them without distribution).
    lo, hi = total * rank // world, total * (rank + 1) // world
    n_chunks = math.ceil((hi - lo) / B)
    cells = float((xl.double().mean() * yl.double().mean()).item()) * (hi - lo)
    show = bool(progress) and n_chunks > 2 and cells >= 5e7 and rank == 0
    out = torch.empty(P, Q, dtype=X.dtype, device=device)
    local = torch.empty(hi - lo, dtype=X.dtype, device=device) if world > 1 else None
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=hi - lo, desc="pairwise DTW" if _is_zero(gamma) else "pairwise soft-DTW", unit="pair",
                   leave=False, dynamic_ncols=True)
    check_values([(X, "X"), (Y, "Y")], [], None)  # once for the whole sets, not once per chunk
    try:
        for start in range(lo, hi, B):
            stop = min(start + B, hi)
            i, j = _chunk_pairs(start, stop, P, Q, triangle, row_offsets, index_device)
            with values_checked():
                v = run(X, xl, xl_dev, Y, yl, yl_dev, i, j).to(X.dtype)
            if local is not None:
                local[start - lo:stop - lo] = v
            else:
                _scatter(out, v, i, j, triangle)
            if bar is not None:
                bar.update(len(i))
    finally:
        if bar is not None:
            bar.close()
    if local is not None:
        _all_gather_pairs(out, local, total, world, B, P, Q, triangle, row_offsets, index_device)

    if divergence:
        if symmetric_input:
            sx = out.diagonal().clone()
            sy = sx
        else:  # P + Q programs against P * Q: every rank computes them itself rather than gathering
            with values_checked():
                sx = _self_terms(run, X, xl, xl_dev, B)
                sy = _self_terms(run, Y, yl, yl_dev, B)
        # With Y = X the diagonal is a - a/2 - a/2 = 0 exactly (the self-terms are the diagonal).
        out = out - 0.5 * sx.unsqueeze(1) - 0.5 * sy.unsqueeze(0)
    return out


def _group(distributed: bool, needs_grad: bool) -> Tuple[int, int]:
    """(rank, world size) of the pair split: (0, 1) unless distributed."""
    if not distributed:
        return 0, 1
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "pairwise_soft_dtw(distributed=True) needs an initialised torch.distributed process group; call "
            "torch.distributed.init_process_group('nccl' for GPUs or 'gloo' for CPUs) on every rank first, "
            "or pass distributed=False."
        )
    if needs_grad:
        raise ValueError(
            "pairwise_soft_dtw(distributed=True) computes values only (the all-gather is not differentiable); "
            "call it under torch.no_grad() or with inputs that do not require grad."
        )
    return dist.get_rank(), dist.get_world_size()


def _scatter(out: torch.Tensor, v: torch.Tensor, i: torch.Tensor, j: torch.Tensor, triangle: bool) -> None:
    i_dev, j_dev = i.to(out.device), j.to(out.device)
    out[i_dev, j_dev] = v
    if triangle:
        out[j_dev, i_dev] = v


def _all_gather_pairs(out, local, total, world, B, P, Q, triangle, row_offsets, index_device) -> None:
    """Gather every rank's flat block of values and scatter them into ``out`` (on every rank)."""
    import torch.distributed as dist

    width = -(-total // world)  # ceil: the largest block
    send = torch.zeros(width, dtype=local.dtype, device=local.device)
    send[:local.numel()] = local
    blocks = [torch.empty_like(send) for _ in range(world)]
    dist.all_gather(blocks, send)
    step = max(B, 1 << 22)  # in chunks, so the index tensors stay small
    for r, block in enumerate(blocks):
        lo, hi = total * r // world, total * (r + 1) // world
        for start in range(lo, hi, step):
            stop = min(start + step, hi)
            i, j = _chunk_pairs(start, stop, P, Q, triangle, row_offsets, index_device)
            _scatter(out, block[start - lo:stop - lo], i, j, triangle)


def _is_zero(gamma) -> bool:
    g = gamma.detach() if isinstance(gamma, torch.Tensor) else gamma
    try:
        return float(g) == 0.0
    except (TypeError, ValueError):
        return False


def _self_terms(run, A, al, al_dev, B) -> torch.Tensor:
    """sdtw(A[p], A[p]) for every series p, in chunks of B."""
    P = A.shape[0]
    parts = []
    for start in range(0, P, B):
        idx = torch.arange(start, min(start + B, P), dtype=torch.int64)
        parts.append(run(A, al, al_dev, A, al, al_dev, idx, idx).to(A.dtype))
    return torch.cat(parts)
