"""Small helpers shared by the benchmark scripts: wall-clock timing, machine facts, result files.

Results go to a JSON file ({"device", "torch", "numba", "git_sha", ..., "rows": [...]}, as in
STYLE.md) and a Markdown table next to it (same name, ``.md``): by default a new timestamped file in
the working directory (:func:`default_out`); the headline results in ``benchmarks/results/`` are
refreshed only on purpose, with ``--out benchmarks/results/<name>.json``.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]


def default_out(name: str) -> Path:
    """``./softdtw-bench-<name>-YYYYmmdd-HHMMSS.json`` in the working directory (never a tracked file)."""
    return Path.cwd() / f"softdtw-bench-{name}-{datetime.now():%Y%m%d-%H%M%S}.json"


def interleaved_median_ms(fns: Mapping[str, Callable[[], object]], reps: int, warmup: int = 1,
                          desc: str = "") -> dict:
    """Median wall-clock ms of each function, timed in alternation.

    Every function is warmed up first; then each repetition runs all of them once, in turn, so a
    burst of load from other processes on a shared machine hits every implementation alike and
    the ratios stay meaningful even when the absolute times move. With ``desc``, a progress bar
    (tqdm, on stderr) counts the calls.
    """
    bar = None
    if desc:
        from tqdm import tqdm
        bar = tqdm(total=(warmup + reps) * len(fns), desc=desc, unit="call", leave=False, file=sys.stderr,
                   dynamic_ncols=True)
    try:
        for name, fn in fns.items():
            for _ in range(warmup):
                if bar is not None:
                    bar.set_postfix_str(f"warm-up: {name}")
                fn()
                if bar is not None:
                    bar.update(1)
        times = {name: [] for name in fns}
        for _ in range(reps):
            for name, fn in fns.items():
                if bar is not None:
                    bar.set_postfix_str(name)
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
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
    """The tree's commit; SOFTDTW_GIT_SHA overrides it (the device machine's copy reports a stale HEAD)."""
    if os.environ.get("SOFTDTW_GIT_SHA"):
        return os.environ["SOFTDTW_GIT_SHA"]
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
