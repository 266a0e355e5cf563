"""cuda backend: NVRTC-compiled CUDA kernels (``kernels/*.cu``), launched through cuda-core.

Implements the contract of :mod:`softdtw.backends` on CUDA tensors, float32 and float64 (a double
instantiation of the same templates; float32 runs its DP in float32).

- Layout (``kernels/common.cuh``, research/gpu-kernels.md): one warp per pair with K columns per lane in
  registers, rows skewed across the lanes and handed over by warp shuffles; small batches get W warps
  per pair (a block), long y is processed in column chunks. The plan is chosen in ``launch.py``.
- Costs: "sqeuclidean" and "l1" with D <= :data:`FUSED_D_MAX` are computed in the kernels (no `(B, N, M)`
  tensor exists in the forward or the backward, dx and dy come out of the backward kernel). Larger D
  takes a table from a GEMM: for sqeuclidean the Gram matrix x·yᵀ with the norms of x and y beside it
  (cost "gram": the kernels form the cost in each cell, and the backward returns E's row and column sums),
  for l1 the cost itself (``l1.py``: one kernel, its table read by the precomputed-cost kernels); E, written
  over the table, turns into dx, dy by GEMMs (sqeuclidean) or by l1.py's second kernel. With
  memory="checkpoint" (and value-only passes whose whole cost would exceed COST_WHOLE_MAX) that table is built
  one band of rows at a time (x·yᵀ for sqeuclidean, the l1 cost for l1; the checkpointed forward's bands as large
  as the backward's band and tile buffers together, ``_forward_band_rows``, so the whole table where that fits in
  the backward's footprint), each band's chained
  kernels running every chunk of every pair over the band's rows, the forward top to bottom from the row
  checkpoint above the band, the backward bottom up from the (E, link) row below it, E written over the band and
  turned into the band's dx rows and its share of dy by GEMMs (``_forward_rows``, ``_backward_rows``).
- memory="none": nothing saved, O(B·N) scratch at most. Few long pairs run from both ends (``two_ended.py``:
  the halves of each pair's rows at once, about N / 2 steps shorter). memory="store": the forward saves one 4-byte
  (float32) or 8-byte (float64) word per cell, step-major: ``saved[b, (c·N + t mod N)·CW + offset(L, k)]``
  for chunk c, step t, lane L and column k of the lane (``StepLayout`` in common.cuh), shape
  ``(B · nch·N·CW,)`` (flat) with nch·CW >= M (padding below 2x, usually none). The word (``Link`` in common.cuh):
  float32 inputs — int32 holding the cell's normalised soft-min weights of its predecessors as two
  16-bit fixed-point numbers, round(65535 w_up) and round(65535 (w_up + w_left)) (w_diag = 1 - both;
  each weight exact to 1.5e-5 for any gamma, N and cost scale, where an fp32 S would lose
  ulp(|R| / gamma) in every weight); float64 inputs — S, the soft-min of the three predecessors in
  log2 units. Hard DTW stores the argmin (one-hot weights /
  0, 1, 2).
- memory="checkpoint" (long pairs, bounded memory): a chained plan (one block per pair and column chunk,
  the chunks of a pair running at once and handing their boundary column over through L2 flags). The
  forward saves R of every chunk's last column and of the row above every tile of TH rows, flat in the
  data dtype: ``B · (nch·N + (ceil(N/TH) + 1)·nch·CW)`` values; float32 keeps each value's frame beside
  it (kernels/forward_pair.cuh, "Frames"): ``B · (2·nch·N + (ceil(N/TH) + 1)·nch·(CW + 32·W))``. In the
  backward each block has a second group of warps that recomputes the chunk's tiles bottom up (their
  links) into two per-block tile buffers while the first group sweeps the previous tile: 2·TH·CW words
  per block, at most ``launch.TILE_BYTES`` in all.
- gamma == 0 is hard DTW; its backward follows the argmin path (ties: diagonal, up, left). gamma is read
  on the device, so nothing here synchronises with the host (CUDA graphs capture every call).
- Alignment variants (issue 25; keyword-only ``open_begin``, ``open_end``, ``step_penalty`` of the four
  functions, the recursion of softdtw/backends/reference.py): a template flag VAR of the same kernels
  (kernels/common.cuh, Variant), in every memory mode, plan (sequential, chained, checkpointed), cost path and
  dtype; the plain instantiations compile to the code they always did. The penalty (0-d, or one per pair `(B,)`)
  is read on the device. ``backward`` / ``backward_cost`` return d value / d step_penalty per pair `(B,)` as an
  extra last output when step_penalty is not None. With open_end the forward keeps R of each pair's last row in
  float64 and the end's (value, argmin) behind the saved table: ``saved_spec(..., open_end=True)`` counts them
  (:func:`_end_numel`). Bands with an open end raise ValueError (reference.check_variant). Hard DTW with an open
  end follows the first argmin of the last row, as the cpu backend.

Devices: CUDA. Dtypes: float32, float64.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ... import costs
from .. import FUSED_COSTS, reference
from . import launch as _launch
from . import l1 as _l1
from . import two_ended as _two_ended
from .compile import STATS as COMPILE_STATS  # noqa: F401  (re-exported for benchmarks)

#: Memory modes this backend implements (the ops layer reads this).
MEMORY_MODES = ("none", "store", "checkpoint")

#: Largest feature size whose cost is computed inside the kernels.
FUSED_D_MAX = 16
#: Large-D tables built band by band (memory="checkpoint"): a band of rows takes 1/ROW_BANDS of the whole (B, N, M)
#: table, at least COST_BAND_BYTES and at most COST_BAND_MAX bytes, and the checkpointed backward's tile buffers at
#: most as much (launch.row_band_plan); the sizes depend on the problem only (forward and backward agree). Every
#: band refills the chunks' pipeline (each chunk runs ~100 rows behind the one on its left), so fewer, taller bands
#: are faster: H100, B = 32, N = M = 2048, D = 64, 2 / 4 / 8 bands 8.1 / 10.7 / 16.6 ms per training call against
#: 4.4-4.5 ms storing, at a peak of 595 / 319 / 184 MB against 1108 (benchmarks/OPTIMIZATION_LOG.md, "Row bands").
#: Where a band would take more than half of the memory available, the pass cuts shorter ones (_fit_rows). The
#: checkpointed forward takes taller bands, as many bytes as the backward's band and tile buffers together
#: (_forward_band_rows): one band at that shape, 8.0 -> 7.4-7.6 ms on an H200 at the same peak.
COST_BAND_BYTES = 16 << 20
ROW_BANDS = 2
COST_BAND_MAX = 4 << 30
#: Value-only passes build the whole large-D cost up to this size and band it beyond (a band costs a pass).
COST_WHOLE_MAX = 1 << 30
#: The "gram" cost's GEMMs by kernels/gram_gemm.cu (x·yᵀ with the norms in one launch, dx and dy in another) instead
#: of norms_kernel + torch.bmm and two mul + baddbmm_ pairs, where B·N·M·D is at most GRAM_OWN_MAX[dtype] and N, M at
#: most GRAM_OWN_LEN (:func:`own_gram_gemm`): there each torch call took more host time than its GEMM took GPU time
#: (issue 27, the D = 64 / 80 rows; benchmarks/OPTIMIZATION_LOG.md, "The gram cost's small GEMMs in one launch
#: each"). Past them cuBLAS, with TF32 where the user allows it. float64 stops sooner: at 16 x 400 x 300, D = 80 its
#: dx, dy took 87 µs of GPU against cuBLAS's 39 (H200). The C++ launcher follows the same rule, so both paths give
#: the same bits.
GRAM_OWN_MAX = {torch.float32: 1 << 28, torch.float64: 1 << 26}
GRAM_OWN_LEN = 1024


def _row_band_bytes(B: int, N: int, M: int, dtype: torch.dtype) -> int:
    return min(COST_BAND_MAX, max(COST_BAND_BYTES, -(-B * N * M * dtype.itemsize // ROW_BANDS)))


def _row_plan(B: int, N: int, M: int, dtype: torch.dtype, device_index: int):
    """(plan, rows per band) of a large-D cost built one band of rows at a time; saved_spec, forward and backward
    agree."""
    return _launch.row_band_plan(B, N, M, dtype, device_index, _row_band_bytes(B, N, M, dtype))


def own_gram_gemm(B: int, N: int, M: int, D: int, dtype: torch.dtype) -> bool:
    """Whether the "gram" cost of this shape and dtype takes kernels/gram_gemm.cu's GEMMs (GRAM_OWN_MAX,
    GRAM_OWN_LEN)."""
    return dtype in GRAM_OWN_MAX and B * N * M * D <= GRAM_OWN_MAX[dtype] and max(N, M) <= GRAM_OWN_LEN


def _fused(kind: str, D: int) -> bool:
    return kind == "fused" and D <= FUSED_D_MAX


def _banded(kind: str, D: int, memory: str, B: int, N: int, M: int, dtype: torch.dtype) -> bool:
    """Whether a large-D cost is built band by band: always with memory="checkpoint" (bounded memory is
    what it asks for), for value-only passes when the whole cost would exceed COST_WHOLE_MAX."""
    if kind != "fused" or D <= FUSED_D_MAX:
        return False
    return memory == "checkpoint" or (memory == "none" and B * N * M * dtype.itemsize > COST_WHOLE_MAX)


def _plan(kind: str, B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int, memory: str):
    if _banded(kind, D, memory, B, N, M, dtype):
        return _row_plan(B, N, M, dtype, device_index)[0]
    return _launch.plan_for(B, N, M, D if _fused(kind, D) else 0, dtype, device_index, memory == "checkpoint")


def working_bytes(kind, B, N, M, D, dtype, memory) -> int:
    """Device memory a call needs besides its saved buffer, for memory="auto": the whole (B, N, M) cost
    of the GEMM path (large D) when it stores the table."""
    return B * N * M * dtype.itemsize if memory == "store" and kind == "fused" and D > FUSED_D_MAX else 0


def _saved_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 data saves packed fixed-point weights (int32), float64 data saves S (float64)."""
    return torch.int32 if dtype == torch.float32 else dtype


def saved_spec(kind, B, N, M, D, dtype, memory, open_end: bool = False):
    """Shape and dtype of what :func:`forward` / :func:`forward_cost` save (see the module docstring); open_end:
    of a call with open_end=True (the table, then the end's float64 values, :func:`_end_numel`).

    A flat buffer of B · plan.saved_numel(N) words. Its length depends on the launch plan, which depends
    on the sizes' values; for symbolic sizes (torch.compile with dynamic shapes) the shape is None and
    the fake kernel gives the buffer a size of its own (an unbacked symbol nothing guards on).
    """
    if memory == "none":
        return (0,), dtype
    saved_dtype = dtype if memory == "checkpoint" else _saved_dtype(dtype)
    if not all(isinstance(v, int) for v in (B, N, M, D)):
        return None, saved_dtype
    device = _launch._get_device()
    key = (kind, B, N, M, D, dtype, memory, device, open_end)
    spec = _SAVED_SPECS.get(key)
    if spec is None or _launch._forced:
        plan = _plan(kind, B, N, M, D, dtype, device, memory)
        numel = _table_numel(plan, B, N, dtype, memory)
        if open_end:
            numel = _end_offset(numel, saved_dtype) + _end_numel(B, M, plan.nch) * 8 // saved_dtype.itemsize
        spec = (numel,), saved_dtype
        if not _launch._forced:
            _SAVED_SPECS[key] = spec
    return spec


# saved_spec per (kind, sizes, dtype, memory, device, open_end): asked by the memory mode and the fake kernels
# each call.
_SAVED_SPECS: dict = {}


def _table_numel(plan, B: int, N: int, dtype: torch.dtype, memory: str) -> int:
    """Length of the saved buffer without the open end's values: the link table or the checkpoints."""
    if memory == "checkpoint":
        return B * plan.checkpoint_numel(N, _launch.has_frames(dtype, True))
    return B * plan.saved_numel(N)


# --- alignment variants (issue 25) ------------------------------------------------------------------

class _Var(NamedTuple):
    """The alignment variants of a call as the kernels take them: the VAR bit mask (kernels/common.cuh, Variant),
    the step penalty (the data dtype, on the data's device; one value, or one per pair) and the kernels' penalty
    arguments (pen, pen_stride: 0 for one value, 1 for one per pair)."""
    code: int
    pen: torch.Tensor | None
    args: tuple

    @property
    def open_end(self) -> bool:
        return bool(self.code & 2)

    @property
    def penalty(self) -> bool:
        return bool(self.code & 4)


def _variant(data: torch.Tensor, B: int, window, open_begin: bool, open_end: bool, step_penalty) -> "_Var | None":
    """The variant of a call, None for the plain DP. Refuses a band with an open end (ValueError) and a penalty
    that is neither one value nor one per pair. A penalty already in place (data's dtype and device, contiguous)
    is used as it is: this runs before every launch of a variant, a few tensor calls cost more than a small
    problem's kernels."""
    code = (1 if open_begin else 0) | (2 if open_end else 0) | (4 if step_penalty is not None else 0)
    if not code:
        return None
    if window is not None and (open_begin or open_end):
        reference.check_variant(window, open_begin, open_end)
    pen, args = None, _NO_PENALTY
    if step_penalty is not None:
        pen = step_penalty
        if pen.dtype != data.dtype or pen.device != data.device:
            pen = pen.detach().to(device=data.device, dtype=data.dtype)
        n = pen.numel()
        if n != 1 and tuple(pen.shape) != (B,):
            raise ValueError(
                f"step_penalty must be one value (a float or a 0-d tensor) or one per pair, shape ({B},); got shape "
                f"{tuple(pen.shape)}. Pass a scalar, or a tensor of the batch's size.")
        if not pen.is_contiguous():
            pen = pen.contiguous()
        args = (pen.data_ptr(), _launch.i32(0 if n == 1 else 1))
    return _Var(code, pen, args)


def _addr(end) -> int:
    """Device address of the open end's values: an int already, a tensor's data, or 0 (none)."""
    return 0 if end is None else (end if isinstance(end, int) else end.data_ptr())


#: The variant arguments of a plain launch: forward_kernel (pen, pen_stride, endbuf), forward_chain_kernel (... done),
#: backward_kernel (pen, pen_stride, endbuf, dpen), backward_chain_kernel (... dpen, pensum).
_NO_PENALTY = (0, _launch.i32(0))
_PLAIN_FWD = (0, _launch.i32(0), 0)
_PLAIN_FWD_CHAIN = (0, _launch.i32(0), 0, 0)
_PLAIN_BWD = (0, _launch.i32(0), 0, 0)
_PLAIN_BWD_CHAIN = (0, _launch.i32(0), 0, 0, 0)


def _end_numel(B: int, M: int, nch: int) -> int:
    """float64 values an open end keeps: R of the last row `(B, M)`, (value, argmin) `(B, 2)`, and the chained
    forward's per-chunk partials `(B, nch, 2)`."""
    return B * M + 2 * B + 2 * B * nch


def _end_offset(numel: int, dtype: torch.dtype) -> int:
    """Where the float64 end values start in a saved buffer of `numel` elements of `dtype`: 8-byte aligned."""
    per = 8 // dtype.itemsize
    return -(-numel // per) * per


def _with_end(data, numel: int, dtype: torch.dtype, B: int, N: int, M: int, nch: int, what: str):
    """A saved buffer of `numel` elements of dtype (the table, at its start) followed by the open end's float64
    values: (the buffer, the end values' address). Addresses, not views: views cost host time on every call."""
    off = _end_offset(numel, dtype)
    saved = _alloc(data, off + _end_numel(B, M, nch) * 8 // dtype.itemsize, dtype, what, B, N, M)
    return saved, saved.data_ptr() + off * dtype.itemsize


def _end_in(saved: torch.Tensor, numel: int) -> int:
    """Address of the open end's values in a saved buffer of :func:`_with_end` whose table has `numel` elements."""
    return saved.data_ptr() + _end_offset(numel, saved.dtype) * saved.dtype.itemsize


# --- launches ---------------------------------------------------------------------------------------

_WAYS_AROUND = ("Pass fewer pairs per call (the memory grows with the batch), use memory='checkpoint' (it keeps R "
                "only on tile boundaries and builds a large-D cost a band of rows at a time), shorten the series, "
                "or compute values only (torch.no_grad()).")


def _memory_error(device, nbytes: int, what: str, B: int, N: int, M: int, ways: str = _WAYS_AROUND):
    """The MemoryError that replaces torch's OutOfMemoryError: the sizes, what needed the memory, the fix."""
    free, _ = torch.cuda.mem_get_info(device)
    return MemoryError(
        f"soft-DTW on B={B} pairs of lengths N={N}, M={M} needs {nbytes / 2**30:.2f} GiB for {what} "
        f"and only {free / 2**30:.2f} GiB of GPU memory are free. {ways}"
    )


def _alloc(like: torch.Tensor, numel: int, dtype: torch.dtype, what: str, B: int, N: int, M: int) -> torch.Tensor:
    """A flat buffer for the saved table, the checkpoints or the tile buffers; running out of memory
    becomes a MemoryError that names the sizes and the ways around it."""
    try:
        return like.new_empty((numel,), dtype=dtype)
    except torch.OutOfMemoryError as err:
        raise _memory_error(like.device, numel * dtype.itemsize, what, B, N, M) from err


def _cost_checked(cost, x, y, N: int | None = None):
    """_gemm_cost with running out of memory turned into the MemoryError of :func:`_memory_error`. N: all of x's
    rows when x is one band of them (a banded pass), else None."""
    try:
        return _gemm_cost(cost, x, y)
    except torch.OutOfMemoryError as err:
        raise _cost_memory_error(x, y, N) from err


def _gram_checked(x, y):
    """_gram with running out of memory turned into the MemoryError of :func:`_memory_error`."""
    try:
        return _gram(x, y)
    except torch.OutOfMemoryError as err:
        raise _cost_memory_error(x, y) from err


def _cost_memory_error(x, y, N=None):
    """The MemoryError for a large-D cost that did not fit: the whole table (N None) or one band of its rows (N: all
    of them)."""
    B, Nb, M = x.shape[0], x.shape[1], y.shape[1]
    if N is None:
        what, ways, N = f"the whole cost (D={x.shape[2]} features)", _WAYS_AROUND, Nb
    else:
        what = (f"one band of the cost ({Nb} of the N rows, D={x.shape[2]}; memory='checkpoint' builds "
                f"the cost band by band)")
        ways = ("Pass fewer pairs per call (the memory grows with the batch), shorten the series, or free "
                "GPU memory held elsewhere.")
    return _memory_error(x.device, B * Nb * M * x.dtype.itemsize, what, B, N, M, ways)


def _sizes(x, y, C):
    """(data, B, N, M, device index) of a launch: x, y for fused costs, C for a precomputed one (and with it the
    norms of x and y for the "gram" cost)."""
    data = C if C is not None else x
    M = C.shape[2] if C is not None else y.shape[1]
    return data, data.shape[0], data.shape[1], M, data.get_device()


def _backward_outputs(x, y, data, B, needs=None):
    """dx, dy (fused costs; "gram": E's row and column sums, shaped like the norms; else None) and dgamma; the
    kernels write every element. needs: which of (dx, dy, dgamma) the caller uses (None: all); the others are
    written into scratch buffers nobody reads (y is usually a target, gamma a number) instead of fresh tensors."""
    fused = x is not None
    if needs is None:
        return (torch.empty_like(x) if fused else None, torch.empty_like(y) if fused else None, data.new_empty((B,)))
    return (torch.empty_like(x) if needs[0] else _scratch(x), torch.empty_like(y) if needs[1] else _scratch(y),
            data.new_empty((B,)) if needs[2] else _scratch(data, (B,)))


_SCRATCH: dict = {}
#: Largest scratch buffer kept between calls (elements); larger ones are allocated per call.
_SCRATCH_NUMEL = 1 << 22


def _scratch(like: torch.Tensor, shape=None) -> torch.Tensor:
    """A buffer shaped like ``like`` (or ``shape``) that kernels write and nobody reads, kept per (shape, dtype,
    device): an allocation costs ~10-17 µs of host time on the H100 VMs. Never kept from inside a CUDA-graph
    capture (the graph's private pool)."""
    shape = like.shape if shape is None else shape
    key = (shape, like.dtype, like.get_device())
    t = _SCRATCH.get(key)
    if t is None:
        t = like.new_empty(shape)
        if t.numel() <= _SCRATCH_NUMEL and not torch.cuda.is_current_stream_capturing():
            if len(_SCRATCH) >= 64:
                _SCRATCH.clear()
            _SCRATCH[key] = t
    return t


def _like(grad, data):
    """grad in data's dtype and contiguous; checked first, since the tiny-pair path counts every torch call."""
    if grad.dtype != data.dtype or not grad.is_contiguous():
        grad = grad.to(data.dtype).contiguous()
    return grad


#: The rows [r_lo, r_hi) of a chained launch that are not a row band: all of them (r_hi past any N).
_ALL_ROWS = (0, 1 << 30)


class _Seq(NamedTuple):
    """What a forward_kernel or backward_kernel launch needs besides its tensors, for one (sizes, dtype, device,
    cost, window, mode): built once (:func:`_seq`), not per call."""
    plan: _launch.Plan
    expr: str  # "" for a chained plan (the _run_*_chain functions take over)
    grid: int
    block: int
    saved_numel: int  # forward: the stored table's length
    bnd: tuple  # shape of the hand-over buffer between column chunks, () when there is one chunk
    tail: tuple  # the integer parameters B, N, M, nch


_SEQ: dict = {}


def _seq(kernel: str, B: int, N: int, M: int, D: int, dtype: torch.dtype, dev: int, cost: str, window: bool,
         store: bool, checkpoint: bool, var: int = 0) -> _Seq:
    """The launch spec of forward_kernel (kernel "forward") or backward_kernel ("backward"), cached unless a plan
    is forced (launch.forced_plan); var: the alignment variants' bit mask (0: the plain DP)."""
    key = (kernel, B, N, M, D, dtype, dev, cost, window, store, checkpoint, var)
    spec = _SEQ.get(key)
    if spec is not None and not _launch._forced:
        return spec
    plan = _launch.plan_for(B, N, M, D, dtype, dev, checkpoint)
    if plan.chain:
        spec = _Seq(plan, "", 0, 0, 0, (), ())
    elif kernel == "forward":
        long = _launch.seq_frames(dtype, store, N, M)
        # One column (with frames: value, frame per row), reused chunk after chunk.
        frames = long or _launch.has_frames(dtype, store)
        split = store and _launch.split_links(dtype, plan, window)
        spec = _Seq(plan, _launch.expression("forward_kernel", dtype, cost, D, plan, window, store, long, var=var,
                                             split=split),
                    plan.grid(B), plan.block(), B * plan.saved_numel(N),
                    (B, N * (2 if frames else 1)) if plan.nch > 1 else (), _ints(B, N, M, plan.nch))
    else:
        spec = _Seq(plan, _launch.expression("backward_kernel", dtype, cost, D, plan, window, var=var), plan.grid(B),
                    plan.block(), 0, (B, N, 2 + _carried(cost, D)) if plan.nch > 1 else (), _ints(B, N, M, plan.nch))
    if not _launch._forced:
        if len(_SEQ) > 4096:  # sizes that vary forever: keep the cache bounded
            _SEQ.clear()
        _SEQ[key] = spec
    return spec


def _ints(*values: int) -> tuple:
    return tuple(_launch.i32(v) for v in values)


def _run_forward(x, y, C, cost: str, D: int, gamma, x_lengths, y_lengths, window, store: bool,
                 checkpoint: bool = False, var: "_Var | None" = None):
    """Launch forward_kernel; x, y for fused costs (C None) or C for a precomputed one (x, y None). var: the
    alignment variants (None: the plain DP)."""
    data, B, N, M, dev = _sizes(x, y, C)
    spec = _seq("forward", B, N, M, D, data.dtype, dev, cost, window is not None, store, checkpoint,
                var.code if var else 0)
    if not spec.expr:
        return _run_forward_chain(x, y, C, cost, D, gamma, x_lengths, y_lengths, window, store, spec.plan, var)
    value = data.new_empty((B,))
    what = "the stored backward table (memory='store')"
    tail, keep = _PLAIN_FWD, None
    if var is not None and var.open_end:
        if store:
            saved, end = _with_end(data, spec.saved_numel, _saved_dtype(data.dtype), B, N, M, spec.plan.nch, what)
        else:  # values only: the end's values in a buffer of their own, held past the launch
            saved = data.new_empty((0,))
            keep = data.new_empty((_end_numel(B, M, spec.plan.nch),), dtype=torch.float64)
            end = keep.data_ptr()
        tail = var.args + (end,)
    else:
        saved = (_alloc(data, spec.saved_numel, _saved_dtype(data.dtype), what, B, N, M) if store
                 else data.new_empty((0,)))
        if var is not None:
            tail = var.args + (0,)
    bnd = data.new_empty(spec.bnd) if spec.bnd else None
    args = (_launch.ptr(x), _launch.ptr(y), _launch.ptr(C), gamma.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), value.data_ptr(), saved.data_ptr() if store else 0,
            _launch.ptr(bnd), *spec.tail, *tail)
    _launch.launch("forward", spec.expr, dev, spec.grid, spec.block, args)
    return value, saved


def _run_forward_chain(x, y, C, cost, D, gamma, x_lengths, y_lengths, window, store, plan, var=None):
    """forward_chain_kernel: B·nch blocks, one per (pair, chunk). Saves the link table (store), the
    checkpoints (plan.TH > 0: column checkpoints then row checkpoints, flat) or nothing; with an open end
    the end's float64 values after them."""
    data, B, N, M, dev = _sizes(x, y, C)
    value, saved, bufs = _forward_chain_buffers(data, B, N, M, plan, store, var)
    expr = _forward_chain_expr(data.dtype, cost, D, plan, window is not None, store, var)
    _launch_forward_chain(expr, dev, plan, x, y, C, gamma, x_lengths, y_lengths, window, value,
                          saved if store else None, bufs, B, N, M, var)
    return value, saved


def _forward_chain_expr(dtype, cost: str, D: int, plan, window: bool, store: bool, var=None) -> str:
    """forward_chain_kernel's instantiation for one launch (the C++ launcher's plans take it too, fastpath.py)."""
    split = store and _launch.split_links(dtype, plan, window)
    return _launch.expression("forward_chain_kernel", dtype, cost, D, plan, window, store, plan.TH > 0,
                              var=var.code if var else 0, split=split)


def _chain_sync_numel(B: int, plan, regions: int = 1) -> int:
    """int32 words of a chained forward's sync buffer without an open end: [ticket, flags (B, nch)] per region."""
    return regions * (1 + B * plan.nch)


def _forward_chain_buffers(data, B, N, M, plan, store, var=None, regions=1):
    """value `(B,)`, what the forward saves, and (bnd, sync, ckpt, end) of a chained forward (end: the open end's
    float64 values, an address or a tensor, else None; sync then also holds the pairs' done counters at its end).
    regions: launches with a [ticket, flags] of their own in sync (the row bands)."""
    value = torch.empty(B, dtype=data.dtype, device=data.device)
    ckpt = end = None
    frames = _launch.chain_frames(data.dtype)
    oe = var is not None and var.open_end
    if plan.TH > 0:
        what, numel = "the checkpoints (memory='checkpoint')", B * plan.checkpoint_numel(N, frames)
        if oe:
            saved, end = _with_end(data, numel, data.dtype, B, N, M, plan.nch, what)
        else:
            saved = _alloc(data, numel, data.dtype, what, B, N, M)
        bnd, ckpt = _split_checkpoints(saved, plan, B, N)
    else:
        what, numel = "the stored backward table (memory='store')", B * plan.saved_numel(N)
        if store and oe:
            saved, end = _with_end(data, numel, _saved_dtype(data.dtype), B, N, M, plan.nch, what)
        else:
            saved = _alloc(data, numel, _saved_dtype(data.dtype), what, B, N, M) if store else data.new_empty((0,))
            if oe:  # values only: a buffer of their own (kept in bufs until the launches are queued)
                end = data.new_empty((_end_numel(B, M, plan.nch),), dtype=torch.float64)
        bnd = data.new_empty((B * plan.column_numel(N, frames),)) if plan.nch > 1 else None
    # [ticket, flags] per region, then done
    sync = torch.zeros(_chain_sync_numel(B, plan, regions) + (B if oe else 0), dtype=torch.int32, device=data.device)
    return value, saved, (bnd, sync, ckpt, end)


def _split_checkpoints(saved, plan, B, N):
    """(column checkpoints, row checkpoints): the two parts of memory="checkpoint"'s saved buffer (without the
    open end's values after them)."""
    frames = _launch.has_frames(saved.dtype, True)
    ncol = B * plan.column_numel(N, frames)
    return saved[:ncol], saved[ncol:B * plan.checkpoint_numel(N, frames)]


def _launch_forward_chain(expr, dev, plan, x, y, C, gamma, x_lengths, y_lengths, window, value, saved, bufs,
                          B, N, M, var=None, rows=_ALL_ROWS, region=0, stagger=None):
    """One launch of forward_chain_kernel: B·nch blocks over the rows [r_lo, r_hi) = rows (a row band; C then holds
    only those rows). region: its [ticket, flags] in sync (:func:`_forward_chain_buffers`); stagger: the tiles'
    (None: launch.tile_stagger)."""
    bnd, sync, ckpt, end = bufs
    tail = _PLAIN_FWD_CHAIN
    if var is not None:
        tail = var.args + (_addr(end), sync.data_ptr() + 4 * (sync.numel() - B) if var.open_end else 0)
    stagger = _launch.tile_stagger(plan.W) if stagger is None else stagger
    args = (_launch.ptr(x), _launch.ptr(y), _launch.ptr(C), gamma.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), value.data_ptr(), _launch.ptr(saved), _launch.ptr(bnd),
            sync.data_ptr() + 4 * region * (1 + B * plan.nch), _launch.ptr(ckpt), _launch.i32(B), _launch.i32(N),
            _launch.i32(M), _launch.i32(plan.nch), _launch.i32(max(plan.TH, 1)), _launch.i32(stagger),
            *(_launch.i32(v) for v in rows), *tail)
    _launch.launch("forward", expr, dev, B * plan.nch, plan.block(), args)


def _run_backward_chain(grad, x, y, C, dC, cost, D, gamma, x_lengths, y_lengths, window, value, saved, plan,
                        needs=None, var=None, endbuf=None, dpen=None):
    """backward_chain_kernel: one block per (pair, chunk), chunks right to left; with plan.TH > 0 saved
    holds the checkpoints and each block recomputes its tiles into its own two tile buffers. var, endbuf,
    dpen: the alignment variants (:func:`_run_backward`)."""
    data, B, N, M, dev = _sizes(x, y, C if C is not None else dC)
    dx, dy, dgamma = _backward_outputs(x, y, data, B, needs)
    bufs = _backward_chain_buffers(data, B, N, M, _carried(cost, D), plan, saved, var)
    expr = _backward_chain_expr(data.dtype, cost, D, plan, window is not None, var)
    _launch_backward_chain(expr, dev, plan, _like(grad, data), x, y, C, dC, gamma, x_lengths, y_lengths, window,
                           value, saved, dx, dy, dgamma, bufs, B, N, M, var, endbuf,
                           dpen)
    return dx, dy, dgamma


def _backward_chain_expr(dtype, cost: str, D: int, plan, window: bool, var=None) -> str:
    """backward_chain_kernel's instantiation for one launch (the C++ launcher's plans take it too, fastpath.py)."""
    split = plan.TH > 0 and _launch.split_links(dtype, plan, window)  # the recompute
    return _launch.expression("backward_chain_kernel", dtype, cost, D, plan, window, plan.TH > 0,
                              var=var.code if var else 0, split=split)


def _backward_chain_sizes(B: int, N: int, DX: int, plan, regions: int = 1, penalty: bool = False) -> tuple:
    """(numel of the hand-over column, 0 with one chunk; int64 words of ws) of a chained backward: see
    :func:`_backward_chain_buffers`."""
    ints = regions * (1 + B * plan.nch + B)
    return (B * plan.nch * N * (2 + DX) if plan.nch > 1 else 0), B + (ints + 1) // 2 + (B if penalty else 0)


def _backward_chain_buffers(data, B, N, M, DX, plan, saved, var=None, regions=1):
    """(bnd, ws, fbnd, ckpt, tiles) of a chained backward: the hand-over column between chunks (E, link and
    DX dx values per row), one zeroed buffer for <E, C> per pair (float64) and the int32 ticket, flags
    (B, nch) and done (B) of each of `regions` launches (the row bands), with a step penalty a zeroed float64 sum
    per pair after them, and with checkpoints their two halves and the tile buffers of the B·nch blocks."""
    nbnd, nws = _backward_chain_sizes(B, N, DX, plan, regions, var is not None and var.penalty)
    bnd = data.new_empty((nbnd,)) if nbnd else None
    ws = torch.zeros(nws, dtype=torch.int64, device=data.device)
    fbnd = ckpt = tiles = None
    if plan.TH > 0:
        fbnd, ckpt = _split_checkpoints(saved, plan, B, N)
        tiles = _alloc(data, B * plan.nch * plan.tile_numel(), _saved_dtype(data.dtype),
                       "the checkpointed backward's tile buffers", B, N, M)
    return bnd, ws, fbnd, ckpt, tiles


def _launch_backward_chain(expr, dev, plan, grad, x, y, C, dC, gamma, x_lengths, y_lengths, window, value, saved,
                           dx, dy, dgamma, bufs, B, N, M, var=None, endbuf=None, dpen=None, rows=_ALL_ROWS,
                           region=0, stagger=None, rowb=None):
    """One launch of backward_chain_kernel (see the kernel). rows, region, stagger: as :func:`_launch_forward_chain`;
    rowb: the row bands' hand-over row `(B, M, 2)`."""
    bnd, ws, fbnd, ckpt, tiles = bufs
    checkpoint = plan.TH > 0
    tail = _PLAIN_BWD_CHAIN
    if var is not None:
        pensum = ws.data_ptr() + 8 * (ws.numel() - B) if var.penalty else 0
        tail = var.args + (_addr(endbuf), _launch.ptr(dpen), pensum)
    stagger = _launch.tile_stagger(plan.W) if stagger is None else stagger
    args = (_launch.ptr(x), _launch.ptr(y), _launch.ptr(C), gamma.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), grad.data_ptr(), 0 if checkpoint else saved.data_ptr(),
            _launch.ptr(dx), _launch.ptr(dy), _launch.ptr(dC), value.data_ptr(), dgamma.data_ptr(),
            _launch.ptr(bnd), ws.data_ptr() + 8 * B + 4 * region * (1 + B * plan.nch + B), ws.data_ptr(),
            _launch.ptr(fbnd), _launch.ptr(ckpt), _launch.ptr(tiles), _launch.i32(B), _launch.i32(N), _launch.i32(M),
            _launch.i32(plan.nch), _launch.i32(max(plan.TH, 1)), _launch.i32(stagger),
            *(_launch.i32(v) for v in rows), _launch.ptr(rowb), *tail)
    # memory="checkpoint": twice the warps, the second group recomputing tiles (kernels/backward.cu).
    _launch.launch("backward", expr, dev, B * plan.nch, plan.block() * (2 if checkpoint else 1), args)


def _carried(cost: str, D: int) -> int:
    """Values the backward carries along a row besides (E, link): dx (fused), E's row sum ("gram"), none."""
    return {"precomputed": 0, "gram": 1}.get(cost, D)


def _run_backward(grad, x, y, C, dC, cost: str, D: int, gamma, x_lengths, y_lengths, window, value, saved,
                  checkpoint: bool = False, needs=None, var: "_Var | None" = None, endbuf: int | None = None):
    """Launch backward_kernel. Fused: returns (dx, dy, dgamma). Precomputed: fills dC, returns (None, None, dgamma).
    "gram" (x, y: the norms, C: x·yᵀ): fills dC and returns (E's row sums, column sums, dgamma), times grad.
    With var (the alignment variants) a fourth output: grad_b d value_b / d step_penalty `(B,)` (None without
    a penalty); saved then holds the open end's values after the table (:func:`_with_end`), unless endbuf gives
    their address (two_ended.py: the seeds of a gradient from both ends).

    The kernel writes every element of dx, dy, dC and dgamma (zeros past the lengths and outside the
    window, dgamma = 0 at gamma = 0); dC may be C itself (overwritten in place). C None with a table cost (float32
    only, see :func:`_skips_cost`): the kernel reads no cost, and the dgamma it writes is meaningless.
    """
    data, B, N, M, dev = _sizes(x, y, C if C is not None else dC)
    spec = _seq("backward", B, N, M, D, data.dtype, dev, cost, window is not None, True, checkpoint,
                var.code if var else 0)
    if var is None:
        tail, endbuf, dpen = _PLAIN_BWD, None, None
    else:
        if var.open_end and endbuf is None:  # the table starts saved; the end's values follow it
            endbuf = _end_in(saved, _table_numel(spec.plan, B, N, data.dtype, "checkpoint" if checkpoint else "store"))
        dpen = data.new_empty((B,)) if var.penalty else None
        tail = var.args + (_addr(endbuf), _launch.ptr(dpen))
    if not spec.expr:
        out = _run_backward_chain(grad, x, y, C, dC, cost, D, gamma, x_lengths, y_lengths, window, value, saved,
                                  spec.plan, needs, var, endbuf, dpen)
        return out if var is None else out + (dpen,)
    dx, dy, dgamma = _backward_outputs(x, y, data, B, needs)
    bnd = data.new_empty(spec.bnd) if spec.bnd else None
    grad = _like(grad, data)
    args = (_launch.ptr(x), _launch.ptr(y), _launch.ptr(C), gamma.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), grad.data_ptr(), saved.data_ptr(), _launch.ptr(dx),
            _launch.ptr(dy), _launch.ptr(dC), value.data_ptr(), dgamma.data_ptr(), _launch.ptr(bnd), *spec.tail,
            *tail)
    _launch.launch("backward", spec.expr, dev, spec.grid, spec.block, args)
    return (dx, dy, dgamma) if var is None else (dx, dy, dgamma, dpen)


def _window(window):
    return None if window is None else window.to(torch.int32).contiguous()


# --- the contract -----------------------------------------------------------------------------------

def forward_cost(C, gamma, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
                 step_penalty=None):
    """Values `(B,)` and saved S from a precomputed cost C `(B, N, M)`. open_begin, open_end, step_penalty (None,
    a 0-d tensor, or one per pair `(B,)`): the alignment variants (softdtw/backends/reference.py)."""
    store = memory == "store"  # save the whole table of links
    var = _variant(C, C.shape[0], window, open_begin, open_end, step_penalty)
    return _run_forward(None, None, C.contiguous(), "precomputed", 0, gamma, x_lengths, y_lengths,
                        _window(window), store, memory == "checkpoint", var)


def backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, *, open_begin=False,
                  open_end=False, step_penalty=None):
    """(dC `(B, N, M)` = grad_b · E_b, dgamma `(B,)`), and dpenalty `(B,)` = grad_b d value_b / d step_penalty as a
    third output when step_penalty is not None."""
    C = C.contiguous()
    var = _variant(C, C.shape[0], window, open_begin, open_end, step_penalty)
    window = _window(window)
    if saved.numel() == 0:  # nothing was kept: run the forward again, storing
        _, saved = _run_forward(None, None, C, "precomputed", 0, gamma, x_lengths, y_lengths, window, True, False, var)
    dC = torch.empty_like(C)  # the kernel writes every element
    out = _run_backward(grad, None, None, C, dC, "precomputed", 0, gamma, x_lengths, y_lengths, window,
                        value, saved, memory == "checkpoint", None, var)
    return _outputs((dC, out[2]), out, step_penalty)


def _outputs(first: tuple, out: tuple, step_penalty) -> tuple:
    """A backward's outputs, with d value / d step_penalty (the kernels' fourth output) after them when there
    is a penalty."""
    return first if step_penalty is None else first + (out[3],)


def forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, *, open_begin=False, open_end=False,
            step_penalty=None):
    """Values `(B,)` and saved S for x `(B, N, D)`, y `(B, M, D)` under a fused cost; options as
    :func:`forward_cost`."""
    store = memory == "store"  # save the whole table of links
    var = _variant(x, x.shape[0], window, open_begin, open_end, step_penalty)
    window = _window(window)
    D = x.shape[2]
    if _banded("fused", D, memory, x.shape[0], x.shape[1], y.shape[1], x.dtype):
        return _forward_rows(x, y, gamma, cost, x_lengths, y_lengths, window, memory, var)
    if D > FUSED_D_MAX and cost == "sqeuclidean":
        xn, yn, G = _gram_checked(x, y)
        return _run_forward(xn, yn, G, "gram", 0, gamma, x_lengths, y_lengths, window, store, False, var)
    if D > FUSED_D_MAX:
        C = _cost_checked(cost, x, y)
        return _run_forward(None, None, C, "precomputed", 0, gamma, x_lengths, y_lengths, window, store, False, var)
    if memory == "none" and var is None and window is None and _two_ended.applies(
            x.shape[0], x.shape[1], y.shape[1], D, x.dtype, x.get_device()):
        return (_two_ended.forward(x.contiguous(), y.contiguous(), gamma, cost, x_lengths, y_lengths),
                x.new_empty((0,)))
    return _run_forward(x.contiguous(), y.contiguous(), None, cost, D, gamma, x_lengths, y_lengths, window, store,
                        memory == "checkpoint", var)


def backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, needs=None, *,
             open_begin=False, open_end=False, step_penalty=None):
    """(dx `(B, N, D)`, dy `(B, M, D)`, dgamma `(B,)`) of sum_b grad_b · value_b, and dpenalty `(B,)` (grad_b
    d value_b / d step_penalty) as a fourth output when step_penalty is not None.

    needs: which of the three the caller will use (None: all). With fused costs the others come back as scratch
    buffers shared between calls (their values are garbage): a target y and a float gamma need no fresh
    tensors, which cost more host time than a tiny problem's kernels (issue 27). Past FUSED_D_MAX an unused dx or dy
    is None: its GEMMs are not run."""
    var = _variant(x, x.shape[0], window, open_begin, open_end, step_penalty)
    window = _window(window)
    x, y = x.contiguous(), y.contiguous()
    D = x.shape[2]
    if D > FUSED_D_MAX and memory == "checkpoint":
        out = _backward_rows(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, var, needs)
    elif D > FUSED_D_MAX:
        out = _backward_gemm(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, var, needs)
    else:
        if saved.numel() == 0:
            _, saved = _run_forward(x, y, None, cost, D, gamma, x_lengths, y_lengths, window, True, False, var)
        out = _run_backward(grad, x, y, None, None, cost, D, gamma, x_lengths, y_lengths, window, value, saved,
                            memory == "checkpoint", needs, var)
    return _outputs(tuple(out[:3]), out, step_penalty)


def _skips_cost(dtype, saved, needs) -> bool:
    """Whether a large-D store backward runs without its cost table: float32 links hold the normalised weights, so
    the kernel needs the cost only for dgamma (kernels/backward.cu, readc). The table is then not built again (the
    x·yᵀ GEMM, or the l1 cost kernel) and E goes into a fresh buffer."""
    return dtype == torch.float32 and saved.numel() > 0 and needs is not None and not needs[2]


def _table_buffer(x, y):
    """An uninitialised `(B, N, M)` buffer for grad_b · E_b (the kernel writes every element)."""
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    return _alloc(x, B * N * M, x.dtype, "the backward's E table", B, N, M).view(B, N, M)


def _backward_gemm(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, var=None, needs=None):
    """Large D: the cost again by GEMM, E written over it in place (grad_b · E_b), then dx, dy by GEMMs. With var
    a fourth output, as :func:`_run_backward`. needs: as :func:`backward`; without dgamma, float32 builds no cost
    (:func:`_skips_cost`)."""
    skip = _skips_cost(x.dtype, saved, needs)
    if cost == "sqeuclidean":
        return _backward_gram(grad, x, y, gamma, x_lengths, y_lengths, window, value, saved, var, skip, needs)
    C = _table_buffer(x, y) if skip else _cost_checked(cost, x, y)
    if saved.numel() == 0:
        _, saved = _run_forward(None, None, C, "precomputed", 0, gamma, x_lengths, y_lengths, window, True, False, var)
    # grad_b · E_b overwrites C in place (each cell is read, then written, by the same lane; the kernel
    # also zeroes the cells past the lengths), so the backward holds one (B, N, M) buffer besides S.
    out = _run_backward(grad, None, None, None if skip else C, C, "precomputed", 0, gamma, x_lengths, y_lengths,
                        window, value, saved, False, None, var)
    dx, dy = _cost_vjp(cost, x, y, C)
    return (dx, dy) + tuple(out[2:])


def _backward_gram(grad, x, y, gamma, x_lengths, y_lengths, window, value, saved, var=None, skip=False, needs=None):
    """Squared Euclidean, large D: G = x·yᵀ by one GEMM, the kernel (cost "gram") writing grad_b · E_b over G
    and returning its row sums rs and column sums cs; then dx = 2 (rs x - E y), dy = 2 (cs y - Eᵀ x), each one
    GEMM with the scaled input as its addend (where :func:`own_gram_gemm`, both by one gram_grads_kernel). A
    forward + backward launched 14 kernels; the elementwise form of the cost took 31 (benchmarks/OPTIMIZATION_LOG.md,
    "Large D: the Gram cost in the cells"). skip
    (:func:`_skips_cost`): no GEMM for G, only the norms; E goes into a fresh buffer. needs (:func:`backward`): a
    gradient nobody uses is None, its GEMM not run (a target y: 0.4 ms of 3.6 at 32 x 2048², D = 64, float32)."""
    if skip:
        xn, yn = _norms(x, y)
        G = _table_buffer(x, y)
        out = _run_backward(grad, xn, yn, None, G, "gram", 0, gamma, x_lengths, y_lengths, window, value, saved,
                            False, None, var)
    else:
        xn, yn, G = _gram_checked(x, y)
        if saved.numel() == 0:
            _, saved = _run_forward(xn, yn, G, "gram", 0, gamma, x_lengths, y_lengths, window, True, False, var)
        out = _run_backward(grad, xn, yn, G, G, "gram", 0, gamma, x_lengths, y_lengths, window, value, saved, False,
                            None, var)
    rs, cs = out[0], out[1]
    want_x, want_y = _wanted_xy(needs)
    if own_gram_gemm(x.shape[0], x.shape[1], y.shape[1], x.shape[2], x.dtype):
        return _gram_grads(G, x, y, rs, cs, want_x, want_y) + tuple(out[2:])
    # In place on the scaled input: out of place, baddbmm first copies its addend into a new tensor.
    dx = (x * rs.unsqueeze(-1)).baddbmm_(G, y, beta=2.0, alpha=-2.0) if want_x else None
    dy = (y * cs.unsqueeze(-1)).baddbmm_(G.transpose(1, 2), x, beta=2.0, alpha=-2.0) if want_y else None
    return (dx, dy) + tuple(out[2:])


def _gram_grads(E, x, y, rs, cs, want_x: bool, want_y: bool) -> tuple:
    """(dx, dy) = (2 (rs x - E y), 2 (cs y - Eᵀ x)) by one launch of kernels/gram_gemm.cu's gram_grads_kernel, for
    contiguous x `(B, N, D)`, y `(B, M, D)`, E `(B, N, M)` (grad_b · E_b), rs `(B, N)` and cs `(B, M)` (its row and
    column sums); a gradient not wanted is None."""
    B, N, D = x.shape
    M = y.shape[1]
    dx = torch.empty_like(x) if want_x else None
    dy = torch.empty_like(y) if want_y else None
    tiles_x = B * -(-N // _GG_TILE) * -(-D // _GG_TILE) if want_x else 0
    grid = tiles_x + (B * -(-M // _GG_TILE) * -(-D // _GG_TILE) if want_y else 0)
    if grid:
        _launch.launch("gram_gemm", GRAM_GRADS_EXPR[x.dtype], x.get_device(), grid, _GG_THREADS,
                       (E.data_ptr(), x.data_ptr(), y.data_ptr(), rs.data_ptr(), cs.data_ptr(), B, N, M, D,
                        0 if dx is None else dx.data_ptr(), 0 if dy is None else dy.data_ptr(), tiles_x))
    return dx, dy


def _wanted_xy(needs) -> tuple:
    """(dx wanted, dy wanted) of :func:`backward`'s needs (None: both): past FUSED_D_MAX an unwanted one is None and
    its GEMMs are not run (:func:`_backward_gram`, :func:`_backward_rows`)."""
    return (True, True) if needs is None else (bool(needs[0]), bool(needs[1]))


def _row_bands(N: int, h: int):
    """The row bands [r0, r1) of h rows (the last one shorter), top to bottom."""
    return [(r0, min(N, r0 + h)) for r0 in range(0, N, h)]


def _forward_band_rows(plan, h: int, B: int, N: int, M: int, dtype: torch.dtype) -> int:
    """Rows per band of a checkpointed forward: as many as the backward's band of h rows and its tile buffers take
    together (a multiple of TH, at most N). The backward holds both at once, so taller forward bands leave the
    call's peak where it was, and each band fewer saves a refill of the chunks' pipeline: B = 32, N = M = 2048,
    D = 64 runs its forward in one band instead of two (benchmarks/OPTIMIZATION_LOG.md, "The checkpointed forward
    in the backward's footprint"). Band boundaries are tile boundaries, so the passes need not agree on h."""
    row = B * M * dtype.itemsize
    tiles = B * plan.nch * plan.tile_numel() * _saved_dtype(dtype).itemsize
    return min(N, max(h, (h * row + tiles) // row // plan.TH * plan.TH))


def _forward_row_plan(B: int, N: int, M: int, dtype: torch.dtype, device_index: int, memory: str) -> tuple:
    """(plan, rows per band) of :func:`_forward_rows` before :func:`_fit_rows` asks for the memory: the row plan's
    bands, taller for a checkpointed forward (:func:`_forward_band_rows`). The C++ launcher takes a checkpointed
    forward of one band (fastpath.py, _checkpoint_plan) by this same rule."""
    plan, h = _row_plan(B, N, M, dtype, device_index)
    if memory == "checkpoint":
        h = _forward_band_rows(plan, h, B, N, M, dtype)
    return plan, h


def _fit_rows(h: int, TH: int, row_bytes: int, device) -> int:
    """h, or where a band of h rows (row_bytes each) would take more than half of the memory available now, the
    tallest multiple of TH (at least TH) that does not: memory="checkpoint" at large D then runs in more, shorter
    bands (slower; the same results but for each band's GEMM rounding) instead of running out of memory. Any
    multiple of TH will do, in either pass: band boundaries are tile boundaries, so the forward and the backward
    need not agree on h. Not inside a CUDA-graph capture (no memory query there). The driver is asked only for a
    band above a quarter of what PyTorch has not allocated of the device (its counters, no driver call): the query
    costs host time the launches would otherwise get ahead with."""
    if h <= TH or torch.cuda.is_current_stream_capturing():
        return h
    if 4 * h * row_bytes <= _unallocated_bytes(device):
        return h
    room = _available_bytes(device) // 2
    return h if h * row_bytes <= room else max(TH, room // row_bytes // TH * TH)


def _unallocated_bytes(device) -> int:
    """The device's memory less what PyTorch has allocated on it (its own counters: no driver call)."""
    return torch.cuda.get_device_properties(device).total_memory - _allocator_bytes(device)[0]


def _available_bytes(device) -> int:
    """Device memory a new allocation can get: free, and held by PyTorch's caching allocator but unused."""
    free = torch.cuda.mem_get_info(device)[0]
    allocated, reserved = _allocator_bytes(device)
    return free + reserved - allocated


def _allocator_bytes(device) -> tuple:
    """(allocated, reserved) bytes of PyTorch's caching allocator on the device, from its nested statistics:
    torch.cuda.memory_allocated and memory_reserved each flatten the whole statistics dict first, host time in
    front of every large-D checkpoint's first kernel (and its backward's): without it those calls took 0.1-0.4 ms
    less on an H200 VM (benchmarks/OPTIMIZATION_LOG.md, "The checkpoint's host lead-in")."""
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    return (stats.get("allocated_bytes", {}).get("all", {}).get("current", 0),
            stats.get("reserved_bytes", {}).get("all", {}).get("current", 0))


def _row_table(cost, x, y, r0, r1, N):
    """The table of rows [r0, r1) for a row band: x[r0:r1]·yᵀ for sqeuclidean (the kernels' "gram" cost, with the
    norms beside it), the l1 kernel's cost for l1; out of memory, the MemoryError of :func:`_cost_memory_error`."""
    xb = x[:, r0:r1]
    if cost != "sqeuclidean":
        return _cost_checked(cost, xb, y, N)
    try:
        return _gram_table(xb, y)
    except torch.OutOfMemoryError as err:
        raise _cost_memory_error(xb, y, N) from err


def _gram_table(x, y):
    """x·yᵀ `(B, N, M)` in x's dtype, also under autocast (see :func:`_gram`): the store path's Gram matrix, a row
    band's table."""
    if torch.is_autocast_enabled("cuda"):
        with torch.autocast("cuda", enabled=False):
            return _gram_table(x, y)
    return torch.bmm(x, y.transpose(1, 2))


def _forward_rows(x, y, gamma, cost, x_lengths, y_lengths, window, memory, var=None):
    """Large D with bounded memory (memory="checkpoint", or a value-only pass over a large table), one band of rows
    at a time: the band's table by a GEMM of x's rows (:func:`_row_table`: x·yᵀ, whose cost the kernels form in the
    cells, for sqeuclidean), then forward_chain_kernel over those rows, every chunk of every pair at once, starting
    from the row checkpoint above the band that the previous launch wrote (kernels/forward.cu, row bands). A
    value-only pass keeps checkpoints only above each band (TH = h), in a buffer of its own."""
    B, N, M, dev = x.shape[0], x.shape[1], y.shape[1], x.device.index
    plan, h = _forward_row_plan(B, N, M, x.dtype, dev, memory)
    h = _fit_rows(h, plan.TH, B * M * x.dtype.itemsize, x.device)
    if memory != "checkpoint":
        plan = _launch.Plan(plan.K, plan.W, plan.nch, True, h)
    bands = _row_bands(N, h)
    value, saved, bufs = _forward_chain_buffers(x, B, N, M, plan, False, var, len(bands))
    gram = cost == "sqeuclidean"
    xn, yn = _norms(x, y) if gram else (None, None)
    expr = _forward_chain_expr(x.dtype, "gram" if gram else "precomputed", 0, plan, window is not None, False, var)
    for k, (r0, r1) in enumerate(bands):
        C = _row_table(cost, x, y, r0, r1, N)
        _launch_forward_chain(expr, dev, plan, xn, yn, C, gamma, x_lengths, y_lengths, window, value, None,
                              bufs, B, N, M, var, rows=(r0, r1), region=k, stagger=0)
        del C  # the caching allocator hands it to the next band's GEMM, after this launch on the same stream
    if memory != "checkpoint":
        saved = x.new_empty((0,))  # (the checkpoints and bufs are freed after the queued launches, same stream)
    return value, saved


def _backward_rows(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, var=None, needs=None):
    """memory="checkpoint" for large D, one band of rows at a time from the bottom up: the band's table by GEMM
    (:func:`_row_table`), the checkpointed backward_chain_kernel over its rows writing grad_b · E_b over it (the row
    below entering, and the band's top row leaving, through a `(B, M, 2)` hand-over row), then the band's dx rows
    and its share of dy by GEMMs; sqeuclidean as :func:`_backward_gram` (E's row sums by row, its column sums added
    up over the bands by the kernel, Eᵀx by a GEMM that accumulates). With var a fourth output, as
    :func:`_run_backward`. needs (:func:`backward`): a gradient nobody uses is None, its GEMMs not run."""
    B, N, M, dev = x.shape[0], x.shape[1], y.shape[1], x.device.index
    plan, h = _row_plan(B, N, M, x.dtype, dev)
    dgamma = torch.empty(B, dtype=x.dtype, device=x.device)
    endbuf = dpen = None
    if var is not None:
        if var.open_end:
            endbuf = _end_in(saved, _table_numel(plan, B, N, x.dtype, "checkpoint"))
        dpen = x.new_empty((B,)) if var.penalty else None
    gram = cost == "sqeuclidean"
    regions = -(-N // plan.TH)  # sync for the most bands _fit_rows can make
    bufs = _backward_chain_buffers(x, B, N, M, 1 if gram else 0, plan, saved, var, regions)
    bands = _row_bands(N, _fit_rows(h, plan.TH, B * M * x.dtype.itemsize, x.device))  # (the tiles are out already)
    rowb = x.new_empty((B * M * 2,)) if len(bands) > 1 else None
    expr = _backward_chain_expr(x.dtype, "gram" if gram else "precomputed", 0, plan, window is not None, var)
    grad = _like(grad, x)
    want_x, want_y = _wanted_xy(needs)
    dx, dy = (torch.empty_like(x) if want_x else None), None
    xn, yn = _norms(x, y) if gram else (None, None)
    rs, cs = (x.new_empty((B, N)), x.new_empty((B, M))) if gram else (None, None)  # E's row and column sums
    for k, (r0, r1) in enumerate(reversed(bands)):
        xb = x[:, r0:r1]
        C = _row_table(cost, x, y, r0, r1, N)
        _launch_backward_chain(expr, dev, plan, grad, xn, yn, C, C, gamma, x_lengths, y_lengths, window, value,
                               saved, rs, cs, dgamma, bufs, B, N, M, var, endbuf, dpen, rows=(r0, r1), region=k,
                               stagger=0, rowb=rowb)
        if gram:  # dx = 2 (rs x - E y) by rows; dy = 2 (cs y - Eᵀ x), Eᵀ x summed over the bands
            if want_x:
                dx[:, r0:r1] = torch.baddbmm(xb * rs[:, r0:r1].unsqueeze(-1), C, y, beta=2.0, alpha=-2.0)
            if want_y:
                dy = torch.bmm(C.transpose(1, 2), xb) if dy is None else dy.baddbmm_(C.transpose(1, 2), xb)
        else:
            gx, gy = _cost_vjp(cost, xb, y, C)
            if want_x:
                dx[:, r0:r1] = gx
            if want_y:
                dy = gy if dy is None else dy.add_(gy)
            del gx, gy
        del C
    if gram and want_y:
        dy = torch.addcmul(dy, y, cs.unsqueeze(-1), value=-1.0).mul_(-2.0)
    return (dx, dy, dgamma) if var is None else (dx, dy, dgamma, dpen)


def _gram(x, y):
    """(|x_i| `(B, N)`, |y_j| `(B, M)`, x·yᵀ `(B, N, M)`): the squared Euclidean cost of large D as the kernels
    take it (cost "gram", kernels/common.cuh): one GEMM and two norms, no elementwise pass over (B, N, M); where
    :func:`own_gram_gemm`, all three by one launch of kernels/gram_gemm.cu.
    In x's dtype also under autocast, which would lower the GEMM to half precision: the kernels read x's dtype,
    and |x|² + |y|² - 2 x·y cancels too much for a half-precision x·y (:func:`_gram_table`)."""
    if not own_gram_gemm(x.shape[0], x.shape[1], y.shape[1], x.shape[2], x.dtype):
        return *_norms(x, y), _gram_table(x, y)
    return _gram_own(x, y)


def _gram_own(x, y):
    """:func:`_gram` by one launch of kernels/gram_gemm.cu's gram_xy_kernel (float32 or float64 x and y)."""
    x, y = x.contiguous(), y.contiguous()
    B, N, D = x.shape
    M = y.shape[1]
    xn = torch.empty((B, N), dtype=x.dtype, device=x.device)
    yn = torch.empty((B, M), dtype=x.dtype, device=x.device)
    G = torch.empty((B, N, M), dtype=x.dtype, device=x.device)
    tiles = B * -(-N // _GG_TILE) * -(-M // _GG_TILE)
    grid = tiles + -(-B * (N + M) // _GG_THREADS)
    if grid:
        _launch.launch("gram_gemm", GRAM_XY_EXPR[x.dtype], x.get_device(), grid, _GG_THREADS,
                       (x.data_ptr(), y.data_ptr(), B, N, M, D, G.data_ptr(), xn.data_ptr(), yn.data_ptr(), tiles))
    return xn, yn, G


def _norms(x, y):
    """(|x_i| `(B, N)`, |y_j| `(B, M)`): the norms the "gram" cost's kernels take beside x·yᵀ, in x's dtype, by one
    launch of kernels/norms.cu (float64 sums; the C++ launcher runs the same kernel)."""
    x, y = x.contiguous(), y.contiguous()
    B, N, D = x.shape
    M = y.shape[1]
    xn = torch.empty((B, N), dtype=x.dtype, device=x.device)
    yn = torch.empty((B, M), dtype=x.dtype, device=x.device)
    rows = B * (N + M)
    if rows:
        dev = x.get_device()
        _launch.launch("norms", NORMS_EXPR[x.dtype], dev, -(-rows // _NORMS_THREADS), _NORMS_THREADS,
                       (x.data_ptr(), B * N, y.data_ptr(), B * M, D, xn.data_ptr(), yn.data_ptr()))
    return xn, yn


NORMS_EXPR = {torch.float32: "sdtw::norms_kernel<float>", torch.float64: "sdtw::norms_kernel<double>"}
_NORMS_THREADS = 256
GRAM_XY_EXPR = {t: f"sdtw::gram_xy_kernel<{c}>" for t, c in _launch._CTYPE.items()}
GRAM_GRADS_EXPR = {t: f"sdtw::gram_grads_kernel<{c}>" for t, c in _launch._CTYPE.items()}
_GG_TILE, _GG_THREADS = 64, 256  # kernels/gram_gemm.cu's GG_TILE, GG_THREADS


def _gemm_cost(cost, x, y):
    """`(B, N, M)` cost for large D without a (B, N, M, D) temporary: |x|² + |y|² - 2 x·yᵀ (one batched
    GEMM, the rest in place, clamped at 0) for sqeuclidean, l1.py's kernel for l1. In x's dtype also under autocast
    (see :func:`_gram`)."""
    if torch.is_autocast_enabled("cuda"):
        with torch.autocast("cuda", enabled=False):
            return _gemm_cost(cost, x, y)
    if cost == "sqeuclidean":
        C = torch.bmm(x, y.transpose(1, 2)).mul_(-2.0)
        return C.add_(x.square().sum(-1, keepdim=True)).add_(y.square().sum(-1).unsqueeze(1)).clamp_min_(0.0)
    return _l1.cost(x, y)


def _cost_vjp(cost, x, y, dC):
    """(dx, dy) from dC `(B, N, M)`: GEMMs for sqeuclidean, one kernel per side for l1 (kernels/l1.cu)."""
    if cost == "sqeuclidean":
        return costs.cost_vjp(cost, x, y, dC)
    return _l1.vjp(x, y, dC)


# --- second order (issue 24) ------------------------------------------------------------------------

from .hvp import hvp_cost as _hvp_cost  # noqa: E402  (kernels/hvp.cu: the Hessian-vector product, SECOND_ORDER.md)
from .hvp import hvp_xy as _hvp_xy  # noqa: E402
from .hvp import value_grad_hvp_xy as _value_grad_hvp_xy  # noqa: E402

#: Whether the double backward of a fused squared Euclidean or l1 call takes :func:`hvp_xy` (tests switch it off to
#: compare with the hvp_cost path).
HVP_XY = True


#: hvp_cost takes the alignment variants (read by softdtw._ops).
HVP_VARIANTS = True


def hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, *, open_begin=False, open_end=False,
             step_penalty=None, penalty_dot=None):
    """Second order in a precomputed cost (:func:`softdtw.backends.cuda.hvp.hvp_cost`): (E, vgamma, Edot,
    vgamma_dot), and (vpen, vpen_dot) after them when ``step_penalty`` is not None; the alignment variants
    (open_begin, open_end, step_penalty with its direction penalty_dot; SECOND_ORDER.md, "Variants") as
    reference.hvp_cost."""
    return _hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, open_begin=open_begin,
                     open_end=open_end, step_penalty=step_penalty, penalty_dot=penalty_dot)


def _xy_applies(cost, x) -> bool:
    """Whether the kernels with the cost formed in the HVP's cells may take a call (before their own plan decides):
    HVP_XY on, "sqeuclidean" or "l1", D <= FUSED_D_MAX."""
    return HVP_XY and cost in FUSED_COSTS and x.shape[2] <= FUSED_D_MAX


def hvp_xy(cost, x, y, gamma, x_lengths, y_lengths, window, xdot, ydot, gamma_dot, *, gamma_terms=True):
    """The double backward's contractions with the cost formed in the kernel (:func:`softdtw.backends.cuda.hvp.hvp_xy`):
    (s1, vgamma, vgamma_dot, dx, dy), or None where it does not apply (a cost other than "sqeuclidean" and "l1",
    D > FUSED_D_MAX, pairs wider than its kernel, HVP_XY off); the caller then builds C and C-dot and takes
    :func:`hvp_cost`. gamma_terms=False: gamma is a constant (gamma_dot taken as 0), vgamma and vgamma_dot None."""
    if not _xy_applies(cost, x):
        return None
    return _hvp_xy(x, y, gamma, x_lengths, y_lengths, window, xdot, ydot, gamma_dot, cost, gamma_terms=gamma_terms)


def value_grad_hvp(cost, x, y, gamma, x_lengths, y_lengths, window, xdot, ydot):
    """Value, gradient and one Hessian-vector product in one launch (:func:`softdtw.functional.soft_dtw_hvp`'s fast
    path; :func:`softdtw.backends.cuda.hvp.value_grad_hvp_xy`): (v, gx, gy, hx, hy), or None where it does not apply
    (a cost other than "sqeuclidean" and "l1", D > FUSED_D_MAX, pairs wider than its kernel, HVP_XY off); the caller
    then takes the double backward."""
    if not _xy_applies(cost, x):
        return None
    return _value_grad_hvp_xy(x, y, gamma, x_lengths, y_lengths, window, xdot, ydot, cost)
