"""Replay for ``dynajax.compile(replay=True)``: calls that skip the step's Python.

Every compiled call normally runs the step's Python once more to record it
(capture), because only the recording says which graph this call takes. On an
accelerator that recording is most of a small step's time: on an H200 a
784-512-512-10 MLP's Adam step took 1.44 ms compiled against 0.37 ms for the
same step hand-written in ``jax.jit``, with 0.65 ms of it capture.

A step whose graph depends only on its arguments and on the state tensors it
reads can skip that. A call's *guard* is its arguments' tree, their tensors'
shapes, dtypes and ``requires_grad``, their Python values, grad mode, and the
``training`` flag of every module the step called. Once two recordings in a row
for one guard chose the same executable, found their inputs in the same tensors
(``compile.speculate.sources``; a grad as its parameter's ``.grad``), passed the same
Python numbers to ops (the optimizer's aside: those are read again from its param
groups on every call, so a learning-rate schedule keeps working) and made the same
arrays (zeros for an initial state, passed again as they are), later calls with
that guard run the executable directly on the arrays those tensors hold now,
write the results back, and return fresh tensors in the recorded structure. A
change of which tensors hold the state or require grad (``_epoch``: a reassigned
parameter, a frozen layer, a loaded optimizer state) sends the next call to be
recorded again.

The contract, as for CUDA-graph replay in PyTorch: Python the step runs is not
run again -- a branch on a flag that flips after the two recordings, a print, a
counter no op reads, a ``scheduler.step()`` inside the step. Every
``check_every``-th call of a guard is recorded as usual; if its graph differs
from the replayed one a RuntimeWarning says why (the replayed calls since the
last check ran the old graph), and replay goes on with the new graph once two
recordings agree again.
"""
from __future__ import annotations

import collections
import warnings
import weakref
from sys import getrefcount

import jax

from .. import _deferred, _dtype, _epoch
from .._tensor import Tensor, _make
from ..autograd import grad_mode
from .guards import PyGuard, Watch
from .speculate import gather, recompute, same_scalars, sources, tensor_leaves
from ..lower import _tree_flatten
from ..ops.index import check_on_host

CHECK_EVERY = 100   # replay=True: every 100th call of a guard is recorded (about 1% of a capture per call)
_BACKOFF = 256      # guarded mode: an impure step is watched again at most this many recorded calls apart
MISS = object()     # a replay that could not run (some input is gone): the call is recorded instead


class _Entry:
    """One guard's replay: the executable, its device, where its inputs come from and its results go, the
    result's structure."""

    __slots__ = ("exe", "device", "src", "scalars", "recipes", "tree", "leaves", "writes", "args", "grads", "keys",
                 "calls", "key", "modules", "flags", "epoch", "donate", "kept", "checks", "py", "avals", "exact",
                 "host", "host_ok", "numbers", "via", "refs")


class Replayer:
    """The replay state of one compiled function: per guard, the last recorded key and a replayable entry.

    ``guarded`` (``compile``'s default mode): an entry is made only from a recording whose Python was watched
    and found pure (``compile.guards``), and a call replays only while that recording's roots read as they
    did; the other calls are recorded. A step found impure is watched again after 1, 2, 4, ... up to
    ``_BACKOFF`` recorded calls (watching costs a recording several times its time)."""

    def __init__(self, check_every: int, cache_size: int, guarded: bool = False) -> None:
        self.check_every = check_every
        self.cache_size = cache_size
        self.guarded = guarded
        self.entries: collections.OrderedDict = collections.OrderedDict()   # guard -> _Entry | key recorded last
        self.checking = False      # this call is a periodic check of a replayed entry
        self.skip = 0              # guarded: recorded calls left before the step is watched again
        self.backoff = 1
        self.last_reason = None    # guarded: why the last watched recording cannot be replayed (None: it can)

    @staticmethod
    def guard(args, kwargs):
        """What a call must share with a recorded one to replay it; None: never replayed (an unhashable
        argument, a view among the tensors)."""
        leaves, tree = _tree_flatten((args, kwargs))
        st = grad_mode.state   # (an autocast region around the call changes the graph: its casts)
        g = [tree, st.enabled, frozenset(st.amp_modes.items()) if st.casts is not None else None,
             _dtype.get_default_dtype()]
        for a in leaves:
            if isinstance(a, Tensor):
                if a._base is not None:
                    return None
                v = a._v
                g.append((tuple(v.shape), v.dtype, a._rg))
            else:
                g.append((type(a), a))
        g = tuple(g)
        try:
            hash(g)
        except TypeError:
            return None
        return g

    def due(self, guard):
        """The entry to replay this call with, or None: record it (no entry yet, or a check is due)."""
        if guard is None:
            return None
        self.checking = False
        e = self.entries.get(guard)
        if type(e) is not _Entry or e.epoch != _epoch.COUNT[0] or _flags(e.modules) != e.flags:
            return None   # state moved to other tensors, or model.eval(), since: recorded again
        if e.py is not None and e.py.changed() is not None:
            return None   # a Python value the step reads changed: recorded again
        e.calls += 1
        if e.calls >= self.check_every:
            e.calls = 0
            self.checking = True
            return None
        self.entries.move_to_end(guard)
        return e

    def watch(self, fn, args, kwargs, guard):
        """The Watch to record this call under (guarded mode), or None: not watched this time."""
        if not self.guarded or guard is None:
            return None
        if self.skip > 0:
            self.skip -= 1
            return None
        return Watch(fn, args, kwargs)

    def _judge(self, watch, cap):
        """Guarded mode: the PyGuard of a watched recording, or None (not replayable; the watch backs off)."""
        if watch is None:
            return None
        py = watch.guard() if not cap.breaks else "the step reads a value (a graph break)"
        if type(py) is PyGuard:
            self.backoff, self.last_reason = 1, None
            return py
        self.last_reason = py
        self.skip, self.backoff = self.backoff, min(2 * self.backoff, _BACKOFF)
        return None

    def note(self, guard, plan, cap, exe, args, kwargs, result, watch=None):
        """After a recorded call: keep (or make) the guard's entry once its key repeats. Returns what changed
        where this call, recorded while an entry was being replayed, found another graph (the key replayed)
        or other Python numbers (a description), else None."""
        if guard is None:
            return None
        py = self._judge(watch, cap) if self.guarded else None
        if self.guarded and py is None:   # not replayable (impure, or not watched): recorded every call
            self.entries.pop(guard, None)
            return None
        prev = self.entries.get(guard)
        src = None if cap.breaks else _sources(cap, args, kwargs)
        if type(prev) is _Entry:
            if prev.key == plan.key and src is not None and _same(prev.src, src):
                moved = _numbers_moved(prev.scalars, cap.scalars, cap.scalar_src, cap)
                if moved is None:
                    prev.epoch = _epoch.COUNT[0]
                    prev.py = py
                    return None
                # the same graph on other Python numbers: replayed again once two recordings agree
                self._put(guard, (plan.key, src, list(cap.scalars)))
                return moved if (self.checking or not self.guarded) else None
            # another graph, or the same one reading other tensors (a parameter or optimizer state replaced
            # since): replayed again once two recordings agree
            self._put(guard, (plan.key, src, list(cap.scalars)))
            # a module's train/eval switch and a change of the state's tensors or their requires_grad
            # (``_epoch``) are seen, and may change the graph; anything else is not
            changed = (prev.key != plan.key and _flags(prev.modules) == prev.flags
                       and prev.epoch == _epoch.COUNT[0] and (self.checking or not self.guarded))
            return prev.key if changed else None
        if (prev is not None and src is not None and prev[1] is not None and prev[0] == plan.key
                and _same(prev[1], src) and _same_numbers(prev[2], cap.scalars, cap.scalar_src)):
            e = _entry(plan, cap, exe, src, result, args, kwargs)
            if e is not None:
                e.py = py
                self._put(guard, e)
                return None
        self._put(guard, (plan.key, src, list(cap.scalars)))
        return None

    def _put(self, guard, value) -> None:
        self.entries[guard] = value
        self.entries.move_to_end(guard)
        if len(self.entries) > self.cache_size:
            self.entries.popitem(last=False)

    def keep(self, live) -> None:
        """Drop the entries whose executable is no longer among ``live`` (the cache evicted it)."""
        ids = {id(x) for x in live}
        for g in [g for g, e in self.entries.items() if type(e) is _Entry and id(e.exe) not in ids]:
            del self.entries[g]


def _sources(cap, args, kwargs):
    """Where a replay finds each input (``compile.speculate.sources``), a grad read as the ``.grad`` of its
    parameter (a step that accumulates grads makes a new grad tensor each call); None: some input has none."""
    src = sources(cap, args, kwargs, constants=True)
    if src is None:
        return None
    param_of = {id(g): t for t, _, g, _ in cap.adopted if g is not None}
    for k, (kind, ref) in enumerate(src):
        if kind == "t":
            t = param_of.get(id(ref()))
            if t is not None:
                src[k] = ("grad", weakref.ref(t))
    return src


def _same(a, b) -> bool:
    """Two recordings found their inputs in the same places: the same argument positions, the same tensors
    and generators. A step that reads a tensor it made on the call before (a hidden state it stored) does
    not, and is not replayed: where its next input will be is known only by running it."""
    if len(a) != len(b):
        return False
    for (ka, ra), (kb, rb) in zip(a, b):
        if ka != kb:
            return False
        if ka == "f":   # recipes making each call's own array (a padded call's masks): equal ones make the same
            if ra != rb:
                return False
            continue
        if ka == "a":
            if ra != rb:
                return False
        elif ka == "c":   # arrays the step made: replayed as they are, if both recordings made the same
            if ra is not rb and (ra.shape != rb.shape or ra.dtype != rb.dtype or not bool((ra == rb).all())):
                return False
        elif ra() is None or ra() is not rb():
            return False
    return True


def _same_numbers(a: list, b: list, recipes) -> bool:
    """Two recordings passed the same Python numbers to ops, but for those read again on every replay (an
    optimizer's, ``recipes``): a number the step computes anew each call (a counter, a schedule of its
    own) would be frozen by a replay, so such a step is not replayed."""
    if len(a) != len(b):
        return False
    recipes = recipes or {}
    return all(same_scalars([x], [y]) for i, (x, y) in enumerate(zip(a, b)) if i not in recipes)


def _numbers_moved(a: list, b: list, recipes, cap):
    """None where two recordings of one graph passed the same Python numbers to ops (those an optimizer's
    recipes read again aside), else which number changed, named by the first op taking it."""
    if _same_numbers(a, b, recipes):
        return None
    if len(a) != len(b):
        return f"the step passed {len(b)} Python numbers to ops instead of {len(a)}"
    slot = next(i for i, (x, y) in enumerate(zip(a, b)) if i not in (recipes or {}) and not same_scalars([x], [y]))
    ref = -slot - 1
    op = next((k[0] for k in cap.keys if ref in k[2]), None)
    name = getattr(op, "name", None) or getattr(op, "__name__", None) or "an op"
    return f"a Python number passed to {name} changed: {a[slot]!r} -> {b[slot]!r}"


def _entry(plan, cap, exe, src, result, args, kwargs):
    """A replayable entry of a recorded call, or None where a returned tensor is not among its outputs or
    an array the step made is donated (it is passed again on every replay)."""
    if any(src[i][0] == "c" for i in plan.donate):
        return None
    opos = dict(zip(plan.outs, range(len(plan.outs))))
    ipos = dict(zip(plan.in_vars, range(len(plan.in_vars))))
    var_of = {id(obj): var for obj, var, kind in plan.targets if kind == "t"}
    arg_pos = {id(t): i for i, t in enumerate(tensor_leaves(args, kwargs))}
    leaves, tree = _tree_flatten(result)
    spec, returned = [], set()
    for leaf in leaves:
        if isinstance(leaf, Tensor) and id(leaf) in arg_pos:   # an argument: the call's own
            spec.append(("a", arg_pos[id(leaf)]))
            continue
        if not isinstance(leaf, Tensor) or id(leaf) not in cap.born_ids:
            spec.append(("c", leaf))   # a Python value, or a tensor from before the step: returned as itself
            continue
        i = opos.get(var_of.get(id(leaf)))
        if i is None:
            return None
        spec.append(("o", i))
        returned.add(id(leaf))
        base = leaf._base   # a view the step made of a tensor it made (``out[0]``, ``loss.detach()``): that
        if base is not None and id(base) in cap.born_ids:   # tensor lives on only through the recording's result
            returned.add(id(base))
    grad_of = {id(t.grad): t for t, _, _, _ in cap.adopted if t.grad is not None and id(t.grad) in cap.born_ids}
    writes = []   # (how, object | argument position, True: an output | False: an input, position)
    for obj, var, kind in plan.targets:
        param = grad_of.get(id(obj))
        if id(obj) in returned and param is None:   # eager returns a new tensor each call: so does a replay
            continue
        where = (True, opos[var]) if var in opos else (False, ipos[var])
        if not where[0]:   # only read: it holds the array the replay read from it (an argument: no new version)
            kind, ref = src[where[1]]
            if (kind in ("t", "g") and ref() is obj) or (kind == "a" and ref == arg_pos.get(id(obj))):
                continue
        if kind == "g":
            writes.append(("key", obj) + where)
        elif param is not None:   # a .grad the step made: a new tensor each call, as eager's backward makes
            writes.append(("grad", param) + where)
        elif id(obj) in arg_pos:   # an argument written in place: the replayed call's own argument
            writes.append(("arg", arg_pos[id(obj)]) + where)
        else:   # a tensor from before the step, or one the step made and stored (updated in place)
            writes.append(("value", obj) + where)
    e = _Entry()
    e.exe, e.device, e.numbers, e.src, e.key = exe, plan.device, plan.numbers, src, plan.key   # (not the plan: its targets are
    # the recording's tensors, its arguments among them)
    e.scalars, e.recipes = list(cap.scalars), cap.scalar_src
    e.tree, e.leaves, e.calls = tree, spec, 0
    e.writes = [(obj, out, i) for how, obj, out, i in writes if how == "value"]
    e.args = [(k, out, i) for how, k, out, i in writes if how == "arg"]
    e.grads = [(obj, out, i) for how, obj, out, i in writes if how == "grad"]
    e.keys = [(obj, out, i) for how, obj, out, i in writes if how == "key"]
    e.donate = plan.donate
    e.checks = cap.check_report   # (``compile.checks``: its report is noted after each replay)
    # index arguments the recording checked on the host (``ops.index.check_on_host``), checked again on each
    # replayed call's own arrays; the array last found good is skipped (not a donated one: kept alive, it
    # would be copied before each call)
    if any(var not in ipos for var, _ in cap.host_checks):
        return None
    e.host = tuple((ipos[var], check) for var, check in cap.host_checks)
    e.host_ok = [None] * len(e.host)
    # tensors an op read through another holding the same array (``Capture.read_through``): each replayed call
    # checks they still do, and a donated array they hold is not copied for them (``split``)
    via = []
    for t, through in cap.read_via:
        k = next((k for k, (kind, ref) in enumerate(src) if kind == "t" and ref() is through), None)
        if k is None:
            return None
        via.append((t, k))
    e.via = tuple(via)
    e.refs = tuple(4 + sum(k == i for _, k in via) for i in plan.donate)
    donated = set(plan.donate)
    e.kept = tuple(i for i in range(len(src)) if i not in donated)
    e.modules = list(cap.modules.values())
    e.flags = _flags(e.modules)
    e.epoch = _epoch.COUNT[0]
    e.py = None
    e.avals = plan.key[0]
    e.exact = tuple(getattr(a, "aval", None) for a in cap.inputs)   # (JAX keeps one aval object per type)
    return e


def _flags(modules) -> list:
    return [m.training for m in modules]


def write_back(e: _Entry, vals: list, outs, args, kwargs) -> dict:
    """Give the step's state its new arrays: tensors from before the step, stored ones and the call's arguments
    in place (a new version: their views follow), generators their keys, each parameter whose ``.grad`` the
    step made a new grad tensor. Returns those grads by output position: a grad the step also returns is that
    same tensor (``result``), as eager's is."""
    before = [(obj, obj._grad) for obj, _, _ in e.grads] if e.checks is not None else None
    for obj, out, i in e.writes:
        _write(obj, outs[i] if out else vals[i])
    if e.args:
        leaves = tensor_leaves(args, kwargs)
        for k, out, i in e.args:
            _write(leaves[k], outs[i] if out else vals[i])
    made = {}
    for obj, out, i in e.grads:
        obj._grad = made[i] = _make(outs[i] if out else vals[i])
    for obj, out, i in e.keys:
        obj._key = outs[i] if out else vals[i]
    if before is not None:
        e.checks.note(before)
    return made


def _write(t: Tensor, arr) -> None:
    """An in-place write of ``arr`` into tensor ``t`` (detached, as a compiled step's results come back)."""
    t._v = arr
    if t._base is None:
        t._vc[0] += 1
    if t.grad_fn is not None:
        t.grad_fn = None
        t._rg = False


def split(e: _Entry, vals: list, copy) -> tuple:
    """The executable's donated and kept arguments. A donated array held by more than its source tensor
    (or generator) and ``vals`` -- shared with a deepcopy, say -- is passed as ``copy(array)``: donating
    it would delete it under that holder."""
    donated = []
    for i, refs in zip(e.donate, e.refs):
        a = vals[i]
        # references: the slot in vals, the source's attribute, ``a``, getrefcount's argument (and the tensors
        # read through the source, ``_Entry.via``)
        if getrefcount(a) > refs:
            a = vals[i] = copy(a)
        donated.append(a)
    return donated, [vals[i] for i in e.kept]


def inputs(e: _Entry, args, kwargs):
    """The arrays and numbers a replayed call runs the executable on, or None where some source is gone."""
    if e.checks is None and _deferred.PENDING:   # a step without index checks runs on no bad step's results
        _deferred.surface()
    vals = gather(e.src, args, kwargs)
    if vals is None:
        return None
    for v, exact, (shape, dtype) in zip(vals, e.exact, e.avals):   # a state tensor given another shape or
        if getattr(v, "aval", None) is not exact and (v.shape != shape or v.dtype != dtype):   # dtype: recorded
            return None
    for t, k in e.via:   # (one changed on its own since: its op reads it as itself again, recorded)
        if t._v is not vals[k]:
            return None
    for j, (i, check) in enumerate(e.host):   # (a bad value raises the op's error: nothing has run yet)
        v = vals[i]
        if v is not e.host_ok[j]:
            if not check_on_host(v, check):
                return None   # (not in host memory: recorded instead, its check goes on the device)
            if i not in e.donate:
                e.host_ok[j] = v
    scalars = recompute(e.scalars, e.recipes)
    if scalars is None:
        return None
    return vals, scalars


def result(e: _Entry, outs, args, kwargs, made: dict):
    """The replayed call's return value: the recorded structure, fresh tensors holding its outputs (``made``:
    those already made, by output position: the new grads), the call's own arguments where the recording
    returned its arguments."""
    leaves = None
    out = []
    for k, x in e.leaves:
        if k == "o":
            t = made.get(x)
            out.append(_make(outs[x]) if t is None else t)
        elif k == "a":
            if leaves is None:
                leaves = tensor_leaves(args, kwargs)
            out.append(leaves[x])
        else:
            out.append(x)
    return jax.tree_util.tree_unflatten(e.tree, out)


def warn_changed(name: str, reason: str, every: int, guarded: bool = False) -> None:
    if guarded:   # (the default mode's periodic check found what its guards did not see: compile.guards)
        warnings.warn(f"dynajax.compile: {name} recorded a different step than the one its guards let run without "
                      f"its Python ({reason}); up to {every - 1} calls since the last check ran the old one. The "
                      "step reads Python state the guards do not watch (see dynajax.compile.guards); it is "
                      "recorded again from now on.", RuntimeWarning, stacklevel=5)
        return
    warnings.warn(f"dynajax.compile(replay=True): {name} recorded a different step than the one it replays "
                  f"({reason}); up to {every - 1} calls since the last check replayed the old one; it is recorded "
                  "again until two recordings agree. A step whose graph or numbers depend on Python state (a "
                  "branch on a Python value, a counter) must not be replayed: compile it without replay=True.",
                  RuntimeWarning, stacklevel=5)
