"""Other soft-DTW libraries' APIs on softdtw's engine: moving over is an import change.

One module per library keeps its names, positional order, defaults and return types:

==========================================  =========================================================
before                                      after
==========================================  =========================================================
``from soft_dtw_cuda import SoftDTW``       ``from softdtw.compat.maghoumi import SoftDTW``
``import pysdtw``                           ``from softdtw.compat import pysdtw``
``from softdtw_cuda import SoftDTW, ...``   ``from softdtw.compat.sdtw_cuda_torch import SoftDTW, ...``
``from tslearn.metrics import               ``from softdtw.compat.tslearn import SoftDTWLossPyTorch``
SoftDTWLossPyTorch``
==========================================  =========================================================

- :mod:`softdtw.compat.maghoumi`: Maghoumi's pytorch-softdtw-cuda, ``SoftDTW(use_cuda, gamma, normalize,
  bandwidth, dist_func)``.
- :mod:`softdtw.compat.pysdtw`: pysdtw, ``SoftDTW(gamma, dist_func, use_cuda, bandwidth)`` with
  PackedSequence inputs, and ``distance``.
- :mod:`softdtw.compat.sdtw_cuda_torch`: sdtw-cuda-torch (``softdtw_cuda``), ``SoftDTW(*, gamma, bandwidth,
  normalize, dist, fused)``, ``softdtw``, ``softdtw_barycenter`` (a Tensor).
- :mod:`softdtw.compat.tslearn`: tslearn's ``SoftDTWLossPyTorch(gamma, normalize, dist_func, ...)``.

Each adapter only maps arguments onto :func:`softdtw.soft_dtw` / :func:`softdtw.soft_dtw_divergence`
(no maths of its own). Where a library's convention is sane (bandwidth None or 0 meaning no band) the
adapter follows it; where it is a known bug (normalize refused for N != M, an absolute band that makes
pairs of different lengths infinite, float64 rounded through float32) the adapter does better; each
module's docstring lists which. The native :class:`softdtw.SoftDTW` takes only ``gamma`` positionally
and names the adapter when called in another library's order:

    >>> import softdtw
    >>> softdtw.SoftDTW(True, 0.1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: softdtw.SoftDTW takes only gamma positionally ... `from softdtw.compat.maghoumi import SoftDTW`...
"""
from . import maghoumi, pysdtw, sdtw_cuda_torch, tslearn

__all__ = ["maghoumi", "pysdtw", "sdtw_cuda_torch", "tslearn"]
