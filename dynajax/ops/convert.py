"""dtype and device conversion: ``to``, ``float()``/``double()``/..., ``type``, ``clone``."""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .dispatch import Sym
from .._device import device as Device, put
from .._tensor import Tensor, _make, method
from .registry import apply, op

__all__ = ["clone"]


@op("to_dtype", backward_name="ToCopyBackward0")
def _to_dtype(x, *, dtype):
    return x.astype(dtype)


_to_dtype.defvjp(lambda g, out, x, **_: (g,))


@op("clone")
def _clone(x):
    return x + 0 if x.dtype != np.bool_ else x


_clone.defvjp(lambda g, out, x: (g,))


@method()
def clone(self: Tensor, *, memory_format=None) -> Tensor:
    """A copy that is part of the graph (gradients flow back to ``self``)."""
    return apply(_clone, self)


def cast(x: Tensor, np_dtype) -> Tensor:
    """``x`` converted to ``np_dtype``; ``x`` itself when it already has it."""
    if x._value.dtype == np_dtype:
        return x
    return apply(_to_dtype, x, dtype=np.dtype(np_dtype))


def _parse_to(args, kwargs):
    dtype = kwargs.pop("dtype", None)
    dev = kwargs.pop("device", None)
    for a in args:
        if isinstance(a, Tensor):
            dtype, dev = a.dtype, a.device
        elif isinstance(a, (str, Device)) and not (isinstance(a, str) and a.removeprefix("torch.") in _dtype._BY_NAME
                                                   and ":" not in a and a not in ("cpu", "cuda", "tpu", "mps")):
            dev = a
        elif isinstance(a, int) and not isinstance(a, bool):
            dev = Device(a)
        else:
            dtype = a
    return dtype, dev


@method()
def to(self: Tensor, *args, non_blocking: bool = False, copy: bool = False, memory_format=None,
       **kwargs) -> Tensor:
    """Convert dtype and/or device: ``x.to(dynajax.float64)``, ``x.to("cuda")``, ``x.to(other)``; PyTorch's
    positional forms ``to(device, dtype, non_blocking, copy)``, ``to(dtype, non_blocking, copy)`` and
    ``to(tensor, non_blocking, copy)`` too."""
    n = len(args)
    while n and isinstance(args[n - 1], bool):   # the trailing flags: non_blocking, then copy
        n -= 1
    flags, args = args[n:], args[:n]
    if flags:
        if len(flags) > 2 or not args or len(args) > 2:
            raise TypeError(f"to() takes from 0 to 4 positional arguments but {len(args) + len(flags)} were given")
        if len(flags) == 2:
            if "copy" in kwargs or copy:
                raise TypeError("to() got multiple values for argument 'copy'")
            copy = flags[1]
    dtype, dev = _parse_to(args, kwargs)
    if flags and dtype is None:   # (a device alone takes no flags: they follow a dtype or a tensor)
        raise TypeError("to() received an invalid combination of arguments: a device may be followed by a dtype, "
                        "then non_blocking and copy")
    r = self
    if dtype is not None:
        r = cast(r, _dtype.to_np(dtype))
    if dev is not None:
        d = Device(dev)
        if d != self.device:
            v = r._value
            if isinstance(v, Sym):   # computed by a step being recorded, on its device: read it there (a graph
                v = v.__jax_array__()   # break, as ``.item()``) and move it, as eager would
            moved = put(v, d)
            r = _make(moved, r._rg, r.grad_fn, r._out_idx) if r is not self else _make(moved, self._rg)
    if copy and r is self:
        r = clone(self)
    return r


def _converter(name: str, d: _dtype.dtype):
    def convert(self: Tensor, memory_format=None) -> Tensor:
        return cast(self, d.np)
    convert.__name__ = name
    convert.__doc__ = f"``self.to({d!r})``"
    method(name)(convert)


for _n, _d in (("float", _dtype.float32), ("double", _dtype.float64), ("half", _dtype.float16),
               ("bfloat16", _dtype.bfloat16), ("long", _dtype.int64), ("int", _dtype.int32),
               ("short", _dtype.int16), ("char", _dtype.int8), ("byte", _dtype.uint8), ("bool", _dtype.bool_),
               ("cfloat", _dtype.complex64), ("cdouble", _dtype.complex128)):
    _converter(_n, _d)

_LEGACY = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
           "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
           "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


@method()
def type(self: Tensor, dtype=None, non_blocking: bool = False):
    """With no argument the legacy type name (``'torch.FloatTensor'``); else ``to(dtype)``."""
    if dtype is None:
        return "torch." + _LEGACY.get(self.dtype.name, "Tensor")
    if isinstance(dtype, str):
        inv = {v: k for k, v in _LEGACY.items()}
        name = dtype.split(".")[-1]
        dtype = inv.get(name, name)
    return cast(self, _dtype.to_np(dtype))


@method()
def type_as(self: Tensor, other: Tensor) -> Tensor:
    return cast(self, other._value.dtype)


@method()
def cpu(self: Tensor) -> Tensor:
    return to(self, "cpu")


@method()
def cuda(self: Tensor, device=None, non_blocking: bool = False) -> Tensor:
    return to(self, Device("cuda", device if isinstance(device, int) else None))
