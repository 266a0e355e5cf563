"""backends/_cpu_loading.py: the compile notice, and the same results whether the cpu kernels were
compiled in the process or loaded from Numba's cache."""
import os
import subprocess
import sys

import pytest
import torch
from numba.core import event

import softdtw
from softdtw.backends import _cpu_kernels, _cpu_loading

# One float64 forward + backward through the public API, two shapes: a pair at a time (B = 2) and
# pairs in SIMD lanes (B = 64 on up to 4 threads). Saves values and gradients to argv[1].
_SCRIPT = """
import sys, torch, softdtw
out = {}
g = torch.Generator().manual_seed(0)
for B, N, M in ((2, 120, 90), (64, 40, 30)):
    x = torch.randn(B, N, 2, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(B, M, 2, generator=g, dtype=torch.float64)
    v = softdtw.soft_dtw(x, y, 0.1, backend="cpu")
    v.sum().backward()
    out[B] = (v.detach(), x.grad)
torch.save(out, sys.argv[1])
"""


def _run(tmp_path, name, cache_dir=None):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(min(4, os.cpu_count() or 1)))
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    out = tmp_path / f"{name}.pt"
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    return torch.load(out), r.stderr


def test_notice_printed_once_and_only_for_the_cpu_kernels(capsys):
    notice = _cpu_loading._CompileNotice(_cpu_kernels.__name__)
    other = event.Event("numba:compile", event.EventStatus.START,
                        data={"dispatcher": type("D", (), {"py_func": len})()})
    ours = event.Event("numba:compile", event.EventStatus.START,
                       data={"dispatcher": _cpu_kernels.forward_kernel})
    notice.notify(other)
    assert capsys.readouterr().err == ""
    notice.notify(ours)
    notice.notify(ours)
    assert capsys.readouterr().err == _cpu_loading.COMPILE_NOTICE + "\n"


def test_no_notice_when_the_kernels_come_from_the_cache(tmp_path):
    # Compile (or load) in this process first: the cache then holds what the subprocess needs.
    x = torch.randn(2, 120, 2, dtype=torch.float64, requires_grad=True)
    softdtw.soft_dtw(x, torch.randn(2, 90, 2, dtype=torch.float64), 0.1, backend="cpu").sum().backward()
    _, err = _run(tmp_path, "warm")
    assert "compiling CPU kernels" not in err


@pytest.mark.slow
def test_compiled_and_cached_kernels_give_bitwise_equal_results(tmp_path):
    """A cold cache: the first process compiles (~40 s) and says so once on stderr; the second loads
    the cache silently, and both give the same bits. Before _cpu_loading.load_cached_helpers the
    second process's float64 gradients differed by ~1e-12 relative (values by ~1e-16)."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    compiled, err_compiled = _run(tmp_path, "compiled", cache)
    cached, err_cached = _run(tmp_path, "cached", cache)
    assert err_compiled.count("softdtw: compiling CPU kernels, once") == 1
    assert "compiling CPU kernels" not in err_cached
    for B in compiled:
        for a, b in zip(compiled[B], cached[B]):
            assert torch.equal(a, b), f"B={B}: max difference {float((a - b).abs().max()):.3g}"
