"""``checkpoint``: activation rematerialization. The forward runs without recording; backward
re-runs it (with the same random stream) and backpropagates through the recomputed graph."""
from __future__ import annotations

from .. import random
from .._tensor import Tensor
from ..autograd import grad_mode
from ..autograd.function import Function

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Checkpoint(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, kwargs, dummy, *args):
        ctx.run_function, ctx.kwargs = run_function, kwargs
        ctx.rng_key = random.default_generator._key if preserve_rng_state else None
        ctx.inputs = args
        ctx.save_for_backward(*[a if isinstance(a, Tensor) else None for a in args])
        return run_function(*args, **kwargs)

    @staticmethod
    def backward(ctx, *grads):
        from ..autograd.engine import backward
        ctx.saved_tensors  # raises if an input was modified in place since the forward
        inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in ctx.inputs]
        key = random.default_generator._key
        if ctx.rng_key is not None:
            random.default_generator._key = ctx.rng_key
        try:
            with grad_mode.enable_grad():
                out = ctx.run_function(*inputs, **ctx.kwargs)
        finally:
            random.default_generator._key = key
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:
            backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None, None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state: bool = True, **kwargs):
    """Call ``function(*args, **kwargs)`` without keeping its activations; they are recomputed in backward.

    >>> y = checkpoint(block, x)   # same value and gradients as block(x), less memory
    """
    from ..ops.creation import zeros
    if not grad_mode.state.enabled:
        return function(*args, **kwargs)
    dummy = zeros((), requires_grad=True)  # so parameters used inside get gradients even if no input needs one
    return _Checkpoint.apply(function, preserve_rng_state, kwargs, dummy, *args)


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
