"""Length bucketing for variable-length data: batches of similar lengths, padded to a few sizes, so a
compiled step sees few distinct shapes (see ``dynajax.compile(..., dynamic=...)``)."""
from __future__ import annotations

import numpy as np

from ...compile.bucketing import bucket
from .dataloader import Sampler


class BucketBatchSampler(Sampler):
    """Batches of indices whose ``lengths`` fall in the same bucket (``buckets``: sizes, or an int:
    multiples of it), so padding each batch to its bucket wastes little. Batches of one bucket are
    cut from a shuffled order (``shuffle``) and the batches of all buckets are then shuffled together.
    """

    def __init__(self, lengths, batch_size: int, buckets, shuffle: bool = True, drop_last: bool = False,
                 seed: int | None = None) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.lengths = [int(n) for n in lengths]
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.buckets = buckets if isinstance(buckets, int) else tuple(sorted(buckets))
        self._rng = np.random.default_rng(seed)

    def bucket_of(self, length: int) -> int:
        """The padded size of a sequence of ``length``."""
        return bucket(length, self.buckets)

    def _groups(self) -> dict:
        groups: dict = {}
        order = self._rng.permutation(len(self.lengths)) if self.shuffle else range(len(self.lengths))
        for i in order:
            groups.setdefault(self.bucket_of(self.lengths[i]), []).append(int(i))
        return groups

    def __iter__(self):
        batches = []
        for size in sorted(groups := self._groups()):
            idx = groups[size]
            for s in range(0, len(idx), self.batch_size):
                b = idx[s:s + self.batch_size]
                if len(b) == self.batch_size or not self.drop_last:
                    batches.append(b)
        if self.shuffle:
            batches = [batches[i] for i in self._rng.permutation(len(batches))]
        return iter(batches)

    def __len__(self) -> int:
        counts: dict = {}
        for n in self.lengths:
            b = self.bucket_of(n)
            counts[b] = counts.get(b, 0) + 1
        f = (lambda c: c // self.batch_size) if self.drop_last else (lambda c: -(-c // self.batch_size))
        return sum(f(c) for c in counts.values())


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, multiple_of=None):
    """``nn.utils.rnn.pad_sequence`` padded further, to the next bucket of the longest length
    (``multiple_of``: an int, or a list of bucket sizes)."""
    from ...nn import functional as F
    from ...nn.utils.rnn import pad_sequence as _pad
    out = _pad(sequences, batch_first=batch_first, padding_value=padding_value)
    if multiple_of is None:
        return out
    d = 1 if batch_first else 0
    n = out.shape[d]
    extra = bucket(n, multiple_of if isinstance(multiple_of, int) else tuple(sorted(multiple_of))) - n
    if not extra:
        return out
    pads = [0, 0] * (out.dim() - 1 - d) + [0, extra]
    return F.pad(out, pads, value=padding_value)
