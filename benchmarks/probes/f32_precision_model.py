"""A float32 model of the cuda forward's arithmetic, to see where float32 gradients lose precision.

The cuda kernels keep R in log2 units (costs scaled by 1 / (gamma ln 2)) and store each cell's soft-min
weights as 16-bit fixed point (kernels/common.cuh, Link<float>). This script replays that forward in
float32 on the CPU (Numba, row by row: the order does not change the rounding of a cell), runs the
backward's E recursion in float64 over the stored weights, and compares dx, dy with float64 soft-DTW:

- "absolute": R as the kernels kept it before frames (and still do in value-only passes), one float32 per cell;
- "frames":   the fix the kernels now use (kernels/forward_pair.cuh, "Frames"; measured on the H100: dy 8.6e-6
              at D = 33, gamma = 0.1, where absolute R gave 4.05e-3): each lane of K columns keeps its R
              relative to a frame of its own, re-anchored every 32 rows at its last column, neighbours'
              values converted by the exact difference of two frames (the chunk hand-over carrying the
              frame too);
- "quantised only": float64 R, only the weights rounded to 16 bits.

    PYTHONPATH=src python benchmarks/probes/f32_precision_model.py      # ~1 min; prints a markdown table

Measured on the H100 for comparison (tests/backends/test_cuda.py, test_float32_gradients_at_large_costs, which
runs the kernels with frames).
"""
import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests._helpers import case  # noqa: E402

LN2 = float(np.log(2.0))
Q = 65535.0  # Link<float>: weights in units of 1 / Q


@numba.njit(cache=False)
def _store(WU, WL, WD, i, j, wu, wl, wd, quantise):
    if quantise:
        qa = np.round(wu * Q)
        qc = np.round((wu + wl) * Q)
        wu, wl, wd = qa / Q, (qc - qa) / Q, (Q - qc) / Q
    WU[i, j], WL[i, j], WD[i, j] = wu, wl, wd


@numba.njit(cache=False)
def forward64(C, g, quantise):
    """float64 soft-DTW; weights w_p = exp((smin - R_p) / gamma), optionally quantised."""
    N, M = C.shape
    R = np.full((N + 1, M + 1), np.inf)
    R[0, 0] = 0.0
    WU, WL, WD = np.zeros((N, M)), np.zeros((N, M)), np.zeros((N, M))
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            d, u, l = R[i - 1, j - 1], R[i - 1, j], R[i, j - 1]
            m = min(d, min(u, l))
            ed, eu, el = np.exp(-(d - m) / g), np.exp(-(u - m) / g), np.exp(-(l - m) / g)
            Z = ed + eu + el
            R[i, j] = C[i - 1, j - 1] + m - g * np.log(Z)
            _store(WU, WL, WD, i - 1, j - 1, eu / Z, el / Z, ed / Z, quantise)
    return WU, WL, WD


@numba.njit(cache=False)
def forward32(C, g, K, P):
    """The kernel's float32 forward in log2 units. P = 0: absolute R; P > 0: frames per lane of K columns,
    re-anchored every P rows."""
    N, M = C.shape
    f = np.float32
    scale = f(1.0 / (g * LN2))
    BIG = f(1e30)
    nl = (M + K - 1) // K
    R = np.full((N + 1, M + 1), BIG, dtype=np.float32)  # relative to the frame of (row, lane)
    F = np.zeros((N + 1, nl + 1), dtype=np.float32)  # F[row, lane + 1]; F[:, 0] = 0 (the border)
    R[0, 0] = f(0)
    WU, WL, WD = np.zeros((N, M)), np.zeros((N, M)), np.zeros((N, M))
    for i in range(1, N + 1):
        for L in range(nl):
            jl = min(L * K + K, M)  # the lane's last column (1-based)
            Fo = F[i - 1, L + 1]
            Fn = Fo
            if P > 0 and i > 1 and (i - 1) % P == 0 and R[i - 1, jl] < f(5e29):
                Fn = f(Fo + R[i - 1, jl])
            dd = f(Fn - Fo)
            F[i, L + 1] = Fn
            G = f(F[i, L] - Fn)  # left neighbour's frame, this row and the row above
            Gp = f(F[i - 1, L] - Fn)
            for k in range(K):
                j = 1 + L * K + k
                if j > M:
                    break
                u = f(R[i - 1, j] - dd)
                if k == 0:
                    l = f(R[i, j - 1] + G) if j > 1 else BIG
                    d = f(R[i - 1, j - 1] + Gp) if j > 1 else (f(0) - Fn if i == 1 else BIG)
                else:
                    l = R[i, j - 1]
                    d = f(R[i - 1, j - 1] - dd)
                m = min(d, min(u, l))
                xd, xu, xl = f(2.0) ** f(m - d), f(2.0) ** f(m - u), f(2.0) ** f(m - l)
                Z = f(xd + xu + xl)
                R[i, j] = f(f(C[i - 1, j - 1] * scale) + f(m - f(np.log2(Z))))
                _store(WU, WL, WD, i - 1, j - 1, xu / Z, xl / Z, xd / Z, True)
    return WU, WL, WD


@numba.njit(cache=False)
def backward(WU, WL, WD):
    """E[i, j] = sum over the successors s of E[s] w(s <- (i, j)), in float64."""
    N, M = WU.shape
    E = np.zeros((N + 1, M + 1))
    E[N - 1, M - 1] = 1.0
    for i in range(N - 1, -1, -1):
        for j in range(M - 1, -1, -1):
            if i == N - 1 and j == M - 1:
                continue
            e = E[i + 1, j] * WU[i + 1, j] if i + 1 < N else 0.0
            if j + 1 < M:
                e += E[i, j + 1] * WL[i, j + 1]
                if i + 1 < N:
                    e += E[i + 1, j + 1] * WD[i + 1, j + 1]
            E[i, j] = e
    return E[:N, :M]


def grads(E, x, y):
    return 2 * (E.sum(1)[:, None] * x - E @ y), 2 * (E.sum(0)[:, None] * y - E.T @ x)


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    B, N, M, K = 2, 400, 700, 4
    models = {
        "absolute": lambda C, g: forward32(C.astype(np.float32), g, K, 0),
        "frames": lambda C, g: forward32(C.astype(np.float32), g, K, 32),
        "quantised only": lambda C, g: forward64(C, g, True),
    }
    print(f"B = {B}, N = {N}, M = {M}, K = {K}; max over the pairs of rel. error of dx / dy vs float64\n")
    print("| D | gamma | " + " | ".join(models) + " |")
    print("|---|---|" + "---|" * len(models))
    for D in (3, 33, 64):
        x, y = (t.numpy() for t in case(B, N, M, D))
        C = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
        for g in (1.0, 0.5, 0.1, 0.01):
            cells = []
            for fwd in models.values():
                err = np.zeros(2)
                for b in range(B):
                    want = grads(backward(*forward64(C[b], g, False)), x[b], y[b])
                    got = grads(backward(*fwd(C[b], g)), x[b], y[b])
                    err = np.maximum(err, [rel(got[0], want[0]), rel(got[1], want[1])])
                cells.append(f"{err[0]:.1e} / {err[1]:.1e}")
            print(f"| {D} | {g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
