"""The C++ launcher's switch and a build that fails (backends/cuda/fastpath.py): runs everywhere, no GPU or
compiler needed. What it launches is tested on a GPU in test_cuda_fastpath.py."""
from __future__ import annotations

import pytest
import torch

from softdtw.backends.cuda import fastpath


def test_status_says_off_when_switched_off(monkeypatch):
    monkeypatch.setattr(fastpath, "_enabled", False)
    assert fastpath.status().startswith("off")


def test_a_failed_build_leaves_the_python_path_and_says_why(monkeypatch):
    from torch.utils import cpp_extension

    def no_compiler(*a, **k):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    for name, value in (("_module", None), ("_error", None), ("_thread", None), ("_enabled", True)):
        monkeypatch.setattr(fastpath, name, value)
    with pytest.raises(RuntimeError, match="C\\+\\+ launcher is not available: RuntimeError: Ninja is required"):
        fastpath.build()
    assert "Ninja is required" in fastpath.status()
    x = torch.randn(2, 5, 1)
    assert fastpath.call(x, x, 0.1, "sqeuclidean", "auto", None) is None  # nothing built: the Python path


def test_the_op_kernels_keep_out_while_a_plan_is_forced(monkeypatch):
    """launch.forced_plan switches the ops' C++ kernels off and back on (their cached plans are the planner's), and
    set_enabled switches them with the launcher."""
    from softdtw.backends.cuda import launch

    class FakeModule:
        calls: list = []

        def set_ops_enabled(self, on):
            self.calls.append(on)

    fake = FakeModule()
    monkeypatch.setattr(fastpath, "_module", fake)
    monkeypatch.setattr(fastpath, "_enabled", True)
    monkeypatch.setattr(launch, "force_hooks", [fastpath._sync_ops])
    with launch.forced_plan(2, 1):
        assert fake.calls[-1] is False
        assert fastpath._ready() is None  # the eager calls keep out too
    assert fake.calls[-1] is True
    fastpath.set_enabled(False)
    assert fake.calls[-1] is False
    fastpath.set_enabled(True)
    assert fake.calls[-1] is True
