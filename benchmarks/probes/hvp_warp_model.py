"""A NumPy transliteration of kernels/hvp_warp.cu's schedule (one warp per pair, K columns per lane, skewed rows,
per-cell records, messages between lanes), checked against the cpu backend's hvp_cost in float64.

    PYTHONPATH=src python benchmarks/probes/hvp_warp_model.py [--pairs 40]

Models the lane / step / shuffle order exactly (register state per lane, what each shuffle carries and when
it is used), in float64; the kernel's float32 rounding is not modelled. Prints the largest error per output.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch

BIG, HALF, LWMIN = 1e200, 1e199, -2000.0
LN2 = math.log(2.0)
NL = 32


def forward(C, Cd, gamma, gd, n, m, win, K):
    """Records per (step, lane, k): (w_up, w_left, wdot_up, wdot_left); w_up = -1 for a dead cell."""
    hard = gamma == 0.0
    scale = 1.0 if hard else 1.0 / (gamma * LN2)
    ig = 0.0 if hard else 1.0 / gamma
    nl = min(NL, -(-m // K))
    T = n + nl - 1
    R = np.full((NL, K), BIG)
    Q = np.zeros((NL, K))
    lastR, lastQ = np.full(NL, BIG), np.zeros(NL)
    prevR = np.full(NL, BIG)
    prevQ = np.zeros(NL)
    prevR[0] = 0.0  # lane 0: R[-1, -1] = 0 before row 0
    rec = np.zeros((T, NL, K, 4))
    rec[..., 0] = -1.0
    for t in range(T):
        # shuffles (state of the previous step): left neighbour's last column
        inR = np.concatenate([[BIG], lastR[:-1]])
        inQ = np.concatenate([[0.0], lastQ[:-1]])
        for L in range(NL):
            i = t - L
            dR, dQ = prevR[L], prevQ[L]
            prevR[L], prevQ[L] = inR[L], inQ[L]
            if not 0 <= i < n:
                continue
            lR, lQ = inR[L], inQ[L]
            for k in range(K):
                j = L * K + k
                uR, uQ = R[L, k], Q[L, k]
                c = C[i, j] if j < C.shape[1] else 0.0
                ok = j < m and np.isfinite(c)
                if win is not None:
                    ok = ok and win[i, 0] <= j < win[i, 1]
                Rs, Qs = BIG, 0.0
                r = (-1.0, 0.0, 0.0, 0.0)
                if ok:
                    if hard:
                        cand = [dR if dR < HALF else 1e30, uR if uR < HALF else 1e30, lR if lR < HALF else 1e30]
                        ch = 0 if (cand[0] <= cand[1] and cand[0] <= cand[2]) else (1 if cand[1] <= cand[2] else 2)
                        mn = cand[ch]
                        if mn < 0.5e30:
                            Rs = mn + c
                            r = (1.0 if ch == 1 else 0.0, 1.0 if ch == 2 else 0.0, 0.0, 0.0)
                    else:
                        mn = min(dR, uR, lR)
                        if mn < HALF:
                            o = [max(min(mn - x, 0.0), LWMIN) for x in (dR, uR, lR)]
                            e = [2.0 ** v for v in o]
                            Z = sum(e)
                            lz = math.log2(Z)
                            w = [v / Z for v in e]
                            lnw = [LN2 * (v - lz) for v in o]
                            H = sum(a * b for a, b in zip(w, lnw))
                            Qp = [dQ, uQ, lQ]
                            Qr = dQ if mn == dR else (uQ if mn == uR else lQ)
                            Sd = Qr + sum(a * (q - Qr) for a, q in zip(w, Qp)) + gd * H
                            wdot = [a * ((Sd - q) - gd * ln) * ig for a, q, ln in zip(w, Qp, lnw)]
                            Qs = Sd + Cd[i, j]
                            Rs = (mn - lz) + c * scale
                            r = (w[1], w[2], wdot[1], wdot[2])
                rec[t, L, k] = r
                R[L, k], Q[L, k] = Rs, Qs
                dR, dQ = uR, uQ
                lR, lQ = Rs, Qs
            lastR[L], lastQ[L] = R[L, K - 1], Q[L, K - 1]
    return rec, T


def backward(rec, T, n, m, N, M, K):
    E, Ed = np.zeros((N, M)), np.zeros((N, M))
    upE, upF = np.zeros((NL, K)), np.zeros((NL, K))
    dgE, dgF = np.zeros((NL, K)), np.zeros((NL, K))
    rcvR = np.zeros((NL, 2))
    rcvDnew, rcvDold = np.zeros((NL, 2)), np.zeros((NL, 2))
    vg = vgd = 0.0
    for t in range(T - 1, -1, -1):
        sendL, sendD = np.zeros((NL, 2)), np.zeros((NL, 2))
        for L in range(NL):
            i = t - L
            if not 0 <= i < n:
                upE[L] = upF[L] = dgE[L] = dgF[L] = 0.0
                continue
            rE, rF = rcvR[L]
            cE, cF = rcvDold[L]  # the diagonal message for column K - 1 (two steps old)
            for k in range(K - 1, -1, -1):
                j = L * K + k
                oE, oF = dgE[L, k], dgF[L, k]  # this column's diagonal message of the last step: column k - 1's
                if i == n - 1 and j == m - 1:
                    e, f = 1.0, 0.0
                else:
                    e = rE + upE[L, k] + cE
                    f = rF + upF[L, k] + cF
                wu, wl, du, dl = rec[t, L, k]
                if wu < 0:
                    e = f = 0.0
                    wu = wl = du = dl = 0.0
                    wd = dd = 0.0
                else:
                    wd = max(0.0, 1.0 - wu - wl)
                    dd = -(du + dl)
                lnw = [LN2 * math.log2(max(w, 1e-300)) if w > 0 else 0.0 for w in (wd, wu, wl)]
                H = wd * lnw[0] + wu * lnw[1] + wl * lnw[2]
                Hd = dd * lnw[0] + du * lnw[1] + dl * lnw[2]
                vg += e * H
                vgd += f * H + e * Hd
                upE[L, k], upF[L, k] = e * wu, f * wu + e * du
                dgE[L, k], dgF[L, k] = e * wd, f * wd + e * dd
                rE, rF = e * wl, f * wl + e * dl
                cE, cF = oE, oF
                if j < M:
                    E[i, j], Ed[i, j] = e, f
            sendL[L] = (rE, rF)
            sendD[L] = (dgE[L, 0], dgF[L, 0])
        rcvR = np.concatenate([sendL[1:], np.zeros((1, 2))])
        rcvDold = rcvDnew
        rcvDnew = np.concatenate([sendD[1:], np.zeros((1, 2))])
    return E, Ed, vg, vgd


def model(C, Cd, gamma, gd, xl, yl, window, K):
    B, N, M = C.shape
    out = [np.zeros((B, N, M)), np.zeros(B), np.zeros((B, N, M)), np.zeros(B)]
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        win = None if window is None else window[b]
        rec, T = forward(C[b], Cd[b], gamma, float(gd[b]), n, m, win, K)
        E, Ed, vg, vgd = backward(rec, T, n, m, N, M, K)
        out[0][b], out[2][b] = E, Ed
        out[1][b], out[3][b] = (0.0, 0.0) if gamma == 0 else (vg, vgd)
        if gamma == 0:
            out[2][b] = 0.0
    return out


def main():
    from softdtw._checks import make_window
    from softdtw.backends import cpu

    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=24)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    worst = 0.0
    for case in range(args.pairs):
        K = [1, 2, 4][case % 3]
        B = 2
        N = int(rng.integers(1, 50))
        M = int(rng.integers(1, 32 * K + 1))
        gamma = [1e-3, 0.1, 1.0, 10.0, 0.0][case % 5]
        sc = 1e-3 if gamma == 1e-3 else 1.0
        x = rng.standard_normal((B, N, 1))
        y = rng.standard_normal((B, M, 1))
        C = (x - y.transpose(0, 2, 1)) ** 2 * sc
        if case % 4 == 1 and N > 2 and M > 2:
            C[0, N // 2, M // 3] = np.inf
        Cd = rng.standard_normal((B, N, M)) * sc
        gd = rng.standard_normal(B) * sc
        xl = torch.tensor([N, max(1, int(rng.integers(N // 2, N + 1)))])
        yl = torch.tensor([M, max(1, int(rng.integers(M // 2, M + 1)))])
        band = None if case % 2 == 0 else int(rng.integers(1, 6))
        window = make_window(xl, yl, N, M, band, None)
        want = cpu.hvp_cost(torch.tensor(C), torch.tensor(gamma, dtype=torch.float64), xl, yl, window,
                            torch.tensor(Cd), torch.tensor(gd))
        got = model(C, Cd, gamma, gd, xl, yl, None if window is None else window.numpy(), K)
        errs = []
        for g, w in zip(got, want):
            w = w.numpy()
            errs.append(float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1.0) if w.size else 0.0)
        worst = max(worst, max(errs))
        print(f"case {case:2d} K={K} N={N:2d} M={M:3d} lens={xl.tolist()}x{yl.tolist()} band={band} gamma={gamma:g}: "
              + " ".join(f"{e:.1e}" for e in errs), flush=True)
    print(f"worst relative error {worst:.2e}")


if __name__ == "__main__":
    main()
