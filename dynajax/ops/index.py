"""Indexing: ``x[key]``, ``x[key] = v`` and the gather/scatter family (``gather``,
``scatter*``, ``index_*``, ``masked_*``, ``nonzero``, ``take``, ``put_`` ...).

A key is parsed once, as PyTorch does: ints, slices, ``None`` and ``...`` form a
static *basic* key applied first (a view when that is all there is); index
tensors, lists and masks then apply to the dims ``dims`` of that view with
numpy's advanced-indexing rules. The index arrays are dynamic op arguments, so
new index values reuse the compiled op. JAX clamps out-of-range indices, so
bounds are checked on the host first (one min/max read), as PyTorch's CPU
kernels do; inside a compiled step (``dynajax.compile``, ``check_indices=True``)
they are checked on the device instead, and the error surfaces later
(``compile.checks``).

>>> x = dynajax.arange(6.0).reshape(2, 3)
>>> x[x > 3]
tensor([4., 5.])
"""
from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._device import user_frame
from .._tensor import Tensor, _make, _wrap_dim
from .convert import cast
from .creation import full, tensor
from .dispatch import Sym, index_checks
from .elementwise import broadcast_error, check_out, export, where, with_out
from .registry import apply, op
from .shape import expand, reshape
from .views import (
    _broadcastable,
    _may_overlap,
    check_no_overlap,
    inplace,
    is_detach,
    make_view,
)

__all__ = [
    "gather", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "index_fill",
    "index_copy", "index_put", "masked_fill", "masked_scatter", "masked_select", "nonzero", "argwhere",
    "take", "take_along_dim", "narrow", "select", "put",
]

_FULL = (None, None, None)  # a whole-dim slice in a static basic key


def _shape(x: Tensor) -> tuple:
    return tuple(x._v.shape)


def _val(t: Tensor):
    if t._base is not None:
        t._sync()
    return t._value


def _host(t: Tensor) -> np.ndarray:
    return t.numpy(force=True)


def _is_index(t: Tensor, long_only: bool = False) -> bool:
    """Whether ``t`` has a dtype PyTorch takes for an index tensor: int64, or (most ops) int32 as well;
    int8/int16/uint8 values are refused, as there (a uint8 key is a mask)."""
    d = t._v.dtype
    return d == np.int64 or (d == np.int32 and not long_only)


# ---------------------------------------------------------------- bounds
def _concrete(v) -> bool:
    return isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)


@jax.jit
def _extrema_dev(vals):
    return jnp.stack([jnp.stack([v.min(), v.max()]).astype(jnp.int64) for v in vals])


def on_host(vals) -> bool:
    """Whether every array of ``vals`` lives in host memory (a CPU device): reading it needs no transfer."""
    return all(d.platform == "cpu" for v in vals for d in v.devices())


def _extrema(vals: list):
    """``[[min, max], ...]`` of each array, in one host read."""
    if on_host(vals):  # host memory already: no transfer
        return [(a.min(), a.max()) for a in map(np.asarray, vals)]
    return np.asarray(_extrema_dev(tuple(vals)))


def check_bounds(indices, sizes, fail, negative: bool = True, ignore: int | None = None,
                 name: str | None = None) -> None:
    """Call ``fail(bad_index, k)`` for the first index tensor ``k`` with a value outside
    ``[-size, size)`` (``[0, size)`` unless ``negative``; a value equal to ``ignore`` is never bad).

    While a compiled step that checks indices is recorded (``dispatch.index_checks``), values known already
    (an argument's) are read at once as well; where they are in host memory (a CPU device), the recording
    keeps the check for its replays to run on the host too (``note_host_check``: a replayed call runs no
    Python), so its executable has no check of them. Every other index tensor gets a device check
    (``_out_of_bounds``, recorded into the step) and ``fail`` is kept to raise when the step's report is read;
    ``name`` (default: the caller's) names the op there."""
    todo = [(k, t, s) for k, (t, s) in enumerate(zip(indices, sizes)) if 0 not in t._v.shape]
    if not todo:
        return
    known = [(k, v, s) for k, v, s in [(k, _val(t), s) for k, t, s in todo] if _concrete(v)]
    if known:   # values known here (eagerly; an argument of a compiled step): read now, raised at once
        _check_known(known, fail, negative, ignore)
    cap = index_checks()
    if cap is not None:
        kept, read = [], {k for k, _, _ in known}
        for k, t, s in todo:
            src = _host_values(t, cap)
            check = (k, int(s), bool(negative), ignore, fail)
            if src is None:
                kept.append((k, t, s))
                continue
            if k not in read:   # (a reshape of an argument: its values, read now)
                check_on_host(src[1], check)
            cap.note_host_check(src[0], check)
        todo = kept
        if not todo:
            return
        where = user_frame()
        where = (where.f_code.co_filename, where.f_lineno) if where is not None else None
        name = name or sys._getframe(1).f_code.co_name.strip("_")
        for k, t, s in todo:
            cap.note_check(_out_of_bounds, {"size": int(s), "negative": bool(negative), "ignore": ignore}, t,
                           functools.partial(fail, k=k), name, where)


_SAME_VALUES = frozenset({"reshape", "permute"})   # view ops whose result holds each of its base's values once


def _host_values(t: Tensor, cap):
    """(tensor, array in host memory) holding exactly ``t``'s index values while recording ``cap``: ``t``, or
    the base ``t`` is a reshape, permutation or detached alias of, with its array as the step got it; None
    where there is none (values computed in the step)."""
    if t._base is not None:
        if not all(is_detach(step) or getattr(step[0], "name", None) in _SAME_VALUES for step in t._view):
            return None
        t = t._base
    v = t._value
    if type(v) is Sym:   # (an input the recording adopted, unchanged: its array)
        v = cap.input_array(v)
    return (t, v) if _concrete(v) and on_host([v]) else None


def check_on_host(v, check) -> bool:
    """Run a check ``note_host_check`` kept, ``(k, size, negative, ignore, fail)``, on index array ``v``: raise
    the op's eager error where a value is out of range. False (nothing read) where ``v`` is not in host
    memory."""
    if not on_host([v]):
        return False
    k, size, negative, ignore, fail = check
    a = np.asarray(v)
    _check_range(k, v, size, a.min(), a.max(), fail, negative, ignore)
    return True


def _check_known(todo, fail, negative, ignore) -> None:
    for (k, v, s), (lo, hi) in zip(todo, _extrema([v for _, v, _ in todo])):
        _check_range(k, v, s, lo, hi, fail, negative, ignore)


def _check_range(k, v, s, lo, hi, fail, negative, ignore) -> None:
    """``fail(bad value, k)`` where index array ``v``, whose extremes are ``lo`` and ``hi``, holds a value out of
    range for size ``s``."""
    if ignore is not None and (lo < 0 or hi >= s):   # (rare: the values again, for the first bad one)
        a = np.asarray(v).reshape(-1)
        bad = a[(a != ignore) & ((a < (-s if negative else 0)) | (a >= s))]
        if bad.size:
            fail(int(bad[0]), k)
        return
    if hi >= s:
        fail(int(hi), k)
    if lo < (-s if negative else 0):
        fail(int(lo), k)


def _out_of_bounds(idx, *, size, negative, ignore):
    """A compiled step's check of index values ``idx``: ``[1, the bad value]`` where one is out of
    ``check_bounds``'s range (the same value its host path names), else ``[0, ...]``."""
    i = idx.reshape(-1)
    low = -size if negative else 0
    if ignore is None:
        hi, lo = i.max(), i.min()
        return jnp.stack([((hi >= size) | (lo < low)).astype(i.dtype), jnp.where(hi >= size, hi, lo)])
    bad = ((i < low) | (i >= size)) & (i != ignore)
    return jnp.stack([bad.any().astype(i.dtype), i[jnp.argmax(bad)]])


def _raise(exc, fmt: str):
    """A ``fail`` callback for :func:`check_bounds` raising ``exc(fmt.format(i=bad_index))``."""
    def fail(i, k):
        raise exc(fmt.format(i=i))
    return fail


# ---------------------------------------------------------------- key parsing
def _seq_as_tuple(seq) -> bool:
    """PyTorch's (numpy's legacy) rule: a list holding slices, tensors or lists is a tuple of indices."""
    if len(seq) >= 32:
        return False
    return any(isinstance(s, (Tensor, list, tuple, slice, np.ndarray)) or s is None or s is Ellipsis
               for s in seq)


def _as_index_tensor(item) -> Tensor:
    if isinstance(item, Tensor):
        return item
    a = np.asarray(item)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    return tensor(a)


def _classify(item):
    """(kind, payload) for one key item: int, slice, new, bool, arr (int tensor) or mask."""
    if item is None:
        return "new", None
    if item is Ellipsis:
        return "ell", None
    if isinstance(item, slice):
        return "slice", item
    if isinstance(item, (bool, np.bool_)):
        return "bool", bool(item)
    if isinstance(item, (int, np.integer)):
        return "int", int(item)
    if isinstance(item, (list, tuple, range, np.ndarray, jax.Array, Tensor)):
        t = _as_index_tensor(item)
        d = t._v.dtype
        if d == np.bool_ or d == np.uint8:
            return ("bool", bool(t.item())) if t._v.ndim == 0 else ("mask", t)
        if not _is_index(t):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return ("int", int(t.item())) if t._v.ndim == 0 else ("arr", t)
    if hasattr(item, "__index__"):
        return "int", int(item.__index__())
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
                     f"valid indices (got {type(item).__name__})")


@_dtype.x64.wrap
def parse_key(shape: tuple, key):
    """Split ``key`` into ``(basic, dims, arrays)``: the static basic key, the dims of
    ``x[basic]`` that the index tensors ``arrays`` apply to (masks become their nonzero
    positions), and PyTorch's IndexErrors for bad keys."""
    if isinstance(key, tuple):
        items = key
    elif isinstance(key, list) and _seq_as_tuple(key):
        items = tuple(key)
    else:
        items = (key,)
    items = [_classify(i) for i in items]
    ndim = len(shape)
    used = sum(1 if k in ("int", "slice", "arr") else p._v.ndim if k == "mask" else 0 for k, p in items)
    if used > ndim:
        if ndim == 0:
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    basic, dims, arrays, checks = [], [], [], []  # checks: (index tensor, size, k-th index)
    d = out = 0  # position in x, position in x[basic]
    ellipsis_left = ndim - used
    for kind, p in items:
        if kind == "int":
            if not -shape[d] <= p < shape[d]:
                raise IndexError(f"index {p} is out of bounds for dimension {d} with size {shape[d]}")
            basic.append(p % shape[d])
            d += 1
        elif kind == "slice":
            if p.step is not None and p.step == 0:
                raise ValueError("slice step cannot be zero")
            if p.step is not None and p.step < 0:
                raise ValueError("step must be greater than zero")
            s = p.indices(shape[d])
            basic.append(_FULL if s == (0, shape[d], 1) else s)
            d, out = d + 1, out + 1
        elif kind in ("new", "bool"):
            basic.append(None)
            if p is False:  # x[False]: a new dim of size 0
                dims.append(out)
                arrays.append(_make(jnp.zeros((0,), jnp.int64)))
            out += 1
        elif kind == "ell":
            basic.extend([_FULL] * ellipsis_left)
            d, out, ellipsis_left = d + ellipsis_left, out + ellipsis_left, 0
        elif kind == "arr":
            basic.append(_FULL)
            dims.append(out)
            checks.append((p, shape[d], len(arrays)))
            arrays.append(p)
            d, out = d + 1, out + 1
        else:  # mask: its nonzero positions, one index tensor per dim it covers
            k, mshape = p._v.ndim, _shape(p)
            for j in range(k):
                if mshape[j] != shape[d + j]:
                    raise IndexError(f"The shape of the mask {list(mshape)} at index {j} does not match the "
                                     f"shape of the indexed tensor {list(shape[d:d + k])} at index {j}")
            dims.extend(range(out, out + k))
            arrays.extend(nonzero(p, as_tuple=True))
            basic.extend([_FULL] * k)
            d, out = d + k, out + k
    try:
        np.broadcast_shapes(*[_shape(a) for a in arrays])
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(_shape(a))) for a in arrays)) from None

    dim_sizes = [(c[2], c[1]) for c in checks]   # (not the tensors: a compiled step keeps ``fail``)

    def fail(i, k):  # PyTorch numbers the dim among the indexed dims
        raise IndexError(f"index {i} is out of bounds for dimension {dim_sizes[k][0]} with size {dim_sizes[k][1]}")
    check_bounds([c[0] for c in checks], [c[1] for c in checks], fail,
                 name="index_put" if sys._getframe(1).f_code.co_name == "_put_key" else "index")
    while basic and basic[-1] == _FULL:
        basic.pop()
    return tuple(basic), tuple(dims), arrays


def _jidx(basic):
    return tuple(slice(*e) if isinstance(e, tuple) else e for e in basic)


def _adv(ndim, dims, idx):
    key = [slice(None)] * ndim
    for d, i in zip(dims, idx):
        key[d] = i
    return tuple(key)


@functools.lru_cache(maxsize=1024)
def _result_shape(shape, basic, dims, index_shapes) -> tuple:
    """Shape of ``x[key]`` for a parsed key (the target a ``__setitem__`` value broadcasts to)."""
    return jax.eval_shape(lambda x, *i: _index_impl(x, *i, basic=basic, dims=dims, in_shape=shape),
                          jax.ShapeDtypeStruct(shape, np.float32),
                          *[jax.ShapeDtypeStruct(s, np.int64) for s in index_shapes]).shape


# ---------------------------------------------------------------- the index / index_put ops
def _index_impl(x, *idx, basic, dims, in_shape):
    if basic:
        x = x[_jidx(basic)]
    if dims:
        x = x[_adv(x.ndim, dims, idx)]
    return x


def _put(x, v, idx, basic, dims, accumulate):
    v = jnp.asarray(v).astype(x.dtype)
    sub = x[_jidx(basic)] if basic else x
    boolean = x.dtype == np.bool_   # (bools accumulate as PyTorch adds them: True + True is True, a max)
    if dims:
        ref = sub.at[_adv(sub.ndim, dims, idx)]
        sub = (ref.max(v) if boolean else ref.add(v)) if accumulate else ref.set(v)
    else:
        sub = (sub | v if boolean else sub + v) if accumulate else jnp.broadcast_to(v, sub.shape)
    return x.at[_jidx(basic)].set(sub) if basic else sub


def _any_position(params: dict) -> dict:
    """``params`` of an index op with each integer of its key made 0: where the key takes one position of a
    dim, the result's shape does not depend on which (the key was bounds-checked when parsed). A recorded
    step infers each op's result shape once per (op, params, input shapes); ``x[:, t]`` in a loop over
    ``t`` then infers it once, not once per ``t`` (``compile.capture``)."""
    basic = params.get("basic")
    if not basic or not any(type(b) is int for b in basic):
        return params
    return {**params, "basic": tuple(0 if type(b) is int else b for b in basic)}


_index_impl.shape_params = _any_position
_slice = op("slice", backward_name="SliceBackward0")(_index_impl)  # basic keys: a view
_index = op("index", backward_name="IndexBackward0")(_index_impl)  # advanced keys: a copy


@op("index_backward")
def _index_backward(g, *idx, basic, dims, in_shape):
    return _put(jnp.zeros(in_shape, g.dtype), g, idx, basic, dims, True)


_index_backward.impl.shape_params = _any_position


@op("index_put")
def _index_put(x, v, *idx, basic, dims, accumulate, in_shape):
    return _put(x, v, idx, basic, dims, accumulate)


def _index_vjp(g, out, x, *idx, basic, dims, in_shape):
    return (apply(_index_backward, g, *idx, basic=basic, dims=dims, in_shape=in_shape),) + (None,) * len(idx)


_slice.defvjp(_index_vjp)
_index.defvjp(_index_vjp)


@_index_backward.defvjp
def _index_backward_vjp(g, out, gin, *idx, basic, dims, in_shape):
    return (apply(_index, g, *idx, basic=basic, dims=dims, in_shape=in_shape),) + (None,) * len(idx)


@_index_put.defvjp
def _index_put_vjp(g, out, x, v, *idx, basic, dims, accumulate, in_shape):
    gx = g if accumulate else apply(_index_put, g, 0.0, *idx, basic=basic, dims=dims, accumulate=False,
                                    in_shape=in_shape)
    gv = apply(_index, g, *idx, basic=basic, dims=dims, in_shape=in_shape)
    return (gx, gv) + (None,) * len(idx)


def basic_view(x: Tensor, basic: tuple) -> Tensor:
    """``x[basic]`` for a parsed static basic key, as a view of ``x``."""
    return make_view(_slice, x, basic=basic, dims=(), in_shape=_shape(x))


def _getitem(self: Tensor, key) -> Tensor:
    """``x[key]``: a view for ints/slices/None/..., a copy when the key holds index tensors or masks."""
    basic, dims, arrays = parse_key(_shape(self), key)
    if not arrays:
        return basic_view(self, basic)
    return apply(_index, self, *arrays, basic=basic, dims=dims, in_shape=_shape(self))


def _mask_fill(key, value: Tensor) -> bool:
    """Whether ``x[key] = value`` is, as PyTorch runs it, a ``masked_fill`` (which casts the value): one
    bool mask as the whole key and a one-element value (not when accumulating)."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    return isinstance(k, Tensor) and k._v.dtype in (np.bool_, np.uint8) and value._v.size == 1


def _put_key(x: Tensor, key, value, accumulate: bool) -> Tensor:
    """``x`` with ``x[key]`` set to (or, with ``accumulate``, increased by) ``value``; out of place."""
    shape = _shape(x)
    basic, dims, arrays = parse_key(shape, key)
    if not isinstance(value, (Tensor, int, float, bool, complex)):
        value = tensor(value, dtype=x.dtype)
    value = _dtype.checked_scalar(value, x._v.dtype, halves_wide=True)
    if (arrays and isinstance(value, Tensor) and value._v.dtype != x._v.dtype
            and (accumulate or not _mask_fill(key, value))):
        # PyTorch casts a value written through a basic key (a copy into a view), not through index tensors
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{x.dtype.legacy_name} for the destination and {value.dtype.legacy_name} for "
                           "the source.")
    if isinstance(value, Tensor):
        target = _result_shape(shape, basic, dims, tuple(_shape(a) for a in arrays))
        vs = _shape(value)
        while len(vs) > len(target) and vs[0] == 1:  # PyTorch drops leading size-1 dims of the value
            vs = vs[1:]
        if vs != _shape(value):
            value = reshape(value, vs)
        if not _broadcastable(vs, target) or len(vs) > len(target):
            if not arrays:
                expand(value, target)  # raises PyTorch's message for basic keys
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(vs)} cannot be broadcast to "
                               f"indexing result of shape {list(target)}")
    return apply(_index_put, x, value, *arrays, basic=basic, dims=dims, accumulate=bool(accumulate),
                 in_shape=shape)


def _setitem(self: Tensor, key, value) -> None:
    if self._base is not None and _may_overlap(self._view):
        # PyTorch copies into ``self[key]`` for a key without index tensors: refused where that view shows
        # one element several times (``x.expand(2, 3)[:] = v``); ``x.expand(2, 3)[0] = v`` is allowed
        basic, _, arrays = parse_key(_shape(self), key)
        if not arrays:
            check_no_overlap(basic_view(self, basic))
    inplace(self, lambda a: _put_key(a, key, value, False), "__setitem__")


Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem


def index_put(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """``input`` with ``input[indices]`` set to ``values`` (added when ``accumulate``).

    ``values`` must be a tensor of ``input``'s dtype, as for ``input[indices] = values`` with index tensors
    (a one-element value under a single bool mask is a ``masked_fill``, which casts).
    """
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put_(): argument 'values' (position 2) must be Tensor, not {type(values).__name__}")
    return _put_key(input, tuple(indices), values, accumulate)


export(index_put, inplace_name="index_put_")


# ---------------------------------------------------------------- select / narrow
@export
def select(input: Tensor, dim: int, index: int) -> Tensor:
    """The slice ``index`` along ``dim`` (that dim removed); a view."""
    shape = _shape(input)
    if not shape:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, len(shape))
    index = int(index)
    if not -shape[d] <= index < shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(shape)} at dimension {d}")
    return basic_view(input, (_FULL,) * d + (index % shape[d],))


@export
def narrow(input: Tensor, dim: int, start, length: int) -> Tensor:
    """Elements ``start .. start+length-1`` along ``dim``; a view."""
    shape = _shape(input)
    if not shape:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, len(shape))
    if isinstance(start, Tensor) and (start._v.ndim or start.dtype.np.kind not in "iu"):
        raise RuntimeError("start must be an 0-dim integral Tensor.")
    start, length, n = int(start), int(length), shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    start %= max(n, 1)
    if start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return basic_view(input, (_FULL,) * d + ((start, start + length, 1),))


# ---------------------------------------------------------------- index_select / index_add / _fill / _copy
def _dim_index(name: str, input: Tensor, dim: int, index: Tensor, exc=IndexError, vector_msg=None) -> tuple:
    """Checks shared by the ``index_*`` ops: returns the wrapped dim and the 1-D index."""
    if not _is_index(index):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index but got: {index.dtype.legacy_name}")
    if index._v.ndim > 1:
        raise exc(vector_msg or f"{name}(): Index is supposed to be a vector")
    d = _wrap_dim(dim, input._v.ndim)
    return d, reshape(index, (-1,)) if index._v.ndim == 0 else index


@export
def index_select(input: Tensor, dim: int, index: Tensor, *, out=None) -> Tensor:
    """The slices ``index`` (a 1-D int tensor) along ``dim``."""
    if not _is_index(index):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    d, index = _dim_index("index_select", input, dim, index)
    check_out(out, input, index, name="index_select")
    scalar = input._v.ndim == 0
    if scalar and index._v.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index._v.size} value(s)")
    check_bounds([index], [_shape(input)[d] if not scalar else 1],
                 _raise(IndexError, "index out of range in self"), negative=False, name="index_select")
    if scalar:   # a 0-d input gives a 0-d result: its one element
        r = apply(_index, reshape(input, (1,)), index, basic=(), dims=(0,), in_shape=(1,))
        return with_out(reshape(r, ()), out)
    return with_out(apply(_index, input, index, basic=(), dims=(d,), in_shape=_shape(input)), out)


def _check_source(name: str, input: Tensor, d: int, index: Tensor, source: Tensor, exc) -> None:
    if source._v.dtype != input._v.dtype:
        raise RuntimeError(f"{name}(): self and source expected to have the same dtype, but got (self) "
                           f"{input.dtype.legacy_name} and (source) {source.dtype.legacy_name}")
    s, x = _shape(source), _shape(input)
    n = index._v.size
    if len(s) != len(x) or s[:d] + s[d + 1:] != x[:d] + x[d + 1:]:
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(x)} source.shape = {list(s)}")
    if s[d] != n:
        raise exc(f"{name}(): Number of indices ({n}) should be equal to source.size(dim): ({s[d]}), for dim: {d}")


def _put_dim(input, d, index, value, accumulate):
    return apply(_index_put, input, value, index, basic=(), dims=(d,), accumulate=accumulate, in_shape=_shape(input))


def _on_scalar(fn, input: Tensor, dim: int, index: Tensor, source, fill: bool = False, **kw) -> Tensor:
    """``fn`` (an ``index_*`` op) on a 0-d ``input``: run on it as a 1-element vector (a 0-d ``source`` too,
    unless it is ``index_fill``'s value), the result made 0-d again, as PyTorch computes these."""
    _wrap_dim(dim, 0)
    if not fill and isinstance(source, Tensor) and source._v.ndim == 0:
        source = reshape(source, (1,))
    return reshape(fn(reshape(input, (1,)), 0, index, source, **kw), ())


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha=1) -> Tensor:
    """``input`` with ``alpha * source`` slices added at ``index`` along ``dim`` (repeats accumulate)."""
    if input._v.ndim == 0:
        if source._v.ndim:
            raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified "
                               f"dimension. Got self.shape = [] source.shape = {list(_shape(source))}")
        if index._v.size != 1:   # (PyTorch's own message for this case)
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        check_bounds([index], [1], _raise(IndexError, "index out of range in self"), negative=False, name="index_add")
        return _on_scalar(index_add, input, dim, index, source, alpha=alpha)
    d, index = _dim_index("index_add_", input, dim, index, vector_msg=(
        f"index_add_(): Index is supposed to be a vector, but got dim: {index._v.ndim} with type: "
        f"{index.dtype.legacy_name} and size: {list(_shape(index))}"))
    if source._v.dtype != input._v.dtype:
        raise RuntimeError(f"index_add_(): self ({input.dtype.legacy_name}) and source "
                           f"({source.dtype.legacy_name}) must have the same scalar type")
    _check_source("index_add_", input, d, index, source, RuntimeError)
    check_bounds([index], [_shape(input)[d]],
                 _raise(RuntimeError, f"index {{i}} is out of bounds for dimension {d} with size {_shape(input)[d]}"),
                 negative=False, name="index_add")
    if not isinstance(alpha, Tensor):   # PyTorch converts alpha to the input's dtype (an int one truncates it)
        dt = input._v.dtype
        alpha = _dtype.checked_scalar(alpha, dt)
        alpha = bool(alpha) if dt == np.bool_ else int(alpha) if _dtype.is_integral(dt) else alpha
    return _put_dim(input, d, index, source * alpha if alpha is not True and alpha != 1 else source, True)


def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """``input`` with its slices ``index`` along ``dim`` replaced by those of ``source``."""
    if not _is_index(index, long_only=True):
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {index.dtype.legacy_name}")
    if input._v.ndim == 0 and index._v.ndim <= 1:
        if index._v.size != 1:
            raise IndexError(f"index_copy_(): When source is scalar, index should have one element "
                             f"(got {index._v.size})")
        return _on_scalar(index_copy, input, dim, index, source)
    d, index = _dim_index("index_copy_", input, dim, index,
                          vector_msg=f"index_copy_(): Index should have dimension 1 or 0 (got {index._v.ndim})")
    _check_source("index_copy_", input, d, index, source, IndexError)
    check_bounds([index], [_shape(input)[d]], _raise(
        IndexError, f"index_copy_(): index {{i}} is out of bounds for dimension {d} with size {_shape(input)[d]}"),
        negative=False, name="index_copy")
    return _put_dim(input, d, index, source, False)


def index_fill(input: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """``input`` with its slices ``index`` along ``dim`` set to ``value`` (a number or 0-d tensor)."""
    if not _is_index(index, long_only=True):
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    d, index = _dim_index("index_fill_", input, dim, index, RuntimeError, "Index has to be a vector/scalar")
    if isinstance(value, Tensor) and value._v.ndim:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value._v.ndim} dimension(s).")
    if isinstance(value, complex) and not input.is_complex():
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    value = _dtype.checked_scalar(value, input._v.dtype)
    n = _shape(input)[d] if input._v.ndim else 1
    check_bounds([index], [n], _raise(IndexError, f"index {{i}} is out of bounds for dimension {d} with size {n}"),
                 name="index_fill")
    if input._v.ndim == 0:
        return _on_scalar(index_fill, input, dim, index, value, fill=True)
    if isinstance(value, Tensor):
        # a mask of the slices filled, so the value's gradient counts each slice once however often ``index``
        # names it (as PyTorch and jax.vjp count it; an index_put would count every repeat)
        mask = _put_dim(full((n,), False), 0, index, True, False)
        return where(reshape(mask, tuple(n if i == d else 1 for i in range(input._v.ndim))),
                     value.to(input.dtype), input)
    return _put_dim(input, d, index, value, False)


for _f in (index_add, index_copy, index_fill):
    export(_f, inplace_name=_f.__name__ + "_")


# ---------------------------------------------------------------- gather / scatter
def _grid(idx, dim):
    g = list(jnp.indices(idx.shape, sparse=True))
    g[dim] = idx
    return tuple(g)


@op("gather")
def _gather(x, idx, *, dim, in_shape):
    return x[_grid(idx, dim)]


@op("gather_backward")
def _gather_backward(g, idx, *, dim, in_shape):
    return jnp.zeros(in_shape, g.dtype).at[_grid(idx, dim)].add(g)


_gather.defvjp(lambda g, out, x, idx, *, dim, in_shape:
               (apply(_gather_backward, g, idx, dim=dim, in_shape=in_shape), None))
_gather_backward.defvjp(lambda g, out, gin, idx, *, dim, in_shape:
                        (apply(_gather, g, idx, dim=dim, in_shape=in_shape), None))


def _scatter_impl(x, idx, src, *, dim, reduce, include_self, in_shape):
    at = lambda a: a.at[_grid(idx, dim)]  # noqa: E731
    src = jnp.broadcast_to(jnp.asarray(src).astype(x.dtype), idx.shape)
    if reduce is None:
        return at(x).set(src)
    if x.dtype == np.bool_:   # (bools add as a logical or and multiply as an and, as PyTorch's do)
        reduce = {"sum": "amax", "prod": "amin"}.get(reduce, reduce)
    if not include_self:  # start every scattered-to slot from a neutral value
        x = at(x).set(src if reduce in ("amax", "amin") else 1 if reduce == "prod" else 0)
    if reduce in ("sum", "mean"):
        s = at(x).add(src)
        if reduce == "sum":
            return s
        n = at(jnp.full(x.shape, int(include_self), x.dtype)).add(1)
        n = jnp.maximum(n, 1)
        return s / n if jnp.issubdtype(x.dtype, jnp.inexact) else s // n
    if reduce == "prod" and jnp.issubdtype(x.dtype, jnp.floating):
        return _scatter_prod(x, idx, src, dim, in_shape)
    return {"prod": at(x).multiply, "amax": at(x).max, "amin": at(x).min}[reduce](src)


class _ArrayOps:
    """What :func:`_scatter_prod_coefs` computes with, on jax arrays (the impl's JVP); ``_TensorOps``: on
    Tensors (the tape's rule, so that ``create_graph=True`` records it)."""

    def __init__(self, idx, dim, in_shape):
        self.idx, self.dim, self.in_shape = idx, dim, in_shape

    where = staticmethod(jnp.where)

    def scatter(self, t, s, reduce=None, include_self=True):
        return _scatter_impl(t, self.idx, s, dim=self.dim, reduce=reduce, include_self=include_self,
                             in_shape=self.in_shape)

    def gather(self, t):
        return t[_grid(self.idx, self.dim)]

    def count(self, mask, like):
        """How many of ``mask``'s entries scatter to each slot of the input, read back at ``mask``'s."""
        return self.gather(self.scatter(jnp.zeros(self.in_shape, like.dtype), mask.astype(like.dtype), "sum"))


class _TensorOps(_ArrayOps):
    where = staticmethod(where)

    def scatter(self, t, s, reduce=None, include_self=True):
        return _scatter_like(t, self.idx, s, self.dim, self.in_shape, reduce, include_self)

    def gather(self, t):
        return _gather_like(t, self.idx, self.dim, self.in_shape)

    def count(self, mask, like):
        dt = like._v.dtype
        return self.gather(self.scatter(full(self.in_shape, 0.0, dtype=dt), cast(mask, dt), "sum"))


def _scatter_prod_coefs(k, x, src, out, include_self):
    """``d out / d x`` (per input slot) and ``d out / d src`` (per source entry) of a scatter-multiply, as
    PyTorch's ``scatter_reduce_backward`` takes them: exclusive products, exact when a single factor of a
    slot is 0 (several zeros: 0). The tape's rule is ``(g * cx, gather(g) * cs)``; the impl's JVP is
    ``cx * dx + scatter_add(cs * dsrc)``, so that ``jax.vjp``/``jax.jvp`` of a lowered graph agree with the
    tape for repeated indices too (JAX differentiates its own scatter-multiply only for unique ones)."""
    x1 = k.where(x == 0, 1.0, x)
    cx = k.scatter(x1, src, "prod", include_self) / x1
    if not include_self:
        cx = k.scatter(cx, 0.0)
    src0 = src == 0
    single = src0 & (k.count(src0, x) == 1)
    excl = k.scatter(x, k.where(single, 1.0, src), "prod", include_self)
    cs = k.where(single, k.gather(excl), k.gather(out) / k.where(src0, 1.0, src))
    return cx, cs


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _scatter_prod(x, idx, src, dim, in_shape):
    return x.at[_grid(idx, dim)].multiply(src)


@_scatter_prod.defjvp
def _scatter_prod_jvp(dim, in_shape, primals, tangents):
    x, idx, src = primals
    dx, _, dsrc = tangents
    out = _scatter_prod(x, idx, src, dim, in_shape)
    k = _ArrayOps(idx, dim, in_shape)
    cx, cs = _scatter_prod_coefs(k, x, src, out, True)
    return out, cx * dx + k.scatter(jnp.zeros_like(x), cs * dsrc, "sum")


# Three ops share the impl so that each rule saves only what it reads: overwriting and the
# linear reductions need just the index; prod/amax/amin also need x, src and the output.
_scatter = op("scatter")(_scatter_impl)
_scatter_add = op("scatter_add")(_scatter_impl)
_scatter_reduce = op("scatter_reduce")(_scatter_impl)
_SCATTER_OP = {None: _scatter, "sum": _scatter_add, "mean": _scatter_add}


def _scatter_like(t, idx, s, dim, in_shape, reduce=None, include_self=True) -> Tensor:
    return apply(_SCATTER_OP.get(reduce, _scatter_reduce), t, idx, s, dim=dim, reduce=reduce,
                 include_self=include_self, in_shape=in_shape)


def _gather_like(t, idx, dim, in_shape) -> Tensor:
    return apply(_gather, t, idx, dim=dim, in_shape=in_shape)


@_scatter.defvjp
def _scatter_vjp(g, out, x, idx, src, *, dim, reduce, include_self, in_shape):
    return _scatter_like(g, idx, 0.0, dim, in_shape), None, _gather_like(g, idx, dim, in_shape)


@_scatter_add.defvjp
def _scatter_add_vjp(g, out, x, idx, src, *, dim, reduce, include_self, in_shape):
    if reduce == "sum":
        gx = g if include_self else _scatter_like(g, idx, 0.0, dim, in_shape)
        return gx, None, _gather_like(g, idx, dim, in_shape)
    n = _scatter_like(full(in_shape, float(include_self), dtype=g.dtype), idx, 1.0, dim, in_shape, "sum")
    gx = g / n if include_self else where(n > 0, 0.0, g)
    return gx, None, _gather_like(g / n.clamp(min=1), idx, dim, in_shape)


@_scatter_reduce.defvjp
def _scatter_reduce_vjp(g, out, x, idx, src, *, dim, reduce, include_self, in_shape):
    k = _TensorOps(idx, dim, in_shape)
    gather_, scatter_ = k.gather, k.scatter
    if reduce == "prod":  # PyTorch's exclusive products (the impl's JVP uses the same coefficients)
        cx, cs = _scatter_prod_coefs(k, x, src, out, include_self)
        return g * cx, None, gather_(g) * cs
    # amax / amin: the gradient is shared evenly by the values that tie for the result (as in
    # PyTorch, an equal self value counts as a tie even when include_self=False)
    hit_src = src == gather_(out)
    hit_x = x == out
    n = scatter_(cast(hit_x, g._v.dtype), cast(hit_src, g._v.dtype), "sum")
    gx = where(hit_x, g / n, 0.0)
    return gx if include_self else scatter_(gx, 0.0), None, where(hit_src, gather_(g / n), 0.0)


def _check_gather_args(name: str, input: Tensor, dim: int, index: Tensor, src=None) -> int:
    if not _is_index(index):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    x, i = _shape(input), _shape(index)
    who = "input" if name == "gather" else "self"
    if len(i) != len(x) and (len(i) > 1 or len(x) > 1):
        raise RuntimeError(f"Index tensor must have the same number of dimensions as {who} tensor")
    if isinstance(src, Tensor) and len(_shape(src)) != len(i) and (len(i) > 1 or src._v.ndim > 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    d = _wrap_dim(dim, len(x))
    s = _shape(src) if isinstance(src, Tensor) else None
    for k in range(len(i)):
        bad_x = k != d and i[k] > x[k]
        if bad_x or (s is not None and i[k] > s[k]):
            if name == "gather":
                raise RuntimeError(f"Size does not match at dimension {k} expected index {list(i)} to be no larger "
                                   f"than self {list(x)} apart from dimension {d}")
            raise RuntimeError(f"Expected index {list(i)} to be no larger than self {list(x)} apart from dimension "
                               f"{d}" + (f" and to be no larger size than src {list(s)}" if s is not None else ""))
    n = x[d] if x else 1
    check_bounds([index], [n], _raise(RuntimeError, f"index {{i}} is out of bounds for dimension {d} with size {n}"),
                 negative=False, name=name)
    return d


def _as_1d(*ts):
    return [reshape(t, (1,)) if isinstance(t, Tensor) and t._v.ndim == 0 else t for t in ts]


@export
def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False, out=None) -> Tensor:
    """``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (and likewise for other dims)."""
    d = _check_gather_args("gather", input, dim, index)
    check_out(out, input, index, name="gather", dtype=input.dtype)
    scalar = input._v.ndim == 0
    x, i = _as_1d(input, index)
    r = apply(_gather, x, i, dim=d, in_shape=_shape(x))
    return with_out(reshape(r, ()) if scalar and index._v.ndim == 0 else r, out)


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_apply(name, input, dim, index, src, reduce, include_self):
    if reduce == "mean" and input._v.dtype == np.bool_:
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")
    if isinstance(src, Tensor) and src._v.dtype != input._v.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    src = _dtype.checked_scalar(src, input._v.dtype)
    d = _check_gather_args(name, input, dim, index, src)
    scalar = input._v.ndim == 0
    x, i, s = _as_1d(input, index, src)
    if isinstance(s, Tensor) and _shape(s) != _shape(i):  # only the index-shaped corner of src is used
        s = basic_view(s, tuple((0, n, 1) for n in _shape(i)))
    r = _scatter_like(x, i, s, d, _shape(x), reduce, bool(include_self))
    return reshape(r, ()) if scalar else r


def scatter(input: Tensor, dim: int, index: Tensor, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """``input`` with ``src`` (a tensor, or the number ``value``) written at ``index`` along ``dim``.

    ``reduce="add"``/``"multiply"`` combine instead of overwrite.
    """
    if src is None:
        if value is None:
            raise TypeError("scatter() needs a src tensor or a value")
        src = value
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply.")
        reduce = "sum" if reduce == "add" else "prod"
    return _scatter_apply("scatter", input, dim, index, src, reduce, True)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """``input`` with ``src`` added at ``index`` along ``dim`` (repeats accumulate)."""
    return _scatter_apply("scatter", input, dim, index, src, "sum", True)


def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """Reduce (sum/prod/mean/amax/amin) ``src`` into ``input`` at ``index`` along ``dim``."""
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _scatter_apply("scatter", input, dim, index, src, reduce, include_self)


for _f in (scatter, scatter_add, scatter_reduce):
    export(_f, inplace_name=_f.__name__ + "_")


@export
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """Values of ``input`` at ``indices`` along ``dim`` (of the flattened input when ``dim`` is None)."""
    if dim is None:   # (the flattened input's gather: its checks)
        return gather(reshape(input, (-1,)), 0, reshape(indices, (-1,)))
    if not _is_index(indices, long_only=True):
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{indices.dtype.legacy_name}")
    x, i = _shape(input), _shape(indices)
    if len(x) != len(i):
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same number of "
                           f"dimensions, but got {len(x)} dimensions for input, and {len(i)} dimensions for indices")
    d = _wrap_dim(dim, len(x))
    n = x[d]   # along a dim, PyTorch takes negative indices from the end (the flattened form does not)
    check_bounds([indices], [n], _raise(RuntimeError, f"index {{i}} is out of bounds for dimension {d} with size {n}"),
                 name="take_along_dim")
    indices = where(indices < 0, indices + n, indices)
    b = list(np.broadcast_shapes(x[:d] + (1,) + x[d + 1:], i[:d] + (1,) + i[d + 1:]))
    return gather(expand(input, tuple(b[:d] + [x[d]] + b[d + 1:])), d,
                  expand(indices, tuple(b[:d] + [i[d]] + b[d + 1:])))


# ---------------------------------------------------------------- take / put
def _flat_index(name: str, input: Tensor, index: Tensor) -> None:
    if not _is_index(index, long_only=True):
        raise RuntimeError(f"{name}(): Expected a long tensor for index, but got {index.dtype.legacy_name}")
    n = input.numel()
    check_bounds([index], [n], _raise(IndexError, f"out of range: tried to access index {{i}} on a tensor of {n} "
                                                  "elements."), name=name)


@export
def take(input: Tensor, index: Tensor, *, out=None) -> Tensor:
    """``input.flatten()[index]``, shaped like ``index``."""
    check_out(out, input, index, name="take")
    _flat_index("take", input, index)
    return with_out(apply(_index, reshape(input, (-1,)), index, basic=(), dims=(0,), in_shape=(input.numel(),)),
                    out, "take")


def put(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    """``input`` with ``input.flatten()[index] = source`` (added when ``accumulate``)."""
    if source._v.dtype != input._v.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{input.dtype.legacy_name} and source.dtype = {source.dtype.legacy_name}")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    _flat_index("put_", input, index)
    r = apply(_index_put, reshape(input, (-1,)), reshape(source, (-1,)), reshape(index, (-1,)), basic=(),
              dims=(0,), accumulate=bool(accumulate), in_shape=(input.numel(),))
    return reshape(r, _shape(input))


export(put, inplace_name="put_")


# ---------------------------------------------------------------- masks
def _check_mask(name: str, mask: Tensor) -> None:
    if mask._v.dtype != np.bool_:
        raise RuntimeError(f"{name} only supports boolean masks, but got mask with dtype {mask.dtype.legacy_name}")


def _broadcast_pair(a: Tensor, b: Tensor):
    sa, sb = _shape(a), _shape(b)
    if not _broadcastable(sa, sb):
        broadcast_error(None, a, b)
    s = np.broadcast_shapes(sa, sb)
    return expand(a, s), expand(b, s)


def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:
    """``input`` with ``value`` (a number or 0-d tensor) where ``mask`` is True."""
    _check_mask("masked_fill_", mask)
    if isinstance(value, Tensor):
        if value._v.ndim:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value._v.ndim} dimension(s).")
        value = cast(value, input._v.dtype)
    value = _dtype.checked_scalar(value, input._v.dtype)
    return cast(where(mask, value, input), input._v.dtype)


export(masked_fill, inplace_name="masked_fill_")


@export
def masked_select(input: Tensor, mask: Tensor, *, out=None) -> Tensor:
    """The elements of ``input`` where ``mask`` is True (both broadcast), as a 1-D tensor."""
    if mask._v.dtype != np.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    check_out(out, input, mask, name="masked_select")
    x, m = _broadcast_pair(input, mask)
    return with_out(x[m], out)


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``input`` with the positions where ``mask`` is True filled, in order, from ``source``."""
    _check_mask("masked_scatter_", mask)
    if source._v.dtype != input._v.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{input.dtype.legacy_name} and {source.dtype.legacy_name}")
    x, m = _broadcast_pair(input, mask)
    shape = _shape(x)
    if not shape:
        x, m = reshape(x, (1,)), reshape(m, (1,))
    pos = nonzero(m, as_tuple=True)
    n = pos[0].numel()
    if source.numel() < n:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    src = basic_view(reshape(source, (-1,)), ((0, n, 1),))
    r = apply(_index_put, x, src, *pos, basic=(), dims=tuple(range(len(pos))), accumulate=False,
              in_shape=_shape(x))
    return r if shape else reshape(r, ())


export(masked_scatter, inplace_name="masked_scatter_")


@export
def nonzero(input: Tensor, *, out=None, as_tuple: bool = False):
    """Indices of the nonzero elements: an ``(n, ndim)`` int64 tensor, or one 1-D tensor per dim."""
    a = _host(input)
    if as_tuple:
        return tuple(_make(jnp.asarray(p, np.int64)) for p in np.nonzero(np.atleast_1d(a)))
    pos = np.argwhere(a) if a.ndim else np.zeros((int(bool(a)), 0), np.int64)
    return with_out(_make(jnp.asarray(pos, np.int64)), out)


@export
def argwhere(input: Tensor) -> Tensor:
    """``nonzero(input)``: an ``(n, ndim)`` tensor of the indices of nonzero elements."""
    return nonzero(input)


# ---------------------------------------------------------------- scatters into views, index_reduce, strides
def _written_through(input: Tensor, src: Tensor, view) -> Tensor:
    """A copy of ``input`` with ``view(copy)`` (a view of it) overwritten by ``src``: the ``*_scatter`` ops."""
    out = input.clone()
    view(out).copy_(src)
    return out


def diagonal_scatter(input: Tensor, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """``input`` with the diagonal ``input.diagonal(offset, dim1, dim2)`` replaced by ``src``."""
    return _written_through(input, src, lambda t: t.diagonal(offset, dim1, dim2))


def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:
    return _written_through(input, src, lambda t: t.select(dim, index))


def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    d = _wrap_dim(dim, input._v.ndim)
    return _written_through(input, src, lambda t: t[(slice(None),) * d + (slice(start, end, step),)])


def index_reduce(input: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,
                 include_self: bool = True) -> Tensor:
    """Slices of ``source`` reduced (``"prod"``, ``"mean"``, ``"amax"``, ``"amin"``) into the slices
    ``index`` of ``input`` along ``dim``: ``scatter_reduce`` with ``index`` spread along the other dims."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
                           f"{reduce}.")
    nd = source._v.ndim
    d = _wrap_dim(dim, max(nd, 1))
    shape = [1] * nd
    if nd:
        shape[d] = -1
    spread = expand(reshape(index, tuple(shape)), tuple(source.shape)) if nd else index.reshape(())
    return scatter_reduce(input, d, spread, source, reduce, include_self=include_self)


def _strided_positions(size, stride, storage_offset: int) -> np.ndarray:
    """The flat positions of an ``as_strided`` view: ``storage_offset + sum_k i_k * stride_k``."""
    pos = np.full(tuple(int(s) for s in size), int(storage_offset), np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = int(n)
        pos = pos + np.arange(int(n), dtype=np.int64).reshape(shape) * int(s)
    return pos


def as_strided(input: Tensor, size, stride, storage_offset=None) -> Tensor:
    """The elements a strided view of ``input``'s (contiguous) storage would see, as a new tensor: JAX arrays
    have no strides, so this is a gather, not a view (writes to it do not reach ``input``)."""
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape")
    pos = _strided_positions(size, stride, storage_offset or 0)
    flat = input.reshape(-1)
    if pos.size and (pos.max() >= flat.shape[0] or pos.min() < 0):
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                           f"{storage_offset or 0} are out of bounds for a storage of {flat.shape[0]} elements")
    return flat[tensor(pos)] if pos.size else flat[:0].reshape(tuple(size))


def as_strided_scatter(input: Tensor, src: Tensor, size, stride, storage_offset=None) -> Tensor:
    """A copy of ``input`` whose elements at the ``as_strided`` positions are ``src``'s."""
    pos = _strided_positions(size, stride, storage_offset or 0)
    out = input.reshape(-1).clone()
    if pos.size:
        out[tensor(pos.reshape(-1))] = src.reshape(-1)
    return out.reshape(tuple(input.shape))


def nonzero_static(input: Tensor, *, size: int, fill_value: int = -1) -> Tensor:
    """``nonzero`` cut or padded (with ``fill_value``) to ``size`` rows."""
    nz = nonzero(input)
    n = nz.shape[0]
    if n >= size:
        return nz[:size]
    pad = full((size - n, nz.shape[1]), fill_value, dtype=nz.dtype)
    from .join import cat
    return cat([nz, pad])


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """Whether each element of ``elements`` is among ``test_elements`` (either may be a number)."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() received an invalid combination of arguments - got (numbers), but expected at "
                        "least one Tensor")
    e = elements if isinstance(elements, Tensor) else tensor(elements)
    t = test_elements if isinstance(test_elements, Tensor) else tensor(test_elements)
    hit = (e.unsqueeze(-1) == t.reshape(-1)).any(-1)
    return ~hit if invert else hit


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of the 1-D ``input``'s elements, one per row (``itertools`` order)."""
    import itertools
    if input._v.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return input.new_empty((0,))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(pick(range(input.shape[0]), r)), np.int64).reshape(-1, r)
    if not idx.size:
        return input.new_empty((0, r))
    return input[tensor(idx)]


for _f in (diagonal_scatter, select_scatter, slice_scatter, index_reduce, as_strided, as_strided_scatter,
           nonzero_static, isin):
    export(_f)
as_strided_copy = as_strided
__all__ += ["as_strided", "as_strided_copy", "as_strided_scatter", "combinations", "diagonal_scatter",
            "index_reduce", "isin", "nonzero_static", "select_scatter", "slice_scatter"]
