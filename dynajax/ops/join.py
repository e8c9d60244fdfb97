"""Joining and splitting (``cat``, ``stack``, ``split``, ``unbind`` ...) and the remaining
shape ops (``flip``, ``roll``, ``repeat``, ``tril``, ``diagonal``, ``meshgrid``, in-place
``t_``/``squeeze_`` ...).

Pieces of ``split``/``chunk``/``unbind``/``tensor_split`` and ``diagonal`` are views:
writes through them reach their base (see views.py).
"""
from __future__ import annotations

import builtins

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim, method
from .convert import clone
from .creation import zeros
from .elementwise import check_out, export, with_out
from .index import _FULL, _slice, narrow
from .reduce import norm_dims
from .reduce import sum as _sum
from .registry import VARIADIC, apply, op
from .shape import _permute, _sizes, expand, reshape, squeeze, t, transpose, unsqueeze
from .views import _check_inplace_allowed, _rebind, link_view, make_view

__all__ = [
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "row_stack", "dstack", "column_stack",
    "split", "chunk", "unbind", "tensor_split",
    "flip", "fliplr", "flipud", "roll", "rot90", "tile", "repeat_interleave",
    "tril", "triu", "diag", "diagonal", "diag_embed", "trace", "meshgrid", "cartesian_prod",
    "atleast_1d", "atleast_2d", "atleast_3d",
]


def _shape(x: Tensor) -> tuple:
    return tuple(x._v.shape)


# ---------------------------------------------------------------- pieces along one dim
def _pieces(x: Tensor, dim: int, bounds) -> tuple:
    """Views of ``x`` over the ``(start, stop)`` ranges of ``dim``."""
    return tuple(narrow(x, dim, a, b - a) for a, b in bounds)


def _bounds(sizes) -> list:
    out, start = [], 0
    for s in sizes:
        out.append((start, start + s))
        start += s
    return out


# ---------------------------------------------------------------- cat / stack
@op("cat")
def _cat(*xs, dim, dtype, sizes):
    return jnp.concatenate([x.astype(dtype) for x, s in zip(xs, sizes) if s is not None], axis=dim)


@_cat.defvjp
def _cat_vjp(g, out, *xs, dim, dtype, sizes):
    grads, start = [], 0
    for s in sizes:
        if s is None:  # a skipped legacy empty tensor
            grads.append(zeros(0, dtype=g.dtype))
            continue
        grads.append(narrow(g, dim, start, s))
        start += s
    return tuple(grads)


def _check_cat(tensors, dim: int) -> tuple:
    """PyTorch's checks for ``cat``; returns the wrapped dim and which inputs take part."""
    for i, x in enumerate(tensors):
        if not isinstance(x, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}")
        if x._v.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    # PyTorch's legacy rule: 1-D tensors of shape (0,) are skipped when other tensors take part
    used = [_shape(x) != (0,) for x in tensors]
    if not builtins.any(used):
        used = [True] * len(tensors)
    ref_i = used.index(True)
    ref = _shape(tensors[ref_i])
    d = _wrap_dim(dim, len(ref))
    for i, x in enumerate(tensors):
        if not used[i]:
            continue
        s = _shape(x)
        if len(s) != len(ref):
            raise RuntimeError(f"Tensors must have same number of dimensions: got {len(ref)} and {len(s)}")
        for k in range(len(ref)):
            if k != d and s[k] != ref[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref[k]} but got size {s[k]} for tensor number {i} in the list.")
    return d, used


def cat(tensors, dim: int = 0, *, axis: int | None = None, out=None) -> Tensor:
    """Join ``tensors`` along an existing ``dim``, promoting dtypes like PyTorch.

    >>> dynajax.cat([dynajax.ones(2, 3), dynajax.zeros(1, 3)]).shape
    dynajax.Size([3, 3])
    """
    if isinstance(tensors, Tensor):
        raise TypeError("cat(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    d, used = _check_cat(tensors, dim if axis is None else axis)
    check_out(out, *tensors, name="cat")
    dtype = tensors[0]._v.dtype
    for x in tensors[1:]:
        dtype = _dtype.promote_types(dtype, x._v.dtype)
    sizes = tuple(_shape(x)[d] if u else None for x, u in zip(tensors, used))
    return with_out(apply(_cat, *tensors, dim=d, dtype=np.dtype(dtype), sizes=sizes), out)


concat = concatenate = cat


def stack(tensors, dim: int = 0, *, out=None) -> Tensor:
    """Join equally shaped ``tensors`` along a new ``dim``.

    >>> dynajax.stack([dynajax.ones(2), dynajax.zeros(2)], dim=1).shape
    dynajax.Size([2, 2])
    """
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, x in enumerate(tensors):
        if not isinstance(x, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}")
    ref = _shape(tensors[0])
    for i, x in enumerate(tensors[1:], 1):
        if _shape(x) != ref:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(ref)} at entry 0 "
                               f"and {list(_shape(x))} at entry {i}")
    d = _wrap_dim(dim, len(ref) + 1)
    dtype = tensors[0]._v.dtype
    for x in tensors[1:]:
        dtype = _dtype.promote_types(dtype, x._v.dtype)
    return with_out(apply(_stack, *tensors, dim=d, dtype=np.dtype(dtype)), out)


# one op each way (not one unsqueeze per tensor and a cat, or one select per piece): a Python loop that
# unbinds a sequence and stacks its per-step results records two ops, whatever its length
@op("stack")
def _stack(*xs, dim, dtype):
    return jnp.stack([x.astype(dtype) for x in xs], axis=dim)


@op("unbind", nout=VARIADIC)
def _unbind(x, *, dim):
    return tuple(jax.lax.index_in_dim(x, i, dim, keepdims=False) for i in range(x.shape[dim]))


_stack.defvjp(lambda g, out, *xs, dim, dtype: tuple(apply(_unbind, g, dim=dim)))
_unbind.defvjp(lambda g, out, x, *, dim: (apply(_stack, *g, dim=dim, dtype=g[0]._v.dtype),))


def _nonempty(tensors, name: str) -> list:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    return tensors


def hstack(tensors, *, out=None) -> Tensor:
    """Join along dim 1 (dim 0 for 1-D tensors)."""
    ts = atleast_1d(_nonempty(tensors, "hstack"))
    return cat(ts, 0 if ts[0]._v.ndim == 1 else 1, out=out)


def vstack(tensors, *, out=None) -> Tensor:
    """Join row-wise after making every tensor at least 2-D."""
    return cat(atleast_2d(_nonempty(tensors, "vstack")), 0, out=out)


row_stack = vstack


def dstack(tensors, *, out=None) -> Tensor:
    """Join depth-wise (dim 2) after making every tensor at least 3-D."""
    return cat(atleast_3d(_nonempty(tensors, "dstack")), 2, out=out)


def column_stack(tensors, *, out=None) -> Tensor:
    """Join as columns: 0-D and 1-D tensors become columns, then ``hstack``."""
    ts = _nonempty(tensors, "column_stack")
    return hstack([reshape(x, (-1, 1)) if x._v.ndim <= 1 else x for x in ts], out=out)


# ---------------------------------------------------------------- split / chunk / unbind
@method()
def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """Views of ``tensor`` in pieces of ``split_size`` (the last may be smaller) or of the listed sizes.

    >>> [p.shape[0] for p in dynajax.arange(5).split(2)]
    [2, 2, 1]
    """
    shape = _shape(tensor)
    if not shape:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, len(shape))
    n = shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        return split_with_sizes(tensor, split_size_or_sections, d)
    size = int(split_size_or_sections)
    if size < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={size}")
    if size == 0 and n != 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    count = builtins.max(-(-n // size) if size else 1, 1)
    return _pieces(tensor, d, [(i * size, builtins.min((i + 1) * size, n)) for i in range(count)])


@method()
def split_with_sizes(self: Tensor, split_sizes, dim: int = 0) -> tuple:
    """Views of ``self`` in pieces of the given sizes along ``dim`` (they must add up to its size)."""
    shape = _shape(self)
    d = _wrap_dim(dim, len(shape))
    sizes = [int(s) for s in split_sizes]
    if builtins.any(s < 0 for s in sizes):
        raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                           f"split_sizes={sizes}")
    if builtins.sum(sizes) != shape[d]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {shape[d]} (input tensor's "
                           f"size at dimension {d}), but got split_sizes={sizes}")
    return _pieces(self, d, _bounds(sizes))


@method()
def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    """At most ``chunks`` views of equal size (the last may be smaller) along ``dim``."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    shape = _shape(input)
    if not shape:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, len(shape))
    if shape[d] == 0:
        return split_with_sizes(input, [0] * chunks, d)
    return split(input, -(-shape[d] // chunks), d)


@method()
def tensor_split(input: Tensor, indices_or_sections, dim: int = 0) -> tuple:
    """Views split into ``sections`` near-equal pieces, or at the given ``indices``, along ``dim``."""
    shape = _shape(input)
    if not shape:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    d = _wrap_dim(dim, len(shape))
    n = shape[d]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if _dtype.is_float(ios._v.dtype) or ios._v.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                               "one-dimensional tensor, but got a tensor with "
                               f"{ios._v.ndim} dims")
        ios = ios.item() if ios._v.ndim == 0 else ios.tolist()
    if isinstance(ios, (list, tuple)):
        bounds, start = [], 0
        for idx in list(ios) + [n]:
            a, b, _ = slice(start, int(idx)).indices(n)
            bounds.append((a, builtins.max(a, b)))
            start = int(idx)
        return _pieces(input, d, bounds)
    sections = int(ios)
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    small, extra = divmod(n, sections)
    return _pieces(input, d, _bounds([small + 1] * extra + [small] * (sections - extra)))


@method()
def unbind(input: Tensor, dim: int = 0) -> tuple:
    """Views of each slice along ``dim``, with ``dim`` removed."""
    shape = _shape(input)
    if not shape:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = _wrap_dim(dim, len(shape))
    if shape[d] == 0:
        return ()
    pieces = apply(_unbind, input, dim=d)
    # each piece is the view ``input.select(d, i)`` would give: writes through it reach the base
    return tuple(link_view(p, input, _slice, basic=(_FULL,) * d + (i,), dims=(), in_shape=shape)
                 for i, p in enumerate(pieces))


# ---------------------------------------------------------------- flip / roll / rot90
@op("flip")
def _flip(x, *, dims):
    return jnp.flip(x, dims)


_flip.defvjp(lambda g, out, x, *, dims: (apply(_flip, g, dims=dims),))


@method()
def flip(input: Tensor, *dims, **kwargs) -> Tensor:
    """Reverse the order of elements along ``dims`` (a copy; given positionally or as ``dims=``)."""
    if kwargs:
        if dims or set(kwargs) != {"dims"}:
            bad = next(iter(set(kwargs) - {"dims"}), "dims")
            raise TypeError(f"flip() got an unexpected keyword argument '{bad}'" if bad != "dims" else
                            "flip() got multiple values for argument 'dims'")
        dims = (kwargs["dims"],)
    dims = _sizes(dims)
    nd = input._v.ndim
    norm = norm_dims(dims, nd) if dims else ()
    if nd == 0 or not norm:
        return clone(input)
    return apply(_flip, input, dims=norm)


@method()
def fliplr(input: Tensor) -> Tensor:
    """Reverse dim 1 (left/right) of a tensor with at least 2 dims."""
    if input._v.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, 1)


@method()
def flipud(input: Tensor) -> Tensor:
    """Reverse dim 0 (up/down) of a tensor with at least 1 dim."""
    if input._v.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, 0)


@op("roll")
def _roll(x, *, shifts, dims):
    return jnp.roll(x, shifts if dims is not None else shifts[0], dims)


_roll.defvjp(lambda g, out, x, *, shifts, dims: (apply(_roll, g, shifts=tuple(-s for s in shifts), dims=dims),))


@method()
def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """Shift elements cyclically along ``dims`` (along the flattened tensor when ``dims`` is None)."""
    shifts = (int(shifts),) if not isinstance(shifts, (list, tuple)) else tuple(int(s) for s in shifts)
    dims = () if dims is None else (dims,) if not isinstance(dims, (list, tuple)) else tuple(dims)
    if (not dims and len(shifts) != 1) or (dims and len(shifts) != len(dims)):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    nd = input._v.ndim
    if nd == 0 and dims:
        raise IndexError(f"Dimension specified as {int(dims[0])} but tensor has no dimensions")
    dims = tuple(_wrap_dim(int(d), nd) for d in dims)
    if nd == 0:
        return clone(input)
    return apply(_roll, input, shifts=shifts, dims=dims or None)


@method()
def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane of ``dims`` (from the first towards the second)."""
    dims = tuple(dims)
    nd = input._v.ndim
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if nd < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {nd}")
    d0, d1 = _wrap_dim(dims[0], nd), _wrap_dim(dims[1], nd)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 0:
        return clone(input)
    if k == 2:
        return flip(input, d0, d1)
    perm = list(range(nd))
    perm[d0], perm[d1] = d1, d0
    return apply(_permute, flip(input, d1 if k == 1 else d0), dims=tuple(perm))


# ---------------------------------------------------------------- repeat / tile / repeat_interleave
@op("repeat")
def _repeat(x, *, reps, in_shape):
    return jnp.tile(x.reshape((1,) * (len(reps) - x.ndim) + x.shape), reps)


@_repeat.defvjp
def _repeat_vjp(g, out, x, *, reps, in_shape):
    padded = (1,) * (len(reps) - len(in_shape)) + tuple(in_shape)
    pairs = tuple(v for r, s in zip(reps, padded) for v in (r, s))
    if not pairs:
        return (g,)
    return (reshape(_sum(reshape(g, pairs), tuple(range(0, len(pairs), 2))), in_shape),)


@method()
def repeat(input: Tensor, *sizes) -> Tensor:
    """Tile ``input`` ``sizes[i]`` times along each dim (PyTorch's ``Tensor.repeat``, numpy's ``tile``)."""
    reps = _sizes(sizes)
    shape = _shape(input)
    if len(reps) < len(shape):
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions "
                           "of tensor")
    padded = (1,) * (len(reps) - len(shape)) + shape
    out_shape = [r * s for r, s in zip(reps, padded)]
    if builtins.any(r < 0 for r in reps):
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{builtins.min(out_shape)}: {out_shape}")
    return apply(_repeat, input, reps=reps, in_shape=shape)


@method()
def tile(input: Tensor, *dims) -> Tensor:
    """Like ``repeat``, but ``dims`` shorter than the tensor's rank is padded with leading 1s."""
    reps = _sizes(dims)
    nd = input._v.ndim
    return repeat(input, (1,) * (nd - len(reps)) + reps)


@op("repeat_interleave")
def _repeat_interleave(x, *, repeats, dim, size):
    if isinstance(repeats, int):
        return jnp.repeat(x, repeats, axis=dim)
    return jnp.take(x, np.repeat(np.arange(size), repeats), axis=dim)


_repeat_interleave.defvjp(lambda g, out, x, *, repeats, dim, size:
                          (apply(_repeat_interleave_sum, g, repeats=repeats, dim=dim, size=size),))


@op("repeat_interleave_sum")
def _repeat_interleave_sum(g, *, repeats, dim, size):
    ids = np.repeat(np.arange(size), repeats)
    s = jax.ops.segment_sum(jnp.moveaxis(g, dim, 0), ids, num_segments=size, indices_are_sorted=True)
    return jnp.moveaxis(s, 0, dim)


_repeat_interleave_sum.defvjp(lambda g, out, x, *, repeats, dim, size:
                              (apply(_repeat_interleave, g, repeats=repeats, dim=dim, size=size),))


@method()
def repeat_interleave(input: Tensor, repeats=None, dim: int | None = None, *, output_size=None) -> Tensor:
    """Repeat each element ``repeats`` times (an int, or one count per element along ``dim``).

    >>> dynajax.tensor([1, 2]).repeat_interleave(dynajax.tensor([1, 2]))
    tensor([1, 2, 2])
    """
    if repeats is None:  # repeat_interleave(counts): indices repeated by their counts
        from .creation import arange
        return repeat_interleave(arange(input._v.shape[0]), input, 0)
    if dim is None:
        input, dim = reshape(input, (-1,)), 0
    shape = _shape(input)
    d = _wrap_dim(dim, len(shape))
    n = shape[d] if shape else 1
    if isinstance(repeats, Tensor):
        if repeats._v.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        counts = np.asarray(repeats._value).reshape(-1).astype(np.int64)
        if (counts < 0).any():
            raise RuntimeError("repeats can not be negative")
        if counts.size not in (1, n):
            raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                               f"{counts.size} and input.size({d}) = {n}")
        reps = int(counts[0]) if counts.size == 1 else tuple(int(c) for c in counts)
    else:
        reps = int(repeats)
        if reps < 0:
            raise RuntimeError("Repeats must be non-negative")
    if not shape:
        input = reshape(input, (1,))
    return apply(_repeat_interleave, input, repeats=reps, dim=d, size=n)


# ---------------------------------------------------------------- tril / triu
def _triangle(name: str, impl):
    o = op(name)(lambda x, *, diagonal: impl(x, diagonal))
    o.defvjp(lambda g, out, x, *, diagonal: (apply(o, g, diagonal=diagonal),))

    def public(input: Tensor, diagonal: int = 0, *, out=None) -> Tensor:
        if input._v.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        return with_out(apply(o, input, diagonal=int(diagonal)), out)
    public.__name__ = public.__qualname__ = name
    kept = "lower" if name == "tril" else "upper"
    public.__doc__ = f"The {kept} triangle of the last two dims (relative to ``diagonal``); the rest is zero."
    return export(public, inplace_name=name + "_")


tril = _triangle("tril", jnp.tril)
triu = _triangle("triu", jnp.triu)


# ---------------------------------------------------------------- diagonal / diag_embed / diag / trace
@op("diagonal")
def _diagonal(x, *, offset, dim1, dim2, in_shape):
    return jnp.diagonal(x, offset, dim1, dim2)


_diagonal.defvjp(lambda g, out, x, *, offset, dim1, dim2, in_shape:
                 (apply(_diag_embed, g, shape=in_shape, offset=offset, dim1=dim1, dim2=dim2),))


@op("diag_embed")
def _diag_embed(v, *, shape, offset, dim1, dim2):
    z = jnp.moveaxis(jnp.zeros(shape, v.dtype), (dim1, dim2), (-2, -1))
    i = np.arange(v.shape[-1])
    z = z.at[..., i + builtins.max(-offset, 0), i + builtins.max(offset, 0)].set(v)
    return jnp.moveaxis(z, (-2, -1), (dim1, dim2))


_diag_embed.defvjp(lambda g, out, v, *, shape, offset, dim1, dim2:
                   (apply(_diagonal, g, offset=offset, dim1=dim1, dim2=dim2, in_shape=shape),))


def _diag_dims(nd: int, dim1: int, dim2: int) -> tuple:
    d1, d2 = _wrap_dim(dim1, nd), _wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


@method()
def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims ``dim1``/``dim2`` (shifted by ``offset``), as a new last dim; a view."""
    shape = _shape(input)
    d1, d2 = _diag_dims(len(shape), dim1, dim2)
    return make_view(_diagonal, input, offset=int(offset), dim1=d1, dim2=d2, in_shape=shape)


@method()
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Put the last dim of ``input`` on the diagonal of new dims ``dim1``/``dim2`` (zeros elsewhere)."""
    shape = _shape(input)
    d1, d2 = _diag_dims(len(shape) + 1, dim1, dim2)
    n = shape[-1] + builtins.abs(int(offset))
    out_shape = list(shape[:-1])
    for d in sorted((d1, d2)):
        out_shape.insert(d, n)
    return apply(_diag_embed, input, shape=tuple(out_shape), offset=int(offset), dim1=d1, dim2=d2)


@method()
def diag(input: Tensor, diagonal: int = 0, *, out=None) -> Tensor:
    """A 1-D tensor as a diagonal matrix, or a matrix's diagonal as a 1-D tensor (a copy)."""
    nd = input._v.ndim
    if nd == 1:
        return with_out(diag_embed(input, diagonal, 0, 1), out)
    if nd != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {nd}D")
    return with_out(apply(_diagonal, input, offset=int(diagonal), dim1=0, dim2=1, in_shape=_shape(input)), out)


@method()
def trace(input: Tensor) -> Tensor:
    """Sum of the main diagonal of a matrix."""
    if input._v.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input._v.ndim}")
    if input._v.dtype == np.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    return _sum(apply(_diagonal, input, offset=0, dim1=0, dim2=1, in_shape=_shape(input)))


# ---------------------------------------------------------------- meshgrid / cartesian_prod
def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """Coordinate grids of 0-D/1-D ``tensors``: ``indexing='ij'`` (default) or ``'xy'`` (first two swapped).

    >>> gx, gy = dynajax.meshgrid(dynajax.arange(2), dynajax.arange(3), indexing="ij"); gx.shape
    dynajax.Size([2, 3])
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for x in tensors:
        if x._v.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a "
                               f"{x._v.ndim}D tensor of shape {list(_shape(x))}")
        if x._v.dtype != tensors[0]._v.dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    n = len(ts)
    shape = tuple(x.numel() for x in ts)
    grids = [expand(reshape(x, tuple(-1 if j == i else 1 for j in range(n))), shape) for i, x in enumerate(ts)]
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors) -> Tensor:
    """Every combination of the elements of 1-D ``tensors``, one per row."""
    if len(tensors) == 1:
        return tensors[0]
    return stack([reshape(g, (-1,)) for g in meshgrid(*tensors, indexing="ij")], 1)


# ---------------------------------------------------------------- atleast_nd
def _atleast(tensors, promote):
    if len(tensors) == 1 and isinstance(tensors[0], Tensor):
        return promote(tensors[0])
    if len(tensors) == 1:
        tensors = tuple(tensors[0])
    return tuple(promote(x) for x in tensors)


def _to_1d(x: Tensor) -> Tensor:
    return reshape(x, (1,)) if x._v.ndim == 0 else x


def _to_2d(x: Tensor) -> Tensor:
    nd = x._v.ndim
    return reshape(x, (1, 1)) if nd == 0 else unsqueeze(x, 0) if nd == 1 else x


def _to_3d(x: Tensor) -> Tensor:
    shape, nd = _shape(x), x._v.ndim
    if nd >= 3:
        return x
    return reshape(x, ((1, 1, 1), (1,) + shape + (1,), shape + (1,))[nd])


def atleast_1d(*tensors):
    """Each tensor with at least 1 dim (0-D becomes shape (1,)); a tuple for several tensors."""
    return _atleast(tensors, _to_1d)


def atleast_2d(*tensors):
    """Each tensor with at least 2 dims (new leading dims of size 1)."""
    return _atleast(tensors, _to_2d)


def atleast_3d(*tensors):
    """Each tensor with at least 3 dims (``(n,)`` becomes ``(1, n, 1)``, ``(m, n)`` becomes ``(m, n, 1)``)."""
    return _atleast(tensors, _to_3d)


# ---------------------------------------------------------------- in-place shape changes
def _reshape_inplace(t: Tensor, r: Tensor) -> Tensor:
    """Make ``t`` itself take the shape of ``r`` (a view of ``t``) and bump its version.

    PyTorch only changes the tensor's metadata; here the Tensor object takes
    ``r``'s value and graph position (and, for a view, ``r``'s view chain).
    """
    if r is not t:
        if t._base is not None:
            t._value, t.grad_fn, t._out_idx, t._rg = r._value, r.grad_fn, r._out_idx, r._rg
            t._view, t._view_ver = r._view, r._view_ver
        else:
            _rebind(t, r)
    t._vc[0] += 1
    if t._base is not None:
        t._view_ver = t._vc[0] + t._vc[1]
    return t


@method()
def t_(self: Tensor) -> Tensor:
    """In-place ``t()``."""
    if self._v.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {self._v.ndim}D")
    _check_inplace_allowed(self)
    return _reshape_inplace(self, t(self))


@method("transpose_", "swapaxes_", "swapdims_")
def transpose_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    """In-place ``transpose(dim0, dim1)``."""
    r = transpose(self, dim0, dim1)
    _check_inplace_allowed(self)
    return _reshape_inplace(self, r)


@method()
def squeeze_(self: Tensor, dim=None) -> Tensor:
    """In-place ``squeeze(dim)``."""
    r = squeeze(self, dim)
    _check_inplace_allowed(self)
    return _reshape_inplace(self, r)


@method()
def unsqueeze_(self: Tensor, dim: int) -> Tensor:
    """In-place ``unsqueeze(dim)``."""
    r = unsqueeze(self, dim)
    _check_inplace_allowed(self)
    return _reshape_inplace(self, r)


def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    """A matrix with ``input``'s elements (flattened) on diagonal ``offset``."""
    return diag(reshape(input, (-1,)), offset)


export(diagflat)
__all__.append("diagflat")
