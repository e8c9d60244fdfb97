"""Speculative runs for ``dynajax.compile``: overlap a call's capture with its executable.

A compiled call must run the step's Python (capture) before it knows which
executable to run on which arrays, so where the caller waits for each step
(``loss.item()`` every step) the device sits idle while Python records. Most
steps repeat the graph of the call before: the same executable reads the same
tensors' current arrays. So when a key has repeated, the next call first
dispatches that executable (a non-donating twin of it: a miss must leave every
input intact) on the arrays those tensors hold now, then records as usual. If
the recording selects the same executable and read exactly those arrays (by
identity) and the same Python numbers (an optimizer's numbers are read again
from its param group, so a learning-rate schedule keeps its runs), the dispatched results are the call's
results -- the same executable on the same inputs -- and are written back;
otherwise they are dropped and the call runs as without speculation. A call
speculates only if the last call's executable has finished when it starts:
behind a running step (a loop that does not wait for every step) its capture
overlaps that step anyway.

The twin costs one more XLA compile per key, bought like a ski rental: once
the capture time the device sat idle through on calls of that key adds up to
the key's compile time (``speculate=None``), at the key's second call
(``speculate=True``), or never (``False``). Speculating is not always faster:
on a machine with few cores the recording competes with the executable's
threads. So under ``None`` a bought twin runs a trial first, alternating
plain and speculated calls, and the key keeps speculating only if the median
time from one call's start to the next was shorter speculated. A key whose
inputs keep changing under it (a Python number in the forward changed every
step, grads accumulated across steps) stops speculating after a few misses.
The fused optimizer updates (every optimizer's but LBFGS) give each of their numbers a
recipe (``compile.capture.scalar_recipes``) that reads it again from the param group,
so a learning-rate schedule that steps every call keeps its runs.
"""
from __future__ import annotations

import collections
import statistics
import weakref

import jax

from .capture import _array_type, is_array
from .._device import STEP_COMPILER_OPTIONS
from .._tensor import Tensor
from ..lower import _tree_flatten
from ..ops.dispatch import Pick

MISSES_ALLOWED = 2       # misses a key may have, plus one per HITS_PER_MISS hits, before it stops speculating
HITS_PER_MISS = 16
TRIAL = 24               # calls of each kind, alternated, that decide whether speculating pays (``None``):
                         # on a noisy 2-core machine a median of 8 call times picked the MLP's slower mode in
                         # 1 of 3 trials, of 24 in none of 3 (speculating 4-6% faster there); a wrong verdict
                         # costs every later call, a longer trial ~16 more calls of the worse mode


class _Prediction:
    __slots__ = ("base", "exe", "src", "scalars", "recipes", "donate", "device", "numbers")


class _KeyState:
    """Speculation for one key (kept under its executable: an identity, not the long structural key, so a
    call hashes nothing more): its twin, what buying it has saved up, its hits and misses, and the trial."""

    __slots__ = ("twin", "idle", "hits", "misses", "times", "verdict")

    def __init__(self) -> None:
        self.twin = None
        self.idle = 0.0            # capture seconds the device sat idle through
        self.hits = self.misses = 0
        self.times = ([], [])      # call-to-call seconds of plain and of speculated calls, while the trial runs
        self.verdict = None        # speculating pays: None (not known yet), True, False


class Speculator:
    """The speculation state of one compiled function."""

    def __init__(self, mode, cache_size: int) -> None:
        self.mode = mode
        self.cache_size = cache_size
        self.keys: collections.OrderedDict = collections.OrderedDict()   # executable -> _KeyState
        self.next: _Prediction | None = None
        self.last_exe = None
        self.streak = 0
        self.last_out = None       # an output of the last call: ready at the next call's start = device idle
        self.last_start = 0.0
        self.last_arm = None       # the last call's kind in a trial: 0 plain, 1 speculated (None: not timed)
        self.hit_src = None        # the sources of the last kept speculative run (this call's inputs)
        self.missed = False        # this call dropped a speculative run (so it is no plain call of a trial)

    # ------------------------------------------------------------ at the start of a call
    def begin(self, now: float) -> bool:
        """At a call's start: whether the device is idle (the last call's executable has finished); notes the
        last call's time (to this start) if it was part of a trial."""
        out, self.last_out = self.last_out, None
        try:
            idle = out is None or out.is_ready()
        except Exception:   # deleted since
            idle = True
        arm, self.last_arm = self.last_arm, None
        if arm is not None:
            ks = self.keys.get(self.last_exe)
            if ks is not None and ks.verdict is None:
                ks.times[arm].append(now - self.last_start)
        self.last_start = now
        return idle

    def dispatch(self, args, kwargs, split):
        """Run the predicted executable on the arrays its inputs' tensors hold now: (prediction, arrays,
        outputs) or None."""
        p, self.next = self.next, None
        vals = gather(p.src, args, kwargs)
        scalars = recompute(p.scalars, p.recipes) if vals is not None else None
        if scalars is None:
            return None
        try:
            outs = p.exe(*split(vals, p.donate), p.numbers.pack(scalars, p.device))
        except Exception:   # whatever it was, the recorded call will meet it (or not) and say so
            return None
        return p, vals, scalars, outs

    # ------------------------------------------------------------ after the recording
    def settle(self, spec, exe, cap):
        """The speculative outputs if the recorded call is the predicted one (executable ``exe``, same input
        arrays and Python numbers), else None (after waiting for the speculative run, whose inputs the
        call may now donate)."""
        p, vals, scalars, outs = spec
        ks = self.keys.get(p.base)
        if (exe is p.base and ks is not None and len(vals) == len(cap.inputs)
                and all(a is b for a, b in zip(vals, cap.inputs)) and same_scalars(cap.scalars, scalars)):
            ks.hits += 1
            if ks.verdict is None and ks.hits > 1:   # a trial call (the first ran the twin's compile)
                self.last_arm = 1
            self.hit_src = p.src
            return outs
        if exe is p.base and ks is not None:
            ks.misses += 1
        self.missed = True
        try:
            jax.block_until_ready(outs)
        except Exception:   # the dropped run failed (out of memory for the twin's outputs): nothing to keep
            pass
        return None

    def plan_next(self, plan, cap, exe, run, placed, args, kwargs, capture_secs: float, compile_secs, idle: bool,
                  outs, speculated: bool) -> None:
        """Decide whether the next call speculates on ``exe`` (the call's executable), building its twin when
        it is worth one."""
        hit_src, self.hit_src = self.hit_src, None
        missed, self.missed = self.missed, False
        self.streak = self.streak + 1 if exe is self.last_exe else 1
        self.last_exe = exe
        if outs:
            self.last_out = outs[0]
        if self.mode is False or cap.breaks or self.streak < 2:
            return
        ks = self.keys.get(exe)
        if ks is None:
            ks = self.keys[exe] = _KeyState()
            if len(self.keys) > self.cache_size:
                self.keys.popitem(last=False)
        else:
            self.keys.move_to_end(exe)
        if ks.verdict is False or ks.misses > MISSES_ALLOWED + ks.hits // HITS_PER_MISS:
            return
        if ks.twin is None:
            if self.mode is None and plan.donate:   # (an executable donating nothing is a free twin)
                if idle:
                    ks.idle += capture_secs
                if compile_secs is None or ks.idle < compile_secs:
                    return
            elif self.mode is True:
                ks.verdict = True
            # an executable donating nothing is its own twin; else a non-donating one compiles at its first run
            ks.twin = jax.jit(run, compiler_options=STEP_COMPILER_OPTIONS, **placed) if plan.donate else exe
        if ks.verdict is None:
            plain, spec = ks.times
            if len(plain) >= TRIAL and len(spec) >= TRIAL:
                ks.verdict = statistics.median(spec) < statistics.median(plain)
                if not ks.verdict:
                    ks.twin = None
                    return
            elif speculated:   # the trial alternates plain and speculated calls
                return
            elif not missed:
                self.last_arm = 0
        # after a kept run its sources found exactly this call's inputs: the next call looks there again
        src = hit_src if speculated else sources(cap, args, kwargs)
        if src is None:
            return
        p = _Prediction()
        p.base, p.exe, p.src, p.scalars, p.donate = exe, ks.twin, src, list(cap.scalars), plan.donate
        p.recipes, p.device, p.numbers = cap.scalar_src, plan.device, plan.numbers
        self.next = p

    def forget(self) -> None:
        self.keys.clear()
        self.next = None


def sources(cap, args, kwargs, constants: bool = False):
    """How the next call finds each input of this one: ("a", i) the i-th tensor among the call's
    arguments, ("t", ref) a tensor, ("g", ref) a generator's key (weak references), ("f", fn) the array
    ``fn()`` makes for the call (a tensor the step made with a ``_remake`` recipe: a bucketed call's
    sequence mask, small data the step made a tensor of). None if some input has no such source (a raw
    array, an array the step made otherwise); with ``constants``, ("c", array) for those and for the
    recipes' arrays: the same array again, but for recipes whose array is the call's own (``per_call``: a
    padded call's masks, ``compile.padding.SizeMask``). An input first read through another tensor the step made (an
    in-place op's temporary alias) is found through a tensor that existed before the step, or one made
    with a recipe, that held that array."""
    pos = {id(t): i for i, t in enumerate(tensor_leaves(args, kwargs))}
    src = []
    owners = None
    for k, obj in enumerate(cap.in_src):
        if id(obj) in cap.born_ids:
            if owners is None:   # id(array) -> a tensor from before the step (or made with a recipe) holding it
                owners = {}
                for t, arr, _, _ in cap.adopted:
                    remake = getattr(t, "_remake", None)
                    if id(t) not in cap.born_ids or (remake is not None
                                                     and (not constants or getattr(remake, "per_call", False))):
                        owners.setdefault(id(arr), t)
            if constants or getattr(obj, "_remake", None) is None:
                obj = owners.get(id(cap.inputs[k]))
            if obj is not None and id(obj) in cap.born_ids:
                src.append(("f", obj._remake))
                continue
        if obj is None:
            if not constants:
                return None
            src.append(("c", cap.inputs[k]))
            continue
        i = pos.get(id(obj))
        if i is not None:
            src.append(("a", i))
        else:
            src.append(("t" if isinstance(obj, Tensor) else "g", weakref.ref(obj)))
    return src


def gather(src, args, kwargs):
    """The arrays the sources (``sources``) hold now, or None where one holds none (gone, a view)."""
    leaves = None
    vals = []
    array = _array_type()
    for kind, ref in src:
        if kind == "t":   # (most sources: a parameter's or a state tensor's array, read straight)
            obj = ref()
            if isinstance(obj, Tensor) and obj._base is None and type(v := obj._v) is array:
                vals.append(v)
                continue
        if kind == "a":
            if leaves is None:
                leaves = tensor_leaves(args, kwargs)
            obj = leaves[ref] if ref < len(leaves) else None
        elif kind == "c":
            vals.append(ref)
            continue
        else:
            obj = ref()
        if kind == "g":
            v = getattr(obj, "_key", None)
        elif kind == "f":
            v = obj
        else:
            if kind == "grad":   # (a replay's source: the .grad of a parameter, ``compile.replay``)
                obj = getattr(obj, "grad", None)
            v = obj._value if isinstance(obj, Tensor) and obj._base is None else None
        if not is_array(v):
            return None
        vals.append(v)
    return vals


def recompute(scalars: list, recipes) -> list | None:
    """A recording's Python numbers, those with a recipe read again where they came from (a learning rate a
    scheduler moved); None if a recipe fails."""
    if not recipes:
        return scalars
    scalars = list(scalars)
    read: dict = {}   # (a ``Pick``'s source, read once for every number it gives)
    try:
        for slot, recipe in recipes.items():
            if type(recipe) is Pick:
                got = read.get(recipe.source)
                if got is None:
                    got = read[recipe.source] = recipe.source()
                scalars[slot] = got[recipe.index]
            else:
                scalars[slot] = recipe()
    except Exception:
        return None
    return scalars


def tensor_leaves(args, kwargs) -> list:
    """The Tensors among a call's arguments, in pytree order."""
    return [a for a in _tree_flatten((args, kwargs))[0] if isinstance(a, Tensor)]


def same_scalars(a: list, b: list) -> bool:
    """The same Python numbers, types and signs of zero included (NaN never matches: a miss is safe)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y) or x != y or (not x and str(x) != str(y)):
            return False
    return True

