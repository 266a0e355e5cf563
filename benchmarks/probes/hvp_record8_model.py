"""An 8-byte HVP record for hvp_warp.cu's DIFF passes, as NumPy, cell for cell (issue 24, OPTIMIZATION_LOG "Lean HVP
passes" and "An 8-byte HVP record").

    python3 benchmarks/probes/hvp_record8_model.py

The DIFF forward (hvp_diff_model.differences, float32) stores per cell only d = R'_ij - R'_i-1,j and dq (the same of
R-dot), 8 bytes in float32 instead of the four weights' 16. The backward rebuilds what the weights need:
  - h = R'_ij - R'_i,j-1 and hq column by column upwards, h_i-1,j = h_ij - d_ij + d_i,j-1 (hq likewise), from the
    last row's h, hq (which the forward leaves in registers);
  - w_up = 2^(d - c'), w_left = 2^(h - c'), w_diag = 1 - w_up - w_left, with c' = C / (gamma ln 2) formed again;
  - wdot_up = w_up (dq - C-dot) / gamma, wdot_left = w_left (hq - C-dot) / gamma (S-dot - R-dot of the predecessor:
    dq - C-dot = S-dot - R-dot_up).
Every operation of the rebuild is rounded to float32 (the GPU's ex2 is not modelled). Prints E, E-dot and dx against
the float64 absolute forward and backward (max error over the max, as tests' rel_err) for:
  16 B      today's record (w_up, w_left, wdot_up, wdot_left from the DIFF forward);
  16 B exp  the weights rebuilt from stored (h, d, hq, dq) by 2^(d - c'), no carried value: isolates the formula;
  12 B      (h, d, dq) stored, hq carried;
  8 B       (d, dq) stored, h and hq carried;
  12 B q16  today's record with w_up, w_left in 16-bit fixed point (common.cuh Link<float>'s packing), wdots float32.
"""
import numpy as np

import hvp_diff_model as M

f32 = M.f32


def rebuilt(C, Cd, g, A, carry_h, carry_hq):
    """Records rebuilt from the stored differences A = (h, hq, d, dq) `(4, n, m)` of the DIFF forward
    (hvp_diff_model.differences); carry_h / carry_hq: h / hq carried up from the last row."""
    H, HQ, DD, DQ = A
    n, m = C.shape
    sc, ig = 1 / (g * M.LN2), 1 / g
    rec = np.zeros((n, m, 4))
    h, hq = H[n - 1].copy(), HQ[n - 1].copy()
    for i in range(n - 1, -1, -1):
        if not carry_h:
            h = H[i].copy()
        if not carry_hq:
            hq = HQ[i].copy()
        nh, nhq = h.copy(), hq.copy()
        for j in range(m):
            cs, cdot = f32(C[i, j] * sc), f32(Cd[i, j])
            d, dq = DD[i, j], DQ[i, j]
            if i == 0:
                rec[i, j] = (0.0, 0.0 if j == 0 else 1.0, 0.0, 0.0)
            elif j == 0:
                rec[i, j] = (1.0, 0.0, 0.0, 0.0)
            else:
                wu, wl = f32(2.0 ** f32(d - cs)), f32(2.0 ** f32(h[j] - cs))
                rec[i, j] = (wu, wl, f32(f32(wu * f32(dq - cdot)) * ig), f32(f32(wl * f32(hq[j] - cdot)) * ig))
            if j > 0:
                nh[j] = f32(f32(h[j] - d) + DD[i, j - 1])
                nhq[j] = f32(f32(hq[j] - dq) + DQ[i, j - 1])
        h, hq = nh, nhq
    return rec


def q16(rec):
    """w_up and w_up + w_left rounded to multiples of 1/65535, as Link<float>::pack."""
    r = rec.copy()
    a, c = np.round(r[..., 0] * 65535.0), np.round((r[..., 0] + r[..., 1]) * 65535.0)
    r[..., 0], r[..., 1] = a / 65535.0, (c - a) / 65535.0
    return r


def main():
    rng = np.random.default_rng(1)
    rel = lambda a, b: np.abs(a - b).max() / np.abs(b).max()  # noqa: E731
    cases = (("randn", 60, 50, 1.0), ("randn", 128, 128, 0.1), ("randn", 100, 90, 0.01), ("walk", 60, 50, 0.01),
             ("walk", 256, 256, 0.1), ("walk", 200, 300, 1.0))
    for kind, n, m, g in cases:
        if kind == "walk":
            x, y = np.cumsum(rng.normal(size=n)), np.cumsum(rng.normal(size=m))
        else:
            x, y = rng.normal(size=n), rng.normal(size=m)
        xd, yd = rng.normal(size=n), rng.normal(size=m)
        D = x[:, None] - y[None, :]
        C, Cd = D ** 2, 2 * D * (xd[:, None] - yd[None, :])
        C32, Cd32 = C.astype(np.float32).astype(np.float64), Cd.astype(np.float32).astype(np.float64)
        _, r0 = M.absolute(C, Cd, g)
        E0, F0 = M.backward(r0)
        dx = lambda E, F: 2 * (F * D + E * (xd[:, None] - yd[None, :])).sum(1)  # noqa: E731
        A = np.zeros((4, n, m))
        _, r16 = M.differences(C32, Cd32, g, f32, f32, A)  # today's record, and the differences it came from
        variants = (("16 B", r16), ("16 B exp", rebuilt(C32, Cd32, g, A, False, False)),
                    ("12 B", rebuilt(C32, Cd32, g, A, False, True)), ("8 B", rebuilt(C32, Cd32, g, A, True, True)),
                    ("12 B q16", q16(r16)))
        print(f"{kind} {n} x {m}, gamma {g}")
        for name, r in variants:
            E, F = M.backward(r)
            print(f"  {name:9s} E {rel(E, E0):.1e}  Edot {rel(F, F0):.1e}  dx {rel(dx(E, F), dx(E0, F0)):.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
