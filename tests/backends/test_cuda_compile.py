"""backends/cuda/compile.py without a GPU: loading cuda-core from several threads at once (the compile cache and
NVRTC errors are tested on the GPU, tests/backends/test_cuda.py). Skipped where cuda-core is not installed."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None,
                    reason="needs cuda-core")
def test_cuda_core_loads_from_threads_at_once():
    """Four threads asking for cuda-core first, in a fresh interpreter: each gets it. Unserialised, the threads
    after the first saw cuda.core half initialised and raised ImportError ("cuda-core ... is not installed")."""
    code = (
        "import sys, threading\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "from softdtw.backends.cuda import compile as C\n"
        "got, errors = [], []\n"
        "def load():\n"
        "    try:\n"
        "        got.append(C.cuda_core().Program)\n"
        "    except Exception as err:\n"
        "        errors.append(repr(err))\n"
        "threads = [threading.Thread(target=load) for _ in range(4)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(len(got), errors)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4 []", out.stdout + out.stderr
