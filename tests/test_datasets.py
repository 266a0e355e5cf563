"""softdtw.datasets: the CBF generator and the UCR/UEA loader (hand-written fixtures, files written to the
format's spec, and a hypothesis round trip)."""
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from softdtw.datasets import CBF_CLASSES, UCRData, UCRFormatError, load_ucr, make_cbf

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
    ("@problemName T\n@classLabel true a\n@data\n(1,2):a\n",
     r"bad.ts, line 4: time-stamped values .* no '@timeStamps true'"),
    ("@timeStamps true\n@classLabel true a\n@data\n(1,2),(1,3):a\n",
     r"bad.ts, line 4: dimension 0: the time stamps are not increasing"),
    ("@timeStamps true\n@classLabel true a\n@data\n(1,2),(2,3):(1,2),(3,3):a\n",
     r"bad.ts, line 4: dimension 1 has other time stamps than dimension 0"),
    ("@timeStamps true\n@classLabel true a\n@data\n(x,2):a\n",
     r"bad.ts, line 4: dimension 0: time stamp 'x' is neither"),
    ("@timeStamps true\n@classLabel true a\n@data\n(1,2)(2,3):a\n", r"bad.ts, line 4: dimension 0: expected ','"),
    ("@timeStamps true\n@classLabel true a\n@data\n(1,2:a\n", r"bad.ts, line 4: unclosed '\('"),
    (_HEADER + "1,inf,3:a\n", r"bad.ts, line 6: dimension 0, value 2: 'inf' is not a finite number"),
    (_HEADER + "1,1e999,3:a\n", r"bad.ts, line 6: dimension 0, value 2: '1e999' is not a finite number"),
    ("@targetLabel true\n@data\n1,2:abc\n", r"bad.ts, line 3: regression target 'abc' is not a finite number"),
    ("@targetLabel true\n@classLabel true a\n@data\n1,2:a\n",
     r"bad.ts, line 3: .*both @classLabel true and @targetLabel"),
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
    ("1\t1\t2\n2\t-Infinity\t1\n", r"bad.tsv, line 2: value 1: '-Infinity' is not a finite number"),
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
    with pytest.raises(ValueError, match="timestamps must be one of"):
        load_ucr(DATA / "uni_equal.ts", timestamps="drop")
    with pytest.raises(ValueError, match="padding must be one of"):
        load_ucr(DATA / "uni_equal.ts", padding=-1)
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


# -- load_ucr: what the .ts format allows -----------------------------------------------------------

def test_class_names_beside_integer_labels(tmp_path):
    data = load_ucr(DATA / "multi_unequal.ts")
    assert isinstance(data, UCRData) and len(data) == 3  # still unpacks as X, y, lengths
    assert data.classes == ("walking", "running") and data.task == "classification"
    assert [data.classes[i] for i in data.y] == ["running", "walking", "running"]
    assert data.labels.tolist() == ["running", "walking", "running"]
    uni = load_ucr(DATA / "uni_equal.ts")
    assert uni.y.tolist() == [1, 2, 1] and uni.classes == ("1", "2") and uni.labels.tolist() == ["1", "2", "1"]
    # "1.0" labels keep their text; y stays the integer (UCR files label classes 1, 2, ... or -1, 1).
    p = tmp_path / "floats.ts"
    p.write_text("@classLabel true 1.0 2.0\n@data\n1,2:1.0\n3,4:2.0\n5,6:1\n")
    d = load_ucr(p)
    assert d.y.tolist() == [1, 2, 1] and d.labels.tolist() == ["1.0", "2.0", "1"] and d.classes == ("1.0", "2.0")
    q = tmp_path / "floats.tsv"
    q.write_text("2.5\t1\t2\n-1.0\t3\t4\n2.5\t5\t6\n")
    d = load_ucr(q)
    assert d.classes == ("-1.0", "2.5") and d.y.tolist() == [1, 0, 1] and d.labels.tolist() == ["2.5", "-1.0", "2.5"]


def test_comments_with_percent_and_hash(tmp_path):
    p = tmp_path / "c.ts"
    p.write_text("% ARFF-style comment\n# sktime-style comment\n@problemName C\n%another\n@classLabel true a b\n"
                 "@data\n% a comment among the data\n1,2,3:a\n#\n4,5:b\n")
    X, y, lengths = load_ucr(p)
    assert lengths.tolist() == [3, 2] and y.tolist() == [0, 1] and X[1, :2, 0].tolist() == [4, 5]
    q = tmp_path / "c.tsv"
    q.write_text("% comment\n1\t1\t2\n# comment\n2\t3\t4\n")
    assert load_ucr(q).y.tolist() == [1, 2]


def test_target_label_regression_file(tmp_path):
    p = tmp_path / "reg.ts"
    p.write_text("@problemName Reg\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
                 "@equalLength true\n@seriesLength 3\n@classLabel false\n@targetLabel true\n@data\n"
                 "1,2,3:4,5,6:0.25\n7,8,9:1,2,3:-1.5e2\n")
    d = load_ucr(p)
    assert d.task == "regression" and d.classes is None
    assert d.y.dtype == torch.float64 and d.y.tolist() == [0.25, -150.0]
    assert d.labels.tolist() == ["0.25", "-1.5e2"]
    assert d.X.shape == (2, 3, 2) and d.X[1, :, 1].tolist() == [1, 2, 3]


def test_unlabelled_file(tmp_path):
    p = tmp_path / "u.ts"
    p.write_text("@classLabel false\n@data\n1,2,3\n4,5\n")
    d = load_ucr(p)
    assert d.task == "unlabelled" and d.y.tolist() == [-1, -1] and d.labels is None and d.classes is None


def test_timestamps_are_parsed(tmp_path):
    p = tmp_path / "stamps.ts"
    p.write_text("@problemName S\n@timeStamps true\n@univariate false\n@dimensions 2\n@equalLength false\n"
                 "@classLabel true lo hi\n@data\n"
                 "(2007-01-01 00:00:00,241.97),(2007-01-01 00:01:00,?),(2007-01-01 00:03:00,3):"
                 "(2007-01-01 00:00:00,1),(2007-01-01 00:01:00,2),(2007-01-01 00:03:00,4):hi\n"
                 "(0, 1.5), (2, 2.5):(0,1),(2,2):lo\n")
    d = load_ucr(p, dtype=torch.float64)
    assert d.lengths.tolist() == [3, 2] and d.y.tolist() == [1, 0]
    t0 = 1167609600.0  # 2007-01-01 00:00:00 UTC in seconds
    np.testing.assert_array_equal(d.timestamps[0], [t0, t0 + 60, t0 + 180])
    np.testing.assert_array_equal(d.timestamps[1], [0.0, 2.0, np.nan])
    assert d.X[0, :, 0].tolist() == pytest.approx([241.97, (241.97 + 3) / 2, 3.0])  # '?' interpolated by index
    assert d.X[1, :2].tolist() == [[1.5, 1.0], [2.5, 2.0]]
    with pytest.raises(UCRFormatError, match=r"stamps.ts, line 7: @timeStamps true: .*timestamps='raise'; pass "
                                              r"timestamps='keep'"):
        load_ucr(p, timestamps="raise")
    assert load_ucr(DATA / "uni_equal.ts").timestamps is None


def test_nan_padding_option_feeds_the_estimators():
    from softdtw import SoftDTWKNeighborsClassifier, soft_dtw
    d = load_ucr(DATA / "multi_unequal.ts", padding="nan", dtype=torch.float64)
    assert torch.isnan(d.X[0, 3]).all() and not torch.isnan(d.X[2]).any()
    ref = load_ucr(DATA / "multi_unequal.ts", dtype=torch.float64)
    torch.testing.assert_close(soft_dtw(d.X, d.X.flip(0)),
                               soft_dtw(ref.X, ref.X.flip(0), x_lengths=ref.lengths, y_lengths=ref.lengths.flip(0)))
    clf = SoftDTWKNeighborsClassifier(progress=False).fit(d.X.numpy(), np.array(d.labels))
    assert clf.predict(d.X.numpy()).tolist() == ["running", "walking", "running"]


def test_binary_files_and_directories_are_named(tmp_path):
    b = tmp_path / "data.ts"
    b.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f8'}\x82\xff\x00")
    with pytest.raises(UCRFormatError, match=r"data.ts: not a text file \(byte 0x93 is not UTF-8\)"):
        load_ucr(b)
    c = tmp_path / "data.tsv"
    c.write_bytes(b"1\t2\t3\n\x82\x00\x01")
    with pytest.raises(UCRFormatError, match=r"data.tsv: not a text file \(byte 0x82"):
        load_ucr(c)
    d = tmp_path / "GunPoint"
    d.mkdir()
    (d / "GunPoint_TRAIN.ts").write_text("@classLabel false\n@data\n1,2\n")
    with pytest.raises(IsADirectoryError, match=r"GunPoint is a directory \(it holds GunPoint_TRAIN.ts\); load_ucr "
                                                r"reads one file"):
        load_ucr(d)


def test_ucrdata_pickles_with_its_attributes():
    d = load_ucr(DATA / "multi_unequal.ts")
    e = pickle.loads(pickle.dumps(d))
    assert e.classes == d.classes and e.labels.tolist() == d.labels.tolist() and torch.equal(e.X, d.X)
    assert d._replace(y=d.y + 1).task == "classification"  # _replace keeps the type; attributes fall back


# -- round trip: random data written in .ts and .tsv, read back equal ---------------------------------

def _write_ts(path, series, labels, classes):
    D = series[0].shape[1]
    lines = ["@problemName RoundTrip", "@timeStamps false", "@missing false",
             f"@univariate {'true' if D == 1 else 'false'}", f"@dimensions {D}",
             f"@equalLength {'true' if len({len(s) for s in series}) == 1 else 'false'}",
             "@classLabel true " + " ".join(classes), "@data"]
    for s, lab in zip(series, labels):
        lines.append(":".join(",".join(repr(float(v)) for v in s[:, d]) for d in range(D)) + ":" + lab)
    path.write_text("\n".join(lines) + "\n")


def _write_tsv(path, series, labels):
    T = max(len(s) for s in series)
    rows = [lab + "\t" + "\t".join([repr(float(v)) for v in s[:, 0]] + ["NaN"] * (T - len(s)))
            for s, lab in zip(series, labels)]
    path.write_text("\n".join(rows) + "\n")


_finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def _datasets(draw, univariate=False):
    D = 1 if univariate else draw(st.integers(1, 3))
    P = draw(st.integers(1, 6))
    classes = draw(st.lists(st.sampled_from(["a", "b", "standing", "1", "2", "1.0", "-1", "x_y"]),
                            min_size=1, max_size=4, unique=True))
    series, labels = [], []
    for _ in range(P):
        T = draw(st.integers(1, 8))
        series.append(np.array(draw(st.lists(_finite, min_size=T * D, max_size=T * D))).reshape(T, D))
        labels.append(draw(st.sampled_from(classes)))
    return series, labels, classes


def _int(label):
    try:
        v = float(label)
    except ValueError:
        return None
    return int(v) if v.is_integer() else None


def _check_round_trip(d, series, labels):
    assert d.lengths.tolist() == [len(s) for s in series]
    for p, s in enumerate(series):
        np.testing.assert_array_equal(d.X[p, :len(s)].numpy(), s)
        assert (d.X[p, len(s):] == 0).all()
    assert d.labels.tolist() == labels
    if all(_int(c) is not None for c in labels + list(d.classes)):  # integer labels stay integers
        assert d.y.tolist() == [_int(c) for c in labels]
    else:  # otherwise y indexes the class names
        assert [d.classes[i] for i in d.y.tolist()] == labels


@settings(max_examples=40, deadline=None)
@given(_datasets())
def test_ts_round_trip(tmp_path_factory, data):
    series, labels, classes = data
    path = tmp_path_factory.mktemp("rt") / "data.ts"
    _write_ts(path, series, labels, classes)
    d = load_ucr(path, dtype=torch.float64)
    assert d.classes == tuple(classes)
    _check_round_trip(d, series, labels)


@settings(max_examples=40, deadline=None)
@given(_datasets(univariate=True))
def test_tsv_round_trip(tmp_path_factory, data):
    series, labels, _ = data
    path = tmp_path_factory.mktemp("rt") / "data.tsv"
    _write_tsv(path, series, labels)
    d = load_ucr(path, dtype=torch.float64)
    assert set(d.classes) == set(labels)
    _check_round_trip(d, series, labels)
