"""Variable-length sequences: ``pad_sequence``, ``PackedSequence`` with ``pack_padded_sequence``,
``pad_packed_sequence`` and ``pack_sequence`` (PyTorch's packed layout), accepted by RNN/LSTM/GRU."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..._tensor import Tensor

__all__ = ["pad_sequence", "unpad_sequence", "PackedSequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence"]


class PackedSequence(NamedTuple):
    """Time-major packed batch: ``data`` holds step 0 of every sequence, then step 1, ... (longest first)."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        return self._replace(data=self.data.to(*args, **kwargs))


def _lengths_list(lengths) -> list:
    return [int(v) for v in (lengths.tolist() if isinstance(lengths, Tensor) else np.asarray(lengths).tolist())]


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded (T, B, *) batch (or (B, T, *)) with per-sequence ``lengths``."""
    from ...ops.creation import tensor
    from ...ops.join import cat
    lens = _lengths_list(lengths)
    if enforce_sorted:
        if any(a < b for a, b in zip(lens, lens[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
        order = list(range(len(lens)))
    else:
        order = sorted(range(len(lens)), key=lambda i: -lens[i])
    if min(lens) <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    x = input.transpose(0, 1) if batch_first else input
    if max(lens) > x.shape[0]:
        raise RuntimeError(f"Expected lengths to be at most the sequence length {x.shape[0]}, got {max(lens)}")
    sorted_lens = [lens[i] for i in order]
    sizes = [sum(1 for n in sorted_lens if n > t) for t in range(sorted_lens[0])]
    idx = tensor(order)
    xs = x.index_select(1, idx)
    data = cat([xs[t, :b] for t, b in enumerate(sizes)], 0)
    if enforce_sorted:
        return PackedSequence(data, tensor(sizes), None, None)
    inv = [0] * len(order)
    for pos, i in enumerate(order):
        inv[i] = pos
    return PackedSequence(data, tensor(sizes), idx, tensor(inv))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length=None):
    """Inverse of :func:`pack_padded_sequence`: returns ``(padded, lengths)``."""
    from ...ops.creation import tensor
    from ...ops.join import stack
    from .. import functional as F
    sizes = _lengths_list(sequence.batch_sizes)
    B, T = sizes[0], len(sizes)
    if total_length is not None:
        if total_length < T:
            raise ValueError(f"Expected total_length to be at least the length of the longest sequence ({T}), "
                             f"got {total_length}")
        T = total_length
    steps, start = [], 0
    trail = [0, 0] * (sequence.data.dim() - 1)
    for b in sizes:
        step = sequence.data[start:start + b]
        steps.append(F.pad(step, trail + [0, B - b], value=padding_value) if b < B else step)
        start += b
    while len(steps) < T:
        steps.append(F.pad(sequence.data[:0], trail + [0, B], value=padding_value))
    out = stack(steps, 0)
    lens = [sum(1 for b in sizes if b > i) for i in range(B)]
    if sequence.unsorted_indices is not None:
        out = out.index_select(1, sequence.unsorted_indices)
        order = _lengths_list(sequence.unsorted_indices)
        lens = [lens[i] for i in order]
    return (out.transpose(0, 1) if batch_first else out), tensor(lens)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) tensors."""
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences],
                                enforce_sorted=enforce_sorted)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shape (L_i, *) into (max L, B, *) (or (B, max L, *)), padding with ``padding_value``."""
    from .. import functional as F
    from ...ops.join import stack
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    seqs = list(sequences)
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    n = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        extra = n - s.shape[0]
        pads = [0, 0] * (s.dim() - 1) + ([0, extra] if padding_side == "right" else [extra, 0])
        padded.append(F.pad(s, pads, value=padding_value) if extra else s)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """Split a padded batch back into its sequences."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(lengths)]
