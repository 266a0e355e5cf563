"""Is a loss step bound by the host or by the GPU? Medians per shape and loss (issue 27, the 32 x 512² row):

- ``step``: the whole step (clone, loss, ``.mean()``, ``.backward()``, synchronise), wall-clock, as
  bench_train_step.py times it;
- ``issue``: the host's part of it, from the step's start until ``.backward()`` returns (everything launched);
- ``issue_cpu``: the process's CPU time over that span, all threads (the autograd engine runs the backward on its own
  thread): time the host is taken from us (steal, preemption) counts in ``issue`` but not here, so host-path A/B runs
  on a drifting VM compare better by it (the check's wait spins, and counts in both);
- ``gpu_span``: CUDA events at the step's start and end: the GPU's time from the first piece to the last,
  idle gaps the host leaves included;
- ``gpu_busy``: the same span when the whole step is queued behind a ``torch.cuda._sleep`` (the host has
  launched everything before the GPU reaches the first piece): the kernels back to back, no host gaps. Only
  where the step never waits for the GPU: ``eager_nocheck`` (SOFTDTW_CHECK_VALUES=0), not ``eager``, whose host
  reads the value check's answer before it returns (checks.py), so there it measures the host after the sleep.

``step`` near ``issue`` + the sync's return means the host bounds the step; ``gpu_span`` above ``gpu_busy`` is
what the GPU waits for the host. Also the host's time at each piece's return (clone, loss, mean, backward), and for
``eager`` the value check's read (``check_ok``: µs in checks.PendingCheck.ok, the host waiting for the check kernel's
answer; ``check_waited``: the share of steps whose answer was not there at the first read).

    PYTHONPATH=src python3 benchmarks/probes/step_timeline.py [--src DIR] [--shape B,N,M,D ...] [--out F.jsonl]

Rows: ``mse`` (``F.mse_loss``), ``eager`` (``softdtw.soft_dtw(x, y, 0.1)``, whose ``.mean()`` the step takes) and
``eager_nocheck``, each repetition running them in a fresh random order (the host's speed drifts over minutes).
The C++ launcher is built first (fastpath.build()): until it is loaded, calls take the Python path. One JSON line
per (shape, loss); needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
GAMMA = 0.1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    ap.add_argument("--shape", action="append", default=[], metavar="B,N,M,D")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    import softdtw
    from softdtw.backends.cuda import fastpath

    fastpath.build()
    status = fastpath.status()
    print(status, flush=True)
    from softdtw.backends.cuda import checks

    acc = {"ok_ns": 0, "waited": 0}
    ok, wait = checks.PendingCheck.ok, checks.PendingCheck._wait

    def timed_ok(self):
        t = time.perf_counter_ns()
        try:
            return ok(self)
        finally:
            acc["ok_ns"] += time.perf_counter_ns() - t

    def counted_wait(self):
        acc["waited"] += 1
        return wait(self)

    checks.PendingCheck.ok, checks.PendingCheck._wait = timed_ok, counted_wait
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shape or ["32,512,512,1"])]
    losses = {"mse": lambda x, y, t: F.mse_loss(x, t),
              "eager": lambda x, y, t: softdtw.soft_dtw(x, y, GAMMA)}
    losses["eager_nocheck"] = losses["eager"]  # the same call; body() turns the value check off for it
    sleep_cycles = 6_000_000  # ~3 ms at the H100/H200 clocks: longer than any step's issue here
    keys = ("step", "issue", "issue_cpu", "gpu_span", "gpu_busy", "clone", "loss", "mean", "backward", "check_ok",
            "check_waited")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for B, N, M, D in shapes:
        torch.manual_seed(0)
        x = torch.randn(B, N, D, device="cuda")
        y = torch.randn(B, M, D, device="cuda")
        t = torch.randn(B, N, D, device="cuda")
        rec = {name: {k: [] for k in keys} for name in losses}

        def body(name, marks=None):
            os.environ["SOFTDTW_CHECK_VALUES"] = "0" if name == "eager_nocheck" else "1"
            c0 = time.process_time_ns()
            h0 = time.perf_counter_ns()
            xc = x.clone().requires_grad_(True)
            h1 = time.perf_counter_ns()
            v = losses[name](xc, y, t)
            h2 = time.perf_counter_ns()
            loss = v.mean()
            h3 = time.perf_counter_ns()
            loss.backward()
            h4 = time.perf_counter_ns()
            c4 = time.process_time_ns()
            if marks is not None:
                marks += [h0, h1, h2, h3, h4, c4 - c0]

        for name in losses:
            for _ in range(30):
                body(name)
        torch.cuda.synchronize()
        order, rng = list(losses), random.Random(0)
        for i in range(args.reps):
            rng.shuffle(order)
            for name in order:
                r = rec[name]
                if i % 2 == 0:  # the plain step
                    marks = []
                    torch.cuda.synchronize()
                    acc["ok_ns"] = acc["waited"] = 0
                    t0 = time.perf_counter_ns()
                    e0.record()
                    body(name, marks)
                    e1.record()
                    torch.cuda.synchronize()
                    t1 = time.perf_counter_ns()
                    h0, h1, h2, h3, h4, cpu = marks
                    r["step"].append((t1 - t0) / 1e3)
                    r["issue"].append((h4 - t0) / 1e3)
                    r["issue_cpu"].append(cpu / 1e3)
                    r["gpu_span"].append(e0.elapsed_time(e1) * 1e3)
                    for k, a, b in (("clone", h0, h1), ("loss", h1, h2), ("mean", h2, h3), ("backward", h3, h4)):
                        r[k].append((b - a) / 1e3)
                    r["check_ok"].append(acc["ok_ns"] / 1e3)
                    r["check_waited"].append(min(acc["waited"], 1))
                else:  # queued behind a sleep: the GPU's own time
                    torch.cuda.synchronize()
                    torch.cuda._sleep(sleep_cycles)
                    e0.record()
                    body(name)
                    e1.record()
                    torch.cuda.synchronize()
                    r["gpu_busy"].append(e0.elapsed_time(e1) * 1e3)
        os.environ["SOFTDTW_CHECK_VALUES"] = "1"
        for name in losses:
            row = {"tag": args.tag, "B": B, "N": N, "M": M, "D": D, "loss": name, "fastpath": status[:40],
                   **{k + "_us": round(median(v), 1) for k, v in rec[name].items() if k != "check_waited"},
                   "check_waited": round(sum(rec[name]["check_waited"]) / max(1, len(rec[name]["check_waited"])), 3)}
            print(json.dumps(row), flush=True)
            if args.out is not None:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
