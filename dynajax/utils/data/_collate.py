"""Collation (``default_collate``, ``default_convert``) and the form a batch takes to leave a worker process.

A worker process sends numpy data, never tensors: making a dynajax ``Tensor`` there would start JAX in the
worker for nothing. So each collation function has a worker form that builds the same structure with a
``_Leaf`` wherever the in-process form makes a tensor; the main process turns leaves into tensors
(``from_worker``). Tensors that a dataset or a custom ``collate_fn`` returns in a worker travel as leaves too.
"""
from __future__ import annotations

import collections.abc
import copy
import numbers

import numpy as np

from ... import _dtype
from ..._tensor import Tensor
from ...ops.creation import tensor
from ...ops.join import stack

_COLLATABLE = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}")


class _Leaf:
    """A tensor for the main process to make: ``tensor(data, dtype=<dynajax dtype named dtype>)``."""

    __slots__ = ("data", "dtype")

    def __init__(self, data, dtype: str | None = None) -> None:
        self.data, self.dtype = data, dtype

    def __reduce__(self):
        return _Leaf, (self.data, self.dtype)

    def make(self) -> Tensor:
        return tensor(self.data, dtype=None if self.dtype is None else getattr(_dtype, self.dtype))


def _host(t: Tensor) -> np.ndarray:
    """A tensor's values as a numpy array (gradient tracking dropped, as when PyTorch pickles a batch)."""
    return t.numpy(force=True)


def _new_tensor(data, dtype: str | None, in_worker: bool):
    """A tensor of ``data`` here, or in a worker the leaf that makes it in the main process."""
    return _Leaf(data, dtype) if in_worker else _Leaf(data, dtype).make()


def _same_mapping(like, items: dict):
    """``items`` in a mapping of ``like``'s type, as PyTorch's collation makes it: a copy of a mutable
    one updated (so a ``defaultdict`` keeps its factory), else the type built from a dict; a plain dict
    when the type cannot be made so."""
    try:
        if isinstance(like, collections.abc.MutableMapping):
            clone = copy.copy(like)
            clone.update(items)
            return clone
        return type(like)(items)
    except TypeError:
        return items


def _same_sequence(like, items: list):
    """``items`` in a sequence of ``like``'s type (a copy of a mutable one, assigned to), else a list."""
    try:
        if isinstance(like, collections.abc.MutableSequence):
            clone = copy.copy(like)
            for i, v in enumerate(items):
                clone[i] = v
            return clone
        return type(like)(items)
    except TypeError:
        return items


def collate(batch, in_worker: bool):
    """``default_collate``'s work; ``in_worker``: leaves instead of tensors (see the module's docstring)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        if in_worker:
            return _Leaf(np.stack([_host(t) for t in batch]))
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind not in "biufc":
            raise TypeError(_COLLATABLE.format(elem.dtype))
        return _new_tensor(np.stack(list(batch)), None, in_worker)
    if isinstance(elem, np.generic):
        return _new_tensor(np.array(list(batch)), None, in_worker)
    if isinstance(elem, float):
        return _new_tensor(list(batch), "float64", in_worker)
    if isinstance(elem, (bool, int)):
        return _new_tensor(list(batch), None, in_worker)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _same_mapping(elem, {k: collate([d[k] for d in batch], in_worker) for k in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(collate(s, in_worker) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if any(len(e) != n for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [collate(s, in_worker) for s in zip(*batch)]
        return cols if isinstance(elem, tuple) else _same_sequence(elem, cols)
    if isinstance(elem, numbers.Number):
        return _new_tensor(list(batch), None, in_worker)
    raise TypeError(_COLLATABLE.format(type(elem)))


def convert(data, in_worker: bool):
    """``default_convert``'s work; ``in_worker``: leaves instead of tensors."""
    if isinstance(data, Tensor):
        return _Leaf(_host(data)) if in_worker else data
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind in "biufc":
        return _new_tensor(data, None, in_worker)
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: convert(v, in_worker) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(convert(d, in_worker) for d in data))
    if isinstance(data, tuple):
        return [convert(d, in_worker) for d in data]     # a list, as PyTorch's
    if isinstance(data, list):
        return _same_sequence(data, [convert(d, in_worker) for d in data])
    return data


def default_collate(batch):
    """Stack a list of samples into a batch: tensors/arrays stacked, numbers to tensors, dicts and
    tuples collated field by field (tuples become lists, as in PyTorch)."""
    return collate(batch, in_worker=False)


def default_convert(data):
    """numpy arrays become tensors, recursively through dicts and sequences."""
    return convert(data, in_worker=False)


def _rebuild(obj, fn):
    """``obj`` with ``fn`` applied to the items of its (nested) dicts, lists and tuples; containers whose
    items all come back unchanged are returned as they are."""
    if isinstance(obj, collections.abc.Mapping):
        items = {k: fn(v) for k, v in obj.items()}
        same = all(items[k] is v for k, v in obj.items())
        return obj if same else _same_mapping(obj, items)
    if isinstance(obj, (list, tuple)):
        items = [fn(v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        if isinstance(obj, tuple):
            return type(obj)(*items) if hasattr(obj, "_fields") else _same_sequence(obj, items)
        return _same_sequence(obj, items)
    return obj


def to_worker_output(obj):
    """What a worker sends for a custom ``collate_fn``'s result: its tensors as leaves, the rest as is."""
    if isinstance(obj, Tensor):
        return _Leaf(_host(obj))
    return _rebuild(obj, to_worker_output)


def from_worker(obj):
    """A worker's batch in the main process: its leaves made tensors."""
    if isinstance(obj, _Leaf):
        return obj.make()
    return _rebuild(obj, from_worker)


def for_worker(collate_fn):
    """The function a worker runs in place of ``collate_fn``: the worker form of the default ones, else
    ``collate_fn`` with its tensors turned into leaves."""
    if collate_fn is default_collate:
        return _worker_collate
    if collate_fn is default_convert:
        return _worker_convert
    return lambda batch: to_worker_output(collate_fn(batch))


def _worker_collate(batch):
    return collate(batch, in_worker=True)


def _worker_convert(data):
    return convert(data, in_worker=True)
