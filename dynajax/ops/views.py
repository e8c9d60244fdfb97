"""Views and in-place writes through them.

A view (``x[1:]``, ``x.view(...)``, ``x.t()``, ``x.detach()`` ...) remembers its
root base and the chain of view steps that produce it from the base, and
shares the base's version counter. An in-place op on a view computes the new
view value out of place, scatters it into the base with the recorded op
``view_scatter`` (so gradients flow to the base as in PyTorch's CopySlices),
and rebinds the base; any view whose recorded version is behind the counter is
recomputed from its base on next use.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype, _sizes
from .._tensor import Tensor, _make, upcall
from ..autograd import grad_mode
from .registry import Op, apply, op

DETACH = "detach"  # a chain's step made by detach(): no gradient link, the base's version counter shared
DATA = "data"      # one made by .data: no gradient link, and writes through it leave the version as it was


def is_detach(step) -> bool:
    """Whether a view chain's step is a detached alias (:data:`DETACH` or :data:`DATA`), not a view op."""
    return step is DETACH or step is DATA


def _detached(chain) -> bool:
    return any(is_detach(step) for step in chain)


def _run_chain(x, chain):
    for step in chain:
        if is_detach(step):
            continue
        o, params = step
        x = o.impl(x, **dict(params))
    return x


def _link(view: Tensor, base: Tensor, step) -> Tensor:
    root = base._base if base._base is not None else base
    view._base = root
    view._view = (base._view or ()) + (step,)
    view._vc = base._vc
    view._view_ver = base._vc[0] + base._vc[1]
    return view


def make_view(o: Op, x: Tensor, **params) -> Tensor:
    """Apply the view op ``o`` to ``x`` and link the result to ``x``'s base."""
    return link_view(apply(o, x, **params), x, o, **params)


def link_view(view: Tensor, x: Tensor, o: Op, **params) -> Tensor:
    """Link ``view``, computed from ``x`` elsewhere (one piece of a multi-output op), to ``x``'s base as
    the view ``o(x, **params)``: a write through it reaches the base, and it is recomputed by ``o``."""
    return _link(view, x, (o, tuple(params.items())))


@upcall
def detached_view(x: Tensor, data: bool = False) -> Tensor:
    """``x.detach()`` (``data``: ``x.data``): an alias of ``x`` outside the graph. A write through ``detach()``'s
    bumps ``x``'s version, as PyTorch's shared version counter does (a value saved for backward is then caught
    as modified); one through ``.data``'s does not."""
    if x._base is not None:
        x._sync()
    return _link(_make(x._value), x, DATA if data else DETACH)


@upcall
def refresh(view: Tensor) -> None:
    base, chain = view._base, view._view
    vc = base._vc
    if type(view._value) is _sizes.Pending:   # a broadcast too large to make stays unmade (``shape.expand``)
        view._view_ver = vc[0] + vc[1]
        return
    if _detached(chain):
        view._value = _run_chain(base._value, chain)
    else:
        x = base
        with grad_mode.enable_grad():
            for o, params in chain:
                x = apply(o, x, **dict(params))
        view._value, view.grad_fn, view._out_idx, view._rg = x._value, x.grad_fn, x._out_idx, x._rg
    view._view_ver = vc[0] + vc[1]


def _flat_positions(shape, chain):
    """Index of each view element in the flattened base (computed at trace time)."""
    return _run_chain(jnp.arange(int(np.prod(shape)), dtype=jnp.int64).reshape(shape), chain)


def _may_overlap(chain) -> bool:
    """Whether a view chain has a step that can show one base element more than once (a dim ``expand``
    broadcast, ``unfold`` windows that overlap); every other view op maps elements one to one."""
    return any(not is_detach(step) and step[0].name in ("expand", "unfold_dim") for step in chain)


@functools.lru_cache(maxsize=512)
def _shares_elements(shape: tuple, chain) -> bool:
    """Whether the view ``chain`` of a base of ``shape`` shows some base element more than once."""
    if not _may_overlap(chain):
        return False
    with jax.ensure_compile_time_eval():   # (also while a step is being traced: the positions are static)
        pos = np.asarray(_flat_positions(shape, chain)).ravel()
    return np.unique(pos).size < pos.size


@op("view_scatter", backward_name="CopySlices")
def view_scatter(base, src, *, chain):
    if all(is_detach(step) for step in chain):   # a detached alias covers all of its base: no scatter
        return jnp.broadcast_to(src, base.shape).astype(base.dtype)
    pos = _flat_positions(base.shape, chain).ravel()
    src = jnp.broadcast_to(src, _run_chain(base, chain).shape).ravel().astype(base.dtype)
    flat = base.ravel()
    if _shares_elements(tuple(base.shape), chain):
        # Several view elements are one base element (``x.expand(2, 3)[0] = 1``). PyTorch's write touches
        # only the elements the op wrote, so a copy the op left as it was must not undo a copy it changed:
        # scatter only the changed elements (an unchanged one holds the base's value already).
        pos = jnp.where(src != flat[pos], pos, flat.size)
        return flat.at[pos].set(src, mode="drop").reshape(base.shape)
    return flat.at[pos].set(src).reshape(base.shape)


@view_scatter.defvjp
def _view_scatter_vjp(g, out, base, src, *, chain):
    from .creation import zeros
    g_base = apply(view_scatter, g, zeros((), dtype=g.dtype), chain=chain)
    g_src = g
    for step in chain:
        if not is_detach(step):
            g_src = apply(step[0], g_src, **dict(step[1]))
    return g_base, g_src


def _check_inplace_allowed(t: Tensor) -> None:
    if not grad_mode.state.enabled:
        return
    if t._base is None:
        if t.grad_fn is None and t._rg:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    elif not _detached(t._view):
        b = t._base
        if b.grad_fn is None and b._rg:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                               "in-place operation.")


# In-place ops PyTorch allows on a tensor whose elements share memory (an expanded one): they write each
# element they touch once, so the result does not depend on the order of the writes.
_OVERLAP_OK = frozenset({"__setitem__", "index_put_", "index_fill_", "masked_fill_", "fill_"})


def check_no_overlap(t: Tensor, opname: str = "") -> None:
    """PyTorch's RuntimeError for an in-place write into a view that shows one element several times through
    a broadcast (stride-0) dim, as ``x.expand(2, 3).add_(1)``; ``fill_``, ``index_put_`` and the other ops
    of ``_OVERLAP_OK`` are allowed, as in PyTorch."""
    if t._base is None or opname in _OVERLAP_OK or not _may_overlap(t._view):
        return
    lay = layout(t)
    if lay is not None and any(n > 1 and st == 0 for n, st in zip(*lay)):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")


def _cast_result(t: Tensor, r: Tensor, opname: str) -> Tensor:
    tv, rv = t._value, r._value
    if rv.shape != tv.shape:
        b = np.broadcast_shapes(rv.shape, tv.shape) if _broadcastable(rv.shape, tv.shape) else None
        if b != tuple(tv.shape):
            raise RuntimeError(f"output with shape {list(tv.shape)} doesn't match the broadcast shape "
                               f"{list(b) if b is not None else list(rv.shape)}")
        from .shape import expand
        r = expand(r, tv.shape)
    return cast_dtype(t, r)


def cast_dtype(t: Tensor, r: Tensor) -> Tensor:
    """``r`` in ``t``'s dtype, for a write into ``t`` (an in-place op's or an ``out=`` argument's): PyTorch's
    RuntimeError where ``r``'s dtype is of a higher category (bool < integer < float < complex) than ``t``'s."""
    rd, td = r._v.dtype, t._v.dtype
    if rd != td:
        if _dtype._category(rd) > _dtype._category(td):
            raise RuntimeError(f"result type {_dtype.from_np(rd).legacy_name} can't be cast "
                               f"to the desired output type {_dtype.from_np(td).legacy_name}")
        r = r.to(_dtype.from_np(td))
    return r


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def inplace(t: Tensor, compute, opname: str = "") -> Tensor:
    """Run ``compute(alias_of_t) -> Tensor`` and write its result into ``t`` in place."""
    _check_inplace_allowed(t)
    check_no_overlap(t, opname)
    if t._base is not None:
        t._sync()
    alias = _make(t._value, t._rg, t.grad_fn, t._out_idx)
    return assign(t, _cast_result(t, compute(alias), opname))


def write(t: Tensor, r: Tensor, opname: str = "") -> Tensor:
    """Write the value of ``r`` into ``t`` in place: :func:`inplace` for a result that does not read ``t``."""
    if t._base is None and not grad_mode.state.enabled:   # an optimizer's update: only the rebind can apply
        tv, rv = t._v, r._v
        if tv.dtype == rv.dtype and tuple(tv.shape) == tuple(rv.shape):
            return assign(t, r)
    _check_inplace_allowed(t)
    check_no_overlap(t, opname)
    if t._base is not None:
        t._sync()
    return assign(t, _cast_result(t, r, ""))


@upcall
def assign(t: Tensor, r: Tensor) -> Tensor:
    """Rebind ``t`` (and, through views, its base) to the value of ``r``."""
    node = r.grad_fn
    if node is not None and node.out_saved is not None and node.out_saved[1] is r._vc:
        # the op saved its output; from now on that output is ``t``, so later writes to ``t`` must be caught
        node.out_saved = (node.out_saved[0], t._vc, t._vc[0] + 1)
    if t._base is None:
        _rebind(t, r)
        t._vc[0] += 1
        return t
    base, chain = t._base, t._view
    if _detached(chain):
        rv, bv = r._value, base._value
        if rv.shape == bv.shape and rv.dtype == bv.dtype and all(is_detach(step) for step in chain):
            base._value = rv   # a detached alias covers its base: the write is its new value (no op to record)
        else:
            base._value = view_scatter.impl(bv, rv, chain=chain)
        base._vc[1 if DATA in chain else 0] += 1   # (.data's writes are not versioned)
        t._value = r._value
        t._view_ver = base._vc[0] + base._vc[1]
        return t
    new_base = apply(view_scatter, base, r, chain=chain)
    _rebind(base, new_base)
    base._vc[0] += 1
    refresh(t)
    return t


def _rebind(t: Tensor, r: Tensor) -> None:
    """Give ``t`` the value of ``r``; under grad mode also its place in the graph
    (under no_grad a write changes the value only, as PyTorch's does)."""
    t._v = r._v   # (a padded result, ``_rows``, stays one)
    if grad_mode.state.enabled and (r.grad_fn is not None or t.grad_fn is not None):
        t.grad_fn, t._out_idx, t._rg = r.grad_fn, r._out_idx, r._rg


# ---------------------------------------------------------------- strides, as PyTorch would lay a view out
# JAX arrays have no strides; a view here is a chain of view ops from its base. Which of them PyTorch
# could make without a copy, and which are contiguous, follows from the strides those ops give a
# contiguous base: ``contiguous()`` copies a non-contiguous view, ``reshape`` one it cannot view, ``view``
# raises there -- so a write to their result reaches the base exactly where it would in PyTorch.
def _contiguous_strides(shape) -> list:
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return strides[::-1]


def view_strides(shape, strides, new_shape):
    """Strides of a view of ``shape``/``strides`` as ``new_shape`` (PyTorch's ``computeStride``), or None where
    no view can have that shape (its elements are not evenly spaced along some new dim)."""
    if math.prod(shape) == 0 or not shape:
        return _contiguous_strides(new_shape)
    new = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base = strides[-1]
    tensor_n = view_n = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_n *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_n * base):
            while view_d >= 0 and (view_n < tensor_n or new_shape[view_d] == 1):
                new[view_d] = view_n * base
                view_n *= new_shape[view_d]
                view_d -= 1
            if view_n != tensor_n:
                return None
            if d > 0:
                base = strides[d - 1]
                tensor_n = view_n = 1
    return new if view_d == -1 else None


def _step_layout(step, shape: list, strides: list):
    """(shape, strides) after view op ``step`` (None: an op whose layout is not modelled)."""
    o, params = step
    p = dict(params)
    name = o.name
    if name == "reshape":
        new = view_strides(shape, strides, p["shape"])
        return None if new is None else (list(p["shape"]), new)
    if name == "permute":
        return [shape[i] for i in p["dims"]], [strides[i] for i in p["dims"]]
    if name == "expand":
        out = list(p["shape"])
        lead = len(out) - len(shape)
        return out, [0] * lead + [0 if shape[i] == 1 and out[lead + i] != 1 else strides[i] for i in range(len(shape))]
    if name == "slice":
        new_shape, new_strides, d = [], [], 0
        for b in p["basic"]:
            if b is None:
                new_shape.append(1)
                new_strides.append(1)
            elif isinstance(b, int):
                d += 1
            else:
                start, stop, step_ = b
                if start is not None:
                    new_shape.append(len(range(start, stop, step_)))
                    new_strides.append(strides[d] * step_)
                else:
                    new_shape.append(shape[d])
                    new_strides.append(strides[d])
                d += 1
        return new_shape + shape[d:], new_strides + strides[d:]
    if name == "unfold_dim":   # the windows along ``dim``, ``step`` apart; their elements as a new last dim
        d, size, step_ = p["dim"], p["size"], p["step"]
        n = (shape[d] - size) // step_ + 1
        return (shape[:d] + [n] + shape[d + 1:] + [size], strides[:d] + [strides[d] * step_] + strides[d + 1:]
                + [strides[d]])
    if name == "diagonal":
        off, d1, d2 = p["offset"], p["dim1"], p["dim2"]
        n = max(0, min(shape[d1], shape[d2] - off) if off >= 0 else min(shape[d1] + off, shape[d2]))
        keep = [i for i in range(len(shape)) if i not in (d1, d2)]
        return [shape[i] for i in keep] + [n], [strides[i] for i in keep] + [strides[d1] + strides[d2]]
    return None


def layout(t: Tensor):
    """(shape, strides) PyTorch would give tensor ``t``: a base's are contiguous, a view's follow its chain;
    None where the chain has a step no stride model covers, or that PyTorch would have copied."""
    if t._base is None:
        shape = list(t._v.shape)
        return shape, _contiguous_strides(shape)
    shape = list(t._base._v.shape)
    strides = _contiguous_strides(shape)
    for step in t._view:
        if is_detach(step):
            continue
        got = _step_layout(step, shape, strides)
        if got is None:
            return None
        shape, strides = got
    return shape, strides


@upcall
def is_contiguous(t: Tensor) -> bool:
    """PyTorch's ``is_contiguous``: the strides of every dim longer than 1 are those of a fresh tensor."""
    lay = layout(t)
    if lay is None:
        return True
    shape, strides = lay
    if math.prod(shape) == 0:
        return True
    expected = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s == 1:
            continue
        if st != expected:
            return False
        expected *= s
    return True
