"""softdtw: soft dynamic time warping for PyTorch — a fast, stable, differentiable loss and toolkit.

Functions: :func:`soft_dtw`, :func:`soft_dtw_divergence`, :func:`soft_dtw_from_cost`,
:func:`soft_dtw_alignment`, :func:`soft_dtw_hvp`, :func:`dtw`, :func:`dtw_path`. Modules: :class:`SoftDTW`,
:class:`SoftDTWDivergence`; the DILATE loss :func:`dilate_loss`, :class:`DILATELoss`. Toolkit:
:func:`pairwise_soft_dtw`, :func:`soft_dtw_barycenter`,
:class:`SoftDTWKMeans`, :class:`SoftDTWKNeighborsClassifier` (scikit-learn estimators),
:func:`gamma_heuristic`, :mod:`softdtw.datasets`; the ``softdtw``
command line (``softdtw demo``).
"""
from .functional import (
    dtw,
    dtw_path,
    soft_dtw,
    soft_dtw_alignment,
    soft_dtw_divergence,
    soft_dtw_from_cost,
    soft_dtw_hvp,
    HVPResult,
)
from .nn import DILATELoss, SoftDTW, SoftDTWDivergence
from .dilate import dilate_loss
from .pairwise import pairwise_soft_dtw
from .barycenter import BarycenterResult, soft_dtw_barycenter
from .clustering import KMeansResult, SoftDTWKMeans, soft_dtw_kmeans
from .neighbors import SoftDTWKNeighborsClassifier
from ._gamma import gamma_heuristic
from .search import SearchResult, dtw_search
from . import datasets
from .backends import adopt_imported as _adopt_imported

_adopt_imported()  # the backends imported above, found without an import under torch.compile
del _adopt_imported

__version__ = "0.1.0"

__all__ = [
    "soft_dtw", "soft_dtw_divergence", "soft_dtw_from_cost", "soft_dtw_alignment", "dtw", "dtw_path",
    "soft_dtw_hvp", "HVPResult", "SoftDTW", "SoftDTWDivergence", "dilate_loss", "DILATELoss", "pairwise_soft_dtw", "soft_dtw_barycenter",
    "BarycenterResult",
    "SoftDTWKMeans", "soft_dtw_kmeans", "KMeansResult", "SoftDTWKNeighborsClassifier", "gamma_heuristic",
    "datasets", "__version__",
    "dtw_search", "SearchResult",
]
