"""Data sets: the embedded Cylinder–Bell–Funnel generator and a reader for UCR/UEA archive files.

- :func:`make_cbf` draws the Cylinder–Bell–Funnel data set (Saito 1994), seeded, with nothing to
  download: the data of ``softdtw demo``, the examples and the tests.
- :func:`train_test_split` splits a data set (stratified by label when asked), reproducibly.
- :func:`load_ucr` reads files of the UCR/UEA time-series classification archives that a user has
  on disk: ``.ts`` (sktime format: univariate or multivariate, equal or unequal lengths, missing
  values ``?``) and ``.tsv`` (UCR 2018: label first, then the values; ``NaN`` for missing values and
  as padding of shorter series). Malformed files raise :class:`UCRFormatError` naming the file, the
  line and the reason.
"""
from __future__ import annotations

import math
import os
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch

__all__ = ["make_cbf", "train_test_split", "load_ucr", "UCRData", "UCRFormatError", "CBF_CLASSES"]

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


def train_test_split(*arrays, test_size: float = 0.25, seed: Optional[int] = 0, stratify=None) -> list:
    """Split tensors / arrays of equal first dimension into train and test parts, reproducibly.

    Args:
        *arrays: tensors or NumPy arrays with the same first dimension P (e.g. X, y, lengths).
        test_size: fraction of the rows in (0, 1) or a number of rows in [1, P - 1] for the test part.
        seed: seed of the shuffle (a private generator); None shuffles from fresh entropy.
        stratify: optional `(P,)` labels; each class is split in the same proportion (at least one
            row of every class with >= 2 rows goes to each side).

    Returns:
        ``[a_train, a_test, b_train, b_test, ...]`` like scikit-learn's ``train_test_split``.

    Example:
        >>> from softdtw.datasets import make_cbf, train_test_split
        >>> X, y = make_cbf(40, 32)
        >>> X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y)
        >>> len(X_tr), len(X_te)
        (30, 10)
    """
    if not arrays:
        raise ValueError("train_test_split needs at least one array, e.g. train_test_split(X, y).")
    P = len(arrays[0])
    for i, a in enumerate(arrays):
        if len(a) != P:
            raise ValueError(
                f"all arrays must have the same first dimension; array 0 has {P} rows, array {i} has {len(a)}."
            )
    if P < 2:
        raise ValueError(f"need at least 2 rows to split into train and test; got {P}.")
    if isinstance(test_size, float) and 0.0 < test_size < 1.0:
        n_test = int(round(test_size * P))
    elif isinstance(test_size, (int, np.integer)) and not isinstance(test_size, bool) and 1 <= test_size < P:
        n_test = int(test_size)
    else:
        raise ValueError(
            f"test_size must be a fraction in (0, 1) or a number of rows in [1, {P - 1}]; got {test_size!r}."
        )
    n_test = min(max(n_test, 1), P - 1)
    gen = torch.Generator().manual_seed(int(seed) if seed is not None else int(torch.seed() % 2**63))
    if stratify is None:
        perm = torch.randperm(P, generator=gen)
        test_idx, train_idx = perm[:n_test], perm[n_test:]
    else:
        labels = np.asarray(stratify.cpu() if isinstance(stratify, torch.Tensor) else stratify)
        if len(labels) != P:
            raise ValueError(f"stratify must have one label per row ({P}); got {len(labels)}.")
        _, codes = np.unique(labels, return_inverse=True)
        codes = torch.as_tensor(codes.reshape(-1), dtype=torch.int64)
        test_parts, train_parts = [], []
        counts = torch.bincount(codes).tolist()
        # Largest-remainder allocation: the test part has exactly n_test rows when the classes allow it.
        ideal = [n_test * c / P for c in counts]
        take = [int(math.floor(v)) for v in ideal]
        order = sorted(range(len(counts)), key=lambda c: ideal[c] - take[c], reverse=True)
        for c in order[: n_test - sum(take)]:
            take[c] += 1
        for c, count in enumerate(counts):
            members = torch.nonzero(codes == c).flatten()
            members = members[torch.randperm(count, generator=gen)]
            k = min(max(take[c], 1), count - 1) if count >= 2 else take[c]
            test_parts.append(members[:k])
            train_parts.append(members[k:])
        test_idx = torch.cat(test_parts)
        train_idx = torch.cat(train_parts)
        test_idx = test_idx[torch.randperm(len(test_idx), generator=gen)]
        train_idx = train_idx[torch.randperm(len(train_idx), generator=gen)]
    out = []
    for a in arrays:
        if isinstance(a, torch.Tensor):
            out += [a[train_idx.to(a.device)], a[test_idx.to(a.device)]]
        else:
            arr = np.asarray(a)
            out += [arr[train_idx.numpy()], arr[test_idx.numpy()]]
    return out


# ---------------------------------------------------------------------------------------------
# UCR / UEA archive files
# ---------------------------------------------------------------------------------------------

class UCRFormatError(ValueError):
    """A UCR/UEA file that does not follow its format; the message names file, line and reason."""


class UCRData(NamedTuple):
    """What :func:`load_ucr` returns; unpacks as ``X, y, lengths = load_ucr(path)``."""

    X: torch.Tensor  #: `(P, T, D)` float values; zero past each series' length
    y: torch.Tensor  #: `(P,)` int64 labels
    lengths: torch.Tensor  #: `(P,)` int64 number of valid steps per series


_MISSING_MODES = ("interpolate", "nan", "zero", "raise")


def _fail(path: str, lineno: Optional[int], reason: str) -> UCRFormatError:
    where = f"{path}, line {lineno}" if lineno is not None else f"{path}"
    return UCRFormatError(f"{where}: {reason}")


def _parse_float(token: str, path: str, lineno: int, what: str) -> float:
    t = token.strip()
    if t in ("?", "", "NaN", "nan", "NAN"):
        return math.nan
    try:
        return float(t)
    except ValueError:
        raise _fail(path, lineno, f"{what}: {token.strip()!r} is not a number (expected a float, or '?' / NaN "
                                  f"for a missing value).") from None


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


def _labels_to_tensor(raw: List[str], header_classes: Optional[List[str]], path: str,
                      label_lines: List[int]) -> Tuple[torch.Tensor, List[str]]:
    """Integer labels stay as they are; other labels become indices into the class list."""
    def as_int(s: str):
        try:
            f = float(s)
        except ValueError:
            return None
        return int(f) if f.is_integer() else None

    ints = [as_int(s) for s in raw]
    header_ints = [as_int(s) for s in header_classes] if header_classes else []
    if all(v is not None for v in ints) and all(v is not None for v in header_ints):
        classes = sorted(set(ints) | set(header_ints))
        return torch.tensor(ints, dtype=torch.int64), [str(c) for c in classes]
    classes = list(header_classes) if header_classes else sorted(set(raw))
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for s, lineno in zip(raw, label_lines):
        if s not in index:
            raise _fail(path, lineno, f"class label {s!r} is not among those declared by @classLabel "
                                      f"({' '.join(classes)}); add it to the header or fix the label.")
        out.append(index[s])
    return torch.tensor(out, dtype=torch.int64), classes


def _stack(cases: List[np.ndarray], lengths: List[int], dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    T = max(lengths)
    D = cases[0].shape[1]
    X = np.zeros((len(cases), T, D), dtype=np.float64)
    for i, (c, n) in enumerate(zip(cases, lengths)):
        X[i, :n] = c[:n]
    return torch.from_numpy(X).to(dtype), torch.tensor(lengths, dtype=torch.int64)


def _read_tsv(path: str, missing: str, dtype: torch.dtype, sep: Optional[str]):
    raw_labels, label_lines, cases, lengths = [], [], [], []
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            fields = text.split(sep) if sep is not None else (text.split("\t") if "\t" in text else
                                                              text.split(",") if "," in text else text.split())
            if len(fields) < 2:
                raise _fail(path, lineno, f"expected a class label followed by at least one value, separated by "
                                          f"tabs (UCR .tsv format); found {len(fields)} field(s).")
            label = fields[0].strip()
            if label in ("", "?", "NaN", "nan"):
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
    y, _ = _labels_to_tensor(raw_labels, None, path, label_lines)
    X, lengths_t = _stack(cases, lengths, dtype)
    return UCRData(X, y, lengths_t)


_TS_BOOL_KEYS = ("timestamps", "missing", "univariate", "equallength")


def _read_ts(path: str, missing: str, dtype: torch.dtype):
    header = {}
    header_classes: Optional[List[str]] = None
    has_labels: Optional[bool] = None
    in_data = False
    raw_labels, label_lines, cases, lengths = [], [], [], []
    n_dims: Optional[int] = None
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if not in_data:
                if not text.startswith("@"):
                    raise _fail(path, lineno, f"expected a header line starting with '@' (e.g. @problemName, "
                                              f"@data) before the data; found {text[:40]!r}.")
                parts = text.split()
                key = parts[0][1:].lower()
                if key == "data":
                    in_data = True
                    if has_labels is None:
                        raise _fail(path, lineno, "@data reached without a @classLabel line; add "
                                                  "'@classLabel true <labels...>' or '@classLabel false'.")
                    if header.get("timestamps") is True:
                        raise _fail(path, lineno, "@timeStamps true is not supported; export the series "
                                                  "without time stamps (values only).")
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
                # @problemName, @targetLabel and unknown keys are accepted and ignored.
                continue
            if text.startswith("@"):
                raise _fail(path, lineno, f"header line {text.split()[0]!r} after @data; headers go before @data.")
            if "(" in text:
                raise _fail(path, lineno, "time-stamped values '(t, v)' are not supported; export values only.")
            fields = text.split(":")
            if has_labels:
                if len(fields) < 2:
                    raise _fail(path, lineno, "expected dimensions separated by ':' followed by ':<class label>'; "
                                              "found no ':' (is the class label missing?).")
                label = fields[-1].strip()
                dims = fields[:-1]
                if label == "":
                    raise _fail(path, lineno, "the class label after the last ':' is empty.")
            else:
                dims = fields
                label = None
            if n_dims is None:
                n_dims = len(dims)
            if len(dims) != n_dims:
                raise _fail(path, lineno, f"expected {n_dims} dimension(s) separated by ':' (as "
                                          f"{'@dimensions' if header.get('dimensions') else 'the first case'}); "
                                          f"found {len(dims)}.")
            columns = []
            for d, chunk in enumerate(dims):
                tokens = [t for t in chunk.split(",")]
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
            if label is not None:
                raw_labels.append(label)
                label_lines.append(lineno)
    if not in_data:
        raise _fail(path, None, "no @data line found; is this a .ts file of the UCR/UEA archive?")
    if not cases:
        raise _fail(path, None, "no cases after @data.")
    if has_labels:
        y, _ = _labels_to_tensor(raw_labels, header_classes, path, label_lines)
    else:
        y = torch.full((len(cases),), -1, dtype=torch.int64)
    X, lengths_t = _stack(cases, lengths, dtype)
    return UCRData(X, y, lengths_t)


def load_ucr(path, *, missing: str = "interpolate", dtype: torch.dtype = torch.float32,
             sep: Optional[str] = None) -> UCRData:
    """Read a UCR/UEA archive file (``.ts`` or ``.tsv``) into padded tensors.

    Formats:
        - ``.ts`` (UEA/UCR, sktime): ``@`` headers (``@classLabel true 1 2 3`` lists the classes),
          then ``@data`` and one case per line: dimensions separated by ``:``, values by ``,``, the
          class label last. Univariate or multivariate, equal or unequal lengths; ``?`` marks a
          missing value. Time-stamped data is refused with a clear error.
        - ``.tsv`` / ``.txt`` / ``.csv`` (UCR 2018): one series per line, the class label first, then
          the values separated by tabs (or commas / spaces). ``NaN`` marks a missing value; trailing
          ``NaN`` are the padding of a shorter series (the UCR convention), so they set its length.

    Args:
        path: the file.
        missing: what to do with missing values inside a series: "interpolate" (default; linear
            between observed neighbours, constant beyond the first/last one), "zero", "nan" (keep
            NaN — soft-DTW refuses them, so impute before use) or "raise".
        dtype: floating dtype of X.
        sep: value separator of a ``.tsv`` file (default: tab, else comma, else whitespace).

    Returns:
        :class:`UCRData` ``(X, y, lengths)``: X `(P, T, D)` float tensor with T the longest series
        and zeros past each series' length; y `(P,)` int64 labels — the labels themselves when they
        are integers (as in the UCR archive), otherwise their index in the ``@classLabel`` list (or
        in the sorted labels of a .tsv), so train and test files agree; -1 for ``@classLabel
        false``; lengths `(P,)` int64. Pass ``lengths`` as ``x_lengths`` to the other functions.

    Raises:
        FileNotFoundError: no such file.
        UCRFormatError (a ValueError): malformed file; the message names the file, line and reason.

    Example:
        >>> X, y, lengths = load_ucr("GunPoint_TRAIN.ts")  # doctest: +SKIP
    """
    if missing not in _MISSING_MODES:
        raise ValueError(f"missing must be one of {_MISSING_MODES}; got {missing!r}.")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch dtype such as torch.float32; got {dtype!r}.")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no such file: {path!r}. load_ucr reads UCR/UEA archive files you have on disk "
            f"(e.g. GunPoint/GunPoint_TRAIN.ts or GunPoint_TRAIN.tsv from timeseriesclassification.com)."
        )
    ext = os.path.splitext(path)[1].lower()
    if ext == ".ts":
        return _read_ts(path, missing, dtype)
    if ext in (".tsv", ".txt", ".csv"):
        return _read_tsv(path, missing, dtype, sep)
    if ext == ".arff":
        raise ValueError(f"{path}: .arff files are not supported; use the .ts or .tsv file of the same data set.")
    # Unknown extension: sniff.
    with open(path, "r", encoding="utf-8") as fh:
        head = fh.read(4096)
    if any(line.strip().startswith("@") for line in head.splitlines()):
        return _read_ts(path, missing, dtype)
    return _read_tsv(path, missing, dtype, sep)
