"""Data sets: the embedded Cylinder–Bell–Funnel generator and a reader for UCR/UEA archive files.

- :func:`make_cbf` draws the Cylinder–Bell–Funnel data set (Saito 1994), seeded, with nothing to
  download: the data of ``softdtw demo``, the examples and the tests.
- :func:`load_ucr` reads files of the UCR/UEA time-series archives that a user has on disk:
  ``.ts`` (the sktime / aeon format: univariate or multivariate, equal or unequal lengths, missing
  values ``?``, class labels or regression targets, time stamps, ``#`` / ``%`` comments) and
  ``.tsv`` (UCR 2018: label first, then the values; ``NaN`` for missing values and as padding of
  shorter series). Malformed files raise :class:`UCRFormatError` naming the file, the line and the
  reason.

To split a data set use scikit-learn's ``sklearn.model_selection.train_test_split``, which takes
tensors and arrays alike.
"""
from __future__ import annotations

import math
import os
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch

__all__ = ["make_cbf", "load_ucr", "UCRData", "UCRFormatError", "CBF_CLASSES"]

#: Class names of :func:`make_cbf`, indexed by label.
CBF_CLASSES = ("cylinder", "bell", "funnel")


# ---------------------------------------------------------------------------------------------
# Cylinder–Bell–Funnel
# ---------------------------------------------------------------------------------------------

def make_cbf(n: int = 300, length: int = 128, seed: Optional[int] = 0, *,
             dtype: torch.dtype = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The Cylinder–Bell–Funnel data set (Saito 1994): three classes of noisy univariate shapes.

    With a ~ U[16, 32], b - a ~ U[32, 96] (scaled by ``length / 128``), eta, eps(t) ~ N(0, 1):

    .. math::
        \text{cylinder: } (6 + \eta)\,\chi_{[a,b]}(t) + \epsilon(t),\quad
        \text{bell: } (6 + \eta)\,\chi_{[a,b]}(t)\,\tfrac{t - a}{b - a} + \epsilon(t),\quad
        \text{funnel: } (6 + \eta)\,\chi_{[a,b]}(t)\,\tfrac{b - t}{b - a} + \epsilon(t).

    The event starts and lasts a random time, which is what makes Euclidean distance struggle and
    (soft-)DTW shine. Classes are balanced (``n // 3`` each, the remainder going to the first
    classes) and shuffled.

    Args:
        n: number of series, >= 1.
        length: steps per series, >= 8 (128 is the classic size).
        seed: seed of a private ``torch.Generator`` (the global RNG is untouched); the same seed
            gives the same data on every platform. None draws a fresh seed.
        dtype: floating dtype of X.

    Returns:
        X: `(n, length, 1)` float tensor (float32 by default), on the CPU.
        y: `(n,)` int64 labels: 0 cylinder, 1 bell, 2 funnel (names in :data:`CBF_CLASSES`).

    Example:
        >>> from softdtw.datasets import make_cbf
        >>> X, y = make_cbf(30, length=64, seed=0)
        >>> X.shape, y.bincount().tolist()
        (torch.Size([30, 64, 1]), [10, 10, 10])
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (the number of series); got {n!r}.")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 8:
        raise ValueError(
            f"length must be an integer >= 8 (steps per series; 128 is the classic CBF); got {length!r}."
        )
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch dtype such as torch.float32; got {dtype!r}.")
    gen = torch.Generator().manual_seed(int(seed) if seed is not None else int(torch.seed() % 2**63))
    n, length = int(n), int(length)
    y = torch.arange(n, dtype=torch.int64) % 3
    y = y[torch.randperm(n, generator=gen)]
    scale = length / 128.0
    a = (16 + 16 * torch.rand(n, 1, generator=gen, dtype=torch.float64)) * scale
    b = a + (32 + 64 * torch.rand(n, 1, generator=gen, dtype=torch.float64)) * scale
    b = b.clamp(max=length - 1)
    amp = 6.0 + torch.randn(n, 1, generator=gen, dtype=torch.float64)
    noise = torch.randn(n, length, generator=gen, dtype=torch.float64)
    t = torch.arange(length, dtype=torch.float64).unsqueeze(0)
    inside = ((t >= a) & (t <= b)).double()
    ramp_up = (t - a) / (b - a)
    shape = torch.where(y.unsqueeze(1) == 0, torch.ones_like(t), torch.where(y.unsqueeze(1) == 1, ramp_up, 1 - ramp_up))
    X = amp * inside * shape + noise
    return X.unsqueeze(-1).to(dtype), y


# ---------------------------------------------------------------------------------------------
# UCR / UEA archive files
# ---------------------------------------------------------------------------------------------

class UCRFormatError(ValueError):
    """A UCR/UEA file that does not follow its format; the message names file, line and reason."""


class _UCRTriple(NamedTuple):
    X: torch.Tensor  #: `(P, T, D)` float values; 0 (or NaN with padding="nan") past each series' length
    y: torch.Tensor  #: `(P,)` int64 labels, or float64 targets of a regression file
    lengths: torch.Tensor  #: `(P,)` int64 number of valid steps per series


class UCRData(_UCRTriple):
    """What :func:`load_ucr` returns: a NamedTuple ``(X, y, lengths)`` — so ``X, y, lengths =
    load_ucr(path)`` works — carrying four more attributes.

    Attributes:
        X: `(P, T, D)` float tensor, T the longest series; 0 past each series' length (NaN with
            ``padding="nan"``).
        y: `(P,)` int64 class labels: the labels themselves when every label is an integer (as in
            the UCR archive: "1", "-1", "1.0" give 1, -1, 1), otherwise the index of the label in
            ``classes``; -1 for unlabelled files. For a regression file (``@targetLabel true``),
            `(P,)` float64 targets.
        lengths: `(P,)` int64 valid steps per series.
        classes: tuple of the class names as written in the file (the ``@classLabel`` list in its
            order; for a .tsv the distinct labels, in numeric order when they are numbers), or None
            for regression and unlabelled files.
        labels: `(P,)` ndarray of str, each case's label or target exactly as written ("standing",
            "1.0"), or None for unlabelled files.
        task: "classification", "regression" or "unlabelled".
        timestamps: `(P, T)` float64 ndarray of the time stamps of a ``@timeStamps true`` file
            (numbers as written; dates and times as seconds since 1970-01-01), NaN past each length;
            None for files without time stamps.
    """

    classes = None
    labels = None
    task = "classification"
    timestamps = None

    def __new__(cls, X, y, lengths, *, classes=None, labels=None, task="classification", timestamps=None):
        self = super().__new__(cls, X, y, lengths)
        self.classes, self.labels, self.task, self.timestamps = classes, labels, task, timestamps
        return self


_MISSING_MODES = ("interpolate", "nan", "zero", "raise")
_TIMESTAMP_MODES = ("keep", "raise")
_PADDINGS = ("zero", "nan")
_MISSING_TOKENS = ("?", "", "NaN", "nan", "NAN")
_COMMENT = ("#", "%")


def _fail(path: str, lineno: Optional[int], reason: str) -> UCRFormatError:
    where = f"{path}, line {lineno}" if lineno is not None else f"{path}"
    return UCRFormatError(f"{where}: {reason}")


def _parse_float(token: str, path: str, lineno: int, what: str) -> float:
    t = token.strip()
    if t in _MISSING_TOKENS:
        return math.nan
    try:
        v = float(t)
    except ValueError:
        raise _fail(path, lineno, f"{what}: {t!r} is not a number (expected a float, or '?' / NaN "
                                  f"for a missing value).") from None
    if not math.isfinite(v):
        raise _fail(path, lineno, f"{what}: {t!r} is not a finite number (it reads as {v}); soft-DTW needs "
                                  f"finite values. Mark a missing value with '?' (.ts) or NaN (.tsv).")
    return v


def _fill_missing(series: np.ndarray, length: int, mode: str, path: str, lineno: int, case: int) -> None:
    """Fill NaN in ``series[:length]`` (shape (T, D)) in place according to ``mode``."""
    valid = series[:length]
    nan = np.isnan(valid)
    if not nan.any():
        return
    if mode == "nan":
        return
    if mode == "raise":
        t, d = np.argwhere(nan)[0]
        raise _fail(path, lineno, f"case {case} has a missing value at step {t}, dimension {d}; "
                                  f"pass missing='interpolate' (default), 'zero' or 'nan' to accept them.")
    if mode == "zero":
        valid[nan] = 0.0
        return
    steps = np.arange(length)
    for d in range(valid.shape[1]):
        col = valid[:, d]
        bad = np.isnan(col)
        if not bad.any():
            continue
        if bad.all():
            col[:] = 0.0  # a dimension with no observed value at all: nothing to interpolate from
            continue
        col[bad] = np.interp(steps[bad], steps[~bad], col[~bad])


def _number(s: str) -> Optional[float]:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _class_labels(raw: List[str], header: Optional[List[str]], path: str, lines: List[int]):
    """(y int64, classes, labels): integer labels stay integers; others index into the classes."""
    nums = [_number(s) for s in raw]
    if header:
        classes = tuple(header)
        head_nums = [_number(c) for c in classes]
        text = set(classes)
        numeric = {v for v in head_nums if v is not None}
        for s, v, lineno in zip(raw, nums, lines):
            if s not in text and (v is None or v not in numeric):
                raise _fail(path, lineno, f"class label {s!r} is not among those declared by @classLabel "
                                          f"({' '.join(classes)}); add it to the header or fix the label.")
    else:
        head_nums = []
        distinct = sorted(set(raw))
        if all(_number(c) is not None for c in distinct):
            distinct.sort(key=lambda c: _number(c))
        classes = tuple(distinct)
    ints = all(v is not None and v.is_integer() for v in nums) and \
        all(v is not None and v.is_integer() for v in head_nums)
    if ints:
        y = [int(v) for v in nums]
    else:
        index = {c: i for i, c in enumerate(classes)}
        by_value = {}
        for i, c in enumerate(classes):
            v = _number(c)
            if v is not None:
                by_value.setdefault(v, i)
        y = [index[s] if s in index else by_value[v] for s, v in zip(raw, nums)]
    return torch.tensor(y, dtype=torch.int64), classes, np.array(raw, dtype=str)


def _stack(cases: List[np.ndarray], lengths: List[int], dtype: torch.dtype, padding: str):
    T = max(lengths)
    D = cases[0].shape[1]
    X = np.full((len(cases), T, D), np.nan if padding == "nan" else 0.0, dtype=np.float64)
    for i, (c, n) in enumerate(zip(cases, lengths)):
        X[i, :n] = c[:n]
    return torch.from_numpy(X).to(dtype), torch.tensor(lengths, dtype=torch.int64)


def _read_tsv(path: str, missing: str, dtype: torch.dtype, sep: Optional[str], padding: str) -> UCRData:
    raw_labels, label_lines, cases, lengths = [], [], [], []
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith(_COMMENT):
                continue
            fields = text.split(sep) if sep is not None else (text.split("\t") if "\t" in text else
                                                              text.split(",") if "," in text else text.split())
            if len(fields) < 2:
                raise _fail(path, lineno, f"expected a class label followed by at least one value, separated by "
                                          f"tabs (UCR .tsv format); found {len(fields)} field(s).")
            label = fields[0].strip()
            if label in _MISSING_TOKENS:
                raise _fail(path, lineno, "the class label (first field) is missing; every row needs a label.")
            values = np.array([_parse_float(t, path, lineno, f"value {k + 1}") for k, t in enumerate(fields[1:])])
            observed = np.nonzero(~np.isnan(values))[0]
            if len(observed) == 0:
                raise _fail(path, lineno, "the series has no observed value (all NaN); remove the row.")
            n = int(observed[-1]) + 1  # trailing NaN are padding (UCR 2018 convention for unequal lengths)
            series = values[:n].reshape(n, 1).copy()
            _fill_missing(series, n, missing, path, lineno, len(cases))
            raw_labels.append(label)
            label_lines.append(lineno)
            cases.append(series)
            lengths.append(n)
    if not cases:
        raise _fail(path, None, "no data rows found; a .tsv file has one series per line: label<TAB>v1<TAB>v2...")
    y, classes, labels = _class_labels(raw_labels, None, path, label_lines)
    X, lengths_t = _stack(cases, lengths, dtype, padding)
    return UCRData(X, y, lengths_t, classes=classes, labels=labels, task="classification")


_TS_BOOL_KEYS = ("timestamps", "missing", "univariate", "equallength", "targetlabel")


def _split_outside_parens(text: str, path: str, lineno: int) -> List[str]:
    """``text`` split at the ':' that are not inside '(...)' (time stamps may hold ':')."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise _fail(path, lineno, "nested '(' in a time-stamped value; expected (timestamp,value).")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise _fail(path, lineno, "')' without '(' in a time-stamped value.")
        elif ch == ":" and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    if depth != 0:
        raise _fail(path, lineno, "unclosed '(' in a time-stamped value; expected (timestamp,value).")
    parts.append(text[start:])
    return parts


def _parse_stamp(token: str, path: str, lineno: int, d: int) -> float:
    t = token.strip()
    v = _number(t)
    if v is not None:
        return v
    try:
        return float((np.datetime64(t, "ns") - np.datetime64(0, "ns")) / np.timedelta64(1, "s"))
    except ValueError:
        raise _fail(path, lineno, f"dimension {d}: time stamp {t!r} is neither a number nor a date-time "
                                  f"(such as 2007-01-01 00:00:00).") from None


def _stamped_values(chunk: str, path: str, lineno: int, d: int):
    """'(t0,v0),(t1,v1),...' -> (stamps, values)."""
    stamps, values, k, text = [], [], 0, chunk.strip()
    while k < len(text):
        if text[k] != "(":
            raise _fail(path, lineno, f"dimension {d}: expected '(timestamp,value)' pairs separated by ','; found "
                                      f"{text[k:k + 20]!r}.")
        end = text.find(")", k)
        inner = text[k + 1:end]
        if "," not in inner:
            raise _fail(path, lineno, f"dimension {d}: '({inner})' has no ','; expected (timestamp,value).")
        t, v = inner.rsplit(",", 1)
        stamps.append(_parse_stamp(t, path, lineno, d))
        values.append(_parse_float(v, path, lineno, f"dimension {d}, value {len(values) + 1}"))
        k = end + 1
        while k < len(text) and text[k] in " \t":
            k += 1
        if k < len(text):
            if text[k] != ",":
                raise _fail(path, lineno, f"dimension {d}: expected ',' between time-stamped values; found "
                                          f"{text[k:k + 20]!r}.")
            k += 1
            while k < len(text) and text[k] in " \t":
                k += 1
    if not values:
        raise _fail(path, lineno, f"dimension {d} is empty; every dimension needs at least one value.")
    return np.array(stamps), np.array(values)


def _read_ts(path: str, missing: str, dtype: torch.dtype, timestamps: str, padding: str) -> UCRData:
    header = {}
    header_classes: Optional[List[str]] = None
    has_labels: Optional[bool] = None
    in_data = False
    raw_labels, label_lines, cases, lengths, stamps_all = [], [], [], [], []
    n_dims: Optional[int] = None
    stamped = False
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith(_COMMENT):
                continue
            if not in_data:
                if not text.startswith("@"):
                    raise _fail(path, lineno, f"expected a header line starting with '@' (e.g. @problemName, "
                                              f"@data) before the data; found {text[:40]!r}.")
                parts = text.split()
                key = parts[0][1:].lower()
                if key == "data":
                    in_data = True
                    if header.get("targetlabel"):
                        if has_labels:
                            raise _fail(path, lineno, "the header declares both @classLabel true and "
                                                      "@targetLabel true; a file has class labels or regression "
                                                      "targets, not both.")
                    elif has_labels is None:
                        raise _fail(path, lineno, "@data reached without a @classLabel line; add "
                                                  "'@classLabel true <labels...>', '@classLabel false' or, for "
                                                  "regression, '@targetLabel true'.")
                    stamped = bool(header.get("timestamps"))
                    if stamped and timestamps == "raise":
                        raise _fail(path, lineno, "@timeStamps true: the values come with time stamps, and "
                                                  "load_ucr was called with timestamps='raise'; pass "
                                                  "timestamps='keep' (the default) to read them into "
                                                  ".timestamps.")
                    if header.get("dimensions") is not None:
                        n_dims = header["dimensions"]
                    continue
                if key in _TS_BOOL_KEYS:
                    if len(parts) != 2 or parts[1].lower() not in ("true", "false"):
                        raise _fail(path, lineno, f"@{parts[0][1:]} must be followed by true or false; "
                                                  f"found {' '.join(parts[1:])!r}.")
                    header[key] = parts[1].lower() == "true"
                elif key == "classlabel":
                    if len(parts) < 2 or parts[1].lower() not in ("true", "false"):
                        raise _fail(path, lineno, "@classLabel must be followed by true (and the labels) or false.")
                    has_labels = parts[1].lower() == "true"
                    if has_labels:
                        if len(parts) < 3:
                            raise _fail(path, lineno, "@classLabel true must list the class labels, e.g. "
                                                      "'@classLabel true 1 2 3'.")
                        header_classes = parts[2:]
                elif key in ("serieslength", "dimensions"):
                    try:
                        header[key] = int(parts[1])
                    except (IndexError, ValueError):
                        raise _fail(path, lineno, f"@{parts[0][1:]} must be followed by an integer.") from None
                # @problemName and unknown keys are accepted and ignored.
                continue
            if text.startswith("@"):
                raise _fail(path, lineno, f"header line {text.split()[0]!r} after @data; headers go before @data.")
            if "(" in text and not stamped:
                raise _fail(path, lineno, "time-stamped values '(t,v)' but the header has no '@timeStamps true'; "
                                          "add it (load_ucr reads time stamps into .timestamps).")
            fields = _split_outside_parens(text, path, lineno) if stamped else text.split(":")
            target = bool(header.get("targetlabel"))
            if has_labels or target:
                what = "regression target" if target else "class label"
                if len(fields) < 2:
                    raise _fail(path, lineno, f"expected dimensions separated by ':' followed by ':<{what}>'; "
                                              f"found no ':' (is the {what} missing?).")
                label = fields[-1].strip()
                dims = fields[:-1]
                if label == "":
                    raise _fail(path, lineno, f"the {what} after the last ':' is empty.")
            else:
                dims = fields
                label = None
            if n_dims is None:
                n_dims = len(dims)
            if len(dims) != n_dims:
                raise _fail(path, lineno, f"expected {n_dims} dimension(s) separated by ':' (as "
                                          f"{'@dimensions' if header.get('dimensions') else 'the first case'}); "
                                          f"found {len(dims)}.")
            columns, case_stamps = [], None
            for d, chunk in enumerate(dims):
                if stamped:
                    st, vals = _stamped_values(chunk, path, lineno, d)
                    if len(st) > 1 and not bool(np.all(np.diff(st) > 0)):
                        raise _fail(path, lineno, f"dimension {d}: the time stamps are not increasing; write "
                                                  f"each dimension's values in time order.")
                    if case_stamps is None:
                        case_stamps = st
                    elif len(st) != len(case_stamps) or not bool(np.all(st == case_stamps)):
                        raise _fail(path, lineno, f"dimension {d} has other time stamps than dimension 0; "
                                                  f"soft-DTW compares steps, so the dimensions of a case must be "
                                                  f"sampled at the same times (mark gaps with '?').")
                    columns.append(vals)
                    continue
                tokens = chunk.split(",")
                if len(tokens) == 1 and tokens[0].strip() == "":
                    raise _fail(path, lineno, f"dimension {d} is empty; every dimension needs at least one value.")
                columns.append(np.array([_parse_float(t, path, lineno, f"dimension {d}, value {k + 1}")
                                         for k, t in enumerate(tokens)]))
            n = max(len(c) for c in columns)
            if header.get("equallength") and header.get("serieslength") is not None \
                    and n != header["serieslength"]:
                raise _fail(path, lineno, f"@equalLength true with @seriesLength {header['serieslength']}, but "
                                          f"this case has {n} values; fix the header (@equalLength false) or the data.")
            series = np.full((n, n_dims), np.nan)
            for d, c in enumerate(columns):
                series[:len(c), d] = c  # a shorter dimension is missing at its end
            if np.isnan(series).all():
                raise _fail(path, lineno, "the case has no observed value (all '?'); remove it.")
            _fill_missing(series, n, missing, path, lineno, len(cases))
            cases.append(series)
            lengths.append(n)
            stamps_all.append(case_stamps)
            if label is not None:
                if target:
                    v = _number(label)
                    if v is None:
                        raise _fail(path, lineno, f"regression target {label!r} is not a finite number; "
                                                  f"@targetLabel true files end each case with a float.")
                raw_labels.append(label)
                label_lines.append(lineno)
    if not in_data:
        raise _fail(path, None, "no @data line found; is this a .ts file of the UCR/UEA archive?")
    if not cases:
        raise _fail(path, None, "no cases after @data.")
    X, lengths_t = _stack(cases, lengths, dtype, padding)
    ts = None
    if stamped:
        ts = np.full((len(cases), X.shape[1]), np.nan)
        for i, st in enumerate(stamps_all):
            ts[i, :len(st)] = st
    if header.get("targetlabel"):
        y = torch.tensor([float(s) for s in raw_labels], dtype=torch.float64)
        return UCRData(X, y, lengths_t, labels=np.array(raw_labels, dtype=str), task="regression", timestamps=ts)
    if has_labels:
        y, classes, labels = _class_labels(raw_labels, header_classes, path, label_lines)
        return UCRData(X, y, lengths_t, classes=classes, labels=labels, timestamps=ts)
    y = torch.full((len(cases),), -1, dtype=torch.int64)
    return UCRData(X, y, lengths_t, task="unlabelled", timestamps=ts)


def load_ucr(path, *, missing: str = "interpolate", dtype: torch.dtype = torch.float32,
             sep: Optional[str] = None, timestamps: str = "keep", padding: str = "zero") -> UCRData:
    """Read a UCR/UEA archive file (``.ts`` or ``.tsv``) into padded tensors.

    Formats:
        - ``.ts`` (UEA/UCR, sktime, aeon): ``@`` headers, then ``@data`` and one case per line:
          dimensions separated by ``:``, values by ``,``, the class label (``@classLabel true a b``
          lists the classes) or the regression target (``@targetLabel true``) last. Univariate or
          multivariate, equal or unequal lengths; ``?`` marks a missing value; lines starting with
          ``#`` or ``%`` are comments. With ``@timeStamps true`` each value is ``(timestamp,value)``
          (a number or a date-time such as ``2007-01-01 00:00:00``): the values are read in time
          order and the stamps returned in ``.timestamps``; every dimension of a case must carry the
          same stamps.
        - ``.tsv`` / ``.txt`` / ``.csv`` (UCR 2018): one series per line, the class label first, then
          the values separated by tabs (or commas / spaces). ``NaN`` marks a missing value; trailing
          ``NaN`` are the padding of a shorter series (the UCR convention), so they set its length.

    Missing values (``?``, ``NaN``) inside a series are handled by ``missing``; unequal lengths
    become ``lengths`` (pass them as ``x_lengths``), with X padded by 0 or, with ``padding="nan"``,
    by NaN, the layout of tslearn's ``to_time_series_dataset`` that every softdtw function and
    estimator reads as lengths. Tokens such as ``inf`` or ``1e999`` are refused.

    Args:
        path: the file.
        missing: what to do with missing values inside a series: "interpolate" (default; linear
            between observed neighbours, constant beyond the first/last one), "zero", "nan" (keep
            NaN — soft-DTW refuses them inside a series, so impute before use) or "raise".
        dtype: floating dtype of X.
        sep: value separator of a ``.tsv`` file (default: tab, else comma, else whitespace).
        timestamps: "keep" (default: parse time stamps into ``.timestamps``) or "raise" (refuse
            time-stamped files).
        padding: "zero" (default) or "nan": the value of X past each series' length.

    Returns:
        :class:`UCRData`: unpacks as ``X, y, lengths``; also carries ``classes`` (the class names),
        ``labels`` (each case's label text), ``task`` and ``timestamps``. X `(P, T, D)`, T the
        longest series; y `(P,)` int64 labels — the labels themselves when they are integers (as in
        the UCR archive), otherwise their index in ``classes`` (the ``@classLabel`` list, or the
        sorted labels of a .tsv), so train and test files agree; -1 for ``@classLabel false``;
        float64 targets for ``@targetLabel true``.

    Raises:
        FileNotFoundError: no such file. IsADirectoryError: a directory.
        UCRFormatError (a ValueError): malformed or binary file; the message names the file, the
        line and the reason.

    Example:
        >>> d = load_ucr("BasicMotions_TRAIN.ts")  # doctest: +SKIP
        >>> X, y, lengths = d; d.classes[int(y[0])]  # doctest: +SKIP
        'standing'
    """
    if missing not in _MISSING_MODES:
        raise ValueError(f"missing must be one of {_MISSING_MODES}; got {missing!r}.")
    if timestamps not in _TIMESTAMP_MODES:
        raise ValueError(f"timestamps must be one of {_TIMESTAMP_MODES}; got {timestamps!r}.")
    if padding not in _PADDINGS:
        raise ValueError(f"padding must be one of {_PADDINGS}; got {padding!r}.")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch dtype such as torch.float32; got {dtype!r}.")
    path = os.fspath(path)
    if os.path.isdir(path):
        found = sorted(f for f in os.listdir(path) if f.lower().endswith((".ts", ".tsv")))
        hint = f" (it holds {', '.join(found[:4])}{', ...' if len(found) > 4 else ''})" if found else ""
        raise IsADirectoryError(f"{path} is a directory{hint}; load_ucr reads one file, e.g. "
                                f"{os.path.join(path, found[0] if found else 'GunPoint_TRAIN.ts')}.")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no such file: {path!r}. load_ucr reads UCR/UEA archive files you have on disk "
            f"(e.g. GunPoint/GunPoint_TRAIN.ts or GunPoint_TRAIN.tsv from timeseriesclassification.com)."
        )
    ext = os.path.splitext(path)[1].lower()
    if ext == ".arff":
        raise ValueError(f"{path}: .arff files are not supported; use the .ts or .tsv file of the same data set.")
    try:
        if ext == ".ts":
            return _read_ts(path, missing, dtype, timestamps, padding)
        if ext in (".tsv", ".txt", ".csv"):
            return _read_tsv(path, missing, dtype, sep, padding)
        with open(path, "r", encoding="utf-8") as fh:  # unknown extension: sniff
            head = fh.read(4096)
        if any(line.strip().startswith("@") for line in head.splitlines()):
            return _read_ts(path, missing, dtype, timestamps, padding)
        return _read_tsv(path, missing, dtype, sep, padding)
    except UnicodeDecodeError as e:
        raise _fail(path, None, f"not a text file (byte 0x{e.object[e.start:e.start + 1].hex()} is not UTF-8); "
                                f"load_ucr reads the text .ts / .tsv files of the UCR/UEA archive, not zip, "
                                f"arff or binary files.") from None
