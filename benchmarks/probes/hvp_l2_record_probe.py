"""How fast would the HVP kernel be if its record never reached HBM? (issue 24; a probe, not a kernel change)

    python3 benchmarks/probes/hvp_l2_record_probe.py [--pairs 16 32] [--out DIR]

The lean kernel (OPTIMIZATION_LOG "Lean HVP passes") moves its record, 16 B a cell written by the forward and read
back by the backward, 2.15 GB at B = 1024, N = M = 256, and waits on that traffic. A design that keeps the record on
chip (state checkpoints every T steps, T steps recomputed into shared memory: "An 8- or 12-byte HVP record") costs
~40 % more instructions. This probe bounds what it could gain before anyone writes it: it copies src/ and
benchmarks/ into a scratch tree, points every pair's record at the record of pair b mod P (P pairs' records, P MB at
this size, stay in L2), and runs `bench_hvp.py --quick` there and in the real tree. The probe's outputs are garbage
(pairs overwrite each other's records); only its times mean something. If the fused kernel's time there is near the
real one, the record's traffic is not the bound and the on-chip design is not worth writing.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE = "T* rb = rec + size_t(b) * N * HVPW_REC * CW;"


def run(tree: Path, out: Path) -> dict:
    subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_hvp.py"), "--quick", "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    return {(r["mode"], r["B"], r["N"], r["dtype"], r["gamma"]): r["ms"] for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="hvp_l2_probe_")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"real": run(ROOT, args.out / "real")}
    for P in args.pairs:
        tree = args.out / f"tree_{P}"
        shutil.rmtree(tree, ignore_errors=True)
        for part in ("src", "benchmarks"):
            shutil.copytree(ROOT / part, tree / part)
        cu = tree / "src/softdtw/backends/cuda/kernels/hvp_warp.cu"
        text = cu.read_text()
        assert text.count(LINE) == 1, "the record pointer moved: update LINE"
        cu.write_text(text.replace(LINE, f"T* rb = rec + size_t(b % {P}) * N * HVPW_REC * CW;  // PROBE"))
        results[f"l2_{P}"] = run(tree, args.out / f"l2_{P}")
    keys = sorted(results["real"])
    print("| mode | B | N | dtype | gamma | " + " | ".join(results) + " |")
    print("|---|---|---|---|---|" + "---|" * len(results))
    for k in keys:
        if k[0] in ("value_grad_hvp_fused", "value_grad_hvp_xy_const", "value_grad"):
            print("| " + " | ".join(str(v) for v in k) + " | " +
                  " | ".join(f"{results[r].get(k, float('nan')):.3f}" for r in results) + " |")
    (args.out / "probe.json").write_text(json.dumps({r: {"|".join(map(str, k)): v for k, v in d.items()}
                                                     for r, d in results.items()}, indent=1))


if __name__ == "__main__":
    main()
