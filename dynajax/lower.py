"""Engine 2: a recorded define-by-run computation as a pure JAX function.

``lower(fn, *example_args)`` runs ``fn`` once and traces every op it applies
(through ``registry._hooks``); ``lower_graph(outputs, inputs)`` walks an
already recorded autograd graph. Both return a :class:`Lowered` whose ``.fn``
calls the very same per-op ``impl`` that eager execution used, so it works
under ``jax.grad``/``jit``/``vmap``/``jvp``/``hessian``.

What gets lowered is the path the Python code took while recording: loops are
unrolled, ``if``s on Python values (and on tensor values read with ``.item()``
or ``bool()``) are fixed, shapes are the example shapes, random draws are baked in.
A different branch or shape needs a new recording (``.fn`` raises on a shape
or dtype it was not recorded for, never silently computes something else).
"""
from __future__ import annotations

import inspect
import linecache
import os
import threading
import weakref
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import _tensor
from ._device import user_frame
from ._dtype import x64 as _x64
from ._tensor import Tensor, _make
from .autograd import grad_mode
from .autograd.engine import _collect
from .ops import registry

__all__ = ["Lowered", "lower", "lower_graph"]



class Var:
    """A value in a lowered graph: an input, a parameter, a baked constant or an op output."""

    __slots__ = ("name", "shape", "dtype", "kind", "live", "value", "where")

    def __init__(self, name, shape, dtype, kind, live=False, value=None, where=None):
        self.name, self.shape, self.dtype, self.kind = name, tuple(shape), np.dtype(dtype), kind
        self.live = live      # depends differentiably on an input or parameter
        self.value = value    # the array of a constant
        self.where = where    # (filename, lineno) of the user line that created it

    def type_str(self) -> str:
        return f"{_short_dtype(self.dtype)}[{','.join(str(s) for s in self.shape)}]"

    def __repr__(self) -> str:
        return f"{self.name}: {self.type_str()}"


class Lit:
    """A Python value (scalar, None) passed to an op as is."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


class Eqn:
    """One op application: ``outs = op.impl(*ins, **params)`` (``op`` None: ``stop_gradient``)."""

    __slots__ = ("op", "params", "ins", "outs", "where", "label")

    def __init__(self, op, params, ins, outs, where, label=None):
        self.op, self.params, self.ins, self.outs, self.where = op, params, ins, outs, where
        self.label = label or (op.name if op is not None else "stop_gradient")

    def run(self, vals: list):
        if self.op is None:
            return (jax.lax.stop_gradient(vals[0]),)
        r = self.op.impl(*vals, **self.params)
        return (r,) if len(self.outs) == 1 else tuple(r)


def _short_dtype(d) -> str:
    d = np.dtype(d)
    if d == np.bool_:
        return "bool"
    if d.name == "bfloat16":
        return "bf16"
    return {"f": "f", "i": "i", "u": "u", "c": "c"}.get(d.kind, d.kind) + str(d.itemsize * (8 if d.kind != "c" else 4))


def _is_float(d) -> bool:
    d = np.dtype(d)
    return d.kind in "fc" or d.name == "bfloat16"


def _user_frame():
    """(file, line) of the innermost frame outside the dynajax package."""
    f = user_frame()
    return (f.f_code.co_filename, f.f_lineno) if f is not None else None


def _where_str(where) -> str:
    if where is None:
        return ""
    fname, line = where
    src = linecache.getline(fname, line).strip()
    return f"{os.path.basename(fname)}:{line}  {src}"


# ---------------------------------------------------------------- the lowered function
class Lowered:
    """A recorded computation as a pure JAX function.

    ``fn(*args, *param_arrays)`` takes the recorded call's arguments with every
    tensor replaced by a jax array (non-tensor arguments are the recorded static
    values) and, optionally, the arrays of ``params`` in order; without them the
    parameters' current values are read (under ``jax.jit`` that read happens once,
    at trace time: pass them explicitly when they change between calls). Arrays
    of another float (or int) width are cast to the recorded dtype; another shape
    raises ValueError. Calling the ``Lowered`` itself runs a
    jitted ``fn`` on dynajax tensors and returns tensors.

    >>> low = dynajax.lower(lambda x: (x * x).sum(), dynajax.ones(3))
    >>> jax.grad(low.fn)(jnp.ones(3, jnp.float32))
    Array([2., 2., 2.], dtype=float32)
    """

    def __init__(self, name, in_tree, in_leaves, param_vars, params, eqns, out_tree, out_leaves):
        self.name = name
        self._in_tree = in_tree
        self._in_leaves = in_leaves      # per flat arg: Var (tensor) or Lit (static value)
        self._param_vars = param_vars
        self.params: dict[str, Tensor] = params
        self.eqns: list[Eqn] = eqns
        self._out_tree = out_tree
        self._out_leaves = out_leaves    # per flat output: Var or Lit
        self._jitted = None
        self.foreign: list = []          # custom-Function tape nodes met while tracing (see dynajax.testing)
        self.fn = self._make_fn()

    # ------------------------------------------------------------ evaluation
    def _make_fn(self) -> Callable:
        nparams, nargs = len(self._param_vars), len(self._in_tree.children())

        def fn(*args):
            params = None
            if nparams and len(args) == nargs + nparams:
                args, params = args[:nargs], args[nargs:]
            env = {}
            for leaf, v in zip(self._in_tree.flatten_up_to(tuple(args)), self._in_leaves):
                if isinstance(v, Var):
                    env[id(v)] = self._check_arg(v, leaf)
                elif not _same_static(leaf, v.value):
                    raise ValueError(f"lowered function was recorded with the static argument {v.value!r}, got "
                                     f"{leaf!r}; a different Python value needs a new recording")
            if params is None:
                params = self.param_values()
            for v, p in zip(self._param_vars, params):
                env[id(v)] = self._check_arg(v, p)
            return self._evaluate(env)
        fn.__name__ = f"lowered_{self.name}"
        fn.__doc__ = f"Pure JAX function lowered from {self.name}."
        return _x64.wrap(fn)   # the ops' own dtypes (int64, float64) whatever the caller's JAX mode (docs/jax.md)

    @staticmethod
    def _check_arg(v: Var, a):
        if isinstance(a, Tensor):
            a = a.detach()._value
        a = jnp.asarray(a)
        kind = (_is_float(a.dtype), np.dtype(a.dtype) == np.bool_)
        same_kind = kind == (_is_float(v.dtype), v.dtype == np.bool_)
        if tuple(a.shape) != v.shape or not same_kind:
            raise ValueError(f"lowered function was recorded with {v.name}: {v.type_str()}, got "
                             f"{_short_dtype(a.dtype)}[{','.join(map(str, a.shape))}]; a different shape or "
                             f"kind of dtype needs a new recording (call dynajax.lower again)")
        return a if np.dtype(a.dtype) == v.dtype else a.astype(v.dtype)  # computes in the recorded dtype

    def _evaluate(self, env: dict):
        """Run the ops on ``env`` ({id(Var): array}, filled in with every value) and return the outputs."""
        def val(x):
            if isinstance(x, Lit):
                return x.value
            got = env.get(id(x))
            if got is None:
                got = env[id(x)] = x.value  # a baked constant
            return got
        for e in self.eqns:
            outs = e.run([val(x) for x in e.ins])
            for v, o in zip(e.outs, outs):
                env[id(v)] = o
        return jax.tree_util.tree_unflatten(self._out_tree, [val(x) for x in self._out_leaves])

    def param_values(self) -> tuple:
        """Current arrays of ``params``, in the order ``fn`` takes them."""
        return tuple(t.detach()._value for t in self.params.values())

    @_x64.wrap
    def __call__(self, *args):
        """Run the jitted lowered function on tensors (or arrays); returns dynajax tensors."""
        if self._jitted is None:
            statics = [i for i, x in enumerate(args) if not _has_array(x)]
            self._jitted = jax.jit(self.fn, static_argnums=tuple(statics))
        arrays = jax.tree_util.tree_map(lambda x: x.detach()._value if isinstance(x, Tensor) else x, args)
        out = self._jitted(*arrays, *self.param_values())  # explicit: a jit would bake stale values in
        return jax.tree_util.tree_map(lambda a: _make(a) if isinstance(a, jax.Array) else a, out)

    # ------------------------------------------------------------ printing (dynajax.viz formats)
    def __str__(self) -> str:
        from .viz import listing
        return listing(self)

    __repr__ = __str__

    def print(self, file=None) -> None:
        """Print the one-line-per-op listing: names, shapes, dtypes, static params, source line."""
        print(str(self), file=file)

    def to_dot(self) -> str:
        """Graphviz DOT text of the graph (render it with ``dynajax.viz.draw``)."""
        from .viz import to_dot
        return to_dot(self)


def _same_static(a, b) -> bool:
    if a is b or isinstance(a, jax.core.Tracer):
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - uncomparable objects count as the same
        return True


def _has_array(x) -> bool:
    return any(isinstance(a, (Tensor, jax.Array, np.ndarray)) for a in jax.tree_util.tree_leaves(x))


def _tree_flatten(x):
    return jax.tree_util.tree_flatten(x, is_leaf=lambda a: isinstance(a, Tensor) or a is None)


# ---------------------------------------------------------------- lower(fn, *args): tracing
class _Tracer:
    """The apply-hook that records every op while ``fn`` runs."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.busy = False
        self.by_array: dict = {}    # id(array) -> (array, Var); the array is kept alive so ids stay unique
        self.known: dict = {}       # id(tensor) -> tensor whose value the trace has seen
        self.born: dict = {}        # id(tensor) -> weakref, for tensors created while tracing
        self.eqns: list[Eqn] = []
        self.stopped: dict = {}     # id(Var) -> its stop_gradient Var
        self.params: list = []      # (Var, Tensor)
        self.count = 0
        self.node_vars: dict = {}   # (id(tape Node), out idx) -> Var, for traced ops' outputs
        self.nodes: dict = {}       # id(tape Node) -> Node (kept alive so ids stay unique)
        self.foreign: list = []     # (position in eqns, Node, per-edge Var|None, out Vars): custom Functions

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count - 1}"

    def bind(self, t: Tensor, v: Var) -> None:
        self.by_array[id(t._value)] = (t._value, v)
        self.known[id(t)] = t

    def read(self, a: Tensor) -> Var:
        if a._base is not None:
            a._sync()
        hit = self.by_array.get(id(a._value))
        if hit is not None:
            v = hit[1]
        elif a._base is not None and id(a._base._value) in self.by_array:
            v = self._replay_view(a)
        elif id(a) in self.known:
            raise RuntimeError(
                f"lowering: a tensor of shape {list(a._v.shape)} was changed outside dynajax ops (a random "
                "fill or a write through .data / a detached view) after the trace had used it; lowering would "
                "mix its old and new values. Do that write with a recorded op or before lowering.")
        elif self.born.get(id(a), _dead)() is a:
            v = Var(self.fresh("c"), a._v.shape, a._v.dtype, "const", value=a._value, where=_user_frame())
            self.bind(a, v)
        else:
            v = Var(self.fresh("p"), a._v.shape, a._v.dtype, "param", live=_is_float(a._v.dtype))
            self.params.append((v, a))
            self.bind(a, v)
        fn = a.grad_fn
        if fn is not None and id(fn) not in self.nodes:
            self._foreign(fn, a, v)
        if v.live and not a._rg and grad_mode.state.enabled:
            v = self.stop(v)
        return v

    def _foreign(self, node, a: Tensor, v: Var) -> None:
        """Remember a tape node no traced op made (a custom autograd.Function) so testing can check its VJP."""
        self.nodes[id(node)] = node
        ins = []
        for e in node.edges:
            if e is None:
                ins.append(None)
            elif e[1] < 0:
                hit = self.by_array.get(id(e[0]._value))
                ins.append(hit[1] if hit is not None else None)
            else:
                ins.append(self.node_vars.get((id(e[0]), e[1])))
        outs = [v if i == a._out_idx else None for i in range(len(node.out_meta))]
        self.foreign.append((len(self.eqns), node, ins, outs))

    def stop(self, v: Var) -> Var:
        s = self.stopped.get(id(v))
        if s is None:
            s = Var(self.fresh("t"), v.shape, v.dtype, "op", live=False)
            self.eqns.append(Eqn(None, {}, [v], [s], _user_frame()))
            self.stopped[id(v)] = s
        return s

    def _replay_view(self, a: Tensor) -> Var:
        from .ops.views import is_detach
        v = self.by_array[id(a._base._value)][1]
        for step in a._view:
            if is_detach(step):
                v = self.stop(v) if v.live else v
                continue
            o, params = step
            params = dict(params)
            out = jax.eval_shape(lambda x: o.impl(x, **params), jax.ShapeDtypeStruct(v.shape, v.dtype))
            nv = Var(self.fresh("t"), out.shape, out.dtype, "op", live=v.live and _is_float(out.dtype))
            self.eqns.append(Eqn(o, params, [v], [nv], _user_frame()))
            v = nv
        self.by_array[id(a._value)] = (a._value, v)
        self.known[id(a)] = a
        return v

    def hook(self, op, args, params):
        if self.busy or threading.get_ident() != self.thread:
            return NotImplemented
        ins = [self.read(a) if isinstance(a, Tensor) else Lit(a) for a in args]
        where = _user_frame()
        self.busy = True
        try:
            res = registry.apply(op, *args, **params)
        finally:
            self.busy = False
        outs = res if isinstance(res, tuple) else (res,)
        live = any(isinstance(v, Var) and v.live for v in ins)
        ovars = []
        for o in outs:
            v = Var(self.fresh("t"), o._v.shape, o._v.dtype, "op", live=live and _is_float(o._v.dtype))
            self.bind(o, v)
            ovars.append(v)
            if o.grad_fn is not None:
                self.nodes[id(o.grad_fn)] = o.grad_fn
                self.node_vars[(id(o.grad_fn), o._out_idx)] = v
        self.eqns.append(Eqn(op, dict(params), ins, ovars, where))
        return res


def _dead():
    return None


def _recording_init(orig, born: dict):
    def _init(t, *a, **k):
        born[id(t)] = weakref.ref(t)
        return orig(t, *a, **k)
    return _init


def _arg_names(fn, n: int) -> list:
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        star = next((p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.VAR_POSITIONAL), None)
    except (TypeError, ValueError):
        names, star = [], None
    out = []
    for i in range(n):
        out.append(names[i] if i < len(names) else f"{star or 'arg'}{i}")
    return out


def _closure_names(fn) -> dict:
    """id(tensor) -> a readable name for tensors ``fn`` reaches via closures, globals or modules."""
    found: dict = {}

    def visit(name, obj, depth):
        if isinstance(obj, Tensor):
            found.setdefault(id(obj), name)
        elif hasattr(obj, "named_parameters") and callable(obj.named_parameters):
            try:
                for n, p in obj.named_parameters():
                    found.setdefault(id(p), f"{name}.{n}")
                for n, b in getattr(obj, "named_buffers", lambda: ())():
                    found.setdefault(id(b), f"{name}.{n}")
            except Exception:  # noqa: BLE001 - naming is best effort
                pass
        elif depth < 1 and isinstance(obj, dict):
            for k, v in obj.items():
                visit(f"{name}[{k!r}]", v, depth + 1)
        elif depth < 1 and isinstance(obj, (list, tuple)):
            for k, v in enumerate(obj):
                visit(f"{name}[{k}]", v, depth + 1)

    target = fn
    if hasattr(target, "__self__"):
        visit("self", target.__self__, 0)
        target = target.__func__
    if hasattr(target, "named_parameters"):
        visit(type(target).__name__.lower(), target, 0)
        target = getattr(type(target), "forward", target)
    code = getattr(target, "__code__", None)
    if code is not None:
        for name, cell in zip(code.co_freevars, target.__closure__ or ()):
            try:
                visit(name, cell.cell_contents, 0)
            except ValueError:
                pass
        g = getattr(target, "__globals__", {})
        for name in code.co_names:
            if name in g:
                visit(name, g[name], 0)
    return found


@_x64.wrap
def lower(fn: Callable, *example_args, name: str | None = None) -> Lowered:
    """Run ``fn(*example_args)`` once, tracing every op, and return it as a :class:`Lowered`.

    Tensors (or arrays) in ``example_args`` (pytrees allowed) become arrays of
    ``.fn``; other values are static. Tensors ``fn`` reads that it neither got
    as arguments nor created (module parameters, closure tensors) become
    ``.params``; tensors it creates itself (``ones(3)``) are baked constants.
    Where eager autograd would cut the gradient (``no_grad``, ``detach``),
    ``.fn`` has ``stop_gradient``. Not thread-safe: one lowering per process at a time.

    >>> low = dynajax.lower(lambda x, n: x ** n, dynajax.tensor([1.0, 2.0]), 3)
    >>> low.fn(jnp.array([2.0, 3.0], jnp.float32), 3)
    Array([ 8., 27.], dtype=float32)
    """
    name = name or getattr(fn, "__name__", type(fn).__name__)
    leaves, tree = _tree_flatten(tuple(example_args))
    tracer = _Tracer()
    arg_names = _arg_names(fn, len(example_args))
    leaf_names = _leaf_names(tree, arg_names)
    call_leaves, in_leaves = [], []
    for leaf, lname in zip(leaves, leaf_names):
        if isinstance(leaf, (Tensor, jax.Array, np.ndarray)):
            value = leaf.detach()._value if isinstance(leaf, Tensor) else jnp.asarray(leaf)
            t = _make(value, _is_float(value.dtype) and np.dtype(value.dtype).kind != "c")
            v = Var(lname, value.shape, value.dtype, "input", live=t._rg)
            tracer.bind(t, v)
            call_leaves.append(t)
            in_leaves.append(v)
        else:
            call_leaves.append(leaf)
            in_leaves.append(Lit(leaf))
    call_args = jax.tree_util.tree_unflatten(tree, call_leaves)
    orig_init = _tensor._init
    _tensor._init = _recording_init(orig_init, tracer.born)
    registry._hooks.insert(0, tracer.hook)   # ahead of a dynajax.compile capture, which would take every op
    try:
        with grad_mode.enable_grad():
            result = fn(*call_args)
            out_leaves, out_tree = _tree_flatten(result)
            outs = [tracer.read(o) if isinstance(o, Tensor) else Lit(o) for o in out_leaves]
    finally:
        registry._hooks.remove(tracer.hook)
        _tensor._init = orig_init
    _refuse_hooks(tracer, call_leaves)
    names = _closure_names(fn)
    params = {}
    for k, (v, t) in enumerate(tracer.params):
        pname = names.get(id(t), v.name)
        while pname in params:
            pname += "_"
        v.name = pname
        params[pname] = t
    live = {id(e) for e in _live_eqns(tracer.eqns, outs)}
    foreign, eqns = [], []
    for k, e in enumerate(tracer.eqns + [None]):
        foreign += [(len(eqns), n, i, o) for (pos, n, i, o) in tracer.foreign if pos == k]
        if e is not None and id(e) in live:
            eqns.append(e)
    _rename(eqns)
    low = Lowered(name, tree, in_leaves, [v for v, _ in tracer.params], params, eqns, out_tree, outs)
    low.foreign = foreign
    return low


def _refuse_hooks(tracer: _Tracer, call_leaves: list) -> None:
    """Raise where ``fn`` registered a tensor hook (``register_hook``) on a tensor it made or was given: the
    lowered function would neither call it nor let it change the gradient, so ``jax.grad`` of it (and
    ``dynajax.func``) would silently differ from the tape. ``retain_grad`` (only an observer) is let through."""
    hooked = []
    for (nid, idx), v in tracer.node_vars.items():
        hooks = (tracer.nodes[nid].pre_hooks or {}).get(idx)
        if hooks and any(not getattr(h, "_retain", False) for h in hooks):
            hooked.append(f"{v.type_str()} (op {tracer.nodes[nid].op.name})")
    for t in call_leaves:
        if isinstance(t, Tensor) and t._hooks:
            hooked.append(f"{_short_dtype(t._v.dtype)}[{','.join(map(str, t._v.shape))}] (an argument)")
    if hooked:
        names = ", ".join(hooked)
        raise NotImplementedError(
            f"lowering does not run tensor hooks: the function registered one on {names}; the lowered function "
            "would compute the gradient without it. Take that gradient on the tape (backward or "
            "autograd.grad), or make the hook's change part of the function.")


def _leaf_names(tree, arg_names) -> list:
    dummy = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    names = [""] * tree.num_leaves
    for i, sub in enumerate(dummy):
        for path, k in jax.tree_util.tree_flatten_with_path(sub)[0]:
            names[k] = arg_names[i] + jax.tree_util.keystr(path)
    return names


def _live_eqns(eqns: list, outs: list) -> list:
    """Drop ops that no output depends on (dead code of the traced Python)."""
    needed = {id(v) for v in outs if isinstance(v, Var)}
    keep = []
    for e in reversed(eqns):
        if any(id(v) in needed for v in e.outs):
            keep.append(e)
            needed.update(id(x) for x in e.ins if isinstance(x, Var))
    return keep[::-1]


def _rename(eqns: list) -> None:
    """Number op outputs and constants in order of appearance (t0, t1, ...; c0, c1, ...)."""
    nt = nc = 0
    seen = set()
    for e in eqns:
        for x in e.ins:
            if isinstance(x, Var) and x.kind == "const" and id(x) not in seen:
                seen.add(id(x))
                x.name, nc = f"c{nc}", nc + 1
        for v in e.outs:
            v.name, nt = f"t{nt}", nt + 1


# ---------------------------------------------------------------- lower_graph: the recorded tape
@_x64.wrap
def lower_graph(outputs, inputs=None, allow_unused: bool = False) -> Lowered:
    """Lower the recorded autograd graph from ``inputs`` (tensors) to ``outputs``.

    ``inputs=None`` takes every leaf requiring grad. Leaves that are not among
    ``inputs`` become ``.params``; tensors that did not require grad (and values
    of ops that record no node: masks, indices) are baked in as the constants the
    graph recorded, so a later in-place change of them does not leak in.

    >>> y = (x * w).sum(); low = dynajax.lower_graph(y, [x])   # w becomes low.params
    """
    single_out = isinstance(outputs, Tensor)
    outs_t = [outputs] if single_out else list(outputs)
    roots = []
    for o in outs_t:
        if o._base is not None:
            o._sync()
        roots.append((o.grad_fn, o._out_idx) if o.grad_fn is not None else (o, -1))
    if inputs is None:
        inputs = _graph_leaves(roots)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    key_to_var: dict = {}
    in_vars = []
    for i, t in enumerate(inputs):
        if t._base is not None:
            t._sync()
        k = (id(t.grad_fn), t._out_idx) if t.grad_fn is not None else (id(t), -1)
        v = Var(f"in{i}", t._v.shape, t._v.dtype, "input", live=True)
        key_to_var[k] = v
        in_vars.append(v)
    nodes = _collect(roots, key_to_var)[::-1]  # creation order
    params, param_vars, consts = {}, [], {}
    used = set()
    eqns = []
    for node in nodes:
        if getattr(node.op, "impl", None) is None:
            raise NotImplementedError(
                f"cannot lower {node.op.name} (a custom autograd.Function has no jax impl); use "
                "dynajax.lower(fn, *args), which traces its forward ops")
        ins = []
        for i, e in enumerate(node.edges):
            if e is None:
                if node.in_meta[i] is None:
                    ins.append(Lit(node.saved[i]))
                else:
                    c = node.consts[i]
                    v = consts.get(id(c))
                    if v is None:
                        v = consts[id(c)] = Var("c", c.shape, c.dtype, "const", value=c)
                    ins.append(v)
                continue
            fn, idx = e
            k = (id(fn), idx)
            v = key_to_var.get(k)
            if v is None and idx < 0:
                v = Var(f"p{len(param_vars)}", fn._v.shape, fn._v.dtype, "param", live=True)
                param_vars.append(v)
                params[v.name] = fn
                key_to_var[k] = v
            elif v is None:
                raise RuntimeError(f"lower_graph: the graph reached {fn.name()} before the op that produced it")
            if v.kind == "input":
                used.add(id(v))
            _check_version(node, i)
            ins.append(v)
        outs = [Var("t", s, d, "op", live=True) for s, d in node.out_meta]
        for j, v in enumerate(outs):
            key_to_var.setdefault((id(node), j), v)
        eqns.append(Eqn(node.op, dict(node.params), ins, outs, None))
    out_vars = []
    for (fn, idx), t in zip(roots, outs_t):
        v = key_to_var.get((id(fn), idx))
        if v is None:
            v = Var("c", t._v.shape, t._v.dtype, "const", value=t._value)
        if v.kind == "input":
            used.add(id(v))
        out_vars.append(v)
    for i, (t, v) in enumerate(zip(inputs, in_vars)):
        if id(v) not in used and not allow_unused:
            raise RuntimeError(f"lower_graph: input {i} ({v.type_str()}) is not on the path from the outputs to the "
                               "recorded leaves; pass allow_unused=True to lower anyway (its gradient is then zero)")
    eqns = _live_eqns(eqns, out_vars)
    _rename(eqns)
    in_leaves, in_tree = _tree_flatten(tuple(inputs))
    out_tree = jax.tree_util.tree_structure(0 if single_out else tuple(range(len(out_vars))))
    return Lowered("graph", in_tree, in_vars, param_vars, params, eqns, out_tree, out_vars)


def _check_version(node, i: int) -> None:
    s = node.saved[i]
    if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], Tensor) and s[0]._vc[0] != s[1]:
        t = s[0]
        raise RuntimeError(f"lower_graph: input {i} of {node.name()} [{t.dtype!r} {list(t.shape)}] was modified by "
                           f"an inplace operation after it was recorded (version {t._vc[0]}, recorded {s[1]})")


def _graph_leaves(roots: Sequence) -> list:
    """Leaf tensors requiring grad that the graph reaches, in order of first use."""
    leaves, seen = [], set()
    for fn, idx in roots:
        if idx < 0 and id(fn) not in seen:
            seen.add(id(fn))
            leaves.append(fn)
    for n in _collect(roots):
        for e in n.edges:
            if e is not None and e[1] < 0 and id(e[0]) not in seen:
                seen.add(id(e[0]))
                leaves.append(e[0])
    return leaves


def example_values(lowered: Lowered, *args) -> dict:
    """Every intermediate value of ``lowered`` on ``args``: {id(Var): array} (used by testing)."""
    env: dict = {}
    leaves = lowered._in_tree.flatten_up_to(tuple(args))
    for leaf, v in zip(leaves, lowered._in_leaves):
        if isinstance(v, Var):
            env[id(v)] = leaf.detach()._value if isinstance(leaf, Tensor) else jnp.asarray(leaf)
    for v, p in zip(lowered._param_vars, lowered.param_values()):
        env[id(v)] = p
    lowered._evaluate(env)
    return env
