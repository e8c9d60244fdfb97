"""Sorting and searching: ``sort``, ``argsort``, ``topk``, ``kthvalue``, ``unique``,
``searchsorted``, ``bucketize``.

Values come from ``take_along(x, indices)``, so their gradient scatters back
through the indices; the indices themselves are integers and need none.
``unique`` has a data-dependent shape, so it runs eagerly on the host.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim, method
from .convert import clone
from .creation import tensor, zeros
from .elementwise import check_out, with_out
from .reduce import return_type, select_along, selecting, take_along
from .registry import apply, op

__all__ = ["sort", "argsort", "msort", "topk", "kthvalue", "unique", "unique_consecutive", "searchsorted",
           "bucketize"]

_sort_t = return_type("sort", "values", "indices")
_topk_t = return_type("topk", "values", "indices")
_kthvalue_t = return_type("kthvalue", "values", "indices")


# ---------------------------------------------------------------- sort / argsort / topk
@op("argsort")
def _argsort(x, *, axis, descending, k):
    """Stable sorting permutation along ``axis`` (NaNs count as largest), its first ``k`` entries."""
    order = jnp.argsort(x, axis=axis, stable=True, descending=descending)
    if k is not None:
        order = jax.lax.slice_in_dim(order, 0, k, axis=axis)
    return order.astype(jnp.int64)


def _order(input: Tensor, dim: int, descending: bool, k=None) -> tuple:
    """``(axis, indices)`` of the (first ``k``) sorted elements along ``dim``; axis None for 0-d."""
    shape = tuple(input._v.shape)
    if not shape:  # a 0-d tensor sorts to itself
        _wrap_dim(dim, 0)
        if k is not None and k not in (0, 1):
            raise RuntimeError("selected index k out of range")
        return None, zeros((), dtype=_dtype.int64)
    axis = _wrap_dim(dim, len(shape))
    if k is not None and not 0 <= k <= shape[axis]:
        raise RuntimeError("selected index k out of range")
    return axis, apply(_argsort, input, axis=axis, descending=bool(descending), k=k)


def _by_order(result, input: Tensor, dim: int, descending: bool, k=None):
    """``result(values, indices)`` of the (first ``k``) sorted elements along ``dim``."""
    axis, idx = _order(input, dim, descending, k)
    return result(clone(input) if axis is None else take_along(input, idx, axis), idx)


@method()
def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False):
    """``(values, indices)`` sorted along ``dim`` (always stable; NaNs count as largest).

    >>> dynajax.sort(dynajax.tensor([3., 1., 2.])).indices
    tensor([1, 2, 0])
    """
    return _by_order(_sort_t, input, dim, descending)


@method()
def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The indices that sort ``input`` along ``dim``."""
    return _order(input, dim, descending)[1]


@method()
def msort(input: Tensor) -> Tensor:
    """``input`` sorted along dim 0."""
    return sort(input, 0).values


@method()
def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """``(values, indices)`` of the ``k`` largest (or smallest) elements along ``dim``, in sorted order."""
    return _by_order(_topk_t, input, dim, largest, int(k))


# ---------------------------------------------------------------- kthvalue
_kthvalue = selecting("kthvalue", lambda x, axis, *, k: jax.lax.slice_in_dim(
    jnp.argsort(x, axis=axis, stable=True), k - 1, k, axis=axis))


@method()
def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False, *, out=None):
    """``(values, indices)`` of the ``k``-th smallest element (1-based) along ``dim``."""
    check_out(out, input, name="kthvalue")
    shape = tuple(input._v.shape)
    axis = _wrap_dim(dim, len(shape))
    n = shape[axis] if shape else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {axis}")
    r = select_along(_kthvalue, input, dim, keepdim, "kthvalue", _kthvalue_t, k=int(k))
    if out is not None:
        r = _kthvalue_t(*(with_out(x, o, "kthvalue") for x, o in zip(r, out)))
    return r


# ---------------------------------------------------------------- unique (eager: data-dependent shape)
def _unique_result(vals, inverse, counts, input: Tensor, return_inverse: bool, return_counts: bool):
    out = [tensor(vals, dtype=input.dtype)]
    if return_inverse:
        out.append(tensor(np.asarray(inverse, np.int64)))
    if return_counts:
        out.append(tensor(np.asarray(counts, np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


@method()
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None):
    """The distinct values (sorted), optionally with the inverse map and counts; eager only."""
    a = np.asarray(input.detach()._value)
    if dim is None:
        vals, inv, counts = np.unique(a, return_inverse=True, return_counts=True, equal_nan=False)
        inv = inv.reshape(a.shape)
    else:
        axis = _wrap_dim(dim, a.ndim)
        vals, inv, counts = np.unique(a, return_inverse=True, return_counts=True, axis=axis, equal_nan=False)
        inv = inv.reshape(-1)
    return _unique_result(vals, inv, counts, input, return_inverse, return_counts)


@method()
def unique_consecutive(input: Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None):
    """Collapse runs of equal consecutive values (or slices along ``dim``); eager only."""
    a = np.asarray(input.detach()._value)
    if dim is not None and a.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    axis = 0 if dim is None else _wrap_dim(dim, a.ndim)
    flat = a.reshape(-1) if dim is None else np.moveaxis(a, axis, 0)
    n = flat.shape[0]
    if n == 0:
        starts = np.zeros(0, np.int64)
    else:
        # (the row length given, not -1: a single element, a 0-d input's, leaves no rows to infer it from)
        diff = (flat[1:] != flat[:-1]).reshape(n - 1, math.prod(flat.shape[1:])).any(axis=1)
        starts = np.concatenate([[0], np.nonzero(diff)[0] + 1])
    vals = flat[starts] if dim is None else np.moveaxis(flat[starts], 0, axis)
    inv = np.cumsum(np.isin(np.arange(n), starts)) - 1
    counts = np.diff(np.append(starts, n))
    return _unique_result(vals, inv.reshape(a.shape) if dim is None else inv, counts, input,
                          return_inverse, return_counts)


# ---------------------------------------------------------------- searchsorted / bucketize
@op("searchsorted")
def _searchsorted(seq, v, *, side, dtype, out_dtype):
    seq, v = seq.astype(dtype), jnp.asarray(v).astype(dtype)
    if seq.ndim == 1:
        r = jnp.searchsorted(seq, v, side=side)
    else:
        rows = jax.vmap(lambda s, x: jnp.searchsorted(s, x, side=side))
        r = rows(seq.reshape(-1, seq.shape[-1]), v.reshape(-1, v.shape[-1])).reshape(v.shape)
    return r.astype(out_dtype)


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Tensor | None = None, out=None) -> Tensor:
    """Insertion indices of ``input`` into ``sorted_sequence`` (its last dim; leading dims must match)."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    seq_shape = tuple(sorted_sequence._v.shape)
    if len(seq_shape) > 1:
        v_shape = tuple(input._v.shape) if isinstance(input, Tensor) else ()
        if v_shape[:-1] != seq_shape[:-1]:
            raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                               "dimensions of boundaries tensor and input value tensor must match, but we got "
                               f"boundaries tensor {list(seq_shape)} and input value tensor {list(v_shape)}")
    if sorter is not None:
        sorted_sequence = take_along(sorted_sequence.detach(), sorter, len(seq_shape) - 1)
    r = apply(_searchsorted, sorted_sequence, input, side="right" if right else "left",
              dtype=_dtype.result_type(sorted_sequence, input),
              out_dtype=np.dtype(np.int32 if out_int32 else np.int64))
    return with_out(r, out)


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False, out=None) -> Tensor:
    """Index of the bucket of each element of ``input`` given 1-D ``boundaries``."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right, out=out)
