"""softdtw: soft dynamic time warping for PyTorch — a fast, stable, differentiable loss and toolkit.

Functions: :func:`soft_dtw`, :func:`soft_dtw_divergence`, :func:`soft_dtw_from_cost`,
:func:`soft_dtw_alignment`, :func:`dtw`, :func:`dtw_path`. Modules: :class:`SoftDTW`,
:class:`SoftDTWDivergence`.
"""
from .functional import (
    dtw,
    dtw_path,
    soft_dtw,
    soft_dtw_alignment,
    soft_dtw_divergence,
    soft_dtw_from_cost,
)
from .nn import SoftDTW, SoftDTWDivergence

__version__ = "0.1.0"

__all__ = [
    "soft_dtw", "soft_dtw_divergence", "soft_dtw_from_cost", "soft_dtw_alignment", "dtw", "dtw_path",
    "SoftDTW", "SoftDTWDivergence", "__version__",
]
