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
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

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


def _jax_fn(func: Callable, args: tuple) -> Callable:
    """A pure JAX function equivalent to ``func`` on arguments shaped like ``args``."""
    if isinstance(func, _Transformed):
        return func.to_jax(*args)
    return lower(func, *args).fn


def _call(jf: Callable, args: tuple, name: str):
    """Run ``jf`` on ``args``' arrays. Inside a lowering, or when an argument requires grad, it runs as
    one op with a JAX-derived VJP, so the outer trace records it and the tape differentiates through it."""
    leaves, tree = _tree_flatten(tuple(args))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    tracked = grad_mode.state.enabled and any(leaves[i].requires_grad for i in pos)
    if not registry._hooks and not tracked:
        return _to_tensors(jf(*_to_arrays(args)))

    def flat(*arrays):
        full = list(leaves)
        for i, a in zip(pos, arrays):
            full[i] = a
        return jax.tree_util.tree_leaves(jf(*_to_arrays(jax.tree_util.tree_unflatten(tree, full))))
    tensors = [leaves[i] for i in pos]
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(jf, *_to_arrays(args)))
    res = registry.apply(_jax_op(f"func.{name}", flat, out_tree.num_leaves), *tensors)
    return jax.tree_util.tree_unflatten(out_tree, [res] if out_tree.num_leaves == 1 else list(res))


def _jax_op(name: str, flat: Callable, nout: int) -> registry.Op:
    """An unregistered op running ``flat`` (arrays -> list of arrays), with a VJP derived by ``jax.vjp``."""
    o = registry.Op(name, flat if nout != 1 else (lambda *a: flat(*a)[0]), nout=nout)

    def rule(g, out, *inputs):
        gs = g if isinstance(g, tuple) else (g,)
        fpos = [j for j, t in enumerate(inputs) if _is_float(t._value.dtype)]
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

    def __init__(self, name: str, func: Callable, build: Callable) -> None:
        self.name, self.func, self._build = name, func, build
        self.__name__ = f"{name}({getattr(func, '__name__', type(func).__name__)})"
        self.__doc__ = getattr(func, "__doc__", None)

    def to_jax(self, *args) -> Callable:
        """The pure JAX function for arguments shaped like ``args``."""
        return self._build(args)

    def __call__(self, *args):
        return _call(self.to_jax(*args), args, self.name)

    def __repr__(self) -> str:
        return f"<dynajax.func {self.__name__}>"


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Gradient of a scalar-valued ``func`` w.r.t. the arguments ``argnums`` (as ``torch.func.grad``).

    >>> dynajax.func.grad(lambda x: (x ** 2).sum())(dynajax.tensor([1.0, 2.0]))
    tensor([2., 4.])
    """
    return _Transformed("grad", func, lambda a: jax.grad(_jax_fn(func, a), argnums=argnums, has_aux=has_aux))


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``(grad, value)`` in one pass (``(grad, (value, aux))`` with ``has_aux``), as ``torch.func``."""
    def build(a):
        vg = jax.value_and_grad(_jax_fn(func, a), argnums=argnums, has_aux=has_aux)
        return lambda *x: _swap(vg(*x))
    return _Transformed("grad_and_value", func, build)


def value_and_grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``(value, grad)`` in one pass, JAX's order (``((value, aux), grad)`` with ``has_aux``)."""
    return _Transformed("value_and_grad", func,
                        lambda a: jax.value_and_grad(_jax_fn(func, a), argnums=argnums, has_aux=has_aux))


def _swap(pair):
    return pair[1], pair[0]


def jacrev(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Jacobian by reverse mode: output shape + input shape."""
    return _Transformed("jacrev", func, lambda a: jax.jacrev(_jax_fn(func, a), argnums=argnums, has_aux=has_aux))


def jacfwd(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Jacobian by forward mode: output shape + input shape."""
    return _Transformed("jacfwd", func, lambda a: jax.jacfwd(_jax_fn(func, a), argnums=argnums, has_aux=has_aux))


def hessian(func: Callable, argnums=0) -> Callable:
    """Hessian of a scalar-valued ``func`` (forward-over-reverse)."""
    return _Transformed("hessian", func, lambda a: jax.hessian(_jax_fn(func, a), argnums=argnums))


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(output, vjp_fn)``: ``vjp_fn(cotangents)`` returns one gradient per primal (as ``torch.func.vjp``).

    >>> out, pull = dynajax.func.vjp(dynajax.sin, x); (gx,) = pull(dynajax.ones_like(out))
    """
    jf = _jax_fn(func, primals)
    res = jax.vjp(jf, *_to_arrays(primals), has_aux=has_aux)
    out, pull = res[0], res[1]

    def vjp_fn(*cotangents):
        ct = cotangents[0] if len(cotangents) == 1 else cotangents
        return _to_tensors(tuple(pull(_to_arrays(ct))))
    if has_aux:
        return _to_tensors(out), vjp_fn, _to_tensors(res[2])
    return _to_tensors(out), vjp_fn


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
        return jax.vmap(_jax_fn(func, example), in_axes=dims, out_axes=out_dims)
    return _Transformed("vmap", func, build)


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
