"""The cuda backend's second order: :func:`hvp_cost`, the Hessian-vector product of soft-DTW (kernels/hvp_warp.cu,
kernels/hvp.cu).

Two passes (SECOND_ORDER.md): R and R-dot forward, then E, E-dot and the per-pair sums backward. Pairs up to
HVPW_MAX_M columns (float32; float64 HVPW_MAX_M_F64) run hvp_warp_kernel, the first-order kernels' layout (W warps
per pair, K columns per lane, rows skewed along the lanes: _warp_plan); wider ones one block per pair over the
anti-diagonals (hvp_fast_kernel up to HVPF_MAX_N rows, hvp_kernel beyond). It recomputes the forward from C and
reads nothing the first-order forward saved, so it is right after memory="store" and memory="checkpoint" alike. Buffers come from torch's allocator and the kernel runs
on torch's current stream (no host synchronisation: gamma is read on the device).

The double backward of soft_dtw(x, y) with the squared Euclidean or l1 cost (D <= 16, M within hvp_warp_kernel's range)
takes :func:`hvp_xy` instead: hvp_warp_xy_kernel, the same kernel with the cost and its derivative formed in the
cells from x, y and the direction, and the contractions the double backward takes of E and E-dot (dx, dy,
<C-dot, E>) reduced in its backward, so nothing of size (B, N, M) is read or written besides the record.

Alignment variants (open_begin, open_end, step_penalty with its direction penalty_dot; SECOND_ORDER.md, "Variants"):
a template flag VAR of the three kernels (the common.cuh bit mask, as the first-order kernels'), the same plan as
the plain DP's. The plain instantiations compile to the code they did (hvp.cu byte for byte; five float64
hvp_warp_kernel layouts with three or four independent moves in another order).
"""
from __future__ import annotations

import torch

from . import launch as _launch

#: Threads per block (one block per pair): rows of an anti-diagonal, each thread looping over several rows
#: when the diagonal is longer.
HVP_THREADS = 256  # kernels/hvp.cu, HVP_MAX_THREADS


def _threads(N: int) -> int:
    return min(HVP_THREADS, 32 * -(-N // 32))


#: The second kernel (hvp_fast_kernel): at most HVPF_THREADS threads per block, each owning RPT consecutive
#: rows, RPT the first of HVPF_RPTS with HVPF_THREADS · RPT >= N; beyond HVPF_THREADS · HVPF_RPTS[-1] rows
#: hvp_kernel (the first version, tables in global memory) runs instead.
HVPF_THREADS = 256  # kernels/hvp.cu, HVPF_MAX_THREADS
HVPF_RPTS = (1, 2, 4)  # kernels/hvp.cu, HVPF_MAX_RPT
HVPF_MAX_N = HVPF_THREADS * HVPF_RPTS[-1]


#: hvp_warp_kernel's layouts: W warps per pair, K columns per lane, 32·W·K >= M (kernels/hvp_warp.cu). Instantiated
#: for 32·W·K <= HVPW_MAX_M (float32) / HVPW_MAX_M_F64 (float64; K = 16 spills 400 bytes there).
HVPW_KS = (1, 2, 4, 8, 16)
HVPW_WS = (1, 2, 4)
HVPW_MAX_M = 512
HVPW_MAX_M_F64 = 256
#: Warps per SM (float32, float64) below which a pair gets twice as many warps: few pairs are latency-bound, the
#: step's serial chain is K cells (H100 sweep, benchmarks/probes/hvp_warp_sweep.py: B = 64, N = M = 256 float32
#: W = 1 / 2 / 4: 0.673 / 0.494 / 0.466 ms; B = 1024: W = 1 best, 1.90 ms against 2.96 at W = 2; float64,
#: whose cells are longer, B = 256: W = 1 / 2 / 4: 3.03 / 1.66 / 1.50 ms).
HVPW_PAIRS_PER_SM = {torch.float32: 2.0, torch.float64: 4.0}
#: (K, W) forced for every call while not None (benchmarks, tests); None: _warp_plan decides.
force_plan = None


def _warp_plan(B: int, M: int, dtype: torch.dtype, device_index: int = 0, pairs_per_sm=None):
    """(K, W) of hvp_warp_kernel for B pairs of M columns, or None when the pair is too wide for it.
    pairs_per_sm: the threshold table (default HVPW_PAIRS_PER_SM)."""
    top = HVPW_MAX_M if dtype == torch.float32 else HVPW_MAX_M_F64
    if M > top:
        return None
    if force_plan is not None:
        K, W = force_plan
        if 32 * K * W >= M and 32 * K * W <= top:
            return K, W
    sms = _launch.sm_count(device_index)
    W = 1
    per_sm = (pairs_per_sm or HVPW_PAIRS_PER_SM)[dtype]
    while W < HVPW_WS[-1] and B * W < per_sm * sms and 32 * W * 2 <= M:
        W *= 2
    K = next((k for k in HVPW_KS if 32 * W * k >= M), None)
    if K is None or 32 * K * W > top:
        return None
    return K, W


def _warp_k(M: int, dtype: torch.dtype):
    """Whether hvp_warp_kernel covers M columns (its K at one warp per pair), else None (the block kernels)."""
    top = HVPW_MAX_M if dtype == torch.float32 else HVPW_MAX_M_F64
    return None if M > top else next(k for k in HVPW_KS if 32 * k >= M)


def _fast_plan(N: int):
    """(threads, rows per thread) of hvp_fast_kernel for N rows, or None above HVPF_MAX_N."""
    for rpt in HVPF_RPTS:
        if N <= HVPF_THREADS * rpt:
            return 32 * -(-(-(-N // rpt)) // 32), rpt
    return None


#: The kernels' variant arguments of a plain launch: pen, pen_stride, pdot, pdot_stride, vpen, vpen_dot.
_PLAIN = (0, _launch.i32(0), 0, _launch.i32(0), 0, 0)


def _per_pair(t, B: int, like: torch.Tensor, what: str):
    """(tensor, stride) of a 0-d or `(B,)` tensor in like's dtype and device: stride 0 for one value, 1 per pair."""
    t = t.detach()
    if t.dtype != like.dtype or t.device != like.device:
        t = t.to(device=like.device, dtype=like.dtype)
    if t.numel() == 1 and t.dim() <= 1:
        return t.reshape(()).contiguous(), 0
    if tuple(t.shape) != (B,):
        raise ValueError(f"{what} must be a 0-d tensor or one value per pair `(B,)` = ({B},); got shape "
                         f"{tuple(t.shape)}. Pass a scalar, or a tensor of the batch's size.")
    return t.contiguous(), 1


def hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, *, open_begin=False, open_end=False,
             step_penalty=None, penalty_dot=None):
    """(E, vgamma, Edot, vgamma_dot): soft-DTW's gradient in C and gamma and its derivative along (Cdot, gamma_dot).

    C `(B, N, M)` float32 or float64 (+inf cells are forbidden), gamma a 0-d tensor (0 = hard DTW), x_lengths and
    y_lengths int64 `(B,)`, window None or int32 `(B, N, 2)`, Cdot `(B, N, M)` (ignored on forbidden cells and
    outside the pair), gamma_dot `(B,)`. Returns E `(B, N, M)` = dv/dC, vgamma `(B,)` = dv/dgamma, Edot `(B, N, M)`
    and vgamma_dot `(B,)`, the Hessian of v_b = R_b[n_b - 1, m_b - 1] times (Cdot_b, gamma_dot_b), all in the
    data dtype; zero outside each pair, everything zero for a pair with no finite path, and at gamma == 0 the hard
    path E with vgamma = Edot = vgamma_dot = 0.

    Working memory (freed on return), M <= 512 (float32) or 256 (float64): a record of four values per cell in the
    data dtype (the normalised weights of two predecessors and their derivatives, B·N·4·32WK values, 32WK the
    layout's width >= M, a power of two: 16 or 32 bytes per cell at M = 32WK). Wider pairs: the R and
    R-dot tables, diagonal-major, as 2·B·N·M float64 values (R in
    log2 units; both float64 for float32 data too, so float32 R-dot keeps the small differences its second
    derivative takes of it): 16 bytes per cell for either data dtype, besides the outputs (N <= 1024; above,
    the first kernel also keeps E and E-dot tables in the data dtype: 24 and 32 bytes per cell).

    Alignment variants (reference.hvp_cost's contract): open_begin, open_end, step_penalty (None, 0-d or `(B,)`) with
    its direction penalty_dot (None = 0, 0-d or `(B,)`); with a penalty two more outputs, vpen `(B,)` = dv/dp and
    vpen_dot `(B,)` (0 at gamma == 0). A band with an open end raises ValueError (reference.check_variant). They
    take the plain DP's plan and working memory (a template flag of each kernel).
    """
    from . import _alloc, _window  # the package's helpers (imported here: the package imports this module)
    from .. import reference

    C = C.contiguous()
    dtype = C.dtype
    B, N, M = C.shape
    var = (1 if open_begin else 0) | (2 if open_end else 0) | (4 if step_penalty is not None else 0)
    tail, keep, vpen, vpen_dot = _PLAIN, (), None, None
    if var:
        reference.check_variant(window, open_begin, open_end)
        if step_penalty is not None:
            pen, ps = _per_pair(step_penalty, B, C, "step_penalty")
            pdot, pds = (_per_pair(penalty_dot, B, C, "penalty_dot") if penalty_dot is not None
                         else (C.new_zeros(()), 0))
            vpen, vpen_dot = C.new_empty((B,)), C.new_empty((B,))
            tail = (pen.data_ptr(), _launch.i32(ps), pdot.data_ptr(), _launch.i32(pds), vpen.data_ptr(),
                    vpen_dot.data_ptr())
            keep = (pen, pdot)  # alive until the launch is queued
        vexpr = f", {var}"
    else:
        vexpr = ""
    Cdot = Cdot.to(dtype).contiguous()
    gamma_dot = gamma_dot.to(dtype).reshape(B).contiguous()
    gamma = gamma.to(dtype)
    window = _window(window)
    dev = C.get_device()
    E = torch.empty_like(C)
    Edot = torch.empty_like(C)
    vgamma = C.new_empty((B,))
    vgamma_dot = C.new_empty((B,))
    cells = B * N * M
    win = "true" if window is not None else "false"
    plan = _warp_plan(B, M, dtype, dev) if _warp_k(M, dtype) is not None else None
    if plan is not None:
        K, W = plan
        rec = _alloc(C, B * N * 4 * 32 * W * K, dtype, "the HVP's per-cell records (hvp_cost)", B, N, M)
        g = 16 // dtype.itemsize
        vec = M % g == 0 and all(t.data_ptr() % 16 == 0 for t in (C, Cdot, E, Edot))
        expr = f"sdtw::hvp_warp_kernel<{_launch._CTYPE[dtype]}, {win}, {K}, {W}{vexpr}>"
        args = (C.data_ptr(), Cdot.data_ptr(), gamma.data_ptr(), gamma_dot.data_ptr(), x_lengths.data_ptr(),
                y_lengths.data_ptr(), _launch.ptr(window), rec.data_ptr(), E.data_ptr(), Edot.data_ptr(),
                vgamma.data_ptr(), vgamma_dot.data_ptr(), _launch.i32(B), _launch.i32(N), _launch.i32(M),
                _launch.i32(int(vec))) + tail
        _launch.launch("hvp_warp", expr, dev, B, 32 * W, args)
        del keep
        return _result(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot)
    plan = _fast_plan(N)
    R = _alloc(C, cells, torch.float64, "the HVP's R table (hvp_cost)", B, N, M)
    args = [C.data_ptr(), Cdot.data_ptr(), gamma.data_ptr(), gamma_dot.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), R.data_ptr()]
    if plan is not None:
        threads, rpt = plan
        Q = _alloc(C, cells, torch.float64, "the HVP's R-dot table (hvp_cost)", B, N, M)
        vec = all(t.data_ptr() % 16 == 0 for t in (C, Cdot, E, Edot))  # 16-byte groups of C, C-dot, E, E-dot
        expr = f"sdtw::hvp_fast_kernel<{_launch._CTYPE[dtype]}, {win}, {rpt}{vexpr}>"
        args += [Q.data_ptr(), E.data_ptr(), Edot.data_ptr(), vgamma.data_ptr(), vgamma_dot.data_ptr(),
                 _launch.i32(B), _launch.i32(N), _launch.i32(M), _launch.i32(int(vec)), *tail]
    else:
        threads = _threads(N)
        # float64 R-dot (B·N·M), then E and E-dot in the data dtype (2·B·N·M of them) in the same buffer.
        Q = _alloc(C, cells + 2 * cells * dtype.itemsize // 8, torch.float64,
                   "the HVP's R-dot, E and E-dot tables (hvp_cost)", B, N, M)
        expr = f"sdtw::hvp_kernel<{_launch._CTYPE[dtype]}, {win}{vexpr}>"
        args += [Q.data_ptr(), E.data_ptr(), Edot.data_ptr(), vgamma.data_ptr(), vgamma_dot.data_ptr(),
                 _launch.i32(B), _launch.i32(N), _launch.i32(M), *tail]
    _launch.launch("hvp", expr, dev, B, threads, tuple(args))
    del keep
    return _result(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot)


#: hvp_xy: the largest K·D (columns per lane times features) whose y, y-dot and dy sums stay in registers, per
#: dtype (ptxas -v on sm_90: float32 up to K·D = 16 without a spill, 252 registers at K = 16, D = 1; float64 K·D = 8
#: without one, 255 registers at K = 8, D = 1, where K = 8, D = 2 spilled 376 bytes and K = 1, D = 16 712).
HVPX_MAX_KD = {torch.float32: 16, torch.float64: 8}
#: hvp_xy's threshold of _warp_plan: float64 takes more warps per pair up to more pairs than hvp_warp_kernel does.
#: Without the cost's ring to feed, its float64 chain is what bounds it (H100, forced layouts, float64, N = M = 256,
#: (8,1) / (4,2) / (2,4) ms: B = 512 1.96 / 1.48 / 1.22, B = 1024 2.72 / 2.75 / 2.24, B = 2048 4.58 / 4.32 / 4.28;
#: 1024 x 128²: (4,1) 0.70, (2,2) 0.68; hvp_cost at B = 1024: 4.26 / 3.90 / 5.56, so its table stays;
#: benchmarks/results/ab/h100_hvp_f64_layouts.json). float32 as hvp_warp_kernel (within 2-5 % of the best).
HVPX_PAIRS_PER_SM = {torch.float32: 2.0, torch.float64: 16.0}


#: hvp_xy's costs: kernels/common.cuh's Cost values.
_XCOST = {"sqeuclidean": 0, "l1": 1}


def hvp_xy_plan(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int = 0):
    """(K, W) of hvp_warp_xy_kernel, or None where it does not run (pairs wider than hvp_warp_kernel's range, or
    too many features for the lane's registers): the caller then takes hvp_cost."""
    plan = _warp_plan(B, M, dtype, device_index, HVPX_PAIRS_PER_SM) if _warp_k(M, dtype) is not None else None
    if plan is None or dtype not in HVPX_MAX_KD or plan[0] * D > HVPX_MAX_KD[dtype]:
        return None
    return plan


def hvp_xy(x, y, gamma, x_lengths, y_lengths, window, xdot, ydot, gamma_dot, cost="sqeuclidean", *,
           gamma_terms: bool = True):
    """The double backward's contractions of soft_dtw(x, y) with a fused cost ("sqeuclidean" or "l1"), the cost
    formed in the kernel's cells (kernels/hvp_warp.cu, HvpXY), or None where hvp_xy_plan says it does not run.

    x, xdot `(B, N, D)`, y, ydot `(B, M, D)` in one float dtype, gamma 0-d, x_lengths / y_lengths int64 `(B,)`,
    window None or int32 `(B, N, 2)`, gamma_dot `(B,)`. With C = |x_i - y_j|², its derivative C-dot along
    (xdot, ydot), E = dv/dC and E-dot its derivative along (C-dot, gamma_dot) (what :func:`hvp_cost` returns), it
    gives, per pair: s1 `(B,)` = <C-dot, E>, vgamma and vgamma_dot `(B,)` (as hvp_cost), and
    dx `(B, N, D)` = 2 sum_j (E-dot_ij (x_i - y_j) + E_ij (xdot_i - ydot_j)), dy `(B, M, D)` = -(the same over i):
    the cost's VJP of E-dot plus its second derivative along the direction weighted by E (costs.cost_vjp and
    costs.cost_vjp_jvp). l1: C-dot = sum_d sign(x_i - y_j) (xdot_i - ydot_j), dx = sum_j E-dot_ij sign(x_i - y_j),
    dy = -(the same over i) (its own second derivative is 0). Nothing of size (B, N, M) is read or written besides the kernel's record (16 or 32 bytes
    per cell, as hvp_cost's).

    gamma_terms=False: gamma is a constant of the caller's graph, so vgamma and vgamma_dot come back as None and the
    kernel skips them (no ln w and no H, H-dot per cell: the kernel's template VG); gamma_dot is then taken as 0.
    The other outputs are the same as with gamma_terms=True and gamma_dot = 0.
    """
    from . import _window

    lay = _xy_layout(x, y, "hvp_xy")
    if lay is None:
        return None
    x, y, K, W, rec, dx, dy = lay
    B, N, D = x.shape
    M, dtype, dev = y.shape[1], x.dtype, x.get_device()
    xdot = xdot.detach().to(dtype).contiguous()
    ydot = ydot.detach().to(dtype).contiguous()
    gamma = gamma.detach().to(dtype)
    # Without the gamma terms the kernel takes gamma_dot as 0 (a null pointer) and writes no vgamma, vgamma_dot.
    gamma_dot = gamma_dot.detach().to(dtype).reshape(B).contiguous() if gamma_terms else None
    window = _window(window)
    s1 = x.new_empty((B,))
    vgamma, vgamma_dot = (x.new_empty((B,)), x.new_empty((B,))) if gamma_terms else (None, None)
    win = "true" if window is not None else "false"
    vg = "" if gamma_terms else ", false"
    expr = f"sdtw::hvp_warp_xy_kernel<{_launch._CTYPE[dtype]}, {win}, {K}, {W}, {D}, {_XCOST[cost]}{vg}>"
    args = (x.data_ptr(), y.data_ptr(), xdot.data_ptr(), ydot.data_ptr(), gamma.data_ptr(), _launch.ptr(gamma_dot),
            x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.ptr(window), rec.data_ptr(), dx.data_ptr(),
            dy.data_ptr(), s1.data_ptr(), _launch.ptr(vgamma), _launch.ptr(vgamma_dot), _launch.i32(B),
            _launch.i32(N), _launch.i32(M))
    _launch.launch("hvp_warp", expr, dev, B, 32 * W, args)
    return (s1, vgamma, vgamma_dot) + _cost_factor(cost, dx, dy)


#: value_grad_hvp_xy: the largest K·D, per dtype, with the gradient's second channel of dx / dy sums in registers
#: (ptxas -v on sm_90, hvp_vgh_xy_kernel: float32 K = 8, D = 1 167 registers without a spill, K = 16, D = 1 spilled
#: 8 bytes; float64 K = 8, D = 1 spilled 36 bytes, K = 4, D = 1 and K = 2, D = 4 (218 registers) did not).
HVPG_MAX_KD = {torch.float32: 8, torch.float64: 4}


def vgh_plan(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int = 0):
    """(K, W) of hvp_vgh_xy_kernel, or None where it does not run: hvp_xy's plan, with W doubled (K halved) while
    K·D is over HVPG_MAX_KD."""
    plan = hvp_xy_plan(B, N, M, D, dtype, device_index)
    if plan is None or dtype not in HVPG_MAX_KD:
        return None
    K, W = plan
    while K * D > HVPG_MAX_KD[dtype] and K > 1 and W < HVPW_WS[-1]:
        K, W = K // 2, W * 2
    return (K, W) if K * D <= HVPG_MAX_KD[dtype] else None


def value_grad_hvp_xy(x, y, gamma, x_lengths, y_lengths, window, xdot, ydot, cost="sqeuclidean"):
    """Value, gradient and one Hessian-vector product of soft_dtw(x, y) in one launch, for a direction known up front
    (kernels/hvp_warp.cu, hvp_vgh_xy_kernel), or None where :func:`vgh_plan` says it does not run.

    x, xdot `(B, N, D)`, y, ydot `(B, M, D)` in one float dtype, gamma 0-d (a constant: no d/dgamma terms), lengths
    int64 `(B,)`, window None or int32 `(B, N, 2)`, cost "sqeuclidean" or "l1". Returns (v, gx, gy, hx, hy): per pair
    the value v_b `(B,)`, its gradient in x_b and y_b, and the Hessian of v_b in (x_b, y_b) times (xdot_b, ydot_b),
    split into its x and y parts (what :func:`hvp_xy`'s dx, dy are for that direction). The first-order forward and
    backward are not run: the HVP's own two passes hold R' and E. Working memory: hvp_xy's record.
    """
    from . import _window

    lay = _xy_layout(x, y, "value_grad_hvp_xy", vgh_plan) if cost in _XCOST else None
    if lay is None:
        return None
    x, y, K, W, rec, hx, hy = lay
    B, N, D = x.shape
    M, dtype, dev = y.shape[1], x.dtype, x.get_device()
    xdot = xdot.detach().to(dtype).contiguous()
    ydot = ydot.detach().to(dtype).contiguous()
    gamma = gamma.detach().to(dtype)
    window = _window(window)
    v, s1 = x.new_empty((B,)), x.new_empty((B,))
    gx, gy = torch.empty_like(x), torch.empty_like(y)
    win = "true" if window is not None else "false"
    expr = f"sdtw::hvp_vgh_xy_kernel<{_launch._CTYPE[dtype]}, {win}, {K}, {W}, {D}, {_XCOST[cost]}, false>"
    args = (x.data_ptr(), y.data_ptr(), xdot.data_ptr(), ydot.data_ptr(), gamma.data_ptr(), 0,
            x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.ptr(window), rec.data_ptr(), v.data_ptr(),
            gx.data_ptr(), gy.data_ptr(), hx.data_ptr(), hy.data_ptr(), s1.data_ptr(), 0, 0, _launch.i32(B),
            _launch.i32(N), _launch.i32(M))
    _launch.launch("hvp_warp", expr, dev, B, 32 * W, args)
    return (v,) + _cost_factor(cost, gx, gy) + _cost_factor(cost, hx, hy)


def _xy_layout(x, y, what: str, planner=None):
    """What hvp_xy, dilate_xy and value_grad_hvp_xy share before their launch: (x, y contiguous and detached, K, W,
    the records, dx, dy (uninitialised, the kernel writes all of them)), or None where the planner (default
    :func:`hvp_xy_plan`) says the kernel does not run."""
    from . import _alloc

    B, N, D = x.shape
    M = y.shape[1]
    plan = (planner or hvp_xy_plan)(B, N, M, D, x.dtype, x.get_device())
    if plan is None:
        return None
    K, W = plan
    x, y = x.detach().contiguous(), y.detach().contiguous()
    rec = _alloc(x, B * N * 4 * 32 * W * K, x.dtype, f"the HVP's per-cell records ({what})", B, N, M)
    return x, y, K, W, rec, torch.empty_like(x), torch.empty_like(y)


def _cost_factor(cost: str, dx, dy):
    """(dx, dy) with the squared Euclidean cost's factor 2, which the kernels leave out (l1 has none)."""
    if cost == "sqeuclidean":
        dx.mul_(2.0), dy.mul_(2.0)
    return dx, dy


def _bits(value: float, dtype: torch.dtype) -> int:
    """A float kernel parameter passed by value: its bits as the integer the launch packs into the slot."""
    import numpy as np

    return int((np.float32 if dtype == torch.float32 else np.float64)(value).view(
        np.int32 if dtype == torch.float32 else np.int64))


def dilate_xy(x, y, gamma, x_lengths, y_lengths, alpha: float, cost: str = "sqeuclidean"):
    """DILATE's terms and gradient with the cost formed in the HVP kernel's cells (kernels/hvp_warp.cu,
    dilate_xy_kernel), or None where :func:`hvp_xy_plan` says it does not run.

    x `(B, N, D)`, y `(B, M, D)` (one float dtype), gamma 0-d (x's dtype and device), lengths int64 `(B,)`, alpha the
    shape term's weight, cost "sqeuclidean" or "l1"; no band, the default Omega_ij = ((i - j) / n_b)^2
    (dilate.default_omega). Returns (v, temporal, vgamma, vgamma_dot, dx, dy): per pair the soft-DTW value, <E, Omega>,
    d v / d gamma and its derivative along (Omega, 0), and dx `(B, N, D)`, dy `(B, M, D)` the gradient of
    alpha v + (1 - alpha) <E, Omega> (the cost's VJP of alpha E + (1 - alpha) E-dot). One kernel: no (B, N, M)
    tensor besides its record.
    """
    lay = _xy_layout(x, y, "dilate_xy") if cost in _XCOST else None
    if lay is None:
        return None
    x, y, K, W, rec, dx, dy = lay
    B, N, D = x.shape
    M, dtype, dev = y.shape[1], x.dtype, x.get_device()
    v, tv, vg, vgd = (x.new_empty((B,)) for _ in range(4))
    expr = f"sdtw::dilate_xy_kernel<{_launch._CTYPE[dtype]}, {K}, {W}, {D}, {_XCOST[cost]}>"
    args = (x.data_ptr(), y.data_ptr(), gamma.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), rec.data_ptr(),
            _bits(alpha, dtype), v.data_ptr(), tv.data_ptr(), dx.data_ptr(), dy.data_ptr(), vg.data_ptr(),
            vgd.data_ptr(), _launch.i32(B), _launch.i32(N), _launch.i32(M))
    _launch.launch("hvp_warp", expr, dev, B, 32 * W, args)
    return (v, tv, vg, vgd) + _cost_factor(cost, dx, dy)


def _result(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot):
    """The four outputs, and (vpen, vpen_dot) after them with a step penalty."""
    out = (E, vgamma, Edot, vgamma_dot)
    return out if vpen is None else out + (vpen, vpen_dot)
