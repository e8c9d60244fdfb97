"""Executables dynajax keeps on disk itself: eager bucket kernels (``_kernel_cache``) and compiled steps
keyed by their recording (``compile.cache``).

Each entry is one file, written atomically: ``(key, serialized executable, its input and output trees,
extra)``. A reader checks the key it expects, so a hash collision on the file name, a torn file or one
an older format wrote is compiled again (and written again), never run.

These stores sit beside JAX's persistent compilation cache, which can be on at the same time
(``dynajax.set_compile_cache``). An executable that JAX's cache supplied is itself a deserialized one,
and XLA:CPU (jaxlib 0.10) serializes such an executable again without the code of some of its kernels:
a later process that loads the copy fails at its first call ("NOT_FOUND: Function wrapped_reduce not
found"). Reproduced in three processes with a plain ``jax.jit``: compile with JAX's cache on, compile
again in a second process (a cache hit) and serialize, load in a third. This is what broke the stores
in the suite's runs, where the compile cache was on. So an executable is written only where this
process compiled it (:func:`compile_fresh` tells), and what a store keeps is not written to JAX's cache
too.
"""
from __future__ import annotations

import contextlib
import enum
import os
import pickle
import tempfile

import jax

__all__ = ["listen", "jax_cache_hits", "compile_fresh", "read", "write", "write_file", "config_key"]

_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_hits = [0]            # executables JAX's persistent cache supplied in this process (jax.monitoring events)
_listening = [False]


def _on_event(event: str, **_) -> None:
    if event == _HIT_EVENT:
        _hits[0] += 1


def listen() -> None:
    """Count JAX's persistent-cache hits from now on (idempotent)."""
    if not _listening[0]:
        jax.monitoring.register_event_listener(_on_event)
        _listening[0] = True


def jax_cache_hits() -> int:
    """How many executables JAX's persistent cache has supplied in this process since :func:`listen`."""
    return _hits[0]


def config_key() -> str:
    """JAX's settings that change how a traced program lowers (the default matmul precision, 64-bit types,
    dtype promotion, ...: what ``jax.jit`` keys its own cache on), as text every process writes alike:
    part of a store's key, since a traced program's text does not show them."""
    from jax._src import config
    parts = []
    for v in config.trace_context():
        t = type(v)
        plain = v is None or t in (bool, int, float, str) or isinstance(v, enum.Enum) or \
            (t is tuple and all(type(x) in (bool, int, float, str) for x in v))
        parts.append(repr(v) if plain else t.__qualname__)   # (a context object: by its type)
    return ",".join(parts)


def compile_fresh(lowered):
    """``(lowered.compile(), fresh)``; ``fresh`` is False where JAX's persistent cache supplied the
    executable (or another thread's compile hit it meanwhile): such an executable must not be written.

    JAX's cache does not keep what this compiles (the caller's store does): a program in JAX's cache but
    not in the store would never be written to the store, every later process tracing and lowering it
    again to load it from JAX's cache."""
    listen()
    before = _hits[0]
    with _jax_cache_writes_off():
        compiled = lowered.compile()
    return compiled, _hits[0] == before


def _jax_cache_writes_off():
    """A context in which JAX's persistent cache writes nothing this thread compiles (it keeps only
    executables whose compile took at least its minimum time); a no-op where JAX has no such setting."""
    try:
        from jax._src import config
        return config.persistent_cache_min_compile_time_secs(float("inf"))
    except Exception:
        return contextlib.nullcontext()


def read(path: str, key: str):
    """``(executable, extra)`` kept at ``path`` under ``key``, loaded; None where there is none, or it is
    torn, stale, of another key, or cannot be loaded here."""
    from jax.experimental import serialize_executable as se
    try:
        with open(path, "rb") as f:
            stored_key, blob, in_tree, out_tree, extra = pickle.load(f)
        if stored_key != key:
            return None
        exe = se.deserialize_and_load(blob, in_tree, out_tree)
    except Exception:
        return None
    try:
        os.utime(path)   # (recently used: the last to go, ``_trim``)
    except OSError:
        pass
    return exe, extra


def write(path: str, key: str, compiled, extra=None) -> bool:
    """Keep ``compiled`` (a ``jax.stages.Compiled`` this process compiled: :func:`compile_fresh`) at
    ``path`` under ``key``, atomically (a reader never sees half an entry). False where it cannot be
    (not serializable here, a read-only folder): a store only saves time."""
    from jax.experimental import serialize_executable as se
    try:
        blob, in_tree, out_tree = se.serialize(compiled)
        data = pickle.dumps((key, blob, in_tree, out_tree, extra))
    except Exception:
        return False
    if not write_file(path, data):
        return False
    _trim(os.path.dirname(path), len(data))
    return True


def write_file(path: str, data: bytes) -> bool:
    """``data`` written to ``path`` atomically (through a temporary file in its folder, created if missing): a
    reader sees the old file or the new one, never half of one. False where it cannot be (a read-only or
    vanished folder)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except BaseException as exc:   # (an interrupt included: no temporary file left behind)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            return False
        raise


# ---------------------------------------------------------------- a bounded folder
# A store's entries in one folder are bounded, least recently used first out (a load renews an entry's
# time), by ``set_compile_cache``'s ``max_bytes`` (JAX's own entries are bounded by it apart), or
# DEFAULT_BUDGET where the compile cache is off (a ``DYNAJAX_KERNEL_CACHE`` folder). The folder is counted
# once per process and again only when what this process wrote may have passed the bound.
DEFAULT_BUDGET = 2 ** 30
_SIZES: dict = {}   # folder -> bytes of its entries when last counted, plus what this process wrote since


def _budget() -> int:
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_max_size   # (-1: unbounded)
    return DEFAULT_BUDGET


def _trim(folder: str, added: int) -> None:
    budget = _budget()
    if budget < 0:
        return
    known = _SIZES.get(folder)
    if known is not None and known + added <= budget:
        _SIZES[folder] = known + added
        return
    entries = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith(".xla"):
                    try:
                        st = e.stat()
                    except OSError:   # (another process removed it meanwhile)
                        continue
                    entries.append((st.st_mtime, st.st_size, e.path))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    if total > budget:   # down to 90%, so that the next few writes do not count the folder again
        for _, size, p in sorted(entries):
            if total <= budget * 0.9:
                break
            try:
                os.unlink(p)
                total -= size
            except OSError:
                pass
    _SIZES[folder] = total
