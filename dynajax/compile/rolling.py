"""Loop rolling for ``dynajax.compile``: a run of structurally identical pieces of a recorded step
(an RNN's time steps, their backward, a stack of identical layers, the optimizer's update of their
parameters) becomes one ``jax.lax.scan`` instead of being unrolled.

The recording is a flat list of eqns. A *run* is ``k`` consecutive segments of ``p`` eqns whose ops,
static params and input shapes repeat (found by comparing each eqn's signature with the one ``p``
later), and whose dataflow repeats too. Each input of a segment's eqn is then

* internal: a value computed earlier in the same segment (the same position in every segment);
* carry: in segment 0 a value from before the run, in segment m the value the same position of
  segment m-1 computed (the hidden state, a gradient accumulator);
* constant: the same value from before the run in every segment (a shared weight);
* per-iteration: a different value from before the run in every segment (the step's input, a
  layer's own weight, an activation saved by the forward loop), stacked into the scan's ``xs``.

Values of the run used after it are the final carries or rows of stacked per-iteration outputs.
Stacks whose rows are consecutive slices of one array (``x.unbind(0)``) or consecutive rows of an
earlier loop's outputs (the backward loop reading the forward loop's activations in reverse) are
taken from that array directly, so no per-step op is left in the graph.

XLA then compiles the body once, so compile time no longer grows with the trip count. Results are
those of the unrolled graph (the same ops in the same order).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..ops.index import _index_backward as _index_backward_op, _index_impl
from .capture import known_shapes

_index_backward = _index_backward_op.impl

MIN_TRIPS = 4      # shorter repetitions stay unrolled
MIN_EQNS = 24      # so do runs covering fewer eqns (a few repeated elementwise ops are not a loop)
WORK_BUDGET = 16   # rejected candidates may visit this many times the graph's eqns, then rolling stops
_FULL = (None, None, None)


class Loop:
    """A rolled run: ``k`` iterations of the ``p`` eqns starting at ``start``."""

    __slots__ = ("start", "p", "k", "body", "carry", "consts", "groups", "positions", "ys", "gate")

    def __repr__(self) -> str:
        return f"<rolled loop: {self.k} x {self.p} ops>"


def roll(eqns: list, keys: list, in_vars: list, in_avals: list, scalars: list, nvars: int, outs,
         gates=None) -> tuple:
    """The eqns with every rollable run replaced by a scan eqn; returns ``(eqns, nvars, loops)``. ``gates``
    (``compile.padding.Gates`` of a padded recording) lets loops over a padded length skip its padding."""
    sigs = _signatures(eqns, keys, in_vars, in_avals, scalars)
    if len(eqns) < MIN_TRIPS * 2:
        return eqns, nvars, []
    prod = {}
    for i, (_, _, _, ovars) in enumerate(eqns):
        for o, v in enumerate(ovars):
            prod[v] = (i, o)
    last_use = {}
    for i, (_, _, refs, _) in enumerate(eqns):
        for r in refs:
            if type(r) is int and r >= 0:
                last_use[r] = i
    live_out = set(outs)
    loops, taken = [], np.zeros(len(eqns), bool)
    budget = WORK_BUDGET * len(eqns)   # eqns visited by rejected candidates, at most
    for _, p, s, k in _candidates(sigs):
        for shift in range(min(p, 4)):  # a run found at a rotation its dataflow rejects: try the next few
            st, kk = s + shift, (k * p - shift) // p
            if kk < MIN_TRIPS or kk * p < MIN_EQNS or taken[st:st + kk * p].any() or budget <= 0:
                break
            lp = _verify(eqns, prod, last_use, live_out, st, p, kk)
            budget -= 0 if lp is not None else kk * p
            if lp is not None:
                taken[st:st + kk * p] = True
                loops.append(lp)
                break
    if not loops:
        return eqns, nvars, []
    loops.sort(key=lambda lp: lp.start)
    if gates is not None:
        _gate(eqns, loops, gates, live_out, prod)
    stacks = {i: dict(k[1]) for i, k in enumerate(keys) if getattr(k[0], "name", None) == "stack"}
    new, nvars = _emit(eqns, _unbound_slices(eqns, keys), stacks, loops, nvars)
    return _prune(new, outs), nvars, loops


# ---------------------------------------------------------------- finding runs
def _signatures(eqns, keys, in_vars, in_avals, scalars):
    """One int per eqn: equal for eqns with the same op, static params and input shapes/dtypes. An eqn
    whose output shapes were not looked up (the one-op backward, which records its own) and the eqns
    reading its outputs get a signature of their own: they are never part of a run."""
    av = dict(zip(in_vars, in_avals))
    ids: dict = {}
    out = []
    for i, ((fn, params, refs, ovars), (key_fn, pkey, _)) in enumerate(zip(eqns, keys)):
        a = tuple((av[r] if r >= 0 else type(scalars[-r - 1])) if type(r) is int else r for r in refs)
        hit = known_shapes(fn, params, pkey, a)
        if hit is None:
            for v in ovars:
                av[v] = ("unknown", v)
            out.append(ids.setdefault(("unknown", i), len(ids)))
            continue
        for v, sd in zip(ovars, hit[1]):
            av[v] = sd
        at = _position(fn, params)
        if at is not None:   # ``x[:, t]`` and its backward: the same op at any t (rolled with t per iteration)
            pkey = ("at", at[0], at[2])
        out.append(ids.setdefault((key_fn, pkey, a), len(ids)))
    return np.asarray(out, np.int64)


def _position(fn, params):
    """``(axis, t, in_shape)`` of an eqn reading (``x[:, :, t]``: a basic key of full slices and one int) or
    writing (its backward) one position of one axis, else None."""
    if fn is not _index_impl and fn is not _index_backward:
        return None
    basic, shape = params.get("basic", ()), params.get("in_shape")
    if params.get("dims") != () or not basic or shape is None or type(basic[-1]) is not int:
        return None
    if any(b != _FULL for b in basic[:-1]):
        return None
    axis = len(basic) - 1
    return axis, basic[-1] % shape[axis], tuple(shape)


def _candidates(sigs) -> list:
    """(eqns covered, period p, start, repetitions k) of every maximal periodic stretch, best first."""
    n = len(sigs)
    cands = []
    for p in range(1, n // MIN_TRIPS + 1):
        eq = sigs[:-p] == sigs[p:]
        if not eq.any():
            continue
        d = np.diff(np.concatenate(([0], eq.view(np.int8), [0])))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        k = (ends - starts + p) // p
        for s, kk in zip(starts[k >= MIN_TRIPS], k[k >= MIN_TRIPS]):
            if kk * p >= MIN_EQNS:
                cands.append((int(kk * p), p, int(s), int(kk)))
    cands.sort(key=lambda c: (-c[0], c[1]))
    return cands


def _verify(eqns, prod, last_use, live_out, s, p, k):
    """The :class:`Loop` of ``k`` segments of ``p`` eqns from ``s`` if their dataflow repeats, else None."""
    end = s + k * p
    carry: dict = {}      # (j, o) -> initial value (a ref from before the run)
    consts: dict = {}     # ref -> index
    groups: dict = {}     # tuple of k refs -> index
    positions: list = []  # per positional eqn whose position moves: its k positions
    body = []
    for j in range(p):
        fn, params, refs0, ovars = eqns[s + j]
        spec = []
        at = _position(fn, params)
        if at is not None:
            ts = [_position(eqns[s + m * p + j][0], eqns[s + m * p + j][1]) for m in range(k)]
            if any(t is None or t[0] != at[0] or t[2] != at[2] for t in ts):
                return None
            if any(t[1] != at[1] for t in ts):   # (its position: read after its inputs)
                fn, params = (_at, {"axis": at[0]}) if fn is _index_impl else (_at_backward,
                                                                              {"axis": at[0], "in_shape": at[2]})
                positions.append(tuple(t[1] for t in ts))
                at = len(positions) - 1
            else:
                at = None
        for a, r0 in enumerate(refs0):
            if type(r0) is not int:
                spec.append(("lit", r0[1]))
                continue
            rs = [eqns[s + m * p + j][2][a] for m in range(k)]
            kinds = [_where(prod, r, s, p, m) for m, r in enumerate(rs)]
            if kinds[0] is None:
                return None
            if kinds[0][0] == "in":
                if any(kd != kinds[0] for kd in kinds):
                    return None
                spec.append(("int", kinds[0][1]))
            elif all(kd == ("out",) for kd in kinds):
                if all(r == r0 for r in rs):
                    spec.append(("const", consts.setdefault(r0, len(consts))))
                else:
                    spec.append(("xs", groups.setdefault(tuple(rs), len(groups))))
            else:
                rel = kinds[1][1] if kinds[1] is not None and kinds[1][0] == "prev" else None
                if rel is None or any(kd != ("prev", rel) for kd in kinds[1:]):
                    return None
                if carry.setdefault(rel, r0) != r0:
                    return None
                spec.append(("carry", rel))
        if at is not None:
            spec.append(("pos", at))
        body.append((fn, params, tuple(spec), len(ovars)))
    ys = {}
    for m in range(k):
        for j in range(p):
            for o, v in enumerate(eqns[s + m * p + j][3]):
                if v in live_out or last_use.get(v, -1) >= end:
                    if m == k - 1 and (j, o) in carry:
                        continue
                    ys.setdefault((j, o), []).append((m, v))
    lp = Loop()
    lp.start, lp.p, lp.k, lp.body = s, p, k, body
    lp.carry = list(carry.items())
    lp.consts = list(consts)
    lp.groups = list(groups)
    lp.positions = positions
    lp.ys = list(ys.items())
    lp.gate = None
    return lp


def _where(prod, r, s, p, m):
    """Where ref ``r`` of segment ``m`` comes from: ("out",) before the run, ("in", rel) this segment,
    ("prev", rel) the previous one, None elsewhere."""
    if r < 0:
        return ("out",)
    e = prod.get(r)
    if e is None or e[0] < s:
        return ("out",)
    seg, j = divmod(e[0] - s, p)
    if seg == m:
        return ("in", (j, e[1]))
    if seg == m - 1:
        return ("prev", (j, e[1]))
    return None


# ---------------------------------------------------------------- skipping padded iterations
def _gate(eqns, loops, gates, live_out, prod) -> None:
    """Set ``lp.gate`` = (mask var, axis, rank, positions, gated body eqns) for each loop whose work may be
    skipped at the iterations where the padded dim it walks is padding. Exact: what a skipped iteration
    would have computed is never read at a real position.

    * A forward loop reading a padded value at one position per iteration (``e[:, t]``, an ``_at`` eqn): its
      eqns whose results ``compile.padding`` flagged (made from such a read: padding wherever the position
      is) are gated, if the others (the masks' bookkeeping) read none of their results. A skipped iteration
      carries their last values on and stacks zeros (finite, and read only where the masks say padding).
    * The backward of such a loop (recorded by the tape's backward, writing one position per iteration of
      a gradient of the same shape), all of it: the values of a backward are linear in the cotangents, and
      the cotangents of padding are zero, so such an iteration adds exactly zero to what it carries.

    A loop's iterations need not begin where a time step does (a run may be found at a rotation), so an
    iteration runs where its own position or a neighbouring iteration's is real."""
    made: dict = {}      # var a gated forward loop computed -> (mask var, axis, rank) of the dim it walks
    walks: dict = {}     # (axis, shape) of an ``_at`` read of a gated forward loop -> the same
    users: dict = {}
    for i, (_, _, refs, _) in enumerate(eqns):
        for r in refs:
            if type(r) is int and r >= 0:
                users.setdefault(r, []).append(i)
    for lp in loops:
        end = lp.start + lp.k * lp.p
        backward = all(gates.backward(v) for e in eqns[lp.start:end] for v in e[3])
        gated = tuple(range(lp.p)) if backward else _made_of_flagged(eqns, lp, gates.flagged)
        if not gated or not (backward or _leaving_flagged(eqns, lp, gated, gates, end, live_out, users)):
            continue
        src, pos = set(), [set() for _ in range(lp.k)]
        for j in gated:
            fn, params, spec, _ = lp.body[j]
            for kind, a in spec:
                if kind == "pos" and fn in (_at, _at_backward):
                    if fn is _at:
                        x = eqns[lp.start + j][2][0]
                        src.add(_source(gates, x, params["axis"]))
                    else:
                        src.add(walks.get((params["axis"], tuple(params["in_shape"]))))
                    for m in range(lp.k):
                        pos[m].add(lp.positions[a][m])
                elif kind == "xs":
                    for m, v in enumerate(lp.groups[a]):
                        r = gates.flagged.get(v)
                        if r is None:
                            continue
                        pos[m].add(r)
                        if v in made:
                            src.add(made[v])
                        else:   # a position of ``x.unbind(dim)``
                            i = prod.get(v, (-1,))[0]
                            src.add(_source(gates, eqns[i][2][0], eqns[i][1].get("dim", 0)) if i >= 0 else None)
        src.discard(None)   # (a value made before the loop: its position counts, its dim is the others')
        if len(src) != 1 or not all(pos):
            continue
        mask, axis, rank = src.pop()
        at = [sorted(set().union(*(pos[mm] for mm in (m - 1, m, m + 1) if 0 <= mm < lp.k))) for m in range(lp.k)]
        width = max(len(r) for r in at)
        lp.gate = (mask, axis, rank, tuple(tuple(r + r[:1] * (width - len(r))) for r in at), gated)
        if not backward:
            for e in eqns[lp.start:end]:
                made.update((v, (mask, axis, rank)) for v in e[3])
            for j, (fn, params, _, _) in enumerate(lp.body):
                if fn is _at:
                    walks[(params["axis"], tuple(eqns[lp.start + j][1]["in_shape"]))] = (mask, axis, rank)


def _source(gates, x, axis):
    """(mask var, axis, rank) of padded value ``x`` read at single positions along ``axis``, or None."""
    hit = gates.positional.get(x)
    if hit is None or type(axis) is not int:
        return None
    mask, rank = hit
    return mask, axis % rank, rank


def _made_of_flagged(eqns, lp, flagged) -> tuple:
    """The body eqns of ``lp`` with a flagged result in some iteration, or reading a flagged row or one made in
    the iteration or carried from the last (a padding rule's own ops: ``where`` of a row read at a position)."""
    out: set = set()
    changed = True
    while changed:   # (a carry may come from a later eqn of the body)
        changed = False
        for j, (_, _, spec, _) in enumerate(lp.body):
            if j in out:
                continue
            if any(kind in ("int", "carry") and a[0] in out or kind == "xs" and lp.groups[a][0] in flagged
                   for kind, a in spec) or any(
                    v in flagged for m in range(lp.k) for v in eqns[lp.start + m * lp.p + j][3]):
                out.add(j)
                changed = True
    return tuple(sorted(out))


def _leaving_flagged(eqns, lp, gated, gates, end, live_out, users) -> bool:
    """Whether every result of the ``gated`` eqns read outside its own iteration (carried on or read after
    the loop) is flagged, in every iteration, or read by the tape's backward only (a padding rule's own
    value saved for the backward: multiplied there by cotangents that are zero where it is padding)."""
    carried = {rel for rel, _ in lp.carry}
    for j in gated:
        for m in range(lp.k):
            for o, v in enumerate(eqns[lp.start + m * lp.p + j][3]):
                if (j, o) in carried or v in gates.flagged:
                    if (j, o) in carried and v not in gates.flagged:
                        return False
                    continue
                if v in live_out or not all(all(gates.backward(w) for w in eqns[i][3])
                                            for i in users.get(v, ()) if i >= end):
                    return False
    return True


def _live_rows(m, *, axis, rank, at):
    """Which iterations of a gated loop run: those with a real position among ``at[i]`` (its own position and
    its neighbours'), from the mask ``m`` of the padded value the loop walks along ``axis``."""
    m = jnp.reshape(m, (1,) * (rank - m.ndim) + tuple(m.shape))
    real = jnp.any(m, axis=tuple(d for d in range(rank) if d != axis))
    return jnp.any(real[np.asarray(at, np.int32)], axis=1)


# ---------------------------------------------------------------- emitting
def _emit(eqns, unbound, stacks, loops, nvars):
    """The eqn list with each loop's eqns replaced by (stacks of per-iteration inputs, where the loop does not
    read them in place, the scan eqn, rows of its stacked outputs that later eqns read); ``stacks``: position
    -> params of each ``stack`` op eqn, which reads slices of a scan output instead of its rows where it can."""
    rows: dict = {}    # var -> (stacked var, row, length, 0): a value of a rolled run, now a row of a scan output
    new, i, li = [], 0, 0
    while i < len(eqns):
        if li < len(loops) and loops[li].start == i:
            lp = loops[li]
            li += 1
            xs, views = [], []
            for g in lp.groups:   # (read in place where it can: ``_view``)
                view = _view(g, rows, unbound)
                if view is None:
                    var, nvars = _stacked(g, rows, unbound, new, nvars)
                    xs.append(var)
                else:
                    xs.extend(view[0])
                views.append(None if view is None else view[1])
            for ts in lp.positions:
                new.append((_ints, {"values": ts}, (), (nvars,)))
                xs.append(nvars)
                nvars += 1
            if lp.gate is not None:   # (last of the scan's xs: whether each iteration runs its gated eqns)
                mask, axis, rank, at, _ = lp.gate
                new.append((_live_rows, {"axis": axis, "rank": rank, "at": at}, (mask,), (nvars,)))
                xs.append(nvars)
                nvars += 1
            ys_vars = list(range(nvars, nvars + len(lp.ys)))
            nvars += len(lp.ys)
            carry_out = []
            last = lp.start + (lp.k - 1) * lp.p
            for (j, o), _ in lp.carry:
                carry_out.append(eqns[last + j][3][o])
            refs = tuple([init for _, init in lp.carry] + lp.consts + xs)
            fn = functools.partial(_run_loop, body=tuple(lp.body), carry=tuple(rel for rel, _ in lp.carry),
                                   ncarry=len(lp.carry), nconst=len(lp.consts), ys=tuple(rel for rel, _ in lp.ys),
                                   length=lp.k, ngroups=len(lp.groups),
                                   gated=lp.gate[4] if lp.gate is not None else None,
                                   walk=_walk(lp.gate[3]) if lp.gate is not None else 0,
                                   views=tuple(views) if any(v is not None for v in views) else None)
            fn.rolled = lp
            new.append((fn, {}, refs, tuple(carry_out + ys_vars)))
            for yv, (_, members) in zip(ys_vars, lp.ys):
                for m, v in members:
                    rows[v] = (yv, m, lp.k, 0)
                    new.append((_row, {"m": m}, (yv,), (v,)))  # pruned unless something reads it as a value
            i = lp.start + lp.k * lp.p
            continue
        if i in stacks and len(_runs(eqns[i][2], rows, unbound)) < len(eqns[i][2]):
            # ``stack`` of a loop's per-step results (or of a sequence's unbound pieces): slices of the array
            var, nvars = _stacked(eqns[i][2], rows, unbound, new, nvars)
            new.append((_restack, stacks[i], (var,), eqns[i][3]))
        else:
            new.append(eqns[i])
        i += 1
    return new, nvars


def _stacked(group, rows, unbound, new, nvars):
    """A var holding ``stack(group)``: slices of the arrays the rows come from where they are consecutive
    rows of one array (all of them: one slice; a run of them beside single values, such as a backward
    loop reading the forward's states and, at its last step, the initial state: the slices and those
    values joined), else a stack of the rows."""
    pieces = _runs(group, rows, unbound)
    if len(pieces) == len(group):
        new.append((_stack, {}, tuple(group), (nvars,)))
        return nvars, nvars + 1
    parts = []
    for what, n in pieces:
        if n:
            var, axis, start, step, _ = what
            new.append((_take, {"axis": axis, "start": start, "step": step, "length": n}, (var,), (nvars,)))
        else:
            new.append((_stack, {}, (what,), (nvars,)))
        parts.append(nvars)
        nvars += 1
    if len(parts) == 1:
        return parts[0], nvars
    new.append((_concat, {}, tuple(parts), (nvars,)))
    return nvars, nvars + 1


def _view(group, rows, unbound):
    """How a loop reads ``stack(group)`` in place, without making it (``_view_row``): ``(sources, pieces)`` where
    the group is made of runs of consecutive rows of arrays (a backward loop reads the forward's states in
    reverse and, at its last step, the initial state), each piece ``(n, axis, start, step)`` (a run of ``n``
    rows of its source) or ``(1, None, 0, 0)`` (a single value); None where it has no run (a stack of the rows).
    Stacking such a group cost a reversed copy of the forward's stacked states and a concatenation each."""
    pieces = _runs(group, rows, unbound)
    if len(pieces) == len(group):
        return None
    sources, shape = [], []
    for what, n in pieces:
        if n:
            var, axis, start, step, _ = what
            sources.append(var)
            shape.append((n, axis, start, step))
        else:
            sources.append(what)
            shape.append((1, None, 0, 0))
    return sources, tuple(shape)


def _view_row(sources, pieces, i):
    """Row ``i`` of the stack a ``_view`` describes: each piece's row at ``i`` (clamped into it), the one whose
    iterations hold ``i`` selected."""
    row, off = None, 0
    for src, (n, axis, start, step) in zip(sources, pieces):
        if axis is None:
            r = src
        else:
            r = jax.lax.dynamic_index_in_dim(src, start + step * jnp.clip(i - off, 0, n - 1), axis, keepdims=False)
        row = r if row is None else jnp.where(i >= off, r, row)
        off += n
    return row


def _runs(group, rows, unbound) -> list:
    """``group`` as pieces: ``(source, n)`` for a run of n >= 2 consecutive rows of one array (source as
    :func:`_longest_progression` gives it), ``(var, 0)`` for a single value."""
    pieces, i = [], 0
    while i < len(group):
        n, src = _longest_progression(group, i, rows, unbound)
        pieces.append((src, n) if n >= 2 else (group[i], 0))
        i += n if n >= 2 else 1
    return pieces


def _longest_progression(group, i, rows, unbound):
    """(n, (source var, axis, start, step ±1, size)) of the longest run ``group[i:i+n]`` of consecutive
    rows (or slices) ``start, start+step, ...`` of one array."""
    best = (0, None)
    for table in (rows, unbound):
        first = table.get(group[i])
        if first is None:
            continue
        var, m0, size, axis = first
        n, step, prev = 1, None, m0
        for r in group[i + 1:]:
            it = table.get(r)
            if it is None or it[0] != var or it[3] != axis or it[1] - prev not in ((1, -1) if step is None else (step,)):
                break
            step, prev, n = it[1] - prev, it[1], n + 1
        if n > best[0]:
            best = (n, (var, axis, m0, step or 1, size))
    return best


def _unbound_slices(eqns, keys) -> dict:
    """var -> (source var, index, size, axis) for each ``source.select(axis, index)`` (``unbind``'s pieces)."""
    found = {}
    for (_, params, refs, ovars), (key_fn, _, _) in zip(eqns, keys):
        if getattr(key_fn, "name", None) == "unbind" and type(refs[0]) is int:   # all pieces at once
            found.update((v, (refs[0], i, len(ovars), params["dim"])) for i, v in enumerate(ovars))
            continue
        if getattr(key_fn, "name", None) != "slice" or params.get("dims") != () or type(refs[0]) is not int:
            continue
        basic, shape = params.get("basic", ()), params.get("in_shape")
        if not basic or shape is None or type(basic[-1]) is not int or any(b != _FULL for b in basic[:-1]):
            continue
        axis = len(basic) - 1
        found[ovars[0]] = (refs[0], basic[-1], shape[axis], axis)
    return found


def _prune(eqns, outs):
    """Drop eqns whose results nothing reads."""
    live = set(outs)
    keep = []
    for e in reversed(eqns):
        if any(v in live for v in e[3]):
            keep.append(e)
            live.update(r for r in e[2] if type(r) is int and r >= 0)
    keep.reverse()
    return keep


# ---------------------------------------------------------------- running
def _walk(at) -> int:
    """1 where a gated loop's iterations walk its padded dim from its first position on (``at``: each
    iteration's positions, as ``_live_rows`` takes them), -1 from its last, 0 neither."""
    return (at[-1][0] > at[0][0]) - (at[-1][0] < at[0][0])


def _run_loop(*vals, body, carry, ncarry, nconst, ys, length, ngroups, gated=None, views=None, walk=0):
    """The scan of a rolled run: ``vals`` = initial carries, constants, stacked per-iteration inputs (and,
    where ``gated`` lists body eqns, last, whether each iteration runs them: where it does not, what they
    carry passes on unchanged and what they stack is zeros; the other eqns always run). ``views``: for
    each group of per-iteration inputs, None (one stacked array in ``vals``) or the pieces of a ``_view``
    (its sources in ``vals``, read in place at each iteration). ``walk``: see ``_live_span_loop``."""
    init, consts, xs = vals[:ncarry], vals[ncarry:ncarry + nconst], vals[ncarry + nconst:]
    if gated is not None:
        xs, live = xs[:-1], xs[-1]
    parts = []   # (view pieces or None, its values in ``xs``) of each group; then the positions' arrays
    for v in views or (None,) * ngroups:
        n = 1 if v is None else len(v)
        parts.append((v, xs[:n]))
        xs = xs[n:]
    stacked_xs = tuple(vs[0] for v, vs in parts if v is None) + tuple(xs)   # (each indexed by the loop)

    def read(i, rows):
        """The inputs of iteration ``i`` (``rows``: the rows of ``stacked_xs`` there)."""
        if views is None:
            return rows
        rows, out = iter(rows), []
        for v, vs in parts:
            out.append(next(rows) if v is None else _view_row(vs, v, i))
        return (*out, *rows)

    def run(c, x, env, which):
        for j in which:
            fn, params, spec, nout = body[j]
            args = []
            for kind, a in spec:
                if kind == "int":
                    args.append(env[a])
                elif kind == "carry":
                    args.append(c[carry.index(a)])
                elif kind == "const":
                    args.append(consts[a])
                elif kind == "xs":
                    args.append(x[a])
                elif kind == "pos":
                    args.append(x[ngroups + a])
                else:
                    args.append(a)
            res = fn(*args, **params)
            if nout == 1 and not isinstance(res, (tuple, list)):
                env[(j, 0)] = res
            else:
                for o, r in enumerate(res):
                    env[(j, o)] = r
        return env

    def ran(env):   # (an iteration's carries and rows, every eqn run)
        return tuple(env[rel] for rel in carry), tuple(env[rel] for rel in ys)

    def step(c, x):
        return ran(run(c, x, {}, range(len(body))))

    def skipped(c, env, shapes):   # (an iteration that does not run its gated eqns; ``shapes``: its rows')
        out = []
        for rel, sd in zip(ys, shapes):   # (a gated carry stacks its last value, other gated rows zeros)
            if rel[0] not in gated:
                out.append(env[rel])
            else:
                out.append(c[carry.index(rel)] if rel in carry else jnp.zeros(sd.shape, sd.dtype))
        return tuple(c[carry.index(rel)] if rel[0] in gated else env[rel] for rel in carry), tuple(out)

    def off_step(c, x, shapes):
        return skipped(c, run(c, x, {}, [j for j in range(len(body)) if j not in gated]), shapes)

    def either(c, x, on, shapes):   # (every eqn run once; where not ``on``, what a skipped iteration gives)
        env = run(c, x, {}, range(len(body)))
        return jax.tree_util.tree_map(lambda a, b: jnp.where(on, a, b), ran(env), skipped(c, env, shapes))

    def read_at(i):
        return read(i, tuple(a[i] for a in stacked_xs))

    try:
        if gated is not None:
            final, stacked = _live_span_loop(step, off_step, either, tuple(init), live, read_at, length, walk)
        elif views is None:
            final, stacked = jax.lax.scan(step, tuple(init), stacked_xs, length=length)
        else:
            final, stacked = jax.lax.scan(lambda c, ix: step(c, read(*ix)), tuple(init),
                                          (jnp.arange(length, dtype=jnp.int32), stacked_xs), length=length)
    except TypeError:  # a carry whose type the body changes (a weakly typed Python-float start): unroll
        final, rows = tuple(init), []
        for i in range(length):
            final, y = step(final, read_at(i))
            rows.append(y)
        stacked = tuple(jnp.stack([r[i] for r in rows]) for i in range(len(ys)))
    return tuple(final) + tuple(stacked)


def _live_span_loop(step, off, either, init: tuple, live, read_at, length: int, walk: int = 0):
    """``lax.scan`` of a gated loop (``_run_loop``; ``read_at(i)``: its inputs at iteration ``i``; ``live``:
    whether each runs its gated eqns) as three loops: the iterations before the first live one and after the
    last run ``off`` (what a skipped iteration computes: the ungated eqns; given the shapes of the rows
    ``step`` stacks), those between run ``either`` (every eqn, once, and a select of what a skipped iteration
    gives where one is not live: live iterations that are not one run).

    The same results as a conditional per iteration, which XLA:CPU ran at ~40 us a live iteration (a GRU LM
    step padded to 65 time steps: 13.4 -> 11.0 ms at a true length of 30, 19 -> 16 ms at 50) and ~70 us a
    skipped one.

    ``walk`` 1 (the loop walks its padded dim from the first position on: its live iterations come first,
    padding being at the end) or -1 (from the last: they come last) leaves out the loop of skipped iterations
    that would run none: the loop between starts at 0, or ends at ``length``. It is still exact where they
    do not (its select), and XLA compiles one loop fewer (0.1 s of the GRU LM's 2 s)."""
    shapes = jax.eval_shape(lambda c: step(c, read_at(0))[1], init)
    bufs = tuple(jnp.zeros((length,) + tuple(sd.shape), sd.dtype) for sd in shapes)
    any_live = live.any()
    lo = 0 if walk > 0 else jnp.where(any_live, jnp.argmax(live), 0)
    hi = length if walk < 0 else jnp.where(any_live, length - jnp.argmax(live[::-1]), 0)

    def over(between):
        def body(i, state):
            c, out = state
            x = read_at(i)
            c, y = either(c, x, live[i], shapes) if between else off(c, x, shapes)
            return c, tuple(jax.lax.dynamic_update_index_in_dim(b, r, i, 0) for b, r in zip(out, y))
        return body
    state = (init, bufs)
    if walk <= 0:
        state = jax.lax.fori_loop(0, lo, over(False), state)
    state = jax.lax.fori_loop(lo, hi, over(True), state)
    if walk >= 0:
        state = jax.lax.fori_loop(hi, length, over(False), state)
    return state


def _at(x, t, *, axis):
    """``x[:, ..., t]`` at a traced position ``t`` (a rolled loop's ``x[:, t]``)."""
    return jax.lax.dynamic_index_in_dim(x, t, axis, keepdims=False)


def _at_backward(g, t, *, axis, in_shape):
    """The backward of ``_at``: zeros of ``in_shape`` holding ``0 + g`` at position ``t`` (as ``index_backward``
    computes it)."""
    z = jnp.zeros(in_shape, g.dtype)
    return jax.lax.dynamic_update_slice_in_dim(z, jnp.expand_dims(jnp.zeros_like(g) + g, axis), t, axis)


def _ints(*, values):
    return jnp.asarray(np.asarray(values, np.int32))


def _row(y, *, m):
    return y[m]


def _stack(*xs):
    return jnp.stack(xs)


def _concat(*xs):
    return jnp.concatenate(xs)


def _restack(x, *, dim, dtype):
    """The registry ``stack`` of the rows of ``x`` (stacked on axis 0): on ``dim``, as ``dtype``."""
    return jnp.moveaxis(x, 0, dim).astype(dtype)


def _take(x, *, axis, start, step, length):
    if step == 1:
        r = jax.lax.slice_in_dim(x, start, start + length, axis=axis)
    else:
        r = jnp.flip(jax.lax.slice_in_dim(x, start - length + 1, start + 1, axis=axis), axis)
    return jnp.moveaxis(r, axis, 0) if axis else r
