"""Index bounds inside compiled steps, checked on the device and reported late (``check_indices=True``).

Eagerly, an op reads its index values on the host before its kernel runs and raises PyTorch's error
(``ops.index.check_bounds``). Inside a compiled step, an argument's values in host memory are read so too,
at each call, recorded or replayed (``Capture.note_host_check``, ``compile.replay.inputs``). Other values
are computed on the device (or would need a transfer), and reading them would make capture wait for the
executable. So each other indexing op of a recording (getitem/setitem with
index tensors, ``index_*``, ``gather``/``scatter*``, ``take``, ``take_along_dim``, ``embedding``, the class
targets of ``nll_loss``/``cross_entropy``) records a check instead: ``[1, bad value]`` where some index is
out of range, else ``[0, ...]``. At the end of the recording (:func:`finish`) they are combined into

- a **report** ``[k, bad value]``: the first failing check ``k`` (1-based; 0: none), an output the host
  reads later (``dynajax._deferred``): at the next host read of any tensor (``item``, ``numpy``,
  ``print``), or at a compiled call once ``_deferred.READ_EVERY`` (16) reports are pending and computed,
  or once they keep ``_deferred.HOLD_BYTES`` of replaced grads alive (that call waits for no step), where
  it raises the op's own eager error (type and message) naming the op and the user's line;
- a **poison** flag per device, a state tensor every checked step reads and writes: set once a check has
  failed, and kept set until the error is raised.

A step whose own checks fail or that sees the poison set changes nothing: every tensor that existed before
the step gets ``where(ok, new value, old value)`` (parameters, optimizer state, buffers, grads updated in
place, the random generator's key), and when the error surfaces each parameter's ``.grad`` is put back to
the tensor it held before the bad call. So when the error is raised, every tensor holds what it held before
the bad step, whichever later compiled steps ran meanwhile (those changed nothing either), as a step that
raises at once would have left them. Not undone: what the host did meanwhile -- the bad step's returned
values (read them and the error is raised), ops run eagerly on them, Python state the step created (the
first ``optimizer.step()``'s state entries). A compiled step without checks of its own (none of these ops,
or ``check_indices=False``) reads any pending report first, waiting for it.

Cost: one min/max reduction per index tensor, one select per state tensor (fused into the update that
computes it), a scalar in and two small arrays out (``benchmarks/index_checks.py``).
"""
from __future__ import annotations

import linecache
import math
import os
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from .. import _deferred
from .._tensor import Tensor, _make
from ..ops.dispatch import Sym, aval_of

_POISON: dict = {}   # jax device -> the Tensor holding that device's poison flag (int32, 0-d)


def _poison(device):
    t = _POISON.get(device)
    if t is None:
        t = _POISON[device] = _make(jax.device_put(np.zeros((), np.int32), device))
    return t


def _reset() -> None:
    """Clear every poison flag (after its error was raised)."""
    for device, t in _POISON.items():
        if type(t._value) is not Sym:
            t._value = jax.device_put(np.zeros((), np.int32), device)


def _report(prior, *flags):
    """The recording's checks combined: (poison after the step, report ``[k, bad value, poison after]``)."""
    dt = jnp.result_type(*flags)
    if len(flags) == 1:   # (one check, a loss's targets say: its flag ``[0 or 1, bad value]`` is the report)
        f = flags[0]
        bad = f[0] > 0
        report = jnp.where(bad, f, jnp.zeros(2, dt))
    else:
        f = jnp.stack([x.astype(dt) for x in flags])
        hit = f[:, 0] > 0
        k = jnp.argmax(hit)
        bad = hit.any()
        report = jnp.where(bad, jnp.stack([(k + 1).astype(dt), f[k, 1]]), jnp.zeros(2, dt))
    after = prior | bad.astype(prior.dtype)
    return after, jnp.concatenate([report, after.astype(dt)[None]])


def _gate(poison, *pairs):
    """New values where the poison is clear, the old ones where it is set (``pairs``: news, then olds)."""
    n = len(pairs) // 2
    ok = poison == 0
    return tuple(jnp.where(ok, a, b) for a, b in zip(pairs[:n], pairs[n:]))


# gated tensors holding fewer elements than this keep selects rather than a cond: XLA:CPU's conditional
# costs ~50-90 us a call whatever its size, the selects cost with the state's size. Measured, Adam MLP steps,
# selects made where each value is made (``_select_where_made``) against the cond, side by side:
# 16-16-16-4 218 / 281 us, 128-128-128-10 328 / 343 us, 784-512-512-10 3.52 / 3.40 ms (~2M gated elements);
# with the selects at the end of the step the last two were 348 / 306 us and 4.3 / 3.3 ms
COND_FROM = 1 << 20


def guard(eqns: list, outs: tuple, gated: int = COND_FROM) -> list:
    """At compile time, the recorded ``eqns`` (rolled) with the updates of the gated tensors made conditional.
    ``gated``: the elements of the gated tensors; below ``COND_FROM`` each gets a select where it is made
    (:func:`_select_where_made`). From there on, the eqns that compute their new values (and nothing else
    reads) run last, inside one ``lax.cond`` on the poison after the step, whose false branch gives those
    tensors their old values instead: the selects cost with the state's size, the cond ~50-90 us a call on a
    CPU. Only the updates go into the cond, not the forward and backward: XLA's CPU backend runs a
    convolution inside a conditional several times slower."""
    ri = next((k for k in range(len(eqns) - 1, -1, -1) if eqns[k][0] is _report), None)
    gi = next((k for k in range(len(eqns) - 1, -1, -1) if eqns[k][0] is _gate), None)
    if ri is None or gi is None or gi < ri:
        return eqns
    prod, users = {}, {}
    for k, e in enumerate(eqns):
        for v in e[3]:
            prod[v] = k
        for r in e[2]:
            if type(r) is int and r >= 0:
                users.setdefault(r, set()).add(k)
    need, stack = set(), [ri]
    while stack:   # the report's eqns stay outside
        k = stack.pop()
        if k in need:
            continue
        need.add(k)
        stack.extend(prod[r] for r in eqns[k][2] if type(r) is int and r >= 0 and r in prod)
    if gated < COND_FROM:
        return _select_where_made(eqns, ri, gi, prod, need, set(outs))
    gate = eqns[gi]
    n = (len(gate[2]) - 1) // 2
    news, olds = list(gate[2][1:1 + n]), list(gate[2][1 + n:])
    # the eqns making the new values, that no eqn outside them (but the gate) reads
    body = {prod[v] for v in news if v in prod} - need
    changed = True
    while changed:
        changed = False
        for k in list(body):
            if any(u != gi and u not in body for v in eqns[k][3] for u in users.get(v, ())):
                body.discard(k)
                changed = True
    if not body:
        return eqns
    made = {v for k in body for v in eqns[k][3]}
    inner = [eqns[k] for k in sorted(body)]
    results = [v for v in outs if v in made and v not in gate[3]]
    free, seen = [], set()
    for r in [r for e in inner for r in e[2]] + news + olds:
        if type(r) is int and r not in made and r not in seen:
            seen.add(r)
            free.append(r)
    params = {"body": tuple(inner), "free": tuple(free), "news": tuple(news), "olds": tuple(olds),
              "results": tuple(results)}
    rest = [e for k, e in enumerate(eqns) if k not in body and k != gi]
    return rest + [(_guarded, params, (gate[2][0],) + tuple(free), tuple(gate[3]) + tuple(results))]


def _select_where_made(eqns: list, ri: int, gi: int, prod: dict, need: set, outs: set) -> list:
    """``guard`` below ``COND_FROM``: each gated value selected inside the eqn that makes it, right where it is
    made (:func:`_gated_eqn`), the report moved up to right after its checks; the values that cannot be
    (an eqn the report itself needs, a value the step also returns as it is) keep the gate at the end.

    Selected at the end, a fused optimizer update's new moment had two readers in XLA's graph, its own select
    and the parameter's update inside the same op: XLA fused the moment's arithmetic into both, so the old
    moment buffer, donated and written in place by one, was still read by the other, and XLA copied every
    such buffer first (12 copies of a 3-layer Adam MLP's 25 state arrays). Selected where it is made, the
    parameter's update reads the selected moment, which is materialized once, in place. Where the checks
    failed every update in the op reads old values, and every result of the step is discarded anyway."""
    gate, rep = eqns[gi], eqns[ri]
    n = (len(gate[2]) - 1) // 2
    after, news, olds = gate[2][0], gate[2][1:1 + n], gate[2][1 + n:]
    at = max((prod[r] for r in rep[2] if type(r) is int and r >= 0 and r in prod), default=-1)
    by_eqn: dict = {}   # eqn index -> [(output position, old, gated var)]
    rest = []           # (new, old, gated var) left to the gate at the end
    for new, old, out in zip(news, olds, gate[3]):
        k = prod.get(new)
        if k is None or k <= at or k in need or new in outs:
            rest.append((new, old, out))
            continue
        by_eqn.setdefault(k, []).append((eqns[k][3].index(new), old, out))
    if not by_eqn:
        return eqns
    renamed = {eqns[k][3][i]: out for k, picks in by_eqn.items() for i, _, out in picks}
    result = [rep] if at < 0 else []
    for k, e in enumerate(eqns):
        if k == ri or k == gi:
            continue
        fn, params, refs, ovars = e
        if any(type(r) is int and r in renamed for r in refs):
            refs = tuple(renamed.get(r, r) if type(r) is int else r for r in refs)
        picks = by_eqn.get(k)
        if picks is not None:
            ovars = list(ovars)
            for i, _, out in picks:
                ovars[i] = out
            params = {"fn": fn, "params": params, "nref": len(refs), "which": tuple(i for i, _, _ in picks)}
            fn, refs, ovars = _gated_eqn, refs + (after,) + tuple(old for _, old, _ in picks), tuple(ovars)
        result.append((fn, params, refs, ovars))
        if k == at:
            result.append(rep)
    if rest:
        result.append((_gate, {}, (after,) + tuple(renamed.get(x, x) for x, _, _ in rest) +
                       tuple(o for _, o, _ in rest), tuple(v for _, _, v in rest)))
    return result


def _gated_eqn(*vals, fn, params, nref, which):
    """``fn(*vals[:nref], **params)`` with its outputs at positions ``which`` selected, where they are made
    inside ``fn``, between the new value (the poison ``vals[nref]`` clear) and the old one (the values after
    it): ``fn`` is traced to a jaxpr and evaluated with each such output replaced by its select as soon as
    it is computed, so ``fn``'s own later uses of it read the selected value."""
    from jax.extend.core import Literal
    args, ok, olds = list(vals[:nref]), vals[nref] == 0, vals[nref + 1:]
    dyn = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]

    def call(*arrays):
        full = list(args)
        for i, a in zip(dyn, arrays):
            full[i] = a
        return fn(*full, **params)
    closed, shape = jax.make_jaxpr(call, return_shape=True)(*[args[i] for i in dyn])
    jaxpr, single = closed.jaxpr, not isinstance(shape, (tuple, list))
    old_of, late = {}, []   # late: outputs selected at the end (a literal; a var another output selects too)
    for i, old in zip(which, olds):
        v = jaxpr.outvars[i]
        if isinstance(v, Literal) or v in old_of:
            late.append((i, old))
        else:
            old_of[v] = old
    env = dict(zip(jaxpr.constvars, closed.consts))

    def put(v, x):
        old = old_of.pop(v, None)
        env[v] = x if old is None else jnp.where(ok, x, old)
    for v, a in zip(jaxpr.invars, [args[i] for i in dyn]):
        put(v, a)
    for v in jaxpr.constvars:
        if v in old_of:
            put(v, env[v])
    read = lambda v: v.val if isinstance(v, Literal) else env[v]   # noqa: E731
    for eqn in jaxpr.eqns:
        bound = eqn.primitive.get_bind_params(eqn.params)   # (params; older JAX: (subfuns, params))
        subfuns, bound = bound if isinstance(bound, tuple) else ((), bound)
        with eqn.ctx.manager:
            res = eqn.primitive.bind(*subfuns, *[read(v) for v in eqn.invars], **bound)
        for v, x in zip(eqn.outvars, res if eqn.primitive.multiple_results else (res,)):
            put(v, x)
    out = [read(v) for v in jaxpr.outvars]
    for i, old in late:   # (where the checks passed, a value already selected is the new one)
        out[i] = jnp.where(ok, out[i], old)
    return out[0] if single else tuple(out)


def _guarded(poison, *vals, body, free, news, olds, results):
    """``guard``'s cond: the step's eqns ``body`` where the poison is clear, the old values where it is set."""
    from .capture import bind

    def run(vals):
        env = dict(zip(free, vals))
        for fn, params, refs, ovars in body:
            bind(env, ovars, fn(*[env[r] if type(r) is int else r[1] for r in refs], **params))
        return tuple(env[v] for v in news) + tuple(env[v] for v in results)

    def keep(vals):
        env = dict(zip(free, vals))
        shapes = jax.eval_shape(run, vals)[len(news):]
        return tuple(env[v] for v in olds) + tuple(jnp.zeros(s.shape, s.dtype) for s in shapes)
    return jax.lax.cond(poison == 0, run, keep, vals)


class Report:
    """A recording's checks, and where its report and the grads it replaced are found after the call."""

    __slots__ = ("tensor", "checks", "step", "chain", "held", "__weakref__")

    def __init__(self, tensor, checks: list, step: str, poison) -> None:
        self.tensor = tensor                      # the tensor the report is written into
        self.checks = [c[1:] for c in checks]     # (fail, op name, (file, line))
        self.step = step
        self.chain = id(poison)                   # the device's poison flag, which the report's last entry copies
        self.held = 0                             # the bytes of the grads a call replaces (counted once found)

    def note(self, grads: list) -> None:
        """After the call: its report pending; ``grads``: (parameter, the .grad it held before the call)."""
        def undo():
            for t, g in grads:
                t._grad = g
        if not self.held:   # (the same parameters' grads each call: counted once)
            self.held = sum(getattr(g._value, "nbytes", 0) for _, g in grads if g is not None)
        _deferred.note(self.tensor._v, self.fail, undo, self.chain, self.held)

    def fail(self, k: int, bad: int) -> None:
        _reset()
        fail, name, where = self.checks[k - 1]
        try:
            fail(bad)
        except Exception as exc:
            line = ""
            if where is not None:
                src = linecache.getline(where[0], where[1]).strip()
                line = f" at {os.path.basename(where[0])}:{where[1]}" + (f" ({src})" if src else "")
            raise type(exc)(f"{exc} [dynajax.compile: checked on the device in op '{name}'{line} of step "
                            f"'{self.step}'; that step and any compiled step after it changed nothing]") from None
        raise IndexError(f"index out of range in op '{name}' of step '{self.step}'")   # (fail always raises)


def finish(cap) -> None:
    """At the end of a recording, before it is planned: combine its checks into the report and the poison,
    and make every update of a tensor from before the step conditional on them. A recording without
    checks first reads the reports pending from earlier steps (waiting for them)."""
    cap.check_report = None
    if not cap.checks:
        if _deferred.PENDING:
            _deferred.surface()
        return
    poison = _poison(cap.device())
    prior = cap.var_of(poison)
    _, (after, rep) = cap._record(_report, _report, {}, [prior] + [c[0] for c in cap.checks])
    # tensors from before the step that it rebound, and what each held before (first record of each)
    seen, news, olds, owners = set(), [], [], []
    pairs, twins = {}, []   # (new var, old var) -> its position in news; tensors sharing one (a shared step)
    grads = [(t, g) for t, g in cap.grads_before.values() if t._grad is not g]
    born = cap.born_ids
    through = {id(t): via for t, via in cap.read_via}   # (read through another: that one's old value is theirs)
    given = {}   # id -> the Sym an adopted tensor was given (its old value)
    for t, arr, grad, sym in cap.adopted:
        if id(t) in seen:
            continue
        seen.add(id(t))
        if sym is not None:
            given[id(t)] = sym
        elif id(t) in through:
            sym = given.get(id(through[id(t)]))
        # (a tensor the step made from concrete values and then updated -- the optimizer's first state -- is
        # gated too: a later call finds it made before the step, and its graph must be this one)
        if t._grad is not grad and id(t) not in cap.grads_before and id(t) not in born:
            grads.append((t, grad))
        v = t._value
        if type(v) is not Sym or t is poison:
            continue
        if sym is None:
            if type(arr) is Sym:
                continue
            pos = cap.in_of.get(id(arr))
            old = cap.in_vars[pos] if pos is not None and cap.inputs[pos] is arr else cap._input(arr, t, aval_of(arr))
            av = aval_of(arr)
            sym = Sym(av[0], av[1], old, av)
        if v.idx == sym.idx or v.aval != sym.aval:   # (read only; or reshaped by ``.data =``: not gated)
            continue
        k = pairs.setdefault((v.idx, sym.idx), len(news))
        if k < len(news):   # (the same new and old value as another tensor: the same gated value)
            twins.append((t, k))
            continue
        news.append(v)
        olds.append(sym)
        owners.append(t)
    for g, key, sym in cap.gens:
        k = g._key
        if sym is not None and type(k) is Sym and k.idx != sym.idx and k.aval == sym.aval:
            news.append(k)
            olds.append(sym)
            owners.append(g)
    cap.check_gated = sum(math.prod(v.shape) for v in news)
    if news:
        _, gated = cap._record(_gate, _gate, {}, [after] + news + olds)
        for obj, s in zip(owners, gated):
            if isinstance(obj, Tensor):
                obj._value = s
            else:
                obj._key = s
        for t, k in twins:
            t._value = gated[k]
    poison._value = after
    tensor = _make(rep)
    cap.born.append(weakref.ref(tensor))
    cap.born_ids.add(id(tensor))
    cap.check_report = Report(tensor, cap.checks, getattr(cap.owner.fn, "__name__", "step"), poison)
    cap.check_grads = grads


def note(cap) -> None:
    """After a checked call's results are written back: its report pending."""
    cap.check_report.note(cap.check_grads)
