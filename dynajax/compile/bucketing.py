"""Shape bucketing for ``dynajax.compile(step, dynamic=...)``: a varying dimension of a step's tensor
arguments is padded up to the next of a few declared sizes, so every size in a bucket runs the same
executable (and compiles once).

``dynamic={"tokens": {1: [16, 32, 64]}, "targets": {1: 16}}`` pads dim 1 of argument ``tokens`` to
16, 32 or 64 (sizes past the last bucket: to a multiple of it) and dim 1 of ``targets`` to a multiple
of 16; ``pad={"targets": -100}`` pads with a value (default 0), e.g. a loss's ``ignore_index``, so
padded positions add nothing to the loss nor to any gradient.

Where padding would change results the library masks it: recurrent layers (``nn.RNN``/``LSTM``/
``GRU``) running over a padded length keep their state past the true length, so ``h_n`` is the
state at the end of the real sequence, and skip the steps that are padding for every row (no matmul:
one large bucket costs little more recurrence than the real length); tensors the step returns are
sliced back along every dim whose size is a padded size. Both go by size alone, so in one call dims
of different true sizes get different padded sizes (see :func:`declared`), and a recurrent layer
over a sequence whose length equals a padded size of the call (say a time length that happens to
equal a padded batch size) masks it as if it were padded too.

``BatchNorm`` in training mode likewise takes its mean, variance and running statistics over the real
rows of a padded batch only (a batch whose size equals a padded size of the call counts as padded).

Everything else sees the padding: reductions, softmax or Python loops over a padded dim written in
the step, and a loss's ``reduction="mean"`` (pad its targets with ``ignore_index`` where the loss has
one, else mask it in the step, or sum and divide by the true count).
"""
from __future__ import annotations

import atexit
import collections
import inspect
import statistics
import time
import weakref

import jax
import numpy as np

from .. import _device
from .._tensor import Tensor, _make
from . import cache as _cache
from . import padding



def bucket(n: int, sizes) -> int:
    """The padded size of ``n``: the smallest bucket >= n (an int bucket: the next multiple of it);
    past the largest bucket, the next multiple of the largest."""
    if isinstance(sizes, int):
        return -(-n // sizes) * sizes
    for s in sizes:
        if s >= n:
            return s
    top = sizes[-1]
    return -(-n // top) * top


def check_spec(fn, dynamic: dict, pad: dict) -> tuple:
    """Validate ``dynamic``/``pad`` against ``fn``'s signature; returns (signature, {name: {dim: sizes}})."""
    sig = inspect.signature(fn)
    spec = {}
    for name, dims in dynamic.items():
        if name not in sig.parameters:
            raise TypeError(f"dynajax.compile: dynamic names argument {name!r}, which "
                            f"{getattr(fn, '__name__', 'the step')}{sig} does not take")
        if not isinstance(dims, dict) or not dims:
            raise TypeError(f"dynajax.compile: dynamic[{name!r}] should map dims to buckets, e.g. {{0: [16, 32]}}, "
                            f"got {dims!r}")
        spec[name] = {}
        for d, sizes in dims.items():
            ok = (isinstance(sizes, int) and sizes > 0) or (
                isinstance(sizes, (list, tuple)) and sizes and all(isinstance(s, int) and s > 0 for s in sizes))
            if not isinstance(d, int) or not ok:
                raise TypeError(f"dynajax.compile: dynamic[{name!r}][{d!r}] should be a positive int (pad to a "
                                f"multiple) or a list of positive ints (bucket sizes), got {sizes!r}")
            spec[name][d] = sizes if isinstance(sizes, int) else tuple(sorted(sizes))
    for name in pad:
        if name not in spec:
            raise TypeError(f"dynajax.compile: pad names argument {name!r}, which dynamic does not declare")
    return sig, spec


def declared(sig, spec: dict, args: tuple, kwargs: dict, avoid=frozenset()):
    """This call's bound arguments and its declared dims: ``[((name, dim), true size, own bucket)]``.

    The own buckets keep the padding unambiguous, since a returned tensor is sliced back, and a
    recurrent layer finds its mask, by the padded size alone:

    * dims of equal true size pad to one size, the largest of their buckets (tokens declared with
      buckets ``[16, 32]`` and their targets with multiples of 16 both pad 40 to 64, not to 64 and 48);
    * dims of different true sizes never share a padded size (a batch of 5 and a length of 7 both
      padded to 8, or an unpadded batch of 8 beside a length of 5 padded to 8, could not be told
      apart): the true size met later takes its next bucket instead."""
    bound = sig.bind(*args, **kwargs)
    found = []   # ((name, dim), true size, bucket sizes)
    for name, dims in spec.items():
        t = bound.arguments.get(name)
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"dynajax.compile: dynamic argument {name!r} must be a Tensor, got {type(t).__name__}")
        if t.requires_grad:
            raise RuntimeError(f"dynajax.compile: dynamic argument {name!r} requires grad; only data (tensors "
                               "that do not require grad) can be padded to a bucket")
        shape = tuple(t.shape)
        for d, sizes in dims.items():
            if not -len(shape) <= d < len(shape):
                raise IndexError(f"dynajax.compile: dynamic[{name!r}] declares dim {d}, but {name!r} has shape "
                                 f"{list(shape)}")
            found.append(((name, d % len(shape)), shape[d % len(shape)], sizes))
    return bound, assign(found, avoid)


def assign(found: list, avoid=frozenset()) -> list:
    """``[(key, true size, padded size)]`` of ``found`` = ``[(key, true size, its buckets)]`` (the rules of
    :func:`declared`)."""
    specs_of: dict = {}   # true size -> the bucket sizes of every dim of that size (in order of appearance)
    for _, n, sizes in found:
        specs_of.setdefault(n, []).append(sizes)
    padded_of, true_of = {}, {}   # true size -> padded size, and back
    for n, specs in specs_of.items():
        b = max(bucket(n, sizes) for sizes in specs)
        # b stands for another true size already, or is a size of the step's other inputs (a creation op of
        # that size would be ambiguous, ``compile.padding``): the next bucket
        while (b != n and b in avoid) or true_of.setdefault(b, n) != n:
            # (a size of another input: one more, not the next bucket -- 64 padded to 128 and then, past a
            # hidden size of 128, to 256 ran an RNN loop over 256 steps for a length of 45)
            b = b + 1 if b in avoid else max(bucket(b + 1, sizes) for sizes in specs)
        padded_of[n] = b
    return [(key, n, padded_of[n]) for key, n, _ in found]


def pad_call(bound, dims_of: list, sizes: tuple, pad: dict | None = None):
    """Arguments with each declared dim padded to its entry of ``sizes``, and {padded size: true size}
    (a :class:`Grown`, which also remembers the padded copies for :func:`unpad` to write back, and in
    ``padded`` each declared argument with its padded dims, for ``compile.padding``'s masks). The padding repeats the real
    data (numpy's ``wrap``): padded positions hold real values, finite and in range (``pad`` is ignored:
    ``compile.padding`` keeps padded positions out of every result)."""
    grown = Grown()
    widths: dict = {}
    for ((name, d), n, _), b in zip(dims_of, sizes):
        widths.setdefault(name, {})[d] = (n, b)
        grown[b] = max(grown.get(b, 0), n)   # also when n == b: the graph must not depend on it
    names, arrays, devices = [], [], []
    default, home = True, None   # (all uncommitted, on the default device: each put as ``dynajax.tensor`` puts
    for name, grow in widths.items():   # its array)
        t = bound.arguments[name]
        if any(n != b for n, b in grow.values()):
            v = t.detach()._value
            names.append(name)
            arrays.append(_wrapped(np.asarray(v), grow))  # numpy: jnp.pad would compile a kernel per new length
            devices.append(next(iter(v.devices())))
            if default and home is None:
                home = _device.default_jax_device()
            default = default and not getattr(v, "committed", True) and devices[-1] == home
    put = [_device.host_put(a) for a in arrays] if default else jax.device_put(arrays, devices)
    for name, a in zip(names, put):   # (else one transfer call for all of them)
        given = bound.arguments[name]
        bound.arguments[name] = _make(a)
        grown.copies.append((given, bound.arguments[name], bound.arguments[name]._version))
    for name, grow in widths.items():   # (an argument at its bucket's size exactly has a mask too: one graph)
        t = bound.arguments[name]
        grown.padded.append((t, tuple(grow)))
    return bound.args, bound.kwargs, grown


def _wrapped(v: np.ndarray, grow: dict) -> np.ndarray:
    """``v`` with each dim ``d`` of ``grow`` (``{d: (true size, padded size)}``) grown to its padded size by
    repeating its data, as ``np.pad(mode="wrap")`` does after the end (one ``np.take`` per dim: ~10 us, where
    ``np.pad`` took ~70 us a call)."""
    for d, (n, b) in grow.items():
        if b != n:
            v = np.take(v, np.arange(b) % n, axis=d) if n else np.pad(v, [(0, b if k == d else 0)
                                                                          for k in range(v.ndim)], mode="wrap")
    return v


class Grown(dict):
    """{padded size: true size} of a call, and ``copies``: ``(argument, its padded copy, the copy's version
    counter then)`` for each argument the call padded. (The version, not the array: a step on a mesh
    gives an argument it only read its array laid out on the mesh.)"""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list = []
        self.padded: list = []   # (argument as the step gets it, its mask array)


class Sizes:
    """Which padded sizes each call of a bucketed step runs at.

    A call runs at its own buckets if an earlier call ran there (its executable exists) or if no
    earlier call ran at sizes it fits in. Otherwise it runs at the smallest such larger sizes and its
    own buckets wait: compiling them costs a compile now, padding further costs part of every step
    until then. The choice is the ski-rental rule (rent until the rent paid equals the price, then
    buy: never more than twice the cost of the best choice made knowing the future, as far as the
    estimates below hold): the estimated
    time lost to the extra padding is summed per own-bucket sizes, and once it reaches the mean compile
    time of this step those sizes compile. The loss per call is the time between calls (the
    throughput of the step) times the fraction of padded work, an overestimate where padding is
    cheap (recurrent layers skip padded steps). Padding is a no-op on results only where the step
    masks it (see the module docstring), so a call's result may vary with which sizes it ran at
    exactly where padding leaks into it.

    A call that fits no compiled sizes compiles the buckets of the largest true sizes seen so far
    rather than its own: a compile is due either way, and one that covers the sizes already met
    saves the next compiles while padding stays cheap (loops over a padded length skip it,
    ``compile.rolling``); a step for which it is not cheap buys its own buckets by the rule above.

    With the compile cache on, the rule spans processes (``compile.cache.bucket_record``): sizes whose
    executable an earlier process kept (``bought``) cost a load, so a call runs at them at once, and the debt
    of the other sizes starts where the last process left it."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep                        # sizes remembered: the step's executable cache size
        self.ran = collections.OrderedDict()    # sizes recent calls ran at -> their dims' names
        self.bought: set = set()                # (dims' names, sizes) kept in the compile cache folder
        self.debt: dict = {}                    # own sizes -> estimated seconds lost padding past them
        self.gaps = collections.deque(maxlen=16)   # seconds between starts of calls that compiled nothing
        self.last: float | None = None          # start of the previous call, if it compiled nothing
        self.start = 0.0                        # start of the current call

    def choose(self, dims_of: list, compile_cost: float, wide=None) -> tuple:
        """The padded sizes of a call with declared dims ``dims_of`` (see :func:`declared`); ``wide()``: the
        sizes that would fit the largest true sizes seen so far, compiled instead of the own ones when
        nothing compiled fits the call (asked only then)."""
        now = time.perf_counter()
        if self.last is not None:
            self.gaps.append(now - self.last)
        self.start = now
        own = tuple(b for _, _, b in dims_of)
        names = tuple(k for k, _, _ in dims_of)
        if own in self.ran or (names, own) in self.bought:
            return own
        true = [n for _, n, _ in dims_of]
        fits = [c for c, ks in self.ran.items() if ks == names and _fits(c, true)]
        fits += [c for ks, c in self.bought if ks == names and _fits(c, true)]   # (loaded when first run)
        if not fits:
            w = wide() if wide is not None else None
            return w if w is not None and _fits(w, true) else own
        best = min(fits, key=lambda c: _work(c, true))
        gap = statistics.median(self.gaps) if self.gaps else 0.0
        debt = self.debt.get(own, 0.0) + gap * (1 - _work(own, true) / max(_work(best, true), 1))
        if debt >= compile_cost:
            self.debt.pop(own, None)
            return own
        self.debt[own] = debt
        return best

    def done(self, dims_of: list, sizes: tuple, compiled: bool) -> None:
        """Note that the call :meth:`choose` answered ran at ``sizes`` (and whether it compiled)."""
        self.ran[sizes] = tuple(k for k, _, _ in dims_of)
        self.ran.move_to_end(sizes)
        if len(self.ran) > self.keep:            # its executable has likely left the step's LRU cache
            self.ran.popitem(last=False)
        self.last = None if compiled else self.start


def _fits(sizes: tuple, true: list) -> bool:
    """Whether dims of true sizes ``true`` can run padded to ``sizes``: each fits, dims of equal true
    size (a batch's tokens and targets) pad to equal sizes, and dims of different true sizes to
    different ones (see :func:`declared`)."""
    same, of = {}, {}
    for c, n in zip(sizes, true):
        if c < n or same.setdefault(n, c) != c or of.setdefault(c, n) != n:
            return False
    return True


def _work(sizes: tuple, true: list) -> int:
    """The padded volume, counting once each group of dims of equal true size (padded alike)."""
    seen, v = set(), 1
    for c, n in zip(sizes, true):
        if n not in seen:
            seen.add(n)
            v *= c
    return v


def sequence_mask(length: int):
    """While a bucketed step runs: a (length, 1, 1) bool tensor, True at the real steps of a sequence
    padded to ``length``; None when ``length`` is no padded size of this call."""
    recipe = padding.SizeMask((length, 1, 1), (0,))
    return None if recipe() is None else recipe.tensor()


def mask_array(length: int):
    """The array of :func:`sequence_mask` for the current call (None: ``length`` is not padded)."""
    return padding.SizeMask((length, 1, 1), (0,))()


def unpad(result, grown: dict):
    """Returned tensors sliced back along every dim whose size is a padded size; an argument the step
    changed in place (``x.mul_(2)``, ``y[0] = 7``) gets the real part of its padded copy, as eagerly
    (the step ran on the copy). Only after a call that returned: a step that raised changed nothing."""
    for given, copy, version in getattr(grown, "copies", ()):
        if copy._version != version:
            from ..autograd import grad_mode
            with grad_mode.no_grad():
                given.copy_(copy[tuple(slice(0, n) for n in given.shape)])
    if not grown:
        return result

    def cut(t):
        if not isinstance(t, Tensor):
            return t
        idx = tuple(slice(0, grown[s]) if s in grown else slice(None) for s in t.shape)
        return t[idx] if any(grown.get(s, s) != s for s in t.shape) else t
    return jax.tree_util.tree_map(cut, result, is_leaf=lambda a: isinstance(a, Tensor))


# ---------------------------------------------------------------- padded calls and the automatic policy
GEOMETRIC = tuple(2 ** k for k in range(31))   # the automatic policy's buckets
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL


class Padder:
    """The padded calls of one compiled step: ``spec`` {argument: {dim: buckets}} (``dynamic=``, or what
    :meth:`observe` found varying when ``auto``); each call is padded, recorded with ``compile.padding``'s
    masks, and its returned tensors sliced back. A recording that padding could change stops padding for
    the step (``stats.padding_stopped``); the call, and every later one, then runs at its true shapes."""

    def __init__(self, fn, spec: dict | None = None, auto: bool = False) -> None:
        self.fn = fn
        self.auto = auto
        self.sig = inspect.signature(fn) if auto else None
        self.spec = spec or {}
        self.sizes = Sizes()
        self.stopped: str | None = None
        self.avoid: set = set()      # sizes of the step's other inputs, which buckets skip
        self.seen: dict = {}         # auto: (argument, dim) -> the sizes it had
        self.peak: dict = {}         # (argument, dim) -> the largest true size of a padded call
        self.paid: list = []         # (seconds, loaded from the disk cache) of each padded call that compiled
        self.last = None             # auto: the last call's argument shapes
        self.ident = False           # the step's name in the compile cache folder's bucket record (False: not read)
        self.folder = None           # that folder

    keys = None   # the compiled step's cache (set by it): its recordings' keys

    def active(self, args, kwargs) -> bool:
        """Whether this call is padded (auto: once some argument's dim changed size between two calls). A dim
        that starts changing later joins the padded ones."""
        if self.stopped is not None:
            return False
        if not self.auto:
            return True
        if self.ident is False:   # (the first call: an earlier process may have found which dims vary)
            self._recall()
            if self.spec:
                try:
                    declared(self.sig, self.spec, args, kwargs, self.avoid)
                except (TypeError, RuntimeError, IndexError):   # (its dims do not fit this call: found again)
                    self.spec, self.avoid, self.peak = {}, set(), {}
        shapes = _arg_shapes(args, kwargs)
        last, self.last = self.last, shapes
        if last is None or last == shapes or len(last) != len(shapes):
            return bool(self.spec)
        found = []
        for (k, sa, da), (k2, sb, db) in zip(last, shapes):
            if k != k2 or da != db or len(sa) != len(sb):
                return bool(self.spec)
            found += [(k, d, sa[d], sb[d]) for d in range(len(sa)) if sa[d] != sb[d]]
        names = list(self.sig.parameters)   # (the name of a positional argument: a parameter's, in order)
        named = []
        for k, d, a, b in found:
            if type(k) is int and (k >= len(names) or self.sig.parameters[names[k]].kind is _VAR_POSITIONAL):
                return bool(self.spec)   # a *args tensor: not nameable by dynamic=
            name = names[k] if type(k) is int else k
            if d not in self.spec.get(name, ()):   # (a dim padded already changes size at every call)
                named.append((name, d, a, b))
        if not named:
            return bool(self.spec)
        try:
            self.sig.bind(*args, **kwargs)
        except TypeError:
            return bool(self.spec)
        if not self.spec:   # the sizes of the step's own inputs (parameters, state): no bucket (known already once
            for key in compiled_keys(self):   # dims are padded: the keys since hold padded sizes)
                self.avoid.update(s for a in key[0] for s in a[0])
        for name, d, a, b in named:
            self.spec.setdefault(name, {})[d] = GEOMETRIC
            self.seen.setdefault((name, d), set()).update((a, b))
            self.peak[(name, d)] = max(a, b, self.peak.get((name, d), 0))
        for v in self.seen.values():
            self.avoid -= v
        return True

    def price(self) -> float:
        """What compiling new sizes is expected to cost, in seconds: the mean of this step's compiles that
        were not loaded from the on-disk cache (an executable loaded from dynajax's own store counts with the
        compile time the process that stored it measured). Where all were loaded from JAX's cache, a new
        size will not be, and its compile costs the XLA compile that loading skipped: taken as 5x a load's
        time (on CPU, XLA compiled a recurrent step in 5-7x the time its trace and load took)."""
        built = [t for t, loaded in self.paid if not loaded]
        if built:
            return statistics.fmean(built)
        return 5 * statistics.fmean(t for t, _ in self.paid) if self.paid else 0.0

    def went_dynamic(self) -> list:
        return [f"{n} dim {d}" for n, dims in self.spec.items() for d in dims]

    def _recall(self) -> None:
        """At the step's first call (automatic policy) or first padded call: what earlier processes kept of its
        buckets (``Sizes``) and, for the automatic policy, which dims they found varying."""
        self.ident, self.folder = _cache.step_identity(self.fn), _cache.compile_cache_dir()
        rec = _cache.bucket_record(self.ident)
        if rec is None:
            self.ident = None
            return
        self.sizes.bought |= set(rec.get("bought", ()))
        for k, v in rec.get("debt", {}).items():
            self.sizes.debt[k] = max(v, self.sizes.debt.get(k, 0.0))
        if rec.get("price") and not self.paid:   # (what a compile of this step cost the process that made it)
            self.paid.append((rec["price"], False))
        if self.auto and not self.spec and rec.get("spec"):   # (the automatic policy's dims: padded from call 1)
            self.spec = {name: dict.fromkeys(dims, GEOMETRIC) for name, dims in rec["spec"].items()}
            self.avoid |= set(rec.get("avoid", ()))
            self.peak.update(rec.get("peak", {}))
        _RECORDED.add(self)

    def save(self) -> None:
        """Keep this step's bought sizes and debts in the compile cache folder's record (at a compile, at exit)."""
        if self.ident and (self.sizes.bought or self.sizes.debt or self.spec):
            rec = {"bought": set(self.sizes.bought), "debt": dict(self.sizes.debt), "price": self.price()}
            if self.auto and self.spec:
                rec.update(spec={name: sorted(dims) for name, dims in self.spec.items()}, avoid=sorted(self.avoid),
                           peak=dict(self.peak))
            _cache.save_bucket_record(self.folder, self.ident, rec)

    def call(self, compiled, args, kwargs):
        """Run ``compiled._call`` on this call padded; at its true shapes where padding stops."""
        st = compiled.stats
        sig = self.sig or inspect.signature(self.fn)
        if self.ident is False:
            self._recall()
        bound, dims_of = declared(sig, self.spec, args, kwargs, self.avoid)
        def wide():
            return tuple(b for _, _, b in assign([(k, max(n, self.peak.get(k, n)), self.spec[k[0]][k[1]])
                                                  for k, n, _ in dims_of], self.avoid))
        sizes = self.sizes.choose(dims_of, self.price(), wide)
        pargs, pkwargs, grown = pad_call(bound, dims_of, sizes)
        hits, compiles, nreasons = st.cache_hits, st.compiles, len(st.recompile_reasons)
        spent, loads = st.compile_time, st.cache_loads
        compiled.built_secs = None
        compiled.kept = False
        # (a call of a bucket that replays runs without its Python: its masks come from the recipes of the
        # recording's, ``padding.SizeMask``, made for this call's true sizes)
        try:
            with padding.call(grown.padded, dict(grown)) as pc:
                result = compiled._call(pargs, pkwargs)
        except padding.Unpaddable as e:
            pd = getattr(pc, "padding", None)
            new = (pd.other_sizes() if pd is not None else set()) - self.avoid - {n for _, n, _ in dims_of}
            if new & set(sizes):   # a padded size met a size of the step's own (a hidden size): other buckets
                self.avoid |= new
                return self.call(compiled, args, kwargs)
            self.stop(compiled, e)
            return compiled._call(args, kwargs)
        if getattr(pc, "padding", None) is not None:
            self.avoid |= pc.padding.other_sizes() - {n for _, n, _ in dims_of}
        self.sizes.done(dims_of, sizes, st.compiles > compiles)
        if st.compiles > compiles:
            built = compiled.built_secs   # (a load from dynajax's store knows what the compile cost then)
            self.paid.append((st.compile_time - spent, st.cache_loads > loads) if built is None else (built, False))
            names = tuple(k for k, _, _ in dims_of)
            if (names, sizes) in self.sizes.bought and st.cache_loads == loads:
                self.sizes.bought.clear()   # a record this step's executables do not match (another step's)
            if compiled.kept and self.ident:
                self.sizes.bought.add((names, sizes))
                self.sizes.debt.pop(sizes, None)
                self.save()
        for k, n, _ in dims_of:
            self.peak[k] = max(n, self.peak.get(k, n))
        st.dynamic_dims = self.went_dynamic()
        if len(st.recompile_reasons) > nreasons:
            st.recompile_reasons[-1] += (f" (padded dims {', '.join(f'{k[0]} dim {k[1]}' for k, _, _ in dims_of)}"
                                         f": sizes {tuple(sizes)} had no executable yet)")
        if st.cache_hits > hits:
            st.bucket_hits += 1
            if any(b != own for b, (_, _, own) in zip(sizes, dims_of)):
                st.bucket_reuses += 1
        return unpad(result, grown)

    def stop(self, compiled, e) -> None:
        import warnings
        self.stopped = str(e)
        compiled.stats.padding_stopped = f"{e.op}: {e.why}"
        compiled.stats.recompile_reasons.append(f"padding stopped at {e.op} ({e.why}): calls run at their true "
                                                "shapes")
        if not self.auto:
            warnings.warn(f"dynajax.compile: {getattr(self.fn, '__name__', 'the step')} stops padding its dynamic "
                          f"dims, since padding could change its results at {e.op} ({e.why}); its calls run at "
                          "their true shapes", stacklevel=4)


_RECORDED: weakref.WeakSet = weakref.WeakSet()   # Padders with a bucket record: their debts kept at exit


@atexit.register
def _save_records() -> None:
    for p in list(_RECORDED):
        p.save()


def _arg_shapes(args, kwargs) -> tuple:
    """(position or keyword, shape, dtype) of each tensor argument that needs no gradient."""
    out = []
    for k, a in enumerate(args):
        if isinstance(a, Tensor) and not a._rg:
            v = a._v
            out.append((k, v.shape, v.dtype))
    for k, a in kwargs.items():
        if isinstance(a, Tensor) and not a._rg:
            v = a._v
            out.append((k, v.shape, v.dtype))
    return tuple(out)


def compiled_keys(padder) -> list:
    return list(padder.keys or ())
