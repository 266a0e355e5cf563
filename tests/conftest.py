"""Shared fixtures: devices, dtypes, and the `cuda` marker that skips without a GPU."""
import os

import pytest
import torch


def pytest_sessionstart(session):
    """On a GPU, build (or load) the eager path's C++ launcher before any test, so that every repeated cuda call
    of the suite runs through it as a training loop's would (backends/cuda/fastpath.py); without it the suite
    runs on the Python path and test_cuda_fastpath.py says why."""
    if torch.cuda.is_available() and os.environ.get("SOFTDTW_FASTPATH", "1") != "0":
        from softdtw.backends.cuda import fastpath

        try:
            fastpath.build()
        except RuntimeError:
            pass


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
