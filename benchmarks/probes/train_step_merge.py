"""Merge the alternated passes of benchmarks/probes/train_step_run.sh's "ab" stage (new1/2, base1/2 .json from
benchmarks/bench_train_step.py) into one result: per row the mean over passes of each pass's median, the
passes kept beside it, and a Markdown table of before (base) / after (new) per shape.

    python3 benchmarks/probes/train_step_merge.py AB_DIR benchmarks/results/h100_train_step.json
"""
import json
import sys
from pathlib import Path
from statistics import mean

ab, out = Path(sys.argv[1]), Path(sys.argv[2])


def load(name):
    passes = sorted(ab.glob(f"{name}[0-9].json"))
    return [json.loads(p.read_text()) for p in passes]


new, base = load("new"), load("base")
rows, index = [], {}
for tree, runs in (("after", new), ("before", base)):
    for r in runs[0]["rows"]:
        key = (tree, r["shape"], r["B"], r["N"], r["M"], r["D"], r["impl"])
        same = [next(q for q in run["rows"] if (q["shape"], q["B"], q["N"], q["M"], q["D"], q["impl"]) == key[1:])
                for run in runs]
        row = {"tree": tree, "git_sha": runs[0]["git_sha"], **{k: r[k] for k in ("shape", "B", "N", "M", "D", "impl",
                                                                                "gamma", "kernels")},
               "ms": round(mean(q["ms"] for q in same), 4), "x_mse": round(mean(q["x_mse"] for q in same), 2),
               "ms_passes": [q["ms"] for q in same], "x_mse_passes": [q["x_mse"] for q in same]}
        rows.append(row)
        index[key] = row
meta = {k: new[0][k] for k in ("device", "torch", "what", "reps")}
meta.update({"git_sha": new[0]["git_sha"], "baseline_git_sha": base[0]["git_sha"], "passes": len(new),
             "method": "new and baseline trees alternated in separate processes (new, base, new, base) on one machine; "
                       "rows run in a random order each repetition; per row the mean of the passes' medians",
             "cudagraph_skips": [r["cudagraph_skips"] for r in new],
             "pieces_tiny_us": new[0].get("pieces_tiny_us"), "pieces_B16_N128_us": new[0].get("pieces_B16_N128_us"),
             "kernel_names": new[0]["kernel_names"]})
shapes = list(dict.fromkeys((r["shape"], r["B"], r["N"], r["M"], r["D"]) for r in new[0]["rows"]))
lines = [f"# Loss step vs MSE step, before / after (issue 27; {meta['device']}, torch {meta['torch']})", "",
         f"after = {meta['git_sha']}, before = {meta['baseline_git_sha']}; {meta['method']}. ms: median wall time "
         f"of one step (clone, loss, mean, backward, synchronise); x MSE: over the F.mse_loss step on the same "
         f"tensors in the same run. check: eager minus eager_nocheck (SOFTDTW_CHECK_VALUES=0), µs.", "",
         "| shape | B, N x M, D | MSE ms | eager ms | eager x MSE | check µs | compile x MSE | compile_ro x MSE "
         "| compiled MSE x MSE | kernels |", "|---|---|---|---|---|---|---|---|---|---|"]
for s in shapes:
    g = lambda tree, impl, f="x_mse": index[(tree, *s, impl)][f]
    chk = lambda tree: round(1e3 * (g(tree, "eager", "ms") - g(tree, "eager_nocheck", "ms")))
    lines.append(
        f"| {s[0]} | {s[1]}, {s[2]}x{s[3]}, {s[4]} | {g('before', 'mse', 'ms'):.3f} / {g('after', 'mse', 'ms'):.3f} "
        f"| {g('before', 'eager', 'ms'):.3f} -> {g('after', 'eager', 'ms'):.3f} "
        f"| {g('before', 'eager'):.2f} -> **{g('after', 'eager'):.2f}** | {chk('before')} -> {chk('after')} "
        f"| {g('before', 'compile'):.2f} -> {g('after', 'compile'):.2f} "
        f"| {g('before', 'compile_ro'):.2f} -> {g('after', 'compile_ro'):.2f} | {g('after', 'mse_compile'):.2f} "
        f"| {g('after', 'eager', 'kernels')} |")
out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
out.with_suffix(".md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
