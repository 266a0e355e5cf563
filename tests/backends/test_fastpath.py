"""The C++ launcher's switch and a build that fails (backends/cuda/fastpath.py): runs everywhere, no GPU or
compiler needed. What it launches is tested on a GPU in test_cuda_fastpath.py."""
from __future__ import annotations

import subprocess
import sys
import time

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


def test_the_launcher_takes_lengths_given_as_tensors_of_batched_calls():
    """Lists and arrays go to the Python path (which reads them), and so do lengths of unbatched calls."""
    import numpy as np

    t = torch.tensor([3, 4])
    assert fastpath._takes_lengths(None, None, False) and fastpath._takes_lengths(None, None, True)
    assert fastpath._takes_lengths(t, None, False) and fastpath._takes_lengths(None, t.int(), False)
    assert fastpath._takes_lengths(t, t, False)
    assert not fastpath._takes_lengths(t, None, True)
    assert not fastpath._takes_lengths([3, 4], None, False)
    assert not fastpath._takes_lengths(t, np.array([3, 4]), False)


def test_checked_reads_the_range_of_every_span_and_gives_back_an_unused_slot(monkeypatch):
    """_checked (the launcher's value check, faked here: no GPU): the range bound of each DP a call runs (the
    divergence's three), and a call that launched nothing hands its slot back unarmed."""
    from softdtw import _checks
    from softdtw.backends.cuda import checks

    class Slot:
        dev, ws, wmax = 7, torch.zeros(2), torch.zeros(1)

    class Pending:
        def __init__(self, *args):
            self.vmax, self.gamma = 1.0, 0.1

        def ok(self):
            return True

    given, seen = [], []
    monkeypatch.setattr(checks, "_take", lambda dev: Slot())
    monkeypatch.setattr(checks, "_give", lambda dev, slot: given.append(slot))
    monkeypatch.setattr(checks, "PendingCheck", Pending)
    monkeypatch.setattr(_checks, "_out_of_range", lambda v, g, span, backend, dtype: seen.append(span) or span == "far")
    monkeypatch.setenv("SOFTDTW_CHECK_VALUES", "1")
    assert fastpath._checked(0, 0, ("a", "b", "c"), torch.float32, lambda *check: "value") == "value"
    assert seen == ["a", "b", "c"] and not given
    assert fastpath._checked(0, 0, ("a", "far", "c"), torch.float32, lambda *check: "value") is None
    assert fastpath._checked(0, 0, ("a",), torch.float32, lambda *check: None) is None and len(given) == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks (fcntl)")
def test_build_lock_removes_a_dead_process_lock_file(tmp_path):
    """PyTorch's lock file left by a process that exited inside a build would make every later load wait forever:
    under the OS lock it is removed."""
    (tmp_path / "lock").write_text("")
    with fastpath._build_lock(str(tmp_path)):
        assert not (tmp_path / "lock").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks (fcntl)")
def test_build_lock_is_released_when_its_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(tmp_path / 'softdtw.flock')!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.kill()  # dies holding it, as a daemon build thread does at exit
        holder.wait()
        t0 = time.monotonic()
        with fastpath._build_lock(str(tmp_path)):
            pass
        assert time.monotonic() - t0 < 5
    finally:
        holder.kill()


def _can_compile() -> bool:
    import shutil

    from torch.utils import cpp_extension

    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError:
        return False
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@pytest.mark.skipif(sys.platform == "win32" or not _can_compile(), reason="needs a C++ compiler and ninja (POSIX)")
def test_a_process_that_dies_inside_the_build_does_not_block_the_next():
    """A short script whose first cuda call started the background build, and which exits while that thread is
    inside cpp_extension.load, left PyTorch's lock file behind, and every later build waited forever (before
    _build_lock; reproduced: the next build() still waited after 60 s). Several such exits, then a build in a new
    process must finish: loaded on a GPU machine, or its error (no CUDA driver) elsewhere. The first compile of the
    launcher on a machine takes about a minute."""
    dies = "import os, time\nfrom softdtw.backends.cuda import fastpath\nfastpath._start()\ntime.sleep({})\nos._exit(0)\n"
    for delay in (0.05, 0.2, 0.5, 1.0):
        subprocess.run([sys.executable, "-c", dies.format(delay)], timeout=600, check=True)
    build = ("from softdtw.backends.cuda import fastpath\ntry:\n    fastpath.build()\nexcept RuntimeError as e:\n"
             "    print(e)\nprint('done')\n")
    out = subprocess.run([sys.executable, "-c", build], timeout=600, capture_output=True, text=True)
    assert out.stdout.strip().endswith("done"), out.stderr[-2000:]

