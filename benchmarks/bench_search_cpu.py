"""CPU subsequence DTW and DTW search: the cpu backend against tslearn's dtw_subsequence_path, and
softdtw.dtw_search throughput.

Section "subsequence" (one query x one long series, hard DTW, float64, D = 1):

- tslearn: ``tslearn.metrics.dtw_subsequence_path(q, s)``: the path and the distance (its Numba DP
  over the full (n, L) table, then a backtrack).
- ours value: the cpu backend's forward with open_begin = open_end = True, gamma = 0, memory="none"
  (fused cost, the value only).
- ours value+path: ``softdtw.dtw_path(q, s, open_begin=True, open_end=True, return_value=True)``: the path and
  its value (the cost summed along it: tslearn's outputs; checked against the path's cost before timing). On the
  cpu backend dtw_path is a hard-DTW wavefront over column blocks that keeps one predecessor byte per cell, then
  a backtrack.
- ours search k=1: softdtw.dtw_search(q, s, k=1): (start, end, value) of the best match.

Section "search": dtw_search throughput, hard DTW, k = 10, Q queries of n steps in one series of L
steps: G cells/s = Q·n·L / time.

Timings: median wall-clock of alternated repetitions after warm-up (Numba compilation excluded). Each
speedup is against tslearn alternated in the same group: "ours value+path" and "ours search k=1" with
tslearn, "ours value" with tslearn separately, because the value's forward runs an OpenMP parallel region
whose worker keeps spinning after it: on the loaded 2-core machine the call after it took 0.198 ms instead
of 0.088 (dtw_path at 32 x 2000), and tslearn 0.81 instead of 0.55.
Run: PYTHONPATH=src python benchmarks/bench_search_cpu.py --out benchmarks/results/cpu_search.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

import softdtw  # noqa: E402
from softdtw.backends import cpu  # noqa: E402
from softdtw.search import dtw_search  # noqa: E402

SUBSEQ = {"full": [(32, 2000), (128, 10000), (128, 100000)], "smoke": [(8, 200)]}
SEARCH = {"full": [(1, 128, 1_000_000), (16, 128, 100_000), (256, 64, 10_000)], "smoke": [(4, 8, 500)]}


def subsequence_section(reps, sizes):
    from tslearn.metrics import dtw_subsequence_path

    rows = []
    for n, L in sizes:
        rng = np.random.default_rng(0)
        q, s = rng.normal(size=(n, 1)), rng.normal(size=(L, 1))
        x, y = torch.tensor(q)[None], torch.tensor(s)[None]
        xl, yl = torch.tensor([n]), torch.tensor([L])
        g = torch.tensor(0.0, dtype=torch.float64)
        opts = dict(open_begin=True, open_end=True)

        def value():
            return cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, "none", **opts)[0]

        x0, y0 = x[0], y[0]  # the unbatched pair, built once: indexing inside the timed call costs 1-9 us

        def value_path():
            path, v = softdtw.dtw_path(x0, y0, open_begin=True, open_end=True, backend="cpu", return_value=True)
            return v, path

        tslearn = lambda: dtw_subsequence_path(q, s)  # noqa: E731
        groups = [{"tslearn": tslearn, "ours value+path": value_path,
                   "ours search k=1": lambda: dtw_search(x0, y0, k=1)},
                  {"tslearn": tslearn, "ours value": value}]
        # the same answer before timing
        path, dist = dtw_subsequence_path(q, s)
        v, p = value_path()
        assert abs(float(v) - dist ** 2) <= 1e-9 * max(1.0, dist ** 2), (float(v), dist ** 2)
        cost = float((x[0, p[:, 0]] - y[0, p[:, 1]]).square().sum())  # the value is the path's cost
        assert abs(float(v) - cost) <= 1e-9 * max(1.0, cost), (float(v), cost)
        assert [tuple(r) for r in p.tolist()] == [tuple(r) for r in path]
        assert abs(float(value()) - dist ** 2) <= 1e-9 * max(1.0, dist ** 2)
        found = dtw_search(x0, y0, k=1)
        assert (int(found.start), int(found.end)) == (path[0][1], path[-1][1])
        assert abs(float(found.value) - dist ** 2) <= 1e-9 * max(1.0, dist ** 2)
        for g, fns in enumerate(groups):
            ms = _harness.interleaved_median_ms(fns, reps, desc=f"subsequence n={n} L={L} ({g + 1}/{len(groups)})")
            for impl, t in ms.items():
                if impl == "tslearn" and g > 0:
                    continue  # the table's tslearn row is the first group's
                rows.append({"section": "subsequence", "impl": impl, "Q": 1, "n": n, "L": L, "ms": t,
                             "gcups": n * L / t / 1e6, "speedup_vs_tslearn": ms["tslearn"] / t})
                print(rows[-1], flush=True)
    return rows


def search_section(reps, sizes):
    rows = []
    for Q, n, L in sizes:
        rng = np.random.default_rng(1)
        q = torch.tensor(rng.normal(size=(Q, n, 1)))
        s = torch.tensor(rng.normal(size=(L, 1)))
        ms = _harness.interleaved_median_ms({"dtw_search": lambda: dtw_search(q, s, k=10, progress=False)}, reps,
                                            desc=f"search Q={Q} n={n} L={L}")["dtw_search"]
        rows.append({"section": "search", "impl": "dtw_search k=10", "Q": Q, "n": n, "L": L, "ms": ms,
                     "gcups": Q * n * L / ms / 1e6, "speedup_vs_tslearn": None})
        print(rows[-1], flush=True)
    return rows


def markdown(meta, rows):
    return "\n".join([
        f"# CPU subsequence DTW and search ({meta['device']})",
        "",
        f"torch {meta['torch']}, numba {meta['numba']}, tslearn {meta['tslearn']}, {meta['threads']} Numba threads, "
        f"git {meta['git_sha']}, median of {meta['reps']} alternated repetitions after warm-up (compilation "
        "excluded). Hard DTW (gamma = 0), float64, D = 1, squared Euclidean. gcups = Q·n·L / time / 1e9.",
        "",
        "- subsequence: one query of n steps against one series of L steps (open begin and open end). tslearn: "
        "`dtw_subsequence_path` (path and distance). ours value: cpu backend forward, value only. ours "
        "value+path: softdtw.dtw_path(open ends, return_value=True) (the cpu backend's wavefront with a predecessor "
        "byte per cell and a backtrack): the path and its cost (the same outputs as tslearn). ours search k=1: `softdtw.dtw_search(q, s, k=1)` (start, end, value). "
        "Every implementation's answer is checked against tslearn's before timing. Alternated in two groups, each "
        "with tslearn (ours value+path and search k=1; ours value, whose OpenMP region leaves a spinning worker "
        "that slows the next call): each speedup is against its group's tslearn, the tslearn row is the first "
        "group's.",
        "- search: `softdtw.dtw_search(queries, series, k=10)`, Q queries (parallel over queries).",
        "",
        _harness.markdown_table(rows, ["section", "impl", "Q", "n", "L", "ms", "gcups", "speedup_vs_tslearn"]),
        "",
        meta.get("comment", ""),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON file to write, a .md table next to it")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repetition")
    parser.add_argument("--comment", default="")
    args = parser.parse_args(argv)
    key = "smoke" if args.smoke else "full"
    reps = 1 if args.smoke else args.reps
    out = Path(args.out) if args.out else _harness.default_out("cpu-search")
    import tslearn
    meta = {"device": _harness.cpu_name(), "torch": torch.__version__, "numba": numba.__version__,
            "tslearn": tslearn.__version__, "git_sha": _harness.git_sha(), "threads": numba.get_num_threads(),
            "reps": reps, "comment": args.comment}
    rows = subsequence_section(reps, SUBSEQ[key]) + search_section(reps, SEARCH[key])
    md = markdown(meta, rows)
    print(md)
    _harness.write_results(out, meta, rows, md)
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
