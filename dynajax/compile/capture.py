"""Capture for ``dynajax.compile``: run a step's Python once more, recording ops instead of computing them.

While a :class:`Capture` is active, every op applied on its thread goes
through :meth:`Capture.hook` (``registry._hooks``). Tensors then hold a
:class:`Sym` -- shape and dtype of a value the compiled step will compute --
instead of an array; shapes come from the op's ``impl`` through a memoised
``jax.eval_shape``. The native tape keeps working on Syms, so ``backward()``
and the optimizer are recorded like any other op.

A tensor that existed before the step is *adopted* the first time an op reads
it: its array becomes an input of the executable and its value a Sym until
the step ends. Afterwards every live tensor still holding a Sym gets the
array the executable computed (or its old array back, if it was only read).

Reading a value (``.item()``, ``bool(t)``, ``np.asarray``, ``print``) runs the
graph recorded so far (a "graph break") and capture continues.

``dual=True`` (``verify``) computes every op eagerly as well, keeping the
arrays in the tensors, and maps arrays to graph variables by identity.
"""
from __future__ import annotations

import functools
import math
import threading
import weakref

import jax
import numpy as np

from .. import _tensor, random
from .._device import default_jax_device, number_layout
from .._tensor import Tensor, _make
from ..autograd import grad_mode
from ..ops import registry, views
from . import cache as _disk, guards as _guards, padding as _padding
from ..ops.dispatch import (Sym, _active, _array_type, _state, aval_of, current, is_array, is_recorded,  # noqa: F401
                           recorded_args, scalar_recipes, value_aval)

_SHAPES: dict = {}   # (fn, static params, input avals) -> (single output?, ((shape, dtype), ...))
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _backward_router():
    """``compile.backward.BackwardByVJP`` (which imports this module), imported once rather than by an
    import statement in every capture (entering the MLP's capture measured 9 -> 6 us hot, ~90 -> ~67 us
    right after its executable)."""
    from .backward import BackwardByVJP
    return BackwardByVJP


def shape_key(fn, params: dict, pkey: tuple) -> tuple:
    """(params, their key) under which the shapes of ``fn``'s results are memoised: an impl's
    ``shape_params`` makes equal the params its result's shape does not depend on (the position ``t`` of
    ``x[:, t]``), so that a loop over positions infers the shape once."""
    shaped = getattr(fn, "shape_params", None)
    if shaped is None:
        return params, pkey
    sparams = shaped(params)
    return sparams, (pkey if sparams is params else tuple(sparams.items()))


def known_shapes(fn, params: dict, pkey: tuple, avals: tuple):
    """The memoised (single?, ((shape, dtype), ...)) of ``fn`` on inputs ``avals``, or None."""
    return _SHAPES.get((fn, shape_key(fn, params, pkey)[1], avals))


def shapes_of(fn, params: dict, pkey: tuple, avals: tuple, args: list):
    """Output (single?, ((shape, dtype), ...)) of ``fn(*args, **params)``, memoised on the avals.

    Syms and float scalars are abstract (as in the executable); literals are passed as they are."""
    k = (fn, pkey, avals)
    r = _SHAPES.get(k)
    if r is None:
        r = _SHAPES[k] = _infer(fn, params, pkey, avals, args)
    return r


def _infer(fn, params: dict, pkey: tuple, avals: tuple, args: list):
    r, key = _disk.known_shape(fn, pkey, avals)   # (stored by an earlier process in the compile cache folder)
    if r is None:
        dyn = [i for i, a in enumerate(args) if isinstance(a, (Sym, float, complex, np.generic))]

        def call(*dargs):
            full = list(args)
            for i, d in zip(dyn, dargs):
                full[i] = d
            return fn(*full, **params)
        structs = [jax.ShapeDtypeStruct(args[i].shape, args[i].dtype) if isinstance(args[i], Sym) else args[i]
                   for i in dyn]
        out = jax.eval_shape(call, *structs)
        single = not isinstance(out, (tuple, list))
        leaves = [out] if single else list(out)
        r = (single, tuple((tuple(o.shape), np.dtype(o.dtype)) for o in leaves))
        _disk.note_shape(key, r)
    return r


class Capture:
    """One recording of a step: the graph, its inputs, and the tensors/generators it touched."""

    def __init__(self, owner, dual: bool = False) -> None:
        self.owner = owner              # the Compiled function (for the graph-break cache and counters)
        self.dual = dual
        self.thread = threading.get_ident()
        self.busy = False
        self.nvars = 0
        self.inputs: list = []          # executable inputs (arrays), in order
        self.in_vars: list = []         # var index of each input
        self.in_avals: list = []        # (shape, dtype) of each input
        self.in_of: dict = {}           # id(array) -> position in inputs
        self.in_src: list = []          # where each input came from: a Tensor's array, a Generator's key, or None
        self.eqns: list = []            # (fn, params, refs, out var indices)
        self.keys: list = []            # structural key of each eqn
        self.scalars: list = []         # Python scalars passed to ops (executable inputs too)
        self.slot_of: dict = {}
        self.scalar_src: dict = {}      # slot -> recipe() recomputing its number where it came from (speculation)
        self.recipes = None             # while one op records: argument position -> recipe (``scalar_recipes``)
        self.adopted: list = []         # (tensor, old array, old grad, Sym given | None)
        self.gens: list = []            # (generator, old key, Sym given | None)
        self.born: list = []            # weakrefs to tensors created while capturing
        self.born_ids: set = set()      # and their ids (a tensor alive before the step has none of them)
        self.modules: dict = {}         # id -> each nn.Module called (``compile.replay`` guards their training flags)
        self._module_call = None        # nn.Module.__call__ while it is wrapped to fill ``modules`` (replay only)
        self.watch = None               # the default mode's ``compile.guards.Watch`` of this recording, if any
        self.on_module = None           # called with each module at its first call (the watch's)
        self.grads: list = []           # (tensor, its .grad) before the step set it, for a tensor not yet adopted
        self.by_array: dict = {}        # dual: id(array) -> (array, var)
        self.known: dict = {}           # var -> concrete array (graph breaks)
        self.prod: dict = {}            # first output var of an eqn -> its position in eqns
        self.breaks = 0
        self.padding = None             # ``compile.padding.Padding`` of a padded call
        self.checks: list = []          # device checks of index values (``note_check``; ``compile.checks``)
        self.host_checks: list = []     # (input var, check) of index arguments checked on the host instead
        self.read_via: list = []        # (tensor, tensor) pairs: an op read the first's value through the second
        self.check_report = None        # and their report (``compile.checks.finish``)
        self.check_gated = 0            # and the elements of the tensors gated on them
        self.grads_before: dict = {}    # id -> (tensor, the .grad it had) for grads reset to None (``dispatch.grad_reset``)
        self._saved = None

    def placement(self):
        """The single-device sharding the step's executable takes its inputs on: that of its first committed
        input (so far, while recording), else JAX's default device's."""
        for a in self.inputs:
            if getattr(a, "committed", False):
                sh = a.sharding
                if isinstance(sh, jax.sharding.SingleDeviceSharding):
                    return sh
                break
        return jax.sharding.SingleDeviceSharding(default_jax_device())

    def device(self):
        """The jax.Device the step runs on (``placement``): where a value it computes lives."""
        return next(iter(self.placement().device_set))

    # ------------------------------------------------------------ entering / leaving
    def __enter__(self) -> "Capture":
        if getattr(_state, "cap", None) is not None:
            raise RuntimeError("dynajax.compile: a compiled step called another compiled step; "
                               "compile the outer one only")
        _LOCK.acquire()  # the patches below are process-wide: one capture at a time
        _state.cap = self
        born = self.born
        orig_init = _tensor._init

        ref, note, note_id = weakref.ref, born.append, self.born_ids.add

        def _init(t, value, requires_grad=False, grad_fn=None, idx=0, vc=None):
            note(ref(t))
            note_id(id(t))
            return orig_init(t, value, requires_grad, grad_fn, idx, vc)
        self._saved = (orig_init, random._sample, random.Generator.next_key, views._run_chain,
                       views.view_scatter.impl, views.assign, views.refresh)
        _tensor._init = _init
        if getattr(self.owner, "_replayer", None) is not None:   # replay guards the modules' training flags
            from ..nn.modules.module import Module
            orig_call, called, first = Module.__call__, self.modules, self.on_module

            def _call(m, *args, **kwargs):
                if id(m) not in called:
                    called[id(m)] = m
                    if first is not None:
                        first(m)
                return orig_call(m, *args, **kwargs)
            self._module_call = orig_call
            Module.__call__ = _call
        random._sample = self._wrap(random._sample)
        random.Generator.next_key = lambda gen: self._next_key(gen)
        views._run_chain = self._wrap(views._run_chain, static=("chain",))
        views.view_scatter.impl = self._wrap(views.view_scatter.impl)
        views.assign = self._tracking(views.assign, True)
        views.refresh = self._tracking(views.refresh, False)
        registry._hooks.insert(0, self.hook)
        registry.record_creation = True
        if self.dual:
            from .vjpcheck import CustomVJPCheck
            self._vjp_check = CustomVJPCheck(self)
            self._vjp_check.install()
        else:
            self.bwd = _backward_router()(self)
            self.bwd.install()
        self.padding = _padding.start(self)
        return self

    def __exit__(self, *exc) -> None:
        if self.padding is not None:
            self.padding.stop()
        if self.dual:
            self._vjp_check.uninstall()
        else:
            self.bwd.uninstall()
            # the router and this capture refer to each other, and its node table holds the step's
            # Nodes (with their saved tensors): dropped here, all of it dies by reference counting
            # when the call returns instead of waiting for (and costing) a cyclic-GC collection
            self.bwd = None
        registry._hooks.remove(self.hook)
        registry.record_creation = False
        (_tensor._init, random._sample, random.Generator.next_key, views._run_chain,
         views.view_scatter.impl, views.assign, views.refresh) = self._saved
        if self._module_call is not None:
            from ..nn.modules.module import Module
            Module.__call__, self._module_call = self._module_call, None
        _state.cap = None
        _LOCK.release()

    # ------------------------------------------------------------ variables
    def _new_var(self) -> int:
        self.nvars += 1
        return self.nvars - 1

    def _input(self, arr, src=None, aval=None) -> int:
        """Var of array ``arr`` (the array of Tensor ``src`` or the key of Generator ``src``; None: neither)
        as a new executable input.

        Two tensors sharing one array are two inputs: whether arrays are shared changes from step to
        step (an output written to two tensors), and the graph should not (dual mode maps arrays to
        vars by identity, so there one array is one input)."""
        pos = self.in_of.get(id(arr)) if self.dual else None
        if pos is None:
            pos = len(self.inputs)
            self.in_of.setdefault(id(arr), pos)
            self.inputs.append(arr)
            self.in_src.append(src)
            self.in_vars.append(self.nvars)
            self.nvars += 1
            self.in_avals.append(aval_of(arr) if aval is None else aval)
            if self.dual:
                self.by_array[id(arr)] = (arr, self.in_vars[pos])
        return self.in_vars[pos]

    def _adopt(self, t: Tensor) -> Sym:
        """Make the array of tensor ``t`` (created before the step) an input; ``t`` holds its Sym meanwhile."""
        arr = t._value
        av = aval_of(arr)
        if self.dual:
            var = self._input(arr, t, av)
        else:   # ``_input`` inlined: every parameter and state tensor of a step comes through here
            var = self.nvars
            self.nvars = var + 1
            self.in_of.setdefault(id(arr), len(self.inputs))
            self.inputs.append(arr)
            self.in_src.append(t)
            self.in_vars.append(var)
            self.in_avals.append(av)
        s = Sym(av[0], av[1], var, av)
        self.adopted.append((t, arr, t.grad, s))
        t._value = s
        return s

    def var_of(self, t: Tensor):
        """Graph variable of a tensor argument (adopting it if new)."""
        if t._base is not None:
            t._sync()
        v = t._value
        if type(v) is Sym:
            return v
        if self.dual:
            hit = self.by_array.get(id(v))
            av = aval_of(v)
            if hit is None:
                self.adopted.append((t, v, t.grad, None))
                return Sym(av[0], av[1], self._input(v, t, av), av)
            return Sym(av[0], av[1], hit[1], av)
        return self._adopt(t)

    def _ref(self, a, op, pos: int):
        """Reference to a non-tensor argument, and its part of the shape-memo key.

        Floats (and numpy scalars) are executable inputs -- a learning-rate schedule or a bias
        correction must not recompile -- deduplicated into slots (negative refs) by value within one
        role, the ``op`` and argument position ``pos``: the learning rate of every parameter's update shares
        a slot, while values of different roles that happen to be equal at some step (NAdam's
        ``1 - beta2`` and its first bias correction ``1 - beta2 ** 1``) stay apart, so which slots
        are shared, part of the graph's key, does not change from step to step. Ints, bools and other
        values are baked in as literals ``("L", value, type)``: they are structural (``ignore_index``,
        ``+ 1``), and Python ints as jit arguments cost ~1 ms of dispatch."""
        tp = type(a)
        if tp is float or tp is complex or isinstance(a, np.generic):
            k = (tp, a, op, pos) if a else (tp, repr(a), op, pos)  # keep -0.0 apart from 0.0
            slot = self.slot_of.get(k)
            if slot is None:
                slot = self.slot_of[k] = len(self.scalars)
                self.scalars.append(a)
                if self.recipes is not None and pos in self.recipes:
                    self.scalar_src[slot] = self.recipes[pos]
            return -slot - 1, tp
        lit = ("L", a, tp)
        return lit, lit

    # ------------------------------------------------------------ recording
    def _arg(self, a, key_fn, pos: int) -> tuple:
        """(ref, aval) of argument ``a`` of an op being recorded: a Sym's var, a raw array as an input,
        a Python value as a scalar slot or literal (:meth:`_ref`)."""
        tp = type(a)
        if tp is Sym:
            return a.idx, a.aval
        if tp is np.ndarray or is_array(a):  # a raw array (``view_scatter.impl(base._value, ..)``)
            hit = self.by_array.get(id(a)) if self.dual else None
            av = aval_of(a)
            return (hit[1] if hit is not None else self._input(a, None, av)), av
        return self._ref(a, key_fn, pos)

    def _record(self, fn, key_fn, params: dict, args) -> tuple:
        """Record ``fn(*args, **params)`` (args: Syms, arrays known in dual mode, Python values);
        returns (single output?, out Syms)."""
        refs, avals = [], []
        for i, a in enumerate(args):
            r, av = self._arg(a, key_fn, i)
            refs.append(r)
            avals.append(av)
        return self._emit(fn, key_fn, params, refs, avals, args)

    def _emit(self, fn, key_fn, params: dict, refs: list, avals: list, args) -> tuple:
        """Append the eqn of ``fn`` on ``refs`` (of avals ``avals``; ``args``: the values they came from,
        for the shape memo's first call); returns (single output?, out Syms)."""
        pkey = tuple(params.items()) if params else ()
        avals = tuple(avals)
        sparams, skey = shape_key(fn, params, pkey)
        hit = _SHAPES.get((fn, skey, avals))
        if hit is None:
            evals = [Sym(av[0], av[1], r) if type(r) is int and r >= 0 else a for a, r, av in zip(args, refs, avals)]
            hit = shapes_of(fn, sparams, skey, avals, evals)
        n = self.nvars
        outs = hit[1]
        self.nvars = n + len(outs)
        syms = [Sym(sd[0], sd[1], n + i, sd) for i, sd in enumerate(outs)]
        refs = tuple(refs)
        self.prod[n] = len(self.eqns)
        self.eqns.append((fn, params, refs, tuple(range(n, n + len(outs)))))
        self.keys.append((key_fn, pkey, refs))
        return hit[0], syms

    def _record_op(self, op, args, params: dict) -> tuple:
        """Record registry op ``op`` on ``args``, adopting tensors created before the step (``op.check`` and
        ``op.error`` raise PyTorch's errors on bad input); returns (whether a tensor argument requires grad,
        the output Syms)."""
        refs, avals, rg = [], [], False
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                if a._base is not None:
                    a._sync()
                v = a._value
                if type(v) is not Sym:
                    v = self._adopt(a)
                refs.append(v.idx)
                avals.append(v.aval)
                if a._rg:
                    rg = True
            else:
                r, av = self._arg(a, op, i)
                refs.append(r)
                avals.append(av)
        if op.check is not None:
            op.check(*args, **params)
        try:
            _, syms = self._emit(op.impl, op, params, refs, avals, args)
        except Exception as exc:
            if op.error is not None:
                op.error(exc, *args, **params)
            raise
        return rg, syms

    def hook(self, op, args, params):
        """``registry._hooks`` entry: record ``op`` (and, in dual mode, run it too)."""
        if self.busy or threading.get_ident() != self.thread:
            return NotImplemented
        if self.watch is None:
            return self._hook(op, args, params)
        return _guards.unwatched(self.watch, self._hook, op, args, params)   # (recording runs dynajax's code only)

    def _hook(self, op, args, params):
        if self.padding is not None:
            r = self.padding.hook(op, args, params)
            if r is not NotImplemented:
                return r
        if self.dual:
            return self._hook_dual(op, args, params)
        rg, syms = self._record_op(op, args, params)
        if rg and op.rule is not None and grad_mode.state.enabled:
            res = registry._record(op, args, params, syms[0] if op.nout == 1 else tuple(syms))
            self.bwd.note(res)
            return res
        return _make(syms[0]) if op.nout == 1 else tuple([_make(s) for s in syms])

    def note_check(self, fn, params: dict, t: Tensor, fail, name: str, where) -> None:
        """Record ``fn(value of t, **params)``, a device check of an op's index values (``ops.index.check_bounds``)
        giving ``[flag, bad value]``; ``fail(bad value)`` raises the op's error when the step's report says so
        (``compile.checks``), ``name`` and ``where`` (file, line) say where."""
        _, syms = self._record(fn, fn, params, [self.var_of(t)])
        self.checks.append((syms[0], fail, name, where))

    def input_array(self, v: Sym):
        """The array the step was given for ``v`` where it is an input of the recording, else None."""
        try:
            return self.inputs[self.in_vars.index(v.idx)]
        except ValueError:
            return None

    def note_host_check(self, t: Tensor, check: tuple) -> None:
        """Keep ``check`` (``ops.index.check_on_host``'s) of argument ``t``'s index values, which this call has
        just checked on the host, for the replays of this recording to run on their own arrays (``t`` holds an
        array: an input of the recording)."""
        self.host_checks.append((self.var_of(t).idx, check))

    def note_grad(self, t: Tensor) -> None:
        """``t.grad`` is about to be set (``zero_grad``, ``t.grad = ...``): remember the old one if ``t`` was not
        adopted yet (an adopted tensor's record has it), so a step that raises gives it back."""
        if type(t._value) is not Sym:
            self.grads.append((t, t._grad))

    def update_in_place(self, op, args, params: dict, written) -> bool:
        """Record ``op`` (a fused optimizer update, run under ``no_grad``) and write each output ``k`` straight
        into tensor ``written[k]``, as ``optimizer.set_`` of its result would (rebind, version bump), without a
        Tensor per output or a ``set_`` each. False, recording nothing, where that write could not be a
        plain rebind (a view among the arguments, grad mode on) or this capture is not the only hook. Called on
        the capture ``current()`` returns (this thread's, not verify's dual one)."""
        if self.busy or grad_mode.state.enabled or registry._hooks != [self.hook]:
            return False
        for a in args:
            if isinstance(a, Tensor) and a._base is not None:
                return False
        _, syms = self._record_op(op, args, params)
        note = self.adopted.append
        for t, s in zip(written, syms):
            for x in t if type(t) is tuple else (t,):   # (a tuple: each of its tensors gets this output)
                note((x, x._value, x.grad, None))
                x._value = s
                x._vc[0] += 1
        return True

    def read_through(self, tensors, via: Tensor) -> None:
        """An op reads the values of ``tensors`` through ``via``, which holds the same array (a fused update's
        shared step, ``optim._fused``): a replayed call checks that they still hold its array
        (``compile.replay``), and is recorded instead where one does not."""
        self.read_via.extend([(t, via) for t in tensors])

    def _hook_dual(self, op, args, params):
        ins = [self.var_of(a) if isinstance(a, Tensor) else a for a in args]
        self.busy = True
        try:
            res = registry.run(op, None, args, params)
        finally:
            self.busy = False
        _, syms = self._record(op.impl, op, params, ins)
        for o, s in zip(res if isinstance(res, tuple) else (res,), syms):
            self.by_array[id(o._value)] = (o._value, s.idx)
        return res

    def _tracking(self, fn, with_base: bool):
        """``fn(t, ...)`` that rebinds ``t`` (``assign``, ``refresh``): remember ``t`` (and its base) and
        their old arrays, so they get their new values after the step, or the old ones back on failure."""
        adopted = self.adopted

        def tracked(t, *args):
            adopted.append((t, t._value, t.grad, None))
            if with_base and t._base is not None:
                b = t._base
                adopted.append((b, b._value, b.grad, None))
            return fn(t, *args)
        return tracked

    def _wrap(self, fn, static=()):
        """``fn`` recorded when an argument is a recorded value; called as is otherwise."""
        cap = self

        def wrapped(*args, **kwargs):
            if threading.get_ident() != cap.thread or not any(
                    isinstance(a, Sym) or (cap.dual and id(a) in cap.by_array) for a in args):
                return fn(*args, **kwargs)
            params = dict(kwargs)
            n = len(args) - len(static)
            call_args = args[:n]
            params.update(zip(static, args[n:]))  # trailing positional static args (``_run_chain(x, chain)``)
            if cap.padding is not None and not cap.padding.busy:
                cap.padding.wrapped(fn, call_args, params)
            if cap.dual:
                res = fn(*args, **kwargs)
                _, syms = cap._record(fn, fn, params, call_args)
                for o, s in zip((res,) if not isinstance(res, tuple) else res, syms):
                    cap.by_array[id(o)] = (o, s.idx)
                return res
            single, syms = cap._record(fn, fn, params, call_args)
            return syms[0] if single else syms
        return wrapped

    def _next_key(self, gen):
        """Generator.next_key while capturing: the key stream becomes a graph input/output."""
        k = gen._key
        if threading.get_ident() != self.thread:
            return _orig_next_key(gen)
        if not any(g is gen for g, _, _ in self.gens):
            if self.dual:
                self._input(k, gen)
                self.gens.append((gen, k, None))
            else:
                s = Sym(tuple(k.shape), np.dtype(k.dtype), self._input(k, gen))
                self.gens.append((gen, k, s))
                gen._key = k = s
        if self.dual:
            new, sub = random._split(k)
            _, syms = self._record(random._split, random._split, {}, [Sym(tuple(k.shape), np.dtype(k.dtype),
                                                                         self.by_array[id(k)][1])])
            self.by_array[id(new)] = (new, syms[0].idx)
            self.by_array[id(sub)] = (sub, syms[1].idx)
            gen._key = new
            return sub
        _, (new, sub) = self._record(random._split, random._split, {}, [k])
        gen._key = new
        return sub

    # ------------------------------------------------------------ graph breaks
    def materialize(self, s: Sym):
        """The array of ``s``, computed from the inputs (a counted graph break); capture goes on.

        Only the ops ``s`` depends on run: a short chain (Adam's ``step.item()``) op by op through
        the eager jitted impls, a longer one as one executable cached by its structure."""
        got = self.known.get(s.idx)
        if got is not None:
            return got
        if self.padding is not None:
            self.padding.read(s)
        self.breaks += 1
        # the eqns run on arrays (or jit's tracers), their ops not recorded: a recorded backward's impl applies
        # dynajax ops (the tape's formulation), which would otherwise land in this recording as Syms
        busy, self.busy = self.busy, True
        try:
            return self._compute(s)
        finally:
            self.busy = busy

    def _compute(self, s: Sym):
        chain = self._chain(s.idx)
        if len(chain) > 16:
            # the executable takes only the step's inputs: values earlier breaks computed are recomputed in it
            chain = self._chain(s.idx, skip_known=False)
            key = (tuple(self.in_avals), tuple(type(x) for x in self.scalars),
                   tuple(self.keys[k] for k in chain), tuple(self.eqns[k][2] for k in chain), (s.idx,))
            numbers = number_layout(self.scalars)   # (the key's number types: this executable's layout)
            exe = self.owner._prefix_executable(key, [self.eqns[k] for k in chain], self, numbers)
            # (numbers as device arrays, as a whole step's executable takes them; a mesh's layout: numpy arrays)
            dev = self.device() if getattr(self.owner, "layout", True) is None else None
            got = self.known[s.idx] = exe(self.inputs, numbers.pack(self.scalars, dev))[0]
            return got
        env = self.known
        inputs = dict(zip(self.in_vars, self.inputs))
        for k in chain:
            fn, params, refs, ovars = self.eqns[k]
            key_fn = self.keys[k][0]
            vals = [((env[r] if r in env else inputs[r]) if r >= 0 else self.scalars[-r - 1])
                    if type(r) is int else r[1] for r in refs]
            # not eager kernels: an eager op checks its values before its kernel runs, and these were recorded
            run = (key_fn.jitted(params, eager=False) if isinstance(key_fn, registry.Op)
                   else functools.partial(fn, **params))
            bind(env, ovars, run(*vals))
        return env[s.idx]

    def _chain(self, var: int, skip_known: bool = True) -> list:
        """Positions (in order) of the recorded eqns that ``var`` depends on, skipping known values
        unless ``skip_known`` is false."""
        need, chain, stack = set(), [], [var]
        in_vars = set(self.in_vars)
        known = self.known if skip_known else ()
        while stack:
            v = stack.pop()
            if v in known or v in in_vars:
                continue
            k = self._producer(v)
            if k in need:
                continue
            need.add(k)
            chain.append(k)
            stack.extend(r for r in self.eqns[k][2] if type(r) is int and r >= 0)
        chain.sort()
        return chain

    def _producer(self, var: int) -> int:
        k = self.prod.get(var)
        while k is None:  # a later output of a multi-output eqn
            var -= 1
            k = self.prod.get(var)
        return k

    def var_of_value(self, v):
        """Var of a tensor's current value after the step, or None for an array the graph does not know."""
        if type(v) is Sym:
            return v.idx
        if self.dual:
            hit = self.by_array.get(id(v))
            return hit[1] if hit is not None else None
        return None


_orig_next_key = random.Generator.next_key


def run_packed(eqns, in_vars, nvars: int, outs, numbers, inputs, packed):
    """``run_graph`` with the scalars as ``numbers`` (a ``_device.Numbers``) packed them, inside an executable."""
    return run_graph(eqns, in_vars, nvars, outs, inputs, numbers.unpack(packed))


def run_graph(eqns, in_vars, nvars: int, outs, inputs, scalars):
    """Evaluate recorded ``eqns`` on input arrays and scalars (traced under ``jax.jit``); returns ``outs``."""
    env = [None] * nvars
    for v, a in zip(in_vars, inputs):
        env[v] = a
    for fn, params, refs, ovars in eqns:
        vals = [(env[r] if r >= 0 else scalars[-r - 1]) if type(r) is int else r[1] for r in refs]
        bind(env, ovars, fn(*vals, **params))
    return [env[v] for v in outs]


def bind(env, ovars, res) -> None:
    """Store an eqn's result ``res`` (one value or a sequence) under its output vars ``ovars`` in ``env``."""
    if len(ovars) == 1 and not isinstance(res, (tuple, list)):
        env[ovars[0]] = res
    else:
        for v, x in zip(ovars, res):
            env[v] = x
