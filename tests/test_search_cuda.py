"""dtw_search on CUDA tensors (backends/cuda/search.py, kernels/search.cu) against the CPU dtw_search.

The first test runs everywhere: the plain-Python transliteration of the kernel's tile / look-back algorithm
(tests/_search_scan.py) against the CPU kernel. The others are marked `cuda`.
"""
import math

import numpy as np
import pytest
import torch

from softdtw import search
from tests._search_scan import search_scan

F64, F32 = torch.float64, torch.float32


def _cpu_rows(q, s, cost_kind, gamma):
    """The CPU kernel's end rows (values `(Q, L)` float64, starts `(Q, L)` int64) for numpy q `(Q, n, D)`, s `(L, D)`."""
    from softdtw.backends import _cpu_search as kern

    Q, L = q.shape[0], s.shape[0]
    v = np.empty((Q, L))
    st = np.empty((Q, L), np.int64)
    kern.search_kernel(np.ascontiguousarray(q, np.float64), np.ascontiguousarray(s, np.float64), cost_kind,
                       float(gamma), v, st)
    return v, st


def _data(Q, n, D, L, seed, integer=False):
    rng = np.random.default_rng(seed)
    if integer:  # exact sums: ties between paths are exact, the tie rules decide
        return rng.integers(0, 3, size=(Q, n, D)).astype(np.float64), rng.integers(0, 3, size=(L, D)).astype(np.float64)
    return rng.normal(size=(Q, n, D)), rng.normal(size=(L, D))


@pytest.mark.parametrize("seed", range(12))
def test_scan_transliteration_equals_the_cpu_kernel(seed):
    """The kernel's algorithm (tiles, pass 1 / block scan / look-back in windows / pass 2, tiles interleaved at
    random) gives the CPU's values and the hard path's starts, with exact ties on integer data."""
    rng = np.random.default_rng(seed)
    n, L, D = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 3))
    q, s = _data(1, n, D, L, seed, integer=seed % 2 == 0)
    for gamma in (0.0, 0.7):
        v, st = _cpu_rows(q, s, seed % 3 == 0, gamma)
        v2, st2 = search_scan(q[0], s, int(seed % 3 == 0), gamma, NT=3, CPT=2, LANES=4, seed=seed)
        np.testing.assert_allclose(v2, v[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(st2, st[0])


# ---- CUDA ----------------------------------------------------------------------------------------------------------

cuda = pytest.mark.cuda

#: (Q, n, D, L, cost, forced (NT, CPT[, MINB]) or None): L not a multiple of the tile, n = 1, L < n, D > DK_MAX,
#: many tiles (look-back over more than one window of 32).
CASES = [
    (1, 8, 1, 1000, "sqeuclidean", None),
    (3, 17, 2, 4099, "l1", (32, 2)),
    (2, 1, 1, 300, "sqeuclidean", (32, 1)),
    (2, 20, 3, 7, "sqeuclidean", None),
    (1, 5, 5, 2000, "sqeuclidean", (64, 2)),
    (4, 33, 1, 5000, "l1", (32, 4)),
    (2, 12, 4, 9000, "sqeuclidean", (128, 2)),
    (3, 17, 2, 4099, "l1", (64, 2, 2)),
    (4, 33, 1, 5000, "sqeuclidean", (64, 4, 3)),
]


@pytest.fixture
def tile(request):
    from softdtw.backends.cuda import search as cs

    old = cs.forced_tile
    yield cs
    cs.forced_tile = old


def _gpu_rows(cs, q, s, cost, gamma, dtype=F64, forced=None):
    cs.forced_tile = forced
    v, st = cs.end_rows(torch.tensor(q, dtype=dtype, device="cuda"), torch.tensor(s, dtype=dtype, device="cuda"),
                        cost, gamma)
    return v.double().cpu().numpy(), st.long().cpu().numpy()


def _report(name, got_v, got_s, want_v, want_s):
    """(max |error| / max |value|, starts differing); prints the elementwise relative error too (soft values can be
    near 0, where it means little)."""
    rel = np.max(np.abs(got_v - want_v)) / np.max(np.abs(want_v))
    each = np.max(np.abs(got_v - want_v) / np.maximum(np.abs(want_v), 1e-300))
    ndiff = int(np.sum(got_s != want_s))
    print(f"{name}: max rel err {rel:.3g} (elementwise {each:.3g}), starts differing {ndiff} of {got_s.size}")
    return rel, ndiff


@cuda
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_end_rows_equal_the_cpu_float64(tile, case, gamma):
    Q, n, D, L, cost, forced = case
    for integer in (False, True):
        q, s = _data(Q, n, D, L, n * L + D, integer)
        want_v, want_s = _cpu_rows(q, s, int(cost == "l1"), gamma)
        got_v, got_s = _gpu_rows(tile, q, s, cost, gamma, F64, forced)
        rel, ndiff = _report(f"{case} gamma={gamma} integer={integer}", got_v, got_s, want_v, want_s)
        np.testing.assert_allclose(got_v, want_v, rtol=1e-9, atol=1e-12 * np.max(np.abs(want_v)))
        assert ndiff == 0


@cuda
@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_end_rows_float32(tile, gamma):
    q, s = _data(2, 24, 1, 20000, 3)
    want_v, want_s = _cpu_rows(q, s, 0, gamma)
    got_v, got_s = _gpu_rows(tile, q, s, "sqeuclidean", gamma, F32)
    rel, ndiff = _report(f"float32 gamma={gamma}", got_v, got_s, want_v, want_s)
    # relative to the values' scale: soft values can be near 0 (or negative), where relative errors mean nothing
    np.testing.assert_allclose(got_v, want_v, rtol=1e-4, atol=1e-4 * np.max(np.abs(want_v)))
    assert ndiff <= 1e-3 * got_s.size  # near ties only (float32 sums)


@cuda
@pytest.mark.parametrize("forced", [(32, 2), (64, 2, 2)])
def test_end_rows_in_bands_of_rows(tile, monkeypatch, forced):
    """Rows in several launches (look-back records limited): the same rows as one launch."""
    q, s = _data(2, 23, 2, 3000, 5)
    for gamma in (0.0, 0.3):
        want_v, want_s = _cpu_rows(q, s, 0, gamma)
        one = _gpu_rows(tile, q, s, "sqeuclidean", gamma, F64, forced)
        nrec = tile._record_words(F64, gamma > 0)
        ntiles = -(-3000 // (forced[0] * forced[1]))
        monkeypatch.setattr(tile, "SLOT_BYTES", 2 * ntiles * 5 * nrec * 8)  # 5 rows per band (Q = 2)
        banded = _gpu_rows(tile, q, s, "sqeuclidean", gamma, F64, forced)
        monkeypatch.undo()
        _report(f"bands gamma={gamma}", *banded, want_v, want_s)
        np.testing.assert_allclose(banded[0], want_v, rtol=1e-9)
        np.testing.assert_array_equal(banded[1], want_s)
        np.testing.assert_allclose(banded[0], one[0], rtol=1e-12)


@cuda
def test_long_series_float32_and_float64():
    """One 128-step query in 2·10^5 steps (the benchmark's shape, smaller): the GPU's 10 matches are the CPU's."""
    rng = np.random.default_rng(9)
    L, n = 200_000, 128
    s = rng.normal(size=(L, 1)).cumsum(0) * 0.1
    q = s[123_456:123_456 + n].copy() + 0.01 * rng.normal(size=(n, 1))
    cpu = search.dtw_search(torch.tensor(q), torch.tensor(s), k=10)
    for dtype in (F64, F32):
        gpu = search.dtw_search(torch.tensor(q, dtype=dtype).cuda(), torch.tensor(s, dtype=dtype).cuda(), k=10)
        print(dtype, gpu.start.tolist(), gpu.end.tolist())
        assert gpu.start.device.type == "cuda" and gpu.value.dtype == dtype
        if dtype == F64:
            assert torch.equal(gpu.start.cpu(), cpu.start) and torch.equal(gpu.end.cpu(), cpu.end)
            torch.testing.assert_close(gpu.value.cpu(), cpu.value, rtol=1e-9, atol=1e-12)
        else:
            assert int(gpu.start[0]) == int(cpu.start[0]) and int(gpu.end[0]) == int(cpu.end[0])
            torch.testing.assert_close(gpu.value.cpu().double(), cpu.value, rtol=1e-4, atol=1e-4)


@cuda
@pytest.mark.parametrize("gamma", [0.0, 0.2])
def test_dtw_search_matches_the_cpu(gamma):
    """The public API: planted motifs, batched queries, znormalize, exclusion, k beyond the matches."""
    torch.manual_seed(0)
    pattern = torch.sin(torch.linspace(0, 3 * math.pi, 16, dtype=F64)).unsqueeze(1)
    s = 0.1 * torch.randn(3000, 1, dtype=F64)
    for a in (100, 900, 2000):
        s[a:a + 16] += pattern
    s[2500:2524] += pattern.repeat_interleave(3, 0)[::2]
    queries = torch.stack([pattern, pattern.flip(0), 2 * pattern + 1])
    for kw in (dict(k=5), dict(k=4, exclusion=0), dict(k=6, exclusion=40), dict(k=5, znormalize=True),
               dict(k=3, cost="l1")):
        cpu = search.dtw_search(queries, s, gamma=gamma, **kw)
        gpu = search.dtw_search(queries.cuda(), s.cuda(), gamma=gamma, **kw)
        assert torch.equal(gpu.start.cpu(), cpu.start), kw
        assert torch.equal(gpu.end.cpu(), cpu.end), kw
        torch.testing.assert_close(gpu.value.cpu(), cpu.value, rtol=1e-9, atol=1e-12)
    # float32 query and series: float32 arithmetic, the same matches here
    cpu = search.dtw_search(pattern, s, k=4, gamma=gamma)
    gpu = search.dtw_search(pattern.float().cuda(), s.float().cuda(), k=4, gamma=gamma)
    assert gpu.value.dtype == F32 and torch.equal(gpu.end.cpu(), cpu.end)
    torch.testing.assert_close(gpu.value.cpu().double(), cpu.value, rtol=1e-4, atol=1e-5)


@cuda
def test_more_matches_asked_than_fit_and_short_series():
    q = torch.tensor([[0.0], [1.0], [0.0]], dtype=F64)
    s = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 5.0], dtype=F64).unsqueeze(1)
    for kw in (dict(k=10), dict(k=10, exclusion=0), dict(k=3, gamma=0.1)):
        cpu = search.dtw_search(q, s, **kw)
        gpu = search.dtw_search(q.cuda(), s.cuda(), **kw)
        assert torch.equal(gpu.start.cpu(), cpu.start) and torch.equal(gpu.end.cpu(), cpu.end), kw
        assert torch.equal(torch.isinf(gpu.value.cpu()), torch.isinf(cpu.value))
        torch.testing.assert_close(gpu.value.cpu(), cpu.value, rtol=1e-9, atol=1e-12)
    q, s = torch.randn(5, 1, dtype=F64), torch.randn(2, 1, dtype=F64)  # L < n
    for gamma in (0.0, 0.5):
        cpu, gpu = search.dtw_search(q, s, k=2, gamma=gamma), search.dtw_search(q.cuda(), s.cuda(), k=2, gamma=gamma)
        assert torch.equal(gpu.start.cpu(), cpu.start) and torch.equal(gpu.end.cpu(), cpu.end)
        torch.testing.assert_close(gpu.value.cpu(), cpu.value, rtol=1e-9, atol=1e-12)


@cuda
@pytest.mark.parametrize("L", [1, 1000, 5000])
def test_device_pick_equals_the_host_pick(L):
    """select (chunked, on the device) against the CPU's Numba pick on integer values (many ties: the first end
    wins) and random starts, several k and exclusions."""
    from softdtw.backends.cuda import search as cs

    rng = np.random.default_rng(L)
    Q = 3
    v = rng.integers(0, 6, size=(Q, L)).astype(np.float64)
    v[:, rng.integers(0, L, size=L // 10)] = np.inf  # ends without a finite value are never picked
    j = np.arange(L)
    st = np.maximum(0, j - rng.integers(0, 40, size=(Q, L)))
    for k, excl in ((1, 0), (5, 3), (40, 0), (300, 10)):
        for dtype in (F64, F32):
            vt, stt = torch.tensor(v, dtype=dtype).cuda(), torch.tensor(st, dtype=torch.int32).cuda()
            got = cs.select(vt, stt, k, excl)
            want = cs.select_on_host(vt, stt, k, excl)
            for a, b in zip(got, want):
                assert torch.equal(a.cpu(), b), (L, k, excl, dtype)


@cuda
def test_inputs_on_two_devices_are_refused():
    with pytest.raises(ValueError, match="same device"):
        search.dtw_search(torch.zeros(3, 1, device="cuda"), torch.zeros(10, 1))


@cuda
def test_cli_search_on_cuda(tmp_path, capsys):
    from softdtw import cli

    rng = np.random.default_rng(0)
    pattern = np.sin(np.linspace(0, 2 * np.pi, 12))
    series = 0.05 * rng.normal(size=500)
    series[40:52] += pattern
    series[350:362] += pattern
    np.save(tmp_path / "q.npy", pattern)
    np.save(tmp_path / "s.npy", series)
    outs = []
    for dev in ("cpu", "cuda"):
        args = ["search", str(tmp_path / "q.npy"), str(tmp_path / "s.npy"), "-k", "2", "--device", dev, "--csv",
                str(tmp_path / f"{dev}.csv")]
        assert cli.main(args) == 0
        outs.append(np.loadtxt(tmp_path / f"{dev}.csv", delimiter=",", skiprows=1))
    assert "(CUDA)" in capsys.readouterr().out
    np.testing.assert_array_equal(outs[0][:, :2], outs[1][:, :2])
    np.testing.assert_allclose(outs[0][:, 2], outs[1][:, 2], rtol=1e-9, atol=1e-12)
