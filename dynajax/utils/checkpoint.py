"""``checkpoint``: activation rematerialization. The forward's recorded graph is dropped as soon as the call
returns; backward re-runs the call (handed the random keys the forward drew) and differentiates the
recomputed graph."""
from __future__ import annotations

import contextlib

from .. import random
from .._tensor import Tensor
from ..autograd import grad_mode
from ..autograd.function import Function

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Checkpoint(Function):
    """One node standing for the checkpointed call. Its edges are the call's tensor arguments and the leaves
    (parameters) the call reached through its closure, so ``autograd.grad(loss, [weight])``,
    ``backward(inputs=[...])`` and ``create_graph`` treat the call like any other op (PyTorch's
    ``use_reentrant=False``): backward recomputes the call and takes ``autograd.grad`` of the recomputed
    outputs with respect to exactly these edges, rather than accumulating into ``.grad`` behind the engine."""

    @staticmethod
    def forward(ctx, run_function, draws, kwargs, n_args, outputs, *args_and_leaves):
        ctx.run_function, ctx.kwargs, ctx.draws = run_function, kwargs, draws
        ctx.args, ctx.leaves = args_and_leaves[:n_args], args_and_leaves[n_args:]
        ctx.save_for_backward(*[a if isinstance(a, Tensor) else None for a in ctx.args])
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        from ..autograd.engine import grad
        ctx.saved_tensors  # raises if an input was modified in place since the forward
        cut = [True]
        with grad_mode.enable_grad(), (ctx.draws.replay() if ctx.draws is not None else contextlib.nullcontext()):
            inputs = tuple(_Link.apply(a, cut) if isinstance(a, Tensor) and a.requires_grad
                           else a.detach() if isinstance(a, Tensor) else a for a in ctx.args)
            out = ctx.run_function(*inputs, **ctx.kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        wrt = [t for t in list(inputs) + list(ctx.leaves) if isinstance(t, Tensor) and t.requires_grad]
        found = {}
        if pairs and wrt:
            # ``create_graph``: the rule runs with grad enabled, so the gradients stay differentiable (and
            # reach the caller's arguments through the links). retain_graph: a non-leaf tensor from outside
            # the call that the closure read leads into the caller's graph, which the caller's backward walks
            try:
                gs = grad([o for o, _ in pairs], wrt, [g for _, g in pairs], retain_graph=True,
                          create_graph=grad_mode.state.enabled, allow_unused=True)
            finally:
                cut[0] = False
            found = {id(t): g for t, g in zip(wrt, gs)}
        return (None,) * 5 + tuple(found.get(id(t)) if isinstance(t, Tensor) else None
                                   for t in list(inputs) + list(ctx.leaves))


class _Link(Function):
    """The recomputation's stand-in for an argument: its value, with the argument as its input. While the
    recomputation's own ``autograd.grad`` runs (``cut[0]``) no gradient passes it (the gradient is taken
    right there, and the caller's engine carries it on from the checkpoint node: passing it here as well
    would count the path twice where a parameter also made the argument); afterwards it is an identity, so
    a ``create_graph`` gradient is differentiable back to the caller's argument."""

    @staticmethod
    def forward(ctx, a, cut):
        ctx.cut = cut
        return a.detach()

    @staticmethod
    def backward(ctx, g):
        return (None if ctx.cut[0] else g), None


class _Draws:
    """The random keys the checkpointed call drew, per generator, in order. Its recomputation is handed the
    very same keys (so dropout masks repeat) and leaves the generators where they are. Keys rather than a
    saved generator state: inside ``dynajax.compile`` the keys are the captured graph's values, where a state
    read before the step's first draw would be the previous call's array, baked in as a constant."""

    def __init__(self) -> None:
        self.keys: dict = {}

    @contextlib.contextmanager
    def _patched(self, next_key):
        orig = random.Generator.next_key
        random.Generator.next_key = lambda gen: next_key(orig, gen)
        try:
            yield
        finally:
            random.Generator.next_key = orig

    def record(self):
        def rec(orig, gen):
            k = orig(gen)
            self.keys.setdefault(id(gen), []).append(k)
            return k
        return self._patched(rec)

    def replay(self):
        left = {g: list(ks) for g, ks in self.keys.items()}

        def play(orig, gen):   # a call drawing more than it did in forward gets fresh keys for the rest
            ks = left.get(id(gen))
            return ks.pop(0) if ks else orig(gen)
        return self._patched(play)


def _detached(args) -> tuple:
    """Fresh leaves standing for the call's tensor arguments (requiring grad where the argument does)."""
    return tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in args)


def _closure_leaves(outs, inputs) -> list:
    """Leaf tensors requiring grad that ``outs``' graph reaches, other than ``inputs``: the parameters (and any
    other leaf) the checkpointed call read through its closure, in first-reached order."""
    skip = {id(t) for t in inputs if isinstance(t, Tensor)}
    stack = [o.grad_fn for o in outs if isinstance(o, Tensor) and o.grad_fn is not None]
    seen, leaves = set(), []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for e in node.edges:
            if e is None:
                continue
            if e[1] >= 0:
                stack.append(e[0])
            elif id(e[0]) not in skip:
                skip.add(id(e[0]))
                leaves.append(e[0])
    return leaves


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state: bool = True, **kwargs):
    """Call ``function(*args, **kwargs)`` without keeping its activations; they are recomputed in backward.

    The forward runs recorded once, to learn which parameters the call reads (the graph is dropped as soon as
    it returns); backward re-runs it from the same random state. Gradients behave as PyTorch's
    ``use_reentrant=False`` for either setting (``autograd.grad``, ``inputs=``, ``create_graph`` all work).

    >>> y = checkpoint(block, x)   # same value and gradients as block(x), less memory
    """
    if use_reentrant and kwargs:   # PyTorch's reentrant variant takes no keyword arguments for ``function``
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not grad_mode.state.enabled:
        return function(*args, **kwargs)
    draws = _Draws() if preserve_rng_state else None
    inputs = _detached(args)
    with draws.record() if draws is not None else contextlib.nullcontext():
        out = function(*inputs, **kwargs)
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    leaves = _closure_leaves(outs, inputs)
    detached = tuple(o.detach() if isinstance(o, Tensor) else o for o in outs)
    del out, outs   # the recorded graph (the activations) goes here
    return _Checkpoint.apply(function, draws, kwargs, len(args), detached[0] if single else detached, *args, *leaves)


def checkpoint_sequential(functions, segments: int, input, use_reentrant=None, **kwargs):
    """Run a Sequential (or list of modules) in ``segments`` checkpointed chunks."""
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    size = max(1, -(-len(fns) // segments))

    def run(chunk):
        def f(x):
            for m in chunk:
                x = m(x)
            return x
        return f
    x = input
    for i in range(0, len(fns), size):
        chunk = fns[i:i + size]
        x = checkpoint(run(chunk), x) if i + size < len(fns) else run(chunk)(x)
    return x
