"""Can the HVP run in float32 if its recursions carry local differences instead of values? A CPU model (issue 24).

hvp_warp.cu keeps R' and R-dot in float64 for every data dtype: in float32 their absolute values lose what the
weights and the weights' derivatives need (OPTIMIZATION_LOG, "Float32 frames in the HVP forward: rejected": costs
~180 at gamma 0.1 put |R'| near 4e4, whose float32 ulp is 4e-3 in log2 units, into every weight). The float64 chain
is what bounds that kernel (XU pipe, converts, DADD on the serial chain). This model replays the HVP of one pair in
three arithmetics and compares its outputs with float64:

- ``float64``: the reference (Mensch & Blondel's forward R, R-dot and backward E, E-dot, in natural units);
- ``f32 absolute``: the same recursions with every result rounded to float32 (R in log2 units, as the kernels);
- ``f32 differences``: every cell keeps only its differences to its upper and left neighbours, h = q_ij - q_i,j-1
  and d = q_ij - q_i-1,j (q = R / (gamma ln 2)), and the same for R-dot. A cell's predecessors relative to its
  diagonal one are (0, h of the cell above, d of the cell to the left): small numbers, whatever the path's sum. The
  cell computes t = q_ij - q_diag from them, and writes d = t - h_up, h = t - d_left. R-dot likewise, with the
  cell's own weights. The backward's weight derivatives need R-dot of the predecessors relative to their weighted
  mean: again only these differences. Only the value and its directional derivative sum differences along the
  border (in float64 here: a kernel would keep that one running sum in float64). Every other operation is one
  float32 rounding.

Each float32 operation is modelled as the float64 operation rounded to float32 (exact for + - * /, correctly
rounded for exp2 / log2, which the GPU's MUFU approximates to ~2 ulp). Outputs compared, as
tests/backends/test_cuda_hvp_xy.py does (max |a - b| / max |b|; its float32 tolerance is 2e-3):
s1 = <C-dot, E>, dx and dy of the double backward's contractions (hvp.hvp_xy), for the squared Euclidean cost,
D = 1, random walks as that test draws them.

    python benchmarks/probes/hvp_f32_model.py          # ~1-2 min on 2 cores; prints a markdown table
"""
from __future__ import annotations

import math
import sys

import numba
import numpy as np

LN2 = math.log(2.0)
INF = np.inf


@numba.njit(cache=False)
def _f(v, r32):
    """One float32 rounding (r32) or none."""
    return np.float64(np.float32(v)) if r32 else v


@numba.njit(cache=False)
def _smin3(a, b, c, r32, L, i, j):
    """(t, wa, wb, wc) for predecessors a, b, c in log2 units: t = min - log2 sum 2^-(p - min), w their weights;
    their natural logs ln w into L[i, j] (for the gamma terms; 0 where w = 0)."""
    m = min(a, min(b, c))
    ea = _f(2.0 ** _f(m - a, r32), r32) if a < INF else 0.0
    eb = _f(2.0 ** _f(m - b, r32), r32) if b < INF else 0.0
    ec = _f(2.0 ** _f(m - c, r32), r32) if c < INF else 0.0
    z = _f(_f(ea + eb, r32) + ec, r32)
    lz = _f(math.log2(z), r32)
    t = _f(m - lz, r32)
    for k in range(3):
        p = a if k == 0 else (b if k == 1 else c)
        L[i, j, k] = _f(_f(_f(m - p, r32) - lz, r32) * LN2, r32) if p < INF else 0.0
    return t, _f(ea / z, r32), _f(eb / z, r32), _f(ec / z, r32)


@numba.njit(cache=False)
def forward_absolute(qc, Cd, r32):
    """R' (log2 units) and R-dot as values. Returns per cell the weights (diag, up, left) and the R-dot
    differences the backward needs (up - diag, left - diag), the value q_NM and its derivative Rdot_NM."""
    N, M = qc.shape
    q = np.full((N + 1, M + 1), INF)
    Rd = np.zeros((N + 1, M + 1))
    q[0, 0] = 0.0
    W = np.zeros((N, M, 3))
    L = np.zeros((N, M, 3))
    DL = np.zeros((N, M, 2))
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            t, wd, wu, wl = _smin3(q[i - 1, j - 1], q[i - 1, j], q[i, j - 1], r32, L, i - 1, j - 1)
            q[i, j] = _f(qc[i - 1, j - 1] + t, r32)
            acc = _f(wd * Rd[i - 1, j - 1], r32)
            acc = _f(acc + _f(wu * Rd[i - 1, j], r32), r32)
            acc = _f(acc + _f(wl * Rd[i, j - 1], r32), r32)
            Rd[i, j] = _f(Cd[i - 1, j - 1] + acc, r32)
            W[i - 1, j - 1, 0], W[i - 1, j - 1, 1], W[i - 1, j - 1, 2] = wd, wu, wl
            base = Rd[i - 1, j - 1]
            DL[i - 1, j - 1, 0] = _f(Rd[i - 1, j] - base, r32) if wu > 0 else 0.0
            DL[i - 1, j - 1, 1] = _f(Rd[i, j - 1] - base, r32) if wl > 0 else 0.0
    return W, L, DL, q[N, M], Rd[N, M]


@numba.njit(cache=False)
def forward_differences(qc, Cd):
    """The same recursions on local differences in float32 (see the module docstring)."""
    N, M = qc.shape
    r32 = True
    h = np.full((N, M), INF)  # q_ij - q_i,j-1
    d = np.full((N, M), INF)  # q_ij - q_i-1,j
    hd = np.zeros((N, M))  # the same for R-dot
    dd = np.zeros((N, M))
    W = np.zeros((N, M, 3))
    L = np.zeros((N, M, 3))
    DL = np.zeros((N, M, 2))
    for i in range(N):
        for j in range(M):
            c = _f(qc[i, j], r32)
            cd = _f(Cd[i, j], r32)
            if i == 0 and j == 0:  # the diagonal predecessor is R[0, 0] = 0
                W[i, j, 0] = 1.0
            elif i == 0:  # the left predecessor only
                h[i, j], hd[i, j] = c, cd
                W[i, j, 2] = 1.0
            elif j == 0:  # the upper one only
                d[i, j], dd[i, j] = c, cd
                W[i, j, 1] = 1.0
            else:  # predecessors relative to the diagonal one: 0, h above, d to the left
                b, l = h[i - 1, j], d[i, j - 1]
                t, wd, wu, wl = _smin3(0.0, b, l, r32, L, i, j)
                t = _f(c + t, r32)
                d[i, j], h[i, j] = _f(t - b, r32), _f(t - l, r32)
                bu, bl = hd[i - 1, j], dd[i, j - 1]
                td = _f(cd + _f(_f(wu * bu, r32) + _f(wl * bl, r32), r32), r32)
                dd[i, j], hd[i, j] = _f(td - bu, r32), _f(td - bl, r32)
                W[i, j, 0], W[i, j, 1], W[i, j, 2] = wd, wu, wl
                DL[i, j, 0], DL[i, j, 1] = bu, bl
    # the value and its derivative: the border's differences summed in float64
    q = qc[0, 0] + 0.0
    rd = Cd[0, 0] + 0.0
    for j in range(1, M):
        q += h[0, j]
        rd += hd[0, j]
    for i in range(1, N):
        q += d[i, M - 1]
        rd += dd[i, M - 1]
    return W, L, DL, q, rd


@numba.njit(cache=False)
def backward(W, L, DL, Cd, g, r32):
    """E and E-dot from the forward's weights and R-dot differences (natural units: w-dot = -w (delta - mean) / g),
    and the gamma terms along (C-dot, gamma-dot = 0): vgamma = sum E h, h = sum_k w_k ln w_k per cell (dR/dgamma's
    source), and vgamma-dot = sum (E-dot h + E h-dot), h-dot = sum_k w-dot_k ln w_k (sums in float64)."""
    N, M = Cd.shape
    E = np.zeros((N + 1, M + 1))
    Ed = np.zeros((N + 1, M + 1))
    vg = 0.0
    vgd = 0.0
    for i in range(N - 1, -1, -1):
        for j in range(M - 1, -1, -1):
            e = 1.0 if (i == N - 1 and j == M - 1) else 0.0
            ed = 0.0
            # successors s of (i, j) and the weight each gives it: (i+1, j+1) diag, (i+1, j) up, (i, j+1) left
            for k in range(3):
                si, sj = (i + 1, j + 1) if k == 0 else ((i + 1, j) if k == 1 else (i, j + 1))
                if si >= N or sj >= M:
                    continue
                w = W[si, sj, k]
                if w == 0.0:
                    continue
                bu, bl = DL[si, sj, 0], DL[si, sj, 1]
                mean = _f(_f(W[si, sj, 1] * bu, r32) + _f(W[si, sj, 2] * bl, r32), r32)
                delta = 0.0 if k == 0 else (bu if k == 1 else bl)
                wdot = _f(-_f(w * _f(delta - mean, r32), r32) / g, r32)
                e = _f(e + _f(E[si, sj] * w, r32), r32)
                ed = _f(ed + _f(_f(Ed[si, sj] * w, r32) + _f(E[si, sj] * wdot, r32), r32), r32)
            E[i, j], Ed[i, j] = e, ed
            # the cell's own gamma source and its derivative, from its weights
            bu, bl = DL[i, j, 0], DL[i, j, 1]
            mean = _f(_f(W[i, j, 1] * bu, r32) + _f(W[i, j, 2] * bl, r32), r32)
            hc = 0.0
            hdot = 0.0
            for k in range(3):
                w = W[i, j, k]
                if w == 0.0:
                    continue
                delta = 0.0 if k == 0 else (bu if k == 1 else bl)
                wdot = _f(-_f(w * _f(delta - mean, r32), r32) / g, r32)
                hc = _f(hc + _f(w * L[i, j, k], r32), r32)
                hdot = _f(hdot + _f(wdot * L[i, j, k], r32), r32)
            vg += e * hc
            vgd += ed * hc + e * hdot
    return E[:N, :M], Ed[:N, :M], vg, vgd


def contractions(x, y, xd, yd, E, Ed):
    """s1 = <C-dot, E>, dx, dy of the double backward (hvp.hvp_xy), squared Euclidean, D = 1; float64 sums."""
    diff = x[:, None] - y[None, :]
    ddot = xd[:, None] - yd[None, :]
    Cd = 2.0 * diff * ddot
    t = Ed * diff + E * ddot
    return float((Cd * E).sum()), 2.0 * t.sum(1), -2.0 * t.sum(0)


def run(x, y, xd, yd, gamma):
    C = (x[:, None] - y[None, :]) ** 2
    Cd = 2.0 * (x[:, None] - y[None, :]) * (xd[:, None] - yd[None, :])
    qc = C / (gamma * LN2)
    out = {}
    for name in ("float64", "f32 absolute", "f32 differences"):
        if name == "f32 differences":
            W, L, DL, q, rd = forward_differences(qc, Cd)
        else:
            r32 = name != "float64"
            W, L, DL, q, rd = forward_absolute(qc.astype(np.float32).astype(np.float64) if r32 else qc,
                                               Cd.astype(np.float32).astype(np.float64) if r32 else Cd, r32)
        E, Ed, vg, vgd = backward(W, L, DL, Cd, gamma, name != "float64")
        s1, dx, dy = contractions(x, y, xd, yd, E, Ed)
        out[name] = (q * gamma * LN2, rd, s1, dx, dy, E, Ed, vg, vgd)
    return out


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def main():
    cases = [  # (N, M, gamma, scale): tests/backends/test_cuda_hvp_xy.py draws cumsum(randn) * 0.3
        (50, 500, 0.1, 0.3),  # its K = 16 case, where float32 frames failed (2.4e-3 > 2e-3)
        (50, 500, 1.0, 0.3),
        (256, 256, 0.1, 0.3),  # issue 24's shape, one pair
        (256, 256, 0.01, 0.3),
        (256, 256, 1e-3, 0.3),
        (256, 256, 1.0, 3.0),  # costs ~100x larger
        (1000, 1000, 0.1, 0.3),
    ]
    print("| N x M | gamma | scale | max C | arithmetic | value | value-dot | s1 | dx | dy | E | E-dot | vgamma "
          "| vgamma-dot |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for N, M, gamma, scale in cases:
        rng = np.random.default_rng(N + M)
        x = rng.standard_normal(N).cumsum() * scale
        y = rng.standard_normal(M).cumsum() * scale
        xd, yd = rng.standard_normal(N), rng.standard_normal(M)
        out = run(x, y, xd, yd, gamma)
        ref = out["float64"]
        cmax = float(((x[:, None] - y[None, :]) ** 2).max())
        for name in ("f32 absolute", "f32 differences"):
            got = out[name]
            errs = [rel(got[k], ref[k]) for k in range(9)]
            print(f"| {N} x {M} | {gamma:g} | {scale:g} | {cmax:.3g} | {name} | "
                  + " | ".join(f"{e:.2e}" for e in errs) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
