"""Guards for ``dynajax.compile``'s default mode: when a call may skip the step's Python.

A compiled call normally runs the step's Python again (capture), because only running it says which
graph this call takes and which Python numbers it passes to ops. Most steps take the same graph with
the same numbers every call, and the recording costs more than a small step's executable. So while a
call is recorded its Python is watched (``sys.setprofile``, on recorded calls only) and a
:class:`PyGuard` is built from what it saw:

- every Python frame the step ran that is not library code (dynajax, site-packages; standard-library
  code counts as the user's when the user's code called it) is the *user's code*;
- the values that code can read from outside the call are the *roots*: the globals its bytecode
  loads (``LOAD_GLOBAL``, and ``module.attr`` of a global module), the compiled function itself (its
  closure cells, a bound method's object), the closure cells of the user's functions that library code
  calls back (a tensor's or module's hook), the Python values among the call's arguments, and the
  attributes of every ``nn.Module`` the step called that are not tensors, submodules, numbers or strings
  (those go through ``Module.__setattr__``, which bumps ``dynajax._epoch``, as do hook
  registrations);
- each root's *fingerprint* (:func:`fingerprint`): numbers and strings by value, containers and plain
  objects (their ``__dict__``) item by item, functions by identity and closure, tensors, modules,
  Python modules and arrays by identity, an optimizer by its param groups (options compared by value,
  but floats only by type, zero and sign: the fused updates read those numbers again on every call --
  ``compile.capture.scalar_recipes`` -- so a scheduled learning rate keeps replaying).

The step is *pure* when its Python has no effect but its ops: the user's code calls no C function
outside a short list of pure builtins (``print``, ``time.time``, ``random.random`` are effects),
stores no global or closure variable, and no root's fingerprint changed while the step ran (a counter
in a dict, ``scheduler.step()`` inside the step, a list a module appends to). A pure step's next call
runs the recorded executable without its Python when every root's fingerprint is as recorded
(``PyGuard.changed``: a few dict lookups and comparisons), together with the replay guard
(``compile.replay``: arguments' shapes, dtypes and values, grad mode, autocast, default dtype,
``_epoch``, modules' training flags). Anything else records the call, so every Python-level change is
seen on the call it affects: a step that prints (or has any other Python effect) is recorded on every
call and prints every call, as eager.

Not seen: state the user's code reaches only through a library call's result (``opt.state[p]``),
class attributes, an attribute of a Python module read other than as ``module.attr``, in-place writes
into a large numpy array (over ``_ARRAY_BYTES``; smaller ones are compared by value). A recorded check
every ``GUARD_CHECK_EVERY`` calls warns if the graph changed behind the guards.
"""
from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
import types
import weakref
from operator import is_

import numpy as np

from .._tensor import Tensor

ENABLED = True             # False: the default mode records every call, as before guards
GUARD_CHECK_EVERY = 1000   # a guarded call recorded anyway this often (a safety net; guards should see it all)
_BUDGET = 512              # items one root's fingerprint may visit: a larger structure makes the step unguarded
_ARRAY_BYTES = 4096        # a numpy array up to this size is compared by value, a larger one by identity only


class _Absent:
    """The value of a root that does not exist (a builtin's name among the globals, an empty cell)."""


_MISSING = _Absent()


class Unguardable(Exception):
    """A root whose fingerprint cannot be taken (too large, or an object without a readable state)."""


# ---------------------------------------------------------------- where code comes from
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STD = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
_CATEGORY: dict = {}   # code object -> 0 library, 1 standard library, 2 the user's own


def _category(code) -> int:
    c = _CATEGORY.get(code)
    if c is None:
        f = code.co_filename
        if f.startswith(_PKG) or "site-packages" in f or "dist-packages" in f:
            c = 0
        elif f.startswith("<frozen") or f.startswith(_STD):
            c = 1
        else:
            c = 2
        _CATEGORY[code] = c
    return c


def _is_user(frame) -> bool:
    """Whether ``frame`` runs the user's code: their own file, or standard-library code their code called;
    not the user's callbacks that another library calls (a JAX monitoring listener, a logging handler):
    those run when that library decides, not as part of the step."""
    c = _category(frame.f_code)
    while c == 1:
        frame = frame.f_back
        if frame is None:
            return False
        c = _category(frame.f_code)
    if c != 2:
        return False
    caller = _caller(frame)
    return caller is None or not _third_party(caller.f_code)


def _caller(frame):
    """The frame that called ``frame``'s code, standard-library frames between them skipped (None: none)."""
    caller = frame.f_back
    while caller is not None and _category(caller.f_code) == 1:
        caller = caller.f_back
    return caller


def unwatched(watch, fn, *args):
    """``fn(*args)`` with ``watch``'s profile function off: for dynajax's own code, in which a Watch has
    nothing to see (it cost ~25-45% of a recording). As it is where ``watch`` is None or not installed,
    or the profile function is off already (an op recorded inside another's); the profile function found
    is put back."""
    prev = sys.getprofile()
    if prev is None or watch is None or not watch._installed:
        return fn(*args)
    sys.setprofile(None)
    try:
        return fn(*args)
    finally:
        sys.setprofile(prev)


def _called_back(frame) -> bool:
    """Whether the user's code in ``frame`` was called by library code."""
    caller = _caller(frame)
    return caller is not None and _category(caller.f_code) == 0


def _closures_of(frame) -> list:
    """The function objects running ``frame``'s code with a closure (a frame does not name its function;
    found among the code's referrers: a heap scan, paid once per such code per recording)."""
    import gc
    code = frame.f_code
    fns = [r for r in gc.get_referrers(code)
           if type(r) is types.FunctionType and r.__code__ is code and r.__closure__]
    if len(fns) > 1:   # several closures of one code: those holding this frame's values
        vals = frame.f_locals
        mine = [f for f in fns
                if all(_cell(c) is vals.get(n, _MISSING) for n, c in zip(code.co_freevars, f.__closure__))]
        fns = mine or fns
    return fns


def _third_party(code) -> bool:
    """Library code that is not dynajax's (whose calls into the user's code are callbacks)."""
    f = code.co_filename
    return not f.startswith(_PKG) and ("site-packages" in f or "dist-packages" in f)


# ---------------------------------------------------------------- what the user's code may call
_PURE_BUILTINS = frozenset(id(f) for f in (
    len, isinstance, issubclass, hasattr, getattr, min, max, abs, round, sum, any, all, sorted, divmod, pow,
    hash, repr, format, callable, iter, id, chr, ord, ascii, bin, hex, oct, vars))
_PURE_MODULES = ("math", "cmath", "operator", "_operator")
_READ_ONLY = (str, bytes, tuple, int, float, complex, bool, frozenset, range, type(None), slice)
# methods of mutable containers: an effect only on a container some root reaches, which its fingerprint sees
_CONTAINER = (list, dict, set)


def _pure_c(fn) -> bool:
    """Whether a C function the user's code called is free of effects outside the objects it is given."""
    if id(fn) in _PURE_BUILTINS:
        return True
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type):   # a builtin type's constructor (``tuple.__new__`` of a namedtuple)
        return fn.__name__ == "__new__" and owner.__module__ == "builtins"
    if isinstance(owner, types.ModuleType):
        return owner.__name__ in _PURE_MODULES
    return isinstance(owner, _READ_ONLY + _CONTAINER)


# ---------------------------------------------------------------- what the user's code reads and stores
_LOADS_GLOBAL = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTR = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME", "IMPORT_STAR"})


@functools.lru_cache(maxsize=4096)
def _scan(code) -> tuple:
    """(the first store outside the frame, or None; globals loaded; (global, attribute) pairs loaded)."""
    effect, names, attrs = None, [], []
    prev = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _STORES or (op in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in code.co_freevars):
            effect = effect or f"'{code.co_name}' writes the {'global' if 'GLOBAL' in op else 'outer'} variable " \
                               f"'{ins.argval}'"
        elif op in _LOADS_GLOBAL:
            names.append(ins.argval)
        elif op in _ATTR and prev is not None and prev.opname in _LOADS_GLOBAL:
            attrs.append((prev.argval, ins.argval))
        if op not in ("CACHE", "EXTENDED_ARG"):
            prev = ins
    return effect, tuple(dict.fromkeys(names)), tuple(dict.fromkeys(attrs))


# ---------------------------------------------------------------- fingerprints
_SCALARS = frozenset({int, float, complex, bool, str, bytes, type(None), range, slice, np.float32, np.float64,
                      np.int32, np.int64, np.bool_, np.float16})
_IDENTITY = (types.ModuleType, types.BuiltinFunctionType, type, Tensor, types.CodeType, types.MethodWrapperType)
_KIND: dict = {_Absent: "i"}   # type -> how its values are fingerprinted


def _kind_of(t) -> str:
    k = _KIND.get(t)
    if k is not None:
        return k
    from ..nn.modules.module import Module
    if t in _SCALARS:
        k = "s"
    elif t is tuple or t is list:
        k = "l"
    elif issubclass(t, dict):
        k = "d"
    elif t is set or t is frozenset:
        k = "set"
    elif t is types.FunctionType:
        k = "f"
    elif t is types.MethodType:
        k = "m"
    elif t is functools.partial:
        k = "p"
    elif issubclass(t, _IDENTITY) or issubclass(t, Module) or t.__module__.startswith(("jax", "jaxlib")):
        k = "i"   # a Module's own state: ``_epoch`` (setattr, hooks) and its root when the step calls it
    elif t is np.ndarray:
        k = "a"
    elif any(c.__name__ == "Optimizer" and c.__module__.endswith("optim.optimizer") for c in t.__mro__):
        k = "o"
    elif issubclass(t, (int, float, str)):
        k = "s"
    else:
        k = "obj"
    _KIND[t] = k
    return k


def _item(v, budget, depth, floats):
    """``fingerprint`` of an item of a list or dict, a scalar's without the call (an optimizer's param groups
    are read on every guarded call: their lr, betas, eps, flags)."""
    t = type(v)
    if _KIND.get(t) == "s":
        return (t, v == 0, v < 0) if t is float and not floats else (t, v)
    return fingerprint(v, budget, depth, floats)


def fingerprint(v, budget: list | None = None, depth: int = 0, floats: bool = True):
    """A comparable summary of ``v``: equal fingerprints mean the step's Python reads the same values from it
    (see the module docstring). ``floats=False``: floats by type, zero and sign only (an optimizer's options).
    Raises Unguardable for a structure past the budget or an object whose state it cannot read."""
    t = type(v)
    k = _KIND.get(t) or _kind_of(t)
    if k == "s":
        if not floats and t is float:
            return (t, v == 0, v < 0)
        return (t, v)
    if k == "i":
        return id(v)
    if budget is None:
        budget = [_BUDGET]
    budget[0] -= 1
    if budget[0] < 0 or depth > 12:
        raise Unguardable(f"a {t.__name__} too large to guard")
    d = depth + 1
    if k == "l":
        ids = [id(x) for x in v if _KIND.get(type(x)) == "i"]
        if len(ids) == len(v):   # (the usual list: an optimizer's params, by identity, as the loop below would)
            return (t, tuple(ids))
        return (t, tuple([_item(x, budget, d, floats) for x in v]))
    if k == "d":   # (``_item`` inlined: an optimizer's param groups are read this way on every guarded call)
        out = []
        for x, y in v.items():
            ty = type(y)
            if _KIND.get(ty) == "s":
                out.append((x, (ty, y == 0, y < 0) if ty is float and not floats else (ty, y)))
            else:
                out.append((x, fingerprint(y, budget, d, floats)))
        return (t, tuple(out))
    if k == "set":
        return (t, frozenset(v) if all(type(x) in _SCALARS for x in v) else tuple(sorted(map(id, v))))
    if k == "f":
        cells = v.__closure__
        if not cells:
            return id(v)
        return (id(v), tuple([fingerprint(_cell(c), budget, d, floats) for c in cells]))
    if k == "m":
        return ("m", fingerprint(v.__func__, budget, d, floats), fingerprint(v.__self__, budget, d, floats))
    if k == "p":
        return ("p", fingerprint(v.func, budget, d, floats), fingerprint(v.args, budget, d, floats),
                fingerprint(v.keywords, budget, d, floats))
    if k == "a":
        return (id(v), v.shape, v.dtype, v.tobytes() if v.nbytes <= _ARRAY_BYTES else None)
    if k == "o":
        return _optimizer_fingerprint(v, budget, d)
    try:
        state = vars(v)
    except TypeError:
        raise Unguardable(f"a {t.__name__} object (no readable state)") from None
    if getattr(t, "__slots__", None):
        raise Unguardable(f"a {t.__name__} object (state in slots)")
    return (id(v), fingerprint(state, budget, d, floats))


_OPTIMIZERS: dict = {}   # id(optimizer) -> (weakref, what its fingerprint read, by identity, budget used, fingerprint)


def _optimizer_fingerprint(opt, budget: list, depth: int):
    """An optimizer's fingerprint: its param groups (options with floats by type, zero and sign; parameters by
    identity). Read on every guarded call of a step that calls the optimizer, so the last one is kept with the
    objects it was taken from: while the groups hold those very objects (the usual call: ~1.8 us instead of
    ~4.5 us for an Adam group), it is the same. A group holding a mutable value other than its parameter list
    is read in full every time."""
    groups = opt.param_groups
    kept = _OPTIMIZERS.get(id(opt))
    if kept is not None and kept[0]() is opt and _holds(groups, kept[1]):
        budget[0] -= kept[2]
        if budget[0] < 0:
            raise Unguardable(f"a {type(opt).__name__} too large to guard")
        return kept[3]
    before = budget[0]
    fp = (id(opt), tuple([fingerprint(g, budget, depth, False) for g in groups]))
    snap = _snapshot(groups)
    if snap is not None:
        key = id(opt)
        _OPTIMIZERS[key] = (weakref.ref(opt, lambda _, key=key: _OPTIMIZERS.pop(key, None)), snap,
                            before - budget[0], fp)
    return fp


def _snapshot(groups):
    """The objects an optimizer's fingerprint read from ``groups``, for ``_holds``; None where a group holds a
    mutable value (other than its ``params`` list, kept item by item), which identity cannot vouch for."""
    if type(groups) is not list:
        return None
    out = []
    for g in groups:
        if type(g) is not dict or type(g.get("params")) is not list:
            return None
        for k, x in g.items():
            if k != "params" and type(x) not in _SCALARS and not (type(x) is tuple
                                                                  and all(type(y) in _SCALARS for y in x)):
                return None
        out.append((g, tuple(g), tuple(g.values()), tuple(g["params"])))
    return groups, tuple(out)


def _holds(groups, snap) -> bool:
    """Whether ``groups`` holds the very objects ``snap`` (``_snapshot``) recorded."""
    lst, items = snap
    if groups is not lst or len(groups) != len(items):
        return False
    for g, (g0, keys, vals, params) in zip(groups, items):
        if g is not g0 or len(g) != len(keys):
            return False
        p = g.get("params")
        if (type(p) is not list or len(p) != len(params) or not all(map(is_, g.values(), vals))
                or not all(map(is_, g, keys)) or not all(map(is_, p, params))):
            return False
    return True


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:
        return _MISSING


def _read(holder, name):
    """A root's current value: ``holder`` a dict (``name`` its key), a tuple of a module's attribute dict
    and names, or a constant (the compiled function; ``name`` None)."""
    if name is None:
        return holder
    if type(name) is tuple:
        return tuple([holder.get(n, _MISSING) for n in name])
    return holder.get(name, _MISSING)


# ---------------------------------------------------------------- watching a recording
_MANAGED = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training",
                      "_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
                      "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks"})


class Watch:
    """Context around one recording of the step: what its Python read and did (see the module docstring).
    ``guard()`` afterwards: a PyGuard, or the reason the step cannot be replayed (a str)."""

    def __init__(self, fn, args, kwargs) -> None:
        self.reason = None
        self.roots: dict = {}     # key -> (holder, name, description)
        self.before: dict = {}    # key -> fingerprint when first seen
        self.codes: set = set()
        self._installed = False
        self._root(("fn",), fn, None, f"the compiled function {getattr(fn, '__name__', fn)!r}")
        self._fn_code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        extra = [a for a in _leaves((args, kwargs)) if not isinstance(a, Tensor)]
        if extra:
            self._root(("args",), tuple(extra), None, "the call's Python arguments")

    def __enter__(self) -> "Watch":
        if sys.getprofile() is not None or sys.gettrace() is not None:   # (a profiler, a debugger, coverage)
            self.reason = self.reason or "a profiler or tracer is active while recording"
        else:
            sys.setprofile(self._event)
            self._installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            sys.setprofile(None)
            self._installed = False

    def _event(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            if code not in self.codes and _category(code) != 0 and _is_user(frame):
                self.codes.add(code)
                self._enter(frame)
        elif event == "c_call":
            if self.reason is None and _category(frame.f_code) != 0 and not _pure_c(arg) and _is_user(frame):
                self.reason = f"'{frame.f_code.co_name}' calls {getattr(arg, '__qualname__', arg)}"

    def _enter(self, frame) -> None:
        code = frame.f_code
        effect, names, attrs = _scan(code)
        if effect is not None and self.reason is None:
            self.reason = effect
        if code.co_freevars and code.co_freevars != ("__class__",) and code is not self._fn_code \
                and _called_back(frame):   # (``__class__``: the cell of a method calling ``super()``)
            # a closure the library calls (a tensor's hook): no root of the user's code reaches its cells
            fns = _closures_of(frame)
            if not fns and self.reason is None:
                self.reason = f"'{code.co_qualname}' reads closure variables the guards cannot find"
            for f in fns:
                self._root(("cl", id(f)), f, None, f"the closure of '{code.co_qualname}'")
        g = frame.f_globals
        for n in names:
            self._root(("g", id(g), n), g, n, f"global '{n}'")
        for n, a in attrs:
            mod = g.get(n)
            if isinstance(mod, types.ModuleType):
                d = vars(mod)
                self._root(("g", id(d), a), d, a, f"'{n}.{a}'")

    def module(self, m) -> None:
        """A module the step calls, at its first call: its attributes Module.__setattr__ does not watch."""
        d = m.__dict__
        names = tuple([k for k, v in d.items() if k not in _MANAGED and _mutable(v)])
        if names:
            self._root(("m", id(m)), d, names, f"attributes {', '.join(names)} of a {type(m).__name__}")

    def _root(self, key, holder, name, what) -> None:
        if key in self.roots:
            return
        self.roots[key] = (holder, name, what)
        try:
            self.before[key] = fingerprint(_read(holder, name))
        except Unguardable as e:
            self.reason = self.reason or f"{what} holds {e}"

    def guard(self):
        """After the recording: a PyGuard of its roots, or why the step is not replayable."""
        if self.reason is not None:
            return self.reason
        checks = []
        for key, (holder, name, what) in self.roots.items():
            try:
                now = fingerprint(_read(holder, name))
            except Unguardable as e:
                return f"{what} holds {e}"
            if now != self.before[key]:
                return f"the step changes {what}"
            checks.append((holder, name, now, what))
        return PyGuard(checks)


def _mutable(v) -> bool:
    """Whether a module attribute can change without ``Module.__setattr__`` (a container, a plain object)."""
    t = type(v)
    if t in _SCALARS or isinstance(v, (Tensor, types.ModuleType)):
        return False
    if t is tuple:
        return any(_mutable(x) for x in v)
    from ..nn.modules.module import Module
    return not isinstance(v, Module)


def _leaves(tree) -> list:
    from ..lower import _tree_flatten
    return _tree_flatten(tree)[0]


class PyGuard:
    """The roots of a pure recording and their fingerprints: ``changed()`` says which one differs now."""

    __slots__ = ("checks",)

    def __init__(self, checks: list) -> None:
        self.checks = checks

    def changed(self):
        """None if every root reads as recorded, else a description of the first that does not."""
        for holder, name, want, what in self.checks:
            try:
                if fingerprint(_read(holder, name)) != want:
                    return what
            except Unguardable:
                return what
        return None

