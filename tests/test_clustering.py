"""soft-DTW k-means: reproducible, inertia non-increasing, the scikit-learn API, NaN padding, centre
lengths, errors."""
import math

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score

from softdtw.clustering import KMeansResult, SoftDTWKMeans, soft_dtw_kmeans
from softdtw.datasets import make_cbf
from softdtw.pairwise import pairwise_soft_dtw


@pytest.fixture(scope="module")
def cbf():
    return make_cbf(45, length=48, seed=0)


def test_reproducible_with_a_seed(cbf):
    X, _ = cbf
    a = soft_dtw_kmeans(X, 3, 1.0, random_state=5, max_iter=4, barycenter_max_iter=5)
    b = soft_dtw_kmeans(X, 3, 1.0, random_state=5, max_iter=4, barycenter_max_iter=5)
    assert isinstance(a, KMeansResult)
    assert torch.equal(a.labels, b.labels) and torch.equal(a.centers, b.centers) and a.inertia == b.inertia


@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_inertia_is_non_increasing(cbf, init):
    X, _ = cbf
    res = soft_dtw_kmeans(X, 4, 1.0, init=init, random_state=1, max_iter=6, barycenter_max_iter=5, tol=0)
    losses = res.losses
    assert losses.shape == (res.n_iter + 1,)
    assert (losses[1:] <= losses[:-1] + 1e-5 * losses[:-1].abs()).all(), losses
    assert (losses >= 0).all()  # divergence: a sum of non-negative terms
    assert res.inertia == pytest.approx(float(losses[-1]))


def test_labels_inertia_and_centers_agree(cbf):
    X, _ = cbf
    res = soft_dtw_kmeans(X, 3, 1.0, random_state=0, max_iter=5, barycenter_max_iter=5)
    D = pairwise_soft_dtw(X, res.centers, 1.0, divergence=True)
    assert torch.equal(res.labels, D.argmin(1))
    assert res.inertia == pytest.approx(float(D.min(1).values.sum()), rel=1e-5)
    assert res.centers.shape == (3, 48, 1)


def test_recovers_the_cbf_classes(cbf):
    X, y = cbf
    km = SoftDTWKMeans(3, gamma=1.0, random_state=0, max_iter=10, barycenter_max_iter=10).fit(X)
    assert adjusted_rand_score(y.numpy(), km.labels_) > 0.5


def test_raw_soft_dtw_variant(cbf):
    X, _ = cbf
    res = soft_dtw_kmeans(X, 3, 1.0, divergence=False, random_state=0, max_iter=5, barycenter_max_iter=5, tol=0)
    assert (res.losses[1:] <= res.losses[:-1] + 1e-5 * res.losses[:-1].abs()).all()
    D = pairwise_soft_dtw(X, res.centers, 1.0)
    assert torch.equal(res.labels, D.argmin(1))


def test_n_init_keeps_the_best_run(cbf):
    X, _ = cbf
    runs = [soft_dtw_kmeans(X, 3, 1.0, random_state=torch.Generator().manual_seed(9), max_iter=3,
                            barycenter_max_iter=3, n_init=n) for n in (1, 3)]
    assert runs[1].inertia <= runs[0].inertia + 1e-6


def test_unequal_lengths_and_init_tensor(cbf):
    X, _ = cbf
    lengths = torch.randint(30, 49, (45,), generator=torch.Generator().manual_seed(0))
    Xp = X.clone()
    for p, n in enumerate(lengths):
        Xp[p, n:] = 50.0  # padding must not matter
    init = X[:3, :40].clone()
    res = soft_dtw_kmeans(Xp, 3, 1.0, x_lengths=lengths, init=init, max_iter=3, barycenter_max_iter=3)
    assert res.centers.shape == (3, 40, 1) and res.centers.abs().max() < 20
    assert torch.equal(init, X[:3, :40])


def test_estimator_api(cbf):
    X, _ = cbf
    km = SoftDTWKMeans(3, random_state=0, max_iter=3, barycenter_max_iter=3)
    labels = km.fit_predict(X)
    assert isinstance(labels, np.ndarray) and labels.dtype == np.int64
    assert np.array_equal(labels, km.labels_)
    assert isinstance(km.cluster_centers_, np.ndarray) and km.cluster_centers_.shape == (3, 48, 1)
    assert isinstance(km.inertia_, float) and isinstance(km.n_iter_, int) and isinstance(km.converged_, bool)
    assert km.n_features_in_ == 1 and km.gamma_ == 1.0
    T = km.transform(X[:5])
    assert isinstance(T, np.ndarray) and T.shape == (5, 3)
    assert np.array_equal(km.predict(X[:5]), T.argmin(1))
    assert np.array_equal(km.predict(X), km.labels_)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-5)
    assert km.get_params()["n_clusters"] == 3
    assert "n_clusters=3" in repr(km)


def test_estimator_matches_the_function(cbf):
    X, _ = cbf
    # The estimator draws its torch seed from check_random_state(random_state), as scikit-learn does.
    seed = int(np.random.RandomState(5).randint(np.iinfo(np.int32).max))
    km = SoftDTWKMeans(3, random_state=np.random.RandomState(5), max_iter=3, barycenter_max_iter=3).fit(X.numpy())
    res = soft_dtw_kmeans(X, 3, 1.0, random_state=seed, max_iter=3, barycenter_max_iter=3)
    np.testing.assert_array_equal(km.labels_, res.labels.numpy())
    np.testing.assert_allclose(km.cluster_centers_, res.centers.numpy(), rtol=1e-6)
    assert km.inertia_ == pytest.approx(res.inertia, rel=1e-6)


def test_numpy_random_state_in_the_function(cbf):
    X, _ = cbf
    a = soft_dtw_kmeans(X, 3, 1.0, random_state=np.random.RandomState(3), max_iter=2, barycenter_max_iter=2)
    b = soft_dtw_kmeans(X, 3, 1.0, random_state=np.random.RandomState(3), max_iter=2, barycenter_max_iter=2)
    c = soft_dtw_kmeans(X, 3, 1.0, random_state=np.random.default_rng(3), max_iter=2, barycenter_max_iter=2)
    assert torch.equal(a.labels, b.labels) and c.labels.shape == (45,)


def test_nan_padded_set_equals_explicit_lengths(cbf):
    X, _ = cbf
    lengths = torch.randint(30, 49, (45,), generator=torch.Generator().manual_seed(1))
    Xpad, Xnan = X.clone(), X.clone()
    for p, n in enumerate(lengths):
        Xpad[p, n:] = 0.0
        Xnan[p, n:] = float("nan")
    ref = soft_dtw_kmeans(Xpad, 3, 1.0, x_lengths=lengths, random_state=0, max_iter=2, barycenter_max_iter=2)
    got = soft_dtw_kmeans(Xnan, 3, 1.0, random_state=0, max_iter=2, barycenter_max_iter=2)
    assert torch.equal(ref.labels, got.labels)
    torch.testing.assert_close(ref.centers, got.centers, equal_nan=True)  # centres NaN-padded to their lengths
    km_ref = SoftDTWKMeans(3, random_state=0, max_iter=2, barycenter_max_iter=2).fit(Xpad, x_lengths=lengths)
    km = SoftDTWKMeans(3, random_state=0, max_iter=2, barycenter_max_iter=2).fit(Xnan.numpy())
    np.testing.assert_array_equal(km.labels_, km_ref.labels_)
    np.testing.assert_allclose(km.transform(Xnan[:6].numpy()), km_ref.transform(Xpad[:6], x_lengths=lengths[:6]),
                               rtol=1e-5, atol=1e-5)
    assert torch.isnan(Xnan).any()  # the caller's array is untouched


def test_gamma_auto(cbf):
    from softdtw import gamma_heuristic
    X, y = cbf
    km = SoftDTWKMeans(3, gamma="auto", random_state=0, max_iter=5, barycenter_max_iter=5).fit(X)
    assert km.gamma_ == pytest.approx(gamma_heuristic(X))
    assert adjusted_rand_score(y.numpy(), km.labels_) > 0.5
    with pytest.raises(ValueError, match="gamma must be a number >= 0 or 'auto'"):
        SoftDTWKMeans(2, gamma="median").fit(X)


def _two_length_groups(seed, n=6):
    """Issue 27's case in small: n short series (40-60 steps, a sine) and n long ones (150-180 steps, a
    triangle), NaN-padded to 180 steps, float64 `(2n, 180, 1)`, and their lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.cat([torch.randint(40, 61, (n,), generator=g), torch.randint(150, 181, (n,), generator=g)])
    X = torch.full((2 * n, 180, 1), float("nan"), dtype=torch.float64)
    for p, m in enumerate(lengths.tolist()):
        t = torch.linspace(0, 1, m, dtype=torch.float64)
        shape = torch.sin(2 * math.pi * t) if p < n else torch.where(t < 0.5, 4 * t - 1, 3 - 4 * t)
        X[p, :m, 0] = shape + 0.1 * torch.randn(m, generator=g, dtype=torch.float64)
    return X, lengths


def _median_half_up(v):
    return int(math.floor(float(np.median(np.asarray(v))) + 0.5))


def test_centers_take_their_clusters_median_length():
    X, lengths = _two_length_groups(0)
    truth = (lengths > 100).long()
    kw = dict(random_state=0, max_iter=5, barycenter_max_iter=10)
    res = soft_dtw_kmeans(X, 2, 1.0, **kw)
    assert adjusted_rand_score(truth.numpy(), res.labels.numpy()) == 1.0
    for k in range(2):
        n = int(res.center_lengths[k])
        assert n == _median_half_up(lengths[res.labels == k])
        assert torch.isfinite(res.centers[k, :n]).all() and torch.isnan(res.centers[k, n:]).all()
    short = int(res.labels[0])
    assert 40 <= int(res.center_lengths[short]) <= 60 and int(res.center_lengths[1 - short]) >= 150
    assert res.centers.shape == (2, int(res.center_lengths.max()), 1)
    # The NaN-padded centres go straight back into pairwise_soft_dtw and give the fit's labels and inertia.
    D = pairwise_soft_dtw(X, res.centers, 1.0, divergence=True)
    assert torch.equal(D.argmin(1), res.labels)
    assert res.inertia == pytest.approx(float(D.min(1).values.sum()), rel=1e-6)
    # Every centre as long as the longest series (the old behaviour, center_length="max"): much worse.
    old = soft_dtw_kmeans(X, 2, 1.0, center_length="max", **kw)
    assert old.center_lengths.tolist() == [int(lengths.max())] * 2
    assert not torch.isnan(old.centers).any()
    assert res.inertia <= old.inertia
    fixed = soft_dtw_kmeans(X, 2, 1.0, center_length=30, **kw)
    assert fixed.center_lengths.tolist() == [30, 30] and fixed.centers.shape == (2, 30, 1)


def test_estimator_with_centers_of_their_clusters_lengths():
    X, lengths = _two_length_groups(0)
    km = SoftDTWKMeans(2, random_state=0, max_iter=5, barycenter_max_iter=10).fit(X.numpy())
    C, n = km.cluster_centers_, km.cluster_center_lengths_
    assert n.dtype == np.int64 and C.shape == (2, n.max(), 1)
    for k in range(2):
        assert n[k] == _median_half_up(lengths.numpy()[km.labels_ == k])
        assert np.isfinite(C[k, :n[k]]).all() and np.isnan(C[k, n[k]:]).all()  # tslearn's padding
    # New variable-length series: NaN padding or explicit lengths, other lengths than the training set.
    Xn, ln = _two_length_groups(1, n=4)
    pred = km.predict(Xn.numpy())
    short = km.labels_[0]
    assert pred.tolist() == [short] * 4 + [1 - short] * 4
    T = km.transform(Xn.numpy())
    assert T.shape == (8, 2) and np.isfinite(T).all() and (T >= -1e-9).all()
    np.testing.assert_allclose(km.transform(torch.nan_to_num(Xn), x_lengths=ln), T, rtol=1e-10, atol=1e-10)
    ref = pairwise_soft_dtw(Xn, torch.as_tensor(C), 1.0, divergence=True).numpy()
    np.testing.assert_allclose(T, ref, rtol=1e-10, atol=1e-10)
    # The fitted, NaN-padded centres as an init keep their lengths.
    again = SoftDTWKMeans(2, init=C, max_iter=1, barycenter_max_iter=2).fit(X.numpy())
    np.testing.assert_array_equal(again.cluster_center_lengths_, n)
    km_max = SoftDTWKMeans(2, random_state=0, max_iter=5, barycenter_max_iter=10, center_length="max").fit(X.numpy())
    assert km_max.cluster_centers_.shape == (2, int(lengths.max()), 1) and km.inertia_ <= km_max.inertia_


def test_equal_lengths_median_is_the_full_length(cbf):
    X, _ = cbf
    kw = dict(random_state=2, max_iter=3, barycenter_max_iter=3)
    a = soft_dtw_kmeans(X, 3, 1.0, **kw)
    b = soft_dtw_kmeans(X, 3, 1.0, center_length="max", **kw)
    assert a.center_lengths.tolist() == [48] * 3
    assert torch.equal(a.centers, b.centers) and torch.equal(a.labels, b.labels) and a.inertia == b.inertia


@pytest.mark.parametrize("kw, match", [
    (dict(n_clusters=2, center_length="mean"), "center_length must be 'median', 'max', an int >= 1"),
    (dict(n_clusters=2, center_length=0), "center_length must be 'median', 'max', an int >= 1"),
    (dict(n_clusters=0), "n_clusters must be an integer >= 1"),
    (dict(n_clusters=100), "n_clusters=100 is larger than the number of series P=45"),
    (dict(n_clusters=2, init="kmeans"), "init must be one of"),
    (dict(n_clusters=2, init=torch.zeros(3, 10, 1)), r"init as a tensor must have shape \(2, L, 1\)"),
    (dict(n_clusters=2, init=torch.zeros(2, 10, 1), n_init=2), "n_init=2 with an explicit init tensor"),
    (dict(n_clusters=2, random_state="seed"), "random_state must be an int, a torch.Generator, a numpy"),
    (dict(n_clusters=2, max_iter=-1), "max_iter must be an integer >= 0"),
])
def test_errors(cbf, kw, match):
    X, _ = cbf
    with pytest.raises(ValueError, match=match):
        soft_dtw_kmeans(X, **kw)


def test_unfitted_estimator(cbf):
    X, _ = cbf
    with pytest.raises(NotFittedError, match="not fitted yet"):
        SoftDTWKMeans(2).predict(X)


@pytest.mark.cuda
def test_cuda_kmeans_matches_cpu_labels():
    X, y = make_cbf(60, length=64, seed=1)
    cpu = soft_dtw_kmeans(X, 3, 1.0, random_state=0, max_iter=5, barycenter_max_iter=5)
    gpu = soft_dtw_kmeans(X.cuda(), 3, 1.0, random_state=0, max_iter=5, barycenter_max_iter=5)
    assert gpu.centers.device.type == "cuda"
    assert (gpu.losses[1:] <= gpu.losses[:-1] * (1 + 1e-4)).all()
    assert adjusted_rand_score(cpu.labels.numpy(), gpu.labels.cpu().numpy()) > 0.9


@pytest.mark.cuda
def test_cuda_estimator_keeps_a_tensor_on_its_device():
    X, _ = make_cbf(30, length=32, seed=1)
    km = SoftDTWKMeans(3, random_state=0, max_iter=2, barycenter_max_iter=2).fit(X.cuda())
    assert isinstance(km.labels_, np.ndarray) and km.predict(X.cuda()).shape == (30,)


def test_init_padded_past_its_longest_centre():
    """An init NaN-padded to the data's width, every centre shorter (tslearn's to_time_series_dataset pads to the
    longest series): the centres start from their own steps (it crashed mixing the two widths)."""
    X = torch.tensor(np.random.RandomState(0).randn(10, 12, 1))
    init = torch.full((2, 12, 1), float("nan"), dtype=torch.float64)
    init[0, :8], init[1, :5] = X[0, :8], X[1, :5]
    res = soft_dtw_kmeans(X, 2, 0.1, init=init, max_iter=3)
    assert res.center_lengths.tolist() == [8, 5]
    assert torch.isfinite(res.centers[0, :8]).all() and torch.isfinite(res.centers[1, :5]).all()
    assert torch.isnan(res.centers[1, 5:]).all()
    km = SoftDTWKMeans(2, gamma=0.1, init=init.numpy(), max_iter=3).fit(X.numpy())
    assert km.cluster_center_lengths_.tolist() == [8, 5]
