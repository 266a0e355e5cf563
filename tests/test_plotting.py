"""plotting.py: the barycenter / cluster figure's legend and layout for 1, a few and many features."""
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from softdtw import cli  # noqa: E402
from softdtw.plotting import plot_barycenters, plot_clusters  # noqa: E402


def _data(P=12, T=20, D=1, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((P, T, D))
    labels = np.arange(P) % K
    centers = np.stack([X[labels == k].mean(0) for k in range(K)])
    return X, labels, centers


def _visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _legend_labels(fig):
    assert len(fig.legends) == 1
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_one_feature_one_panel_per_cluster_with_a_legend():
    X, labels, centers = _data(K=5)
    fig = plot_clusters(X, labels, centers)
    axes = _visible(fig)
    assert len(axes) == 5  # 4 per row: 2 rows, 3 hidden slots
    assert [ax.get_title() for ax in axes] == [f"cluster {k} ({n} series)" for k, n in enumerate([3, 3, 2, 2, 2])]
    assert _legend_labels(fig) == ["barycenter (centre)", "member series"]
    lines = axes[0].get_lines()
    assert len(lines) == 3 + 1  # the members, then the centre
    np.testing.assert_allclose(lines[-1].get_ydata(), centers[0, :, 0])
    assert lines[-1].get_linewidth() > lines[0].get_linewidth()


def test_a_few_features_one_row_per_cluster_one_panel_per_feature():
    X, labels, centers = _data(D=3, K=2)
    fig = plot_clusters(X, labels, centers, max_members=4)
    axes = _visible(fig)
    assert len(axes) == 2 * 3
    assert [ax.get_title() for ax in axes[:3]] == ["feature 0", "feature 1", "feature 2"]
    assert axes[0].get_ylabel().startswith("cluster 0") and axes[3].get_ylabel().startswith("cluster 1")
    np.testing.assert_allclose(axes[5].get_lines()[-1].get_ydata(), centers[1, :, 2])
    assert len(axes[5].get_lines()) == 4 + 1  # max_members members of 6, then the centre
    assert _legend_labels(fig) == ["barycenter (centre)", "member series (first 4 per group)"]


def test_many_features_heatmap_summary_with_colorbar_and_note():
    X, labels, centers = _data(D=12, K=3)
    fig = plot_clusters(X, labels, centers)
    heatmaps = [ax for ax in _visible(fig) if ax.get_images()]
    assert len(heatmaps) == 3 and all(not ax.get_lines() for ax in heatmaps)
    np.testing.assert_allclose(heatmaps[1].get_images()[0].get_array(), centers[1].T)
    colorbars = [ax for ax in _visible(fig) if ax.get_ylabel() == "barycenter value"]
    assert len(colorbars) == 1
    assert fig.get_supxlabel().startswith("12 features: each barycenter as a heatmap")
    assert "features=[...]" in fig.get_supxlabel() and not fig.legends


def test_chosen_features_of_many_get_panels():
    X, labels, centers = _data(D=12, K=3)
    fig = plot_barycenters(X, labels, centers, features=[0, 5])
    axes = _visible(fig)
    assert len(axes) == 3 * 2 and [ax.get_title() for ax in axes[:2]] == ["feature 0", "feature 5"]
    np.testing.assert_allclose(axes[1].get_lines()[-1].get_ydata(), centers[0, :, 5])
    fig = plot_barycenters(X, labels, centers, features=[7])  # one feature: one panel per group
    assert len(_visible(fig)) == 3 and _visible(fig)[0].get_ylabel() == "feature 7"


def test_members_are_drawn_to_their_lengths():
    X, labels, centers = _data(D=2, K=2)
    lengths = np.full(len(X), 20)
    lengths[0] = 7
    fig = plot_barycenters(X, labels, centers, x_lengths=lengths)
    assert len(_visible(fig)[0].get_lines()[0].get_xdata()) == 7


@pytest.mark.parametrize("features", [[12], [-1], []])
def test_bad_features_are_refused(features):
    X, labels, centers = _data(D=12, K=3)
    with pytest.raises(ValueError, match=r"features must be indices in \[0, 12\)"):
        plot_barycenters(X, labels, centers, features=features)


def test_cli_cluster_figure_of_twelve_features(tmp_path, capsys):
    X, _, _ = _data(P=9, T=10, D=12, K=3)
    f = tmp_path / "x12.npy"
    np.save(f, X.astype(np.float32))
    base = ["cluster", str(f), "-k", "3", "--max-iter", "2", "--barycenter-iter", "2", "--no-progress"]
    assert cli.main(base + ["--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "centers.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(base + ["--out", str(tmp_path / "b"), "--features", "0,11"]) == 0
    assert (tmp_path / "b" / "centers.png").is_file()
    capsys.readouterr()
    assert cli.main(base + ["--out", str(tmp_path / "c"), "--features", "0,12"]) == 2
    err = capsys.readouterr().err
    assert "--features 0,12: expected comma-separated feature indices in [0, 12)" in err
    assert not (tmp_path / "c").exists()  # refused before clustering


def test_centres_of_different_lengths_are_drawn_over_their_own_steps():
    X, labels, centers = _data(K=2)
    centers[0, 12:] = np.nan  # a k-means centre of 12 steps, NaN-padded (as KMeansResult.centers)
    fig = plot_clusters(X, labels, centers)
    for k, (ax, n) in enumerate(zip(_visible(fig), (12, 20))):
        line = ax.get_lines()[-1]
        assert len(line.get_xdata()) == n and np.isfinite(line.get_ydata()).all()
        np.testing.assert_allclose(line.get_ydata(), centers[k, :n, 0])
    # Explicit lengths: nothing drawn past them, whatever the padding holds.
    padded = np.nan_to_num(centers)
    fig = plot_clusters(X, labels, padded, center_lengths=[12, 7])
    assert [len(ax.get_lines()[-1].get_xdata()) for ax in _visible(fig)] == [12, 7]
    with pytest.raises(ValueError, match="barycenter_lengths must hold one length in"):
        plot_clusters(X, labels, padded, center_lengths=[12, 21])
    # The heatmap summary keeps a finite colour scale.
    X, labels, centers = _data(D=12, K=2)
    centers[1, 5:] = np.nan
    fig = plot_clusters(X, labels, centers)
    im = [ax for ax in _visible(fig) if ax.get_images()][0].get_images()[0]
    assert np.isfinite(im.get_clim()).all()
