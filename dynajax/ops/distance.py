"""Pairwise distances: ``cdist`` (between the rows of two batches of matrices) and ``pdist`` (between the
rows of one matrix, the upper triangle flattened). Both are the ``p``-norms of row differences
(``vector_norm``), so the gradient at a zero distance is 0, as PyTorch's."""
from __future__ import annotations

from .. import _dtype
from .._tensor import Tensor
from .elementwise import broadcast_error
from .index import index_select
from .layout import triu_indices
from .reduce import vector_norm
from .shape import broadcast_shapes, expand, reshape

__all__ = ["cdist", "pdist"]

_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """``(..., P, R)`` distances between the rows of ``x1`` ``(..., P, M)`` and ``x2`` ``(..., R, M)``
    (batch dims broadcast). Computed directly from the differences in every ``compute_mode``."""
    if compute_mode not in _MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    for name, t in (("X1", x1), ("X2", x2)):
        if not _dtype.is_float(t._v.dtype):
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: {t.dtype.legacy_name}")
    for name, t in (("X1", x1), ("X2", x2)):
        if t._v.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t._v.ndim}D")
    s1, s2 = tuple(x1._v.shape), tuple(x2._v.shape)
    if s1[-1] != s2[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {s1[-1]} X2: {s2[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if x1._v.dtype != x2._v.dtype:
        raise RuntimeError(f"expected scalar type {x1.dtype.legacy_name} but found {x2.dtype.legacy_name}")
    try:
        batch = tuple(broadcast_shapes(s1[:-2], s2[:-2]))
    except (ValueError, RuntimeError) as exc:
        broadcast_error(exc, x1[..., 0, 0], x2[..., 0, 0])   # (names the batch dims that do not match)
        raise
    (n1, m), n2 = s1[-2:], s2[-2]
    a = expand(reshape(x1, s1[:-1] + (1, m)), batch + (n1, n2, m))
    b = expand(reshape(x2, s2[:-2] + (1, n2, m)), batch + (n1, n2, m))
    return vector_norm(a - b, p, -1)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """The distances between every pair of rows ``i < j`` of an ``(N, M)`` matrix, in row-major order of the
    pairs: ``N * (N - 1) / 2`` of them."""
    if input._v.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input._v.ndim}D")
    if not _dtype.is_float(input._v.dtype):
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input._v.shape[0]
    pairs = triu_indices(n, n, 1)
    return vector_norm(index_select(input, 0, pairs[0]) - index_select(input, 0, pairs[1]), p, -1)
