"""Tensor sizes checked before JAX sees them, with PyTorch's errors.

XLA aborts the whole process (a C++ exception no ``try`` can catch) on a shape whose byte extent overflows
int64, and JAX happily hands out an array larger than the machine's memory whose first real use kills the
process. So every creation op sizes its tensor here first: :func:`parse` (integers only, as PyTorch's
argument parser), :func:`new_shape` (no negative size) and :func:`check_new` (the storage fits in int64
bytes and in the device's memory). A broadcast view past the device's memory (``x.expand(10**12)``, free
in PyTorch) is kept unmade as a :class:`Pending` value (see ``ops.shape.expand``).
"""
from __future__ import annotations

import math
import operator
import os

import jax
import numpy as np

from . import _device

INT64_MAX = 2**63 - 1
CHECKED_FROM = 1 << 30   # bytes: smaller tensors skip the memory check (no device look-up on the hot path)


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError``: a tensor larger than its accelerator's memory (on the CPU PyTorch raises a
    plain ``RuntimeError``, and so does dynajax)."""


def parse(size: tuple, name: str, what: str = "size") -> tuple:
    """The sizes of ``name(2, 3)`` / ``name((2, 3))`` / ``name([2, 3])`` as Python ints. PyTorch's TypeError
    for an element that is not an integer (a float, a bool, a float tensor) or does not fit in int64."""
    alone = len(size) == 1   # (PyTorch takes a bool for a size, as 1, except as the only argument)
    if alone and isinstance(size[0], (tuple, list)):
        size, alone = tuple(size[0]), False
    out = []
    for pos, s in enumerate(size, 1):
        if type(s) is int and -INT64_MAX - 1 <= s <= INT64_MAX:   # (the usual case, first)
            out.append(s)
            continue
        try:
            if alone and isinstance(s, (bool, np.bool_)):
                raise TypeError
            v = operator.index(s)
        except TypeError:
            raise TypeError(f"{name}(): argument '{what}' must be tuple of ints, but found element of type "
                            f"{type(s).__name__} at pos {pos}") from None
        if not -INT64_MAX - 1 <= v <= INT64_MAX:
            raise TypeError(f"{name}(): argument '{what}' failed to unpack the object at pos {pos} with error "
                            "\"Overflow when unpacking long long\"")
        out.append(v)
    return tuple(out)


def new_shape(size: tuple, name: str) -> tuple:
    """:func:`parse`, and PyTorch's RuntimeError for a negative size."""
    shape = parse(size, name)
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    return shape


def _prefix_overflows(sizes, scale: int = 1, limit: int = INT64_MAX) -> bool:
    """Whether a running product of ``sizes`` (left to right) times ``scale`` passes ``limit`` before a 0 ends it."""
    n = scale
    for s in sizes:
        n *= s
        if n > limit:
            return True
    return False


def storage_bytes(shape: tuple, itemsize: int) -> int:
    """Bytes of a contiguous tensor of ``shape``; PyTorch's RuntimeError where they overflow int64 (or the element
    count, multiplied left to right, overflows uint64 first)."""
    nbytes = math.prod(shape) * itemsize
    if nbytes > INT64_MAX or (nbytes == 0 and _prefix_overflows(shape, limit=2**64 - 1)):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}")
    return nbytes


def representable(shape: tuple, itemsize: int) -> bool:
    """Whether XLA accepts an array of ``shape``: it multiplies the leading sizes and the element size in int64
    (and aborts the process on an overflow), even for a shape holding no element (``(2**62, 0)``, float32)."""
    return not _prefix_overflows(shape, itemsize)


def check_new(shape: tuple, dtype, device=None) -> None:
    """Raise PyTorch's error where a new tensor of ``shape`` and numpy ``dtype`` on ``device`` (None: the default
    one) cannot be made: its byte count overflows, it is larger than the device's memory (RuntimeError on the CPU,
    :class:`OutOfMemoryError` on an accelerator), or (no elements) its strides overflow or XLA cannot hold it."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = storage_bytes(shape, itemsize)
    if nbytes > CHECKED_FROM:
        err = memory_error(nbytes, _jax_device(device))
        if err is not None:
            raise err
    if nbytes == 0 and shape:
        if _prefix_overflows([max(s, 1) for s in reversed(shape[1:])]):
            raise RuntimeError("Stride calculation overflowed")
        check_representable(shape, dtype)


def check_representable(shape: tuple, dtype) -> None:
    """A RuntimeError where XLA cannot hold an array of ``shape`` and ``dtype`` (:func:`representable`), which
    would abort the process."""
    if not representable(shape, np.dtype(dtype).itemsize):
        raise RuntimeError(f"dynajax cannot make a tensor of sizes {list(shape)} and dtype {np.dtype(dtype)}: "
                           "XLA multiplies its leading sizes by the element size in int64, which overflows "
                           "here although the tensor has no elements")


def numel(shape: tuple) -> int:
    """The element count of a view of ``shape``; PyTorch's RuntimeError where it overflows int64."""
    if _prefix_overflows(shape):
        raise RuntimeError("numel: integer multiplication overflow")
    return math.prod(shape)


# ---------------------------------------------------------------- memory
_LIMITS: dict = {}   # jax.Device -> its memory in bytes (None: unknown)


def _jax_device(device):
    """The jax.Device a tensor made with ``device=`` lands on (None where that device does not exist: the
    creation op then raises its own error)."""
    try:
        return _device.default_jax_device() if device is None else _device.device(device).jax_device()
    except Exception:
        return None


def memory_limit(jdev) -> int | None:
    """The bytes device ``jdev`` can hold at most: the host's physical memory for the CPU, the allocator's
    ``bytes_limit`` for an accelerator; None where unknown."""
    if jdev is None:
        return None
    if jdev not in _LIMITS:
        limit = None
        try:
            if jdev.platform == "cpu":
                limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            else:
                limit = (jdev.memory_stats() or {}).get("bytes_limit")
        except (ValueError, OSError, AttributeError, RuntimeError, jax.errors.JaxRuntimeError):
            limit = None
        _LIMITS[jdev] = int(limit) if limit and limit > 0 else None
    return _LIMITS[jdev]


def memory_error(nbytes: int, jdev) -> RuntimeError | None:
    """PyTorch's allocator error for ``nbytes`` on device ``jdev``, or None where they fit (or where its memory
    is unknown)."""
    limit = memory_limit(jdev)
    if limit is None or nbytes <= limit:
        return None
    if jdev.platform == "cpu":
        return RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {nbytes} bytes. "
                            f"Error code 12 (Cannot allocate memory) (this machine has {limit} bytes of memory)")
    kind = "CUDA" if jdev.platform in ("gpu", "cuda") else jdev.platform.upper()
    return OutOfMemoryError(f"{kind} out of memory. Tried to allocate {_human(nbytes)}. {kind} device {jdev.id} "
                            f"has a total capacity of {_human(limit)}.")


def _human(n: int) -> str:
    """Bytes as PyTorch's allocator messages print them."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------- an unmade value
def unmade_view(shape: tuple, value, what: str):
    """For a broadcast view of ``shape`` of the array ``value`` (``what`` names it in errors): None where it can
    be made; a :class:`Pending` where it would not fit its device's memory, or XLA (the int64 byte extent),
    and ``value`` holds real elements (or is itself Pending). A value JAX traces or a compiled step records
    is made inside a program, where XLA may fuse the broadcast away: only a shape XLA cannot hold raises."""
    numel(shape)
    dtype = np.dtype(value.dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    fits = representable(shape, dtype.itemsize)
    if nbytes <= CHECKED_FROM and fits:
        return None
    if type(value) is Pending:
        jdev = value.device
    elif isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        jdev = next(iter(value.devices()))
    else:
        if not fits:
            storage_bytes(shape, dtype.itemsize)
            check_representable(shape, dtype)
        return None
    try:
        storage_bytes(shape, dtype.itemsize)
        check_representable(shape, dtype)
        err = memory_error(nbytes, jdev)
    except RuntimeError as e:
        err = e
    return None if err is None else Pending(shape, dtype, jdev, err, what)


class Shaped:
    """``ndim`` and ``size`` from ``shape``, for the objects standing for an array's value that are not one
    (:class:`Pending`, ``_rows.Rows``)."""

    __slots__ = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Pending(Shaped):
    """The value of a view that cannot be made: a broadcast (``expand``) past its device's memory, or past what
    XLA can represent. Its shape, dtype and device answer; anything that needs its elements -- an op, printing,
    ``numpy()`` -- raises ``error`` there, where PyTorch would allocate."""

    __slots__ = ("shape", "dtype", "device", "error", "what")

    def __init__(self, shape: tuple, dtype, device, error: RuntimeError, what: str) -> None:
        self.shape, self.dtype, self.device, self.error, self.what = tuple(shape), np.dtype(dtype), device, error, what

    def devices(self) -> set:
        return {self.device}

    def fail(self):
        """Raise (a new copy of) ``error``, naming what was left unmade."""
        raise type(self.error)(f"{self.error.args[0]} [dynajax: {self.what} was kept unmade, as a view; "
                               "using its elements needs them all in memory]")

    def __array__(self, dtype=None, copy=None):
        self.fail()

    def __jax_array__(self):
        self.fail()

    def __repr__(self) -> str:
        return f"Pending(shape={self.shape}, dtype={self.dtype})"


# an op's jitted kernel flattens its arguments first: a Pending among them raises its error there
jax.tree_util.register_pytree_node(Pending, lambda p: p.fail(), lambda aux, children: None)
