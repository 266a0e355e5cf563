"""Launch layer: grid choice (the plan), template arguments, and launches on PyTorch's current stream.

A *plan* fixes how one pair is laid out on the GPU (kernels/common.cuh): K columns per lane, W warps
per pair, and ``nch`` chunks of CW = 32·W·K columns to cover M. It is a pure function of the problem
size and the device's SM count, so :func:`softdtw.backends.cuda.saved_spec` and the kernels agree on
the saved table's shape, ``(B, nch · N · CW)``.

Launches go through the CUDA driver (``cuLaunchKernel`` via ctypes) on ``torch.cuda.current_stream()`` (a
non-default stream and CUDA-graph capture work unchanged); arguments are raw pointers (``tensor.data_ptr()``)
and NumPy scalars.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import struct
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from . import compile as _compile

#: Column widths per lane and warps per pair the kernels are instantiated with.
K_CHOICES = (1, 2, 4, 8, 16)
W_CHOICES = (1, 2, 4, 8, 16)
#: Pairs per block when a pair has one warp (W == 1).
PAIRS_PER_BLOCK = 4
#: Warps per SM that keep the MUFU pipe busy (research/gpu-kernels.md: >= 16 needed).
_RESIDENT_WARPS_PER_SM = 16

COST_IDS = {"sqeuclidean": 0, "l1": 1, "precomputed": 2, "gram": 3}  # kernels/common.cuh, Cost
_CTYPE = {torch.float32: "float", torch.float64: "double"}


@dataclass(frozen=True)
class Plan:
    K: int  # columns per lane
    W: int  # warps per pair
    nch: int  # column chunks
    chain: bool = False  # one block per (pair, chunk), chunks chained through L2 flags (kernels' MODE_CHAIN)
    TH: int = 0  # rows per tile of memory="checkpoint" (chained plans only)

    @property
    def CW(self) -> int:
        """Columns per chunk."""
        return 32 * self.W * self.K

    def saved_numel(self, N: int) -> int:
        """Elements per pair of the step-major table S: nch chunks of N step rows of CW values."""
        return self.nch * N * self.CW

    def column_numel(self, N: int, frames: bool) -> int:
        """Elements per pair of the chunks' last columns (the hand-over between chunks): nch·N values,
        each with its frame when the pass keeps frames (:func:`has_frames`)."""
        return self.nch * N * (2 if frames else 1)

    def checkpoint_numel(self, N: int, frames: bool) -> int:
        """Elements per pair that memory="checkpoint" saves: R of every chunk's last column
        (:meth:`column_numel`) and R of the row above every tile (ceil(N / TH) + 1 rows of nch·CW, and
        with frames each lane's frame, nch·32·W: tiles are staggered per chunk, kernels/forward_pair.cuh,
        tile_shift)."""
        row = self.CW + (32 * self.W if frames else 0)
        return self.column_numel(N, frames) + (-(-N // self.TH) + 1) * self.nch * row

    def tile_numel(self) -> int:
        """Links per block in the checkpointed backward: two tiles of TH step rows of CW columns."""
        return 2 * self.TH * self.CW

    def block(self) -> int:
        return 32 * self.W if (self.chain or self.W > 1) else 32 * PAIRS_PER_BLOCK

    def grid(self, B: int) -> int:
        if self.chain:
            return B * self.nch
        return -(-B // PAIRS_PER_BLOCK) if self.W == 1 else B


def k_max(dtype: torch.dtype, D: int) -> int:
    """Largest K whose y columns (and dy accumulators) fit in registers: K·D <= 32 (8 for float64).

    float64 caps K at 4: at K = 8 its backward needs 255 registers and spills.
    """
    budget = 32 if dtype == torch.float32 else 8
    cap = 16 if dtype == torch.float32 else 4
    k = max(1, min(cap, budget // max(D, 1)))
    return 1 << (k.bit_length() - 1)  # a power of two


#: Shared memory for the backward's cp.async ring: two stages of (link + C) per thread must fit 40 KB.
_RING_BYTES = 40960


def k_ring(dtype: torch.dtype, D: int, W: int) -> int:
    """Largest K (power of two) whose ring stage, threads · K · bytes per cell, fits twice in 40 KB."""
    threads = 32 * PAIRS_PER_BLOCK if W == 1 else 32 * W
    item = 4 if dtype == torch.float32 else 8
    per_cell = item + (item if D == 0 else 0)  # link word, plus C for a precomputed cost
    k = max(1, _RING_BYTES // (2 * threads * per_cell))
    return 1 << (k.bit_length() - 1)


@lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


#: Chained plans: columns per lane (their backward also holds the recompute's registers) and the rows a
#: chunk runs behind the one on its left (a chunk reads the left column 32 rows at a time, a block ahead).
CHAIN_K_MAX = 8
_CHAIN_LAG_ROWS = 64
#: The modelled gain a chained plan needs over the sequential one for a float32 fused cost whose chained blocks fill
#: at most half the GPU (plan_estimate; 0.7 elsewhere).
CHAIN_MARGIN_F32 = 0.8
#: Precomputed and Gram costs (large D) of pairs at least this long, in batches of at most COST_CHAIN_MAX_B
#: pairs (the range the sweep covered), run chained: float32 W = 4, float64 K = 4, W = 2 (choose_plan).
COST_CHAIN_MIN_N, COST_CHAIN_MAX_B = 1024, 128
#: Budget for the checkpointed backward's tile buffers, bytes (all blocks of one call together).
TILE_BYTES = 1 << 30
#: Rows between the checkpoint tile boundaries of neighbouring chunks, per warp of a chunk and fixed
#: (kernels/forward_pair.cuh, tile_shift): about the backward chain's lag. A setting, not part of the plan:
#: the forward and the backward of one step must see the same value.
STAGGER_PER_WARP, STAGGER_FIXED = 32, 96


def tile_stagger(W: int) -> int:
    return STAGGER_PER_WARP * W + STAGGER_FIXED


def tile_rows(B: int, N: int, K: int, W: int, nch: int, word_bytes: int, want: int | None = None,
              budget: int = TILE_BYTES) -> int:
    """Rows per checkpoint tile: `want` (tests, benchmarks) or 1024, halved while the tile buffers of all
    B·nch blocks exceed `budget` bytes; never below 2·32W + 32 (the backward's double buffer needs
    TH > 32W + ring depth). A pair that fits in one tile gets TH = N."""
    th_min = 64 * W + 32
    th = want if want is not None else min(1024, N)
    while want is None and th // 2 >= th_min and B * nch * 2 * th * 32 * W * K * word_bytes > budget:
        th //= 2
    return N if th >= N else max(th, th_min)


#: Largest K whose sequential passes end at the last lane holding a column of a narrow pair (every cost;
#: kernels/forward_pair.cuh, trims_pass).
TRIM_K_MAX = 4


@lru_cache(maxsize=4096)
def choose_plan(B: int, N: int, M: int, kmax: int, sms: int, kring: tuple = (), checkpoint: bool = False,
                word_bytes: int = 4, fused: bool = False) -> Plan:
    """Pick (K, W) by a model of the kernels' time (see :func:`plan_estimate`)."""
    return plan_estimate(B, N, M, kmax, sms, kring, checkpoint, word_bytes, fused)[0]


@lru_cache(maxsize=4096)
def plan_estimate(B: int, N: int, M: int, kmax: int, sms: int, kring: tuple = (), checkpoint: bool = False,
                  word_bytes: int = 4, fused: bool = False) -> tuple:
    """(plan, the model's time for it in arbitrary units; inf where no model applies): pick (K, W) by a model of
    the kernels' time, fitted to a sweep of layouts on an H100.

    One step of a pair (fwd + bwd) costs about 75 ns·K + 330 ns + 30 ns·W (benchmarks/OPTIMIZATION_LOG.md,
    "layout sweep"): K dependent cells, a fixed per-step overhead (shuffles, ring, bookkeeping), and the
    cost of W warps sharing one SM and a barrier. A pair needs nch·(N + 32W − 1) steps. The GPU runs
    ~16 warps per SM at full rate: a batch with fewer warps is latency-bound (more warps per pair shorten
    the pipeline), a bigger one throughput-bound (then W = 1 and large K waste the least).

    Chained plans (one block per pair and chunk, the chunks of a pair running at once on different SMs)
    need about N + nch·(32W + 64) steps per pair instead of nch·(N + 32W); they are taken when the model
    says they are clearly faster (few, long pairs) and always for memory="checkpoint", which only they
    implement.

    K <= TRIM_K_MAX (every cost): a pair narrower than one chunk takes N + ceil(M / K) - 1 steps, not
    N + 32W - 1 (the passes end at the last lane holding a column), so a one-warp layout wider than the
    pair is no loss: a 16-column pair runs K = 2 on 8 lanes in 23 steps instead of 31.
    """
    if not fused and not checkpoint and min(N, M) >= COST_CHAIN_MIN_N and B <= COST_CHAIN_MAX_B:
        # A precomputed / Gram cost of long pairs runs chained (first K = 4, W = 2). The model below was fitted to
        # fused-cost kernels; with a cost ring its pick (one block per pair, K = 4..8 and W = 8) left most SMs
        # idle: B = 32, N = M = 2048, D = 64 forward + backward 10.2 -> 6.4 ms, B = 16 9.0 -> 4.4, B = 32,
        # N = 1024 2.98 -> 2.32, B = 128, N = 1024 6.39 -> 5.72, B = 4, N = 4096 8.44 -> 7.49 (H100,
        # benchmarks/probes/large_d_sweep.py, OPTIMIZATION_LOG "Large D: chained layouts for the cost ring").
        # Pairs of 512 steps or fewer stay with the model (its pick was 1-13 % ahead there).
        if word_bytes == 4:
            # float32: W = 4, K = 4 while its blocks' warps fill at most a quarter of the GPU, else K = 8: H100, D = 64,
            # against K = 4, W = 2: 32 x 2048² 4.36 -> 4.12 ms, 16 x 2048² 3.55 -> 3.33, 32 x 1024² 1.89 -> 1.75,
            # 4 x 4096² 6.30 -> 5.87; with K = 8: 128 x 1024² 3.62 -> 3.17, 64 x 2048² (D = 32) 5.74 -> 5.03
            # (OPTIMIZATION_LOG "Large D: four warps per chained block").
            K = min(4, kmax, kring[2] if kring else 4)
            if B * -(-M // (128 * K)) * 4 * 4 > sms * _RESIDENT_WARPS_PER_SM:  # B·nch·W past a quarter
                K = min(8, kmax, kring[2] if kring else 8)
            return Plan(K, 4, -(-M // (128 * K)), True, 0), math.inf
        K = min(4, kmax, kring[1] if kring else 4)
        return Plan(K, 2, -(-M // (64 * K)), True, 0), math.inf
    resident = sms * _RESIDENT_WARPS_PER_SM
    best, best_time = None, math.inf
    best_chain, chain_time, chain_seq_units = None, math.inf, math.inf
    for wi, W in enumerate(W_CHOICES):
        for K in K_CHOICES:
            if K > kmax or (kring and K > kring[wi]):
                continue
            CW = 32 * W * K
            # The kernels trim W > 1 passes too; the model counts it for one-warp layouts only, the ones it
            # lets grow wider than the pair (a wider block would idle whole warps).
            trims = K <= TRIM_K_MAX and W == 1
            if CW >= 2 * M and (K > 1 or W > 1) and not trims:
                continue  # half the lanes would idle: a narrower layout is never worse
            nch = -(-M // CW)
            step = K + 4.4 + (0.4 * W if W > 1 else 0.0)
            steps = nch * (N + 32 * W - 1)
            if trims and nch == 1:
                steps = N + -(-M // K) - 1
            time = steps * step * max(1.0, B * W / resident)
            if time < best_time * 0.97:  # prefer the earlier (narrower) layout on near-ties
                best, best_time = Plan(K, W, nch), time
            if K > CHAIN_K_MAX or W > 4:
                continue  # W <= 4: the range the chained model below was fitted on
            # Chained layouts are latency-bound: fitted to a forward sweep on an H100 (K, W in 1..8 x 1..4,
            # B = 1 / 16, N = 8192..65536, benchmarks/OPTIMIZATION_LOG.md; mean error 4 %, max 11 %):
            # a step costs ~28 ns K + 385 ns - 17 ns W, and a chunk runs ~48 W rows behind its left neighbour.
            cstep = 28 * K + 385 - 17 * W
            path = (N + (nch - 1) * 48 * W + 32 * W) * cstep
            work = B * nch * W * (N + 32 * W) * cstep / resident
            ctime = max(path, work)
            if ctime < chain_time * 0.97:
                # The sequential model's estimate of the same layout, to compare like with like below.
                best_chain, chain_time = (K, W, nch), ctime
                chain_seq_units = max(_chain_steps(N, nch, W), B * nch * W * (N + 32 * W) / resident) * step
    # The chained model is optimistic (measured/modelled ~1.1 at N = 2048), hence a margin. float32 fused costs whose
    # chained blocks fill at most half of the GPU take a chained plan at a smaller modelled gain: H100, B = 8..64, N = M
    # = 2048, D = 1, the model's 0.77 was measured 0.85-0.92 forward + backward (value-only 0.72) against the
    # sequential K = 8, W = 8, and 1024 steps (0.91 modelled) stay sequential, 1.08-1.16 measured
    # (OPTIMIZATION_LOG.md, "Chained plans for fused costs at N = 2048").
    margin = 0.7
    if best_chain is not None and fused and word_bytes == 4 and B * best_chain[2] * best_chain[1] * 2 <= resident:
        margin = CHAIN_MARGIN_F32
    if best_chain is not None and (checkpoint or (best_chain[2] > 1 and chain_seq_units < margin * best_time)):
        K, W, nch = best_chain
        return Plan(K, W, nch, True, tile_rows(B, N, K, W, nch, word_bytes) if checkpoint else 0), chain_seq_units
    return best, best_time


_forced: list = []
#: Called with no argument whenever forced_plan enters or leaves (fastpath.py: the ops' C++ kernels keep out while a
#: plan is forced, their cached plans being the planner's).
force_hooks: list = []


@contextlib.contextmanager
def forced_plan(K: int, W: int, chain: bool = False, TH: int | None = None):
    """Run every launch inside the block with K columns per lane and W warps per pair (tests, benchmarks),
    chained (one block per pair and chunk) or not; TH overrides the checkpoint tile height.

    The chunk count follows from M. Plans differ in layout only, never in results beyond rounding.
    memory="checkpoint" always runs chained.
    """
    if K not in K_CHOICES or W not in W_CHOICES:
        raise ValueError(f"K must be one of {K_CHOICES} and W one of {W_CHOICES}; got K={K}, W={W}.")
    _forced.append((K, W, chain, TH))
    for hook in force_hooks:
        hook()
    try:
        yield
    finally:
        _forced.pop()
        for hook in force_hooks:
            hook()


def plan_for(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int,
             checkpoint: bool = False) -> Plan:
    """The plan for a problem; D = 0 for a precomputed cost. checkpoint: a chained plan with tiles."""
    if _forced:
        kring = _krings(dtype, D)
        K, W, chain, TH = _forced[-1]
        K = min(K, kring[W_CHOICES.index(W)])  # what the shared-memory ring allows
        nch = -(-M // (32 * W * K))
        if checkpoint:
            word = 4 if dtype == torch.float32 else 8
            return Plan(K, W, nch, True, tile_rows(B, N, K, W, nch, word, TH))
        return Plan(K, W, nch, chain)
    return _planned(B, N, M, D, dtype, device_index, checkpoint)


def row_band_plan(B: int, N: int, M: int, dtype: torch.dtype, device_index: int, band_bytes: int) -> tuple:
    """(plan, rows per band) for a large-D cost built one band of rows at a time (memory="checkpoint", and value-only
    passes over a table too large to build whole).

    A band of h rows holds B·h·M cost values, at most `band_bytes` (at least one tile of rows); h is a multiple of
    the tile height TH, whose tile buffers (two tiles of TH rows per block, all B·nch blocks at once) take at most
    `band_bytes` too. Every chunk of every pair runs in each band, and the band's top row is a tile boundary: the
    tiles are not staggered (the launches pass stagger 0). Under :func:`forced_plan` the forced K, W (and TH) are
    kept. A pair of N <= h rows is one band.
    """
    item = dtype.itemsize  # a C value and a link word alike: 4 bytes for float32, 8 for float64
    if _forced:
        plan = plan_for(B, N, M, 0, dtype, device_index, checkpoint=True)
        return _row_band(B, N, M, plan.K, plan.W, item, band_bytes, _forced[-1][3])
    K = _row_band_k(M, dtype)
    plan, h = _row_band(B, N, M, K, 1, item, band_bytes)
    if h >= ROW_BAND_W2_MIN_ROWS and K <= _krings(dtype, 0)[W_CHOICES.index(2)] and 64 * K < 2 * M:
        plan2, h2 = _row_band(B, N, M, K, 2, item, band_bytes)
        if _chain_steps(h, plan.nch, 1) > ROW_BAND_W2_GAIN * _chain_steps(h2, plan2.nch, 2):
            return plan2, h2
    return plan, h


def _row_band(B: int, N: int, M: int, K: int, W: int, item: int, band_bytes: int, TH: int | None = None) -> tuple:
    """(plan, rows per band) of row bands laid out K, W (row_band_plan)."""
    nch = -(-M // (32 * W * K))
    TH = tile_rows(B, N, K, W, nch, item, TH, band_bytes)
    h = max(TH, band_bytes // max(1, B * M * item) // TH * TH)
    return Plan(K, W, nch, True, TH), min(h, N)


#: Two warps per chunk for row bands where the planner's model of a band's pass (_chain_steps) shortens by more than
#: this: half the chunks, so half the lags a band refills, at ~11-19 % more time per step (the block's barrier).
#: H200, benchmarks/probes/ckpt_layout_sweep.py, backward kernels W = 1 -> 2 against the model's ratio: 32 x 2048²
#: 2.62 -> 2.41 ms (1.258), 32 x 1024² 1.16 -> 1.09 (1.267), 1 x 16384² 16.9 -> 15.1 (1.251), float64 and l1 at
#: 2048² -3 % and -7 % (1.258); slower where it is at most 1.2: 64 x 256² (1.20) +24 %, 8 x 4096 x 1024 (1.103)
#: +3 %, 16 x 400 x 300 (1.054) +12 % (OPTIMIZATION_LOG.md, "Row bands of two warps"). Only for bands of at least
#: ROW_BAND_W2_MIN_ROWS rows (W = 1's): every measured gain had 512 or more; shorter bands pay for W = 2's taller
#: tiles in memory (64 x 256²: 49 -> 65 MB) and were not measured at a model ratio above 1.2.
ROW_BAND_W2_GAIN, ROW_BAND_W2_MIN_ROWS = 1.22, 512


def _chain_steps(rows: int, nch: int, W: int) -> int:
    """Lane steps of a chained pass over `rows` rows in nch chunks of W warps, as the planner models it: the rows,
    then each further chunk _CHAIN_LAG_ROWS + 32 W rows behind the one on its left (plan_estimate, row_band_plan)."""
    return rows + (nch - 1) * (32 * W + _CHAIN_LAG_ROWS) + 32 * W


def _row_band_k(M: int, dtype: torch.dtype) -> int:
    # The widest K <= 4 (one warp per block) whose chunk is less than twice as wide as y. H100, B = 32, N = M = 2048,
    # D = 64, 4 bands: K = 4, W = 1 10.7 ms; K = 4, W = 2 10.0; K = 8, W = 1 10.0; K = 2 22.3; K = 1 39.7 (each
    # band refills one lag per chunk, so few wide chunks win); 2 bands: K = 4 8.1-8.6, K = 8 8.4-8.9, within noise
    # (OPTIMIZATION_LOG.md, "Row bands"). The column bands' sweep had put K = 4, W = 1 first too. Re-asked on an
    # H200 after the recompute's ring (ckpt_layout_sweep.py over eight shapes): K = 4 stays; K = 8 or W = 4 win at
    # one shape each by under 2 %, and lose elsewhere (W = 4 at 32 x 1024² +5 %, K = 8 at 8 x 4096 x 1024 +17 %).
    for k in (4, 2):
        if k <= _krings(dtype, 0)[0] and 32 * k < 2 * M:
            return k
    return 1


def transposes(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int) -> bool:
    """Whether pairs of N > M steps run faster transposed, as (y, x): sdtw(x, y) = sdtw(y, x) for a symmetric
    cost, and a pass takes about N + ceil(M / K) steps for N rows and M columns (the lanes' skew), so a few pairs
    are quicker with the shorter side as rows. Decided by the planner's model of both (D = 0: a cost table);
    never while a plan is forced. H100, GPU time of a training step, forward + backward (OPTIMIZATION_LOG.md,
    "Transposed pairs"): 16 x 1000 x 200, D = 1: 501 -> 278 us; speech (16 x 400 x 300, D = 80): 486 -> 430 us.
    """
    return N > M and not _forced and _transposes(B, N, M, D, dtype, device_index)


@lru_cache(maxsize=4096)
def _transposes(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int) -> bool:
    opts = _model_args(D, dtype, device_index, False)
    return plan_estimate(B, M, N, *opts)[1] < 0.97 * plan_estimate(B, N, M, *opts)[1]


def _model_args(D: int, dtype: torch.dtype, device_index: int, checkpoint: bool) -> tuple:
    """The arguments of choose_plan / plan_estimate after (B, N, M) for a problem of D features (0: a cost table)."""
    return (k_max(dtype, D), sm_count(device_index), _krings(dtype, D), checkpoint,
            4 if dtype == torch.float32 else 8, D > 0)


@lru_cache(maxsize=4096)
def _krings(dtype: torch.dtype, D: int) -> tuple:
    return tuple(k_ring(dtype, D, W) for W in W_CHOICES)


@lru_cache(maxsize=4096)
def _planned(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int, checkpoint: bool) -> Plan:
    # Cached: a step asks for its plan three times (saved_spec, forward, backward), ~15 us each uncached.
    return choose_plan(B, N, M, *_model_args(D, dtype, device_index, checkpoint))


@lru_cache(maxsize=4096)  # a string built per launch otherwise
def expression(kernel: str, dtype: torch.dtype, cost: str, D: int, plan: Plan, window: bool,
               *flags: bool, var: int = 0, split: bool = False) -> str:
    """The C++ name expression of one instantiation, e.g. ``sdtw::forward_kernel<float, 0, 1, 16, 1, false, true>``;
    flags: the kernel's trailing bool parameters (STORE, LONG or STORE, CKPT), all of them when var or split is set;
    var: the alignment variants' bit mask (kernels/common.cuh, Variant), left out when 0 (the plain DP) unless split
    follows it; split: SPLIT_LINKS (:func:`split_links`), left out when False."""
    args = [_CTYPE[dtype], str(COST_IDS[cost]), str(max(D, 1)), str(plan.K), str(plan.W),
            "true" if window else "false"]
    args += ["true" if f else "false" for f in flags]
    if var or split:
        args.append(str(var))
    if split:
        args.append("true")
    return f"sdtw::{kernel}<{', '.join(args)}>"


def split_links(dtype: torch.dtype, plan: Plan, window: bool) -> bool:
    """Whether a storing pass (the forward's link table, or the checkpointed backward's recompute) of this launch
    takes its soft-min in two stages (kernels/forward_pair.cuh, SPLIT_STORE; common.cuh, Link<float>::soft_open /
    soft_close): float32, no band, K >= 4. The stages cost soft()'s 2 ex2, 1 lg2 and 1 rcp a cell on a serial chain of
    5 instructions instead of ~11, so they pay where the batch leaves the GPU latency-bound and where the MUFU pipe
    binds alike (H200, forward kernel, gamma 0.1; OPTIMIZATION_LOG.md, "The storing soft-min's first stage left
    open" and "The open split everywhere"): 32 x 512² 158.6 -> 134.5 µs, 16 x 128² -16 %, speech (Gram) -8 %,
    512 x 512² 294.6 -> 267.6 µs, 4096 x 128² -3.6 %; at K >= 8 in full batches 4096 x 512² and 1024 x 1024²
    -5.5 %, 4096 x 256² -1.6 % (4096 x 512² at D = 3 +1.1 %: one serialised ex2 in SASS); the chained forward of a fused
    cost (the halves of long pairs' gradients from both ends) 1 x 8192² -19 %. Not K < 4: 128 x 64², K = 2,
    measured +5 % with the closed first stage."""
    return dtype == torch.float32 and not window and plan.K >= 4


def has_frames(dtype: torch.dtype, saves: bool) -> bool:
    """Whether a pass keeps float32 R relative to per-lane frames and hands values over with their frame
    (kernels/forward_pair.cuh, has_frames): float32 passes that store links or keep checkpoints."""
    return dtype == torch.float32 and saves


#: A float32 value-only SEQ pass keeps frames past this N + M (kernels/forward.cu, forward_kernel's LONG): without
#: them its value drifts by ulp(|R|) per cell, 6.4e-6 / 8.1e-6 / 1.6e-5 off float64 at N = M = 8192 / 16384 /
#: 32768 (H100, benchmarks/probes/value_precision_probe.py --seq). The CPU backend keeps float64 state past the same
#: N + M (backends/cpu.py, F32_STATE_MAX).
SEQ_FRAMES_MIN = 8192


def seq_frames(dtype: torch.dtype, store: bool, N: int, M: int) -> bool:
    """Whether a forward_kernel pass is a LONG one: value-only, float32 and N + M > SEQ_FRAMES_MIN. It keeps
    frames like a storing pass; storing passes have them already (:func:`has_frames`) and are never LONG."""
    return not store and has_frames(dtype, N + M > SEQ_FRAMES_MIN)


def chain_frames(dtype: torch.dtype) -> bool:
    """Whether a chained forward keeps frames (kernels/forward_pair.cuh, pass_frames): every float32 chained
    pass, the value-only one too (its value is R at the pair's end; its bnd column then holds frames too)."""
    return has_frames(dtype, True)


# --- streams and contexts ---------------------------------------------------------------------------

_local = threading.local()


def ensure_context(device_index: int):
    """The cuda-core Device, with its primary context (the one PyTorch uses) made current once per thread.

    Later calls rely on PyTorch: selecting a device (``torch.cuda.device``) makes that device's primary
    context current again, which :func:`launch` does whenever PyTorch's current device differs.
    """
    devices = getattr(_local, "devices", None)
    if devices is None:
        devices = _local.devices = {}
    dev = devices.get(device_index)
    if dev is None:
        cc = _compile.cuda_core()
        dev = cc.Device(device_index)
        dev.set_current()
        devices[device_index] = dev
    return dev


def _raw_stream_public(device_index: int) -> int:
    return torch.cuda.current_stream(device_index).cuda_stream


#: Raw CUstream of PyTorch's current stream on a device; the private accessor saves ~2 µs per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_stream_public


def ptr(t: torch.Tensor | None) -> int:
    """Raw device pointer of a tensor, 0 for an unused argument."""
    return 0 if t is None else t.data_ptr()


def i32(v: int) -> np.int32:
    return np.int32(v)


# --- launches ---------------------------------------------------------------------------------------
#
# A launch's host time is what a small training step pays (issue 27). The kernels are NVRTC-compiled by
# cuda-core (compile.py); each cubin is then loaded with the driver and launched through ``cuLaunchKernel`` via
# ctypes: every argument sits in an 8-byte slot of a buffer that lives as long as the kernel, and ``kernelParams``
# points at the slots, so a launch is one struct.pack_into and one foreign call. The driver copies each
# parameter's own size out of its slot, so a little-endian int64 slot serves int32 and pointer parameters alike.
# cuda-core's own launch was the other path until this was measured (benchmarks/OPTIMIZATION_LOG.md, "One launch
# path"): the training step was 1-5 % faster this way on all 7 shapes of results/h100_train_step.md, so only this
# path is kept.


class _Driver:
    """The few CUDA driver calls the direct path makes, through ctypes (libcuda is loaded by PyTorch)."""

    NOT_READY = 600  # CUDA_ERROR_NOT_READY, from cuStreamQuery

    def __init__(self, lib):
        vp, u = ctypes.c_void_p, ctypes.c_uint
        self.lib = lib
        self.module_load = self._fn("cuModuleLoadData", ctypes.POINTER(vp), ctypes.c_char_p)
        self.get_function = self._fn("cuModuleGetFunction", ctypes.POINTER(vp), vp, ctypes.c_char_p)
        self.launch = self._fn("cuLaunchKernel", vp, u, u, u, u, u, u, u, vp, vp, vp)
        self.stream_query = self._fn("cuStreamQuery", vp)
        self.error_name = self._fn("cuGetErrorName", ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))

    def _fn(self, name, *argtypes):
        f = getattr(self.lib, name)
        f.argtypes, f.restype = argtypes, ctypes.c_int
        return f

    def check(self, err: int, what: str) -> None:
        if err:
            name = ctypes.c_char_p()
            self.error_name(err, ctypes.byref(name))
            raise RuntimeError(f"softdtw: {what} failed with {(name.value or b'?').decode()} ({err}).")

    def function(self, cubin: bytes, symbol: str) -> int:
        """Load a cubin into the current context and return the CUfunction of ``symbol`` (mangled)."""
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.module_load(ctypes.byref(mod), cubin), "cuModuleLoadData")
        self.check(self.get_function(ctypes.byref(fn), mod, symbol.encode()), f"cuModuleGetFunction({symbol})")
        return fn.value


_driver_state: list = []


def driver() -> "_Driver":
    """The ctypes :class:`_Driver` (libcuda is already loaded by PyTorch wherever it runs CUDA)."""
    if not _driver_state:
        lib, tried = None, ("libcuda.so.1", "libcuda.so", "nvcuda.dll")
        for name in tried:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise RuntimeError(
                f"softdtw's CUDA backend launches its kernels through the CUDA driver library, but none of "
                f"{tried} could be opened. PyTorch needs the same library to run on the GPU: check the NVIDIA "
                f"driver installation, or use backend='reference' (slower).")
        try:
            _driver_state.append(_Driver(lib))
        except AttributeError as e:  # a libcuda without one of the entry points
            raise RuntimeError(f"softdtw: the CUDA driver library {name} lacks an entry point the launches need "
                               f"({e}); update the NVIDIA driver.") from None
    return _driver_state[0]


class _Direct:
    """One loaded kernel and its parameter slots; calling it launches on a raw stream."""

    __slots__ = ("fn", "expr", "lock", "n", "buf", "ptrs", "params", "pack")

    def __init__(self, fn: int, expr: str):
        self.fn, self.expr, self.lock, self.n = fn, expr, threading.Lock(), -1

    def _slots(self, n: int) -> None:
        self.buf = (ctypes.c_int64 * n)()
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))  # kernelParams: one per slot
        self.params = ctypes.addressof(self.ptrs)
        self.pack = struct.Struct(f"<{n}q").pack_into
        self.n = n

    def __call__(self, drv: _Driver, grid: int, block: int, stream: int, args) -> None:
        with self.lock:  # the slots are shared: pack and launch as one step
            if len(args) != self.n:
                self._slots(len(args))
            self.pack(self.buf, 0, *args)
            err = drv.launch(self.fn, grid, 1, 1, block, 1, 1, 0, stream, self.params, None)
        if err:
            drv.check(err, f"cuLaunchKernel of {self.expr} (grid {grid}, block {block})")


_launchers: dict = {}


def _launcher(name: str, expr: str, device_index: int):
    key = (name, expr, device_index)
    launcher = _launchers.get(key)
    if launcher is None:
        drv = driver()
        cubin, mangled = _compile.cubin_for(name, expr, _compile.arch_of(device_index))
        launcher = _launchers.setdefault(key, _Direct(drv.function(cubin, mangled), expr))
    return launcher


_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def launch(name: str, expr: str, device_index: int, grid: int, block: int, args) -> None:
    """Compile (first use) and launch ``expr`` from ``kernels/<name>.cu`` on the current torch stream.

    args: one int per kernel parameter (pointers as ``data_ptr()`` ints, NumPy or Python ints for the
    integer parameters).
    """
    if _get_device() != device_index:
        with torch.cuda.device(device_index):
            return launch(name, expr, device_index, grid, block, args)
    ensure_context(device_index)
    launcher = _launchers.get((name, expr, device_index)) or _launcher(name, expr, device_index)
    launcher(_driver_state[0], grid, block, _raw_stream(device_index), args)
