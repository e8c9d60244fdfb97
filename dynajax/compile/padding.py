"""Exact padding: which values of a bucketed step are padded, and ops that keep padding out of real results.

A step compiled with padded dims (``compile(dynamic=...)``, or the automatic policy of ``compile(step)``)
runs on arguments grown to a bucket size. The growth copies real data (numpy's ``wrap``), so every padded
position holds a value some real position holds too: finite wherever the real data is, and a valid class
index in a target. While such a call records, :class:`Padding` follows the padding through the graph: each
recorded value that carries padding has a *mask*, a bool tensor of the value's rank, broadcastable to it,
True at its real positions (an executable input built from the true sizes, so the true sizes are runtime
values, not part of the compile key). Each op says, in :data:`RULES`, what it does with masked inputs:

* ``elementwise`` ops and row-wise ones (``linear`` over the rows, an RNN cell, an embedding lookup) pass
  the padding through: the output's mask is the AND of the inputs';
* ``structural`` ops (views, reshapes, slices, ``cat``, ``stack``, indexing) move the mask with the data:
  the same op applied to the masks;
* reductions over a padded dim fill the padded positions with the reduction's identity first (``where``,
  so the fill's gradient is exactly zero there): ``sum``, ``prod``, ``amax``/``amin``, ``logsumexp``,
  norms, ``any``/``all``; ``mean`` and ``var`` divide by the count of real positions; ``softmax`` and
  ``log_softmax`` over a padded dim see ``-inf`` there; a contraction over a padded dim (``matmul``) zeros
  it; ``nll_loss`` reduces over real rows only (every loss is made of these ops);
* anything else raises :class:`Unpaddable`, naming the op: the call is then recorded again at its true
  shapes and the step stops padding (``stats.padding_stopped`` says which op).

Since each masking is an op recorded on the tape like any other, the backward pass differentiates it:
cotangents of padded positions are exactly zero, so parameter gradients (sums over rows) get nothing
from them, and every gradient and optimizer state equals the unpadded step's up to float rounding.
Values the step reads (``.item()`` of a padded value), keeps (a padded value stored on a module) or draws
at random over a padded shape stop padding too. The backward of the recorded graph is not analysed: its
rules only ever multiply those zero cotangents (pad values are finite), so it is exact as it is.

Sizes, not values, are what Python sees: a step that computes with a padded size (``x.sum() /
x.shape[0]``) gets the bucket size. A Python number equal to a padded size passed to an elementwise op
stops padding; a creation op (``zeros``, ``arange``) whose shape holds a padded size is masked along that
dim, as if it were padded data (so buckets avoid the sizes of the step's other inputs, see
``compile.bucketing``).
"""
from __future__ import annotations

import functools
import threading

import jax
import numpy as np

from .._tensor import Tensor, _make
from ..ops.dispatch import Sym

_state = threading.local()


class Unpaddable(BaseException):
    """Raised while recording a padded call where padding could change a result (a BaseException: a step's
    own ``except Exception`` must not swallow it)."""

    def __init__(self, op: str, why: str) -> None:
        super().__init__(f"{op}: {why}")
        self.op = op
        self.why = why


# ---------------------------------------------------------------- the call being padded
class call:
    """Context: the call about to be recorded pads ``padded`` [(tensor, its padded dims)] with padded sizes
    ``sizes`` {padded size: true size}; :func:`start` (a Capture entering) picks it up."""

    def __init__(self, padded: list, sizes: dict) -> None:
        self.padded, self.sizes = padded, sizes

    def __enter__(self):
        self.prev = getattr(_state, "call", None), getattr(_state, "sizes", None)
        _state.call = self
        _state.sizes = self.sizes   # (kept while the call runs: :class:`SizeMask` reads it)
        return self

    def __exit__(self, *exc) -> None:
        _state.call, _state.sizes = self.prev


def current_sizes() -> dict | None:
    """{padded size: true size} of the padded call running on this thread (None: no padded call)."""
    return getattr(_state, "sizes", None)


def start(cap):
    """The :class:`Padding` of a Capture entering on this thread, or None when the call pads nothing."""
    c = getattr(_state, "call", None)
    if c is None or not c.padded:
        return None
    _state.call = None   # one capture per padded call (a graph break's capture is the same one)
    return Padding(cap, c)


@functools.lru_cache(maxsize=512)
def _mask_array(shape: tuple, trues: tuple):
    """A bool array of ``shape``, True where each dim's index is below its entry of ``trues`` (None: all)."""
    m = np.ones(shape, bool)
    for d, n in enumerate(trues):
        if n is not None:
            idx = [1] * len(shape)
            idx[d] = shape[d]
            m = m & (np.arange(shape[d]) < n).reshape(idx)
    return jax.device_put(m)


class SizeMask:
    """The recipe of a mask tensor (its ``_remake``): the mask of a value of ``shape`` padded along ``dims``
    for the padded call running now, from that call's true sizes (:func:`current_sizes`). A replayed or
    speculative call finds its own masks through it (``compile.speculate.sources``), so the calls of one
    bucket share an executable without being recorded; two recordings' recipes are equal when they make the
    same mask of any call (``compile.replay`` compares them)."""

    __slots__ = ("mshape", "dims")
    per_call = True   # (its array differs between calls: replay asks the recipe again, it is no constant)

    def __init__(self, shape: tuple, dims) -> None:
        self.dims = tuple(sorted(dims))
        self.mshape = tuple(s if d in self.dims else 1 for d, s in enumerate(shape))

    def __call__(self):
        """The mask array of the current call; None where no padded call runs or a dim is not padded in it."""
        sizes = current_sizes()
        if sizes is None:
            return None
        trues = [None] * len(self.mshape)
        for d in self.dims:
            n = sizes.get(self.mshape[d])
            if n is None:
                return None
            trues[d] = n
        return _mask_array(self.mshape, tuple(trues))

    def tensor(self):
        """A tensor of this call's mask that knows its recipe."""
        t = _make(self())
        t._remake = self
        return t

    def __eq__(self, other) -> bool:
        return type(other) is SizeMask and other.mshape == self.mshape and other.dims == self.dims

    def __hash__(self) -> int:
        return hash((self.mshape, self.dims))


class Gates:
    """What a padded recording tells ``compile.rolling`` about its loops over a padded length, so a rolled
    loop can skip the iterations that are padding: ``positional`` {var of a padded value read one position
    at a time (``e[:, t]``, ``unbind``): (var of its mask, its rank)}, ``flagged`` {var taken at positions of a
    padded dim or made from such values: the furthest of those positions; it is padding at run time where
    that position is} and :meth:`backward`."""

    __slots__ = ("positional", "flagged", "spans")

    def __init__(self, positional: dict, flagged: set, spans: list) -> None:
        self.positional, self.flagged, self.spans = positional, flagged, spans

    def backward(self, v: int) -> bool:
        """Whether the tape's backward recorded var ``v`` (its values are linear in the cotangents)."""
        return any(lo <= v < hi for lo, hi in self.spans)


class Padding:
    """The masks of one padded recording (see the module docstring); installed as the first step of
    ``Capture.hook``."""

    def __init__(self, cap, c: call) -> None:
        from ..autograd import engine
        self.cap = cap
        self.call = c
        c.padding = self
        self.sizes = dict(c.sizes)             # padded size -> true size
        self.masks: dict = {}                  # var -> mask Tensor
        self.spans: set = set()                # vars whose mask spans a padded dim (``let_go``)
        self.args: set = set()                 # ids of the padded argument tensors (kept by the call)
        self.busy = False
        self.created: set = set()              # padded sizes that creation ops' shapes held
        self.padded_vars: set = set()
        # values taken at one position of a padded dim (``x[:, t]``, ``unbind``): their mask has no padded
        # dim left, only a flag that is False at run time where that position is padding. They may flow
        # through ops and be stacked back into a padded dim; reduced to a result, returned, or
        # differentiated from, they would let padding into a real value, so those stop padding
        # (var -> the furthest position it was made from)
        self.flagged: dict = {}
        # for ``compile.rolling``'s gated loops: var of a padded value read at single positions of a dim ->
        # var of its mask; and the var spans (lo, hi) of the values the tape's backward recorded
        self.positional: dict = {}
        self.backward_spans: list = []
        for t, dims in c.padded:
            v = t._value if type(t._value) is Sym else cap._adopt(t)
            self.masks[v.idx] = SizeMask(tuple(t.shape), dims).tensor()
            self.padded_vars.add(v.idx)
            self.args.add(id(t))
        self._engine = engine
        self._saved = engine.run_backward
        orig = self._saved

        def run_backward(*a, **k):   # the tape's rules run unanalysed (see the module docstring)
            self._refuse_flagged(a[0] if a else k.get("outputs"), "backward() from a value")
            busy, self.busy = self.busy, True
            lo = cap.nvars
            try:
                return orig(*a, **k)
            finally:
                self.busy = busy
                self.backward_spans.append((lo, cap.nvars))
        engine.run_backward = run_backward

    def stop(self) -> None:
        self._engine.run_backward = self._saved

    def let_go(self) -> None:
        """Once the step has returned: drop the mask tensors (keeping which vars had one), so that only
        the step's own tensors stay alive to become the executable's outputs (a mask per position of a
        loop's length made ~130 of them)."""
        # (which of them may still span a padded dim: a mask with no dim of a padded size is all real, as a
        # reduction over the padded dim leaves it)
        self.spans = {k for k, m in self.masks.items()
                      if m is not None and any(n != 1 and n in self.sizes for n in m.shape)}
        self.masks = dict.fromkeys(self.masks)

    # ------------------------------------------------------------ recording
    def mask(self, a):
        if isinstance(a, Tensor):
            v = a._value
            if type(v) is Sym:
                return self.masks.get(v.idx)
        return None

    def hook(self, op, args, params):
        """Record ``op`` with its padding rule where an input is masked (NotImplemented: record as is)."""
        if self.busy:
            return NotImplemented
        masks, some = [], False
        for a in args:
            if isinstance(a, Tensor) and a._base is not None:
                a._sync()
            m = self.mask(a)
            masks.append(m)
            some = some or m is not None
        reach = self._reach(args)
        if op.name in _UNFLAG and reach is not None:
            self._check_order(op, args, params, masks)
        if not some and op.name not in _UNFLAG and reach is not None:
            self.busy = True   # (an unmasked value made from a flagged one, a loss: flagged in turn)
            try:
                out = _run(op, list(args), params)
            finally:
                self.busy = False
            self._flag(out, reach)
            return out
        if not some:
            make = CREATION.get(op.name)
            if make is None:
                return NotImplemented
            padded = [d for d, s in enumerate(make(params)) if s in self.sizes]
            if not padded:
                return NotImplemented
            rule = _created(padded)
        else:
            rule = RULES.get(op.name)
            if rule is None:
                raise Unpaddable(op.name, UNPADDABLE.get(op.name, "no padding rule declared for this op"))
        self.busy = True
        try:
            out, omasks = rule(self, op, list(args), params, masks)
        finally:
            self.busy = False
        at = _takes_positions(op.name, params, args[0] if args else None, masks[0] if masks else None)
        if at is not None:
            if type(args[0]._value) is Sym and type(masks[0]._value) is Sym:
                self.positional[args[0]._value.idx] = (masks[0]._value.idx, args[0].dim())
            reach = at if reach is None else [max(a, reach) for a in at] if type(at) is list else max(at, reach)
        for o, m in zip(out if isinstance(out, tuple) else (out,), omasks):
            if m is not None and isinstance(o, Tensor) and type(o._value) is Sym:
                self.masks[o._value.idx] = m
        if reach is not None and op.name not in _UNFLAG or at is not None:
            self._flag(out, reach)
        return out

    def _reach(self, args):
        """The furthest position of a padded dim the flagged ones among ``args`` were made from (None: none)."""
        r = None
        for a in args:
            if isinstance(a, Tensor) and type(a._value) is Sym:
                t = self.flagged.get(a._value.idx)
                if t is not None and (r is None or t > r):
                    r = t
        return r

    def _check_order(self, op, args, params, masks) -> None:
        """Values taken at positions of a padded dim and put back along a dim (``stack(outs, 1)``): exact when
        each one was made from positions up to its own place only (a loop over the positions in order), so
        that it is padding exactly where its place is; and when they carry masks (an unmasked one, a loss
        per position, would be stacked as real data)."""
        off = 0
        for a, m in zip(args, masks):
            if not isinstance(a, Tensor):
                continue
            t = self.flagged.get(a._value.idx) if type(a._value) is Sym else None
            if t is not None and m is None:
                raise Unpaddable(op.name, "values taken at positions of a padded dim are put back along a dim "
                                          "without their masks (a per-position loss or reduction)")
            if t is not None and t > off:
                raise Unpaddable(op.name, f"the value put at place {off} was made from position {t} of a padded "
                                          "dim (a loop running backwards over a padded length): where the true "
                                          "length ends, it would hold padding")
            d = params.get("dim", 0) % max(a.dim(), 1) if op.name == "cat" else None
            off += 1 if d is None else a.shape[d]

    def gates(self):
        """What ``compile.rolling`` needs to skip a rolled loop's padded iterations (see :class:`Gates`)."""
        return Gates(self.positional, self.flagged, self.backward_spans)

    def _flag(self, out, reach) -> None:
        """Flag the results ``out``, made from positions up to ``reach`` (a list: each result's own)."""
        for i, o in enumerate(out if isinstance(out, tuple) else (out,)):
            if isinstance(o, Tensor) and type(o._value) is Sym:
                self.flagged[o._value.idx] = reach[i] if type(reach) is list else reach

    def _is_flagged(self, a) -> bool:
        return isinstance(a, Tensor) and type(a._value) is Sym and a._value.idx in self.flagged

    def _refuse_flagged(self, tensors, what: str) -> None:
        for t in jax.tree_util.tree_leaves(tensors, is_leaf=lambda a: isinstance(a, Tensor)):
            if self._is_flagged(t):
                raise Unpaddable(what, "taken at one position of a padded dim (e.g. the state after a Python "
                                       "loop over a padded length): at run time it may be padding")

    def read(self, s) -> None:
        """A graph break reads value ``s``: not a padded one."""
        if s.idx in self.masks:
            raise Unpaddable("a graph break", "the step reads a padded value (.item(), print, numpy)")

    def sample(self, shape) -> None:
        """A random draw of ``shape``: over a padded size it would draw other numbers than eagerly."""
        if any(s in self.sizes for s in shape):
            raise Unpaddable("random sampling", "a draw over a padded size would not match the unpadded step")

    def wrapped(self, fn, args, params) -> None:
        """A value recorded outside the registry (``Capture._wrap``): random draws, view chains re-read
        after a write through a view, scatters into a view's base."""
        if "shape" in params and getattr(fn, "__name__", "") == "_sample":
            self.sample(tuple(params["shape"]))
        for a in args:
            if type(a) is Sym and a.idx in self.masks:
                raise Unpaddable(getattr(fn, "__name__", "a view"), "a write through a view of a padded value")

    def other_sizes(self) -> set:
        """The sizes of the dims of the step's inputs recorded so far, but the padded arguments' (and masks')."""
        return {s for v, (shape, dt) in zip(self.cap.in_vars, self.cap.in_avals)
                if v not in self.padded_vars and dt != np.bool_ for s in shape}

    def finish(self, plan, result) -> None:
        """After recording: no tensor the step leaves alive holds a padded value, but its padded arguments
        and what it returns (sliced back to the true sizes)."""
        ok = set(self.args)
        nodes, seen = [], set()
        for leaf in jax.tree_util.tree_leaves(result, is_leaf=lambda a: isinstance(a, Tensor)):
            if isinstance(leaf, Tensor):
                ok.add(id(leaf))
                if leaf.grad_fn is not None:
                    nodes.append(leaf.grad_fn)
        while nodes:   # values the graph of a returned tensor saved: they die with it (results come back detached)
            n = nodes.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            for sv in getattr(n, "saved", ()) or ():
                if isinstance(sv, tuple) and sv and isinstance(sv[0], Tensor):
                    ok.add(id(sv[0]))
            for e in getattr(n, "edges", ()) or ():
                if e is not None and e[1] >= 0:
                    nodes.append(e[0])
        other = self.other_sizes()
        for s in self.created & other:
            raise Unpaddable("a creation op", f"its size {s} is both a padded size and a dim of another input "
                                              "of the step (which of the two it stands for is unknown)")
        self._refuse_flagged(result, "the step's result")
        for obj, var, kind in plan.targets:
            if kind != "g" and var in self.spans and id(obj) not in ok:
                raise Unpaddable("the step's result", "a padded value stays alive in a tensor after the step "
                                                      f"(shape {tuple(obj.shape)})")


# ---------------------------------------------------------------- positions taken from a padded dim
_UNFLAG = frozenset({"stack", "cat"})   # a flagged value put back along a dim: padded along it again


def _takes_positions(name, params, x, m):
    """Which position op ``name`` keeps of a dim along which ``x``'s mask ``m`` varies (``unbind``: a list, one
    per result; an int or a one-long slice in basic indexing; advanced indexing: the last position, as any
    may be chosen), or None where it keeps no single position of such a dim. Conservative: a dim whose mask
    was broadcast to the value's shape counts as padded."""
    if m is None or not isinstance(x, Tensor) or name not in ("unbind", "slice", "index"):
        return None
    nd = x.dim()
    ms = tuple(_rank(m, nd).shape)

    def varies(d):
        return 0 <= d < nd and ms[d] != 1
    if name == "unbind":
        d = params.get("dim", 0) % max(nd, 1)
        return list(range(x.shape[d])) if varies(d) else None
    if name == "index":
        at = [x.shape[d] - 1 for d in params.get("dims", ()) if varies(d)]
        return max(at) if at else None
    basic = tuple(params.get("basic", ()))
    used = sum(1 for b in basic if b is not None and b is not Ellipsis)
    d, at = 0, None
    for b in basic:
        if b is None:            # a new axis
            continue
        if b is Ellipsis:
            d += nd - used
            continue
        if isinstance(b, tuple):
            r = range(*slice(*(list(b) + [None] * 3)[:3]).indices(x.shape[d])) if d < nd else range(0)
            if len(r) == 1 and varies(d):
                at = max(r[0], at or 0)
        elif isinstance(b, int) and varies(d):
            at = max(b % x.shape[d], at or 0)
        d += 1
    return at


# ---------------------------------------------------------------- rule helpers
def _run(op, args, params):
    from ..ops.registry import apply
    return apply(op, *args, **params)


def _rank(m, nd: int):
    """Mask ``m`` with leading size-1 dims up to rank ``nd`` (right-aligned broadcasting, as the values)."""
    k = nd - m.dim()
    return m.reshape((1,) * k + tuple(m.shape)) if k > 0 else m


def _and(masks, nd: int):
    out = None
    for m in masks:
        if m is None:
            continue
        m = _rank(m, nd)
        out = m if out is None else out & m
    return out


def _full(m, shape):
    """``m`` broadcast to the value's ``shape`` (a copy of the bools; masks are tiny next to the data)."""
    shape = tuple(shape)
    m = _rank(m, len(shape))
    return m if tuple(m.shape) == shape else m.expand(shape)


def _fill(x, live, value):
    """``x`` with ``value`` (cast to x's dtype) where ``live`` is False."""
    from ..ops.elementwise import where
    dt = np.dtype(x._v.dtype)
    if dt == np.bool_:
        value = bool(value)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        value = int(info.min if value == -np.inf else info.max if value == np.inf else value)
    return where(live, x, value)


def _live(m, shape, dims):
    """Where a reduction over ``dims`` reads ``x`` (shape ``shape``) itself: real positions, and every
    position of a row with none (such a row is padding itself; its result stays finite and is masked)."""
    mf = _full(m, shape)
    return mf | ~mf.any(dims, keepdim=True) if dims else mf


def _dims(params, nd):
    d = params.get("dims", params.get("axis", params.get("dim")))
    if d is None:
        return tuple(range(nd))
    d = (d,) if isinstance(d, int) else tuple(d)
    return tuple(sorted(x % nd for x in d)) if nd else ()


def _padded_along(m, dims) -> bool:
    return any(m.shape[d] != 1 for d in dims if d < m.dim())


def _reduced_mask(m, nd, dims, keepdim):
    m = _rank(m, nd)
    return m.any(dims, keepdim=keepdim) if dims else m


def _numbers_check(op, args, sizes):
    for a in args:
        if type(a) in (int, float) and a in sizes:
            raise Unpaddable(op.name, f"the Python number {a} equals a padded size: the step computes with the "
                                      "size of a padded dim")


# ---------------------------------------------------------------- rules
def elementwise(pd, op, args, params, masks):
    _numbers_check(op, args, pd.sizes)
    out = _run(op, args, params)
    outs = out if isinstance(out, tuple) else (out,)
    m = _and(masks, outs[0].dim())
    return out, [m] * len(outs)


def _structural(data):
    """The output's mask is the op applied to the inputs' masks (``data``: which tensor arguments carry
    data, "first" or "all"; others, index tensors, are passed to the mask's op as they are)."""
    def rule(pd, op, args, params, masks):
        from ..ops.creation import ones
        moved = _MOVES.get(op.name)
        if moved is not None:
            for a, m in zip(args, masks):
                if isinstance(a, Tensor) and m is not None and _padded_along(_rank(m, a.dim()), moved(params, a.dim())):
                    raise Unpaddable(op.name, "it moves real positions past padded ones along a padded dim")
        if any(m is not None for m in masks[1:]) and data == "first":
            raise Unpaddable(op.name, "indices drawn from a padded value")
        out = _run(op, args, params)
        margs = list(args)
        for i, (a, m) in enumerate(zip(args, masks)):
            if not isinstance(a, Tensor) or (data == "first" and i > 0):
                continue
            margs[i] = _full(m, a.shape) if m is not None else ones(tuple(a.shape), dtype=bool)
        mp = dict(params)
        if "dtype" in mp:
            mp["dtype"] = np.dtype(bool)
        om = _run(op, margs, mp)
        oms = om if isinstance(om, tuple) else (om,)
        return out, [o if o._v.dtype == np.bool_ else o != 0 for o in oms]
    rule.structural = True
    return rule


def _dims_of(key):
    def dims(params, nd):
        d = params.get(key)
        if d is None:
            return tuple(range(nd))
        return tuple(x % nd for x in ((d,) if isinstance(d, int) else d))
    return dims


# ops that would leave a padded dim's real positions after padded ones (the dims they do it along): a value
# returned is sliced back to its first positions, so these stop padding
_MOVES = {
    "flip": _dims_of("dims"), "roll": _dims_of("dims"), "cat": _dims_of("dim"),
    "repeat": lambda p, nd: tuple(d for d, r in enumerate(p["reps"][-nd:]) if r != 1),
}


def _reduction(fill=None, index=False):
    """A reduction over ``dims``/``axis``: over a padded dim its input has ``fill`` at padded positions.
    ``index``: it returns positions (of the padded layout, which a merged padded dim reorders): exact only
    over dims that are not padded."""
    def rule(pd, op, args, params, masks):
        x, m = args[0], masks[0]
        nd = x.dim()
        dims = _dims(params, nd)
        keep = params.get("keepdim", False)
        out = None
        if _padded_along(_rank(m, nd), dims):
            if index:
                raise Unpaddable(op.name, "positions along a padded dim")
            f = fill(params) if callable(fill) else fill
            out = _run(op, [_fill(x, _live(m, x.shape, dims), f)] + args[1:], params)
        else:
            out = _run(op, args, params)
        om = _reduced_mask(m, nd, dims, keep)
        return out, [om] * (len(out) if isinstance(out, tuple) else 1)
    return rule


def _norm_fill(params):
    p = params.get("p", 2)
    if not (isinstance(p, (int, float)) and p > 0):
        raise Unpaddable("vector_norm", f"a p={p} norm over a padded dim")
    return 0


def _over_real(body):
    """A reduction rule whose value over a padded dim ``body(op, x, params, dims, keep, live)`` computes from
    the real positions ``live`` (unpadded along ``dims``: the op as it is)."""
    def rule(pd, op, args, params, masks):
        x, m = args[0], masks[0]
        nd = x.dim()
        dims = _dims(params, nd)
        keep = params.get("keepdim", False)
        om = _reduced_mask(m, nd, dims, keep)
        if not _padded_along(_rank(m, nd), dims):
            return _run(op, args, params), [om]
        return body(op, x, params, dims, keep, _live(m, x.shape, dims)), [om]
    return rule


@_over_real
def _mean(op, x, params, dims, keep, live):
    out = _run(op, [_fill(x, live, 0)], params)
    total = int(np.prod([x.shape[d] for d in dims]))
    return out * (total / live.to(out.dtype).sum(dims, keepdim=keep))


@_over_real
def _var(op, x, params, dims, keep, live):
    from ..ops.elementwise import where
    count = live.to(x.dtype).sum(dims, keepdim=True)
    mean = where(live, x, 0).sum(dims, keepdim=True) / count
    d = where(live, x - mean, 0)
    out = (d * d).sum(dims, keepdim=True) / (count - params.get("correction", 1))
    return out if keep else out.squeeze(dims)


def _softmax(log):
    def rule(pd, op, args, params, masks):
        x, m = args[0], masks[0]
        nd = x.dim()
        d = params["dim"] % nd
        om = _rank(m, nd)
        if not _padded_along(om, (d,)):
            return _run(op, args, params), [om]
        live = _live(m, x.shape, (d,))
        y = _run(op, [_fill(x, live, -np.inf)], params)
        return (_fill(y, live, 0) if log else y), [om]
    return rule


def _matmul(pd, op, args, params, masks):
    a, b = args
    ma, mb = masks
    if a.dim() < 2 or b.dim() < 2:
        raise Unpaddable(op.name, "a vector operand")
    ma = _rank(ma, a.dim()) if ma is not None else None
    mb = _rank(mb, b.dim()) if mb is not None else None
    if (ma is not None and ma.shape[-1] != 1) or (mb is not None and mb.shape[-2] != 1):   # over a padded dim
        if ma is not None:
            a = _fill(a, _full(ma, a.shape), 0)
        if mb is not None:
            b = _fill(b, _full(mb, b.shape), 0)
    out = _run(op, [a, b], params)
    ra = ma.any(-1, keepdim=True) if ma is not None else None
    rb = mb.any(-2, keepdim=True) if mb is not None else None
    return out, [_and([ra, rb], out.dim())]


def _rows(ndata: int):
    """Row-wise ops (``linear``, RNN cells; their first ``ndata`` arguments data, the rest weights, which must
    not be padded): the output's rows are real where the inputs' rows are. A mask that varies along the
    features (a padded value's mask kept at full shape) is reduced to its rows, and the masked features are
    zeroed, so whatever they hold adds nothing to the contraction."""
    def rule(pd, op, args, params, masks):
        if any(m is not None for m in masks[ndata:]):
            raise Unpaddable(op.name, "padded weights")
        rows = []
        args = list(args)
        for i in range(ndata):
            a, m = args[i], masks[i]
            if m is None:
                continue
            if a.dim() < 2:
                raise Unpaddable(op.name, "a padded vector input")
            m = _rank(m, a.dim())
            if m.shape[-1] != 1:
                args[i] = _fill(a, _full(m, a.shape), 0)
                m = m.any(-1, keepdim=True)
            rows.append(m)
        out = _run(op, args, params)
        outs = out if isinstance(out, tuple) else (out,)
        m = _and(rows, outs[0].dim())
        return out, [m] * len(outs)
    return rule


def _embedding(pd, op, args, params, masks):
    if masks[0] is not None:
        raise Unpaddable(op.name, "a padded embedding table")
    out = _run(op, args, params)
    return out, [_rank(masks[1], args[1].dim()).unsqueeze(-1)]


def _one_hot(pd, op, args, params, masks):
    out = _run(op, args, params)
    return out, [_rank(masks[0], args[0].dim()).unsqueeze(-1)]


def _nll(pd, op, args, params, masks):
    logp, target = args
    ml, mt = masks
    # (the classes are the model's, never padded: a mask along them is its rows' kept at full shape)
    rows = _and([_rank(ml, 2).any(-1) if ml is not None else None, mt], 1)
    if params["reduction"] == "none":
        return _run(op, args, params), [rows]
    loss = _run(op, args, dict(params, reduction="none"))
    rows = _full(rows, loss.shape)
    total = _fill(loss, rows, 0).sum()
    if params["reduction"] == "sum":
        return total, [None]
    count = (rows & (target != params["ignore_index"])).to(loss.dtype).sum()
    return total / count, [None]


def _scan(pd, op, args, params, masks):
    lstm = op.name == "lstm_scan"
    nstate = 2 if lstm else 1
    if any(m is not None for m in masks[1 + nstate:1 + nstate + 2]):
        raise Unpaddable(op.name, "padded weights")
    rows = [_rank(m, a.dim()).any(-1, keepdim=True) if m is not None else None
            for a, m in zip(args[:1 + nstate], masks[:1 + nstate])]
    mg = rows[0]                                             # (T, B, 1)
    if mg is not None and mg.shape[0] != 1 and not params["has_mask"]:
        raise Unpaddable(op.name, "a padded length without the layer's step mask")
    out = _run(op, args, params)
    batch = _and([mg.any(0) if mg is not None else None] + rows[1:], 2)       # (B, 1)
    seq = _and([mg, batch.unsqueeze(0) if batch is not None else None], 3)   # (T, B, 1)
    if lstm:   # ys, h_n, c_n, cs, ghs
        return out, [seq, batch, batch, seq, seq]
    return out, [seq, batch, seq]


def _created(padded):
    def rule(pd, op, args, params, masks):
        out = _run(op, args, params)
        shape = tuple(out.shape)
        pd.created.update(shape[d] for d in padded)
        return out, [SizeMask(shape, padded).tensor()]
    return rule


CREATION = {   # op -> the shape it makes, from its params
    "full": lambda p: tuple(p["shape"]),
    "arange": lambda p: (p["n"],),
}

_ELEMENTWISE = """abs acos acosh angle asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_not
bitwise_or bitwise_right_shift bitwise_xor ceil clamp clone complex conj conj_physical copysign cos cosh digamma
div div_trunc entr eq erf erfc erfcx erfinv exp exp2 expm1 fill fill_like floor floor_divide fmax fmin fmod frac ge gt
hypot i0 i0e i1 i1e imag isclose isfinite isinf isnan le leaky_relu lgamma log log10 log1p log2 log_ndtr logaddexp
logical_and logical_not logical_or logical_xor logit lt maximum minimum modified_bessel_i0 modified_bessel_i1 mul
nan_to_num ndtr ndtri ne neg polygamma pow real reciprocal relu remainder round rsqrt sigmoid sign signbit sin
sinc sinh special_gammainc special_gammaincc special_xlog1py special_zeta spherical_bessel_j0 sqrt square sub tan
tanh to_dtype trunc where xlogy add gcd lcm nextafter""".split()

RULES: dict = {name: elementwise for name in _ELEMENTWISE}
RULES.update({name: _structural("first") for name in
              "reshape permute expand slice index flip roll repeat diagonal unbind".split()})
RULES.update({name: _structural("all") for name in ("cat", "stack")})
RULES.update({
    "sum": _reduction(0), "prod": _reduction(1), "amax": _reduction(-np.inf), "amin": _reduction(np.inf),
    "logsumexp": _reduction(-np.inf), "vector_norm": _reduction(_norm_fill), "any": _reduction(False),
    "all": _reduction(True), "count_nonzero": _reduction(0),
    "argmax": _reduction(index=True), "argmin": _reduction(index=True),
    "max_dim": _reduction(index=True), "min_dim": _reduction(index=True),
    "cumsum": _reduction(0), "cumprod": _reduction(1), "logcumsumexp": _reduction(-np.inf),
    "mean": _mean, "var": _var, "softmax": _softmax(False), "log_softmax": _softmax(True),
    "matmul": _matmul, "linear": _rows(1), "linear_bias": _rows(1), "rnn_cell": _rows(2), "lstm_cell": _rows(3),
    "embedding": _embedding, "one_hot": _one_hot, "nll_loss_index": _nll,
    "rnn_scan": _scan, "lstm_scan": _scan,
})


def _cumulative_mask(rule):
    """Cumulative ops keep the dim: the output's mask is the input's."""
    def wrapped(pd, op, args, params, masks):
        out, _ = rule(pd, op, args, params, masks)
        return out, [_rank(masks[0], args[0].dim())]
    return wrapped


for _n in ("cumsum", "cumprod", "logcumsumexp"):
    RULES[_n] = _cumulative_mask(RULES[_n])

# Ops declared unpaddable: a padded input stops padding (the step then runs at its true shapes).
_WHY = {
    "the optimizer updates parameters and their state, which are never padded":
        "adadelta_update adagrad_update adam_update adamax_update nadam_update radam_update rmsprop_update "
        "sgd_momentum_update",
    "a backward-only op (the tape's rules run unanalysed: their cotangents at padded positions are zero)":
        "adaptive_max_pool_backward batch_norm_backward batch_norm_backward_backward col2im_backward "
        "convolution_input_grad convolution_weight_grad ctc_loss_backward embedding_dense_backward "
        "gather_backward im2col_backward index_backward linear_input_grad linear_weight_grad "
        "lstm_cell_backward lstm_cell_backward_backward lstm_scan_backward lstm_scan_backward_backward "
        "max_pool_backward max_unpool_backward nll_loss_index_backward nuclear_norm_grad "
        "nuclear_norm_grad_backward pad_backward resample_backward rnn_cell_backward "
        "rnn_cell_backward_backward rnn_scan_backward rnn_scan_backward_backward unfold_dim_backward "
        "repeat_interleave_sum sum_to_shape prod_others adaptive_max_pool_jvp col2im_jvp im2col_jvp max_pool_jvp pad_jvp "
        "resample_jvp",
    "linear algebra mixes every row with every other (a padded row changes the result)":
        "linalg_cholesky_ex linalg_det linalg_eigh linalg_inv_ex linalg_lu_factor_ex linalg_matrix_exp "
        "linalg_pinv linalg_qr linalg_slogdet linalg_solve_ex linalg_solve_triangular linalg_svd lu_permutation "
        "nuclear_norm einsum eye tril triu diag_embed",
    "sorting and selection by rank over a padded dim would rank padding too":
        "argsort kthvalue median median_dim mode nanmedian nanmedian_dim searchsorted cummax cummin",
    "spectral transforms mix every position of a padded dim":
        "fft_c2c fft_c2r fft_r2c fft_resize fft_twice_mirrored",
    "windows and pooling read neighbours, which at a padded edge are padding (no masking rule yet)":
        "convolution convolution_bias im2col col2im max_pool max_pool_indices adaptive_max_pool "
        "adaptive_max_pool_indices max_unpool pad resample unfold_dim",
    "writes and scatters into a padded value (no masking rule yet)":
        "index_put scatter scatter_add scatter_along scatter_reduce view_scatter gather gather_along "
        "repeat_interleave",
    "a fused op computing statistics over its whole input (no masking rule yet)":
        "batch_norm batch_norm_running_stats binary_cross_entropy ctc_loss median",
    "creation ops take no padded input": "linspace",
    "no padding rule yet": "shard view_as_complex view_as_real",
}
UNPADDABLE: dict = {name: why for why, names in _WHY.items() for name in names.split()}
