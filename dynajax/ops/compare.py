"""Tolerance and whole-tensor comparisons: ``isclose``, ``allclose``, ``equal`` (PyTorch's rules: the
tolerance test ``|a - b| <= atol + |rtol * b|`` or ``a == b``, NaNs equal only with ``equal_nan``)."""
from __future__ import annotations

import jax.numpy as jnp

from .. import _dtype
from .._tensor import Tensor
from .elementwise import broadcast_error, export
from .registry import apply, op

__all__ = ["allclose", "equal", "isclose"]


@op("isclose", error=broadcast_error)
def _isclose(x, y, *, rtol, atol, equal_nan, dtype):
    close = x == y
    if equal_nan and x.dtype.kind in "fc":
        close = close | (jnp.isnan(x) & jnp.isnan(y))
    if rtol == 0 and atol == 0:
        return close
    # (bools and integers are measured in the default float dtype, as PyTorch's ``rtol * other`` promotes)
    xf, yf = x.astype(dtype), y.astype(dtype)
    err = jnp.abs(xf - yf)
    return close | (jnp.isfinite(err) & (err <= atol + jnp.abs(rtol * yf)))


def _check(name: str, input, other, rtol: float, atol: float) -> None:
    for pos, (arg, v) in enumerate((("input", input), ("other", other)), 1):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(v).__name__}")
    if input._v.dtype != other._v.dtype:
        raise RuntimeError(f"{input.dtype.legacy_name} did not match {other.dtype.legacy_name}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (or equal), as a bool tensor."""
    _check("isclose", input, other, rtol, atol)
    d = input._v.dtype
    d = d if _dtype.is_float(d) else _dtype.default_float_np()
    return apply(_isclose, input, other, rtol=float(rtol), atol=float(atol), equal_nan=bool(equal_nan), dtype=d)


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element of ``input`` is close to ``other``'s (broadcast), as a Python bool."""
    _check("allclose", input, other, rtol, atol)
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input: Tensor, other: Tensor) -> bool:
    """Whether ``input`` and ``other`` have the same shape and elements (NaN is not equal to itself)."""
    for pos, (arg, v) in enumerate((("input", input), ("other", other)), 1):
        if not isinstance(v, Tensor):
            raise TypeError(f"equal(): argument '{arg}' (position {pos}) must be Tensor, not {type(v).__name__}")
    if tuple(input._v.shape) != tuple(other._v.shape):
        return False
    return bool((input == other).all().item())


export(isclose)
export(allclose)
export(equal)
