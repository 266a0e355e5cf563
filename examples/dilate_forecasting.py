"""Forecasting sharp steps with MSE, soft-DTW and DILATE (Le Guen & Thome 2019, their synthetic task in miniature).

Each series is 20 observed steps with two jumps, then 20 future steps with one jump of random height whose timing
is only roughly predictable from the past. Three identical 2-layer MLPs are trained: with MSE (which hedges:
a smooth ramp where the jump should be), with soft-DTW (sharp, but free to be late or early), and with DILATE =
alpha * soft-DTW + (1 - alpha) * <E, Omega> (sharp and on time). The script prints each model's test MSE,
DTW and temporal distortion (the hard DTW path's sum of ((i - j) / N)^2, DILATE's temporal term at gamma = 0),
and saves a figure of a few test forecasts.

DILATE's gradient is a Hessian-vector product of soft-DTW; the script uses the cpu backend when it has the
second order (``hvp_cost``) and the reference backend (exact, slower) otherwise, and says which.

    python examples/dilate_forecasting.py                          # ~30 s on a 2-core CPU (reference backend)
    python examples/dilate_forecasting.py --out /tmp/dilate.png --steps 200
"""
import argparse
import os
import tempfile
import time

import torch

import softdtw
from softdtw.backends import get_backend

IN, OUT = 20, 20


def make_steps(n: int, seed: int):
    """n series: past (n, IN) with two jumps, future (n, OUT, 1) with one jump, timing jittered by +-3 steps."""
    g = torch.Generator().manual_seed(seed)
    t_in = torch.arange(IN, dtype=torch.float32)
    t_out = torch.arange(OUT, dtype=torch.float32)
    a, b = torch.randint(2, 9, (n, 1), generator=g), torch.randint(11, 18, (n, 1), generator=g)
    h1, h2 = torch.rand(n, 1, generator=g), torch.rand(n, 1, generator=g)
    past = h1 * (t_in >= a) + h2 * (t_in >= b) + 0.03 * torch.randn(n, IN, generator=g)
    when = (b - 8) + torch.randint(-3, 4, (n, 1), generator=g)  # the future jump follows the second past jump
    height = (h1 + h2).clamp(max=1.5) * (0.6 + 0.4 * torch.rand(n, 1, generator=g))
    base = (h1 + h2)
    future = base - height * (t_out >= when) + 0.03 * torch.randn(n, OUT, generator=g)
    return past, future.unsqueeze(-1)


def train(kind: str, past, future, steps: int, backend: str, gamma: float, alpha: float, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(IN, 128), torch.nn.ReLU(), torch.nn.Linear(128, OUT))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sdtw = softdtw.SoftDTW(gamma, reduction="mean", backend=backend)
    dilate = softdtw.DILATELoss(alpha, gamma, reduction="mean", backend=backend)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(len(past), (64,), generator=gen)
        pred = model(past[idx]).unsqueeze(-1)
        target = future[idx]
        if kind == "MSE":
            loss = torch.nn.functional.mse_loss(pred, target)
        elif kind == "soft-DTW":
            loss = sdtw(pred, target)
        else:
            loss = dilate(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def evaluate(model, past, future):
    with torch.no_grad():
        pred = model(past).unsqueeze(-1)
        mse = torch.nn.functional.mse_loss(pred, future).item()
        dtw = softdtw.dtw(pred, future).mean().item()
        tdi = softdtw.dilate_loss(pred, future, 0.0, 0.0).mean().item()  # <E_hard, ((i - j) / N)^2>
    return pred, mse, dtw, tdi


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "dilate_forecasting.png"),
                    help="path of the figure, or a folder for dilate_forecasting.png (default: the temp directory)")
    ap.add_argument("--steps", type=int, default=300, help="training steps per model (default 300)")
    ap.add_argument("--gamma", type=float, default=0.01, help="soft-DTW smoothing (default 0.01, the paper's)")
    ap.add_argument("--alpha", type=float, default=0.5, help="DILATE's shape weight (default 0.5, the paper's)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tensors of a few thousand numbers: threads cost more than they give

    backend = "cpu" if getattr(get_backend("cpu"), "hvp_cost", None) is not None else "reference"
    print(f"backend: {backend}" + ("" if backend == "cpu" else
                                   " (the cpu backend has no second order yet; the reference one is exact, slower)"))
    past, future = make_steps(800, seed=0)
    test_past, test_future = make_steps(200, seed=1)
    preds = {}
    print(f"{'loss':10s} {'test MSE':>9s} {'test DTW':>9s} {'temporal':>9s} {'seconds':>8s}")
    for kind in ("MSE", "soft-DTW", "DILATE"):
        start = time.perf_counter()
        model = train(kind, past, future, args.steps, backend, args.gamma, args.alpha)
        pred, mse, dtw, tdi = evaluate(model, test_past, test_future)
        preds[kind] = pred
        print(f"{kind:10s} {mse:9.4f} {dtw:9.4f} {tdi:9.4f} {time.perf_counter() - start:8.1f}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), sharey=True)
    t_in, t_out = range(IN), range(IN, IN + OUT)
    for ax, k in zip(axes, (0, 1, 2)):
        ax.plot(t_in, test_past[k], color="0.4", label="input")
        ax.plot(t_out, test_future[k, :, 0], color="k", lw=2, label="truth")
        for kind, color in (("MSE", "tab:blue"), ("soft-DTW", "tab:orange"), ("DILATE", "tab:green")):
            ax.plot(t_out, preds[kind][k, :, 0], color=color, label=kind)
        ax.axvline(IN - 0.5, color="0.8", ls="--")
        ax.set_xlabel("step")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"MSE vs soft-DTW vs DILATE (gamma={args.gamma}, alpha={args.alpha})")
    fig.tight_layout()
    out = os.path.join(args.out, "dilate_forecasting.png") if os.path.isdir(args.out) else args.out
    fig.savefig(out, dpi=110)
    print(f"figure: {out}")


if __name__ == "__main__":
    main()
