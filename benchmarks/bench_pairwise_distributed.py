"""Distributed pairwise soft-DTW matrix (issue 6): P x P series of length T on 1 GPU and on W GPUs.

    python benchmarks/bench_pairwise_distributed.py --gpus 2 [--P 20000 --T 256 --D 1]

Each configuration runs in fresh processes (one per GPU, NCCL), times `pairwise_soft_dtw(X,
distributed=True)` under no_grad after a warm-up that compiles the kernels, and checks that every
configuration returns the same matrix. Prints a table and writes benchmarks/results/<gpu>_pairwise.json
(+ .md). Throughput counts the cells of the pairs computed: the symmetric case computes the upper
triangle only, P (P + 1) / 2 pairs of T x T cells.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import softdtw

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, args, out_dir: str):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    distributed = world > 1
    if distributed:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(args.P, args.T, args.D, generator=g).cuda()
    with torch.no_grad():
        softdtw.pairwise_soft_dtw(X[:256], gamma=args.gamma, distributed=distributed, progress=False)  # warm-up
        torch.cuda.synchronize()
        if distributed:
            dist.barrier()
        start = time.perf_counter()
        K = softdtw.pairwise_soft_dtw(X, gamma=args.gamma, distributed=distributed, progress=False)
        torch.cuda.synchronize()
        if distributed:
            dist.barrier()
        seconds = time.perf_counter() - start
    if rank == 0:
        torch.save({"seconds": seconds, "K_rows": K[:: max(1, args.P // 64)].cpu(),
                    "sum": float(K.double().sum()), "peak_mb": torch.cuda.max_memory_allocated() / 2**20},
                   os.path.join(out_dir, f"world{world}.pt"))
    if distributed:
        dist.destroy_process_group()


def run(world: int, args, out_dir: str) -> dict:
    mp.spawn(_worker, args=(world, _free_port(), args, out_dir), nprocs=world, join=True)
    return torch.load(os.path.join(out_dir, f"world{world}.pt"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--P", type=int, default=20000)
    parser.add_argument("--T", type=int, default=256)
    parser.add_argument("--D", type=int, default=1)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--tmp", default="/tmp/softdtw-pairwise-bench")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.makedirs(args.tmp, exist_ok=True)
    pairs = args.P * (args.P + 1) // 2
    cells = pairs * args.T * args.T
    worlds = [1] + ([args.gpus] if args.gpus > 1 else [])
    results = {w: run(w, args, args.tmp) for w in worlds}
    base = results[1]
    rows = []
    for w, r in results.items():
        same = torch.allclose(r["K_rows"], base["K_rows"], rtol=1e-5, atol=1e-4)
        speedup = base["seconds"] / r["seconds"]
        rows.append({"impl": "softdtw.pairwise_soft_dtw", "gpus": w, "P": args.P, "T": args.T, "D": args.D,
                     "gamma": args.gamma, "pairs": pairs, "seconds": round(r["seconds"], 3),
                     "gcups": round(cells / r["seconds"] / 1e9, 1), "speedup": round(speedup, 3),
                     "efficiency": round(speedup / w, 3), "peak_mb_rank0": round(r["peak_mb"], 1),
                     "matches_1gpu": bool(same)})
    sha = os.environ.get("SOFTDTW_GIT_SHA") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    gpu = torch.cuda.get_device_name()
    report = {"device": f"{args.gpus} x {gpu}", "torch": torch.__version__, "git_sha": sha, "rows": rows}
    name = args.out or str(ROOT / "benchmarks" / "results" /
                           f"{gpu.split()[1].lower() if len(gpu.split()) > 1 else 'gpu'}x{args.gpus}_pairwise.json")
    Path(name).parent.mkdir(parents=True, exist_ok=True)
    Path(name).write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"# Distributed pairwise soft-DTW on {report['device']}", "",
             f"torch {report['torch']}, git {sha}. P x P matrix of length-{args.T} series (D = {args.D}, fp32, "
             f"gamma = {args.gamma}), values only, upper triangle ({pairs} pairs) split evenly over the ranks and "
             "all-gathered on every rank; time from start to the matrix on every rank.", "",
             "| GPUs | seconds | GCUPS | speedup | efficiency | peak MB (rank 0) | same matrix as 1 GPU |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['seconds']} | {r['gcups']} | {r['speedup']} | {r['efficiency']} | "
                     f"{r['peak_mb_rank0']} | {r['matches_1gpu']} |")
    md = "\n".join(lines) + "\n"
    Path(name).with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
