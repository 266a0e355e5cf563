"""soft-DTW k-means: reproducible, inertia non-increasing, the scikit-learn API, NaN padding, errors."""
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
    torch.testing.assert_close(ref.centers, got.centers)
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


@pytest.mark.parametrize("kw, match", [
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
