"""Small helpers shared by the benchmark scripts: wall-clock timing, machine facts, result files.

Results go to ``benchmarks/results/<name>.json`` ({"device", "torch", "numba", "git_sha", ...,
"rows": [...]}, as in STYLE.md) and a Markdown table next to it (same name, ``.md``).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from statistics import median
from typing import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]


def interleaved_median_ms(fns: Mapping[str, Callable[[], object]], reps: int, warmup: int = 1) -> dict:
    """Median wall-clock ms of each function, timed in alternation.

    Every function is warmed up first; then each repetition runs all of them once, in turn, so a
    burst of load from other processes on a shared machine hits every implementation alike and
    the ratios stay meaningful even when the absolute times move.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: median(t) for name, t in times.items()}


def cpu_name() -> str:
    """Model name and core count of this machine's CPU, with its widest SIMD extension."""
    model = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine(), "x86_64"):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    simd = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"
    return f"{model}, {os.cpu_count()} cores, {simd}"


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows`` restricted to ``columns`` (None prints as an empty cell)."""
    def cell(v):
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_results(path: Path, meta: dict, rows: Sequence[dict], markdown: str) -> None:
    """Write ``path`` (JSON: meta plus "rows") and the Markdown text next to it (``.md``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "rows": list(rows)}, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown.rstrip() + "\n")
