"""Bounded least-recently-used caches over ``collections.OrderedDict`` (kernels, executables, kept arrays)."""
from __future__ import annotations


def lru_put(cache, key, value, size: int) -> None:
    """Insert into an LRU ``OrderedDict``, dropping the least recently used entry past ``size``."""
    cache[key] = value
    if len(cache) > size:
        cache.popitem(last=False)


def lru_get(cache, key, size: int, make):
    """``cache[key]`` (now the most recently used), or ``make()`` inserted with :func:`lru_put`."""
    value = cache.get(key)
    if value is None:
        value = make()
        lru_put(cache, key, value, size)
    else:
        cache.move_to_end(key)
    return value
