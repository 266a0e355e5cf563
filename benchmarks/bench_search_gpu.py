"""DTW search on the GPU: softdtw.dtw_search with CUDA tensors (backends/cuda/search.py, kernels/search.cu).

Issue 25's target: one 128-step query searched in a 10^7-step series (hard DTW, k = 10) in <= 10 ms on an H100.

Rows (float32, D = 1, squared Euclidean, k = 10, exclusion n // 2; the series a random walk with the query
planted in it):

- section "search": the whole dtw_search call (end rows + the device pick), one query of 128 steps in 10^5,
  10^6 and 10^7 steps, hard and soft (gamma = 1), and Q = 16 queries; float64 hard at 10^7.
- section "parts": its pieces at each L: ``end_rows`` (the DP kernel), ``select`` (the pick on the device) and
  ``select_on_host`` (the end rows copied to the host and picked by the CPU's Numba code, copy included).
- section "tiles": end_rows under forced tiles (threads x columns per thread) at 10^7, hard and soft.

Times: median of --reps calls after two warm-up calls, each timed by CUDA events around the call (host
launch work included; nothing in the call synchronises). GCUPS = Q·n·L / time. The answer at L = 10^6 is
checked against the CPU dtw_search before timing.
Run: PYTHONPATH=src python benchmarks/bench_search_gpu.py --out benchmarks/results/h100_search.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402
from gpu import median_ms  # noqa: E402

from softdtw.backends.cuda import compile as nvrtc  # noqa: E402
from softdtw.backends.cuda import search as cs  # noqa: E402
from softdtw.search import dtw_search  # noqa: E402

LENGTHS = {"full": [100_000, 1_000_000, 10_000_000], "smoke": [20_000]}
TILES_HARD = [(256, 16, 2), (256, 16, 3), (128, 16, 6), (128, 32, 2), (256, 8, 4)]
TILES_SOFT = [(256, 8, 2), (256, 8, 3), (128, 8, 6), (256, 4, 4)]
N = 128
#: Forced tiles of tests/test_search_cuda.py (float64).
TEST_TILES = [(32, 1), (32, 2), (32, 4), (64, 2), (128, 2), (64, 2, 2), (64, 4, 3)]


def data(L, n=N, Q=1, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = (0.1 * torch.randn(L, 1, device="cuda", dtype=torch.float64, generator=g)).cumsum(0)
    starts = torch.randint(0, max(1, L - n), (Q,), device="cuda", generator=g)
    q = torch.stack([s[a:a + n] for a in starts.tolist()]) + 0.01 * torch.randn(Q, n, 1, device="cuda",
                                                                                   dtype=torch.float64, generator=g)
    return q.to(dtype), s.to(dtype)


def _expr(dtype, cost, soft, DK, NT, CPT, MINB=1):
    return (f"sdtw::search::search_rows_kernel<{cs._CTYPE[dtype]}, {cs.COST_IDS[cost]}, {'true' if soft else 'false'}, "
            f"{DK}, {NT}, {CPT}, {MINB}>")


def precompile_jobs(arch: str) -> list:
    """Every instantiation the benchmark and tests/test_search_cuda.py use (default tiles, forced tiles, picks)."""
    jobs = []
    for dtype in (torch.float32, torch.float64):
        for cost in ("sqeuclidean", "l1"):
            for soft in (False, True):
                for D in range(1, 6):
                    cs.forced_tile = None
                    NT, CPT, MINB, DK = cs.tile_of(dtype, soft, D)
                    jobs.append(_expr(dtype, cost, soft, DK, NT, CPT, MINB))
                    if dtype == torch.float64:
                        for tile in TEST_TILES:
                            jobs.append(_expr(dtype, cost, soft, DK, *cs.tile_of(dtype, soft, D, tile)[:3]))
        ct = cs._CTYPE[dtype]
        jobs += [f"sdtw::search::select_chunks_kernel<{ct}>", f"sdtw::search::select_greedy_kernel<{ct}>"]
    for tile in TILES_HARD:
        jobs.append(_expr(torch.float32, "sqeuclidean", False, 1, *cs.tile_of(torch.float32, False, 1, tile)[:3]))
    for tile in TILES_SOFT:
        jobs.append(_expr(torch.float32, "sqeuclidean", True, 1, *cs.tile_of(torch.float32, True, 1, tile)[:3]))
    cs.forced_tile = None
    return [("search", e, arch) for e in dict.fromkeys(jobs)]


def row(section, impl, Q, L, ms, dtype="float32", gamma=0.0, note=None):
    r = {"section": section, "impl": impl, "Q": Q, "n": N, "L": L, "dtype": dtype, "gamma": gamma, "ms": ms,
         "gcups": Q * N * L / ms / 1e6, "note": note}
    print(r, flush=True)
    return r


def check(L):
    """The GPU's 10 matches are the CPU's at this L (float64, hard), before anything is timed."""
    q, s = data(L, dtype=torch.float64)
    gpu = dtw_search(q[0], s, k=10)
    cpu = dtw_search(q[0].cpu(), s.cpu(), k=10)
    ok = torch.equal(gpu.start.cpu(), cpu.start) and torch.equal(gpu.end.cpu(), cpu.end) and \
        torch.allclose(gpu.value.cpu(), cpu.value, rtol=1e-9)
    print(f"check L={L}: GPU == CPU: {ok}; matches {list(zip(cpu.start.tolist(), cpu.end.tolist()))}", flush=True)
    if not ok:
        raise SystemExit(f"GPU search differs from the CPU at L={L}: {gpu} vs {cpu}")


def search_section(reps, lengths):
    rows = []
    for L in lengths:
        q, s = data(L)
        for gamma in (0.0, 1.0):
            ms = median_ms(lambda: dtw_search(q[0], s, k=10, gamma=gamma), reps)
            rows.append(row("search", "dtw_search k=10", 1, L, ms, gamma=gamma))
        q16, _ = data(L, Q=16, seed=1)
        ms = median_ms(lambda: dtw_search(q16, s, k=10), reps)
        rows.append(row("search", "dtw_search k=10", 16, L, ms))
    L = lengths[-1]
    q, s = data(L, dtype=torch.float64)
    ms = median_ms(lambda: dtw_search(q[0], s, k=10), reps)
    rows.append(row("search", "dtw_search k=10", 1, L, ms, dtype="float64"))
    return rows


def parts_section(reps, lengths):
    rows = []
    for L in lengths:
        q, s = data(L)
        for gamma in (0.0, 1.0):
            ms = median_ms(lambda: cs.end_rows(q, s, "sqeuclidean", gamma), reps)
            rows.append(row("parts", "end_rows", 1, L, ms, gamma=gamma))
        v, st = cs.end_rows(q, s, "sqeuclidean", 0.0)
        dev = cs.select(v, st, 10, N // 2)
        host = cs.select_on_host(v, st, 10, N // 2)
        same = all(torch.equal(a.cpu(), b) for a, b in zip(dev, host))
        ms = median_ms(lambda: cs.select(v, st, 10, N // 2), reps)
        rows.append(row("parts", "select (device)", 1, L, ms, note=f"same picks as host: {same}"))
        ms = median_ms(lambda: cs.select_on_host(v, st, 10, N // 2), max(1, reps // 2), warmup=1)
        rows.append(row("parts", "select_on_host (copy + Numba)", 1, L, ms))
    return rows


def tiles_section(reps, L):
    """end_rows under forced tiles; each one's rows checked against the default tile's (values, starts)."""
    rows = []
    q, s = data(L)
    try:
        for soft, tiles in ((False, TILES_HARD), (True, TILES_SOFT)):
            gamma = 1.0 if soft else 0.0
            cs.forced_tile = None
            ref_v, ref_s = cs.end_rows(q, s, "sqeuclidean", gamma)
            for tile in tiles:
                cs.forced_tile = tile
                v, st = cs.end_rows(q, s, "sqeuclidean", gamma)
                err = float(((v - ref_v).abs().max() / ref_v.abs().max()).item())
                nd = int((st != ref_s).sum().item())
                ms = median_ms(lambda: cs.end_rows(q, s, "sqeuclidean", gamma), reps)
                name = f"end_rows NT={tile[0]} CPT={tile[1]}" + (f" MINB={tile[2]}" if len(tile) > 2 else "")
                rows.append(row("tiles", name, 1, L, ms, gamma=gamma,
                                note=f"vs default: rel err {err:.2g}, starts differing {nd}"))
    finally:
        cs.forced_tile = None
    return rows


def profile_section(cases):
    """Per-row phase times of end_rows (kernel profile, thread 0 of the first tickets): mean cycles of each phase,
    the mean row period (ns, from the globaltimer), look-back reads and windows per row."""
    rows = []
    for L, gamma, ntk, tile in cases:
        q, s = data(L)
        cs.forced_tile = tile
        NT, CPT, _, _ = cs.tile_of(torch.float32, gamma > 0, 1)
        tiles = -(-L // (NT * CPT))
        ntk = min(ntk, tiles)
        prof = torch.zeros(ntk * N * 8, dtype=torch.int64, device="cuda")
        cs.end_rows(q, s, "sqeuclidean", gamma)  # warm
        torch.cuda.synchronize()
        cs.end_rows(q, s, "sqeuclidean", gamma, prof=(prof, ntk))
        torch.cuda.synchronize()
        p = prof.view(ntk, N, 8).double().cpu()
        per = p[:, :, 1:6].clone()
        per[:, :, 1:] -= p[:, :, 1:5].clone()  # phase durations
        period = (p[:, 1:, 0] - p[:, :-1, 0]).mean()
        life = (p[:, -1, 0] - p[:, 0, 0]).mean() / 1e3
        names = ["pass1", "barrier1", "lookback", "barrier2", "pass2"]
        means = {k: float(per[:, :, c].mean()) for c, k in enumerate(names)}
        cs.forced_tile = None
        r = {"section": "profile", "impl": f"end_rows {tile or 'default'} tickets 0..{ntk - 1}", "Q": 1, "n": N,
             "L": L,
             "gamma": gamma, "row_ns": float(period), "tile_us": float(life),
             "reads": float(p[:, :, 6].mean()), "windows": float(p[:, :, 7].mean()),
             **{f"cyc_{k}": v for k, v in means.items()}}
        first = p[:, 0, 0]
        r["note"] = (f"tile start spread {float(first.max() - first.min()) / 1e3:.1f} us; "
                     f"max row ns {float((p[:, 1:, 0] - p[:, :-1, 0]).max()):.0f}")
        print(r, flush=True)
        rows.append(r)
    return rows


def markdown(meta, rows):
    return "\n".join([
        f"# DTW search on the GPU ({meta['device']})",
        "",
        f"torch {meta['torch']}, NVRTC {meta['nvrtc']}, git {meta['git_sha']}, median of {meta['reps']} calls "
        "(CUDA events) after two warm-up calls. float32 unless noted, D = 1, squared Euclidean, query n = 128, "
        "k = 10, exclusion 64. gcups = Q·n·L / time / 1e9.",
        "",
        "- search: the whole `softdtw.dtw_search` call on CUDA tensors (end rows + the pick on the device).",
        "- parts: `end_rows` (the DP kernel), `select` (the pick on the device), `select_on_host` (the rows "
        "copied to the host and picked by the CPU's Numba code).",
        "- tiles: `end_rows` with forced tiles at the largest L (threads x columns per thread).",
        "",
        _harness.markdown_table([r for r in rows if r["section"] != "profile"],
                                ["section", "impl", "Q", "n", "L", "dtype", "gamma", "ms", "gcups", "note"]),
        "",
        "- profile: end_rows' own timers (thread 0 of the first tickets, every row): row_ns the mean time between "
        "row starts, tile_us a tile's life, cyc_* mean cycles per phase, reads / windows the look-back's read "
        "rounds and 32-tile windows per row.",
        "",
        _harness.markdown_table([r for r in rows if r["section"] == "profile"],
                                ["impl", "L", "gamma", "row_ns", "tile_us", "cyc_pass1", "cyc_barrier1",
                                 "cyc_lookback", "cyc_barrier2", "cyc_pass2", "reads", "windows", "note"]),
        "",
        meta.get("comment", ""),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON file to write, a .md table next to it")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--precompile", action="store_true", help="only fill the kernel cache (parallel NVRTC)")
    parser.add_argument("--sections", default="search,parts,tiles,profile")
    parser.add_argument("--comment", default="")
    args = parser.parse_args(argv)
    arch = nvrtc.arch_of(0)
    if args.precompile:
        jobs = precompile_jobs(arch)
        print(f"precompiled {nvrtc.precompile(jobs)} instantiations", flush=True)
        return
    key = "smoke" if args.smoke else "full"
    lengths = LENGTHS[key]
    out = Path(args.out) if args.out else _harness.default_out("gpu-search")
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "nvrtc": nvrtc.nvrtc_version(),
            "git_sha": _harness.git_sha(), "reps": args.reps, "comment": args.comment}
    check(min(lengths[-1], 1_000_000))
    rows = []
    sections = args.sections.split(",")
    if "search" in sections:
        rows += search_section(args.reps, lengths)
    if "parts" in sections:
        rows += parts_section(args.reps, lengths)
    if "tiles" in sections:
        rows += tiles_section(args.reps, lengths[-1])
    if "profile" in sections:
        rows += profile_section([(L, g, 1200, None) for L in (lengths[0], lengths[-1]) for g in (0.0, 1.0)])
    md = markdown(meta, rows)
    print(md)
    _harness.write_results(out, meta, rows, md)
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
