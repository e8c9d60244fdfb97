"""``backward()`` while ``dynajax.compile`` records a step: one recorded op for the whole backward.

Running the native tape on recorded values records every VJP rule's ops (about
as many as the forward), each costing a Python dispatch on every call of the
step. Instead, when the graph behind ``loss.backward()`` holds only registry
ops recorded in this step, with no hooks, ``retain_grad``, custom Functions,
``create_graph`` or anomaly mode, the backward is recorded as one op,
:func:`backward_grads`. Its Python runs once, when ``jax.jit`` traces the
executable: it rebuilds the tape over the forward values the executable has
already computed (no recomputation) and runs the engine's VJP rules on them, so
XLA gets the same program as from the per-op recording. A rule that branches on
a Python number that is an executable input (``x ** p`` with ``p`` a float that
may change between calls) cannot run on a traced value; the op then falls back,
still inside the trace, to ``jax.vjp`` of the forward eqns (engine 2) with the
tape's detach points as ``stop_gradient``. Anything else runs the native tape
during capture, as eagerly.

Graphs of more than ``MAX_NODES`` nodes, or with one op ``LOOP_REPEATS`` times
(a Python loop over a cell), keep the tape's VJP ops as eqns of the step, so
loop rolling (``compile.rolling``) can roll an unrolled RNN's backward into a scan as
it rolls its forward. The tape runs for such a graph once: the eqns it records
are kept as a :class:`_Template` under the graph's signature (each node's op,
static params, input vars, shapes and detach points, the leaves, the
cotangents, the leaves' grads before, the Python-number slots), and a later
call with the same signature appends them without running the rules again.
"""
from __future__ import annotations

import jax

from . import guards as _guards
from .capture import Sym, bind
from .._tensor import _make
from ..autograd import engine
from ..autograd.function import _FunctionOp


def _vjp_formulation(env, plan):
    """Leaf gradients by ``jax.vjp`` of the forward eqns (recomputed inside the trace)."""
    nodes, pairs, ins, roots, cots, nleaves = plan
    leaf_vars = [v for _, v in pairs]

    def forward(*xs):
        local = dict(env)
        local.update(zip(leaf_vars, xs))
        for _, fn, params, refs, ovars, stops, _ in nodes:
            args = []
            for r, stop in zip(refs, stops):
                if type(r) is not int:
                    args.append(r[1])
                else:
                    x = local[r]
                    args.append(jax.lax.stop_gradient(x) if stop else x)
            bind(local, ovars, fn(*args, **dict(params)))
        return tuple(local[v] for v in roots)

    _, pull = jax.vjp(forward, *(env[v] for v in leaf_vars))
    return pull(tuple(env[c] for c in cots))


def _tape_formulation(env, plan):
    """Leaf gradients by the engine's own VJP rules over a tape rebuilt on the forward values."""
    from ..autograd.engine import grad
    from ..ops import registry
    nodes, pairs, ins, roots, cots, nleaves = plan
    leaf_t = [_make(env[v], True) for _, v in pairs]
    pair_of = {p: i for i, p in enumerate(pairs)}
    made = {}
    for op, _, params, refs, ovars, _, kinds in nodes:
        args = []
        for r, kind in zip(refs, kinds):
            if kind == "p":
                args.append(r[1] if type(r) is not int else env[r])
            elif kind == "c":
                args.append(_make(env[r]))
            elif kind == "n":
                args.append(made[r])
            else:
                args.append(leaf_t[pair_of[(kind, r)]])
        out = env[ovars[0]] if op.nout == 1 else tuple(env[v] for v in ovars)
        res = registry._record(op, tuple(args), dict(params), out)
        for v, t in zip(ovars, res if isinstance(res, tuple) else (res,)):
            made[v] = t
    gs = grad([made[v] for v in roots], leaf_t, [_make(env[c]) for c in cots], allow_unused=True)
    return [jax.numpy.zeros_like(env[v]) if g is None else g._value for (_, v), g in zip(pairs, gs)]


_TRACE_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                 jax.errors.TracerIntegerConversionError)


def backward_grads(*vals, plan):
    """The recorded backward: ``vals`` are the values of ``plan``'s input vars; returns one gradient per
    leaf (the sum over the values of that leaf the forward read)."""
    env = dict(zip(plan[2], vals))
    try:
        grads = _tape_formulation(env, plan)
    except _TRACE_ERRORS:
        grads = _vjp_formulation(env, plan)
    out = [None] * plan[5]
    for (k, _), g in zip(plan[1], grads):
        out[k] = g if out[k] is None else out[k] + g
    return tuple(out)


ENABLED = True   # False: always record the tape's VJP ops (for comparisons)
TEMPLATES = True  # False: run the tape for a loop graph's backward on every call (for comparisons)
MAX_NODES = 40   # larger graphs record the tape's VJP ops one by one, which loop rolling can roll
LOOP_REPEATS = 8  # so do graphs with one op on the same input shapes this many times: a loop (say over a
#                   fused RNN cell), whose backward would otherwise be traced unrolled (measured: a 30-step
#                   GRUCell loop's step compiled in 4.5 s with it unrolled, 1.25 s with the backward rolled)


def _repeats(nodes) -> bool:
    """Whether one op on the same input shapes makes ``LOOP_REPEATS`` of the graph's nodes."""
    if len(nodes) < LOOP_REPEATS:
        return False
    counts: dict = {}
    for n in nodes:
        key = (n.op, tuple([m[0] if m is not None else None for m in n.in_meta]))
        c = counts[key] = counts.get(key, 0) + 1
        if c >= LOOP_REPEATS:
            return True
    return False


class BackwardByVJP:
    """Installed by a (non-verify) Capture: routes eligible ``backward()`` calls to :meth:`run`."""

    def __init__(self, cap) -> None:
        self.cap = cap
        self.node_eqn: dict = {}    # id(node) -> (node, position of its eqn in cap.eqns)
        self._saved = None

    def install(self) -> None:
        self._saved = engine.run_backward
        orig = self._saved

        def run_backward(outputs, grad_outputs, retain_graph, create_graph, targets=None):
            if ENABLED and targets is None and not create_graph and not engine._anomaly["enabled"]:
                # (``run`` gives up on a graph that would call the user's code -- hooks, a custom Function --
                # so it runs only dynajax's: unwatched, as an op's recording)
                done = _guards.unwatched(self.cap.watch, self.run, outputs, grad_outputs, retain_graph)
                if done is True:
                    return None
                if done:   # a loop graph seen for the first time: run the tape and keep what it records
                    mark = _Mark(self.cap)
                    orig(outputs, grad_outputs, retain_graph, create_graph, targets)
                    mark.keep(*done)
                    return None
            return orig(outputs, grad_outputs, retain_graph, create_graph, targets)
        engine.run_backward = run_backward

    def uninstall(self) -> None:
        engine.run_backward = self._saved

    def note(self, result) -> None:
        """Called by the capture hook after recording an op that made a Node: remember its eqn."""
        for t in result if isinstance(result, tuple) else (result,):
            node = t.grad_fn
            if node is not None:
                self.node_eqn[id(node)] = (node, len(self.cap.eqns) - 1)
                return

    def run(self, outputs, grad_outputs, retain_graph) -> bool:
        """Record the backward as one op and accumulate ``.grad``; False: the tape must run instead."""
        cap = self.cap
        roots, root_vars = [], []
        for out in outputs:
            if out._base is not None:
                out._sync()
            node = out.grad_fn
            if node is None:
                return False
            hit = self.node_eqn.get(id(node))
            if hit is None or hit[0] is not node:
                return False
            roots.append(node)
            root_vars.append(cap.eqns[hit[1]][3][out._out_idx])
        nodes = engine._collect([(n, 0) for n in roots])
        loop = len(nodes) > MAX_NODES or _repeats(nodes)   # the tape's ops, which rolling can roll into a scan
        desc, pairs, leaves, leaf_pos = [], [], [], {}
        for node in reversed(nodes):   # creation order
            hit = self.node_eqn.get(id(node))
            if (hit is None or hit[0] is not node or node.freed or node.pre_hooks
                    or isinstance(node.op, _FunctionOp)):
                return False
            fn, params, refs, ovars = cap.eqns[hit[1]]
            stops, kinds = [], []
            for j, r in enumerate(refs):
                e = node.edges[j] if j < len(node.edges) else None
                if node.in_meta[j] is None:          # a Python value
                    kinds.append("p")
                    stops.append(type(r) is int)
                    continue
                if e is None:                        # a tensor the tape does not differentiate
                    kinds.append("c")
                    stops.append(True)
                    continue
                stops.append(False)
                src, idx = e
                if idx < 0:   # a leaf: its value at this read is an input of the backward
                    if src._hooks or src._post_hooks:   # (the user's code: the tape runs them)
                        return False
                    k = leaf_pos.get(id(src))
                    if k is None:
                        k = leaf_pos[id(src)] = len(leaves)
                        leaves.append(src)
                    if (k, r) not in pairs:
                        pairs.append((k, r))
                    kinds.append(k)
                else:
                    h = self.node_eqn.get(id(src))
                    if h is None or cap.eqns[h[1]][3][idx] != r:
                        return False
                    kinds.append("n")
            for s in node.saved:   # the tape would raise on a value changed in place after it was saved
                if isinstance(s, tuple) and s[0]._vc[0] != s[1]:
                    return False
            desc.append((node.op, fn, tuple(params.items()), refs, ovars, tuple(stops), tuple(kinds)))
        if not leaves:
            return False
        cots = tuple(cap.var_of(g).idx for g in grad_outputs)
        if loop:
            if not TEMPLATES:
                return False
            return self._template_call(nodes, desc, pairs, leaves, root_vars, cots, grad_outputs, retain_graph)
        ins = []
        seen = set()
        for _, _, _, refs, ovars, _, _ in desc:
            for r in refs + ovars:
                if type(r) is int and r not in seen:
                    seen.add(r)
                    ins.append(r)
        for r in cots:
            if r not in seen:
                seen.add(r)
                ins.append(r)
        plan = (tuple(desc), tuple(pairs), tuple(ins), tuple(root_vars), cots, len(leaves))
        n = cap.nvars
        cap.nvars = n + len(leaves)
        cap.prod[n] = len(cap.eqns)
        cap.eqns.append((backward_grads, {"plan": plan}, tuple(ins), tuple(range(n, n + len(leaves)))))
        cap.keys.append((backward_grads, (("plan", plan),), tuple(ins)))
        if not retain_graph:
            for node in nodes:
                engine.free_node(node)
        for k, leaf in enumerate(leaves):
            v = leaf._value
            engine.accumulate_grad(leaf, _make(Sym(tuple(v.shape), v.dtype, n + k)), False)
        return True

    def _template_call(self, nodes, desc, pairs, leaves, root_vars, cots, grad_outputs, retain_graph):
        """A loop graph's backward: True if a kept template was appended; else (where to keep it,
        signature, leaves) for the tape's run to be kept under (``_Mark.keep``), or False."""
        cap = self.cap
        before = []
        for leaf in leaves:
            v = _grad_sym(leaf)
            if v is False:
                return False   # the tape would read (adopt) a grad the step did not compute: no template
            before.append(v if v is None else v.idx)
        sig = (tuple(desc), tuple(n.in_meta for n in reversed(nodes)), tuple(pairs), tuple(root_vars), cots,
               tuple((tuple(g.shape), g.dtype) for g in grad_outputs), tuple(before), bool(retain_graph),
               tuple(cap.slot_of.items()))
        store = cap.owner._bwd_templates
        where = (cap.nvars, len(cap.eqns), len(desc))
        kept = store.get(where, ())
        if kept:
            store.move_to_end(where)
        for s, tmpl in kept:
            if s == sig:
                tmpl.append_to(cap, leaves)
                if not retain_graph:
                    for node in nodes:
                        engine.free_node(node)
                return True
        return store, where, sig, leaves


def _grad_sym(leaf):
    """The Sym ``leaf.grad`` holds (None: no grad; False: a grad holding an array, not a recorded value).
    The tape's new grads are plain tensors (``engine.accumulate_grad``), as a template's are."""
    g = leaf.grad
    if g is None:
        return None
    if g._base is not None:
        g._sync()
    return g._value if type(g._value) is Sym else False


class _Template:
    """What the tape recorded for one loop graph's backward: its eqns and keys, the Python-number slots
    it added, and the leaves' new grads as (leaf position, var, shape, dtype) in the order the tape made
    them (the order the step's outputs are numbered in, part of the executable's key)."""

    __slots__ = ("eqns", "keys", "prod", "nvars", "scalars", "slots", "grads")

    def append_to(self, cap, leaves) -> None:
        cap.eqns.extend(self.eqns)
        cap.keys.extend(self.keys)
        cap.prod.update(self.prod)   # positions: the template's site fixes the eqns recorded before it
        cap.nvars = self.nvars
        cap.scalars.extend(self.scalars)
        cap.slot_of.update(self.slots)
        for k, var, shape, dtype in self.grads:
            leaves[k]._grad = _make(Sym(shape, dtype, var))


TEMPLATES_PER_SITE = 4   # kept signatures per (vars, eqns, nodes) count of a compiled step
SITES = 64               # kept sites per compiled step (a varying length makes a site per length)


class _Mark:
    """The state of a capture before the tape runs, to keep what the tape records as a :class:`_Template`."""

    __slots__ = ("cap", "counts", "born")

    def __init__(self, cap) -> None:
        self.cap = cap
        self.counts = self._counts()
        self.born = len(cap.born)

    def _counts(self) -> tuple:
        c = self.cap
        return (len(c.eqns), c.nvars, len(c.scalars), len(c.inputs), len(c.adopted), len(c.gens), c.breaks)

    def keep(self, store, where: tuple, sig: tuple, leaves: list) -> None:
        cap, (e0, _, s0, *rest) = self.cap, self.counts
        now = self._counts()
        if now[3:] != tuple(rest):   # the tape read new arrays or keys, or ran a graph break: not replayable
            return
        grads = []
        for k, leaf in enumerate(leaves):
            v = _grad_sym(leaf)
            if v is False:
                return
            if v is not None and v.idx >= self.counts[1]:   # a grad this backward made
                grads.append((k, v.idx, v.shape, v.dtype))
        first = {}   # var -> when the first tensor still holding it was made
        for i, r in enumerate(cap.born[self.born:]):
            t = r()
            if t is not None and type(t._value) is Sym:
                first.setdefault(t._value.idx, i)
        grads.sort(key=lambda g: first.get(g[1], -1))
        t = _Template()
        t.eqns, t.keys = cap.eqns[e0:], cap.keys[e0:]
        t.prod = {v: p for v, p in cap.prod.items() if p >= e0}
        t.nvars = cap.nvars
        t.scalars = cap.scalars[s0:]
        t.slots = tuple(cap.slot_of.items())[s0:]
        t.grads = tuple(grads)
        kept = store.get(where)
        if kept is None:
            kept = store[where] = []
            if len(store) > SITES:
                store.popitem(last=False)
        kept.insert(0, (sig, t))
        del kept[TEMPLATES_PER_SITE:]
