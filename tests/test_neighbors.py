"""SoftDTWKNeighborsClassifier: the scikit-learn API on top of pairwise_soft_dtw."""
import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import train_test_split

from softdtw.datasets import make_cbf
from softdtw.neighbors import SoftDTWKNeighborsClassifier
from softdtw.pairwise import pairwise_soft_dtw


@pytest.fixture(scope="module")
def cbf():
    X, y = make_cbf(90, length=64, seed=0)
    return train_test_split(X, y, test_size=0.5, random_state=0, stratify=y.numpy())


@pytest.mark.parametrize("kw", [dict(gamma=1.0), dict(gamma=0.0), dict(gamma=1.0, divergence=False)])
def test_accuracy_on_cbf(cbf, kw):
    X_tr, X_te, y_tr, y_te = cbf
    clf = SoftDTWKNeighborsClassifier(progress=False, **kw).fit(X_tr, y_tr)
    assert clf.score(X_te, y_te) >= 0.9
    pred = clf.predict(X_te)
    assert isinstance(pred, np.ndarray) and pred.shape == tuple(y_te.shape) and pred.dtype == np.int64


def test_euclidean_baseline_and_its_length_check(cbf):
    X_tr, X_te, y_tr, y_te = cbf
    clf = SoftDTWKNeighborsClassifier(metric="euclidean").fit(X_tr, y_tr)
    assert 0.5 < clf.score(X_te, y_te) <= 1.0
    with pytest.raises(ValueError, match="metric='euclidean' compares series step by step"):
        clf.predict(X_te[:, :40])


def test_one_nn_is_the_argmin_of_the_pairwise_matrix(cbf):
    X_tr, X_te, y_tr, _ = cbf
    clf = SoftDTWKNeighborsClassifier(gamma=0.5, progress=False).fit(X_tr, y_tr)
    K = pairwise_soft_dtw(X_te, X_tr, 0.5, divergence=True)
    np.testing.assert_array_equal(clf.predict(X_te), y_tr[K.argmin(1)].numpy())
    d, ind = clf.kneighbors(X_te, n_neighbors=np.int64(3))
    assert ind.shape == (len(X_te), 3) and ind.dtype == np.int64 and (d[:, 1:] >= d[:, :-1]).all()
    np.testing.assert_allclose(d[:, 0], K.min(1).values.numpy())
    assert np.array_equal(clf.kneighbors(X_te, 2, return_distance=False), ind[:, :2])


def test_k_neighbors_votes_and_probabilities(cbf):
    X_tr, X_te, y_tr, y_te = cbf
    clf = SoftDTWKNeighborsClassifier(n_neighbors=5, progress=False).fit(X_tr, y_tr)
    proba = clf.predict_proba(X_te)
    assert isinstance(proba, np.ndarray) and proba.shape == (len(X_te), 3)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert np.array_equal(proba.argmax(1), clf.predict(X_te))  # no vote ties among these
    assert clf.score(X_te, y_te) >= 0.85


def test_string_labels_and_numpy_inputs(cbf):
    X_tr, X_te, y_tr, _ = cbf
    names = np.array(["cyl", "bell", "funnel"])[y_tr.numpy()]
    clf = SoftDTWKNeighborsClassifier(gamma=0.0).fit(X_tr.numpy(), list(names))
    pred = clf.predict(X_te.numpy())
    assert isinstance(pred, np.ndarray) and set(pred) <= {"cyl", "bell", "funnel"}
    assert list(clf.classes_) == ["bell", "cyl", "funnel"]


def test_padding_with_lengths_changes_nothing(cbf):
    X_tr, X_te, y_tr, _ = cbf
    X_tr, X_te = X_tr[:, :50], X_te[:, :50]
    pad = lambda X: torch.cat([X, torch.full((len(X), 14, 1), 99.0)], 1)  # noqa: E731
    nanpad = lambda X: torch.cat([X, torch.full((len(X), 14, 1), float("nan"))], 1)  # noqa: E731
    ref = SoftDTWKNeighborsClassifier(gamma=0.1).fit(X_tr, y_tr).kneighbors(X_te, 2)
    clf = SoftDTWKNeighborsClassifier(gamma=0.1).fit(pad(X_tr), y_tr, x_lengths=torch.full((len(X_tr),), 50))
    got = clf.kneighbors(pad(X_te), 2, x_lengths=torch.full((len(X_te),), 50))
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    assert np.array_equal(got[1], ref[1])
    # NaN padding (tslearn's to_time_series_dataset layout) gives the same neighbours, without lengths.
    clf = SoftDTWKNeighborsClassifier(gamma=0.1).fit(nanpad(X_tr).numpy(), y_tr.numpy())
    got = clf.kneighbors(nanpad(X_te).numpy(), 2)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    assert np.array_equal(got[1], ref[1])


def test_sklearn_params():
    clf = SoftDTWKNeighborsClassifier(n_neighbors=3, gamma=0.1)
    assert clf.get_params()["n_neighbors"] == 3 and clf.get_params()["gamma"] == 0.1
    assert clf.set_params(gamma=2.0) is clf and clf.gamma == 2.0
    assert "gamma=2.0" in repr(clf)
    with pytest.raises(ValueError, match="Invalid parameter 'gama'"):
        clf.set_params(gama=1)


def test_gamma_auto_and_numpy_integer_k(cbf):
    from softdtw import gamma_heuristic
    X_tr, X_te, y_tr, y_te = cbf
    clf = SoftDTWKNeighborsClassifier(n_neighbors=np.int64(3), gamma="auto", progress=False).fit(X_tr, y_tr)
    assert clf.gamma_ == pytest.approx(gamma_heuristic(X_tr))
    assert clf.score(X_te, y_te) >= 0.9


def test_errors(cbf):
    X_tr, X_te, y_tr, _ = cbf
    with pytest.raises(NotFittedError, match="not fitted yet"):
        SoftDTWKNeighborsClassifier().predict(X_te)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        SoftDTWKNeighborsClassifier().fit(X_tr, y_tr[:-1])
    with pytest.raises(ValueError, match="n_neighbors must be an integer >= 1"):
        SoftDTWKNeighborsClassifier(n_neighbors=0).fit(X_tr, y_tr)
    with pytest.raises(ValueError, match="metric must be one of"):
        SoftDTWKNeighborsClassifier(metric="dtw").fit(X_tr, y_tr)
    with pytest.raises(ValueError, match="Unknown label type"):
        SoftDTWKNeighborsClassifier().fit(X_tr, np.linspace(0, 1, len(X_tr)))
    clf = SoftDTWKNeighborsClassifier().fit(X_tr, y_tr)
    with pytest.raises(ValueError, match=r"n_neighbors must be an integer in \[1, 45\]"):
        clf.kneighbors(X_te, n_neighbors=100)
    with pytest.raises(ValueError, match="X has 2 features, but SoftDTWKNeighborsClassifier is expecting 1"):
        clf.predict(torch.randn(2, 10, 2))
    bad = X_te[:3].numpy().copy()
    bad[1, 5, 0] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN values inside series 1 \(step 5"):
        clf.predict(bad)
    bad[1, 5, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        clf.predict(bad)
