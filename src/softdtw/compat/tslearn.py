"""tslearn's PyTorch soft-DTW loss on softdtw's engine: an import change.

.. code-block:: python

    from tslearn.metrics import SoftDTWLossPyTorch           # before
    from softdtw.compat.tslearn import SoftDTWLossPyTorch    # after

Same name, positional order, defaults and return type: ``SoftDTWLossPyTorch(gamma=1.0, normalize=False,
dist_func=None, global_constraint=None, sakoe_chiba_radius=None, itakura_max_slope=None)``, called as
``loss(x, y)`` on `(B, N, D)`, `(B, M, D)` and returning `(B,)`. (tslearn's NumPy functions map to the
native API function by function: README, "From tslearn".)

Follows tslearn's conventions, which are softdtw's own:

- ``global_constraint`` "sakoe_chiba" (radius ``sakoe_chiba_radius``, default 1) or "itakura" (slope
  ``itakura_max_slope``, default 2.0); with None, whichever of the two is set. Same masks as tslearn's
  for any N, M (softdtw builds its bands from tslearn's definitions).
- ``normalize=True`` is the soft-DTW divergence, with each self-term over its own length (N != M works).
- ``dist_func(x, y) -> (B, N, M)``, default squared Euclidean (computed inside the kernel here).
- Integer inputs (tslearn's own example uses ``torch.arange``) are read as floats.

Does better:

- float64 stays float64 (tslearn rounds R through float32 and copies every call to the CPU and NumPy).
- GPU tensors run on the GPU; x and y may be PackedSequences.
- It does not write into the cost returned by ``dist_func`` (tslearn sets the masked cells to inf in
  place).
- A radius and a slope both set with ``global_constraint=None`` raise a ValueError at construction
  that says which argument to set (tslearn raises a ``RuntimeWarning`` as an exception at the first call).
- Arguments are checked, so a call in another library's order raises instead of being misread
  (``SoftDTWLossPyTorch(0.1, dist)`` — pysdtw's order — is a TypeError).

Example (tslearn's own):
    >>> import torch
    >>> from softdtw.compat.tslearn import SoftDTWLossPyTorch
    >>> soft_dtw_loss = SoftDTWLossPyTorch(gamma=0.1)
    >>> x = torch.zeros((4, 3, 2), requires_grad=True)
    >>> y = torch.arange(0, 24).reshape(4, 3, 2)
    >>> soft_dtw_loss_mean_value = soft_dtw_loss(x, y).mean()
    >>> print(soft_dtw_loss_mean_value)
    tensor(1081., grad_fn=<MeanBackward0>)
    >>> soft_dtw_loss_mean_value.backward()
    >>> print(x.grad.shape)
    torch.Size([4, 3, 2])
"""
from __future__ import annotations

import numbers

import torch

from .. import costs
from . import _common

__all__ = ["SoftDTWLossPyTorch"]

_LIB = "tslearn"
_CONSTRAINTS = (None, "", "itakura", "sakoe_chiba")


def _native_options(gamma=1.0, normalize=False, dist_func=None, global_constraint=None,
                    sakoe_chiba_radius=None, itakura_max_slope=None) -> dict:
    """The native ``softdtw.SoftDTW`` keyword arguments this library's arguments stand for."""
    options = {"gamma": _common.check_gamma(gamma, _LIB)}
    if _common.check_bool(normalize, "normalize", _LIB):
        options["normalize"] = True
    _common.check_dist_func(dist_func, _LIB)
    if dist_func is not None and dist_func is not SoftDTWLossPyTorch._euclidean_squared_dist:
        options["cost"] = dist_func
    if global_constraint not in _CONSTRAINTS:
        raise ValueError(
            f"global_constraint must be None, 'sakoe_chiba' or 'itakura' (as tslearn); got {global_constraint!r}."
        )
    for name, value in (("sakoe_chiba_radius", sakoe_chiba_radius), ("itakura_max_slope", itakura_max_slope)):
        if value is not None and (_common.is_bool(value) or not isinstance(value, numbers.Real)):
            raise TypeError(f"{name} must be a number or None; got {_common.show(value)}.")
    if not global_constraint and sakoe_chiba_radius is not None and itakura_max_slope is not None:
        raise ValueError(
            f"sakoe_chiba_radius={sakoe_chiba_radius!r} and itakura_max_slope={itakura_max_slope!r} are both set "
            f"but global_constraint is None, so the constraint to use is ambiguous (tslearn then raises and "
            f"uses none). Set global_constraint='sakoe_chiba' or 'itakura', or drop one of the two."
        )
    if global_constraint == "sakoe_chiba" or (not global_constraint and sakoe_chiba_radius is not None):
        options["bandwidth"] = 1 if sakoe_chiba_radius is None else sakoe_chiba_radius
    elif global_constraint == "itakura" or (not global_constraint and itakura_max_slope is not None):
        options["itakura_max_slope"] = 2.0 if itakura_max_slope is None else itakura_max_slope
    return options


def _as_float(t, other):
    """Integer tensors read as floats (the other input's float dtype, else the default dtype)."""
    if isinstance(t, torch.Tensor) and not (t.is_floating_point() or t.is_complex()):
        ref = other if isinstance(other, torch.Tensor) and other.is_floating_point() else None
        return t.to(ref.dtype if ref is not None else torch.get_default_dtype())
    return t


class SoftDTWLossPyTorch(torch.nn.Module):
    """Soft-DTW loss with tslearn's signature (module docstring: what follows it, what does better).

    Args:
        gamma: smoothing >= 0 (0 is hard DTW; a tensor / nn.Parameter may be learned).
        normalize: the soft-DTW divergence instead of soft-DTW.
        dist_func: callable (x `(B, N, D)`, y `(B, M, D)`) -> `(B, N, M)`; None for squared Euclidean.
        global_constraint: None, "sakoe_chiba" or "itakura".
        sakoe_chiba_radius: Sakoe–Chiba radius (default 1 when global_constraint="sakoe_chiba").
        itakura_max_slope: Itakura slope (default 2.0 when global_constraint="itakura").

    Shape:
        - x: `(B, N, D)`, y: `(B, M, D)`.
        - Output: `(B,)`, dtype of x (of y if x holds integers).

    Devices: CPU, CUDA. Differentiable in: x, y, gamma.
    """

    def __init__(self, gamma=1.0, normalize=False, dist_func=None, global_constraint=None,
                 sakoe_chiba_radius=None, itakura_max_slope=None):
        super().__init__()
        _native_options(gamma, normalize, dist_func, global_constraint, sakoe_chiba_radius, itakura_max_slope)
        self.gamma = gamma
        self.normalize = normalize
        self.dist_func = dist_func if dist_func is not None else self._euclidean_squared_dist
        self.global_constraint = global_constraint
        self.sakoe_chiba_radius = sakoe_chiba_radius
        self.itakura_max_slope = itakura_max_slope

    @staticmethod
    def _euclidean_squared_dist(x, y):
        """Squared Euclidean cost between each step of x `(B, N, D)` and y `(B, M, D)`: `(B, N, M)`."""
        return costs.sqeuclidean(x, y)

    def forward(self, x, y):
        """Soft-DTW (or the divergence) between x[b] and y[b]: `(B,)`."""
        options = _native_options(self.gamma, self.normalize, self.dist_func, self.global_constraint,
                                  self.sakoe_chiba_radius, self.itakura_max_slope)
        x, y = _as_float(x, y), _as_float(y, x)
        return _common.soft_dtw(x, y, options)
