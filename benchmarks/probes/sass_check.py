"""Static SASS check of kernel instantiations, without a GPU: registers, instruction count, and whether the
soft-min's ex2 results are consumed by the very next instruction (the sign of a serialised soft-min).

The storing soft-min issues its two ex2 back to back; when ptxas runs short of predicate registers it
schedules a select on the first result in between (benchmarks/OPTIMIZATION_LOG.md, "Per-lane frames for
float32": +26 % per chained step). Needs NVRTC and cuobjdump here:

    pip install nvidia-cuda-nvrtc nvidia-cuda-cuobjdump      # cuobjdump lands in site-packages/nvidia/cu13/bin
    export PATH=$PATH:$(python -c "import nvidia; print(list(nvidia.__path__)[0])")/cu13/bin
    PYTHONPATH=src python benchmarks/probes/sass_check.py                          # the default set below
    python benchmarks/probes/sass_check.py forward "sdtw::forward_kernel<float, 0, 1, 4, 1, false, true>" [...]

Prints one line per instantiation; "ex2 serialised" should be 0. "step loop" counts the instructions of the
smallest loop holding the soft-min's lg2 (forward) or the link prefetch and shuffle (backward): the step loop, rarely
taken branches included. A latency-bound step costs ~4 cycles per instruction there (OPTIMIZATION_LOG.md,
"Leaner steps"), so it is the number to compare before and after a change to a step.
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from softdtw.backends.cuda import compile as _compile  # noqa: E402

DEFAULT = [
    ("forward", "sdtw::forward_chain_kernel<float, 0, 1, 4, 4, false, true, false>"),
    ("forward", "sdtw::forward_chain_kernel<float, 0, 1, 4, 4, false, false, true>"),
    ("forward", "sdtw::forward_kernel<float, 0, 1, 4, 1, false, true>"),
    ("forward", "sdtw::forward_kernel<float, 0, 1, 16, 1, false, true>"),
    ("forward", "sdtw::forward_kernel<float, 0, 1, 8, 8, false, true>"),
    ("forward", "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true>"),
    ("backward", "sdtw::backward_chain_kernel<float, 0, 1, 4, 4, false, true>"),
]


def step_loop(ins: list[tuple[int, str]], markers: tuple[str, ...]) -> int:
    """Instructions in the smallest loop (a branch back to a lower address) that holds all `markers`."""
    sizes = []
    for addr, s in ins:
        m = re.search(r"\bBRA (?:!?P\d, )?0x([0-9a-f]+)", s)
        if m and int(m.group(1), 16) < addr:
            body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
            if all(any(mk in t for t in body) for mk in markers):
                sizes.append(len(body))
    return min(sizes, default=0)


def check(source: str, expr: str) -> str:
    data, _ = _compile.compile_cubin(source, expr, "sm_90")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data)
        f.flush()
        sass = subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True, check=True).stdout
        res = subprocess.run(["cuobjdump", "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    found = [(int(m.group(1), 16), re.sub(r"\s+", " ", m.group(2)))
             for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*;)", sass)]
    ins = [s for _, s in found]
    ex2 = serial = 0
    for i, s in enumerate(ins[:-1]):
        m = re.match(r"(@!?P\d )?MUFU\.EX2 (R\d+),", s)
        if m:
            ex2 += 1
            operands = ins[i + 1].split(",", 1)[1] if "," in ins[i + 1] else ""
            serial += bool(re.search(rf"\b{m.group(2)}\b", operands))
    regs = ",".join(re.findall(r"REG:(\d+)", res))
    spills = sum(1 for s in ins if re.search(r"\b(STL|LDL)\b", s))
    # The backward's prologue issues prefetches in a loop too: its step loop also shuffles.
    loop = step_loop(found, ("MUFU.LG2",) if source == "forward" else ("LDGSTS", "SHFL.DOWN"))
    return (f"registers {regs:>4}  instructions {len(ins):5d}  step loop {loop:4d}  ex2 {ex2:3d}  "
            f"ex2 serialised {serial:3d}  spills {spills:3d}  {expr}")


if __name__ == "__main__":
    args = sys.argv[1:]
    todo = list(zip(args[::2], args[1::2])) if args else DEFAULT  # (source, expression) pairs
    for source, expr in todo:
        print(check(source, expr), flush=True)
