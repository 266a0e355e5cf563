"""One forward (value only), one forward storing, one backward at a given size, for Nsight Compute.

    ncu --kernel-name regex:"forward_kernel|backward_kernel" --launch-count 3 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python3 scripts/cuda_profile.py B N [D]
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from softdtw.backends import cuda as be  # noqa: E402

B, N = int(sys.argv[1]), int(sys.argv[2])
D = int(sys.argv[3]) if len(sys.argv) > 3 else 1
x = torch.randn(B, N, D, device="cuda")
y = torch.randn(B, N, D, device="cuda")
g = torch.tensor(1.0, device="cuda")
lengths = torch.full((B,), N, device="cuda")
be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, "none")
v, saved = be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, "store")
be.backward(torch.ones(B, device="cuda"), x, y, g, "sqeuclidean", lengths, lengths, None, v, saved, "store")
torch.cuda.synchronize()
print("profiled B=%d N=%d D=%d" % (B, N, D))

if len(sys.argv) > 4:  # also write the cubins of the kernels just run (for cuobjdump -sass)
    from softdtw.backends.cuda import compile as nvrtc

    out = Path(sys.argv[4])
    out.mkdir(parents=True, exist_ok=True)
    for idx, (dev, name, expr) in enumerate(sorted(nvrtc._kernels)):
        cubin, _ = nvrtc.cubin_for(name, expr, nvrtc.arch_of(dev))
        (out / f"k{idx}.cubin").write_bytes(cubin)
        (out / f"k{idx}.txt").write_text(expr)
