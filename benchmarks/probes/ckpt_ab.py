"""A/B of the checkpointed large-D call against store: per shape, each mode's training call (clone, soft_dtw, mean,
backward; median of 10 synced calls), its peak memory above the inputs, and the checkpoint's forward, backward and
total kernel times (torch.profiler). Run it once per tree, alternating, into one file.

    python3 benchmarks/probes/ckpt_ab.py SRC TAG OUT.jsonl     (SRC: the tree's src directory)
"""
import json, sys
src, tag, out = sys.argv[1:4]
sys.path.insert(0, src); sys.path.insert(0, "benchmarks")
import torch
import softdtw
from gpu import median_ms, kernel_us
assert softdtw.__file__.startswith(src), softdtw.__file__

rows = []
for B, N, D, cost in ((32, 2048, 64, "sqeuclidean"), (32, 1024, 64, "sqeuclidean"), (16, 2048, 64, "sqeuclidean"),
                      (8, 2048, 64, "l1"), (1, 16384, 64, "sqeuclidean")):
    g = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(B, N, D, device="cuda", generator=g); y0 = torch.randn(B, N, D, device="cuda", generator=g)
    def step(memory):
        x = x0.clone().requires_grad_(True)
        softdtw.soft_dtw(x, y0, 1.0, memory=memory, cost=cost).mean().backward()
    r = {"tag": tag, "B": B, "N": N, "D": D, "cost": cost}
    for mem in ("store", "checkpoint"):
        step(mem); torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
        step(mem); torch.cuda.synchronize()
        r[mem + "_peak_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
        r[mem] = round(median_ms(lambda: step(mem), reps=10), 3)
    r["ratio"] = round(r["checkpoint"] / r["store"], 3)
    ku = kernel_us(lambda: step("checkpoint"), reps=3)
    r["ckpt_fwd_ms"] = round(sum(v for k, v in ku.items() if "forward_chain" in k) / 1e3, 3)
    r["ckpt_bwd_ms"] = round(sum(v for k, v in ku.items() if "backward_chain" in k) / 1e3, 3)
    r["ckpt_gpu_ms"] = round(sum(ku.values()) / 1e3, 3)
    print(json.dumps(r), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(r) + "\n")
    torch.cuda.empty_cache()
