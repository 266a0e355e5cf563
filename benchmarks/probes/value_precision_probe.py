"""Precision and time of the float32 value-only forward against float64, for long pairs and the layouts the
planner picks for them (chained K = 4 / 8, SEQ). One JSON line per case.

    python3 benchmarks/probes/value_precision_probe.py [--seq] TREE [TREE ...]
        (each TREE a source tree with src/softdtw; --seq: the large-batch SEQ cases)

Each tree is imported in its own process; float64 comes from the first tree (its passes keep no frames, so the
trees agree there). Data as tests/test_long.py: x ~ N(0, 1), y ~ N(0, 1) + 1, gamma = 1, D = 1.
"""
import json
import os
import subprocess
import sys

CASES = [(1, 65536, 262144), (16, 65536, 65536), (2, 3000, 70000), (1, 65536, 65536), (16, 8192, 8192),
         (64, 8192, 8192), (4096, 1024, 1024)]
#: Large batches of long pairs, which the planner gives SEQ plans whose value-only pass keeps no frames (issue 4's
#: open check): `value_precision_probe.py --seq TREE`.
SEQ_CASES = [(4096, 8192, 8192), (1024, 16384, 16384), (256, 32768, 32768)]

CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1] + "/src")
import softdtw
from softdtw.backends.cuda import launch
want64 = sys.argv[2] == "1"
for B, N, M in json.loads(sys.argv[3]):
    g = torch.Generator(device="cuda").manual_seed(N + M + B)
    x = torch.randn(B, N, 1, device="cuda", generator=g)
    y = torch.randn(B, M, 1, device="cuda", generator=g) + 1.0
    plan = launch.plan_for(B, N, M, 1, torch.float32, 0, False)
    with torch.no_grad():
        v = softdtw.soft_dtw(x, y, 1.0)
        torch.cuda.synchronize()
        ts = []
        for _ in range(3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); softdtw.soft_dtw(x, y, 1.0); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        v64 = softdtw.soft_dtw(x.double(), y.double(), 1.0) if want64 else None
    print(json.dumps({"B": B, "N": N, "M": M, "plan": [plan.K, plan.W, plan.nch, plan.chain],
                      "ms": round(sorted(ts)[1], 3), "v32": v.double().cpu().tolist(),
                      "v64": None if v64 is None else v64.cpu().tolist()}), flush=True)
"""


def main():
    trees = sys.argv[1:]
    cases = CASES
    if trees and trees[0] == "--seq":
        trees, cases = trees[1:], SEQ_CASES
    ref = {}
    out = []
    for ti, tree in enumerate(trees):
        proc = subprocess.run([sys.executable, "-c", CHILD, tree, "1" if ti == 0 else "0", json.dumps(cases)],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            continue
        for line in proc.stdout.splitlines():
            r = json.loads(line)
            key = (r["B"], r["N"], r["M"])
            if r["v64"] is not None:
                ref[key] = r["v64"]
            v64 = ref.get(key)
            err = None if v64 is None else max(abs(a - b) / abs(b) for a, b in zip(r["v32"], v64))
            row = {"tree": tree, "B": r["B"], "N": r["N"], "M": r["M"], "plan": r["plan"], "ms": r["ms"],
                   "value_rel_err": None if err is None else float(f"{err:.3g}"), "value0": r["v32"][0]}
            out.append(row)
            print(json.dumps(row), flush=True)
    path = os.environ.get("OUT")
    if path:
        with open(os.path.join(path, "value_precision.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in out)


if __name__ == "__main__":
    main()
