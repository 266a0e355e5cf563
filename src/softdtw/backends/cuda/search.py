"""The cuda backend of :func:`softdtw.dtw_search` (kernels/search.cu): the subsequence DP along the series, then the
greedy pick of the k matches, both on the device.

- :func:`end_rows`: each query's last DP row, values and start columns `(Q, L)`. One block per tile of
  ``NT · CPT`` series steps; the blocks walk the query's rows together, each row a prefix scan along the series
  whose carry between tiles is found by a decoupled look-back (kernels/search.cu explains it). Rows run in bands
  of launches sized so that the look-back records stay under :data:`SLOT_BYTES`.
- :func:`select`: the k best non-overlapping matches from those rows (search.py's greedy rule), on the device:
  one pass for the best end of every chunk of :data:`SEL_CHUNK` ends, then one block per query for the k rounds,
  each re-scanning only the chunks its pick can touch.

Everything runs on torch's current stream; nothing synchronises with the host (the results stay on the device).
"""
from __future__ import annotations

import struct

import torch

from . import launch as _launch

#: Threads per block, columns per thread and blocks per SM (the register budget: __launch_bounds__) of
#: search_rows_kernel, per (dtype, soft): the tile is NT · CPT steps. Measured on an H100 at n = 128, L = 10^7
#: (benchmarks/OPTIMIZATION_LOG.md, "DTW search on the GPU"): float32 hard 256 x 16 at 2 blocks per SM (3 blocks
#: spill, within 3 %), soft 256 x 8 at 3 blocks per SM (6.7 ms against 9.1 at 2).
TILES = {(torch.float32, False): (256, 16, 2), (torch.float64, False): (256, 8, 2),
         (torch.float32, True): (256, 8, 3), (torch.float64, True): (256, 4, 2)}
#: Largest D held in registers (a template constant); larger D reads the series through L1.
DK_MAX = 4
#: Look-back records of one launch at most this many bytes (rows run in bands of launches beyond).
SLOT_BYTES = 256 << 20
#: Queries per group: their `(G, L)` end rows at most this many elements.
ROW_ELEMENTS = 1 << 28
#: kernels/search.cu: SEL_CHUNK, SEL_THREADS, GREEDY_THREADS.
SEL_CHUNK, SEL_THREADS, GREEDY_THREADS = 1024, 256, 1024

_CTYPE = {torch.float32: "float", torch.float64: "double"}
COST_IDS = {"sqeuclidean": 0, "l1": 1}

#: Tests and benchmarks: (NT, CPT[, MINB]) to use instead of TILES (None: TILES).
forced_tile = None


def _record_words(dtype: torch.dtype, soft: bool) -> int:
    """64-bit words per look-back record (kernels/search.cu, Record::NREC)."""
    w = 1 if dtype == torch.float32 else 2
    return (w * (2 if soft else 1) + 1) + (w * (3 if soft else 2) + 1)


def tile_of(dtype: torch.dtype, soft: bool, D: int, forced=None) -> tuple:
    """(NT, CPT, MINB, DK) of search_rows_kernel: fewer columns per thread when D features of each sit in registers."""
    forced = forced or forced_tile
    NT, CPT, MINB = (tuple(forced) + (1,))[:3] if forced else TILES[(dtype, soft)]
    DK = D if D <= DK_MAX else 0
    if forced is None and DK > 1:
        CPT = max(2, CPT // (2 if DK == 2 else 4))
    return NT, CPT, MINB, DK


def _bits(value: float, dtype: torch.dtype) -> int:
    """A float kernel argument as the integer whose bytes the driver copies (launch.py passes 8-byte slots)."""
    if dtype == torch.float32:
        return struct.unpack("<i", struct.pack("<f", value))[0]
    return struct.unpack("<q", struct.pack("<d", value))[0]


#: The profile end_rows writes with prof=(tensor, tickets) (benchmarks): per ticket and row, thread 0's globaltimer
#: (ns) at the row's start, then clock64 cycles since it after pass 1, the first barrier, the look-back (warp 0
#: scan + publish + look-back), the second barrier and pass 2, then the look-back's read rounds and windows.
PROF_FIELDS = ("start_ns", "pass1", "barrier1", "lookback", "barrier2", "pass2", "reads", "windows")


def end_rows(query: torch.Tensor, series: torch.Tensor, cost: str, gamma: float, prof=None):
    """(values `(Q, L)`, starts `(Q, L)` int32): the last DP row of each query of query `(Q, n, D)` in series `(L, D)`
    (both contiguous CUDA tensors of one float dtype): values[b, j] = the best DTW value of a match of query b ending
    at step j (gamma > 0: the soft-min over all matches ending there), starts[b, j] = the start of its best hard path.
    prof: (int64 tensor of tickets · rows · 8 zeros, tickets) to profile the first tickets (one band only).
    """
    Q, n, D = query.shape
    L = series.shape[0]
    dtype = query.dtype
    soft = gamma > 0
    NT, CPT, MINB, DK = tile_of(dtype, soft, D)
    tw = NT * CPT
    ntiles = -(-L // tw)
    nrec = _record_words(dtype, soft)
    band = max(1, min(n, SLOT_BYTES // (Q * ntiles * nrec * 8)))
    dev = query.get_device()
    expr = (f"sdtw::search::search_rows_kernel<{_CTYPE[dtype]}, {COST_IDS[cost]}, {'true' if soft else 'false'}, "
            f"{DK}, {NT}, {CPT}, {MINB}>")
    values = torch.empty((Q, L), dtype=dtype, device=query.device)
    starts = torch.empty((Q, L), dtype=torch.int32, device=query.device)
    slots = torch.empty(Q * ntiles * band * nrec + 2, dtype=torch.int64, device=query.device)
    # bands after the first start from the previous band's last row: two buffers, the last band writes the outputs
    bufs = []
    if band < n:
        for _ in range(2):
            bufs.append((torch.empty_like(values), torch.empty_like(values) if soft else None, torch.empty_like(starts)))
    g = _bits(float(gamma), dtype)
    prev = (None, None, None)
    for b, row0 in enumerate(range(0, n, band)):
        row1 = min(n, row0 + band)
        last = row1 == n
        out = (values, bufs[b % 2][1] if bufs and not last else None, starts) if last else bufs[b % 2]
        used = Q * ntiles * (row1 - row0) * nrec
        slots[: used + 1].zero_()  # the records and the ticket
        ticket = slots[used:]
        args = (query.data_ptr(), series.data_ptr(), _launch.ptr(prev[0]), _launch.ptr(prev[1]), _launch.ptr(prev[2]),
                out[0].data_ptr(), _launch.ptr(out[1]), out[2].data_ptr(), slots.data_ptr(), ticket.data_ptr(),
                _launch.i32(Q), _launch.i32(n), _launch.i32(D), _launch.i32(L), _launch.i32(row0), _launch.i32(row1),
                _launch.i32(ntiles), g, _launch.ptr(prof[0]) if prof else 0, _launch.i32(prof[1] if prof else 0))
        _launch.launch("search", expr, dev, Q * ntiles, NT, args)
        prev = out
    return values, starts


def select(values: torch.Tensor, starts: torch.Tensor, k: int, exclusion: int):
    """(start, end, value) `(Q, k)` (int64, int64, values' dtype): the k best non-overlapping matches of each query
    from its end row values `(Q, L)` and starts `(Q, L)` int32, by search.py's greedy rule; -1, -1, +inf past the
    last match."""
    Q, L = values.shape
    dtype = values.dtype
    dev = values.get_device()
    nch = -(-L // SEL_CHUNK)
    cv = torch.empty((Q, nch), dtype=dtype, device=values.device)
    ci = torch.empty((Q, nch), dtype=torch.int32, device=values.device)
    cmin = torch.empty((Q, nch), dtype=torch.int32, device=values.device)
    out_s = torch.empty((Q, k), dtype=torch.int64, device=values.device)
    out_e = torch.empty((Q, k), dtype=torch.int64, device=values.device)
    out_v = torch.empty((Q, k), dtype=dtype, device=values.device)
    ct = _CTYPE[dtype]
    _launch.launch("search", f"sdtw::search::select_chunks_kernel<{ct}>", dev, -(-Q * nch // (SEL_THREADS // 32)),
                   SEL_THREADS, (values.data_ptr(), starts.data_ptr(), _launch.i32(L), _launch.i32(nch), _launch.i32(Q),
                                 cv.data_ptr(), ci.data_ptr(), cmin.data_ptr()))
    _launch.launch("search", f"sdtw::search::select_greedy_kernel<{ct}>", dev, Q, GREEDY_THREADS,
                   (values.data_ptr(), starts.data_ptr(), _launch.i32(L), _launch.i32(nch), cv.data_ptr(),
                    ci.data_ptr(), cmin.data_ptr(), _launch.i32(k), int(exclusion), out_s.data_ptr(),
                    out_e.data_ptr(), out_v.data_ptr()))
    return out_s, out_e, out_v


def select_on_host(values: torch.Tensor, starts: torch.Tensor, k: int, exclusion: int):
    """:func:`select` on the CPU (the rows copied to the host, the cpu backend's Numba pick): for the benchmark's
    comparison of the two places."""
    from .. import _cpu_search as kern
    from .._cpu_loading import prepare

    prepare(kern, ("select_matches",))
    v = values.double().cpu().numpy()
    st = starts.cpu().numpy().astype("int64")
    Q = v.shape[0]
    out_s = torch.full((Q, k), -1, dtype=torch.int64)
    out_e = torch.full((Q, k), -1, dtype=torch.int64)
    out_v = torch.full((Q, k), float("inf"), dtype=torch.float64)
    for b in range(Q):
        kern.select_matches(v[b], st[b], int(k), int(exclusion), out_s[b].numpy(), out_e[b].numpy(), out_v[b].numpy())
    return out_s, out_e, out_v.to(values.dtype)


def search(query: torch.Tensor, series: torch.Tensor, cost: str, gamma: float, k: int, exclusion: int):
    """(start, end, value) `(Q, k)` of dtw_search for contiguous CUDA query `(Q, n, D)` and series `(L, D)` of one
    float dtype: :func:`end_rows` then :func:`select`, queries in groups whose end rows fit ROW_ELEMENTS."""
    Q = query.shape[0]
    L = series.shape[0]
    group = max(1, min(Q, ROW_ELEMENTS // max(L, 1)))
    parts = []
    for q0 in range(0, Q, group):
        values, starts = end_rows(query[q0:q0 + group], series, cost, gamma)
        parts.append(select(values, starts, k, exclusion))
        del values, starts
    if len(parts) == 1:
        return parts[0]
    return tuple(torch.cat(p) for p in zip(*parts))
