"""Shape-family helpers that build, split or describe tensors: ``tril_indices``/``triu_indices``,
``block_diag``, ``unravel_index``, ``hsplit``/``vsplit``/``dsplit``, ``cross`` and ``Tensor.stride``."""
from __future__ import annotations

import math
import warnings

import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _make, _wrap_dim, method
from .creation import zeros
from .elementwise import broadcast_error, export, remainder
from .join import cat, roll, tensor_split
from .shape import broadcast_tensors, reshape
from .views import _contiguous_strides, layout

__all__ = ["block_diag", "cross", "dsplit", "hsplit", "tril_indices", "triu_indices", "unravel_index", "vsplit"]


# ---------------------------------------------------------------- tril_indices / triu_indices
@_dtype.x64.wrap
def _triangle_indices(name: str, pick, row: int, col: int, offset: int, dtype) -> Tensor:
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    d = _dtype.to_np(_dtype.int64 if dtype is None else dtype)
    if not _dtype.is_integral(d):
        raise NotImplementedError(f"\"{name}\" not implemented for '{_dtype.from_np(d).legacy_name}'")
    r, c = pick(row, offset, col)
    return _make(jnp.asarray(np.stack([r, c]).reshape(2, -1).astype(d)))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The ``(2, N)`` row and column indices of the lower triangle of a ``row x col`` matrix (``offset``:
    which diagonal bounds it), in row-major order."""
    return _triangle_indices("tril_indices", np.tril_indices, row, col, offset, dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The ``(2, N)`` indices of the upper triangle, as :func:`tril_indices`."""
    return _triangle_indices("triu_indices", np.triu_indices, row, col, offset, dtype)


# ---------------------------------------------------------------- block_diag
def block_diag(*tensors) -> Tensor:
    """The tensors (0-d: 1x1, 1-D: one row) as the diagonal blocks of one matrix, zeros elsewhere."""
    for i, t in enumerate(tensors):
        if t._v.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t._v.ndim} dimensions")
    d = _dtype.from_np(_dtype.result_type(*tensors)) if tensors else _dtype.get_default_dtype()
    blocks = [reshape(t, (1, -1) if t._v.ndim < 2 else tuple(t._v.shape)).to(d) for t in tensors]
    widths = [b._v.shape[1] for b in blocks]
    total = sum(widths)
    if not blocks:
        return zeros(1, 0, dtype=d)
    rows, left = [], 0
    for b, w in zip(blocks, widths):
        h = b._v.shape[0]
        rows.append(cat([zeros(h, left, dtype=d), b, zeros(h, total - left - w, dtype=d)], 1))
        left += w
    return cat(rows, 0)


# ---------------------------------------------------------------- unravel_index
def unravel_index(indices: Tensor, shape) -> tuple:
    """The coordinates in ``shape`` of flat ``indices`` (taken modulo the size), one tensor per dim."""
    if not isinstance(indices, Tensor):
        raise TypeError(f"expected 'indices' to be a Tensor, but got {type(indices).__name__}")
    if not _dtype.is_integral(indices._v.dtype):
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {shape}")
    if not shape:
        return ()
    flat = remainder(indices, math.prod(shape)) if math.prod(shape) else indices
    coords = []
    for s in reversed(shape[1:]):
        coords.append(remainder(flat, s))
        flat = flat.div(s, rounding_mode="floor")
    coords.append(flat)
    return tuple(reversed(coords))


# ---------------------------------------------------------------- hsplit / vsplit / dsplit
def _split_along(name: str, input: Tensor, sections, dim: int, min_ndim: int) -> tuple:
    nd = input._v.ndim
    if nd < min_ndim:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {min_ndim} dimension, but got a tensor "
                           f"with {nd} dimensions!")
    if isinstance(sections, (int, np.integer)):
        size = input._v.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                               f"dimension {size} is not divisible by the split_size {sections}!")
    elif not isinstance(sections, (Tensor, list, tuple)):
        raise TypeError(f"{name}() received an invalid combination of arguments - got (Tensor, "
                        f"{type(sections).__name__}), but expected one of: (Tensor input, int sections) or "
                        f"(Tensor input, tuple of ints indices)")
    return tensor_split(input, sections, dim)


def hsplit(input: Tensor, indices_or_sections) -> tuple:
    """``tensor_split`` along dim 1 (dim 0 of a 1-D tensor); equal sections must divide it."""
    return _split_along("hsplit", input, indices_or_sections, 0 if input._v.ndim == 1 else 1, 1)


def vsplit(input: Tensor, indices_or_sections) -> tuple:
    """``tensor_split`` along dim 0 of a tensor of at least 2 dims."""
    return _split_along("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input: Tensor, indices_or_sections) -> tuple:
    """``tensor_split`` along dim 2 of a tensor of at least 3 dims."""
    return _split_along("dsplit", input, indices_or_sections, 2, 3)


for _f in (hsplit, vsplit, dsplit):
    export(_f)


# ---------------------------------------------------------------- cross
def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """The 3-vector cross product along ``dim`` (None: the first dim of size 3, deprecated in PyTorch)."""
    if input._v.dtype != other._v.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype.legacy_name} but found {other.dtype.legacy_name}")
    try:
        a, b = broadcast_tensors(input, other)
    except ValueError as exc:
        broadcast_error(exc, input, other)
        raise
    shape = tuple(a._v.shape)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        d = next((i for i, s in enumerate(shape) if s == 3), None)
        if d is None:
            raise RuntimeError("no dimension of size 3 in input")
    else:
        d = _wrap_dim(dim, len(shape))
        if input._v.shape[d] != 3 or other._v.shape[d] != 3:
            raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                               f"{input._v.shape[d]} and {other._v.shape[d]}")
    # component i is a[i+1] * b[i+2] - a[i+2] * b[i+1] (indices modulo 3): rolls along the dim
    a1, a2, b1, b2 = roll(a, -1, d), roll(a, -2, d), roll(b, -1, d), roll(b, -2, d)
    return a1 * b2 - a2 * b1


export(cross)


# ---------------------------------------------------------------- stride
@method()
def stride(self: Tensor, dim: int | None = None):
    """The strides PyTorch would give this tensor (a view's follow the view ops that made it; a tensor no
    stride model covers reports contiguous strides)."""
    lay = layout(self)
    shape = list(self._v.shape)
    strides = _contiguous_strides(shape) if lay is None or list(lay[0]) != shape else list(lay[1])
    if dim is None:
        return tuple(strides)
    if not shape:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return strides[_wrap_dim(dim, len(shape))]
