"""``backward()`` while ``dynajax.compile`` records a step: one ``jax.vjp`` of the recorded forward.

Running the native tape on recorded values records every VJP rule's ops (about
as many as the forward), each costing a Python dispatch per call of the step.
Instead, when the graph behind ``loss.backward()`` holds only registry ops
recorded in this step, with no hooks, ``retain_grad``, custom Functions,
``create_graph`` or anomaly mode, the backward is recorded as one op: ``jax.vjp``
of the forward eqns (engine 2), with the tape's detach points (inputs the tape
does not differentiate) as ``stop_gradient``. Anything else runs the native
tape, as eagerly. ``verify=True`` runs the step eagerly with the tape and
compares with the executable built this way, so a wrong VJP rule shows there.
"""
from __future__ import annotations

import jax

from .autograd import engine
from .autograd.function import _FunctionOp


def vjp_grads(*vals, plan):
    """Leaf gradients. ``vals``: one value per (leaf, var) pair, the external values the forward reads
    (constants, Python-number slots), the root cotangents. ``plan``: the static description."""
    sub, pairs, ext, roots, nleaves = plan
    n1, n2 = len(pairs), len(pairs) + len(ext)
    ext_env = dict(zip(ext, vals[n1:n2]))

    def forward(*xs):
        env = dict(ext_env)
        env.update(zip((v for _, v in pairs), xs))
        for fn, params, refs, ovars, stops in sub:
            args = []
            for r, stop in zip(refs, stops):
                if type(r) is not int:
                    args.append(r[1])
                else:
                    x = env[r]
                    args.append(jax.lax.stop_gradient(x) if stop else x)
            res = fn(*args, **dict(params))
            if len(ovars) == 1 and not isinstance(res, (tuple, list)):
                env[ovars[0]] = res
            else:
                env.update(zip(ovars, res))
        return tuple(env[v] for v in roots)

    _, pull = jax.vjp(forward, *vals[:n1])
    grads = pull(tuple(vals[n2:]))
    out = [None] * nleaves
    for (k, _), g in zip(pairs, grads):   # a leaf read at several versions: its grads add up
        out[k] = g if out[k] is None else out[k] + g
    return tuple(out)


ENABLED = True   # False: always record the tape's VJP ops (for comparisons)


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
                if self.run(outputs, grad_outputs, retain_graph):
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
        """Record the backward as one vjp op and accumulate ``.grad``; False: the tape must run instead."""
        from ._capture import Sym
        from ._tensor import _make
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
        sub, pairs, leaves, leaf_pos, produced = [], [], [], {}, set()
        for node in reversed(nodes):   # creation order
            hit = self.node_eqn.get(id(node))
            if (hit is None or hit[0] is not node or node.freed or node.pre_hooks
                    or isinstance(node.op, _FunctionOp)):
                return False
            fn, params, refs, ovars = cap.eqns[hit[1]]
            stops = []
            for j, r in enumerate(refs):
                e = node.edges[j] if j < len(node.edges) else None
                diff = e is not None and type(r) is int and r >= 0
                stops.append(not diff and type(r) is int)
                if not diff:
                    continue
                src, idx = e
                if idx < 0:   # a leaf: its value at this read is an input of the vjp
                    if src._hooks:
                        return False
                    k = leaf_pos.get(id(src))
                    if k is None:
                        k = leaf_pos[id(src)] = len(leaves)
                        leaves.append(src)
                    if (k, r) not in pairs:
                        pairs.append((k, r))
                else:
                    h = self.node_eqn.get(id(src))
                    if h is None or cap.eqns[h[1]][3][idx] != r:
                        return False
            for s in node.saved:   # the tape would raise on a value changed in place after it was saved
                if isinstance(s, tuple) and s[0]._vc[0] != s[1]:
                    return False
            sub.append((fn, tuple(params.items()), refs, ovars, tuple(stops)))
            produced.update(ovars)
        if not leaves:
            return False
        leaf_vars = {r for _, r in pairs}
        ext = []
        for _, _, refs, _, _ in sub:
            for r in refs:
                if type(r) is int and r not in produced and r not in leaf_vars and r not in ext:
                    ext.append(r)
        cot_refs = []
        for g in grad_outputs:
            s = cap.var_of(g)
            cot_refs.append(s.idx)
        plan = (tuple(sub), tuple(pairs), tuple(ext), tuple(root_vars), len(leaves))
        refs = tuple(r for _, r in pairs) + tuple(ext) + tuple(cot_refs)
        n = cap.nvars
        cap.nvars = n + len(leaves)
        ovars = tuple(range(n, n + len(leaves)))
        params = {"plan": plan}
        cap.prod[n] = len(cap.eqns)
        cap.eqns.append((vjp_grads, params, refs, ovars))
        cap.keys.append((vjp_grads, (("plan", plan),), refs))
        if not retain_graph:
            for node in nodes:
                engine.free_node(node)
        for k, leaf in enumerate(leaves):
            v = leaf._value
            g = _make(Sym(tuple(v.shape), v.dtype, n + k))
            leaf.grad = g if leaf.grad is None else leaf.grad + g
        return True
