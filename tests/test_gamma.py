"""softdtw.gamma_heuristic: its definition, the soft-DTW-to-DTW bound it gives, seeding, and errors."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from softdtw import dtw, gamma_heuristic, soft_dtw
from softdtw.datasets import make_cbf


def test_definition_on_all_pairs():
    X, _ = make_cbf(6, length=20, seed=0, dtype=torch.float64)
    i, j = torch.triu_indices(6, 6, 1)
    per_step = (dtw(X[i], X[j]) / 40).numpy()
    assert gamma_heuristic(X) == pytest.approx(0.1 * np.median(per_step), rel=1e-12)  # 15 pairs < n_pairs
    assert gamma_heuristic(X, scale=1.0, quantile=0.25) == pytest.approx(np.quantile(per_step, 0.25), rel=1e-12)
    Y = X[:2, :15]
    cross = (dtw(X.repeat_interleave(2, 0), Y.repeat(6, 1, 1)) / 35).numpy()
    assert gamma_heuristic(X, Y) == pytest.approx(0.1 * np.median(cross), rel=1e-12)


def test_seeded_sampling():
    X, _ = make_cbf(40, length=16, seed=1)
    a = gamma_heuristic(X, n_pairs=10)
    assert a == gamma_heuristic(X, n_pairs=10) == gamma_heuristic(X, n_pairs=10, random_state=0)
    assert gamma_heuristic(X, n_pairs=10, random_state=np.random.RandomState(0)) == a
    assert gamma_heuristic(X, n_pairs=10, random_state=3) != a


def test_units_of_the_cost():
    X, _ = make_cbf(10, length=16, seed=2, dtype=torch.float64)
    assert gamma_heuristic(3 * X) == pytest.approx(9 * gamma_heuristic(X), rel=1e-10)
    assert gamma_heuristic(X, cost="l1") != gamma_heuristic(X)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 30), st.integers(2, 30), st.integers(1, 3), st.integers(0, 2**31 - 1),
       st.floats(0.01, 1.0))
def test_soft_dtw_stays_within_the_entropy_bound(n, m, d, seed, scale):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(1, n, d, generator=g, dtype=torch.float64), torch.randn(1, m, d, generator=g,
                                                                                dtype=torch.float64)
    gamma = gamma_heuristic(x, y, scale=scale)
    hard, soft = float(dtw(x, y)), float(soft_dtw(x, y, gamma))
    assert gamma == pytest.approx(scale * hard / (n + m), rel=1e-12)
    assert hard - gamma * (n + m - 2) * math.log(3) - 1e-9 <= soft <= hard + 1e-9
    assert soft >= (1 - scale * math.log(3)) * hard - 1e-9  # within 11 % at the default scale 0.1


def test_nan_padding_and_lengths():
    X, _ = make_cbf(8, length=20, seed=3, dtype=torch.float64)
    lengths = torch.tensor([20, 12, 15, 9, 20, 11, 14, 20])
    Xn = X.clone()
    for p, k in enumerate(lengths):
        Xn[p, k:] = float("nan")
    assert gamma_heuristic(Xn) == pytest.approx(gamma_heuristic(X, x_lengths=lengths), rel=1e-12)


def test_no_scale_in_the_data_gives_one():
    x = torch.ones(3, 5, 1)
    assert gamma_heuristic(x) == 1.0
    assert gamma_heuristic(torch.randn(1, 5, 1)) == 1.0  # one series and no Y: only the pair (x, x)


@pytest.mark.parametrize("kw, match", [
    (dict(scale=0), r"scale must be a finite number > 0"),
    (dict(scale=float("inf")), r"scale must be a finite number > 0"),
    (dict(quantile=1.5), r"quantile must be a number in \[0, 1\]"),
    (dict(n_pairs=0), "n_pairs must be an integer >= 1"),
    (dict(y_lengths=[3, 3]), "y_lengths was given but Y is None"),
    (dict(Y=torch.zeros(2, 4, 2)), "same feature size D"),
])
def test_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        gamma_heuristic(torch.randn(4, 6, 1), **kw)
