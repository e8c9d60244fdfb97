"""``DataLoader``: batches from a dataset with samplers, shuffling from the seeded
generator, ``drop_last`` and PyTorch's default collation."""
from __future__ import annotations

import collections.abc
import copy
import numbers

import numpy as np

from ..._tensor import Tensor
from .dataset import IterableDataset


# ---------------------------------------------------------------- samplers
class Sampler:
    """Yields dataset indices."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len-1."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation (or draws with ``replacement``) from the seeded generator."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None) -> None:
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        n = self.num_samples
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={n}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        from ...ops.creation import randint, randperm
        n = len(self.data_source)
        if self.replacement:
            return iter(randint(0, n, (self.num_samples,), generator=self.generator).tolist())
        idx = []
        while len(idx) < self.num_samples:
            idx += randperm(n, generator=self.generator).tolist()
        return iter(idx[:self.num_samples])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in random order."""

    def __init__(self, indices, generator=None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self):
        from ...ops.creation import randperm
        return iter([self.indices[i] for i in randperm(len(self.indices), generator=self.generator).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """Indices drawn with probability proportional to ``weights`` (with or without replacement)."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.tolist() if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        # PyTorch checks the weights when drawing (torch.multinomial); checked here once, as they are fixed
        if not np.isfinite(w).all():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
        if (w < 0).any():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
        if w.sum() <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement and num_samples > len(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        import jax
        from ... import random
        idx = jax.random.choice(random.next_key(self.generator), len(self.weights), (self.num_samples,),
                                replace=self.replacement, p=self.weights / self.weights.sum())
        return iter(np.asarray(idx).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ---------------------------------------------------------------- collation
def default_convert(data):
    """numpy arrays become tensors, recursively through dicts and sequences."""
    from ...ops.creation import tensor
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind in "biufc":
        return tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]     # a list, as PyTorch's
    if isinstance(data, list):
        return _same_sequence(data, [default_convert(d) for d in data])
    return data


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


def default_collate(batch):
    """Stack a list of samples into a batch: tensors/arrays stacked, numbers to tensors, dicts and
    tuples collated field by field (tuples become lists, as in PyTorch)."""
    from ...ops.creation import tensor
    from ...ops.join import stack
    from ... import float64
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind not in "biufc":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                            f"found {elem.dtype}")
        return tensor(np.stack(list(batch)))
    if isinstance(elem, np.generic):
        return tensor(np.array(list(batch)))
    if isinstance(elem, float):
        return tensor(list(batch), dtype=float64)
    if isinstance(elem, (bool, int)):
        return tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _same_mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if any(len(e) != n for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [default_collate(s) for s in zip(*batch)]
        return cols if isinstance(elem, tuple) else _same_sequence(elem, cols)
    if isinstance(elem, numbers.Number):
        return tensor(list(batch))
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(elem)}")


# ---------------------------------------------------------------- loader
class DataLoader:
    """Iterate over ``dataset`` in batches.

    >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, drop_last=True)
    >>> for xb, yb in loader: ...
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True) -> None:
        # worker processes are not started (batches are made in this process), but the options are
        # checked as PyTorch checks them, so a setting PyTorch rejects fails here too
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. Let num_workers "
                             "> 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
            self.batch_size, self.drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.collate_fn = collate_fn or (default_collate if (batch_size is not None or batch_sampler is not None)
                                         else default_convert)

    def _fetch(self, indices):
        ds = self.dataset
        if hasattr(ds, "__getitems__"):
            return ds.__getitems__(indices)
        return [ds[i] for i in indices]

    def __iter__(self):
        if self._iterable:
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield self.collate_fn(self._fetch(indices))

    def _iter_iterable(self):
        if self.batch_size is None:
            for s in self.dataset:
                yield self.collate_fn(s)
            return
        batch = []
        for s in self.dataset:
            batch.append(s)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)
