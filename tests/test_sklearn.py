"""scikit-learn conformance of SoftDTWKMeans and SoftDTWKNeighborsClassifier (estimator checks, Pipeline,
cross_val_score, GridSearchCV, input layouts), and the tslearn -> softdtw mapping of the README, checked
numerically against tslearn."""
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import check_is_fitted

import softdtw
from softdtw import SoftDTWKMeans, SoftDTWKNeighborsClassifier
from softdtw._estimator import EXPECTED_FAILED_CHECKS
from softdtw.datasets import make_cbf


def _fast_estimators():
    return [SoftDTWKMeans(n_clusters=2, max_iter=3, barycenter_max_iter=3),
            SoftDTWKNeighborsClassifier(progress=False)]


# -- scikit-learn's estimator checks -----------------------------------------------------------------

def test_expected_failures_are_few_and_explained():
    for name, checks in EXPECTED_FAILED_CHECKS.items():
        assert len(checks) <= 5, name
        assert all(isinstance(reason, str) and len(reason) > 40 for reason in checks.values())


@parametrize_with_checks(_fast_estimators(),
                         expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS[type(est).__name__])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator", _fast_estimators(), ids=lambda e: type(e).__name__)
def test_expected_failures_fail_for_the_stated_reason_only(estimator):
    """Each expected failure is the variable-length design, nothing else: the 2-D checks' data fits, and
    n_features_in_ is D; what the xfailed checks would test next is tested here by hand."""
    X, y = make_blobs(n_samples=120, centers=3, random_state=0)
    X = StandardScaler().fit_transform(X)
    km = isinstance(estimator, SoftDTWKMeans)
    est = clone(estimator).set_params(**({"n_clusters": 3, "random_state": 0} if km else {}))
    est.fit(X, y)
    assert est.n_features_in_ == 1  # (120, 2) is 120 univariate series of 2 steps
    Xt = X.T.copy()  # 2 series of 120 steps: valid input, where check_classifiers_train expects an error
    if isinstance(est, SoftDTWKNeighborsClassifier):
        pred = est.predict(X)
        assert (pred == y).mean() > 0.83  # the training-set score of check_classifiers_train
        proba = est.predict_proba(X)
        np.testing.assert_allclose(proba.sum(1), 1.0)
        np.testing.assert_array_equal(proba.argmax(1), pred)
        assert est.predict(Xt).shape == (2,) and est.predict_proba(Xt).shape == (2, 3)
        for Xv in (X.astype(np.float32), X.tolist()):
            np.testing.assert_array_equal(clone(est).fit(Xv, y).predict(X), pred)
    else:
        T = est.transform(X)
        assert T.shape == (120, 3)
        np.testing.assert_allclose(clone(est).fit_transform(X), T, rtol=1e-6, atol=1e-8)  # the general check
        ro = X.copy()
        ro.setflags(write=False)
        np.testing.assert_allclose(clone(est).fit(ro).transform(ro), T, rtol=1e-6, atol=1e-8)
        assert est.transform(X[:, :-1]).shape == (120, 3) and est.transform(Xt).shape == (2, 3)
    with pytest.raises(ValueError, match=f"X has 2 features, but {type(est).__name__} is expecting 1"):
        est.predict(np.zeros((3, 4, 2)))


# -- meta-estimators --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cbf2d():
    X, y = make_cbf(60, length=40, seed=0)
    return X[..., 0].numpy().astype(np.float64), np.array(["cylinder", "bell", "funnel"])[y.numpy()]


def _znorm(X):
    X = np.asarray(X, dtype=float)
    return (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)


def test_pipeline_with_transformers(cbf2d):
    X, y = cbf2d
    # z-normalising each series keeps the shapes; StandardScaler scales each time step across the series,
    # which blurs the CBF shapes (the pipeline still runs end to end, and beats chance).
    for first, floor in ((FunctionTransformer(_znorm), 0.8), (StandardScaler(), 0.4)):
        pipe = make_pipeline(first, SoftDTWKNeighborsClassifier(gamma=0.1, progress=False))
        pipe.fit(X[::2], y[::2])
        assert pipe.score(X[1::2], y[1::2]) > floor
        assert pipe.predict(X[1::2]).dtype.kind == "U"
        check_is_fitted(pipe)
    km = make_pipeline(FunctionTransformer(_znorm), SoftDTWKMeans(3, random_state=0, max_iter=3,
                                                                  barycenter_max_iter=3))
    labels = km.fit_predict(X)
    assert labels.shape == (60,) and adjusted_rand_score(y, labels) > 0.3
    assert km.transform(X[:4]).shape == (4, 3)


def test_cross_val_score(cbf2d):
    X, y = cbf2d
    scores = cross_val_score(SoftDTWKNeighborsClassifier(gamma=0.1, progress=False), X, y, cv=3,
                             error_score="raise")
    assert scores.shape == (3,) and scores.min() > 0.8
    inertia = cross_val_score(SoftDTWKMeans(3, random_state=0, max_iter=2, barycenter_max_iter=2), X, cv=2,
                              error_score="raise")
    assert (inertia < 0).all()  # score is minus the inertia, higher is better


def test_grid_search_over_numpy_integers(cbf2d):
    X, y = cbf2d
    grid = GridSearchCV(SoftDTWKNeighborsClassifier(gamma=0.1, progress=False),
                        {"n_neighbors": np.arange(1, 4)}, cv=3, error_score="raise")
    grid.fit(X, y)
    assert len(grid.cv_results_["params"]) == 3 and np.isfinite(grid.cv_results_["mean_test_score"]).all()
    assert isinstance(grid.best_params_["n_neighbors"], np.integer) and grid.best_score_ > 0.8
    assert grid.predict(X[:5]).shape == (5,)
    km_grid = GridSearchCV(SoftDTWKMeans(random_state=0, max_iter=2, barycenter_max_iter=2),
                           {"n_clusters": np.arange(2, 4), "gamma": [0.5, "auto"]}, cv=2, error_score="raise")
    km_grid.fit(X)
    assert len(km_grid.cv_results_["params"]) == 4


def test_check_is_fitted_and_not_fitted_error(cbf2d):
    X, y = cbf2d
    for est, fit_args in ((SoftDTWKNeighborsClassifier(progress=False), (X, y)),
                          (SoftDTWKMeans(3, max_iter=1, barycenter_max_iter=1), (X,))):
        with pytest.raises(NotFittedError):
            check_is_fitted(est)
        for method in ("predict", "transform", "kneighbors", "predict_proba"):
            if hasattr(est, method):
                with pytest.raises(NotFittedError, match="not fitted yet"):
                    getattr(est, method)(X[:2])
        est.fit(*fit_args)
        check_is_fitted(est)


# -- input layouts and hyperparameters -----------------------------------------------------------------

def test_lists_integers_tensors_and_numpy_outputs(cbf2d):
    X, y = cbf2d
    Xi = np.round(X * 10).astype(np.int64)
    ref = SoftDTWKNeighborsClassifier(progress=False).fit(Xi.astype(np.float64), y)
    for Xv in (Xi, Xi.tolist(), torch.from_numpy(Xi.astype(np.float64)), Xi[:, :, None]):
        clf = SoftDTWKNeighborsClassifier(progress=False).fit(Xv, y)
        assert clf.n_features_in_ == 1
        pred = clf.predict(Xv)
        assert isinstance(pred, np.ndarray)
        np.testing.assert_array_equal(pred, ref.predict(Xi))
        d, ind = clf.kneighbors(Xv[:3] if not isinstance(Xv, list) else Xv[:3], 2)
        assert isinstance(d, np.ndarray) and isinstance(ind, np.ndarray)
    km = SoftDTWKMeans(np.int64(3), max_iter=np.int64(2), barycenter_max_iter=np.int64(2), n_init=np.int64(1),
                       random_state=0).fit(Xi.tolist())
    assert isinstance(km.transform(Xi), np.ndarray) and km.labels_.dtype == np.int64


def test_nan_padded_and_ragged_inputs_match_explicit_lengths():
    tslearn_utils = pytest.importorskip("tslearn.utils")
    rng = np.random.default_rng(0)
    ragged = [rng.normal(size=(n, 2)) for n in (12, 7, 15, 9, 12, 5)]
    y = np.array([0, 1, 0, 1, 0, 1])
    padded = tslearn_utils.to_time_series_dataset(ragged)  # NaN past each length
    lengths = np.array([len(s) for s in ragged])
    zero = np.nan_to_num(padded)
    ref = SoftDTWKNeighborsClassifier(n_neighbors=2, progress=False).fit(zero, y, x_lengths=lengths)
    d_ref, i_ref = ref.kneighbors(zero, x_lengths=lengths)
    for X in (padded, ragged):
        clf = SoftDTWKNeighborsClassifier(n_neighbors=2, progress=False).fit(X, y)
        d, i = clf.kneighbors(X)
        np.testing.assert_allclose(d, d_ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_array_equal(i, i_ref)
    km_ref = SoftDTWKMeans(2, random_state=0, max_iter=2, barycenter_max_iter=2).fit(zero, x_lengths=lengths)
    km = SoftDTWKMeans(2, random_state=0, max_iter=2, barycenter_max_iter=2).fit(padded)
    np.testing.assert_array_equal(km.labels_, km_ref.labels_)
    np.testing.assert_allclose(km.transform(padded), km_ref.transform(zero, x_lengths=lengths), rtol=1e-8)
    with pytest.raises(ValueError, match="NaN-padded .* and x_lengths was given too"):
        SoftDTWKNeighborsClassifier().fit(padded, y, x_lengths=lengths)


def test_random_state_forms(cbf2d):
    X, _ = cbf2d
    fit = lambda rs: SoftDTWKMeans(3, random_state=rs, max_iter=2, barycenter_max_iter=2).fit(X)  # noqa: E731
    a, b = fit(np.random.RandomState(7)), fit(np.random.RandomState(7))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(fit(7).labels_, fit(7).labels_)
    assert fit(None).labels_.shape == (60,)
    with pytest.raises(ValueError, match="cannot be used to seed"):
        fit("seven")


def test_clone_and_pickle(cbf2d):
    X, y = cbf2d
    for est, args in ((SoftDTWKNeighborsClassifier(gamma="auto", progress=False), (X, y)),
                      (SoftDTWKMeans(3, gamma="auto", random_state=0, max_iter=2, barycenter_max_iter=2), (X,))):
        fitted = clone(est).fit(*args)
        again = pickle.loads(pickle.dumps(fitted))
        np.testing.assert_array_equal(again.predict(X[:7]), fitted.predict(X[:7]))
        assert again.gamma_ == fitted.gamma_ and clone(fitted).get_params() == est.get_params()


# -- the tslearn -> softdtw mapping (README, "From tslearn") ---------------------------------------------

tslearn_metrics = pytest.importorskip("tslearn.metrics")


@pytest.fixture(scope="module")
def series():
    rng = np.random.default_rng(1)
    return [rng.normal(size=(n, 2)) for n in (9, 13, 11, 6)]


def test_soft_dtw_and_alignment(series):
    a, b = series[0], series[1]
    for gamma in (0.1, 1.0):
        v = softdtw.soft_dtw(torch.from_numpy(a), torch.from_numpy(b), gamma)
        assert float(v) == pytest.approx(tslearn_metrics.soft_dtw(a, b, gamma=gamma), rel=1e-10)
        A, sim = tslearn_metrics.soft_dtw_alignment(a, b, gamma=gamma)
        E = softdtw.soft_dtw_alignment(torch.from_numpy(a), torch.from_numpy(b), gamma)
        np.testing.assert_allclose(E.numpy(), A, rtol=1e-9, atol=1e-12)
        assert float(v) == pytest.approx(sim, rel=1e-10)


def test_cdist_soft_dtw_and_its_normalized_form(series):
    X = np.stack([s[:6] for s in series])
    for gamma in (0.1, 1.0):
        ours = softdtw.pairwise_soft_dtw(torch.from_numpy(X), gamma=gamma).numpy()
        np.testing.assert_allclose(ours, tslearn_metrics.cdist_soft_dtw(X, gamma=gamma), rtol=1e-9)
        div = softdtw.pairwise_soft_dtw(torch.from_numpy(X), gamma=gamma, divergence=True).numpy()
        np.testing.assert_allclose(div, tslearn_metrics.cdist_soft_dtw_normalized(X, gamma=gamma), rtol=1e-9,
                                   atol=1e-9)


def test_dtw_is_the_square_of_tslearns(series):
    a, b = series[0], series[2]
    ours = float(softdtw.dtw(torch.from_numpy(a), torch.from_numpy(b)))
    assert np.sqrt(ours) == pytest.approx(tslearn_metrics.dtw(a, b), rel=1e-12)
    path, dist = tslearn_metrics.dtw_path(a, b)
    assert softdtw.dtw_path(torch.from_numpy(a), torch.from_numpy(b)).tolist() == [list(p) for p in path]
    assert dist == pytest.approx(np.sqrt(ours), rel=1e-12)
    band = float(softdtw.dtw(torch.from_numpy(a), torch.from_numpy(b), bandwidth=2))
    assert np.sqrt(band) == pytest.approx(tslearn_metrics.dtw(a, b, global_constraint="sakoe_chiba",
                                                              sakoe_chiba_radius=2), rel=1e-12)


def test_softdtw_barycenter():
    tslearn_bary = pytest.importorskip("tslearn.barycenters")
    X, _ = make_cbf(12, length=32, seed=3, dtype=torch.float64)
    X = X[:4]
    theirs = tslearn_bary.softdtw_barycenter(X.numpy(), gamma=1.0, max_iter=50)
    ours = softdtw.soft_dtw_barycenter(X, gamma=1.0, max_iter=50).barycenter

    def objective(z):
        z = torch.as_tensor(z).expand(len(X), -1, -1)
        return float(softdtw.soft_dtw(z, X, 1.0).sum())

    assert ours.shape == theirs.shape == (32, 1)
    # Same objective, both local minima: ours (annealed start) is at least as good.
    assert objective(ours) <= objective(theirs) + 1e-6 * abs(objective(theirs))


def test_time_series_kmeans_softdtw():
    tslearn_clustering = pytest.importorskip("tslearn.clustering")
    X, _ = make_cbf(24, length=24, seed=2, dtype=torch.float64)
    Xn = X.numpy()
    tk = tslearn_clustering.TimeSeriesKMeans(3, metric="softdtw", metric_params={"gamma": 0.5}, max_iter=3,
                                             random_state=0).fit(Xn)
    # TimeSeriesKMeans(metric="softdtw") is SoftDTWKMeans(divergence=False): same assignment and transform
    # for the same centres (max_iter=0 keeps the given init).
    km = SoftDTWKMeans(3, gamma=0.5, divergence=False, init=tk.cluster_centers_, max_iter=0).fit(Xn)
    np.testing.assert_allclose(km.cluster_centers_, tk.cluster_centers_)
    np.testing.assert_allclose(km.transform(Xn), tk.transform(Xn), rtol=1e-9)
    np.testing.assert_array_equal(km.predict(Xn), tk.predict(Xn))


def test_kneighbors_time_series_classifier_softdtw():
    tslearn_neighbors = pytest.importorskip("tslearn.neighbors")
    X, y = make_cbf(30, length=24, seed=4, dtype=torch.float64)
    Xn, yn = X.numpy(), y.numpy()
    tk = tslearn_neighbors.KNeighborsTimeSeriesClassifier(n_neighbors=3, metric="softdtw",
                                                          metric_params={"gamma": 0.01}).fit(Xn[:20], yn[:20])
    ours = SoftDTWKNeighborsClassifier(n_neighbors=3, gamma=0.01, divergence=False,
                                       progress=False).fit(Xn[:20], yn[:20])
    d_t, i_t = tk.kneighbors(Xn[20:])
    d_o, i_o = ours.kneighbors(Xn[20:])
    np.testing.assert_allclose(d_o, d_t, rtol=1e-9)
    np.testing.assert_array_equal(i_o, i_t)
    np.testing.assert_array_equal(ours.predict(Xn[20:]), tk.predict(Xn[20:]))
    # metric="dtw" is gamma=0.0: the same neighbours, tslearn's distances squared.
    tk = tslearn_neighbors.KNeighborsTimeSeriesClassifier(n_neighbors=3, metric="dtw").fit(Xn[:20], yn[:20])
    ours = SoftDTWKNeighborsClassifier(n_neighbors=3, gamma=0.0, progress=False).fit(Xn[:20], yn[:20])
    d_t, i_t = tk.kneighbors(Xn[20:])
    d_o, i_o = ours.kneighbors(Xn[20:])
    np.testing.assert_allclose(np.sqrt(d_o), d_t, rtol=1e-9)
    np.testing.assert_array_equal(i_o, i_t)


def test_gamma_heuristic_against_gamma_soft_dtw():
    # On z-normalised series tslearn's gamma (GAK's bandwidth rule) is far above the cost of a good alignment,
    # and soft-DTW is then dominated by the entropy of the paths; ours keeps it within s ln 3 of DTW.
    t = np.linspace(0, 1, 100)
    X = np.stack([np.sin(2 * np.pi * (t + 0.05 * k) ** (1 + 0.1 * k)) for k in range(6)])
    X = ((X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True))[..., None]
    theirs = tslearn_metrics.gamma_soft_dtw(X, random_state=0)
    steps = X.reshape(-1, 1)[np.random.RandomState(0).choice(600, size=100, replace=False)]
    median = np.median(np.abs(steps - steps.T)[np.triu_indices(100, 1)])
    assert theirs == pytest.approx(2 * 100 * median ** 2)  # the README's formula for it
    ours = softdtw.gamma_heuristic(X)
    Xt = torch.from_numpy(X)
    d = softdtw.dtw(Xt[:1], Xt[1:2])
    assert float(softdtw.soft_dtw(Xt[:1], Xt[1:2], theirs)) < -10 * float(d)
    assert theirs > 100 * ours


def test_to_time_series_dataset_padding(series):
    tslearn_utils = pytest.importorskip("tslearn.utils")
    padded = tslearn_utils.to_time_series_dataset(series)
    assert np.isnan(padded).any()
    X = torch.from_numpy(padded)
    ours = softdtw.pairwise_soft_dtw(X, gamma=0.5).numpy()
    np.testing.assert_allclose(ours, tslearn_metrics.cdist_soft_dtw(series, gamma=0.5), rtol=1e-9)
    v = softdtw.soft_dtw(X[:2], X[2:], 0.5).numpy()
    np.testing.assert_allclose(v, [tslearn_metrics.soft_dtw(series[0], series[2], 0.5),
                                   tslearn_metrics.soft_dtw(series[1], series[3], 0.5)], rtol=1e-10)
    bary = softdtw.soft_dtw_barycenter(X, gamma=1.0, max_iter=5)
    lengths = torch.tensor([len(s) for s in series])
    ref = softdtw.soft_dtw_barycenter(torch.nan_to_num(X), gamma=1.0, max_iter=5, x_lengths=lengths)
    torch.testing.assert_close(bary.barycenter, ref.barycenter)


def test_half_precision_tensors_and_object_arrays_of_series():
    """bfloat16 / float16 tensors (NumPy has no bfloat16) are read in float32; a NumPy object array of series of
    different lengths is read like a list of them."""
    rng = np.random.RandomState(0)
    X = torch.tensor(rng.randn(6, 5), dtype=torch.float32)
    labels = [0, 1, 0, 1, 0, 1]
    want = SoftDTWKNeighborsClassifier(n_neighbors=1).fit(X.bfloat16().float(), labels).predict(X)
    for dtype in (torch.bfloat16, torch.float16):
        got = SoftDTWKNeighborsClassifier(n_neighbors=1).fit(X.to(dtype), labels).predict(X)
        assert (got == want).all()
    series = [rng.randn(n) for n in (5, 7, 6, 5)]
    objs = np.empty(4, dtype=object)
    objs[:] = series
    clf = SoftDTWKNeighborsClassifier(n_neighbors=1).fit(objs, [0, 1, 0, 1])
    assert (clf.predict(objs) == clf.predict(series)).all()
    assert SoftDTWKMeans(2, max_iter=2, random_state=0).fit(objs).cluster_centers_.shape[0] == 2
