"""Datasets: ``Dataset``, ``IterableDataset``, ``TensorDataset``, ``Subset``, ``ConcatDataset``, ``random_split``."""
from __future__ import annotations

import bisect
import math

from ..._tensor import Tensor


class Dataset:
    """A map-style dataset: implement ``__getitem__`` (and usually ``__len__``)."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is an iterable of samples (implement ``__iter__``)."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")


class TensorDataset(Dataset):
    """Samples are tuples of the ``i``-th rows of the given tensors."""

    def __init__(self, *tensors: Tensor) -> None:
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset: Dataset, indices) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Several datasets one after the other."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            # an iterable one has no index to look up (PyTorch's ChainDataset chains those)
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes, s = [], 0
        for d in self.datasets:
            s += len(d)
            self.cumulative_sizes.append(s)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[d][idx - (self.cumulative_sizes[d - 1] if d else 0)]


def random_split(dataset: Dataset, lengths, generator=None) -> list:
    """Split into non-overlapping random Subsets of the given lengths (or fractions summing to 1)."""
    from ...ops.creation import randperm
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, f in enumerate(lengths):
            if f < 0 or f > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = randperm(n, generator=generator).tolist()
    out, start = [], 0
    for size in lengths:
        out.append(Subset(dataset, perm[start:start + size]))
        start += size
    return out
