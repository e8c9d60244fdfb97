"""Reductions over dims: ``sum``, ``mean``, and ``sum_to_shape`` (the engine's unbroadcast)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim, method
from .registry import apply, op


def norm_dims(dim, ndim: int) -> tuple | None:
    """``dim`` (int, sequence or None) as a sorted tuple of non-negative dims; None means all."""
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return None
        dims = tuple(sorted(_wrap_dim(int(d), ndim) for d in dim))
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"dim {dims[0]} appears multiple times in the list of dims")
        return dims
    return (_wrap_dim(int(dim), ndim),)


def kept_shape(shape: tuple, dims: tuple | None) -> tuple:
    """``shape`` with the reduced ``dims`` set to 1 (keepdim=True's result)."""
    if dims is None:
        return (1,) * len(shape)
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


def expand_back(g: Tensor, shape: tuple, dims, keepdim: bool) -> Tensor:
    """Broadcast a reduction's cotangent back to the input ``shape``."""
    from .shape import expand, reshape
    if not keepdim:
        g = reshape(g, kept_shape(shape, dims))
    return expand(g, shape)


# ---------------------------------------------------------------- sum_to_shape
@op("sum_to_shape")
def _sum_to(x, *, shape, in_shape):
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1)
    return jnp.sum(x, axis=axes, dtype=x.dtype).reshape(shape) if axes else x.reshape(shape)


@_sum_to.defvjp
def _sum_to_vjp(g, out, x, *, shape, in_shape):
    from .shape import expand
    return (expand(g, in_shape),)


def sum_to_shape(x: Tensor, shape) -> Tensor:
    """Sum ``x`` over broadcast dims so that it has ``shape`` (undoes broadcasting)."""
    shape = tuple(shape)
    if tuple(x._value.shape) == shape:
        return x
    return apply(_sum_to, x, shape=shape, in_shape=tuple(x._value.shape))


@method()
def sum_to_size(self: Tensor, *size) -> Tensor:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return sum_to_shape(self, tuple(size))


# ---------------------------------------------------------------- sum / mean
@op("sum")
def _sum(x, *, dims, keepdim, dtype, shape):
    return jnp.sum(x, axis=dims, keepdims=keepdim, dtype=dtype)


_sum.defvjp(lambda g, out, x, *, dims, keepdim, dtype, shape: (expand_back(g, shape, dims, keepdim),))


def _sum_dtype(x: Tensor, dtype) -> np.dtype:
    if dtype is not None:
        return _dtype.to_np(dtype)
    d = x._value.dtype
    return np.dtype(np.int64) if _dtype.is_integral(d, include_bool=True) else d


@method()
def sum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum over ``dim`` (all dims if None); ints and bools sum to int64."""
    shape = tuple(input._value.shape)
    return apply(_sum, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim),
                 dtype=_sum_dtype(input, dtype), shape=shape)


@op("mean")
def _mean(x, *, dims, keepdim, dtype, shape):
    return jnp.mean(x, axis=dims, keepdims=keepdim, dtype=dtype).astype(dtype)


@_mean.defvjp
def _mean_vjp(g, out, x, *, dims, keepdim, dtype, shape):
    n = int(np.prod([shape[d] for d in (dims if dims is not None else range(len(shape)))]))
    return (expand_back(g / n if n else g * float("nan"), shape, dims, keepdim),)


@method()
def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Arithmetic mean over ``dim``; needs a floating dtype (or ``dtype=``)."""
    d = _dtype.to_np(dtype) if dtype is not None else input._value.dtype
    if not _dtype.is_float(d):
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {_dtype.from_np(d).legacy_name}")
    shape = tuple(input._value.shape)
    return apply(_mean, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim), dtype=d, shape=shape)
