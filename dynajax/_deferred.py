"""Errors a device reports after the fact, as CUDA reports a device-side assert.

A compiled step checks its index values on the device (``compile.checks``): the executable returns a small
report (``[k, bad value]``: the first failing check ``k``, 1-based, or 0) instead of the host reading the
indices before the step runs, which would make every call wait for the one before. Each such call leaves a
:class:`Pending` here; :func:`surface` reads them, oldest first, and raises the first error found. It runs
at the next host read of a tensor (``item``, ``numpy``, ``print`` ...: those wait anyway) and, for a loop
that never reads, at a compiled call once ``READ_EVERY`` reports are pending (:func:`settle`). Reading a
just-computed device array costs ~10 us, as much as the rest of a small replayed step's bookkeeping; so a
compiled call reads one array per ``READ_EVERY`` calls: the *flag* of the newest pending call (the poison
after it, ``compile.checks``), which is set if and only if some pending call's check failed (a step after a
failed one changes nothing, so the state is the same whenever the error is raised).

A pending report also keeps what its ``undo`` puts back: the ``.grad`` tensors its call replaced, one set of
gradients per pending call. Sixteen of them would hold sixteen times a model's gradients (a compiled Adam
step of a 1024-1024-10 MLP: 37 -> 77 MB of live arrays between reads). So a compiled call also reads once
the pending reports hold more than ``HOLD_BYTES`` of such arrays: a model whose gradients take more than
``HOLD_BYTES / READ_EVERY`` reads more often, at a cost small beside its step.

This module knows nothing of compile: a pending report carries the functions that explain and undo it.
"""
from __future__ import annotations

import threading

import numpy as np

PENDING: list = []   # Pending reports, oldest first
READ_EVERY = 16      # a compiled call reads the pending reports once this many are pending
HOLD_BYTES = 64 << 20   # ... or once they keep more than this many bytes of replaced gradients alive
HELD = [0]           # the bytes the PENDING reports keep alive (their ``held``, summed)
_LOCK = threading.RLock()   # (host reads on several threads surface the same reports)


class Pending:
    """One call's report: ``code`` (a device array, ``[k, bad]``), ``fail(k, bad)`` raising its error,
    ``undo()`` putting back what the host side of the call changed (the ``.grad`` it replaced), ``chain``:
    the calls whose ``code`` ends with a flag that is nonzero if and only if this call's check or an earlier
    one's of the same chain failed (None: its code has no such flag), and ``held``: the bytes of the arrays
    ``undo`` keeps alive."""

    __slots__ = ("code", "fail", "undo", "chain", "held")

    def __init__(self, code, fail, undo, chain=None, held: int = 0) -> None:
        self.code, self.fail, self.undo, self.chain, self.held = code, fail, undo, chain, held


def note(code, fail, undo, chain=None, held: int = 0) -> None:
    with _LOCK:
        PENDING.append(Pending(code, fail, undo, chain, held))
        HELD[0] += held


def _drop(k: int) -> None:
    """Forget the ``k`` oldest pending reports."""
    HELD[0] -= sum(p.held for p in PENDING[:k])
    del PENDING[:k]


def settle() -> None:
    """At a compiled call, once ``READ_EVERY`` reports are pending or they hold ``HOLD_BYTES``: read the flags
    of the newest computed one (the call waits for no step; reports are computed in call order), one per
    chain: all clear, it and every earlier report are dropped unread; one set, or a report without a flag,
    :func:`surface` reads them in order and raises."""
    if len(PENDING) < READ_EVERY and HELD[0] <= HOLD_BYTES:
        return
    with _LOCK:
        if any(p.chain is None for p in PENDING):
            return surface(block=False)
        i = len(PENDING) - 1
        while i >= 0 and not _ready(PENDING[i].code):
            i -= 1
        if i < 0:
            return
        latest = {p.chain: p.code for p in PENDING[:i + 1]}
        if any(int(np.asarray(a).reshape(-1)[-1]) for a in latest.values()):
            return surface()
        _drop(i + 1)


def _ready(a) -> bool:
    try:
        return a.is_ready()
    except Exception:   # (not a jax array, or deleted: read it and see)
        return True


def surface(block: bool = True) -> None:
    """Read the pending reports, oldest first, and raise the first error one holds (after undoing the host
    side of that call and of every later one, newest first). ``block=False``: stop at the first report
    not computed yet."""
    with _LOCK:
        while PENDING:
            p = PENDING[0]
            if not block and not _ready(p.code):
                return
            k, bad = (int(v) for v in np.asarray(p.code).reshape(-1)[:2])
            if k == 0:
                _drop(1)
                continue
            later = PENDING[1:]
            clear()
            for q in reversed(later):
                q.undo()
            p.undo()
            p.fail(k, bad)
            return


def clear() -> None:
    """Forget every pending report (unread)."""
    with _LOCK:
        PENDING.clear()
        HELD[0] = 0
