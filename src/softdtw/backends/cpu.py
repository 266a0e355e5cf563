"""cpu backend: Numba kernels (``_cpu_kernels.py``), float32 and float64, parallel over the batch.

Implements the contract of :mod:`softdtw.backends`. This module only converts tensors to NumPy
views (no copies for contiguous CPU tensors), allocates outputs with torch, picks how the batch
is spread over SIMD lanes and threads (:func:`_plan`: lanes across pairs for batches of more
than ~12-16 pairs per thread, else one pair at a time with lanes across rows) and calls the
kernels; the arithmetic lives in ``_cpu_kernels.py``.

- Fused costs ("sqeuclidean", "l1") are computed inside the kernels one row at a time: no
  `(B, N, M)` cost tensor exists in the forward or the backward.
- memory="none": O(lanes · M · D) scratch per thread, nothing saved.
- memory="store": saves the table R `(B, N, M)` in float64 for both data dtypes (natural units;
  the sentinel 1e300 on cells outside a pair's lengths or window). A float32 table would put
  ~1e-3 relative error into float32 gradients at gamma = 0.1 (the backward's exponents are
  differences of neighbouring R / gamma, which reach ~1e4); see ``_cpu_kernels.py``. Values
  only (no gradient) run entirely in float32 for float32 data up to N + M = ``F32_STATE_MAX``
  steps; longer pairs keep the DP state in float64, since a float32 R loses ulp(|R|) in every cell
  and the value drifts with the path's length (float32 against float64: 1.4e-6 at N = M = 4096,
  5.8e-6 at 16384, 1.3e-5 at 65536, 4.2e-5 at 3000 x 70000).
- memory="checkpoint": saves R only on band boundaries. With TH = :func:`band_rows` (N) (~sqrt(N),
  a multiple of 32, at least 64), the rows TH - 1, 2 TH - 1, ... (the row just above each band of
  TH rows but the first; K = ceil(N / TH) - 1 of them), float64 in log2 units (R / (gamma ln 2);
  natural units for gamma == 0) with the sentinel outside, as a flat buffer of B·K·M values
  (``saved_spec``). The backward runs the bands bottom-up, two kernel calls each: the forward
  kernel recomputes the band's rows from the checkpoint above it into a `(B, TH + 1, M)` buffer,
  exactly as store mode's table holds them, then the backward kernel runs the band's rows and
  hands E and the weights of its top row on to the band above. The results equal store mode's
  (bitwise when the recompute runs with the forward's plan, e.g. for one pair: it repeats the
  forward's arithmetic from the checkpoint's exact log2 values). Memory: B·K·M +
  min(B, chunk)·(TH + 1)·M float64 instead of B·N·M (batches run in chunks whose band buffer
  stays under ``_BAND_BYTES``); work: one more forward. A single pair runs on one thread (by
  pair, see _plan). Measured on 2 cores, float64: one pair N = M = 20000, forward + backward
  11.5 s and +52 MB peak RSS (store: 17.8 s, +3.1 GB); two pairs 3000 x 70000 (lengths, a band
  of radius 100) 7.4 s, +173 MB (store: 11.8 s, +3.3 GB). When the batch runs one pair at a time, a
  recomputed band writes only the columns the backward reads (forward_kernel's ``narrow``), so a
  banded pair costs its band: two pairs 2^18 x (2^18 - 100) with a band of radius 128, 24 s
  (190 s when every recomputed row was written across all M columns).
- gamma == 0 is hard DTW; its backward follows the argmin path (ties: diagonal, up, left).
- Alignment variants (issue 25; keyword-only ``open_begin``, ``open_end``, ``step_penalty`` of the four
  functions; the recursion is derived in reference.py's docstring): flags of the same kernels, in every
  memory mode, dtype, plan and with lengths. ``backward`` / ``backward_cost`` return d value / d
  step_penalty per pair `(B,)` as an extra last output when step_penalty is not None. Bands with an
  open end raise ValueError (reference.check_variant). Open end, hard DTW: the first argmin of the
  last row is the end the backward follows.
- Second order: :func:`hvp_cost` (``_cpu_hvp.py``), E, dv/dgamma and their derivatives along a direction
  (Mensch & Blondel 2018), recomputing the forward from C; working memory: float64 tables of R' and Rdot,
  16 bytes a cell, for the pairs of the groups that run at once. With the alignment variants too (open
  begin, open end, a step penalty per pair and its direction: d value / d penalty and its derivative).
- Non-finite and extreme numbers: C may hold +inf (a forbidden cell); a pair with no finite path, or
  whose value overflows the data dtype, gets +inf and a zero gradient. Costs over gamma past what a
  float32 state holds run with a float64 state; float64 data past 2.5e299 in log2 units is computed
  by the reference backend (exact, natural units, slower; the forward saves nothing and the backward
  recomputes there). One bound from the inputs' largest magnitudes per call (NumPy, microseconds).

The first call compiles the kernels (measured on a 2-core CI-class machine: ~40 s for float32,
~30 s for float64, forward and backward); Numba caches them on disk (``cache=True``) next to this
file or under ``NUMBA_CACHE_DIR``, so later processes load them in well under a second. A real
compile is announced by one line on stderr, and loaded kernels give the same bits as compiled
ones (``_cpu_loading.py``).

Devices: CPU. Dtypes: float32, float64.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._windows import valid_cells
from . import _cpu_hvp
from . import _cpu_kernels as kernels
from . import reference
from ._cpu_loading import prepare as _prepare_kernels

# The kernels this module calls; the other functions of _cpu_kernels are their helpers.
_ENTRY_POINTS = ("forward_kernel", "backward_kernel")
_COST_KIND = {"sqeuclidean": kernels.COST_SQEUCLIDEAN, "l1": kernels.COST_L1}

# Pairs per SIMD group (and rows per strip when by pair): two AVX-512 registers' worth, enough
# independent chains to hide the latency of a soft-min (measured: 32 lanes of float32 run at
# 1.6 ns/cell, 8 lanes at 5.4).
_MAX_LANES = {torch.float32: 32, torch.float64: 16}
# Except the float32 forward that stores (float64 state): 32 float64 lanes spill registers
# (measured, one thread, B=64, N=M=128, D=4: 16 lanes 5.5 ns/cell, 32 lanes 7.6).
_MAX_LANES_STORING = {torch.float32: 16, torch.float64: 16}
_VECTOR = 8
# Fewer pairs per thread than this run one pair at a time (see _plan). Measured crossover of
# forward + backward at N = M = 256, D = 2 on 2 threads (ns/cell, pairs vs lanes):
# float32 B=16 11.9 vs 13.7, B=24 11.9 vs 10.0; float64 B=24 9.6 vs 12.0, B=32 9.9 vs 9.0.
_PAIR_LANES_MIN = {torch.float32: 12, torch.float64: 16}
#: Longest N + M whose float32 value-only pass keeps its DP state in float32 (see the module docstring).
F32_STATE_MAX = 8192
# Bound on a group's packed y and its gradient, `(M, D, lanes)` each: long, wide series get
# fewer lanes instead of a huge per-thread buffer.
_GROUP_BYTES = 64 << 20

_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}

#: Memory modes this backend runs (read by ``softdtw._ops.resolve_memory``).
MEMORY_MODES = ("none", "store", "checkpoint")
#: dtype of the saved table R, whatever the data dtype.
SAVED_DTYPE = torch.float64

# Bounds of a checkpoint band's height (see band_rows).
_MIN_BAND_ROWS = 64
_BAND_ALIGN = 32
# Bound on the recomputed band `(pairs, TH + 1, M)` float64 of a checkpointed backward: larger
# batches run in chunks of pairs (at least one per thread).
_BAND_BYTES = 256 << 20


def _plan(B: int, M: int, D: int, dtype: torch.dtype, max_lanes: int) -> tuple[bool, int]:
    """(by_pair, lanes): how the kernels spread the batch over SIMD lanes and threads.

    With at least ``_PAIR_LANES_MIN`` pairs per thread, groups of ``lanes`` pairs run in lock
    step (lanes across pairs); below that, lanes would sit empty, so each pair runs alone with
    ``lanes`` rows per wavefront strip (by_pair). Lanes are rounded to full vectors and bounded
    so that a group's packed y and its gradient stay under ``_GROUP_BYTES``.
    """
    threads = numba.get_num_threads()
    per_thread = -(-B // threads)
    if per_thread < _PAIR_LANES_MIN[dtype]:
        return True, _MAX_LANES[dtype]
    lanes = min(max_lanes, -(-per_thread // _VECTOR) * _VECTOR)
    itemsize = torch.empty((), dtype=dtype).element_size()
    while 2 * M * max(D, 1) * lanes * itemsize > _GROUP_BYTES:
        if lanes <= _VECTOR:  # long and wide series: one pair at a time needs only its own y
            return True, _MAX_LANES[dtype]
        lanes //= 2
    return False, lanes


def _view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor (a copy only if it is not contiguous)."""
    return t.detach().contiguous().numpy()


def _placeholder(dtype: torch.dtype, ndim: int = 3) -> np.ndarray:
    """An empty array of the right dtype and rank for a kernel argument that is not used."""
    return np.empty((0,) * ndim, dtype=torch.empty((), dtype=dtype).numpy().dtype)


def _window_args(window: torch.Tensor | None):
    if window is None:
        return np.zeros((0, 0, 2), dtype=np.int32), False
    return _view(window.to(torch.int32)), True


def _gamma(gamma: torch.Tensor) -> float:
    return float(gamma)


def band_rows(N: int) -> int:
    """Rows per checkpoint band (TH) for series of N rows.

    ~sqrt(N) balances the checkpoints (N / TH rows per pair) against the band the backward
    recomputes (TH rows); a multiple of 32 so that the by-pair strips (16 or 32 rows) tile a band
    exactly; at least 64 so that short series do not pay two kernel calls every few rows.
    """
    root = math.isqrt(max(N - 1, 0)) + 1  # ceil(sqrt(N))
    return max(_MIN_BAND_ROWS, -(-root // _BAND_ALIGN) * _BAND_ALIGN)


def _checkpoints(N: int) -> tuple[int, int]:
    """(TH, K): band height and number of checkpoint rows (one above every band but the first)."""
    th = band_rows(N)
    return th, -(-N // th) - 1


def saved_spec(kind, B, N, M, D, dtype, memory):
    """What :func:`forward` / :func:`forward_cost` save: R `(B, N, M)` float64 ("store"), the
    flat checkpoints `(B·K·M,)` float64 ("checkpoint"), or nothing.

    K depends on N's value (a square root), so for symbolic sizes (torch.compile with dynamic
    shapes) the checkpoint buffer's shape is None and the fake kernel gives it a size of its own.
    """
    if memory == "none":
        return (0,), dtype
    if memory == "checkpoint":
        if not all(isinstance(v, int) for v in (B, N, M)):
            return None, SAVED_DTYPE
        return (B * _checkpoints(N)[1] * M,), SAVED_DTYPE
    return (B, N, M), SAVED_DTYPE


# --- range: what the sentinel design can hold exactly --------------------------------------------

#: Finite R' (log2 units) must stay within a quarter of the state dtype's sentinel: the forward
#: saturates R' at the sentinel, and the end value is +inf from half of it (_cpu_kernels._end_value).
_REACH = {torch.float32: kernels.SENTINEL_F32 / 4, torch.float64: kernels.SENTINEL_F64 / 4}


def _quick_cost_bound(x, y, C, cost_kind) -> float:
    """A cheap upper bound on |cost| over the problem's finite costs (+inf costs are forbidden cells,
    not costs): D (max|x| + max|y|)^2 (or its L1 form) for fused costs, C's extremes for a given C."""
    # NumPy on the tensors' views: a few microseconds, where torch ops on small CPU tensors took ~10 each.
    if cost_kind == kernels.COST_GIVEN:
        c = _view(C)
        lo, hi = float(c.min()), float(c.max())
        if math.isfinite(lo) and math.isfinite(hi):
            return max(-lo, hi, 0.0)
        return float(torch.finfo(C.dtype).max)
    span = float(np.abs(_view(x)).max()) + float(np.abs(_view(y)).max())  # >= |x_id - y_jd| for every d
    D = x.shape[2]
    bound = D * span * span if cost_kind == kernels.COST_SQEUCLIDEAN else D * span
    return min(bound, float(torch.finfo(x.dtype).max))  # a cost past that is +inf: a forbidden cell


def _exact_cost_bound(x, y, C, cost_kind, x_lengths, y_lengths, window) -> float:
    """The largest |cost| over the finite costs of the cells the pairs use (their lengths and window),
    computed as the kernels do, in the data dtype (fused costs pair by pair, a block of rows at a time).
    Only asked for when :func:`_quick_cost_bound` is too large: huge inputs."""
    if cost_kind == kernels.COST_GIVEN:
        B, N, M = C.shape
        used = C[valid_cells(x_lengths, y_lengths, window, N, M) & torch.isfinite(C)]
        return float(used.abs().max()) if used.numel() else 0.0
    best = 0.0
    D = x.shape[2]
    for b in range(x.shape[0]):
        n, m = int(x_lengths[b]), int(y_lengths[b])
        yb = y[b, :m]
        step = max(1, (1 << 22) // (m * D))
        for i0 in range(0, n, step):
            i1 = min(n, i0 + step)
            diff = x[b, i0:i1].unsqueeze(1) - yb.unsqueeze(0)
            c = diff.square().sum(-1) if cost_kind == kernels.COST_SQEUCLIDEAN else diff.abs().sum(-1)
            used = torch.isfinite(c)
            if window is not None:
                cols = torch.arange(m).unsqueeze(0)
                lo = window[b, i0:i1, 0:1].long()
                hi = window[b, i0:i1, 1:2].long()
                used &= (cols >= lo) & (cols < hi)
            if bool(used.any()):
                best = max(best, float(c[used].max()))
    return best


def _reach(bound: float, N: int, M: int, gamma: float) -> float:
    """The largest |R'| a path can reach: N + M - 1 cells of cost <= bound, in log2 units, plus the
    soft-min's log2(3) per cell."""
    inv = 1.0 if gamma == 0 else 1.0 / (gamma * kernels.LN2)
    scaled = 0.0 if bound == 0 else bound * inv
    return max((N + M) * (scaled + 2.0), inv)  # inv itself must fit in the state dtype too


def _pen(step_penalty) -> float:
    return 0.0 if step_penalty is None else float(step_penalty)


def _state(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, N, M, dtype, memory, pen=0.0) -> str:
    """How the kernels run this problem: "narrow" (a value-only float32 pass may keep its DP state in
    float32), "wide" (a float64 state, as always with a backward or past F32_STATE_MAX), or "reference"
    (float64 data whose costs over gamma leave the range the kernels keep exact: the reference backend
    computes it instead, exactly, in natural units).

    The kernels work in log2 units, R' = R / (gamma ln 2), with a finite sentinel for +inf. float32
    data with a float64 state is always in range (costs <= 3.4e38, gamma >= 1.4e-45); a float32 state
    holds |R'| < 2.5e29; float64 data |R'| < 2.5e299.
    """
    if dtype == torch.float32 and (memory != "none" or N + M > F32_STATE_MAX):
        return "wide"
    g = _gamma(gamma)
    limit = _REACH[dtype]
    # A step penalty adds at most |pen| per cell of a path: bound it with the costs.
    if _reach(_quick_cost_bound(x, y, C, cost_kind) + abs(pen), N, M, g) < limit:
        return "narrow"
    if dtype == torch.float32:
        return "wide"
    bound = _exact_cost_bound(x, y, C, cost_kind, x_lengths, y_lengths, window) + abs(pen)
    return "narrow" if _reach(bound, N, M, g) < limit else "reference"


def _band_chunk(B: int, N: int, M: int) -> int:
    """Pairs per chunk of a checkpointed backward (their recomputed bands share one buffer)."""
    per_pair = (band_rows(N) + 1) * M * SAVED_DTYPE.itemsize
    return min(B, max(numba.get_num_threads(), _BAND_BYTES // per_pair))


def working_bytes(kind, B, N, M, D, dtype, memory) -> int:
    """Host memory a call needs besides its saved buffer (read by ``softdtw._ops.resolve_memory``): the
    band a checkpointed backward recomputes, `(chunk, TH + 1, M)` float64."""
    if memory != "checkpoint" or not all(isinstance(v, int) for v in (B, N, M)):
        return 0
    return _band_chunk(B, N, M) * (band_rows(N) + 1) * M * SAVED_DTYPE.itemsize


def _allocate(shape, dtype, what: str, B: int, N: int, M: int):
    """A torch (dtype a torch.dtype) or NumPy buffer; running out of memory becomes a MemoryError that
    names the sizes and the ways around it (no allocator RuntimeError)."""
    try:
        if isinstance(dtype, torch.dtype):
            return torch.empty(shape, dtype=dtype)
        return np.empty(shape, dtype)
    except (RuntimeError, MemoryError) as err:
        if isinstance(err, RuntimeError) and "alloc" not in str(err):
            raise
        nbytes = math.prod(shape) * (dtype.itemsize if isinstance(dtype, torch.dtype) else np.dtype(dtype).itemsize)
        raise MemoryError(
            f"soft-DTW on B={B} pairs of lengths N={N}, M={M} could not allocate {nbytes / 2**30:.1f} GiB "
            f"for {what}. Use memory='checkpoint' (about sqrt(N) rows kept), a smaller batch or shorter "
            f"series, or values only under torch.no_grad()."
        ) from err


def _run_forward(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, memory, B, N, M, D, dtype,
                 narrow_state: bool = True, variant=(False, False, 0.0), saved_out=None):
    """The forward kernel over all rows. narrow_state: a value-only float32 pass may keep its DP state
    in float32 (see _state). variant: (open_begin, open_end, step penalty as a float). saved_out: see
    :func:`forward`."""
    _prepare_kernels(kernels, _ENTRY_POINTS)  # compile notice; cached helpers first (see _cpu_loading)
    values = torch.empty(B, dtype=dtype)
    if memory == "store":
        every = 1
        if saved_out is not None and saved_out.shape == (B, N, M) and saved_out.dtype == SAVED_DTYPE \
                and saved_out.is_contiguous():
            saved = saved_out  # every cell is written below (the sentinel outside lengths and windows)
        else:
            saved = _allocate((B, N, M), SAVED_DTYPE, "the stored backward table (memory='store')", B, N, M)
        state = saved.numpy()
    elif memory == "checkpoint":
        every, K = _checkpoints(N)
        saved = _allocate((B * K * M,), SAVED_DTYPE, "the checkpoints (memory='checkpoint')", B, N, M)
        state = saved.view(B, K, M).numpy()
    else:  # values only: the DP state in the data dtype, float64 for long pairs (F32_STATE_MAX)
        every = 0    # and for costs over gamma too large for a float32 state (_state)
        saved = torch.empty((0,), dtype=dtype)
        state = _placeholder(dtype if N + M <= F32_STATE_MAX and narrow_state else torch.float64)
    win, has_win = _window_args(window)
    by_pair, lanes = _plan(B, M, D, dtype, (_MAX_LANES_STORING if every else _MAX_LANES)[dtype])
    kernels.forward_kernel(
        x, y, C, cost_kind, _gamma(gamma), _view(x_lengths), _view(y_lengths), win, has_win,
        0, N, state, -1, every, every - 1, memory == "store", by_pair, lanes, state,
        values.numpy(), False, *variant,
    )
    return values, saved


def _exact_elsewhere(run, memory: str, dtype: torch.dtype):
    """(value, saved) of a problem out of the kernels' range, from the reference backend: nothing is
    saved (the backward, which finds the same range, lets the reference recompute)."""
    value, _ = run()
    return value, torch.empty((0,), dtype=dtype if memory == "none" else SAVED_DTYPE)


def forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
            step_penalty=None, saved_out=None):
    """Soft-DTW values `(B,)` of x `(B, N, D)` and y `(B, M, D)` under a fused cost; see module doc.

    open_begin, open_end, step_penalty (None or a 0-d tensor of the data dtype): the alignment variants.
    saved_out: optional contiguous float64 `(B, N, M)` tensor that memory="store" writes its table into
    (every cell) and returns as ``saved``, instead of a new one; ignored for other shapes and modes. For
    callers that run many forwards of one shape (softdtw.barycenter): a fresh table of a few hundred MB
    is a fresh mapping from the OS, whose first touch of every page cost ~1-4 ns a byte on the 2-core
    VMs (292 MB: 0.4-0.9 s, as much as the kernels), where rewriting a mapped one costs ~0.1.
    """
    reference.check_variant(window, open_begin, open_end)
    B, N, D = x.shape
    M = y.shape[1]
    pen = _pen(step_penalty)
    opts = dict(open_begin=open_begin, open_end=open_end, step_penalty=step_penalty)
    state = _state(x, y, None, _COST_KIND[cost], gamma, x_lengths, y_lengths, window, N, M, x.dtype, memory,
                   pen)
    if state == "reference":
        return _exact_elsewhere(
            lambda: reference.forward(x, y, gamma, cost, x_lengths, y_lengths, window, "none", **opts), memory,
            x.dtype)
    return _run_forward(_view(x), _view(y), _placeholder(x.dtype), _COST_KIND[cost], gamma,
                        x_lengths, y_lengths, window, memory, B, N, M, D, x.dtype, state == "narrow",
                        (open_begin, open_end, pen), saved_out)


def forward_cost(C, gamma, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
                 step_penalty=None):
    """Soft-DTW values `(B,)` from a precomputed cost C `(B, N, M)`; options as :func:`forward`."""
    reference.check_variant(window, open_begin, open_end)
    B, N, M = C.shape
    pen = _pen(step_penalty)
    opts = dict(open_begin=open_begin, open_end=open_end, step_penalty=step_penalty)
    state = _state(None, None, C, kernels.COST_GIVEN, gamma, x_lengths, y_lengths, window, N, M, C.dtype,
                   memory, pen)
    if state == "reference":
        return _exact_elsewhere(
            lambda: reference.forward_cost(C, gamma, x_lengths, y_lengths, window, "none", **opts), memory,
            C.dtype)
    empty = _placeholder(C.dtype)
    return _run_forward(empty, empty, _view(C), kernels.COST_GIVEN, gamma, x_lengths, y_lengths,
                        window, memory, B, N, M, 0, C.dtype, state == "narrow", (open_begin, open_end, pen))


def _carry(by_pair: bool, lanes: int, B: int, M: int, D: int, fused: bool, dtype: torch.dtype):
    """Zeroed state that the backward kernel hands from one call (rows below) to the next (rows
    above): E and two weights of two rows, their ranges, partial dy and <E, entropy> (see
    ``_cpu_kernels.backward_kernel`` for the layouts)."""
    Mf, Df = (M, D) if fused else (0, 0)
    if by_pair:
        shapes = ((B, 6, 1, M + 2), (B, 1, Df, Mf))
        units = B
    else:
        units = -(-B // lanes)
        shapes = ((units, 6, M + 2, lanes), (units, Mf, Df, lanes))
    nd = _NUMPY_DTYPE[dtype]
    return (np.zeros(shapes[0], nd), np.zeros((units, 5), np.int64), np.zeros(shapes[1], nd),
            np.zeros(B))


#: float64 data past this bound on |R'|: the backward takes each cell's weights from its predecessors
#: alone (their differences) instead of S' = R' - C', whose rounding, ulp(|R'|), then reaches 1e-8 of a
#: weight (costs of 1e22 at gamma = 1e-8 gave E = 0 on all rows but the last).
_EXACT_WEIGHTS_REACH = float(1 << 26)


def _weights(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, N, M, dtype, pen=0.0) -> str:
    """How the backward takes its weights: "exact" (_cpu_kernels._cell_weights_exact), "fast", or
    "reference" (out of the kernels' range: see :func:`_state`).

    Always for float32 data: its weights normalised by their own sum keep E's mass (float32 gradients
    within 2.7e-6 of float64 at B = 64, N = M = 256, gamma = 0.1, and 1.8e-6 at N = M = 1500, where
    2^(S' - R'[p]) with S' from the forward's float32 log2 drifted by 1.7e-7 a cell: 3.5e-5 and 1.8e-4),
    for 7-20 % more backward time (2 cores). float64 data only when |R'| may pass
    _EXACT_WEIGHTS_REACH (its fast weights are within 2e-10 of the exact ones there)."""
    if dtype == torch.float32:
        return "exact"
    reach = _reach(_quick_cost_bound(x, y, C, cost_kind) + abs(pen), N, M, _gamma(gamma))
    if reach <= _EXACT_WEIGHTS_REACH:
        return "fast"
    if reach < _REACH[dtype]:
        return "exact"
    bound = _exact_cost_bound(x, y, C, cost_kind, x_lengths, y_lengths, window) + abs(pen)
    return "exact" if _reach(bound, N, M, _gamma(gamma)) < _REACH[dtype] else "reference"


def _run_backward(grad, x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, value, saved,
                  memory, B, N, M, D, dtype, outputs, exact=False, variant=(False, False, 0.0),
                  want_pen=False, wants=(True, True)):
    """Call the backward kernel (per band for checkpoints); recompute R first when a storing
    forward saved nothing. Returns (dgamma `(B,)`, dpenalty `(B,)` or None unless want_pen). wants:
    (dy, dgamma) to compute (the others are left at 0)."""
    _prepare_kernels(kernels, _ENTRY_POINTS)
    dx, dy, dC = outputs
    dgamma = torch.empty(B, dtype=dtype)
    dpen = torch.zeros(B if want_pen else 0, dtype=dtype)
    win, has_win = _window_args(window)
    args = (cost_kind, _gamma(gamma), _view(x_lengths), _view(y_lengths), win, has_win, exact)
    grad, value = _view(grad.to(dtype)), _view(value.to(dtype))
    if memory == "checkpoint":
        _backward_bands(x, y, C, args, grad, value, saved, B, N, M, D, dtype,
                        (dx, dy, dC, dgamma.numpy()), variant, dpen.numpy(), wants)
        return dgamma, (dpen if want_pen else None)
    if saved.numel() == 0:
        _, saved = _run_forward(x, y, C, cost_kind, gamma, x_lengths, y_lengths, window, "store",
                                B, N, M, D, dtype, variant=variant)
    by_pair, lanes = _plan(B, M, D, dtype, _MAX_LANES[dtype])
    none = _placeholder(dtype, 4)  # one call over all rows: no state to hand on
    kernels.backward_kernel(
        x, y, C, *args[:-1], 0, N, 0, by_pair, lanes, grad, value, _view(saved),
        none, np.zeros((0, 5), np.int64), none, np.zeros(0), dx, dy, dC, dgamma.numpy(), exact,
        *variant, np.zeros(0), dpen.numpy(), *wants,
    )
    return dgamma, (dpen if want_pen else None)


def _table_row(checkpoint: np.ndarray, gamma: float, out: np.ndarray) -> None:
    """out = a checkpoint row (log2 units) in natural units, as forward_kernel stores the table."""
    scale = 1.0 if gamma == 0 else gamma * kernels.LN2
    with np.errstate(over="ignore"):
        np.multiply(checkpoint, scale, out=out)
    np.copyto(out, kernels.SENTINEL_F64, where=checkpoint >= kernels.SENTINEL_F64)


def _backward_bands(x, y, C, args, grad, value, saved, B, N, M, D, dtype, outputs, variant, dpen, wants):
    """The checkpointed backward: per chunk of pairs, bands of TH rows from the bottom up, each
    recomputed by the forward kernel from its checkpoint, then run by the backward kernel."""
    th, K = _checkpoints(N)
    checkpoints = saved.view(B, K, M).numpy()
    cost_kind, gamma, x_lengths, y_lengths, win, has_win, exact = args
    fused = cost_kind != kernels.COST_GIVEN
    chunk = _band_chunk(B, N, M)
    band = _allocate((chunk, th + 1, M), np.float64, "the checkpointed backward's recomputed band", B, N, M)
    scratch = np.empty(chunk, x.dtype if fused else C.dtype)  # recomputed values, not kept
    for c0 in range(0, B, chunk):
        part = slice(c0, min(B, c0 + chunk))
        n = part.stop - c0
        xc, yc, Cc = (a[part] if a.size else a for a in (x, y, C))
        xl, yl = x_lengths[part], y_lengths[part]
        wc = win[part] if has_win else win
        outs = [a[part] if a.size else a for a in outputs]
        dpen_c = dpen[part] if dpen.size else dpen
        e_mov = np.zeros(n if dpen.size else 0)
        fwd_plan = _plan(n, M, D, dtype, _MAX_LANES_STORING[dtype])
        bwd_plan = _plan(n, M, D, dtype, _MAX_LANES[dtype])
        carry = _carry(*bwd_plan, n, M, D, fused, dtype)
        # Both by pair: the recompute writes only the columns the backward reads (a banded pair costs its
        # band, not N·M); the band buffer's other cells are never read.
        narrow = fwd_plan[0] and bwd_plan[0]
        for k in range(-(-int(xl.max()) // th) - 1, -1, -1):
            r0 = k * th
            if k > 0:  # the band's top row, as the table would hold it (see _table_row)
                _table_row(checkpoints[part, k - 1], gamma, band[:n, 0])
            kernels.forward_kernel(
                xc, yc, Cc, cost_kind, gamma, xl, yl, wc, has_win, r0, r0 + th,
                checkpoints[part], k - 1, 1, r0 - 1, True, *fwd_plan, band[:n], scratch[:n], narrow,
                *variant,
            )
            kernels.backward_kernel(
                xc, yc, Cc, cost_kind, gamma, xl, yl, wc, has_win, r0, r0 + th, r0 - 1,
                *bwd_plan, grad[part], value[part], band[:n], *carry, *outs, exact, *variant, e_mov, dpen_c,
                *wants,
            )


def _zero_where_infinite(value, *grads):
    """A pair whose value is +inf (no finite path, or the exact value overflows the dtype) gets a zero
    gradient: its E is not meaningful, and one such pair must not turn a batch's gradient into NaN."""
    bad = ~torch.isfinite(value)
    if not bool(bad.any()):
        return grads
    out = []
    for t in grads:
        mask = bad.view((-1,) + (1,) * (t.dim() - 1))
        out.append(torch.where(mask, torch.zeros((), dtype=t.dtype), t))
    return tuple(out)


def backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, *,
             open_begin=False, open_end=False, step_penalty=None, needs=None):
    """(dx `(B, N, D)`, dy `(B, M, D)`, dgamma `(B,)`) of sum_b grad[b] * value[b], and dpenalty `(B,)`
    (grad_b d value_b / d step_penalty) as a fourth output when step_penalty is not None.

    needs: optional (dx, dy, dgamma) flags, as the cuda backend's: dy and dgamma not needed are returned as
    zeros without their work (dy's accumulation, the cells' entropies; measured at B = 64, N = M = 128,
    D = 4: OPTIMIZATION_LOG.md), and without dgamma the weights are always the exact ones (see _weights).
    dx is always computed."""
    reference.check_variant(window, open_begin, open_end)
    B, N, D = x.shape
    M = y.shape[1]
    dx = torch.zeros_like(x)
    dy = torch.zeros_like(y)
    empty = _placeholder(x.dtype)
    pen = _pen(step_penalty)
    how = _weights(x, y, None, _COST_KIND[cost], gamma, x_lengths, y_lengths, window, N, M, x.dtype, pen)
    if how == "reference":
        return reference.backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value,
                                  x.new_empty((0,)), memory, open_begin=open_begin, open_end=open_end,
                                  step_penalty=step_penalty)
    wants = (True, True) if needs is None else (bool(needs[1]), bool(needs[2]))
    # Without dgamma the exact weights skip their log2 and need no cost row: faster than the fast ones then
    # (float64, B = 64, N = M = 128, D = 4, dx only: backward 4.5 -> 3.8-4.0 ms, dx within 2.4e-13).
    exact = how == "exact" or not wants[1]
    dgamma, dpen = _run_backward(grad, _view(x), _view(y), empty, _COST_KIND[cost], gamma, x_lengths,
                                 y_lengths, window, value, saved, memory, B, N, M, D, x.dtype,
                                 (dx.numpy(), dy.numpy(), empty), exact, (open_begin, open_end, pen),
                                 step_penalty is not None, wants)
    if dpen is None:
        return _zero_where_infinite(value, dx, dy, dgamma)
    return _zero_where_infinite(value, dx, dy, dgamma, dpen)


def backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, *, open_begin=False,
                  open_end=False, step_penalty=None):
    """(dC `(B, N, M)` = grad_b · E_b, dgamma `(B,)`) from a precomputed cost C, and dpenalty `(B,)` as a
    third output when step_penalty is not None."""
    reference.check_variant(window, open_begin, open_end)
    B, N, M = C.shape
    dC = torch.zeros_like(C)
    empty = _placeholder(C.dtype)
    pen = _pen(step_penalty)
    how = _weights(None, None, C, kernels.COST_GIVEN, gamma, x_lengths, y_lengths, window, N, M, C.dtype, pen)
    if how == "reference":
        return reference.backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value,
                                       C.new_empty((0,)), memory, open_begin=open_begin, open_end=open_end,
                                       step_penalty=step_penalty)
    exact = how == "exact"
    dgamma, dpen = _run_backward(grad, empty, empty, _view(C), kernels.COST_GIVEN, gamma, x_lengths,
                                 y_lengths, window, value, saved, memory, B, N, M, 0, C.dtype,
                                 (empty, empty, dC.numpy()), exact, (open_begin, open_end, pen),
                                 step_penalty is not None)
    if dpen is None:
        return _zero_where_infinite(value, dC, dgamma)
    return _zero_where_infinite(value, dC, dgamma, dpen)


# --- second order ----------------------------------------------------------------------------------

#: Pairs per SIMD group of hvp_cost (float64 tables and state for either data dtype).
_HVP_MAX_LANES = 16
#: Bound on the R' and Rdot tables of one hvp_cost kernel call (all its groups); larger batches run
#: in several calls, and long pairs in groups of fewer lanes (down to one pair a group).
_HVP_BYTES = 512 << 20


def _hvp_plan(B: int, N: int, M: int) -> tuple[int, int]:
    """(lanes, slots): pairs per SIMD group, and groups per kernel call (each with its own tables).

    Lanes: the pairs per thread, split into as few groups of at most _HVP_MAX_LANES as they need, in
    equal parts (B = 40 on 2 threads: 4 groups of 10, not 16, 16, 8), halved while the threads' tables
    pass _HVP_BYTES."""
    threads = numba.get_num_threads()
    per_thread = -(-B // threads)
    lanes = -(-per_thread // -(-per_thread // _HVP_MAX_LANES))
    per_lane = 16 * N * (M + 2)
    while lanes > 1 and threads * lanes * per_lane > _HVP_BYTES:
        lanes = -(-lanes // 2)
    groups = -(-B // lanes)
    slots = min(groups, max(threads, _HVP_BYTES // (lanes * per_lane)))
    return lanes, slots


def _hvp_fits(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, penalty_dot=None) -> bool:
    """Whether the kernels' wdot = w (delta - gamma_dot ln w) / gamma, computed in the data dtype, stays
    far below the data dtype's sentinel (where _cpu_hvp._cell_dots caps it): |delta| <= 2 (N + M)
    (max |Cdot| + max |penalty_dot| + |gamma_dot| log 3) on the cells used, |ln w| <= 45 (float32) / 350
    (float64).

    False sends float32 data to the float64 kernels and float64 data to the reference backend (only for
    gamma or directions past ~1e-25 / 1e25 of the costs' scale)."""
    B, N, M = C.shape
    c = _view(Cdot)
    big = max(float(c.max()), -float(c.min())) if c.size else 0.0
    if not math.isfinite(big):  # inf or NaN somewhere: read as 0 off the cells used
        used = valid_cells(x_lengths, y_lengths, window, N, M) & torch.isfinite(C)
        big = float(Cdot[used].abs().max()) if bool(used.any()) else 0.0
    if penalty_dot is not None and penalty_dot.numel():
        big += float(penalty_dot.abs().max())
    g = float(gamma_dot.abs().max()) if gamma_dot.numel() else 0.0
    log_w = 45.0 if C.dtype == torch.float32 else 350.0
    delta = 2.0 * (N + M) * (big + 1.1 * g) + log_w * g
    limit = 1e25 if C.dtype == torch.float32 else 1e290
    return math.isfinite(delta) and delta <= limit * _gamma(gamma)


#: hvp_cost takes the alignment variants (read by softdtw._ops).
HVP_VARIANTS = True


def hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, *, open_begin=False, open_end=False,
             step_penalty=None, penalty_dot=None):
    """Second order in a precomputed cost: (E `(B, N, M)`, vgamma `(B,)`, Edot `(B, N, M)`, vgamma_dot `(B,)`),
    and (vpen `(B,)`, vpen_dot `(B,)`) after them when ``step_penalty`` is not None.

    Per pair, E = dv/dC and vgamma = dv/dgamma (backward_cost's with grad = 1) and their derivatives along
    (Cdot `(B, N, M)`, gamma_dot `(B,)`): Edot = H_CC Cdot + H_Cgamma gamma_dot, vgamma_dot = H_gammaC Cdot +
    H_gammagamma gamma_dot (Mensch & Blondel 2018; the kernels and their numerics: ``_cpu_hvp.py``). Cdot is
    read as 0 outside the lengths and window and on +inf cells. gamma == 0: the hard path (as
    backward_cost) and zeros. A pair without a finite value gets zeros. The forward is recomputed from C
    (nothing saved is read).

    Alignment variants as reference.hvp_cost: open_begin, open_end, step_penalty (None, 0-d or `(B,)`) with the
    direction penalty_dot (None = 0, 0-d or `(B,)`); vpen = dv/dp, vpen_dot its derivative along (Cdot,
    gamma_dot, penalty_dot). They run the same kernel call, with their own row functions.

    Memory: per group of up to 16 pairs, two float64 tables `(N, M + 2, lanes)` (R' and Rdot: 16 bytes a
    cell) for the groups of one kernel call (up to ``_HVP_BYTES``, or one group per thread for longer
    pairs). float64 data past the kernels' range goes to the reference backend (see :func:`_state`).
    """
    reference.check_variant(window, open_begin, open_end)
    B, N, M = C.shape
    opts = dict(open_begin=open_begin, open_end=open_end, step_penalty=step_penalty, penalty_dot=penalty_dot)
    want_pen = step_penalty is not None
    pens = pdots = None
    if want_pen:
        pens = reference._per_pair(step_penalty, B, torch.float64, "step_penalty")
        pdots = (torch.zeros(B, dtype=torch.float64) if penalty_dot is None
                 else reference._per_pair(penalty_dot, B, torch.float64, "penalty_dot"))
    pen_bound = float(pens.abs().max()) if want_pen and B else 0.0
    if _gamma(gamma) == 0:
        if want_pen and step_penalty.dim() > 0:  # the first-order kernels take one penalty for the batch
            return reference.hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, **opts)
        first = dict(open_begin=open_begin, open_end=open_end, step_penalty=step_penalty)
        value, saved = forward_cost(C, gamma, x_lengths, y_lengths, window, "store", **first)
        out = backward_cost(torch.ones_like(value), C, gamma, x_lengths, y_lengths, window, value, saved, "store",
                            **first)
        E, vgamma = out[0], out[1]
        result = (E, vgamma, torch.zeros_like(C), torch.zeros_like(vgamma))
        return result + (out[2], torch.zeros_like(vgamma)) if want_pen else result
    how = _weights(None, None, C, kernels.COST_GIVEN, gamma, x_lengths, y_lengths, window, N, M, C.dtype, pen_bound)
    if how != "reference" and not _hvp_fits(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, pdots):
        if C.dtype == torch.float32:  # the float64 kernels, exact for float32 inputs
            if want_pen:
                opts.update(step_penalty=step_penalty.double(),
                            penalty_dot=None if penalty_dot is None else penalty_dot.double())
            out = hvp_cost(C.double(), gamma.double(), x_lengths, y_lengths, window, Cdot.double(),
                           gamma_dot.double(), **opts)
            return tuple(t.float() for t in out)
        how = "reference"
    if how == "reference":
        return reference.hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, **opts)
    _prepare_kernels(_cpu_hvp, ("hvp_kernel",))
    lanes, slots = _hvp_plan(B, N, M)
    what = "hvp_cost's R and Rdot tables"
    Rt = _allocate((slots, N, M + 2, lanes), np.float64, what, B, N, M)
    Rdt = _allocate((slots, N, M + 2, lanes), np.float64, what, B, N, M)
    values = torch.empty(B, dtype=C.dtype)
    # Zero-filled by NumPy: torch.zeros of (B, N, M) took ~6 ns a cell on 2 busy cores (its parallel fill),
    # a quarter of the kernel's time; NumPy's fill ~0.2.
    E, Edot = torch.empty_like(C), torch.empty_like(C)
    E.numpy().fill(0)
    Edot.numpy().fill(0)
    vgamma, vgamma_dot = torch.empty(B, dtype=C.dtype), torch.empty(B, dtype=C.dtype)
    vpen = torch.zeros(B if want_pen else 0, dtype=torch.float64)
    vpen_dot = torch.zeros(B if want_pen else 0, dtype=torch.float64)
    none = np.zeros(0)
    win, has_win = _window_args(window)
    args = (_view(C), _view(Cdot.to(C.dtype)), _gamma(gamma), _view(gamma_dot.to(C.dtype)),
            _view(x_lengths), _view(y_lengths), win, has_win, lanes)
    outs = (values.numpy(), E.numpy(), Edot.numpy(), vgamma.numpy(), vgamma_dot.numpy())
    variant = (bool(open_begin), bool(open_end), none if pens is None else _view(pens.contiguous()),
               none if pdots is None else _view(pdots.contiguous()), vpen.numpy(), vpen_dot.numpy())
    for g0 in range(0, -(-B // lanes), slots):
        _cpu_hvp.hvp_kernel(*args, g0, Rt, Rdt, how == "exact", *outs, *variant)
    if not want_pen:
        return _zero_where_infinite(values, E, vgamma, Edot, vgamma_dot)
    return _zero_where_infinite(values, E, vgamma, Edot, vgamma_dot, vpen.to(C.dtype), vpen_dot.to(C.dtype))
