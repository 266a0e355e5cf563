"""A scikit-learn-compatible base (get_params / set_params / repr) without depending on scikit-learn."""
from __future__ import annotations

import inspect

import numpy as np
import torch


class BaseEstimator:
    """Parameters are the keyword arguments of ``__init__``, stored under the same names."""

    @classmethod
    def _param_names(cls):
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> dict:
        """The estimator's parameters as a dict (scikit-learn API)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set parameters by name (scikit-learn API); returns self."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid parameters are {valid}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        parts = []
        for name in self._param_names():
            value = getattr(self, name)
            default = sig.parameters[name].default
            if default is inspect.Parameter.empty or not _same(value, default):
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _check_fitted(self, attr: str) -> None:
        if not hasattr(self, attr):
            raise RuntimeError(
                f"this {type(self).__name__} is not fitted yet; call .fit(X, y) before using it."
            )


def _same(a, b) -> bool:
    if isinstance(a, (torch.Tensor, np.ndarray)) or isinstance(b, (torch.Tensor, np.ndarray)):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # pragma: no cover - exotic values
        return a is b


class LabelEncoder:
    """Labels of any kind (ints, strings; list, NumPy or torch) <-> codes 0..K-1."""

    def __init__(self, y):
        self.was_tensor = isinstance(y, torch.Tensor)
        arr = y.detach().cpu().numpy() if self.was_tensor else np.asarray(y)
        if arr.ndim != 1:
            raise ValueError(f"y must be one label per series, shape (P,); got shape {arr.shape}.")
        self.classes_, codes = np.unique(arr, return_inverse=True)
        self.codes = torch.as_tensor(codes.reshape(-1), dtype=torch.int64)

    def decode(self, codes: torch.Tensor):
        labels = self.classes_[codes.detach().cpu().numpy()]
        if self.was_tensor and labels.dtype.kind in "iufb":
            return torch.as_tensor(labels)
        return labels
