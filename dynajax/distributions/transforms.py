"""Elementwise bijections for ``TransformedDistribution``, as ``torch.distributions.transforms``: each maps
``x`` to ``y`` and back and gives ``log |dy/dx|``. ``cache_size=1`` keeps the last ``(x, y)`` pair, so the
inverse of a value the transform just made is the exact ``x`` it came from (a tanh-squashed draw's log_prob
would otherwise take atanh of a number rounded to +-1)."""
from __future__ import annotations

import math

from . import constraints

__all__ = ["Transform", "ExpTransform", "AffineTransform", "SigmoidTransform", "TanhTransform",
           "ComposeTransform"]


class Transform:
    """``y = t(x)``, ``x = t.inv(y)``, ``t.log_abs_det_jacobian(x, y)``; elementwise (``event_dim`` 0)."""

    bijective = True
    sign = 1
    event_dim = 0
    domain = constraints.real
    codomain = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._cached = None

    @property
    def inv(self) -> "_InverseTransform":
        return _InverseTransform(self)

    def __call__(self, x):
        if self._cache_size and self._cached is not None and self._cached[0] is x:
            return self._cached[1]
        y = self._call(x)
        if self._cache_size:
            self._cached = (x, y)
        return y

    def _inv_call(self, y):
        if self._cache_size and self._cached is not None and self._cached[1] is y:
            return self._cached[0]
        x = self._inverse(y)
        if self._cache_size:
            self._cached = (x, y)
        return x

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


class _InverseTransform(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__()
        self._inv = transform
        self.domain, self.codomain, self.sign = transform.codomain, transform.domain, transform.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)


class ExpTransform(Transform):
    codomain = constraints.positive

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class SigmoidTransform(Transform):
    codomain = constraints.unit_interval

    def _call(self, x):
        import numpy as np
        info = np.finfo(x._v.dtype)
        return x.sigmoid().clamp(min=float(info.tiny), max=1.0 - float(info.eps))

    def _inverse(self, y):
        import numpy as np
        info = np.finfo(y._v.dtype)
        y = y.clamp(min=float(info.tiny), max=1.0 - float(info.eps))
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        from ..nn.functional import softplus
        return -softplus(-x) - softplus(x)


class TanhTransform(Transform):
    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return 0.5 * ((1 + y).log() - (1 - y).log())     # atanh

    def log_abs_det_jacobian(self, x, y):
        # log(1 - tanh(x)^2), written so that it stays finite for large |x|
        from ..nn.functional import softplus
        return 2.0 * (math.log(2.0) - x - softplus(-2.0 * x))


class AffineTransform(Transform):
    """``y = loc + scale * x``."""

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0) -> None:
        if event_dim != 0:
            raise NotImplementedError("AffineTransform here is elementwise (event_dim=0)")
        super().__init__(cache_size)
        self.loc, self.scale = loc, scale

    @property
    def sign(self):
        from .._tensor import Tensor
        return self.scale.sign() if isinstance(self.scale, Tensor) else (1 if self.scale > 0 else -1)

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        from .._tensor import Tensor
        from ..ops.creation import full_like
        from ..ops.shape import broadcast_tensors
        if isinstance(self.scale, Tensor):
            return broadcast_tensors(self.scale.abs().log(), x)[0]
        return full_like(x, math.log(abs(self.scale)))


class ComposeTransform(Transform):
    """``parts`` applied in order."""

    def __init__(self, parts, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.parts = list(parts)
        if self.parts:
            self.domain, self.codomain = self.parts[0].domain, self.parts[-1].codomain

    def _call(self, x):
        for t in self.parts:
            x = t(x)
        return x

    def _inverse(self, y):
        for t in reversed(self.parts):
            y = t.inv(y)
        return y

    def log_abs_det_jacobian(self, x, y):
        total = 0
        for t in self.parts:
            nxt = t(x)
            total = total + t.log_abs_det_jacobian(x, nxt)
            x = nxt
        return total
