"""PyTorch's legacy tensor types: ``FloatTensor``, ``LongTensor``, ... (``torch.FloatTensor(2, 3)``,
``torch.LongTensor([1, 2])``, ``isinstance(t, torch.FloatTensor)``).

They are not classes of tensors (PyTorch's are not subclasses of ``Tensor`` either): calling one makes a
``Tensor`` of its dtype, and ``isinstance`` asks whether a tensor has that dtype and lives on the CPU.
``Tensor.type()`` gives their names (``'torch.FloatTensor'``)."""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._tensor import Size, Tensor
from .ops.convert import _LEGACY
from .ops.creation import tensor, zeros

__all__ = [name for name in _LEGACY.values()]


class tensortype(type):
    """The metaclass of the legacy types: ``isinstance`` by dtype, a call makes a tensor."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls.__name__}'>"

    def __call__(cls, *args, device=None, **kwargs) -> Tensor:
        if kwargs:
            raise TypeError(f"new() received an invalid combination of arguments - got unexpected keyword "
                            f"argument(s) {', '.join(kwargs)} (legacy constructor torch.{cls.__name__})")
        if not args:
            return zeros(0, dtype=cls.dtype, device=device)
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args) or (
                len(args) == 1 and isinstance(args[0], Size)):
            return zeros(*args, dtype=cls.dtype, device=device)   # sizes (JAX has no uninitialised memory)
        if len(args) > 1:
            raise TypeError(f"new(): expected sizes (ints) or one sequence of data, got "
                            f"({', '.join(type(a).__name__ for a in args)}) (legacy constructor torch.{cls.__name__})")
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype is not cls.dtype:
                raise TypeError(f"expected {cls.dtype} (torch.{cls.__name__}), got a tensor of {data.dtype}")
            return data
        if isinstance(data, (bool, int, float, complex, np.generic)):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return tensor(data, dtype=cls.dtype, device=device)


def _make(dtype_name: str, class_name: str):
    return tensortype(class_name, (), {"dtype": getattr(_dtype, dtype_name), "__module__": "dynajax",
                                       "__doc__": f"Legacy constructor of {dtype_name} tensors (torch.{class_name})."})


for _name, _cls in _LEGACY.items():
    globals()[_cls] = _make("bool_" if _name == "bool" else _name, _cls)
del _name, _cls
