"""softdtw.datasets: the CBF generator, the train/test split and the UCR/UEA loader (hand-written fixtures)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from softdtw.datasets import CBF_CLASSES, UCRFormatError, load_ucr, make_cbf, train_test_split

DATA = Path(__file__).parent / "data"


# -- make_cbf -------------------------------------------------------------------------------------

def test_cbf_shapes_dtype_and_balance():
    X, y = make_cbf(31, length=64, seed=3)
    assert X.shape == (31, 64, 1) and X.dtype == torch.float32
    assert y.dtype == torch.int64 and y.shape == (31,)
    assert y.bincount().tolist() == [11, 10, 10]
    assert torch.isfinite(X).all()
    assert len(CBF_CLASSES) == 3


def test_cbf_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    X1, y1 = make_cbf(20, 32, seed=7)
    after = torch.rand(1)
    X2, y2 = make_cbf(20, 32, seed=7)
    assert torch.equal(X1, X2) and torch.equal(y1, y2)
    assert torch.equal(before, after)
    X3, _ = make_cbf(20, 32, seed=8)
    assert not torch.equal(X1, X3)


def test_cbf_shapes_are_what_the_classes_say():
    X, y = make_cbf(300, 128, seed=0, dtype=torch.float64)
    x = X[..., 0]
    # The event sits in [16, 128]; cylinder is flat there, bell rises, funnel falls.
    active = x > 3
    first = torch.argmax(active.int(), dim=1)
    last = 127 - torch.argmax(active.flip(1).int(), dim=1)
    mid = (first + last) // 2
    early = x[torch.arange(300), (first + mid) // 2]
    late = x[torch.arange(300), (mid + last) // 2]
    slope = (late - early)
    assert slope[y == 1].mean() > 1.5        # bell: increasing
    assert slope[y == 2].mean() < -1.5       # funnel: decreasing
    assert slope[y == 0].abs().mean() < 1.5  # cylinder: flat


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=0), "n must be an integer >= 1"),
    (dict(n=10, length=4), "length must be an integer >= 8"),
    (dict(n=10, dtype=torch.int64), "dtype must be a floating torch dtype"),
])
def test_cbf_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make_cbf(**kwargs)


# -- train_test_split -------------------------------------------------------------------------------

def test_split_sizes_reproducible_and_disjoint():
    X, y = make_cbf(40, 16, seed=0)
    idx = torch.arange(40)
    X_tr, X_te, y_tr, y_te, i_tr, i_te = train_test_split(X, y, idx, test_size=0.25, seed=1)
    assert len(X_tr) == 30 and len(X_te) == 10
    assert set(i_tr.tolist()).isdisjoint(i_te.tolist())
    assert torch.equal(X_te, X[i_te]) and torch.equal(y_tr, y[i_tr])
    again = train_test_split(X, y, idx, test_size=0.25, seed=1)
    assert torch.equal(again[5], i_te)


def test_split_stratified_keeps_the_proportions():
    X, y = make_cbf(60, 16, seed=0)
    _, _, y_tr, y_te = train_test_split(X, y, test_size=30, stratify=y)
    assert y_te.bincount().tolist() == [10, 10, 10]
    assert y_tr.bincount().tolist() == [10, 10, 10]


def test_split_numpy_arrays():
    a = np.arange(10)
    tr, te = train_test_split(a, test_size=3, seed=0)
    assert isinstance(tr, np.ndarray) and len(te) == 3 and sorted(np.concatenate([tr, te])) == list(range(10))


@pytest.mark.parametrize("args, kwargs, match", [
    ((), {}, "needs at least one array"),
    ((np.arange(5), np.arange(4)), {}, "same first dimension"),
    ((np.arange(5),), dict(test_size=1.5), "test_size must be a fraction"),
    ((np.arange(5),), dict(test_size=5), "test_size must be a fraction"),
    ((np.arange(1),), {}, "at least 2 rows"),
])
def test_split_bad_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_test_split(*args, **kwargs)


# -- load_ucr: the fixtures -------------------------------------------------------------------------

def test_ts_univariate_equal_length():
    X, y, lengths = load_ucr(DATA / "uni_equal.ts")
    assert X.shape == (3, 5, 1) and X.dtype == torch.float32
    assert X[0, :, 0].tolist() == [1, 2, 3, 4, 5]
    assert X[1, :, 0].tolist() == [5, 4, 3, 2, 1]
    assert y.tolist() == [1, 2, 1] and y.dtype == torch.int64
    assert lengths.tolist() == [5, 5, 5] and lengths.dtype == torch.int64


def test_ts_unequal_lengths_and_missing_values():
    X, y, lengths = load_ucr(DATA / "uni_unequal_missing.ts")
    assert X.shape == (4, 6, 1)
    assert lengths.tolist() == [3, 6, 6, 1]
    assert y.tolist() == [0, 2, 1, 0]
    # '?' inside is interpolated linearly, at the ends held constant; zeros past each length.
    assert X[0, :, 0].tolist() == [1, 2, 3, 0, 0, 0]
    assert X[2, :, 0].tolist() == pytest.approx([1.5, 1.5, 2.0, 2.5, 3.0, 3.0])
    assert X[3, :, 0].tolist() == [7, 0, 0, 0, 0, 0]


def test_ts_missing_modes():
    Xn = load_ucr(DATA / "uni_unequal_missing.ts", missing="nan").X
    assert torch.isnan(Xn[0, 1, 0]) and torch.isnan(Xn[2, 0, 0])
    Xz = load_ucr(DATA / "uni_unequal_missing.ts", missing="zero").X
    assert Xz[0, 1, 0] == 0 and Xz[2, 1, 0] == 1.5
    with pytest.raises(UCRFormatError, match=r"uni_unequal_missing.ts, line 8: case 0 has a missing value at step 1"):
        load_ucr(DATA / "uni_unequal_missing.ts", missing="raise")


def test_ts_multivariate_unequal_string_labels():
    X, y, lengths = load_ucr(DATA / "multi_unequal.ts", dtype=torch.float64)
    assert X.shape == (3, 4, 2) and X.dtype == torch.float64
    assert lengths.tolist() == [3, 2, 4]
    assert y.tolist() == [1, 0, 1]  # index in "@classLabel true walking running"
    assert X[0].tolist() == [[1, 10], [2, 20], [3, 30], [0, 0]]
    assert X[1, :2].tolist() == [[4, 40], [5, 40]]  # the missing last value is held from its neighbour


def test_tsv_unequal_lengths_and_missing_values():
    X, y, lengths = load_ucr(DATA / "uni_unequal_missing.tsv")
    assert X.shape == (4, 4, 1)
    assert y.tolist() == [1, 2, 1, -1]
    assert lengths.tolist() == [4, 3, 2, 4]  # trailing NaN are padding
    assert X[1, :, 0].tolist() == [4, 3, 2, 0]  # interior NaN interpolated
    assert X[3, :, 0].tolist() == [2, 2, 3, 5]  # leading NaN held from the first observed value


def test_loaded_data_feeds_the_toolkit():
    from softdtw import soft_dtw
    X, y, lengths = load_ucr(DATA / "multi_unequal.ts")
    v = soft_dtw(X, X.flip(0), 1.0, x_lengths=lengths, y_lengths=lengths.flip(0))
    assert torch.isfinite(v).all()


# -- load_ucr: malformed files ------------------------------------------------------------------------

_HEADER = "@problemName T\n@univariate true\n@equalLength false\n@classLabel true a b\n@data\n"


@pytest.mark.parametrize("text, match", [
    (_HEADER + "1,2,3:a\n1,x,3:b\n", r"bad.ts, line 7: dimension 0, value 2: 'x' is not a number"),
    (_HEADER + "1,2:3,4:a\n1,2:b\n", r"bad.ts, line 7: expected 2 dimension\(s\) separated by ':'"),
    (_HEADER + "1,2,3:c\n", r"bad.ts, line 6: class label 'c' is not among those declared by @classLabel"),
    (_HEADER + "1,2,3\n", r"bad.ts, line 6: .*found no ':'"),
    ("@problemName T\n@classLabel true a\n", r"bad.ts: no @data line found"),
    ("@problemName T\n@data\n1,2:a\n", r"bad.ts, line 2: @data reached without a @classLabel line"),
    ("@problemName T\n@timeStamps true\n@classLabel true a\n@data\n(1,2):a\n", r"@timeStamps true is not supported"),
    ("@problemName T\n@univariate maybe\n", r"bad.ts, line 2: @univariate must be followed by true or false"),
    ("hello\n@data\n", r"bad.ts, line 1: expected a header line starting with '@'"),
    ("@equalLength true\n@seriesLength 3\n@classLabel true a\n@data\n1,2:a\n",
     r"bad.ts, line 5: @equalLength true with @seriesLength 3, but this case has 2 values"),
    (_HEADER + "?,?:a\n", r"bad.ts, line 6: the case has no observed value"),
    (_HEADER, r"bad.ts: no cases after @data"),
])
def test_ts_errors_name_file_line_and_reason(tmp_path, text, match):
    path = tmp_path / "bad.ts"
    path.write_text(text)
    with pytest.raises(UCRFormatError, match=match):
        load_ucr(path)


@pytest.mark.parametrize("text, match", [
    ("1\t1\t2\n2\t1\tabc\n", r"bad.tsv, line 2: value 2: 'abc' is not a number"),
    ("1\t1\t2\n3\n", r"bad.tsv, line 2: expected a class label followed by at least one value"),
    ("1\tNaN\tNaN\n", r"bad.tsv, line 1: the series has no observed value"),
    ("NaN\t1\t2\n", r"bad.tsv, line 1: the class label \(first field\) is missing"),
    ("\n\n", r"bad.tsv: no data rows found"),
])
def test_tsv_errors_name_file_line_and_reason(tmp_path, text, match):
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(UCRFormatError, match=match):
        load_ucr(path)


def test_loader_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file: .*load_ucr reads UCR/UEA archive files"):
        load_ucr(tmp_path / "nope.ts")
    with pytest.raises(ValueError, match="missing must be one of"):
        load_ucr(DATA / "uni_equal.ts", missing="drop")
    (tmp_path / "x.arff").write_text("@relation x\n")
    with pytest.raises(ValueError, match=".arff files are not supported"):
        load_ucr(tmp_path / "x.arff")


def test_loader_sniffs_unknown_extensions(tmp_path):
    p = tmp_path / "data.dat"
    p.write_text((DATA / "uni_equal.ts").read_text())
    assert load_ucr(p).X.shape == (3, 5, 1)
    q = tmp_path / "rows.dat"
    q.write_text("1,0.5,0.25\n2,1.5,2.5\n")
    X, y, lengths = load_ucr(q)
    assert X[:, :, 0].tolist() == [[0.5, 0.25], [1.5, 2.5]] and y.tolist() == [1, 2]
