"""Reductions over dims: ``sum``, ``mean``, ``prod``, ``max``/``amax``, ``var``, ``norm``,
``logsumexp``, ``cumsum``, ``median``, ... and ``sum_to_shape`` (the engine's unbroadcast).

Ops returning ``(values, indices)`` select one element per slice; their
gradient scatters back through the indices (``select_along``). Value-only
max/min/median spread the gradient evenly over ties, as PyTorch does.
"""
from __future__ import annotations

import builtins
import collections
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim, method
from .convert import cast
from .elementwise import (_abs_impl, abs, check_out, exp, export, isnan, maximum, minimum, sign, sqrt, where,
                          with_out)
from .norms import nuclear_norm
from .registry import apply, op


def norm_dims(dim, ndim: int) -> tuple | None:
    """``dim`` (int, sequence or None) as a sorted tuple of non-negative dims; None means all."""
    if dim is None:
        return None
    if ndim == 0:  # a 0-d tensor accepts dim 0 / -1 and reduces nothing
        for d in (dim if isinstance(dim, (list, tuple)) else (dim,)):
            _wrap_dim(int(d), 0)
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
    if tuple(x._v.shape) == shape:
        return x
    return apply(_sum_to, x, shape=shape, in_shape=tuple(x._v.shape))


@method()
def sum_to_size(self: Tensor, *size) -> Tensor:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    size, shape = tuple(int(n) for n in size), tuple(self._v.shape)
    if len(size) > len(shape) or builtins.any(n not in (m, 1) for n, m in zip(size[::-1], shape[::-1])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    return sum_to_shape(self, size)


# ---------------------------------------------------------------- sum / mean
@op("sum")
def _sum(x, *, dims, keepdim, dtype, shape):
    return jnp.sum(x, axis=dims, keepdims=keepdim, dtype=dtype)


_sum.defvjp(lambda g, out, x, *, dims, keepdim, dtype, shape: (expand_back(g, shape, dims, keepdim),))


def _sum_dtype(x: Tensor, dtype) -> np.dtype:
    if dtype is not None:
        return _dtype.to_np(dtype)
    d = x._v.dtype
    return np.dtype(np.int64) if _dtype.is_integral(d, include_bool=True) else d


@method()
def sum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum over ``dim`` (all dims if None); ints and bools sum to int64."""
    shape = tuple(input._v.shape)
    return apply(_sum, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim),
                 dtype=_sum_dtype(input, dtype), shape=shape)


@op("mean")
def _mean(x, *, dims, keepdim, dtype, shape):
    return jnp.mean(x, axis=dims, keepdims=keepdim, dtype=dtype).astype(dtype)


@_mean.defvjp
def _mean_vjp(g, out, x, *, dims, keepdim, dtype, shape):
    n = math.prod(shape[d] for d in (dims if dims is not None else range(len(shape))))
    return (expand_back(g / n if n else g * float("nan"), shape, dims, keepdim),)


@method()
def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Arithmetic mean over ``dim``; needs a floating dtype (or ``dtype=``)."""
    d = _dtype.to_np(dtype) if dtype is not None else input._v.dtype
    if not _dtype.is_float(d):
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {_dtype.from_np(d).legacy_name}")
    shape = tuple(input._v.shape)
    return apply(_mean, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim), dtype=d, shape=shape)


# ---------------------------------------------------------------- shared helpers
def return_type(name: str, *fields: str):
    """A namedtuple class standing in for ``torch.return_types.<name>``."""
    cls = collections.namedtuple(name, fields)
    cls.__module__ = "dynajax.return_types"
    return cls


_minmax_t = {n: return_type(n, "values", "indices") for n in ("max", "min", "median", "nanmedian")}
_aminmax_t = return_type("aminmax", "min", "max")


def _count(shape: tuple, dims) -> int:
    return math.prod(shape[d] for d in (range(len(shape)) if dims is None else dims))


def _check_nonempty(shape: tuple, dims, name: str) -> None:
    """PyTorch's errors for max-like reductions (no identity) over an empty tensor or dim."""
    if dims is None:
        if math.prod(shape) == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return
    for d in dims:
        if shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _require_float(x: Tensor, msg: str) -> None:
    if not _dtype.is_float(x._v.dtype):
        raise RuntimeError(msg.format(x.dtype.legacy_name))


def _unsqueeze(x: Tensor, axis: int) -> Tensor:
    from .shape import reshape
    s = tuple(x._v.shape)
    return reshape(x, s[:axis] + (1,) + s[axis:])


# ---------------------------------------------------------------- gather / scatter along a dim
def _along(idx, axis: int) -> tuple:
    """Index tuple picking ``idx`` along ``axis`` and every position along the other dims."""
    grids = list(jnp.meshgrid(*[jnp.arange(s) for s in idx.shape], indexing="ij", sparse=True))
    grids[axis] = idx
    return tuple(grids)


@op("gather_along", backward_name="GatherBackward0")
def _gather_along(x, idx, *, axis, shape):
    return x[_along(idx, axis)]


@_gather_along.defvjp
def _gather_along_vjp(g, out, x, idx, *, axis, shape):
    return apply(_scatter_along, g, idx, axis=axis, shape=shape), None


@op("scatter_along", backward_name="ScatterAddBackward0")
def _scatter_along(src, idx, *, axis, shape):
    return jnp.zeros(shape, src.dtype).at[_along(idx, axis)].add(src)


@_scatter_along.defvjp
def _scatter_along_vjp(g, out, src, idx, *, axis, shape):
    return apply(_gather_along, g, idx, axis=axis, shape=shape), None


def take_along(x: Tensor, idx: Tensor, dim: int) -> Tensor:
    """``x`` picked at ``idx`` (same rank as ``x``) along non-negative ``dim``; differentiable in ``x``."""
    return apply(_gather_along, x, idx, axis=dim, shape=tuple(x._v.shape))


# ---------------------------------------------------------------- (values, indices) reductions
def selecting(name: str, pick):
    """Declare an op returning ``(values, indices)`` picked by ``pick(x, axis, **params)``
    (indices with ``keepdims``); its gradient flows only to the picked elements."""
    def impl(x, *, axis, keepdim, shape, **params):
        idx = pick(x, axis, **params)
        vals = jnp.take_along_axis(x, idx, axis)
        if not keepdim:
            vals, idx = jnp.squeeze(vals, axis), jnp.squeeze(idx, axis)
        return vals, idx.astype(jnp.int64)
    o = op(name, nout=2)(impl)
    o.defvjp(_select_vjp, saves_out=(1,))  # the indices only, as PyTorch: the values may change in place
    return o


def _select_vjp(g, out, x, *, axis, keepdim, shape, **_):
    gv, idx = g[0], out[1]
    if not keepdim:
        gv, idx = _unsqueeze(gv, axis), _unsqueeze(idx, axis)
    return (apply(_scatter_along, gv, idx, axis=axis, shape=shape),)


def select_along(o, x: Tensor, dim: int, keepdim: bool, name: str, result, **params):
    """Run a :func:`selecting` op along ``dim`` and wrap its outputs in the namedtuple ``result``."""
    from .shape import reshape
    shape = tuple(x._v.shape)
    if not shape:  # a 0-d tensor is its own single slice
        _wrap_dim(dim, 0)
        return result(*apply(o, reshape(x, (1,)), axis=0, keepdim=False, shape=(1,), **params))
    axis = _wrap_dim(dim, len(shape))
    _check_nonempty(shape, (axis,), name)
    return result(*apply(o, x, axis=axis, keepdim=bool(keepdim), shape=shape, **params))


def sorted_pick(x, axis, pos):
    """Indices of the elements at sorted positions ``pos`` along ``axis`` (NaNs sort last)."""
    order = jnp.argsort(x, axis=axis, stable=True)
    return jnp.take_along_axis(order, pos, axis)


def _median_pick(x, axis, *, skipnan):
    """Index of the lower median (NaN propagates unless ``skipnan``; NaNs sort last)."""
    n = x.shape[axis]
    nans = jnp.sum(jnp.isnan(x), axis, keepdims=True, dtype=jnp.int64)
    if skipnan:
        pos = jnp.maximum((n - nans - 1) // 2, 0)
    else:
        pos = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    return sorted_pick(x, axis, pos)


_max_dim = selecting("max_dim", lambda x, axis: jnp.argmax(x, axis, keepdims=True))
_min_dim = selecting("min_dim", lambda x, axis: jnp.argmin(x, axis, keepdims=True))
_median_dim = selecting("median_dim", lambda x, axis: _median_pick(x, axis, skipnan=False))


# ---------------------------------------------------------------- amax / amin (ties share the gradient)
def _spread_vjp(g, out, x, *, dims, keepdim, shape, **_):
    """Split ``g`` evenly among the elements equal to the result (NaN matches NaN)."""
    o = expand_back(out, shape, dims, keepdim)
    hit = (x == o) | (isnan(x) & isnan(o))
    m = hit.to(g.dtype)
    return (expand_back(g, shape, dims, keepdim) * m / sum(m, dims, keepdim=True),)


@op("amax")
def _amax(x, *, dims, keepdim, shape):
    return jnp.max(x, axis=dims, keepdims=keepdim)


@op("amin")
def _amin(x, *, dims, keepdim, shape):
    return jnp.min(x, axis=dims, keepdims=keepdim)


_amax.defvjp(_spread_vjp)
_amin.defvjp(_spread_vjp)


def _extreme(o, input: Tensor, dim, keepdim: bool, name: str) -> Tensor:
    shape = tuple(input._v.shape)
    dims = norm_dims(dim, len(shape))
    _check_nonempty(shape, dims, name)
    return apply(o, input, dims=dims, keepdim=bool(keepdim), shape=shape)


@method()
def amax(input: Tensor, dim=(), keepdim: bool = False, *, out=None) -> Tensor:
    """Maximum over ``dim`` (all dims by default); ties share the gradient evenly."""
    check_out(out, input, name="amax", dtype=input.dtype)
    return with_out(_extreme(_amax, input, dim, keepdim, "amax"), out, "amax")


@method()
def amin(input: Tensor, dim=(), keepdim: bool = False, *, out=None) -> Tensor:
    """Minimum over ``dim`` (all dims by default); ties share the gradient evenly."""
    check_out(out, input, name="amin", dtype=input.dtype)
    return with_out(_extreme(_amin, input, dim, keepdim, "amin"), out, "amin")


def _max_or_min(input, dim, keepdim, other, o_all, o_dim, name, binary):
    if other is not None or isinstance(dim, Tensor):
        return binary(input, other if other is not None else dim)
    if dim is None:
        return _extreme(o_all, input, None, False, name)
    return select_along(o_dim, input, dim, keepdim, name, _minmax_t[name])


@method()
def max(input: Tensor, dim=None, keepdim: bool = False, *, other=None):
    """``max(x)``: the largest value; ``max(x, dim)``: ``(values, indices)``; ``max(x, y)``: elementwise.

    >>> dynajax.max(dynajax.tensor([[1., 5.], [7., 2.]]), dim=1).indices
    tensor([1, 0])
    """
    return _max_or_min(input, dim, keepdim, other, _amax, _max_dim, "max", maximum)


@method()
def min(input: Tensor, dim=None, keepdim: bool = False, *, other=None):
    """``min(x)``: the smallest value; ``min(x, dim)``: ``(values, indices)``; ``min(x, y)``: elementwise."""
    return _max_or_min(input, dim, keepdim, other, _amin, _min_dim, "min", minimum)


@method()
def aminmax(input: Tensor, *, dim=None, keepdim: bool = False, out=None):
    """``(min, max)`` over ``dim`` (all dims if None)."""
    check_out(out, input, name="aminmax", dtype=input.dtype)
    shape = tuple(input._v.shape)
    dims = norm_dims(dim, len(shape))
    if dims is None and math.prod(shape) == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation "
                           "has no identity.")
    for d in dims or ():
        if shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
    r = (amin(input, dim if dim is not None else (), keepdim), amax(input, dim if dim is not None else (), keepdim))
    if out is not None:
        r = tuple(with_out(x, o, "aminmax") for x, o in zip(r, out))
    return _aminmax_t(*r)


# ---------------------------------------------------------------- argmax / argmin
def _arg_impl(fn):
    def impl(x, *, axis, keepdim):
        r = fn(x, axis=axis, keepdims=keepdim)
        return r.astype(jnp.int64)
    return impl


_argmax = op("argmax")(_arg_impl(jnp.argmax))
_argmin = op("argmin")(_arg_impl(jnp.argmin))


def _arg_extreme(o, input: Tensor, dim, keepdim: bool, name: str) -> Tensor:
    shape = tuple(input._v.shape)
    if input._v.dtype == np.bool_:
        raise RuntimeError(f"{name}(): does not support bool input")
    if dim is None:
        if math.prod(shape) == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        return apply(o, input, axis=None, keepdim=bool(keepdim))
    dims = norm_dims(dim, len(shape))
    if dims is None:  # 0-d input
        return apply(o, input, axis=None, keepdim=False)
    _check_nonempty(shape, dims, name)
    return apply(o, input, axis=dims[0], keepdim=bool(keepdim))


@method()
def argmax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the largest value (in the flattened tensor when ``dim`` is None); int64."""
    return _arg_extreme(_argmax, input, dim, keepdim, "argmax")


@method()
def argmin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the smallest value (in the flattened tensor when ``dim`` is None); int64."""
    return _arg_extreme(_argmin, input, dim, keepdim, "argmin")


# ---------------------------------------------------------------- median
def _median_all_impl(skipnan):
    def impl(x, *, dims, keepdim, shape):
        flat = x.ravel()
        if flat.size == 0:
            return jnp.full((), jnp.nan, x.dtype)
        return flat[_median_pick(flat, 0, skipnan=skipnan)[0]]
    return impl


_median_all = op("median")(_median_all_impl(False))
_nanmedian_all = op("nanmedian")(_median_all_impl(True))
_median_all.defvjp(_spread_vjp)
_nanmedian_all.defvjp(_spread_vjp)
_nanmedian_dim = selecting("nanmedian_dim", lambda x, axis: _median_pick(x, axis, skipnan=True))


def _median(input, dim, keepdim, o_all, o_dim, name):
    if dim is None:
        return apply(o_all, input, dims=None, keepdim=False, shape=tuple(input._v.shape))
    return select_along(o_dim, input, dim, keepdim, name, _minmax_t[name])


@method()
def median(input: Tensor, dim=None, keepdim: bool = False):
    """Lower median of all values, or ``(values, indices)`` along ``dim``; NaN propagates."""
    return _median(input, dim, keepdim, _median_all, _median_dim, "median")


@method()
def nanmedian(input: Tensor, dim=None, keepdim: bool = False):
    """Like :func:`median`, ignoring NaNs."""
    return _median(input, dim, keepdim, _nanmedian_all, _nanmedian_dim, "nanmedian")


# ---------------------------------------------------------------- prod
@op("prod_others")
def _prod_others(x, *, axis):
    """``out[k] = prod(x[j] for j != k)`` along ``axis``, exact when ``x`` has zeros."""
    n = x.shape[axis]
    if n == 0:
        return x
    one = jnp.ones_like(jax.lax.slice_in_dim(x, 0, 1, axis=axis))
    left = jax.lax.cumprod(jnp.concatenate([one, jax.lax.slice_in_dim(x, 0, n - 1, axis=axis)], axis), axis)
    right = jax.lax.cumprod(jnp.concatenate([jax.lax.slice_in_dim(x, 1, n, axis=axis), one], axis), axis,
                            reverse=True)
    return left * right


@_prod_others.defvjp
def _prod_others_vjp(g, out, x, *, axis):
    # d out[i] / d x[k] = prod(x[j] for j not in {i, k}) for k != i: row i of prod_others(Y)
    # with Y[i] = x where x[i] is replaced by 1.
    from .creation import eye
    from .shape import movedim
    xm = movedim(x, axis, -1)
    n = xm._v.shape[-1]
    diag = eye(n, dtype=bool)
    pairs = apply(_prod_others, where(diag, 1.0, _unsqueeze(xm, xm.ndim - 1)), axis=xm.ndim)
    gm = _unsqueeze(movedim(g, axis, -1), xm.ndim)
    return (movedim(sum(where(diag, 0.0, gm * pairs), -2), -1, axis),)


@op("prod")
def _prod(x, *, dims, keepdim, dtype, shape):
    return jnp.prod(x.astype(dtype), axis=dims, keepdims=keepdim)


def _prod_vjp(g, out, x, *, dims, keepdim, dtype, shape):
    from .shape import reshape
    if dims is None:
        others = reshape(apply(_prod_others, reshape(x, (-1,)), axis=0), shape)
    else:
        others = apply(_prod_others, x, axis=dims[0])
    return (expand_back(g, shape, dims, keepdim) * others,)


_prod.defvjp(_prod_vjp, saves_out=True)  # the rule needs no ``out`` (exact at zeros), but PyTorch saves it


@method()
def prod(input: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Product over ``dim`` (all elements if None); ints and bools multiply in int64."""
    if isinstance(dim, (list, tuple)):
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    shape = tuple(input._v.shape)
    return apply(_prod, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim),
                 dtype=_sum_dtype(input, dtype), shape=shape)


# ---------------------------------------------------------------- cumsum / cumprod
@op("cumsum")
def _cumsum(x, *, axis, reverse, dtype):
    x = x.astype(dtype)
    return jax.lax.cumsum(x, axis, reverse=reverse) if x.ndim else x


_cumsum.defvjp(lambda g, out, x, *, axis, reverse, dtype:
               (apply(_cumsum, g, axis=axis, reverse=not reverse, dtype=g._v.dtype),))


@op("cumprod")
def _cumprod(x, *, axis, dtype):
    x = x.astype(dtype)
    return jax.lax.cumprod(x, axis) if x.ndim else x


@_cumprod.defvjp
def _cumprod_vjp(g, out, x, *, axis, dtype):
    # d out[i] / d x[k] = prod(x[j] for j <= i, j != k), i >= k. Where x[k] != 0 that is out[i] / x[k].
    # At a zero it is the cumprod with that zero replaced by 1: computed for the first and second zero of
    # a slice (so double backward is exact too); later zeros reuse the second's, which is 0 to first order.
    zero = x == 0
    nth = apply(_cumsum, zero, axis=axis, reverse=False, dtype=np.dtype(np.int64))
    first = zero & (nth == 1)
    rsum = lambda t: apply(_cumsum, t, axis=axis, reverse=True, dtype=t._v.dtype)  # noqa: E731
    without = lambda m: rsum(g * apply(_cumprod, where(m, 1.0, x), axis=axis, dtype=out._v.dtype))  # noqa
    at_nonzero = rsum(g * out) / where(zero, 1.0, x)
    at_zero = where(first, without(first), without(zero & (nth == 2)))
    return (where(zero, at_zero, at_nonzero),)


def _scan(o, input: Tensor, dim: int, dtype) -> Tensor:
    axis = _wrap_dim(dim, input._v.ndim)
    extra = {"reverse": False} if o is _cumsum else {}
    return apply(o, input, axis=axis, dtype=_sum_dtype(input, dtype), **extra)


def cumsum(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Running sum along ``dim``; ints and bools accumulate in int64."""
    return _scan(_cumsum, input, dim, dtype)


def cumprod(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Running product along ``dim``; the gradient is exact with zeros in the input."""
    return _scan(_cumprod, input, dim, dtype)


export(cumsum, inplace_name="cumsum_")
export(cumprod, inplace_name="cumprod_")


# ---------------------------------------------------------------- var / std
@op("var")
def _var(x, *, dims, keepdim, correction, shape):
    d = x - jnp.mean(x, axis=dims, keepdims=True)
    ss = jnp.sum(jnp.real(d * jnp.conj(d)), axis=dims, keepdims=keepdim)
    return ss / builtins.max(0, _count(shape, dims) - correction)


@_var.defvjp
def _var_vjp(g, out, x, *, dims, keepdim, correction, shape):
    dof = builtins.max(0, _count(shape, dims) - correction)
    scale = 2.0 / dof if dof else math.inf
    return (expand_back(g, shape, dims, keepdim) * scale * (x - mean(x, dims, keepdim=True)),)


def _var_args(name: str, input: Tensor, dim, unbiased, keepdim, correction) -> dict:
    _require_float(input, "std and var only support floating point and complex dtypes")
    if isinstance(dim, bool):  # legacy var(x, unbiased)
        dim, unbiased = None, dim
    if correction is None:
        correction = 0 if unbiased is False else 1
    elif unbiased is not None:
        raise RuntimeError(f"{name}(): cannot specify both unbiased and correction")
    shape = tuple(input._v.shape)
    return dict(dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim), correction=correction, shape=shape)


@method()
def var(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance over ``dim`` with ``correction`` (Bessel's, 1, by default; ``unbiased=False`` is 0)."""
    return apply(_var, input, **_var_args("var", input, dim, unbiased, keepdim, correction))


def _std_of(v: Tensor) -> Tensor:
    """``sqrt(v)`` of a variance, whose gradient is 0 where the variance is 0 (a constant slice), as PyTorch's
    std backward masks it; a plain sqrt's infinite slope there times var's zero gradient would give NaN."""
    nz = v != 0   # (a NaN variance, too few elements, stays NaN)
    return where(nz, sqrt(where(nz, v, 1.0)), 0.0)


@method()
def std(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Standard deviation, ``sqrt(var(...))``."""
    return _std_of(apply(_var, input, **_var_args("std", input, dim, unbiased, keepdim, correction)))


def var_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> tuple:
    """``(var, mean)`` over ``dim``."""
    p = _var_args("var_mean", input, dim, unbiased, keepdim, correction)
    return apply(_var, input, **p), mean(input, p["dims"], keepdim)


def std_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> tuple:
    """``(std, mean)`` over ``dim``."""
    p = _var_args("std_mean", input, dim, unbiased, keepdim, correction)
    return _std_of(apply(_var, input, **p)), mean(input, p["dims"], keepdim)


# ---------------------------------------------------------------- norm
@op("vector_norm", backward_name="LinalgVectorNormBackward0")
def _vector_norm(x, *, p, dims, keepdim, shape):
    # ``_abs_impl``'s slope is 0 at 0 (jnp.abs's is 1), so jax.grad of a lowered norm is 0 where an element
    # is 0, as the rule and PyTorch give (the 1-norm's and the inf-norms' too)
    a = _abs_impl(x)
    if p == math.inf:
        return jnp.max(a, axis=dims, keepdims=keepdim)
    if p == -math.inf:
        return jnp.min(a, axis=dims, keepdims=keepdim)
    if p == 0:
        return jnp.sum(a != 0, axis=dims, keepdims=keepdim).astype(a.dtype)
    if p == 1:
        return jnp.sum(a, axis=dims, keepdims=keepdim)
    # the zero vector's gradient is 0 (the rule below, PyTorch's), also under jax.grad of a lowered function:
    # the root is taken of a placeholder 1 there, so its infinite slope never meets the zero inner gradient
    if p == 2:
        s = jnp.sum(a * a, axis=dims, keepdims=keepdim)
    else:   # a zero element's power is taken of a placeholder 1: a ** p's slope at 0 is infinite for p < 1
        zero = a == 0
        s = jnp.sum(jnp.where(zero, 0, jnp.where(zero, 1, a) ** p), axis=dims, keepdims=keepdim)
    nz = s != 0
    safe = jnp.where(nz, s, jnp.ones((), s.dtype))
    return jnp.where(nz, jnp.sqrt(safe) if p == 2 else safe ** (1.0 / p), jnp.zeros((), s.dtype))


@_vector_norm.defvjp
def _vector_norm_vjp(g, out, x, *, p, dims, keepdim, shape):
    if p == 0:
        return (x * 0.0,)
    g = expand_back(g, shape, dims, keepdim)
    if p == 1:
        return (g * sign(x),)
    if builtins.abs(p) == math.inf:
        hit = (abs(x) == expand_back(out, shape, dims, keepdim)).to(g.dtype)
        return (g * sign(x) * hit / sum(hit, dims, keepdim=True),)
    o = expand_back(out, shape, dims, keepdim)
    safe = where(o == 0, 1.0, o)  # the gradient at the zero vector is 0, as in PyTorch
    if p == 2:
        return (g * x / safe,)
    # (0 where an element is 0: for p < 1 its power would be infinite; PyTorch gives 0 there)
    return (where((o == 0) | (x == 0), 0.0, g * sign(x) * abs(x) ** (p - 1) / safe ** (p - 1)),)


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of ``x`` flattened over ``dim`` (all dims if None), as ``torch.linalg.vector_norm``."""
    _require_float(x, "linalg.vector_norm: Expected a floating point or complex tensor as input. Got {}")
    if dtype is not None:
        d = _dtype.to_np(dtype)
        if _dtype.promote_types(x._v.dtype, d) != d:
            raise RuntimeError(f"linalg.vector_norm: the dtype of the input ({x.dtype.legacy_name}) should be "
                               f"convertible without narrowing to the specified dtype ({_dtype.from_np(d).legacy_name})")
        x = cast(x, d)
    shape = tuple(x._v.shape)
    dims = norm_dims(dim, len(shape))
    p = float(ord)
    if builtins.abs(p) == math.inf:
        _check_nonempty(shape, dims, "linalg.vector_norm")
    return apply(_vector_norm, x, p=p, dims=dims, keepdim=bool(keepdim), shape=shape)


@method()
def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """``torch.norm``: a vector p-norm over ``dim`` (``'fro'`` is the 2-norm over at most 2 dims)."""
    if p is None or p == "fro":
        if isinstance(dim, (list, tuple)) and len(dim) > 2:
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
        p = 2
    elif p == "nuc":
        return nuclear_norm(input, dim, keepdim, dtype)
    elif isinstance(p, str):
        raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


# ---------------------------------------------------------------- logsumexp
@op("logsumexp")
def _logsumexp(x, *, dims, keepdim, dtype, shape):
    return jax.nn.logsumexp(x.astype(dtype), axis=dims, keepdims=keepdim)


_logsumexp.defvjp(lambda g, out, x, *, dims, keepdim, dtype, shape:
                  (expand_back(g, shape, dims, keepdim) * exp(x - expand_back(out, shape, dims, keepdim)),))


@method()
def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim`` (required, as in PyTorch), computed stably; its gradient is ``softmax``."""
    shape = tuple(input._v.shape)
    d = input._v.dtype
    return apply(_logsumexp, input, dims=norm_dims(dim, len(shape)), keepdim=bool(keepdim),
                 dtype=d if _dtype.is_float(d) else _dtype.default_float_np(), shape=shape)


# ---------------------------------------------------------------- all / any / count_nonzero
@op("all")
def _all(x, *, dims, keepdim):
    r = jnp.all(x, axis=dims, keepdims=keepdim)
    return r.astype(jnp.uint8) if x.dtype == jnp.uint8 else r


@op("any")
def _any(x, *, dims, keepdim):
    r = jnp.any(x, axis=dims, keepdims=keepdim)
    return r.astype(jnp.uint8) if x.dtype == jnp.uint8 else r


@method()
def all(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """True where every element over ``dim`` is nonzero (bool; uint8 for uint8 input)."""
    return apply(_all, input, dims=norm_dims(dim, input._v.ndim), keepdim=bool(keepdim))


@method()
def any(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """True where some element over ``dim`` is nonzero (bool; uint8 for uint8 input)."""
    return apply(_any, input, dims=norm_dims(dim, input._v.ndim), keepdim=bool(keepdim))


@op("count_nonzero")
def _count_nonzero(x, *, dims):
    return jnp.count_nonzero(x, axis=dims).astype(jnp.int64)


@method()
def count_nonzero(input: Tensor, dim=None) -> Tensor:
    """Number of nonzero elements over ``dim`` (int64)."""
    return apply(_count_nonzero, input, dims=norm_dims(dim, input._v.ndim))


# ---------------------------------------------------------------- NaN-ignoring sum / mean
@method()
def nansum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """``sum`` treating NaN as zero (NaN positions get zero gradient)."""
    x = where(isnan(input), 0, input) if _dtype.is_float(input._v.dtype) else input
    return sum(x, dim, keepdim, dtype=dtype)


@method()
def nanmean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """``mean`` over the non-NaN elements."""
    _require_float(input, "nanmean(): expected input to have floating point or complex dtype but got {}")
    return nansum(input, dim, keepdim, dtype=dtype) / sum(~isnan(input), dim, keepdim)


__all__ = ["sum", "mean", "prod", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "median",
           "nanmedian", "cumsum", "cumprod", "var", "std", "var_mean", "std_mean", "norm", "logsumexp", "all",
           "any", "count_nonzero", "nansum", "nanmean"]
