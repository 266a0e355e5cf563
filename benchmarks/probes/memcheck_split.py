"""Memcheck workload for the two-stage storing soft-min (split_links) layouts: small float32 batches, K >= 4, fused
and Gram costs, sequential and chained, store and checkpoint, per-pair lengths.

    PYTHONPATH=src compute-sanitizer --tool memcheck python3 benchmarks/probes/memcheck_split.py
"""
import torch, softdtw
torch.manual_seed(0)
dev = "cuda"
cases = [
    # (B, N, M, D, kwargs)
    (4, 512, 512, 1, {}),                                    # fused, sequential K4W4 split
    (3, 300, 200, 1, dict(x_lengths=torch.tensor([300, 17, 1], device=dev))),
    (2, 700, 650, 1, dict(cost="l1")),
    (2, 1024, 1024, 64, {}),                                 # gram, chained
    (2, 2048, 2048, 1, {}),                                  # fused chained (not split in fwd; bwd recompute)
    (2, 1024, 1024, 1, dict(memory="checkpoint")),          # checkpoint: the recompute splits
    (2, 900, 1100, 64, dict(memory="checkpoint")),
    (1, 5, 400, 1, {}),
    (1, 400, 5, 1, {}),
]
for B, N, M, D, kw in cases:
    x = torch.randn(B, N, D, device=dev, requires_grad=True)
    y = torch.randn(B, M, D, device=dev)
    for g in (0.05, 1.0):
        v = softdtw.soft_dtw(x, y, g, **kw)
        v.sum().backward()
        assert torch.isfinite(v).all() and torch.isfinite(x.grad).all(), (B, N, M, D, kw)
        x.grad = None
torch.cuda.synchronize()
print("memcheck workload done")
