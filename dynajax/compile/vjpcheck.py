"""``dynajax.compile(verify=True)``: check hand-written backwards against ``jax.vjp`` of their forwards.

Comparing the eager step with the executable cannot catch a wrong VJP, since
both run the same rules. So while a verify capture records a step, every custom
``autograd.Function`` call is remembered together with the ops its forward
recorded (pure JAX impls, the engine-2 view of it); when the tape later runs
that Function's ``backward`` on cotangents ``g``, the same ``g`` is pulled back
through ``jax.vjp`` of the recorded forward at the forward's input values, and
a difference beyond tolerance raises, naming the Function and the input.
(Registry ops' rules are checked the same way, once per op, by the test suite's
op table.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._tensor import Tensor
from ..autograd import engine
from ..autograd.function import Function, _FunctionOp


class CustomVJPCheck:
    """Installed by a dual-mode (``verify``) Capture for the duration of the step."""

    def __init__(self, cap) -> None:
        self.cap = cap
        self.calls: dict = {}   # id(node) -> (node, Function subclass, arg positions, in vars, in arrays,
        #                                      (first eqn, end eqn), out vars)
        self._saved = None

    def install(self) -> None:
        self._saved = (Function.__dict__["apply"], engine._call_rule)
        orig_apply, orig_rule = self._saved[0].__func__, self._saved[1]
        check = self

        def apply(cls, *args, **kwargs):
            cap = check.cap
            pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
            in_vars = [cap.var_of(args[i]).idx for i in pos]
            in_arrays = [args[i]._value for i in pos]
            start = len(cap.eqns)
            res = orig_apply(cls, *args, **kwargs)
            outs = res if isinstance(res, tuple) else (res,)
            node = next((o.grad_fn for o in outs if isinstance(o, Tensor) and o.grad_fn is not None), None)
            if node is not None and isinstance(node.op, _FunctionOp) and getattr(cls, "_vjp_checked", True):
                out_vars = [cap.var_of(o).idx if isinstance(o, Tensor) else None for o in outs]
                check.calls[id(node)] = (node, cls, pos, in_vars, in_arrays, (start, len(cap.eqns)), out_vars)
            return res

        def call_rule(node, gs, retain_graph):
            res = orig_rule(node, gs, retain_graph)
            hit = check.calls.get(id(node))
            if hit is not None and hit[0] is node:
                check.compare(hit, gs, res)
            return res

        Function.apply = classmethod(apply)
        engine._call_rule = call_rule

    def uninstall(self) -> None:
        Function.apply, engine._call_rule = self._saved

    def compare(self, hit, gs, res) -> None:
        """Pull ``gs`` back through ``jax.vjp`` of the recorded forward; raise on disagreement."""
        from .capture import run_graph
        node, cls, pos, in_vars, in_arrays, (start, end), out_vars = hit
        cap = self.cap
        known = {var: arr for arr, var in cap.by_array.values()}
        diff = [k for k, a in enumerate(in_arrays) if jnp.issubdtype(a.dtype, jnp.inexact)
                and node.edges[pos[k]] is not None]
        eqns = cap.eqns[start:end]

        def forward(*xs):
            env = dict(known)
            for k, a in enumerate(in_arrays):
                env[in_vars[k]] = a
            for k, x in zip(diff, xs):
                env[in_vars[k]] = x
            outs = run_graph(eqns, list(env), cap.nvars, [v for v in out_vars if v is not None], list(env.values()),
                             cap.scalars)
            return tuple(outs)

        primals, pull = jax.vjp(forward, *(in_arrays[k] for k in diff))
        cots = []
        j = 0
        for v in out_vars:
            if v is None:
                continue
            g = gs[j] if j < len(gs) else None
            cots.append(jnp.zeros_like(primals[j]) if g is None else jnp.asarray(g._value, primals[j].dtype))
            j += 1
        want = pull(tuple(cots))
        for k, w in zip(diff, want):
            got = res[pos[k]] if pos[k] < len(res) else None
            if got is not None and tuple(got.shape) != tuple(w.shape):
                from ..ops.reduce import sum_to_shape
                cap.busy = True   # as the engine does with a broadcast gradient; not part of the step
                try:
                    got = sum_to_shape(got, tuple(w.shape))
                finally:
                    cap.busy = False
            got = np.zeros(w.shape, w.dtype) if got is None else np.asarray(got._value)
            w = np.asarray(w)
            if got.shape != w.shape or not np.allclose(got, w, rtol=1e-4, atol=1e-5, equal_nan=True):
                err = (float(np.max(np.abs(got.astype(np.float64) - w.astype(np.float64))))
                       if got.shape == w.shape else f"shape {list(got.shape)} vs {list(w.shape)}")
                raise RuntimeError(
                    f"dynajax.compile(verify=True): the backward of custom Function {cls.__name__} disagrees with "
                    f"jax.vjp of its forward for input {pos[k]} {list(w.shape)} (max abs difference {err}); "
                    "state was restored.")
