"""View ops (``view``/``reshape``, ``expand``, ``permute``/``transpose``, ``squeeze``/``unsqueeze``).

Every op here returns a view: writes through it reach its base (see views.py).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _sizes as sizing
from .._tensor import Tensor, _make, _wrap_dim, method
from .registry import apply, op
from .views import layout, link_view, make_view, view_strides

__all__ = ["reshape", "view", "view_as", "reshape_as", "flatten", "unflatten", "ravel", "expand", "expand_as",
           "broadcast_to", "broadcast_tensors", "broadcast_shapes", "permute", "transpose", "swapaxes", "swapdims",
           "t", "movedim", "moveaxis", "squeeze", "unsqueeze"]


def _sizes(size, name: str = "size", what: str = "size") -> tuple:
    """``(2, 3)`` or ``((2, 3),)`` as ints; PyTorch's TypeError for a float (``dynajax._sizes.parse``)."""
    return sizing.parse(size, name, what)


def infer_shape(shape: tuple, numel: int) -> tuple:
    """Resolve one ``-1`` in ``shape``; raise PyTorch's error when ``shape`` can't hold ``numel``."""
    if list(shape).count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for i, s in enumerate(shape):
        if s < -1:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


# ---------------------------------------------------------------- reshape
@op("reshape", backward_name="ViewBackward0")
def _reshape(x, *, shape, in_shape):
    return jnp.reshape(x, shape)


_reshape.defvjp(lambda g, out, x, *, shape, in_shape: (reshape(g, in_shape),))


@method()
def reshape(input: Tensor, *shape) -> Tensor:
    """The same elements in a new ``shape`` (one dim may be -1): a view of ``input`` where PyTorch's would be
    one, else a copy (a view PyTorch lays out so that no strides give ``shape``: ``x.t().reshape(-1)``)."""
    return _reshaped(input, shape, copy=True)


@method()
def view(input: Tensor, *shape) -> Tensor:
    """``reshape`` that never copies: PyTorch's RuntimeError where it would have to (or ``view(dtype)``)."""
    return _reshaped(input, shape, copy=False)


def _reshaped(input: Tensor, shape: tuple, copy: bool) -> Tensor:
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)) and not hasattr(shape[0], "__index__"):
        from .. import _dtype  # x.view(dtype): reinterpret the bits
        return _view_dtype(input, _dtype.to_np(shape[0]))
    v = input._value
    shape = infer_shape(_sizes(shape, "reshape" if copy else "view", "shape" if copy else "size"), v.size)
    if not v.size:
        sizing.check_representable(shape, v.dtype)
    if shape == tuple(v.shape):
        return make_view(_reshape, input, shape=shape, in_shape=shape)
    if input._base is not None:
        lay = layout(input)
        if lay is not None and view_strides(lay[0], lay[1], shape) is None:
            if not copy:
                raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                                   "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
            input = input.clone()
    return make_view(_reshape, input, shape=shape, in_shape=tuple(v.shape))


def _view_dtype(input: Tensor, np_dtype) -> Tensor:
    import jax
    from .._tensor import _make
    if np_dtype.itemsize != input._v.dtype.itemsize:
        raise RuntimeError("view(dtype) with a different element size is not supported")
    return _make(jax.lax.bitcast_convert_type(input._value, np_dtype))


@method()
def view_as(self: Tensor, other: Tensor) -> Tensor:
    return reshape(self, tuple(other._v.shape))


@method()
def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return reshape(self, tuple(other._v.shape))


@method()
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim`` into one."""
    shape = tuple(input._v.shape)
    if not shape:
        return reshape(input, (1,))
    s, e = _wrap_dim(start_dim, len(shape)), _wrap_dim(end_dim, len(shape))
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


@method()
def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    shape = tuple(input._v.shape)
    d = _wrap_dim(dim, len(shape))
    sizes = infer_shape(tuple(sizes), shape[d])
    return reshape(input, shape[:d] + tuple(sizes) + shape[d + 1:])


@method()
def ravel(input: Tensor) -> Tensor:
    return reshape(input, (-1,))


# ---------------------------------------------------------------- expand
@op("expand")
def _expand(x, *, shape, in_shape):
    return jnp.broadcast_to(x, shape)


@_expand.defvjp
def _expand_vjp(g, out, x, *, shape, in_shape):
    from .reduce import sum_to_shape
    return (sum_to_shape(g, in_shape),)


@method()
def expand(input: Tensor, *sizes) -> Tensor:
    """Broadcast size-1 dims to ``sizes`` (-1 keeps a dim) without copying; a view."""
    sizes = _sizes(sizes, "expand")
    shape = tuple(input._v.shape)
    if len(sizes) < len(shape):
        raise RuntimeError(f"expand(torch.FloatTensor{{{list(shape)}}}, size={list(sizes)}): the number of "
                           f"sizes provided ({len(sizes)}) must be greater or equal to the number of dimensions "
                           f"in the tensor ({len(shape)})")
    lead = len(sizes) - len(shape)
    out = []
    for i in reversed(range(len(sizes))):  # PyTorch checks (and reports) from the last dim
        s = sizes[i]
        if i < lead:
            if s < 0:
                raise RuntimeError(f"The expanded size of the tensor ({s}) isn't allowed in a leading, "
                                   "non-existing dimension 0")
            out.append(s)
            continue
        cur = shape[i - lead]
        if s == -1:
            s = cur
        if cur != s and cur != 1:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: "
                               f"{list(shape)}")
        out.append(s)
    out = tuple(reversed(out))
    if out == shape:
        return input
    # JAX arrays have no strides, so a broadcast is made in full: one past the device's memory (free in
    # PyTorch) is kept unmade, and raises where its elements are used (``dynajax._sizes.Pending``)
    big = sizing.unmade_view(out, input._value, f"the expand of sizes {list(shape)} to {list(out)}")
    if big is not None:
        return link_view(_make(big, input._rg), input, _expand, shape=out, in_shape=shape)
    return make_view(_expand, input, shape=out, in_shape=shape)


@method()
def expand_as(self: Tensor, other: Tensor) -> Tensor:
    return expand(self, tuple(other._v.shape))


def broadcast_to(input: Tensor, size) -> Tensor:
    return expand(input, tuple(size))


method("broadcast_to")(broadcast_to)


def broadcast_tensors(*tensors):
    shape = np.broadcast_shapes(*(tuple(t._v.shape) for t in tensors))
    return tuple(expand(t, shape) for t in tensors)


def broadcast_shapes(*shapes):
    from .._tensor import Size
    return Size(np.broadcast_shapes(*[tuple(s) if not isinstance(s, int) else (s,) for s in shapes]))


# ---------------------------------------------------------------- permute / transpose
@op("permute")
def _permute(x, *, dims):
    return jnp.transpose(x, dims)


_permute.defvjp(lambda g, out, x, *, dims: (permute(g, tuple(int(i) for i in np.argsort(dims))),))


@method()
def permute(input: Tensor, *dims) -> Tensor:
    """Reorder dims; a view."""
    if not dims:
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    dims = _sizes(dims, "permute", "dims")
    n = input._v.ndim
    if len(dims) != n:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
                           f"length of the desired ordering of dimensions i.e. input.dim() = {n} is not equal "
                           f"to len(dims) = {len(dims)}")
    dims = tuple(_wrap_dim(d, n) for d in dims)
    if len(set(dims)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return make_view(_permute, input, dims=dims)


@method("transpose", "swapaxes", "swapdims")
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = input._v.ndim
    if n == 0:
        _wrap_dim(dim0, 0), _wrap_dim(dim1, 0)
        return input
    d0, d1 = _wrap_dim(dim0, n), _wrap_dim(dim1, n)
    dims = list(range(n))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return make_view(_permute, input, dims=tuple(dims))


swapaxes = swapdims = transpose


@method()
def t(input: Tensor) -> Tensor:
    """Transpose of a <= 2-D tensor."""
    n = input._v.ndim
    if n > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {n}D")
    return input if n < 2 else transpose(input, 0, 1)


Tensor.T = property(lambda self: self if self._v.ndim < 2 else permute(self, tuple(range(self._v.ndim))[::-1]))
Tensor.mT = property(lambda self: transpose(self, -2, -1))
Tensor.H = property(lambda self: t(self).conj() if self.is_complex() else t(self))


@method()
def movedim(input: Tensor, source, destination) -> Tensor:
    n = input._v.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                           f"same number of dims as destination ({dst} dims)")
    for name, given in (("source", src), ("destination", dst)):
        if len({_wrap_dim(d, n) for d in given}) != len(given):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({given})")
    src = [_wrap_dim(s, n) for s in src]
    dst = [_wrap_dim(d, n) for d in dst]
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(input, tuple(order))


moveaxis = movedim
method("moveaxis")(movedim)


# ---------------------------------------------------------------- squeeze / unsqueeze
@method()
def squeeze(input: Tensor, dim=None) -> Tensor:
    """Remove size-1 dims (all, or those in ``dim``); a view."""
    shape = tuple(input._v.shape)
    if dim is None:
        dims = {i for i, s in enumerate(shape) if s == 1}
    else:
        dims = {_wrap_dim(d, len(shape)) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
        dims = {d for d in dims if len(shape) and shape[d] == 1}
    new = tuple(s for i, s in enumerate(shape) if i not in dims)
    if new == shape:
        return reshape(input, shape)
    return reshape(input, new)


@method()
def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at ``dim``; a view."""
    shape = tuple(input._v.shape)
    n = len(shape) + 1
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    d = dim % n
    return reshape(input, shape[:d] + (1,) + shape[d:])


# ---------------------------------------------------------------- unfold (sliding windows along a dim)
def _windows(x, dim: int, size: int, step: int):
    idx = np.arange((x.shape[dim] - size) // step + 1)[:, None] * step + np.arange(size)   # (windows, size)
    return jnp.moveaxis(jnp.take(x, idx, axis=dim), dim + 1, -1)


@op("unfold_dim")
def _unfold_dim(x, *, dim, size, step):
    return _windows(x, dim, size, step)


@op("unfold_dim_backward")
def _unfold_dim_backward(g, *, in_shape, dim, size, step):
    """The windows' gradients summed back into the input's positions (no input value needed)."""
    return jax.vjp(lambda x: _windows(x, dim, size, step), jnp.zeros(in_shape, g.dtype))[1](g)[0]


_unfold_dim.defvjp(lambda g, out, x, *, dim, size, step: (
    apply(_unfold_dim_backward, g, in_shape=tuple(x.shape), dim=dim, size=size, step=step),))
_unfold_dim_backward.defvjp(lambda gg, out, g, *, in_shape, dim, size, step: (
    apply(_unfold_dim, gg, dim=dim, size=size, step=step),))


@method("unfold")
def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """The windows of ``size`` elements every ``step`` along ``dimension``, as a new last dim (``Tensor.unfold``);
    a view (``views.layout`` gives PyTorch's strides: windows ``step`` apart, elements 1 apart)."""
    shape = tuple(input._v.shape)
    d = _wrap_dim(dimension, max(len(shape), 1))
    n = shape[d] if shape else 1
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size > n or size < 0:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if not shape:
        return reshape(input, (1,))
    return make_view(_unfold_dim, input, dim=d, size=int(size), step=int(step))


# ---------------------------------------------------------------- adjoints, and copying twins of the views
Tensor.mH = property(lambda self: transpose(self, -2, -1).conj() if self.is_complex() else transpose(self, -2, -1))
method("adjoint")(lambda self: self.mH)


def _copying(view: str):
    """``torch.<view>_copy``: the view method ``view``'s result (each of them, for a sequence) as a new tensor,
    sharing nothing with ``input``."""
    def copy(input: Tensor, *args, **kwargs):
        out = getattr(input, view)(*args, **kwargs) if view != "alias" else input
        return tuple(o.clone() for o in out) if isinstance(out, (tuple, list)) else out.clone()
    copy.__name__ = copy.__qualname__ = f"{view}_copy"
    copy.__doc__ = f"``input.{view}(...)`` as a copy, as ``torch.{view}_copy``."
    return copy


for _view in ("alias", "diagonal", "expand", "narrow", "permute", "split_with_sizes", "squeeze", "t", "transpose",
              "unbind", "unfold", "unsqueeze", "view"):
    globals()[f"{_view}_copy"] = _copying(_view)
    __all__.append(f"{_view}_copy")
_narrow_copy = narrow_copy  # noqa: F821 (made just above)


def narrow_copy(input: Tensor, dim: int, start, length: int) -> Tensor:
    """``input.narrow(...)`` as a copy, as ``torch.narrow_copy`` (whose check of a too large dim raises
    RuntimeError, not narrow's IndexError)."""
    if isinstance(dim, int) and dim >= input._v.ndim > 0:
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.")
    return _narrow_copy(input, dim, start, length)


method("narrow_copy")(narrow_copy)


def unsafe_chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    """``chunk`` (PyTorch's unsafe twin only skips a version check dynajax has no use for)."""
    return input.chunk(chunks, dim)


def unsafe_split(input: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """``split``, as :func:`unsafe_chunk` is ``chunk``."""
    return input.split(split_size_or_sections, dim)


method("unsafe_chunk")(unsafe_chunk)
method("unsafe_split")(unsafe_split)
__all__ += ["unsafe_chunk", "unsafe_split"]
