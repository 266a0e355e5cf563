"""The HVP forward of hvp_warp.cu's DIFF branch (float32 local differences) as NumPy, cell for cell, against the
absolute float64 forward of the same kernel; E and E-dot from each one's records by the kernel's backward (issue 24,
OPTIMIZATION_LOG "The HVP forward on local differences in float32").

    python3 benchmarks/probes/hvp_diff_model.py

Each cell keeps h = R'_ij - R'_i,j-1 and d = R'_ij - R'_i-1,j (and hq, dq of R-dot); its soft-min sees (0, h above,
d left) relative to its diagonal predecessor; row 0 and column 0 have one predecessor. The records (w_up, w_left
and their derivatives) are the absolute kernel's. Rounding: `f32` rounds every operation of the chosen part (R'
differences, R-dot differences, or both) to float32 (the GPU's ex2 / lg2 approximations are not modelled). Prints,
per case, the records' and outputs' max error relative to the float64 absolute forward (the form of tests' rel_err).
Exact in float64 (records within 1e-10); float32 at gamma = 1 on random walks of 200 x 300 steps: dx 2.1e-4.
"""
import numpy as np

LN2 = np.log(2.0)
f32 = lambda v: float(np.float32(v))  # noqa: E731
f64 = lambda v: v  # noqa: E731


def absolute(C, Cd, g):
    """The kernel's float64 forward (gamma-dot = 0): value and records (w_up, w_left, wdot_up, wdot_left) per cell."""
    n, m = C.shape
    sc, big = 1 / (g * LN2), 1e200
    R = np.full((n + 1, m + 1), big)
    Q = np.zeros((n + 1, m + 1))
    R[0, 0] = 0
    rec = np.zeros((n, m, 4))
    for i in range(n):
        for j in range(m):
            d, u, l = R[i, j], R[i, j + 1], R[i + 1, j]
            mn = min(d, u, l)
            e = [2.0 ** max(mn - a, -2000) for a in (d, u, l)]
            Z = sum(e)
            w = [x / Z for x in e]
            S = w[0] * Q[i, j] + w[1] * Q[i, j + 1] + w[2] * Q[i + 1, j]
            rec[i, j] = (w[1], w[2], w[1] * (S - Q[i, j + 1]) / g, w[2] * (S - Q[i + 1, j]) / g)
            R[i + 1, j + 1] = mn - np.log2(Z) + C[i, j] * sc
            Q[i + 1, j + 1] = S + Cd[i, j]
    return R[n, m] / sc, rec


def differences(C, Cd, g, fR, fQ, diffs=None):
    """The DIFF forward: fR rounds the R' differences' arithmetic, fQ the R-dot differences'. diffs: None, or a
    `(4, n, m)` array that receives every cell's h, hq, d, dq (hvp_record8_model rebuilds records from them)."""
    n, m = C.shape
    sc, ig = 1 / (g * LN2), 1 / g
    hv, hq = np.zeros(m), np.zeros(m)
    rec = np.zeros((n, m, 4))
    vsum = 0.0
    for i in range(n):
        lD = lDQ = 0.0
        for j in range(m):
            cs, cdot = fR(C[i, j] * sc), fQ(Cd[i, j])
            hu, hqu = hv[j], hq[j]
            h = dd = hqn = dqn = du = dw = 0.0
            if i == 0:
                h, hqn, wu, wl = cs, cdot, 0.0, (0.0 if j == 0 else 1.0)
                vsum += cs
            elif j == 0:
                dd, dqn, wu, wl = cs, cdot, 1.0, 0.0
            else:
                mn = min(0.0, hu, lD)
                ou, ol = fR(mn - hu), fR(mn - lD)
                ed, eu, el = fR(2.0 ** mn), fR(2.0 ** ou), fR(2.0 ** ol)
                Z = fR(fR(ed + eu) + el)
                lz, iz = fR(np.log2(Z)), fR(1 / Z)
                wu, wl = fR(eu * iz), fR(el * iz)
                sd = fQ(fQ(wu * hqu) + fQ(wl * lDQ))
                du, dw = fQ(fQ(wu * fQ(sd - hqu)) * ig), fQ(fQ(wl * fQ(sd - lDQ)) * ig)
                rel, qrel = fR(fR(mn - lz) + cs), fQ(sd + cdot)
                h, dd, hqn, dqn = fR(rel - lD), fR(rel - hu), fQ(qrel - lDQ), fQ(qrel - hqu)
            if j == m - 1 and i > 0:
                vsum += dd
            rec[i, j] = (wu, wl, du, dw)
            if diffs is not None:
                diffs[:, i, j] = h, hqn, dd, dqn
            hv[j], hq[j], lD, lDQ = h, hqn, dd, dqn
    return vsum / sc, rec


def backward(rec):
    """E and E-dot from the records, as the kernel's backward (w_diag = 1 - w_up - w_left)."""
    n, m, _ = rec.shape
    E, F = np.zeros((n + 1, m + 1)), np.zeros((n + 1, m + 1))
    E[n, m] = 1
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            e, f = E[i + 1, j + 1], F[i + 1, j + 1]
            wu, wl, du, dl = rec[i, j]
            wd, dd = 1 - wu - wl, -(du + dl)
            E[i, j + 1] += e * wu
            F[i, j + 1] += f * wu + e * du
            E[i + 1, j] += e * wl
            F[i + 1, j] += f * wl + e * dl
            E[i, j] += e * wd
            F[i, j] += f * wd + e * dd
    return E[1:, 1:], F[1:, 1:]


def main():
    rng = np.random.default_rng(1)
    rel = lambda a, b: np.abs(a - b).max() / np.abs(b).max()  # noqa: E731
    for n, m, g in ((7, 5, 1.0), (60, 50, 0.01), (256, 256, 1e-3), (256, 256, 0.1), (200, 300, 1.0)):
        x, y = np.cumsum(rng.normal(size=n)), np.cumsum(rng.normal(size=m))
        xd, yd = rng.normal(size=n), rng.normal(size=m)
        D = x[:, None] - y[None, :]
        C, Cd = D ** 2, 2 * D * (xd[:, None] - yd[None, :])
        v0, r0 = absolute(C, Cd, g)
        E0, F0 = backward(r0)
        dx = lambda E, F: 2 * (F * D + E * (xd[:, None] - yd[None, :])).sum(1)  # noqa: E731
        row = [f"{n} x {m}, gamma {g}:"]
        for name, fR, fQ in (("float64", f64, f64), ("R' f32", f32, f64), ("R-dot f32", f64, f32), ("f32", f32, f32)):
            v, r = differences(C, Cd, g, fR, fQ)
            E, F = backward(r)
            row.append(f"{name}: v {abs(v - v0) / abs(v0):.1e} E {rel(E, E0):.1e} Edot {rel(F, F0):.1e} "
                       f"dx {rel(dx(E, F), dx(E0, F0)):.1e}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
