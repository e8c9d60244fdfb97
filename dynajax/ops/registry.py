"""The op registry: every op is declared once, as a pure ``impl`` on jax arrays
plus a VJP ``rule`` written in dynajax ops, and run through ``apply``.

``impl(*arrays, **static_params)`` is called eagerly through a cached
``jax.jit`` per (op, static params), so one op costs one dispatch; lowering
calls the same ``impl``. ``rule(g, out, *inputs, **static_params)`` gets the
output cotangent ``g`` and returns one cotangent per input (``None`` for no
gradient). It sees dynajax Tensors, so with ``create_graph=True`` the backward
pass is itself recorded. Broadcasting and dtype casts of the returned
cotangents are undone by the engine, not by each rule.
"""
from __future__ import annotations

import dis
import functools
import re
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..autograd import grad_mode
from ..autograd.graph import Node
from .. import _kernel_cache
from .._device import KERNELS_FULL as _KERNELS_FULL, eager_compiler_options, watch_eager_kernel
from .._dtype import x64_set as _x64_set, x64_swap as _x64_swap
from .._rows import Rows as _Rows, exact

_LOAD_OPS = {"LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST_CHECK",
             "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW",
             "LOAD_FAST_BORROW_LOAD_FAST_BORROW"}


def _loaded_names(code) -> set:
    """Names a function body (and its nested functions) reads."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in _LOAD_OPS:
            v = ins.argval
            names.update(v if isinstance(v, tuple) else (v,))
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            names |= _loaded_names(c)
    names |= set(code.co_cellvars)
    return names


class Op:
    """One registered op. Create with :func:`op`; attach its VJP with ``@the_op.defvjp``."""

    __slots__ = ("name", "impl", "rule", "per_input", "nout", "check", "error", "backward_name",
                 "_saves", "_saves_rest", "_reads", "_reads_memo", "saves_out", "_jit", "_jit_plain", "differentiable", "none_cotangents",
                 "eager_pad")

    def __init__(self, name: str, impl: Callable, nout: int = 1, check=None, error=None,
                 backward_name: str | None = None) -> None:
        self.name = name
        self.impl = impl
        self.nout = nout
        self.check = check          # check(*args, **params): raises PyTorch's error before impl
        self.error = error          # error(exc, *args, **params): explains an impl failure
        self.rule = None
        self.per_input = None
        self._saves = ()
        self._saves_rest = False
        self._reads = None            # per-input rules: per rule, (reads of each input, of the rest, of out)
        self._reads_memo: dict = {}   # which inputs need a gradient -> what ``saves_for`` answers
        self.saves_out = False
        self._jit: dict = {}          # static params -> the eager kernel (eager compiler options)
        self._jit_plain: dict = {}    # the same, not as eager kernels: on tracers (no options), graph breaks
        self.differentiable = False
        # the engine passes None (instead of zeros) as the cotangent of an output no gradient reached, to
        # rules that declare they take it: a multi-output op whose outputs are often unused (an RNN's
        # final state, saved residuals) then differentiates without materialising and reading zeros
        self.none_cotangents = False
        # eager only: how a call on a new leading size runs on a bucket's kernel (_kernel_cache), or None
        self.eager_pad = _kernel_cache.rule_for(name)
        camel = "".join(p.capitalize() for p in re.split(r"[_\W]+", name) if p)
        self.backward_name = backward_name or f"{camel}Backward0"

    def __repr__(self) -> str:
        return f"<dynajax op {self.name}>"

    def defvjp(self, *rules: Callable, saves_out=None) -> Callable:
        """Register ``rule(g, out, *inputs, **params) -> tuple of input cotangents``,
        or one rule per input (each returning that input's cotangent, None for no rule),
        so that the engine computes only the cotangents some input needs.

        Only the inputs (and ``out``) that the rules' bodies read are saved for
        backward, so only those are checked for later in-place modification.
        ``saves_out`` says what of ``out`` is saved where the bodies cannot: a bool, a
        tuple of the indices of the outputs saved (a multi-output op: only those are
        checked), or ``saves_out(*args, **params)`` returning either, decided per call.
        """
        if self.nout == VARIADIC and len(rules) != 1:
            raise TypeError(f"op {self.name!r} has a variable number of outputs: give it one rule for all inputs")
        if len(rules) == 1:
            rule = rules[0]
            self.per_input = None
        else:
            self.per_input = rules

            def rule(g, out, *args, **params):
                return tuple(r(g, out, *args, **params) if r is not None else None for r in rules)
        self.rule = rule
        self.differentiable = True
        used, positional, varargs, reads = set(), (), None, []
        for r in rules:
            if r is None:
                reads.append(None)
                continue
            code = r.__code__
            names = _loaded_names(code)
            used |= names
            positional = code.co_varnames[:code.co_argcount]
            if code.co_flags & 0x04:  # *varargs
                varargs = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
            reads.append((tuple(n in names for n in positional[2:]), varargs is not None and varargs in names,
                          len(positional) > 1 and positional[1] in names))
        self.saves_out = (len(positional) > 1 and positional[1] in used) if saves_out is None else saves_out
        self._saves = tuple(n in used for n in positional[2:])
        self._saves_rest = varargs is not None and varargs in used
        # with one rule per input, only the rules of the inputs that need a gradient run: what they read is
        # all that is saved (``x * 2`` saves nothing, ``x * w`` saves w alone where x needs no gradient), as
        # PyTorch saves it, so a later in-place write to an unread input is no error
        self._reads = tuple(reads) if self.per_input is not None and saves_out is None else None
        return rules[0]

    def saves_for(self, grads: tuple) -> tuple:
        """``(saves, saves_rest, saves_out)`` for one call whose inputs needing a gradient are ``grads``
        (bools, one per argument); memoised per op, as a call of ``_record`` asks on every recorded op."""
        if self._reads is None:
            return self._saves, self._saves_rest, self.saves_out
        hit = self._reads_memo.get(grads)
        if hit is None:
            hit = self._reads_memo[grads] = self._saves_of(grads)
        return hit

    def _saves_of(self, grads: tuple) -> tuple:
        n = len(self._saves)
        saves, rest, out = [False] * n, False, False
        for need, rd in zip(grads, self._reads):
            if need and rd is not None:
                ins, r, o = rd
                for i in range(min(n, len(ins))):
                    saves[i] = saves[i] or ins[i]
                rest, out = rest or r, out or o
        return tuple(saves), rest, out

    def saves(self, i: int) -> bool:
        s = self._saves
        return s[i] if i < len(s) else self._saves_rest

    def jitted(self, params: dict, eager: bool = True):
        """The impl under ``jax.jit`` with ``params`` bound; ``eager=False``: not an eager op's own kernel:
        for inputs that are tracers (dynajax ops inside a JAX transformation, where the jit is nested and takes
        no compiler options) or recorded values (a compiled step's graph break, whose ops' eager checks did
        not see them)."""
        key = tuple(params.items())
        cache = self._jit if eager else self._jit_plain
        fn = cache.get(key)
        if fn is None:
            f = functools.partial(self.impl, **params) if params else self.impl
            fn = jax.jit(_eager_kernel(f, self.name), compiler_options=eager_compiler_options()) if eager \
                else jax.jit(f)
            cache[key] = fn
        return fn


_EAGER = [False]   # True while JAX traces an eager op's own kernel (eager_kernel())


def eager_kernel() -> bool:
    """Whether the impl running now is being traced as an eager op's own kernel (one op, one small XLA
    program), rather than as part of a whole program (a compiled step, ``lower``, a JAX transformation).
    An impl may pick a formulation by it: what is fastest alone need not be inside a fused program."""
    return _EAGER[0]


def _eager_kernel(f, name: str):
    """``f`` with :func:`eager_kernel` True while it runs: its Python runs only when ``jax.jit`` traces it,
    so this costs nothing per call. Named after op ``name`` (jit's name in profiles and compile logs)."""
    def kernel(*args):
        prev, _EAGER[0] = _EAGER[0], True
        try:
            return f(*args)
        finally:
            _EAGER[0] = prev
    kernel.__name__ = kernel.__qualname__ = name
    watch_eager_kernel(f"jit({name})")
    return kernel


OPS: dict[str, Op] = {}


def clear_kernels() -> None:
    """Drop every compiled eager kernel (each op's jitted kernels, the bucketed ones) and JAX's own caches.

    Each live XLA:CPU executable holds a few memory mappings of its code, and a process may have at most
    ``vm.max_map_count`` (65530 on Linux by default): a long-lived process that compiles tens of thousands
    of kernels (many shapes, many ops) can run out, and the next compile then crashes inside XLA. Kernels
    are compiled again on their next use."""
    for o in OPS.values():
        o._jit.clear()
        o._jit_plain.clear()
    _kernel_cache.clear()
    jax.clear_caches()
VARIADIC = 0   # ``nout`` of an op whose impl returns a tuple of any length (``unbind``, fused optimizer updates)


def op(name: str, nout: int = 1, check=None, error=None, backward_name=None):
    """Decorator: register ``impl`` as op ``name`` and return the :class:`Op`; ``nout``: its number of
    outputs (``VARIADIC``: a tuple whose length depends on the inputs)."""
    def register(impl: Callable) -> Op:
        if name in OPS:
            raise ValueError(f"op {name!r} is registered twice")
        o = Op(name, impl, nout, check, error, backward_name)
        OPS[name] = o
        return o
    return register


# ---------------------------------------------------------------- dispatch
_Tracer = jax.core.Tracer
_Tensor = None  # set by dynajax._tensor to break the import cycle
_hooks: list = []  # capture / lowering interceptors: f(op, args, params) -> result | NotImplemented
_autocast: list = [None]  # ``dynajax.amp``'s f(op, args, params) -> None | (args, params) while some thread is in an autocast region
record_creation = False  # True while dynajax.compile records: zeros/ones/full record an op (ops/creation.py)


def apply(op: Op, *args, **params):
    """Run ``op`` on Tensors / Python scalars, recording a Node when a gradient is needed."""
    return run(op, None, args, params)


def run(op: Op, fn, args: tuple, params: dict):
    """``apply`` with the jitted impl ``fn`` already looked up (None: look it up here), with JAX's 64-bit
    types on for this thread while it runs (``_dtype.x64``: dynajax leaves JAX's global flag alone)."""
    prev = _x64_swap(True)
    try:
        return _run(op, fn, args, params)
    finally:
        _x64_set(prev)


def _run(op: Op, fn, args: tuple, params: dict):
    if _autocast[0] is not None:   # some thread is in an autocast region: cast before anything sees the op
        cast = _autocast[0](op, args, params)
        if cast is not None:
            args, params, fn = cast[0], cast[1], None
    if _hooks:
        for h in _hooks:
            r = h(op, args, params)
            if r is not NotImplemented:
                return r
    T = _Tensor
    vals = []
    needs_grad = traced = lazy = False
    for a in args:
        if isinstance(a, T):
            if a._base is not None:
                a._sync()
            v = a._v
            if type(v) is _Rows:   # a bucketed op's padded result (``_rows``): only a bucketed op takes it as is
                if op.eager_pad is None:
                    v = a._value
                else:
                    lazy = True
            if a._rg:
                needs_grad = True
        else:
            v = a
        if isinstance(v, _Tracer):
            traced = True
        vals.append(v)
    if op.check is not None:
        op.check(*args, **params)
    if traced:
        fn = op.jitted(params, eager=False)
    else:
        if _KERNELS_FULL[0]:   # near the memory-mapping limit (``_device.mappings``): every eager kernel dropped
            _KERNELS_FULL[0] = False
            clear_kernels()
        if fn is None:
            fn = op.jitted(params)
    try:
        if op.eager_pad is None or traced or (out := _kernel_cache.run_bucketed(op, fn, vals, params, lazy)) is None:
            out = fn(*[exact(v) for v in vals]) if lazy else fn(*vals)
    except Exception as exc:
        if op.error is not None:
            op.error(exc, *args, **params)
        raise
    if needs_grad and op.rule is not None and grad_mode.state.enabled:
        return _record(op, args, params, out)
    if op.nout == 1:
        return T._make(out)
    return tuple(T._make(o) for o in out)


def _record(op: Op, args: tuple, params: dict, out):
    T = _Tensor
    edges, saved, consts, in_meta = [], [], [], []
    if op._reads is None:
        saves, rest, keep = op._saves, op._saves_rest, op.saves_out
    else:
        saves, rest, keep = op.saves_for(tuple([isinstance(a, T) and a._rg for a in args]))
    nsaves = len(saves)
    for i, a in enumerate(args):
        if isinstance(a, T):
            v = a._v
            in_meta.append((v.shape, v.dtype))
            if a._rg:
                fn = a.grad_fn
                edges.append((fn, a._out_idx) if fn is not None else (a, -1))
                consts.append(None)
            else:
                edges.append(None)
                consts.append(a._value)  # kept so the graph can be lowered (engine 2)
            saved.append((a, a._vc[0]) if (saves[i] if i < nsaves else rest) else None)
        else:
            in_meta.append(None)
            edges.append(None)
            consts.append(None)
            saved.append(a)
    vc = [0, 0]
    if callable(keep):
        keep = keep(*args, **params)
    if op.nout == 1:
        dt = out.dtype
        node = Node(op, params, tuple(edges), tuple(saved), tuple(consts), tuple(in_meta),
                    (out, vc, 0) if keep else None, ((out.shape, dt),))
        if dt.kind in "fc" or dt == _BF16:
            return T._make(out, True, node, 0, vc)
        return T._make(out)
    outs = tuple(out)
    node = Node(op, params, tuple(edges), tuple(saved), tuple(consts), tuple(in_meta),
                (out, vc, 0) if keep else None, tuple((o.shape, o.dtype) for o in outs))
    some = type(keep) is tuple   # then only the outputs it names share the version counter the node checks
    return tuple(T._make(o, True, node, i, None if some and i not in keep else vc)
                 if o.dtype.kind in "fc" or o.dtype == _BF16 else T._make(o, vc=vc if some and i in keep else None)
                 for i, o in enumerate(outs))


_BF16 = np.dtype(jnp.bfloat16)
