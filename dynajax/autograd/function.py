"""Custom differentiable functions: subclass ``Function`` with static ``forward``/``backward``.

>>> class Square(dynajax.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x * x
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return 2 * x * g
>>> y = Square.apply(t)
"""
from __future__ import annotations

import functools

from .._tensor import Tensor, _make
from . import grad_mode
from .graph import Node


class FunctionCtx:
    """The ``ctx`` handed to ``forward`` and ``backward``."""

    def __init__(self) -> None:
        self._saved = ()
        self.needs_input_grad: tuple = ()
        self._non_diff: set = set()
        self._dirty: tuple = ()
        self._in_meta: tuple = ()
        self._out_pos: tuple = ((), 0)
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} is of type "
                                f"{type(t).__name__}")
        self._saved = tuple((t, t._vc[0]) if t is not None else None for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        out = []
        for s in self._saved:
            if s is None:
                out.append(None)
                continue
            t, ver = s
            if t._vc[0] != ver:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{t.dtype!r} {list(t.shape)}] is at version {t._vc[0]}; expected version "
                    f"{ver} instead.")
            out.append(t)
        return tuple(out)

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors) -> None:
        """Declare ``tensors`` (inputs) changed in place by ``forward``: ``apply`` returns each of them as the
        output it is, its history moved onto this Function, as PyTorch does."""
        self._dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class _FunctionOp:
    """Stands in for a registry Op in the Node of a custom Function (no jax impl)."""

    def __init__(self, cls) -> None:
        self.name = cls.__name__
        self.backward_name = cls.__name__ + "Backward"
        self.cls = cls
        self.impl = None
        self.per_input = None
        self.saves_out = False
        self.nout = 1
        self.none_cotangents = False

    @staticmethod
    def rule(g, out, *inputs, ctx, nout):
        grads = g if isinstance(g, tuple) else (g,)
        pos, n = ctx._out_pos
        if len(pos) != n:   # outputs that are not tensors (a count, a flag) get None, as in PyTorch
            full = [None] * n
            for k, i in enumerate(pos):
                full[i] = grads[k]
            grads = tuple(full)
        with grad_mode.enable_grad() if grad_mode.state.enabled else grad_mode.no_grad():
            res = ctx._cls.backward(ctx, *grads)
        res = res if isinstance(res, tuple) else (res,)
        name = ctx._cls.__name__
        if len(res) < len(inputs) or any(r is not None for r in res[len(inputs):]):   # (extra Nones: allowed)
            raise RuntimeError(f"function {name}Backward returned an incorrect number of gradients "
                               f"(expected {len(inputs)}, got {len(res)})")
        for i, (r, a) in enumerate(zip(res, inputs)):   # a gradient the input broadcasts to is summed back
            meta = ctx._in_meta[i]
            if r is not None and not isinstance(r, Tensor):
                raise RuntimeError(f"expected Variable or None (got {type(r).__name__})")
            if r is not None and meta is None:
                raise RuntimeError(f"function {name}Backward returned a gradient different than None at position "
                                   f"{i + 1}, but the corresponding forward input was not a Variable")
            shape = getattr(r, "shape", None)
            if shape is not None and meta is not None and tuple(shape) != tuple(meta[0]):
                want = tuple(meta[0])
                if len(want) > len(shape) or any(w not in (1, s) for w, s in zip(want[::-1], tuple(shape)[::-1])):
                    raise RuntimeError(f"Function {name}Backward returned an invalid gradient at index {i} - got "
                                       f"{list(shape)} but expected shape compatible with {list(want)}")
        return tuple(res[:len(inputs)])


class Function:
    """Base class of user-defined ops with a hand-written backward (``torch.autograd.Function``)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement the backward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Overridden (PyTorch 2's style): ``forward`` takes no ``ctx``, and this saves what backward needs
        from the inputs (a tuple) and ``forward``'s output."""
        raise NotImplementedError("setup_context is not implemented.")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx._cls = cls
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with grad_mode.no_grad():
            if cls.setup_context is not Function.setup_context:   # PyTorch 2's style: forward without ctx
                result = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        track = grad_mode.state.enabled and any(ctx.needs_input_grad)
        for t in ctx._dirty:
            if track and t.grad_fn is None and t._rg:
                raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
            t._vc[0] += 1
        if not track:
            return result
        op = _FunctionOp(cls)
        pos = tuple(i for i, o in enumerate(outs) if isinstance(o, Tensor))   # the node's outputs: the tensors
        ctx._out_pos = (pos, len(outs))
        op.nout = len(pos)
        # an output no gradient reached: zeros to backward, or None after ctx.set_materialize_grads(False)
        op.none_cotangents = not ctx.materialize_grads
        edges, in_meta = [], []
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:
                edges.append((a.grad_fn, a._out_idx) if a.grad_fn is not None else (a, -1))
                in_meta.append((a._v.shape, a._v.dtype))
            else:
                edges.append(None)
                in_meta.append((a._v.shape, a._v.dtype) if isinstance(a, Tensor) else None)
        ctx._in_meta = tuple(in_meta)
        out_meta = tuple((o._v.shape, o._v.dtype) for o in outs if isinstance(o, Tensor))
        node = Node(op, {"ctx": ctx, "nout": op.nout}, tuple(edges), tuple(None for _ in args),
                    tuple(None for _ in args), tuple(in_meta), None, out_meta)
        wrapped = []
        dirty = {id(t) for t in ctx._dirty if t._base is None}
        i = -1   # a tensor output's place among the node's outputs
        for o in outs:
            i += isinstance(o, Tensor)
            if isinstance(o, Tensor) and id(o) in dirty:   # the input itself, its history now this Function
                o.grad_fn, o._out_idx, o._rg = node, i, True
                wrapped.append(o)
            elif isinstance(o, Tensor) and id(o) not in ctx._non_diff and o.dtype.is_floating_point:
                # sharing forward's tensor's version counter: an in-place change of the output after it was
                # saved with save_for_backward fails the backward, as in PyTorch
                wrapped.append(_make(o._value, True, node, i, o._vc))
            elif isinstance(o, Tensor) and id(o) in ctx._non_diff and any(o is a for a in args):
                wrapped.append(o.detach())   # an input returned as a non-differentiable output: not the input
            else:
                wrapped.append(o)
        _save_outputs_as_wrapped(ctx, outs, wrapped)
        return wrapped[0] if single else tuple(wrapped)


def _save_outputs_as_wrapped(ctx, outs, wrapped) -> None:
    """An output that ``forward`` saved with ``save_for_backward`` comes back from ``saved_tensors`` as the
    output the caller got (with this Function as its ``grad_fn``), as in PyTorch, so a backward written with
    it (``g * out`` for ``exp``) is differentiable again under ``create_graph``: forward's own tensor has no
    history."""
    swap = {id(o): w for o, w in zip(outs, wrapped) if o is not w}
    if swap and ctx._saved:
        ctx._saved = tuple((swap.get(id(s[0]), s[0]), s[1]) if s is not None else None for s in ctx._saved)


def once_differentiable(fn):
    """Marks a backward that is not itself differentiable (accepted for compatibility)."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            return fn(ctx, *args)
    return wrapper
