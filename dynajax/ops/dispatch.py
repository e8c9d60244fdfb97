"""The dispatch mode seen from the ops: whether a step is being recorded, and what recorded values are.

``dynajax.compile``'s capture (``dynajax/compile/capture.py``) installs itself as the recording of its thread
(``_state.cap``) and as an interceptor of ``registry.apply`` (``registry._hooks``). Ops never import the
compiler: what they need to know about a recording -- is this value symbolic (:func:`is_recorded`), what
shape and dtype does it have (:func:`value_aval`), which recording is active (:func:`current`) -- they ask
here. A recorded value is a :class:`Sym`; reading it materialises it through the active recording.
"""
from __future__ import annotations

import functools
import math
import threading

import jax
import numpy as np

_state = threading.local()

class Sym:
    """The shape and dtype of a value a compiled step will compute (a capture-time stand-in for an array)."""

    __slots__ = ("shape", "dtype", "idx", "aval")

    def __init__(self, shape, dtype, idx: int, aval=None) -> None:
        self.shape, self.dtype, self.idx = shape, dtype, idx
        self.aval = (shape, dtype) if aval is None else aval

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)   # exact Python ints; np.prod costs ~4 us a call

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(_active(self).materialize(self))
        return a.astype(dtype) if dtype is not None else a

    def __jax_array__(self):
        return _active(self).materialize(self)

    def devices(self) -> set:
        """As a jax.Array's: the device the step being recorded runs on (``Capture.device``), where eager mode
        would have put this value (``zeros(b, h, device=h.device)`` of an intermediate ``h`` on a GPU)."""
        return {_active(self).device()}

    def __repr__(self) -> str:
        return f"Sym(v{self.idx}: {np.dtype(self.dtype).name}{list(self.shape)})"


def aval_of(arr) -> tuple:
    """``(shape, dtype)`` of an array: a jax array's from its aval (~0.1 us, against ~0.5 us through its
    ``shape`` and ``dtype`` properties), a numpy array's from its own."""
    av = getattr(arr, "aval", None)
    if av is not None:
        return av.shape, av.dtype
    return tuple(arr.shape), np.dtype(arr.dtype)


def value_aval(v) -> tuple:
    """``(shape, dtype)`` of a tensor's value: a Sym's own, an array's from its aval (jax arrays' ``shape`` and
    ``dtype`` are Python properties, several times dearer, the more so with cold caches)."""
    return v.aval if type(v) is Sym else aval_of(v)


def is_recorded(t) -> bool:
    """True while tensor ``t`` holds a value a compiled step is recording, or an array with shards in other
    processes (``dynajax.distributed``): a value eager-only checks cannot read, so they skip it."""
    v = t._value
    if type(v) is Sym:
        return True
    # one process: every array is addressable (asked first: the sharding's answer costs ~10 us)
    return jax.process_count() > 1 and not getattr(v, "is_fully_addressable", True)


_PY_VALUES = frozenset({int, float, bool, complex, str, tuple, type(None)})


def is_array(v) -> bool:
    """``isinstance(v, jax.Array)``, answered by type first for the usual values: the isinstance check costs
    ~0.3 us (jax.Array's metaclass asks in Python), and ops pass Python numbers and tuples by the dozen."""
    tp = type(v)
    if tp is _array_type():
        return True
    return tp not in _PY_VALUES and isinstance(v, jax.Array)


@functools.lru_cache(maxsize=None)
def _array_type():
    """The concrete type of jax's arrays."""
    return type(jax.numpy.zeros(()))


def _active(sym: Sym) -> "Capture":
    cap = getattr(_state, "cap", None)
    if cap is None:
        raise RuntimeError(f"a value recorded by dynajax.compile ({sym!r}) was used after its step ended; a tensor "
                           "created inside a compiled step escaped without being returned or stored in a "
                           "tensor the step keeps alive")
    return cap


class Pick:
    """A number recipe (``scalar_recipes``) reading entry ``index`` of what ``source()`` returns: the recipes
    of one op's numbers share their ``source`` (an optimizer's numbers of its param group), which a replayed
    call reads once for all of them (``compile.speculate.recompute``)."""

    __slots__ = ("index", "source")

    def __init__(self, source, index: int) -> None:
        self.source, self.index = source, index

    def __call__(self):
        return self.source()[self.index]


class scalar_recipes:
    """Context around one op's ``apply``: ``recipes[pos]()`` recomputes the Python number passed at argument
    position ``pos`` from where it came from (an optimizer's param group), so that a speculative run
    (``compile.speculate``) can pass the number the next call will pass, a scheduled learning rate included.
    Nothing happens outside a recording or with ``recipes`` None."""

    __slots__ = ("cap", "recipes")

    def __init__(self, recipes) -> None:
        cap = getattr(_state, "cap", None)
        self.cap = cap if recipes is not None and cap is not None and not cap.dual else None
        self.recipes = recipes

    def __enter__(self):
        if self.cap is not None:
            self.cap.recipes = self.recipes

    def __exit__(self, *exc) -> None:
        if self.cap is not None:
            self.cap.recipes = None


def current():
    """The recording (not verify's dual one) in progress on this thread, or None."""
    cap = getattr(_state, "cap", None)
    return None if cap is None or cap.dual or cap.thread != threading.get_ident() else cap


def index_checks():
    """The recording in progress on this thread if its step checks index bounds on the device
    (``dynajax.compile(check_indices=True)``, the default; ``ops.index.check_bounds`` then records a check
    through its ``note_check``), else None."""
    cap = current()
    return cap if cap is not None and getattr(cap.owner, "check_indices", False) else None


def grad_reset(t) -> None:
    """``t.grad`` is about to be set to None (``zero_grad``): the recording in progress keeps the grad it had, to
    put back if the step fails (``compile.checks``)."""
    cap = current()
    if cap is not None:
        cap.grads_before.setdefault(id(t), (t, t._grad))


def recorded_args(value):
    """While a step is recorded (not in verify's dual mode): the argument refs of the eqn that computed
    ``value`` (a Sym; an int ref is a graph var), or None."""
    cap = getattr(_state, "cap", None)
    if cap is None or cap.dual or type(value) is not Sym:
        return None
    k = cap.prod.get(value.idx)
    return None if k is None else cap.eqns[k][2]


