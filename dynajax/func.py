"""``dynajax.func``: the ``torch.func`` surface, powered by JAX transforms.

Each transform takes a define-by-run function of dynajax Tensors, lowers it on
the call's arguments (``dynajax.lower``: the Python control flow taken on these
arguments is what gets transformed), applies the matching JAX transform to the
pure function and returns dynajax Tensors. Transforms compose
(``vmap(grad(loss))``) in JAX, and ``argnums`` works as in ``torch.func``.

>>> from dynajax.func import grad, vmap
>>> per_example = vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import random
from ._dtype import x64 as _x64
from ._tensor import Tensor, _make
from .autograd import grad_mode
from .lower import _is_float, _tree_flatten, lower
from .ops import registry

__all__ = ["grad", "grad_and_value", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap",
           "functional_call"]


def _to_arrays(tree):
    return jax.tree_util.tree_map(lambda x: x.detach()._value if isinstance(x, Tensor) else x, tree,
                                  is_leaf=lambda x: isinstance(x, Tensor))


def _to_tensors(tree):
    return jax.tree_util.tree_map(lambda a: _make(a) if isinstance(a, jax.Array) else a, tree)


def _shapes(tree):
    """``tree`` with each array as its shape and dtype (inside ``dynajax.compile`` a tensor's value is the
    captured graph's symbol, which JAX cannot abstract by itself)."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(tuple(a.shape), np.dtype(a.dtype))
                                  if hasattr(a, "shape") and hasattr(a, "dtype") else a, tree)


def _dict_orders(tree, orders: dict) -> dict:
    """The key order of every dict in ``tree`` (the call's arguments), by its set of keys."""
    if isinstance(tree, dict):
        orders.setdefault(frozenset(tree), list(tree))
        items = tree.values()
    elif isinstance(tree, (list, tuple)):
        items = tree
    else:
        return orders
    for x in items:
        _dict_orders(x, orders)
    return orders


def _in_arg_order(tree, orders: dict):
    """``tree`` with each dict's keys in the order of the argument dict with the same keys. JAX rebuilds a
    dict with sorted keys; ``torch.func`` keeps the caller's order, so ``zip(params.values(),
    grads.values())`` pairs each parameter with its own gradient."""
    if isinstance(tree, dict):
        order = orders.get(frozenset(tree), list(tree))
        return {k: _in_arg_order(tree[k], orders) for k in order}
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return tuple(_in_arg_order(x, orders) for x in tree)
    if isinstance(tree, list):
        return [_in_arg_order(x, orders) for x in tree]
    return tree


_lowerings: list = []   # while a transform builds its JAX function: a list collecting the recordings it made


def _jax_fn(func: Callable, args: tuple, differentiated: bool = True) -> Callable:
    """A pure JAX function equivalent to ``func`` on arguments shaped like ``args``."""
    if isinstance(func, _Transformed):
        return func.to_jax(*args)
    low = lower(func, *args)
    if _lowerings:
        _lowerings[-1].append(low)
    if differentiated and low.foreign:
        names = sorted({n.op.name for _, n, _, _ in low.foreign})
        warnings.warn(f"dynajax.func differentiates the ops that the forward of the custom autograd.Function "
                      f"{', '.join(names)} ran, not its hand-written backward (PyTorch's torch.func uses the "
                      "backward): a backward that is not the forward's derivative (a straight-through "
                      "estimator, a clipped gradient) is not applied. Take that gradient on the tape.",
                      stacklevel=5)
    return low.fn


@contextlib.contextmanager
def _read_as(tensors: list, arrays) -> None:
    """Let ``tensors`` hold ``arrays`` (JAX's tracers) for a moment: a lowered function reads the current value
    of each parameter it closes over, so under ``jax.vjp`` its gradient flows to these arrays."""
    old = [t._value for t in tensors]
    try:
        for t, a in zip(tensors, arrays):
            t._value = a
        yield
    finally:
        for t, v in zip(tensors, old):
            t._value = v


def _call(jf: Callable, args: tuple, name: str, params: list = ()):
    """Run ``jf`` on ``args``' arrays. Inside a lowering, or when an argument or a tensor ``jf`` reads through
    its closure (``params``) requires grad, it runs as one op with a JAX-derived VJP, so the outer trace
    records it and the tape differentiates through it, to the arguments and to those closure tensors."""
    leaves, tree = _tree_flatten(tuple(args))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    tracked = grad_mode.state.enabled and (any(leaves[i].requires_grad for i in pos)
                                           or any(p.requires_grad for p in params))
    orders = _dict_orders(args, {})
    if not registry._hooks and not tracked:
        return _in_arg_order(_to_tensors(jf(*_to_arrays(args))), orders)
    k = len(pos)

    def whole(*arrays):
        full = list(leaves)
        for i, a in zip(pos, arrays[:k]):
            full[i] = a
        with _read_as(params, arrays[k:]):
            return jf(*_to_arrays(jax.tree_util.tree_unflatten(tree, full)))

    def flat(*arrays):
        return jax.tree_util.tree_leaves(whole(*arrays))
    tensors = [leaves[i] for i in pos] + list(params)
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(whole, *_shapes([t._value for t in tensors])))
    res = registry.apply(_jax_op(f"func.{name}", flat, out_tree.num_leaves), *tensors)
    return _in_arg_order(jax.tree_util.tree_unflatten(out_tree, [res] if out_tree.num_leaves == 1 else list(res)),
                         orders)


def _jax_op(name: str, flat: Callable, nout: int) -> registry.Op:
    """An unregistered op running ``flat`` (arrays -> list of arrays), with a VJP derived by ``jax.vjp``."""
    o = registry.Op(name, flat if nout != 1 else (lambda *a: flat(*a)[0]), nout=nout)

    def rule(g, out, *inputs):
        gs = g if isinstance(g, tuple) else (g,)
        fpos = [j for j, t in enumerate(inputs) if _is_float(t._v.dtype)]
        k = len(inputs)

        def pull(*a):
            xs, cts = list(a[:k]), tuple(a[k:])

            def sub(*fv):
                full = list(xs)
                for j, v in zip(fpos, fv):
                    full[j] = v
                return tuple(flat(*full))
            return list(jax.vjp(sub, *[xs[j] for j in fpos])[1](cts))
        res = registry.apply(_jax_op(name + ".vjp", pull, len(fpos)), *inputs, *gs)
        res = [res] if len(fpos) == 1 else list(res)
        cts = [None] * k
        for j, r in zip(fpos, res):
            cts[j] = r
        return tuple(cts)
    o.defvjp(rule)
    return o


class _Transformed:
    """A transformed function: callable on tensors, and composable (``to_jax``) by other transforms."""

    def __init__(self, name: str, func: Callable, build: Callable, remake: Callable) -> None:
        self.name, self.func, self._build, self._remake = name, func, build, remake
        self.__name__ = f"{name}({getattr(func, '__name__', type(func).__name__)})"
        self.__doc__ = getattr(func, "__doc__", None)

    def to_jax(self, *args) -> Callable:
        """The pure JAX function for arguments shaped like ``args``."""
        return self._build(args)

    @_x64.wrap
    def __call__(self, *args, **kwargs):
        if kwargs:   # passed through to ``func`` as they are, neither transformed nor mapped (as torch.func)
            return self._remake(functools.partial(self.func, **kwargs))(*args)
        made: list = []
        _lowerings.append(made)
        try:
            jf = self.to_jax(*args)
        finally:
            _lowerings.pop()
        params, seen = [], set()
        for low in made:
            for t in low.params.values():
                if id(t) not in seen and t._base is None:
                    seen.add(id(t))
                    params.append(t)
        return _call(jf, args, self.name, params)

    def __repr__(self) -> str:
        return f"<dynajax.func {self.__name__}>"


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Gradient of a scalar-valued ``func`` w.r.t. the arguments ``argnums`` (as ``torch.func.grad``).

    >>> dynajax.func.grad(lambda x: (x ** 2).sum())(dynajax.tensor([1.0, 2.0]))
    tensor([2., 4.])
    """
    return _Transformed("grad", func,
                        lambda a: jax.grad(_scalar_valued(_jax_fn(func, a), has_aux, "grad"), argnums=argnums,
                                           has_aux=has_aux),
                        lambda f: grad(f, argnums, has_aux))


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``(grad, value)`` in one pass (``(grad, (value, aux))`` with ``has_aux``), as ``torch.func``."""
    def build(a):
        vg = jax.value_and_grad(_scalar_valued(_jax_fn(func, a), has_aux, "grad_and_value"), argnums=argnums,
                                has_aux=has_aux)
        return lambda *x: _swap(vg(*x))
    return _Transformed("grad_and_value", func, build, lambda f: grad_and_value(f, argnums, has_aux))


def value_and_grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``(value, grad)`` in one pass, JAX's order (``((value, aux), grad)`` with ``has_aux``)."""
    return _Transformed("value_and_grad", func,
                        lambda a: jax.value_and_grad(_scalar_valued(_jax_fn(func, a), has_aux, "value_and_grad"),
                                                     argnums=argnums, has_aux=has_aux),
                        lambda f: value_and_grad(f, argnums, has_aux))


def _scalar_valued(jf: Callable, has_aux: bool, name: str) -> Callable:
    """``jf``, raising PyTorch's RuntimeError when its (first) output is not a one-element tensor, where
    ``jax.grad`` would raise a TypeError naming JAX's terms."""
    def checked(*a):
        out = jf(*a)
        value = out[0] if has_aux else out
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) != 0:
            raise RuntimeError(f"{name}(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor with "
                               f"{len(shape)} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        return out
    return checked


def _swap(pair):
    return pair[1], pair[0]


def jacrev(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Jacobian by reverse mode: output shape + input shape."""
    return _Transformed("jacrev", func, lambda a: jax.jacrev(_jax_fn(func, a), argnums=argnums, has_aux=has_aux),
                        lambda f: jacrev(f, argnums, has_aux))


def jacfwd(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Jacobian by forward mode: output shape + input shape."""
    return _Transformed("jacfwd", func, lambda a: jax.jacfwd(_jax_fn(func, a), argnums=argnums, has_aux=has_aux),
                        lambda f: jacfwd(f, argnums, has_aux))


def hessian(func: Callable, argnums=0) -> Callable:
    """Hessian of a scalar-valued ``func`` (forward-over-reverse)."""
    return _Transformed("hessian", func, lambda a: jax.hessian(_jax_fn(func, a), argnums=argnums),
                        lambda f: hessian(f, argnums))


@_x64.wrap
def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(output, vjp_fn)``: ``vjp_fn(cotangents)`` returns one gradient per primal (as ``torch.func.vjp``).

    >>> out, pull = dynajax.func.vjp(dynajax.sin, x); (gx,) = pull(dynajax.ones_like(out))
    """
    jf = _jax_fn(func, primals)
    res = jax.vjp(jf, *_to_arrays(primals), has_aux=has_aux)
    out, pull = res[0], res[1]

    orders = _dict_orders(primals, {})

    @_x64.wrap
    def vjp_fn(*cotangents):
        ct = cotangents[0] if len(cotangents) == 1 else cotangents
        return _in_arg_order(_to_tensors(tuple(pull(_to_arrays(ct)))), orders)
    if has_aux:
        return _to_tensors(out), vjp_fn, _to_tensors(res[2])
    return _to_tensors(out), vjp_fn


@_x64.wrap
def jvp(func: Callable, primals: tuple, tangents: tuple, has_aux: bool = False):
    """``(output, jvp_out)``: forward-mode derivative of ``func`` at ``primals`` along ``tangents``."""
    primals, tangents = tuple(primals), tuple(tangents)
    jf = _jax_fn(func, primals)
    res = jax.jvp(jf, _to_arrays(primals), _to_arrays(tangents), has_aux=has_aux)
    return tuple(_to_tensors(r) for r in res)


def _slice_example(arg, dim):
    """Element 0 of ``arg`` along its vmapped ``dim`` (an int, None, or a pytree prefix of ints)."""
    if dim is None:
        return arg
    if isinstance(dim, int):
        return jax.tree_util.tree_map(
            lambda t: _make(jnp.take(t._value if isinstance(t, Tensor) else jnp.asarray(t), 0, axis=dim))
            if isinstance(t, (Tensor, jax.Array, np.ndarray)) else t,
            arg, is_leaf=lambda x: isinstance(x, Tensor))
    return jax.tree_util.tree_map(_slice_example, dim, arg, is_leaf=lambda x: x is None)


def _has_tensor(x) -> bool:
    return any(isinstance(a, (Tensor, jax.Array, np.ndarray))
               for a in jax.tree_util.tree_leaves(x, is_leaf=lambda t: isinstance(t, Tensor)))


def vmap(func: Callable, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None) -> Callable:
    """Map ``func`` over a batch dim of its arguments (as ``torch.func.vmap``).

    ``func`` is recorded once, on the first element of the batch, so its Python
    control flow must not depend on which element it sees.

    >>> dynajax.func.vmap(lambda x: x.sum())(dynajax.ones(4, 3)).shape
    dynajax.Size([4])
    """
    def build(args):
        dims = tuple(in_dims if _has_tensor(a) else None for a in args) if isinstance(in_dims, int) \
            else tuple(in_dims)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries but the function got {len(args)} arguments")
        example = tuple(_slice_example(a, d) for a, d in zip(args, dims))
        with _counting_draws() as draws:
            jf = _jax_fn(func, example, differentiated=False)
        if draws[0] and randomness == "error":
            raise RuntimeError("vmap: called random operation while in randomness error mode. Please either use "
                               "the 'same' or 'different' randomness flags on vmap or perform the randomness "
                               "operation out of vmap")
        if draws[0] and randomness == "different":
            # the recording on one element baked its draws in: every element would get the same ones
            raise NotImplementedError("vmap(randomness='different'): random operations inside a dynajax vmap "
                                      "draw once for the whole batch; use randomness='same', or draw the "
                                      "batch's randomness outside vmap and map over it")
        return jax.vmap(jf, in_axes=dims, out_axes=out_dims)
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got "
                           f"{randomness}")
    return _Transformed("vmap", func, build,
                        lambda f: vmap(f, in_dims, out_dims, randomness, chunk_size=chunk_size))


@contextlib.contextmanager
def _counting_draws():
    """Counts the random keys drawn inside (``[n]``): a recording that drew any baked its draws in."""
    count = [0]
    orig = random.Generator.next_key

    def counted(gen):
        count[0] += 1
        return orig(gen)
    random.Generator.next_key = counted
    try:
        yield count
    finally:
        random.Generator.next_key = orig


@contextlib.contextmanager
def _swapped(module, tensors: dict):
    """Temporarily replace ``module``'s parameters/buffers by name (``"fc.weight"``)."""
    old = []
    try:
        for name, t in tensors.items():
            *path, leaf = name.split(".")
            owner = module
            for p in path:
                owner = getattr(owner, p)
            for store in ("_parameters", "_buffers"):
                d = owner.__dict__.get(store)
                if isinstance(d, dict) and leaf in d:
                    old.append((d, leaf, d[leaf]))
                    d[leaf] = t
                    break
            else:
                old.append((owner, leaf, getattr(owner, leaf)))
                object.__setattr__(owner, leaf, t)
        yield
    finally:
        for holder, leaf, value in reversed(old):
            if isinstance(holder, dict):
                holder[leaf] = value
            else:
                object.__setattr__(holder, leaf, value)


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *, tie_weights: bool = True,
                    strict: bool = False):
    """Call ``module`` with its parameters and buffers replaced by the given tensors (as ``torch.func``).

    >>> out = dynajax.func.functional_call(model, {"fc.weight": w, "fc.bias": b}, (x,))
    """
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, (list, tuple)):
        merged = {}
        for d in dicts:
            dup = set(merged) & set(d)
            if dup:
                raise ValueError(f"{sorted(dup)} appeared in multiple dictionaries; behavior of functional call "
                                 "is ambiguous")
            merged.update(d)
        dicts = merged
    if strict and hasattr(module, "named_parameters"):
        expected = {n for n, _ in module.named_parameters()} | {n for n, _ in getattr(module, "named_buffers",
                                                                                        lambda: ())()}
        missing, unexpected = sorted(expected - set(dicts)), sorted(set(dicts) - expected)
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}: missing keys {missing}, "
                               f"unexpected keys {unexpected}")
    args = args if isinstance(args, tuple) else (args,)
    with _swapped(module, dicts):
        return module(*args, **(kwargs or {}))
