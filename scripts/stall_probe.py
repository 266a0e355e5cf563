"""One value-only forward with a forced layout, for Nsight Compute's per-instruction stall sampling.

    ncu --section SourceCounters --section WarpStateStats --kernel-name regex:forward_kernel \
        --launch-count 1 -o rep python3 scripts/stall_probe.py B N K W [chain | store | checkpoint]
    ncu -i rep.ncu-rep --page source --csv --print-source sass > source.csv

"chain" profiles the chained value-only forward; "store" / "checkpoint" run the chained forward and then
the chained backward of that memory mode (profile it with --kernel-name regex:backward_chain_kernel).

Question it answers (benchmarks/OPTIMIZATION_LOG.md, "Skewed lanes"): where the ~0.2 µs fixed cost of a
latency-bound step goes, instruction by instruction, in a W = 1 SEQ pass (no barrier, no flags).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

B, N, K, W = (int(v) for v in sys.argv[1:5])
what = sys.argv[5] if len(sys.argv) > 5 else "seq"
chain = what != "seq"  # the chained layout (forward_chain_kernel, backward_chain_kernel)
memory = what if what in ("store", "checkpoint") else "none"
x = torch.randn(B, N, 1, device="cuda")
y = torch.randn(B, N, 1, device="cuda")
g = torch.tensor(1.0, device="cuda")
lengths = torch.full((B,), N, device="cuda")
with launch.forced_plan(K, W, chain=chain):
    v, saved = be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, memory)
    if memory != "none":
        be.backward(torch.ones(B, device="cuda"), x, y, g, "sqeuclidean", lengths, lengths, None, v, saved, memory)
torch.cuda.synchronize()
print(f"profiled B={B} N={N} K={K} W={W} {what}")
