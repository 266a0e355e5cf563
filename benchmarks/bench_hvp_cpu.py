"""CPU benchmark of the second order: the cpu backend's hvp_cost at DILATE-like sizes.

    PYTHONPATH=src python benchmarks/bench_hvp_cpu.py [--out FILE.json] [--reps 15] [--smoke] [--variants]

--variants times only hvp_cost of the alignment variants (open_end; open_begin + open_end, the subsequence
case; and with a step penalty and its direction) against the plain hvp_cost, B = 64, N = M = 256, all threads.

DILATE (Le Guen & Thome 2019) trains with soft-DTW plus <E, Omega>: its forward needs the value and E
(a soft-DTW forward + backward), its backward the Hessian-vector product along Omega (hvp_cost). So one
DILATE forward + backward = value + gradient + one HVP, timed here at the backend: ``forward_cost``
(memory="store") + ``backward_cost`` + ``hvp_cost`` on a precomputed cost C `(B, N, M)` (squared
Euclidean of D = 1 series; computing C is not timed), B = 64, N = M = 100 and 256, gamma = 0.01, float32
and float64, on all cores and on one (numba.set_num_threads(1)). Each part is also timed alone.

cells/s = B·N·M / time: the cells are counted once for the three passes together.

"value+hvp(one call)" is the same DILATE step done another way: Omega does not depend on the prediction,
so one hvp_cost call with Cdot = Omega gives E (the temporal term's value <E, Omega>) and Edot = H Omega
(its gradient in C) at once, and forward_cost(memory="none") the soft-DTW value; the backward then has
nothing left to compute. Its ratio is against the same 3.7 ms per pair.

cpu_ms: the process's CPU time for the same call (all threads), a figure less moved by the other
processes of a shared machine than the wall-clock ms; Mcells_per_s_cpu = B·N·M / (cpu_ms / threads),
the rate on idle cores if the threads scaled perfectly (a projection, labelled as such).

The comparison is the published figure of the public implementation (vincent-leguen/DILATE's Numba
code, one pair at a time, N x N only), quoted, not run here: about 6 M cells/s on one core, E ~1.6 ms and
the HVP ~2.1 ms per pair at N = 100, gamma = 0.01, i.e. value + gradient + HVP ~3.7 ms per pair
(2.7 M cells/s). ratio_vs_dilate = our cells/s over that 2.7 M cells/s for the three passes, over 6.25 M
(E alone) for value + gradient, and over 4.8 M for the HVP alone.

Timing: warm-up (Numba compiles outside the timings), then the variants of a size run in alternation,
``reps`` times, median kept (benchmarks/_harness.py). Results: ``--out`` (JSON and .md), by default a
new timestamped file in the working directory.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _harness  # noqa: E402
from softdtw.backends import cpu  # noqa: E402

GAMMA = 0.01
# Per pair at N = M = 100 (the figures for vincent-leguen/DILATE, one core): E 1.6 ms, HVP 2.1 ms.
DILATE_MS = {"value+gradient": 1.6, "hvp_cost": 2.1, "value+gradient+hvp": 3.7, "value+hvp(one call)": 3.7}
DILATE_CELLS = 100 * 100


READING = """Reading: on a shared 2-core machine (load average above 2) the wall-clock columns measure the share of
the cores this process got, not the kernels; cpu_ms is steadier for one thread (min of a few runs), while
for two threads it came out noisy (a min over few samples). The issue's target (DILATE forward + backward
>= 60 M cells/s on 2 cores) is to be read from an idle machine; here the best estimate is twice the
one-thread Mcells_per_s_cpu.
"""


def _problem(B, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, 1, generator=g, dtype=torch.float64).cumsum(1) * 0.1
    y = x + 0.3 * torch.randn(B, N, 1, generator=g, dtype=torch.float64)
    C = ((x - y.transpose(1, 2)) ** 2).to(dtype).contiguous()
    i = torch.arange(N, dtype=torch.float64)
    omega = ((i.view(-1, 1) - i.view(1, -1)) / N) ** 2  # DILATE's temporal penalty, the HVP's direction
    Cdot = omega.expand(B, N, N).to(dtype).contiguous()
    return C, Cdot, torch.zeros(B, dtype=dtype)


def _variants(C, Cdot, gdot):
    B, N, M = C.shape
    gamma = torch.tensor(GAMMA, dtype=C.dtype)
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    ones = torch.ones(B, dtype=C.dtype)

    def first():
        v, saved = cpu.forward_cost(C, gamma, xl, yl, None, "store")
        return cpu.backward_cost(ones, C, gamma, xl, yl, None, v, saved, "store")

    def hvp():
        return cpu.hvp_cost(C, gamma, xl, yl, None, Cdot, gdot)

    def both():
        first()
        return hvp()

    def one_call():  # Omega is a constant: E (the temporal value) and Edot (its gradient) in one call
        v, _ = cpu.forward_cost(C, gamma, xl, yl, None, "none")
        return v, hvp()

    return {"value+gradient": first, "hvp_cost": hvp, "value+gradient+hvp": both, "value+hvp(one call)": one_call}


def _subsequence(C, Cdot, gdot):
    """hvp_cost of the plain DP against the open-end subsequence variants (issue 25) on the same problem."""
    B, N, M = C.shape
    gamma = torch.tensor(GAMMA, dtype=C.dtype)
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    pen = torch.tensor(0.05, dtype=C.dtype)
    pdot = torch.ones(B, dtype=C.dtype)

    def run(**kw):
        return lambda: cpu.hvp_cost(C, gamma, xl, yl, None, Cdot, gdot, **kw)

    return {"hvp_cost plain": run(), "hvp_cost open_end": run(open_end=True),
            "hvp_cost open_begin+open_end": run(open_begin=True, open_end=True),
            "hvp_cost open ends+step_penalty": run(open_begin=True, open_end=True, step_penalty=pen,
                                                   penalty_dot=pdot)}


def variants_main(args):
    """--variants: the alignment variants' hvp_cost against the plain one, B = 64, N = M = 256, all threads."""
    B, N = (8, 16) if args.smoke else (64, 256)
    reps = 2 if args.smoke else args.reps
    rows = []
    for dtype in (torch.float32, torch.float64):
        C, Cdot, gdot = _problem(B, N, dtype)
        fns = _subsequence(C, Cdot, gdot)
        ms = _harness.interleaved_median_ms(fns, reps, desc=f"variants {dtype} B={B} N={N}")
        for part, t in ms.items():
            rows.append(dict(part=part, dtype=str(dtype).replace("torch.", ""), threads=numba.get_num_threads(), B=B,
                             N=N, M=N, ms=t, Mcells_per_s=B * N * N / (t * 1e-3) / 1e6,
                             vs_plain=t / ms["hvp_cost plain"]))
            print(rows[-1], flush=True)
    meta = dict(device=_harness.cpu_name(), torch=torch.__version__, numba=numba.__version__,
                git_sha=_harness.git_sha(), gamma=GAMMA, load_average=os.getloadavg())
    cols = ["part", "dtype", "threads", "B", "N", "ms", "Mcells_per_s", "vs_plain"]
    md = (f"# hvp_cost of the alignment variants on the CPU\n\n{meta['device']}; torch {meta['torch']}, numba "
          f"{meta['numba']}, git {meta['git_sha']}; load average {meta['load_average'][0]:.1f} (a shared machine). "
          f"gamma = {GAMMA}, D = 1, precomputed cost, Cdot = DILATE's Omega (and penalty_dot = 1 with the penalty). "
          f"Median of {reps} alternated repetitions after warm-up; vs_plain = ms / the plain hvp_cost's ms.\n\n"
          + _harness.markdown_table(rows, cols) + "\n")
    out = args.out or _harness.default_out("hvp-cpu-variants")
    _harness.write_results(out, meta, rows, md)
    print(md)
    print(f"written: {out}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 reps (a check of the script)")
    parser.add_argument("--variants", action="store_true",
                        help="only the alignment variants' hvp_cost against the plain one (B=64, N=M=256)")
    args = parser.parse_args(argv)
    if args.variants:
        return variants_main(args)
    sizes = [(8, 16)] if args.smoke else [(64, 100), (64, 256)]
    reps = 2 if args.smoke else args.reps
    all_threads = numba.get_num_threads()
    rows = []
    for threads in sorted({all_threads, 1}, reverse=True):
        numba.set_num_threads(threads)
        for dtype in (torch.float32, torch.float64):
            for B, N in sizes:
                C, Cdot, gdot = _problem(B, N, dtype)
                fns = _variants(C, Cdot, gdot)
                ms = _harness.interleaved_median_ms(fns, reps, desc=f"{threads} thr {dtype} B={B} N={N}")
                cpu_ms = {}
                for part, fn in fns.items():  # CPU time, after the wall-clock runs (all warm)
                    t = []
                    for _ in range(max(3, reps // 3)):
                        t0 = time.process_time()
                        fn()
                        t.append((time.process_time() - t0) * 1e3)
                    cpu_ms[part] = min(t)
                cells = B * N * N
                for part, t in ms.items():
                    rate = cells / (t * 1e-3)
                    dilate = DILATE_CELLS / (DILATE_MS[part] * 1e-3)
                    row = dict(part=part, dtype=str(dtype).replace("torch.", ""), threads=threads, B=B, N=N,
                               M=N, gamma=GAMMA, ms=t, us_per_pair=t * 1e3 / B, Mcells_per_s=rate / 1e6,
                               ratio_vs_dilate=rate / dilate, cpu_ms=cpu_ms[part],
                               Mcells_per_s_cpu=cells / (cpu_ms[part] / threads * 1e-3) / 1e6)
                    rows.append(row)
                    print(row, flush=True)
    numba.set_num_threads(all_threads)
    meta = dict(device=_harness.cpu_name(), torch=torch.__version__, numba=numba.__version__,
                git_sha=_harness.git_sha(), gamma=GAMMA, load_average=os.getloadavg(),
                dilate_reference=dict(source="vincent-leguen/DILATE Numba code, quoted in issue 24, not run here",
                                      per_pair_ms_at_N100=DILATE_MS, one_core=True))
    cols = ["part", "dtype", "threads", "B", "N", "ms", "us_per_pair", "Mcells_per_s", "ratio_vs_dilate", "cpu_ms",
            "Mcells_per_s_cpu"]
    md = (f"# hvp_cost on the CPU (DILATE-like sizes)\n\n{meta['device']}; torch {meta['torch']}, numba "
          f"{meta['numba']}, git {meta['git_sha']}; load average {meta['load_average'][0]:.1f} "
          f"(a shared machine: other processes ran). gamma = {GAMMA}, D = 1, precomputed cost (not timed), "
          f"Cdot = DILATE's Omega. Median of {reps} alternated repetitions after warm-up. Mcells_per_s = "
          f"B·N·M / time, cells counted once for value + gradient + HVP.\n\n"
          f"Published comparison (vincent-leguen/DILATE, Numba, one pair at a time, one core, N = 100, "
          f"gamma = 0.01; quoted, not run here): E {DILATE_MS['value+gradient']} ms and HVP "
          f"{DILATE_MS['hvp_cost']} ms per pair, i.e. 6.25, 4.8 and 2.7 M cells/s for value + gradient, HVP, "
          f"and the three together. ratio_vs_dilate = Mcells_per_s over the figure of the same part.\n\n"
          + _harness.markdown_table(rows, cols) + "\n\n" + READING)
    out = args.out or _harness.default_out("hvp-cpu")
    _harness.write_results(out, meta, rows, md)
    print(md)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
