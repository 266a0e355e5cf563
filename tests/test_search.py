"""softdtw.dtw_search against brute force (every window's DTW / soft-DTW), and its k / exclusion rules."""
import math

import numpy as np
import pytest
import torch

import softdtw
from softdtw import search
from softdtw.backends import reference as ref

F64 = torch.float64


def _window_values(q, s, gamma):
    """`(L, L)`: V[a, e] = (soft-)DTW of q against the window s[a..e] (closed ends), +inf for a > e."""
    L = s.shape[0]
    V = torch.full((L, L), math.inf, dtype=F64)
    g = torch.tensor(gamma, dtype=F64)
    for a in range(L):
        for e in range(a, L):
            w = s[a:e + 1]
            v, _ = ref.forward(q[None], w[None], g, "sqeuclidean", torch.tensor([q.shape[0]]),
                               torch.tensor([w.shape[0]]), None, "none")
            V[a, e] = v[0]
    return V


def _end_values(V, gamma):
    """Per end e: the best start and min over windows (gamma = 0), or the soft-min over starts."""
    if gamma == 0:
        best, start = V.min(dim=0)
        return best, start
    return -gamma * torch.logsumexp(-V / gamma, dim=0), None


def _greedy(values, starts, k, exclusion):
    """The selection rule of dtw_search, in plain Python."""
    alive = [True] * len(values)
    out = []
    for _ in range(k):
        cand = [j for j in range(len(values)) if alive[j] and math.isfinite(values[j])]
        if not cand:
            break
        e = min(cand, key=lambda j: (values[j], j))
        s = starts[e]
        out.append((s, e, values[e]))
        for j in range(len(values)):
            if abs(j - e) <= exclusion or (starts[j] <= e and j >= s):
                alive[j] = False
    return out


@pytest.mark.parametrize("seed", range(3))
def test_hard_search_matches_brute_force_windows(seed):
    rng = np.random.default_rng(seed)
    n, L, D = int(rng.integers(2, 5)), int(rng.integers(10, 18)), int(rng.integers(1, 3))
    q, s = torch.tensor(rng.normal(size=(n, D))), torch.tensor(rng.normal(size=(L, D)))
    V = _window_values(q, s, 0.0)
    best, start = _end_values(V, 0.0)
    for k, excl in ((1, None), (3, None), (5, 0), (4, 3)):
        got = search.dtw_search(q, s, k=k, exclusion=excl)
        want = _greedy(best.tolist(), start.tolist(), k, n // 2 if excl is None else excl)
        assert got.start.shape == (k,)
        for r, (a, e, v) in enumerate(want):
            assert (int(got.start[r]), int(got.end[r])) == (a, e)
            assert float(got.value[r]) == pytest.approx(v, rel=1e-12, abs=1e-12)
            assert float(V[a, e]) == pytest.approx(v, rel=1e-12, abs=1e-12)  # the window [a, e] is the match
        for r in range(len(want), k):
            assert int(got.start[r]) == -1 and int(got.end[r]) == -1 and math.isinf(float(got.value[r]))


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_soft_search_values_are_the_soft_min_over_windows(gamma):
    """For gamma > 0 the value of an end e is the soft-min over every start of the windows' soft-DTW: each
    path belongs to exactly one window [start, e]."""
    rng = np.random.default_rng(4)
    q, s = torch.tensor(rng.normal(size=(3, 2))), torch.tensor(rng.normal(size=(12, 2)))
    soft, _ = _end_values(_window_values(q, s, gamma), gamma)
    got = search.dtw_search(q, s, k=12, gamma=gamma, exclusion=0)
    ends = got.end[got.end >= 0]
    assert torch.allclose(got.value[: len(ends)], soft[ends], rtol=1e-12, atol=1e-12)
    # best first, and the best end is the global soft-min
    assert int(got.end[0]) == int(soft.argmin())
    assert torch.all(got.value[: len(ends)].diff() >= 0)


def test_batched_queries_equal_one_by_one_and_progress_bar(capsys):
    rng = np.random.default_rng(5)
    Q = torch.tensor(rng.normal(size=(6, 4, 1)))
    s = torch.tensor(rng.normal(size=(50, 1)))
    got = search.dtw_search(Q, s, k=3, progress=True)
    assert got.start.shape == (6, 3)
    for b in range(6):
        one = search.dtw_search(Q[b], s, k=3)
        for a, c in zip(got, one):
            assert torch.equal(a[b], c)
    assert "DTW search" in capsys.readouterr().err


def test_matches_do_not_overlap_and_respect_exclusion():
    rng = np.random.default_rng(6)
    q = torch.tensor(rng.normal(size=(8, 1)))
    s = torch.tensor(rng.normal(size=(300, 1)))
    for excl in (0, 4, 20):
        got = search.dtw_search(q, s, k=10, exclusion=excl)
        spans = [(int(a), int(e)) for a, e in zip(got.start, got.end) if e >= 0]
        assert len(spans) >= 3
        for i, (a, e) in enumerate(spans):
            assert 0 <= a <= e < 300
            for a2, e2 in spans[:i]:
                assert e < a2 or a > e2
                assert abs(e - e2) > excl
        assert torch.all(got.value.diff() >= 0)


def test_planted_pattern_is_found_and_znormalize_ignores_offset_and_scale():
    torch.manual_seed(7)
    pattern = torch.sin(torch.linspace(0, 3 * math.pi, 16)).unsqueeze(1)
    s = 0.1 * torch.randn(400, 1, dtype=F64)
    s[100:116] += pattern.double()
    s[300:324] += pattern.double().repeat_interleave(3, 0)[::2]  # the same pattern, 1.5x slower
    got = search.dtw_search(pattern, s, k=2)
    assert sorted(int(e) for e in got.end) == pytest.approx([115, 323], abs=2)
    plain = search.dtw_search(pattern, s, k=2, znormalize=True)
    moved = search.dtw_search(pattern, 5.0 * s + 3.0, k=2, znormalize=True)
    assert torch.equal(plain.start, moved.start) and torch.equal(plain.end, moved.end)
    assert torch.allclose(plain.value, moved.value, rtol=1e-9)


def test_float32_inputs_and_l1():
    rng = np.random.default_rng(8)
    q, s = rng.normal(size=(5, 2)), rng.normal(size=(40, 2))
    a = search.dtw_search(torch.tensor(q, dtype=torch.float32), torch.tensor(s, dtype=torch.float32), k=2, cost="l1")
    b = search.dtw_search(torch.tensor(q), torch.tensor(s), k=2, cost="l1")
    assert a.value.dtype == torch.float32
    assert torch.equal(a.end, b.end) and torch.allclose(a.value.double(), b.value, rtol=1e-6)


def test_bad_inputs_are_refused_clearly():
    s = torch.zeros(10, 2)
    with pytest.raises(ValueError, match="same feature size D"):
        search.dtw_search(torch.zeros(3, 1), s)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        search.dtw_search(torch.zeros(3, 2), s, k=0)
    with pytest.raises(ValueError, match="exclusion must be >= 0"):
        search.dtw_search(torch.zeros(3, 2), s, exclusion=-1)
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        search.dtw_search(torch.zeros(3, 2), s, gamma=-1.0)


def test_soft_starts_are_the_hard_paths_starts():
    """gamma > 0: the start of each end is that of the best hard-DTW path ending there (the mode of the soft-min's
    distribution over paths), the definition the CUDA scan computes too; integer data, so ties are exact."""
    from softdtw.backends import _cpu_search as kern
    rng = np.random.default_rng(11)
    q = rng.integers(0, 3, size=(3, 6, 2)).astype(np.float64)
    s = rng.integers(0, 3, size=(300, 2)).astype(np.float64)
    starts = []
    for gamma in (0.0, 0.5, 5.0):
        v, st = np.empty((3, 300)), np.empty((3, 300), np.int64)
        kern.search_kernel(q, s, 0, gamma, v, st)
        starts.append(st)
    assert np.array_equal(starts[0], starts[1]) and np.array_equal(starts[0], starts[2])
    got = search.dtw_search(torch.tensor(q[0]), torch.tensor(s), k=5, gamma=0.5)
    for a, e in zip(got.start.tolist(), got.end.tolist()):
        assert a == starts[0][0, e]


@pytest.mark.parametrize("n, cost_kind, L, D", [(1, 0, 90, 2), (2, 1, 90, 1), (16, 1, 90, 2), (37, 0, 2500, 1),
                                               (47, 1, 1100, 3), (48, 0, 90, 1), (64, 1, 4200, 2), (130, 0, 2100, 1)])
def test_hard_wavefront_equals_the_column_order(n, cost_kind, L, D):
    """The hard-DTW wavefront over column blocks (16 lanes below 48 rows, 32 from 48; chunks of lanes x 64
    columns, so L = 1100 ... 4200 spans several chunks and ends in a narrower one; D = 1 computes the cost in the
    step, D > 1 before it) gives the column-order DP's values and starts, bit for bit, including ties
    (integer-valued data)."""
    from softdtw.backends import _cpu_search as kern
    rng = np.random.default_rng(n)
    q = rng.integers(0, 3, size=(n, D)).astype(np.float64)
    s = rng.integers(0, 3, size=(L, D)).astype(np.float64)
    v1, s1 = np.empty(L), np.empty(L, np.int64)
    v2, s2 = np.empty(L), np.empty(L, np.int64)
    kern._search_one(q, s, cost_kind, 0.0, v1, s1)
    kern._search_one_hard_wave(q, s, cost_kind, v2, s2)
    assert np.array_equal(v1, v2) and np.array_equal(s1, s2)


@pytest.mark.parametrize("n, L", [(5, 3000), (60, 2049), (200, 700)])
def test_hard_wavefront_equals_the_column_order_on_real_data(n, L):
    """Random real data (no ties): the same bits as the column order (D = 1: the cost is rounded before it is
    added in both), and the path's cost is its value."""
    from softdtw.backends import _cpu_search as kern
    rng = np.random.default_rng(L)
    q, s = rng.normal(size=(n, 1)), rng.normal(size=(L, 1))
    v1, s1 = np.empty(L), np.empty(L, np.int64)
    v2, s2 = np.empty(L), np.empty(L, np.int64)
    kern._search_one(q, s, 0, 0.0, v1, s1)
    kern._search_one_hard_wave(q, s, 0, v2, s2)
    assert np.array_equal(v1, v2) and np.array_equal(s1, s2)
    path, value = kern.hard_path(q, s, 0, True, True)
    assert value == v1.min() and path[-1, 1] == int(v1.argmin()) and path[0, 1] == s1[v1.argmin()]
    assert value == pytest.approx(float(((q[path[:, 0], 0] - s[path[:, 1], 0]) ** 2).sum()), rel=1e-12)


@pytest.mark.parametrize("open_begin, open_end", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_cpu_dtw_path_backtrack_equals_the_path_of_E(open_begin, open_end, cost):
    """dtw_path on the cpu backend (a wavefront keeping one predecessor byte per cell, then a backtrack)
    returns the reference backend's path, read from its one-hot E, including ties (integer-valued data), per
    pair lengths and a query longer than one strip of lanes."""
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.integers(0, 3, size=(3, 70, 2)).astype(np.float64))
    y = torch.tensor(rng.integers(0, 3, size=(3, 90, 2)).astype(np.float64))
    kw = dict(cost=cost, open_begin=open_begin, open_end=open_end, x_lengths=torch.tensor([70, 1, 33]),
              y_lengths=torch.tensor([90, 40, 5]))
    ours = softdtw.dtw_path(x, y, backend="cpu", **kw)
    ref = softdtw.dtw_path(x, y, backend="reference", **kw)
    assert len(ours) == 3
    for a, b in zip(ours, ref):
        assert a.dtype == torch.int64 and torch.equal(a, b)


@pytest.mark.parametrize("open_begin, open_end", [(False, False), (True, True)])
def test_cpu_dtw_path_backtrack_across_chunks(open_begin, open_end):
    """The backtrack's cell -> (chunk, step, column, lane) map across chunks of 16 x 64 columns and a narrower last
    one (y of 1500 steps, 20 rows: 16 lanes) gives the reference backend's path, ties included."""
    rng = np.random.default_rng(9)
    x = torch.tensor(rng.integers(0, 3, size=(20, 1)).astype(np.float64))
    y = torch.tensor(rng.integers(0, 3, size=(1500, 1)).astype(np.float64))
    kw = dict(open_begin=open_begin, open_end=open_end)
    assert torch.equal(softdtw.dtw_path(x, y, backend="cpu", **kw), softdtw.dtw_path(x, y, backend="reference", **kw))


def test_cpu_subsequence_path_equals_tslearn():
    tslearn_metrics = pytest.importorskip("tslearn.metrics")
    rng = np.random.default_rng(4)
    q, s = rng.normal(size=(40, 1)), rng.normal(size=(700, 1))
    path, dist = tslearn_metrics.dtw_subsequence_path(q, s)
    ours = softdtw.dtw_path(torch.tensor(q), torch.tensor(s), open_begin=True, open_end=True, backend="cpu")
    assert ours.tolist() == [list(p) for p in path]
    value = softdtw.dtw(torch.tensor(q), torch.tensor(s), open_begin=True, open_end=True, backend="cpu")
    assert float(value) == pytest.approx(dist ** 2, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("open_begin, open_end", [(False, False), (True, True), (True, False)])
def test_dtw_path_fast_path_equals_the_validated_path(dtype, cost, open_begin, open_end):
    """An unbatched CPU pair with no other option skips the validation layer (functional._cpu_path_fast): the
    same path as the validated route (a batch of one) and the reference backend, and with return_value the value
    of softdtw.dtw, in x's dtype."""
    rng = np.random.default_rng(12)
    x = torch.tensor(rng.integers(0, 3, size=(9, 2)), dtype=dtype)
    y = torch.tensor(rng.integers(0, 3, size=(40, 2)), dtype=dtype)
    kw = dict(cost=cost, open_begin=open_begin, open_end=open_end)
    path, value = softdtw.dtw_path(x, y, return_value=True, **kw)
    assert torch.equal(path, softdtw.dtw_path(x, y, **kw))
    batched, values = softdtw.dtw_path(x[None], y[None], return_value=True, **kw)
    assert torch.equal(path, batched[0]) and values.shape == (1,) and values.dtype == dtype
    assert torch.equal(path, softdtw.dtw_path(x, y, backend="reference", **kw))
    assert value.dtype == dtype and value.shape == ()
    assert float(value) == float(softdtw.dtw(x.double(), y.double(), backend="reference", **kw))
    assert float(value) == float(values[0])


def test_dtw_path_return_value_on_the_reference_and_with_a_penalty():
    rng = np.random.default_rng(13)
    x, y = torch.tensor(rng.normal(size=(2, 6, 1))), torch.tensor(rng.normal(size=(2, 8, 1)))
    for kw in (dict(backend="reference"), dict(step_penalty=0.3), dict(bandwidth=2)):
        paths, values = softdtw.dtw_path(x, y, return_value=True, **kw)
        assert len(paths) == 2 and values.shape == (2,)
        want = softdtw.dtw(x, y, **kw)
        assert torch.allclose(values, want, rtol=1e-12, atol=0)
        for b, path in enumerate(paths):
            assert torch.equal(path, softdtw.dtw_path(x[b], y[b], **kw))


def test_dtw_path_fast_path_leaves_non_finite_inputs_to_the_validation():
    """NaN padding is read (the trailing NaN step is padding), Inf raises the validation's error, and a value that
    overflows float64 raises dtw_path's error, as without the fast path."""
    rng = np.random.default_rng(14)
    x, y = torch.tensor(rng.normal(size=(6, 1))), torch.tensor(rng.normal(size=(30, 1)))
    padded = torch.cat([x, torch.full((2, 1), math.nan, dtype=F64)])
    assert torch.equal(softdtw.dtw_path(padded, y, open_end=True), softdtw.dtw_path(x, y, open_end=True))
    with pytest.raises(ValueError, match="x"):
        softdtw.dtw_path(torch.cat([x, torch.full((1, 1), math.inf, dtype=F64)]), y)
    with pytest.raises(ValueError, match="no warping path of finite cost"):
        softdtw.dtw_path(x * 1e200, y)


def test_search_one_query_fast_path_shapes_and_float_k():
    """One query runs the DP and the pick in one call: the same matches as the batched loop (progress=True takes
    it), shapes `(k,)` / `(1, k)`, an integral float k accepted, float32 values for float32 inputs."""
    rng = np.random.default_rng(15)
    q, s = torch.tensor(rng.normal(size=(7, 1))), torch.tensor(rng.normal(size=(400, 1)))
    one = search.dtw_search(q, s, k=3.0)
    loop = search.dtw_search(q[None], s, k=3, progress=True)
    assert one.start.shape == (3,) and loop.start.shape == (1, 3)
    for a, b in zip(one, search.dtw_search(q[None], s, k=3)):
        assert torch.equal(a, b[0])
    for a, b in zip(one, loop):
        assert torch.equal(a, b[0])
    f32 = search.dtw_search(q.float(), s.float(), k=3)
    assert f32.value.dtype == torch.float32 and torch.equal(f32.end, search.dtw_search(q.float().double(),
                                                                                       s.float().double(), k=3).end)
    soft = search.dtw_search(q, s, k=2, gamma=0.5)
    soft_loop = search.dtw_search(q[None], s, k=2, gamma=0.5, progress=True)
    for a, b in zip(soft, soft_loop):
        assert torch.equal(a, b[0])


@pytest.mark.parametrize("case", ["1d", "2d", "grad", "f32_query", "soft", "l1_excl"])
def test_search_cpu_one_query_fast_path_equals_the_general_route(case):
    """search._search_cpu_one (tensors, one query, few torch calls) against the general route (the same data as
    NumPy arrays, which it does not take): the same starts, ends, values and dtypes."""
    rng = np.random.default_rng(16)
    q, s = rng.normal(size=(6, 2)), rng.normal(size=(300, 2))
    kw = dict(k=4)
    if case == "1d":
        q, s = q[:, 0], s[:, 0]
    tq, ts = torch.tensor(q), torch.tensor(s)
    if case == "grad":
        tq.requires_grad_(True)
    if case == "f32_query":
        tq = tq.float()
    if case == "soft":
        kw.update(gamma=0.7)
    if case == "l1_excl":
        kw.update(cost="l1", exclusion=0)
    assert search._search_cpu_one(tq, ts, kw["k"], kw.get("gamma", 0.0), kw.get("exclusion"),
                                  kw.get("cost", "sqeuclidean")) is not None
    fast = search.dtw_search(tq, ts, **kw)
    slow = search.dtw_search(tq.detach().numpy(), s, **kw)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == (4,) and torch.equal(a, b)


@pytest.mark.parametrize("n, L", [(1, 1), (1, 7), (5, 1), (3, 3), (40, 1030)])
def test_dtw_path_fast_path_edge_sizes(n, L):
    """One row (no predecessor bytes), one column, and 40 rows over two chunks of 16 x 64 columns: the fast route's
    path and value are the reference backend's for every pair of open ends."""
    rng = np.random.default_rng(n * 1000 + L)
    x = torch.tensor(rng.integers(0, 3, size=(n, 2)).astype(np.float64))
    y = torch.tensor(rng.integers(0, 3, size=(L, 2)).astype(np.float64))
    for open_begin in (False, True):
        for open_end in (False, True):
            kw = dict(open_begin=open_begin, open_end=open_end, return_value=True)
            path, value = softdtw.dtw_path(x, y, **kw)
            ref_path, ref_value = softdtw.dtw_path(x, y, backend="reference", **kw)
            assert torch.equal(path, ref_path) and float(value) == float(ref_value)


def test_non_finite_inputs_and_bad_k_are_errors():
    """NaN or Inf in the query or the series is an error naming where (it once read a NaN step as a forbidden cell
    and a NaN query as 'no match'), on the one-call route and the batched one; k must be an integer."""
    q = torch.tensor([[1.0], [2.0], [1.0]])
    s = torch.zeros(20, 1)
    s[12, 0] = float("nan")
    with pytest.raises(ValueError, match=r"series contains NaN values \(first at index \(12, 0\)\)"):
        softdtw.dtw_search(q, s, k=2)
    with pytest.raises(ValueError, match="series contains NaN"):
        softdtw.dtw_search(torch.stack([q, q]), s, k=2)
    with pytest.raises(ValueError, match="query contains NaN"):
        softdtw.dtw_search(torch.full((3, 1), float("nan")), torch.zeros(20, 1))
    with pytest.raises(ValueError, match="series contains Inf"):
        softdtw.dtw_search(q, torch.full((20, 1), float("inf")))
    s[3, 0] = float("-inf")  # the message names the first non-finite value and its kind
    with pytest.raises(ValueError, match=r"series contains Inf values \(first at index \(3, 0\)\)"):
        softdtw.dtw_search(q, s, k=2)
    for k in (None, True, 0, 1.5):
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            softdtw.dtw_search(q, torch.zeros(20, 1), k=k)
