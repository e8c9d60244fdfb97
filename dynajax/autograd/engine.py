"""Engine 1: the native tape. Walks recorded Nodes in reverse creation order
(a valid topological order, since a node is always created after its inputs),
iteratively, so graph depth is unbounded."""
from __future__ import annotations

import functools
from typing import Sequence

import jax.numpy as jnp

from .._dtype import from_np
from .._tensor import Tensor, upcall
from ..ops.creation import fill_like, zeros, zeros_like
from ..ops.dispatch import grad_reset
from ..ops.join import stack
from ..ops.reduce import sum_to_shape
from . import grad_mode
from .graph import FREED_MSG, Node

_anomaly = {"enabled": False}


def accumulate_grad(t, g, create_graph: bool) -> None:
    """Add gradient ``g`` into ``t.grad`` as PyTorch's AccumulateGrad does: the first one becomes ``t.grad``, a
    tensor of its own (one op's gradient can reach several leaves, ``a + b``'s both); a later one is added in
    place, so whoever holds ``t.grad`` (gradient buckets, a list of grads taken once, ``zero_grad(
    set_to_none=False)``'s zeroed tensor) sees the sum. With ``create_graph`` both stay differentiable, the sum
    out of place."""
    old = t.grad
    if create_graph:
        t._grad = g if old is None else old + g
    elif old is None:
        t._grad = own_value(g)
    else:
        with grad_mode.no_grad():
            old.add_(g)
    if t._post_hooks:   # ``register_post_accumulate_grad_hook``
        for hook in list(t._post_hooks):
            hook(t)


@upcall
def own_value(g):
    """A new tensor outside the graph holding ``g``'s value (arrays are immutable: no copy), which an in-place
    write rebinds without reaching ``g`` or anything sharing its value."""
    if g._base is not None:
        g._sync()
    return Tensor._make(g._v)


def reset_grad(p, set_to_none: bool) -> None:
    """``zero_grad`` of one parameter: ``p.grad`` set to None, or zeroed in place as PyTorch does, so whoever
    holds it sees the zeros (and, it staying the same tensor, the next backward's sum: :func:`accumulate_grad`);
    a differentiable grad (``create_graph``) is detached first."""
    g = p.grad
    if g is None:
        return
    if set_to_none:
        grad_reset(p)   # (a compiled step keeps the old grad, to put back if it fails)
        p._grad = None
        return
    if g.grad_fn is not None:
        if g._base is None:
            g.detach_()
        else:
            p._grad = g = g.detach()
    elif g._rg:
        g.requires_grad_(False)
    with grad_mode.no_grad():
        g.zero_()


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(x)
    return (x,)


def _root_grads(outputs, grad_outputs, create_graph) -> list:
    T = Tensor
    grads = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if i < len(grad_outputs) else None
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if out._v.dtype.kind == "c":
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got "
                                   f"torch.{out.dtype.name}")
            g = fill_like(out, 1)   # (an op without a rule: no graph edge to ``out``)
        else:
            if not isinstance(g, T):   # PyTorch's check (a number is not taken as a scalar gradient)
                raise TypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}")
            if tuple(g.shape) != tuple(out.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {_sz(g.shape)} "
                                   f"and output[{i}] has a shape of {_sz(out.shape)}.")
            if not create_graph:
                g = g.detach()
        grads.append(g)
    return grads


def _sz(shape) -> str:
    return f"torch.Size([{', '.join(str(s) for s in shape)}])"


def _collect(roots: Sequence, stop=()) -> list:
    """All Nodes reachable from the root edges (not past the ``(id(node), idx)`` keys in ``stop``),
    highest sequence number first."""
    seen, stack = set(), [fn for fn, idx in roots if idx >= 0 and (id(fn), idx) not in stop]
    nodes = []
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        nodes.append(n)
        for e in n.edges:
            if e is not None and e[1] >= 0 and id(e[0]) not in seen and (id(e[0]), e[1]) not in stop:
                stack.append(e[0])
    nodes.sort(key=lambda n: n.seq, reverse=True)
    return nodes


def _useful(e, needed: set, targets: dict) -> bool:
    fn, idx = e
    return (id(fn), idx) in targets or (idx >= 0 and id(fn) in needed)


def _needed(nodes: list, targets: dict) -> set:
    """ids of nodes whose rule must run to reach some target."""
    needed: set = set()
    for n in reversed(nodes):  # ascending seq: inputs before consumers
        if any(e is not None and _useful(e, needed, targets) for e in n.edges):
            needed.add(id(n))
    return needed


def run_backward(outputs, grad_outputs, retain_graph, create_graph, targets=None):
    """Propagate ``grad_outputs`` from ``outputs`` back through the graph.

    ``targets`` maps ``(id(fn), idx)`` keys to captured grads (``autograd.grad``);
    when None, gradients are accumulated into leaves' ``.grad``.
    """
    roots = []
    for out in outputs:
        if out._base is not None:
            out._sync()
        if out.grad_fn is not None:
            roots.append((out.grad_fn, out._out_idx))
        elif out._rg:
            roots.append((out, -1))
        else:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    nodes = _collect(roots)
    needed = _needed(nodes, targets) if targets is not None else None
    buffers: dict = {}
    leaf_buf: dict = {}

    def push(edge, g):
        fn, idx = edge
        if idx < 0:
            k = id(fn)
            prev = leaf_buf.get(k)
            leaf_buf[k] = (fn, g if prev is None else prev[1] + g)
        else:
            slot = buffers.setdefault(id(fn), [None] * len(fn.out_meta))
            slot[idx] = g if slot[idx] is None else slot[idx] + g

    for edge, g in zip(roots, grad_outputs):
        push(edge, g)

    with grad_mode.set_grad_enabled(create_graph):
        for node in nodes:
            gs = buffers.pop(id(node), None)
            if gs is None:
                continue
            if node.pre_hooks:
                gs = _run_pre_hooks(node, gs)
            if targets is not None:
                for i, g in enumerate(gs):
                    if (id(node), i) in targets and g is not None:
                        targets[(id(node), i)] = g
                if id(node) not in needed:
                    continue
            in_grads = _call_rule(node, gs, retain_graph)
            for i, (e, g) in enumerate(zip(node.edges, in_grads)):
                if e is None or g is None:
                    continue
                if needed is not None and not _useful(e, needed, targets):
                    continue
                shape, dt = node.in_meta[i]
                if g._v.shape != shape:
                    g = sum_to_shape(g, shape)
                if g._v.dtype != dt:
                    if g._v.dtype.kind == "c" and dt.kind != "c":   # a real input of a complex result: its
                        g = g.real                                      # gradient is the real part (PyTorch's)
                    g = g.to(from_np(dt))
                if _anomaly["enabled"]:
                    _check_nan(node, g, i)
                push(e, g)

        for leaf, g in leaf_buf.values():
            if leaf._hooks:
                for h in list(leaf._hooks):
                    g = _hooked(h, g)
            if targets is not None:
                if (id(leaf), -1) in targets:
                    targets[(id(leaf), -1)] = g
                continue
            accumulate_grad(leaf, g, create_graph)  # ops (not raw arrays): compile records them


def _run_pre_hooks(node: Node, gs: list) -> list:
    gs = list(gs)
    for idx, hooks in node.pre_hooks.items():
        if gs[idx] is None:
            continue
        retain = None
        for h in list(hooks):
            if getattr(h, "_retain", False):
                retain = h
            else:
                gs[idx] = _hooked(h, gs[idx])
        if retain is not None:   # ``retain_grad`` keeps the gradient after every other hook, as PyTorch's does
            retain(gs[idx])
    return gs


def _hooked(hook, g):
    """The gradient after tensor hook ``hook`` saw ``g``: what it returned, or ``g`` where it returned None.
    PyTorch's RuntimeError where it returned another shape."""
    r = hook(g)
    if r is None:
        return g
    name = getattr(hook, "__name__", type(hook).__name__)
    if tuple(r.shape) != tuple(g.shape):
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    if r.dtype != g.dtype:   # (the engine would cast it back silently)
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {g.dtype} got {r.dtype})")
    return r


def _call_rule(node: Node, gs: list, retain_graph: bool) -> tuple:
    T = Tensor
    if node.freed:
        raise RuntimeError(FREED_MSG)
    inputs = []
    for s in node.saved:
        if isinstance(s, tuple):
            t, ver = s
            if t._vc[0] != ver:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [{t.dtype!r} {list(t.shape)}] is at version {t._vc[0]}; "
                    f"expected version {ver} instead. Hint: the backtrace further above shows the "
                    "operation that failed to compute its gradient.")
            inputs.append(t)
        else:
            inputs.append(s)
    out = None
    if node.out_saved is not None:
        value, vc, ver = node.out_saved
        if vc[0] != ver:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [output 0 of {node.name()}] is at version {vc[0]}; expected version {ver} "
                "instead. Hint: the backtrace further above shows the operation that failed to compute "
                "its gradient.")
        if node.op.nout == 1:
            out = T._make(value, True, node, 0, vc)
        else:
            out = tuple(T._make(v, True, node, i, vc) for i, v in enumerate(value))
    if node.op.nout == 1:
        g = gs[0]
    elif node.op.none_cotangents:
        g = tuple(gs)
    else:
        g = tuple(gs[i] if gs[i] is not None else zeros(node.out_meta[i][0], dtype=_np_to_dj(node.out_meta[i][1]))
                  for i in range(len(gs)))
    per_input = node.op.per_input
    if per_input is not None:  # only the cotangents that some edge needs
        res = tuple(r(g, out, *inputs, **node.params) if r is not None and e is not None else None
                    for r, e in zip(per_input, node.edges))
    else:
        res = node.op.rule(g, out, *inputs, **node.params)
        if not isinstance(res, tuple):
            res = (res,)
    if not retain_graph:
        free_node(node)
    return res


def free_node(node: Node) -> None:
    """Drop what ``node``'s rule saved (after a backward without ``retain_graph``); a second backward
    through it then raises PyTorch's error."""
    saved = node.saved
    ctx = node.params.get("ctx") if type(node.params) is dict else None
    if ctx is not None and getattr(ctx, "_saved", None):   # a custom Function's save_for_backward
        node.freed = True
        ctx._saved = ()
    if node.out_saved is not None or any([isinstance(s, tuple) for s in saved]):
        node.freed = True
        node.saved = tuple([None if isinstance(s, tuple) else s for s in saved])
        node.out_saved = None


def _np_to_dj(d):
    return from_np(d)


def _check_nan(node: Node, g, i: int = 0) -> None:
    if bool(jnp.isnan(g._value).any()):
        raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


def _outside_autocast(fn):
    """Run ``fn`` (a backward) with this thread's autocast off, as PyTorch runs each op's backward in the dtypes of
    its forward (``dynajax.amp``: the casts are recorded ops, differentiated like any other)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        st = grad_mode.state
        casts = st.casts
        if casts is None:
            return fn(*args, **kwargs)
        st.casts = None
        try:
            return fn(*args, **kwargs)
        finally:
            st.casts = casts
    return wrapper


@_outside_autocast
@upcall
def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """Compute and accumulate gradients of ``tensors`` into the leaves' ``.grad``.

    >>> y = (x * x).sum(); dynajax.autograd.backward(y)   # same as y.backward()
    """
    outputs = _as_tuple(tensors)
    grads = _root_grads(outputs, _as_tuple(grad_tensors), create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is None:
        run_backward(outputs, grads, retain_graph, create_graph)
        return
    inputs = _as_tuple(inputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    results = grad(outputs, inputs, grads, retain_graph=retain_graph, create_graph=create_graph,
                   allow_unused=True, _materialize=False)
    for t, g in zip(inputs, results):
        if g is None:
            continue
        accumulate_grad(t, g, create_graph)


@_outside_autocast
def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False,
         _materialize=True):
    """Return d(outputs)/d(inputs) without touching ``.grad``.

    >>> (gx,) = dynajax.autograd.grad((x ** 3).sum(), x, create_graph=True)
    """
    if is_grads_batched:   # one backward per row of the grad_outputs' leading dim, stacked (a loop, not vmap)
        outs, gos = _as_tuple(outputs), _as_tuple(grad_outputs)
        n = next(g.shape[0] for g in gos if g is not None)
        rows = [grad(outs, inputs, [g[b] if g is not None else None for g in gos],
                     retain_graph=True if b < n - 1 else retain_graph, create_graph=create_graph,
                     allow_unused=allow_unused, materialize_grads=materialize_grads) for b in range(n)]
        return tuple(None if rows[0][i] is None else stack([r[i] for r in rows]) for i in range(len(rows[0])))
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    grads = _root_grads(outputs, _as_tuple(grad_outputs), create_graph) if _materialize else list(grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    targets = {}
    keys = []
    for i, t in enumerate(inputs):
        if t._base is not None:
            t._sync()
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        k = (id(t.grad_fn), t._out_idx) if t.grad_fn is not None else (id(t), -1)
        targets[k] = None
        keys.append(k)
    run_backward(outputs, grads, retain_graph, create_graph, targets)
    result = []
    for i, (t, k) in enumerate(zip(inputs, keys)):
        g = targets[k]
        if g is None:
            if materialize_grads:
                g = zeros_like(t)
            elif not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in the "
                                   "graph. Set allow_unused=True if this is the desired behavior.")
        elif not create_graph:
            g = g.detach()
        result.append(g)
    return tuple(result)


class detect_anomaly:
    """Context manager: raise as soon as backward produces a NaN, naming the op."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan

    def __enter__(self) -> None:
        self._prev = _anomaly["enabled"]
        _anomaly["enabled"] = self.check_nan

    def __exit__(self, *exc) -> None:
        _anomaly["enabled"] = self._prev


def set_detect_anomaly(mode: bool) -> None:
    _anomaly["enabled"] = bool(mode)
