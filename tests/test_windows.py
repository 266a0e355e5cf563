"""Bands as per-row column ranges: equal to tslearn's masks, and the path check."""
import itertools

import pytest
import torch
from tslearn.metrics import itakura_mask, sakoe_chiba_mask

from softdtw._windows import build_window, valid_cells, window_has_path

SIZES = [1, 2, 3, 7, 10, 16, 31, 33]


def _mask(n, m, r=None, s=None):
    xl, yl = torch.tensor([n]), torch.tensor([m])
    w = build_window(xl, yl, n, m, r, s)
    return w, valid_cells(xl, yl, w, n, m)[0].numpy()


@pytest.mark.parametrize("n,m", list(itertools.product(SIZES, SIZES)))
def test_sakoe_chiba_equals_tslearn(n, m):
    for r in (0, 1, 3):
        w, mine = _mask(n, m, r=r)
        assert (mine == sakoe_chiba_mask(n, m, r)).all()
        assert window_has_path(w, torch.tensor([n]), torch.tensor([m])).item()


@pytest.mark.parametrize("n,m", list(itertools.product(SIZES, SIZES)))
def test_itakura_equals_tslearn_and_path_check_agrees(n, m):
    for s in (1.0, 1.5, 2.0, 3.0):
        try:
            ref = itakura_mask(n, m, s)
        except RuntimeWarning:  # tslearn: "no admissible path"
            ref = None
        w, mine = _mask(n, m, s=s)
        ok = window_has_path(w, torch.tensor([n]), torch.tensor([m])).item()
        assert ok == (ref is not None)
        if ref is not None:
            assert (mine == ref).all()


def test_batched_window_uses_each_pairs_lengths():
    xl, yl = torch.tensor([10, 4, 7]), torch.tensor([6, 9, 7])
    w = build_window(xl, yl, 10, 9, 1, None)
    assert w.shape == (3, 10, 2) and w.dtype == torch.int32
    for b in range(3):
        n, m = int(xl[b]), int(yl[b])
        got = valid_cells(xl, yl, w, 10, 9)[b, :n, :m].numpy()
        assert (got == sakoe_chiba_mask(n, m, 1)).all()
        assert (w[b, n:] == 0).all()  # rows past the length are empty


def test_no_constraint_is_none():
    assert build_window(torch.tensor([3]), torch.tensor([4]), 3, 4, None, None) is None
