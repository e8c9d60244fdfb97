"""``dynajax.compile``: a whole define-by-run training step as one cached XLA executable.

Each call runs the Python step again in capture mode (see ``compile.capture``): ops
are recorded, not computed, so any Python control flow yields the graph this
call takes. The recording's structural key (ops, static params, input shapes
and dtypes, scalar types, which tensors the step rebinds) selects a cached
``jax.jit`` executable; its inputs are every array the step read (parameters,
buffers, optimizer state, grads, data, the RNG key) plus the Python numbers
passed to ops, its outputs every value a live tensor holds afterwards. The
tensors then get those arrays, exactly as if the step had run eagerly.

``backward()`` inside the step is recorded as one op (``compile.backward``):
its Python -- the engine's VJP rules over a tape rebuilt on the forward values
-- runs once, when the executable is traced, not on every call; where a rule
cannot run on traced values it is ``jax.vjp`` of the recorded forward. Where
the graph needs the native tape's semantics -- tensor hooks, ``retain_grad``,
custom ``autograd.Function`` backwards, ``create_graph``, anomaly mode -- the
tape runs during capture and its VJP ops are recorded one by one, so those
behave exactly as eagerly. XLA gets the same program either way.

``verify=True`` runs every call eagerly (native tape) while recording, and on a
new graph runs the executable on the pre-call inputs and compares every value
the step left in a live tensor; a mismatch raises naming the tensor and
restores the pre-call state. It catches what capture cannot see (writes that
bypass ops, impure impls). Verify records the backward with the tape, so the
executable it checks has the tape's VJP ops; both share those rules, so verify also pulls
the cotangents each custom ``autograd.Function`` backward receives back through
``jax.vjp`` of the ops its forward recorded (engine 2) and raises, naming the
Function, where the hand-written backward disagrees (``compile.vjpcheck``); registry
ops' rules are checked against ``jax.vjp`` by the op-table tests.

``speculate`` (``compile.speculate``): where the caller waits for every step, a call
whose key repeats can dispatch the last call's executable before recording,
on the arrays its input tensors hold at that moment, and keep the results if
the recording then selects that executable with exactly those inputs.
"""
from __future__ import annotations

import collections
import functools
import gc
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import bucketing as _bucketing, cache as _compile_cache, checks as _checks, replay as _replay, rolling as _rolling
from . import guards as _guards
from .. import _deferred
from .speculate import Speculator
from .._device import STEP_COMPILER_OPTIONS, number_layout
from .._dtype import x64 as _x64
from .capture import Capture, Sym, run_packed
from .._tensor import Tensor
from .._lru import lru_get, lru_put  # noqa: F401
from ..lower import _arg_names, _closure_names, _leaf_names, _tree_flatten

__all__ = ["compile", "Compiled", "CompileStats"]

_PY_LEAVES = (bool, int, float, complex, str, bytes, type(None))


@dataclass
class CompileStats:
    """Counters of one compiled function (``compiled.stats``)."""

    calls: int = 0
    cache_hits: int = 0
    compiles: int = 0
    graph_breaks: int = 0
    capture_time: float = 0.0     # seconds spent re-running the Python step in capture mode
    compile_time: float = 0.0     # seconds spent in jax.jit tracing + XLA compilation (or loading)
    cache_loads: int = 0          # executables loaded from the on-disk cache (set_compile_cache), not compiled
    recorded_ops: int = 0         # ops in the last recording
    rolled_loops: int = 0         # runs of identical segments compiled as one lax.scan (all compiles)
    compiled_ops: int = 0         # ops in the last compiled graph, after rolling
    compiled_outputs: int = 0     # outputs of the last compiled graph: the values the step left in live tensors
    bucket_hits: int = 0          # calls padded to a bucket (``dynamic=``) that reused an executable
    bucket_reuses: int = 0        # of those, calls run in a larger bucket than their own, which had none yet
    speculated: int = 0           # calls whose results came from the executable dispatched before capture
    speculation_misses: int = 0   # calls whose speculative run was dropped (another graph, inputs or numbers)
    replayed: int = 0             # calls run without the step's Python (``replay=True``)
    recompile_reasons: list = field(default_factory=list)
    dynamic_dims: list = field(default_factory=list)   # dims padded to buckets ("x dim 0"): dynamic= or automatic
    padding_stopped: str | None = None   # the op (and why) that made a padded step run at its true shapes


class _Plan:
    """What one recording computes and where its results go."""

    __slots__ = ("key", "eqns", "in_vars", "nvars", "outs", "targets", "donate", "device", "numbers")


class Compiled:
    """A step function compiled by :func:`compile`; call it like the original."""

    def __init__(self, fn: Callable, verify: bool, cache_size: int, recompile_limit: int, donate: bool,
                 mesh=None, data_axis: str = "data", param_sharding: str | None = None, roll: bool = True,
                 speculate: bool | None = None, replay: bool | int = False, check_indices: bool = True) -> None:
        self.fn = fn
        self._padder = None   # padded calls (``compile.bucketing.Padder``): dynamic=, or the automatic policy
        # index bounds checked on the device, reported at a later call or read (``compile.checks``); one device only
        self.check_indices = bool(check_indices) and mesh is None
        self.roll = roll
        self.last_loops: list = []   # the rolled loops of the last compile (``compile.rolling.Loop``)
        self.verify = verify
        self.cache_size = cache_size
        self.recompile_limit = recompile_limit
        self.donate = donate
        self.stats = CompileStats()
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._prefix: collections.OrderedDict = collections.OrderedDict()
        self._warned = False
        self._names: dict | None = None
        self.layout = _sharded_layout(mesh, data_axis, param_sharding, verify, cache_size)
        self._made: collections.OrderedDict = collections.OrderedDict()   # executable -> (traced fn, placement, secs)
        self.built_secs = None   # what the last compile took, or took the process that stored it (``_stored``)
        self.kept = False        # whether the last compile's executable is in the compile cache folder (``_stored``)
        self._bwd_templates: collections.OrderedDict = collections.OrderedDict()   # _capture_backward
        self._speculator = Speculator(False if (verify or self.layout is not None) else speculate, cache_size)
        if replay and (verify or self.layout is not None):
            raise ValueError("dynajax.compile: replay=True runs recorded graphs without their Python, so it cannot "
                             f"be combined with {'verify=True' if verify else 'mesh='}")
        if replay is True:
            replay = _replay.CHECK_EVERY
        if replay is not False and (type(replay) is not int or replay < 2):
            raise ValueError(f"dynajax.compile: replay must be True, False or the calls between two recorded "
                             f"checks (an int >= 2), got {replay!r}")
        if replay:
            self._replayer = _replay.Replayer(replay, cache_size)
        elif _guards.ENABLED and not verify and self.layout is None and speculate is not True:
            # (speculate=True asks for every call recorded, overlapped; padded calls replay too, their masks
            # made for each call's true sizes by ``compile.padding.SizeMask``)
            # the default mode: calls whose Python can only repeat the recording skip it (``compile.guards``)
            self._replayer = _replay.Replayer(_guards.GUARD_CHECK_EVERY, cache_size, guarded=True)
        else:
            self._replayer = None
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        # Python's cyclic GC paused for the call: capture allocates thousands of short-lived objects
        # (Syms, Tensors, Nodes, tuples), which trigger collections that traverse the whole heap (JAX's
        # included): measured on a 250-op step, capture took 3.6 ms median / 10 ms mean / 105 ms worst
        # with it, 2.2 / 2.3 / 3.7 ms without. They die by reference counting (a call leaves no cycles:
        # test_a_compiled_step_leaves_no_reference_cycles); a cycle a user's step makes is collected
        # once the GC runs again after the call.
        # one call at a time in the process, from start to write-back: tensors hold a recording's values until
        # its results are written back, and another thread's call may read the same tensors
        # and JAX's 64-bit types on for this thread (``_dtype.x64``), as for every eager op
        with _CALLS, _gc_paused(), _x64():
            pd = self._padder
            if pd is not None and pd.active(args, kwargs):
                return pd.call(self, args, kwargs)
            return self._call(args, kwargs)

    def _call(self, args, kwargs):
        if _deferred.PENDING:   # an earlier step's failed index check, raised here once read (every 16 calls)
            _deferred.settle()
        st = self.stats
        st.calls += 1
        rp = self._replayer
        guard = None
        if rp is not None:
            guard = rp.guard(args, kwargs)
            entry = rp.due(guard)
            if entry is not None:
                done = self._replay(entry, args, kwargs)
                if done is not _replay.MISS:
                    return done
        t0 = time.perf_counter()
        spec = self._speculator
        idle = spec.begin(t0)
        # only onto an idle device: behind a running step, this call's capture overlaps that step anyway
        ahead = spec.dispatch(args, kwargs, _split_donated) if spec.next is not None and idle else None
        t1 = time.perf_counter()
        cap = Capture(self, dual=self.verify)
        watch = rp.watch(self.fn, args, kwargs, guard) if rp is not None else None
        if watch is not None:   # (the default mode: what the step's Python reads and does, ``compile.guards``)
            cap.watch, cap.on_module = watch, watch.module
        try:
            with cap:
                if watch is None:
                    result = self.fn(*args, **kwargs)
                else:
                    with watch:
                        result = self.fn(*args, **kwargs)
            if cap.padding is not None:
                cap.padding.let_go()
            plan = self._plan(cap, result, args)
            if cap.padding is not None:   # (a padded value left alive stops padding: ``compile.padding``)
                cap.padding.finish(plan, result)
        except BaseException:
            st.graph_breaks += cap.breaks
            _restore(cap)
            raise
        st.graph_breaks += cap.breaks
        st.recorded_ops = len(cap.eqns)
        secs = time.perf_counter() - t1
        st.capture_time += secs
        exe = self._cache.get(plan.key)
        if ahead is not None:
            outs = spec.settle(ahead, exe, cap)
            ahead = None   # dropped: a miss may donate the arrays it read
            if outs is not None:
                st.speculated += 1
                st.cache_hits += 1
                self._cache.move_to_end(plan.key)
                _write_back(plan, cap, outs)
                self._plan_next(plan, cap, exe, args, kwargs, secs, idle, outs, True)
                self._note_replay(guard, plan, cap, exe, args, kwargs, result)
                return result
            st.speculation_misses += 1
        first = False
        if exe is not None:
            st.cache_hits += 1
            self._cache.move_to_end(plan.key)
            if self.verify:
                return result   # this graph was checked before; the step already ran eagerly
        else:
            compiled_before = st.compile_time
            try:
                exe = self._compile(plan, cap, args)
            except BaseException:
                _restore(cap)
                raise
            first = True
        if self.verify:
            self._check(plan, cap, exe)
            if first:
                _first_call_done(st)
            return result
        try:
            if self.layout is not None:   # inputs placed on the mesh; the executable for that layout
                exe = self.layout.prepare(exe, plan, cap, args, kwargs, self.donate)
            if plan.donate and self.donate:
                loads = _compile_cache.loads()
                _unshare(cap, plan.donate)
                if first:   # a copy kernel _unshare loaded from the disk cache is no executable of this step
                    st.cache_loads -= _compile_cache.loads() - loads
            outs = exe(*_split_donated(cap.inputs, plan.donate), plan.numbers.pack(cap.scalars, plan.device))
        except BaseException:
            _restore(cap)
            raise
        if first:
            _first_call_done(st)
            made = self._made.get(exe)
            if made is not None:
                self._made[exe] = made[:2] + (st.compile_time - compiled_before,)
        _write_back(plan, cap, outs)
        self._plan_next(plan, cap, exe, args, kwargs, secs, idle, outs, False)
        self._note_replay(guard, plan, cap, exe, args, kwargs, result)
        return result

    def _replay(self, e, args, kwargs):
        """Run a replay entry's executable without the step's Python (``compile.replay``): its result, or MISS where
        some input is gone (the call is then recorded)."""
        got = _replay.inputs(e, args, kwargs)
        if got is None:
            return _replay.MISS
        vals, scalars = got
        spec = self._speculator   # a prediction made before this call's writes would only miss, and its
        spec.next = spec.last_out = None   # readiness probe (an output array) would hold a donated array
        outs = e.exe(*_replay.split(e, vals, jnp.copy), e.numbers.pack(scalars, e.device))
        made = _replay.write_back(e, vals, outs, args, kwargs)
        st = self.stats
        st.cache_hits += 1
        st.replayed += 1
        return _replay.result(e, outs, args, kwargs, made)

    def _note_replay(self, guard, plan, cap, exe, args, kwargs, result) -> None:
        if self._replayer is None:
            return
        rp = self._replayer
        replayed = rp.note(guard, plan, cap, exe, args, kwargs, result, cap.watch)
        if replayed is not None:
            reason = replayed if isinstance(replayed, str) else self._explain(plan.key, cap, args, near=replayed)
            _replay.warn_changed(getattr(self.fn, "__name__", "the step"), reason, rp.check_every, rp.guarded)

    def _plan_next(self, plan, cap, exe, args, kwargs, secs, idle, outs, speculated) -> None:
        """Let the speculator decide whether the next call dispatches ``exe`` (or its twin) before recording."""
        made = self._made.get(exe) if self._speculator.mode is not False else None
        if made is not None:
            self._speculator.plan_next(plan, cap, exe, made[0], made[1], args, kwargs, secs, made[2], idle, outs,
                                       speculated)

    def _compile(self, plan: _Plan, cap: Capture, args):
        st = self.stats
        if self._cache:
            reason = self._explain(plan.key, cap, args)
            st.recompile_reasons.append(reason)
            if len(st.recompile_reasons) >= self.recompile_limit and not self._warned:
                self._warned = True
                warnings.warn(f"dynajax.compile: {getattr(self.fn, '__name__', 'step')} recompiled "
                              f"{len(st.recompile_reasons)} times; last reason: {reason}. Varying shapes or "
                              "Python-level graph changes each compile a new executable: declare a varying dim "
                              "with compile(..., dynamic={'x': {0: [16, 32, 64]}}) to pad it to a few bucket "
                              "sizes (loops over it are rolled into one scan), or keep branches on Python "
                              "values stable.", stacklevel=3)
        t0 = time.perf_counter()
        donate = plan.donate if (self.donate and not self.verify) else ()
        eqns, nvars, self.last_loops = plan.eqns, plan.nvars, []
        if self.roll:
            gates = cap.padding.gates() if cap.padding is not None else None
            eqns, nvars, self.last_loops = _rolling.roll(eqns, cap.keys, plan.in_vars, cap.in_avals, cap.scalars,
                                                         nvars, plan.outs, gates)
        if cap.check_report is not None:   # the step's work conditional on its index checks
            eqns = _checks.guard(eqns, plan.outs, cap.check_gated)
        st.rolled_loops += len(self.last_loops)
        st.compiled_ops = len(eqns)
        st.compiled_outputs = len(plan.outs)
        run = functools.partial(_run_split, eqns, plan.in_vars, nvars, plan.outs, donate, plan.numbers)
        # inputs placed on one device: jit keys its own cache on which arguments are committed, and the
        # step's state turns committed after the first call (its arrays are then outputs), which would
        # compile every executable twice
        placed = {} if self.layout is not None else {"in_shardings": cap.placement()}
        # rounding to float16/bfloat16 after every op, as eager mode and PyTorch do: XLA's default lets a
        # fusion keep float32 values between such ops, so a compiled step's numbers drifted from eager's
        exe = jax.jit(run, donate_argnums=(0,) if donate else (), compiler_options=STEP_COMPILER_OPTIONS,
                      **placed)
        # the first call traces and compiles (counted in compile_time), or ``_stored`` does it here
        st.compile_time -= t0
        st.cache_loads -= _compile_cache.loads()   # the first call compiles, or loads from the disk cache
        if self.layout is None and not self.verify:   # (kept in the compile cache folder: ``compile.cache``)
            exe = self._stored(exe, eqns, nvars, donate, plan, cap)
        lru_put(self._made, exe, (run, placed, None), self.cache_size)
        _compile_cache.save_shapes()   # (what this recording learnt of its ops' shapes, for later processes)
        st.compiles += 1
        if self._replayer is not None:   # keys being replayed are in use: evict others first
            for e in self._replayer.entries.values():
                if type(e) is _replay._Entry and e.key in self._cache:
                    self._cache.move_to_end(e.key)
        lru_put(self._cache, plan.key, exe, self.cache_size)
        if self._replayer is not None:
            self._replayer.keep(self._cache.values())
        return exe

    def _stored(self, exe, eqns, nvars, donate, plan: _Plan, cap: Capture):
        """``exe`` (the step's ``jax.jit``), or the executable an earlier process kept for this recording in the
        compile cache folder; the first process compiles it here, ahead of its first call, and keeps it
        (``compile.cache.executable_key``). Without the folder, or for a recording with an unnamed part: ``exe``."""
        avals = [(tuple(a.shape), a.dtype.name, bool(getattr(a, "weak_type", False))) for a in cap.inputs]
        key = _compile_cache.executable_key((eqns, tuple(plan.in_vars), nvars, tuple(plan.outs), tuple(donate),
                                             avals, [type(s) for s in cap.scalars], str(plan.device),
                                             sorted(STEP_COMPILER_OPTIONS.items())))
        if key is None:
            return exe
        loaded = _compile_cache.load_executable(key)
        if loaded is not None:
            exe, self.built_secs = loaded
            self.kept = True
            return exe
        # (the arguments the first call passes, as ``_call`` passes them: lowering reads only their types)
        lowered = exe.lower(*_split_donated(cap.inputs, plan.donate), plan.numbers.pack(cap.scalars, plan.device))
        compiled, secs, fresh, self.kept = _compile_cache.compile_and_keep(key, lowered)
        self.built_secs = secs if fresh else None   # (loaded from JAX's cache: priced as a load)
        return compiled

    def _prefix_executable(self, key, eqns: list, cap: Capture, numbers):
        """Executable computing one value of a partly recorded step (a graph break), cached by its key; it
        takes the step's numbers as ``numbers`` (a ``Numbers``) packs them."""
        return lru_get(self._prefix, key, self.cache_size,
                       lambda: jax.jit(functools.partial(run_packed, eqns, list(cap.in_vars), cap.nvars, key[-1],
                                                         numbers), compiler_options=STEP_COMPILER_OPTIONS))

    # ------------------------------------------------------------ planning
    def _plan(self, cap: Capture, result, args) -> _Plan:
        """Decide outputs (every live tensor holding a recorded value) and the structural key."""
        _check_result(result)
        _checks.finish(cap)
        targets: dict = {}   # id -> (tensor | generator, var, kind)
        outs: dict = {}      # var -> position in outputs
        input_vars = dict(zip(cap.in_vars, range(len(cap.in_vars))))
        var_of_value = cap.var_of_value if cap.dual else None
        # candidates: tensors the step rebound or read, tensors it created (alive), generators it drew from
        cands = [(t, t._value, "t") for t, _, _, _ in cap.adopted]
        born = [r() for r in cap.born]
        cands += [(t, t._value, "t") for t in born if t is not None]
        cands += [(g, g._key, "g") for g, _, _ in cap.gens]
        for obj, value, kind in cands:
            if type(value) is Sym:
                var = value.idx
            elif var_of_value is not None:
                var = var_of_value(value)
                if var is None:
                    continue
            else:
                continue
            if id(obj) in targets:
                continue
            targets[id(obj)] = (obj, var, kind)
            if var not in input_vars and var not in outs:
                outs[var] = len(outs)
        donate = _donatable(cap, targets, input_vars) if self.donate else ()
        plan = _Plan()
        plan.eqns, plan.in_vars, plan.nvars = cap.eqns, cap.in_vars, cap.nvars
        plan.outs = tuple(outs)
        plan.targets = list(targets.values())
        plan.donate = donate
        # where the executable's Python numbers are passed as arrays (a mesh's layout passes numpy arrays), and
        # how (``Numbers``: one array per kind)
        plan.device = cap.device() if self.layout is None else None
        plan.numbers = number_layout(cap.scalars)
        plan.key = (tuple(cap.in_avals), tuple([type(s) for s in cap.scalars]), tuple(cap.keys), plan.outs, donate)
        return plan

    # ------------------------------------------------------------ verify
    def _check(self, plan: _Plan, cap: Capture, exe) -> None:
        """Compare the executable's results with the eager values the step just computed."""
        outs = exe(*_split_donated(cap.inputs, ()), plan.numbers.pack(cap.scalars, None))
        for obj, var, kind in plan.targets:
            if var not in plan.outs:
                continue
            got = np.asarray(outs[plan.outs.index(var)])
            want = np.asarray(obj._key if kind == "g" else obj.detach()._value)
            if got.shape != want.shape or not _close(got, want):
                name = self._name_of(obj, cap)
                err = (np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
                       if got.shape == want.shape else None)
                _restore(cap)
                raise RuntimeError(f"dynajax.compile(verify=True): the compiled step and the eager step disagree on "
                                   f"{name} {list(want.shape)} (max abs difference {err}). Something in the step "
                                   "changes state outside dynajax ops (a raw write to ._value, an impure op impl) "
                                   "or an op lowers differently from its eager run; state was restored.")

    # ------------------------------------------------------------ explanations
    def _name_of(self, obj, cap: Capture) -> str:
        if self._names is None:
            self._names = _closure_names(self.fn)
        if hasattr(obj, "_key") and not isinstance(obj, Tensor):
            return "the random generator's key"
        for t, _, _, _ in cap.adopted:
            if t.grad is obj and id(t) in self._names:
                return f"{self._names[id(t)]}.grad"
        return self._names.get(id(obj), f"a tensor of shape {list(obj.shape)}")

    def _input_names(self, cap: Capture, args) -> list:
        leaves, tree = _tree_flatten(tuple(args))
        names = dict(zip((id(x) for x in leaves), _leaf_names(tree, _arg_names(self.fn, len(args)))))
        if self._names is None:
            self._names = _closure_names(self.fn)
        by_pos = {}
        for t, arr, _, _ in cap.adopted:
            pos = cap.in_of.get(id(arr))
            if pos is not None and pos not in by_pos:
                n = names.get(id(t)) or self._names.get(id(t))
                by_pos[pos] = f"arg '{n}'" if id(t) in names else (f"'{n}'" if n else f"input {pos}")
        return [by_pos.get(i, f"input {i}") for i in range(len(cap.inputs))]

    def _explain(self, key, cap: Capture, args, near=None) -> str:
        """Why ``key`` missed the cache: its difference from the nearest cached key (or from ``near``)."""
        def distance(k):
            avals = sum(a != b for a, b in zip(k[0], key[0])) + abs(len(k[0]) - len(key[0]))
            return (avals, -_common_prefix(k[2], key[2]))
        if near is None:
            near = min(self._cache, key=distance)
        names = None
        same_count = len(near[0]) == len(key[0])
        # (inputs are compared by position only where their number is the same: an input more or less, a
        # random draw that stopped, shifts the rest, and the ops then say what changed)
        for i, (a, b) in enumerate(zip(near[0], key[0]) if same_count else ()):
            if a != b:
                names = names or self._input_names(cap, args)
                if a[1] != b[1]:
                    return f"{names[i]} dtype: {a[1]} -> {b[1]}"
                if len(a[0]) != len(b[0]):
                    return f"{names[i]} rank: {len(a[0])} -> {len(b[0])}"
                d = next(j for j in range(len(a[0])) if a[0][j] != b[0][j])
                return f"{names[i]} dim {d}: {a[0][d]} -> {b[0][d]}"
        n = _common_prefix(near[2], key[2])
        if n < min(len(near[2]), len(key[2])):
            a, b = near[2][n], key[2][n]
            if a[0] != b[0]:
                return f"graph changed at op {n}: {_fn_name(a[0])} -> {_fn_name(b[0])}"
            if a[1] != b[1]:
                return f"op {n} ({_fn_name(b[0])}) static params: {_params_diff(a[1], b[1])}"
            if same_count:
                return f"op {n} ({_fn_name(b[0])}) takes different inputs"
        if not same_count:
            return f"the step read {len(key[0])} arrays instead of {len(near[0])}"
        if len(near[2]) != len(key[2]):
            return f"graph length changed: {len(near[2])} -> {len(key[2])} ops"
        if near[1] != key[1]:
            return "the types of Python numbers passed to ops changed"
        if near[3] != key[3]:
            return "the step keeps a different set of values alive (returned or stored tensors changed)"
        return "buffer donation changed (an array is now referenced elsewhere)"

    def clear_cache(self) -> None:
        """Drop every cached executable."""
        self._cache.clear()
        self._prefix.clear()
        self._made.clear()
        self._bwd_templates.clear()
        self._speculator.forget()
        if self._replayer is not None:
            self._replayer.entries.clear()

    def __repr__(self) -> str:
        return f"<dynajax.compile of {getattr(self.fn, '__name__', self.fn)!r}: {len(self._cache)} executables>"


def compile(fn: Callable | None = None, *, verify: bool = False, cache_size: int = 64, recompile_limit: int = 8,
            donate: bool = True, roll: bool = True, dynamic: dict | None = None, pad: dict | None = None,
            mesh=None, data_axis: str = "data", param_sharding: str | None = None, speculate: bool | None = None,
            replay: bool | int = False, check_indices: bool = True):
    """Compile a define-by-run step (forward, ``backward()``, ``optimizer.step()``) into cached XLA executables.

    The step keeps eager semantics: any Python control flow, ``.item()`` reads
    (run as graph breaks), parameters, grads, optimizer state and the RNG
    stream are updated as if it ran eagerly. ``verify=True`` runs it eagerly as
    well and raises, naming the tensor, if a new graph's result differs.

    ``roll=True`` compiles runs of structurally identical pieces of the graph (RNN
    time steps and their backward, stacks of identical layers) as one
    ``lax.scan``, so compile time does not grow with their count (``compile.rolling``).
    ``dynamic={"x": {0: [16, 32, 64]}}`` pads dim 0 of argument ``x`` up to the
    next bucket (an int: a multiple of it), with ``pad={"x": value}`` (default 0),
    so every length in a bucket runs one executable; recurrent layers keep their
    state past the true length and returned tensors are sliced back along every dim whose size is a padded
    size, by size alone: a returned dim that only equals a bucket size (a hidden size) is cut too
    (``compile.bucketing``).
    A length whose bucket has no executable yet runs in a larger bucket that has
    one, until the time its extra padding costs adds up to a compile
    (``stats.bucket_reuses`` counts those calls).
    ``speculate``: where a key repeats, dispatch its executable on the arrays the last call's inputs
    hold now before recording the call, and keep its results if the recording matches (``compile.speculate``):
    capture then overlaps the executable where the caller waits for every step. None (default): once
    the capture time the device sat idle through adds up to a compile of the non-donating twin this
    needs; True: from a key's second call; False: never.
    ``replay=True`` (``compile.replay``) skips the step's Python on calls whose arguments match a recording
    (tree, shapes, dtypes, Python values; grad mode and the called modules' ``training`` flags too)
    once two recordings in a row chose the same graph: the
    executable runs on the arrays the step's tensors hold now, with the optimizer's numbers read again.
    Only for a step whose graph depends on nothing but its arguments and state tensors (Python in the
    step -- branches on Python values, counters, prints -- is not run again). Every 100th call (or every
    ``replay=n``-th) is recorded and warns if its graph changed. Not with ``verify``, ``dynamic`` or
    ``mesh``.
    ``check_indices=True`` checks index values (indexing, gather/scatter, ``index_*``, ``embedding``, class
    targets) on the device: a bad one makes the step change nothing and raises the op's eager error at the next
    compiled call or host read (``compile.checks``); False: no check (JAX clamps the indices), as before.
    ``mesh`` (a ``dynajax.distributed.Mesh``) runs the step on all its devices: tensor arguments are split
    along dim 0 over ``data_axis``, state is replicated (``param_sharding="fsdp"``: sharded); see
    ``dynajax.distributed``.

    >>> @dynajax.compile
    ... def step(x, y):
    ...     opt.zero_grad(); loss = F.mse_loss(model(x), y); loss.backward(); opt.step()
    ...     return loss
    """
    sharding = dict(mesh=mesh, data_axis=data_axis, param_sharding=param_sharding)
    if fn is None:
        return lambda f: compile(f, verify=verify, cache_size=cache_size, recompile_limit=recompile_limit,
                                 donate=donate, roll=roll, dynamic=dynamic, pad=pad, speculate=speculate,
                                 replay=replay, check_indices=check_indices, **sharding)
    if dynamic and replay:
        raise ValueError("dynajax.compile: replay=True cannot be combined with dynamic= (bucketed calls are "
                         "recorded every time)")
    if dynamic:
        return _Bucketed(fn, dynamic, pad or {}, verify, cache_size, recompile_limit, donate, roll=roll,
                         speculate=speculate, check_indices=check_indices, **sharding)
    c = Compiled(fn, verify, cache_size, recompile_limit, donate, roll=roll, speculate=speculate, replay=replay,
                 check_indices=check_indices,
                 **sharding)
    if dynamic is None and not replay and not verify and mesh is None:
        # the automatic policy: a dim whose size changes between calls is padded to geometric buckets from then on
        c._padder = _bucketing.Padder(fn, auto=True)
        c._padder.keys = c._cache
    return c


class _Bucketed(Compiled):
    """A compiled step whose declared dims are padded up to bucket sizes (``compile(dynamic=...)``,
    see ``compile.bucketing``): every size within a bucket runs one executable, and a size whose bucket has
    no executable yet runs in a larger one that has, until the padding it costs there adds up to a
    compile (``compile.bucketing.Sizes``)."""

    def __init__(self, fn, dynamic: dict, pad: dict, *rest, **kw) -> None:
        super().__init__(fn, *rest, **kw)
        _, spec = _bucketing.check_spec(fn, dynamic, pad)
        self._padder = _bucketing.Padder(fn, spec)
        self._padder.sizes.keep = self.cache_size


# ---------------------------------------------------------------- helpers
def _first_call_done(st: CompileStats) -> None:
    """Close the first call's counts that ``Compiled._compile`` opened: its trace + compile (or load) time
    and whether the executable came from the disk cache."""
    st.compile_time += time.perf_counter()
    st.cache_loads += _compile_cache.loads()


_CALLS = threading.RLock()   # held through a compiled call (reentrant: a step calling a compiled step gets its error)


class _gc_paused:
    """Context: Python's cyclic garbage collector disabled inside, re-enabled on exit if it was enabled
    on entry (so nested uses, and a program that disabled it itself, keep their state)."""

    __slots__ = ("was",)

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc) -> None:
        if self.was:
            gc.enable()


def _sharded_layout(mesh, data_axis, param_sharding, verify: bool, cache_size: int):
    if mesh is None:
        if param_sharding is not None:
            raise ValueError("dynajax.compile: param_sharding needs a mesh (mesh=dynajax.distributed.Mesh())")
        return None
    if verify:
        raise ValueError("dynajax.compile: verify=True runs on one device; drop mesh= to verify a step")
    from ..distributed import Layout
    return Layout(mesh, data_axis, param_sharding, cache_size)


def _run_split(eqns, in_vars, nvars, outs, donate, numbers, donated, kept, packed):
    return run_packed(eqns, in_vars, nvars, outs, numbers, _merge_donated(donated, kept, donate, len(in_vars)),
                      packed)


def _split_donated(inputs: list, donate: tuple):
    if not donate:
        return [], inputs
    d = set(donate)
    return [inputs[i] for i in donate], [a for i, a in enumerate(inputs) if i not in d]


def _merge_donated(donated, kept, donate, n):
    if not donate:
        return kept
    out, di, ki, d = [], iter(donated), iter(kept), set(donate)
    for i in range(n):
        out.append(next(di) if i in d else next(ki))
    return out


def _donatable(cap: Capture, targets: dict, input_vars: dict) -> tuple:
    """Inputs whose tensors all get new values: their buffers die with the step, so they are donated."""
    still_read = {var for _, var, _ in targets.values() if var in input_vars}
    # a generator's key input is donated only when the step gives the generator a new key
    rekeyed = {id(g) for g, _, kind in targets.values() if kind == "g"}
    unkeyed = {s.idx for g, _, s in cap.gens if s is not None and id(g) not in rekeyed}
    return tuple([i for i, v in enumerate(cap.in_vars) if v not in still_read and v not in unkeyed])


def _unshare(cap: Capture, donate: tuple) -> None:
    """Pass a copy for a donated input whose array is also held elsewhere -- by another input, or by
    something outside the step (arrays are shared freely: ``deepcopy``, ``tensor(t)``, ...) -- since
    donating it would delete it under that holder. (A replayed call checks its own: ``compile.replay.split``.)"""
    inputs, src = cap.inputs, cap.in_src
    getrefcount = sys.getrefcount
    # First the usual case, without counting: an input from a tensor or a generator has its record in
    # ``cap.adopted`` or ``cap.gens``, so four references -- its slot in ``inputs``, that record, ``a``,
    # getrefcount's argument -- are all it can have (any other slot or holder makes more). ~10 us a call
    # less than counting for the MLP's 24 donated inputs (~35 us right after its executable, ~100 us on a GPU
    # machine's host); only the rest are counted exactly below.
    rest = []
    for k in donate:
        a = inputs[k]
        if src[k] is None or getrefcount(a) > 4:
            rest.append(k)
    a = None   # (a loop variable left holding an array would be one more reference to it)
    if not rest:
        return
    # (ids counted in comprehensions, for the same reason)
    held = collections.Counter([id(arr) for _, arr, _, _ in cap.adopted] + [id(key) for _, key, _ in cap.gens])
    n_in = collections.Counter([id(a) for a in inputs])
    for k in rest:
        a = inputs[k]
        i = id(a)
        n = n_in[i]
        # references: each slot in cap.inputs, each adoption record, the local ``a``, getrefcount's argument
        if n > 1 or getrefcount(a) > 2 + n + held[i]:
            n_in[i] = n - 1
            inputs[k] = jnp.copy(a)


def _write_back(plan: _Plan, cap: Capture, outs) -> None:
    """Give every target tensor (and generator) its new array; only-read inputs get their old array back."""
    opos = _positions(plan.outs)
    pos = None
    for obj, var, kind in plan.targets:
        i = opos.get(var)
        if i is not None:
            arr = outs[i]
        else:
            if pos is None:
                pos = dict(zip(cap.in_vars, range(len(cap.in_vars))))
            arr = cap.inputs[pos[var]]
        if kind == "g":
            obj._key = arr
            continue
        obj._value = arr
        if obj.grad_fn is not None:  # the graph of a compiled step ends with it: results come back detached
            obj.grad_fn = None
            obj._rg = False
    cap.known.clear()
    if cap.check_report is not None:
        _checks.note(cap)


@functools.lru_cache(maxsize=256)
def _positions(outs: tuple) -> dict:
    """var -> its position in a plan's outputs (the same for every call of one executable; not mutated)."""
    return dict(zip(outs, range(len(outs))))


def _restore(cap: Capture) -> None:
    """Undo a failed step: adopted tensors get their old arrays and grads, generators their keys."""
    for t, arr, grad, _ in reversed(cap.adopted):
        t._value = arr
        t._grad = grad
    for g, key, _ in cap.gens:
        g._key = key
    for t, grad in reversed(cap.grads):   # .grad set (zero_grad) before the step read the tensor
        t._grad = grad


def _check_result(result) -> None:
    if isinstance(result, (Tensor,) + _PY_LEAVES):   # the usual loss: nothing to walk
        return
    leaves = jax.tree_util.tree_flatten_with_path(result, is_leaf=lambda a: isinstance(a, Tensor) or a is None)[0]
    for path, leaf in leaves:
        if not isinstance(leaf, (Tensor, np.ndarray, jax.Array) + _PY_LEAVES):
            raise TypeError(f"dynajax.compile: the step returned a {type(leaf).__name__} at "
                            f"result{jax.tree_util.keystr(path)}; a compiled step may return tensors, numbers, "
                            "strings and None in tuples, lists and dicts")


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal up to a few roundings of the dtype (float16, bfloat16: several of their steps), exactly for ints."""
    try:
        eps = float(jnp.finfo(a.dtype).eps)
    except ValueError:   # integers, bools
        return bool(np.array_equal(a, b))
    if a.dtype.kind not in "fc":   # bfloat16 and the other ml_dtypes floats
        a, b = a.astype(np.float32), b.astype(np.float32)
    tol = max(1e-4, 4 * eps)
    return bool(np.allclose(a, b, rtol=tol, atol=tol / 10, equal_nan=True))


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _fn_name(fn) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or repr(fn)


def _params_diff(a: tuple, b: tuple) -> str:
    da, db = dict(a), dict(b)
    diffs = [f"{k}: {da.get(k)!r} -> {db.get(k)!r}" for k in sorted(set(da) | set(db), key=str)
             if da.get(k) != db.get(k)]
    return ", ".join(diffs)
