"""An eager value kept padded along its leading dim until something needs it exact.

An eager op on a leading size ``n`` that is not a bucket size runs on the bucket's kernel (``_kernel_cache``).
Slicing that kernel's result back to ``n`` rows is a host copy, and a host copy waits for the kernel: each
op would wait for the one before it, and the next op's Python could no longer run while XLA computes. So a
bucketed op's result stays padded, as :class:`Rows`: the bucket kernel's array and the true row count. The
next bucketed op takes the padded array as it is (or with its pad rows zeroed, by a small kernel, where the
op sums over the rows), with no wait. Anything else reading the tensor (``Tensor._value``) gets the exact
array, sliced on the host once and kept.

A ``Rows`` answers what dispatch and autograd ask of a value before computing with it (``shape``,
``dtype``, ``ndim``, ``size``, ``weak_type``, its device) as the exact array would.
"""
from __future__ import annotations

import numpy as np

from ._device import host_put
from ._dtype import x64 as _x64
from ._sizes import Shaped

__all__ = ["Rows", "exact"]


class Rows(Shaped):
    """``full``'s first ``n`` rows, as an eager value; the rows past ``n`` hold whatever the kernel made of
    the pad rows it was given (never read as values)."""

    __slots__ = ("_exact", "dtype", "full", "masked", "n", "shape")

    def __init__(self, full, n: int):
        self.full = full
        self.n = n
        self.shape = (n, *full.shape[1:])
        self.dtype = full.dtype
        self._exact = None
        self.masked = None   # (fill, ``full`` with its pad rows set to fill): kept for the next op summing rows

    @property
    def weak_type(self) -> bool:
        return getattr(self.full, "weak_type", False)

    @property
    def sharding(self):
        return self.full.sharding

    def devices(self):
        return self.full.devices()

    def exact(self):
        """The value: the first ``n`` rows, sliced on the host (the first time; kept after)."""
        v = self._exact
        if v is None:
            v = self._exact = _slice(self.full, self.n)
        return v

    def __repr__(self) -> str:
        return f"Rows({self.n} of {self.full.shape[0]} rows, {self.shape[1:]}, {self.dtype})"


@_x64.wrap   # (64-bit values keep their type wherever the read happens)
def _slice(full, n: int):
    return host_put(np.asarray(full)[:n])


def exact(v):
    """``v``, or the exact value of a :class:`Rows`."""
    return v.exact() if type(v) is Rows else v
