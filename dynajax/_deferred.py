"""Errors a device reports after the fact, as CUDA reports a device-side assert.

A compiled step checks its index values on the device (``compile.checks``): the executable returns a small
report (``[k, bad value]``: the first failing check ``k``, 1-based, or 0) instead of the host reading the
indices before the step runs, which would make every call wait for the one before. Each such call leaves a
:class:`Pending` here; :func:`surface` reads them, oldest first, and raises the first error found. It runs
at the next compiled call (only reports already computed: the call does not wait for its predecessor) and
at the next host read of a tensor (``item``, ``numpy``, ``print`` ...: those wait anyway).

This module knows nothing of compile: a pending report carries the functions that explain and undo it.
"""
from __future__ import annotations

import threading

import numpy as np

PENDING: list = []   # Pending reports, oldest first
_LOCK = threading.RLock()   # (host reads on several threads surface the same reports)


class Pending:
    """One call's report: ``code`` (a device array, ``[k, bad]``), ``fail(k, bad)`` raising its error, and
    ``undo()`` putting back what the host side of the call changed (the ``.grad`` it replaced)."""

    __slots__ = ("code", "fail", "undo")

    def __init__(self, code, fail, undo) -> None:
        self.code, self.fail, self.undo = code, fail, undo


def note(code, fail, undo) -> None:
    with _LOCK:
        PENDING.append(Pending(code, fail, undo))


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
                PENDING.pop(0)
                continue
            later = PENDING[1:]
            PENDING.clear()
            for q in reversed(later):
                q.undo()
            p.undo()
            p.fail(k, bad)
            return


def clear() -> None:
    """Forget every pending report (unread)."""
    with _LOCK:
        PENDING.clear()
