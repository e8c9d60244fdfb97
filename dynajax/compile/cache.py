"""An on-disk cache of compiled XLA executables, shared by every process that points at it.

XLA:CPU spends ~10 ms of compile per distinct kernel (measured here: a GRU
language-model step of ~100 kernels compiles in ~0.9-1.0 s on 2 cores; an eager
op on a new shape in ~20-40 ms). A training script run a second time, a
restarted job, or a test suite rerun compiles the very same programs again.
With the cache on, they are loaded from disk instead: the GRU step's compile
drops from ~0.8-1.0 s to ~0.2 s in a later run (``benchmarks/variable_length.py``
measures such a second run).

This is JAX's persistent compilation cache, configured so that it takes every
executable (JAX's defaults keep only those that took over a second to compile,
which leaves out almost everything dynajax compiles: eager ops, and most
steps). Entries are keyed by the program, the compile options, the backend and
the jax/jaxlib versions, so a stale entry is never used.

The same folder keeps what a recording learnt of its ops' result shapes (:func:`known_shape`): a
recording infers each op's result shape once per (op, params, input shapes) with ``jax.eval_shape``, which
took ~0.35 s of the ~1 s the GRU-cell LM's first two calls cost in a second process (92 ops, ~4 ms each
there). Entries are kept only for dynajax's own ops with plain params (numbers, strings, tuples, dtypes),
in a file named by the jax/jaxlib versions and the sizes and times of dynajax's source files, so an edited
dynajax never reads shapes an older one stored.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import time
import types

import jax
import numpy as np
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

from .. import _exe_store

__all__ = ["set_compile_cache", "compile_cache_dir", "loads"]

ENV = "DYNAJAX_COMPILE_CACHE"
_own_loads = [0]      # steps loaded from dynajax's store below (JAX's cache hits: ``_exe_store``)


def set_compile_cache(path: str | os.PathLike | None, *, max_bytes: int = 2 ** 30) -> None:
    """Keep compiled executables in the folder ``path`` (created if missing) and load them from there
    whenever a later compile, in this or another process, meets the same program; ``None`` turns the
    cache off. ``max_bytes`` bounds JAX's entries in the folder, and dynajax's own (compiled steps, eager
    kernels) apart (least recently used entries go first; -1: unbounded).

    It covers every executable JAX compiles in this process: ``dynajax.compile`` steps, eager ops and
    your own ``jax.jit`` functions. Setting the environment variable ``DYNAJAX_COMPILE_CACHE`` to a
    folder turns it on when dynajax is imported.

    >>> import dynajax as dj, tempfile
    >>> dj.set_compile_cache(tempfile.mkdtemp())   # a second run of this script compiles nothing
    >>> dj.set_compile_cache(None)
    """
    if path is None:
        jax.config.update("jax_compilation_cache_dir", None)
        _jax_cache.reset_cache()
        return
    if not os.fspath(path):   # (abspath would make "" the working directory)
        raise ValueError("dynajax.set_compile_cache: the folder is an empty string; pass None to turn the cache off")
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"dynajax.set_compile_cache: {path!r} exists and is not a folder")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or (max_bytes < 0 and max_bytes != -1):
        raise ValueError(f"dynajax.set_compile_cache: max_bytes must be a non-negative int or -1, got {max_bytes!r}")
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", max_bytes)
    jax.config.update("jax_enable_compilation_cache", True)
    _jax_cache.set_cache_dir(path)
    _jax_cache.reset_cache()      # a cache already initialised on another folder (or off) starts over here
    _exe_store.listen()


def compile_cache_dir() -> str | None:
    """The folder :func:`set_compile_cache` set, or None when the cache is off."""
    return jax.config.jax_compilation_cache_dir


def loads() -> int:
    """How many executables this process has loaded from the cache folder so far (JAX's entries, and
    the compiled steps dynajax keeps there)."""
    return _exe_store.jax_cache_hits() + _own_loads[0]


def from_environment() -> None:
    """Turn the cache on where ``DYNAJAX_COMPILE_CACHE`` names a folder (called on import).

    A folder that cannot be used (a file of that name, no permission to create it) warns, naming the
    variable, and leaves the cache off: a cache only saves time, so it does not stop ``import dynajax``."""
    path = os.environ.get(ENV)
    if path:
        try:
            set_compile_cache(path)
        except OSError as exc:
            import warnings
            warnings.warn(f"{ENV}={path!r} cannot hold the compile cache ({exc}); the cache stays off",
                          RuntimeWarning, stacklevel=2)


# ---------------------------------------------------------------- recorded ops' result shapes
_SHAPE_STORE: dict = {}   # folder -> {key: (single?, ((shape, dtype), ...))} read from / kept for that folder
_SHAPES_NEW: dict = {}    # folder -> entries learnt in this process, not yet written
_SOURCE: list = []        # the fingerprint of dynajax's sources and jax's versions (computed once)
shape_stats = {"loaded": 0, "written": 0}
_PLAIN = frozenset({int, float, bool, str, bytes, complex, type(None), type(Ellipsis)})
_PLAIN_TYPES = frozenset({int, float, bool, complex})


def _plain(x, depth: int = 0) -> bool:
    t = type(x)
    if t in _PLAIN or isinstance(x, (np.dtype, np.generic)):
        return True
    if t is tuple or t is frozenset:
        return depth < 8 and all(_plain(y, depth + 1) for y in x)
    if t is slice:
        return _plain((x.start, x.stop, x.step), depth + 1)
    return t is type and x in _PLAIN_TYPES


def _source() -> str:
    if not _SOURCE:
        import jaxlib
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256(f"{jax.__version__} {jaxlib.__version__}".encode())
        for d, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(".py"):
                    st = os.stat(os.path.join(d, f))
                    h.update(f"{os.path.relpath(os.path.join(d, f), root)} {st.st_size} {st.st_mtime_ns}".encode())
        _SOURCE.append(h.hexdigest()[:20])
    return _SOURCE[0]


_IMPLS: list = [0, {}]   # (ops registered when made, {id(impl): name of the first op registered with it})


def _fn_name(fn):
    """A name of ``fn`` that is the same in every process: the registry name of the op it implements (an
    elementwise op's impl is a lambda its factory made), else its module and qualified name if it is one of
    dynajax's module-level functions; None otherwise."""
    from ..ops.registry import OPS
    if _IMPLS[0] != len(OPS):
        names = {}
        for name, o in OPS.items():
            names.setdefault(id(o.impl), name)
        _IMPLS[:] = [len(OPS), names]
    name = _IMPLS[1].get(id(fn))
    if name is not None:
        return ("op", name)
    owner = getattr(fn, "__self__", None)   # (a bound method: its object's state is not in its name)
    if owner is not None and not isinstance(owner, (type, types.ModuleType)):
        return None
    mod, qual = getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", None) or ""
    return (mod, qual) if mod.startswith("dynajax.") and qual and "<" not in qual else None


def _shape_key(fn, pkey: tuple, avals: tuple):
    """A key that names the same op, params and input shapes in every process, or None."""
    name = _fn_name(fn)
    if name is None or not _plain(pkey) or not _plain(avals):
        return None
    return repr((name, pkey, avals))


def _shapes_file(folder: str) -> str:
    return os.path.join(folder, f"dynajax-shapes-{_source()}.pkl")


def _read_dict(path: str) -> dict:
    """The dict pickled in ``path`` ({} where there is none yet, or the file is torn)."""
    try:
        with open(path, "rb") as f:
            got = pickle.load(f)
        return got if isinstance(got, dict) else {}
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError, TypeError):
        return {}


def _write_merged(path: str, new: dict, merge=None) -> bool:
    """Write ``new`` into the dict pickled in ``path``, merged with what other processes wrote there meanwhile
    (``merge(old, new)`` per key both hold; default: ``new``'s), atomically: a reader never sees half a
    file. False where the folder is read-only or gone."""
    merged = _read_dict(path)
    for k, v in new.items():
        merged[k] = v if merge is None or k not in merged else merge(merged[k], v)
    return _exe_store.write_file(path, pickle.dumps(merged))


def _read_shapes(folder: str) -> dict:
    """The shapes stored in ``folder`` ({} where there are none yet, or the file is torn: inferred again)."""
    return _read_dict(_shapes_file(folder))


def _store(folder: str) -> dict:
    got = _SHAPE_STORE.get(folder)
    if got is None:
        got = _SHAPE_STORE[folder] = _read_shapes(folder)
    return got


def known_shape(fn, pkey: tuple, avals: tuple) -> tuple:
    """``(shapes, key)``: what an earlier process stored in the compile cache folder for this op's result
    shapes (None: nothing), and the key to keep them under once inferred (None: no folder, or unnamed)."""
    folder = compile_cache_dir()
    if folder is None:
        return None, None
    key = _shape_key(fn, pkey, avals)
    r = None if key is None else _store(folder).get(key)
    if r is not None:
        shape_stats["loaded"] += 1
    return r, key


def note_shape(key, r) -> None:
    """Keep an op's inferred result shapes under ``key`` (:func:`known_shape`'s) for later processes
    (written by :func:`save_shapes`)."""
    folder = compile_cache_dir()
    if folder is not None and key is not None:
        _store(folder)[key] = r
        _SHAPES_NEW.setdefault(folder, {})[key] = r


def save_shapes() -> None:
    """Write the shapes learnt since the last write into the folder's file (merged with what other
    processes wrote there meanwhile; atomically: a reader never sees half a file)."""
    folder = compile_cache_dir()
    new = _SHAPES_NEW.pop(folder, None) if folder is not None else None
    if not new:
        return
    if _write_merged(_shapes_file(folder), new):   # (else the shapes are inferred again next time)
        shape_stats["written"] += len(new)


# ---------------------------------------------------------------- compiled steps, keyed by their recording
# A later process records a step again, but need not trace and lower it again for JAX to find the
# compiled program in the cache above (~0.2-0.45 s a step for a recurrent LM on a 2-core CPU): the
# executable is kept under a key made from the recording itself, and loaded (~20 ms) where the key
# matches. The key names every function of the recording by its op or dynajax module name (in a folder
# named by the fingerprint of dynajax's sources and jax's versions, as the shapes are); a recording holding
# anything without such a name is not kept.
exe_stats = {"loaded": 0, "written": 0}


class _Unnamed(Exception):
    pass


def _stable(x, depth: int = 0):
    """A process-independent description of ``x`` (part of a recording), or _Unnamed."""
    if depth > 64:
        raise _Unnamed
    t = type(x)
    if t is int or t is bool or t is str or t is bytes or x is None:
        return (t.__name__, x)
    if t is float or t is complex:
        return (t.__name__, repr(x))   # (-0.0 and nan told apart)
    if t is tuple or t is list:
        return (t.__name__,) + tuple(_stable(y, depth + 1) for y in x)
    if t is dict:
        return ("dict",) + tuple(sorted(((repr(_stable(k, depth + 1)), _stable(v, depth + 1)) for k, v in x.items()),
                                        key=lambda kv: kv[0]))
    if t is slice:
        return ("slice", _stable(x.start, depth + 1), _stable(x.stop, depth + 1), _stable(x.step, depth + 1))
    if x is Ellipsis:
        return ("...",)
    if isinstance(x, np.dtype):
        return ("dtype", x.name)
    if isinstance(x, np.generic):
        return ("scalar", x.dtype.name, repr(x.item()))
    if isinstance(x, (np.ndarray, jax.Array)):
        a = np.ascontiguousarray(np.asarray(x))
        return ("array", a.dtype.name, a.shape, hashlib.sha256(a.tobytes()).hexdigest())
    if t is type and (x in _PLAIN_TYPES or x.__module__ == "numpy"):
        return ("type", x.__module__, x.__qualname__)
    if t.__module__ == "dynajax._dtype" and t.__name__ == "dtype":
        return ("dj.dtype", x.name)
    if t.__name__ == "Op" and t.__module__ == "dynajax.ops.registry":
        return ("op", x.name)
    if t is functools.partial:
        return ("partial", _stable(x.func, depth + 1), _stable(x.args, depth + 1), _stable(x.keywords, depth + 1))
    if callable(x):
        name = _fn_name(x)
        if name is not None:
            return ("fn",) + name
    raise _Unnamed


def executable_key(parts) -> str | None:
    """The store's key of a compiled step made from ``parts`` (its recording, rolled and gated, the input
    and number avals, donation, placement, compile options), or None: no store, a process with several
    devices, or something unnamed."""
    folder = compile_cache_dir()
    if folder is None or jax.device_count() != 1:   # (a loaded executable takes every device of its process)
        return None
    try:
        desc = repr(_stable(parts))
    except _Unnamed:
        return None
    from jax.extend import backend
    b = backend.get_backend()
    h = hashlib.sha256(f"{_source()}\0{b.platform}\0{b.platform_version}\0{os.environ.get('XLA_FLAGS', '')}\0"
                       f"{_exe_store.config_key()}".encode())
    h.update(desc.encode())
    return h.hexdigest()


def _exe_file(key: str) -> str:
    return os.path.join(compile_cache_dir(), f"dynajax-step-{_source()}-{key[:40]}.xla")


def load_executable(key: str):
    """``(executable, seconds its compile took)`` an earlier process kept under ``key``, loaded, or None (none,
    or unreadable)."""
    got = _exe_store.read(_exe_file(key), key)
    if got is None:
        return None
    exe_stats["loaded"] += 1
    _own_loads[0] += 1   # (a load, as a hit of JAX's cache is: ``loads``)
    return got[0], float(got[1])


def compile_and_keep(key: str, lowered):
    """``(compiled, seconds, fresh, kept)``: ``lowered`` compiled, and kept under ``key`` with the seconds its
    compile took (what a later process's padded calls weigh a new bucket against:
    ``bucketing.Padder.price``). ``fresh`` is False where JAX's cache supplied it: then it is not kept
    (XLA:CPU would write it without some of its kernels: ``_exe_store``); ``kept``: written."""
    t0 = time.perf_counter()
    compiled, fresh = _exe_store.compile_fresh(lowered)
    secs = time.perf_counter() - t0
    kept = fresh and _exe_store.write(_exe_file(key), key, compiled, secs)
    if kept:
        exe_stats["written"] += 1
    return compiled, secs, fresh, bool(kept)


# ---------------------------------------------------------------- a padded step's buckets, across processes
# A padded step (``compile.bucketing``) weighs compiling a new bucket against padding calls further, by the
# ski-rental rule. Once kept here, a bucket's executable costs a later process a load (~20 ms), not a
# compile, and what padding past it cost does not end with the process. So the folder also keeps, per step,
# the buckets whose executables it holds and the padding each other bucket has cost so far: a later process
# runs those buckets at once and goes on renting the others from where the last one stopped.

def _buckets_file(folder: str) -> str:
    return os.path.join(folder, f"dynajax-buckets-{_source()}.pkl")


def step_identity(fn) -> str | None:
    """A name of a step function that is the same in every process running the same script: its module,
    qualified name, file and first line; None for a callable without code. Steps made on one line share it,
    so what a record says under it is a guess, never a result: its buckets are checked by the load they
    predict (a compile drops them), and dims it names are padded exactly, as any padded dim is."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    if code is None:
        return None
    return f"{getattr(f, '__module__', '')}:{getattr(f, '__qualname__', '')}:{code.co_filename}:{code.co_firstlineno}"


def bucket_record(ident: str | None) -> dict | None:
    """What earlier processes kept for the step ``ident``: ``{"bought": {(dims, sizes)}, "debt": {sizes:
    seconds}, "price": seconds a compile of it took}``, and where the automatic policy chose the dims,
    ``"spec"`` (argument -> dims), ``"avoid"`` (sizes buckets skip) and ``"peak"`` (largest true size per dim);
    {} if nothing, None where there is no folder or no identity."""
    folder = compile_cache_dir()
    if folder is None or ident is None:
        return None
    got = _read_dict(_buckets_file(folder)).get(ident)
    return got if isinstance(got, dict) else {}


def _merge_records(old: dict, new: dict) -> dict:
    debt = dict(old.get("debt", {}))
    for k, v in new.get("debt", {}).items():
        debt[k] = max(v, debt.get(k, 0.0))
    bought = set(old.get("bought", ())) | set(new.get("bought", ()))
    merged = {**old, **new}   # (the newest spec, avoid and peak)
    merged.update(bought=bought, debt={k: v for k, v in debt.items() if k not in {s for _, s in bought}},
                  price=new.get("price") or old.get("price", 0.0))
    return merged


def save_bucket_record(folder: str, ident: str, record: dict) -> None:
    """Keep ``record`` (as :func:`bucket_record` returns it) for the step ``ident`` in ``folder`` (the one it
    was read from), merged with what other processes kept there meanwhile (the buckets of both; the larger
    debt of each)."""
    if os.path.isdir(folder):
        _write_merged(_buckets_file(folder), {ident: record}, _merge_records)
