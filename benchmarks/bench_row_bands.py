# Large-D memory="checkpoint" (row bands) against memory="store" (issue 27, "Checkpoint at most 2x store"). The public
# training call, soft_dtw(x, y, cost=...).mean().backward(), timed per call (CUDA events, median), the variants
# alternated in one process; peak memory above the inputs. A variant rows/<ROW_BANDS>[/K<k>W<w>TH<th>]: a band's
# table is 1/ROW_BANDS of the whole one, under the planner's layout or a forced one (K, W, tile height). The column
# bands these replaced were measured by this script at the tree before them (results/ab/h100_row_bands_ab*.json).
# Usage (repository root, PYTHONPATH=src): python benchmarks/bench_row_bands.py OUT.json [--quick] [--sweep]
# (--quick: the first shape only; --sweep: layouts of the row bands besides the planner's)
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from gpu import median_ms, peak_mb  # noqa: E402

import softdtw  # noqa: E402
import softdtw.backends.cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

SHAPES = [  # B, N, M, D, cost
    (32, 2048, 2048, 64, "sqeuclidean"),   # the target shape
    (8, 2048, 2048, 64, "l1"),
    (32, 1024, 1024, 32, "l1"),
    (16, 400, 300, 80, "sqeuclidean"),     # speech
    (1, 16384, 16384, 64, "sqeuclidean"),  # one long pair
]


def call(x, y, cost, memory):
    def run():
        x.grad = None
        softdtw.soft_dtw(x, y, 1.0, cost=cost, memory=memory).mean().backward()
    return run


def setting(name):
    """(ROW_BANDS, forced (K, W, TH) or None) of a variant's name, rows/<ROW_BANDS>[/K<k>W<w>TH<th>]."""
    parts = name.split("/")
    forced = None
    if len(parts) > 2:
        k, rest = parts[2][1:].split("W")
        w, th = rest.split("TH")
        forced = int(k), int(w), int(th)
    return int(parts[1]), forced


def measure(x, y, cost, name, reps):
    row_bands, forced = setting(name)
    be.ROW_BANDS = row_bands
    fn = call(x, y, cost, "checkpoint")
    if forced is None:
        return median_ms(fn, reps), peak_mb(fn)
    K, W, TH = forced
    with launch.forced_plan(K, W, TH=TH):
        return median_ms(fn, reps), peak_mb(fn)


def main():
    out_path, quick = sys.argv[1], "--quick" in sys.argv
    variants = ["rows/2", "rows/4", "rows/8"]
    if "--sweep" in sys.argv:  # layouts of 4 bands: (K, W) and the tile height
        variants += ["rows/4/K4W2TH256", "rows/4/K8W1TH256", "rows/4/K8W2TH256", "rows/4/K16W1TH256",
                     "rows/4/K8W1TH512", "rows/2/K4W1TH256", "rows/2/K8W1TH256", "rows/2/K8W2TH256"]
    rows, default = [], be.ROW_BANDS
    for B, N, M, D, cost in SHAPES[:1] if quick else SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, N, D, device="cuda", generator=g).requires_grad_()
        y = torch.randn(B, M, D, device="cuda", generator=g)
        reps = 5 if N * M * B > 2**26 else 20
        store = median_ms(call(x, y, cost, "store"), reps), peak_mb(call(x, y, cost, "store"))
        res = {v: [] for v in variants}
        for _ in range(2):  # alternated twice
            for v in variants:
                res[v].append(measure(x, y, cost, v, reps))
        be.ROW_BANDS = default
        row = {"B": B, "N": N, "M": M, "D": D, "cost": cost, "store_ms": round(store[0], 3),
               "store_peak_mb": round(store[1], 1)}
        for v, rs in res.items():
            row[f"{v} ms"] = [round(t, 3) for t, _ in rs]
            row[f"{v} peak_mb"] = round(rs[0][1], 1)
        best = min(t for t, _ in res[f"rows/{default}"])
        row["default"] = f"rows/{default}"
        row["checkpoint / store"] = round(best / store[0], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x, y
        torch.cuda.empty_cache()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    json.dump(meta, open(out_path, "w"), indent=1)
    lines = [f"# Large-D checkpoint (row bands) against store, {meta['gpu']}, torch {meta['torch']}", "",
             "Training call soft_dtw(...).mean().backward(), ms per call (median; two alternated runs), peak MB above "
             "the inputs.", "",
             "| B, N x M, D, cost | store ms (MB) | " + " | ".join(f"{v} ms (MB)" for v in variants)
             + " | default / store |",
             "|---" * (len(variants) + 3) + "|"]
    for r in rows:
        cells = [f"{min(r[f'{v} ms']):.2f} ({r[f'{v} peak_mb']:.0f})" for v in variants]
        lines.append(f"| {r['B']}, {r['N']} x {r['M']}, {r['D']}, {r['cost']} | {r['store_ms']:.2f} "
                     f"({r['store_peak_mb']:.0f}) | " + " | ".join(cells) + f" | {r['checkpoint / store']} |")
    open(out_path.rsplit(".", 1)[0] + ".md", "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
