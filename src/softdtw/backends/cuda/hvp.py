"""The cuda backend's second order: :func:`hvp_cost`, the Hessian-vector product of soft-DTW (kernels/hvp.cu).

One block per pair walks the anti-diagonals twice (SECOND_ORDER.md): R and R-dot forward, then E, E-dot and the
per-pair sums backward. It recomputes the forward from C and reads nothing the first-order forward saved, so it is
right after memory="store" and memory="checkpoint" alike. Buffers come from torch's allocator and the kernel runs
on torch's current stream (no host synchronisation: gamma is read on the device).
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


def _fast_plan(N: int):
    """(threads, rows per thread) of hvp_fast_kernel for N rows, or None above HVPF_MAX_N."""
    for rpt in HVPF_RPTS:
        if N <= HVPF_THREADS * rpt:
            return 32 * -(-(-(-N // rpt)) // 32), rpt
    return None


def hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot):
    """(E, vgamma, Edot, vgamma_dot): soft-DTW's gradient in C and gamma and its derivative along (Cdot, gamma_dot).

    C `(B, N, M)` float32 or float64 (+inf cells are forbidden), gamma a 0-d tensor (0 = hard DTW), x_lengths and
    y_lengths int64 `(B,)`, window None or int32 `(B, N, 2)`, Cdot `(B, N, M)` (ignored on forbidden cells and
    outside the pair), gamma_dot `(B,)`. Returns E `(B, N, M)` = dv/dC, vgamma `(B,)` = dv/dgamma, Edot `(B, N, M)`
    and vgamma_dot `(B,)`, the Hessian of v_b = R_b[n_b - 1, m_b - 1] times (Cdot_b, gamma_dot_b), all in the
    data dtype; zero outside each pair, everything zero for a pair with no finite path, and at gamma == 0 the hard
    path E with vgamma = Edot = vgamma_dot = 0.

    Working memory (freed on return): the R and R-dot tables, diagonal-major, as 2·B·N·M float64 values (R in
    log2 units; both float64 for float32 data too, so float32 R-dot keeps the small differences its second
    derivative takes of it): 16 bytes per cell for either data dtype, besides the outputs (N <= 1024; above,
    the first kernel also keeps E and E-dot tables in the data dtype: 24 and 32 bytes per cell).
    """
    from . import _alloc, _window  # the package's helpers (imported here: the package imports this module)

    C = C.contiguous()
    dtype = C.dtype
    B, N, M = C.shape
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
    plan = _fast_plan(N)
    R = _alloc(C, cells, torch.float64, "the HVP's R table (hvp_cost)", B, N, M)
    win = "true" if window is not None else "false"
    args = [C.data_ptr(), Cdot.data_ptr(), gamma.data_ptr(), gamma_dot.data_ptr(), x_lengths.data_ptr(),
            y_lengths.data_ptr(), _launch.ptr(window), R.data_ptr()]
    if plan is not None:
        threads, rpt = plan
        Q = _alloc(C, cells, torch.float64, "the HVP's R-dot table (hvp_cost)", B, N, M)
        vec = all(t.data_ptr() % 16 == 0 for t in (C, Cdot, E, Edot))  # 16-byte groups of C, C-dot, E, E-dot
        expr = f"sdtw::hvp_fast_kernel<{_launch._CTYPE[dtype]}, {win}, {rpt}>"
        args += [Q.data_ptr(), E.data_ptr(), Edot.data_ptr(), vgamma.data_ptr(), vgamma_dot.data_ptr(),
                 _launch.i32(B), _launch.i32(N), _launch.i32(M), _launch.i32(int(vec))]
    else:
        threads = _threads(N)
        # float64 R-dot (B·N·M), then E and E-dot in the data dtype (2·B·N·M of them) in the same buffer.
        Q = _alloc(C, cells + 2 * cells * dtype.itemsize // 8, torch.float64,
                   "the HVP's R-dot, E and E-dot tables (hvp_cost)", B, N, M)
        expr = f"sdtw::hvp_kernel<{_launch._CTYPE[dtype]}, {win}>"
        args += [Q.data_ptr(), E.data_ptr(), Edot.data_ptr(), vgamma.data_ptr(), vgamma_dot.data_ptr(),
                 _launch.i32(B), _launch.i32(N), _launch.i32(M)]
    _launch.launch("hvp", expr, dev, B, threads, tuple(args))
    return E, vgamma, Edot, vgamma_dot
