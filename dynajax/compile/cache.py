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
"""
from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

__all__ = ["set_compile_cache", "compile_cache_dir", "loads"]

ENV = "DYNAJAX_COMPILE_CACHE"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_loads = [0]          # executables loaded from the cache in this process (jax.monitoring hits)
_listening = [False]


def set_compile_cache(path: str | os.PathLike | None, *, max_bytes: int = 2 ** 30) -> None:
    """Keep compiled executables in the folder ``path`` (created if missing) and load them from there
    whenever a later compile, in this or another process, meets the same program; ``None`` turns the
    cache off. ``max_bytes`` bounds the folder (least recently used entries go first; -1: unbounded).

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
    if not _listening[0]:
        jax.monitoring.register_event_listener(_count)
        _listening[0] = True


def compile_cache_dir() -> str | None:
    """The folder :func:`set_compile_cache` set, or None when the cache is off."""
    return jax.config.jax_compilation_cache_dir


def loads() -> int:
    """How many executables this process has loaded from the cache so far."""
    return _loads[0]


def _count(event: str, **_) -> None:
    if event == _HIT_EVENT:
        _loads[0] += 1


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
